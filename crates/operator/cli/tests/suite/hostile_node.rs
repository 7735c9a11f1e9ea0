//! Issue 12, findings 4 and 5: a hostile node (a test client that enrolls with a setup code and
//! speaks the wire protocol) against a real `gatehouse gateway` process, next to a real
//! `gatehouse node` where a well-behaved node is needed.

use std::time::Duration;
use std::time::Instant;

use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_gateway::LIMIT_WINDOW;
use gatehouse_gateway::LIMITED_ROWS_PER_WINDOW;
use gatehouse_gateway::MAX_AUDIT_FIELD_BYTES;
use gatehouse_gateway::MAX_NODE_RSS_GROWTH_BYTES;
use gatehouse_gateway::SUBSCRIBER_MAX_BYTES;
use gatehouse_gateway::TRUNCATION_MARKER;
use pretty_assertions::assert_eq;
use tokio::io::AsyncReadExt;
use tokio::io::AsyncWriteExt;
use tokio_tungstenite::tungstenite::Message;

use crate::suite::hostile::HostileNode;
use crate::suite::hostile::NATIVE_COMMANDS;
use crate::suite::hostile::read_challenge;
use crate::suite::hostile::rss_bytes;
use crate::suite::hostile::turn_params;
use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::mock_model;
use crate::suite::support::post_message;
use crate::suite::support::start_node_with;
use crate::suite::support::turn;
use crate::suite::support::wait_turn;

const MODEL_KEY: &str = "sk-hostile-node-test-key";

/// Posts `body` to `path` as the operator and returns the status and the JSON answer.
async fn post_json(
    gateway: &Gateway,
    path: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(format!("{}{path}", gateway.url))
        .bearer_auth(&gateway.token)
        .json(&body)
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or_default())
}

/// Waits until the turn `turn_id` runs.
async fn wait_running(gateway: &Gateway, turn_id: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let body = gateway.get_json(&format!("/v1/turns/{turn_id}")).await;
        if body["status"] == "running" {
            return;
        }
        assert_eq!(
            body["status"], "queued",
            "turn {turn_id} ended before it ran: {body}"
        );
        assert!(Instant::now() < deadline, "turn {turn_id} never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The roles of a session's transcript, in order.
async fn roles(gateway: &Gateway, session: &str) -> Vec<String> {
    let transcript = gateway
        .get_json(&format!("/v1/sessions/{session}/transcript"))
        .await;
    transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["role"].as_str().unwrap().to_owned())
        .collect()
}

/// The audit rows of `action`, as (outcome, reasonCode).
async fn audited(gateway: &Gateway, action: &str) -> Vec<(String, Option<String>)> {
    let audit: gatehouse_api::audit::AuditList = gateway.get_typed("/v1/audit").await;
    audit
        .events
        .into_iter()
        .filter(|event| event.action == action)
        .map(|event| (event.outcome, event.reason_code))
        .collect()
}

/// Reads the events of `session` until turn `last_turn` is reported `aborted`, as SSE text.
async fn events_text(gateway: &Gateway, session: &str, last_turn: &str) -> String {
    let response = reqwest::Client::new()
        .get(format!("{}/v1/sessions/{session}/events", gateway.url))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap();
    let mut body = response.bytes_stream();
    let mut text = String::new();
    let ended = |text: &str| {
        text.lines().any(|line| {
            line.starts_with("data: ") && line.contains(last_turn) && line.contains("\"aborted\"")
        })
    };
    tokio::time::timeout(WAIT, async {
        while !ended(&text) {
            let chunk = body.next().await.unwrap().unwrap();
            text.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await
    .expect("the events of the last turn did not arrive");
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_4_a_second_node_cannot_read_write_or_act_for_another_nodes_session_and_moves_are_explicit()
 {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);
    let model = format!("openai-chat:{mock_url}/v1:mock-model");
    let mut node_a = start_node_with(
        &gateway,
        &dirs.base.join("harness"),
        Some(&gateway.setup_code(600)),
        &logs,
        &["--model", &model, "--model-key-env", "MOCK_MODEL_KEY"],
        &[("MOCK_MODEL_KEY", MODEL_KEY)],
    );
    gateway.wait_ready().await;

    // Two sessions run on the real node A and are bound to it.
    for session in ["s", "s2"] {
        let done = turn(&gateway, session, &format!("hello from {session}")).await;
        assert_eq!(done["status"], "completed", "{done}");
    }
    let sessions = gateway.get_json("/v1/sessions").await;
    let node_a_id = sessions["sessions"][0]["nodeId"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(sessions["sessions"][1]["nodeId"], node_a_id.as_str());

    // A second node enrolls; it is the most recent node serving the native runtime.
    let mut node_b = HostileNode::enroll(&gateway, 42, NATIVE_COMMANDS).await;
    assert_ne!(node_b.device.id, node_a_id);

    // The next turn of `s` still runs on A: B never receives it, nor the session's history.
    let second = turn(&gateway, "s", "second message").await;
    assert_eq!(second["status"], "completed", "{second}");
    assert_eq!(node_b.received_invokes().await.len(), 0);

    // While a turn of `s` runs on A, B cannot call a Gateway tool for it ...
    let hanging = post_message(&gateway, "s", "/hang").await;
    wait_running(&gateway, &hanging).await;
    let forged = node_b
        .call(
            "node.gateway.tool",
            serde_json::json!({"sessionKey": "s", "turnId": hanging, "tool": "session_status", "arguments": {}}),
        )
        .await;
    assert_eq!(forged.error.unwrap().code, "TURN_NOT_OWNED");
    // ... nor commit into it through invoke ids it guesses: no invoke of A is B's.
    let planted = [
        serde_json::json!({"type": "toolStarted", "tool": "planted-tool", "arguments": {}}),
        serde_json::json!({"type": "message", "role": "user", "content": "planted user row"}),
    ];
    for guess in 0..64 {
        let refused = node_b.stream_lines(&format!("inv-{guess}"), &planted).await;
        assert_eq!(refused.len(), 0);
    }
    let (status, _) = post_json(&gateway, "/v1/sessions/s/abort", serde_json::json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(wait_turn(&gateway, &hanging).await["status"], "aborted");
    assert_eq!(
        roles(&gateway, "s").await,
        vec!["user", "assistant", "user", "assistant", "user"]
    );
    let events = events_text(&gateway, "s", &hanging).await;
    assert!(!events.contains("planted"), "B planted an event: {events}");

    // In its own sessions B may commit only assistant and tool messages.
    for (index, role) in ["user", "system"].iter().enumerate() {
        let session = format!("b{index}");
        let turn_id = post_message(&gateway, &session, "hello b").await;
        let invoke = node_b.next_invoke("agent.turn").await;
        let params = turn_params(&invoke);
        assert_eq!(params.session_key, session);
        assert_eq!(
            params.history.len(),
            0,
            "B received another session's history"
        );
        node_b
            .stream_lines(
                &invoke.id,
                &[serde_json::json!({"type": "message", "role": role, "content": "forged row"})],
            )
            .await;
        let failed = wait_turn(&gateway, &turn_id).await;
        assert_eq!(failed["error"]["code"], "ROLE_NOT_ALLOWED", "{failed}");
        assert_eq!(roles(&gateway, &session).await, vec!["user"]);
    }

    // A session bound to a node that is gone waits for it, then fails; it never goes to B.
    node_a.kill();
    let orphan = turn(&gateway, "s2", "are you there").await;
    assert_eq!(
        orphan["error"]["code"], "DEPENDENCY_UNAVAILABLE",
        "{orphan}"
    );
    // Node B is connected: the turn failed for its own node, and says which.
    assert!(
        orphan["error"]["message"]
            .as_str()
            .unwrap()
            .contains("which is not connected"),
        "{orphan}"
    );
    assert_eq!(
        node_b
            .received_invokes()
            .await
            .iter()
            .filter(|invoke| invoke.command == "agent.turn")
            .count(),
        0
    );

    // The explicit move: the next turn of `s` restores it on B from its checkpoint.
    let (status, moved) = post_json(
        &gateway,
        "/v1/sessions/s/move",
        serde_json::json!({"node": node_b.device.id}),
    )
    .await;
    assert_eq!((status, moved), (200, serde_json::json!({"moved": true})));
    let moved_turn = post_message(&gateway, "s", "continue on b").await;
    let invoke = node_b.next_invoke("agent.turn").await;
    let params = turn_params(&invoke);
    assert_eq!(params.session_key, "s");
    assert!(params.checkpoint_id.is_some(), "A left no checkpoint of s");
    node_b.fail(&invoke.id, "WORKSPACE_MISSING").await;
    let restore = node_b.next_invoke("agent.session.restore").await;
    let restore_params: serde_json::Value =
        serde_json::from_str(restore.params_json.as_deref().unwrap()).unwrap();
    assert_eq!(restore_params["sessionKey"], "s");
    assert_eq!(
        restore_params["checkpointId"],
        params.checkpoint_id.unwrap().as_str()
    );
    node_b.finish(&restore.id, serde_json::json!({})).await;
    let invoke = node_b.next_invoke("agent.turn").await;
    node_b
        .stream_lines(
            &invoke.id,
            &[serde_json::json!({"type": "message", "role": "assistant", "content": "reply from b"})],
        )
        .await;
    node_b
        .finish(&invoke.id, serde_json::json!({"reply": "reply from b"}))
        .await;
    let done = wait_turn(&gateway, &moved_turn).await;
    assert_eq!(done["reply"], "reply from b", "{done}");

    // A move is refused while a turn runs.
    let busy = post_message(&gateway, "s", "busy").await;
    let invoke = node_b.next_invoke("agent.turn").await;
    wait_running(&gateway, &busy).await;
    let (status, refused) = post_json(
        &gateway,
        "/v1/sessions/s/move",
        serde_json::json!({"node": node_a_id}),
    )
    .await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (409, Some("SESSION_BUSY"))
    );
    node_b
        .finish(&invoke.id, serde_json::json!({"reply": "done"}))
        .await;
    assert_eq!(wait_turn(&gateway, &busy).await["status"], "completed");

    // Every refusal and the move were audited with their codes.
    assert_eq!(
        audited(&gateway, "session.moved").await,
        vec![
            ("succeeded".to_owned(), None),
            ("denied".to_owned(), Some("SESSION_BUSY".to_owned()))
        ]
    );
    assert!(
        audited(&gateway, "gateway.tool.call")
            .await
            .contains(&("denied".to_owned(), Some("TURN_NOT_OWNED".to_owned())))
    );
    assert_eq!(
        audited(&gateway, "node.turn").await,
        vec![("denied".to_owned(), Some("ROLE_NOT_ALLOWED".to_owned())); 2]
    );
    assert_eq!(
        audited(&gateway, "session.dispatch").await,
        vec![(
            "denied".to_owned(),
            Some("DEPENDENCY_UNAVAILABLE".to_owned())
        )]
    );
}

/// A Gateway and one hostile node that hosts every new session.
async fn hostile_setup() -> (crate::suite::support::Dirs, Gateway, HostileNode) {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);
    let node = HostileNode::enroll(&gateway, 7, NATIVE_COMMANDS).await;
    (dirs, gateway, node)
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_5_huge_progress_chunks_and_endless_lines_are_refused_within_the_rss_bound() {
    let started = Instant::now();
    let (_dirs, gateway, mut node) = hostile_setup().await;
    let pid = gateway.process.pid();
    let before = rss_bytes(pid);
    let mut peak = before;

    // 40 chunks of 20 MiB without a newline: the first fails the invoke, every one is refused.
    let turn_id = post_message(&gateway, "big", "hello").await;
    let invoke = node.next_invoke("agent.turn").await;
    for seq in 0..40 {
        let answer = node
            .progress_of(&invoke.id, seq, 'x', 20 * 1024 * 1024)
            .await;
        assert_eq!(answer.error.unwrap().code, "PROGRESS_CHUNK_TOO_LARGE");
        peak = peak.max(rss_bytes(pid));
    }
    let failed = wait_turn(&gateway, &turn_id).await;
    assert_eq!(
        failed["error"]["code"], "PROGRESS_CHUNK_TOO_LARGE",
        "{failed}"
    );

    // Chunks within the limit but no newline: the line bound ends the turn, and the node is
    // told to stop.
    let turn_id = post_message(&gateway, "long", "hello").await;
    let invoke = node.next_invoke("agent.turn").await;
    let mut seq = 0;
    loop {
        let answer = node.progress_of(&invoke.id, seq, 'y', 16 * 1024).await;
        assert!(answer.ok, "{answer:?}");
        seq += 1;
        if seq % 256 == 0 {
            peak = peak.max(rss_bytes(pid));
            let status = gateway.get_json(&format!("/v1/turns/{turn_id}")).await;
            if status["status"] == "failed" {
                break;
            }
        }
        assert!(seq < 4096, "a 64 MiB line was accepted");
    }
    let failed = wait_turn(&gateway, &turn_id).await;
    assert_eq!(
        failed["error"]["code"], "PROGRESS_LINE_TOO_LONG",
        "{failed}"
    );

    let growth = peak.saturating_sub(before);
    assert!(
        growth < MAX_NODE_RSS_GROWTH_BYTES as u64,
        "the gateway grew by {growth} bytes, over the documented {MAX_NODE_RSS_GROWTH_BYTES}"
    );
    // The refusals were audited, within the per-node budget: 40 refusals of one node leave
    // at most LIMITED_ROWS_PER_WINDOW rows per window.
    let refusals = audited(&gateway, "node.invoke.progress").await;
    assert!(!refusals.is_empty());
    assert!(refusals.iter().all(|(outcome, code)| outcome == "denied"
        && code.as_deref() == Some("PROGRESS_CHUNK_TOO_LARGE")));
    let audit = gateway.get_json("/v1/audit").await;
    let actor = format!("node:{}", node.device.id);
    let n_rows = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["actor"] == actor.as_str())
        .count();
    let windows = started.elapsed().as_secs() / LIMIT_WINDOW.as_secs() + 2;
    assert!(
        n_rows as u64 <= windows * u64::from(LIMITED_ROWS_PER_WINDOW),
        "{n_rows} audit rows from one node"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_invoke_the_gateway_fails_for_overrunning_its_bounds_is_cancelled_on_the_node() {
    let (_dirs, gateway, mut node) = hostile_setup().await;

    // A chunk over the bound fails the turn; the node is told to stop the command.
    let turn_id = post_message(&gateway, "chunk", "hello").await;
    let invoke = node.next_invoke("agent.turn").await;
    let answer = node.progress_of(&invoke.id, 0, 'x', 20 * 1024 * 1024).await;
    assert_eq!(answer.error.unwrap().code, "PROGRESS_CHUNK_TOO_LARGE");
    assert_eq!(node.next_cancel().await, invoke.id);
    let failed = wait_turn(&gateway, &turn_id).await;
    assert_eq!(
        failed["error"]["code"], "PROGRESS_CHUNK_TOO_LARGE",
        "{failed}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_nodes_error_text_reaches_the_gateway_log_escaped_on_one_line_and_bounded() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);
    let mut node = HostileNode::enroll(&gateway, 9, &["workspace.memory"]).await;
    // The Gateway watches the memory files of the node; the node ends the watch with an error
    // whose text would forge a log line and fill the log.
    let watch = node.next_invoke("workspace.memory").await;
    let forged = format!(
        "watch refused\nERROR gatehouse_gateway: forged line{}",
        "f".repeat(100_000)
    );
    node.fail_with(&watch.id, "FORGED_CODE", &forged).await;

    let deadline = Instant::now() + WAIT;
    let log = loop {
        let log = gateway.process.stderr();
        if log.contains("the memory watch ended") {
            break log;
        }
        assert!(
            Instant::now() < deadline,
            "the watch's end was not logged: {log}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let ended = log
        .lines()
        .find(|line| line.contains("the memory watch ended"))
        .unwrap();
    assert!(
        ended.contains("watch refused\\nERROR gatehouse_gateway: forged line"),
        "{ended}"
    );
    assert!(ended.contains(TRUNCATION_MARKER), "{ended}");
    for line in log.lines() {
        assert!(
            !line.starts_with("ERROR gatehouse_gateway: forged"),
            "a forged line: {line}"
        );
        assert!(line.len() < 4 * 1024, "a log line of {} bytes", line.len());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_5_a_slow_event_client_is_dropped_with_slow_consumer_and_memory_stays_bounded() {
    let (_dirs, gateway, mut node) = hostile_setup().await;
    let pid = gateway.process.pid();
    // A real TCP client that opens the event stream and then stops reading.
    let address = gateway.url.trim_start_matches("http://").to_owned();
    let mut client = tokio::net::TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "GET /v1/sessions/sse/events HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {}\r\nAccept: text/event-stream\r\n\r\n",
        gateway.token
    );
    client.write_all(request.as_bytes()).await.unwrap();
    let mut head = vec![0_u8; 1024];
    let read = tokio::time::timeout(WAIT, client.read(&mut head))
        .await
        .unwrap()
        .unwrap();
    assert!(String::from_utf8_lossy(&head[..read]).starts_with("HTTP/1.1 200"));
    let before = rss_bytes(pid);
    let mut peak = before;

    // 48 deltas of 1 MiB each while the client reads nothing.
    let turn_id = post_message(&gateway, "sse", "hello").await;
    let invoke = node.next_invoke("agent.turn").await;
    let delta = serde_json::json!({"type": "delta", "text": "z".repeat(1024 * 1024)});
    for _ in 0..48 {
        let refused = node
            .stream_lines(&invoke.id, std::slice::from_ref(&delta))
            .await;
        assert_eq!(refused.len(), 0);
        peak = peak.max(rss_bytes(pid));
    }
    node.finish(&invoke.id, serde_json::json!({"reply": "done"}))
        .await;
    assert_eq!(wait_turn(&gateway, &turn_id).await["status"], "completed");
    peak = peak.max(rss_bytes(pid));
    let growth = peak.saturating_sub(before);
    let bound = (MAX_NODE_RSS_GROWTH_BYTES + SUBSCRIBER_MAX_BYTES) as u64;
    assert!(
        growth < bound,
        "the gateway grew by {growth} bytes, over {bound}"
    );

    // The client now reads what reached it: the stream ends with SLOW_CONSUMER.
    let mut received = Vec::new();
    tokio::time::timeout(WAIT, async {
        let mut buffer = vec![0_u8; 1 << 20];
        loop {
            let read = client.read(&mut buffer).await.unwrap();
            received.extend_from_slice(&buffer[..read]);
            if read == 0 || received.ends_with(b"0\r\n\r\n") {
                return;
            }
        }
    })
    .await
    .expect("the slow client was never dropped");
    let text = String::from_utf8_lossy(&received);
    let dropped = text
        .rfind("event: stream.dropped")
        .expect("no stream.dropped event");
    assert!(text[dropped..].contains("SLOW_CONSUMER"));
    let n_deltas = text.matches("event: message.delta").count();
    assert!(
        n_deltas < 48,
        "every delta was retained for the slow client"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_5_denied_gateway_tool_calls_with_huge_fields_leave_small_truncated_audit_rows() {
    let (_dirs, gateway, mut node) = hostile_setup().await;
    let huge = "q".repeat(1024 * 1024);
    for _ in 0..20 {
        let answer = node
            .call(
                "node.gateway.tool",
                serde_json::json!({"sessionKey": huge, "turnId": huge, "tool": huge, "arguments": {"a": huge}}),
            )
            .await;
        assert_eq!(answer.error.unwrap().code, "TURN_NOT_OWNED");
    }
    let response = gateway.get("/v1/audit").await;
    let body = response.bytes().await.unwrap();
    assert!(
        body.len() < 64 * 1024,
        "GET /v1/audit returned {} bytes",
        body.len()
    );
    let audit: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let rows: Vec<&serde_json::Value> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["action"] == "gateway.tool.call")
        .collect();
    assert_eq!(rows.len(), 20);
    for row in rows {
        assert_eq!(row["reasonCode"], "TURN_NOT_OWNED");
        for field in ["sessionKey", "turnId", "tool"] {
            let value = row["details"][field].as_str().unwrap();
            assert!(value.ends_with(TRUNCATION_MARKER), "{field} was not cut");
            assert!(value.len() <= MAX_AUDIT_FIELD_BYTES + TRUNCATION_MARKER.len());
        }
        assert!(row["details"].get("arguments").is_none());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_5_two_thousand_bad_connects_write_a_bounded_number_of_audit_rows_and_log_lines() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);
    let started = Instant::now();
    let url = gateway.ws_url();
    let mut tasks = Vec::new();
    for worker in 0..8 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..250 {
                let (mut socket, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
                read_challenge(&mut socket).await;
                socket
                    .send(Message::Text(format!("{{not json {worker}").into()))
                    .await
                    .unwrap();
                // The Gateway answers with a close frame at once.
                while let Some(Ok(message)) = socket.next().await {
                    if matches!(message, Message::Close(_)) {
                        break;
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let windows = started.elapsed().as_secs() / LIMIT_WINDOW.as_secs() + 2;
    let bound = windows * (u64::from(LIMITED_ROWS_PER_WINDOW) + 1);
    let refused = audited(&gateway, "node.connect").await.len() as u64;
    let summaries = audited(&gateway, "audit.suppressed").await.len() as u64;
    assert!(refused >= u64::from(LIMITED_ROWS_PER_WINDOW));
    assert!(
        refused + summaries <= bound,
        "{refused} audit rows and {summaries} summaries for 2000 refusals (bound {bound})"
    );
    let lines = gateway
        .process
        .stderr()
        .matches("node connection refused")
        .count() as u64;
    assert!(
        lines >= 1 && lines <= bound,
        "{lines} log lines for 2000 refusals"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_5_a_24_mib_preauth_frame_is_refused_before_it_is_read_whole() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);
    let pid = gateway.process.pid();
    let before = rss_bytes(pid);
    let address = gateway.url.trim_start_matches("http://").to_owned();
    let stream = tokio::net::TcpStream::connect(&address).await.unwrap();
    let (mut socket, _) = tokio_tungstenite::client_async(gateway.ws_url(), stream)
        .await
        .unwrap();
    read_challenge(&mut socket).await;
    // One masked text frame of 24 MiB, written by hand so the bytes that got through count.
    let length: u64 = 24 * 1024 * 1024;
    let mut header = vec![0x81_u8, 0x80 | 127];
    header.extend_from_slice(&length.to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]);
    let tcp = socket.get_mut();
    tcp.write_all(&header).await.unwrap();
    let piece = vec![b'a'; 64 * 1024];
    let mut written: u64 = 0;
    let outcome = tokio::time::timeout(WAIT, async {
        while written < length {
            match tcp.write(&piece).await {
                Ok(n) => written += n as u64,
                Err(error) => return Err(error),
            }
        }
        Ok(())
    })
    .await
    .expect("the gateway neither read nor closed");
    assert!(outcome.is_err(), "the whole 24 MiB frame was accepted");
    assert!(written < length, "{written} bytes were written");
    let growth = rss_bytes(pid).saturating_sub(before);
    assert!(
        growth < 16 * 1024 * 1024,
        "the gateway grew by {growth} bytes"
    );
    assert_eq!(
        audited(&gateway, "node.connect").await,
        vec![("denied".to_owned(), Some("FRAME_TOO_LARGE".to_owned()))]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_5_a_node_stores_at_most_the_turn_budget_in_the_transcript() {
    use gatehouse_gateway::MAX_MESSAGE_BYTES;
    use gatehouse_gateway::MAX_TOOL_ARGUMENTS_BYTES;
    use gatehouse_gateway::MAX_TURN_STORED_BYTES;
    let (_dirs, gateway, mut node) = hostile_setup().await;
    let turn_id = post_message(&gateway, "flood", "hello").await;
    let invoke = node.next_invoke("agent.turn").await;
    // One message twice the per-message bound and huge tool arguments: both are cut.
    let big = "m".repeat(2 * MAX_MESSAGE_BYTES);
    let arguments = serde_json::json!({"command": "a".repeat(4 * MAX_TOOL_ARGUMENTS_BYTES)});
    let refused = node
        .stream_lines(
            &invoke.id,
            &[
                serde_json::json!({"type": "toolStarted", "tool": "exec", "arguments": arguments}),
                serde_json::json!({"type": "message", "role": "assistant", "content": big}),
            ],
        )
        .await;
    assert!(refused.is_empty(), "{refused:?}");
    // Then messages until the turn's budget is spent: the turn fails with its code.
    let line = serde_json::json!({"type": "message", "role": "assistant", "content": "f".repeat(MAX_MESSAGE_BYTES)});
    let most = MAX_TURN_STORED_BYTES / MAX_MESSAGE_BYTES as u64 + 2;
    let mut sent = 0;
    loop {
        node.stream_lines(&invoke.id, std::slice::from_ref(&line))
            .await;
        sent += 1;
        let status = gateway.get_json(&format!("/v1/turns/{turn_id}")).await;
        if status["status"] != "running" {
            break;
        }
        assert!(sent <= most, "{sent} messages of 1 MiB were all stored");
    }
    let failed = wait_turn(&gateway, &turn_id).await;
    assert_eq!(failed["error"]["code"], "TURN_STORAGE_EXCEEDED", "{failed}");
    let transcript = gateway.get_json("/v1/sessions/flood/transcript").await;
    let messages = transcript["messages"].as_array().unwrap();
    let stored: usize = messages
        .iter()
        .map(|message| message["content"].as_str().unwrap_or_default().len())
        .sum();
    assert!(
        stored as u64 <= MAX_TURN_STORED_BYTES + 64,
        "the turn stored {stored} bytes, over the budget {MAX_TURN_STORED_BYTES}"
    );
    let first = messages
        .iter()
        .find(|message| message["role"] == "assistant")
        .unwrap();
    let first = first["content"].as_str().unwrap();
    assert!(first.len() < MAX_MESSAGE_BYTES + 64, "{}", first.len());
    assert!(first.ends_with(&format!("…[truncated {MAX_MESSAGE_BYTES} bytes]")));
    let events = reqwest::Client::new()
        .get(format!("{}/v1/sessions/flood/events", gateway.url))
        .bearer_auth(&gateway.token)
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .unwrap();
    let mut body = events.bytes_stream();
    let mut text = Vec::new();
    while let Ok(Some(Ok(chunk))) = tokio::time::timeout(Duration::from_secs(1), body.next()).await
    {
        text.extend_from_slice(&chunk);
        if String::from_utf8_lossy(&text).contains("tool.started") && text.len() > 1024 {
            break;
        }
    }
    let text = String::from_utf8_lossy(&text);
    assert!(
        text.contains(r#""truncated":true"#),
        "the huge tool arguments were stored whole: {}",
        &text[..text.len().min(2048)]
    );
}

/// Issue 19: a hostile node reports crafted results for a `worktree` session: a path with
/// `..`, an entry below a link entry, a link that points outside. Each is refused whole with
/// `CHECKPOINT_INVALID` and its reason, and the worktree keeps its version and content.
#[tokio::test(flavor = "multi_thread")]
async fn issue_19_a_crafted_worktree_result_is_refused_whole_and_the_worktree_is_unchanged() {
    let (_dirs, gateway, mut node) = hostile_setup().await;
    let client = reqwest::Client::new();
    let put = client
        .put(format!("{}/v1/sessions/wt", gateway.url))
        .bearer_auth(&gateway.token)
        .json(&serde_json::json!({"workspace": {"source": "worktree"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(put.status().as_u16(), 201);
    let edit = client
        .put(format!("{}/v1/sessions/wt/worktree/a.txt", gateway.url))
        .bearer_auth(&gateway.token)
        .body("kept\n")
        .send()
        .await
        .unwrap();
    assert_eq!(edit.status().as_u16(), 200);
    let file = |path: &str| serde_json::json!({"path": path, "kind": "file", "sha256": "1".repeat(64), "size": 1, "contentBase64": "eA=="});
    let link = |path: &str, target: &str| serde_json::json!({"path": path, "kind": "symlink", "target": target});
    let crafted = [
        ("../escape.txt", vec![file("a.txt"), file("../escape.txt")]),
        ("l/inner.txt", vec![link("l", "a.txt"), file("l/inner.txt")]),
        ("out", vec![file("a.txt"), link("out", "../../../etc")]),
        (
            "y",
            vec![
                link("a/b/c/d/l", "../../../.."),
                link("y", "a/b/c/d/l/../etc/passwd"),
            ],
        ),
    ];
    for (reason, entries) in crafted {
        let turn_id = checkpoint_turn(
            &gateway,
            &mut node,
            serde_json::json!({"type": "checkpoint", "entries": entries}),
        )
        .await;
        let ended = wait_turn(&gateway, &turn_id).await;
        assert_eq!(
            (ended["status"].as_str(), ended["error"]["code"].as_str()),
            (Some("failed"), Some("CHECKPOINT_INVALID")),
            "{reason}: {ended}"
        );
        assert!(
            ended["error"]["message"]
                .as_str()
                .unwrap()
                .contains(&format!("{reason:?}")),
            "the refusal does not name the entry {reason}: {ended}"
        );
        assert!(ended.get("workspace").is_none(), "{reason}: {ended}");
        let refusals = audited(&gateway, "checkpoint.refused").await;
        assert!(!refusals.is_empty(), "{reason}: no checkpoint.refused row");
        let a = client
            .get(format!("{}/v1/sessions/wt/worktree/a.txt", gateway.url))
            .bearer_auth(&gateway.token)
            .send()
            .await
            .unwrap();
        let version = a.headers()["x-gatehouse-worktree-version"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            (version.as_str(), a.text().await.unwrap().as_str()),
            ("2", "kept\n"),
            "{reason}"
        );
    }
    // Content that does not match the hash the node reports for it is refused too: the
    // worktree merges and diffs by that hash.
    let lying = checkpoint_turn(
        &gateway,
        &mut node,
        serde_json::json!({"type": "checkpoint", "entries": [file("a.txt")]}),
    )
    .await;
    assert_checkpoint_refused(&gateway, &lying, "does not match its sha256").await;
    // An omitted list that names a path out of the tree is refused like an entry would be.
    let escaping = checkpoint_turn(&gateway, &mut node, serde_json::json!({"type": "checkpoint", "entries": [], "omitted": {"paths": ["../../etc"]}})).await;
    assert_checkpoint_refused(&gateway, &escaping, "\"../../etc\"").await;
    // A file the node's scan left out is not a deletion: the worktree keeps it.
    let omitting = checkpoint_turn(
        &gateway,
        &mut node,
        serde_json::json!({"type": "checkpoint", "entries": [], "omitted": {"paths": ["a.txt"]}}),
    )
    .await;
    assert_eq!(wait_turn(&gateway, &omitting).await["status"], "completed");
    let turn = wait_applied(&gateway, &omitting).await;
    assert_eq!(
        turn["workspace"]["applied"],
        serde_json::json!([]),
        "{turn}"
    );
    let a = client
        .get(format!("{}/v1/sessions/wt/worktree/a.txt", gateway.url))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap();
    assert_eq!(a.status().as_u16(), 200);
    assert_eq!(a.text().await.unwrap(), "kept\n");
    // A repository the agent made inside its workspace is not taken into the worktree.
    const X_SHA256: &str = "2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881";
    let honest = |path: &str| serde_json::json!({"path": path, "kind": "file", "sha256": X_SHA256, "size": 1, "contentBase64": "eA=="});
    let entries = vec![
        honest("a.txt"),
        honest("sub/.git/config"),
        honest("sub/.GIT/HEAD"),
    ];
    let turn_id = checkpoint_turn(
        &gateway,
        &mut node,
        serde_json::json!({"type": "checkpoint", "entries": entries}),
    )
    .await;
    assert_eq!(wait_turn(&gateway, &turn_id).await["status"], "completed");
    let applied = wait_applied(&gateway, &turn_id).await;
    assert_eq!(
        applied["workspace"]["applied"],
        serde_json::json!(["a.txt"]),
        "{applied}"
    );
    for path in ["sub/.git/config", "sub/.GIT/HEAD"] {
        let status = client
            .get(format!("{}/v1/sessions/wt/worktree/{path}", gateway.url))
            .bearer_auth(&gateway.token)
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status.as_u16(), 404, "{path}");
    }
    let tar = client
        .get(format!("{}/v1/sessions/wt/worktree.tar", gateway.url))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    // One 512-byte header, one block of content, and the two zero blocks of the end.
    assert_eq!(tar.len(), 512 * 4, "the worktree gained entries");
    // Links each contained alone, one accepted earlier and kept by naming it omitted, the
    // other reported now, that lead out together: the result is judged whole and refused.
    let first = checkpoint_turn(&gateway, &mut node, serde_json::json!({"type": "checkpoint", "entries": [honest("a.txt"), link("a/l", "sub/../../x")]})).await;
    let turn = wait_applied(&gateway, &first).await;
    assert_eq!(
        turn["workspace"]["applied"],
        serde_json::json!(["a/l"]),
        "{turn}"
    );
    let chained = checkpoint_turn(&gateway, &mut node, serde_json::json!({"type": "checkpoint", "entries": [honest("a.txt"), link("a/sub", "..")], "omitted": {"paths": ["a/l"]}})).await;
    assert_checkpoint_refused(&gateway, &chained, "leads out of the tree").await;
    let status = client
        .get(format!("{}/v1/sessions/wt/worktree/a/sub", gateway.url))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap()
        .status();
    assert_eq!(
        status.as_u16(),
        404,
        "the refused link reached the worktree"
    );
    // A file the node names without content that the Gateway has no copy of is left out, not
    // deleted: the worktree keeps its version.
    let unknown =
        serde_json::json!({"path": "a.txt", "kind": "file", "sha256": "3".repeat(64), "size": 1});
    let contentless = checkpoint_turn(
        &gateway,
        &mut node,
        serde_json::json!({"type": "checkpoint", "entries": [unknown, link("a/l", "sub/../../x")]}),
    )
    .await;
    let turn = wait_applied(&gateway, &contentless).await;
    assert_eq!(
        turn["workspace"]["applied"],
        serde_json::json!([]),
        "{turn}"
    );
    assert_eq!(
        worktree_text(&gateway, "a.txt").await,
        Some(String::from("x"))
    );
    // A result that is past the bounds once the base's entries join it is not refused: the
    // merge applies nothing, reports the change as a conflict, and the turn completes.
    let big =
        vec![b'b'; usize::try_from(gatehouse_protocol::worker::MAX_CHECKPOINT_BYTES).unwrap()];
    let big_entry = serde_json::json!({
        "path": "big.bin", "kind": "file", "size": big.len(),
        "sha256": hex::encode(<sha2::Sha256 as sha2::Digest>::digest(&big)),
        "contentBase64": base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &big),
    });
    let past = checkpoint_turn(
        &gateway,
        &mut node,
        serde_json::json!({"type": "checkpoint", "entries": [big_entry], "omitted": {"paths": ["a.txt", "a"]}}),
    )
    .await;
    assert_eq!(wait_turn(&gateway, &past).await["status"], "completed");
    let turn = wait_applied(&gateway, &past).await;
    assert_eq!(
        (
            &turn["workspace"]["applied"],
            &turn["workspace"]["conflicts"]
        ),
        (&serde_json::json!([]), &serde_json::json!(["big.bin"])),
        "{turn}"
    );
    assert_eq!(
        worktree_text(&gateway, "a.txt").await,
        Some(String::from("x"))
    );
    assert_eq!(worktree_text(&gateway, "big.bin").await, None);
}

/// Returns the worktree file `path` of the session `wt` as text, or `None` when it is absent.
async fn worktree_text(gateway: &Gateway, path: &str) -> Option<String> {
    let response = reqwest::Client::new()
        .get(format!("{}/v1/sessions/wt/worktree/{path}", gateway.url))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap();
    match response.status().as_u16() {
        200 => Some(response.text().await.unwrap()),
        404 => None,
        status => panic!("GET worktree/{path} answered {status}"),
    }
}

/// Asserts that `turn_id` failed with `CHECKPOINT_INVALID` and a message containing `needle`.
async fn assert_checkpoint_refused(gateway: &Gateway, turn_id: &str, needle: &str) {
    let ended = wait_turn(gateway, turn_id).await;
    assert_eq!(ended["error"]["code"], "CHECKPOINT_INVALID", "{ended}");
    assert!(
        ended["error"]["message"].as_str().unwrap().contains(needle),
        "{ended}"
    );
}

/// Runs one turn of the worktree session `wt` on the hostile `node`, which streams `checkpoint`
/// (one worker event line, which the Gateway must take as progress) and ends the turn; returns
/// the turn's id.
async fn checkpoint_turn(
    gateway: &Gateway,
    node: &mut HostileNode,
    checkpoint: serde_json::Value,
) -> String {
    let turn_id = post_message(gateway, "wt", "hello").await;
    let invoke = node.next_invoke("agent.turn").await;
    let refused = node.stream_lines(&invoke.id, &[checkpoint]).await;
    assert!(refused.is_empty(), "the progress was refused: {refused:?}");
    node.finish(&invoke.id, serde_json::json!({"reply": "done"}))
        .await;
    turn_id
}

/// Waits until the staged worktree result of `turn_id` is applied; returns the turn.
async fn wait_applied(gateway: &Gateway, turn_id: &str) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let turn = gateway.get_json(&format!("/v1/turns/{turn_id}")).await;
        if turn["workspace"]["state"] == "applied" {
            return turn;
        }
        assert!(Instant::now() < deadline, "never applied: {turn}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A rebuild whose request would not fit one link frame (a full 16 MiB checkpoint plus 1,500
/// entries with names of nearly 4 KiB) is not sent: the turn fails with a code, and the link, with every
/// other session on it, stays up (a frame over the bound would make the node drop the link).
#[tokio::test(flavor = "multi_thread")]
async fn a_restore_past_the_frame_bound_is_not_sent_and_the_link_stays_up() {
    use base64::Engine;
    use sha2::Digest;
    const EMPTY_SHA256: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
    let (_dirs, gateway, mut node) = hostile_setup().await;
    let big = vec![b'a'; 16 * 1024 * 1024];
    let big_sha = hex::encode(sha2::Sha256::digest(&big));
    let content = base64::engine::general_purpose::STANDARD.encode(&big);
    let first = post_message(&gateway, "big", "one").await;
    let invoke = node.next_invoke("agent.turn").await;
    let refused = node
        .stream_lines(
            &invoke.id,
            &[serde_json::json!({"type": "checkpoint", "entries": [
                {"path": "big.bin", "kind": "file", "sha256": big_sha, "size": big.len(), "contentBase64": content}
            ]})],
        )
        .await;
    assert!(refused.is_empty(), "{refused:?}");
    node.finish(&invoke.id, serde_json::json!({"reply": "done"}))
        .await;
    assert_eq!(wait_turn(&gateway, &first).await["status"], "completed");
    let mut entries = vec![
        serde_json::json!({"path": "big.bin", "kind": "file", "sha256": big_sha, "size": big.len()}),
    ];
    let long_dir = vec!["s".repeat(250); 15].join("/");
    entries.extend((0..1_500).map(|index| {
        serde_json::json!({"path": format!("{long_dir}/{index:0>8}"), "kind": "file", "sha256": EMPTY_SHA256, "size": 0, "contentBase64": ""})
    }));
    let second = post_message(&gateway, "big", "two").await;
    let invoke = node.next_invoke("agent.turn").await;
    let refused = node
        .stream_lines(
            &invoke.id,
            &[serde_json::json!({"type": "checkpoint", "entries": entries})],
        )
        .await;
    assert!(refused.is_empty(), "{refused:?}");
    node.finish(&invoke.id, serde_json::json!({"reply": "done"}))
        .await;
    assert_eq!(wait_turn(&gateway, &second).await["status"], "completed");
    // The workspace is lost: the rebuild would not fit a frame.
    let third = post_message(&gateway, "big", "three").await;
    let invoke = node.next_invoke("agent.turn").await;
    node.fail(&invoke.id, "WORKSPACE_MISSING").await;
    let failed = wait_turn(&gateway, &third).await;
    assert_eq!(
        failed["error"]["code"], "WORKSPACE_RESTORE_FAILED",
        "{failed}"
    );
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("past the link's 26214400 bytes per frame"),
        "{failed}"
    );
    // The same link serves the next session's turn.
    let other = post_message(&gateway, "other", "hello").await;
    let invoke = node.next_invoke("agent.turn").await;
    assert_eq!(turn_params(&invoke).session_key, "other");
    node.finish(&invoke.id, serde_json::json!({"reply": "still here"}))
        .await;
    assert_eq!(wait_turn(&gateway, &other).await["reply"], "still here");
}
