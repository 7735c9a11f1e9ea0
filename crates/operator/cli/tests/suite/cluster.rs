//! Gateway replicas on one PostgreSQL database and one S3 bucket (issue 16): real
//! `gatehouse gateway` processes with short leases, real node hosts that know every replica's
//! URL, the deterministic mock model. These tests choose their own store, so they run once,
//! beside the other PostgreSQL tests.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use futures_util::StreamExt;
use gatehouse_api::nodes::NodeList;
use gatehouse_api::nodes::ReplicaList;
use pretty_assertions::assert_eq;
use sqlx::Connection;

use crate::suite::s3::ExternalState;
use crate::suite::support::Dirs;
use crate::suite::support::Gateway;
use crate::suite::support::Process;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::mock_model;
use crate::suite::support::start_node_with;

/// The lease of the test replicas whose takeovers a test waits for: short, so they happen
/// within the test.
const SHORT_LEASE: &str = "2";

/// The lease of the test replicas under load: the default, so a replica whose renewal a busy
/// machine delays by a second or two keeps its lease, as it would in production.
const DEFAULT_LEASE: &str = "5";

/// Replicas of one Gateway on a fresh database and bucket, and the mock model.
struct Cluster {
    state: ExternalState,
    dirs: Dirs,
    logs: PathBuf,
    mock_url: String,
    _mock: Process,
    replicas: Vec<Gateway>,
    lease: &'static str,
    /// More arguments of every replica (a config file).
    extra: Vec<String>,
}

impl Cluster {
    /// Starts `count` replicas, `r0` to `r{count-1}`, with leases of `lease` seconds.
    async fn start(count: usize, lease: &'static str) -> Cluster {
        Self::start_with(count, lease, Vec::new()).await
    }

    /// Starts `count` replicas like [`Cluster::start`], each with the arguments `extra`.
    async fn start_with(count: usize, lease: &'static str, extra: Vec<String>) -> Cluster {
        let dirs = dirs();
        let logs = dirs.base.join("logs");
        let (mock, mock_url) = mock_model(&logs);
        let mut cluster = Cluster {
            state: ExternalState::new().await,
            dirs,
            logs,
            mock_url,
            _mock: mock,
            replicas: Vec::new(),
            lease,
            extra,
        };
        for index in 0..count {
            let replica = cluster.start_replica(index);
            cluster.replicas.push(replica);
        }
        cluster
    }

    /// Starts replica `r{index}` on its own state directory.
    fn start_replica(&self, index: usize) -> Gateway {
        let id = format!("r{index}");
        let mut args: Vec<&str> = self.state.args().to_vec();
        args.extend(["--replica-id", &id, "--lease-seconds", self.lease]);
        args.extend(self.extra.iter().map(String::as_str));
        Gateway::start_with_env(
            &self.dirs.base.join(&id),
            &self.logs,
            &args,
            &self.state.envs(),
        )
    }

    /// Starts a native node host on `root` with `capacity` workers, enrolled through replica
    /// `r{first}` and knowing every replica's URL, that one first; it logs JSON lines.
    fn node(&self, root: &str, first: usize, capacity: u32) -> Process {
        let model = format!("openai-chat:{}/v1:mock-model", self.mock_url);
        let capacity = capacity.to_string();
        let mut args: Vec<&str> = vec![
            "--model",
            &model,
            "--model-key-env",
            "MOCK_MODEL_KEY",
            "--capacity",
            &capacity,
        ];
        for (index, replica) in self.replicas.iter().enumerate() {
            if index != first {
                args.extend(["--gateway", &replica.url]);
            }
        }
        let gateway = &self.replicas[first];
        start_node_with(
            gateway,
            &self.dirs.base.join(root),
            Some(&gateway.setup_code(600)),
            &self.logs,
            &args,
            &[
                ("MOCK_MODEL_KEY", "mock-model-test-key"),
                ("GATEHOUSE_LOG_FORMAT", "json"),
            ],
        )
    }

    /// Waits until `count` nodes are connected, as replica `r{via}` lists them, and returns
    /// the replica holding each.
    async fn wait_nodes(&self, via: usize, count: usize) -> BTreeMap<String, String> {
        self.wait_holders(via, |held| held.len() == count).await
    }

    /// Waits until the replicas holding the connected nodes, as replica `r{via}` lists them
    /// (node id to replica id), are what `accept` accepts, and returns them.
    async fn wait_holders(
        &self,
        via: usize,
        accept: impl Fn(&BTreeMap<String, String>) -> bool,
    ) -> BTreeMap<String, String> {
        let deadline = Instant::now() + WAIT;
        loop {
            let nodes: NodeList = self.replicas[via].get_typed("/v1/nodes").await;
            let held: BTreeMap<String, String> = nodes
                .nodes
                .into_iter()
                .filter_map(|node| Some((node.node_id, node.replica_id?)))
                .collect();
            if accept(&held) {
                return held;
            }
            assert!(
                Instant::now() < deadline,
                "the nodes' holders stayed {held:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Posts `text` to `session` on `gateway` with `key` as its idempotency key and returns the
/// turn id, or what the replica answered instead of acknowledging it.
async fn try_post(
    gateway: &Gateway,
    session: &str,
    text: &str,
    key: &str,
) -> Result<String, String> {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/sessions/{session}/messages", gateway.url))
        .bearer_auth(&gateway.token)
        .json(&serde_json::json!({"text": text, "idempotencyKey": key}))
        .timeout(WAIT)
        .send()
        .await
        .map_err(|error| error.to_string())?;
    let status = response.status();
    let body = response.text().await.map_err(|error| error.to_string())?;
    if status != 202 {
        return Err(format!("{status}: {body}"));
    }
    let body: serde_json::Value = serde_json::from_str(&body).map_err(|error| error.to_string())?;
    body["turnId"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| body.to_string())
}

/// Posts like [`try_post`], sending the message again with the same idempotency key after a
/// `503` (a replica past its store's pool on a loaded machine says so), as a client should,
/// for up to [`WAIT`]; fails the test on any other answer.
async fn posted_with_retries(gateway: &Gateway, session: &str, text: &str, key: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        match try_post(gateway, session, text, key).await {
            Ok(turn_id) => return turn_id,
            Err(answer) if answer.starts_with("503") && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(answer) => panic!("{} did not acknowledge {text}: {answer}", gateway.url),
        }
    }
}

/// Posts like [`try_post`], failing the test when the replica does not acknowledge.
async fn posted(gateway: &Gateway, session: &str, text: &str, key: &str) -> String {
    try_post(gateway, session, text, key)
        .await
        .unwrap_or_else(|answer| {
            panic!(
                "{} did not acknowledge {text}: {answer}\n{}",
                gateway.url,
                gateway.process.stderr()
            )
        })
}

/// Sends `/say WORD` to `session` on `gateway` (with `WORD` as its idempotency key) and
/// asserts that the turn completes with `WORD`, as `gateway` answers.
async fn assert_says(gateway: &Gateway, session: &str, word: &str) {
    let turn_id = posted(gateway, session, &format!("/say {word}"), word).await;
    let turn = wait_status(gateway, &turn_id, &["completed", "failed"]).await;
    assert_eq!(turn["reply"], word, "{turn}");
}

/// Returns the turn `turn_id` once its status is one of `statuses`, as `gateway` answers.
async fn wait_status(gateway: &Gateway, turn_id: &str, statuses: &[&str]) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(120);
    // A long poll returns only at the turn's end: it is used only when waiting for one.
    let terminal = ["completed", "failed", "interrupted", "aborted"];
    let wait = match statuses.iter().all(|status| terminal.contains(status)) {
        true => 5,
        false => 0,
    };
    loop {
        let turn = gateway
            .get_json(&format!("/v1/turns/{turn_id}?wait={wait}"))
            .await;
        if statuses.contains(&turn["status"].as_str().unwrap_or_default()) {
            return turn;
        }
        assert!(Instant::now() < deadline, "turn {turn_id} stayed {turn}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Returns the session's transcript as (seq, role, content, turn id), as `gateway` answers.
async fn transcript(gateway: &Gateway, session: &str) -> Vec<(i64, String, String, String)> {
    let body = gateway
        .get_json(&format!("/v1/sessions/{session}/transcript"))
        .await;
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| {
            (
                message["seq"].as_i64().unwrap(),
                message["role"].as_str().unwrap().to_owned(),
                message["content"].as_str().unwrap().to_owned(),
                message["turnId"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// Returns every audit row with `action`, paging through the whole trail.
async fn audited(gateway: &Gateway, action: &str) -> Vec<serde_json::Value> {
    let mut rows = Vec::new();
    let mut after = 0;
    loop {
        let page = gateway.get_json(&format!("/v1/audit?after={after}")).await;
        let events = page["events"].as_array().unwrap().clone();
        let Some(last) = events.last() else {
            return rows;
        };
        after = last["seq"].as_i64().unwrap();
        rows.extend(events.into_iter().filter(|event| event["action"] == action));
    }
}

/// The durable events a client of `GET /v1/sessions/{key}/events` received: (seq, name,
/// data), in the order received.
type Received = Vec<(i64, String, serde_json::Value)>;

/// Follows the session's event stream on the replica at `url` from the start, collecting its
/// durable events, until `until` accepts what it received.
async fn follow(
    url: &str,
    token: &str,
    session: &str,
    until: impl Fn(&Received) -> bool,
) -> Received {
    follow_after(url, token, session, 0, until).await
}

/// Follows like [`follow`], from the events after seq `after` (`?after=`).
async fn follow_after(
    url: &str,
    token: &str,
    session: &str,
    after: i64,
    until: impl Fn(&Received) -> bool,
) -> Received {
    let response = open_events(url, token, session, after).await;
    read_events(response, session, until).await.0
}

/// Opens the session's event stream on the replica at `url` from the events after seq `after`;
/// once its headers are in, the replica follows the session for it.
async fn open_events(url: &str, token: &str, session: &str, after: i64) -> reqwest::Response {
    let response = reqwest::Client::new()
        .get(format!("{url}/v1/sessions/{session}/events?after={after}"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response
}

/// Reads an event stream opened by [`open_events`] until `until` accepts the durable events
/// received; returns them, and the text of the `message.delta` events received, in order.
async fn read_events(
    response: reqwest::Response,
    session: &str,
    until: impl Fn(&Received) -> bool,
) -> (Received, Vec<String>) {
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut received = Received::new();
    let mut deltas = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !until(&received) {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("{session}: the stream stalled after {received:?}"))
            .unwrap_or_else(|| panic!("{session}: the stream ended after {received:?}"))
            .unwrap();
        buffer.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            let (mut id, mut name, mut data) = (None, String::new(), String::new());
            for line in frame.lines() {
                if let Some(value) = line.strip_prefix("id:") {
                    id = value.trim().parse::<i64>().ok();
                } else if let Some(value) = line.strip_prefix("event:") {
                    value.trim().clone_into(&mut name);
                } else if let Some(value) = line.strip_prefix("data:") {
                    data.push_str(value.trim());
                }
            }
            // Deltas carry no id.
            let data: serde_json::Value = serde_json::from_str(&data).unwrap();
            match id {
                Some(id) => received.push((id, name, data)),
                None if name == "message.delta" => {
                    deltas.push(data["text"].as_str().unwrap().to_owned());
                }
                None => {}
            }
        }
    }
    (received, deltas)
}

/// Returns the sessions a node host started workers for, from its JSON log lines.
fn sessions_in_log(log: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|line| line["fields"]["message"] == "started a worker")
        .filter_map(|line| line["fields"]["session_key"].as_str().map(str::to_owned))
        .collect()
}

/// Returns how many turns ended (`turn.completed` or `turn.failed`) in `received`.
fn ended_turns(received: &Received) -> usize {
    received
        .iter()
        .filter(|(_, name, _)| name == "turn.completed" || name == "turn.failed")
        .count()
}

/// A message a replica acknowledged, and which replica it was.
struct Acknowledged {
    session: String,
    text: String,
    turn_id: String,
    /// The URL of the replica that acknowledged it.
    by: String,
}

/// Returns what a node host's connection attempts after its last lost link came to, from its
/// JSON log lines: `connected to the gateway` or `connection to the gateway failed`, in order.
fn attempts_after_the_last_disconnect(log: &Path) -> Vec<String> {
    let messages: Vec<String> = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|line| line["fields"]["message"].as_str().map(str::to_owned))
        .collect();
    let last = messages
        .iter()
        .rposition(|message| message == "disconnected from the gateway; reconnecting")
        .expect("the node never lost its link");
    messages[last + 1..]
        .iter()
        .filter(|message| {
            *message == "connected to the gateway" || *message == "connection to the gateway failed"
        })
        .cloned()
        .collect()
}

/// Three replicas and two node hosts: 200 sessions × 5 messages posted round-robin across the
/// replicas all complete; each transcript is in order with contiguous sequence numbers; each
/// session was placed once and ran on one node only (the audit trail and the node logs).
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_three_replicas_and_two_nodes_run_200_sessions_of_5_messages_in_order() {
    const SESSIONS: usize = 200;
    const MESSAGES: usize = 5;
    let cluster = Cluster::start(3, DEFAULT_LEASE).await;
    let nodes = [
        cluster.node("harness-a", 0, 32),
        cluster.node("harness-b", 1, 32),
    ];
    let held = cluster.wait_nodes(2, 2).await;
    assert_eq!(
        held.values().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from(["r0".to_owned(), "r1".to_owned()]),
        "each node links to the first replica it was given"
    );
    // Both nodes' capacity shows on the replica that holds neither, in `/metrics` and in
    // `GET /v1/nodes`.
    let deadline = Instant::now() + WAIT;
    loop {
        let metrics = cluster.replicas[2]
            .get("/metrics")
            .await
            .text()
            .await
            .unwrap();
        let gauge = |name: &str| {
            metrics
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{name} ")))
                .and_then(|value| value.trim().parse::<f64>().ok())
        };
        if gauge("gatehouse_cluster_worker_capacity") == Some(64.0) {
            assert_eq!(gauge("gatehouse_cluster_nodes"), Some(2.0));
            assert_eq!(gauge("gatehouse_replicas_live"), Some(3.0));
            assert_eq!(gauge("gatehouse_node_connections"), Some(0.0));
            break;
        }
        assert!(Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listed: NodeList = cluster.replicas[2].get_typed("/v1/nodes").await;
    assert_eq!(
        listed
            .nodes
            .iter()
            .map(|node| node.worker_capacity)
            .collect::<Vec<_>>(),
        [Some(32), Some(32)]
    );
    // Posted concurrently, 16 sessions at a time; each session's messages in order, each
    // message to the next replica round-robin.
    let cluster = &cluster;
    let turns: Vec<Vec<String>> = futures_util::stream::iter(0..SESSIONS)
        .map(|session| async move {
            let mut ids = Vec::new();
            for message in 0..MESSAGES {
                let replica = &cluster.replicas[(session * MESSAGES + message) % 3];
                let text = format!("/say s{session}-m{message}");
                ids.push(posted_with_retries(replica, &format!("s{session}"), &text, &text).await);
            }
            ids
        })
        .buffered(16)
        .collect()
        .await;
    for (session, ids) in turns.iter().enumerate() {
        for (message, turn_id) in ids.iter().enumerate() {
            let turn = wait_status(
                &cluster.replicas[message % 3],
                turn_id,
                &["completed", "failed", "interrupted", "aborted"],
            )
            .await;
            assert_eq!(
                (turn["status"].as_str(), turn["reply"].as_str()),
                (
                    Some("completed"),
                    Some(format!("s{session}-m{message}").as_str())
                ),
                "{turn}"
            );
        }
    }
    for (session, ids) in turns.iter().enumerate() {
        let key = format!("s{session}");
        let messages = transcript(&cluster.replicas[session % 3], &key).await;
        let seqs: Vec<i64> = messages.iter().map(|message| message.0).collect();
        assert_eq!(seqs, (1..=10).collect::<Vec<i64>>(), "{key}: {messages:?}");
        for role in ["user", "assistant"] {
            let turn_order: Vec<&str> = messages
                .iter()
                .filter(|message| message.1 == role)
                .map(|message| message.3.as_str())
                .collect();
            assert_eq!(
                turn_order,
                ids.iter().map(String::as_str).collect::<Vec<_>>(),
                "{key} {role}"
            );
        }
        for (index, turn_id) in ids.iter().enumerate() {
            let asked = messages
                .iter()
                .position(|m| m.1 == "user" && &m.3 == turn_id);
            let answered = messages
                .iter()
                .position(|m| m.1 == "assistant" && &m.3 == turn_id);
            assert!(
                asked < answered,
                "{key}: turn {index} answered before it was asked"
            );
        }
    }
    // Placed once each, never moved; and each session's workers ran on one node.
    let placed = audited(&cluster.replicas[0], "session.placed").await;
    let mut placements: BTreeMap<String, usize> = BTreeMap::new();
    for row in &placed {
        *placements
            .entry(row["details"]["sessionKey"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(placements.len(), SESSIONS);
    assert!(
        placements.values().all(|count| *count == 1),
        "{placements:?}"
    );
    assert_eq!(
        audited(&cluster.replicas[1], "session.moved").await,
        Vec::<serde_json::Value>::new()
    );
    let on_a = sessions_in_log(&nodes[0].stderr_log);
    let on_b = sessions_in_log(&nodes[1].stderr_log);
    assert_eq!(
        on_a.intersection(&on_b).count(),
        0,
        "a session ran on both nodes"
    );
    assert_eq!(on_a.len() + on_b.len(), SESSIONS);
    assert!(
        !on_a.is_empty() && !on_b.is_empty(),
        "one node took every session"
    );
}

/// kill -9 of the replica holding the node's link while 50 turns run: the node reconnects to a
/// survivor; the running turns end `interrupted` and are not replayed; every message a replica
/// acknowledged, before or after, is stored exactly once; new turns complete; event streams on
/// the survivors see every durable event.
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_kill_9_of_the_replica_holding_a_node_interrupts_its_turns_and_loses_nothing() {
    const RUNNING: usize = 50;
    const ACKS: usize = 40;
    const ACK_SESSIONS: usize = 8;
    let mut cluster = Cluster::start(3, "3").await;
    let node = cluster.node("harness", 0, 64);
    assert_eq!(
        cluster
            .wait_nodes(1, 1)
            .await
            .into_values()
            .collect::<Vec<_>>(),
        ["r0"]
    );
    // A word a second: no turn can end before the kill, even on a loaded machine, so a reply
    // in a transcript could only be a replay. (At 200 ms a word, a turn that reached its 100th
    // word just before the kill committed its reply and was then rightly interrupted.)
    let slow = format!("/slow 1000 {}", vec!["word"; 100].join(" "));
    let mut running = Vec::new();
    for index in 0..RUNNING {
        let via = &cluster.replicas[1 + index % 2];
        running.push(posted(via, &format!("run-{index}"), &slow, &format!("run-{index}")).await);
    }
    // Streams on the survivors, opened before the kill, for a tenth of the sessions.
    let streams: Vec<_> = (0..RUNNING)
        .step_by(10)
        .map(|index| {
            let via = 1 + index % 2;
            let session = format!("run-{index}");
            let (url, token) = (
                cluster.replicas[via].url.clone(),
                cluster.replicas[via].token.clone(),
            );
            tokio::spawn(async move {
                follow(&url, &token, &session, |received| {
                    received.iter().any(|(_, name, _)| name == "turn.failed")
                })
                .await
            })
        })
        .collect();
    for turn_id in &running {
        wait_status(&cluster.replicas[1], turn_id, &["running"]).await;
    }
    // Streams on the survivors, opened before any of it, for two of the sessions that get
    // acknowledged messages: each ends once its 5 turns have ended, before or after the kill.
    let ack_streams: Vec<_> = (0..2)
        .map(|index| {
            let session = format!("ack-{index}");
            let (url, token) = (
                cluster.replicas[1 + index].url.clone(),
                cluster.replicas[1 + index].token.clone(),
            );
            tokio::spawn(async move {
                let received = follow(&url, &token, &session, |received| {
                    ended_turns(received) == ACKS / ACK_SESSIONS
                })
                .await;
                (session, received)
            })
        })
        .collect();
    // Acknowledged messages keep coming while the replica dies, round-robin over all three
    // replicas, the one that dies included: a post that gets no acknowledgement is sent again
    // with the same idempotency key to the next replica, until one acknowledges it.
    let acknowledged = {
        let replicas: Vec<(String, String)> = cluster
            .replicas
            .iter()
            .map(|replica| (replica.url.clone(), replica.token.clone()))
            .collect();
        tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            let mut next = 0;
            for index in 0..ACKS {
                let session = format!("ack-{}", index % ACK_SESSIONS);
                let text = format!("/say ack {index}");
                loop {
                    let (url, token) = &replicas[next % replicas.len()];
                    next += 1;
                    let response = reqwest::Client::new()
                        .post(format!("{url}/v1/sessions/{session}/messages"))
                        .bearer_auth(token)
                        .json(&serde_json::json!({"text": text, "idempotencyKey": text}))
                        .timeout(WAIT)
                        .send()
                        .await;
                    if let Ok(response) = response
                        && response.status() == 202
                    {
                        let body: serde_json::Value = response.json().await.unwrap();
                        acknowledged.push(Acknowledged {
                            session,
                            text,
                            turn_id: body["turnId"].as_str().unwrap().to_owned(),
                            by: url.clone(),
                        });
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            acknowledged
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let killed_at = Instant::now();
    cluster.replicas[0].process.kill();
    // The node reconnects to a survivor: on its first attempt after the link broke, to the
    // next URL on its list, after one reconnect pause (docs/operations.md).
    let held = cluster
        .wait_holders(1, |held| {
            held.len() == 1 && !held.values().any(|holder| holder == "r0")
        })
        .await;
    let reconnected = killed_at.elapsed();
    let holder = held.into_values().next().unwrap();
    assert!(["r1", "r2"].contains(&holder.as_str()), "{holder}");
    let attempts = attempts_after_the_last_disconnect(&node.stderr_log);
    assert_eq!(
        attempts,
        ["connected to the gateway"],
        "the node did not relink on its first attempt: {}",
        node.stderr()
    );
    assert!(
        reconnected < Duration::from_secs(10),
        "the node took {reconnected:?} to reconnect"
    );
    // The running turns end interrupted and are never replayed.
    for turn_id in &running {
        let turn = wait_status(
            &cluster.replicas[2],
            turn_id,
            &["interrupted", "completed", "failed"],
        )
        .await;
        assert_eq!(turn["status"], "interrupted", "{turn}");
    }
    for index in 0..RUNNING {
        let messages = transcript(&cluster.replicas[1], &format!("run-{index}")).await;
        assert_eq!(
            messages.iter().map(|m| m.1.as_str()).collect::<Vec<_>>(),
            ["user"],
            "run-{index} was replayed: {messages:?}"
        );
    }
    // Every acknowledged message is stored once, and its turn completes.
    let acknowledged = acknowledged.await.unwrap();
    assert_eq!(acknowledged.len(), ACKS);
    // Each replica acknowledged some: the one that died before it died, the survivors before
    // and after.
    for replica in &cluster.replicas {
        assert!(
            acknowledged.iter().any(|ack| ack.by == replica.url),
            "{} acknowledged nothing",
            replica.url
        );
    }
    for Acknowledged {
        session,
        text,
        turn_id,
        ..
    } in &acknowledged
    {
        let turn = wait_status(
            &cluster.replicas[2],
            turn_id,
            &["completed", "failed", "interrupted"],
        )
        .await;
        let messages = transcript(&cluster.replicas[1], session).await;
        let stored = messages
            .iter()
            .filter(|m| m.1 == "user" && &m.2 == text)
            .count();
        assert_eq!(stored, 1, "{text} in {session}: {messages:?}");
        // A message acknowledged before the kill could have been running on r0.
        assert!(
            matches!(turn["status"].as_str(), Some("completed" | "interrupted")),
            "{turn}"
        );
        let seqs: Vec<i64> = messages.iter().map(|m| m.0).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as i64).collect::<Vec<_>>(),
            "{session}"
        );
    }
    // New turns complete, through either survivor.
    for (index, replica) in cluster.replicas[1..].iter().enumerate() {
        assert_says(replica, &format!("after-{index}"), "after").await;
    }
    // The streams on the survivors saw every durable event of their session, in order.
    for stream in streams {
        let received = stream.await.unwrap();
        let names: Vec<(i64, &str)> = received
            .iter()
            .map(|(seq, name, _)| (*seq, name.as_str()))
            .collect();
        assert_eq!(
            names,
            [(1, "turn.queued"), (2, "turn.started"), (3, "turn.failed")],
            "{received:?}"
        );
        assert_eq!(received[2].2["status"], "interrupted");
    }
    // The streams that followed acknowledged sessions across the kill saw every durable event
    // of them, in order and without gaps: the whole log, as the other survivor replays it, and
    // as it replays it from the middle (`after=`).
    for stream in ack_streams {
        let (session, live) = stream.await.unwrap();
        let seqs: Vec<i64> = live.iter().map(|(seq, _, _)| *seq).collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as i64).collect::<Vec<_>>(),
            "{live:?}"
        );
        let other = &cluster.replicas[if session == "ack-0" { 2 } else { 1 }];
        let replayed = follow(&other.url, &other.token, &session, |received| {
            received.len() >= live.len()
        })
        .await;
        let names = |received: &[(i64, String, serde_json::Value)]| -> Vec<(i64, String)> {
            received
                .iter()
                .map(|(seq, name, _)| (*seq, name.clone()))
                .collect()
        };
        assert_eq!(names(&replayed), names(&live), "{session}");
        let middle = live[live.len() / 2].0;
        let resumed = follow_after(&other.url, &other.token, &session, middle, |received| {
            received.len() >= live.len() - live.len() / 2 - 1
        })
        .await;
        assert_eq!(
            names(&resumed),
            names(&live[live.len() / 2 + 1..]),
            "{session}"
        );
    }
    // The survivors took the dead replica's lease over; it is listed as not live.
    let replicas: ReplicaList = cluster.replicas[1].get_typed("/v1/replicas").await;
    let live: Vec<(String, bool)> = replicas
        .replicas
        .into_iter()
        .map(|replica| (replica.replica_id, replica.live))
        .collect();
    assert_eq!(
        live,
        [
            ("r0".to_owned(), false),
            ("r1".to_owned(), true),
            ("r2".to_owned(), true)
        ]
    );
}

/// A replica frozen with SIGSTOP past its lease, then resumed, commits nothing for the turns it
/// had: the other replica marked them interrupted, and the node's late output is refused.
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_a_replica_frozen_past_its_lease_commits_nothing_for_its_turns() {
    let cluster = Cluster::start(2, SHORT_LEASE).await;
    let _node = cluster.node("harness", 0, 8);
    assert_eq!(
        cluster
            .wait_nodes(1, 1)
            .await
            .into_values()
            .collect::<Vec<_>>(),
        ["r0"]
    );
    let slow = format!("/slow 150 {}", vec!["late"; 40].join(" "));
    let mut turns = Vec::new();
    for index in 0..3 {
        let session = format!("frozen-{index}");
        turns.push((
            session.clone(),
            posted(&cluster.replicas[1], &session, &slow, &session).await,
        ));
    }
    for (_, turn_id) in &turns {
        wait_status(&cluster.replicas[1], turn_id, &["running"]).await;
    }
    let pid = rustix::process::Pid::from_raw(cluster.replicas[0].process.pid() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::STOP).unwrap();
    // Past its lease, the other replica takes the turns over.
    for (_, turn_id) in &turns {
        let turn = wait_status(
            &cluster.replicas[1],
            turn_id,
            &["interrupted", "completed", "failed"],
        )
        .await;
        assert_eq!(turn["status"], "interrupted", "{turn}");
    }
    rustix::process::kill_process(pid, rustix::process::Signal::CONT).unwrap();
    // The resumed replica notices its lease is gone and stops its turns; whatever it writes
    // for them meanwhile (the node's replies, the turns' ends) is refused.
    let deadline = Instant::now() + WAIT;
    while !cluster.replicas[0]
        .process
        .stderr()
        .contains("REPLICA_LEASE_LOST")
    {
        assert!(
            Instant::now() < deadline,
            "{}",
            cluster.replicas[0].process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(7)).await;
    for (session, turn_id) in &turns {
        let turn = cluster.replicas[1]
            .get_json(&format!("/v1/turns/{turn_id}"))
            .await;
        assert_eq!(turn["status"], "interrupted", "{turn}");
        let messages = transcript(&cluster.replicas[1], session).await;
        assert_eq!(
            messages.iter().map(|m| m.1.as_str()).collect::<Vec<_>>(),
            ["user"],
            "{session}: {messages:?}"
        );
        let replica = &cluster.replicas[1];
        let received = follow(&replica.url, &replica.token, session, |received| {
            received.iter().any(|(_, name, _)| name == "turn.failed")
        })
        .await;
        let names: Vec<&str> = received.iter().map(|(_, name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            ["turn.queued", "turn.started", "turn.failed"],
            "{received:?}"
        );
    }
    // The resumed replica did try to end each of them (its node link had gone silent), and the
    // store refused each of those ends, as it refuses a message.
    let log = cluster.replicas[0].process.stderr();
    for (_, turn_id) in &turns {
        assert!(
            log.lines().any(|line| line.contains(turn_id.as_str())
                && line.contains("the store refused this end of the turn")),
            "the frozen replica's end of {turn_id} was not refused: {log}"
        );
    }
    // Both serve on: a new turn completes, on the node wherever it linked again.
    cluster.wait_nodes(1, 1).await;
    let turn_id = posted(&cluster.replicas[0], "fresh", "/say fresh", "fresh").await;
    let turn = wait_status(&cluster.replicas[1], &turn_id, &["completed", "failed"]).await;
    assert_eq!(turn["reply"], "fresh", "{turn}");
}

/// A document PUT, a workspace GET, a memory read, the workspace's skills and an abort sent to
/// a replica without the node's link are carried to the replica that has it; a path with `..`
/// is refused before anything is sent.
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_documents_workspace_reads_and_aborts_reach_the_node_through_its_replica() {
    let cluster = Cluster::start(2, SHORT_LEASE).await;
    let _node = cluster.node("harness", 0, 8);
    assert_eq!(
        cluster
            .wait_nodes(1, 1)
            .await
            .into_values()
            .collect::<Vec<_>>(),
        ["r0"]
    );
    let other = &cluster.replicas[1];
    let client = reqwest::Client::new();
    let put = client
        .put(format!("{}/v1/agents/main/files/AGENTS.md", other.url))
        .bearer_auth(&other.token)
        .json(&serde_json::json!({"content": "# Written through r1\n"}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200, "{}", put.text().await.unwrap());
    let document = other.get_json("/v1/agents/main/files/AGENTS.md").await;
    assert_eq!(document["content"], "# Written through r1\n");
    let raw = other.get("/v1/agents/main/workspace/AGENTS.md").await;
    assert_eq!(raw.status(), 200);
    assert_eq!(raw.text().await.unwrap(), "# Written through r1\n");
    // The file is on the node's disk, where r0 reads it too.
    let on_r0 = cluster.replicas[0]
        .get("/v1/agents/main/workspace/AGENTS.md")
        .await;
    assert_eq!(on_r0.text().await.unwrap(), "# Written through r1\n");
    let missing = other.get("/v1/agents/main/workspace/nope.md").await;
    assert_eq!(missing.status(), 404);
    // A memory file the node host holds is read through r1 too, and a missing one keeps the
    // node's code.
    std::fs::write(
        cluster.dirs.base.join("harness/workspace/MEMORY.md"),
        "first\nsecond\nthird\n",
    )
    .unwrap();
    let memory = other
        .get_json("/v1/memory/get?path=MEMORY.md&from=2&lines=1")
        .await;
    assert_eq!(
        (&memory["text"], &memory["from"], &memory["totalLines"]),
        (
            &serde_json::json!("second"),
            &serde_json::json!(2),
            &serde_json::json!(3)
        ),
        "{memory}"
    );
    let no_memory = other.get("/v1/memory/get?path=memory/none.md").await;
    assert_eq!(
        no_memory.status(),
        404,
        "{}",
        no_memory.text().await.unwrap()
    );
    // So are the Harness workspace's skills in r1's catalog.
    let skill_dir = cluster.dirs.base.join("harness/workspace/skills/notes");
    std::fs::create_dir_all(&skill_dir).unwrap();
    std::fs::write(
        skill_dir.join("SKILL.md"),
        "---\nname: notes\ndescription: Takes notes.\n---\n# notes\n",
    )
    .unwrap();
    let catalog = other.get_json("/v1/skills").await;
    let listed: Vec<(&str, &str)> = catalog["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|skill| {
            (
                skill["name"].as_str().unwrap(),
                skill["host"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(listed, [("notes", "harness")], "{catalog}");
    assert_eq!(catalog["warnings"], serde_json::json!([]), "{catalog}");
    let escape = other
        .get("/v1/agents/main/workspace/a/..%2F..%2Fetc/passwd")
        .await;
    assert_eq!(escape.status(), 403, "{}", escape.text().await.unwrap());
    // A client of r1 gets the deltas of a turn r0 runs, through PostgreSQL's notifications.
    let response = open_events(&other.url, &other.token, "streamed", 0).await;
    let stream = tokio::spawn(async move {
        read_events(response, "streamed", |received| {
            received.iter().any(|(_, name, _)| name == "turn.completed")
        })
        .await
    });
    let streamed = posted(other, "streamed", "/slow 50 one two three four", "streamed").await;
    let turn = wait_status(other, &streamed, &["completed", "failed"]).await;
    assert_eq!(turn["reply"], "one two three four", "{turn}");
    let (_, deltas) = stream.await.unwrap();
    assert_eq!(deltas.concat(), "one two three four", "{deltas:?}");
    // An abort on r1 stops the turn r0 runs.
    let hanging = posted(other, "hang", "/hang", "hang").await;
    wait_status(other, &hanging, &["running"]).await;
    let aborted: serde_json::Value = client
        .post(format!("{}/v1/sessions/hang/abort", other.url))
        .bearer_auth(&other.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        aborted,
        serde_json::json!({"aborted": true}),
        "{}",
        other.process.stderr()
    );
    let turn = wait_status(other, &hanging, &["aborted", "failed", "completed"]).await;
    assert_eq!(turn["status"], "aborted", "{turn}");
    // The replica routes take only the replica key.
    let forged = client
        .post(format!(
            "{}/internal/replica/workspace/fetch",
            cluster.replicas[0].url
        ))
        .bearer_auth(&other.token)
        .json(&serde_json::json!({"path": "AGENTS.md"}))
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 401);
}

/// kill -9 of a node host: its sessions' turns fail while it is away; after a move they run on
/// the other node, through the other replica, with their workspace restored from the last
/// checkpoint.
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_a_dead_node_hosts_sessions_fail_until_moved_then_run_on_the_other_node() {
    let cluster = Cluster::start(2, SHORT_LEASE).await;
    let mut node_a = cluster.node("harness-a", 0, 8);
    cluster.wait_nodes(1, 1).await;
    let wrote = posted(
        &cluster.replicas[1],
        "s",
        r#"/tool write {"path":"notes.txt","content":"written on a"}"#,
        "write",
    )
    .await;
    let turn = wait_status(&cluster.replicas[1], &wrote, &["completed", "failed"]).await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let _node_b = cluster.node("harness-b", 1, 8);
    let held = cluster.wait_nodes(0, 2).await;
    node_a.kill();
    let failed = posted(&cluster.replicas[0], "s", "/say are you there", "there").await;
    let turn = wait_status(&cluster.replicas[0], &failed, &["failed", "completed"]).await;
    assert_eq!(turn["error"]["code"], "DEPENDENCY_UNAVAILABLE", "{turn}");
    // Node B serves: the turn failed because its own node is gone, and says so.
    assert!(
        turn["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("which is not connected"),
        "{turn}"
    );
    let moved = reqwest::Client::new()
        .post(format!("{}/v1/sessions/s/move", cluster.replicas[0].url))
        .bearer_auth(&cluster.replicas[0].token)
        .send()
        .await
        .unwrap();
    assert_eq!(moved.status(), 200);
    assert_eq!(
        moved.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!({"moved": true})
    );
    let read = posted(
        &cluster.replicas[0],
        "s",
        r#"/tool read {"path":"notes.txt"}"#,
        "read",
    )
    .await;
    let turn = wait_status(&cluster.replicas[0], &read, &["completed", "failed"]).await;
    assert!(
        turn["reply"]
            .as_str()
            .unwrap_or_default()
            .contains("written on a"),
        "{turn}"
    );
    let sessions = cluster.replicas[1].get_json("/v1/sessions").await;
    let node = sessions["sessions"][0]["nodeId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        held.get(&node).map(String::as_str),
        Some("r1"),
        "{sessions}"
    );
}

/// A load balancer in front of the replicas, as a platform puts one: a TCP listener on
/// loopback that sends each new connection to the next replica in turn that accepts it.
struct Balancer {
    url: String,
    _task: tokio::task::JoinHandle<()>,
}

impl Balancer {
    async fn new(replicas: &[Gateway]) -> Balancer {
        let upstreams: Vec<String> = replicas
            .iter()
            .map(|replica| replica.url.trim_start_matches("http://").to_owned())
            .collect();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let mut connections = tokio::task::JoinSet::new();
            let mut next = 0;
            while let Ok((mut inbound, _)) = listener.accept().await {
                let order: Vec<String> = (0..upstreams.len())
                    .map(|offset| upstreams[(next + offset) % upstreams.len()].clone())
                    .collect();
                next += 1;
                connections.spawn(async move {
                    for upstream in order {
                        if let Ok(mut outbound) = tokio::net::TcpStream::connect(&upstream).await {
                            let _ =
                                tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                            return;
                        }
                    }
                });
            }
        });
        Balancer { url, _task: task }
    }
}

/// A node host that knows the Gateway by one load-balanced URL: when the replica holding its
/// link is killed, it reconnects through the same URL to a survivor, and turns go on.
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_a_node_behind_one_load_balanced_url_reconnects_to_a_survivor() {
    let mut cluster = Cluster::start(2, SHORT_LEASE).await;
    let balancer = Balancer::new(&cluster.replicas).await;
    let stderr_log = cluster.logs.join("node-balanced.log");
    let code_file = cluster.logs.join("setup-code-balanced");
    std::fs::write(&code_file, cluster.replicas[0].setup_code(600)).unwrap();
    let model = format!("openai-chat:{}/v1:mock-model", cluster.mock_url);
    let child = crate::suite::support::gatehouse()
        .args(["node", "--runtime", "native", "--gateway", &balancer.url])
        .arg("--root")
        .arg(cluster.dirs.base.join("harness"))
        .arg("--setup-code-file")
        .arg(&code_file)
        .args(["--model", &model, "--model-key-env", "MOCK_MODEL_KEY"])
        .env("MOCK_MODEL_KEY", "mock-model-test-key")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&stderr_log).unwrap())
        .spawn()
        .unwrap();
    let node = Process::from_child(child, stderr_log);
    let first = cluster.wait_nodes(1, 1).await.into_values().next().unwrap();
    let (holder, survivor) = match first.as_str() {
        "r0" => (0, 1),
        _ => (1, 0),
    };
    assert_says(&cluster.replicas[survivor], "lb", "before").await;
    cluster.replicas[holder].process.kill();
    let survivor_id = format!("r{survivor}");
    cluster
        .wait_holders(survivor, |held| {
            held.values().collect::<Vec<_>>() == [&survivor_id]
        })
        .await;
    assert_says(&cluster.replicas[survivor], "lb", "after").await;
    // The node stayed up throughout: one host, relinked.
    assert!(node.stderr().contains("connected to the gateway"));
}

/// Issue 34: a Matrix channel's sync loop runs on one of three replicas at a time; a SIGKILL of
/// that replica moves it to another within the channel's lease, and a message sent meanwhile is
/// answered once.
#[tokio::test(flavor = "multi_thread")]
async fn issue_34_the_matrix_sync_loop_runs_on_one_replica_and_moves_when_it_dies() {
    use crate::suite::synapse::Synapse;
    let base = dirs();
    let synapse = Synapse::start(&base.base.join("synapse"), &base.base.join("logs")).await;
    std::fs::create_dir_all(base.base.join("logs")).unwrap();
    let bot = synapse.register("gatehouse-bot", "bot-password").await;
    let alice = synapse.register("alice", "alice-password").await;
    let config = crate::suite::matrix::matrix_config(
        &base.base,
        &synapse,
        &bot,
        &format!("allow-from = [{:?}]\n", alice.user_id),
    );
    let mut cluster =
        Cluster::start_with(3, SHORT_LEASE, vec![String::from("--config"), config]).await;
    let node = cluster.node("node-a", 0, 4);
    cluster.wait_nodes(0, 1).await;
    let first = wait_channel_holder(&cluster, "team").await;
    let index: usize = first.trim_start_matches('r').parse().unwrap();
    crate::suite::matrix::wait_connected(&cluster.replicas[index]).await;
    let dm = synapse.create_room(&alice, true, &[&bot.user_id]).await;
    crate::suite::matrix::wait_membership(&synapse, &alice, &dm, &bot, "join").await;
    synapse.send_text(&alice, &dm, "/say one", &[]).await;
    assert_eq!(
        crate::suite::matrix::wait_bot_messages(&synapse, &alice, &bot, &dm, 1).await,
        vec!["one"]
    );

    // SIGKILL the holder; a message sent at once is answered by the survivors.
    cluster.replicas[index].process.kill();
    synapse.send_text(&alice, &dm, "/say two", &[]).await;
    assert_eq!(
        crate::suite::matrix::wait_bot_messages(&synapse, &alice, &bot, &dm, 2).await,
        vec!["one", "two"]
    );
    let second = channel_holder(&cluster, "team").await.unwrap();
    assert_ne!(second, first, "the dead replica still holds the channel");
    crate::suite::matrix::still(&synapse, &alice, &bot, &dm, 2).await;
    drop(node);
}

/// The replica holding `channel`'s lease, as the store says.
async fn channel_holder(cluster: &Cluster, channel: &str) -> Option<String> {
    let mut connection = sqlx::PgConnection::connect(&cluster.state.store)
        .await
        .unwrap();
    sqlx::query_scalar("SELECT holder FROM channel_state WHERE channel = $1")
        .bind(channel)
        .fetch_optional(&mut connection)
        .await
        .unwrap()
}

/// Waits until a replica holds `channel`'s lease; returns it.
async fn wait_channel_holder(cluster: &Cluster, channel: &str) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(holder) = channel_holder(cluster, channel).await {
            return holder;
        }
        assert!(Instant::now() < deadline, "no replica took {channel}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A Telegram channel on three replicas: one replica at a time polls the bot (the stand-in saw
/// no two long polls at once, which the Bot API would answer with 409), and when that replica
/// is SIGKILLed another takes the channel's lease and answers; nothing is answered twice.
#[tokio::test(flavor = "multi_thread")]
async fn issue_36_one_replica_polls_a_telegram_bot_and_another_takes_over_when_it_dies() {
    use crate::suite::telegram_api::ChatKind;
    use crate::suite::telegram_api::TelegramApi;
    let base = dirs();
    std::fs::create_dir_all(base.base.join("logs")).unwrap();
    let api =
        TelegramApi::start(crate::suite::telegram::TOKEN, crate::suite::telegram::bot()).await;
    let config = crate::suite::telegram::telegram_config(&base, &api, "");
    let mut cluster =
        Cluster::start_with(3, SHORT_LEASE, vec![String::from("--config"), config]).await;
    let node = cluster.node("node-a", 0, 4);
    cluster.wait_nodes(0, 1).await;
    let first = wait_channel_holder(&cluster, "tg").await;
    let index: usize = first.trim_start_matches('r').parse().unwrap();
    let alice = crate::suite::telegram::alice();
    let texts = |sent: Vec<crate::suite::telegram_api::Sent>| -> Vec<String> {
        sent.into_iter().map(|sent| sent.text).collect()
    };
    api.user_writes(4242, ChatKind::Private, &alice, "/say one", None, None);
    assert_eq!(
        texts(crate::suite::telegram::wait_sent(&api, 4242, 1).await),
        ["one"]
    );

    // SIGKILL the holder; a message sent at once is answered by a survivor.
    cluster.replicas[index].process.kill();
    api.user_writes(4242, ChatKind::Private, &alice, "/say two", None, None);
    assert_eq!(
        texts(crate::suite::telegram::wait_sent(&api, 4242, 2).await),
        ["one", "two"]
    );
    let second = channel_holder(&cluster, "tg").await.unwrap();
    assert_ne!(second, first, "the dead replica still holds the channel");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        texts(crate::suite::telegram::wait_sent(&api, 4242, 2).await),
        ["one", "two"]
    );
    assert_eq!(api.violations(), Vec::<String>::new());
    drop(node);
}

/// Posts `text` to `session` on `gateway` with the API key `secret`; returns the status and
/// the answer.
async fn post_as(
    gateway: &Gateway,
    secret: &str,
    session: &str,
    text: &str,
) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/sessions/{session}/messages", gateway.url))
        .bearer_auth(secret)
        .json(&serde_json::json!({"text": text}))
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// One key's daily token budget on three replicas of one PostgreSQL store: the tokens a turn
/// used through one replica count on every other, so once the key's turns (through two
/// replicas) used its budget, all three refuse it before admission with `BUDGET_EXHAUSTED`,
/// and `GET /v1/usage` on the third sums exactly those turns.
#[tokio::test(flavor = "multi_thread")]
async fn issue_35_three_replicas_enforce_one_key_budget_together() {
    let cluster = Cluster::start(3, DEFAULT_LEASE).await;
    let _node = cluster.node("harness", 0, 8);
    cluster.wait_nodes(0, 1).await;
    // What one turn of this text in a fresh session uses, measured with the operator token.
    let probe = posted(&cluster.replicas[0], "probe", "/say budget", "probe").await;
    let probe = wait_status(&cluster.replicas[0], &probe, &["completed"]).await;
    let per_turn = probe["usage"]["totalTokens"].as_u64().unwrap();
    assert!(per_turn > 0, "{probe}");

    let created = reqwest::Client::new()
        .post(format!("{}/v1/keys", cluster.replicas[1].url))
        .bearer_auth(&cluster.replicas[1].token)
        .json(&serde_json::json!({
            "name": "tenant", "scopes": ["chat"], "tokensPerDay": 2 * per_turn
        }))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 200);
    let secret = created.json::<serde_json::Value>().await.unwrap()["key"]
        .as_str()
        .unwrap()
        .to_owned();
    // Two turns through two replicas: each admitted while the key is under its budget.
    for (index, session) in [(0, "t-a"), (1, "t-b")] {
        let (status, accepted) =
            post_as(&cluster.replicas[index], &secret, session, "/say budget").await;
        assert_eq!(status, 202, "{accepted}");
        let turn_id = accepted["turnId"].as_str().unwrap();
        let turn = wait_status(&cluster.replicas[index], turn_id, &["completed"]).await;
        assert_eq!(turn["usage"]["totalTokens"], per_turn, "{turn}");
    }
    for replica in &cluster.replicas {
        let (status, refused) = post_as(replica, &secret, "t-c", "/say budget").await;
        assert_eq!(
            (status, refused["error"]["code"].as_str()),
            (429, Some("BUDGET_EXHAUSTED")),
            "{}: {refused}",
            replica.url
        );
    }
    let usage = cluster.replicas[2].get_json("/v1/usage?groupBy=key").await;
    let tenant = usage["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["group"] == "tenant")
        .cloned()
        .unwrap_or_else(|| panic!("no row of the key: {usage}"));
    assert_eq!(tenant["turns"], 2, "{usage}");
    assert_eq!(tenant["totalTokens"], 2 * per_turn, "{usage}");
    assert_eq!(tenant["modelCalls"], 2, "{usage}");
    // Nothing of the refused messages was admitted.
    assert!(transcript(&cluster.replicas[2], "t-c").await.is_empty());
}
