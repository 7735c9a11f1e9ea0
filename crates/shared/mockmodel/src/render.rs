//! Rendering a [`Plan`] in the wire formats: OpenAI Responses SSE events
//! (`reference/codex-app-server.md` §13), Chat Completions chunks or JSON, and Anthropic Messages
//! SSE events or JSON.

use std::time::Duration;

use axum::body::Bytes;
use serde_json::Value;
use serde_json::json;

use crate::plan::Plan;
use crate::plan::PlannedToolCall;
use crate::plan::PlannedToolInput;
use crate::plan::TextPlan;
use crate::plan::Usage;

/// One step of a streamed reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send these bytes.
    Send(Bytes),
    /// Wait before the next step.
    Sleep(Duration),
    /// Send an SSE comment now and then until the client goes away.
    KeepAliveForever,
}

/// What a rendering needs besides the plan.
#[derive(Debug, Clone)]
pub(crate) struct Context {
    /// The request number at this server, used to make ids (`resp_N`, `msg_N`, `chatcmpl-N`).
    pub(crate) seq: u64,
    /// The `model` of the request, echoed back.
    pub(crate) model: String,
    pub(crate) usage: Usage,
}

/// Returns the Responses SSE events for `plan`. A [`Plan::Fail`] has no stream and gives no steps.
pub(crate) fn responses_stream(plan: &Plan, context: &Context) -> Vec<Step> {
    let response_id = format!("resp_{}", context.seq);
    let mut steps = vec![sse(
        "response.created",
        &json!({
            "type": "response.created",
            "response": {"id": response_id, "object": "response", "status": "in_progress", "model": context.model},
        }),
    )];
    let output = match plan {
        Plan::Fail(_) => return Vec::new(),
        Plan::Hang => {
            steps.push(Step::KeepAliveForever);
            return steps;
        }
        Plan::Text(text) => {
            let message_id = format!("msg_{}", context.seq);
            steps.push(sse(
                "response.output_item.added",
                &json!({
                    "type": "response.output_item.added",
                    "output_index": 0,
                    "item": {"type": "message", "role": "assistant", "id": message_id, "status": "in_progress", "content": []},
                }),
            ));
            for (delta_idx, delta) in text.deltas.iter().enumerate() {
                if delta_idx > 0 && !text.delay.is_zero() {
                    steps.push(Step::Sleep(text.delay));
                }
                steps.push(sse(
                    "response.output_text.delta",
                    &json!({
                        "type": "response.output_text.delta",
                        "item_id": message_id,
                        "output_index": 0,
                        "content_index": 0,
                        "delta": delta,
                    }),
                ));
            }
            let item = responses_message(&message_id, text);
            steps.push(sse(
                "response.output_item.done",
                &json!({"type": "response.output_item.done", "output_index": 0, "item": item}),
            ));
            vec![item]
        }
        Plan::ToolCalls(calls) => {
            let mut output = Vec::new();
            for (output_idx, call) in calls.iter().enumerate() {
                let mut item = responses_tool_call(call, context.seq, output_idx);
                item["status"] = json!("in_progress");
                steps.push(sse(
                    "response.output_item.added",
                    &json!({"type": "response.output_item.added", "output_index": output_idx, "item": item}),
                ));
                item["status"] = json!("completed");
                steps.push(sse(
                    "response.output_item.done",
                    &json!({"type": "response.output_item.done", "output_index": output_idx, "item": item}),
                ));
                output.push(item);
            }
            output
        }
    };
    steps.push(sse(
        "response.completed",
        &json!({
            "type": "response.completed",
            "response": responses_object(context, output),
        }),
    ));
    steps
}

/// Returns the non-streaming Responses body for `plan` (a text or tool-call plan).
pub(crate) fn responses_json(plan: &Plan, context: &Context) -> Value {
    let output = match plan {
        Plan::Text(text) => vec![responses_message(&format!("msg_{}", context.seq), text)],
        Plan::ToolCalls(calls) => calls
            .iter()
            .enumerate()
            .map(|(output_idx, call)| responses_tool_call(call, context.seq, output_idx))
            .collect(),
        Plan::Fail(_) | Plan::Hang => Vec::new(),
    };
    responses_object(context, output)
}

/// Returns the Chat Completions chunks for `plan`, ending with `data: [DONE]`. The usage chunk is
/// sent only when the request asked for it (`stream_options.include_usage`).
pub(crate) fn chat_stream(plan: &Plan, context: &Context, include_usage: bool) -> Vec<Step> {
    let mut steps = Vec::new();
    let finish_reason = match plan {
        Plan::Fail(_) => return steps,
        Plan::Hang => {
            steps.push(chat_chunk(
                context,
                &json!({"role": "assistant", "content": ""}),
                None,
            ));
            steps.push(Step::KeepAliveForever);
            return steps;
        }
        Plan::Text(text) => {
            steps.push(chat_chunk(
                context,
                &json!({"role": "assistant", "content": ""}),
                None,
            ));
            for (delta_idx, delta) in text.deltas.iter().enumerate() {
                if delta_idx > 0 && !text.delay.is_zero() {
                    steps.push(Step::Sleep(text.delay));
                }
                steps.push(chat_chunk(context, &json!({"content": delta}), None));
            }
            "stop"
        }
        Plan::ToolCalls(calls) => {
            steps.push(chat_chunk(
                context,
                &json!({"role": "assistant", "content": null}),
                None,
            ));
            for (call_idx, call) in calls.iter().enumerate() {
                steps.push(chat_chunk(
                    context,
                    &json!({"tool_calls": [{
                        "index": call_idx,
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": ""},
                    }]}),
                    None,
                ));
                // Arguments arrive in pieces, as from a real server.
                for piece in halves(&call.function_arguments()) {
                    steps.push(chat_chunk(
                        context,
                        &json!({"tool_calls": [{"index": call_idx, "function": {"arguments": piece}}]}),
                        None,
                    ));
                }
            }
            "tool_calls"
        }
    };
    steps.push(chat_chunk(context, &json!({}), Some(finish_reason)));
    if include_usage {
        let chunk = json!({
            "id": format!("chatcmpl-{}", context.seq),
            "object": "chat.completion.chunk",
            "created": 0,
            "model": context.model,
            "choices": [],
            "usage": chat_usage(context.usage),
        });
        steps.push(Step::Send(Bytes::from(format!("data: {chunk}\n\n"))));
    }
    steps.push(Step::Send(Bytes::from_static(b"data: [DONE]\n\n")));
    steps
}

/// Returns the non-streaming Chat Completions body for `plan` (a text or tool-call plan).
pub(crate) fn chat_json(plan: &Plan, context: &Context) -> Value {
    let (message, finish_reason) = match plan {
        Plan::Text(text) => (json!({"role": "assistant", "content": text.text()}), "stop"),
        Plan::ToolCalls(calls) => {
            let tool_calls: Vec<Value> = calls
                .iter()
                .map(|call| {
                    json!({
                        "id": call.call_id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.function_arguments()},
                    })
                })
                .collect();
            (
                json!({"role": "assistant", "content": null, "tool_calls": tool_calls}),
                "tool_calls",
            )
        }
        Plan::Fail(_) | Plan::Hang => (json!({"role": "assistant", "content": null}), "stop"),
    };
    json!({
        "id": format!("chatcmpl-{}", context.seq),
        "object": "chat.completion",
        "created": 0,
        "model": context.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": chat_usage(context.usage),
    })
}

/// Returns the Anthropic Messages SSE events for `plan`: `message_start` (with the input and
/// cache usage), one content block per text or tool call (`text_delta`s, or `input_json_delta`s in
/// two pieces), `message_delta` (stop reason and output tokens) and `message_stop`. A
/// [`Plan::Fail`] has no stream and gives no steps.
pub(crate) fn anthropic_stream(plan: &Plan, context: &Context) -> Vec<Step> {
    let mut message = anthropic_message(context, Vec::new(), None);
    message["usage"]["output_tokens"] = json!(1);
    let mut steps = vec![sse(
        "message_start",
        &json!({"type": "message_start", "message": message}),
    )];
    let stop_reason = match plan {
        Plan::Fail(_) => return Vec::new(),
        Plan::Hang => {
            steps.push(Step::KeepAliveForever);
            return steps;
        }
        Plan::Text(text) => {
            steps.push(sse(
                "content_block_start",
                &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ));
            steps.push(sse("ping", &json!({"type": "ping"})));
            for (delta_idx, delta) in text.deltas.iter().enumerate() {
                if delta_idx > 0 && !text.delay.is_zero() {
                    steps.push(Step::Sleep(text.delay));
                }
                steps.push(sse(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": delta}}),
                ));
            }
            steps.push(sse(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": 0}),
            ));
            "end_turn"
        }
        Plan::ToolCalls(calls) => {
            for (block_idx, call) in calls.iter().enumerate() {
                steps.push(sse(
                    "content_block_start",
                    &json!({
                        "type": "content_block_start",
                        "index": block_idx,
                        "content_block": {"type": "tool_use", "id": call.call_id, "name": call.name, "input": {}},
                    }),
                ));
                // The arguments as written (a JSON object keeps its key order), in two pieces.
                let arguments = match anthropic_tool_input(call).as_object() {
                    Some(object) if !object.is_empty() => call.function_arguments(),
                    Some(_) | None => String::from("{}"),
                };
                for piece in halves(&arguments) {
                    steps.push(sse(
                        "content_block_delta",
                        &json!({"type": "content_block_delta", "index": block_idx, "delta": {"type": "input_json_delta", "partial_json": piece}}),
                    ));
                }
                steps.push(sse(
                    "content_block_stop",
                    &json!({"type": "content_block_stop", "index": block_idx}),
                ));
            }
            "tool_use"
        }
    };
    steps.push(sse(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": context.usage.output_tokens},
        }),
    ));
    steps.push(sse("message_stop", &json!({"type": "message_stop"})));
    steps
}

/// Returns the non-streaming Anthropic Messages body for `plan` (a text or tool-call plan).
pub(crate) fn anthropic_json(plan: &Plan, context: &Context) -> Value {
    let (content, stop_reason) = match plan {
        Plan::Text(text) => (vec![json!({"type": "text", "text": text.text()})], "end_turn"),
        Plan::ToolCalls(calls) => (
            calls
                .iter()
                .map(|call| {
                    json!({"type": "tool_use", "id": call.call_id, "name": call.name, "input": anthropic_tool_input(call)})
                })
                .collect(),
            "tool_use",
        ),
        Plan::Fail(_) | Plan::Hang => (Vec::new(), "end_turn"),
    };
    anthropic_message(context, content, Some(stop_reason))
}

fn anthropic_message(context: &Context, content: Vec<Value>, stop_reason: Option<&str>) -> Value {
    json!({
        "id": format!("msg_{}", context.seq),
        "type": "message",
        "role": "assistant",
        "model": context.model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": null,
        "usage": {
            "input_tokens": context.usage.input_tokens,
            "cache_creation_input_tokens": context.usage.cache_write_tokens,
            "cache_read_input_tokens": context.usage.cache_read_tokens,
            "output_tokens": context.usage.output_tokens,
        },
    })
}

/// Returns the `input` object of `call`: the function arguments when they are a JSON object (`{}`
/// otherwise), or `{"input": INPUT}` for a freeform call.
fn anthropic_tool_input(call: &PlannedToolCall) -> Value {
    serde_json::from_str::<Value>(&call.function_arguments())
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}))
}

fn sse(event_type: &str, data: &Value) -> Step {
    Step::Send(Bytes::from(format!(
        "event: {event_type}\ndata: {data}\n\n"
    )))
}

fn responses_message(message_id: &str, text: &TextPlan) -> Value {
    json!({
        "type": "message",
        "role": "assistant",
        "id": message_id,
        "status": "completed",
        "content": [{"type": "output_text", "text": text.text(), "annotations": []}],
    })
}

fn responses_tool_call(call: &PlannedToolCall, seq: u64, output_idx: usize) -> Value {
    match &call.input {
        PlannedToolInput::Function { arguments } => json!({
            "type": "function_call",
            "id": format!("fc_{seq}_{output_idx}"),
            "call_id": call.call_id,
            "name": call.name,
            "arguments": arguments,
            "status": "completed",
        }),
        PlannedToolInput::Custom { input } => json!({
            "type": "custom_tool_call",
            "id": format!("ctc_{seq}_{output_idx}"),
            "call_id": call.call_id,
            "name": call.name,
            "input": input,
            "status": "completed",
        }),
    }
}

fn responses_object(context: &Context, output: Vec<Value>) -> Value {
    json!({
        "id": format!("resp_{}", context.seq),
        "object": "response",
        "created_at": 0,
        "status": "completed",
        "model": context.model,
        "output": output,
        "usage": {
            "input_tokens": context.usage.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": context.usage.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": context.usage.total_tokens(),
        },
    })
}

fn chat_chunk(context: &Context, delta: &Value, finish_reason: Option<&str>) -> Step {
    let chunk = json!({
        "id": format!("chatcmpl-{}", context.seq),
        "object": "chat.completion.chunk",
        "created": 0,
        "model": context.model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    });
    Step::Send(Bytes::from(format!("data: {chunk}\n\n")))
}

fn chat_usage(usage: Usage) -> Value {
    json!({
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens(),
    })
}

/// Splits `text` into two non-empty halves at a character boundary (one piece when shorter than
/// two characters).
fn halves(text: &str) -> Vec<&str> {
    let n_chars = text.chars().count();
    if n_chars < 2 {
        return vec![text];
    }
    match text.char_indices().nth(n_chars / 2) {
        Some((split_idx, _)) => vec![&text[..split_idx], &text[split_idx..]],
        None => vec![text],
    }
}
