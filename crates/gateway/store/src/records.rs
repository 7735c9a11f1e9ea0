//! Records the store reads and writes. Times are Unix milliseconds.
//!
//! The records that are also part of the HTTP API (a turn's status and queue mode, attachments,
//! scopes, workspace sources, the turn events a backend writes) are defined, with their
//! serialization, by the API crate; they are re-exported here under the names the backends use.

use gatehouse_protocol::worker::TokenUsage;
use serde_json::Value;

pub use crate::manifest::Blob;
pub use crate::manifest::CheckpointManifest;
pub use crate::manifest::StoredEntry;
pub use crate::manifest::StoredManifest;
pub(crate) use crate::manifest::manifest_json;
pub(crate) use crate::manifest::parse_manifest;
pub use gatehouse_api::events::EventPayload;
pub use gatehouse_api::events::INTERRUPTED_MESSAGE;
pub use gatehouse_api::events::TurnCompleted;
pub use gatehouse_api::events::TurnFailed;
pub use gatehouse_api::events::TurnQueued;
pub use gatehouse_api::events::TurnStarted;
pub use gatehouse_api::events::WorkspaceConflict;
pub use gatehouse_api::keys::Scope;
pub use gatehouse_api::sessions::Attachment;
pub use gatehouse_api::sessions::QueueMode;
pub use gatehouse_api::sessions::RepositorySpec;
pub use gatehouse_api::sessions::ResultState;
pub use gatehouse_api::sessions::SessionWorkspace;
pub use gatehouse_api::sessions::TurnError;
pub use gatehouse_api::sessions::TurnStatus;
pub use gatehouse_api::sessions::WorkspaceSource;

/// A setup code to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSetupCode {
    /// Lowercase hex SHA-256 of the bootstrap token.
    pub token_sha256: String,
    /// When it was issued.
    pub created_at_ms: i64,
    /// When it stops being accepted.
    pub expires_at_ms: i64,
}

/// A node enrolling with a setup code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Enrollment {
    /// Hash of the bootstrap token presented.
    pub token_sha256: String,
    /// The time of the attempt.
    pub now_ms: i64,
    /// The node to record when the code is good. An existing node with the same id is replaced
    /// (re-enrollment issues a new device token).
    pub node: NodeRecord,
}

/// The outcome of [`crate::Store::enroll_node`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnrollOutcome {
    /// The code was good and is now used; the node is recorded.
    Enrolled,
    /// No code has this token.
    UnknownCode,
    /// The code expired before this attempt.
    ExpiredCode,
    /// The code was already used.
    UsedCode,
}

/// An enrolled node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    /// Lowercase hex SHA-256 of the node's public key.
    pub device_id: String,
    /// The raw Ed25519 public key, base64url.
    pub public_key: String,
    /// The name the node gave.
    pub display_name: String,
    /// `native` or `codex`.
    pub runtime: String,
    /// The commands the node declared when it last connected.
    pub commands: Vec<String>,
    /// The absolute path of the node's Agent workspace, as it declared.
    pub workspace_root: Option<String>,
    /// Lowercase hex SHA-256 of the issued device token.
    pub device_token_sha256: String,
    /// When the node enrolled.
    pub enrolled_at_ms: i64,
    /// When the node last connected.
    pub last_seen_at_ms: i64,
}

/// What a connecting node declared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSeen {
    /// The node.
    pub device_id: String,
    /// The name it gave.
    pub display_name: String,
    /// Its runtime.
    pub runtime: String,
    /// Its commands.
    pub commands: Vec<String>,
    /// Its workspace root.
    pub workspace_root: Option<String>,
    /// The time.
    pub at_ms: i64,
}

/// An audit event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewAuditEvent {
    /// When it happened.
    pub at_ms: i64,
    /// Who did it: `operator`, `node:<id>`, `gateway`.
    pub actor: String,
    /// What was attempted, for example `node.connect`.
    pub action: String,
    /// `allowed`, `denied`, `succeeded` or `failed`.
    pub outcome: String,
    /// The stable code of a denial or failure.
    pub reason_code: Option<String>,
    /// Context; never content or secrets.
    pub details: Value,
}

/// A stored audit event.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEvent {
    /// Its position in the trail, increasing.
    pub seq: i64,
    /// When it happened.
    pub at_ms: i64,
    /// Who did it.
    pub actor: String,
    /// What was attempted.
    pub action: String,
    /// How it ended.
    pub outcome: String,
    /// The stable code of a denial or failure.
    pub reason_code: Option<String>,
    /// Context.
    pub details: Value,
}

/// A message to admit.
#[derive(Debug, Clone, PartialEq)]
pub struct NewUserMessage {
    /// The session; created when new.
    pub session_key: String,
    /// The runtime a new session records.
    pub runtime: String,
    /// A fresh turn id, used when a new turn is created.
    pub turn_id: String,
    /// The user's text.
    pub text: String,
    /// The attachments, in request order.
    pub attachments: Vec<Attachment>,
    /// The caller's idempotency key.
    pub idempotency_key: Option<String>,
    /// How it is queued ([`QueueMode::Collect`] joins a queued turn; the others create one).
    pub queue_mode: QueueMode,
    /// The channel message it is, if it came from a channel: admitted at most once per
    /// channel and message id, and the turn's reply goes back to it.
    pub origin: Option<ChannelOrigin>,
    /// The name of the API key that sent it (`None` for the operator token and channels): a
    /// new turn is counted against that key's usage and budget.
    pub api_key: Option<String>,
    /// The time.
    pub now_ms: i64,
}

/// Counts the Gateway exports in `/metrics`, read in one go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StoreFigures {
    /// Turns admitted and not yet claimed (status `queued`).
    pub n_queued_turns: u64,
    /// The total size of the blobs listed as checkpoint contents.
    pub checkpoint_bytes: u64,
}

/// The outcome of admitting a message.
#[derive(Debug, Clone, PartialEq)]
pub struct Admitted {
    /// The turn the message belongs to.
    pub turn: TurnRecord,
    /// False when an earlier message with the same idempotency key was found: nothing new was
    /// stored.
    pub created: bool,
}

/// A stored turn.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnRecord {
    /// The turn id.
    pub turn_id: String,
    /// The session.
    pub session_key: String,
    /// Its position among the session's turns, from 1.
    pub turn_no: i64,
    /// Its status.
    pub status: TurnStatus,
    /// The mode it was admitted with.
    pub queue_mode: QueueMode,
    /// Its attachments, in request order.
    pub attachments: Vec<Attachment>,
    /// The final reply, when completed.
    pub reply: Option<String>,
    /// The stable error code, when failed, interrupted or aborted.
    pub error_code: Option<String>,
    /// The error message.
    pub error_message: Option<String>,
    /// When it was admitted.
    pub created_at_ms: i64,
    /// When it started running.
    pub started_at_ms: Option<i64>,
    /// When it ended.
    pub ended_at_ms: Option<i64>,
    /// The tokens its model calls used, as they reported them (also for a turn that then
    /// failed).
    pub usage: Option<TokenUsage>,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnEnd {
    /// The terminal status.
    pub status: TurnStatus,
    /// The reply, when completed.
    pub reply: Option<String>,
    /// The error code otherwise.
    pub error_code: Option<String>,
    /// The error message otherwise.
    pub error_message: Option<String>,
    /// The tokens the turn used, when reported at its end; ignored when its calls were already
    /// counted one by one ([`crate::Store::add_turn_usage`]).
    pub usage: Option<TokenUsage>,
    /// The time.
    pub now_ms: i64,
}

/// A stored session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    /// The key.
    pub session_key: String,
    /// Its runtime.
    pub runtime: String,
    /// The running turn, if any.
    pub active_turn_id: Option<String>,
    /// The node the session is bound to, once its first turn was dispatched.
    pub node_id: Option<String>,
    /// When it was created.
    pub created_at_ms: i64,
    /// When it last changed.
    pub updated_at_ms: i64,
    /// The channel its messages come from, for a channel's session.
    pub channel: Option<String>,
    /// The platform id of the peer of a channel's direct session.
    pub peer: Option<String>,
    /// The platform id of the room of a channel's group session.
    pub room: Option<String>,
}

/// A committed transcript message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRecord {
    /// Its position in the session's transcript, from 1.
    pub seq: i64,
    /// The turn it belongs to.
    pub turn_id: String,
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// The complete content.
    pub content: String,
    /// The tool, for tool messages.
    pub tool_name: Option<String>,
    /// When it was committed.
    pub created_at_ms: i64,
}

/// A message a runtime commits for a running turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTurnMessage {
    /// The turn; the commit is refused unless it is still running.
    pub turn_id: String,
    /// `assistant` or `tool`.
    pub role: String,
    /// The complete content.
    pub content: String,
    /// The tool, for tool messages.
    pub tool_name: Option<String>,
    /// The time.
    pub now_ms: i64,
}

/// A durable session event.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord {
    /// Its position in the session's event log, from 1.
    pub seq: i64,
    /// The event name, for example `turn.completed`.
    pub kind: String,
    /// Its data.
    pub payload: Value,
    /// When it happened.
    pub created_at_ms: i64,
}

/// The outcome of [`crate::Store::move_session_node`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionMove {
    /// The binding changed; `from` is the node it was bound to before (if any).
    Moved {
        /// The earlier binding.
        from: Option<String>,
    },
    /// The session was already bound as asked; nothing changed.
    Unchanged,
    /// A turn of the session is running, so nothing changed.
    Busy {
        /// The running turn.
        turn_id: String,
    },
    /// No such session.
    NotFound,
}

/// A media blob stored for a checkpoint: a candidate of garbage collection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointBlob {
    /// The media id (validated by the media store, not here).
    pub media_id: String,
    /// The blob's size in bytes.
    pub size_bytes: u64,
}

/// The usage columns of a turn, as [`usage_columns`] writes them and [`usage_from_columns`]
/// reads them: the counts in [`USAGE_COUNT_COLUMNS`]' order, then the model name.
pub(crate) struct UsageColumns {
    /// `input_tokens`, `cached_input_tokens`, `output_tokens`, `total_tokens`, `model_calls`,
    /// `retries` (counts past `i64::MAX` are stored as `i64::MAX`).
    pub(crate) counts: [Option<i64>; 6],
    /// `model`.
    pub(crate) model: Option<String>,
}

/// The count columns of a turn's usage, in [`UsageColumns::counts`]' order.
pub(crate) const USAGE_COUNT_COLUMNS: [&str; 6] = [
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "total_tokens",
    "model_calls",
    "retries",
];

/// Returns the columns of `usage` (all NULL for none).
pub(crate) fn usage_columns(usage: Option<&TokenUsage>) -> UsageColumns {
    let column = |count: u64| Some(i64::try_from(count).unwrap_or(i64::MAX));
    match usage {
        Some(usage) => UsageColumns {
            counts: [
                column(usage.input_tokens),
                column(usage.cached_input_tokens),
                column(usage.output_tokens),
                column(usage.total_tokens),
                column(usage.model_calls),
                column(usage.retries),
            ],
            model: usage.model.clone(),
        },
        None => UsageColumns {
            counts: [None; 6],
            model: None,
        },
    }
}

/// The usage stored in `columns`: none unless input, output and total are set (the counts added
/// later read as zero when NULL, for turns stored before they existed).
///
/// # Errors
/// [`StoreError::Corrupt`] for a negative count.
pub(crate) fn usage_from_columns(
    columns: UsageColumns,
) -> Result<Option<TokenUsage>, crate::StoreError> {
    let count = |value: Option<i64>| {
        u64::try_from(value.unwrap_or(0)).map_err(|_| crate::StoreError::Corrupt {
            what: "token usage",
        })
    };
    let [input, cached, output, total, calls, retries] = columns.counts;
    if input.is_none() || output.is_none() || total.is_none() {
        return Ok(None);
    }
    Ok(Some(TokenUsage {
        input_tokens: count(input)?,
        cached_input_tokens: count(cached)?,
        output_tokens: count(output)?,
        total_tokens: count(total)?,
        model_calls: count(calls)?,
        retries: count(retries)?,
        model: columns.model,
    }))
}

/// Whose tokens [`crate::Store::tokens_used`] sums.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageScope<'a> {
    /// The turns an API key (by name) sent.
    ApiKey(&'a str),
    /// The turns of a session.
    Session(&'a str),
}

/// How [`crate::Store::usage`] groups turns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageGrouping {
    /// By session key.
    Session,
    /// By the name of the API key that sent the turn (none for the operator token and
    /// channels).
    ApiKey,
    /// By UTC day of admission.
    Day,
}

/// What [`crate::Store::usage`] sums: turns admitted in `[from_ms, to_ms)`, of one session
/// when `session_key` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageQuery {
    /// Only this session's turns, if set.
    pub session_key: Option<String>,
    /// The grouping.
    pub group_by: UsageGrouping,
    /// The earliest admission time counted (Unix ms), if any.
    pub from_ms: Option<i64>,
    /// The admission time from which turns are no longer counted, if any.
    pub to_ms: Option<i64>,
}

/// The group of a [`UsageRow`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum UsageGroup {
    /// A session key, or an API key's name.
    Name(String),
    /// Turns no API key sent (grouping by key).
    NoKey,
    /// A UTC day, as days since 1970-01-01.
    Day(i64),
}

/// The sums of one group's turns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageRow {
    /// The group.
    pub group: UsageGroup,
    /// Its turns (every status).
    pub turns: u64,
    /// Their model calls.
    pub model_calls: u64,
    /// Their uncached input tokens.
    pub input_tokens: u64,
    /// Their cached input tokens.
    pub cached_input_tokens: u64,
    /// Their output tokens.
    pub output_tokens: u64,
    /// Their tokens in all.
    pub total_tokens: u64,
}

/// Milliseconds in a day.
pub const DAY_MS: i64 = 86_400_000;

impl TurnEnd {
    /// The event a backend appends, in the transaction that ends the turn: `turn.completed` with
    /// the reply, or `turn.failed` with the status and the error. Returns its kind and payload.
    pub fn event(&self, turn_id: &str) -> (&'static str, Value) {
        match self.status {
            TurnStatus::Completed => (
                TurnCompleted::KIND,
                TurnCompleted {
                    turn_id: turn_id.to_owned(),
                    status: TurnStatus::Completed,
                    reply: self.reply.clone(),
                }
                .to_payload_json(),
            ),
            status => (
                TurnFailed::KIND,
                TurnFailed {
                    turn_id: turn_id.to_owned(),
                    status,
                    error: TurnError {
                        code: self.error_code.clone(),
                        message: self.error_message.clone(),
                    },
                }
                .to_payload_json(),
            ),
        }
    }
}

/// An API key to record ([`crate::Store::insert_api_key`]): a record, whose
/// `last_used_at_ms` is `None` until a request presents it. Only the hash of its secret reaches
/// the store.
pub type NewApiKey = ApiKeyRecord;

/// A stored API key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiKeyRecord {
    /// The key's unique name.
    pub name: String,
    /// Lowercase hex SHA-256 of the secret (the secret itself is never stored).
    pub secret_sha256: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// The session-key prefix its session routes are limited to.
    pub session_prefix: Option<String>,
    /// When it was created.
    pub created_at_ms: i64,
    /// When it stops being accepted.
    pub expires_at_ms: Option<i64>,
    /// When a request last presented it, to within [`API_KEY_LAST_USED_RESOLUTION_MS`].
    pub last_used_at_ms: Option<i64>,
    /// The most requests it may send per minute.
    pub requests_per_minute: Option<u32>,
    /// The most turns its requests may have running at once.
    pub concurrent_turns: Option<u32>,
    /// The most event streams and long polls it may hold open at once.
    pub max_streams: Option<u32>,
    /// The most media bytes charged to it.
    pub media_quota_bytes: Option<u64>,
    /// The most tokens (`totalTokens`) the turns it sends may use per UTC day.
    pub tokens_per_day: Option<u64>,
}

impl ApiKeyRecord {
    /// Returns the owner this key's media charges and sessions are recorded under:
    /// `key:<secret sha256>` (the key itself, not its name, so a key created again under the
    /// same name starts with nothing).
    pub fn owner(&self) -> String {
        format!("key:{}", self.secret_sha256)
    }
}

/// The owner of what the operator token uploads and creates.
pub const OPERATOR_OWNER: &str = "operator";

/// What a media charge is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaChargeKind {
    /// An upload the owner made (`POST /v1/media`).
    Upload,
    /// A blob stored for a session the owner created: a checkpoint's or a worktree version's.
    Session,
}

impl MediaChargeKind {
    /// Returns the stored name.
    pub fn as_str(self) -> &'static str {
        match self {
            MediaChargeKind::Upload => "upload",
            MediaChargeKind::Session => "session",
        }
    }
}

/// What [`crate::Store::charge_media`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MediaCharge {
    /// The blobs not yet charged to the owner are charged now: `new_bytes` of them, for
    /// `used_bytes` in all.
    Charged {
        /// The bytes charged by this call.
        new_bytes: u64,
        /// The owner's charged bytes afterwards.
        used_bytes: u64,
    },
    /// Charging them would take the owner past its quota; nothing was charged.
    OverQuota {
        /// The owner's charged bytes.
        used_bytes: u64,
        /// The bytes the call would have added.
        new_bytes: u64,
    },
}

/// What [`crate::Store::release_upload`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleasedUpload {
    /// Whether an upload charge was removed (the owner had uploaded the blob).
    pub released: bool,
    /// Whether no upload charge is left: the blob's pin is gone and it is listed as
    /// collectable, so garbage collection deletes it once nothing else refers to it.
    pub unpinned: bool,
}

/// How stale an API key's `last_used_at_ms` may be: a request records its use only when the
/// stored time is older than this, so a busy key costs one write a minute, not one a request.
pub const API_KEY_LAST_USED_RESOLUTION_MS: i64 = 60_000;

/// Returns the stored JSON text of `scopes` (an array of their names).
pub(crate) fn scopes_json(scopes: &[Scope]) -> String {
    serde_json::Value::from(
        scopes
            .iter()
            .map(|scope| scope.as_str())
            .collect::<Vec<&str>>(),
    )
    .to_string()
}

/// Parses stored scopes.
///
/// # Errors
/// [`crate::StoreError::Corrupt`] when the text is not an array of scope names.
pub(crate) fn parse_scopes(text: &str) -> crate::Result<Vec<Scope>> {
    serde_json::from_str(text).map_err(|_| crate::StoreError::Corrupt {
        what: "api key scopes",
    })
}

/// Returns a stored byte count of an API key (`media_quota_bytes`).
///
/// # Errors
/// [`crate::StoreError::Corrupt`] for a negative count.
pub(crate) fn stored_bytes_limit(value: Option<i64>) -> crate::Result<Option<u64>> {
    value
        .map(|value| {
            u64::try_from(value).map_err(|_| crate::StoreError::Corrupt {
                what: "api key media quota",
            })
        })
        .transpose()
}

/// Reads a stored rate limit.
///
/// # Errors
/// [`crate::StoreError::Corrupt`] for a value outside `u32`.
pub(crate) fn stored_limit(value: Option<i64>) -> crate::Result<Option<u32>> {
    value
        .map(|value| {
            u32::try_from(value).map_err(|_| crate::StoreError::Corrupt {
                what: "api key limit",
            })
        })
        .transpose()
}

/// What [`crate::Store::set_session_workspace`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceSet {
    /// The session was created with the source.
    Created,
    /// The session had no message yet; its source is now this one.
    Replaced,
    /// The session already had this source.
    Unchanged,
    /// The session has messages and another source, which stays.
    Locked(SessionWorkspace),
}

/// Why a worktree version exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorktreeOrigin {
    /// The worktree's first tree (empty, or the `from` repository's commit).
    Start,
    /// A Gateway-side edit (`PUT /v1/sessions/{key}/worktree/{path}`).
    Edit,
    /// A turn's result, merged in.
    Turn,
}

impl WorktreeOrigin {
    /// The stored name.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Start => "start",
            Self::Edit => "edit",
            Self::Turn => "turn",
        }
    }

    /// Parses a stored name.
    ///
    /// # Errors
    /// [`crate::StoreError::Corrupt`] for an unknown name.
    pub fn parse(text: &str) -> crate::Result<Self> {
        match text {
            "start" => Ok(Self::Start),
            "edit" => Ok(Self::Edit),
            "turn" => Ok(Self::Turn),
            _ => Err(crate::StoreError::Corrupt {
                what: "worktree version origin",
            }),
        }
    }
}

/// One version of a session's worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeVersion {
    /// The session.
    pub session_key: String,
    /// From 1; the largest is the head.
    pub version: i64,
    /// Why it exists.
    pub origin: WorktreeOrigin,
    /// The turn whose result it merged (origin `turn`).
    pub turn_id: Option<String>,
    /// Who made it: `gateway`, `operator` or `key:NAME`.
    pub actor: String,
    /// The tree.
    pub manifest: StoredManifest,
    /// When it was made.
    pub created_at_ms: i64,
}

/// A worker's result for a `worktree` session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorktreeResult {
    /// The turn.
    pub turn_id: String,
    /// The session.
    pub session_key: String,
    /// The name the result is kept under: `refs/gatehouse/worker-results/<turn id>`.
    pub staged_ref: String,
    /// The tree the worker reported.
    pub manifest: StoredManifest,
    /// Whether it was applied.
    pub state: ResultState,
    /// The paths the apply took from the result.
    pub applied: Vec<String>,
    /// The paths changed on both sides, which kept the worktree's version.
    pub conflicts: Vec<String>,
    /// The worktree version the apply made.
    pub version: Option<i64>,
    /// When it was staged.
    pub staged_at_ms: i64,
}

/// What applying a staged result writes, in one transaction: the merged tree as the next
/// worktree version (only if the head is still `expected_head`), the result as the merge base,
/// and the result's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResultApply {
    /// The turn whose result is applied.
    pub turn_id: String,
    /// The session.
    pub session_key: String,
    /// The head version the merge was computed against.
    pub expected_head: i64,
    /// The merged tree.
    pub merged: StoredManifest,
    /// The paths taken from the result.
    pub applied: Vec<String>,
    /// The paths that kept the worktree's version.
    pub conflicts: Vec<String>,
}

/// A new worktree version written by a Gateway-side edit or the worktree's start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewWorktreeVersion {
    /// The session.
    pub session_key: String,
    /// The head it replaces (0 for the first version).
    pub expected_head: i64,
    /// Why it exists.
    pub origin: WorktreeOrigin,
    /// Who made it.
    pub actor: String,
    /// The tree.
    pub manifest: StoredManifest,
}

/// Parses a stored list of paths.
///
/// # Errors
/// [`crate::StoreError::Corrupt`] when the text is not an array of strings.
pub(crate) fn parse_paths(text: Option<&str>) -> crate::Result<Vec<String>> {
    text.map_or(Ok(Vec::new()), |text| {
        serde_json::from_str(text).map_err(|_| crate::StoreError::Corrupt {
            what: "worktree result paths",
        })
    })
}

/// Serializes a workspace source for the `workspace_json` column.
///
/// # Errors
/// [`crate::StoreError::Internal`] if it cannot be serialized.
pub(crate) fn workspace_json(source: &WorkspaceSource) -> crate::Result<String> {
    serde_json::to_string(source).map_err(|error| crate::StoreError::Internal {
        source: Box::new(error),
    })
}

/// Reads the `workspace_json` and `workspace_commit` columns (`NULL`: `empty`).
///
/// # Errors
/// [`crate::StoreError::Corrupt`] when the text is not a source.
pub(crate) fn stored_workspace(
    json: Option<&str>,
    commit: Option<String>,
) -> crate::Result<SessionWorkspace> {
    let source = match json {
        None => WorkspaceSource::Empty,
        Some(text) => serde_json::from_str(text).map_err(|_| crate::StoreError::Corrupt {
            what: "session workspace source",
        })?,
    };
    Ok(SessionWorkspace { source, commit })
}

/// Serializes a list of paths.
///
/// # Errors
/// [`crate::StoreError::Internal`] if it cannot be serialized.
pub(crate) fn paths_json(paths: &[String]) -> crate::Result<String> {
    serde_json::to_string(paths).map_err(|error| crate::StoreError::Internal {
        source: Box::new(error),
    })
}

/// Where a message received on a channel came from, and where its turn's reply goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelOrigin {
    /// The channel's configured name.
    pub channel: String,
    /// The platform's id of the message: each is admitted at most once per channel.
    pub message_id: String,
    /// The conversation the reply goes to (a room, a chat, or the sender of a direct message).
    pub conversation: String,
    /// The sender, the reply's recipient.
    pub sender: String,
    /// The group (room, chat) it was written in; `None` for a direct message.
    pub room: Option<String>,
    /// The thread it was written in, where the platform has threads: the reply goes there.
    pub thread: Option<String>,
}

/// A reply artifact of a turn: a file of the Harness workspace fetched into the media store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnArtifact {
    /// Its path in the workspace.
    pub path: String,
    /// Its blob in the media store.
    pub media_id: String,
    /// Its size.
    pub size_bytes: u64,
}

/// What a channel did with a message it did not admit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboundOutcome {
    /// The sender was sent a pairing code, or has one pending.
    Pairing,
    /// The access policy refused the sender or the conversation.
    Denied,
    /// The message did not address the agent (a group message without a mention).
    Ignored,
}

impl InboundOutcome {
    /// Returns the outcome as stored.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            InboundOutcome::Pairing => "pairing",
            InboundOutcome::Denied => "denied",
            InboundOutcome::Ignored => "ignored",
        }
    }
}

/// A pairing request from an unknown direct sender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingRequest {
    /// The message that asked, judged once ([`InboundOutcome::Pairing`]).
    pub origin: ChannelOrigin,
    /// A fresh code, used when a new pairing is created.
    pub code: String,
    /// The reply that carries the code, queued in the outbox with the pairing.
    pub reply: NewDelivery,
    /// When the code stops being accepted.
    pub expires_at_ms: i64,
    /// The most pairings a channel may have pending.
    pub max_pending: u32,
    /// The time.
    pub now_ms: i64,
}

/// What a pairing request came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairingOutcome {
    /// A new pairing was created and its reply queued.
    Created,
    /// The sender already has a pending pairing: nothing was sent.
    Pending,
    /// The channel has as many pending pairings as it may: nothing was created or sent.
    Full,
    /// The message was seen before: nothing changed.
    Duplicate,
}

/// A pending pairing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairingRecord {
    /// The code the sender was given.
    pub code: String,
    /// The sender.
    pub sender: String,
    /// Where the sender asked from.
    pub conversation: String,
    /// When the code stops being accepted.
    pub expires_at_ms: i64,
}

/// A message to queue in a channel's outbox with its own text (a pairing code, a notice).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDelivery {
    /// Its id, which the platform sees where it takes one (so a retry is never doubled).
    pub delivery_id: String,
    /// The text.
    pub text: String,
}

/// A claimed outbox entry, to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// Its id, the same on every attempt.
    pub delivery_id: String,
    /// The channel.
    pub channel: String,
    /// The turn whose reply it is; `None` for a message with its own text.
    pub turn_id: Option<String>,
    /// The platform id of the message it answers.
    pub in_reply_to: Option<String>,
    /// Where it goes.
    pub conversation: String,
    /// Whom it answers.
    pub recipient: String,
    /// The thread it goes into, where the platform has threads.
    pub thread: Option<String>,
    /// Its own text (pairing replies and notices).
    pub text: Option<String>,
    /// The attempts made before this one.
    pub attempts: u32,
    /// How many times it was claimed, this claim included: more than one means a deliverer
    /// may have sent part of it before (and died, or lost its claim).
    pub claims: u32,
    /// When it was queued.
    pub created_at_ms: i64,
}

/// How a delivery attempt ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeliveryEnd {
    /// The platform took it.
    Delivered,
    /// It failed for now: try again at `next_attempt_at_ms`.
    Retry {
        /// When to try again.
        next_attempt_at_ms: i64,
        /// Why it failed (no secret, no content).
        error: String,
    },
    /// It failed for good: it is never tried again.
    Failed {
        /// Why.
        error: String,
    },
}

/// What `GET /v1/channels` shows of a channel, read from the store.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChannelFigures {
    /// When its last message was received.
    pub last_inbound_at_ms: Option<i64>,
    /// When its last delivery was taken by the platform.
    pub last_delivery_at_ms: Option<i64>,
    /// Its deliveries not yet delivered or failed.
    pub pending_deliveries: u64,
    /// The error of its newest delivery that is being retried, or else that was given up
    /// after its latest successful delivery.
    pub last_error: Option<String>,
}
