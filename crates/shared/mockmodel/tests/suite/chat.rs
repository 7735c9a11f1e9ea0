//! `POST /v1/chat/completions`.

use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

use crate::suite::support::Mock;
use crate::suite::support::events;
use crate::suite::support::text;

fn request(user_text: &str, stream: bool) -> Value {
    json!({
        "model": "mock-model",
        "stream": stream,
        "stream_options": {"include_usage": true},
        "messages": [
            {"role": "system", "content": "/fail 500"},
            {"role": "user", "content": user_text},
        ],
    })
}

fn chunks(body: &str) -> Vec<Value> {
    let all = events(body);
    assert_eq!(all.last().unwrap().data, "[DONE]", "{body}");
    all[..all.len() - 1]
        .iter()
        .map(crate::suite::support::Event::json)
        .collect()
}

#[tokio::test]
async fn say_streams_content_deltas_ending_with_done() {
    let mock = Mock::start().await;
    let body = text(
        mock.post("/v1/chat/completions", &request("/say hello", true))
            .await,
    )
    .await;
    let chunks = chunks(&body);
    let contents: Vec<&str> = chunks
        .iter()
        .filter_map(|chunk| chunk["choices"][0]["delta"]["content"].as_str())
        .filter(|content| !content.is_empty())
        .collect();
    assert!(contents.len() >= 2);
    assert_eq!(contents.concat(), "hello");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "stop"
    );
    assert_eq!(
        chunks[chunks.len() - 1]["usage"],
        json!({"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5})
    );
}

#[tokio::test]
async fn tool_calls_stream_as_tool_call_deltas() {
    let mock = Mock::start().await;
    let user_text =
        "/tool write {\"path\":\"a.txt\",\"content\":\"x\"}\n/tool apply_patch {\"input\":\"P\"}";
    let body = text(
        mock.post("/v1/chat/completions", &request(user_text, true))
            .await,
    )
    .await;
    let mut ids = vec![String::new(); 2];
    let mut names = vec![String::new(); 2];
    let mut arguments = vec![String::new(); 2];
    let mut n_argument_deltas = 0;
    let mut finish_reason = None;
    for chunk in chunks(&body) {
        let Some(choice) = chunk["choices"].get(0) else {
            continue;
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            finish_reason = Some(reason.to_owned());
        }
        for call in choice["delta"]["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let index = call["index"].as_u64().unwrap() as usize;
            if let Some(id) = call["id"].as_str() {
                ids[index] = id.to_owned();
            }
            if let Some(name) = call["function"]["name"].as_str() {
                names[index] = name.to_owned();
            }
            if let Some(piece) = call["function"]["arguments"].as_str()
                && !piece.is_empty()
            {
                arguments[index].push_str(piece);
                n_argument_deltas += 1;
            }
        }
    }
    assert_eq!(ids, ["call_1", "call_2"]);
    assert_eq!(names, ["write", "apply_patch"]);
    assert_eq!(
        arguments,
        [
            "{\"path\":\"a.txt\",\"content\":\"x\"}",
            "{\"input\":\"P\"}"
        ]
    );
    assert!(n_argument_deltas >= 4);
    assert_eq!(finish_reason.as_deref(), Some("tool_calls"));
}

#[tokio::test]
async fn non_streaming_answers_carry_the_message_and_tool_calls() {
    let mock = Mock::start().await;
    let response = mock
        .post(
            "/v1/chat/completions",
            &request("/tool write {\"path\":\"a\"}", false),
        )
        .await;
    assert_eq!(response.status(), 200);
    let completion: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(
        completion["choices"][0],
        json!({
            "index": 0,
            "message": {
                "role": "assistant",
                "content": null,
                "tool_calls": [{
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "write", "arguments": "{\"path\":\"a\"}"},
                }],
            },
            "finish_reason": "tool_calls",
        })
    );

    // The second request carries the result.
    let follow_up = json!({
        "model": "mock-model",
        "messages": [
            {"role": "user", "content": "/tool write {\"path\":\"a\"}"},
            completion["choices"][0]["message"].clone(),
            {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
        ],
    });
    let response = mock.post("/v1/chat/completions", &follow_up).await;
    let completion: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(
        completion["choices"][0]["message"],
        json!({"role": "assistant", "content": "tool write -> ok"})
    );
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn fail_answers_before_any_stream() {
    let mock = Mock::start().await;
    let response = mock
        .post("/v1/chat/completions", &request("/fail 429", true))
        .await;
    assert_eq!(response.status(), 429);
    let body: Value = serde_json::from_str(&text(response).await).unwrap();
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
}

#[tokio::test]
async fn the_usage_chunk_is_sent_only_on_request() {
    let mock = Mock::start().await;
    let mut body = request("hi", true);
    body.as_object_mut().unwrap().remove("stream_options");
    let body = text(mock.post("/v1/chat/completions", &body).await).await;
    assert!(
        chunks(&body)
            .iter()
            .all(|chunk| chunk.get("usage").is_none())
    );
}

#[tokio::test]
async fn hang_sends_the_first_chunk_then_only_keepalives() {
    let mock = Mock::start().await;
    let response = mock
        .post("/v1/chat/completions", &request("/hang", true))
        .await;
    assert_eq!(response.status(), 200);
    let timed = crate::suite::support::timed_events(response, 3).await;
    let kinds: Vec<(Option<&str>, &str)> = timed
        .iter()
        .map(|(_, event)| (event.name.as_deref(), event.data.as_str()))
        .collect();
    assert_eq!(
        kinds[1..],
        [(Some(":"), "keepalive"), (Some(":"), "keepalive")]
    );
    assert_eq!(
        timed[0].1.json()["choices"][0]["delta"]["role"],
        "assistant"
    );
}

#[tokio::test]
async fn slow_streams_word_by_word() {
    let mock = Mock::start().await;
    let started = std::time::Instant::now();
    let response = mock
        .post("/v1/chat/completions", &request("/slow 30 a b", true))
        .await;
    let timed = crate::suite::support::timed_events(response, usize::MAX).await;
    let contents: Vec<(std::time::Instant, String)> = timed
        .iter()
        .filter(|(_, event)| event.data != "[DONE]")
        .filter_map(|(at, event)| {
            let content = event.json()["choices"][0]["delta"]["content"]
                .as_str()?
                .to_owned();
            (!content.is_empty()).then_some((*at, content))
        })
        .collect();
    assert_eq!(contents.len(), 2);
    assert_eq!(contents[1].1, " b");
    assert!(contents[1].0.duration_since(started) >= std::time::Duration::from_millis(30));
}
