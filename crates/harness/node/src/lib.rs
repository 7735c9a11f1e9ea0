//! The Harness node host: enrollment, the outbound link to the Gateway, and the workspace
//! service.
//!
//! A node host listens on nothing. It dials out to the Gateway over one WebSocket, proves its
//! identity with an Ed25519 device key (`connect.challenge` → `connect` → `hello-ok`), and then
//! serves the workspace commands the Gateway invokes (`node.invoke.request` →
//! `node.invoke.result`). Every file command is checked against the node's own path policy and
//! runs on a no-follow [`gatehouse_fsops::Root`].
//!
//! The session logic runs over a [`link::Link`], a duplex of text frames; the WebSocket is one
//! adapter, and embedded mode opens links over in-process channels ([`link::ChannelConnector`])
//! instead.
//!
//! ```no_run
//! use gatehouse_harness::CancellationToken;
//! use gatehouse_harness::host::{NodeHostConfig, Runtime, run_node_host};
//!
//! # async fn example() -> Result<(), gatehouse_harness::NodeHostError> {
//! let config = NodeHostConfig {
//!     root: "/srv/harness".into(),
//!     gateway_urls: vec!["ws://gateway:7420/node".into()],
//!     setup_code_file: Some("/run/secrets/setup-code".into()),
//!     runtime: Runtime::Native,
//!     display_name: None,
//!     home: None,
//! };
//! run_node_host(config, CancellationToken::new()).await
//! # }
//! ```
//!
//! # Node root layout
//! - `node/` (0700): `identity.json` and, after enrollment, `device-token.json` (both 0600).
//! - `workspace/`: the Agent workspace, the only tree file commands touch.
//! - `node/status.json` (0600): the status `gatehouse node health` reads; see [`status`].
//! - `sessions/<id>/workspace`: the execution workspace of each session hosted by workers.
//! - `sources/<id>` (`sources/` 0700): the bare repository each session's `agent.session.source`
//!   fetches into, outside every session workspace.
//! - `tmp/` (0700).
//!
//! # Modules
//! - [`host`]: [`host::NodeHostConfig`], [`host::NodeHost`] and the reconnect loop.
//! - [`link`]: the frame duplex and the WebSocket adapter.
//! - [`identity`]: the device key pair.
//! - [`setup_code`]: parsing enrollment codes.
//! - [`gateway_url`]: the accepted Gateway URL forms.
//! - [`status`]: the status file and the health probes that read it.
//! - [`model_spec`]: the `--model` spec, recorded for the runtime.
//! - [`codex_supervisor`]: the supervised `codex app-server` and its relay (runtime `codex`).
//! - [`worker`]: the supervisor of the native runtime's `gatehouse worker` children.
//! - `broker`: the inference broker, which calls the model for the workers with the key only
//!   the node host holds, counts each call's usage and enforces the turn's token ceiling.
//! - [`worker_child`]: the loop of one such child; its [`worker_child::WorkerChildError`] ends the
//!   child process and never crosses the link.
//! - `source`: `agent.session.source`, a repository commit fetched into a missing session
//!   workspace with the node host's own `git`.
//! - `report`: the `node.report` the node sends the Gateway, since it listens on no port.
//! - [`error`]: the node host's error type, [`NodeHostError`].

#![deny(missing_docs)]

mod bounded_lines;
mod broker;
pub mod codex_supervisor;
pub mod error;
mod file_commands;
pub mod gateway_url;
pub mod host;
pub mod identity;
mod invoke;
pub mod link;
mod memory_commands;
pub mod model_spec;
mod node_state;
mod report;
mod session;
pub mod setup_code;
mod skill_copies;
mod skills_commands;
mod source;
pub mod status;
pub mod worker;
pub mod worker_child;

pub use crate::error::NodeHostError;
pub use crate::error::Result;
/// The shutdown signal of [`host::run_node_host`], re-exported so that callers need not depend on
/// `tokio-util` themselves.
pub use tokio_util::sync::CancellationToken;
