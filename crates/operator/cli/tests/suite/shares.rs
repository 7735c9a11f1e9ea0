//! Issue 33: one API key cannot take the Gateway from the others. Each reproduction of the
//! issue runs against a real `gatehouse up` with default shares, and an attacker's `chat` key
//! limited to its own session prefix takes as much as it can: event streams, worker slots and
//! media. Another key's work must still go through, and the attacker's excess is answered with
//! stable codes, never with a refused connection.

use std::path::Path;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;

use crate::suite::support::Dirs;
use crate::suite::support::Process;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::gatehouse;
use crate::suite::up::Up;

/// The open-files limit the Gateway runs under in these tests: low enough that a flood of
/// streams from one process of the test would exhaust it without the shares.
const NOFILE: &str = "1024";

/// The default share of open streams of a key (`DEFAULT_KEY_MAX_STREAMS`).
const KEY_STREAMS: usize = 64;

/// The default total of streams under [`NOFILE`]: the limit less a quarter kept in reserve.
const TOTAL_STREAMS: usize = 768;

/// Starts `gatehouse up` on `data` under an open-files limit of [`NOFILE`], with `extra`
/// arguments (none changes a share's default).
fn start_up(data: &Path, extra: &[&str]) -> Up {
    let mut command = Command::new("prlimit");
    command
        .arg(format!("--nofile={NOFILE}:{NOFILE}"))
        .arg("--")
        .arg(env!("CARGO_BIN_EXE_gatehouse"))
        .env_remove("GATEHOUSE_TOKEN")
        .env("GATEHOUSE_LOG", "info");
    command
        .args(["up", "--listen", "127.0.0.1:0", "--data"])
        .arg(data);
    command.args(extra);
    Up::spawn(command, None, &data.join("gateway"), data)
}

/// A client holding one API key.
struct Client {
    url: String,
    key: String,
    http: reqwest::Client,
}

impl Client {
    /// Creates a `chat` key named `name` limited to the sessions starting with `prefix`.
    async fn chat_key(up: &Up, name: &str, prefix: &str) -> Client {
        Client::create(&up.url, &up.token, name, prefix).await
    }

    /// Creates a `chat` key on the Gateway at `url` with the operator token `token`.
    async fn create(url: &str, token: &str, name: &str, prefix: &str) -> Client {
        let response = reqwest::Client::new()
            .post(format!("{url}/v1/keys"))
            .bearer_auth(token)
            .json(&serde_json::json!({"name": name, "scopes": ["chat"], "sessions": prefix}))
            .timeout(WAIT)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status().as_u16(), 200);
        let created: serde_json::Value = response.json().await.unwrap();
        Client {
            url: url.to_owned(),
            key: created["key"].as_str().unwrap().to_owned(),
            // One connection per request: every stream holds a connection of its own.
            http: reqwest::Client::builder()
                .pool_max_idle_per_host(0)
                .build()
                .unwrap(),
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(&self.key)
            .timeout(WAIT)
    }

    /// Sends a request and returns its status and JSON body.
    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
        crate::suite::support::status_and_body(request).await
    }

    /// Posts `text` to `session`.
    async fn post(&self, session: &str, text: &str) -> (u16, serde_json::Value) {
        self.send(
            self.request(
                reqwest::Method::POST,
                &format!("/v1/sessions/{session}/messages"),
            )
            .json(&serde_json::json!({ "text": text })),
        )
        .await
    }

    /// Posts `text` to `session` and returns the ended turn.
    async fn turn(&self, session: &str, text: &str) -> serde_json::Value {
        let (status, posted) = self.post(session, text).await;
        assert_eq!(status, 202, "{posted}");
        self.wait(posted["turnId"].as_str().unwrap()).await
    }

    /// Returns the turn `turn_id` once it has ended. It polls without waiting: a long poll holds
    /// a stream, and the tests fill the streams' total.
    async fn wait(&self, turn_id: &str) -> serde_json::Value {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let (status, turn) = self
                .send(self.request(reqwest::Method::GET, &format!("/v1/turns/{turn_id}")))
                .await;
            assert_eq!(status, 200, "{turn}");
            if !matches!(turn["status"].as_str(), Some("queued" | "running")) {
                return turn;
            }
            assert!(Instant::now() < deadline, "the turn never ended: {turn}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens the event stream of `session`: the response when it is a stream, else the status
    /// and body of the refusal.
    async fn open_stream(
        &self,
        session: &str,
    ) -> Result<reqwest::Response, (u16, serde_json::Value, Option<String>)> {
        let response = self
            .request(
                reqwest::Method::GET,
                &format!("/v1/sessions/{session}/events"),
            )
            .send()
            .await
            .unwrap();
        if response.status().as_u16() == 200 {
            return Ok(response);
        }
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|value| value.to_str().unwrap().to_owned());
        let body = response.json().await.unwrap();
        Err((status, body, retry_after))
    }

    /// Uploads `bytes`.
    async fn upload(&self, bytes: Vec<u8>) -> (u16, serde_json::Value) {
        self.send(
            self.request(reqwest::Method::POST, "/v1/media")
                .header("content-type", "application/octet-stream")
                .body(bytes),
        )
        .await
    }
}

/// Opens streams of `client` until it is refused `attempts` times or has opened `attempts`,
/// and returns the open ones; every refusal must be `429 STREAM_SHARE_EXHAUSTED` with a
/// `Retry-After`.
async fn open_streams(client: &Client, prefix: &str, attempts: usize) -> Vec<reqwest::Response> {
    let mut open = Vec::new();
    for n in 0..attempts {
        match client.open_stream(&format!("{prefix}{}", n % 4)).await {
            Ok(stream) => open.push(stream),
            Err((status, body, retry_after)) => {
                assert_eq!(status, 429, "{body}");
                assert_eq!(body["error"]["code"], "STREAM_SHARE_EXHAUSTED", "{body}");
                assert!(retry_after.is_some(), "a refused stream says when to retry");
            }
        }
    }
    open
}

/// Asserts that `/healthz` answers 200.
async fn assert_healthy(up: &Up) {
    let health = reqwest::Client::new()
        .get(format!("{}/healthz", up.url))
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    assert_eq!(health.status().as_u16(), 200);
}

/// Starts a second node host linking to `up` with a fresh setup code, and waits until
/// `/v1/nodes` lists it connected.
async fn link_another_node(up: &Up, base: &Path) -> Process {
    let (status, code) = up
        .request(
            reqwest::Method::POST,
            "/v1/nodes/setup-codes",
            Some(serde_json::json!({"ttlSeconds": 600})),
        )
        .await;
    assert_eq!(status, 200, "{code}");
    let code_file = base.join("second-node-code");
    std::fs::write(&code_file, code["setupCode"].as_str().unwrap()).unwrap();
    let stderr_log = base.join("logs/second-node.log");
    let mut command = gatehouse();
    command
        .args([
            "node",
            "--runtime",
            "native",
            "--display-name",
            "second",
            "--gateway",
            &up.url,
            "--root",
        ])
        .arg(base.join("second-node"))
        .arg("--setup-code-file")
        .arg(&code_file)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_log).unwrap());
    let node = Process::from_child(command.spawn().unwrap(), stderr_log);
    let deadline = Instant::now() + WAIT;
    loop {
        let (_, nodes) = up.request(reqwest::Method::GET, "/v1/nodes", None).await;
        let linked = nodes["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|node| node["displayName"] == "second" && node["connected"] == true);
        if linked {
            return node;
        }
        assert!(
            Instant::now() < deadline,
            "the second node never linked: {nodes} {}",
            node.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn data(dirs: &Dirs) -> std::path::PathBuf {
    dirs.base.join("data")
}

/// Finding 1: a key's event streams exhausted the Gateway's file descriptors. Now a key holds
/// at most its share, every key together at most the total the open-files limit leaves room
/// for, and the Gateway answers the rest with 429s while it serves health checks, other keys'
/// turns and node links.
#[tokio::test(flavor = "multi_thread")]
async fn issue_33_finding_1_streams_are_refused_with_429_before_the_files_run_out() {
    let dirs = dirs();
    let up = start_up(&data(&dirs), &[]);
    up.wait_ready().await;
    let attacker = Client::chat_key(&up, "attacker", "a-").await;
    // Far more than the key's share: the rest is refused, not left to exhaust the process.
    let held = open_streams(&attacker, "a-", KEY_STREAMS + 40).await;
    assert_eq!(held.len(), KEY_STREAMS);
    // Keys enough to pass the total between them.
    let mut helpers = Vec::new();
    let mut total = held.len();
    for n in 0..(TOTAL_STREAMS / KEY_STREAMS) {
        let prefix = format!("h{n}-");
        let helper = Client::chat_key(&up, &format!("helper{n}"), &prefix).await;
        let streams = open_streams(&helper, &prefix, KEY_STREAMS).await;
        total += streams.len();
        helpers.push((helper, streams));
    }
    assert_eq!(
        total, TOTAL_STREAMS,
        "the total is the open-files limit less its reserve"
    );
    // Full: a fresh key's stream is refused with the same code.
    let other = Client::chat_key(&up, "other", "b-").await;
    let refused = other.open_stream("b-1").await.unwrap_err();
    assert_eq!(refused.0, 429, "{}", refused.1);
    assert_eq!(refused.1["error"]["code"], "STREAM_SHARE_EXHAUSTED");
    // Everything else still works: health, another key's turn, a node's link.
    assert_healthy(&up).await;
    let done = other.turn("b-1", "/say hello").await;
    assert_eq!(done["status"], "completed", "{done}");
    let _node = link_another_node(&up, &dirs.base).await;
    // A closed stream gives its place back.
    drop(held);
    let reopened = tokio::time::timeout(WAIT, async {
        loop {
            if let Ok(stream) = other.open_stream("b-1").await {
                return stream;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("a closed stream's place was never given back");
    drop(reopened);
    let log = up.process.stderr();
    assert!(!log.contains("Too many open files"), "{log}");
}

/// Finding 3: eight `exec sleep` turns of one key took every worker slot, and another key's
/// turn failed with `WORKER_CAPACITY_EXHAUSTED`. Now a key's default share is half the worker
/// capacity (4 of `up`'s 8), the key's excess is `429 RATE_LIMITED`, and the other key's turn
/// completes.
#[tokio::test(flavor = "multi_thread")]
async fn issue_33_finding_3_one_key_cannot_hold_every_worker_slot() {
    let dirs = dirs();
    let up = start_up(&data(&dirs), &[]);
    up.wait_ready().await;
    let attacker = Client::chat_key(&up, "attacker", "a-").await;
    let victim = Client::chat_key(&up, "victim", "b-").await;
    let sleep = format!("/tool exec {}", serde_json::json!({"command": "sleep 120"}));
    let mut admitted = Vec::new();
    for n in 0..8 {
        let (status, posted) = attacker.post(&format!("a-{n}"), &sleep).await;
        match status {
            202 => admitted.push(posted["turnId"].as_str().unwrap().to_owned()),
            _ => {
                assert_eq!(status, 429, "{posted}");
                assert_eq!(posted["error"]["code"], "RATE_LIMITED", "{posted}");
            }
        }
    }
    assert_eq!(admitted.len(), 4, "half of the 8 worker slots");
    // Every admitted turn holds its worker before the other key asks for one.
    let deadline = Instant::now() + WAIT;
    for turn_id in &admitted {
        loop {
            let (_, turn) = attacker
                .send(attacker.request(reqwest::Method::GET, &format!("/v1/turns/{turn_id}")))
                .await;
            if turn["status"] == "running" {
                break;
            }
            assert_eq!(turn["status"], "queued", "{turn}");
            assert!(Instant::now() < deadline, "the turn never started: {turn}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let done = victim.turn("b-1", "/say hello").await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["reply"], "hello", "{done}");
}

/// Finding 2: one key's uploads filled the Gateway's media quota, after which every other key's
/// checkpoints, worktree turns and worktree writes failed, and the key could not delete what it
/// uploaded. Now a key holds at most its media share (a quarter of the quota by default), its
/// sessions' checkpoints count against it, it may delete its own uploads (and no one else's),
/// and another key's uploads, checkpoints and worktree writes go through.
#[tokio::test(flavor = "multi_thread")]
async fn issue_33_finding_2_one_key_cannot_fill_the_media_store() {
    let dirs = dirs();
    // A 16 MiB media quota: the default share of a key is a quarter of it, 4 MiB.
    let up = start_up(&data(&dirs), &["--media-quota-bytes", "16777216"]);
    up.wait_ready().await;
    let attacker = Client::chat_key(&up, "attacker", "a-").await;
    let victim = Client::chat_key(&up, "victim", "b-").await;
    const MIB: usize = 1024 * 1024;
    let mut uploaded = Vec::new();
    for n in 0..8u8 {
        let (status, body) = attacker.upload(vec![n; MIB]).await;
        match status {
            200 => uploaded.push(body["mediaId"].as_str().unwrap().to_owned()),
            _ => {
                assert_eq!(status, 507, "{body}");
                assert_eq!(body["error"]["code"], "KEY_MEDIA_QUOTA_EXCEEDED", "{body}");
            }
        }
    }
    assert_eq!(uploaded.len(), 4, "4 MiB of 1 MiB uploads");
    // The attacker's own session cannot store a checkpoint past its share either.
    let write = format!(
        "/tool exec {}",
        serde_json::json!({"command": "head -c 1048576 /dev/zero > big && echo written"})
    );
    let refused = attacker.turn("a-1", &write).await;
    assert_eq!(refused["status"], "failed", "{refused}");
    assert_eq!(
        refused["error"]["code"], "KEY_MEDIA_QUOTA_EXCEEDED",
        "{refused}"
    );
    // The other key uploads, checkpoints a file and writes a worktree.
    let (status, body) = victim.upload(vec![b'v'; MIB]).await;
    assert_eq!(status, 200, "{body}");
    let victim_media = body["mediaId"].as_str().unwrap().to_owned();
    let done = victim.turn("b-1", &write).await;
    assert_eq!(done["status"], "completed", "{done}");
    let (status, created) = victim
        .send(
            victim
                .request(reqwest::Method::PUT, "/v1/sessions/b-wt")
                .json(&serde_json::json!({"workspace": {"source": "worktree"}})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, written) = victim
        .send(
            victim
                .request(reqwest::Method::PUT, "/v1/sessions/b-wt/worktree/notes.txt")
                .body("worktree content"),
        )
        .await;
    assert_eq!(status, 200, "{written}");
    // A key deletes what it uploaded, never what another key did.
    let (status, body) = attacker
        .send(attacker.request(
            reqwest::Method::DELETE,
            &format!("/v1/media/{victim_media}"),
        ))
        .await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "MEDIA_NOT_FOUND", "{body}");
    let (status, body) = victim
        .send(victim.request(reqwest::Method::GET, &format!("/v1/media/{victim_media}")))
        .await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = attacker
        .send(attacker.request(
            reqwest::Method::DELETE,
            &format!("/v1/media/{}", uploaded[0]),
        ))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body, serde_json::json!({"deleted": true, "unpinned": true}));
    // Its bytes are gone and its share has room again.
    let (status, _) = attacker
        .send(attacker.request(reqwest::Method::GET, &format!("/v1/media/{}", uploaded[0])))
        .await;
    assert_eq!(status, 404);
    let (status, body) = attacker.upload(vec![9; MIB]).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = attacker.upload(vec![10; MIB]).await;
    assert_eq!(status, 507, "{body}");
}

/// The issue's must-hold: with default shares, one chat key holding as many event streams as
/// it can open, every worker slot it can take and as many uploads as it can make; another
/// key's `/say` turn completes, `/healthz` answers and a node can still link, and the first
/// key's excess gets 429s and 507s with stable codes.
#[tokio::test(flavor = "multi_thread")]
async fn issue_33_one_key_holding_all_it_can_leaves_the_gateway_to_the_others() {
    let dirs = dirs();
    let up = start_up(&data(&dirs), &["--media-quota-bytes", "16777216"]);
    up.wait_ready().await;
    let attacker = Client::chat_key(&up, "attacker", "a-").await;
    let victim = Client::chat_key(&up, "victim", "b-").await;
    let streams = open_streams(&attacker, "a-s", KEY_STREAMS * 2).await;
    assert_eq!(streams.len(), KEY_STREAMS);
    let sleep = format!("/tool exec {}", serde_json::json!({"command": "sleep 120"}));
    let mut refused_turns = 0;
    for n in 0..8 {
        let (status, posted) = attacker.post(&format!("a-{n}"), &sleep).await;
        if status != 202 {
            assert_eq!(
                (status, posted["error"]["code"].as_str()),
                (429, Some("RATE_LIMITED"))
            );
            refused_turns += 1;
        }
    }
    assert_eq!(refused_turns, 4);
    let mut refused_uploads = 0;
    for n in 0..8u8 {
        let (status, body) = attacker.upload(vec![n; 1024 * 1024]).await;
        if status != 200 {
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (507, Some("KEY_MEDIA_QUOTA_EXCEEDED"))
            );
            refused_uploads += 1;
        }
    }
    assert_eq!(refused_uploads, 4);
    assert_healthy(&up).await;
    let done = victim.turn("b-1", "/say hello").await;
    assert_eq!(done["status"], "completed", "{done}");
    let stream = victim.open_stream("b-1").await;
    assert!(stream.is_ok(), "{:?}", stream.err());
    let _node = link_another_node(&up, &dirs.base).await;
    drop(streams);
}

/// An attacker's pass at the default turn share: a hostile node reports a worker capacity of
/// `u32::MAX` to lift every key's share. The share believes at most
/// `MAX_REPORTED_CAPACITY` of a node and never more than half the Gateway's own cap on
/// concurrent turns (64 by default), so a key still has at most 32 turns queued or running.
#[tokio::test(flavor = "multi_thread")]
async fn issue_33_a_hostile_nodes_capacity_report_does_not_lift_the_turn_share() {
    use crate::suite::hostile::HostileNode;
    use crate::suite::hostile::NATIVE_COMMANDS;
    use crate::suite::support::Gateway;

    let dirs = dirs();
    let gateway = Gateway::start(&dirs.base.join("gateway"), &dirs.base.join("logs"));
    let mut node = HostileNode::enroll(&gateway, 33, NATIVE_COMMANDS).await;
    let report = serde_json::json!({
        "type": "event",
        "event": "node.report",
        "payload": {"workerSlotsInUse": 0, "workerCapacity": u32::MAX},
    });
    node.send_text(report.to_string()).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let metrics = reqwest::get(format!("{}/metrics", gateway.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let reported = metrics.lines().any(|line| {
            line.starts_with("gatehouse_node_worker_capacity{")
                && line.ends_with(&format!(" {}", u32::MAX))
        });
        if reported {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the report never arrived: {metrics}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let attacker = Client::create(&gateway.url, &gateway.token, "attacker", "a-").await;
    // The node never answers: every admitted turn stays running or queued.
    let mut admitted = 0;
    for n in 0..40 {
        let (status, posted) = attacker.post(&format!("a-{n}"), "hello").await;
        match status {
            202 => admitted += 1,
            _ => assert_eq!(
                (status, posted["error"]["code"].as_str()),
                (429, Some("RATE_LIMITED")),
                "{posted}"
            ),
        }
    }
    assert_eq!(admitted, 32);
}
