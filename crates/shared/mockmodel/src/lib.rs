//! A deterministic model for tests, demos and the no-credential default (DESIGN §10), in the
//! OpenAI (Responses, Chat Completions) and Anthropic (Messages) wire shapes.
//!
//! The mock reads the **last user message** of a request and answers by script:
//!
//! | line in the user message | first model call | after tool results come back |
//! |---|---|---|
//! | `/say TEXT` | replies `TEXT`, in at least two deltas | — |
//! | `/tool NAME {json}` (one or more lines) | calls each tool in order (`apply_patch` as a freeform custom tool call whose input is the `input` string of the JSON) | one line per result: `tool NAME -> RESULT` (result cut at 2,000 chars) |
//! | `/fail STATUS` | answers with that HTTP status and a JSON error body | — |
//! | `/hang` | starts the stream, then sends only keep-alive comments until the client goes away | — |
//! | `/slow MS TEXT` | streams `TEXT` word by word, `MS` milliseconds apart | — |
//! | `/flaky N STATUS TEXT` | the first N requests with this message (per server or client) get STATUS with `Retry-After: 0`, later ones reply `TEXT` | — |
//! | anything else | replies `echo: ` followed by the user text | — |
//!
//! [`plan`] holds the exact rules. The same logic is available two ways:
//!
//! - in process: build a [`ModelRequestView`] and call [`plan`], which returns a [`Plan`] (no
//!   HTTP; the model provider `mock` renders it as model events);
//! - over HTTP: [`router`] / [`serve`] answer
//!   - `POST /v1/responses`: with `"stream": true`, Server-Sent Events in the shapes Codex accepts
//!     (`response.created`, `response.output_item.added`, `response.output_text.delta`…,
//!     `response.output_item.done`, `response.completed` with usage; tool calls as
//!     `function_call` / `custom_tool_call` items). Without `stream`, one JSON response object.
//!   - `POST /v1/chat/completions`: with `"stream": true`, `data: {chunk}` lines ending with
//!     `data: [DONE]`, tool calls as `tool_calls` deltas whose arguments arrive in pieces, and a
//!     usage chunk when `stream_options.include_usage` is set. Without `stream`, one
//!     `chat.completion` object with `choices[0].message` (and `tool_calls`). Chat Completions has
//!     no freeform tools, so `apply_patch` is a function call with arguments `{"input": INPUT}`.
//!   - `POST /v1/messages`: Anthropic Messages. A request without `x-api-key` gets 401
//!     `authentication_error`, one without `anthropic-version` or `max_tokens` 400
//!     `invalid_request_error`. With `"stream": true`, SSE events `message_start` (usage),
//!     `content_block_start`/`_delta`/`_stop` (`text_delta`s, or a `tool_use` block whose input
//!     arrives as two `input_json_delta`s; `apply_patch` as `{"input": INPUT}`), `ping`,
//!     `message_delta` (stop reason `end_turn` or `tool_use`, output tokens) and `message_stop`;
//!     without, one message object. Errors have Anthropic's shape (`/fail 529` is
//!     `overloaded_error`). Prompt caching is simulated: when `system` or `tools` carry
//!     `cache_control`, their tokens are `cache_creation_input_tokens` the first time this server
//!     sees that prefix and `cache_read_input_tokens` after.
//!   - `GET /_mock/requests`: every request received (method, path, headers, JSON body), oldest
//!     first, as [`RecordedRequest`]s.
//!
//! `/fail` answers before any stream starts, with the status and
//! `{"error":{"message","type","param","code"}}`. A non-streaming `/hang` sends no answer at all
//! until shutdown.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
//! gatehouse_mockmodel::serve(listener, std::future::pending()).await
//! # }
//! ```
//!
//! Modules: `view` (request → [`ModelRequestView`]), `plan` (the script), `render` (wire
//! formats), `memory` ([`MockMemory`]: cache prefixes and `/flaky` counts), `server` (routes and
//! the [`Recorder`]).

#![deny(missing_docs)]

mod memory;
mod plan;
mod render;
mod server;
mod view;

pub use crate::memory::MockMemory;
pub use crate::plan::APPLY_PATCH;
pub use crate::plan::FailPlan;
pub use crate::plan::FlakyPlan;
pub use crate::plan::Plan;
pub use crate::plan::PlannedToolCall;
pub use crate::plan::PlannedToolInput;
pub use crate::plan::RESULT_CUT_CHARS;
pub use crate::plan::TextPlan;
pub use crate::plan::Usage;
pub use crate::plan::flaky;
pub use crate::plan::plan;
pub use crate::plan::usage;
pub use crate::server::KEEPALIVE_INTERVAL;
pub use crate::server::RecordedRequest;
pub use crate::server::Recorder;
pub use crate::server::router;
pub use crate::server::router_with_recorder;
pub use crate::server::serve;
pub use crate::server::serve_with_recorder;
pub use crate::view::ModelRequestView;
pub use crate::view::ViewItem;

/// The address `gatehouse mock-model` listens on by default.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7430";
