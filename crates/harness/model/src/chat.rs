//! The OpenAI Chat Completions client (`POST {base_url}/chat/completions`, streamed).

use std::collections::BTreeMap;
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

/// Streams from an OpenAI Chat Completions endpoint (also vLLM, llama.cpp, Ollama).
///
/// The request has `stream: true` and `stream_options.include_usage`. Chat Completions has no
/// freeform tools, so a [`ToolKind::Freeform`] tool is offered as a function with one string
/// argument `input`, and a call to it comes back as [`ToolInput::Freeform`] with that string.
/// Tool-call deltas are joined by `index` and emitted whole at `finish_reason` (or `[DONE]`); the
/// stream ends at `data: [DONE]`.
#[derive(Debug)]
pub struct ChatCompletionsClient {
    transport: Transport,
    model: String,
}

impl ChatCompletionsClient {
    /// Returns a client for `config.base_url` (`http://` or `https://`).
    ///
    /// # Errors
    ///
    /// [`ModelError::UnsupportedUrl`], [`ModelError::InvalidKey`] or [`ModelError::Client`].
    pub fn new(config: HttpClientConfig) -> Result<ChatCompletionsClient> {
        Ok(ChatCompletionsClient {
            transport: Transport::new(
                &config,
                "/chat/completions",
                crate::http::bearer_headers(&config.api_key)?,
            )?,
            model: config.model,
        })
    }
}

#[async_trait::async_trait]
impl ModelClient for ChatCompletionsClient {
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
        let interpreter = ChatInterpreter {
            freeform_tools,
            ..ChatInterpreter::default()
        };
        self.transport.stream(body, interpreter, on_retry).await
    }
}

/// Returns the JSON body of a Chat Completions request.
pub(crate) fn request_body(model: &str, request: &ModelRequest) -> Value {
    let mut messages: Vec<Value> = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    // Tool calls join the assistant message right before them, as the API expects.
    let mut assistant_open = false;
    for message in &request.messages {
        match message {
            Message::User { text } => {
                messages.push(json!({"role": "user", "content": text}));
                assistant_open = false;
            }
            Message::Assistant { text } => {
                messages.push(json!({"role": "assistant", "content": text}));
                assistant_open = true;
            }
            Message::ToolCall(call) => {
                let arguments = match &call.input {
                    ToolInput::Function { arguments_json } => arguments_json.clone(),
                    ToolInput::Freeform { input } => json!({ "input": input }).to_string(),
                };
                let tool_call = json!({
                    "id": call.call_id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": arguments},
                });
                match messages.last_mut() {
                    Some(last) if assistant_open => match last.get_mut("tool_calls") {
                        Some(Value::Array(tool_calls)) => tool_calls.push(tool_call),
                        Some(_) | None => last["tool_calls"] = json!([tool_call]),
                    },
                    Some(_) | None => {
                        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [tool_call]}));
                        assistant_open = true;
                    }
                }
            }
            Message::ToolResult { call_id, output } => {
                messages.push(json!({"role": "tool", "tool_call_id": call_id, "content": output}));
                assistant_open = false;
            }
        }
    }
    let mut body = json!({
        "model": model,
        "messages": messages,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    if let Some(limit) = request.max_output_tokens {
        body["max_completion_tokens"] = json!(limit);
    }
    if !request.tools.is_empty() {
        let tools: Vec<Value> = request
            .tools
            .iter()
            .map(|tool| {
                let parameters = match tool.kind {
                    ToolKind::Function => tool.parameters.clone(),
                    ToolKind::Freeform => json!({
                        "type": "object",
                        "properties": {"input": {"type": "string", "description": "the freeform input"}},
                        "required": ["input"],
                    }),
                };
                json!({
                    "type": "function",
                    "function": {"name": tool.name, "description": tool.description, "parameters": parameters},
                })
            })
            .collect();
        body["tools"] = json!(tools);
        body["tool_choice"] = json!("auto");
    }
    body
}

/// The state of one Chat Completions stream.
#[derive(Debug, Default)]
pub(crate) struct ChatInterpreter {
    /// Names of the freeform tools of the request.
    freeform_tools: HashSet<String>,
    text: String,
    /// Tool calls being assembled, by `index`.
    calls: BTreeMap<usize, PartialCall>,
    usage: Option<Usage>,
}

#[derive(Debug, Default)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireChunk {
    choices: Option<Vec<WireChoice>>,
    usage: Option<WireUsage>,
    error: Option<WireError>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireChoice {
    index: u32,
    delta: Option<WireDelta>,
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireDelta {
    content: Option<String>,
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireToolCallDelta {
    index: Option<usize>,
    id: Option<String>,
    function: Option<WireFunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireFunctionDelta {
    name: Option<String>,
    arguments: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireUsage {
    /// All input, cached input included.
    prompt_tokens: u64,
    prompt_tokens_details: Option<WirePromptDetails>,
    completion_tokens: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WirePromptDetails {
    cached_tokens: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct WireError {
    code: Option<Value>,
    message: Option<String>,
}

impl Interpreter for ChatInterpreter {
    fn on_event(&mut self, event: SseEvent, out: &mut VecDeque<ModelEvent>) -> Result<Flow> {
        if event.data.trim() == "[DONE]" {
            self.flush_calls(out)?;
            out.push_back(ModelEvent::Completed {
                text: std::mem::take(&mut self.text),
                usage: self.usage.take(),
            });
            return Ok(Flow::Done);
        }
        let chunk: WireChunk = serde_json::from_str(&event.data)
            .map_err(|source| ModelError::InvalidJson { source })?;
        if let Some(error) = chunk.error {
            let code = match error.code {
                Some(Value::String(code)) => Some(code),
                Some(Value::Null) | None => None,
                Some(other) => Some(other.to_string()),
            };
            return Err(ModelError::Failed {
                code,
                message: error.message.unwrap_or_else(|| String::from("error chunk")),
            });
        }
        if let Some(usage) = chunk.usage {
            // The API counts cached input inside `prompt_tokens`; ours is uncached.
            let cached = usage
                .prompt_tokens_details
                .map_or(0, |details| details.cached_tokens)
                .min(usage.prompt_tokens);
            self.usage = Some(Usage::new(
                usage.prompt_tokens - cached,
                cached,
                usage.completion_tokens,
            ));
        }
        // Only the first choice is used (we never ask for more than one).
        let choices = chunk.choices.unwrap_or_default();
        for choice in choices.into_iter().filter(|choice| choice.index == 0) {
            let delta = choice.delta.unwrap_or_default();
            if let Some(content) = delta.content
                && !content.is_empty()
            {
                self.text.push_str(&content);
                out.push_back(ModelEvent::TextDelta(content));
            }
            let tool_calls = delta.tool_calls.unwrap_or_default();
            for (position, call_delta) in tool_calls.into_iter().enumerate() {
                let partial = self
                    .calls
                    .entry(call_delta.index.unwrap_or(position))
                    .or_default();
                if let Some(id) = call_delta.id
                    && partial.id.is_empty()
                {
                    partial.id = id;
                }
                let function = call_delta.function.unwrap_or_default();
                if let Some(name) = function.name
                    && partial.name.is_empty()
                {
                    partial.name = name;
                }
                if let Some(arguments) = function.arguments {
                    partial.arguments.push_str(&arguments);
                }
            }
            if choice.finish_reason.is_some() {
                self.flush_calls(out)?;
            }
        }
        Ok(Flow::Continue)
    }
}

impl ChatInterpreter {
    /// Emits the assembled tool calls in `index` order.
    fn flush_calls(&mut self, out: &mut VecDeque<ModelEvent>) -> Result<()> {
        for (index, partial) in std::mem::take(&mut self.calls) {
            if partial.name.is_empty() {
                return Err(ModelError::UnexpectedShape {
                    what: "tool call without a name",
                });
            }
            let call_id = if partial.id.is_empty() {
                format!("call_{index}")
            } else {
                partial.id
            };
            let input = if self.freeform_tools.contains(&partial.name) {
                let input = serde_json::from_str::<Value>(&partial.arguments)
                    .ok()
                    .and_then(|value| {
                        value
                            .get("input")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    })
                    .unwrap_or(partial.arguments);
                ToolInput::Freeform { input }
            } else {
                ToolInput::Function {
                    arguments_json: partial.arguments,
                }
            };
            out.push_back(ModelEvent::ToolCall(ToolCall {
                call_id,
                name: partial.name,
                input,
            }));
        }
        Ok(())
    }
}
