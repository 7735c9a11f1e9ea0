//! `GET /_mock/requests`, and the router without a socket.

use axum::body::Body;
use axum::http::Request;
use pretty_assertions::assert_eq;
use serde_json::json;
use tower::ServiceExt;

use crate::suite::support::Mock;
use crate::suite::support::WAIT;
use crate::suite::support::text;

#[tokio::test]
async fn every_request_is_recorded_newest_last() {
    let mock = Mock::start().await;
    let first = json!({"model": "a", "input": "/say one", "stream": true});
    let second = json!({"model": "b", "messages": [{"role": "user", "content": "two"}]});
    text(mock.post("/v1/responses", &first).await).await;
    text(mock.post("/v1/chat/completions", &second).await).await;
    text(mock.post("/v1/unknown", &json!({})).await).await;

    let response = tokio::time::timeout(WAIT, reqwest::get(format!("{}/_mock/requests", mock.url)))
        .await
        .unwrap()
        .unwrap();
    let recorded: Vec<gatehouse_mockmodel::RecordedRequest> =
        serde_json::from_str(&text(response).await).unwrap();
    // Reading the record is not recorded.
    assert_eq!(recorded, mock.recorder.requests());
    let summary: Vec<(&str, &str, &serde_json::Value)> = recorded
        .iter()
        .map(|request| {
            (
                request.method.as_str(),
                request.path.as_str(),
                &request.body,
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            ("POST", "/v1/responses", &first),
            ("POST", "/v1/chat/completions", &second),
            ("POST", "/v1/unknown", &json!({})),
        ]
    );
    for request in &recorded {
        assert_eq!(request.headers["authorization"], "Bearer sk-test");
        assert_eq!(request.headers["content-type"], "application/json");
    }
}

#[tokio::test]
async fn the_router_answers_without_a_socket() {
    let recorder = gatehouse_mockmodel::Recorder::default();
    let app = gatehouse_mockmodel::router_with_recorder(recorder.clone());
    let request = Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .header("authorization", "Bearer sk-router")
        .body(Body::from(
            json!({"messages": [{"role": "user", "content": "/say in process"}]}).to_string(),
        ))
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    assert_eq!(response.status(), 200);
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let completion: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(completion["choices"][0]["message"]["content"], "in process");
    let recorded = recorder.requests();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].headers["authorization"], "Bearer sk-router");
}

#[tokio::test]
async fn a_body_that_is_not_json_is_recorded_as_a_string() {
    let app = gatehouse_mockmodel::router();
    let request = Request::post("/v1/responses")
        .body(Body::from("plain"))
        .unwrap();
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status(), 400);
    let request = Request::get("/_mock/requests").body(Body::empty()).unwrap();
    let response = app.oneshot(request).await.unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let recorded: Vec<gatehouse_mockmodel::RecordedRequest> =
        serde_json::from_slice(&bytes).unwrap();
    assert_eq!(recorded.len(), 1);
    assert_eq!(recorded[0].body, json!("plain"));
}
