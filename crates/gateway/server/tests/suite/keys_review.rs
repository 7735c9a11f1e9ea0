//! API keys under attack (issue 17's review): what a holder of a low-scope key tried, and what
//! the Gateway answers now.

use axum::body::Body;
use axum::http::Request;
use axum::http::StatusCode;
use axum::http::header;
use pretty_assertions::assert_eq;
use tower::ServiceExt;

use crate::suite::keys::create_key;
use crate::suite::keys::echo_gateway;
use crate::suite::keys::finished_turn;
use crate::suite::keys::request_with;
use crate::suite::keys::status_and_body;
use crate::suite::support::TOKEN;

/// `HEAD` is the `GET` of a route without its body, so a `read` key may send it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_head_request_has_the_scopes_of_its_get() {
    let gateway = echo_gateway().await;
    for (name, scope, expected) in [
        ("dash", "read", StatusCode::OK),
        ("docs", "documents", StatusCode::FORBIDDEN),
    ] {
        let key = create_key(
            &gateway,
            serde_json::json!({"name": name, "scopes": [scope]}),
        )
        .await;
        let head = request_with(&key.key, "HEAD", "/v1/sessions", None);
        assert_eq!(status_of(&gateway, head).await, expected, "{scope}");
    }
}

/// A session prefix beside `read` (which reads every session) or other scopes would promise an
/// isolation the key does not have, so it is refused; so is a concurrent-turns limit past 64.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prefix_beside_other_scopes_and_a_huge_turn_limit_are_refused() {
    let gateway = echo_gateway().await;
    for body in [
        serde_json::json!({"name": "a", "scopes": ["chat", "read"], "sessions": "app1-"}),
        serde_json::json!({"name": "b", "scopes": ["chat", "documents"], "sessions": "app1-"}),
        serde_json::json!({"name": "c", "scopes": ["chat"], "concurrentTurns": 65}),
    ] {
        let (status, answer) = status_and_body(
            &gateway,
            request_with(TOKEN, "POST", "/v1/keys", Some(body.clone())),
        )
        .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}: {answer}");
        assert_eq!(answer["error"]["code"], "INVALID_REQUEST", "{answer}");
    }
    create_key(
        &gateway,
        serde_json::json!({"name": "d", "scopes": ["chat"], "sessions": "app1-", "concurrentTurns": 64}),
    )
    .await;
}

/// A key revoked and created again under the same name starts afresh: the old key's request
/// window is not the new key's.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_key_created_again_under_a_revoked_name_has_none_of_its_counts() {
    let gateway = echo_gateway().await;
    let body = serde_json::json!({"name": "rl", "scopes": ["read"], "requestsPerMinute": 1});
    let old = create_key(&gateway, body.clone()).await;
    let get = |key: &str| request_with(key, "GET", "/v1/sessions", None);
    assert_eq!(
        status_and_body(&gateway, get(&old.key)).await.0,
        StatusCode::OK
    );
    assert_eq!(
        status_and_body(&gateway, get(&old.key)).await.0,
        StatusCode::TOO_MANY_REQUESTS
    );
    let (status, _) =
        status_and_body(&gateway, request_with(TOKEN, "DELETE", "/v1/keys/rl", None)).await;
    assert_eq!(status, StatusCode::OK);
    let new = create_key(&gateway, body).await;
    assert_eq!(
        status_and_body(&gateway, get(&new.key)).await.0,
        StatusCode::OK
    );
}

/// An event stream opened with a key ends with `stream.dropped` (`UNAUTHORIZED`) once the key
/// is revoked, instead of carrying the session's later events to whoever holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_revoked_keys_open_event_stream_ends() {
    let gateway = echo_gateway().await;
    let watcher = create_key(
        &gateway,
        serde_json::json!({"name": "watcher", "scopes": ["chat"], "sessions": "app9-"}),
    )
    .await;
    finished_turn(&gateway, "app9-x", "before").await;
    let response = gateway
        .router
        .clone()
        .oneshot(request_with(
            &watcher.key,
            "GET",
            "/v1/sessions/app9-x/events?after=0",
            None,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let (status, _) = status_and_body(
        &gateway,
        request_with(TOKEN, "DELETE", "/v1/keys/watcher", None),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    // The stream ends by itself: reading it to its end returns, with the refusal last.
    let bytes = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        axum::body::to_bytes(response.into_body(), usize::MAX),
    )
    .await
    .expect("the stream of a revoked key did not end")
    .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    let last = text
        .split("\n\n")
        .filter(|event| event.starts_with("event:") || event.contains("\nevent:"))
        .last()
        .unwrap_or_default();
    assert!(
        last.contains("event: stream.dropped") && last.contains("UNAUTHORIZED"),
        "{text}"
    );
    assert!(
        text.contains("before"),
        "the events before the revocation came: {text}"
    );
}

/// A completion body whose content is a huge array of non-parts is refused at its first
/// element with the OpenAI error shape (it used to be buffered whole before it was judged).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_completion_whose_content_is_a_long_array_of_numbers_is_refused() {
    let gateway = echo_gateway().await;
    let mut body = String::from(r#"{"model":"main","messages":[{"role":"user","content":["#);
    body.push_str(&vec!["0"; 1_000_000].join(","));
    body.push_str("]}]}");
    let request = Request::builder()
        .method("POST")
        .uri("/v1/chat/completions")
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body))
        .unwrap();
    let (status, answer) = status_and_body(&gateway, request).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    assert_eq!(answer["error"]["code"], "INVALID_REQUEST", "{answer}");
    // Judged at the first element as a content part, not buffered and tried against each form.
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("ChatContentPart") && !message.contains("untagged"),
        "{answer}"
    );
}

/// Sends `request` and returns only its status (a `HEAD` answer or a download has no JSON body).
async fn status_of(
    gateway: &crate::suite::support::TestGateway,
    request: Request<Body>,
) -> StatusCode {
    gateway
        .router
        .clone()
        .oneshot(request)
        .await
        .unwrap()
        .status()
}

/// Uploads `bytes` with `bearer` and returns the media id.
async fn upload(
    gateway: &crate::suite::support::TestGateway,
    bearer: &str,
    bytes: &'static str,
) -> String {
    let request = Request::builder()
        .method("POST")
        .uri("/v1/media")
        .header(header::AUTHORIZATION, format!("Bearer {bearer}"))
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(bytes))
        .unwrap();
    let (status, body) = status_and_body(gateway, request).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["mediaId"].as_str().unwrap().to_owned()
}

/// Media ids are content hashes every uploader shares, so a key limited to a session prefix
/// reads or attaches a blob only when it uploaded it or a session under its prefix holds it;
/// anything else answers as a blob that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_prefix_limited_key_reads_only_its_own_and_its_sessions_media() {
    let gateway = echo_gateway().await;
    let app1 = create_key(
        &gateway,
        serde_json::json!({"name": "app1", "scopes": ["chat"], "sessions": "app1-"}),
    )
    .await;
    let app2 = create_key(
        &gateway,
        serde_json::json!({"name": "app2", "scopes": ["chat"], "sessions": "app2-"}),
    )
    .await;
    let payroll = upload(&gateway, &app2.key, "app2's payroll").await;
    let own = upload(&gateway, &app1.key, "app1's notes").await;
    let get =
        |bearer: &str, id: &str| request_with(bearer, "GET", &format!("/v1/media/{id}"), None);
    let (status, body) = status_and_body(&gateway, get(&app1.key, &payroll)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("MEDIA_NOT_FOUND")),
        "{body}"
    );
    let attach = |id: &str| {
        Some(serde_json::json!({"text": "see attached", "attachments": [{"mediaId": id}]}))
    };
    let (status, body) = status_and_body(
        &gateway,
        request_with(
            &app1.key,
            "POST",
            "/v1/sessions/app1-a/messages",
            attach(&payroll),
        ),
    )
    .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("MEDIA_NOT_FOUND")),
        "{body}"
    );
    // Its own upload, and the other app's through its own key and the operator token.
    assert_eq!(
        status_of(&gateway, get(&app1.key, &own)).await,
        StatusCode::OK
    );
    assert_eq!(
        status_of(&gateway, get(&app2.key, &payroll)).await,
        StatusCode::OK
    );
    assert_eq!(
        status_of(&gateway, get(TOKEN, &payroll)).await,
        StatusCode::OK
    );
    let (status, body) = status_and_body(
        &gateway,
        request_with(
            &app1.key,
            "POST",
            "/v1/sessions/app1-a/messages",
            attach(&own),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    // Once a session under app1- holds the blob (the operator attached it there), app1 reads it.
    let (status, body) = status_and_body(
        &gateway,
        request_with(
            TOKEN,
            "POST",
            "/v1/sessions/app1-b/messages",
            attach(&payroll),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(
        status_of(&gateway, get(&app1.key, &payroll)).await,
        StatusCode::OK
    );
}
