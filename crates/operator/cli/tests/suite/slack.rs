//! Slack channels end to end: a real Gateway with a native node and the mock model, its Slack
//! channel pointed (`api-base`) at the strict Slack stand-in of [`crate::suite::slack_api`], by
//! Socket Mode and by the Events API.

use std::time::Duration;
use std::time::Instant;

use crate::suite::channels::assert_nowhere_but_the_gateway;
use crate::suite::channels::hmac_sha256;
use crate::suite::channels::model_calls_with;
use crate::suite::slack_api::Posted;
use crate::suite::slack_api::SlackApi;
use crate::suite::slack_api::SlackUser;
use crate::suite::support::Dirs;
use crate::suite::support::Gateway;
use crate::suite::support::MockModelSetup;
use crate::suite::support::dirs;

/// The bot token: distinctive, so a leak anywhere is found by search.
pub(crate) const BOT_TOKEN: &str = "xoxb-7001-slkBot-Tq4Wz8";

/// The app-level token.
pub(crate) const APP_TOKEN: &str = "xapp-1-A01-slkApp-Hn3Rv6";

/// The signing secret.
pub(crate) const SIGNING_SECRET: &str = "slk-signing-5Jd2Lx9Pq";

const WAIT: Duration = Duration::from_secs(60);

pub(crate) fn bot() -> SlackUser {
    SlackUser {
        id: String::from("U0BOT"),
        name: String::from("gatebot"),
    }
}

pub(crate) fn alice() -> SlackUser {
    SlackUser {
        id: String::from("U0ALICE"),
        name: String::from("alice"),
    }
}

/// Writes the Gateway's config file with one Slack channel `team` at `api`, allowing Alice,
/// with `extra` lines in its table.
pub(crate) fn slack_config(dirs: &Dirs, api: &SlackApi, extra: &str) -> String {
    let file = |name: &str, value: &str| {
        let path = dirs.base.join(name);
        std::fs::write(&path, format!("{value}\n")).unwrap();
        format!("{:?}", path.display().to_string())
    };
    let config = dirs.base.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[channels]]\nname = \"team\"\nkind = \"slack\"\nbot-token-file = {}\n\
             api-base = {:?}\nallow-from = [\"U0ALICE\"]\n{}",
            file("slack-bot", BOT_TOKEN),
            api.url,
            extra
                .replace("APP_FILE", &file("slack-app", APP_TOKEN))
                .replace("SIGNING_FILE", &file("slack-signing", SIGNING_SECRET)),
        ),
    )
    .unwrap();
    config.display().to_string()
}

/// Waits until what the bot posted or updated in `channel` satisfies `done`; returns it.
async fn wait_posted(
    api: &SlackApi,
    channel: &str,
    done: impl Fn(&[Posted]) -> bool,
) -> Vec<Posted> {
    let deadline = Instant::now() + WAIT;
    loop {
        let posted: Vec<Posted> = api
            .posted()
            .into_iter()
            .filter(|posted| posted.channel == channel)
            .collect();
        if done(&posted) {
            return posted;
        }
        assert!(Instant::now() < deadline, "in {channel}: {posted:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the stand-in has `open` Socket Mode connections and opened at least `opened`.
async fn wait_sockets(api: &SlackApi, opened: usize, open: usize) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (total, now) = api.socket_connections();
        if total >= opened && now == open {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{total} opened, {now} open; wanted {opened}, {open}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many times `session`'s transcript holds the user message `text`.
async fn asked_in_transcript(gateway: &Gateway, session: &str, text: &str) -> usize {
    let body = gateway
        .get_json(&format!("/v1/sessions/{session}/transcript"))
        .await;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "user" && message["content"] == text)
        .count()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slack_dm_and_a_thread_mention_over_socket_mode_are_answered_once_across_dropped_sockets()
{
    let api = SlackApi::start(BOT_TOKEN, APP_TOKEN, SIGNING_SECRET, bot()).await;
    let alice = alice();
    let eng = api.create_channel("eng", false, &[&alice]);
    let dirs = dirs();
    let config = slack_config(
        &dirs,
        &api,
        &format!("app-token-file = APP_FILE\ngroups = [{eng:?}]\n"),
    );
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    wait_sockets(&api, 1, 1).await;

    // A direct message is answered once, in the conversation.
    let dm = api.open_dm(&alice);
    api.user_writes(&dm, &alice, "/say hello slack", None);
    let posted = wait_posted(&api, &dm, |posted| !posted.is_empty()).await;
    assert_eq!(posted[0].method, "chat.postMessage");
    assert_eq!(posted[0].text, "hello slack");
    assert_eq!(posted[0].thread_ts, None);

    // A reply of about 10,000 characters, its first part answered 429: waited out, and the
    // parts arrive in order, each within Slack's advised 4,000 characters, together the reply.
    api.rate_limit_next("chat.postMessage", 1, 2);
    let words: Vec<String> = (0..1500).map(|n| format!("word{n}")).collect();
    api.user_writes(&dm, &alice, &format!("/say {}", words.join(" ")), None);
    let posted = wait_posted(&api, &dm, |posted| {
        posted
            .iter()
            .skip(1)
            .map(|post| post.text.split_whitespace().count())
            .sum::<usize>()
            >= words.len()
    })
    .await;
    let parts = &posted[1..];
    assert!(parts.len() >= 3, "{} parts", parts.len());
    assert!(parts.iter().all(|part| part.text.chars().count() <= 4000));
    let joined: Vec<&str> = parts
        .iter()
        .flat_map(|part| part.text.split_whitespace())
        .collect();
    assert_eq!(joined, words.iter().map(String::as_str).collect::<Vec<_>>());

    // The socket drops mid-turn: the adapter connects again, and the reply comes once.
    api.user_writes(&dm, &alice, "/slow 300 one two three four", None);
    tokio::time::sleep(Duration::from_millis(300)).await;
    api.drop_sockets();
    wait_sockets(&api, 2, 1).await;
    let posted = wait_posted(&api, &dm, |posted| {
        posted.iter().any(|post| post.text == "one two three four")
    })
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answered = posted
        .iter()
        .filter(|post| post.text == "one two three four")
        .count();
    assert_eq!(answered, 1);
    // Slack asks for a refresh: a new connection, never two at once.
    api.request_refresh();
    wait_sockets(&api, 3, 1).await;

    // In a channel, a message that does not mention the bot is not answered; one in a thread
    // that mentions it (Slack sends it as message and as app_mention) is answered once, in
    // that thread.
    let root = api.user_writes(&eng, &alice, "/say unaddressed", None);
    api.user_writes(
        &eng,
        &alice,
        "<@U0BOT> please\n/say in the thread",
        Some(&root),
    );
    let posted = wait_posted(&api, &eng, |posted| !posted.is_empty()).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let posted_now: Vec<Posted> = api
        .posted()
        .into_iter()
        .filter(|post| post.channel == eng)
        .collect();
    assert_eq!(posted_now, posted, "answered twice");
    assert_eq!(posted[0].text, "in the thread");
    assert_eq!(posted[0].thread_ts.as_deref(), Some(root.as_str()));
    let sessions = setup.gateway.get_json("/v1/sessions").await.to_string();
    assert!(
        sessions.contains(&format!("agent:main:team:group:{eng}:thread:")),
        "{sessions}"
    );
    assert_eq!(model_calls_with(&setup, "unaddressed").await, 0);
    // The agent read the bot's mention by name (users.info).
    assert_eq!(
        asked_in_transcript(
            &setup.gateway,
            &format!("agent:main:team:group:{eng}:thread:{root}"),
            "@gatebot please\n/say in the thread"
        )
        .await,
        1
    );
    assert_eq!(api.violations(), Vec::<String>::new());

    // The tokens travel only in Authorization headers, and are nowhere on the Harness side.
    let log = api.request_log_without_authorization();
    assert!(!log.contains(BOT_TOKEN) && !log.contains(APP_TOKEN));
    assert_nowhere_but_the_gateway(&setup, BOT_TOKEN);
    assert_nowhere_but_the_gateway(&setup, APP_TOKEN);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slack_events_api_request_is_verified_answered_in_time_and_a_retry_admits_nothing() {
    let api = SlackApi::start(BOT_TOKEN, APP_TOKEN, SIGNING_SECRET, bot()).await;
    let dirs = dirs();
    let port = crate::suite::synapse::free_port();
    let hook_url = format!("http://127.0.0.1:{port}/channels/team/inbound");
    let config = slack_config(&dirs, &api, "signing-secret-file = SIGNING_FILE\n");
    let setup =
        MockModelSetup::start_on(dirs, &format!("127.0.0.1:{port}"), &["--config", &config]).await;
    // The Request URL passes Slack's challenge.
    api.use_events_api(&hook_url).await;

    let alice = alice();
    let dm = api.open_dm(&alice);
    api.user_writes(&dm, &alice, "/say evented", None);
    let posted = wait_posted(&api, &dm, |posted| !posted.is_empty()).await;
    assert_eq!(posted[0].text, "evented");
    // Slack retries the event (it saw no answer): nothing new is admitted or posted.
    assert_eq!(api.redeliver_last_event().await, 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.posted().len(), 1, "{:?}", api.posted());
    assert_eq!(
        asked_in_transcript(
            &setup.gateway,
            &format!("agent:main:team:direct:{}", alice.id),
            "/say evented"
        )
        .await,
        1
    );

    // A wrong signature, a stale timestamp, and no signature: 401, nothing admitted, audited.
    let body = serde_json::json!({"type": "event_callback", "event_id": "EvForged",
        "team_id": "T0TEAM", "event": {"type": "message", "channel": dm, "channel_type": "im",
        "user": "U0ALICE", "text": "/say forged", "ts": "1999999999.000100"}})
    .to_string();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let sign = |timestamp: u64, secret: &str| {
        let signed = format!("v0:{timestamp}:{body}");
        format!(
            "v0={}",
            hex::encode(hmac_sha256(secret.as_bytes(), signed.as_bytes()))
        )
    };
    for (timestamp, signature) in [
        (now, Some(sign(now, "not-the-secret"))),
        (now - 400, Some(sign(now - 400, SIGNING_SECRET))),
        (now, None),
    ] {
        let mut request = reqwest::Client::new()
            .post(&hook_url)
            .header("content-type", "application/json")
            .header("x-slack-request-timestamp", timestamp.to_string())
            .body(body.clone());
        if let Some(signature) = &signature {
            request = request.header("x-slack-signature", signature);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{timestamp} {signature:?}");
    }
    // The same body signed right is taken: the check is the signature, not the body.
    let response = reqwest::Client::new()
        .post(&hook_url)
        .header("content-type", "application/json")
        .header("x-slack-request-timestamp", now.to_string())
        .header("x-slack-signature", sign(now, SIGNING_SECRET))
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let posted = wait_posted(&api, &dm, |posted| posted.len() >= 2).await;
    assert_eq!(posted[1].text, "forged");
    let audit = setup.gateway.get_json("/v1/audit").await.to_string();
    assert!(audit.contains("CHANNEL_SIGNATURE_INVALID"), "{audit}");
    assert!(!audit.contains(SIGNING_SECRET) && !audit.contains(BOT_TOKEN));
    assert_eq!(api.violations(), Vec::<String>::new());
    assert_nowhere_but_the_gateway(&setup, SIGNING_SECRET);
    assert_nowhere_but_the_gateway(&setup, BOT_TOKEN);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slack_reply_streams_by_chat_update_and_a_shared_file_is_staged_for_the_turn() {
    let api = SlackApi::start(BOT_TOKEN, APP_TOKEN, SIGNING_SECRET, bot()).await;
    let dirs = dirs();
    let config = slack_config(
        &dirs,
        &api,
        "app-token-file = APP_FILE\nstreaming = \"edits\"\n",
    );
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    wait_sockets(&api, 1, 1).await;
    let alice = alice();
    let dm = api.open_dm(&alice);

    // The reply streams into one message, updated as it grows; the last update is the reply.
    let words = "one two three four five six";
    api.user_writes(&dm, &alice, &format!("/slow 300 {words}"), None);
    let posted = wait_posted(&api, &dm, |posted| {
        posted.last().is_some_and(|last| last.text == words)
    })
    .await;
    let first: Vec<&Posted> = posted
        .iter()
        .filter(|post| post.method == "chat.postMessage")
        .collect();
    assert_eq!(first.len(), 1, "{posted:?}");
    assert!(first[0].text.ends_with(" …"), "{posted:?}");
    assert!(
        posted
            .iter()
            .filter(|post| post.method == "chat.update")
            .all(|post| post.ts == first[0].ts),
        "{posted:?}"
    );
    assert!(posted.len() >= 2, "{posted:?}");

    // A shared file is fetched from its private URL with the bot token and staged.
    api.user_shares_file(
        &dm,
        &alice,
        "/say got the file",
        "notes.txt",
        "text/plain",
        b"hello from slack".to_vec(),
    );
    wait_posted(&api, &dm, |posted| {
        posted
            .last()
            .is_some_and(|last| last.text == "got the file")
    })
    .await;
    crate::suite::support::assert_staged(&setup, "notes.txt", b"hello from slack");
    assert_eq!(api.violations(), Vec::<String>::new());
}
