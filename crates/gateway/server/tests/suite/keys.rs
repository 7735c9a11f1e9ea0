//! API keys through the HTTP API: every `/v1` route against a key of each scope and the operator
//! token, expired, revoked and unknown keys, a `chat` key limited to a session prefix, and the
//! audit trail, which names keys and never holds a secret (issue 17).

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use axum::http::StatusCode;
use axum::http::header;
use gatehouse_api::keys::ApiKeyCreated;
use gatehouse_gateway::TurnFailure;
use gatehouse_gateway::TurnInput;
use gatehouse_gateway::TurnReply;
use gatehouse_gateway::TurnRuntime;
use gatehouse_gateway::TurnSink;
use gatehouse_store::records::NewApiKey;
use gatehouse_store::records::Scope;
use pretty_assertions::assert_eq;
use sha2::Digest;
use tower::ServiceExt;

use crate::suite::support::FakeWorkspace;
use crate::suite::support::FetchAnswer;
use crate::suite::support::TOKEN;
use crate::suite::support::TestGateway;
use crate::suite::support::WriteAnswer;
use crate::suite::support::gateway_with;
use crate::suite::support::operator_request;

/// A runtime that answers `echo: TEXT` in two deltas and reports [`echo_usage`]; a text
/// `/tool NAME` first records a call of tool `NAME`, and `/fail CODE` fails the turn with that
/// code.
pub(crate) struct EchoRuntime;

/// The usage [`EchoRuntime`] reports for a turn of `text` answered `reply`: their byte counts.
pub(crate) fn echo_usage(text: &str, reply: &str) -> gatehouse_protocol::worker::TokenUsage {
    let input_tokens = u64::try_from(text.len()).unwrap();
    let output_tokens = u64::try_from(reply.len()).unwrap();
    gatehouse_protocol::worker::TokenUsage {
        input_tokens,
        output_tokens,
        total_tokens: input_tokens + output_tokens,
        model_calls: 1,
        model: Some(String::from("echo")),
        ..Default::default()
    }
}

#[async_trait::async_trait]
impl TurnRuntime for EchoRuntime {
    fn name(&self) -> &str {
        "echo"
    }

    fn supports_steer(&self) -> bool {
        false
    }

    async fn run_turn(&self, input: TurnInput, sink: TurnSink) -> Result<TurnReply, TurnFailure> {
        let text = input.user_texts.join("+");
        if let Some(code) = text.strip_prefix("/fail ") {
            return Err(TurnFailure::new(code, "the model failed"));
        }
        if let Some(tool) = text.strip_prefix("/tool ") {
            sink.tool_started(tool, &serde_json::json!({})).await?;
            sink.tool_completed(tool, true).await?;
        }
        let reply = format!("echo: {text}");
        let (first, second) = reply.split_at(reply.len() / 2);
        sink.delta(first);
        sink.delta(second);
        sink.commit("assistant", &reply, None).await?;
        Ok(TurnReply {
            usage: Some(echo_usage(&text, &reply)),
            text: reply,
        })
    }
}

pub(crate) fn workspace() -> FakeWorkspace {
    FakeWorkspace::new(
        FetchAnswer::File(b"# notes\n".to_vec()),
        WriteAnswer::Confirmed,
    )
}

pub(crate) async fn echo_gateway() -> TestGateway {
    gateway_with(workspace(), Some(Arc::new(EchoRuntime)), 8).await
}

/// Returns a request sent with `bearer`.
pub(crate) fn request_with(
    bearer: &str,
    method: &str,
    uri: &str,
    body: Option<serde_json::Value>,
) -> Request<Body> {
    let builder = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {bearer}"));
    match body {
        Some(body) => builder
            .header(header::CONTENT_TYPE, "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
        None => builder.body(Body::empty()).unwrap(),
    }
}

/// Sends `request` and returns its status and, for a JSON answer, its body (`Null` for a stream
/// or other bytes, which are not read, so an open event stream does not hold the test).
pub(crate) async fn status_and_body(
    gateway: &TestGateway,
    request: Request<Body>,
) -> (StatusCode, serde_json::Value) {
    let response = gateway.router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !is_json {
        return (status, serde_json::Value::Null);
    }
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// Creates a key through `POST /v1/keys` with the operator token and returns the answer.
pub(crate) async fn create_key(gateway: &TestGateway, body: serde_json::Value) -> ApiKeyCreated {
    let (status, answer) =
        status_and_body(gateway, request_with(TOKEN, "POST", "/v1/keys", Some(body))).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    serde_json::from_value(answer).unwrap()
}

/// Posts `text` to `session` with the operator token, waits for the turn and returns its id.
pub(crate) async fn finished_turn(gateway: &TestGateway, session: &str, text: &str) -> String {
    let (status, accepted) = status_and_body(
        gateway,
        request_with(
            TOKEN,
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Some(serde_json::json!({"text": text})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let turn_id = accepted["turnId"].as_str().unwrap().to_owned();
    let (status, turn) = status_and_body(
        gateway,
        request_with(TOKEN, "GET", &format!("/v1/turns/{turn_id}?wait=20"), None),
    )
    .await;
    assert_eq!(
        (status, turn["status"].as_str()),
        (StatusCode::OK, Some("completed")),
        "{turn}"
    );
    turn_id
}

/// One request of the route-by-route test, and the scopes that open its route (as `API.md`
/// and the README list them; `admin` opens every route).
struct Case {
    method: &'static str,
    template: &'static str,
    uri: String,
    body: Option<serde_json::Value>,
    opened_by: &'static [Scope],
}

fn case(
    method: &'static str,
    template: &'static str,
    uri: &str,
    body: Option<serde_json::Value>,
    opened_by: &'static [Scope],
) -> Case {
    Case {
        method,
        template,
        uri: uri.to_owned(),
        body,
        opened_by,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_every_v1_route_answers_each_scope_as_the_table_says() {
    const CHAT: &[Scope] = &[Scope::Chat];
    const READ: &[Scope] = &[Scope::Read];
    const CHAT_READ: &[Scope] = &[Scope::Chat, Scope::Read];
    const READ_DOCUMENTS: &[Scope] = &[Scope::Read, Scope::Documents];
    const DOCUMENTS: &[Scope] = &[Scope::Documents];
    const ADMIN_ONLY: &[Scope] = &[];
    let gateway = echo_gateway().await;
    let turn_id = finished_turn(&gateway, "s1", "hello").await;
    let (status, uploaded) = status_and_body(
        &gateway,
        operator_request("POST", "/v1/media", Body::from("media bytes")),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{uploaded}");
    let media_id = uploaded["mediaId"].as_str().unwrap().to_owned();
    let mut keys = Vec::new();
    for scope in Scope::ALL {
        let created = create_key(
            &gateway,
            serde_json::json!({"name": format!("k-{}", scope.as_str()), "scopes": [scope]}),
        )
        .await;
        keys.push((scope, created.key));
    }
    let chat = || {
        Some(serde_json::json!({"model": "main", "messages": [{"role": "user", "content": "hi"}]}))
    };
    let cases = |principal: &str| {
        vec![
            case("GET", "/v1/nodes", "/v1/nodes", None, READ),
            case("GET", "/v1/replicas", "/v1/replicas", None, READ),
            case(
                "POST",
                "/v1/nodes/setup-codes",
                "/v1/nodes/setup-codes",
                Some(serde_json::json!({})),
                ADMIN_ONLY,
            ),
            case(
                "GET",
                "/v1/agents/{agent}/workspace/{path}",
                "/v1/agents/main/workspace/MEMORY.md",
                None,
                READ,
            ),
            case("GET", "/v1/audit", "/v1/audit", None, READ),
            case(
                "GET",
                "/v1/agents/{agent}/files/{name}",
                "/v1/agents/main/files/AGENTS.md",
                None,
                READ_DOCUMENTS,
            ),
            case(
                "PUT",
                "/v1/agents/{agent}/files/{name}",
                "/v1/agents/main/files/AGENTS.md",
                Some(serde_json::json!({"content": "# agents\n"})),
                DOCUMENTS,
            ),
            case("GET", "/v1/sessions", "/v1/sessions", None, READ),
            case(
                "POST",
                "/v1/sessions/{key}/messages",
                "/v1/sessions/s1/messages",
                Some(serde_json::json!({"text": "again"})),
                CHAT,
            ),
            case(
                "GET",
                "/v1/sessions/{key}/transcript",
                "/v1/sessions/s1/transcript",
                None,
                CHAT_READ,
            ),
            case(
                "GET",
                "/v1/sessions/{key}/events",
                "/v1/sessions/s1/events",
                None,
                CHAT_READ,
            ),
            case(
                "POST",
                "/v1/sessions/{key}/abort",
                "/v1/sessions/idle/abort",
                None,
                CHAT,
            ),
            case(
                "POST",
                "/v1/sessions/{key}/stop",
                "/v1/sessions/idle/stop",
                None,
                ADMIN_ONLY,
            ),
            case(
                "POST",
                "/v1/sessions/{key}/move",
                "/v1/sessions/idle/move",
                Some(serde_json::json!({})),
                ADMIN_ONLY,
            ),
            case(
                "PUT",
                "/v1/sessions/{key}",
                "/v1/sessions/s1",
                Some(serde_json::json!({"workspace": {"source": "empty"}})),
                CHAT,
            ),
            case(
                "GET",
                "/v1/sessions/{key}",
                "/v1/sessions/s1",
                None,
                CHAT_READ,
            ),
            case(
                "PUT",
                "/v1/sessions/{key}/worktree/{path}",
                "/v1/sessions/s1/worktree/a.txt",
                Some(serde_json::json!("text")),
                CHAT,
            ),
            case(
                "GET",
                "/v1/sessions/{key}/worktree/{path}",
                "/v1/sessions/s1/worktree/a.txt",
                None,
                CHAT_READ,
            ),
            case(
                "GET",
                "/v1/sessions/{key}/worktree.json",
                "/v1/sessions/s1/worktree.json",
                None,
                CHAT_READ,
            ),
            case(
                "GET",
                "/v1/sessions/{key}/worktree.tar",
                "/v1/sessions/s1/worktree.tar",
                None,
                CHAT_READ,
            ),
            case(
                "GET",
                "/v1/sessions/{key}/worktree/diff",
                "/v1/sessions/s1/worktree/diff",
                None,
                CHAT_READ,
            ),
            case(
                "GET",
                "/v1/turns/{turnId}",
                &format!("/v1/turns/{turn_id}"),
                None,
                CHAT_READ,
            ),
            case("POST", "/v1/media", "/v1/media", None, CHAT),
            case(
                "GET",
                "/v1/media/{mediaId}",
                &format!("/v1/media/{media_id}"),
                None,
                CHAT_READ,
            ),
            case(
                "GET",
                "/v1/memory/search",
                "/v1/memory/search?q=notes",
                None,
                READ,
            ),
            case(
                "GET",
                "/v1/memory/get",
                "/v1/memory/get?path=MEMORY.md",
                None,
                READ,
            ),
            case("GET", "/v1/memory/status", "/v1/memory/status", None, READ),
            case(
                "POST",
                "/v1/memory/reindex",
                "/v1/memory/reindex",
                None,
                ADMIN_ONLY,
            ),
            case("GET", "/v1/skills", "/v1/skills", None, READ),
            case(
                "POST",
                "/v1/keys",
                "/v1/keys",
                Some(
                    serde_json::json!({"name": format!("made-by-{principal}"), "scopes": ["read"]}),
                ),
                ADMIN_ONLY,
            ),
            case("GET", "/v1/keys", "/v1/keys", None, ADMIN_ONLY),
            case(
                "DELETE",
                "/v1/keys/{name}",
                "/v1/keys/nobody",
                None,
                ADMIN_ONLY,
            ),
            case("GET", "/v1/usage", "/v1/usage", None, READ),
            case("GET", "/v1/channels", "/v1/channels", None, READ),
            case(
                "GET",
                "/v1/channels/{name}/pairings",
                "/v1/channels/hooks/pairings",
                None,
                ADMIN_ONLY,
            ),
            case(
                "POST",
                "/v1/channels/{name}/pairings/{code}/approve",
                "/v1/channels/hooks/pairings/ABCDEFGH/approve",
                None,
                ADMIN_ONLY,
            ),
            case(
                "DELETE",
                "/v1/channels/{name}/pairings/{code}",
                "/v1/channels/hooks/pairings/ABCDEFGH",
                None,
                ADMIN_ONLY,
            ),
            case("GET", "/v1/models", "/v1/models", None, CHAT_READ),
            case(
                "POST",
                "/v1/chat/completions",
                "/v1/chat/completions",
                chat(),
                CHAT,
            ),
        ]
    };
    // Every route of the API's schema is a case, so a new route cannot miss this test.
    let schema = gatehouse_api::schema::api_schema();
    let schema_routes: BTreeSet<(String, String)> = schema["routes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|route| {
            (
                route["method"].as_str().unwrap().to_owned(),
                route["path"].as_str().unwrap().to_owned(),
            )
        })
        .filter(|(_, path)| path.starts_with("/v1/"))
        .collect();
    let case_routes: BTreeSet<(String, String)> = cases("operator")
        .iter()
        .map(|case| (case.method.to_owned(), case.template.to_owned()))
        .collect();
    assert_eq!(case_routes, schema_routes);

    let mut answered = Vec::new();
    for case in cases("operator") {
        let (status, body) = status_and_body(
            &gateway,
            request_with(TOKEN, case.method, &case.uri, case.body),
        )
        .await;
        assert!(
            status != StatusCode::UNAUTHORIZED && status != StatusCode::FORBIDDEN,
            "{} {}: {status} {body}",
            case.method,
            case.uri
        );
        answered.push(status);
    }
    for (scope, key) in &keys {
        for (case, operator_status) in cases(scope.as_str()).into_iter().zip(&answered) {
            let opened = *scope == Scope::Admin || case.opened_by.contains(scope);
            let (status, body) = status_and_body(
                &gateway,
                request_with(key, case.method, &case.uri, case.body),
            )
            .await;
            let what = format!("{} {} with a {} key", case.method, case.uri, scope.as_str());
            match opened {
                // The key gets what the operator token got.
                true => assert_eq!(status, *operator_status, "{what}: {body}"),
                false => {
                    assert_eq!(status, StatusCode::FORBIDDEN, "{what}: {body}");
                    assert_eq!(body["error"]["code"], "SCOPE_DENIED", "{what}: {body}");
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_expired_revoked_and_unknown_keys_get_401() {
    let gateway = echo_gateway().await;
    let created = create_key(
        &gateway,
        serde_json::json!({"name": "dash", "scopes": ["read"]}),
    )
    .await;
    let (status, _) = status_and_body(
        &gateway,
        request_with(&created.key, "GET", "/v1/sessions", None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // A key whose expiry has passed, written as the Gateway writes keys.
    let expired_secret = "ghk_expired-secret-for-the-test";
    gateway
        .store()
        .insert_api_key(&NewApiKey {
            name: "old".into(),
            secret_sha256: hex::encode(sha2::Sha256::digest(expired_secret.as_bytes())),
            scopes: vec![Scope::Admin],
            session_prefix: None,
            created_at_ms: 1,
            expires_at_ms: Some(2),
            last_used_at_ms: None,
            requests_per_minute: None,
            concurrent_turns: None,
            max_streams: None,
            media_quota_bytes: None,
            tokens_per_day: None,
        })
        .await
        .unwrap();
    let (status, revoked) = status_and_body(
        &gateway,
        request_with(TOKEN, "DELETE", "/v1/keys/dash", None),
    )
    .await;
    assert_eq!(
        (status, revoked),
        (StatusCode::OK, serde_json::json!({"revoked": true}))
    );
    for bearer in [
        created.key.as_str(),
        expired_secret,
        "ghk_never-issued",
        "not-a-key-at-all",
    ] {
        let (status, body) =
            status_and_body(&gateway, request_with(bearer, "GET", "/v1/sessions", None)).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{bearer}: {body}");
        assert_eq!(body["error"]["code"], "UNAUTHORIZED", "{body}");
    }
    // Revoking again finds nothing; the operator token still works.
    let (status, revoked) = status_and_body(
        &gateway,
        request_with(TOKEN, "DELETE", "/v1/keys/dash", None),
    )
    .await;
    assert_eq!(
        (status, revoked),
        (StatusCode::OK, serde_json::json!({"revoked": false}))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_a_chat_key_limited_to_app1_cannot_reach_app2_sessions() {
    let gateway = echo_gateway().await;
    let other_turn = finished_turn(&gateway, "app2-x", "private").await;
    let app = create_key(
        &gateway,
        serde_json::json!({"name": "app1", "scopes": ["chat"], "sessions": "app1-"}),
    )
    .await;
    assert_eq!(app.sessions.as_deref(), Some("app1-"));
    let message = || Some(serde_json::json!({"text": "hello"}));
    for (method, uri, body) in [
        ("POST", "/v1/sessions/app2-x/messages", message()),
        ("GET", "/v1/sessions/app2-x/transcript", None),
        ("GET", "/v1/sessions/app2-x/events", None),
        ("POST", "/v1/sessions/app2-x/abort", None),
        ("GET", &format!("/v1/turns/{other_turn}"), None),
    ] {
        let (status, answer) =
            status_and_body(&gateway, request_with(&app.key, method, uri, body)).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {uri}: {answer}");
        assert_eq!(answer["error"]["code"], "SCOPE_DENIED", "{answer}");
    }
    let (status, answer) = status_and_body(
        &gateway,
        Request::builder()
            .method("POST")
            .uri("/v1/chat/completions")
            .header(header::AUTHORIZATION, format!("Bearer {}", app.key))
            .header(header::CONTENT_TYPE, "application/json")
            .header("x-gatehouse-session", "app2-x")
            .body(Body::from(
                serde_json::json!({"model": "main", "messages": [{"role": "user", "content": "hi"}]})
                    .to_string(),
            ))
            .unwrap(),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN, "{answer}");
    assert_eq!(answer["error"]["code"], "SCOPE_DENIED", "{answer}");
    assert_eq!(answer["error"]["type"], "permission_error", "{answer}");
    // Its own sessions work, and the other session holds only what the operator sent.
    let (status, accepted) = status_and_body(
        &gateway,
        request_with(&app.key, "POST", "/v1/sessions/app1-a/messages", message()),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{accepted}");
    let turn_id = accepted["turnId"].as_str().unwrap();
    let (status, turn) = status_and_body(
        &gateway,
        request_with(
            &app.key,
            "GET",
            &format!("/v1/turns/{turn_id}?wait=20"),
            None,
        ),
    )
    .await;
    assert_eq!(
        (status, turn["reply"].as_str()),
        (StatusCode::OK, Some("echo: hello"))
    );
    let (_, transcript) = status_and_body(
        &gateway,
        request_with(TOKEN, "GET", "/v1/sessions/app2-x/transcript", None),
    )
    .await;
    let texts: Vec<&str> = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|message| message["content"].as_str().unwrap())
        .collect();
    assert_eq!(texts, vec!["private", "echo: private"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_audit_rows_name_the_key_and_never_hold_its_secret() {
    let gateway = echo_gateway().await;
    let app = create_key(
        &gateway,
        serde_json::json!({"name": "app", "scopes": ["chat"], "expiresInSeconds": 3600}),
    )
    .await;
    assert!(app.key.starts_with("ghk_"), "{}", app.key);
    assert!(app.expires_at_ms.is_some());
    let (status, _) = status_and_body(
        &gateway,
        request_with(&app.key, "POST", "/v1/sessions/s/abort", None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    let (status, _) =
        status_and_body(&gateway, request_with(&app.key, "GET", "/v1/audit", None)).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let events = gateway.audit_events().await;
    let rows: Vec<(String, String, String)> = events
        .iter()
        .map(|event| {
            (
                event["actor"].as_str().unwrap().to_owned(),
                event["action"].as_str().unwrap().to_owned(),
                event["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("operator".into(), "key.create".into(), "succeeded".into()),
            ("key:app".into(), "session.abort".into(), "succeeded".into()),
            ("key:app".into(), "http.request".into(), "denied".into()),
        ]
    );
    assert_eq!(events[0]["details"]["name"], "app");
    let trail = serde_json::Value::Array(events).to_string();
    let secret_part = app.key.strip_prefix("ghk_").unwrap();
    assert!(!trail.contains(secret_part), "{trail}");
    let hash = hex::encode(sha2::Sha256::digest(app.key.as_bytes()));
    assert!(!trail.contains(&hash), "{trail}");
    // The list shows the key without its secret or hash.
    let (_, list) = status_and_body(&gateway, request_with(TOKEN, "GET", "/v1/keys", None)).await;
    assert_eq!(list["keys"][0]["name"], "app");
    assert_eq!(list["keys"][0]["scopes"], serde_json::json!(["chat"]));
    assert!(list["keys"][0]["lastUsedAtMs"].is_i64(), "{list}");
    assert!(!list.to_string().contains(secret_part) && !list.to_string().contains(&hash));
    // A duplicate name is refused.
    let (status, refused) = status_and_body(
        &gateway,
        request_with(
            TOKEN,
            "POST",
            "/v1/keys",
            Some(serde_json::json!({"name": "app", "scopes": ["read"]})),
        ),
    )
    .await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (StatusCode::CONFLICT, &serde_json::json!("ALREADY_EXISTS"))
    );
}

/// A runtime whose turns wait for a permit, then answer `done`.
struct GatedRuntime {
    permits: tokio::sync::Semaphore,
}

#[async_trait::async_trait]
impl TurnRuntime for GatedRuntime {
    fn name(&self) -> &str {
        "gated"
    }

    fn supports_steer(&self) -> bool {
        false
    }

    async fn run_turn(&self, _input: TurnInput, sink: TurnSink) -> Result<TurnReply, TurnFailure> {
        self.permits.acquire().await.unwrap().forget();
        sink.commit("assistant", "done", None).await?;
        Ok(String::from("done").into())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_a_key_over_its_requests_per_minute_gets_429_with_retry_after() {
    let gateway = echo_gateway().await;
    let limited = create_key(
        &gateway,
        serde_json::json!({"name": "slow", "scopes": ["read"], "requestsPerMinute": 2}),
    )
    .await;
    let other = create_key(
        &gateway,
        serde_json::json!({"name": "free", "scopes": ["read"]}),
    )
    .await;
    for _ in 0..2 {
        let (status, body) = status_and_body(
            &gateway,
            request_with(&limited.key, "GET", "/v1/sessions", None),
        )
        .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let response = gateway
        .router
        .clone()
        .oneshot(request_with(&limited.key, "GET", "/v1/sessions", None))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry_after: u64 = response.headers()[header::RETRY_AFTER]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let body: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(body["error"]["code"], "RATE_LIMITED", "{body}");
    // On the OpenAI routes the refusal has OpenAI's shape.
    let (status, body) = status_and_body(
        &gateway,
        request_with(&limited.key, "GET", "/v1/models", None),
    )
    .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        (&body["error"]["type"], &body["error"]["code"]),
        (
            &serde_json::json!("rate_limit_error"),
            &serde_json::json!("RATE_LIMITED")
        )
    );
    // Other keys and the operator token are not limited by it.
    for bearer in [other.key.as_str(), TOKEN] {
        let (status, _) =
            status_and_body(&gateway, request_with(bearer, "GET", "/v1/sessions", None)).await;
        assert_eq!(status, StatusCode::OK);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_a_key_over_its_concurrent_turns_gets_429_until_a_turn_ends() {
    let runtime = Arc::new(GatedRuntime {
        permits: tokio::sync::Semaphore::new(0),
    });
    let gateway = gateway_with(
        workspace(),
        Some(Arc::clone(&runtime) as Arc<dyn TurnRuntime>),
        8,
    )
    .await;
    let app = create_key(
        &gateway,
        serde_json::json!({"name": "one-at-a-time", "scopes": ["chat"], "concurrentTurns": 1}),
    )
    .await;
    let post = |session: &str| {
        request_with(
            &app.key,
            "POST",
            &format!("/v1/sessions/{session}/messages"),
            Some(serde_json::json!({"text": "work"})),
        )
    };
    let (status, first) = status_and_body(&gateway, post("a")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{first}");
    let (status, refused) = status_and_body(&gateway, post("b")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");
    assert_eq!(refused["error"]["code"], "RATE_LIMITED");
    // The operator is not limited by the key.
    let (status, _) = status_and_body(
        &gateway,
        request_with(
            TOKEN,
            "POST",
            "/v1/sessions/c/messages",
            Some(serde_json::json!({"text": "op"})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    // One permit for the key's turn and one for the operator's, which may take either.
    runtime.permits.add_permits(2);
    let turn_id = first["turnId"].as_str().unwrap();
    let (_, turn) = status_and_body(
        &gateway,
        request_with(
            &app.key,
            "GET",
            &format!("/v1/turns/{turn_id}?wait=20"),
            None,
        ),
    )
    .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    let (status, again) = status_and_body(&gateway, post("b")).await;
    assert_eq!(status, StatusCode::ACCEPTED, "{again}");
    runtime.permits.add_permits(1);
}
