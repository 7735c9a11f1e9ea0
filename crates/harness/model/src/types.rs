//! The provider-neutral request and event types.

use serde_json::Value;

/// One model call: the system prompt, the conversation so far and the tools on offer.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRequest {
    /// The system (developer) instructions; empty for none.
    pub system: String,
    /// The conversation, oldest first.
    pub messages: Vec<Message>,
    /// The tools the model may call.
    pub tools: Vec<ToolSpec>,
}

/// One conversation item of a [`ModelRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, PartialEq)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolKind {
    /// A JSON object matching `parameters`.
    Function,
    /// Free text (like `apply_patch`). On Chat Completions, which has no freeform tools, it is
    /// offered as a function with one string argument `input`.
    Freeform,
}

/// A tool call made by the model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The id the tool result must refer to.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The arguments.
    pub input: ToolInput,
}

/// The arguments of a [`ToolCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Tokens read.
    pub input_tokens: u64,
    /// Tokens written.
    pub output_tokens: u64,
    /// Both.
    pub total_tokens: u64,
}
