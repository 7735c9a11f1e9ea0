//! The Gateway's side of the node link: the handshake, the per-connection session, and the
//! registry of connected nodes through which the Gateway invokes commands.
//!
//! The session runs over a pair of channels of text frames ([`session::Inbound`],
//! [`session::Outbound`]); the WebSocket endpoint `/node` is one adapter ([`ws`]), and embedded
//! mode uses the other, [`in_process::connect_in_process`], carrying the same frames.
//!
//! The link serves the invoke envelope itself and hands every other request of a node to the
//! [`session::NodeRequestHandler`] it is given, so it depends on no application service.

pub(crate) mod handshake;
pub(crate) mod in_process;
pub(crate) mod progress;
pub(crate) mod registry;
pub(crate) mod session;
pub(crate) mod ws;
