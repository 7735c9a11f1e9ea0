//! The provider-neutral request and event types.

use std::time::Duration;

use gatehouse_protocol::error::ErrorCode;
use serde::Deserialize;
use serde::Serialize;
use serde_json::Value;

/// One model call: the system prompt, the conversation so far and the tools on offer.
///
/// Its JSON (camel-case keys) is what a worker sends the node host's inference broker
/// ([`crate::broker`]); the request types are serializable for that reason only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelRequest {
    /// The system (developer) instructions; empty for none.
    pub system: String,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// The most tokens the answer may have, sent as `max_output_tokens` (Responses, at least 16,
    /// the API's minimum), `max_completion_tokens` (Chat Completions) or `max_tokens`
    /// (Anthropic, at most [`crate::ANTHROPIC_DEFAULT_MAX_TOKENS`]). `None` leaves it
    /// to the API, except on Anthropic, which requires one and gets
    /// [`crate::ANTHROPIC_DEFAULT_MAX_TOKENS`].
    pub max_output_tokens: Option<u64>,
}

impl ModelRequest {
    /// Returns the names of the request's freeform tools: an API without freeform tools gets
    /// them as function tools with one string `input`, mapped back when the model calls them.
    pub fn freeform_tool_names(&self) -> std::collections::HashSet<String> {
        self.tools
            .iter()
            .filter(|tool| tool.kind == ToolKind::Freeform)
            .map(|tool| tool.name.clone())
            .collect()
    }
}

/// One conversation item of a [`ModelRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Message {
    /// A user message.
    User {
        /// The text.
        text: String,
    },
    /// An assistant text message from an earlier call.
    Assistant {
        /// The text.
        text: String,
    },
    /// A tool call from an earlier call, as the model made it.
    ToolCall(ToolCall),
    /// The output of a tool call. Its kind (function or freeform) is that of the [`Message::ToolCall`]
    /// with the same `call_id` earlier in `messages` (function when there is none).
    ToolResult {
        /// The id of the call this output answers.
        call_id: String,
        /// The output text.
        output: String,
    },
}

/// A tool the model may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolSpec {
    /// The tool name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema of the arguments (function tools; ignored for freeform tools).
    pub parameters: Value,
    /// How the model passes arguments.
    pub kind: ToolKind,
}

/// How a tool receives its arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ToolKind {
    /// A JSON object matching `parameters`.
    Function,
    /// Free text (like `apply_patch`). On Chat Completions, which has no freeform tools, it is
    /// offered as a function with one string argument `input`.
    Freeform,
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ToolCall {
    /// The id the tool result must refer to.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The arguments.
    pub input: ToolInput,
}

/// The arguments of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum ToolInput {
    /// JSON arguments of a function call, exactly as the model sent them (not validated).
    Function {
        /// The JSON text.
        arguments_json: String,
    },
    /// The text input of a freeform call.
    Freeform {
        /// The text.
        input: String,
    },
}

/// What a model stream yields.
///
/// A successful stream is any number of [`ModelEvent::TextDelta`] and [`ModelEvent::ToolCall`]
/// events, then exactly one [`ModelEvent::Completed`], then the end. A failed stream ends with one
/// `Err` instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelEvent {
    /// A piece of assistant text.
    TextDelta(String),
    /// A complete tool call (its arguments are never split across events).
    ToolCall(ToolCall),
    /// The model call ended.
    Completed {
        /// The whole assistant text: all deltas joined.
        text: String,
        /// Token counts, when the API reported them.
        usage: Option<Usage>,
    },
}

/// Token counts of one model call.
///
/// `input_tokens` counts the input not read from the provider's prompt cache (cache writes
/// included), `cached_input_tokens` the input read from it, so `total_tokens` is
/// `input_tokens + cached_input_tokens + output_tokens`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Usage {
    /// Uncached input tokens (cache writes included).
    pub input_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cached_input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// All three.
    pub total_tokens: u64,
}

impl Usage {
    /// Returns the usage of `input_tokens` uncached, `cached_input_tokens` cached and
    /// `output_tokens` written tokens, with their total.
    pub fn new(input_tokens: u64, cached_input_tokens: u64, output_tokens: u64) -> Usage {
        Usage {
            input_tokens,
            cached_input_tokens,
            output_tokens,
            total_tokens: input_tokens
                .saturating_add(cached_input_tokens)
                .saturating_add(output_tokens),
        }
    }
}

/// One failed attempt of a model call that the client retries, reported before it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryNotice {
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// The failure's stable code, for example `MODEL_UNAVAILABLE` for a 529.
    pub code: ErrorCode,
    /// What happened (the error's text; it never holds the key).
    pub message: String,
    /// How long the client waits before the next attempt.
    pub delay: Duration,
}

/// Receives a [`RetryNotice`] for every retry of one model call, before the client waits; see
/// [`crate::ModelClient::stream_observing`].
pub type RetryObserver<'a> = dyn Fn(&RetryNotice) + Send + Sync + 'a;
