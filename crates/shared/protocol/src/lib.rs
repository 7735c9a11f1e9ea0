//! Wire types of the Gateway↔Harness link.
//!
//! This crate holds data only: the JSON frames that travel over the link, the handshake messages,
//! the node-invoke envelope, the parameters and results of the workspace node commands, the
//! stable error codes, and the setup code that enrolls a node. It does no I/O (it only reads the
//! wall clock, in [`time`]) and has no business logic beyond one pure validator (of checkpoint
//! manifests, which both sides must judge identically); every other crate uses these types on the
//! wire and nothing else.
//!
//! The link is shaped after the OpenClaw gateway protocol: `req`/`res`/`event` frames, a
//! `connect.challenge` → `connect` → `hello-ok` handshake with an Ed25519 device signature, and
//! `node.invoke.*` messages for commands that the Gateway runs on the node.
//!
//! Conventions, applied everywhere:
//! - fields are camelCase on the wire;
//! - an absent optional field is omitted rather than sent as `null`, and `null` is read as absent;
//! - unknown fields are ignored when reading, so a newer peer can add fields;
//! - times on the link are Unix milliseconds, named `*_ms` or, where the OpenClaw protocol names
//!   them so, `ts` and `signedAt`.
//!
//! # Modules
//! - [`frame`]: the three frame kinds and the size limits.
//! - [`handshake`]: challenge, connect parameters, device signature payload and `hello-ok`.
//! - [`invoke`]: `node.invoke.request` / `result` / `progress` / `input` / `cancel`.
//! - [`checkpoint`]: the validation of checkpoint manifests, applied alike by both sides.
//! - [`codex`]: the `codex.appserver` relay command.
//! - [`command`]: the typed commands: one marker per command binding its name to its
//!   parameter and result types, and the functions both sides encode and decode with.
//! - [`commands`]: the workspace command names, parameters and results.
//! - [`memory`]: `workspace.memory`, the node's memory file service.
//! - [`report`]: `node.report`, the figures a node reports of itself.
//! - [`setup_code`]: the payload of a setup code, the node's one-time enrollment credential.
//! - [`skills`]: `workspace.skills`, the node's skills discovery.
//! - [`error`]: stable error codes and the wire error shape.
//! - [`runtime`]: the runtime kind a node hosts, `native` or `codex`.
//! - [`time`]: the current time in Unix milliseconds, the unit of the link's times.
//! - [`worker`]: the native runtime: `agent.turn`, and the worker pipe protocol.
//!
//! ```
//! use gatehouse_protocol::frame::Frame;
//! let frame: Frame = serde_json::from_str(r#"{"type":"req","id":"1","method":"connect"}"#).unwrap();
//! assert!(matches!(frame, Frame::Req(_)));
//! ```

#![deny(missing_docs)]

pub mod checkpoint;
pub mod codex;
pub mod command;
pub mod commands;
pub mod error;
pub mod frame;
pub mod handshake;
pub mod invoke;
pub mod memory;
pub mod report;
pub mod runtime;
pub mod setup_code;
pub mod skills;
pub mod time;
pub mod worker;
