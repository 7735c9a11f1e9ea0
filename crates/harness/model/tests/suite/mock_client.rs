//! The in-process mock client, and its parity with the mock served over HTTP.

use std::time::Duration;
use std::time::Instant;

use futures_util::StreamExt;
use gatehouse_model::Message;
use gatehouse_model::MockClient;
use gatehouse_model::ModelApi;
use gatehouse_model::ModelClient;
use gatehouse_model::ModelConfig;
use gatehouse_model::ModelError;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelRequest;
use gatehouse_model::TimeoutPhase;
use gatehouse_model::Timeouts;
use gatehouse_model::ToolCall;
use gatehouse_model::ToolInput;
use gatehouse_model::ToolKind;
use gatehouse_model::ToolSpec;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::Server;
use crate::suite::support::WAIT;
use crate::suite::support::client;
use crate::suite::support::drain;
use crate::suite::support::quick_retry;
use crate::suite::support::refused;

fn request(messages: Vec<Message>) -> ModelRequest {
    ModelRequest {
        system: String::from("system"),
        messages,
        tools: vec![ToolSpec {
            name: String::from("apply_patch"),
            description: String::from("applies a patch"),
            parameters: json!({}),
            kind: ToolKind::Freeform,
        }],
        max_output_tokens: None,
    }
}

fn user(text: &str) -> Message {
    Message::User {
        text: text.to_owned(),
    }
}

#[tokio::test]
async fn the_mock_gives_the_same_events_in_process_and_over_both_apis() {
    let write = ToolCall {
        call_id: String::from("call_1"),
        name: String::from("write"),
        input: ToolInput::Function {
            arguments_json: String::from("{\"path\":\"a\"}"),
        },
    };
    let patch = ToolCall {
        call_id: String::from("call_2"),
        name: String::from("apply_patch"),
        input: ToolInput::Freeform {
            input: String::from("*** Begin Patch\n*** End Patch\n"),
        },
    };
    let script = "/tool write {\"path\":\"a\"}\n/tool apply_patch {\"input\":\"*** Begin Patch\\n*** End Patch\\n\"}";
    let requests = [
        request(vec![user("/say hello")]),
        request(vec![user("hello there")]),
        request(vec![user("/slow 1 a b c")]),
        request(vec![user(script)]),
        request(vec![
            user(script),
            Message::ToolCall(write),
            Message::ToolCall(patch),
            Message::ToolResult {
                call_id: String::from("call_1"),
                output: String::from("ok"),
            },
            Message::ToolResult {
                call_id: String::from("call_2"),
                output: "x".repeat(3_000),
            },
        ]),
    ];
    let mock = Server::mock().await;
    let in_process = MockClient::default();
    for request in &requests {
        let (expected, error) = drain(in_process.stream(request).await.unwrap()).await;
        assert!(error.is_none(), "{error:?}");
        for api in [ModelApi::Responses, ModelApi::Chat] {
            let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
            let (events, error) = drain(client.stream(request).await.unwrap()).await;
            assert!(error.is_none(), "{api:?}: {error:?}");
            assert_eq!(events, expected, "{api:?}");
        }
    }
}

#[tokio::test]
async fn the_mock_is_what_the_mock_spec_builds() {
    let config = ModelConfig::parse("mock", "UNSET_VARIABLE").unwrap();
    let client = config.build_with_env(&|_| None).unwrap();
    let (events, error) = drain(
        client
            .stream(&request(vec![user("/say hi there")]))
            .await
            .unwrap(),
    )
    .await;
    assert!(error.is_none());
    assert_eq!(
        events[..2],
        [
            ModelEvent::TextDelta(String::from("hi")),
            ModelEvent::TextDelta(String::from(" there"))
        ]
    );
}

#[tokio::test]
async fn fail_is_an_error_before_the_stream() {
    let client = MockClient::default();
    let cases = [
        ("/fail 429", ErrorCode::ModelRateLimited),
        ("/fail 401", ErrorCode::ModelAuthFailed),
        ("/fail 503", ErrorCode::ModelUnavailable),
    ];
    for (script, code) in cases {
        let error = refused(client.stream(&request(vec![user(script)])).await);
        assert_eq!(error.code(), code, "{script}");
    }
}

#[tokio::test]
async fn hang_gives_up_after_the_first_event_timeout() {
    let client = MockClient::new(Timeouts {
        first_event: Duration::from_millis(100),
        ..Timeouts::default()
    });
    let (events, error) = drain(client.stream(&request(vec![user("/hang")])).await.unwrap()).await;
    assert_eq!(events, []);
    assert!(matches!(
        error,
        Some(ModelError::Timeout {
            phase: TimeoutPhase::FirstEvent
        })
    ));
}

#[tokio::test]
async fn slow_waits_between_words() {
    let client = MockClient::default();
    let started = Instant::now();
    let mut stream = client
        .stream(&request(vec![user("/slow 30 one two three")]))
        .await
        .unwrap();
    let mut word_idx = 0;
    while let Some(event) = tokio::time::timeout(WAIT, stream.next()).await.unwrap() {
        if let ModelEvent::TextDelta(_) = event.unwrap() {
            assert!(started.elapsed() >= Duration::from_millis(30) * word_idx);
            word_idx += 1;
        }
    }
    assert_eq!(word_idx, 3);
}
