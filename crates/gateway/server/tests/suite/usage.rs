//! Usage and budgets through the router: a runtime that reports each model call as it answers,
//! the turn's `usage`, `GET /v1/usage`, the model families of `/metrics`, the daily budgets of
//! a key and a session (refused before admission), the turn ceiling (the turn ends with
//! `TURN_BUDGET_EXCEEDED`, its counted calls kept) and the `model.retry` event.

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use gatehouse_gateway::TurnFailure;
use gatehouse_gateway::TurnInput;
use gatehouse_gateway::TurnReply;
use gatehouse_gateway::TurnRuntime;
use gatehouse_gateway::TurnSink;
use gatehouse_protocol::worker::TokenUsage;
use serde_json::json;

use crate::suite::keys::create_key;
use crate::suite::keys::request_with;
use crate::suite::keys::status_and_body;
use crate::suite::keys::workspace;
use crate::suite::support::TOKEN;
use crate::suite::support::TestGateway;
use crate::suite::support::gateway_configured;
use crate::suite::support::operator_request;

/// A runtime whose text `/calls N` makes N model calls of [`call`] each (a retry before the
/// first); the ceiling it was given is its reply.
struct MeteredRuntime;

/// What each model call of [`MeteredRuntime`] reports: 100 input, 20 cached, 5 output.
fn call(retries: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: 100,
        cached_input_tokens: 20,
        output_tokens: 5,
        total_tokens: 125,
        model_calls: 1,
        retries,
        model: Some(String::from("metered-1")),
    }
}

#[async_trait::async_trait]
impl TurnRuntime for MeteredRuntime {
    fn name(&self) -> &str {
        "metered"
    }

    fn supports_steer(&self) -> bool {
        false
    }

    async fn run_turn(&self, input: TurnInput, sink: TurnSink) -> Result<TurnReply, TurnFailure> {
        let text = input.user_texts.join("\n");
        let calls: u64 = text
            .strip_prefix("/calls ")
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or(1);
        sink.model_retry(1, "MODEL_RATE_LIMITED", "429 from the provider", 250)
            .await?;
        for index in 0..calls {
            sink.model_usage(call(u64::from(index == 0))).await?;
        }
        let reply = format!("ceiling {:?}", sink.max_turn_tokens());
        sink.commit("assistant", &reply, None).await?;
        // A runtime that also reports at the end: the calls counted one by one win.
        Ok(TurnReply {
            text: reply,
            usage: Some(TokenUsage {
                input_tokens: 1,
                output_tokens: 1,
                total_tokens: 2,
                ..TokenUsage::default()
            }),
        })
    }
}

async fn metered_gateway(
    session_tokens_per_day: Option<u64>,
    turn_max_tokens: Option<u64>,
) -> TestGateway {
    gateway_configured(workspace(), Some(Arc::new(MeteredRuntime)), |config| {
        config.budgets.session_tokens_per_day = session_tokens_per_day;
        config.budgets.turn_max_tokens = turn_max_tokens;
    })
    .await
}

/// Posts `text` to `session` with `bearer` and returns the status and answer.
async fn post(
    gateway: &TestGateway,
    bearer: &str,
    session: &str,
    text: &str,
) -> (StatusCode, serde_json::Value, Option<String>) {
    let response = tower::ServiceExt::oneshot(
        gateway.router.clone(),
        request_with(
            bearer,
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Some(json!({"text": text})),
        ),
    )
    .await
    .unwrap();
    let status = response.status();
    let retry_after = response
        .headers()
        .get("retry-after")
        .map(|value| value.to_str().unwrap().to_owned());
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap(), retry_after)
}

/// Posts `text` and returns the turn once it ended.
async fn turn(gateway: &TestGateway, bearer: &str, session: &str, text: &str) -> serde_json::Value {
    let (status, accepted, _) = post(gateway, bearer, session, text).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let turn_id = accepted["turnId"].as_str().unwrap();
    let (status, turn) = status_and_body(
        gateway,
        request_with(TOKEN, "GET", &format!("/v1/turns/{turn_id}?wait=20"), None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{turn}");
    turn
}

async fn usage(gateway: &TestGateway, group_by: &str) -> serde_json::Value {
    let (status, body) = gateway
        .send(operator_request(
            "GET",
            &format!("/v1/usage?groupBy={group_by}"),
            Body::empty(),
        ))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["rows"].clone()
}

#[tokio::test]
async fn each_reported_call_counts_and_the_sums_agree_everywhere() {
    let gateway = metered_gateway(None, None).await;
    let key = create_key(&gateway, json!({"name": "app", "scopes": ["chat"]})).await;
    let first = turn(&gateway, &key.key, "agent:ops:s1", "/calls 2").await;
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(
        first["usage"],
        json!({
            "inputTokens": 200, "cachedInputTokens": 40, "outputTokens": 10,
            "totalTokens": 250, "modelCalls": 2, "retries": 1, "model": "metered-1"
        }),
        "the calls counted one by one, not the runtime's own end report"
    );
    let second = turn(&gateway, TOKEN, "s2", "/calls 1").await;
    assert_eq!(second["usage"]["totalTokens"], 125, "{second}");

    let by_session = usage(&gateway, "session").await;
    assert_eq!(
        by_session,
        json!([
            {"group": "agent:ops:s1", "turns": 1, "modelCalls": 2, "inputTokens": 200,
             "cachedInputTokens": 40, "outputTokens": 10, "totalTokens": 250},
            {"group": "s2", "turns": 1, "modelCalls": 1, "inputTokens": 100,
             "cachedInputTokens": 20, "outputTokens": 5, "totalTokens": 125},
        ])
    );
    let groups = |rows: serde_json::Value| {
        rows.as_array()
            .unwrap()
            .iter()
            .map(|row| {
                (
                    row["group"].as_str().unwrap().to_owned(),
                    row["totalTokens"].as_u64().unwrap(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        groups(usage(&gateway, "key").await),
        vec![(String::from("-"), 125), (String::from("app"), 250)]
    );
    assert_eq!(
        groups(usage(&gateway, "agent").await),
        vec![(String::from("main"), 125), (String::from("ops"), 250)]
    );
    let days = groups(usage(&gateway, "day").await);
    assert_eq!(days.len(), 1, "{days:?}");
    assert_eq!(days[0].1, 375);
    assert_eq!(days[0].0.len(), "YYYY-MM-DD".len(), "{days:?}");
    // A range that ends before the turns were admitted counts none of them.
    let (status, body) = gateway
        .send(operator_request(
            "GET",
            "/v1/usage?groupBy=session&to=1",
            Body::empty(),
        ))
        .await;
    assert_eq!((status, body), (StatusCode::OK, json!({"rows": []})));
    let (status, body) = gateway
        .send(operator_request(
            "GET",
            "/v1/usage?groupBy=week",
            Body::empty(),
        ))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // A chat key may not read the usage of every key.
    let (status, body) =
        status_and_body(&gateway, request_with(&key.key, "GET", "/v1/usage", None)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::FORBIDDEN, Some("SCOPE_DENIED"))
    );

    // The session list carries each session's sums.
    let (_, sessions) = gateway
        .send(operator_request("GET", "/v1/sessions", Body::empty()))
        .await;
    let s1 = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|session| session["sessionKey"] == "agent:ops:s1")
        .unwrap();
    assert_eq!(s1["usage"]["totalTokens"], 250, "{s1}");
    assert_eq!(s1["usage"]["modelCalls"], 2, "{s1}");

    let metrics = gateway
        .router
        .clone()
        .oneshot_text(operator_request("GET", "/metrics", Body::empty()))
        .await;
    for line in [
        r#"gatehouse_model_tokens_total{model="metered-1",kind="input"} 300"#,
        r#"gatehouse_model_tokens_total{model="metered-1",kind="cached_input"} 60"#,
        r#"gatehouse_model_tokens_total{model="metered-1",kind="output"} 15"#,
        r#"gatehouse_model_calls_total{model="metered-1"} 3"#,
        r#"gatehouse_model_retries_total{model="metered-1"} 2"#,
    ] {
        assert!(metrics.contains(line), "{line} is not in:\n{metrics}");
    }
}

#[tokio::test]
async fn a_retry_is_an_event_of_the_session() {
    let gateway = metered_gateway(None, None).await;
    turn(&gateway, TOKEN, "s", "/calls 1").await;
    let events = gateway.store().events_after("s", 0, 100).await.unwrap();
    let retry = events
        .iter()
        .find(|event| event.kind == "model.retry")
        .expect("a model.retry event");
    assert_eq!(retry.payload["attempt"], 1);
    assert_eq!(retry.payload["code"], "MODEL_RATE_LIMITED");
    assert_eq!(retry.payload["delayMs"], 250);
}

#[tokio::test]
async fn a_key_over_its_daily_budget_is_refused_before_admission() {
    let gateway = metered_gateway(None, None).await;
    let key = create_key(
        &gateway,
        json!({"name": "small", "scopes": ["chat"], "tokensPerDay": 300}),
    )
    .await;
    assert_eq!(key.tokens_per_day, Some(300));
    // 250 of 300 used: the next message is still admitted, and takes the key past its budget.
    turn(&gateway, &key.key, "a", "/calls 2").await;
    turn(&gateway, &key.key, "b", "/calls 2").await;
    let before = gateway.store().transcript("c").await.unwrap().len();
    let (status, body, retry_after) = post(&gateway, &key.key, "c", "/calls 1").await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "BUDGET_EXHAUSTED", "{body}");
    let retry_after: u64 = retry_after.expect("Retry-After").parse().unwrap();
    assert!((1..=86_400).contains(&retry_after), "{retry_after}");
    assert_eq!(
        gateway.store().transcript("c").await.unwrap().len(),
        before,
        "nothing was admitted"
    );
    // Other keys and the operator are not held by this key's budget.
    turn(&gateway, TOKEN, "c", "/calls 1").await;
    let (_, listed) = gateway
        .send(operator_request("GET", "/v1/keys", Body::empty()))
        .await;
    assert_eq!(listed["keys"][0]["tokensPerDay"], 300, "{listed}");
    let (status, body) = status_and_body(
        &gateway,
        request_with(
            TOKEN,
            "POST",
            "/v1/keys",
            Some(json!({"name": "zero", "scopes": ["chat"], "tokensPerDay": 0})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn a_session_over_its_daily_budget_is_refused_and_others_go_on() {
    let gateway = metered_gateway(Some(125), None).await;
    turn(&gateway, TOKEN, "a", "/calls 1").await;
    let (status, body, retry_after) = post(&gateway, TOKEN, "a", "/calls 1").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("BUDGET_EXHAUSTED")),
        "{body}"
    );
    assert!(retry_after.is_some());
    let other = turn(&gateway, TOKEN, "b", "/calls 1").await;
    assert_eq!(other["status"], "completed", "{other}");
}

#[tokio::test]
async fn a_turn_past_its_ceiling_fails_and_keeps_what_it_used() {
    let gateway = metered_gateway(None, Some(300)).await;
    let within = turn(&gateway, TOKEN, "a", "/calls 2").await;
    assert_eq!(within["status"], "completed", "{within}");
    assert_eq!(
        gateway
            .store()
            .transcript("a")
            .await
            .unwrap()
            .last()
            .unwrap()
            .content,
        "ceiling Some(300)",
        "the runtime is told the ceiling"
    );
    let past = turn(&gateway, TOKEN, "b", "/calls 5").await;
    assert_eq!(past["status"], "failed", "{past}");
    assert_eq!(past["error"]["code"], "TURN_BUDGET_EXCEEDED", "{past}");
    assert_eq!(
        past["usage"]["totalTokens"], 375,
        "the call that passed the ceiling is counted, and nothing after it: {past}"
    );
    assert_eq!(past["usage"]["modelCalls"], 3, "{past}");
}

/// `/metrics` as text.
trait OneshotText {
    async fn oneshot_text(self, request: axum::http::Request<Body>) -> String;
}

impl OneshotText for axum::Router {
    async fn oneshot_text(self, request: axum::http::Request<Body>) -> String {
        let response = tower::ServiceExt::oneshot(self, request).await.unwrap();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }
}
