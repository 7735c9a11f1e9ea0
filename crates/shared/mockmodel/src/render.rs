//! Rendering a [`Plan`] in the two OpenAI wire formats: Responses SSE events
//! (`reference/codex-app-server.md` §13) and Chat Completions chunks or JSON.

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
