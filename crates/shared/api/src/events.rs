//! The events of `GET /v1/sessions/{key}/events` (`text/event-stream`).
//!
//! Each SSE event has the event's name as its `event:` field and a JSON object as its `data:`,
//! which always carries the event's `seq` ([`EventData`]); a durable event also has its seq as
//! its `id:`, and `after=` resumes after it. The payload types below are the objects of the
//! events the contract names; a newer Gateway may send other events, which
//! [`SessionEvent::parse`] returns as [`SessionEvent::Other`].

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

use gatehouse_protocol::error::ErrorCode;
use serde_json::Value;

use crate::sessions::QueueMode;
use crate::sessions::TurnError;
use crate::sessions::TurnStatus;

/// The event name of [`WorkspaceConflict`].
pub const WORKSPACE_CONFLICT: &str = WorkspaceConflict::KIND;
/// The event name of [`TurnQueued`].
pub const TURN_QUEUED: &str = TurnQueued::KIND;
/// The event name of [`TurnStarted`].
pub const TURN_STARTED: &str = TurnStarted::KIND;
/// The event name of [`MessageDelta`].
pub const MESSAGE_DELTA: &str = "message.delta";
/// The event name of [`MessageCompleted`].
pub const MESSAGE_COMPLETED: &str = "message.completed";
/// The event name of [`ToolStarted`].
pub const TOOL_STARTED: &str = "tool.started";
/// The event name of [`ToolCompleted`].
pub const TOOL_COMPLETED: &str = "tool.completed";
/// The event name of [`ArtifactStored`].
pub const ARTIFACT_STORED: &str = "artifact.stored";
/// The event name of [`ArtifactRefused`].
pub const ARTIFACT_REFUSED: &str = "artifact.refused";
/// The event name of [`TurnCompleted`].
pub const TURN_COMPLETED: &str = TurnCompleted::KIND;
/// The event name of [`TurnFailed`].
pub const TURN_FAILED: &str = TurnFailed::KIND;
/// The event name of [`ModelRetry`].
pub const MODEL_RETRY: &str = "model.retry";
/// The event name of [`StreamDropped`].
pub const STREAM_DROPPED: &str = "stream.dropped";

/// The query of `GET /v1/sessions/{key}/events`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EventsQuery {
    /// Replay the durable events after this seq first (0 when left out), then follow live.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
}

/// The `data:` of every event but `stream.dropped`: its payload's fields and the event's
/// `seq`.
///
/// A payload that is not a JSON object is sent as `{"value": payload, "seq"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct EventData {
    /// The seq of the event: its own for a durable event, the last durable one's for a live
    /// delta.
    pub seq: i64,
    /// The fields of the payload.
    #[serde(flatten)]
    pub payload: serde_json::Map<String, serde_json::Value>,
}

/// `message.delta`: a piece of the assistant's reply as it streams (live only, never stored).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageDelta {
    /// The turn.
    pub turn_id: String,
    /// The next piece of text.
    pub text: String,
}

/// `message.completed`: an `assistant` or `tool` message was committed to the transcript
/// (durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageCompleted {
    /// The turn.
    pub turn_id: String,
    /// `assistant` or `tool` (or `user` for a message steered into the running turn).
    pub role: String,
    /// The tool of a `tool` message; `null` otherwise.
    pub tool_name: Option<String>,
}

/// `tool.started`: the runtime started a tool call (durable).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolStarted {
    /// The turn.
    pub turn_id: String,
    /// The tool's name (cut to its bound).
    pub tool: String,
    /// The call's arguments as the model sent them, or `{"truncated":true,"bytes"}` past
    /// 64 KiB; opaque to the Gateway.
    pub arguments: serde_json::Value,
}

/// The `arguments` of a `tool.started` event whose arguments were over 64 KiB: only their
/// size is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TruncatedArguments {
    /// Always true.
    pub truncated: bool,
    /// The size of the arguments' JSON, in bytes.
    pub bytes: usize,
}

/// `tool.completed`: a tool call ended (durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCompleted {
    /// The turn.
    pub turn_id: String,
    /// The tool's name.
    pub tool: String,
    /// Whether it succeeded.
    pub ok: bool,
}

/// `artifact.stored`: a file the reply names was copied from the Harness into the media store
/// (durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactStored {
    /// The turn.
    pub turn_id: String,
    /// The workspace path the reply named.
    pub path: String,
    /// Its media id, for `GET /v1/media/{mediaId}`.
    pub media_id: String,
    /// Its size in bytes.
    pub size: u64,
}

/// `artifact.refused`: a file the reply names was refused or could not be fetched (durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ArtifactRefused {
    /// The turn.
    pub turn_id: String,
    /// The workspace path the reply named.
    pub path: String,
    /// Why, with a stable code.
    pub error: TurnError,
}

/// `model.retry`: a model call of the turn failed with something worth retrying (a `429`,
/// `5xx` or overloaded answer, a connect error) and is tried again after `delayMs` (durable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ModelRetry {
    /// The turn.
    pub turn_id: String,
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// The failure's stable code, for example `MODEL_RATE_LIMITED`.
    pub code: String,
    /// What happened (cut to its bound).
    pub message: String,
    /// The wait before the next attempt, in milliseconds.
    pub delay_ms: u64,
}

/// `stream.dropped`: the last event of a stream whose client fell too far behind
/// (`SLOW_CONSUMER`); reconnect with `after=resumeAfter`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StreamDropped {
    /// The stable code.
    pub code: String,
    /// What happened and what to do.
    pub message: String,
    /// The seq of the last durable event sent.
    pub resume_after: i64,
}

/// One event of the stream, decoded by its name.
#[derive(Debug, Clone, PartialEq)]
pub enum SessionEvent {
    /// `turn.queued`.
    TurnQueued(TurnQueued),
    /// `turn.started`.
    TurnStarted(TurnStarted),
    /// `message.delta`.
    MessageDelta(MessageDelta),
    /// `message.completed`.
    MessageCompleted(MessageCompleted),
    /// `tool.started`.
    ToolStarted(ToolStarted),
    /// `tool.completed`.
    ToolCompleted(ToolCompleted),
    /// `artifact.stored`.
    ArtifactStored(ArtifactStored),
    /// `artifact.refused`.
    ArtifactRefused(ArtifactRefused),
    /// `turn.completed`.
    TurnCompleted(TurnCompleted),
    /// `turn.failed`.
    TurnFailed(TurnFailed),
    /// `stream.dropped`.
    StreamDropped(StreamDropped),
    /// `model.retry`.
    ModelRetry(ModelRetry),
    /// `workspace.conflict`.
    WorkspaceConflict(WorkspaceConflict),
    /// An event this build does not know.
    Other {
        /// The event's name.
        name: String,
    },
}

impl SessionEvent {
    /// Decodes the `data:` of an event named `name` into its seq and its payload.
    ///
    /// # Errors
    /// A decoding error when `data` is not the JSON object of [`EventData`] or not the payload
    /// that `name` promises.
    pub fn parse(name: &str, data: &str) -> Result<(i64, SessionEvent), serde_json::Error> {
        let data: EventData = serde_json::from_str(data)?;
        let payload = serde_json::Value::Object(data.payload);
        let event = match name {
            TURN_QUEUED => SessionEvent::TurnQueued(serde_json::from_value(payload)?),
            TURN_STARTED => SessionEvent::TurnStarted(serde_json::from_value(payload)?),
            MESSAGE_DELTA => SessionEvent::MessageDelta(serde_json::from_value(payload)?),
            MESSAGE_COMPLETED => SessionEvent::MessageCompleted(serde_json::from_value(payload)?),
            TOOL_STARTED => SessionEvent::ToolStarted(serde_json::from_value(payload)?),
            TOOL_COMPLETED => SessionEvent::ToolCompleted(serde_json::from_value(payload)?),
            ARTIFACT_STORED => SessionEvent::ArtifactStored(serde_json::from_value(payload)?),
            ARTIFACT_REFUSED => SessionEvent::ArtifactRefused(serde_json::from_value(payload)?),
            TURN_COMPLETED => SessionEvent::TurnCompleted(serde_json::from_value(payload)?),
            TURN_FAILED => SessionEvent::TurnFailed(serde_json::from_value(payload)?),
            STREAM_DROPPED => SessionEvent::StreamDropped(serde_json::from_value(payload)?),
            MODEL_RETRY => SessionEvent::ModelRetry(serde_json::from_value(payload)?),
            WORKSPACE_CONFLICT => SessionEvent::WorkspaceConflict(serde_json::from_value(payload)?),
            other => SessionEvent::Other {
                name: other.to_owned(),
            },
        };
        Ok((data.seq, event))
    }

    /// Returns the turn the event belongs to; `None` for `stream.dropped` and unknown events.
    pub fn turn_id(&self) -> Option<&str> {
        match self {
            SessionEvent::TurnQueued(event) => Some(&event.turn_id),
            SessionEvent::TurnStarted(event) => Some(&event.turn_id),
            SessionEvent::MessageDelta(event) => Some(&event.turn_id),
            SessionEvent::MessageCompleted(event) => Some(&event.turn_id),
            SessionEvent::ToolStarted(event) => Some(&event.turn_id),
            SessionEvent::ToolCompleted(event) => Some(&event.turn_id),
            SessionEvent::ArtifactStored(event) => Some(&event.turn_id),
            SessionEvent::ArtifactRefused(event) => Some(&event.turn_id),
            SessionEvent::TurnCompleted(event) => Some(&event.turn_id),
            SessionEvent::TurnFailed(event) => Some(&event.turn_id),
            SessionEvent::ModelRetry(event) => Some(&event.turn_id),
            SessionEvent::WorkspaceConflict(event) => Some(&event.turn_id),
            SessionEvent::StreamDropped(_) | SessionEvent::Other { .. } => None,
        }
    }
}

/// The payload of a session event that a store backend writes itself, in the transaction that
/// changes the turn, with the event name it is stored and streamed under.
///
/// The payload is the event's `data:` in `GET /v1/sessions/{key}/events` (the Gateway adds the
/// `seq`), so these types are wire types and live here; the store crate uses them. A backend
/// stores [`EventPayload::to_payload_json`] under [`EventPayload::KIND`].
pub trait EventPayload: serde::Serialize {
    /// The event's name, the `kind` of its row.
    const KIND: &'static str;

    /// Returns the payload as the JSON object a backend stores as the event's `payload_json`.
    /// Its text (`to_string()`) has the keys sorted, as the payloads built by hand before these
    /// types existed had, so stored events keep their bytes.
    fn to_payload_json(&self) -> Value {
        // The payloads are strings, integers, enums and options of them: serializing them into
        // a `Value` cannot fail.
        serde_json::to_value(self).unwrap_or_default()
    }
}

/// `turn.queued`: a message was admitted as a new turn (durable).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct TurnQueued {
    /// The turn.
    pub turn_id: String,
    /// How it was queued.
    pub queue_mode: QueueMode,
}

impl EventPayload for TurnQueued {
    const KIND: &'static str = "turn.queued";
}

/// `turn.started`: the turn was dispatched to its runtime (durable).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct TurnStarted {
    /// The turn.
    pub turn_id: String,
}

impl EventPayload for TurnStarted {
    const KIND: &'static str = "turn.started";
}

/// `turn.completed`: the turn ended with a reply (durable).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct TurnCompleted {
    /// The turn.
    pub turn_id: String,
    /// `completed`.
    pub status: TurnStatus,
    /// The final reply.
    pub reply: Option<String>,
}

impl EventPayload for TurnCompleted {
    const KIND: &'static str = "turn.completed";
}

/// `turn.failed`: the turn ended without a reply: failed, interrupted or aborted (durable).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct TurnFailed {
    /// The turn.
    pub turn_id: String,
    /// `failed`, `interrupted` or `aborted`.
    pub status: TurnStatus,
    /// Why.
    pub error: TurnError,
}

impl EventPayload for TurnFailed {
    const KIND: &'static str = "turn.failed";
}

/// The error message of a turn the Gateway marks `interrupted` at start.
pub const INTERRUPTED_MESSAGE: &str = "the gateway stopped while this turn ran; it is not replayed";

impl TurnFailed {
    /// The event of a turn that was running when the Gateway stopped: status `interrupted`, code
    /// `INTERRUPTED` and [`INTERRUPTED_MESSAGE`].
    pub fn interrupted(turn_id: &str) -> Self {
        Self {
            turn_id: turn_id.to_owned(),
            status: TurnStatus::Interrupted,
            error: TurnError {
                code: Some(ErrorCode::Interrupted.as_str().to_owned()),
                message: Some(INTERRUPTED_MESSAGE.to_owned()),
            },
        }
    }
}

/// `workspace.conflict`: a turn's result changed paths the worktree had also changed since the
/// merge base; the worktree kept its versions of them (durable).
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct WorkspaceConflict {
    /// The turn whose result was applied.
    pub turn_id: String,
    /// The paths that kept the worktree's version, in order.
    pub conflicts: Vec<String>,
    /// The name the worker's whole result is kept under.
    pub staged_ref: String,
}

impl EventPayload for WorkspaceConflict {
    const KIND: &'static str = "workspace.conflict";
}
