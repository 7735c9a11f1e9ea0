//! The worktrees of `worktree` sessions: the tree the Gateway keeps for a session, which every
//! turn's result is merged into, and which people and tools read and edit over HTTP.
//!
//! A worktree is a series of immutable versions in the store (the newest is the head), each a
//! manifest whose file contents are blobs in the media store, the same content-addressed form
//! as a checkpoint; so it lives wherever the Gateway's state does (SQLite and local media, or
//! PostgreSQL and S3), and applying a result is one store transaction: never half-applied.
//!
//! The flow of a turn (see [`crate::node_runtime`]):
//! 1. dispatch: the turn waits up to [`RECONCILE_WAIT`] for the previous result to be applied
//!    (`WORKSPACE_RECONCILING` otherwise); at the session's first dispatch the head becomes
//!    the merge base and, when it holds anything, is sent as the execution workspace's
//!    inventory (a checkpoint the node restores);
//! 2. turn end: the worker's report is accepted as a checkpoint (with one more rule: every link
//!    stays inside the tree) and then staged as the turn's result under
//!    `refs/gatehouse/worker-results/<turn id>`, before the turn ends;
//! 3. after the turn: the result is merged into the head ([`merge`]: three-way, keep-local,
//!    base = the last accepted manifest), written as the next version with the result as the new
//!    base, and its outcome (applied paths, conflicts) recorded; conflicts are published as
//!    `workspace.conflict`;
//! 4. a Gateway that stopped between staging and applying applies every staged result at its
//!    next start, before it interrupts the turns that were running, and never replays a turn.

pub(crate) mod merge;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::records::EventPayload;
use gatehouse_store::records::ResultApply;
use gatehouse_store::records::ResultState;
use gatehouse_store::records::StoredManifest;
use gatehouse_store::records::WorkspaceConflict;
use gatehouse_store::records::WorktreeResult;

use crate::turns::events::EventHub;
use crate::turns::runtime::TurnFailure;

/// How long a turn of a `worktree` session waits for the previous turn's result to be applied
/// before it fails with `WORKSPACE_RECONCILING`.
pub(crate) const RECONCILE_WAIT: Duration = Duration::from_secs(15);

/// The namespace of staged results: a result is kept as `<namespace><turn id>`.
pub(crate) const RESULTS_NAMESPACE: &str = "refs/gatehouse/worker-results/";

/// The most versions a worktree keeps: its first, and its newest ones up to this many; older
/// ones (and the results they merged) are forgotten after each edit and apply, so a session's
/// history cannot grow without bound.
pub(crate) const MAX_WORKTREE_VERSIONS: i64 = 1000;

/// Forgets the worktree versions of `session_key` past [`MAX_WORKTREE_VERSIONS`] (logged on
/// failure: the next edit or apply tries again).
pub(crate) async fn prune(store: &dyn Store, session_key: &str) {
    match store
        .prune_worktree_versions(session_key, MAX_WORKTREE_VERSIONS)
        .await
    {
        Ok(0) => {}
        Ok(pruned) => tracing::info!(session_key, pruned, "forgot the oldest worktree versions"),
        Err(error) => {
            tracing::warn!(session_key, error = %error, "cannot forget old worktree versions");
        }
    }
}

/// How often an apply that lost a race with a Gateway-side edit computes the merge again.
const APPLY_ATTEMPTS: usize = 16;

/// Returns the name a turn's result is staged under.
pub(crate) fn staged_ref(turn_id: &str) -> String {
    format!("{RESULTS_NAMESPACE}{turn_id}")
}

/// Keeps the worktrees of `worktree` sessions.
pub(crate) struct WorktreeService {
    store: Arc<dyn Store>,
    hub: Arc<EventHub>,
    /// A pause before each apply: a hidden test hook (`GATEHOUSE_TEST_WORKTREE_APPLY_DELAY_MS`)
    /// that holds results staged long enough to observe back-pressure and recovery.
    apply_delay: Duration,
    /// One apply at a time per session.
    applying: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// Woken after every apply.
    applied: tokio::sync::Notify,
}

impl WorktreeService {
    /// Returns the service over the Gateway's store and event hub.
    pub(crate) fn new(store: Arc<dyn Store>, hub: Arc<EventHub>, apply_delay: Duration) -> Self {
        Self {
            store,
            hub,
            apply_delay,
            applying: parking_lot::Mutex::new(HashMap::new()),
            applied: tokio::sync::Notify::new(),
        }
    }

    fn session_lock(&self, session_key: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut applying = self.applying.lock();
        applying.retain(|_, lock| Arc::strong_count(lock) > 1);
        Arc::clone(applying.entry(session_key.to_owned()).or_default())
    }

    /// Stages a turn's accepted result (the tree of its checkpoint) and starts applying it in
    /// the background; the turn ends once it is staged.
    ///
    /// # Errors
    /// The store's code when the result cannot be stored: the turn fails.
    pub(crate) async fn stage(
        self: &Arc<Self>,
        session_key: &str,
        turn_id: &str,
        manifest: &StoredManifest,
        fence: &gatehouse_store::cluster::Fence,
    ) -> Result<(), TurnFailure> {
        let staged = self
            .store
            .stage_worktree_result(
                turn_id,
                session_key,
                &staged_ref(turn_id),
                manifest,
                gatehouse_protocol::time::now_ms(),
                Some(fence),
            )
            .await
            .map_err(store_failure)?;
        if !staged {
            return Err(TurnFailure::new(
                gatehouse_protocol::error::ErrorCode::TurnFenced,
                "the turn is no longer running; its worktree result was not staged",
            ));
        }
        tracing::info!(session_key, turn_id, "staged a worktree result");
        self.spawn_apply(session_key);
        Ok(())
    }

    fn spawn_apply(self: &Arc<Self>, session_key: &str) {
        let this = Arc::clone(self);
        let session_key = session_key.to_owned();
        tokio::spawn(async move {
            if let Err(error) = this.apply_staged(&session_key).await {
                tracing::error!(session_key, error = %error, "cannot apply a staged worktree result; it stays staged and is applied at the next turn or start");
            }
        });
    }

    /// Applies every staged result of `session_key`, oldest first.
    ///
    /// # Errors
    /// Store failures; what is not applied stays staged.
    pub(crate) async fn apply_staged(&self, session_key: &str) -> Result<(), StoreError> {
        let lock = self.session_lock(session_key);
        let _one_at_a_time = lock.lock().await;
        if !self.apply_delay.is_zero() {
            tokio::time::sleep(self.apply_delay).await;
        }
        let outcome = async {
            for result in self
                .store
                .staged_worktree_results(Some(session_key))
                .await?
            {
                self.apply_one(&result).await?;
            }
            Ok(())
        }
        .await;
        self.applied.notify_waiters();
        outcome
    }

    /// Merges one staged result into the head and commits it; computes the merge again when a
    /// Gateway-side edit moved the head meanwhile.
    async fn apply_one(&self, result: &WorktreeResult) -> Result<(), StoreError> {
        let session_key = result.session_key.as_str();
        for _ in 0..APPLY_ATTEMPTS {
            let head = self
                .store
                .worktree_version(session_key, None)
                .await?
                .ok_or(StoreError::NotFound { what: "worktree" })?;
            let base = self
                .store
                .worktree_base(session_key)
                .await?
                .unwrap_or_default();
            let merged = merge::merge(&base, &head.manifest, &result.manifest);
            let apply = ResultApply {
                turn_id: result.turn_id.clone(),
                session_key: session_key.to_owned(),
                expected_head: head.version,
                merged: merged.manifest,
                applied: merged.applied,
                conflicts: merged.conflicts,
            };
            if self
                .store
                .apply_worktree_result(&apply, gatehouse_protocol::time::now_ms())
                .await?
            {
                tracing::info!(
                    session_key,
                    turn_id = %result.turn_id,
                    version = head.version + 1,
                    applied = apply.applied.len(),
                    conflicts = apply.conflicts.len(),
                    "applied a worktree result"
                );
                if !apply.conflicts.is_empty() {
                    self.publish_conflict(result, apply.conflicts).await?;
                }
                prune(self.store.as_ref(), session_key).await;
                return Ok(());
            }
            let now = self.store.worktree_result(&result.turn_id).await?;
            if now.is_none_or(|now| now.state != ResultState::Staged) {
                return Ok(());
            }
        }
        tracing::warn!(
            session_key,
            turn_id = %result.turn_id,
            "the worktree kept changing while a result was applied; it stays staged and is applied at the next turn"
        );
        Ok(())
    }

    async fn publish_conflict(
        &self,
        result: &WorktreeResult,
        conflicts: Vec<String>,
    ) -> Result<(), StoreError> {
        let event = WorkspaceConflict {
            turn_id: result.turn_id.clone(),
            conflicts,
            staged_ref: result.staged_ref.clone(),
        };
        self.store
            .append_event(
                &result.session_key,
                WorkspaceConflict::KIND,
                &event.to_payload_json(),
                gatehouse_protocol::time::now_ms(),
            )
            .await?;
        self.hub.sync(&result.session_key).await;
        Ok(())
    }

    /// Applies every result a Gateway that stopped left staged: run at start, before the turns
    /// that were running are marked interrupted. A result that still cannot be applied is
    /// logged and stays staged.
    pub(crate) async fn recover(&self) {
        let staged = match self.store.staged_worktree_results(None).await {
            Ok(staged) => staged,
            Err(error) => {
                tracing::error!(error = %error, "cannot read the staged worktree results");
                return;
            }
        };
        let mut sessions: Vec<String> = staged
            .into_iter()
            .map(|result| result.session_key)
            .collect();
        sessions.dedup();
        for session_key in sessions {
            tracing::info!(
                session_key,
                "applying a worktree result staged before the restart"
            );
            if let Err(error) = self.apply_staged(&session_key).await {
                tracing::error!(session_key, error = %error, "cannot apply a staged worktree result at start");
            }
        }
    }

    /// Waits until no result of `session_key` is staged, at most `wait`.
    ///
    /// # Errors
    /// `WORKSPACE_RECONCILING` when one still is; the store's code when it fails.
    pub(crate) async fn wait_reconciled(
        self: &Arc<Self>,
        session_key: &str,
        wait: Duration,
    ) -> Result<(), TurnFailure> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let applied = self.applied.notified();
            let staged = self
                .store
                .staged_worktree_results(Some(session_key))
                .await
                .map_err(store_failure)?;
            if staged.is_empty() {
                return Ok(());
            }
            // A result whose apply failed earlier is tried again.
            if self.session_lock(session_key).try_lock().is_ok() {
                self.spawn_apply(session_key);
            }
            tokio::select! {
                () = applied => {}
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
                () = tokio::time::sleep_until(deadline) => {
                    return Err(TurnFailure::new(
                        ErrorCode::WorkspaceReconciling,
                        format!(
                            "the previous turn's workspace result is still reconciling after {}s; send the message again later",
                            wait.as_secs()
                        ),
                    ));
                }
            }
        }
    }

    /// At the first dispatch of a `worktree` session (no merge base yet): returns the head,
    /// which becomes the base once the caller has made it the workspace's inventory. `None`
    /// after the first dispatch.
    ///
    /// # Errors
    /// The store's code.
    pub(crate) async fn first_dispatch(
        &self,
        session_key: &str,
    ) -> Result<Option<StoredManifest>, TurnFailure> {
        if self
            .store
            .worktree_base(session_key)
            .await
            .map_err(store_failure)?
            .is_some()
        {
            return Ok(None);
        }
        let head = self
            .store
            .worktree_version(session_key, None)
            .await
            .map_err(store_failure)?;
        Ok(Some(head.map(|head| head.manifest).unwrap_or_default()))
    }

    /// Records `base` as the merge base: the tree the execution workspace now holds.
    ///
    /// # Errors
    /// The store's code.
    pub(crate) async fn set_base(
        &self,
        session_key: &str,
        base: &StoredManifest,
    ) -> Result<(), TurnFailure> {
        self.store
            .set_worktree_base(session_key, base)
            .await
            .map_err(store_failure)
    }
}

/// Returns the turn failure of a store error.
fn store_failure(error: StoreError) -> TurnFailure {
    TurnFailure::new(error.code(), error.to_string())
}
