//! Sessions and turns: `POST /v1/sessions/{key}/messages`, `GET /v1/turns/{turnId}`,
//! `GET /v1/sessions`, `GET /v1/sessions/{key}/transcript`, and the `abort`, `stop` and `move`
//! actions of a session.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

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
    /// The channel its messages come from, for a channel's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
    /// The raw platform id of the peer of a channel's direct session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer: Option<String>,
    /// The raw platform id of the room of a channel's group session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    /// What its turns used, as `GET /v1/usage?groupBy=session` sums it.
    #[serde(default)]
    pub usage: crate::usage::UsageTotals,
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

/// The status of a turn.
// It is also the `status` of a turn as the HTTP API shows it and as the turn events carry it, so
// it is serialized as the wire writes it (`"queued"`, ...); the doc line above is its description
// in the API's JSON Schema.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum TurnStatus {
    /// Admitted, waiting for its session or for a global slot.
    Queued,
    /// Dispatched to the runtime.
    Running,
    /// Finished with a reply.
    Completed,
    /// Finished with an error.
    Failed,
    /// Was running when the Gateway stopped; never replayed.
    Interrupted,
    /// Stopped by an abort.
    Aborted,
}

impl TurnStatus {
    /// Returns the status as stored and shown in the API.
    pub fn as_str(self) -> &'static str {
        match self {
            TurnStatus::Queued => "queued",
            TurnStatus::Running => "running",
            TurnStatus::Completed => "completed",
            TurnStatus::Failed => "failed",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::Aborted => "aborted",
        }
    }

    /// Parses a stored status.
    pub fn parse(text: &str) -> Option<TurnStatus> {
        [
            TurnStatus::Queued,
            TurnStatus::Running,
            TurnStatus::Completed,
            TurnStatus::Failed,
            TurnStatus::Interrupted,
            TurnStatus::Aborted,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }

    /// Returns true once the turn can no longer change.
    pub fn is_terminal(self) -> bool {
        match self {
            TurnStatus::Queued | TurnStatus::Running => false,
            TurnStatus::Completed
            | TurnStatus::Failed
            | TurnStatus::Interrupted
            | TurnStatus::Aborted => true,
        }
    }
}

/// How a message that arrives while a turn of its session runs is queued.
// It is also the `queueMode` of `POST /v1/sessions/{key}/messages` and of a `turn.queued` event,
// so it is serialized as the wire writes it (`"followup"`, ...); the doc line above is its
// description in the API's JSON Schema.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum QueueMode {
    /// A new turn, run after the ones before it.
    Followup,
    /// Delivered to the running turn when the runtime supports it, else a follow-up.
    Steer,
    /// Merged into the next queued turn of the session.
    Collect,
    /// Aborts the running turn, then runs as a new turn.
    Interrupt,
}

impl QueueMode {
    /// Returns the mode as stored and accepted by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            QueueMode::Followup => "followup",
            QueueMode::Collect => "collect",
            QueueMode::Steer => "steer",
            QueueMode::Interrupt => "interrupt",
        }
    }

    /// Parses a mode.
    pub fn parse(text: &str) -> Option<QueueMode> {
        [
            QueueMode::Followup,
            QueueMode::Collect,
            QueueMode::Steer,
            QueueMode::Interrupt,
        ]
        .into_iter()
        .find(|mode| mode.as_str() == text)
    }
}

/// One attachment of a message: a media id returned by `POST /v1/media` and whether the turn
/// may run without it. It is the item of `attachments` in `POST /v1/sessions/{key}/messages`
/// (where `required` may be left out and means true), the item of a turn's stored attachments
/// (`[{"mediaId","required"}]`), and what the Gateway stages before the turn runs.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Attachment {
    /// The media id returned by `POST /v1/media`.
    pub media_id: String,
    /// Whether the turn must not run without this attachment (default true; `null` is the
    /// default too).
    #[serde(
        default = "required_by_default",
        deserialize_with = "required_or_default"
    )]
    pub required: bool,
}

/// The default of [`Attachment::required`]: an attachment is required unless said otherwise.
fn required_by_default() -> bool {
    true
}

/// Reads [`Attachment::required`], where an explicit `null` means the default, as the API has
/// always accepted it.
fn required_or_default<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<bool, D::Error> {
    let required: Option<bool> = serde::Deserialize::deserialize(deserializer)?;
    Ok(required.unwrap_or_else(required_by_default))
}

/// Why a turn did not complete: a stable code and its message (`null` when the runtime gave
/// none). Also the `error` of the `turn.failed` and `artifact.refused` events.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct TurnError {
    /// The stable code (`null` only in a `turn.failed` event of a turn ended without one).
    pub code: Option<String>,
    /// What happened, for a person.
    pub message: Option<String>,
}

/// Where a session's execution workspace comes from, as `PUT /v1/sessions/{key}` sets it and
/// `GET /v1/sessions/{key}` shows it. A session nobody set a source for is `empty`.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(tag = "source", rename_all = "camelCase", deny_unknown_fields)]
pub enum WorkspaceSource {
    /// An empty workspace; the Gateway keeps checkpoints of it.
    Empty,
    /// A repository commit, fetched by the Harness; checkpoints accumulate on top of it.
    Repository {
        /// A `file://`, `https://` or `ssh://` URL, without credentials.
        url: String,
        /// The branch, tag or commit; the repository's `HEAD` when left out.
        #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
        reference: Option<String>,
    },
    /// A worktree the Gateway keeps, which every turn's result is merged into.
    Worktree {
        /// The repository the worktree starts from; empty when left out.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<RepositorySpec>,
    },
}

impl WorkspaceSource {
    /// The repository the source fetches from, if any.
    #[must_use]
    pub fn repository(&self) -> Option<RepositorySpec> {
        match self {
            Self::Empty | Self::Worktree { from: None } => None,
            Self::Repository { url, reference } => Some(RepositorySpec {
                url: url.clone(),
                reference: reference.clone(),
            }),
            Self::Worktree { from: Some(from) } => Some(from.clone()),
        }
    }

    /// Whether the Gateway keeps a worktree for the session.
    #[must_use]
    pub fn is_worktree(&self) -> bool {
        matches!(self, Self::Worktree { .. })
    }
}

/// A repository and the ref to start from.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(deny_unknown_fields)]
pub struct RepositorySpec {
    /// A `file://`, `https://` or `ssh://` URL, without credentials.
    pub url: String,
    /// The branch, tag or commit; the repository's `HEAD` when left out.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
}

/// A session's workspace source and the commit it was pinned to.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct SessionWorkspace {
    /// The source.
    #[serde(flatten)]
    pub source: WorkspaceSource,
    /// The commit the repository's ref resolved to at the first dispatch (40 hex digits).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
}

/// Whether a staged worktree result was applied.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ResultState {
    /// Stored, not yet merged into the worktree.
    Staged,
    /// Merged into the worktree.
    Applied,
}
