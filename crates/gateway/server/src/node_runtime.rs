//! [`NodeRuntime`]: runs turns on the enrolled Harness node (`agent.turn`), where native workers
//! call the model with the Harness's credential and run the native tools. The Gateway never calls
//! a model itself: without a node serving `agent.turn`, the turn fails.
//!
//! Ownership: a session is bound to one node, placed before its first turn is claimed (see
//! [`crate::cluster::dispatch`]), which also decides how long a turn waits for an absent node
//! and when a session moves. Its turns, and so its history and checkpoints, go only to that
//! node: a turn claimed here whose node went away meanwhile waits [`DEFAULT_NODE_GRACE`] for it
//! and then fails with `DEPENDENCY_UNAVAILABLE`; it is never sent to another node. Only a move
//! (`POST /v1/sessions/{key}/move`, or `--move-sessions-after`) changes the binding.
//! A node may commit only `assistant` and `tool` messages, only for the turn its own
//! `agent.turn` invoke runs, and its lines are bounded (see [`crate::link::progress`]).

use std::sync::Arc;
use std::time::Duration;

use std::collections::HashMap;

use base64::Engine;
use bytes::Bytes;
use futures_util::StreamExt;
use futures_util::TryStreamExt;
use gatehouse_media::MediaStore;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_OMITTED;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_OMITTED_BYTES;
use gatehouse_protocol::checkpoint::MAX_REPORTED_PATH_BYTES;
use gatehouse_protocol::checkpoint::ManifestError;
use gatehouse_protocol::checkpoint::is_git_path;
use gatehouse_protocol::checkpoint::truncated;
use gatehouse_protocol::checkpoint::validate_contained_links;
use gatehouse_protocol::checkpoint::validate_manifest;
use gatehouse_protocol::checkpoint::validate_omitted;
use gatehouse_protocol::checkpoint::validate_structure;
use gatehouse_protocol::command::AgentSessionRestore;
use gatehouse_protocol::command::AgentSessionSource;
use gatehouse_protocol::command::AgentSessionStop;
use gatehouse_protocol::command::AgentTurn;
use gatehouse_protocol::command::Command;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::invoke::MAX_PROGRESS_LINE_BYTES;
use gatehouse_protocol::worker::AgentSessionRestoreParams;
use gatehouse_protocol::worker::AgentSessionSourceParams;
use gatehouse_protocol::worker::AgentSessionSourceResult;
use gatehouse_protocol::worker::AgentSessionStopParams;
use gatehouse_protocol::worker::AgentTurnParams;
use gatehouse_protocol::worker::CheckpointEntry;
use gatehouse_protocol::worker::HistoryMessage;
use gatehouse_protocol::worker::Inline;
use gatehouse_protocol::worker::OmittedPaths;
use gatehouse_protocol::worker::SourceOverlay;
use gatehouse_protocol::worker::WorkerEvent;
use gatehouse_store::Store;
use gatehouse_store::cluster::Fence;
use gatehouse_store::records::Blob;
use gatehouse_store::records::CheckpointManifest;
use gatehouse_store::records::NewWorktreeVersion;
use gatehouse_store::records::RepositorySpec;
use gatehouse_store::records::SessionWorkspace;
use gatehouse_store::records::StoredEntry;
use gatehouse_store::records::StoredManifest;
use gatehouse_store::records::WorkspaceSource;
use gatehouse_store::records::WorktreeOrigin;
use sha2::Digest;

use crate::audit::Audit;
use crate::audit::AuditRow;
use crate::audit::Limited;
use crate::link::registry::InvokeError;
use crate::link::registry::NodeConnection;
use crate::link::registry::NodeRegistry;
use crate::retention::MediaRetention;
use crate::retention::NewBlob;
use crate::turns::runtime::Placement;
use crate::turns::runtime::RUNTIME_ROLES;
use crate::turns::runtime::TurnFailure;
use crate::turns::runtime::TurnInput;
use crate::turns::runtime::TurnReply;
use crate::turns::runtime::TurnRuntime;
use crate::turns::runtime::TurnSink;

/// The longest a native turn may run before the Gateway gives up on it.
pub(crate) const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(3600);

use crate::cluster::dispatch::DEFAULT_NODE_GRACE;

/// How long rebuilding a lost session workspace may take.
const RESTORE_TIMEOUT: Duration = Duration::from_secs(120);

/// The most prior messages sent with a turn for context.
pub(crate) const MAX_HISTORY_MESSAGES: usize = 200;

/// Runs turns on the node that serves `agent.turn`.
pub(crate) struct NodeRuntime {
    registry: Arc<NodeRegistry>,
    store: Arc<dyn Store>,
    media: Arc<MediaStore>,
    tools: Arc<crate::tools::GatewayTools>,
    audit: Audit,
    retention: Arc<MediaRetention>,
    turn_timeout: Duration,
    skills: Option<Arc<crate::skills::SkillsService>>,
    /// The worktrees of `worktree` sessions, which every result of theirs is merged into.
    worktrees: Option<Arc<crate::worktree::WorktreeService>>,
}

impl NodeRuntime {
    /// Returns a runtime over the connected nodes of `registry`, whose checkpoints are bounded
    /// and collected by `retention`.
    pub(crate) fn new(
        registry: Arc<NodeRegistry>,
        store: Arc<dyn Store>,
        media: Arc<MediaStore>,
        tools: Arc<crate::tools::GatewayTools>,
        audit: Audit,
        retention: Arc<MediaRetention>,
        turn_timeout: Duration,
    ) -> Self {
        Self {
            registry,
            store,
            media,
            tools,
            audit,
            retention,
            turn_timeout,
            skills: None,
            worktrees: None,
        }
    }

    /// Merges the results of `worktree` sessions into their worktrees.
    #[must_use]
    pub(crate) fn with_worktrees(
        mut self,
        worktrees: Arc<crate::worktree::WorktreeService>,
    ) -> Self {
        self.worktrees = Some(worktrees);
        self
    }

    /// Gives native turns the skills prompt block and copies of the Gateway's skills.
    #[must_use]
    pub(crate) fn with_skills(mut self, skills: Arc<crate::skills::SkillsService>) -> Self {
        self.skills = Some(skills);
        self
    }

    /// Stores a worker's workspace report as an immutable checkpoint: changed contents go to the
    /// media store, unchanged ones keep the media ids of the session's latest checkpoint, and
    /// the manifest's blake3 is the checkpoint id. Nothing is written before the checkpoint
    /// quota is checked; on success it becomes the session's latest accepted checkpoint, and on
    /// any failure the latest stays what it was (see [`crate::retention`]). It is saved only
    /// while the turn of `params` runs under `fence`.
    ///
    /// A manifest that breaks the rules of [`validate_manifest`] is refused whole
    /// (`CHECKPOINT_INVALID`, audited) before anything is decoded or written.
    async fn accept_checkpoint(
        &self,
        node: &NodeConnection,
        params: &AgentTurnParams,
        entries: Vec<CheckpointEntry>,
        mut omitted: OmittedPaths,
        worktree: Option<&Arc<crate::worktree::WorktreeService>>,
        fence: &Fence,
    ) -> Result<(), TurnFailure> {
        let (session_key, turn_id) = (params.session_key.as_str(), params.turn_id.as_str());
        let checked = validate_manifest(&entries)
            .and_then(|()| validate_omitted(&omitted))
            .and_then(|()| match worktree {
                // A worktree is read by people and tools outside the sandbox: no link may lead out.
                Some(_) => validate_contained_links(&entries),
                None => Ok(()),
            });
        if let Err(error) = checked {
            return Err(self
                .refuse_checkpoint(node, session_key, CheckpointStage::Report, &error)
                .await);
        }
        let latest = self
            .store
            .latest_checkpoint(session_key)
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
        // (path, sha256) → (media id, size), as the Gateway recorded them.
        let mut known: HashMap<(String, String), (String, u64)> = HashMap::new();
        for entry in latest
            .into_iter()
            .flat_map(|(_, manifest)| manifest.entries)
        {
            if let (Some(sha256), Some(media_id)) = (entry.sha256, entry.content.media_id) {
                known.insert((entry.path, sha256), (media_id, entry.size));
            }
        }
        let mut stored = Vec::with_capacity(entries.len());
        let mut new_blobs: HashMap<String, Bytes> = HashMap::new();
        let mut referenced: HashMap<String, u64> = HashMap::new();
        for mut entry in entries {
            let blob = match (entry.content.base64.take(), &entry.sha256) {
                (Some(content), _) => {
                    let bytes = decode_content(content, entry.sha256.as_deref()).await?;
                    let size = bytes.len() as u64;
                    let media_id = media_id_of(bytes.clone()).await?;
                    new_blobs.insert(media_id.clone(), bytes);
                    Some((media_id, size))
                }
                (None, Some(sha256)) => match known.get(&(entry.path.clone(), sha256.clone())) {
                    Some(known) => Some(known.clone()),
                    None => {
                        // Left out like a file past the bound, so an earlier tree's version
                        // stands for it rather than its absence reading as a deletion.
                        tracing::warn!(session_key, path = %entry.path, "a checkpoint file has no stored content; leaving it out");
                        add_omitted(&mut omitted, entry.path);
                        continue;
                    }
                },
                (None, None) => None,
            };
            let (media_id, size) = match blob {
                Some((media_id, size)) => {
                    referenced.insert(media_id.clone(), size);
                    (Some(media_id), size)
                }
                None => (None, entry.size),
            };
            stored.push(stored_entry(entry, media_id, size));
        }
        let manifest = CheckpointManifest::report(stored, omitted);
        // A worktree's result is judged whole before anything is committed.
        let staged = match worktree {
            Some(worktrees) => Some((
                worktrees,
                self.worktree_result(node, session_key, &manifest).await?,
            )),
            None => None,
        };
        let checkpoint_id = checkpoint_id(&manifest)?;
        self.retention
            .check_checkpoint_quota(session_key, turn_id, &checkpoint_id, &referenced)
            .await?;
        let new_blobs = new_blobs
            .into_iter()
            .map(|(media_id, bytes)| NewBlob { media_id, bytes })
            .collect();
        self.retention
            .commit_checkpoint(
                session_key,
                turn_id,
                &checkpoint_id,
                &manifest,
                new_blobs,
                Some(fence),
            )
            .await?;
        match staged {
            Some((worktrees, result)) => {
                worktrees.stage(session_key, turn_id, &result, fence).await
            }
            None => Ok(()),
        }
    }

    /// Returns a `worktree` session's result of a turn from its accepted checkpoint
    /// `manifest`: without `.git` paths, and with the base's entries for what the scan left out
    /// (its omitted list). The whole result must pass the manifest rules and
    /// [`validate_contained_links`] again, since the entries taken from the base were not judged
    /// together with the node's.
    ///
    /// # Errors
    /// `CHECKPOINT_INVALID` (audited) for a result the rules refuse; the store's code when the
    /// base cannot be read.
    async fn worktree_result(
        &self,
        node: &NodeConnection,
        session_key: &str,
        manifest: &CheckpointManifest,
    ) -> Result<StoredManifest, TurnFailure> {
        let (mut result, omitted) = (manifest.to_tree(), &manifest.omitted);
        // A repository the agent made inside its workspace stays there: a worktree holds no
        // `.git` (whose configuration a tool reading the tree would run).
        result.entries.retain(|entry| !is_git_path(&entry.path));
        if omitted.is_empty() {
            return Ok(result);
        }
        // What the scan left out was not deleted by the agent: the base's version stays.
        self.keep_base_for_omitted(session_key, &mut result, omitted)
            .await?;
        // The size bounds are the merge's to judge: past them it applies nothing and reports
        // every change as a conflict, and the turn still completes.
        if let Err(error) = validate_structure(&result.entries)
            .and_then(|()| validate_contained_links(&result.entries))
        {
            return Err(self
                .refuse_checkpoint(node, session_key, CheckpointStage::Report, &error)
                .await);
        }
        Ok(result)
    }

    /// Adds to `tree` the worktree base's entries that stand for what `omitted` names (see
    /// [`crate::worktree::merge::keep_omitted`]).
    ///
    /// # Errors
    /// The store's code when the base cannot be read.
    async fn keep_base_for_omitted(
        &self,
        session_key: &str,
        tree: &mut StoredManifest,
        omitted: &OmittedPaths,
    ) -> Result<(), TurnFailure> {
        let base = self
            .store
            .worktree_base(session_key)
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?
            .unwrap_or_default();
        crate::worktree::merge::keep_omitted(tree, &base, omitted);
        Ok(())
    }

    /// Prepares the session workspace from its source before a turn:
    /// - `worktree`: waits for the previous result to be applied; at the first dispatch makes
    ///   the worktree's head the merge base and, when it holds anything, the workspace's
    ///   inventory (committed as the session's checkpoint, which the node restores into the
    ///   missing workspace); with `from`, the node fetches the repository instead and the
    ///   tree it wrote becomes the worktree's first version and the base;
    /// - `repository`: at the first dispatch the node fetches the ref and the Gateway pins the
    ///   commit it resolved to; every later turn requires the workspace, and a lost one is
    ///   rebuilt from the last checkpoint or, before the first, from the pinned commit.
    async fn prepare_source(
        &self,
        node: &Arc<NodeConnection>,
        input: &TurnInput,
        fence: &Fence,
    ) -> Result<Prepared<'_>, TurnFailure> {
        let store_failure =
            |error: gatehouse_store::StoreError| TurnFailure::new(error.code(), error.to_string());
        let workspace = self
            .store
            .session_workspace(&input.session_key)
            .await
            .map_err(store_failure)?
            .unwrap_or(SessionWorkspace {
                source: WorkspaceSource::Empty,
                commit: None,
            });
        let worktrees = match (&workspace.source, &self.worktrees) {
            (WorkspaceSource::Worktree { .. }, Some(worktrees)) => Some(worktrees),
            _ => None,
        };
        let mut prepared = Prepared {
            worktree: worktrees,
            repository: None,
        };
        if let Some(worktrees) = worktrees {
            worktrees
                .wait_reconciled(&input.session_key, crate::worktree::RECONCILE_WAIT)
                .await?;
        }
        let Some(repository) = workspace.source.repository() else {
            if let Some(worktrees) = worktrees
                && let Some(inventory) = worktrees.first_dispatch(&input.session_key).await?
            {
                self.send_inventory(input, &inventory, fence).await?;
                worktrees.set_base(&input.session_key, &inventory).await?;
            }
            return Ok(prepared);
        };
        let commit = match workspace.commit {
            Some(commit) => commit,
            None => {
                let report = worktrees.is_some();
                let fetched = self
                    .fetch_source(node, &input.session_key, &repository, None, report, None)
                    .await?;
                let recorded = async {
                    if let Some(worktrees) = worktrees {
                        let tree = self.keep_fetched_tree(input, fetched.entries).await?;
                        worktrees.set_base(&input.session_key, &tree).await?;
                    }
                    self.store
                        .pin_session_commit(&input.session_key, &fetched.commit)
                        .await
                        .map_err(store_failure)
                }
                .await;
                match recorded {
                    Ok(pinned) => {
                        tracing::info!(session_key = %input.session_key, commit = %pinned, "pinned the session's repository commit");
                        pinned
                    }
                    Err(failure) => {
                        // The node wrote a workspace the Gateway did not take: it goes, so the
                        // next turn fetches afresh instead of finding it in the way.
                        self.discard_workspace(node, &input.session_key).await;
                        return Err(failure);
                    }
                }
            }
        };
        prepared.repository = Some((repository, commit));
        Ok(prepared)
    }

    /// Stops the session's worker on `node` and deletes its session directory there (best
    /// effort, logged).
    async fn discard_workspace(&self, node: &Arc<NodeConnection>, session_key: &str) {
        let params = AgentSessionStopParams {
            session_key: session_key.to_owned(),
            discard: true,
        };
        if let Err(error) = self
            .registry
            .invoke::<AgentSessionStop>(node, &params, Duration::from_secs(30))
            .await
        {
            tracing::warn!(session_key, error = %error, "cannot discard a fetched workspace the Gateway did not take");
        }
    }

    /// Commits a worktree's first tree as the session's checkpoint, so the node restores it
    /// into the missing workspace before the turn.
    async fn send_inventory(
        &self,
        input: &TurnInput,
        inventory: &StoredManifest,
        fence: &Fence,
    ) -> Result<(), TurnFailure> {
        if inventory.entries.is_empty() {
            return Ok(());
        }
        let manifest = CheckpointManifest::tree(inventory.clone());
        let checkpoint_id = checkpoint_id(&manifest)?;
        self.retention
            .commit_checkpoint(
                &input.session_key,
                &input.turn_id,
                &checkpoint_id,
                &manifest,
                Vec::new(),
                Some(fence),
            )
            .await
    }

    /// Asks the node to fetch the session's repository into its missing workspace: `commit`
    /// when pinned, else the ref.
    ///
    /// # Errors
    /// The node's code (`SOURCE_UNAVAILABLE` for a repository or ref that cannot be fetched),
    /// `DEPENDENCY_UNAVAILABLE` when the node is gone.
    async fn fetch_source(
        &self,
        node: &Arc<NodeConnection>,
        session_key: &str,
        repository: &RepositorySpec,
        commit: Option<&str>,
        report: bool,
        overlay: Option<SourceOverlay>,
    ) -> Result<AgentSessionSourceResult, TurnFailure> {
        let params = AgentSessionSourceParams {
            session_key: session_key.to_owned(),
            url: repository.url.clone(),
            reference: repository.reference.clone(),
            commit: commit.map(str::to_owned),
            report,
            overlay,
        };
        self.registry
            .invoke::<AgentSessionSource>(node, &params, SOURCE_TIMEOUT)
            .await
            .map_err(|error| match error {
                InvokeError::Remote(error) => TurnFailure::new(&error.code, error.message),
                error @ InvokeError::TooLarge { .. } => {
                    TurnFailure::new(ErrorCode::PayloadTooLarge, error.to_string())
                }
                other => TurnFailure::new(
                    ErrorCode::DependencyUnavailable,
                    format!("the node could not fetch the session's repository: {other}"),
                ),
            })
    }

    /// Keeps the tree a node fetched for a worktree's `from` as the worktree's first version
    /// (its files in the media store) and returns it.
    async fn keep_fetched_tree(
        &self,
        input: &TurnInput,
        entries: Vec<CheckpointEntry>,
    ) -> Result<StoredManifest, TurnFailure> {
        if let Err(error) =
            validate_manifest(&entries).and_then(|()| validate_contained_links(&entries))
        {
            return Err(TurnFailure::new(
                ErrorCode::SourceUnavailable,
                format!("the repository's tree cannot be a worktree: {error}"),
            ));
        }
        let mut blobs = Vec::new();
        let mut tree = StoredManifest::default();
        for mut entry in entries
            .into_iter()
            .filter(|entry| !is_git_path(&entry.path))
        {
            let media_id = match entry.content.base64.take() {
                Some(content) => {
                    let bytes = decode_content(content, entry.sha256.as_deref()).await?;
                    let media_id = media_id_of(bytes.clone()).await?;
                    blobs.push(NewBlob {
                        media_id: media_id.clone(),
                        bytes,
                    });
                    Some(media_id)
                }
                None => None,
            };
            tree.entries.push(entry.with_content(Blob { media_id }));
        }
        let version = NewWorktreeVersion {
            session_key: input.session_key.clone(),
            expected_head: 0,
            origin: WorktreeOrigin::Start,
            actor: String::from("gateway"),
            manifest: tree.clone(),
        };
        let store = Arc::clone(&self.store);
        self.retention
            .write_blobs_then(&input.session_key, blobs, async move {
                store
                    .save_worktree_version(&version, gatehouse_protocol::time::now_ms())
                    .await
            })
            .await?;
        Ok(tree)
    }

    /// Rebuilds the session's lost workspace on `node` from `checkpoint`. When the checkpoint
    /// left paths out (files past its size bound), what stands for them comes from the
    /// session's `earlier` tree:
    /// - a `repository` session's pinned commit: the node fetches it and lays the checkpoint
    ///   over it, so the big files keep the commit's version (the repository must be reachable
    ///   unless the node's source cache still holds the commit);
    /// - a `worktree` session's base: its entries for the omitted paths join the checkpoint's,
    ///   so the next result does not delete them from the worktree;
    /// - an `empty` session has none: the rebuilt workspace lacks them, and that is logged.
    async fn restore(
        &self,
        node: &Arc<NodeConnection>,
        session_key: &str,
        checkpoint: &(String, CheckpointManifest),
        earlier: Earlier<'_>,
    ) -> Result<(), TurnFailure> {
        let (checkpoint_id, manifest) = checkpoint;
        let omitted = manifest.omitted.clone();
        if let Err(error) = validate_omitted(&omitted) {
            return Err(self
                .refuse_checkpoint(node, session_key, CheckpointStage::Restore, &error)
                .await);
        }
        let entries = match earlier {
            Earlier::WorktreeBase if !omitted.is_empty() => {
                let mut tree = manifest.to_tree();
                self.keep_base_for_omitted(session_key, &mut tree, &omitted)
                    .await?;
                match validate_manifest(&tree.entries) {
                    Ok(()) => {
                        self.checkpoint_entries(node, session_key, &tree.entries)
                            .await?
                    }
                    Err(error) => {
                        tracing::warn!(session_key, checkpoint_id = %checkpoint_id, error = %error, "the checkpoint and the worktree base's files it left out do not fit one restore; rebuilding from the checkpoint alone");
                        self.checkpoint_entries(node, session_key, &manifest.entries)
                            .await?
                    }
                }
            }
            _ => {
                self.checkpoint_entries(node, session_key, &manifest.entries)
                    .await?
            }
        };
        match earlier {
            Earlier::Commit((repository, commit)) if !omitted.is_empty() => {
                let overlay = SourceOverlay {
                    checkpoint_id: checkpoint_id.clone(),
                    entries,
                    omitted,
                };
                self.fetch_source(
                    node,
                    session_key,
                    repository,
                    Some(commit),
                    false,
                    Some(overlay),
                )
                .await?;
                tracing::info!(session_key, checkpoint_id = %checkpoint_id, commit, "rebuilt a lost session workspace from its pinned commit and checkpoint");
                return Ok(());
            }
            Earlier::None if !omitted.is_empty() => {
                tracing::warn!(
                    session_key,
                    checkpoint_id = %checkpoint_id,
                    omitted = omitted.paths.len(),
                    truncated = omitted.truncated,
                    "the checkpoint left paths out and the session has no earlier tree to take them from; the rebuilt workspace lacks them"
                );
            }
            _ => {}
        }
        let params = AgentSessionRestoreParams {
            session_key: session_key.to_owned(),
            checkpoint_id: checkpoint_id.clone(),
            entries,
        };
        self.registry
            .invoke::<AgentSessionRestore>(node, &params, RESTORE_TIMEOUT)
            .await
            .map_err(|error| {
                TurnFailure::new(
                    ErrorCode::WorkspaceRestoreFailed,
                    format!("cannot rebuild the session workspace: {error}"),
                )
            })?;
        tracing::info!(session_key, checkpoint_id = %checkpoint_id, "rebuilt a lost session workspace from its checkpoint");
        Ok(())
    }

    /// Returns a stored checkpoint's entries as the node restores them, each file with its
    /// content from the media store, after judging them again (a manifest stored before the
    /// current rules is refused before anything of it is read or sent).
    async fn checkpoint_entries(
        &self,
        node: &NodeConnection,
        session_key: &str,
        stored: &[StoredEntry],
    ) -> Result<Vec<CheckpointEntry>, TurnFailure> {
        if let Err(error) = validate_manifest(stored) {
            return Err(self
                .refuse_checkpoint(node, session_key, CheckpointStage::Restore, &error)
                .await);
        }
        // Each distinct blob is read once (many files share one, the empty file first of all),
        // [`RESTORE_READS`] at a time, since a media store on S3 answers each read in turn.
        let distinct: std::collections::BTreeSet<String> = stored
            .iter()
            .filter_map(|entry| entry.content.media_id.clone())
            .collect();
        let reads = distinct.into_iter().map(|media_id| {
            let media = Arc::clone(&self.media);
            async move {
                let (_, bytes) = media
                    .get(&media_id)
                    .await
                    .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
                Ok::<_, TurnFailure>((
                    media_id,
                    base64::engine::general_purpose::STANDARD.encode(&bytes),
                ))
            }
        });
        let contents: HashMap<String, String> = futures_util::stream::iter(reads)
            .buffer_unordered(RESTORE_READS)
            .try_collect()
            .await?;
        Ok(stored
            .iter()
            .map(|entry| {
                let base64 = (entry.content.media_id.as_ref())
                    .and_then(|media_id| contents.get(media_id.as_str()).cloned());
                entry.clone().with_content(Inline { base64 })
            })
            .collect())
    }

    /// Audits and logs a refused manifest (`checkpoint.refused`, every field bounded) and
    /// returns the turn's failure.
    async fn refuse_checkpoint(
        &self,
        node: &NodeConnection,
        session_key: &str,
        stage: CheckpointStage,
        error: &ManifestError,
    ) -> TurnFailure {
        let session_key = truncated(session_key, MAX_REPORTED_PATH_BYTES);
        let stage = match stage {
            CheckpointStage::Report => "report",
            CheckpointStage::Restore => "restore",
        };
        let reason = error.violation.reason();
        tracing::warn!(device_id = %node.device_id, session_key, stage, reason, "refused a checkpoint manifest");
        self.audit
            .record(
                &format!("node:{}", node.device_id),
                "checkpoint.refused",
                "denied",
                Some(ErrorCode::CheckpointInvalid.as_str()),
                serde_json::json!({
                    "sessionKey": session_key,
                    "stage": stage,
                    "reason": reason,
                    "index": error.index,
                    "path": error.path,
                }),
            )
            .await;
        TurnFailure::new(ErrorCode::CheckpointInvalid, error.to_string())
    }

    /// Returns the session's earlier user and assistant messages, without those of this turn.
    async fn history(&self, input: &TurnInput) -> Result<Vec<HistoryMessage>, TurnFailure> {
        let transcript = self
            .store
            .transcript(&input.session_key)
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
        let mut history: Vec<HistoryMessage> = transcript
            .into_iter()
            .filter(|message| message.turn_id != input.turn_id)
            .filter(|message| message.role == "user" || message.role == "assistant")
            .map(|message| HistoryMessage {
                role: message.role,
                content: message.content,
            })
            .collect();
        let excess = history.len().saturating_sub(MAX_HISTORY_MESSAGES);
        history.drain(..excess);
        Ok(history)
    }
}

#[async_trait::async_trait]
impl TurnRuntime for NodeRuntime {
    fn name(&self) -> &str {
        gatehouse_protocol::runtime::RuntimeKind::Native.as_str()
    }

    fn supports_steer(&self) -> bool {
        false
    }

    fn placement(&self) -> Option<Placement> {
        Some(Placement {
            commands: &[AgentTurn::NAME],
            binds_sessions: true,
        })
    }

    async fn run_turn(&self, input: TurnInput, sink: TurnSink) -> Result<TurnReply, TurnFailure> {
        let node = self.owner_node(&input.session_key).await?;
        let prepared = self.prepare_source(&node, &input, sink.fence()).await?;
        let worktree = prepared.worktree;
        let checkpoint = self
            .store
            .latest_checkpoint(&input.session_key)
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
        let (skills_prompt, skill_copies) = match &self.skills {
            Some(skills) => skills.for_native_turn().await,
            None => (None, Vec::new()),
        };
        let denied_tools = self
            .tools
            .denied_for(&input.turn_id)
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
        // A node that would not apply the denials does not run the turn (fail closed).
        if !denied_tools.is_empty()
            && node.protocol < gatehouse_protocol::handshake::TURN_DENIALS_PROTOCOL
        {
            return Err(TurnFailure::new(
                ErrorCode::ProtocolUnsupported,
                format!(
                    "the node speaks protocol {}, which does not apply a channel's deny-tools; upgrade the node to protocol {} or later",
                    node.protocol,
                    gatehouse_protocol::handshake::TURN_DENIALS_PROTOCOL
                ),
            ));
        }
        let params = AgentTurnParams {
            session_key: input.session_key.clone(),
            turn_id: input.turn_id.clone(),
            history: self.history(&input).await?,
            user_texts: input.user_texts.clone(),
            attachments: input.attachments.clone(),
            checkpoint_id: checkpoint.as_ref().map(|(id, _)| id.clone()),
            workspace_required: prepared.repository.is_some(),
            gateway_tools: self.tools.offered_without(&denied_tools),
            denied_tools,
            skills_prompt,
            skill_copies,
            // The trace context travels in the invoke envelope; the node host fills this in.
            traceparent: None,
            max_turn_tokens: sink.max_turn_tokens(),
        };
        match self.invoke_turn(&node, &params, &sink, worktree).await {
            Err(failure) if failure.code == ErrorCode::WorkspaceMissing => {
                match (&checkpoint, &prepared.repository) {
                    (Some(checkpoint), repository) => {
                        let earlier = match (worktree, repository) {
                            (Some(_), _) => Earlier::WorktreeBase,
                            (None, Some(pinned)) => Earlier::Commit(pinned),
                            (None, None) => Earlier::None,
                        };
                        self.restore(&node, &input.session_key, checkpoint, earlier)
                            .await?;
                    }
                    (None, Some((repository, commit))) => {
                        self.fetch_source(
                            &node,
                            &input.session_key,
                            repository,
                            Some(commit),
                            false,
                            None,
                        )
                        .await?;
                    }
                    (None, None) => return Err(failure),
                }
                self.invoke_turn(&node, &params, &sink, worktree).await
            }
            outcome => outcome,
        }
    }
}

impl NodeRuntime {
    /// Returns the connection of the session's own node, binding an unbound session first to
    /// the node [`NodeRegistry::find_placement`] picks (the least loaded serving `agent.turn`).
    ///
    /// # Errors
    /// `DEPENDENCY_UNAVAILABLE` when no node serves the native runtime, or when the session's
    /// node is not connected (the message names the node): the turn is never sent to another
    /// node.
    async fn owner_node(&self, session_key: &str) -> Result<Arc<NodeConnection>, TurnFailure> {
        let store_failure =
            |error: gatehouse_store::StoreError| TurnFailure::new(error.code(), error.to_string());
        let bound = self
            .store
            .session_node(session_key)
            .await
            .map_err(store_failure)?;
        let owner = match bound {
            Some(owner) => owner,
            None => {
                let Some(node) = self
                    .registry
                    .wait_placement(&[AgentTurn::NAME], DEFAULT_NODE_GRACE)
                    .await
                else {
                    return Err(TurnFailure::new(
                        ErrorCode::DependencyUnavailable,
                        "no Harness node serving the native runtime is connected; the turn is not run anywhere else",
                    ));
                };
                let owner = self
                    .store
                    .bind_session_node(
                        session_key,
                        &node.device_id,
                        gatehouse_protocol::time::now_ms(),
                    )
                    .await
                    .map_err(store_failure)?;
                if owner == node.device_id {
                    tracing::info!(session_key, device_id = %owner, "session bound to its node");
                    return Ok(node);
                }
                owner
            }
        };
        if let Some(node) = self
            .registry
            .wait_node(&owner, &[AgentTurn::NAME], DEFAULT_NODE_GRACE)
            .await
        {
            return Ok(node);
        }
        let code = ErrorCode::DependencyUnavailable;
        let row = AuditRow {
            actor: "gateway",
            action: "session.dispatch",
            outcome: "denied",
            reason_code: Some(code.as_str()),
            details: serde_json::json!({"sessionKey": session_key, "nodeId": owner}),
        };
        if self
            .audit
            .record_limited(&format!("node:{owner}"), row)
            .await
            == Limited::Recorded
        {
            tracing::warn!(session_key, device_id = %owner, "the session's node is not connected; the turn is not sent to another node");
        }
        Err(TurnFailure::new(
            code.as_str(),
            format!(
                "the session is bound to node {owner}, which is not connected; reconnect it, or move the session with POST /v1/sessions/{session_key}/move"
            ),
        ))
    }

    /// Audits (rate-limited per node) and logs a refusal of what `node` sent for a turn, and
    /// returns the failure that ends the turn.
    async fn refuse(
        &self,
        node: &NodeConnection,
        params: &AgentTurnParams,
        code: ErrorCode,
        message: String,
    ) -> TurnFailure {
        let actor = format!("node:{}", node.device_id);
        let row = AuditRow {
            actor: &actor,
            action: "node.turn",
            outcome: "denied",
            reason_code: Some(code.as_str()),
            details: serde_json::json!({"sessionKey": params.session_key, "turnId": params.turn_id}),
        };
        if self.audit.record_limited(&actor, row).await == Limited::Recorded {
            tracing::warn!(device_id = %node.device_id, code = %code, session_key = %params.session_key, "refused what a node sent for its turn");
        }
        TurnFailure::new(code.as_str(), message)
    }

    /// Passes one worker event on to the Gateway's record of the turn.
    async fn relay_event(
        &self,
        node: &NodeConnection,
        params: &AgentTurnParams,
        sink: &TurnSink,
        event: WorkerEvent,
    ) -> Result<(), TurnFailure> {
        match event {
            WorkerEvent::Delta { text } => {
                sink.delta(&text);
                Ok(())
            }
            WorkerEvent::ToolStarted { tool, arguments } => {
                sink.tool_started(&tool, &arguments).await
            }
            // A node that ran a tool the turn's channel denies did not honour the turn's
            // narrowing: the turn ends, and the refusal is audited.
            WorkerEvent::ToolCompleted { tool, ok: true }
                if crate::tools::denied_by(&params.denied_tools, &tool) =>
            {
                Err(self
                    .refuse(
                        node,
                        params,
                        ErrorCode::PolicyDenied,
                        format!(
                            "the node ran the tool {}, which this session's channel denies",
                            crate::audit::bounded_str(&tool)
                        ),
                    )
                    .await)
            }
            WorkerEvent::ToolCompleted { tool, ok } => sink.tool_completed(&tool, ok).await,
            WorkerEvent::Message { role, .. } if !RUNTIME_ROLES.contains(&role.as_str()) => {
                Err(self
                    .refuse(
                        node,
                        params,
                        ErrorCode::RoleNotAllowed,
                        String::from(
                            "the node tried to commit a message that is neither assistant nor tool",
                        ),
                    )
                    .await)
            }
            WorkerEvent::Message {
                role,
                content,
                tool_name,
            } => sink
                .commit(&role, &content, tool_name.as_deref())
                .await
                .map(|_| ()),
            // The node turns these into the invoke's result; checkpoints are handled by the caller.
            WorkerEvent::Done { .. }
            | WorkerEvent::Failed { .. }
            | WorkerEvent::BackgroundStopped { .. }
            | WorkerEvent::ModelCall { .. }
            | WorkerEvent::Checkpoint { .. }
            | WorkerEvent::GatewayTool { .. } => Ok(()),
            // Counted as each call answers; past the turn's ceiling the turn ends here even
            // when the node host does not stop it itself.
            WorkerEvent::ModelUsage { usage } => sink.model_usage(usage).await,
            WorkerEvent::ModelRetry {
                attempt,
                code,
                message,
                delay_ms,
            } => sink.model_retry(attempt, &code, &message, delay_ms).await,
        }
    }

    /// Invokes `agent.turn` once and relays its streamed events.
    async fn invoke_turn(
        &self,
        node: &Arc<NodeConnection>,
        params: &AgentTurnParams,
        sink: &TurnSink,
        worktree: Option<&Arc<crate::worktree::WorktreeService>>,
    ) -> Result<TurnReply, TurnFailure> {
        let (progress, mut lines) = node.progress_lines(MAX_PROGRESS_LINE_BYTES);
        // Only while this invoke runs may the node call Gateway tools for the turn.
        let _hold = node.hold_turn(&params.session_key, &params.turn_id);
        let invoke = self.registry.invoke_streaming::<AgentTurn>(
            node,
            params,
            self.turn_timeout,
            Some(progress),
        );
        let relay = async {
            let mut malformed: u64 = 0;
            loop {
                let line = match lines.next_line().await {
                    Ok(Some(line)) => line,
                    Ok(None) => return Ok::<(), TurnFailure>(()),
                    Err(error) => {
                        return Err(self
                            .refuse(
                                node,
                                params,
                                ErrorCode::ProgressLineTooLong,
                                error.to_string(),
                            )
                            .await);
                    }
                };
                match serde_json::from_str::<WorkerEvent>(&line) {
                    Ok(WorkerEvent::Checkpoint { entries, omitted }) => {
                        self.accept_checkpoint(
                            node,
                            params,
                            entries,
                            omitted,
                            worktree,
                            sink.fence(),
                        )
                        .await?;
                    }
                    Ok(event) => self.relay_event(node, params, sink, event).await?,
                    Err(_) => {
                        malformed += 1;
                        if crate::link::registry::log_sparsely(malformed) {
                            tracing::warn!(
                                count = malformed,
                                "the node streamed a malformed event line; ignoring it (logged at the 1st, 2nd, 4th, ... occurrence)"
                            );
                        }
                    }
                }
            }
        };
        let mut invoke = std::pin::pin!(invoke);
        let mut relay = std::pin::pin!(relay);
        // A refused line ends the turn at once: dropping the invoke cancels it on the node.
        let result = tokio::select! {
            relayed = &mut relay => {
                relayed?;
                invoke.await
            }
            result = &mut invoke => {
                relay.await?;
                result
            }
        };
        let result = result.map_err(|error| match error {
            InvokeError::Unavailable | InvokeError::CommandNotDeclared { .. } => TurnFailure::new(
                ErrorCode::DependencyUnavailable,
                "the Harness node is not connected; the turn is not run anywhere else",
            ),
            InvokeError::Disconnected => TurnFailure::new(
                ErrorCode::DependencyUnavailable,
                "the Harness node disconnected during the turn; it is not replayed",
            ),
            InvokeError::Timeout(timeout) => TurnFailure::new(
                ErrorCode::TurnTimeout,
                format!("the turn ran longer than {timeout:?}"),
            ),
            InvokeError::Remote(error) => TurnFailure::new(&error.code, error.message),
            InvokeError::Malformed | InvokeError::UndecodableResult { .. } => TurnFailure::new(
                ErrorCode::NodeBadResponse,
                "the node sent a malformed turn result",
            ),
            InvokeError::UnencodableParams { reason, .. } => {
                TurnFailure::new(ErrorCode::Internal, reason)
            }
            InvokeError::Overrun { code } => TurnFailure::new(
                code.as_str(),
                "the node sent more than the gateway buffers for a turn; it was stopped",
            ),
            error @ InvokeError::TooLarge { .. } => {
                TurnFailure::new(ErrorCode::PayloadTooLarge, error.to_string())
            }
        })?;
        Ok(TurnReply {
            text: result.reply,
            usage: result.usage,
        })
    }
}

/// Decodes a checkpoint file's base64 content off the async threads, and checks it against
/// the SHA-256 the node reported for it: the Gateway merges, diffs and restores by that hash,
/// so content that does not match it is refused.
async fn decode_content(content: String, sha256: Option<&str>) -> Result<Bytes, TurnFailure> {
    let decoded = tokio::task::spawn_blocking(move || {
        base64::engine::general_purpose::STANDARD
            .decode(content)
            .map(|bytes| {
                let digest = hex::encode(sha2::Sha256::digest(&bytes));
                (bytes, digest)
            })
    })
    .await
    .map_err(|error| TurnFailure::new(ErrorCode::Internal, error.to_string()))?;
    match decoded {
        Ok((bytes, digest)) if sha256 == Some(digest.as_str()) => Ok(Bytes::from(bytes)),
        Ok(_) => Err(TurnFailure::new(
            ErrorCode::CheckpointInvalid,
            "the checkpoint manifest is refused: a file's content does not match its sha256",
        )),
        Err(_) => Err(TurnFailure::new(
            ErrorCode::NodeBadResponse,
            "a checkpoint file is not base64",
        )),
    }
}

/// Returns the media id of a checkpoint file, hashed off the async threads.
async fn media_id_of(bytes: Bytes) -> Result<String, TurnFailure> {
    tokio::task::spawn_blocking(move || gatehouse_media::media_id(&bytes))
        .await
        .map_err(|error| TurnFailure::new(ErrorCode::Internal, error.to_string()))
}

/// Returns the id of a checkpoint: the blake3 of its manifest's text (the text the store
/// keeps).
fn checkpoint_id(manifest: &CheckpointManifest) -> Result<String, TurnFailure> {
    let text = manifest
        .to_json()
        .map_err(|error| TurnFailure::new(ErrorCode::Internal, error.to_string()))?;
    Ok(blake3::hash(text.as_bytes()).to_hex().to_string())
}

/// Returns a reported entry as the Gateway stores it: its content (taken out of the entry
/// before) as the media blob `media_id` of `size` bytes.
fn stored_entry(entry: CheckpointEntry, media_id: Option<String>, size: u64) -> StoredEntry {
    let mut stored = entry.with_content(Blob { media_id });
    stored.size = size;
    stored
}

/// How many media blobs a restore reads at once.
const RESTORE_READS: usize = 16;

/// Names `path` in `omitted`, within the list's bounds (past them the list is marked truncated).
fn add_omitted(omitted: &mut OmittedPaths, path: String) {
    let bytes: usize = omitted.paths.iter().map(String::len).sum();
    match omitted.paths.len() < MAX_CHECKPOINT_OMITTED
        && bytes + path.len() <= MAX_CHECKPOINT_OMITTED_BYTES
    {
        true => omitted.paths.push(path),
        false => omitted.truncated = true,
    }
}

/// What stands for the paths a checkpoint left out when a lost workspace is rebuilt (see
/// [`NodeRuntime::restore`]).
#[derive(Debug, Clone, Copy)]
enum Earlier<'a> {
    /// No earlier tree (an `empty` session).
    None,
    /// A `repository` session's pinned commit.
    Commit(&'a (RepositorySpec, String)),
    /// A `worktree` session's merge base.
    WorktreeBase,
}

/// What [`NodeRuntime::prepare_source`] found out about a session's workspace source.
struct Prepared<'a> {
    /// The worktrees, for a `worktree` session.
    worktree: Option<&'a Arc<crate::worktree::WorktreeService>>,
    /// The repository and its pinned commit, for a `repository` session or a worktree `from`.
    repository: Option<(RepositorySpec, String)>,
}

/// How long fetching a session's repository may take (the node host's own bound is 300 s).
const SOURCE_TIMEOUT: Duration = Duration::from_secs(320);

/// Where a checkpoint manifest was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CheckpointStage {
    /// Reported by the node after a turn.
    Report,
    /// Stored, about to be sent to the node for a restore.
    Restore,
}

#[cfg(test)]
#[path = "checkpoint_pin_tests.rs"]
mod checkpoint_pin_tests;
