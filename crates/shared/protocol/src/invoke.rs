//! The node-invoke envelope: how the Gateway runs a command on a node.
//!
//! - The Gateway sends the event `node.invoke.request` ([`InvokeRequest`]).
//! - A streaming command sends any number of `node.invoke.progress` requests
//!   ([`InvokeProgress`]) before its result.
//! - A duplex command also receives `node.invoke.input` events ([`InvokeInput`]).
//! - The node always ends with exactly one `node.invoke.result` request ([`InvokeResult`]).
//! - The Gateway sends `node.invoke.cancel` ([`InvokeCancel`]) when its caller gives up; the node
//!   stops the command and still sends a result, which the Gateway may ignore.

use serde::Deserialize;
use serde::Serialize;

use crate::error::WireError;

/// The largest `chunk` of one progress message, in bytes of UTF-8.
pub const MAX_PROGRESS_CHUNK_BYTES: usize = 16 * 1024;

/// The longest line a streaming command may send through progress chunks (one worker event or
/// one app-server message), newline excluded: room for a checkpoint of
/// [`crate::worker::MAX_CHECKPOINT_BYTES`] in base64 with its manifest. A longer line fails the
/// invoke with `PROGRESS_LINE_TOO_LONG`.
pub const MAX_PROGRESS_LINE_BYTES: usize = 24 * 1024 * 1024;

/// Payload of the `node.invoke.request` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvokeRequest {
    /// The invoke id, unique per Gateway.
    pub id: String,
    /// The node that should run the command.
    pub node_id: String,
    /// The command name, for example `file.fetch`.
    pub command: String,
    /// The command's parameters as a JSON text.
    #[serde(
        default,
        rename = "paramsJSON",
        skip_serializing_if = "Option::is_none"
    )]
    pub params_json: Option<String>,
    /// How long the Gateway waits for the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The W3C `traceparent` of the Gateway's invoke span, so the node's work joins the
    /// Gateway's trace. Absent when the Gateway exports no traces; a node that does not know
    /// the field ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// Parameters of the `node.invoke.result` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvokeResult {
    /// The invoke id this result ends.
    pub id: String,
    /// The node that ran the command.
    pub node_id: String,
    /// True on success; then `payload` (or `payloadJSON`) holds the result.
    pub ok: bool,
    /// The command's result as JSON. Senders in this build use it; it is parsed once, unlike
    /// `payloadJSON`, whose text is escaped and parsed twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    /// The command's result as a JSON text, as older OpenClaw nodes send it.
    #[serde(
        default,
        rename = "payloadJSON",
        skip_serializing_if = "Option::is_none"
    )]
    pub payload_json: Option<String>,
    /// The command's error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireError>,
}

/// Parameters of the `node.invoke.progress` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvokeProgress {
    /// The invoke id.
    pub invoke_id: String,
    /// The node that runs the command.
    pub node_id: String,
    /// Increases by one with every chunk of this invoke, from 0.
    pub seq: u64,
    /// At most [`MAX_PROGRESS_CHUNK_BYTES`] of UTF-8 output.
    pub chunk: String,
}

/// Payload of the `node.invoke.input` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvokeInput {
    /// The invoke id.
    pub id: String,
    /// The node that runs the command.
    pub node_id: String,
    /// Increases by one with every input of this invoke, from 0.
    pub seq: u64,
    /// The input as a JSON text.
    #[serde(rename = "payloadJSON")]
    pub payload_json: String,
}

/// Payload of the `node.invoke.cancel` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InvokeCancel {
    /// The invoke id.
    pub id: String,
    /// The node that runs the command.
    pub node_id: String,
}
