//! Request ids, JSON log lines and OTLP trace export, on real `gatehouse gateway`, `node` and
//! worker processes with the mock model.

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value;
use pretty_assertions::assert_eq;
use prost::Message;

use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::mock_model;
use crate::suite::support::start_mock_model_node_with;
use crate::suite::support::wait_turn;

/// Sends `GET path` with an optional `X-Request-Id` and returns the status and the echoed id.
async fn request_id_of(
    gateway: &Gateway,
    path: &str,
    sent: Option<&str>,
    bearer: bool,
) -> (u16, String) {
    let mut request = reqwest::Client::new()
        .get(format!("{}{path}", gateway.url))
        .timeout(WAIT);
    if let Some(sent) = sent {
        request = request.header("x-request-id", sent);
    }
    if bearer {
        request = request.bearer_auth(&gateway.token);
    }
    let response = request.send().await.unwrap();
    let echoed = response
        .headers()
        .get_all("x-request-id")
        .iter()
        .map(|value| value.to_str().unwrap().to_owned())
        .collect::<Vec<_>>();
    assert_eq!(echoed.len(), 1, "exactly one X-Request-Id on {path}");
    (response.status().as_u16(), echoed[0].clone())
}

fn is_generated(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|byte| byte.is_ascii_hexdigit())
}

#[tokio::test(flavor = "multi_thread")]
async fn every_answer_echoes_a_given_request_id_or_a_generated_one() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);

    // A sane id comes back as sent, on success and on every kind of error.
    for (path, bearer, status) in [
        ("/healthz", false, 200),
        ("/v1/nodes", true, 200),
        ("/v1/nodes", false, 401),
        ("/v1/turns/turn-000000000000000000000000", true, 404),
        ("/no/such/route", false, 404),
    ] {
        assert_eq!(
            request_id_of(&gateway, path, Some("client-req.42:a_b"), bearer).await,
            (status, String::from("client-req.42:a_b")),
            "{path}"
        );
    }

    // Without one, or with one the Gateway does not keep, each answer gets a fresh id.
    let too_long = "a".repeat(65);
    let mut generated = Vec::new();
    for sent in [None, Some("two words"), Some(too_long.as_str()), None] {
        let (status, id) = request_id_of(&gateway, "/v1/nodes", sent, false).await;
        assert_eq!(status, 401);
        assert!(is_generated(&id), "{sent:?} got {id:?}");
        generated.push(id);
    }
    generated.sort_unstable();
    generated.dedup();
    assert_eq!(generated.len(), 4, "every generated id is new");
}

/// Returns the spans of a JSON log line (`spans` lists every span from the root down).
fn spans_of(line: &serde_json::Value) -> Vec<serde_json::Value> {
    line["spans"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn json_log_lines_parse_and_carry_the_request_id_and_the_turn_id() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let gateway = Gateway::start_with_env(
        &dirs.base.join("gateway"),
        &logs,
        &["--log-format", "json"],
        // The answer of every request is logged at debug.
        &[("GATEHOUSE_LOG", "info,gatehouse_gateway=debug")],
    );
    let code = gateway.setup_code(600);
    // The node and its worker take the format from the environment.
    let node = start_mock_model_node_with(
        &gateway,
        &dirs.base.join("harness"),
        Some(&code),
        &logs,
        &mock_url,
        &[],
        &[("GATEHOUSE_LOG_FORMAT", "json")],
    );
    gateway.wait_ready().await;

    let response = reqwest::Client::new()
        .post(format!("{}/v1/sessions/json-logs/messages", gateway.url))
        .bearer_auth(&gateway.token)
        .header("x-request-id", "json-log-request-1")
        .json(&serde_json::json!({"text": "/say hi"}))
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let posted: serde_json::Value = response.json().await.unwrap();
    let turn_id = posted["turnId"].as_str().unwrap().to_owned();
    assert_eq!(wait_turn(&gateway, &turn_id).await["status"], "completed");

    let gateway_lines: Vec<serde_json::Value> = gateway
        .process
        .stderr()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line:?}")))
        .collect();
    let answered = gateway_lines
        .iter()
        .find(|line| {
            spans_of(line).iter().any(|span| {
                span["name"] == "http_request"
                    && span["request_id"] == "json-log-request-1"
                    && span["route"] == "/v1/sessions/{key}/messages"
                    && span["method"] == "POST"
            })
        })
        .unwrap_or_else(|| panic!("no line of the request in {gateway_lines:#?}"));
    assert_eq!(answered["fields"]["message"], "request answered");
    assert_eq!(answered["fields"]["status"], 202);
    assert!(
        gateway_lines.iter().any(|line| {
            spans_of(line).iter().any(|span| {
                span["name"] == "turn"
                    && span["turn_id"] == turn_id.as_str()
                    && span["session_key"] == "json-logs"
                    && span["runtime"] == "native"
            })
        }),
        "no line of turn {turn_id} in {gateway_lines:#?}"
    );

    // The node host's log lines, its worker's included, are JSON as well; only the startup
    // report of the sandbox layers is plain text for the operator.
    let node_log = node.stderr();
    let mut node_lines = Vec::new();
    for line in node_log.lines() {
        if line.starts_with("gatehouse node: sandbox: ") {
            continue;
        }
        let parsed: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line:?}"));
        node_lines.push(parsed);
    }
    assert!(!node_lines.is_empty(), "{node_log}");
    for line in &node_lines {
        assert!(
            line["level"].is_string() && line["fields"]["message"].is_string(),
            "{line}"
        );
    }
}

/// One span the test receiver decoded.
#[derive(Debug, Clone)]
struct ReceivedSpan {
    service: String,
    role: String,
    name: String,
    trace_id: String,
    span_id: String,
    parent_span_id: String,
    attributes: Vec<(String, String)>,
}

impl ReceivedSpan {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(name, _)| name == key)
            .map(|(_, value)| value.as_str())
    }
}

type Received = Arc<Mutex<Vec<ReceivedSpan>>>;

fn string_attribute(attributes: &[KeyValue], key: &str) -> String {
    attributes
        .iter()
        .find(|attribute| attribute.key == key)
        .map(attribute_text)
        .unwrap_or_default()
}

fn attribute_text(attribute: &KeyValue) -> String {
    match attribute
        .value
        .as_ref()
        .and_then(|value| value.value.as_ref())
    {
        Some(any_value::Value::StringValue(text)) => text.clone(),
        Some(any_value::Value::IntValue(number)) => number.to_string(),
        Some(any_value::Value::BoolValue(flag)) => flag.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    }
}

/// Decodes one OTLP/HTTP protobuf export into `received`.
async fn accept_traces(
    axum::extract::State(received): axum::extract::State<Received>,
    body: axum::body::Bytes,
) -> ([(axum::http::HeaderName, &'static str); 1], Vec<u8>) {
    let request = ExportTraceServiceRequest::decode(body).unwrap();
    let mut spans = Vec::new();
    for resource_spans in request.resource_spans {
        let resource = resource_spans.resource.unwrap_or_default().attributes;
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                spans.push(ReceivedSpan {
                    service: string_attribute(&resource, "service.name"),
                    role: string_attribute(&resource, "gatehouse.role"),
                    name: span.name,
                    trace_id: hex::encode(&span.trace_id),
                    span_id: hex::encode(&span.span_id),
                    parent_span_id: hex::encode(&span.parent_span_id),
                    attributes: span
                        .attributes
                        .iter()
                        .map(|attribute| (attribute.key.clone(), attribute_text(attribute)))
                        .collect(),
                });
            }
        }
    }
    received.lock().unwrap().extend(spans);
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
}

/// Starts an OTLP/HTTP receiver on loopback and returns its base URL and what it received.
async fn otlp_receiver() -> (String, Received) {
    let received = Received::default();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(accept_traces))
        .with_state(Arc::clone(&received));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, received)
}

/// Returns the received span named `name` of `service` in `trace_id` (and with `command`, for
/// invoke spans), if any.
fn find_span(
    spans: &[ReceivedSpan],
    service: &str,
    name: &str,
    trace_id: Option<&str>,
) -> Option<ReceivedSpan> {
    spans
        .iter()
        .find(|span| {
            span.service == service
                && span.name == name
                && trace_id.is_none_or(|trace_id| span.trace_id == trace_id)
                && (name != "node_invoke" || span.attribute("command") == Some("agent.turn"))
        })
        .cloned()
}

#[tokio::test(flavor = "multi_thread")]
async fn one_native_turn_is_one_trace_across_gateway_node_host_and_worker() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let (endpoint, received) = otlp_receiver().await;
    // The Gateway batches for a minute, so its spans can only arrive through the flush of a
    // graceful shutdown; the node host and its workers export after 100 ms.
    let mut gateway = Gateway::start_with_env(
        &dirs.base.join("gateway"),
        &logs,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "60000"),
        ],
    );
    let code = gateway.setup_code(600);
    let mut node = start_mock_model_node_with(
        &gateway,
        &dirs.base.join("harness"),
        Some(&code),
        &logs,
        &mock_url,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ],
    );
    gateway.wait_ready().await;
    let turn = crate::suite::support::turn(&gateway, "traced", "/say hi").await;
    assert_eq!(turn["status"], "completed", "{turn}");

    // The node host's invoke span and the worker's spans arrive in one trace.
    let deadline = Instant::now() + WAIT;
    let (node_invoke, worker_turn, model_call) = loop {
        let spans = received.lock().unwrap().clone();
        let found = find_span(&spans, "gatehouse-node", "node_invoke", None).and_then(|node| {
            let trace = Some(node.trace_id.as_str());
            let worker = find_span(&spans, "gatehouse-worker", "worker_turn", trace)?;
            let model = find_span(&spans, "gatehouse-worker", "model_call", trace)?;
            Some((node.clone(), worker, model))
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no node and worker spans of one trace in {spans:#?}\nnode: {}",
            node.stderr()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(worker_turn.parent_span_id, node_invoke.span_id);
    assert_eq!(model_call.parent_span_id, worker_turn.span_id);
    assert_eq!(worker_turn.attribute("turn_id"), turn["turnId"].as_str());
    assert_eq!(model_call.attribute("model"), Some("mock-model"));
    assert_eq!(model_call.attribute("outcome"), Some("ok"));
    assert_eq!(node_invoke.attribute("outcome"), Some("ok"));
    assert_eq!(node_invoke.role, "node");
    assert_eq!(worker_turn.role, "worker");

    // SIGTERM: the Gateway's graceful shutdown flushes its batch, which holds the turn.
    assert!(gateway.process.terminate().success());
    let spans = received.lock().unwrap().clone();
    let trace = Some(node_invoke.trace_id.as_str());
    let gateway_invoke = find_span(&spans, "gatehouse-gateway", "node_invoke", trace)
        .unwrap_or_else(|| panic!("no gateway invoke span in {spans:#?}"));
    let gateway_turn = find_span(&spans, "gatehouse-gateway", "turn", trace)
        .unwrap_or_else(|| panic!("no gateway turn span in {spans:#?}"));
    assert_eq!(node_invoke.parent_span_id, gateway_invoke.span_id);
    assert_eq!(gateway_invoke.parent_span_id, gateway_turn.span_id);
    assert_eq!(gateway_turn.attribute("turn_id"), turn["turnId"].as_str());
    assert_eq!(gateway_turn.attribute("outcome"), Some("completed"));
    assert_eq!(gateway_turn.role, "gateway");
    // The request that posted the message has its own span, with its route and status.
    assert!(
        spans.iter().any(|span| span.service == "gatehouse-gateway"
            && span.name == "http_request"
            && span.attribute("route") == Some("/v1/sessions/{key}/messages")
            && span.attribute("status") == Some("202")),
        "{spans:#?}"
    );
    node.terminate();
}
