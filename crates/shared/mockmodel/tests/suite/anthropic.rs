//! `POST /v1/messages` (Anthropic Messages).

use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

use crate::suite::support::Mock;
use crate::suite::support::WAIT;
use crate::suite::support::events;
use crate::suite::support::text;

fn request(user_text: &str) -> Value {
    json!({
        "model": "claude-mock",
        "max_tokens": 100,
        "stream": true,
        "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
        "tools": [{"name": "read", "description": "reads", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": user_text}]}],
    })
}

/// Posts `body` with the headers named in `headers` (`key`, `version`).
async fn post(mock: &Mock, body: &Value, headers: &[&str]) -> reqwest::Response {
    let mut builder = reqwest::Client::new()
        .post(format!("{}/v1/messages", mock.url))
        .json(body);
    if headers.contains(&"key") {
        builder = builder.header("x-api-key", "sk-test");
    }
    if headers.contains(&"version") {
        builder = builder.header("anthropic-version", "2023-06-01");
    }
    tokio::time::timeout(WAIT, builder.send())
        .await
        .unwrap()
        .unwrap()
}

/// Returns the `data` of every event, checking that each names its type as its event name.
fn data(body: &str) -> Vec<Value> {
    events(body)
        .iter()
        .map(|event| {
            let data = event.json();
            assert_eq!(event.name.as_deref(), data["type"].as_str(), "{body}");
            data
        })
        .collect()
}

#[tokio::test]
async fn a_request_without_key_version_or_max_tokens_is_refused() {
    let mock = Mock::start().await;
    let mut without_max_tokens = request("/say hi");
    without_max_tokens
        .as_object_mut()
        .unwrap()
        .remove("max_tokens");
    let cases = [
        (
            request("/say hi"),
            vec!["version"],
            401,
            "authentication_error",
        ),
        (
            request("/say hi"),
            vec!["key"],
            400,
            "invalid_request_error",
        ),
        (
            without_max_tokens,
            vec!["key", "version"],
            400,
            "invalid_request_error",
        ),
    ];
    for (body, headers, status, error_type) in cases {
        let response = post(&mock, &body, &headers).await;
        assert_eq!(response.status().as_u16(), status, "{headers:?}");
        let answer: Value = serde_json::from_str(&text(response).await).unwrap();
        assert_eq!(answer["type"], "error");
        assert_eq!(answer["error"]["type"], error_type, "{headers:?}");
    }
}

#[tokio::test]
async fn say_streams_text_deltas_between_message_start_and_stop() {
    let mock = Mock::start().await;
    let body = text(post(&mock, &request("/say hello there"), &["key", "version"]).await).await;
    let data = data(&body);
    let types: Vec<&str> = data
        .iter()
        .filter_map(|event| event["type"].as_str())
        .collect();
    assert_eq!(
        types,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let text: String = data
        .iter()
        .filter_map(|event| event["delta"]["text"].as_str())
        .collect();
    assert_eq!(text, "hello there");
    assert_eq!(data[6]["delta"]["stop_reason"], "end_turn");
    assert_eq!(data[6]["usage"]["output_tokens"], 2);
}

#[tokio::test]
async fn tool_calls_are_tool_use_blocks_answered_by_tool_results() {
    let mock = Mock::start().await;
    let body = text(
        post(
            &mock,
            &request("/tool read {\"path\":\"a\"}"),
            &["key", "version"],
        )
        .await,
    )
    .await;
    let data = data(&body);
    assert_eq!(
        data[1]["content_block"],
        json!({"type": "tool_use", "id": "call_1", "name": "read", "input": {}})
    );
    let input: String = data
        .iter()
        .filter_map(|event| event["delta"]["partial_json"].as_str())
        .collect();
    assert_eq!(input, "{\"path\":\"a\"}");
    assert_eq!(data[data.len() - 2]["delta"]["stop_reason"], "tool_use");

    let mut second = request("/tool read {\"path\":\"a\"}");
    second["messages"] = json!([
        {"role": "user", "content": "/tool read {\"path\":\"a\"}"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "read", "input": {"path": "a"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "text of a"}]},
    ]);
    let body = text(post(&mock, &second, &["key", "version"]).await).await;
    let text: String = data_text(&body);
    assert_eq!(text, "tool read -> text of a");
}

fn data_text(body: &str) -> String {
    data(body)
        .iter()
        .filter_map(|event| event["delta"]["text"].as_str())
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_marked_prefix_is_written_once_then_read() {
    let mock = Mock::start().await;
    let mut usages = Vec::new();
    for _ in 0..2 {
        let body = text(post(&mock, &request("/say hi"), &["key", "version"]).await).await;
        usages.push(data(&body)[0]["message"]["usage"].clone());
    }
    let written = usages[0]["cache_creation_input_tokens"].as_u64().unwrap();
    assert!(written > 0, "{usages:?}");
    assert_eq!(usages[0]["cache_read_input_tokens"], 0);
    assert_eq!(usages[1]["cache_creation_input_tokens"], 0);
    assert_eq!(usages[1]["cache_read_input_tokens"], written);
    assert_eq!(usages[0]["input_tokens"], usages[1]["input_tokens"]);
}

#[tokio::test]
async fn flaky_fails_its_first_requests_then_answers() {
    let mock = Mock::start().await;
    for _ in 0..2 {
        let response = post(&mock, &request("/flaky 2 529 at last"), &["key", "version"]).await;
        assert_eq!(response.status().as_u16(), 529);
        assert_eq!(response.headers()["retry-after"], "0");
        let answer: Value = serde_json::from_str(&text(response).await).unwrap();
        assert_eq!(answer["error"]["type"], "overloaded_error");
    }
    let body = text(post(&mock, &request("/flaky 2 529 at last"), &["key", "version"]).await).await;
    assert_eq!(data_text(&body), "at last");
    // Another message counts on its own.
    let response = post(&mock, &request("/flaky 1 429 other"), &["key", "version"]).await;
    assert_eq!(response.status().as_u16(), 429);
}
