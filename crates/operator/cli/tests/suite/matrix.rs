//! Matrix channels end to end: a real Synapse homeserver on loopback, a real Gateway with a
//! native node and the mock model, pairing by CLI, groups and mentions, and restarts of the
//! Gateway (SIGKILL) and of the homeserver without a message lost or answered twice.

use std::time::Duration;
use std::time::Instant;

use gatehouse_api::channels::ChannelList;

use crate::suite::support::Gateway;
use crate::suite::support::MockModelSetup;
use crate::suite::support::dirs;
use crate::suite::synapse::MatrixUser;
use crate::suite::synapse::Synapse;

const WAIT: Duration = Duration::from_secs(90);

/// Writes a config file with one Matrix channel for `bot` and returns its path.
pub(crate) fn matrix_config(
    base: &std::path::Path,
    synapse: &Synapse,
    bot: &MatrixUser,
    extra: &str,
) -> String {
    let token_file = base.join("bot-token");
    std::fs::write(&token_file, format!("{}\n", bot.access_token)).unwrap();
    let config = base.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[channels]]\nname = \"team\"\nkind = \"matrix\"\nhomeserver = {:?}\nuser-id = {:?}\n\
             access-token-file = {:?}\n{extra}",
            synapse.url(),
            bot.user_id,
            token_file.display().to_string()
        ),
    )
    .unwrap();
    config.display().to_string()
}

/// Waits until the channel synced once (`connected`), so later messages are new to it.
pub(crate) async fn wait_connected(gateway: &Gateway) {
    let deadline = Instant::now() + WAIT;
    loop {
        let list: ChannelList = gateway.get_typed("/v1/channels").await;
        let state = serde_json::to_value(list.channels[0].state).unwrap();
        if state == "connected" {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the channel is {state}: {:?}\n{}",
            list.channels[0],
            gateway.process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The bot's text messages in `room`, oldest first.
async fn bot_messages(
    synapse: &Synapse,
    reader: &MatrixUser,
    bot: &MatrixUser,
    room: &str,
) -> Vec<String> {
    synapse
        .messages(reader, room)
        .await
        .iter()
        .filter(|event| {
            event["type"] == "m.room.message" && event["sender"] == bot.user_id.as_str()
        })
        .map(|event| {
            event["content"]["body"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// Waits until the bot sent `count` messages in `room` and returns them.
pub(crate) async fn wait_bot_messages(
    synapse: &Synapse,
    reader: &MatrixUser,
    bot: &MatrixUser,
    room: &str,
    count: usize,
) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    loop {
        let messages = bot_messages(synapse, reader, bot, room).await;
        if messages.len() >= count {
            return messages;
        }
        assert!(
            Instant::now() < deadline,
            "the bot sent {} of {count} messages: {messages:?}",
            messages.len()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits until `user`'s membership of `room` is `membership` as `reader` sees it.
pub(crate) async fn wait_membership(
    synapse: &Synapse,
    reader: &MatrixUser,
    room: &str,
    user: &MatrixUser,
    membership: &str,
) {
    synapse
        .wait_for(
            reader,
            room,
            |event| {
                event["type"] == "m.room.member"
                    && event["state_key"] == user.user_id.as_str()
                    && event["content"]["membership"] == membership
            },
            WAIT,
        )
        .await;
}

/// Waits `settle` and checks the bot still sent exactly `count` messages in `room`.
pub(crate) async fn still(
    synapse: &Synapse,
    reader: &MatrixUser,
    bot: &MatrixUser,
    room: &str,
    count: usize,
) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let messages = bot_messages(synapse, reader, bot, room).await;
    assert_eq!(messages.len(), count, "{messages:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_matrix_channel_pairs_strangers_answers_once_and_speaks_in_groups_only_when_mentioned() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let synapse = Synapse::start(&dirs.base.join("synapse"), &logs).await;
    let bot = synapse.register("gatehouse-bot", "bot-password").await;
    let alice = synapse.register("alice", "alice-password").await;
    let bob = synapse.register("bob", "bob-password").await;
    let carol = synapse.register("carol", "carol-password").await;
    synapse.set_display_name(&bot, "Helper").await;
    // Rooms made before the Gateway starts: their invites wait in the first sync.
    let team_room = synapse
        .create_room(&alice, false, &[&bot.user_id, &carol.user_id])
        .await;
    synapse.join(&carol, &team_room).await;
    let other_room = synapse.create_room(&carol, false, &[&bot.user_id]).await;
    let config = matrix_config(
        &dirs.base,
        &synapse,
        &bot,
        &format!(
            "allow-from = [{:?}]\ngroups = [{:?}]\n",
            alice.user_id, team_room
        ),
    );
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let gateway = &setup.gateway;
    wait_connected(gateway).await;

    // The listed room is joined; the other is refused.
    wait_membership(&synapse, &alice, &team_room, &bot, "join").await;
    wait_membership(&synapse, &carol, &other_room, &bot, "leave").await;

    // A stranger's direct chat: one pairing code, nothing reaches the model.
    let bob_dm = synapse.create_room(&bob, true, &[&bot.user_id]).await;
    wait_membership(&synapse, &bob, &bob_dm, &bot, "join").await;
    synapse
        .send_text(&bob, &bob_dm, "/say secret plan", &[])
        .await;
    let replies = wait_bot_messages(&synapse, &bob, &bot, &bob_dm, 1).await;
    let code = replies[0]
        .split(|c: char| !c.is_ascii_alphanumeric())
        .find(|word| {
            word.len() == 8
                && word
                    .bytes()
                    .all(|b| b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789".contains(&b))
        })
        .unwrap_or_else(|| panic!("no code in {replies:?}"))
        .to_owned();
    synapse
        .send_text(&bob, &bob_dm, "/say secret plan again", &[])
        .await;
    // Nor does a file, or a made-up message type, get a stranger any notice.
    for msgtype in ["m.file", "x.made.up"] {
        synapse
            .send_message(
                &bob,
                &bob_dm,
                serde_json::json!({"msgtype": msgtype, "body": "plan.pdf"}),
            )
            .await;
    }
    still(&synapse, &bob, &bot, &bob_dm, 1).await;
    let approved = gateway.operator_cli(&["channels", "approve", "team", &code]);
    assert!(approved.status.success(), "{approved:?}");
    assert_eq!(
        String::from_utf8_lossy(&approved.stdout).trim(),
        format!("approved {}", bob.user_id)
    );
    wait_bot_messages(&synapse, &bob, &bot, &bob_dm, 2).await;
    synapse.send_text(&bob, &bob_dm, "/say hi bob", &[]).await;
    let replies = wait_bot_messages(&synapse, &bob, &bot, &bob_dm, 3).await;
    assert_eq!(replies[2], "hi bob");
    still(&synapse, &bob, &bot, &bob_dm, 3).await;
    assert_eq!(
        crate::suite::channels::model_calls_with(&setup, "secret plan").await,
        0
    );

    // An allowed sender's direct chat is answered at once, with HTML beside the plain body.
    let alice_dm = synapse.create_room(&alice, true, &[&bot.user_id]).await;
    wait_membership(&synapse, &alice, &alice_dm, &bot, "join").await;
    synapse
        .send_text(&alice, &alice_dm, "/say **bold** <b>raw</b>", &[])
        .await;
    wait_bot_messages(&synapse, &alice, &bot, &alice_dm, 1).await;
    let reply = synapse
        .messages(&alice, &alice_dm)
        .await
        .into_iter()
        .rfind(|event| event["sender"] == bot.user_id.as_str() && event["type"] == "m.room.message")
        .unwrap();
    assert_eq!(reply["content"]["body"], "**bold** <b>raw</b>");
    let html = reply["content"]["formatted_body"].as_str().unwrap();
    assert!(
        html.contains("<strong>bold</strong>") && !html.contains("<b>"),
        "{html}"
    );
    // An allowed sender's message the bot cannot read (a file without its address) gets one
    // notice; a bot's notice gets nothing.
    synapse
        .send_message(
            &alice,
            &alice_dm,
            serde_json::json!({"msgtype": "m.file", "body": "report.pdf"}),
        )
        .await;
    synapse
        .send_message(
            &alice,
            &alice_dm,
            serde_json::json!({"msgtype": "m.notice", "body": "/say from a bot"}),
        )
        .await;
    let replies = wait_bot_messages(&synapse, &alice, &bot, &alice_dm, 2).await;
    assert!(replies[1].contains("not passed on"), "{replies:?}");
    still(&synapse, &alice, &bot, &alice_dm, 2).await;

    // A stranger arranges a "direct" room, brings an allowed user in and leaves: the allowed
    // user's messages there are no direct messages, and nothing of theirs is answered there.
    let eve = synapse.register("eve", "eve-password").await;
    let trap = synapse
        .create_room(&eve, true, &[&bot.user_id, &alice.user_id])
        .await;
    wait_membership(&synapse, &eve, &trap, &bot, "join").await;
    synapse.join(&alice, &trap).await;
    synapse.leave(&eve, &trap).await;
    wait_membership(&synapse, &alice, &trap, &eve, "leave").await;
    synapse
        .send_text(&alice, &trap, "/say leaked context", &[&bot.user_id])
        .await;
    still(&synapse, &alice, &bot, &trap, 0).await;
    assert_eq!(
        crate::suite::channels::model_calls_with(&setup, "leaked context").await,
        0
    );

    // The group: nothing without a mention; one reply with one (by id or display name).
    synapse
        .send_text(&carol, &team_room, "/say unmentioned", &[])
        .await;
    synapse
        .send_text(&carol, &team_room, "/say hello room", &[&bot.user_id])
        .await;
    let replies = wait_bot_messages(&synapse, &carol, &bot, &team_room, 1).await;
    assert_eq!(replies, vec!["hello room"]);
    still(&synapse, &carol, &bot, &team_room, 1).await;
    assert_eq!(
        crate::suite::channels::model_calls_with(&setup, "unmentioned").await,
        0
    );

    let sessions: gatehouse_api::sessions::SessionList = gateway.get_typed("/v1/sessions").await;
    let team_session = sessions
        .sessions
        .iter()
        .find(|session| session.room.as_deref() == Some(team_room.as_str()))
        .unwrap_or_else(|| panic!("no session of the team room: {sessions:?}"));
    assert!(
        team_session
            .session_key
            .starts_with("agent:main:team:group:")
    );
    assert_eq!(team_session.channel.as_deref(), Some("team"));

    // The bot's token is nowhere on the Harness side, nor in the audit or the logs.
    let token = bot.access_token.as_str();
    let audit = gateway.get_json("/v1/audit").await.to_string();
    assert!(!audit.contains(token));
    for action in [
        "channel.invite",
        "channel.pairing",
        "channel.pairing.approve",
    ] {
        assert!(audit.contains(&format!("\"{action}\"")), "no {action} row");
    }
    crate::suite::channels::assert_nowhere_but_the_gateway(&setup, token);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_matrix_channel_loses_and_doubles_nothing_across_gateway_and_homeserver_restarts() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let mut synapse = Synapse::start(&dirs.base.join("synapse"), &logs).await;
    let bot = synapse.register("gatehouse-bot", "bot-password").await;
    let alice = synapse.register("alice", "alice-password").await;
    let config = matrix_config(
        &dirs.base,
        &synapse,
        &bot,
        &format!("allow-from = [{:?}]\n", alice.user_id),
    );
    let mut setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    wait_connected(&setup.gateway).await;
    let dm = synapse.create_room(&alice, true, &[&bot.user_id]).await;
    wait_membership(&synapse, &alice, &dm, &bot, "join").await;
    synapse.send_text(&alice, &dm, "/say one", &[]).await;
    assert_eq!(
        wait_bot_messages(&synapse, &alice, &bot, &dm, 1).await,
        vec!["one"]
    );

    // SIGKILL the Gateway; a message sent while it is down is answered once after it restarts.
    let listen = setup.gateway.url.trim_start_matches("http://").to_owned();
    setup.gateway.process.kill();
    synapse.send_text(&alice, &dm, "/say two", &[]).await;
    setup.gateway = Gateway::start_on(
        &listen,
        &setup.path("gateway"),
        &setup.path("logs"),
        &["--config", &config],
    );
    setup.gateway.wait_ready().await;
    assert_eq!(
        wait_bot_messages(&synapse, &alice, &bot, &dm, 2).await,
        vec!["one", "two"]
    );

    // The homeserver restarts under the sync loop: the next message is answered once.
    synapse.restart().await;
    synapse.send_text(&alice, &dm, "/say three", &[]).await;
    assert_eq!(
        wait_bot_messages(&synapse, &alice, &bot, &dm, 3).await,
        vec!["one", "two", "three"]
    );
    still(&synapse, &alice, &bot, &dm, 3).await;
    // Each message is in the session's transcript once: none was admitted twice.
    let sessions: gatehouse_api::sessions::SessionList =
        setup.gateway.get_typed("/v1/sessions").await;
    let session = sessions
        .sessions
        .iter()
        .find(|session| session.peer.as_deref() == Some(alice.user_id.as_str()))
        .unwrap_or_else(|| panic!("no session of alice: {sessions:?}"));
    let transcript: gatehouse_api::sessions::Transcript = setup
        .gateway
        .get_typed(&format!("/v1/sessions/{}/transcript", session.session_key))
        .await;
    let users: Vec<&str> = transcript
        .messages
        .iter()
        .filter(|message| message.role == "user")
        .map(|message| message.content.as_str())
        .collect();
    assert_eq!(users, vec!["/say one", "/say two", "/say three"]);
}

/// The bot's events in `room` that are not edits, and its edits (`m.replace`), oldest first.
async fn bot_events(
    synapse: &Synapse,
    reader: &MatrixUser,
    bot: &MatrixUser,
    room: &str,
) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    synapse
        .messages(reader, room)
        .await
        .into_iter()
        .filter(|event| {
            event["type"] == "m.room.message" && event["sender"] == bot.user_id.as_str()
        })
        .partition(|event| event["content"]["m.relates_to"]["rel_type"] != "m.replace")
}

/// A homeserver with a bot and `alice`, a Gateway whose Matrix channel allows alice (with
/// `extra` lines in its table), and a direct chat alice opened with the bot, joined.
struct DirectChat {
    synapse: Synapse,
    bot: MatrixUser,
    alice: MatrixUser,
    setup: MockModelSetup,
    dm: String,
}

impl DirectChat {
    async fn open(extra: &str) -> DirectChat {
        let dirs = dirs();
        let logs = dirs.base.join("logs");
        let synapse = Synapse::start(&dirs.base.join("synapse"), &logs).await;
        let bot = synapse.register("gatehouse-bot", "bot-password").await;
        let alice = synapse.register("alice", "alice-password").await;
        let config = matrix_config(
            &dirs.base,
            &synapse,
            &bot,
            &format!("allow-from = [{:?}]\n{extra}", alice.user_id),
        );
        let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
        wait_connected(&setup.gateway).await;
        let dm = synapse.create_room(&alice, true, &[&bot.user_id]).await;
        wait_membership(&synapse, &alice, &dm, &bot, "join").await;
        DirectChat {
            synapse,
            bot,
            alice,
            setup,
            dm,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_matrix_channel_streams_a_reply_by_editing_one_message_and_answers_a_thread_in_it() {
    let chat = DirectChat::open("streaming = \"edits\"\n").await;
    let (synapse, bot, alice, dm) = (&chat.synapse, &chat.bot, &chat.alice, &chat.dm);
    let gateway = &chat.setup.gateway;

    // A reply streamed word by word over about 4 s: one message, edited as it grows, and
    // replaced by the whole reply at the end.
    let words = "one two three four five six seven eight nine ten eleven twelve";
    let asked = synapse
        .send_text(alice, dm, &format!("/slow 300 {words}"), &[])
        .await;
    synapse
        .wait_for(
            alice,
            dm,
            |event| {
                event["sender"] == bot.user_id.as_str()
                    && event["content"]["m.new_content"]["body"] == words
            },
            WAIT,
        )
        .await;
    let (messages, edits) = bot_events(synapse, alice, bot, dm).await;
    assert_eq!(messages.len(), 1, "{messages:#?}");
    let streamed = &messages[0];
    let first = streamed["content"]["body"].as_str().unwrap();
    assert!(
        first.ends_with(" …") && words.starts_with(first.trim_end_matches(" …")),
        "{first}"
    );
    assert_eq!(
        streamed["content"]["m.relates_to"]["m.in_reply_to"]["event_id"],
        asked.as_str()
    );
    // At least one edit while it ran, then the final one; every edit replaces that message.
    assert!(edits.len() >= 2, "{edits:#?}");
    assert!(
        edits
            .iter()
            .all(|edit| edit["content"]["m.relates_to"]["event_id"] == streamed["event_id"]),
        "{edits:#?}"
    );
    assert!(
        edits[..edits.len() - 1]
            .iter()
            .any(|edit| edit["content"]["m.new_content"]["body"]
                .as_str()
                .unwrap()
                .ends_with(" …")),
        "{edits:#?}"
    );
    assert_eq!(
        edits.last().unwrap()["content"]["m.new_content"]["body"],
        words
    );

    // A message in a thread is answered in that thread.
    let root = synapse.send_text(alice, dm, "/say root", &[]).await;
    synapse
        .wait_for(
            alice,
            dm,
            |event| {
                event["content"]["m.new_content"]["body"] == "root"
                    || event["content"]["body"] == "root"
            },
            WAIT,
        )
        .await;
    synapse
        .send_message(
            alice,
            dm,
            serde_json::json!({
                "msgtype": "m.text",
                "body": "/say in the thread",
                "m.relates_to": {"rel_type": "m.thread", "event_id": root},
            }),
        )
        .await;
    let threaded = synapse
        .wait_for(
            alice,
            dm,
            |event| {
                event["sender"] == bot.user_id.as_str()
                    && event["content"]["m.relates_to"]["rel_type"] == "m.thread"
            },
            WAIT,
        )
        .await;
    assert_eq!(
        threaded["content"]["m.relates_to"]["event_id"],
        root.as_str(),
        "{threaded:#}"
    );
    let sessions: gatehouse_api::sessions::SessionList = gateway.get_typed("/v1/sessions").await;
    assert!(
        sessions
            .sessions
            .iter()
            .any(|session| session.session_key.contains(":thread:")),
        "{sessions:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_matrix_file_is_downloaded_by_the_gateway_and_staged_for_the_turn() {
    let chat = DirectChat::open("").await;
    let (synapse, bot, alice, dm) = (&chat.synapse, &chat.bot, &chat.alice, &chat.dm);
    let setup = &chat.setup;

    let mxc = synapse
        .upload(alice, "minutes.md", "text/markdown", b"# Minutes\nship it")
        .await;
    synapse
        .send_message(
            alice,
            dm,
            serde_json::json!({"msgtype": "m.file", "body": "/say filed", "filename": "minutes.md",
                "url": mxc, "info": {"mimetype": "text/markdown", "size": 17}}),
        )
        .await;
    let replies = wait_bot_messages(synapse, alice, bot, dm, 1).await;
    assert_eq!(replies[0], "filed");
    // What a retried delivery finds: the transaction ids the bot's token sent, and only those.
    let client = gatehouse_channels::matrix::MatrixClient::new(
        url::Url::parse(synapse.url()).unwrap(),
        gatehouse_channels::secret::Secret::new(bot.access_token.clone()),
    )
    .unwrap();
    let sent = client.sent_transactions(dm).await.unwrap();
    assert!(
        sent.len() == 1
            && sent
                .iter()
                .all(|txn| txn.starts_with("reply-") && txn.ends_with(".0")),
        "{sent:?}"
    );
    let staged = crate::suite::support::files_under(&setup.dirs.base.join("harness"))
        .into_iter()
        .find(|path| {
            let path = path.to_string_lossy();
            path.contains("gatehouse-staged-") && path.ends_with("minutes.md")
        })
        .expect("the file was staged in the workspace");
    assert_eq!(std::fs::read(staged).unwrap(), b"# Minutes\nship it");
    let asked = crate::suite::support::mock_requests(&setup.mock_url).await;
    assert!(
        asked.last().unwrap()["body"]
            .to_string()
            .contains("minutes.md"),
        "{asked:?}"
    );
}
