//! `GET /v1/models` and `POST /v1/chat/completions`: the OpenAI-compatible routes, in the
//! shapes of OpenAI's Chat Completions API, so its SDKs and tools talk to the agent.
//!
//! Where these types depart from OpenAI's: a request's fields that the Gateway does not use
//! (`temperature`, `tools`, ...) are accepted and ignored, and only the last `user` message of a
//! request is read, since the Gateway's transcript of the session is the conversation's history.
//! Errors have OpenAI's shape ([`OpenAiErrorResponse`]) with the Gateway's stable code in `code`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The request header that names the session of a chat completion.
pub const SESSION_HEADER: &str = "x-gatehouse-session";

/// The request header whose value becomes the message's idempotency key.
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// The `object` of [`ModelList`].
pub const LIST_OBJECT: &str = "list";
/// The `object` of [`Model`].
pub const MODEL_OBJECT: &str = "model";
/// The `object` of [`ChatCompletion`].
pub const COMPLETION_OBJECT: &str = "chat.completion";
/// The `object` of [`ChatCompletionChunk`].
pub const CHUNK_OBJECT: &str = "chat.completion.chunk";
/// The `data:` line that ends a streamed completion.
pub const STREAM_DONE: &str = "[DONE]";

/// The answer of `GET /v1/models`: the agents, as models.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    /// The agents.
    pub data: Vec<Model>,
}

/// One agent as a model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Model {
    /// The agent's name, which a chat completion names as its `model` (`main`).
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// When the Gateway started, Unix seconds.
    pub created: i64,
    /// Always `gatehouse`.
    pub owned_by: String,
}

/// The body of `POST /v1/chat/completions`. Other fields of OpenAI's request are accepted and
/// ignored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatCompletionParams {
    /// The agent (`main`).
    pub model: String,
    /// The conversation as the client knows it; only the last `user` message is sent to the
    /// agent.
    pub messages: Vec<ChatMessageParam>,
    /// Whether to answer as Server-Sent Events of [`ChatCompletionChunk`]s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// The session, when no `X-Gatehouse-Session` header names one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Options of a streamed answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
}

/// The `stream_options` of a [`ChatCompletionParams`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StreamOptions {
    /// Send one more chunk before `data: [DONE]`, with no choices and the turn's `usage`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
}

/// One message of a chat completion request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChatMessageParam {
    /// `system`, `developer`, `user`, `assistant` or `tool`.
    pub role: String,
    /// The text, as a string or as content parts; `null` for an assistant message that only
    /// called tools.
    #[serde(default)]
    pub content: Option<ChatContent>,
}

/// The content of a request message.
///
/// Decoded by hand rather than as an untagged enum: serde buffers an untagged value whole in a
/// generic tree before it tries each variant, which made a 16 MiB body of a long array cost the
/// Gateway hundreds of megabytes before it was refused. The hand-written visitor decodes a
/// string or a sequence of parts directly and stops at the first element that is not a part.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ChatContent {
    /// Plain text.
    Text(String),
    /// Content parts; the `text` parts are joined with newlines and the others ignored.
    Parts(Vec<ChatContentPart>),
}

impl ChatContent {
    /// Returns the text of the content: the string, or the `text` parts joined with newlines.
    pub fn text(&self) -> String {
        match self {
            ChatContent::Text(text) => text.clone(),
            ChatContent::Parts(parts) => parts
                .iter()
                .filter(|part| part.kind == "text")
                .filter_map(|part| part.text.as_deref())
                .collect::<Vec<&str>>()
                .join("\n"),
        }
    }
}

impl<'de> Deserialize<'de> for ChatContent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ContentVisitor;

        impl<'de> serde::de::Visitor<'de> for ContentVisitor {
            type Value = ChatContent;

            fn expecting(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                formatter.write_str("a string or a list of content parts")
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<ChatContent, E> {
                Ok(ChatContent::Text(text.to_owned()))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<ChatContent, E> {
                Ok(ChatContent::Text(text))
            }

            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut sequence: A,
            ) -> Result<ChatContent, A::Error> {
                let mut parts = Vec::new();
                while let Some(part) = sequence.next_element::<ChatContentPart>()? {
                    parts.push(part);
                }
                Ok(ChatContent::Parts(parts))
            }
        }

        deserializer.deserialize_any(ContentVisitor)
    }
}

/// One content part of a request message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatContentPart {
    /// The part's type; only `text` is read.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// The answer of a `POST /v1/chat/completions` without `stream`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatCompletion {
    /// The turn's id, prefixed with `chatcmpl-`.
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    /// When the turn was admitted, Unix seconds.
    pub created: i64,
    /// The agent.
    pub model: String,
    /// One choice: the turn's reply.
    pub choices: Vec<ChatChoice>,
    /// The tokens used, where the model reports them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ChatUsage>,
}

/// The one choice of a [`ChatCompletion`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatChoice {
    /// Always 0.
    pub index: u32,
    /// The reply.
    pub message: ChatCompletionMessage,
    /// Always `stop`.
    pub finish_reason: String,
}

/// The assistant's message of a [`ChatChoice`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatCompletionMessage {
    /// Always `assistant`.
    pub role: String,
    /// The tool activity of the turn, one line per call, then the reply.
    pub content: String,
}

/// Token counts, in OpenAI's names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatUsage {
    /// Input tokens, cached ones included (as OpenAI counts them).
    pub prompt_tokens: u64,
    /// Output tokens.
    pub completion_tokens: u64,
    /// Their sum.
    pub total_tokens: u64,
    /// The part of the input read from a prompt cache.
    #[serde(default)]
    pub prompt_tokens_details: PromptTokensDetails,
}

/// `usage.prompt_tokens_details` of a chat completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PromptTokensDetails {
    /// Input tokens read from a prompt cache.
    pub cached_tokens: u64,
}

impl From<gatehouse_protocol::worker::TokenUsage> for ChatUsage {
    fn from(usage: gatehouse_protocol::worker::TokenUsage) -> Self {
        Self {
            prompt_tokens: usage.input_tokens.saturating_add(usage.cached_input_tokens),
            completion_tokens: usage.output_tokens,
            total_tokens: usage.total_tokens,
            prompt_tokens_details: PromptTokensDetails {
                cached_tokens: usage.cached_input_tokens,
            },
        }
    }
}

/// One `data:` event of a streamed chat completion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChatCompletionChunk {
    /// The turn's id, prefixed with `chatcmpl-`; the same in every chunk.
    pub id: String,
    /// Always `chat.completion.chunk`.
    pub object: String,
    /// When the turn was admitted, Unix seconds.
    pub created: i64,
    /// The agent.
    pub model: String,
    /// One choice; none in the usage chunk.
    pub choices: Vec<ChunkChoice>,
    /// The turn's tokens, in the usage chunk only (sent when the request's
    /// `stream_options.include_usage` is true and the model reported them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ChatUsage>,
}

/// The one choice of a [`ChatCompletionChunk`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChunkChoice {
    /// Always 0.
    pub index: u32,
    /// The next piece of the reply.
    pub delta: ChunkDelta,
    /// `null` until the last chunk, which says `stop`.
    pub finish_reason: Option<String>,
}

/// The piece of the reply a chunk carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChunkDelta {
    /// `assistant`, in the first chunk only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// Text: a piece of the reply, or a line of tool activity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// Every error of the OpenAI-compatible routes, in OpenAI's shape.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OpenAiErrorResponse {
    /// The error.
    pub error: OpenAiError,
}

/// The error of an [`OpenAiErrorResponse`]; in a stream it is the `data:` of the last event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OpenAiError {
    /// What happened and what to do.
    pub message: String,
    /// OpenAI's class of the error: `invalid_request_error`, `authentication_error`,
    /// `permission_error`, `not_found_error`, `rate_limit_error` or `server_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The Gateway's stable code (`SCOPE_DENIED`, `MODEL_UNAVAILABLE`, ...).
    pub code: String,
}

impl OpenAiError {
    /// Returns OpenAI's class of an error answered with `status`.
    pub fn kind_of_status(status: u16) -> &'static str {
        match status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            400..=499 => "invalid_request_error",
            _ => "server_error",
        }
    }
}
