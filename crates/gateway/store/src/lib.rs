//! Gateway state behind one trait.
//!
//! The Gateway keeps everything it owns (enrolled nodes, setup codes, the audit trail, and later
//! sessions, turns and transcripts) behind [`Store`]. Callers hold an `Arc<dyn Store>` and never
//! see which engine is underneath; [`sqlite::SqliteStore`] is the default, one WAL-mode file in
//! the Gateway state directory with versioned migrations. With the `postgres` feature,
//! `postgres::PgStore` keeps the same state in a PostgreSQL database; [`open`] opens either from
//! a [`location::StoreLocation`].
//!
//! # Contract
//! - Every method is atomic: it either fully applies or leaves nothing behind.
//! - Methods may be called concurrently from many tasks.
//! - Secrets are never stored in clear: tokens arrive here already hashed.
//!
//! # Modules
//! - [`records`]: the records the store reads and writes.
//! - [`channels`]: what channels keep: messages judged once, pairings, the reply outbox.
//! - [`manifest`]: the trees it keeps (checkpoint manifests, worktree versions) and their text.
//! - [`sql`]: the one store body, over a small backend layer.
//! - [`sqlite`]: the SQLite backend.
//! - `postgres`: the PostgreSQL backend (feature `postgres`).
//! - [`location`]: the store URL (`sqlite://PATH`, `postgres://...`) and its password rules.
//! - [`error`]: the error type, [`StoreError`].

#![deny(missing_docs)]

pub mod channels;
pub mod cluster;
pub mod error;
pub mod exclusive;
pub mod location;
pub mod manifest;
#[cfg(feature = "postgres")]
pub mod postgres;
pub mod records;
pub mod sql;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;

pub use crate::channels::ChannelStore;
use crate::cluster::ClaimOutcome;
pub use crate::cluster::ClusterStore;
use crate::cluster::Fence;
use crate::cluster::TurnWriter;
pub use crate::error::Result;
pub use crate::error::StoreError;
use crate::records::Admitted;
use crate::records::ApiKeyRecord;
use crate::records::AuditEvent;
use crate::records::CheckpointBlob;
use crate::records::CheckpointManifest;
use crate::records::EnrollOutcome;
use crate::records::Enrollment;
use crate::records::EventRecord;
use crate::records::MediaCharge;
use crate::records::MediaChargeKind;
use crate::records::MessageRecord;
use crate::records::NewApiKey;
use crate::records::NewAuditEvent;
use crate::records::NewSetupCode;
use crate::records::NewTurnMessage;
use crate::records::NewUserMessage;
use crate::records::NewWorktreeVersion;
use crate::records::NodeRecord;
use crate::records::NodeSeen;
use crate::records::ReleasedUpload;
use crate::records::ResultApply;
use crate::records::SessionMove;
use crate::records::SessionRecord;
use crate::records::SessionWorkspace;
use crate::records::StoreFigures;
use crate::records::StoredManifest;
use crate::records::TurnEnd;
use crate::records::TurnRecord;
use crate::records::UsageQuery;
use crate::records::UsageRow;
use crate::records::UsageScope;
use crate::records::WorkspaceSet;
use crate::records::WorkspaceSource;
use crate::records::WorktreeResult;
use crate::records::WorktreeVersion;
use gatehouse_protocol::worker::TokenUsage;

/// Returns `value` with NUL replaced by U+FFFD: the text a PostgreSQL store keeps for it,
/// since a `text` column refuses NUL. Text from a node or a model may carry it; refusing the
/// write would leave a turn unended. Copies and checks of a store compare text in this form.
pub fn scrub_nul(value: &str) -> std::borrow::Cow<'_, str> {
    match value.contains('\0') {
        true => std::borrow::Cow::Owned(value.replace('\0', "\u{fffd}")),
        false => std::borrow::Cow::Borrowed(value),
    }
}

/// Opens the store at `location`, applying pending migrations.
///
/// # Errors
/// [`StoreError::Unavailable`] when it cannot be opened or migrated, or when it is a PostgreSQL
/// database and this build lacks the `postgres` feature.
pub async fn open(location: &location::StoreLocation) -> Result<Arc<dyn Store>> {
    match location {
        location::StoreLocation::Local(path) => {
            Ok(Arc::new(sqlite::SqliteStore::open(path).await?))
        }
        #[cfg(feature = "postgres")]
        location::StoreLocation::Remote(database) => {
            Ok(Arc::new(postgres::PgStore::open(database).await?))
        }
        #[cfg(not(feature = "postgres"))]
        location::StoreLocation::Remote(_) => Err(StoreError::Unavailable {
            source: "this gatehouse was built without the postgres feature".into(),
        }),
    }
}

/// What the Gateway needs from its storage; what its replicas share is [`ClusterStore`].
#[async_trait]
pub trait Store: ClusterStore + ChannelStore {
    /// Records a new API key (by the hash of its secret).
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] when a key has that name (or that hash: a broken random
    /// source).
    async fn insert_api_key(&self, key: &NewApiKey) -> Result<()>;

    /// Returns every API key, ordered by name.
    ///
    /// # Errors
    /// Storage failures; [`StoreError::Corrupt`] for unreadable scopes.
    async fn api_keys(&self) -> Result<Vec<ApiKeyRecord>>;

    /// Returns the key whose secret hashes to `secret_sha256`, unless there is none or it has
    /// expired at `now_ms`, and records its use when the stored use is older than
    /// [`records::API_KEY_LAST_USED_RESOLUTION_MS`]. Every call reads the store, so a key revoked
    /// on one replica is refused by the next request on any replica.
    ///
    /// # Errors
    /// Storage failures; [`StoreError::Corrupt`] for unreadable scopes.
    async fn use_api_key(&self, secret_sha256: &str, now_ms: i64) -> Result<Option<ApiKeyRecord>>;

    /// Deletes the key `name` and returns whether it existed; its name may then be reused.
    ///
    /// # Errors
    /// Storage failures.
    async fn revoke_api_key(&self, name: &str) -> Result<bool>;

    /// Checks that the store answers; used by readiness.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when it does not.
    async fn ping(&self) -> Result<()>;

    /// Records a new setup code (by the hash of its bootstrap token).
    ///
    /// # Errors
    /// [`StoreError::AlreadyExists`] for a duplicate hash (a broken random source).
    async fn insert_setup_code(&self, code: &NewSetupCode) -> Result<()>;

    /// Consumes the setup code with `enrollment.token_sha256` and records the node, in one
    /// transaction. A code is consumed at most once, even under concurrent attempts.
    ///
    /// # Errors
    /// Only storage failures; a bad code is an [`EnrollOutcome`], not an error.
    async fn enroll_node(&self, enrollment: &Enrollment) -> Result<EnrollOutcome>;

    /// Returns the node with `device_id`, if enrolled.
    ///
    /// # Errors
    /// Storage failures.
    async fn node(&self, device_id: &str) -> Result<Option<NodeRecord>>;

    /// Returns every enrolled node, ordered by device id.
    ///
    /// # Errors
    /// Storage failures.
    async fn nodes(&self) -> Result<Vec<NodeRecord>>;

    /// Updates what a connecting node declared and when it was last seen.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the node is not enrolled.
    async fn record_node_seen(&self, seen: &NodeSeen) -> Result<()>;

    /// Appends an audit event and returns its sequence number.
    ///
    /// # Errors
    /// Storage failures.
    async fn append_audit(&self, event: &NewAuditEvent) -> Result<i64>;

    /// Returns up to `limit` audit events with a sequence number above `after`, oldest first.
    ///
    /// # Errors
    /// Storage failures.
    async fn audit_after(&self, after: i64, limit: u32) -> Result<Vec<AuditEvent>>;

    /// Returns the newest `limit` audit events with a sequence number below `before`, oldest
    /// first: the page that precedes `before`, for a reader that pages backwards from the end
    /// (`before = i64::MAX` is the newest page).
    ///
    /// # Errors
    /// Storage failures.
    async fn audit_before(&self, before: i64, limit: u32) -> Result<Vec<AuditEvent>>;

    /// Deletes every audit event recorded before `cutoff_ms` (Unix milliseconds) and returns how
    /// many were deleted. Running it from several replicas at once is harmless: each deletes
    /// what the others have not, and the sum is the number of rows that were old.
    ///
    /// # Errors
    /// Storage failures.
    async fn prune_audit(&self, cutoff_ms: i64) -> Result<u64>;

    /// Admits a user message durably, in one transaction: creates the session if new, returns
    /// the existing turn for a repeated idempotency key (storing nothing), joins the latest
    /// queued turn for [`crate::records::QueueMode::Collect`], otherwise creates a queued turn;
    /// appends the message to the transcript and, for a new turn, a `turn.queued` event.
    ///
    /// # Errors
    /// Storage failures ([`StoreError::DiskFull`] leaves nothing admitted).
    async fn admit_user_message(&self, message: &NewUserMessage) -> Result<Admitted>;

    /// Returns the turn `turn_id`.
    ///
    /// # Errors
    /// Storage failures.
    async fn turn(&self, turn_id: &str) -> Result<Option<TurnRecord>>;

    /// Returns the user messages of `turn_id`, in order (several for a collected turn).
    ///
    /// # Errors
    /// Storage failures.
    async fn turn_user_messages(&self, turn_id: &str) -> Result<Vec<MessageRecord>>;

    /// Marks the oldest queued turn of `session_key` running under `fence` and returns it,
    /// unless a turn of that session is already running (one active turn per session), the
    /// session's node is linked to another replica or to none ([`ClaimOutcome::NotHolder`]), or
    /// `fence` is not the replica's live lease ([`ClaimOutcome::Fenced`]).
    ///
    /// # Errors
    /// Storage failures.
    async fn claim_next_turn(
        &self,
        fence: &Fence,
        session_key: &str,
        now_ms: i64,
    ) -> Result<ClaimOutcome>;

    /// Ends `turn_id` if it is still queued, or running under `fence`, while `fence` is live, and
    /// appends its `turn.completed` (with `turnId`, `status`, `reply`) or `turn.failed` (with
    /// `turnId`, `status`, `error`) session event in the same transaction; returns false when
    /// it had already ended (for example interrupted by a restart, or aborted) or the fence no
    /// longer holds, in which case nothing changes.
    ///
    /// # Errors
    /// Storage failures.
    async fn finish_turn(&self, fence: &Fence, turn_id: &str, end: &TurnEnd) -> Result<bool>;

    /// Adds one model call's `usage` to the turn `turn_id` while it runs under `fence` and
    /// `fence` is live (the model name is kept from the first call that named one); returns
    /// false, changing nothing, otherwise. Counted as each call answers, so a turn's tokens
    /// count against the budgets on every replica at once, also when the turn then fails.
    ///
    /// # Errors
    /// Storage failures.
    async fn add_turn_usage(
        &self,
        fence: &Fence,
        turn_id: &str,
        usage: &TokenUsage,
    ) -> Result<bool>;

    /// Returns the tokens (`totalTokens`) of the turns of `scope` admitted at or after
    /// `since_ms`.
    ///
    /// # Errors
    /// Storage failures.
    async fn tokens_used(&self, scope: UsageScope<'_>, since_ms: i64) -> Result<u64>;

    /// Returns the usage of the turns `query` selects, one row per group, ordered by group.
    ///
    /// # Errors
    /// Storage failures.
    async fn usage(&self, query: &UsageQuery) -> Result<Vec<UsageRow>>;

    /// Commits a complete assistant or tool message of a turn running under `fence` and returns
    /// its transcript seq, or `None` when the turn is no longer running or the fence no longer
    /// holds (a stale writer is fenced off).
    ///
    /// # Errors
    /// Storage failures.
    async fn commit_turn_message(
        &self,
        fence: &Fence,
        message: &NewTurnMessage,
    ) -> Result<Option<i64>>;

    /// Appends a durable event of the turn `turn_id`, running under `fence`, to its session's
    /// event log and returns its seq; `None` when the turn is no longer running or the fence no
    /// longer holds.
    ///
    /// # Errors
    /// Storage failures.
    async fn append_turn_event(
        &self,
        fence: &Fence,
        turn_id: &str,
        kind: &str,
        payload: &serde_json::Value,
        now_ms: i64,
    ) -> Result<Option<i64>>;

    /// Appends a durable event that belongs to no running turn (a worktree conflict, say) to
    /// the session's event log and returns its seq.
    ///
    /// # Errors
    /// Storage failures.
    async fn append_event(
        &self,
        session_key: &str,
        kind: &str,
        payload: &serde_json::Value,
        now_ms: i64,
    ) -> Result<i64>;

    /// Returns up to `limit` durable events of `session_key` with a seq above `after`.
    ///
    /// # Errors
    /// Storage failures.
    async fn events_after(
        &self,
        session_key: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRecord>>;

    /// Returns the seq of the session's last durable event; 0 when it has none (or does not
    /// exist).
    ///
    /// # Errors
    /// Storage failures.
    async fn last_event_seq(&self, session_key: &str) -> Result<i64>;

    /// Returns the session's oldest queued turn.
    ///
    /// # Errors
    /// Storage failures.
    async fn next_queued_turn(&self, session_key: &str) -> Result<Option<TurnRecord>>;

    /// Returns the session's transcript, in order.
    ///
    /// # Errors
    /// Storage failures.
    async fn transcript(&self, session_key: &str) -> Result<Vec<MessageRecord>>;

    /// Returns every session with its running turn, ordered by key.
    ///
    /// # Errors
    /// Storage failures.
    async fn sessions(&self) -> Result<Vec<SessionRecord>>;

    /// Returns the queued turns and the listed checkpoint bytes, for `/metrics`.
    ///
    /// # Errors
    /// Storage failures.
    async fn figures(&self) -> Result<StoreFigures>;

    /// Returns the sessions that have queued turns.
    ///
    /// # Errors
    /// Storage failures.
    async fn sessions_with_queued_turns(&self) -> Result<Vec<String>>;

    /// Records an immutable checkpoint of a session workspace (kept if it exists already, with
    /// its save time moved forward so retention counts it as new) and makes it the session's
    /// latest accepted checkpoint, in one transaction. With `writer`, only while that turn runs
    /// under its fence (checked in the same transaction): a replica past its lease cannot
    /// replace the checkpoint another one saved. Returns false, writing nothing, when fenced.
    ///
    /// # Errors
    /// Storage failures.
    async fn save_checkpoint(
        &self,
        session_key: &str,
        checkpoint_id: &str,
        manifest: &CheckpointManifest,
        now_ms: i64,
        writer: Option<TurnWriter<'_>>,
    ) -> Result<bool>;

    /// Returns the id and manifest of the session's latest accepted checkpoint.
    ///
    /// # Errors
    /// Storage failures; [`StoreError::Corrupt`] for an unreadable manifest.
    async fn latest_checkpoint(
        &self,
        session_key: &str,
    ) -> Result<Option<(String, CheckpointManifest)>>;

    /// Returns up to `limit` of the session's checkpoints other than `except`, newest first (by
    /// the time they were last saved).
    ///
    /// # Errors
    /// Storage failures; [`StoreError::Corrupt`] for an unreadable manifest.
    async fn recent_checkpoints(
        &self,
        session_key: &str,
        except: &str,
        limit: u32,
    ) -> Result<Vec<(String, CheckpointManifest)>>;

    /// Deletes the session's checkpoints beyond the `keep` newest and returns how many were
    /// deleted. A checkpoint that is any session's latest is never deleted. Blobs are not
    /// touched: they stay listed by [`Store::register_checkpoint_blobs`] until collected.
    ///
    /// # Errors
    /// Storage failures.
    async fn prune_checkpoints(&self, session_key: &str, keep: u32) -> Result<u64>;

    /// Records that the blobs may be stored for a checkpoint (a blob already listed is kept).
    /// Called before the blobs are written, so no crash can leave a checkpoint blob unlisted.
    ///
    /// # Errors
    /// Storage failures.
    async fn register_checkpoint_blobs(&self, blobs: &[CheckpointBlob], now_ms: i64) -> Result<()>;

    /// Returns the listed checkpoint blobs that nothing refers to: no retained checkpoint
    /// entry, no turn attachment, no `artifact.stored` event and no pin.
    ///
    /// # Errors
    /// Storage failures.
    async fn checkpoint_blob_garbage(&self) -> Result<Vec<CheckpointBlob>>;

    /// Removes `media_id` from the checkpoint blob list, once its blob is deleted, with the
    /// session charges of it (the bytes are gone).
    ///
    /// # Errors
    /// Storage failures.
    async fn forget_checkpoint_blob(&self, media_id: &str) -> Result<()>;

    /// Pins `media_id` (for example an upload) so garbage collection never deletes it.
    ///
    /// # Errors
    /// Storage failures.
    async fn pin_media(&self, media_id: &str, reason: &str, now_ms: i64) -> Result<()>;

    /// Lets `grantee` (`key:<secret sha256>` or `session:<session key>`) read `media_id`; a
    /// grant that exists is kept as it is.
    ///
    /// # Errors
    /// Storage failures.
    async fn grant_media(&self, media_id: &str, grantee: &str, now_ms: i64) -> Result<()>;

    /// Returns whether `media_id` was granted to `key_grantee` or to a session whose key starts
    /// with `session_prefix`.
    ///
    /// # Errors
    /// Storage failures.
    async fn media_granted(
        &self,
        media_id: &str,
        key_grantee: &str,
        session_prefix: &str,
    ) -> Result<bool>;

    /// Returns the API key whose secret hashes to `secret_sha256`, expired or not, without
    /// recording a use: for the shares of a session's creator.
    ///
    /// # Errors
    /// Storage failures; [`StoreError::Corrupt`] for unreadable scopes.
    async fn api_key_by_hash(&self, secret_sha256: &str) -> Result<Option<ApiKeyRecord>>;

    /// Records `owner` as the creator of `session_key` unless one is recorded, and returns the
    /// recorded owner (the first writer's, on every replica).
    ///
    /// # Errors
    /// Storage failures.
    async fn claim_session_owner(
        &self,
        session_key: &str,
        owner: &str,
        now_ms: i64,
    ) -> Result<String>;

    /// Returns the creator of `session_key`, `None` for a session created before creators were
    /// recorded.
    ///
    /// # Errors
    /// Storage failures.
    async fn session_owner(&self, session_key: &str) -> Result<Option<String>>;

    /// Charges `owner` for the `blobs` of `kind` it is not charged for yet, in one transaction
    /// that no other charge of `owner` interleaves with (on every replica): refused, with
    /// nothing charged, when the owner's bytes would pass `quota_bytes` (`None`: no quota).
    ///
    /// # Errors
    /// Storage failures.
    async fn charge_media(
        &self,
        owner: &str,
        kind: MediaChargeKind,
        blobs: &[CheckpointBlob],
        quota_bytes: Option<u64>,
        now_ms: i64,
    ) -> Result<MediaCharge>;

    /// Returns the bytes charged to `owner`, every kind.
    ///
    /// # Errors
    /// Storage failures.
    async fn media_charged_bytes(&self, owner: &str) -> Result<u64>;

    /// Removes `owner`'s charge of `kind` for `media_id`, if any (an upload whose blob the
    /// media store refused to take).
    ///
    /// # Errors
    /// Storage failures.
    async fn uncharge_media(
        &self,
        owner: &str,
        kind: MediaChargeKind,
        media_id: &str,
    ) -> Result<()>;

    /// Releases an upload of `media_id`: `owner`'s upload charge and its grant `owner`, or,
    /// for `owner` `None` (an admin), every upload charge. When no upload charge is left, in
    /// the same transaction the blob's pin is removed and it is listed as collectable, so the
    /// next collection deletes it unless something else refers to it.
    ///
    /// # Errors
    /// Storage failures.
    async fn release_upload(
        &self,
        owner: Option<&str>,
        media_id: &str,
        now_ms: i64,
    ) -> Result<ReleasedUpload>;

    /// Binds `session_key` to the Codex thread `thread_id`, replacing an earlier binding.
    ///
    /// # Errors
    /// `NotFound` when the session does not exist; storage failures.
    async fn bind_codex_thread(
        &self,
        session_key: &str,
        thread_id: &str,
        now_ms: i64,
    ) -> Result<()>;

    /// Returns the Codex thread `session_key` is bound to.
    ///
    /// # Errors
    /// Storage failures.
    async fn codex_thread(&self, session_key: &str) -> Result<Option<String>>;

    /// Returns the node `session_key` is bound to; `None` when it is unbound or does not exist.
    ///
    /// # Errors
    /// Storage failures.
    async fn session_node(&self, session_key: &str) -> Result<Option<String>>;

    /// Binds `session_key` to `node_id` unless it is bound already, and returns the node it is
    /// bound to afterwards: an existing binding always wins, so two dispatchers racing cannot
    /// bind one session to two nodes.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the session does not exist; storage failures.
    async fn bind_session_node(
        &self,
        session_key: &str,
        node_id: &str,
        now_ms: i64,
    ) -> Result<String>;

    /// Binds `session_key` to `to` only while it is bound to `from` and none of its turns runs
    /// (checked in the same transaction, under the session's lock, so a claim cannot slip in):
    /// the dispatch of a session's next turn moves it off a node that is gone. Returns whether
    /// it moved.
    ///
    /// # Errors
    /// Storage failures.
    async fn rebind_session_node(
        &self,
        session_key: &str,
        from: &str,
        to: &str,
        now_ms: i64,
    ) -> Result<bool>;

    /// Binds `session_key` to `to` (`None`: unbound, so the next dispatch binds it afresh), in
    /// one transaction that first checks no turn of the session is running.
    ///
    /// # Errors
    /// Storage failures; every refusal is a [`SessionMove`].
    async fn move_session_node(
        &self,
        session_key: &str,
        to: Option<&str>,
        now_ms: i64,
    ) -> Result<SessionMove>;
    /// Sets the workspace source of `session_key`, creating the session (on `runtime`) when it
    /// does not exist, in one transaction. A session that has messages keeps its source: the
    /// answer is [`WorkspaceSet::Locked`] unless `source` is the one it has. Setting a
    /// `worktree` source without `from` also writes the worktree's first, empty version; a
    /// replaced source forgets the worktree versions of the one before.
    ///
    /// # Errors
    /// Storage failures.
    async fn set_session_workspace(
        &self,
        session_key: &str,
        runtime: &str,
        source: &WorkspaceSource,
        now_ms: i64,
    ) -> Result<WorkspaceSet>;

    /// Returns the workspace source of `session_key` (`empty` when none was set); `None` when
    /// the session does not exist.
    ///
    /// # Errors
    /// Storage failures.
    async fn session_workspace(&self, session_key: &str) -> Result<Option<SessionWorkspace>>;

    /// Pins the commit of the session's repository unless one is pinned already, and returns
    /// the pinned commit: the first pin wins.
    ///
    /// # Errors
    /// [`StoreError::NotFound`] when the session does not exist; storage failures.
    async fn pin_session_commit(&self, session_key: &str, commit: &str) -> Result<String>;

    /// Returns version `version` of the session's worktree, or its head when `version` is
    /// `None`; `None` when there is no such version.
    ///
    /// # Errors
    /// Storage failures.
    async fn worktree_version(
        &self,
        session_key: &str,
        version: Option<i64>,
    ) -> Result<Option<WorktreeVersion>>;

    /// Writes the next worktree version, only while the head is `expected_head` (0: no
    /// version yet). Returns whether it was written.
    ///
    /// # Errors
    /// Storage failures.
    async fn save_worktree_version(
        &self,
        version: &NewWorktreeVersion,
        now_ms: i64,
    ) -> Result<bool>;

    /// Returns the merge base of the session's worktree: the tree its execution workspace was
    /// last known to hold; `None` before its first dispatch.
    ///
    /// # Errors
    /// Storage failures.
    async fn worktree_base(&self, session_key: &str) -> Result<Option<StoredManifest>>;

    /// Sets the merge base of the session's worktree (at the first dispatch, to the tree sent).
    ///
    /// # Errors
    /// Storage failures.
    async fn set_worktree_base(&self, session_key: &str, base: &StoredManifest) -> Result<()>;

    /// Stores a worker's result for a `worktree` session as `staged`; staging the same turn
    /// twice keeps the first. With `fence`, only while the turn runs under it (checked in the
    /// same transaction); returns false, writing nothing, when fenced.
    ///
    /// # Errors
    /// Storage failures.
    async fn stage_worktree_result(
        &self,
        turn_id: &str,
        session_key: &str,
        staged_ref: &str,
        manifest: &StoredManifest,
        now_ms: i64,
        fence: Option<&Fence>,
    ) -> Result<bool>;

    /// Returns the results still `staged` (of one session, or of every session), oldest
    /// first.
    ///
    /// # Errors
    /// Storage failures.
    async fn staged_worktree_results(
        &self,
        session_key: Option<&str>,
    ) -> Result<Vec<WorktreeResult>>;

    /// Returns the worktree result of `turn_id`, if it has one.
    ///
    /// # Errors
    /// Storage failures.
    async fn worktree_result(&self, turn_id: &str) -> Result<Option<WorktreeResult>>;

    /// Deletes the versions of the session's worktree older than its newest `keep` (its first
    /// version always stays), and the applied results those versions merged, in one
    /// transaction; returns how many versions went. Their blobs become collectable.
    ///
    /// # Errors
    /// Storage failures.
    async fn prune_worktree_versions(&self, session_key: &str, keep: i64) -> Result<u64>;

    /// Applies a staged result in one transaction: writes `merged` as the next worktree
    /// version (only while the head is `expected_head`), makes the result the merge base, and
    /// records the result `applied` with its outcome. Returns false, writing nothing, when the
    /// head moved or the result is no longer staged.
    ///
    /// # Errors
    /// Storage failures.
    async fn apply_worktree_result(&self, apply: &ResultApply, now_ms: i64) -> Result<bool>;
}
