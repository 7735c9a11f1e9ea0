//! The Codex relay: `codex.appserver`, a duplex node command that carries the JSON-RPC lines of
//! the node's `codex app-server` over the existing link.
//!
//! - The Gateway invokes it once per app-server connection and keeps the invoke open.
//! - Every `node.invoke.input` carries one JSON-RPC message (its `payloadJSON` is the message
//!   text, without a newline); the node writes it to the app-server's stdin as one line.
//! - Every line the app-server writes to stdout comes back, newline included, in the
//!   `node.invoke.progress` chunks of the invoke; a line may span several chunks.
//! - The invoke ends with an error when the app-server exits (`UNAVAILABLE`); cancelling it ends
//!   the app-server connection, and the node starts a fresh app-server for the next invoke.

use serde::Deserialize;
use serde::Serialize;

/// `codex.appserver`: the duplex relay to the node's `codex app-server`.
pub const CODEX_APPSERVER: &str = "codex.appserver";

/// Parameters of `codex.appserver`. There are none today; unknown fields are ignored.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodexAttachParams {}

/// What the node reports about its app-server when a relay ends without an error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CodexRelayEnd {
    /// Why the relay ended.
    #[serde(default)]
    pub reason: String,
}
