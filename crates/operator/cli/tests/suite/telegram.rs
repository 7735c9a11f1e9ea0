//! Telegram channels end to end: a real Gateway with a native node and the mock model, its
//! Telegram channel pointed (`api-base`) at the strict Bot API stand-in of
//! [`crate::suite::telegram_api`], in both of its modes.

use std::time::Duration;
use std::time::Instant;

use crate::suite::channels::assert_nowhere_but_the_gateway;
use crate::suite::channels::model_calls_with;
use crate::suite::support::Dirs;
use crate::suite::support::Gateway;
use crate::suite::support::MockModelSetup;
use crate::suite::support::dirs;
use crate::suite::telegram_api::BotUser;
use crate::suite::telegram_api::ChatKind;
use crate::suite::telegram_api::Person;
use crate::suite::telegram_api::Sent;
use crate::suite::telegram_api::TelegramApi;

/// The bot token: distinctive, so a leak anywhere is found by search.
pub(crate) const TOKEN: &str = "7001:AAH-tgTok3n-Zq8Vw2Lm5Xr9Kc";

/// The webhook's secret token.
const HOOK_SECRET: &str = "tg-hook-S3cr3t-4Yp7Qn";

const WAIT: Duration = Duration::from_secs(60);

pub(crate) fn bot() -> BotUser {
    BotUser {
        id: 7001,
        username: String::from("gate_test_bot"),
        first_name: String::from("Gate"),
    }
}

pub(crate) fn alice() -> Person {
    Person {
        id: 4242,
        first_name: String::from("Alice"),
        username: Some(String::from("alice")),
    }
}

/// Writes the Gateway's config file with one Telegram channel `tg` at `api`, allowing Alice,
/// with `extra` lines in its table.
pub(crate) fn telegram_config(dirs: &Dirs, api: &TelegramApi, extra: &str) -> String {
    let token_file = dirs.base.join("tg-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let secret_file = dirs.base.join("tg-hook-secret");
    std::fs::write(&secret_file, format!("{HOOK_SECRET}\n")).unwrap();
    let config = dirs.base.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[channels]]\nname = \"tg\"\nkind = \"telegram\"\nbot-token-file = {:?}\n\
             api-base = {:?}\nallow-from = [\"4242\"]\n{}",
            token_file.display().to_string(),
            api.url,
            extra.replace(
                "SECRET_FILE",
                &format!("{:?}", secret_file.display().to_string())
            ),
        ),
    )
    .unwrap();
    config.display().to_string()
}

/// Waits until the bot sent `count` messages to `chat`; returns them.
pub(crate) async fn wait_sent(api: &TelegramApi, chat: i64, count: usize) -> Vec<Sent> {
    let deadline = Instant::now() + WAIT;
    loop {
        let sent: Vec<Sent> = api
            .sent()
            .into_iter()
            .filter(|sent| sent.chat_id == chat)
            .collect();
        if sent.len() >= count {
            return sent;
        }
        assert!(
            Instant::now() < deadline,
            "the bot sent {} of {count} messages to {chat}: {sent:?}",
            sent.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// How many times Alice's direct session holds the user message `text`.
async fn asked_in_transcript(gateway: &Gateway, text: &str) -> usize {
    let body = gateway
        .get_json("/v1/sessions/agent:main:tg:direct:4242/transcript")
        .await;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "user" && message["content"] == text)
        .count()
}

/// Waits until the last message the bot sent or edited in `chat` shows `text`; returns all of
/// that chat's.
async fn wait_last_text(api: &TelegramApi, chat: i64, text: &str) -> Vec<Sent> {
    let deadline = Instant::now() + WAIT;
    loop {
        let sent: Vec<Sent> = api
            .sent()
            .into_iter()
            .filter(|sent| sent.chat_id == chat)
            .collect();
        if sent.last().is_some_and(|last| last.text == text) {
            return sent;
        }
        assert!(Instant::now() < deadline, "no {text:?} in {chat}: {sent:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the Gateway polled past update `update_id`.
async fn wait_confirmed(api: &TelegramApi, update_id: i64) {
    let deadline = Instant::now() + WAIT;
    while api.confirmed_offset() <= update_id {
        assert!(
            Instant::now() < deadline,
            "the Gateway never polled past update {update_id}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_polled_telegram_dm_is_answered_once_in_pieces_within_the_limit_and_a_repeat_after_kill_9_admits_nothing()
 {
    let api = TelegramApi::start(TOKEN, bot()).await;
    let dirs = dirs();
    let config = telegram_config(&dirs, &api, "");
    let mut setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let alice = alice();

    // A direct message from an allowed user is answered once, as a reply to it.
    let (_, asked) = api.user_writes(
        4242,
        ChatKind::Private,
        &alice,
        "/say hello there",
        None,
        None,
    );
    let sent = wait_sent(&api, 4242, 1).await;
    assert_eq!(sent[0].method, "sendMessage");
    assert_eq!(sent[0].text, "hello there");
    assert_eq!(sent[0].reply_to, Some(asked));
    assert!(api.typing_actions() >= 1, "the bot never showed typing");

    // A reply of about 10,000 characters, with the first part answered 429: it is waited out,
    // and the parts arrive in order, each within 4,096 UTF-16 units, together the reply.
    api.rate_limit_next("sendMessage", 1, 2);
    let words: Vec<String> = (0..1500).map(|n| format!("word{n}")).collect();
    let long = words.join(" ");
    assert!(long.len() > 10_000);
    api.user_writes(
        4242,
        ChatKind::Private,
        &alice,
        &format!("/say {long}"),
        None,
        None,
    );
    let deadline = Instant::now() + WAIT;
    let parts = loop {
        let parts: Vec<Sent> = api.sent().into_iter().skip(1).collect();
        let received: usize = parts
            .iter()
            .map(|part| part.text.split_whitespace().count())
            .sum();
        if received >= words.len() {
            break parts;
        }
        assert!(
            Instant::now() < deadline,
            "{received} of {} words",
            words.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    assert!(parts.len() >= 3, "{} parts", parts.len());
    for part in &parts {
        assert!(
            part.text.encode_utf16().count() <= 4096,
            "{}",
            part.text.len()
        );
    }
    let joined: Vec<&str> = parts
        .iter()
        .flat_map(|part| part.text.split_whitespace())
        .collect();
    assert_eq!(joined, words.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(api.violations(), Vec::<String>::new());

    // kill -9 of the Gateway after it answered; the same message comes again in a new update
    // (as a redelivery would): after the restart, nothing is admitted or sent again.
    let listen = setup.gateway.url.trim_start_matches("http://").to_owned();
    setup.gateway.process.kill();
    let repeated = api.push_update(serde_json::json!({"message": {
        "message_id": asked, "date": 1,
        "from": {"id": 4242, "is_bot": false, "first_name": "Alice", "username": "alice"},
        "chat": {"id": 4242, "type": "private", "first_name": "Alice"},
        "text": "/say hello there",
        "entities": [{"type": "bot_command", "offset": 0, "length": 4}]}}));
    setup.gateway = Gateway::start_on(
        &listen,
        &setup.path("gateway"),
        &setup.path("logs"),
        &["--config", &config],
    );
    setup.gateway.wait_ready().await;
    wait_confirmed(&api, repeated).await;
    let sent_before = api.sent().len();
    // Another message after it is answered, so the repeated one was surely judged before.
    api.user_writes(4242, ChatKind::Private, &alice, "/say after", None, None);
    let sent = wait_sent(&api, 4242, sent_before + 1).await;
    assert_eq!(sent.len(), sent_before + 1, "{sent:?}");
    assert_eq!(sent[sent_before].text, "after");
    assert_eq!(
        asked_in_transcript(&setup.gateway, "/say hello there").await,
        1
    );

    // The token is in no request body or query, on no Harness file, process or log.
    assert!(!api.request_log().contains(TOKEN));
    assert_nowhere_but_the_gateway(&setup, TOKEN);
    let audit = setup.gateway.get_json("/v1/audit").await.to_string();
    assert!(!audit.contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_webhook_takes_updates_only_with_its_secret_token() {
    let api = TelegramApi::start(TOKEN, bot()).await;
    let dirs = dirs();
    let port = crate::suite::synapse::free_port();
    let hook_url = format!("http://127.0.0.1:{port}/channels/tg/inbound");
    let config = telegram_config(
        &dirs,
        &api,
        &format!(
            "mode = \"webhook\"\nwebhook-url = {hook_url:?}\nwebhook-secret-file = SECRET_FILE\n"
        ),
    );
    let setup =
        MockModelSetup::start_on(dirs, &format!("127.0.0.1:{port}"), &["--config", &config]).await;

    // The Gateway set the webhook with its secret token.
    let deadline = Instant::now() + WAIT;
    while api.webhook().is_none() {
        assert!(Instant::now() < deadline, "the webhook was never set");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        api.webhook(),
        Some((hook_url.clone(), Some(HOOK_SECRET.to_owned())))
    );

    // The Bot API posts the message; it is answered once.
    let (_, asked) = api.user_writes(4242, ChatKind::Private, &alice(), "/say hooked", None, None);
    let sent = wait_sent(&api, 4242, 1).await;
    assert_eq!(sent[0].text, "hooked");
    assert_eq!(sent[0].reply_to, Some(asked));

    // Updates without the secret token, or with another, are refused and admit nothing.
    let update = serde_json::json!({"update_id": 999_999, "message": {
        "message_id": 555, "date": 1,
        "from": {"id": 4242, "is_bot": false, "first_name": "Alice"},
        "chat": {"id": 4242, "type": "private"}, "text": "/say forged"}});
    for secret in [None, Some("wrong-secret"), Some(&HOOK_SECRET[1..])] {
        let mut request = reqwest::Client::new().post(&hook_url).json(&update);
        if let Some(secret) = secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), 401, "{secret:?}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], "CHANNEL_SIGNATURE_INVALID");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(model_calls_with(&setup, "forged").await, 0);
    let audit = setup.gateway.get_json("/v1/audit").await.to_string();
    assert!(audit.contains("CHANNEL_SIGNATURE_INVALID"), "{audit}");
    assert!(!audit.contains(TOKEN) && !audit.contains(HOOK_SECRET));

    // The same update posted again (the Bot API retries until it gets a 2xx) admits nothing.
    let repeat = serde_json::json!({"update_id": 999_998, "message": {
        "message_id": asked, "date": 1,
        "from": {"id": 4242, "is_bot": false, "first_name": "Alice"},
        "chat": {"id": 4242, "type": "private"}, "text": "/say hooked"}});
    let response = reqwest::Client::new()
        .post(&hook_url)
        .header("X-Telegram-Bot-Api-Secret-Token", HOOK_SECRET)
        .json(&repeat)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(api.sent().len(), 1, "{:?}", api.sent());
    assert_eq!(asked_in_transcript(&setup.gateway, "/say hooked").await, 1);
    assert_eq!(api.violations(), Vec::<String>::new());
    assert_nowhere_but_the_gateway(&setup, TOKEN);
    assert_nowhere_but_the_gateway(&setup, HOOK_SECRET);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_forum_topic_streams_its_reply_by_edits_and_files_come_in_by_get_file() {
    let api = TelegramApi::start(TOKEN, bot()).await;
    let dirs = dirs();
    let config = telegram_config(&dirs, &api, "streaming = \"edits\"\ngroups = [\"-1009\"]\n");
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let alice = alice();
    let forum = ChatKind::Supergroup { forum: true };

    // In an allowed forum, a message that does not mention the bot is not answered.
    api.user_writes(-1009, forum, &alice, "/say unaddressed", Some(5), None);
    // One that mentions it, in topic 5, streams its reply into one message of that topic,
    // edited as it grows, the last edit being the whole reply.
    let words = "one two three four five six seven eight";
    api.user_writes(
        -1009,
        forum,
        &alice,
        &format!("@gate_test_bot hi\n/slow 300 {words}"),
        Some(5),
        None,
    );
    let sent = wait_last_text(&api, -1009, words).await;
    let posted: Vec<&Sent> = sent.iter().filter(|s| s.method == "sendMessage").collect();
    assert_eq!(posted.len(), 1, "{sent:?}");
    assert_eq!(posted[0].message_thread_id, Some(5));
    assert!(posted[0].text.ends_with(" …"), "{sent:?}");
    let edits: Vec<&Sent> = sent
        .iter()
        .filter(|s| s.method == "editMessageText")
        .collect();
    assert!(!edits.is_empty(), "{sent:?}");
    assert!(
        edits
            .iter()
            .all(|edit| edit.message_id == posted[0].message_id),
        "{sent:?}"
    );
    let sessions = setup.gateway.get_json("/v1/sessions").await.to_string();
    assert!(
        sessions.contains("agent:main:tg:group:-1009:thread:5"),
        "{sessions}"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(model_calls_with(&setup, "unaddressed").await, 0);

    // A document in a direct message is downloaded with getFile and staged for the turn; one
    // past the Bot API's 20 MB bound is named in the text with the reason.
    api.user_sends_document(
        4242,
        ChatKind::Private,
        &alice,
        crate::suite::telegram_api::Document {
            file_name: "notes.txt",
            mime_type: "text/plain",
            bytes: b"hello from telegram".to_vec(),
            caption: Some("/say filed"),
            thread: None,
        },
    );
    wait_last_text(&api, 4242, "filed").await;
    crate::suite::support::assert_staged(&setup, "notes.txt", b"hello from telegram");
    api.user_sends_huge_document(
        4242,
        ChatKind::Private,
        &alice,
        "huge.iso",
        25 * 1024 * 1024,
    );
    // The mock model echoes what it was asked: the note reached it, and came back.
    let note = "echo: (sent \"huge.iso\")\n\n[The file \"huge.iso\" was not passed on: the Telegram Bot API lets a bot download files of at most 20 MB]";
    wait_last_text(&api, 4242, note).await;
    assert_eq!(api.violations(), Vec::<String>::new());
}

/// The state and error of the channel `tg`.
async fn channel_state(gateway: &Gateway) -> (String, String) {
    let list = gateway.get_json("/v1/channels").await;
    let channel = &list["channels"][0];
    (
        channel["state"].as_str().unwrap_or_default().to_owned(),
        channel["lastError"].to_string(),
    )
}

/// Waits until `tg` is in `state`; returns its error.
async fn wait_state(gateway: &Gateway, state: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let (now, error) = channel_state(gateway).await;
        if now == state {
            return error;
        }
        assert!(Instant::now() < deadline, "{now} {error}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_stranger_is_sent_one_pairing_code_and_a_second_poller_shows_the_channel_degraded()
 {
    let api = TelegramApi::start(TOKEN, bot()).await;
    let dirs = dirs();
    let config = telegram_config(&dirs, &api, "");
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    wait_state(&setup.gateway, "connected").await;

    // A stranger gets one reply with a pairing code; what it writes reaches no model.
    let stranger = Person {
        id: 5151,
        first_name: String::from("Mallory"),
        username: None,
    };
    api.user_writes(
        5151,
        ChatKind::Private,
        &stranger,
        "/say let me in",
        None,
        None,
    );
    let sent = wait_sent(&api, 5151, 1).await;
    let code: String = sent[0]
        .text
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|word| {
            word.len() == 8
                && word
                    .bytes()
                    .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
        })
        .unwrap_or_else(|| panic!("no code in {:?}", sent[0].text))
        .to_owned();
    let pairings = setup.gateway.get_json("/v1/channels/tg/pairings").await;
    assert_eq!(pairings["pairings"][0]["code"], code.as_str());
    assert_eq!(pairings["pairings"][0]["sender"], "5151");
    let (update, _) = api.user_writes(5151, ChatKind::Private, &stranger, "/say again", None, None);
    wait_confirmed(&api, update).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(wait_sent(&api, 5151, 1).await.len(), 1);
    assert_eq!(model_calls_with(&setup, "let me in").await, 0);

    // Another process polling the same bot: the Bot API ends the Gateway's long poll with 409,
    // and the channel shows degraded with the reason until the other poller stops.
    let other = reqwest::Client::new();
    let url = format!("{}/bot{TOKEN}/getUpdates", api.url);
    let poller = tokio::spawn(async move {
        for _ in 0..6 {
            let _ = other
                .post(&url)
                .json(&serde_json::json!({"timeout": 2}))
                .send()
                .await;
        }
    });
    let error = wait_state(&setup.gateway, "degraded").await;
    assert!(
        error.contains("CHANNEL_UNAVAILABLE") && error.contains("409"),
        "{error}"
    );
    assert!(error.contains("another process polls this bot"), "{error}");
    poller.await.unwrap();
    wait_state(&setup.gateway, "connected").await;
    let (_, asked) = api.user_writes(4242, ChatKind::Private, &alice(), "/say back", None, None);
    let sent = wait_sent(&api, 4242, 1).await;
    assert_eq!(
        (sent[0].text.as_str(), sent[0].reply_to),
        ("back", Some(asked))
    );
}
