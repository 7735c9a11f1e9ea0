//! The Gateway's side of the node link: the handshake, the per-connection session, and the
//! registry of connected nodes through which the Gateway invokes commands.
//!
//! The session runs over a pair of channels of text frames ([`session::Inbound`],
//! [`session::Outbound`]); the WebSocket endpoint `/node` is one adapter ([`ws`]), and embedded
//! mode can use in-process channels carrying the same frames.

pub mod handshake;
pub mod progress;
pub mod registry;
pub mod session;
pub mod ws;
