//! A deterministic OpenAI-compatible model for tests, demos and the no-credential default
//! (DESIGN §10).
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
//! formats), `server` (routes and the [`Recorder`]).

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
