//! Recorded and hand-made streams served as canned bytes: framing, truncation, malformed data,
//! failures and split chunks.

use std::time::Duration;

use gatehouse_model::ModelApi;
use gatehouse_model::ModelError;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelRequest;
use gatehouse_model::RetryPolicy;
use gatehouse_model::TimeoutPhase;
use gatehouse_model::Timeouts;
use gatehouse_model::ToolCall;
use gatehouse_model::ToolInput;
use gatehouse_model::Usage;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;

use crate::suite::support::Server;
use crate::suite::support::client;
use crate::suite::support::drain;

const RESPONSES_TEXT_AND_CALL: &str = include_str!("../fixtures/responses_text_and_call.sse");
const RESPONSES_TRUNCATED: &str = include_str!("../fixtures/responses_truncated.sse");
const RESPONSES_FAILED: &str = include_str!("../fixtures/responses_failed.sse");
const CHAT_TOOL_CALLS_SPLIT: &str = include_str!("../fixtures/chat_tool_calls_split.sse");

/// Serves `body` cut into `chunk_len`-byte pieces and reads it with a client of `api`.
async fn run(api: ModelApi, body: &str, chunk_len: usize) -> (Vec<ModelEvent>, Option<ModelError>) {
    let chunks = body
        .as_bytes()
        .chunks(chunk_len)
        .map(<[u8]>::to_vec)
        .collect();
    let server = Server::canned(200, chunks).await;
    let client = client(
        api,
        &server.base_url,
        Timeouts::default(),
        RetryPolicy::never(),
    );
    let stream = client.stream(&ModelRequest::default()).await.unwrap();
    drain(stream).await
}

fn text_and_call_events() -> Vec<ModelEvent> {
    vec![
        ModelEvent::TextDelta(String::from("Hello ")),
        ModelEvent::TextDelta(String::from("from mock.")),
        ModelEvent::ToolCall(ToolCall {
            call_id: String::from("call_1"),
            name: String::from("exec_command"),
            input: ToolInput::Function {
                arguments_json: String::from("{\"cmd\":\"ls\"}"),
            },
        }),
        ModelEvent::Completed {
            text: String::from("Hello from mock."),
            // The API's input includes the 4 cached tokens; ours does not.
            usage: Some(Usage::new(6, 4, 5)),
        },
    ]
}

#[tokio::test]
async fn a_recorded_responses_stream_parses_whole() {
    let (events, error) = run(ModelApi::Responses, RESPONSES_TEXT_AND_CALL, usize::MAX).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(events, text_and_call_events());
}

#[tokio::test]
async fn chunks_split_mid_line_and_crlf_give_the_same_events() {
    for chunk_len in [1, 3, 7, 64] {
        let (events, error) = run(ModelApi::Responses, RESPONSES_TEXT_AND_CALL, chunk_len).await;
        assert!(error.is_none(), "{chunk_len}: {error:?}");
        assert_eq!(events, text_and_call_events(), "{chunk_len}");
    }
    let crlf = RESPONSES_TEXT_AND_CALL.replace('\n', "\r\n");
    let (events, error) = run(ModelApi::Responses, &crlf, 5).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(events, text_and_call_events());
}

#[tokio::test]
async fn a_stream_without_completion_is_a_bad_response() {
    let (events, error) = run(ModelApi::Responses, RESPONSES_TRUNCATED, usize::MAX).await;
    assert_eq!(events, [ModelEvent::TextDelta(String::from("partial"))]);
    let error = error.unwrap();
    assert!(matches!(error, ModelError::Truncated), "{error:?}");
    assert_eq!(error.code(), ErrorCode::ModelBadResponse);

    let chat = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut\"}}]}\n\n";
    let (events, error) = run(ModelApi::Chat, chat, usize::MAX).await;
    assert_eq!(events, [ModelEvent::TextDelta(String::from("cut"))]);
    assert_eq!(error.unwrap().code(), ErrorCode::ModelBadResponse);
}

#[tokio::test]
async fn malformed_data_json_is_a_bad_response() {
    let responses = "event: response.created\ndata: {\"type\":\"response.created\"\n\n";
    let chat = "data: {\"choices\": [\n\n";
    for (api, body) in [(ModelApi::Responses, responses), (ModelApi::Chat, chat)] {
        let (events, error) = run(api, body, usize::MAX).await;
        assert_eq!(events, [], "{api:?}");
        let error = error.unwrap();
        assert!(
            matches!(error, ModelError::InvalidJson { .. }),
            "{api:?}: {error:?}"
        );
        assert_eq!(error.code(), ErrorCode::ModelBadResponse);
    }
    // An event without any type cannot be interpreted.
    let (_, error) = run(ModelApi::Responses, "data: {}\n\n", usize::MAX).await;
    assert_eq!(error.unwrap().code(), ErrorCode::ModelBadResponse);
}

#[tokio::test]
async fn response_failed_maps_by_its_error_code() {
    let (events, error) = run(ModelApi::Responses, RESPONSES_FAILED, usize::MAX).await;
    assert_eq!(events, []);
    let error = error.unwrap();
    assert_eq!(error.code(), ErrorCode::ModelUnavailable);
    assert_eq!(error.to_string(), "model failed: the model is overloaded");

    let invalid = RESPONSES_FAILED.replace("server_error", "invalid_prompt");
    let (_, error) = run(ModelApi::Responses, &invalid, usize::MAX).await;
    assert_eq!(error.unwrap().code(), ErrorCode::ModelBadResponse);

    let limited = RESPONSES_FAILED.replace("server_error", "rate_limit_exceeded");
    let (_, error) = run(ModelApi::Responses, &limited, usize::MAX).await;
    assert_eq!(error.unwrap().code(), ErrorCode::ModelRateLimited);

    let incomplete = "data: {\"type\":\"response.incomplete\",\"response\":{\"incomplete_details\":{\"reason\":\"max_output_tokens\"}}}\n\n";
    let (_, error) = run(ModelApi::Responses, incomplete, usize::MAX).await;
    assert_eq!(
        error.unwrap().to_string(),
        "model response is incomplete: max_output_tokens"
    );
}

#[tokio::test]
async fn chat_tool_calls_split_across_deltas_are_joined() {
    for chunk_len in [usize::MAX, 4] {
        let (events, error) = run(ModelApi::Chat, CHAT_TOOL_CALLS_SPLIT, chunk_len).await;
        assert!(error.is_none(), "{error:?}");
        assert_eq!(
            events,
            [
                ModelEvent::ToolCall(ToolCall {
                    call_id: String::from("call_a"),
                    name: String::from("write"),
                    input: ToolInput::Function {
                        arguments_json: String::from("{\"path\":\"a.txt\",\"content\":\"x\"}"),
                    },
                }),
                ModelEvent::ToolCall(ToolCall {
                    call_id: String::from("call_b"),
                    name: String::from("read"),
                    input: ToolInput::Function {
                        arguments_json: String::from("{\"path\":\"b\"}"),
                    },
                }),
                ModelEvent::Completed {
                    text: String::new(),
                    usage: Some(Usage::new(5, 2, 3)),
                },
            ],
            "{chunk_len}"
        );
    }
}

#[tokio::test]
async fn chat_without_usage_completes_without_usage() {
    let body = "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"hi\"},\"finish_reason\":\"stop\",\"extra\":1}],\"system_fingerprint\":null}\n\ndata: [DONE]";
    let (events, error) = run(ModelApi::Chat, body, usize::MAX).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events,
        [
            ModelEvent::TextDelta(String::from("hi")),
            ModelEvent::Completed {
                text: String::from("hi"),
                usage: None,
            },
        ]
    );
}

#[tokio::test]
async fn a_chat_error_chunk_fails_the_stream() {
    let body = "data: {\"error\":{\"message\":\"boom\",\"code\":500}}\n\n";
    let (_, error) = run(ModelApi::Chat, body, usize::MAX).await;
    let error = error.unwrap();
    assert_eq!(error.to_string(), "model failed: boom");
    assert_eq!(error.code(), ErrorCode::ModelBadResponse);
}

#[tokio::test]
async fn a_message_sent_whole_becomes_one_delta() {
    let body = "event: response.output_item.done\ndata: {\"type\":\"response.output_item.done\",\"item\":{\"type\":\"message\",\"role\":\"assistant\",\"id\":\"m\",\"content\":[{\"type\":\"output_text\",\"text\":\"whole\"}]}}\n\nevent: response.completed\ndata: {\"type\":\"response.completed\",\"response\":{}}\n\n";
    let (events, error) = run(ModelApi::Responses, body, usize::MAX).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events,
        [
            ModelEvent::TextDelta(String::from("whole")),
            ModelEvent::Completed {
                text: String::from("whole"),
                usage: None,
            },
        ]
    );
}

#[tokio::test]
async fn a_silent_server_hits_the_first_event_timeout() {
    // Headers, then only a comment: no event ever arrives.
    let server = Server::canned_then_silent(vec![b": waiting\n\n".to_vec()]).await;
    let timeouts = Timeouts {
        first_event: Duration::from_millis(200),
        ..Timeouts::default()
    };
    let client = client(
        ModelApi::Chat,
        &server.base_url,
        timeouts,
        RetryPolicy::never(),
    );
    let stream = client.stream(&ModelRequest::default()).await.unwrap();
    let (events, error) = drain(stream).await;
    assert_eq!(events, []);
    let error = error.unwrap();
    assert!(
        matches!(
            error,
            ModelError::Timeout {
                phase: TimeoutPhase::FirstEvent
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.code(), ErrorCode::ModelUnavailable);
}
