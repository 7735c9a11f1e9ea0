//! `POST /v1/responses`.

use std::time::Duration;

use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

use crate::suite::support::Mock;
use crate::suite::support::WAIT;
use crate::suite::support::events;
use crate::suite::support::text;
use crate::suite::support::timed_events;

fn request(user_text: &str) -> Value {
    json!({
        "model": "mock-model",
        "stream": true,
        "input": [
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "/fail 500"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context/>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": user_text}]},
        ],
        "tools": [],
    })
}

fn names(body: &str) -> Vec<String> {
    events(body)
        .into_iter()
        .map(|event| event.name.unwrap())
        .collect()
}

fn deltas(body: &str) -> Vec<String> {
    events(body)
        .iter()
        .filter(|event| event.name.as_deref() == Some("response.output_text.delta"))
        .map(|event| event.json()["delta"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn say_streams_text_in_the_codex_event_shapes() {
    let mock = Mock::start().await;
    let response = mock.post("/v1/responses", &request("/say hello")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let body = text(response).await;
    assert_eq!(
        names(&body),
        [
            "response.created",
            "response.output_item.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_item.done",
            "response.completed",
        ]
    );
    // The `type` in the data matches the event name.
    for event in events(&body) {
        assert_eq!(event.json()["type"].as_str(), event.name.as_deref());
    }
    assert_eq!(deltas(&body).concat(), "hello");
    let all = events(&body);
    assert_eq!(
        all[4].json()["item"],
        json!({
            "type": "message",
            "role": "assistant",
            "id": "msg_1",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hello", "annotations": []}],
        })
    );
    assert_eq!(
        all[5].json()["response"]["usage"],
        json!({
            "input_tokens": 8,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 2,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 10,
        })
    );
}

#[tokio::test]
async fn anything_else_is_echoed() {
    let mock = Mock::start().await;
    let body = text(mock.post("/v1/responses", &request("hi there")).await).await;
    assert_eq!(deltas(&body).concat(), "echo: hi there");
    // A plain string input is one user message.
    let plain = json!({"model": "m", "stream": true, "input": "/say plain text"});
    let body = text(mock.post("/v1/responses", &plain).await).await;
    assert_eq!(deltas(&body).concat(), "plain text");
}

#[tokio::test]
async fn tool_lines_become_function_and_custom_tool_calls() {
    let mock = Mock::start().await;
    let user_text = "/tool write {\"path\":\"a.txt\",\"content\":\"x\"}\n/tool apply_patch {\"input\":\"*** Begin Patch\\n*** End Patch\\n\"}";
    let body = text(mock.post("/v1/responses", &request(user_text)).await).await;
    assert_eq!(
        names(&body),
        [
            "response.created",
            "response.output_item.added",
            "response.output_item.done",
            "response.output_item.added",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let all = events(&body);
    assert_eq!(
        all[2].json()["item"],
        json!({
            "type": "function_call",
            "id": "fc_1_0",
            "call_id": "call_1",
            "name": "write",
            "arguments": "{\"path\":\"a.txt\",\"content\":\"x\"}",
            "status": "completed",
        })
    );
    assert_eq!(
        all[4].json()["item"],
        json!({
            "type": "custom_tool_call",
            "id": "ctc_1_1",
            "call_id": "call_2",
            "name": "apply_patch",
            "input": "*** Begin Patch\n*** End Patch\n",
            "status": "completed",
        })
    );
    assert_eq!(all[1].json()["item"]["status"], "in_progress");
    assert_eq!(
        all[5].json()["response"]["output"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // The follow-up request carries both outputs.
    let mut follow_up = request(user_text);
    let input = follow_up["input"].as_array_mut().unwrap();
    input.push(all[2].json()["item"].clone());
    input.push(all[4].json()["item"].clone());
    input.push(
        json!({"type": "function_call_output", "call_id": "call_1", "output": "wrote 1 byte"}),
    );
    input.push(json!({"type": "custom_tool_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "Success."}]}));
    let body = text(mock.post("/v1/responses", &follow_up).await).await;
    assert_eq!(
        deltas(&body).concat(),
        "tool write -> wrote 1 byte\ntool apply_patch -> Success."
    );
}

#[tokio::test]
async fn fail_answers_with_the_status_and_an_openai_error_body() {
    let mock = Mock::start().await;
    for status in [401_u16, 429, 500, 503] {
        let response = mock
            .post("/v1/responses", &request(&format!("/fail {status}")))
            .await;
        assert_eq!(response.status().as_u16(), status);
        let body: Value = serde_json::from_str(&text(response).await).unwrap();
        let error = &body["error"];
        assert_eq!(
            error["message"].as_str().unwrap(),
            format!("mock failure with status {status}")
        );
        assert!(error["type"].is_string(), "{body}");
        assert!(error["code"].is_string(), "{body}");
    }
}

#[tokio::test]
async fn hang_starts_the_stream_then_sends_only_keepalives() {
    let mock = Mock::start().await;
    let response = mock.post("/v1/responses", &request("/hang")).await;
    assert_eq!(response.status(), 200);
    let timed = timed_events(response, 3).await;
    let names: Vec<&str> = timed
        .iter()
        .map(|(_, event)| event.name.as_deref().unwrap())
        .collect();
    assert_eq!(names, ["response.created", ":", ":"]);
    assert_eq!(timed[1].1.data, "keepalive");
    // The stream is still open; shutting the server down ends it.
    mock.stop().await;
}

#[tokio::test]
async fn slow_streams_word_by_word_at_least_ms_apart() {
    let mock = Mock::start().await;
    let delay = Duration::from_millis(40);
    let started = std::time::Instant::now();
    let response = mock
        .post("/v1/responses", &request("/slow 40 one two three"))
        .await;
    let timed = timed_events(response, usize::MAX).await;
    let delta_times: Vec<(std::time::Instant, String)> = timed
        .iter()
        .filter(|(_, event)| event.name.as_deref() == Some("response.output_text.delta"))
        .map(|(at, event)| (*at, event.json()["delta"].as_str().unwrap().to_owned()))
        .collect();
    let words: Vec<&str> = delta_times.iter().map(|(_, word)| word.as_str()).collect();
    assert_eq!(words, ["one", " two", " three"]);
    // Word k cannot leave the server before k pauses have passed since the request was sent.
    for (word_idx, (at, _)) in delta_times.iter().enumerate() {
        assert!(
            at.duration_since(started) >= delay * word_idx as u32,
            "word {word_idx} came too early"
        );
    }
    assert_eq!(
        timed.last().unwrap().1.name.as_deref(),
        Some("response.completed")
    );
}

#[tokio::test]
async fn requests_without_stream_get_one_json_response() {
    let mock = Mock::start().await;
    let mut body = request("/say hello");
    body["stream"] = json!(false);
    let response = mock.post("/v1/responses", &body).await;
    assert_eq!(response.status(), 200);
    let object: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(object["object"], "response");
    assert_eq!(object["status"], "completed");
    assert_eq!(object["output"][0]["content"][0]["text"], "hello");
}

#[tokio::test]
async fn a_body_that_is_not_json_is_refused() {
    let mock = Mock::start().await;
    let request = reqwest::Client::new()
        .post(format!("{}/v1/responses", mock.url))
        .body("not json")
        .send();
    let response = tokio::time::timeout(WAIT, request).await.unwrap().unwrap();
    assert_eq!(response.status(), 400);
}

#[tokio::test]
async fn shutdown_ends_open_streams() {
    let mock = Mock::start().await;
    let response = mock.post("/v1/responses", &request("/hang")).await;
    assert_eq!(response.status(), 200);
    // The client keeps the hanging stream open while the server stops.
    mock.stop().await;
    let body = text(response).await;
    assert_eq!(names(&body)[0], "response.created");
}
