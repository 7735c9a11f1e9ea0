//! Channels end to end: a `webhook` channel on a real Gateway with a native node and the mock
//! model, a local reply receiver that checks every signature with its own HMAC, restarts by
//! SIGKILL, and the config file's refusals.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::channels::ChannelList;
use gatehouse_api::channels::WebhookDelivery;
use gatehouse_api::sessions::SessionList;
use sha2::Digest;
use sha2::Sha256;

use crate::suite::support::Dirs;
use crate::suite::support::Gateway;
use crate::suite::support::MockModelSetup;
use crate::suite::support::dirs;
use crate::suite::support::files_under;
use crate::suite::support::gatehouse;
use crate::suite::support::mock_requests;
use crate::suite::support::processes;
use crate::suite::support::wait_turn;

/// The channel's signing secret: distinctive, so a leak anywhere is found by search.
const SECRET: &str = "whsec-7Qm2Zr9Kx4Lp8Vt1";

const WAIT: Duration = Duration::from_secs(60);

/// HMAC-SHA256 written out from RFC 2104, apart from the product's implementation.
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut block = [0_u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.iter().map(|k| k ^ byte).collect::<Vec<u8>>();
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(message)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

fn signature(timestamp: &str, body: &[u8]) -> String {
    let mut signed = timestamp.as_bytes().to_vec();
    signed.push(b'.');
    signed.extend_from_slice(body);
    format!(
        "sha256={}",
        hex::encode(hmac_sha256(SECRET.as_bytes(), &signed))
    )
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// One request the receiver got: the delivery, and whether it was answered 2xx.
#[derive(Debug, Clone)]
struct Received {
    delivery: WebhookDelivery,
    accepted: bool,
}

/// The system behind `reply-url`: checks each request's signature and timestamp, records it,
/// and answers `503` with `Retry-After: 1` while told to fail.
#[derive(Clone, Default)]
struct Receiver {
    received: Arc<Mutex<Vec<Received>>>,
    /// Answer this many requests with 503 first.
    fail_next: Arc<AtomicU32>,
    /// Answer every request with 503 while set.
    down: Arc<AtomicBool>,
    /// Requests whose signature or timestamp did not verify.
    forged: Arc<AtomicU32>,
}

impl Receiver {
    async fn start() -> (Receiver, String) {
        let receiver = Receiver::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/replies", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .route("/replies", axum::routing::post(Receiver::answer))
            .with_state(receiver.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        (receiver, url)
    }

    async fn answer(
        axum::extract::State(receiver): axum::extract::State<Receiver>,
        headers: axum::http::HeaderMap,
        body: axum::body::Bytes,
    ) -> axum::response::Response {
        use axum::response::IntoResponse;
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let timestamp = header("x-gatehouse-timestamp");
        let fresh = timestamp
            .parse::<i64>()
            .is_ok_and(|seconds| (unix_now() - seconds).abs() <= 300);
        if !fresh || header("x-gatehouse-signature") != signature(&timestamp, &body) {
            receiver.forged.fetch_add(1, Ordering::SeqCst);
            return axum::http::StatusCode::UNAUTHORIZED.into_response();
        }
        let delivery: WebhookDelivery = serde_json::from_slice(&body).unwrap();
        let failing = receiver.down.load(Ordering::SeqCst)
            || receiver
                .fail_next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        receiver.received.lock().unwrap().push(Received {
            delivery,
            accepted: !failing,
        });
        match failing {
            true => (
                axum::http::StatusCode::SERVICE_UNAVAILABLE,
                [("retry-after", "1")],
            )
                .into_response(),
            false => axum::http::StatusCode::OK.into_response(),
        }
    }

    fn all(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }

    /// The accepted deliveries to `sender`.
    fn accepted_to(&self, sender: &str) -> Vec<WebhookDelivery> {
        self.all()
            .into_iter()
            .filter(|received| received.accepted && received.delivery.sender == sender)
            .map(|received| received.delivery)
            .collect()
    }

    /// Waits until `sender` has `count` accepted deliveries and returns them.
    async fn wait_for(&self, sender: &str, count: usize) -> Vec<WebhookDelivery> {
        let deadline = Instant::now() + WAIT;
        loop {
            let accepted = self.accepted_to(sender);
            if accepted.len() >= count {
                return accepted;
            }
            assert!(
                Instant::now() < deadline,
                "{sender} got {} of {count} replies: {:?}",
                accepted.len(),
                self.all()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Writes the Gateway's config file with one webhook channel replying to `reply_url`.
fn channel_config(dirs: &Dirs, reply_url: &str) -> String {
    channel_config_with(dirs, reply_url, "")
}

/// [`channel_config`] with `extra` lines in the channel's table.
fn channel_config_with(dirs: &Dirs, reply_url: &str, extra: &str) -> String {
    let secret_file = dirs.base.join("hook-secret");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();
    let config = dirs.base.join("gateway.toml");
    std::fs::write(
        &config,
        format!(
            "[[channels]]\nname = \"hooks\"\nkind = \"webhook\"\nsecret-file = {:?}\n\
             reply-url = {reply_url:?}\nallow-from = [\"alice\"]\ngroups = [\"ops-room\"]\n{extra}",
            secret_file.display().to_string()
        ),
    )
    .unwrap();
    config.display().to_string()
}

/// Posts `body` to the channel's inbound route, signed unless `headers` replaces the
/// signature headers; returns the status and the answer.
async fn post_inbound(
    gateway: &Gateway,
    channel: &str,
    body: &[u8],
    headers: Option<&[(&str, &str)]>,
) -> (u16, serde_json::Value) {
    let timestamp = unix_now().to_string();
    let signed = [
        ("x-gatehouse-timestamp", timestamp.clone()),
        ("x-gatehouse-signature", signature(&timestamp, body)),
    ];
    let mut request = reqwest::Client::new()
        .post(format!("{}/channels/{channel}/inbound", gateway.url))
        .header("content-type", "application/json")
        .body(body.to_vec());
    match headers {
        None => {
            for (name, value) in &signed {
                request = request.header(*name, value);
            }
        }
        Some(headers) => {
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
        }
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

async fn message(
    gateway: &Gateway,
    id: &str,
    sender: &str,
    text: &str,
) -> (u16, serde_json::Value) {
    let body = serde_json::json!({"messageId": id, "sender": sender, "text": text});
    post_inbound(gateway, "hooks", body.to_string().as_bytes(), None).await
}

/// The model requests whose body contains `text` (a request carries the session's history).
pub(crate) async fn model_calls_with(setup: &MockModelSetup, text: &str) -> usize {
    mock_requests(&setup.mock_url)
        .await
        .iter()
        .filter(|request| request["body"].to_string().contains(text))
        .count()
}

/// The pairing code in a pairing reply.
fn code_in(text: &str) -> String {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .find(|word| {
            word.len() == 8
                && word
                    .bytes()
                    .all(|b| b"ABCDEFGHJKLMNPQRSTUVWXYZ23456789".contains(&b))
        })
        .unwrap_or_else(|| panic!("no pairing code in {text:?}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_channel_answers_allowed_senders_once_and_pairs_strangers_before_the_model_sees_them()
 {
    let (receiver, reply_url) = Receiver::start().await;
    let dirs = dirs();
    let config = channel_config(&dirs, &reply_url);
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let gateway = &setup.gateway;

    // An allowed sender: one turn, one reply; the receiver's first refusal is retried with the
    // same delivery id.
    receiver.fail_next.store(1, Ordering::SeqCst);
    let (status, answer) = message(gateway, "m1", "alice", "/say hello alice").await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["accepted"], true);
    assert_eq!(answer["sessionKey"], "agent:main:hooks:direct:alice");
    let turn_id = answer["turnId"].as_str().unwrap().to_owned();
    assert_eq!(wait_turn(gateway, &turn_id).await["reply"], "hello alice");
    let replies = receiver.wait_for("alice", 1).await;
    assert_eq!(replies[0].delivery_id, format!("reply-{turn_id}"));
    assert_eq!(replies[0].in_reply_to.as_deref(), Some("m1"));
    assert_eq!(replies[0].conversation, "alice");
    assert_eq!(replies[0].text, "hello alice");
    let attempts: Vec<String> = receiver
        .all()
        .into_iter()
        .map(|received| received.delivery.delivery_id)
        .collect();
    assert_eq!(attempts, vec![replies[0].delivery_id.clone(); 2]);

    // The same message again admits nothing.
    let (status, answer) = message(gateway, "m1", "alice", "/say hello alice").await;
    assert_eq!(
        (status, answer["accepted"].clone(), answer["reason"].clone()),
        (200, false.into(), "duplicate".into())
    );

    // A stranger gets one pairing code and reaches no model, then or after approval.
    let (status, answer) = message(gateway, "m2", "bob", "/say secret plan").await;
    assert_eq!((status, answer["reason"].clone()), (200, "pairing".into()));
    let code = code_in(&receiver.wait_for("bob", 1).await[0].text);
    let (_, answer) = message(gateway, "m3", "bob", "/say secret plan again").await;
    assert_eq!(answer["reason"], "pairing");
    let listed = gateway.operator_cli(&["channels", "pairings", "hooks", "--json"]);
    let listed: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed["pairings"][0]["code"], code.as_str(), "{listed}");
    assert_eq!(listed["pairings"][0]["sender"], "bob");
    let approved = gateway.operator_cli(&["channels", "approve", "hooks", &code]);
    assert!(approved.status.success(), "{approved:?}");
    assert_eq!(
        String::from_utf8_lossy(&approved.stdout).trim(),
        "approved bob"
    );
    let again = gateway.operator_cli(&["channels", "approve", "hooks", &code]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stdout).contains("PAIRING_NOT_FOUND"));
    // The approval notice, then the next message is answered once.
    receiver.wait_for("bob", 2).await;
    let (status, answer) = message(gateway, "m4", "bob", "/say hi bob").await;
    assert_eq!(status, 202, "{answer}");
    wait_turn(gateway, answer["turnId"].as_str().unwrap()).await;
    let to_bob = receiver.wait_for("bob", 3).await;
    assert_eq!(to_bob[2].text, "hi bob");
    assert_eq!(model_calls_with(&setup, "secret plan").await, 0);
    // Only the code's own reply went out while it was pending.
    assert_eq!(to_bob.len(), 3, "{to_bob:?}");

    // Groups: only those listed; a webhook message is addressed by being sent.
    let group = |id: &str, room: &str| serde_json::json!({"messageId": id, "sender": "carol", "conversation": room, "text": "/say to the room"});
    let (status, answer) = post_inbound(
        gateway,
        "hooks",
        group("g1", "other-room").to_string().as_bytes(),
        None,
    )
    .await;
    assert_eq!((status, answer["reason"].clone()), (200, "denied".into()));
    let (status, answer) = post_inbound(
        gateway,
        "hooks",
        group("g2", "ops-room").to_string().as_bytes(),
        None,
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["sessionKey"], "agent:main:hooks:group:ops-room");
    wait_turn(gateway, answer["turnId"].as_str().unwrap()).await;
    let to_carol = receiver.wait_for("carol", 1).await;
    assert_eq!(
        (to_carol[0].conversation.as_str(), to_carol.len()),
        ("ops-room", 1)
    );

    let sessions: SessionList = gateway.get_typed("/v1/sessions").await;
    let place = |key: &str| {
        let session = sessions
            .sessions
            .iter()
            .find(|session| session.session_key == key)
            .unwrap_or_else(|| panic!("no session {key}: {sessions:?}"));
        (
            session.channel.clone(),
            session.peer.clone(),
            session.room.clone(),
        )
    };
    assert_eq!(
        place("agent:main:hooks:direct:alice"),
        (Some("hooks".into()), Some("alice".into()), None)
    );
    assert_eq!(
        place("agent:main:hooks:group:ops-room"),
        (Some("hooks".into()), None, Some("ops-room".into()))
    );
    let list: ChannelList = gateway.get_typed("/v1/channels").await;
    let hooks = &list.channels[0];
    assert_eq!(
        (
            hooks.name.as_str(),
            hooks.kind.as_str(),
            hooks.pending_deliveries
        ),
        ("hooks", "webhook", 0)
    );
    assert_eq!(
        serde_json::to_value(hooks.state).unwrap(),
        "connected",
        "{hooks:?}"
    );
    assert!(hooks.last_inbound_at.is_some() && hooks.last_delivery_at.is_some());
    let metrics = gateway.get("/metrics").await.text().await.unwrap();
    for (series, at_least) in [
        (
            "gatehouse_channel_inbound_total{channel=\"hooks\",outcome=\"admitted\"}",
            3,
        ),
        (
            "gatehouse_channel_inbound_total{channel=\"hooks\",outcome=\"pairing\"}",
            2,
        ),
        (
            "gatehouse_channel_inbound_total{channel=\"hooks\",outcome=\"duplicate\"}",
            1,
        ),
        (
            "gatehouse_channel_inbound_total{channel=\"hooks\",outcome=\"denied\"}",
            1,
        ),
        (
            "gatehouse_channel_deliveries_total{channel=\"hooks\",outcome=\"retried\"}",
            1,
        ),
        (
            "gatehouse_channel_deliveries_total{channel=\"hooks\",outcome=\"delivered\"}",
            5,
        ),
        (
            "gatehouse_channel_delivery_latency_seconds_count{channel=\"hooks\"}",
            5,
        ),
    ] {
        let value = metrics
            .lines()
            .find_map(|line| line.strip_prefix(series))
            .and_then(|value| value.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {series} in\n{metrics}"));
        assert!(value >= f64::from(at_least), "{series} is {value}");
    }
    assert!(
        metrics.contains("gatehouse_channel_outbox_depth{channel=\"hooks\"} 0"),
        "{metrics}"
    );
    let audit = gateway.get_json("/v1/audit").await.to_string();
    for action in [
        "channel.pairing",
        "channel.pairing.approve",
        "channel.denied",
    ] {
        assert!(audit.contains(&format!("\"{action}\"")), "no {action} row");
    }
    assert_eq!(receiver.forged.load(Ordering::SeqCst), 0);

    // The secret is nowhere on the Harness side, nor in the audit or the logs.
    assert!(!audit.contains(SECRET));
    assert_nowhere_but_the_gateway(&setup, SECRET);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_channels_deny_tools_narrow_its_sessions_and_no_other() {
    let (receiver, reply_url) = Receiver::start().await;
    let dirs = dirs();
    let config = channel_config_with(
        &dirs,
        &reply_url,
        "deny-tools = [\"write\", \"session_status\"]\n",
    );
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let gateway = &setup.gateway;
    let write = r#"/tool write {"path":"denied.txt","content":"x"}"#;

    // The channel's session: neither tool is offered, and calling them is refused.
    let (status, answer) = message(gateway, "d1", "alice", write).await;
    assert_eq!(status, 202, "{answer}");
    let turn = wait_turn(gateway, answer["turnId"].as_str().unwrap()).await;
    assert!(
        turn["reply"].as_str().unwrap().contains("TOOL_NOT_ALLOWED"),
        "{turn}"
    );
    let offered = mock_requests(&setup.mock_url).await.last().unwrap()["body"]["tools"].to_string();
    // `write` takes the tools that write files too.
    assert!(
        offered.contains("\"read\"")
            && !offered.contains("\"write\"")
            && !offered.contains("\"edit\"")
            && !offered.contains("\"apply_patch\"")
            && !offered.contains("\"session_status\""),
        "{offered}"
    );
    let (_, answer) = message(gateway, "d2", "alice", "/tool session_status {}").await;
    let turn = wait_turn(gateway, answer["turnId"].as_str().unwrap()).await;
    assert!(
        turn["reply"].as_str().unwrap().contains("TOOL_NOT_ALLOWED"),
        "{turn}"
    );
    receiver.wait_for("alice", 2).await;

    // A session the channel did not open keeps every tool.
    let turn = crate::suite::support::turn(gateway, "api-session", write).await;
    assert!(
        !turn["reply"].as_str().unwrap().contains("TOOL_NOT_ALLOWED"),
        "{turn}"
    );
    let offered = mock_requests(&setup.mock_url).await.last().unwrap()["body"]["tools"].to_string();
    assert!(
        offered.contains("\"write\"") && offered.contains("\"session_status\""),
        "{offered}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_too_old_to_apply_a_channels_denials_is_not_given_its_turns() {
    let (_receiver, reply_url) = Receiver::start().await;
    let dirs = dirs();
    let config = channel_config_with(&dirs, &reply_url, "deny-tools = [\"exec\"]\n");
    let logs = dirs.base.join("logs");
    let gateway = Gateway::start_with(&dirs.base.join("gateway"), &logs, &["--config", &config]);
    // A node of protocol 4, which does not know a turn's own denials.
    let mut node = crate::suite::hostile::HostileNode::enroll(
        &gateway,
        7,
        crate::suite::hostile::NATIVE_COMMANDS,
    )
    .await;
    let (status, answer) =
        message(&gateway, "o1", "alice", "/tool exec {\"command\":\"id\"}").await;
    assert_eq!(status, 202, "{answer}");
    let turn = wait_turn(&gateway, answer["turnId"].as_str().unwrap()).await;
    assert_eq!(turn["status"], "failed", "{turn}");
    assert_eq!(turn["error"]["code"], "PROTOCOL_UNSUPPORTED", "{turn}");
    assert!(
        !node
            .received_invokes()
            .await
            .iter()
            .any(|invoke| invoke.command == "agent.turn"),
        "the old node was given the turn"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_webhook_messages_files_are_staged_for_its_turn_typed_by_their_bytes() {
    use base64::Engine;
    let (_receiver, reply_url) = Receiver::start().await;
    let dirs = dirs();
    let config = channel_config(&dirs, &reply_url);
    // A bound on files small enough to pass with a webhook body.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("media-max-bytes = 4096\n{text}")).unwrap();
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let gateway = &setup.gateway;
    let file = |name: &str, mime: &str, bytes: &[u8]| {
        serde_json::json!({"fileName": name, "mimeType": mime,
            "base64": base64::engine::general_purpose::STANDARD.encode(bytes)})
    };
    let body = serde_json::json!({
        "messageId": "f1",
        "sender": "alice",
        "text": "/say got them",
        "attachments": [
            file("notes.txt", "text/plain", b"hello from a file"),
            file("fake.png", "image/png", b"not an image at all"),
            file("big.bin", "application/octet-stream", &[7_u8; 5000]),
        ],
    });
    let (status, answer) = post_inbound(gateway, "hooks", body.to_string().as_bytes(), None).await;
    assert_eq!(status, 202, "{answer}");
    let turn = wait_turn(gateway, answer["turnId"].as_str().unwrap()).await;
    assert_eq!(turn["reply"], "got them", "{turn}");

    // The model saw the two files staged in the workspace, and a line for the refused one.
    let requests = mock_requests(&setup.mock_url).await;
    let asked = requests.last().unwrap()["body"].to_string();
    assert!(
        asked.contains("Attached files")
            && asked.contains("notes.txt")
            && asked.contains("fake.png"),
        "{asked}"
    );
    assert!(
        asked.contains("big.bin") && asked.contains("was not passed on") && asked.contains("4096"),
        "{asked}"
    );
    let staged: Vec<_> = files_under(&setup.dirs.base.join("harness"))
        .into_iter()
        .filter(|path| path.to_string_lossy().contains("gatehouse-staged-"))
        .collect();
    let notes = staged
        .iter()
        .find(|path| path.to_string_lossy().ends_with("notes.txt"))
        .unwrap_or_else(|| panic!("{staged:?}"));
    assert_eq!(std::fs::read(notes).unwrap(), b"hello from a file");
    assert!(
        !staged
            .iter()
            .any(|path| path.to_string_lossy().contains("big.bin"))
    );

    // Each stored under the type its bytes show, not the one the sender claimed.
    for (bytes, expected) in [
        (&b"hello from a file"[..], "text/plain"),
        (&b"not an image at all"[..], "application/octet-stream"),
    ] {
        let id = gatehouse_media::media_id(bytes);
        let response = gateway.get(&format!("/v1/media/{id}")).await;
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(content_type.starts_with(expected), "{content_type}");
    }

    // Bytes that are not base64 are refused, and nothing is admitted.
    let mut bad = body.clone();
    bad["messageId"] = "f2".into();
    bad["attachments"][0]["base64"] = "***".into();
    let (status, answer) = post_inbound(gateway, "hooks", bad.to_string().as_bytes(), None).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer.to_string().contains("attachments[0].base64"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sender_has_a_share_of_turns_like_an_api_key() {
    let (receiver, reply_url) = Receiver::start().await;
    let dirs = dirs();
    let config = channel_config(&dirs, &reply_url);
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("key-concurrent-turns = 2\n{text}")).unwrap();
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let gateway = &setup.gateway;
    let mut turns = Vec::new();
    for id in ["b1", "b2"] {
        let (status, answer) = message(gateway, id, "alice", "/slow 300 one two three four").await;
        assert_eq!(status, 202, "{answer}");
        turns.push(answer["turnId"].as_str().unwrap().to_owned());
    }
    // Past the share: refused with a retry hint and nothing recorded.
    let (status, answer) = message(gateway, "b3", "alice", "/say third").await;
    assert_eq!(status, 429, "{answer}");
    assert!(answer.to_string().contains("RATE_LIMITED"), "{answer}");
    // Another sender is not held back by alice.
    let (status, answer) = message(gateway, "g1", "alice2", "/say hi").await;
    assert_eq!((status, answer["reason"].clone()), (200, "pairing".into()));
    for turn in &turns {
        wait_turn(gateway, turn).await;
    }
    // Once a turn ended the same message is taken.
    let (status, answer) = message(gateway, "b3", "alice", "/say third").await;
    assert_eq!(status, 202, "{answer}");
    wait_turn(gateway, answer["turnId"].as_str().unwrap()).await;
    let replies = receiver.wait_for("alice", 3).await;
    assert_eq!(replies[2].text, "third");
    assert_eq!(model_calls_with(&setup, "third").await, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn unverified_or_malformed_inbound_requests_admit_nothing() {
    let (_receiver, reply_url) = Receiver::start().await;
    let dirs = dirs();
    let config = channel_config(&dirs, &reply_url);
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let gateway = &setup.gateway;
    let body = serde_json::json!({"messageId": "x1", "sender": "alice", "text": "/say forged"})
        .to_string();
    let now = unix_now().to_string();
    let stale = (unix_now() - 301).to_string();
    let good = signature(&now, body.as_bytes());
    let forged = signature(&now, b"another body");
    let cases: [(&str, Vec<(&str, &str)>); 5] = [
        (
            "forged",
            vec![
                ("x-gatehouse-timestamp", now.as_str()),
                ("x-gatehouse-signature", forged.as_str()),
            ],
        ),
        (
            "stale",
            vec![
                ("x-gatehouse-timestamp", stale.as_str()),
                ("x-gatehouse-signature", good.as_str()),
            ],
        ),
        (
            "no signature",
            vec![("x-gatehouse-timestamp", now.as_str())],
        ),
        (
            "no timestamp",
            vec![("x-gatehouse-signature", good.as_str())],
        ),
        ("nothing", Vec::new()),
    ];
    for (case, headers) in &cases {
        let (status, answer) = post_inbound(gateway, "hooks", body.as_bytes(), Some(headers)).await;
        assert_eq!(status, 401, "{case}: {answer}");
        assert_eq!(
            answer["error"]["code"], "CHANNEL_SIGNATURE_INVALID",
            "{case}"
        );
    }
    let stale_signed = signature(&stale, body.as_bytes());
    let (status, _) = post_inbound(
        gateway,
        "hooks",
        body.as_bytes(),
        Some(&[
            ("x-gatehouse-timestamp", stale.as_str()),
            ("x-gatehouse-signature", stale_signed.as_str()),
        ]),
    )
    .await;
    assert_eq!(status, 401, "a correctly signed stale request was taken");
    let (status, answer) = post_inbound(gateway, "nope", body.as_bytes(), None).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (404, "CHANNEL_NOT_FOUND".into())
    );
    let huge = vec![b'x'; 2 * 1024 * 1024];
    let (status, _) = post_inbound(gateway, "hooks", &huge, None).await;
    assert_eq!(status, 413);
    let (status, answer) = post_inbound(gateway, "hooks", b"{\"messageId\":", None).await;
    assert_eq!(
        (status, answer["error"]["code"].clone()),
        (400, "INVALID_REQUEST".into())
    );
    let unknown_field =
        serde_json::json!({"messageId": "x2", "sender": "alice", "text": "hi", "admin": true});
    let (status, _) =
        post_inbound(gateway, "hooks", unknown_field.to_string().as_bytes(), None).await;
    assert_eq!(status, 400);

    // Nothing reached a session or the model; the refusals are audited.
    let sessions = gateway.get_json("/v1/sessions").await;
    assert_eq!(
        sessions["sessions"].as_array().unwrap().len(),
        0,
        "{sessions}"
    );
    assert_eq!(model_calls_with(&setup, "forged").await, 0);
    let audit = gateway.get_json("/v1/audit").await.to_string();
    assert!(audit.contains("CHANNEL_SIGNATURE_INVALID"), "{audit}");
    let metrics = gateway.get("/metrics").await.text().await.unwrap();
    for series in [
        "gatehouse_channel_inbound_total{channel=\"hooks\",outcome=\"invalid\"} 8",
        "gatehouse_channel_inbound_total{channel=\"hooks\",outcome=\"admitted\"} 0",
    ] {
        assert!(metrics.contains(series), "no {series} in\n{metrics}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn replies_survive_a_killed_gateway_and_are_delivered_once() {
    let (receiver, reply_url) = Receiver::start().await;
    let dirs = dirs();
    let config = channel_config(&dirs, &reply_url);
    let mut setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let listen = setup.gateway.url.trim_start_matches("http://").to_owned();
    let restart = |setup: &mut MockModelSetup| {
        setup.gateway.process.kill();
        setup.gateway = Gateway::start_on(
            &listen,
            &setup.path("gateway"),
            &setup.path("logs"),
            &["--config", &config],
        );
    };

    // A reply pending in the outbox while the receiver is down, then a SIGKILL.
    receiver.down.store(true, Ordering::SeqCst);
    let (status, answer) = message(&setup.gateway, "k1", "alice", "/say kept").await;
    assert_eq!(status, 202, "{answer}");
    let kept = answer["turnId"].as_str().unwrap().to_owned();
    wait_turn(&setup.gateway, &kept).await;
    let deadline = Instant::now() + WAIT;
    while receiver.all().is_empty() {
        assert!(Instant::now() < deadline, "no delivery attempt");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    restart(&mut setup);
    setup.gateway.wait_ready().await;
    receiver.down.store(false, Ordering::SeqCst);
    let delivered = receiver.wait_for("alice", 1).await;
    assert_eq!(delivered[0].delivery_id, format!("reply-{kept}"));
    assert_eq!(delivered[0].text, "kept");

    // A SIGKILL while a channel turn runs: the turn is never replayed, and its sender is told
    // once that it was interrupted.
    let (status, answer) = message(&setup.gateway, "k2", "alice", "/hang").await;
    assert_eq!(status, 202, "{answer}");
    let hung = answer["turnId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + WAIT;
    while model_calls_with(&setup, "/hang").await == 0 {
        assert!(
            Instant::now() < deadline,
            "the turn never reached the model"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    restart(&mut setup);
    setup.gateway.wait_ready().await;
    let turn = wait_turn(&setup.gateway, &hung).await;
    assert_eq!(turn["status"], "interrupted", "{turn}");
    let to_alice = receiver.wait_for("alice", 2).await;
    assert_eq!(to_alice[1].delivery_id, format!("reply-{hung}"));
    assert!(
        to_alice[1].text.contains("INTERRUPTED"),
        "{}",
        to_alice[1].text
    );
    // A redelivery of the interrupted message after the restart admits nothing.
    let (_, answer) = message(&setup.gateway, "k2", "alice", "/hang").await;
    assert_eq!(answer["reason"], "duplicate");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(model_calls_with(&setup, "/hang").await, 1);
    let accepted: Vec<String> = receiver
        .all()
        .into_iter()
        .filter(|received| received.accepted)
        .map(|received| received.delivery.delivery_id)
        .collect();
    assert_eq!(
        accepted,
        vec![format!("reply-{kept}"), format!("reply-{hung}")]
    );
}

#[test]
fn channel_configuration_errors_exit_2_naming_the_key_and_up_refuses_enabled_channels() {
    let temp = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = temp.path().join(name);
        std::fs::write(&path, text).unwrap();
        path
    };
    let webhook = "[[channels]]\nname = \"hooks\"\nkind = \"webhook\"\n";
    let cases = [
        (
            format!(
                "{webhook}secret-env = \"GATEHOUSE_TEST_UNSET_SECRET\"\nreply-url = \"http://127.0.0.1:9/\"\n"
            ),
            "CHANNEL_CREDENTIAL_MISSING",
        ),
        (
            format!("{webhook}secret-env = \"X\"\nreply-url = \"ftp://127.0.0.1/\"\n"),
            "channels[0].reply-url",
        ),
        (
            format!("{webhook}secret = \"inline\"\n"),
            "unknown field `secret`",
        ),
    ];
    for (index, (text, expected)) in cases.iter().enumerate() {
        let mut file = text.clone();
        file.insert_str(
            0,
            &format!(
                "state = {:?}\n",
                temp.path().join("state").display().to_string()
            ),
        );
        let config = write(&format!("gateway-{index}.toml"), &file);
        let output = gatehouse()
            .args(["gateway", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{file}: {stderr}");
        assert!(stderr.contains(expected), "{file}: {stderr}");
    }
    let config = write(
        "up.toml",
        &format!("{webhook}secret-env = \"HOME\"\nreply-url = \"http://127.0.0.1:9/\"\n"),
    );
    let output = gatehouse()
        .args(["up", "--data"])
        .arg(temp.path().join("data"))
        .args(["--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("CHANNELS_NEED_DEDICATED"), "{stderr}");
    assert!(!temp.path().join("data").exists(), "up started anyway");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_console_lists_the_channels_and_approves_a_pairing() {
    let (receiver, reply_url) = Receiver::start().await;
    let dirs = dirs();
    let config = channel_config(&dirs, &reply_url);
    let setup = MockModelSetup::start(dirs, &["--config", &config]).await;
    let (_, answer) = message(&setup.gateway, "c1", "bob", "/say let me in").await;
    assert_eq!(answer["reason"], "pairing");
    let code = code_in(&receiver.wait_for("bob", 1).await[0].text);
    let screenshots = crate::suite::console::run_browser(
        "channels",
        &setup.gateway.url,
        &setup.gateway.process,
        &setup.dirs.base,
        &[
            ("GATEHOUSE_CONSOLE_ADMIN_KEY", setup.gateway.token.as_str()),
            ("GATEHOUSE_CONSOLE_PAIRING_CODE", code.as_str()),
        ],
    );
    crate::suite::console::assert_screenshots(&screenshots, &["channels"]);
    // The approval took effect: the notice went out and bob is answered.
    receiver.wait_for("bob", 2).await;
    let (status, answer) = message(&setup.gateway, "c2", "bob", "/say thanks").await;
    assert_eq!(status, 202, "{answer}");
    let audit = setup.gateway.get_json("/v1/audit").await.to_string();
    assert!(audit.contains("channel.pairing.approve"), "{audit}");
}

/// Asserts that `secret` is in no file under the Harness root, in the argv or environment of
/// no process but the Gateway's, and in no log of the setup but the homeserver's own.
pub(crate) fn assert_nowhere_but_the_gateway(setup: &MockModelSetup, secret: &str) {
    for file in files_under(&setup.path("harness")) {
        let bytes = std::fs::read(&file).unwrap_or_default();
        assert!(
            !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
            "{} holds the channel's credential",
            file.display()
        );
    }
    for (pid, argv, env) in processes() {
        if pid == setup.gateway.process.pid() {
            continue;
        }
        assert!(
            !argv.iter().any(|arg| arg.contains(secret))
                && !env.iter().any(|(_, value)| value.contains(secret)),
            "process {pid} {argv:?} holds the channel's credential"
        );
    }
    for log in files_under(&setup.path("logs")) {
        if log
            .file_name()
            .is_some_and(|name| name.to_string_lossy().starts_with("synapse"))
        {
            continue;
        }
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !text.contains(secret),
            "{} holds the channel's credential",
            log.display()
        );
    }
}
