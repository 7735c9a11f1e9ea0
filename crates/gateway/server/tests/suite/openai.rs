//! The OpenAI-compatible routes through the router: models, completions with and without
//! `stream` answered by real turns, sessions, idempotency, tool activity as content, and errors
//! in OpenAI's shape (issue 17).

use axum::body::Body;
use axum::http::Request;
use axum::http::StatusCode;
use axum::http::header;
use gatehouse_api::openai::ChatCompletion;
use gatehouse_api::openai::ChatCompletionChunk;
use gatehouse_api::openai::ChatUsage;
use gatehouse_api::openai::ModelList;
use pretty_assertions::assert_eq;
use tower::ServiceExt;

use crate::suite::keys::echo_gateway;
use crate::suite::keys::echo_usage;
use crate::suite::keys::request_with;
use crate::suite::keys::status_and_body;
use crate::suite::support::TOKEN;
use crate::suite::support::TestGateway;

/// Returns a `POST /v1/chat/completions` of `messages` with the operator token and `headers`.
fn completion_request(
    messages: serde_json::Value,
    stream: bool,
    headers: &[(&str, &str)],
) -> Request<Body> {
    completion_request_of(
        &serde_json::json!({"model": "main", "messages": messages, "stream": stream}),
        headers,
    )
}

/// Returns a `POST /v1/chat/completions` of `body` with the operator token and `headers`.
fn completion_request_of(body: &serde_json::Value, headers: &[(&str, &str)]) -> Request<Body> {
    let mut builder = Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json");
    for (name, value) in headers {
        builder = builder.header(*name, *value);
    }
    builder.body(Body::from(body.to_string())).unwrap()
}

fn user(text: &str) -> serde_json::Value {
    serde_json::json!([{"role": "user", "content": text}])
}

async fn complete(gateway: &TestGateway, request: Request<Body>) -> ChatCompletion {
    let (status, body) = status_and_body(gateway, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_value(body).unwrap()
}

/// Returns the user texts of `session`'s transcript.
async fn user_texts(gateway: &TestGateway, session: &str) -> Vec<String> {
    let (status, transcript) = status_and_body(
        gateway,
        request_with(
            TOKEN,
            "GET",
            &format!("/v1/sessions/{session}/transcript"),
            None,
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{transcript}");
    transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|message| message["role"] == "user")
        .map(|message| message["content"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_models_list_the_main_agent() {
    let gateway = echo_gateway().await;
    let (status, body) =
        status_and_body(&gateway, request_with(TOKEN, "GET", "/v1/models", None)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let models: ModelList = serde_json::from_value(body).unwrap();
    assert_eq!(models.object, "list");
    let ids: Vec<&str> = models.data.iter().map(|model| model.id.as_str()).collect();
    assert_eq!(ids, vec!["main"]);
    assert_eq!(models.data[0].object, "model");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_a_completion_is_a_turn_of_the_named_session_with_the_last_user_message() {
    let gateway = echo_gateway().await;
    let messages = serde_json::json!([
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": [{"type": "text", "text": "new question"}]},
    ]);
    let first = complete(
        &gateway,
        completion_request(messages, false, &[("x-gatehouse-session", "team-a")]),
    )
    .await;
    assert_eq!(first.object, "chat.completion");
    assert_eq!(first.choices[0].message.content, "echo: new question");
    assert_eq!(first.choices[0].finish_reason, "stop");
    let second = complete(
        &gateway,
        completion_request(user("more"), false, &[("x-gatehouse-session", "team-a")]),
    )
    .await;
    assert_eq!(second.choices[0].message.content, "echo: more");
    assert_ne!(first.id, second.id);
    assert_eq!(
        user_texts(&gateway, "team-a").await,
        vec!["new question", "more"]
    );
    // Without the header, `user` names the session.
    let request = Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(
            serde_json::json!({"model": "main", "messages": user("by user"), "user": "team-b"})
                .to_string(),
        ))
        .unwrap();
    complete(&gateway, request).await;
    assert_eq!(user_texts(&gateway, "team-b").await, vec!["by user"]);
    // A long conversation is accepted past the other routes' 2 MiB: only its last user message
    // is read.
    let history = serde_json::json!([
        {"role": "user", "content": "x".repeat(3 * 1024 * 1024)},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "short"},
    ]);
    let long = complete(
        &gateway,
        completion_request(history, false, &[("x-gatehouse-session", "team-c")]),
    )
    .await;
    assert_eq!(long.choices[0].message.content, "echo: short");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_an_idempotency_key_answers_the_same_turn_again() {
    let gateway = echo_gateway().await;
    let headers = [("idempotency-key", "retry-1")];
    let first = complete(&gateway, completion_request(user("once"), false, &headers)).await;
    let again = complete(&gateway, completion_request(user("once"), false, &headers)).await;
    assert_eq!(first, again);
    let other = complete(&gateway, completion_request(user("once"), false, &[])).await;
    assert_ne!(other.id, first.id);
    let (_, sessions) =
        status_and_body(&gateway, request_with(TOKEN, "GET", "/v1/sessions", None)).await;
    let keys: Vec<&str> = sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|session| session["sessionKey"].as_str().unwrap())
        .collect();
    // Two sessions (the retried request's and the other one), each with one user message.
    assert_eq!(keys.len(), 2, "{sessions}");
    for key in keys {
        assert!(key.starts_with("openai-"), "{key}");
        assert_eq!(user_texts(&gateway, key).await, vec!["once"]);
    }
}

/// Returns the chunks of a streamed answer, checking that it ends with `data: [DONE]`.
async fn chunks_of(response: axum::response::Response) -> Vec<ChatCompletionChunk> {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let data: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("data: "))
        .collect();
    assert_eq!(data.last(), Some(&"[DONE]"), "{text}");
    data[..data.len() - 1]
        .iter()
        .map(|chunk| serde_json::from_str(chunk).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_a_streamed_completion_joins_to_the_reply_and_ends_with_done() {
    let gateway = echo_gateway().await;
    let response = gateway
        .router
        .clone()
        .oneshot(completion_request(user("/tool search"), true, &[]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE].to_str().unwrap(),
        "text/event-stream"
    );
    let chunks = chunks_of(response).await;
    assert!(
        chunks.iter().all(|chunk| chunk.usage.is_none()),
        "usage is sent only when asked for"
    );
    let joined: String = chunks
        .iter()
        .filter_map(|chunk| chunk.choices[0].delta.content.as_deref())
        .collect();
    assert_eq!(joined, "[tool search]\necho: /tool search");
    assert_eq!(
        chunks[0].choices[0].delta.role.as_deref(),
        Some("assistant")
    );
    let finishes: Vec<Option<&str>> = chunks
        .iter()
        .map(|chunk| chunk.choices[0].finish_reason.as_deref())
        .collect();
    assert_eq!(finishes.last(), Some(&Some("stop")));
    assert_eq!(finishes.iter().filter(|finish| finish.is_some()).count(), 1);
    assert!(chunks.iter().all(|chunk| chunk.id == chunks[0].id));
    // Without stream, the tool activity leads the content too.
    let completion = complete(
        &gateway,
        completion_request(user("/tool search"), false, &[]),
    )
    .await;
    assert_eq!(
        completion.choices[0].message.content,
        "[tool search]\necho: /tool search"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_errors_have_openais_shape_with_the_stable_code() {
    let gateway = echo_gateway().await;
    let (status, body) = status_and_body(
        &gateway,
        completion_request(user("/fail MODEL_UNAVAILABLE"), false, &[]),
    )
    .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert_eq!(
        body,
        serde_json::json!({"error": {"message": "the model failed", "type": "server_error", "code": "MODEL_UNAVAILABLE"}})
    );
    let unauthenticated = Request::builder()
        .method("GET")
        .uri("/v1/models")
        .body(Body::empty())
        .unwrap();
    let (status, body) = status_and_body(&gateway, unauthenticated).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        (&body["error"]["type"], &body["error"]["code"]),
        (
            &serde_json::json!("authentication_error"),
            &serde_json::json!("UNAUTHORIZED")
        )
    );
    let (status, body) = status_and_body(
        &gateway,
        request_with(
            TOKEN,
            "POST",
            "/v1/chat/completions",
            Some(serde_json::json!({"model": "other", "messages": user("hi")})),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "NOT_FOUND", "{body}");
    let (status, body) = status_and_body(
        &gateway,
        request_with(
            TOKEN,
            "POST",
            "/v1/chat/completions",
            Some(serde_json::json!({"model": "main"})),
        ),
    )
    .await;
    assert_eq!(status.as_u16() / 100, 4, "{body}");
    assert_eq!(
        (&body["error"]["type"], &body["error"]["code"]),
        (
            &serde_json::json!("invalid_request_error"),
            &serde_json::json!("INVALID_REQUEST")
        )
    );
    // A failure in a stream ends it with an error event, never with `[DONE]`.
    let response = gateway
        .router
        .clone()
        .oneshot(completion_request(
            user("/fail MODEL_UNAVAILABLE"),
            true,
            &[],
        ))
        .await
        .unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let last: serde_json::Value = serde_json::from_str(
        text.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .next_back()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(last["error"]["code"], "MODEL_UNAVAILABLE", "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_17_usage_is_the_tokens_the_turn_reported() {
    let gateway = echo_gateway().await;
    let expected = |text: &str| ChatUsage::from(echo_usage(text, &format!("echo: {text}")));
    let completion = complete(
        &gateway,
        completion_request(user("/say hi"), false, &[("x-gatehouse-session", "u1")]),
    )
    .await;
    assert_eq!(completion.usage, Some(expected("/say hi")));
    // The turn keeps it: `GET /v1/turns/{id}` answers it too.
    let turn_id = completion.id.strip_prefix("chatcmpl-").unwrap();
    let (status, turn) = status_and_body(
        &gateway,
        request_with(TOKEN, "GET", &format!("/v1/turns/{turn_id}"), None),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{turn}");
    let usage = echo_usage("/say hi", "echo: /say hi");
    assert_eq!(
        turn["usage"],
        serde_json::json!({
            "inputTokens": usage.input_tokens,
            "cachedInputTokens": 0,
            "outputTokens": usage.output_tokens,
            "totalTokens": usage.total_tokens,
            "modelCalls": 1,
            "retries": 0,
            "model": "echo",
        })
    );
    // Streamed with `stream_options.include_usage`: one more chunk, with no choices, after the
    // one that says `stop`.
    let body = serde_json::json!({
        "model": "main",
        "messages": user("/say streamed"),
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let response = gateway
        .router
        .clone()
        .oneshot(completion_request_of(&body, &[]))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let chunks = chunks_of(response).await;
    let (last, rest) = chunks.split_last().unwrap();
    assert_eq!(last.usage, Some(expected("/say streamed")));
    assert!(last.choices.is_empty(), "{last:?}");
    assert!(rest.iter().all(|chunk| chunk.usage.is_none()));
    assert_eq!(
        rest.last().unwrap().choices[0].finish_reason.as_deref(),
        Some("stop")
    );
}
