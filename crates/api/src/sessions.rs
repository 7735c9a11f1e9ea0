//! Sessions and turns: `POST /v1/sessions/{key}/messages`, `GET /v1/turns/{turnId}`,
//! `GET /v1/sessions`, `GET /v1/sessions/{key}/transcript`, and the `abort`, `stop` and `move`
//! actions of a session.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

pub use gatehouse_store::model::Attachment;
pub use gatehouse_store::model::QueueMode;
pub use gatehouse_store::model::RepositorySpec;
pub use gatehouse_store::model::ResultState;
pub use gatehouse_store::model::SessionWorkspace;
pub use gatehouse_store::model::TurnError;
pub use gatehouse_store::model::TurnStatus;
pub use gatehouse_store::model::WorkspaceSource;

/// The body of `POST /v1/sessions/{key}/messages`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct MessageParams {
    /// The user's text: not blank, at most 256 KiB.
    pub text: String,
    /// Media to stage in the workspace before the turn runs, at most 16.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<Attachment>,
    /// 1 to 256 characters; repeating it returns the turn of the first message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idempotency_key: Option<String>,
    /// How the message is queued while a turn runs; `followup` when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_mode: Option<QueueMode>,
}

/// The `202` answer of `POST /v1/sessions/{key}/messages`, sent once the message is durable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MessageAccepted {
    /// The session.
    pub session_key: String,
    /// The turn that carries the message (an earlier one for a repeated idempotency key or a
    /// collected message).
    pub turn_id: String,
    /// The turn's status now.
    pub status: TurnStatus,
}

/// The query of `GET /v1/turns/{turnId}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct TurnQuery {
    /// Long poll: wait up to this many seconds (at most 60) for the turn to end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait: Option<u64>,
}

/// The answer of `GET /v1/turns/{turnId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    /// The turn.
    pub turn_id: String,
    /// Its session.
    pub session_key: String,
    /// Its status.
    pub status: TurnStatus,
    /// The final reply, once completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reply: Option<String>,
    /// Why it did not complete, once failed, interrupted or aborted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<TurnError>,
    /// The tokens the completed turn's model calls used, when the model reported them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<gatehouse_protocol::worker::TokenUsage>,
    /// A `worktree` session's turn: what became of its workspace result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<TurnWorkspace>,
}

/// What became of a `worktree` session turn's workspace result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnWorkspace {
    /// `staged` until it is merged into the worktree, then `applied`.
    pub state: ResultState,
    /// The name the worker's whole result is kept under (`refs/gatehouse/worker-results/…`;
    /// `gatehouse session export` writes it as a ref).
    pub staged_ref: String,
    /// The paths taken from the result (added, changed or deleted).
    pub applied: Vec<String>,
    /// The paths changed on both sides since the merge base, which kept the worktree's version.
    pub conflicts: Vec<String>,
}

/// The body of `PUT /v1/sessions/{key}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionParams {
    /// Where the session's execution workspace comes from.
    pub workspace: WorkspaceSource,
}

/// The answer of `PUT /v1/sessions/{key}` (`201` when it created the session).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionCreated {
    /// The session.
    pub session_key: String,
    /// Its workspace source.
    pub workspace: SessionWorkspace,
}

/// The answer of `GET /v1/sessions/{key}`: the session as `GET /v1/sessions` lists it, with
/// its workspace source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Session {
    /// The session.
    #[serde(flatten)]
    pub summary: SessionSummary,
    /// Its workspace source, with the pinned commit once the first turn resolved it.
    pub workspace: SessionWorkspace,
}

/// The answer of `PUT /v1/sessions/{key}/worktree/{path}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeWritten {
    /// The file written.
    pub path: String,
    /// The worktree version the edit made.
    pub version: i64,
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
    /// Its size in bytes.
    pub size: u64,
    /// Whether it is executable.
    pub executable: bool,
}

/// The query of `PUT /v1/sessions/{key}/worktree/{path}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorktreeWriteQuery {
    /// Make the file executable (`true`); a regular file when left out.
    #[serde(default)]
    pub executable: bool,
}

/// The answer of `GET /v1/sessions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionList {
    /// Every session.
    pub sessions: Vec<SessionSummary>,
}

/// One session as `GET /v1/sessions` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SessionSummary {
    /// The session key.
    pub session_key: String,
    /// The runtime it runs on: `native` or `codex`.
    pub runtime: String,
    /// When it was created, Unix milliseconds.
    pub created_at: i64,
    /// When it last changed, Unix milliseconds.
    pub updated_at: i64,
    /// The turn running now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_turn_id: Option<String>,
    /// The node the session is bound to, once a turn ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
}

/// The answer of `GET /v1/sessions/{key}/transcript`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Transcript {
    /// The committed messages, oldest first.
    pub messages: Vec<TranscriptMessage>,
}

/// One committed message of a transcript.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptMessage {
    /// Its position in the session's transcript.
    pub seq: i64,
    /// The turn it belongs to.
    pub turn_id: String,
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// The text (cut at 1 MiB, with a marker).
    pub content: String,
    /// When it was committed, Unix milliseconds.
    pub created_at: i64,
    /// The tool, for a `tool` message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
}

/// The answer of `POST /v1/sessions/{key}/abort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AbortResponse {
    /// Whether a running turn was aborted.
    pub aborted: bool,
}

/// The answer of `POST /v1/sessions/{key}/stop`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StopResponse {
    /// Whether the session's worker was running and was stopped.
    pub stopped: bool,
    /// Whether a running turn was aborted.
    pub aborted: bool,
}

/// The body of `POST /v1/sessions/{key}/move`; an empty body is the same as `{}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveParams {
    /// The enrolled node to bind the session to; left out, the session is unbound and its
    /// next turn binds it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// The answer of `POST /v1/sessions/{key}/move`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MoveResponse {
    /// Whether the binding changed.
    pub moved: bool,
}

/// The answer of `GET /v1/sessions/{key}/worktree.json`: every version of a worktree, oldest
/// first, which `gatehouse session export` turns into commits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeLog {
    /// The head version.
    pub head: i64,
    /// Every version, oldest first.
    pub versions: Vec<WorktreeVersionSummary>,
}

/// One version of a worktree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorktreeVersionSummary {
    /// From 1.
    pub version: i64,
    /// `start`, `edit` or `turn`.
    pub origin: String,
    /// Who made it: `gateway`, `operator` or `key:NAME`.
    pub actor: String,
    /// When it was made, Unix milliseconds.
    pub created_at: i64,
    /// For a `turn` version: the turn whose result it merged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// For a `turn` version: the name the worker's whole result is kept under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub staged_ref: Option<String>,
    /// For a `turn` version: the paths that kept the worktree's version.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
}

/// The query of `GET /v1/sessions/{key}/worktree.tar`: the head, one version, or one turn's
/// staged result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorktreeTarQuery {
    /// A version instead of the head.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<i64>,
    /// A turn: its staged result (the worker's whole tree) instead of a version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn: Option<String>,
}
