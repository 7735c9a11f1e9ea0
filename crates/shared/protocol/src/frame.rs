//! The three frame kinds of the link and their size limits.
//!
//! Every WebSocket text message is exactly one [`Frame`]. Before the handshake completes a frame
//! may be at most [`MAX_PREAUTH_FRAME_BYTES`]; afterwards at most [`MAX_FRAME_BYTES`]. A larger
//! frame is a protocol error and closes the connection.

use serde::Deserialize;
use serde::Serialize;

use crate::error::WireError;

/// The largest frame accepted before the handshake completes: 64 KiB.
pub const MAX_PREAUTH_FRAME_BYTES: usize = 64 * 1024;

/// The largest frame accepted after the handshake: 25 MiB.
pub const MAX_FRAME_BYTES: usize = 25 * 1024 * 1024;

/// The WebSocket close code sent when a frame is over the limit (RFC 6455 "message too big").
pub const CLOSE_CODE_TOO_BIG: u16 = 1009;

/// The WebSocket close code sent when the peer broke the protocol (RFC 6455 "policy violation").
pub const CLOSE_CODE_POLICY: u16 = 1008;

/// One frame on the link.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum Frame {
    /// A request that expects exactly one `res` with the same `id`.
    Req(RequestFrame),
    /// The answer to a request.
    Res(ResponseFrame),
    /// A one-way event.
    Event(EventFrame),
}

/// A request frame: `{type:"req", id, method, params?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestFrame {
    /// Unique per connection and direction; echoed by the response.
    pub id: String,
    /// The method name, for example `connect` or `node.invoke.result`.
    pub method: String,
    /// The method's parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<serde_json::Value>,
}

/// A response frame: `{type:"res", id, ok, payload?, error?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ResponseFrame {
    /// The `id` of the request this answers.
    pub id: String,
    /// True when the request succeeded; then `payload` may be set and `error` is absent.
    pub ok: bool,
    /// The result on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    /// The error on failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireError>,
}

impl ResponseFrame {
    /// Returns a successful response to request `id`.
    pub fn success(id: impl Into<String>, payload: serde_json::Value) -> Self {
        Self {
            id: id.into(),
            ok: true,
            payload: Some(payload),
            error: None,
        }
    }

    /// Returns the plain acknowledgement of request `id` ([`Ack`]), the answer to a node's
    /// `node.invoke.result` and `node.invoke.progress`.
    pub fn ack(id: impl Into<String>) -> Self {
        Self::success(
            id,
            serde_json::to_value(Ack { ok: true }).unwrap_or_default(),
        )
    }

    /// Returns a failed response to request `id`.
    pub fn failure(id: impl Into<String>, error: WireError) -> Self {
        Self {
            id: id.into(),
            ok: false,
            payload: None,
            error: Some(error),
        }
    }
}

/// An event frame: `{type:"event", event, payload?, seq?}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EventFrame {
    /// The event name, for example `connect.challenge` or `node.invoke.request`.
    pub event: String,
    /// The event's data.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<serde_json::Value>,
    /// A per-connection counter that increases by one with every event the sender emits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
}

/// The payload of a plain acknowledgement: `{"ok": true}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ack {
    /// Always true: a refusal is a failed response instead.
    pub ok: bool,
}

/// The payload of the Gateway's keep-alive event [`names::TICK`]: `{"ts": MS}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick {
    /// The Gateway's clock, in milliseconds since the Unix epoch.
    pub ts: i64,
}

/// Names of the methods and events of the link.
pub mod names {
    /// Event: the Gateway's challenge, the first frame on every connection.
    pub const CONNECT_CHALLENGE: &str = "connect.challenge";
    /// Method: the node's handshake request.
    pub const CONNECT: &str = "connect";
    /// Event: the Gateway asks the node to run a command.
    pub const NODE_INVOKE_REQUEST: &str = "node.invoke.request";
    /// Method: the node's final answer to an invoke.
    pub const NODE_INVOKE_RESULT: &str = "node.invoke.result";
    /// Method: a streamed chunk of an invoke's output.
    pub const NODE_INVOKE_PROGRESS: &str = "node.invoke.progress";
    /// Event: input for a duplex command, from the Gateway.
    pub const NODE_INVOKE_INPUT: &str = "node.invoke.input";
    /// Event: the Gateway's caller gave up; the node stops the command.
    pub const NODE_INVOKE_CANCEL: &str = "node.invoke.cancel";
    /// Event: the Gateway's keep-alive.
    pub const TICK: &str = "tick";
    /// Event: the node's own figures ([`crate::report::NodeReport`]), sent by the node.
    pub const NODE_REPORT: &str = "node.report";
}
