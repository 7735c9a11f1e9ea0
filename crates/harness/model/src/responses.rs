//! The OpenAI Responses client (`POST {base_url}/responses`, streamed).

use std::collections::HashSet;
use std::collections::VecDeque;

use serde::Deserialize;
use serde_json::Value;
use serde_json::json;

use crate::ModelClient;
use crate::ModelEventStream;
use crate::config::HttpClientConfig;
use crate::error::ModelError;
use crate::error::Result;
use crate::http::Flow;
use crate::http::Interpreter;
use crate::http::Transport;
use crate::sse::SseEvent;
use crate::types::Message;
use crate::types::ModelEvent;
use crate::types::ModelRequest;
use crate::types::RetryObserver;
use crate::types::ToolCall;
use crate::types::ToolInput;
use crate::types::ToolKind;
use crate::types::Usage;

/// The smallest `max_output_tokens` the Responses API accepts; a smaller limit is raised to it.
const MIN_MAX_OUTPUT_TOKENS: u64 = 16;

/// Streams from an OpenAI Responses endpoint.
///
/// The request has `stream: true` and `store: false`; the system prompt goes in `instructions`,
/// freeform tools are `custom` tools, earlier calls and their outputs are sent as
/// `function_call`/`custom_tool_call` and `*_output` items. The stream ends at
/// `response.completed`; `response.failed`, `response.incomplete` and `error` events end it with an
/// error.
#[derive(Debug)]
pub struct ResponsesClient {
    transport: Transport,
    model: String,
}

impl ResponsesClient {
    /// Returns a client for `config.base_url` (`http://` or `https://`).
    ///
    /// # Errors
    ///
    /// [`ModelError::UnsupportedUrl`], [`ModelError::InvalidKey`] or [`ModelError::Client`].
    pub fn new(config: HttpClientConfig) -> Result<ResponsesClient> {
        Ok(ResponsesClient {
            transport: Transport::new(
                &config,
                "/responses",
                crate::http::bearer_headers(&config.api_key)?,
            )?,
            model: config.model,
        })
    }
}

#[async_trait::async_trait]
impl ModelClient for ResponsesClient {
    fn model(&self) -> &str {
        &self.model
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelEventStream> {
        self.stream_observing(request, &|_| {}).await
    }

    async fn stream_observing(
        &self,
        request: &ModelRequest,
        on_retry: &RetryObserver<'_>,
    ) -> Result<ModelEventStream> {
        let body = request_body(&self.model, request).to_string().into_bytes();
        self.transport
            .stream(body, ResponsesInterpreter::default(), on_retry)
            .await
    }
}

/// Returns the JSON body of a Responses request.
pub(crate) fn request_body(model: &str, request: &ModelRequest) -> Value {
    let mut input = Vec::new();
    for message in &request.messages {
        input.push(match message {
            Message::User { text } => json!({
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": text}],
            }),
            Message::Assistant { text } => json!({
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": text}],
            }),
            Message::ToolCall(call) => match &call.input {
                ToolInput::Function { arguments_json } => json!({
                    "type": "function_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "arguments": arguments_json,
                }),
                ToolInput::Freeform { input } => json!({
                    "type": "custom_tool_call",
                    "call_id": call.call_id,
                    "name": call.name,
                    "input": input,
                }),
            },
            Message::ToolResult { call_id, output } => {
                let item_type = if is_freeform_call(&request.messages, call_id) {
                    "custom_tool_call_output"
                } else {
                    "function_call_output"
                };
                json!({"type": item_type, "call_id": call_id, "output": output})
            }
        });
    }
    let tools: Vec<Value> = request
        .tools
        .iter()
        .map(|tool| match tool.kind {
            ToolKind::Function => json!({
                "type": "function",
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
                "strict": false,
            }),
            ToolKind::Freeform => json!({
                "type": "custom",
                "name": tool.name,
                "description": tool.description,
                "format": {"type": "text"},
            }),
        })
        .collect();
    let mut body = json!({
        "model": model,
        "input": input,
        "tools": tools,
        "tool_choice": "auto",
        "parallel_tool_calls": true,
        "stream": true,
        "store": false,
    });
    if !request.system.is_empty() {
        body["instructions"] = json!(request.system);
    }
    if let Some(limit) = request.max_output_tokens {
        // The API refuses a limit below 16.
        body["max_output_tokens"] = json!(limit.max(MIN_MAX_OUTPUT_TOKENS));
    }
    body
}

/// Returns true when the call `call_id` in `messages` is a freeform call.
pub(crate) fn is_freeform_call(messages: &[Message], call_id: &str) -> bool {
    messages.iter().any(|message| match message {
        Message::ToolCall(call) => {
            call.call_id == call_id && matches!(call.input, ToolInput::Freeform { .. })
        }
        Message::User { .. } | Message::Assistant { .. } | Message::ToolResult { .. } => false,
    })
}

/// The state of one Responses stream.
#[derive(Debug, Default)]
pub(crate) struct ResponsesInterpreter {
    /// All text deltas so far.
    text: String,
    /// Message items that streamed deltas (their `output_item.done` text is not repeated).
    items_with_deltas: HashSet<String>,
    /// A delta arrived without an `item_id`.
    saw_anonymous_delta: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireEvent {
    #[serde(rename = "type")]
    event_type: Option<String>,
    delta: Option<String>,
    item_id: Option<String>,
    item: Option<WireItem>,
    response: Option<WireResponse>,
    code: Option<String>,
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireItem {
    #[serde(rename = "type")]
    item_type: String,
    id: Option<String>,
    role: Option<String>,
    /// Kept as JSON: only message items' `output_text` parts are read.
    content: Option<Value>,
    call_id: Option<String>,
    name: Option<String>,
    arguments: Option<String>,
    input: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireResponse {
    usage: Option<WireUsage>,
    error: Option<WireError>,
    incomplete_details: Option<WireIncomplete>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    /// All input, cached input included.
    input_tokens: u64,
    input_tokens_details: Option<WireInputDetails>,
    output_tokens: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireInputDetails {
    cached_tokens: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireError {
    code: Option<String>,
    message: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireIncomplete {
    reason: Option<String>,
}

impl Interpreter for ResponsesInterpreter {
    fn on_event(&mut self, event: SseEvent, out: &mut VecDeque<ModelEvent>) -> Result<Flow> {
        let wire: WireEvent = serde_json::from_str(&event.data)
            .map_err(|source| ModelError::InvalidJson { source })?;
        let Some(event_type) = wire.event_type.or(event.name) else {
            return Err(ModelError::UnexpectedShape {
                what: "event without a type",
            });
        };
        match event_type.as_str() {
            "response.output_text.delta" => {
                let Some(delta) = wire.delta else {
                    return Err(ModelError::UnexpectedShape {
                        what: "text delta without delta",
                    });
                };
                match wire.item_id {
                    Some(item_id) => {
                        self.items_with_deltas.insert(item_id);
                    }
                    None => self.saw_anonymous_delta = true,
                }
                self.text.push_str(&delta);
                out.push_back(ModelEvent::TextDelta(delta));
                Ok(Flow::Continue)
            }
            "response.output_item.done" => {
                let Some(item) = wire.item else {
                    return Err(ModelError::UnexpectedShape {
                        what: "output item event without item",
                    });
                };
                self.on_item_done(item, out)?;
                Ok(Flow::Continue)
            }
            "response.completed" => {
                let usage = wire
                    .response
                    .and_then(|response| response.usage)
                    .map(|usage| {
                        // The API counts cached input inside `input_tokens`; ours is uncached.
                        let cached = usage
                            .input_tokens_details
                            .map_or(0, |details| details.cached_tokens)
                            .min(usage.input_tokens);
                        Usage::new(usage.input_tokens - cached, cached, usage.output_tokens)
                    });
                out.push_back(ModelEvent::Completed {
                    text: std::mem::take(&mut self.text),
                    usage,
                });
                Ok(Flow::Done)
            }
            "response.failed" => {
                let error = wire
                    .response
                    .and_then(|response| response.error)
                    .unwrap_or_default();
                Err(ModelError::Failed {
                    code: error.code,
                    message: error
                        .message
                        .unwrap_or_else(|| String::from("response failed")),
                })
            }
            "response.incomplete" => {
                let reason = wire
                    .response
                    .and_then(|response| response.incomplete_details)
                    .and_then(|details| details.reason)
                    .unwrap_or_else(|| String::from("unknown"));
                Err(ModelError::Incomplete { reason })
            }
            "error" => Err(ModelError::Failed {
                code: wire.code,
                message: wire.message.unwrap_or_else(|| String::from("error event")),
            }),
            _ => Ok(Flow::Continue),
        }
    }
}

impl ResponsesInterpreter {
    fn on_item_done(&mut self, item: WireItem, out: &mut VecDeque<ModelEvent>) -> Result<()> {
        match item.item_type.as_str() {
            "message" => {
                if item.role.as_deref().is_some_and(|role| role != "assistant") {
                    return Ok(());
                }
                let streamed = match &item.id {
                    Some(id) => self.items_with_deltas.contains(id),
                    None => self.saw_anonymous_delta,
                };
                if streamed {
                    return Ok(());
                }
                // A message that came whole, without deltas: its text becomes one delta.
                let parts = item.content.as_ref().and_then(Value::as_array);
                let text: String = parts
                    .into_iter()
                    .flatten()
                    .filter(|part| part.get("type").and_then(Value::as_str) == Some("output_text"))
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect();
                if !text.is_empty() {
                    self.text.push_str(&text);
                    out.push_back(ModelEvent::TextDelta(text));
                }
                Ok(())
            }
            "function_call" | "custom_tool_call" => {
                let (Some(call_id), Some(name)) = (item.call_id, item.name) else {
                    return Err(ModelError::UnexpectedShape {
                        what: "tool call without call_id or name",
                    });
                };
                let input = if item.item_type == "function_call" {
                    ToolInput::Function {
                        arguments_json: item.arguments.unwrap_or_else(|| String::from("{}")),
                    }
                } else {
                    ToolInput::Freeform {
                        input: item.input.unwrap_or_default(),
                    }
                };
                out.push_back(ModelEvent::ToolCall(ToolCall {
                    call_id,
                    name,
                    input,
                }));
                Ok(())
            }
            _ => Ok(()),
        }
    }
}
