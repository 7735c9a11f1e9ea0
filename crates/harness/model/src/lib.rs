//! Streaming model clients behind one provider-neutral interface: OpenAI Responses, OpenAI Chat
//! Completions, Anthropic Messages, and the in-process deterministic mock (with the `mock`
//! feature).
//!
//! An agent loop builds a [`ModelRequest`] (system prompt, conversation [`Message`]s, [`ToolSpec`]s)
//! and reads a stream of [`ModelEvent`]s: text deltas, whole tool calls, then one `Completed`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use futures_util::StreamExt;
//! use gatehouse_model::{Message, ModelConfig, ModelEvent, ModelRequest};
//!
//! let client = ModelConfig::parse("mock", "OPENAI_API_KEY")?.build()?;
//! let request = ModelRequest {
//!     messages: vec![Message::User { text: String::from("/say hello") }],
//!     ..ModelRequest::default()
//! };
//! let mut events = client.stream(&request).await?;
//! while let Some(event) = events.next().await {
//!     if let ModelEvent::Completed { text, .. } = event? {
//!         assert_eq!(text, "hello");
//!     }
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Configuration and credentials
//!
//! [`ModelConfig::parse`] reads the CLI spec `mock`, `openai-responses:URL:MODEL`,
//! `openai-chat:URL:MODEL` or `anthropic:URL:MODEL` (MODEL is what follows the last `:`; an
//! Anthropic URL includes the version path, `https://api.anthropic.com/v1`, and requests go to
//! `URL/messages`). The API key is read from the variable named by `key_env` when the client is
//! built ([`default_key_env`]: `ANTHROPIC_API_KEY` for `anthropic:`, `OPENAI_API_KEY` otherwise,
//! when none is configured), sent as `Authorization: Bearer` (OpenAI) or `x-api-key` with
//! `anthropic-version: 2023-06-01` (Anthropic), and never logged or shown in `Debug` output. `http://` and `https://` base URLs work (TLS is rustls with
//! the system's trust store); any other scheme is refused when the client is built
//! ([`ModelError::UnsupportedUrl`]).
//!
//! # Usage and output limits
//!
//! [`Usage`] counts uncached input (cache writes included), cached input (prompt-cache reads:
//! Responses' `input_tokens_details.cached_tokens` and Chat's `prompt_tokens_details.cached_tokens`,
//! taken out of the API's input count; Anthropic's `cache_read_input_tokens`, while its
//! `cache_creation_input_tokens` join the input) and output; the total is all three.
//! [`ModelRequest::max_output_tokens`] is sent as `max_output_tokens`, `max_completion_tokens` or
//! `max_tokens` (Anthropic requires it: [`ANTHROPIC_DEFAULT_MAX_TOKENS`] when unset, and at most
//! that).
//!
//! # Timeouts, retries and errors
//!
//! Connect 10 s, first event 60 s (headers included), idle between events 120 s; SSE comments
//! (keep-alives) do not count as events ([`Timeouts`]). Before the first event only, connect errors,
//! 429 and 5xx (Anthropic's 529 "overloaded" included) are retried at most twice (after 500 ms,
//! then 2 s, each lengthened by a random share of up to itself; [`RetryPolicy`]). A 429, 503 or
//! 529 answer's `Retry-After` replaces the pause, cut to [`RetryPolicy::max_retry_after`]
//! ([`DEFAULT_MAX_RETRY_AFTER`], 30 s, by default), so one call waits at most twice that before
//! it gives up. Each retry is reported, before the wait, to the observer given to
//! [`ModelClient::stream_observing`] as a [`RetryNotice`]. Nothing is retried once a stream was
//! accepted. Every [`ModelError`] has a stable [`ModelError::code`]:
//! `MODEL_UNAVAILABLE`, `MODEL_AUTH_FAILED`, `MODEL_RATE_LIMITED` or `MODEL_BAD_RESPONSE`. A
//! stream that ends without its end marker (`response.completed`, `data: [DONE]`,
//! `message_stop`) is `MODEL_BAD_RESPONSE`; `response.failed` and Anthropic's `error` event map
//! by their error code or type (`server_error`, `overloaded_error` → `MODEL_UNAVAILABLE`,
//! `rate_limit_exceeded`, `rate_limit_error` → `MODEL_RATE_LIMITED`, `authentication_error` →
//! `MODEL_AUTH_FAILED`, else `MODEL_BAD_RESPONSE`; see [`ModelError::code`]).
//! Only streamed answers are read: a server that ignores `stream: true` and sends one JSON body
//! gives `MODEL_BAD_RESPONSE`.
//!
//! # The inference broker
//!
//! [`broker`] holds the wire types a worker and its node host's broker exchange, and
//! [`broker::BrokeredClient`], the worker's client that asks the broker instead of a provider.
//!
//! Modules: `broker` (the inference broker's exchange), `types` (request and events), `config` (spec, timeouts, building), `error`, `sse` (SSE
//! events from a response body, over `sse-stream`), `http` (sending, observable retries,
//! timeouts), `responses`, `chat`, `anthropic`, `mock` (the `mock` feature: the in-process mock
//! model, which follows the script of `gatehouse-mockmodel`).

#![deny(missing_docs)]

mod anthropic;
pub mod broker;
mod chat;
mod config;
mod error;
mod http;
#[cfg(feature = "mock")]
mod mock;
mod responses;
pub mod sse;
mod types;

use std::pin::Pin;

use futures_util::Stream;

pub use crate::anthropic::ANTHROPIC_DEFAULT_MAX_TOKENS;
pub use crate::anthropic::ANTHROPIC_VERSION;
pub use crate::anthropic::AnthropicClient;
pub use crate::chat::ChatCompletionsClient;
pub use crate::config::ANTHROPIC_KEY_ENV;
pub use crate::config::ApiKey;
pub use crate::config::BACKOFF_FACTOR;
pub use crate::config::DEFAULT_KEY_ENV;
pub use crate::config::DEFAULT_MAX_RETRY_AFTER;
pub use crate::config::HttpClientConfig;
pub use crate::config::MAX_RETRIES;
pub use crate::config::ModelApi;
pub use crate::config::ModelConfig;
pub use crate::config::ModelSpecError;
pub use crate::config::RetryPolicy;
pub use crate::config::Timeouts;
pub use crate::config::default_key_env;
pub use crate::error::ModelError;
pub use crate::error::Result;
pub use crate::error::TimeoutPhase;
#[cfg(feature = "mock")]
pub use crate::mock::MockClient;
pub use crate::responses::ResponsesClient;
pub use crate::types::Message;
pub use crate::types::ModelEvent;
pub use crate::types::ModelRequest;
pub use crate::types::RetryNotice;
pub use crate::types::RetryObserver;
pub use crate::types::ToolCall;
pub use crate::types::ToolInput;
pub use crate::types::ToolKind;
pub use crate::types::ToolSpec;
pub use crate::types::Usage;
pub use gatehouse_protocol::error::ErrorCode;

/// The events of one model call (see [`ModelEvent`] for their order).
pub type ModelEventStream = Pin<Box<dyn Stream<Item = Result<ModelEvent>> + Send>>;

/// A model that can be asked for one streamed answer at a time.
///
/// Implementors must: send nothing before `stream` is called; return `Err` from `stream` for
/// failures before the answer started (after their own bounded retries); yield text deltas and
/// whole tool calls, then exactly one [`ModelEvent::Completed`], or end with one `Err`; and never
/// log or show the API key. Dropping the stream abandons the call.
#[async_trait::async_trait]
pub trait ModelClient: Send + Sync + std::fmt::Debug {
    /// Sends `request` and returns the answer as a stream of events.
    ///
    /// # Errors
    ///
    /// A [`ModelError`] when the call fails before the stream starts (connect error, HTTP error
    /// status, timeout waiting for the response).
    async fn stream(&self, request: &ModelRequest) -> Result<ModelEventStream>;

    /// Like [`ModelClient::stream`], and calls `on_retry` for each failed attempt the client
    /// retries, before it waits, so a caller can report the retry and count it.
    ///
    /// The default implementation makes no retries of its own and never calls `on_retry`; the
    /// HTTP clients override it.
    ///
    /// # Errors
    ///
    /// As [`ModelClient::stream`].
    async fn stream_observing(
        &self,
        request: &ModelRequest,
        on_retry: &RetryObserver<'_>,
    ) -> Result<ModelEventStream> {
        let _ = on_retry;
        self.stream(request).await
    }

    /// Returns the model name this client sends (`mock` for the mock), for spans and logs.
    fn model(&self) -> &str;
}
