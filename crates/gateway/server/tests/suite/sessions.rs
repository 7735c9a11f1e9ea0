//! Sessions and turns through the HTTP API: admission, queue modes, the global cap, abort,
//! fencing, transcripts, turn long-polls and the event stream, with a scripted runtime standing
//! in for the Harness.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use futures_util::StreamExt;
use gatehouse_gateway::TurnFailure;
use gatehouse_gateway::TurnInput;
use gatehouse_gateway::TurnReply;
use gatehouse_gateway::TurnRuntime;
use gatehouse_gateway::TurnSink;
use pretty_assertions::assert_eq;
use tokio::sync::Semaphore;
use tower::ServiceExt;

use crate::suite::support::FakeWorkspace;
use crate::suite::support::FetchAnswer;
use crate::suite::support::TestGateway;
use crate::suite::support::WriteAnswer;
use crate::suite::support::gateway;
use crate::suite::support::gateway_refreshing_metrics_every;
use crate::suite::support::gateway_with;
use crate::suite::support::operator_request;

const WAIT: Duration = Duration::from_secs(20);

/// A runtime whose turns stream two deltas, then wait for a release permit (or read steered
/// text), then commit a reply naming the texts they got.
struct ScriptedRuntime {
    release: Semaphore,
    started: Mutex<Vec<Vec<String>>>,
    running: AtomicUsize,
    max_running: AtomicUsize,
    steer: bool,
    ignore_cancel: bool,
}

impl ScriptedRuntime {
    fn new() -> Arc<Self> {
        Arc::new(Self::build(false, false))
    }

    fn build(steer: bool, ignore_cancel: bool) -> Self {
        Self {
            release: Semaphore::new(0),
            started: Mutex::new(Vec::new()),
            running: AtomicUsize::new(0),
            max_running: AtomicUsize::new(0),
            steer,
            ignore_cancel,
        }
    }

    fn release(&self, n_turns: usize) {
        self.release.add_permits(n_turns);
    }

    fn started(&self) -> Vec<Vec<String>> {
        self.started.lock().unwrap().clone()
    }

    async fn wait_started(&self, n_turns: usize) {
        tokio::time::timeout(WAIT, async {
            while self.started.lock().unwrap().len() < n_turns {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("turns did not start");
    }
}

#[async_trait::async_trait]
impl TurnRuntime for ScriptedRuntime {
    fn name(&self) -> &str {
        "scripted"
    }

    fn supports_steer(&self) -> bool {
        self.steer
    }

    async fn run_turn(
        &self,
        mut input: TurnInput,
        sink: TurnSink,
    ) -> Result<TurnReply, TurnFailure> {
        let now = self.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.max_running.fetch_max(now, Ordering::SeqCst);
        self.started.lock().unwrap().push(input.user_texts.clone());
        sink.delta("part");
        sink.delta("ial");
        let mut texts = input.user_texts.clone();
        let waited = async {
            loop {
                tokio::select! {
                    permit = self.release.acquire() => { permit.unwrap().forget(); return; }
                    Some(steered) = input.steer.recv() => texts.push(steered),
                }
            }
        };
        match self.ignore_cancel {
            true => waited.await,
            false => {
                tokio::select! {
                    () = waited => {}
                    () = input.cancel.cancelled() => {
                        self.running.fetch_sub(1, Ordering::SeqCst);
                        return Err(TurnFailure::new("ABORTED", "aborted"));
                    }
                }
            }
        }
        self.running.fetch_sub(1, Ordering::SeqCst);
        let reply = format!("reply to {}", texts.join("+"));
        sink.commit("assistant", &reply, None).await?;
        Ok(reply.into())
    }
}

fn workspace() -> FakeWorkspace {
    FakeWorkspace::new(FetchAnswer::NotFound, WriteAnswer::Confirmed)
}

async fn post(
    gateway: &TestGateway,
    session: &str,
    body: serde_json::Value,
) -> (StatusCode, serde_json::Value) {
    gateway
        .send(operator_request(
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Body::from(body.to_string()),
        ))
        .await
}

/// Posts `text` to `session` with the queue mode `mode`.
async fn post_in_mode(
    gateway: &TestGateway,
    session: &str,
    text: &str,
    mode: &str,
) -> (StatusCode, serde_json::Value) {
    post(
        gateway,
        session,
        serde_json::json!({"text": text, "queueMode": mode}),
    )
    .await
}

/// Opens the SSE response at `uri` without reading it.
async fn open_events(gateway: &TestGateway, uri: &str) -> axum::response::Response {
    gateway
        .router
        .clone()
        .oneshot(operator_request("GET", uri, Body::empty()))
        .await
        .unwrap()
}

async fn say(gateway: &TestGateway, session: &str, text: &str) -> String {
    let (status, body) = post(gateway, session, serde_json::json!({"text": text})).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    body["turnId"].as_str().unwrap().to_owned()
}

async fn wait_turn(gateway: &TestGateway, turn_id: &str) -> serde_json::Value {
    let (status, body) = gateway
        .send(operator_request(
            "GET",
            &format!("/v1/turns/{turn_id}?wait=20"),
            Body::empty(),
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

async fn transcript(gateway: &TestGateway, session: &str) -> Vec<(String, String)> {
    let (status, body) = gateway
        .send(operator_request(
            "GET",
            &format!("/v1/sessions/{session}/transcript"),
            Body::empty(),
        ))
        .await;
    assert_eq!(status, StatusCode::OK);
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| {
            (
                message["role"].as_str().unwrap().to_owned(),
                message["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A runtime whose turns fail with the code and message it was given, the way a hostile node's
/// `agent.turn` answer reaches the Gateway.
struct FailingRuntime {
    code: String,
    message: String,
}

#[async_trait::async_trait]
impl TurnRuntime for FailingRuntime {
    fn name(&self) -> &str {
        "failing"
    }

    fn supports_steer(&self) -> bool {
        false
    }

    async fn run_turn(&self, _input: TurnInput, _sink: TurnSink) -> Result<TurnReply, TurnFailure> {
        Err(TurnFailure::new(&self.code, self.message.clone()))
    }
}

/// Runs one turn on a [`FailingRuntime`] and returns the stored `(code, message)`.
async fn stored_failure(code: String, message: String) -> (String, String) {
    let runtime = Arc::new(FailingRuntime { code, message });
    let gateway = gateway_with(workspace(), Some(runtime), 4).await;
    let turn_id = say(&gateway, "s", "hello").await;
    let turn = wait_turn(&gateway, &turn_id).await;
    assert_eq!(turn["status"], "failed", "{turn}");
    (
        turn["error"]["code"].as_str().unwrap().to_owned(),
        turn["error"]["message"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn a_runtimes_failure_is_stored_with_a_catalogue_code_and_a_bounded_message() {
    // A code the catalogue knows is kept, and a huge message is cut.
    let (code, message) =
        stored_failure(String::from("MODEL_UNAVAILABLE"), "m".repeat(1 << 20)).await;
    assert_eq!(code, "MODEL_UNAVAILABLE");
    assert!(message.starts_with("mmmm"), "{message}");
    assert!(message.len() < 4200, "{} bytes stored", message.len());

    // Any other code, of any size, is stored as UNRECOGNIZED_CODE; its start leads the message.
    let sent = format!("NOT_IN_THE_CATALOGUE{}", "X".repeat(1 << 20));
    let (code, message) = stored_failure(sent, String::from("the node says no")).await;
    assert_eq!(code, "UNRECOGNIZED_CODE");
    assert!(message.starts_with("NOT_IN_THE_CATALOGUEXXX"), "{message}");
    assert!(message.ends_with(": the node says no"), "{message}");
    assert!(message.len() < 400, "{} bytes stored", message.len());
}

#[tokio::test]
async fn without_a_runtime_turns_fail_with_no_runtime_and_the_message_is_kept() {
    let gateway = gateway(workspace()).await;
    let turn = say(&gateway, "s", "hello").await;
    let body = wait_turn(&gateway, &turn).await;
    assert_eq!(body["status"], "failed");
    assert_eq!(body["error"]["code"], "NO_RUNTIME");
    assert_eq!(
        transcript(&gateway, "s").await,
        vec![("user".to_owned(), "hello".to_owned())]
    );
    // The session stays usable.
    let again = say(&gateway, "s", "again").await;
    assert_eq!(
        wait_turn(&gateway, &again).await["error"]["code"],
        "NO_RUNTIME"
    );
}

#[tokio::test]
async fn followup_turns_run_one_at_a_time_in_order() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    let turns = [
        say(&gateway, "s", "one").await,
        say(&gateway, "s", "two").await,
        say(&gateway, "s", "three").await,
    ];
    runtime.wait_started(1).await;
    // Only one turn of the session runs.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(runtime.started().len(), 1);
    runtime.release(3);
    for turn in &turns {
        assert_eq!(wait_turn(&gateway, turn).await["status"], "completed");
    }
    assert_eq!(
        runtime.started(),
        vec![
            vec!["one".to_owned()],
            vec!["two".to_owned()],
            vec!["three".to_owned()]
        ]
    );
    assert_eq!(runtime.max_running.load(Ordering::SeqCst), 1);
    let replies: Vec<String> = transcript(&gateway, "s")
        .await
        .into_iter()
        .filter(|(role, _)| role == "assistant")
        .map(|(_, text)| text)
        .collect();
    assert_eq!(
        replies,
        vec!["reply to one", "reply to two", "reply to three"]
    );
    assert_eq!(
        wait_turn(&gateway, &turns[0]).await["reply"],
        "reply to one"
    );
}

#[tokio::test]
async fn collect_merges_queued_messages_into_the_next_turn() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    let first = say(&gateway, "s", "first").await;
    runtime.wait_started(1).await;
    let (_, a) = post_in_mode(&gateway, "s", "a", "collect").await;
    let (_, b) = post_in_mode(&gateway, "s", "b", "collect").await;
    assert_eq!(a["turnId"], b["turnId"]);
    runtime.release(2);
    assert_eq!(wait_turn(&gateway, &first).await["status"], "completed");
    let merged = wait_turn(&gateway, a["turnId"].as_str().unwrap()).await;
    assert_eq!(merged["reply"], "reply to a+b");
    assert_eq!(runtime.started()[1], vec!["a".to_owned(), "b".to_owned()]);
}

#[tokio::test]
async fn interrupt_aborts_the_running_turn_first() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    let first = say(&gateway, "s", "long").await;
    runtime.wait_started(1).await;
    let (status, second) = post_in_mode(&gateway, "s", "now", "interrupt").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let aborted = wait_turn(&gateway, &first).await;
    assert_eq!(aborted["status"], "aborted");
    runtime.wait_started(2).await;
    runtime.release(1);
    assert_eq!(
        wait_turn(&gateway, second["turnId"].as_str().unwrap()).await["reply"],
        "reply to now"
    );
}

#[tokio::test]
async fn steer_reaches_the_running_turn_when_the_runtime_supports_it() {
    let runtime = Arc::new(ScriptedRuntime::build(true, false));
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    let first = say(&gateway, "s", "start").await;
    runtime.wait_started(1).await;
    let (_, steered) = post_in_mode(&gateway, "s", "also this", "steer").await;
    assert_eq!(steered["turnId"], first.as_str());
    // Give the runtime a moment to read the steered text before releasing it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    runtime.release(1);
    assert_eq!(
        wait_turn(&gateway, &first).await["reply"],
        "reply to start+also this"
    );
    assert_eq!(runtime.started().len(), 1);
}

#[tokio::test]
async fn steer_without_runtime_support_is_a_followup() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    let first = say(&gateway, "s", "start").await;
    runtime.wait_started(1).await;
    let (_, steered) = post_in_mode(&gateway, "s", "later", "steer").await;
    assert_ne!(steered["turnId"], first.as_str());
    runtime.release(2);
    assert_eq!(
        wait_turn(&gateway, steered["turnId"].as_str().unwrap()).await["reply"],
        "reply to later"
    );
}

#[tokio::test]
async fn the_global_cap_limits_concurrent_turns_and_the_rest_wait_queued() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 2).await;
    let mut turns = Vec::new();
    for session in 0..6 {
        turns.push(say(&gateway, &format!("s{session}"), "go").await);
    }
    runtime.wait_started(2).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(runtime.started().len(), 2);
    let queued = turns.len() - 2;
    let mut n_queued = 0;
    for turn in &turns {
        let (_, body) = gateway
            .send(operator_request(
                "GET",
                &format!("/v1/turns/{turn}"),
                Body::empty(),
            ))
            .await;
        n_queued += usize::from(body["status"] == "queued");
    }
    assert_eq!(n_queued, queued);
    runtime.release(6);
    for turn in &turns {
        assert_eq!(wait_turn(&gateway, turn).await["status"], "completed");
    }
    assert_eq!(runtime.max_running.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn abort_stops_the_running_turn_and_fences_its_late_commit() {
    let runtime = Arc::new(ScriptedRuntime::build(false, true));
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    let turn = say(&gateway, "s", "work").await;
    runtime.wait_started(1).await;
    let (status, body) = gateway
        .send(operator_request(
            "POST",
            "/v1/sessions/s/abort",
            Body::empty(),
        ))
        .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, serde_json::json!({"aborted": true}))
    );
    assert_eq!(wait_turn(&gateway, &turn).await["status"], "aborted");
    // The runtime ignores the cancel and tries to commit later: the store refuses it.
    runtime.release(1);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        transcript(&gateway, "s").await,
        vec![("user".to_owned(), "work".to_owned())]
    );
    let (_, none) = gateway
        .send(operator_request(
            "POST",
            "/v1/sessions/s/abort",
            Body::empty(),
        ))
        .await;
    assert_eq!(none, serde_json::json!({"aborted": false}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_a_client_saw_start_can_always_be_aborted() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    for index in 0..20 {
        let session = format!("race-{index}");
        let stream = open_events(&gateway, &format!("/v1/sessions/{session}/events")).await;
        let turn = say(&gateway, &session, "work").await;
        let events = read_events(stream.into_body(), 2).await;
        assert_eq!(events[1].0, "turn.started", "{events:?}");
        // Abort the moment the stream said the turn started, as the console's button does.
        let (status, body) = gateway
            .send(operator_request(
                "POST",
                &format!("/v1/sessions/{session}/abort"),
                Body::empty(),
            ))
            .await;
        assert_eq!(
            (status, body),
            (StatusCode::OK, serde_json::json!({"aborted": true})),
            "turn {index}"
        );
        assert_eq!(wait_turn(&gateway, &turn).await["status"], "aborted");
    }
}

#[tokio::test]
async fn an_idempotency_key_returns_the_same_turn_even_for_concurrent_duplicates() {
    let gateway = Arc::new(gateway(workspace()).await);
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let gateway = Arc::clone(&gateway);
        tasks.push(tokio::spawn(async move {
            post(
                &gateway,
                "s",
                serde_json::json!({"text": "once", "idempotencyKey": "key-1"}),
            )
            .await
        }));
    }
    let mut turn_ids = std::collections::BTreeSet::new();
    for task in tasks {
        let (status, body) = task.await.unwrap();
        assert_eq!(status, StatusCode::ACCEPTED);
        turn_ids.insert(body["turnId"].as_str().unwrap().to_owned());
    }
    assert_eq!(turn_ids.len(), 1);
    assert_eq!(transcript(&gateway, "s").await.len(), 1);
}

#[tokio::test]
async fn invalid_messages_are_refused() {
    let gateway = gateway(workspace()).await;
    for (session, body, code) in [
        (
            "s",
            serde_json::json!({"text": "x", "extra": 1}),
            "INVALID_REQUEST",
        ),
        ("s", serde_json::json!({"text": ""}), "INVALID_REQUEST"),
        (
            "s",
            serde_json::json!({"text": "x", "queueMode": "later"}),
            "INVALID_REQUEST",
        ),
        ("s", serde_json::json!({"texts": "x"}), "INVALID_REQUEST"),
        (
            "bad%20key",
            serde_json::json!({"text": "x"}),
            "INVALID_REQUEST",
        ),
        (
            "s",
            serde_json::json!({"text": "x", "attachments": [{"mediaId": "m", "size": 1}]}),
            "INVALID_REQUEST",
        ),
    ] {
        let (status, answer) = post(&gateway, session, body.clone()).await;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some(code)),
            "{body}"
        );
    }
    let (status, big) = post(
        &gateway,
        "s",
        serde_json::json!({"text": "x".repeat(300 * 1024)}),
    )
    .await;
    assert_eq!(
        (status, big["error"]["code"].as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, Some("PAYLOAD_TOO_LARGE"))
    );
    let (_, sessions) = gateway
        .send(operator_request("GET", "/v1/sessions", Body::empty()))
        .await;
    assert_eq!(sessions, serde_json::json!({"sessions": []}));
}

/// Reads SSE blocks from a response body until `count` events were read.
async fn read_events(body: Body, count: usize) -> Vec<(String, serde_json::Value)> {
    let mut stream = body.into_data_stream();
    let mut buffer = String::new();
    let mut events = Vec::new();
    tokio::time::timeout(WAIT, async {
        while events.len() < count {
            let Some(chunk) = stream.next().await else {
                break;
            };
            buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
            while let Some(end) = buffer.find("\n\n") {
                let block: String = buffer.drain(..end + 2).collect();
                let kind = block
                    .lines()
                    .find_map(|line| line.strip_prefix("event: "))
                    .map(str::to_owned);
                let data = block
                    .lines()
                    .find_map(|line| line.strip_prefix("data: "))
                    .map(str::to_owned);
                if let (Some(kind), Some(data)) = (kind, data) {
                    events.push((kind, serde_json::from_str(&data).unwrap()));
                }
            }
        }
    })
    .await
    .expect("events did not arrive");
    events
}

#[tokio::test]
async fn the_event_stream_resumes_after_a_seq_and_streams_deltas_live() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    let first = say(&gateway, "s", "one").await;
    runtime.release(1);
    wait_turn(&gateway, &first).await;
    let stream = open_events(&gateway, "/v1/sessions/s/events").await;
    let all = read_events(stream.into_body(), 4).await;
    let kinds: Vec<&str> = all.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec![
            "turn.queued",
            "turn.started",
            "message.completed",
            "turn.completed"
        ]
    );
    let seqs: Vec<i64> = all
        .iter()
        .map(|(_, data)| data["seq"].as_i64().unwrap())
        .collect();
    assert_eq!(seqs, vec![1, 2, 3, 4]);
    // Resume after seq 2, then watch a second turn live, deltas included.
    let resumed = open_events(&gateway, "/v1/sessions/s/events?after=2").await;
    let second = say(&gateway, "s", "two").await;
    runtime.wait_started(2).await;
    runtime.release(1);
    wait_turn(&gateway, &second).await;
    let events = read_events(resumed.into_body(), 8).await;
    let kinds: Vec<&str> = events.iter().map(|(kind, _)| kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec![
            "message.completed",
            "turn.completed",
            "turn.queued",
            "turn.started",
            "message.delta",
            "message.delta",
            "message.completed",
            "turn.completed"
        ]
    );
    assert_eq!(events[4].1["text"], "part");
    assert_eq!(events[7].1["reply"], "reply to two");
}

#[tokio::test]
async fn a_slow_event_client_is_dropped_with_a_clear_last_event_and_turns_go_on() {
    let gateway = gateway(workspace()).await;
    say(&gateway, "s", "warm up").await;
    // Open the stream and do not read it while many events are produced.
    let stream = open_events(&gateway, "/v1/sessions/s/events").await;
    let mut last_turn = String::new();
    for index in 0..500 {
        last_turn = say(&gateway, "s", &format!("message {index}")).await;
    }
    // Turns were not stalled by the slow client.
    assert_eq!(
        wait_turn(&gateway, &last_turn).await["error"]["code"],
        "NO_RUNTIME"
    );
    let events = read_events(stream.into_body(), usize::MAX).await;
    let (kind, data) = events.last().unwrap();
    assert_eq!(kind, "stream.dropped");
    assert_eq!(data["code"], "SLOW_CONSUMER");
    assert!(data["resumeAfter"].as_i64().unwrap() > 0);
    assert!(
        events.len() < 1500,
        "the client was not dropped: {} events",
        events.len()
    );
}

#[tokio::test]
async fn metrics_count_turns_by_outcome_and_their_latency() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 64).await;
    let done = say(&gateway, "a", "one").await;
    runtime.release(1);
    wait_turn(&gateway, &done).await;
    let running = say(&gateway, "b", "two").await;
    runtime.wait_started(2).await;
    let response = gateway
        .router
        .clone()
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let text = String::from_utf8(
        axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    assert!(
        text.contains("gatehouse_turns_total{outcome=\"completed\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_turns_total{outcome=\"failed\"} 0"),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_turn_duration_seconds_count 1"),
        "{text}"
    );
    assert!(
        text.contains("gatehouse_turn_duration_seconds_bucket{le=\"+Inf\"} 1"),
        "{text}"
    );
    assert!(text.contains("gatehouse_active_sessions 1"), "{text}");
    assert!(text.contains("gatehouse_node_connections 0"), "{text}");
    runtime.release(1);
    wait_turn(&gateway, &running).await;
}

/// Returns the value of the sample `series` (its name and labels, exactly as exported) in the
/// `/metrics` text, or `None` when no line exports it.
async fn metric(gateway: &TestGateway, series: &str) -> Option<f64> {
    let response = gateway
        .router
        .clone()
        .oneshot(
            axum::http::Request::get("/metrics")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .find_map(|line| {
            let (name, value) = line.rsplit_once(' ')?;
            (name == series).then(|| value.parse().unwrap())
        })
}

#[tokio::test]
async fn metrics_show_the_turns_queued_behind_the_cap() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_with(workspace(), Some(runtime.clone()), 1).await;
    let running = say(&gateway, "a", "one").await;
    runtime.wait_started(1).await;
    let waiting = [
        say(&gateway, "b", "two").await,
        say(&gateway, "c", "three").await,
    ];
    assert_eq!(
        metric(&gateway, "gatehouse_turns_max_concurrent").await,
        Some(1.0)
    );
    assert_eq!(
        metric(&gateway, "gatehouse_active_sessions").await,
        Some(1.0)
    );
    assert_eq!(metric(&gateway, "gatehouse_turns_queued").await, Some(2.0));
    runtime.release(3);
    for turn in [running].iter().chain(&waiting) {
        assert_eq!(wait_turn(&gateway, turn).await["status"], "completed");
    }
    assert_eq!(metric(&gateway, "gatehouse_turns_queued").await, Some(0.0));
    assert_eq!(
        metric(
            &gateway,
            "gatehouse_runtime_turns_total{runtime=\"scripted\",outcome=\"completed\"}"
        )
        .await,
        Some(3.0)
    );
}

/// Adds a checkpoint blob of `size_bytes` to the store, which only a fresh read of the store's
/// figures shows in `gatehouse_checkpoint_stored_bytes`.
async fn add_checkpoint_blob(gateway: &TestGateway, media_id: &str, size_bytes: u64) {
    let blob = gatehouse_store::records::CheckpointBlob {
        media_id: media_id.to_owned(),
        size_bytes,
    };
    gateway
        .store()
        .register_checkpoint_blobs(&[blob], 1)
        .await
        .unwrap();
}

#[tokio::test]
async fn metrics_scrapes_reuse_the_store_figures_until_the_turn_queue_changes() {
    let runtime = ScriptedRuntime::new();
    let gateway = gateway_refreshing_metrics_every(
        workspace(),
        Some(runtime.clone()),
        1,
        Duration::from_secs(3600),
    )
    .await;
    let samplings = "gatehouse_metrics_samplings_total";
    let checkpoint_bytes = "gatehouse_checkpoint_stored_bytes";
    assert_eq!(metric(&gateway, samplings).await, Some(1.0));
    // Back to back, and after a change the queue does not see: the figures are reused.
    add_checkpoint_blob(&gateway, "a", 10).await;
    assert_eq!(metric(&gateway, samplings).await, Some(1.0));
    assert_eq!(metric(&gateway, checkpoint_bytes).await, Some(0.0));

    // A turn admitted (and one claimed) changes the queue: the next scrape reads them again.
    let running = say(&gateway, "a", "one").await;
    runtime.wait_started(1).await;
    let waiting = say(&gateway, "b", "two").await;
    assert_eq!(metric(&gateway, "gatehouse_turns_queued").await, Some(1.0));
    assert_eq!(metric(&gateway, samplings).await, Some(2.0));
    assert_eq!(metric(&gateway, checkpoint_bytes).await, Some(10.0));
    runtime.release(2);
    for turn in [running, waiting] {
        assert_eq!(wait_turn(&gateway, &turn).await["status"], "completed");
    }
    assert_eq!(metric(&gateway, "gatehouse_turns_queued").await, Some(0.0));
}

#[tokio::test]
async fn metrics_figures_are_read_again_once_the_refresh_interval_passed() {
    // A zero interval has passed at every scrape.
    let gateway = gateway_refreshing_metrics_every(workspace(), None, 1, Duration::ZERO).await;
    let samplings = "gatehouse_metrics_samplings_total";
    assert_eq!(metric(&gateway, samplings).await, Some(1.0));
    add_checkpoint_blob(&gateway, "a", 10).await;
    assert_eq!(
        metric(&gateway, "gatehouse_checkpoint_stored_bytes").await,
        Some(10.0)
    );
    assert_eq!(metric(&gateway, samplings).await, Some(3.0));
}

#[tokio::test]
async fn metrics_count_a_slow_event_client_that_is_dropped() {
    let gateway = gateway(workspace()).await;
    let dropped = "gatehouse_sse_dropped_total{code=\"SLOW_CONSUMER\"}";
    assert_eq!(metric(&gateway, dropped).await, Some(0.0));
    say(&gateway, "s", "warm up").await;
    let stream = open_events(&gateway, "/v1/sessions/s/events").await;
    assert_eq!(
        metric(&gateway, "gatehouse_sse_subscribers").await,
        Some(1.0)
    );
    let mut last_turn = String::new();
    for index in 0..500 {
        last_turn = say(&gateway, "s", &format!("message {index}")).await;
    }
    wait_turn(&gateway, &last_turn).await;
    let events = read_events(stream.into_body(), usize::MAX).await;
    assert_eq!(events.last().unwrap().0, "stream.dropped");
    assert_eq!(metric(&gateway, dropped).await, Some(1.0));
    assert_eq!(
        metric(&gateway, "gatehouse_sse_subscribers").await,
        Some(0.0)
    );
}
