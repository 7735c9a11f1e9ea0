//! The Gateway's Codex runtime: a client of the Harness's `codex app-server`, reached through
//! the `codex.appserver` relay over the node link, and the turn driver that maps Codex threads,
//! turns, items and approvals onto Gateway sessions, turns, transcripts and policy.
//!
//! The Gateway never runs Codex and never holds the model credential: the app-server runs on the
//! Harness with the Harness's key, and this crate only speaks its JSON-RPC protocol.
//!
//! # Modules
//! - [`messages`]: the app-server messages the driver uses, as serde types.
//! - [`rpc`]: the JSON-RPC client over a line transport.
//! - [`relay`]: the transport over the node link.
//! - [`stdio`]: a transport to a local app-server child, for the benchmark's baseline.
//! - [`runtime`]: [`runtime::CodexRuntime`], the Gateway's `TurnRuntime` for Codex.

#![deny(missing_docs)]

pub mod messages;
pub mod relay;
pub mod rpc;
pub mod runtime;
pub mod stdio;
