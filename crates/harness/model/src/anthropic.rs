//! The Anthropic Messages client (`POST {base_url}/messages`, streamed).

use std::collections::BTreeMap;
use std::collections::HashSet;
use std::collections::VecDeque;

use reqwest::header::HeaderMap;
use reqwest::header::HeaderName;
use reqwest::header::HeaderValue;
use serde::Deserialize;
use serde_json::Value;
use serde_json::json;

use crate::ModelClient;
use crate::ModelEventStream;
use crate::config::ApiKey;
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

/// The `anthropic-version` header every request carries.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The `max_tokens` of a request without an output limit, and the most any request asks for:
/// the API requires the field and refuses a value above the model's own maximum, and every
/// current model allows at least this many.
pub const ANTHROPIC_DEFAULT_MAX_TOKENS: u64 = 8192;

/// Streams from the Anthropic Messages API.
///
/// The request sends the key as `x-api-key` with `anthropic-version: 2023-06-01`, `stream: true`
/// and `max_tokens` (the request's output limit, at most [`ANTHROPIC_DEFAULT_MAX_TOKENS`], which
/// is also the value without a limit). The system prompt is one `text` block and the tools are
/// `{name, description, input_schema}`; both carry `cache_control: {"type": "ephemeral"}` on
/// their last entry, so the stable prefix is cached between the calls of a turn. Messages
/// alternate roles: earlier tool calls are `tool_use` blocks of the assistant message, their
/// outputs `tool_result` blocks of the next user message. A [`ToolKind::Freeform`] tool is offered
/// as a tool with one string property `input`, and a call to it comes back as
/// [`ToolInput::Freeform`] with that string.
///
/// The stream ends at `message_stop`. Every stop reason (`end_turn`, `tool_use`, `max_tokens`,
/// `stop_sequence`) completes the call with what arrived; an `error` event ends it with
/// [`ModelError::Failed`] whose code is the error type (`overloaded_error`, ...). Usage:
/// `input_tokens` plus `cache_creation_input_tokens` are the uncached input,
/// `cache_read_input_tokens` the cached input.
#[derive(Debug)]
pub struct AnthropicClient {
    transport: Transport,
    model: String,
}

impl AnthropicClient {
    /// Returns a client for `config.base_url` (`http://` or `https://`, with the version path).
    ///
    /// # Errors
    ///
    /// [`ModelError::UnsupportedUrl`], [`ModelError::InvalidKey`] or [`ModelError::Client`].
    pub fn new(config: HttpClientConfig) -> Result<AnthropicClient> {
        Ok(AnthropicClient {
            transport: Transport::new(&config, "/messages", headers(&config.api_key)?)?,
            model: config.model,
        })
    }
}

#[async_trait::async_trait]
impl ModelClient for AnthropicClient {
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
        let freeform_tools = request.freeform_tool_names();
        let interpreter = AnthropicInterpreter {
            freeform_tools,
            ..AnthropicInterpreter::default()
        };
        self.transport.stream(body, interpreter, on_retry).await
    }
}

/// Returns the credential and version headers.
fn headers(api_key: &ApiKey) -> Result<HeaderMap> {
    let mut key = HeaderValue::from_str(api_key.expose()).map_err(|_| ModelError::InvalidKey)?;
    key.set_sensitive(true);
    let mut headers = HeaderMap::new();
    headers.insert(HeaderName::from_static("x-api-key"), key);
    headers.insert(
        HeaderName::from_static("anthropic-version"),
        HeaderValue::from_static(ANTHROPIC_VERSION),
    );
    Ok(headers)
}

/// Returns the JSON body of a Messages request.
pub(crate) fn request_body(model: &str, request: &ModelRequest) -> Value {
    // Consecutive items of one role share a message, as the API expects alternating roles.
    let mut messages: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let mut push = |role: &'static str, block: Value| match messages.last_mut() {
        Some((last_role, blocks)) if *last_role == role => blocks.push(block),
        Some(_) | None => messages.push((role, vec![block])),
    };
    for message in &request.messages {
        match message {
            // The API refuses empty text blocks.
            Message::User { text } if text.is_empty() => {}
            Message::User { text } => push("user", json!({"type": "text", "text": text})),
            Message::Assistant { text } if text.is_empty() => {}
            Message::Assistant { text } => {
                push("assistant", json!({"type": "text", "text": text}));
            }
            Message::ToolCall(call) => {
                let input = match &call.input {
                    // The input must be an object; arguments that are not one (the model sent
                    // bad JSON, and the tool refused them) go back empty.
                    ToolInput::Function { arguments_json } => {
                        serde_json::from_str::<Value>(arguments_json)
                            .ok()
                            .filter(Value::is_object)
                            .unwrap_or_else(|| json!({}))
                    }
                    ToolInput::Freeform { input } => json!({ "input": input }),
                };
                push(
                    "assistant",
                    json!({"type": "tool_use", "id": call.call_id, "name": call.name, "input": input}),
                );
            }
            Message::ToolResult { call_id, output } => {
                let mut block = json!({"type": "tool_result", "tool_use_id": call_id});
                if !output.is_empty() {
                    block["content"] = json!(output);
                }
                push("user", block);
            }
        }
    }
    let messages: Vec<Value> = messages
        .into_iter()
        .map(|(role, content)| json!({"role": role, "content": content}))
        .collect();
    let max_tokens = request
        .max_output_tokens
        .map_or(ANTHROPIC_DEFAULT_MAX_TOKENS, |limit| {
            limit.clamp(1, ANTHROPIC_DEFAULT_MAX_TOKENS)
        });
    let mut body = json!({
        "model": model,
        "max_tokens": max_tokens,
        "stream": true,
        "messages": messages,
    });
    if !request.system.is_empty() {
        body["system"] = json!([{
            "type": "text",
            "text": request.system,
            "cache_control": {"type": "ephemeral"},
        }]);
    }
    if !request.tools.is_empty() {
        let mut tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                let input_schema = match tool.kind {
                    ToolKind::Function => tool.parameters.clone(),
                    ToolKind::Freeform => json!({
                        "type": "object",
                        "properties": {"input": {"type": "string", "description": "the freeform input"}},
                        "required": ["input"],
                    }),
                };
                json!({"name": tool.name, "description": tool.description, "input_schema": input_schema})
            })
            .collect();
        if let Some(last) = tools.last_mut() {
            last["cache_control"] = json!({"type": "ephemeral"});
        }
        body["tools"] = json!(tools);
    }
    body
}

/// The state of one Messages stream.
#[derive(Debug, Default)]
pub(crate) struct AnthropicInterpreter {
    /// Names of the freeform tools of the request.
    freeform_tools: HashSet<String>,
    text: String,
    /// Tool calls being assembled, by content block index.
    calls: BTreeMap<u64, PartialCall>,
    usage: WireUsage,
    saw_usage: bool,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    /// The `input_json_delta` pieces joined.
    json: String,
    /// The `input` of `content_block_start`, used when no delta came.
    start_input: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireEvent {
    #[serde(rename = "type")]
    event_type: Option<String>,
    message: Option<WireMessage>,
    index: Option<u64>,
    content_block: Option<WireBlock>,
    delta: Option<WireDelta>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireMessage {
    usage: Option<WireUsage>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireBlock {
    #[serde(rename = "type")]
    block_type: String,
    text: Option<String>,
    id: Option<String>,
    name: Option<String>,
    input: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireDelta {
    #[serde(rename = "type")]
    delta_type: Option<String>,
    text: Option<String>,
    partial_json: Option<String>,
    stop_reason: Option<String>,
}

/// Usage as the API sends it; later events update only the fields they carry.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireError {
    #[serde(rename = "type")]
    error_type: Option<String>,
    message: Option<String>,
}

impl Interpreter for AnthropicInterpreter {
    fn on_event(&mut self, event: SseEvent, out: &mut VecDeque<ModelEvent>) -> Result<Flow> {
        let wire: WireEvent = serde_json::from_str(&event.data)
            .map_err(|source| ModelError::InvalidJson { source })?;
        let Some(event_type) = wire.event_type.or(event.name) else {
            return Err(ModelError::UnexpectedShape {
                what: "event without a type",
            });
        };
        match event_type.as_str() {
            "message_start" => {
                if let Some(usage) = wire.message.and_then(|message| message.usage) {
                    self.update_usage(usage);
                }
                Ok(Flow::Continue)
            }
            "content_block_start" => {
                let (Some(index), Some(block)) = (wire.index, wire.content_block) else {
                    return Err(ModelError::UnexpectedShape {
                        what: "content block start without index or block",
                    });
                };
                match block.block_type.as_str() {
                    "text" => {
                        if let Some(text) = block.text.filter(|text| !text.is_empty()) {
                            self.push_text(text, out);
                        }
                    }
                    "tool_use" => {
                        let (Some(id), Some(name)) = (block.id, block.name) else {
                            return Err(ModelError::UnexpectedShape {
                                what: "tool_use block without id or name",
                            });
                        };
                        self.calls.insert(
                            index,
                            PartialCall {
                                id,
                                name,
                                json: String::new(),
                                start_input: block.input,
                            },
                        );
                    }
                    // Thinking and other blocks are not part of the answer.
                    _ => {}
                }
                Ok(Flow::Continue)
            }
            "content_block_delta" => {
                let delta = wire.delta.unwrap_or_default();
                match delta.delta_type.as_deref() {
                    Some("text_delta") => {
                        if let Some(text) = delta.text.filter(|text| !text.is_empty()) {
                            self.push_text(text, out);
                        }
                    }
                    Some("input_json_delta") => {
                        let call = wire.index.and_then(|index| self.calls.get_mut(&index));
                        let Some(call) = call else {
                            return Err(ModelError::UnexpectedShape {
                                what: "input_json_delta outside a tool_use block",
                            });
                        };
                        call.json.push_str(&delta.partial_json.unwrap_or_default());
                    }
                    _ => {}
                }
                Ok(Flow::Continue)
            }
            "content_block_stop" => {
                if let Some(call) = wire.index.and_then(|index| self.calls.remove(&index)) {
                    out.push_back(ModelEvent::ToolCall(self.finish_call(call)));
                }
                Ok(Flow::Continue)
            }
            "message_delta" => {
                if let Some(usage) = wire.usage {
                    self.update_usage(usage);
                }
                if let Some(stop_reason) = wire.delta.and_then(|delta| delta.stop_reason) {
                    tracing::debug!(stop_reason = %stop_reason, "anthropic message stopped");
                }
                Ok(Flow::Continue)
            }
            "message_stop" => {
                // A block the stream never closed is still a whole call once the message ends.
                for (_, call) in std::mem::take(&mut self.calls) {
                    out.push_back(ModelEvent::ToolCall(self.finish_call(call)));
                }
                let usage = self.saw_usage.then(|| {
                    let usage = &self.usage;
                    Usage::new(
                        usage
                            .input_tokens
                            .unwrap_or(0)
                            .saturating_add(usage.cache_creation_input_tokens.unwrap_or(0)),
                        usage.cache_read_input_tokens.unwrap_or(0),
                        usage.output_tokens.unwrap_or(0),
                    )
                });
                out.push_back(ModelEvent::Completed {
                    text: std::mem::take(&mut self.text),
                    usage,
                });
                Ok(Flow::Done)
            }
            "error" => {
                let error = wire.error.unwrap_or_default();
                Err(ModelError::Failed {
                    code: error.error_type,
                    message: error.message.unwrap_or_else(|| String::from("error event")),
                })
            }
            // `ping` and event types added later.
            _ => Ok(Flow::Continue),
        }
    }
}

impl AnthropicInterpreter {
    fn push_text(&mut self, text: String, out: &mut VecDeque<ModelEvent>) {
        self.text.push_str(&text);
        out.push_back(ModelEvent::TextDelta(text));
    }

    fn update_usage(&mut self, usage: WireUsage) {
        self.saw_usage = true;
        let current = &mut self.usage;
        current.input_tokens = usage.input_tokens.or(current.input_tokens);
        current.cache_creation_input_tokens = usage
            .cache_creation_input_tokens
            .or(current.cache_creation_input_tokens);
        current.cache_read_input_tokens = usage
            .cache_read_input_tokens
            .or(current.cache_read_input_tokens);
        current.output_tokens = usage.output_tokens.or(current.output_tokens);
    }

    fn finish_call(&self, call: PartialCall) -> ToolCall {
        let arguments_json = match (call.json.is_empty(), call.start_input) {
            (false, _) => call.json,
            (true, Some(input)) => input.to_string(),
            (true, None) => String::from("{}"),
        };
        let input = if self.freeform_tools.contains(&call.name) {
            let input = serde_json::from_str::<Value>(&arguments_json)
                .ok()
                .and_then(|value| {
                    value
                        .get("input")
                        .and_then(Value::as_str)
                        .map(str::to_owned)
                })
                .unwrap_or(arguments_json);
            ToolInput::Freeform { input }
        } else {
            ToolInput::Function { arguments_json }
        };
        ToolCall {
            call_id: call.id,
            name: call.name,
            input,
        }
    }
}

#[cfg(test)]
#[path = "anthropic_tests.rs"]
mod tests;
