use std::collections::VecDeque;

use pretty_assertions::assert_eq;
use serde_json::json;

use crate::ErrorCode;
use crate::anthropic::AnthropicInterpreter;
use crate::anthropic::request_body;
use crate::error::ModelError;
use crate::http::Flow;
use crate::http::Interpreter;
use crate::sse::SseEvent;
use crate::types::Message;
use crate::types::ModelEvent;
use crate::types::ModelRequest;
use crate::types::ToolCall;
use crate::types::ToolInput;
use crate::types::ToolKind;
use crate::types::ToolSpec;
use crate::types::Usage;

fn tool(name: &str, kind: ToolKind) -> ToolSpec {
    ToolSpec {
        name: name.to_owned(),
        description: format!("the {name} tool"),
        parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        kind,
    }
}

#[test]
fn request_marks_the_prefix_and_pairs_tool_results() {
    let request = ModelRequest {
        system: String::from("be brief"),
        messages: vec![
            Message::User {
                text: String::from("look"),
            },
            Message::Assistant {
                text: String::from("reading"),
            },
            Message::ToolCall(ToolCall {
                call_id: String::from("toolu_1"),
                name: String::from("read"),
                input: ToolInput::Function {
                    arguments_json: String::from(r#"{"path":"a"}"#),
                },
            }),
            Message::ToolCall(ToolCall {
                call_id: String::from("toolu_2"),
                name: String::from("apply_patch"),
                input: ToolInput::Freeform {
                    input: String::from("*** Begin Patch"),
                },
            }),
            Message::ToolResult {
                call_id: String::from("toolu_1"),
                output: String::from("text of a"),
            },
            Message::ToolResult {
                call_id: String::from("toolu_2"),
                output: String::new(),
            },
        ],
        tools: vec![
            tool("read", ToolKind::Function),
            tool("apply_patch", ToolKind::Freeform),
        ],
        max_output_tokens: Some(100),
    };
    let body = request_body("claude-test", &request);
    assert_eq!(
        body,
        json!({
            "model": "claude-test",
            "max_tokens": 100,
            "stream": true,
            "system": [{"type": "text", "text": "be brief", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "look"}]},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "reading"},
                    {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a"}},
                    {"type": "tool_use", "id": "toolu_2", "name": "apply_patch", "input": {"input": "*** Begin Patch"}},
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "text of a"},
                    {"type": "tool_result", "tool_use_id": "toolu_2"},
                ]},
            ],
            "tools": [
                {"name": "read", "description": "the read tool", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
                {"name": "apply_patch", "description": "the apply_patch tool", "input_schema": {
                    "type": "object",
                    "properties": {"input": {"type": "string", "description": "the freeform input"}},
                    "required": ["input"],
                }, "cache_control": {"type": "ephemeral"}},
            ],
        })
    );
}

#[test]
fn max_tokens_defaults_and_is_bounded() {
    let mut request = ModelRequest::default();
    assert_eq!(request_body("m", &request)["max_tokens"], json!(8192));
    request.max_output_tokens = Some(1_000_000);
    assert_eq!(request_body("m", &request)["max_tokens"], json!(8192));
    request.max_output_tokens = Some(0);
    assert_eq!(request_body("m", &request)["max_tokens"], json!(1));
}

fn play(
    interpreter: &mut AnthropicInterpreter,
    events: &[serde_json::Value],
) -> (Vec<ModelEvent>, Option<ModelError>) {
    let mut out = VecDeque::new();
    for event in events {
        let sse = SseEvent {
            name: event["type"].as_str().map(str::to_owned),
            data: event.to_string(),
        };
        match interpreter.on_event(sse, &mut out) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Done) => break,
            Err(error) => return (out.into(), Some(error)),
        }
    }
    (out.into(), None)
}

#[test]
fn stream_joins_tool_input_and_maps_cache_usage() {
    let mut interpreter = AnthropicInterpreter {
        freeform_tools: ["apply_patch".to_owned()].into(),
        ..AnthropicInterpreter::default()
    };
    let (events, error) = play(
        &mut interpreter,
        &[
            json!({"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 10, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 100, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"path\":"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "\"a\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "content_block_start", "index": 2, "content_block": {"type": "tool_use", "id": "toolu_b", "name": "apply_patch", "input": {}}}),
            json!({"type": "content_block_delta", "index": 2, "delta": {"type": "input_json_delta", "partial_json": "{\"input\":\"*** Begin\"}"}}),
            json!({"type": "content_block_stop", "index": 2}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": null}, "usage": {"output_tokens": 7}}),
            json!({"type": "message_stop"}),
        ],
    );
    assert!(error.is_none(), "{error:?}");
    assert_eq!(
        events,
        vec![
            ModelEvent::TextDelta(String::from("Hi")),
            ModelEvent::ToolCall(ToolCall {
                call_id: String::from("toolu_a"),
                name: String::from("read"),
                input: ToolInput::Function {
                    arguments_json: String::from(r#"{"path":"a"}"#),
                },
            }),
            ModelEvent::ToolCall(ToolCall {
                call_id: String::from("toolu_b"),
                name: String::from("apply_patch"),
                input: ToolInput::Freeform {
                    input: String::from("*** Begin"),
                },
            }),
            ModelEvent::Completed {
                text: String::from("Hi"),
                usage: Some(Usage::new(15, 100, 7)),
            },
        ]
    );
}

#[test]
fn error_events_map_by_type() {
    for (error_type, code) in [
        ("overloaded_error", ErrorCode::ModelUnavailable),
        ("api_error", ErrorCode::ModelUnavailable),
        ("rate_limit_error", ErrorCode::ModelRateLimited),
        ("authentication_error", ErrorCode::ModelAuthFailed),
        ("invalid_request_error", ErrorCode::ModelBadResponse),
    ] {
        let (_, error) = play(
            &mut AnthropicInterpreter::default(),
            &[
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 1}}}),
                json!({"type": "error", "error": {"type": error_type, "message": "no"}}),
            ],
        );
        let error = error.expect("an error");
        assert_eq!((error_type, error.code()), (error_type, code));
    }
}
