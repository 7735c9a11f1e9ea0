//! [`MediaRetention`]: the checkpoint quota and the garbage collection of checkpoint blobs.
//!
//! Native checkpoints keep file contents in the media store. Three rules bound what they take:
//! - **Retention:** a session keeps its newest [`RetentionConfig::checkpoints_kept`] checkpoints
//!   (default [`DEFAULT_CHECKPOINTS_KEPT`]); older ones are deleted after each commit. Only the
//!   latest is ever restored.
//! - **Checkpoint quota:** the file content one session's retained checkpoints refer to (each
//!   distinct blob counted once, the new checkpoint included) is at most
//!   [`RetentionConfig::checkpoint_quota_bytes`] (default [`DEFAULT_CHECKPOINT_QUOTA_BYTES`]). A
//!   checkpoint over it is refused with [`ErrorCode::CheckpointQuotaExceeded`] before any blob is
//!   written; the session keeps its last good checkpoint.
//! - **Media quota:** the media store itself refuses new blobs past the Gateway's media quota
//!   (`MEDIA_QUOTA_EXCEEDED`); blobs a refused checkpoint had already written are collected at
//!   once.
//!
//! # Garbage collection
//! Only blobs listed as checkpoint blobs are ever deleted, and only when no retained
//! checkpoint, turn attachment, reply artifact or upload pin refers to them. The order makes a
//! crash at any point safe:
//! 1. a checkpoint's blobs are listed in the store *before* they are written;
//! 2. the blobs are written, then the checkpoint row is committed;
//! 3. older checkpoint rows are deleted (retention);
//! 4. for each listed blob nothing refers to, the blob is deleted, *then* its list row.
//!
//! A crash after 1 or 2 leaves listed, unreferenced blobs, which the next collection deletes; a
//! crash inside 4 leaves a list row whose blob is gone, which the next collection forgets.
//! Nothing that a row refers to is ever deleted, because steps 1–2 (and uploads with their pin)
//! run under the shared side of [`MediaRetention::hold`] and step 4 under its exclusive side,
//! so a blob cannot be re-referenced between the reference check and its deletion. The hold is
//! this process's lock and the store's media lock ([`gatehouse_store::ClusterStore::hold_media_writes`],
//! an advisory lock on PostgreSQL), so it holds across every replica; a collection that finds
//! the store's lock held for writing leaves its blobs to a later run rather than wait.
//!
//! Collection runs after every checkpoint commit (for that session's retention) and at Gateway
//! start (for every session), and is idempotent. Each run that deletes anything, or fails, is
//! audited once as `media.gc` with its counts.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use gatehouse_media::MediaError;
use gatehouse_media::MediaStore;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::cluster::Fence;
use gatehouse_store::cluster::MediaHold;
use gatehouse_store::cluster::TurnWriter;
use gatehouse_store::records::CheckpointBlob;
use gatehouse_store::records::CheckpointManifest;
use gatehouse_store::records::MediaCharge;
use gatehouse_store::records::MediaChargeKind;
use gatehouse_store::records::ReleasedUpload;
use tokio::sync::RwLock;
use tokio::sync::RwLockReadGuard;

use crate::audit::Audit;
use crate::turns::runtime::TurnFailure;
use gatehouse_protocol::time::now_ms;

/// The default checkpoint quota per session: 64 MiB of file content. A worker reports at most
/// 16 MiB per checkpoint, so the default never refuses an honest session that keeps up to four
/// checkpoints; it bounds what a hostile node can make the Gateway store.
pub const DEFAULT_CHECKPOINT_QUOTA_BYTES: u64 = 64 * 1024 * 1024;

/// The default number of checkpoints a session keeps: only the latest (the one a lost session
/// workspace is rebuilt from).
pub const DEFAULT_CHECKPOINTS_KEPT: u32 = 1;

/// The default media quota of a Gateway: 10 GiB of blobs (uploads, artifacts and checkpoints).
pub const DEFAULT_MEDIA_QUOTA_BYTES: u64 = 10 * 1024 * 1024 * 1024;

/// How checkpoints are retained and bounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetentionConfig {
    /// The most bytes of file content one session's retained checkpoints may refer to.
    pub checkpoint_quota_bytes: u64,
    /// How many of its newest checkpoints a session keeps (at least 1).
    pub checkpoints_kept: u32,
}

/// A blob of a new checkpoint, not yet written.
#[derive(Debug, Clone)]
pub(crate) struct NewBlob {
    /// Its media id (the BLAKE3 of `bytes`).
    pub media_id: String,
    /// The content.
    pub bytes: Bytes,
}

/// What one collection did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct GcSummary {
    /// Checkpoint rows deleted by retention.
    pub pruned_checkpoints: u64,
    /// Blobs deleted.
    pub deleted_blobs: u64,
    /// Their bytes.
    pub deleted_bytes: u64,
    /// Blobs that could not be deleted (kept listed, tried again next time).
    pub failed_blobs: u64,
}

/// Why a collection ran; recorded in its audit event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GcTrigger {
    /// After a session's checkpoint was committed.
    Checkpoint,
    /// After a checkpoint was refused part way (its written blobs are collected).
    RefusedCheckpoint,
    /// At Gateway start.
    Start,
    /// After an upload was deleted by its owner.
    Release,
}

impl GcTrigger {
    fn as_str(self) -> &'static str {
        match self {
            GcTrigger::Checkpoint => "checkpoint",
            GcTrigger::RefusedCheckpoint => "refused-checkpoint",
            GcTrigger::Start => "start",
            GcTrigger::Release => "release",
        }
    }
}

/// A hold on storing media: the shared side of this process's collection lock and of the
/// store's (every replica's); see [`MediaRetention::hold`].
pub(crate) struct WriteHold<'a> {
    _local: RwLockReadGuard<'a, ()>,
    store: Option<Box<dyn MediaHold>>,
}

impl WriteHold<'_> {
    /// Gives the hold back.
    pub(crate) async fn release(mut self) {
        if let Some(store) = self.store.take() {
            store.release().await;
        }
    }
}

/// Enforces the checkpoint quota and collects checkpoint blobs nothing refers to.
pub(crate) struct MediaRetention {
    store: Arc<dyn Store>,
    media: Arc<MediaStore>,
    audit: Audit,
    config: RetentionConfig,
    /// The media share of a key that sets none ([`crate::shares`]).
    key_share_default: Option<u64>,
    /// Shared by writers of referenced media (checkpoints, uploads), exclusive for deletion.
    lock: RwLock<()>,
}

impl MediaRetention {
    /// Returns the retention of `media`, whose references live in `store`.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        media: Arc<MediaStore>,
        audit: Audit,
        config: RetentionConfig,
    ) -> Self {
        Self {
            store,
            media,
            audit,
            config: RetentionConfig {
                checkpoints_kept: config.checkpoints_kept.max(1),
                ..config
            },
            key_share_default: None,
            lock: RwLock::new(()),
        }
    }

    /// Returns this retention charging the blobs of a key's sessions to the key, each key
    /// limited to its `mediaQuotaBytes` or else `default_bytes`.
    pub(crate) fn with_key_shares(mut self, default_bytes: u64) -> Self {
        self.key_share_default = Some(default_bytes);
        self
    }

    /// Charges the blobs stored for `session_key` to the session's creator: refused, with
    /// nothing charged, when a key's media share would be passed. Sessions created by the
    /// operator, or before creators were recorded, are charged to their creator without a
    /// quota, or not at all.
    async fn charge_session(
        &self,
        session_key: &str,
        blobs: &[CheckpointBlob],
    ) -> Result<(), WriteError> {
        let Some(default_bytes) = self.key_share_default else {
            return Ok(());
        };
        let Some(owner) = self
            .store
            .session_owner(session_key)
            .await
            .map_err(WriteError::Store)?
        else {
            return Ok(());
        };
        let quota_bytes = match owner.strip_prefix("key:") {
            Some(secret_sha256) => Some(
                self.store
                    .api_key_by_hash(secret_sha256)
                    .await
                    .map_err(WriteError::Store)?
                    .and_then(|key| key.media_quota_bytes)
                    .unwrap_or(default_bytes),
            ),
            None => None,
        };
        let charged = self
            .store
            .charge_media(
                &owner,
                MediaChargeKind::Session,
                blobs,
                quota_bytes,
                now_ms(),
            )
            .await
            .map_err(WriteError::Store)?;
        match (charged, quota_bytes) {
            (
                MediaCharge::OverQuota {
                    used_bytes,
                    new_bytes,
                },
                Some(quota_bytes),
            ) => Err(WriteError::OverShare {
                used_bytes,
                new_bytes,
                quota_bytes,
            }),
            _ => Ok(()),
        }
    }

    /// Releases an upload of `media_id` ([`Store::release_upload`]: `owner`'s, or every one for
    /// `None`) and, when no upload holds the blob any more, collects it unless something else
    /// refers to it. It runs under the exclusive side of the local lock and the store's
    /// collection hold, so an upload of the same bytes in flight (on any replica) has either
    /// stored its charge and its pin or not begun: a release never lands between the two and
    /// leaves a pinned blob charged to nobody.
    ///
    /// # Errors
    /// [`ReleaseError::Busy`] when another replica kept the media lock through every attempt; a
    /// store failure.
    pub(crate) async fn release_upload(
        &self,
        owner: Option<&str>,
        media_id: &str,
    ) -> Result<ReleasedUpload, ReleaseError> {
        let _deleting = self.lock.write().await;
        let mut held = None;
        for _ in 0..RELEASE_ATTEMPTS {
            held = self.store.try_hold_media_collection().await?;
            if held.is_some() {
                break;
            }
            tokio::time::sleep(RELEASE_RETRY).await;
        }
        let Some(mut held) = held else {
            return Err(ReleaseError::Busy);
        };
        let released = self.store.release_upload(owner, media_id, now_ms()).await;
        let mut summary = GcSummary::default();
        let swept = match &released {
            Ok(released) if released.unpinned => self.sweep(&mut summary, held.as_mut()).await,
            _ => Ok(()),
        };
        held.release().await;
        let released = released?;
        if let Err(error) = swept {
            tracing::error!(error = %error, "cannot collect a released upload");
            summary.failed_blobs += 1;
        }
        self.audit_summary(GcTrigger::Release, None, &summary).await;
        Ok(released)
    }
    /// Returns a hold to keep while storing media and recording its reference (an upload and
    /// its pin): no collection, on this replica or another, deletes a blob while any hold is
    /// kept. Give it back with [`WriteHold::release`].
    ///
    /// # Errors
    /// The store's failure to take its side of the hold.
    pub(crate) async fn hold(&self) -> Result<WriteHold<'_>, StoreError> {
        let local = self.lock.read().await;
        let store = self.store.hold_media_writes().await?;
        Ok(WriteHold {
            _local: local,
            store: Some(store),
        })
    }

    /// Refuses a checkpoint of `session_key` whose file content, together with the session's
    /// other retained checkpoints, is over the checkpoint quota. `referenced` maps each media id
    /// the new checkpoint refers to to its size. Writes nothing; a refusal is audited.
    ///
    /// # Errors
    /// [`ErrorCode::CheckpointQuotaExceeded`] over the quota; the store's code when it fails.
    pub(crate) async fn check_checkpoint_quota(
        &self,
        session_key: &str,
        turn_id: &str,
        checkpoint_id: &str,
        referenced: &HashMap<String, u64>,
    ) -> Result<(), TurnFailure> {
        let mut sizes = referenced.clone();
        let others = self
            .store
            .recent_checkpoints(session_key, checkpoint_id, self.config.checkpoints_kept - 1)
            .await
            .map_err(store_failure)?;
        for (_, manifest) in &others {
            for (media_id, size) in manifest_blobs(manifest) {
                sizes.insert(media_id, size);
            }
        }
        let total_bytes: u64 = sizes.values().sum();
        let quota_bytes = self.config.checkpoint_quota_bytes;
        if total_bytes <= quota_bytes {
            return Ok(());
        }
        tracing::warn!(
            session_key,
            total_bytes,
            quota_bytes,
            "refused a checkpoint over the checkpoint quota"
        );
        self.audit_refusal(
            session_key,
            turn_id,
            ErrorCode::CheckpointQuotaExceeded,
            serde_json::json!({"checkpointBytes": total_bytes, "quotaBytes": quota_bytes}),
        )
        .await;
        Err(TurnFailure::new(
            ErrorCode::CheckpointQuotaExceeded,
            format!(
                "the session workspace holds {total_bytes} bytes of files, over the checkpoint quota of {quota_bytes} bytes; \
                 the last good checkpoint is kept: remove large files from the session workspace, or raise --checkpoint-quota-bytes"
            ),
        ))
    }

    /// Lists `blobs` as collectable blobs, writes them, then runs `commit` (which makes
    /// something refer to them), all under the shared side of the collection lock, so the
    /// blobs cannot be collected before `commit` refers to them. A blob nothing refers to
    /// afterwards (`commit` failed or wrote nothing) is collected by a later run.
    ///
    /// # Errors
    /// The media store's code (`MEDIA_QUOTA_EXCEEDED` when it is full), or the store's.
    pub(crate) async fn write_blobs_then<T>(
        &self,
        session_key: &str,
        blobs: Vec<NewBlob>,
        commit: impl std::future::Future<Output = Result<T, StoreError>>,
    ) -> Result<T, TurnFailure> {
        let writing = self.hold().await.map_err(store_failure)?;
        let committed = async {
            self.store_blobs(session_key, blobs)
                .await
                .map_err(WriteError::into_failure)?;
            commit.await.map_err(store_failure)
        }
        .await;
        writing.release().await;
        committed
    }

    /// Stores a checkpoint: lists `new_blobs` as checkpoint blobs, writes them, commits the
    /// checkpoint as the session's latest, then applies retention and collects. On failure
    /// nothing is committed, the blobs already written are collected, and the session keeps
    /// its last good checkpoint; a media quota refusal is audited.
    ///
    /// # Errors
    /// `MEDIA_QUOTA_EXCEEDED` when the media store is full; the store's or media store's code
    /// otherwise.
    pub(crate) async fn commit_checkpoint(
        &self,
        session_key: &str,
        turn_id: &str,
        checkpoint_id: &str,
        manifest: &CheckpointManifest,
        new_blobs: Vec<NewBlob>,
        fence: Option<&Fence>,
    ) -> Result<(), TurnFailure> {
        let writer = fence.map(|fence| TurnWriter { fence, turn_id });
        let written = match self.hold().await {
            Ok(writing) => {
                let written = self
                    .write_checkpoint(session_key, checkpoint_id, manifest, new_blobs, writer)
                    .await;
                writing.release().await;
                written
            }
            Err(error) => Err(WriteError::Store(error)),
        };
        match written {
            Ok(false) => {
                // The turn no longer runs under its lease: what it sent is not the session's.
                self.collect_session(session_key, GcTrigger::RefusedCheckpoint)
                    .await;
                Err(TurnFailure::new(
                    ErrorCode::TurnFenced,
                    "the turn is no longer running; its checkpoint was not stored",
                ))
            }
            Ok(true) => {
                self.collect_session(session_key, GcTrigger::Checkpoint)
                    .await;
                Ok(())
            }
            Err(error) => {
                let failure = match error {
                    WriteError::Media(error @ MediaError::QuotaExceeded { .. }) => {
                        tracing::warn!(session_key, error = %error, "refused a checkpoint over the media quota");
                        let failure = TurnFailure::new(
                            error.code(),
                            format!(
                                "{error}; the last good checkpoint is kept: raise --media-quota-bytes or remove media"
                            ),
                        );
                        self.audit_refusal(
                            session_key,
                            turn_id,
                            error.code(),
                            serde_json::json!({"quotaBytes": self.media.quota_bytes()}),
                        )
                        .await;
                        failure
                    }
                    WriteError::Media(error) => {
                        tracing::error!(session_key, error = ?error, "cannot store a checkpoint blob");
                        TurnFailure::new(error.code(), error.to_string())
                    }
                    other @ (WriteError::Store(_) | WriteError::OverShare { .. }) => {
                        other.into_failure()
                    }
                };
                self.collect_session(session_key, GcTrigger::RefusedCheckpoint)
                    .await;
                Err(failure)
            }
        }
    }

    /// Applies retention to every session and collects; run once at Gateway start, before any
    /// turn is dispatched.
    ///
    /// # Errors
    /// The store's error when the sessions cannot be listed.
    pub(crate) async fn collect_all(&self) -> Result<GcSummary, StoreError> {
        let sessions = self.store.sessions().await?;
        let _deleting = self.lock.write().await;
        let mut summary = GcSummary::default();
        for session in &sessions {
            summary.pruned_checkpoints += self
                .store
                .prune_checkpoints(&session.session_key, self.config.checkpoints_kept)
                .await?;
        }
        self.sweep_held(&mut summary).await?;
        self.audit_summary(GcTrigger::Start, None, &summary).await;
        Ok(summary)
    }

    /// Applies retention to `session_key` and collects; failures are logged and audited, never
    /// returned (the checkpoint is already committed, and the next collection tries again).
    pub(crate) async fn collect_session(&self, session_key: &str, trigger: GcTrigger) -> GcSummary {
        let _deleting = self.lock.write().await;
        let mut summary = GcSummary::default();
        let outcome = async {
            summary.pruned_checkpoints = self
                .store
                .prune_checkpoints(session_key, self.config.checkpoints_kept)
                .await?;
            self.sweep_held(&mut summary).await
        }
        .await;
        if let Err(error) = outcome {
            tracing::error!(session_key, error = %error, "cannot collect checkpoint blobs");
            summary.failed_blobs += 1;
        }
        self.audit_summary(trigger, Some(session_key), &summary)
            .await;
        summary
    }

    /// Writes the blobs, then saves the checkpoint (under `writer`'s fence when given); returns
    /// whether it was saved.
    async fn write_checkpoint(
        &self,
        session_key: &str,
        checkpoint_id: &str,
        manifest: &CheckpointManifest,
        new_blobs: Vec<NewBlob>,
        writer: Option<TurnWriter<'_>>,
    ) -> Result<bool, WriteError> {
        self.store_blobs(session_key, new_blobs).await?;
        self.store
            .save_checkpoint(session_key, checkpoint_id, manifest, now_ms(), writer)
            .await
            .map_err(WriteError::Store)
    }

    /// Lists `blobs` as collectable checkpoint blobs, then writes them: listed first, so a crash
    /// in between never leaves a blob nobody knows of. Must run under the shared side of the
    /// lock.
    async fn store_blobs(&self, session_key: &str, blobs: Vec<NewBlob>) -> Result<(), WriteError> {
        let listed: Vec<CheckpointBlob> = blobs
            .iter()
            .map(|blob| CheckpointBlob {
                media_id: blob.media_id.clone(),
                size_bytes: blob.bytes.len() as u64,
            })
            .collect();
        self.charge_session(session_key, &listed).await?;
        self.store
            .register_checkpoint_blobs(&listed, now_ms())
            .await
            .map_err(WriteError::Store)?;
        for blob in blobs {
            let record = self
                .media
                .put(blob.bytes, "application/octet-stream", None)
                .await
                .map_err(WriteError::Media)?;
            debug_assert_eq!(record.id, blob.media_id, "a blob is stored under its id");
        }
        Ok(())
    }

    /// Runs [`Self::sweep`] under the store's side of the collection lock, when no replica
    /// holds it for writing; otherwise leaves the blobs to a later collection. Must run under
    /// the exclusive side of the local lock.
    async fn sweep_held(&self, summary: &mut GcSummary) -> Result<(), StoreError> {
        let Some(mut held) = self.store.try_hold_media_collection().await? else {
            tracing::debug!("another replica stores media now; collection is left for later");
            return Ok(());
        };
        let swept = self.sweep(summary, held.as_mut()).await;
        held.release().await;
        swept
    }

    /// Deletes every listed blob nothing refers to: the blob first, then its list row, while
    /// `held` (the store's side of the collection lock) still holds. Must run under the
    /// exclusive side of the local lock.
    async fn sweep(
        &self,
        summary: &mut GcSummary,
        held: &mut dyn MediaHold,
    ) -> Result<(), StoreError> {
        for blob in self.store.checkpoint_blob_garbage().await? {
            if !held.still_held().await {
                tracing::warn!("lost the media collection lock; the rest is left for later");
                break;
            }
            match self.media.delete(&blob.media_id).await {
                Ok(deleted) => {
                    self.store.forget_checkpoint_blob(&blob.media_id).await?;
                    if let Some(size) = deleted {
                        summary.deleted_blobs += 1;
                        summary.deleted_bytes += size;
                    }
                }
                Err(error) => {
                    tracing::error!(media_id = %blob.media_id, error = ?error, "cannot delete a checkpoint blob");
                    summary.failed_blobs += 1;
                }
            }
        }
        Ok(())
    }

    async fn audit_summary(
        &self,
        trigger: GcTrigger,
        session_key: Option<&str>,
        summary: &GcSummary,
    ) {
        if *summary == GcSummary::default() {
            return;
        }
        let outcome = match summary.failed_blobs {
            0 => "succeeded",
            _ => "failed",
        };
        let mut details = serde_json::json!({
            "trigger": trigger.as_str(),
            "prunedCheckpoints": summary.pruned_checkpoints,
            "deletedBlobs": summary.deleted_blobs,
            "deletedBytes": summary.deleted_bytes,
            "failedBlobs": summary.failed_blobs,
        });
        if let Some(session_key) = session_key {
            details["sessionKey"] = serde_json::Value::from(session_key);
        }
        tracing::info!(
            trigger = trigger.as_str(),
            pruned_checkpoints = summary.pruned_checkpoints,
            deleted_blobs = summary.deleted_blobs,
            deleted_bytes = summary.deleted_bytes,
            failed_blobs = summary.failed_blobs,
            "collected checkpoint blobs"
        );
        self.audit
            .record("gateway", "media.gc", outcome, None, details)
            .await;
    }

    async fn audit_refusal(
        &self,
        session_key: &str,
        turn_id: &str,
        code: ErrorCode,
        mut details: serde_json::Value,
    ) {
        details["sessionKey"] = serde_json::Value::from(session_key);
        details["turnId"] = serde_json::Value::from(turn_id);
        self.audit
            .record(
                "gateway",
                "checkpoint.store",
                "denied",
                Some(code.as_str()),
                details,
            )
            .await;
    }
}

/// Returns media id → size of every entry of a stored manifest that refers to a blob.
pub(crate) fn manifest_blobs(manifest: &CheckpointManifest) -> HashMap<String, u64> {
    manifest
        .entries
        .iter()
        .filter_map(|entry| Some((entry.content.media_id.clone()?, entry.size)))
        .collect()
}

/// How many times [`MediaRetention::release_upload`] tries to take the store's media lock.
const RELEASE_ATTEMPTS: u32 = 50;

/// The pause between two of those attempts.
const RELEASE_RETRY: std::time::Duration = std::time::Duration::from_millis(100);

/// Why an upload could not be released.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ReleaseError {
    /// Another replica stored media through every attempt to take the media lock; retry.
    #[error("media is being stored on another replica; retry")]
    Busy,
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why writing a checkpoint failed.
enum WriteError {
    Media(MediaError),
    Store(StoreError),
    /// The session's creator would pass its media share.
    OverShare {
        used_bytes: u64,
        new_bytes: u64,
        quota_bytes: u64,
    },
}

impl WriteError {
    fn into_failure(self) -> TurnFailure {
        match self {
            WriteError::Media(error) => TurnFailure::new(error.code(), error.to_string()),
            WriteError::Store(error) => store_failure(error),
            WriteError::OverShare {
                used_bytes,
                new_bytes,
                quota_bytes,
            } => {
                tracing::warn!(
                    used_bytes,
                    new_bytes,
                    quota_bytes,
                    "refused media of a session over its creator's media share"
                );
                TurnFailure::new(
                    ErrorCode::KeyMediaQuotaExceeded,
                    format!(
                        "the key that created this session has {used_bytes} bytes of media, and {new_bytes} more would pass its media share of {quota_bytes} bytes; \
                         delete uploads it no longer needs (DELETE /v1/media/{{mediaId}}) or ask an operator for a larger share"
                    ),
                )
            }
        }
    }
}

fn store_failure(error: StoreError) -> TurnFailure {
    TurnFailure::new(error.code(), error.to_string())
}

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
