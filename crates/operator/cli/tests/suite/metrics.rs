//! `/metrics` after a scripted run on real processes: a Gateway, a native node on the mock
//! model and a client that runs a turn, holds an event stream open, uploads media, searches
//! memory, reads a workspace file and sends a handshake the Gateway refuses. The exposition text
//! is parsed line by line (`# TYPE`, then `name{labels} value`), and every family is checked.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::time::Duration;
use std::time::Instant;

use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;
use tokio_tungstenite::tungstenite::Message;

use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::mock_model;
use crate::suite::support::start_mock_model_node_with;
use crate::suite::support::turn;

/// One sample line: `name{label="value",...} value`.
#[derive(Debug, Clone, PartialEq)]
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

/// A parsed exposition: the type of each family and every sample.
#[derive(Debug)]
struct Exposition {
    types: HashMap<String, String>,
    samples: Vec<Sample>,
}

impl Exposition {
    /// Parses the Prometheus text format, failing the test on any line it cannot read.
    fn parse(text: &str) -> Exposition {
        let mut types = HashMap::new();
        let mut samples = Vec::new();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            if let Some(comment) = line.strip_prefix('#') {
                let mut words = comment.split_whitespace();
                if words.next() == Some("TYPE") {
                    let name = words.next().expect("a TYPE line names a family");
                    let kind = words.next().expect("a TYPE line gives a type");
                    types.insert(name.to_owned(), kind.to_owned());
                }
                continue;
            }
            samples.push(parse_sample(line));
        }
        Exposition { types, samples }
    }

    /// Returns the samples of `name` whose labels include every pair of `labels`.
    fn matching(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|sample| {
                sample.name == name
                    && labels.iter().all(|(key, value)| {
                        sample.labels.get(*key).map(String::as_str) == Some(value)
                    })
            })
            .collect()
    }

    /// Returns the value of the one sample of `name` with exactly `labels`.
    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found: Vec<&Sample> = self
            .matching(name, labels)
            .into_iter()
            .filter(|sample| sample.labels.len() == labels.len())
            .collect();
        match found.as_slice() {
            [sample] => sample.value,
            other => panic!("expected one sample {name} {labels:?}, found {other:?}"),
        }
    }

    /// Returns the type a `# TYPE` line declares for `family`.
    fn kind(&self, family: &str) -> &str {
        self.types
            .get(family)
            .unwrap_or_else(|| panic!("no # TYPE line for {family}"))
    }
}

/// Parses `name{key="value",...} value` (labels optional), with `\\`, `\"` and `\n` escapes in
/// label values.
fn parse_sample(line: &str) -> Sample {
    let name_end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("no value in {line:?}"));
    let name = line[..name_end].to_owned();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(inner) = rest.strip_prefix('{') {
        let mut chars = inner.char_indices();
        let mut key = String::new();
        let close = loop {
            let (index, c) = chars
                .next()
                .unwrap_or_else(|| panic!("unclosed labels in {line:?}"));
            match c {
                '}' => break index,
                ',' => {}
                '=' => {
                    assert_eq!(chars.next().map(|(_, c)| c), Some('"'), "{line:?}");
                    let mut value = String::new();
                    loop {
                        match chars.next().map(|(_, c)| c) {
                            Some('"') => break,
                            Some('\\') => match chars.next().map(|(_, c)| c) {
                                Some('n') => value.push('\n'),
                                Some(escaped) => value.push(escaped),
                                None => panic!("a dangling escape in {line:?}"),
                            },
                            Some(c) => value.push(c),
                            None => panic!("an unclosed label value in {line:?}"),
                        }
                    }
                    labels.insert(std::mem::take(&mut key), value);
                }
                c => key.push(c),
            }
        };
        rest = &inner[close + 1..];
    }
    let value = rest.trim();
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        other => other
            .parse()
            .unwrap_or_else(|_| panic!("the value of {line:?} is not a number")),
    };
    Sample {
        name,
        labels,
        value,
    }
}

async fn scrape(gateway: &Gateway) -> Exposition {
    let response = reqwest::get(format!("{}/metrics", gateway.url))
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    Exposition::parse(&response.text().await.unwrap())
}

/// Scrapes until `ready` holds for the exposition, and returns it.
async fn scrape_until(
    gateway: &Gateway,
    what: &str,
    ready: impl Fn(&Exposition) -> bool,
) -> Exposition {
    let deadline = Instant::now() + WAIT;
    loop {
        let exposition = scrape(gateway).await;
        if ready(&exposition) {
            return exposition;
        }
        assert!(
            Instant::now() < deadline,
            "{what} never showed: {exposition:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Opens `/node` and sends a first frame that is not JSON, which the Gateway refuses.
async fn refused_handshake(gateway: &Gateway) {
    let (mut socket, _) = tokio_tungstenite::connect_async(gateway.ws_url())
        .await
        .unwrap();
    let challenge = tokio::time::timeout(WAIT, socket.next()).await.unwrap();
    assert!(
        matches!(challenge, Some(Ok(Message::Text(_)))),
        "{challenge:?}"
    );
    socket
        .send(Message::Text("not a frame".into()))
        .await
        .unwrap();
    loop {
        match tokio::time::timeout(WAIT, socket.next()).await.unwrap() {
            Some(Ok(Message::Close(frame))) => {
                let reason = frame
                    .map(|frame| frame.reason.to_string())
                    .unwrap_or_default();
                assert_eq!(reason, ErrorCode::InvalidRequest.as_str());
                return;
            }
            Some(Ok(_)) => {}
            Some(Err(_)) | None => return,
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn metrics_show_every_family_after_a_scripted_run() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);
    let code = gateway.setup_code(600);
    let harness = dirs.base.join("harness");
    std::fs::create_dir_all(harness.join("workspace")).unwrap();
    std::fs::write(
        harness.join("workspace/MEMORY.md"),
        "# Memory\n\nThe metrics dashboard lives on the second screen.\n",
    )
    .unwrap();
    let mut node = start_mock_model_node_with(
        &gateway,
        &harness,
        Some(&code),
        &logs,
        &mock_url,
        &["--capacity", "3"],
        &[],
    );
    gateway.wait_ready().await;
    let node_id = gateway.get_json("/v1/nodes").await["nodes"][0]["nodeId"]
        .as_str()
        .unwrap()
        .to_owned();

    // An event stream that stays open while the run goes on.
    let events = reqwest::Client::new()
        .get(format!("{}/v1/sessions/s/events", gateway.url))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    // A native turn that writes a file, so its checkpoint stores a blob.
    let wrote = turn(
        &gateway,
        "s",
        r#"/tool write {"path":"notes.txt","content":"checkpointed words"}"#,
    )
    .await;
    assert_eq!(wrote["status"], "completed", "{wrote}");
    let upload = b"an upload the media store keeps".to_vec();
    let uploaded =
        crate::suite::support::media_upload(&gateway.url, &gateway.token, upload.clone())
            .send()
            .await
            .unwrap();
    assert_eq!(uploaded.status(), 200);
    // A memory search that finds the file once the index has synced.
    let deadline = Instant::now() + WAIT;
    loop {
        let found = gateway.get_json("/v1/memory/search?q=dashboard").await;
        if found["results"]
            .as_array()
            .is_some_and(|hits| !hits.is_empty())
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "memory search never found the file: {found}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // An invoke: a workspace read through the node.
    let read = gateway.get("/v1/agents/main/workspace/MEMORY.md").await;
    assert_eq!(read.status(), 200);
    refused_handshake(&gateway).await;

    let node_labels = [("node", node_id.as_str())];
    // The node reports its slots when the session takes one, over the link.
    let metrics = scrape_until(
        &gateway,
        "the node's report of one slot in use",
        |metrics| {
            metrics
                .matching("gatehouse_node_worker_slots_in_use", &node_labels)
                .first()
                .is_some_and(|sample| sample.value == 1.0)
        },
    )
    .await;

    // Every family is declared with its type.
    for (family, kind) in [
        ("gatehouse_http_requests_total", "counter"),
        ("gatehouse_http_request_duration_seconds", "histogram"),
        ("gatehouse_turns_total", "counter"),
        ("gatehouse_turn_duration_seconds", "histogram"),
        ("gatehouse_runtime_turns_total", "counter"),
        ("gatehouse_runtime_turn_duration_seconds", "histogram"),
        ("gatehouse_active_sessions", "gauge"),
        ("gatehouse_turns_queued", "gauge"),
        ("gatehouse_turns_max_concurrent", "gauge"),
        ("gatehouse_node_connections", "gauge"),
        ("gatehouse_node_invokes_total", "counter"),
        ("gatehouse_node_invoke_duration_seconds", "histogram"),
        ("gatehouse_handshake_refusals_total", "counter"),
        ("gatehouse_node_worker_slots_in_use", "gauge"),
        ("gatehouse_node_worker_capacity", "gauge"),
        ("gatehouse_sse_subscribers", "gauge"),
        ("gatehouse_sse_dropped_total", "counter"),
        ("gatehouse_memory_index_files", "gauge"),
        ("gatehouse_memory_index_chunks", "gauge"),
        ("gatehouse_memory_sync_lag_seconds", "gauge"),
        ("gatehouse_media_stored_bytes", "gauge"),
        ("gatehouse_checkpoint_stored_bytes", "gauge"),
        ("gatehouse_replicas_live", "gauge"),
        ("gatehouse_cluster_nodes", "gauge"),
        ("gatehouse_cluster_worker_capacity", "gauge"),
        ("gatehouse_cluster_worker_slots_in_use", "gauge"),
    ] {
        assert_eq!(metrics.kind(family), kind, "{family}");
    }

    // HTTP: by route template, never by raw path.
    let posted = [
        ("method", "POST"),
        ("route", "/v1/sessions/{key}/messages"),
        ("status", "202"),
    ];
    assert!(metrics.value("gatehouse_http_requests_total", &posted) >= 1.0);
    assert!(metrics.value("gatehouse_http_request_duration_seconds_count", &posted) >= 1.0);
    let read_file = [
        ("method", "GET"),
        ("route", "/v1/agents/{agent}/workspace/{*path}"),
        ("status", "200"),
    ];
    assert_eq!(
        metrics.value("gatehouse_http_requests_total", &read_file),
        1.0
    );
    let upgraded = [("method", "GET"), ("route", "/node"), ("status", "101")];
    assert!(metrics.value("gatehouse_http_requests_total", &upgraded) >= 2.0);
    for sample in metrics.matching("gatehouse_http_requests_total", &[]) {
        let route = &sample.labels["route"];
        assert!(
            !route.contains("/s/") && !route.contains("MEMORY.md") && !route.contains("dashboard"),
            "a raw path is a label: {sample:?}"
        );
    }

    // Turns: the native turn completed, none is queued, the cap is the default.
    let completed = [("runtime", "native"), ("outcome", "completed")];
    assert!(metrics.value("gatehouse_runtime_turns_total", &completed) >= 1.0);
    assert!(metrics.value("gatehouse_runtime_turn_duration_seconds_count", &completed) >= 1.0);
    assert!(metrics.value("gatehouse_turns_total", &[("outcome", "completed")]) >= 1.0);
    assert_eq!(
        metrics.value("gatehouse_turns_total", &[("outcome", "failed")]),
        0.0
    );
    assert_eq!(metrics.value("gatehouse_active_sessions", &[]), 0.0);
    assert_eq!(metrics.value("gatehouse_turns_queued", &[]), 0.0);
    assert_eq!(
        metrics.value("gatehouse_turns_max_concurrent", &[]),
        gatehouse_gateway::DEFAULT_MAX_CONCURRENT_TURNS as f64
    );

    // Invokes: the turn, the workspace read and the memory reads, each with its latency.
    for command in ["agent.turn", "file.fetch", "workspace.memory"] {
        let ok = [("command", command), ("outcome", "ok")];
        assert!(
            metrics.value("gatehouse_node_invokes_total", &ok) >= 1.0,
            "{command}"
        );
        assert!(
            metrics.value("gatehouse_node_invoke_duration_seconds_count", &ok) >= 1.0,
            "{command}"
        );
    }

    // The link: one node, one refused handshake, the node's reported capacity.
    assert_eq!(metrics.value("gatehouse_node_connections", &[]), 1.0);
    let refused = [
        ("code", ErrorCode::InvalidRequest.as_str()),
        ("reason", "MALFORMED_FRAME"),
    ];
    assert_eq!(
        metrics.value("gatehouse_handshake_refusals_total", &refused),
        1.0
    );
    assert_eq!(
        metrics.value("gatehouse_node_worker_capacity", &node_labels),
        3.0
    );
    assert_eq!(
        metrics.value("gatehouse_node_worker_slots_in_use", &node_labels),
        1.0
    );

    // Event streams: ours is open, and none was dropped.
    assert_eq!(metrics.value("gatehouse_sse_subscribers", &[]), 1.0);
    let slow = [("code", ErrorCode::SlowConsumer.as_str())];
    assert_eq!(metrics.value("gatehouse_sse_dropped_total", &slow), 0.0);

    // Memory: the one file, in at least one chunk, and a lag that is a real duration.
    assert_eq!(metrics.value("gatehouse_memory_index_files", &[]), 1.0);
    assert!(metrics.value("gatehouse_memory_index_chunks", &[]) >= 1.0);
    let lag = metrics.value("gatehouse_memory_sync_lag_seconds", &[]);
    assert!((0.0..WAIT.as_secs_f64()).contains(&lag), "{lag}");

    // Stored bytes: the checkpoint holds the written file, the media store that and the upload.
    let checkpoint_bytes = metrics.value("gatehouse_checkpoint_stored_bytes", &[]);
    assert!(
        checkpoint_bytes >= "checkpointed words".len() as f64,
        "{checkpoint_bytes}"
    );
    let media_bytes = metrics.value("gatehouse_media_stored_bytes", &[]);
    assert!(
        media_bytes >= checkpoint_bytes + upload.len() as f64,
        "{media_bytes}"
    );

    // Closing the stream and stopping the node remove what they held.
    drop(events);
    node.terminate();
    let after = scrape_until(&gateway, "the node's series going away", |metrics| {
        metrics.value("gatehouse_node_connections", &[]) == 0.0
            && metrics.value("gatehouse_sse_subscribers", &[]) == 0.0
    })
    .await;
    assert_eq!(
        after.matching("gatehouse_node_worker_capacity", &[]),
        Vec::<&Sample>::new()
    );
    assert_eq!(
        after.matching("gatehouse_node_worker_slots_in_use", &[]),
        Vec::<&Sample>::new()
    );
}

/// The worker slots in use across every node, as `/metrics` shows them.
fn slots_in_use(exposition: &Exposition) -> f64 {
    exposition
        .matching("gatehouse_node_worker_slots_in_use", &[])
        .iter()
        .map(|sample| sample.value)
        .sum()
}

/// Two native node hosts of one agent: each new session goes to the less loaded one, as their
/// reports show it, so four sessions one after another take two slots on each (issue 16).
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_new_sessions_are_placed_on_the_least_loaded_of_two_nodes() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);
    let nodes: Vec<_> = ["harness-a", "harness-b"]
        .into_iter()
        .map(|root| {
            start_mock_model_node_with(
                &gateway,
                &dirs.base.join(root),
                Some(&gateway.setup_code(600)),
                &logs,
                &mock_url,
                &["--capacity", "2"],
                &[],
            )
        })
        .collect();
    gateway.wait_ready().await;
    scrape_until(&gateway, "both nodes' reports", |exposition| {
        exposition
            .matching("gatehouse_node_worker_capacity", &[])
            .iter()
            .map(|sample| sample.value)
            .sum::<f64>()
            == 4.0
    })
    .await;
    for n in 0..4 {
        let session = format!("s{n}");
        let done = turn(&gateway, &session, &format!("/say {session}")).await;
        assert_eq!(done["reply"], session.as_str(), "{done}");
        // The next placement sees this session's slot.
        scrape_until(&gateway, "the new session's slot", |exposition| {
            slots_in_use(exposition) == f64::from(n + 1)
        })
        .await;
    }
    let sessions = gateway.get_json("/v1/sessions").await;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for session in sessions["sessions"].as_array().unwrap() {
        *per_node
            .entry(session["nodeId"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    assert_eq!(
        per_node.values().copied().collect::<Vec<_>>(),
        vec![2, 2],
        "{sessions}"
    );
    drop(nodes);
}
