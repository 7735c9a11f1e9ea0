//! [`MemoryService`]: the Gateway's memory index of the Harness's memory files.
//!
//! The files stay on the Harness; the Gateway learns about them only through the node's
//! `workspace.memory` command: a `watch` subscription says when something changed, and a sync
//! then lists the files with their hashes and reads only those whose hash changed. The index, the
//! embedder and its credential stay here.
//!
//! When no node serves the workspace, search answers from the retained index and says `stale`;
//! `memory_get` fails with `DEPENDENCY_UNAVAILABLE`. Nothing is ever read from a local copy.
//!
//! The index lives where the store does: the SQLite file [`MEMORY_INDEX_FILE`] in the state
//! directory beside a SQLite store, or the schema `gatehouse_memory` of the store's PostgreSQL
//! database ([`index_location`]). On PostgreSQL a lost connection fails a search, a status or a
//! sync with `STORE_UNAVAILABLE`, like the store's own calls, and the next call reconnects; a
//! sync that failed is retried by the next change the node reports.

use gatehouse_protocol::error::ErrorCode;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::memory::MemorySearchAnswer;
use gatehouse_api::memory::MemoryStatus;
use gatehouse_api::memory::ReindexProgress;
use gatehouse_api::memory::SearchMode;
use gatehouse_api::memory::VectorSearch;
use gatehouse_memory::chunk::ChunkSettings;
use gatehouse_memory::embed::Embedder;
use gatehouse_memory::embed::EmbedderKind;
use gatehouse_memory::index::IndexIdentity;
use gatehouse_memory::index::IndexLocation;
use gatehouse_memory::index::MemoryIndex;
use gatehouse_memory::index::VectorState;
use gatehouse_memory::search::SearchOptions;
use gatehouse_protocol::command::WorkspaceMemory;
use gatehouse_protocol::memory::DEFAULT_WATCH_DEBOUNCE_MS;
use gatehouse_protocol::memory::MemoryAnswer;
use gatehouse_protocol::memory::MemoryIndexingResult;
use gatehouse_protocol::memory::MemoryListResult;
use gatehouse_protocol::memory::MemoryOp;
use gatehouse_protocol::memory::MemoryReadResult;
use gatehouse_protocol::memory::MemoryRequest;
use gatehouse_protocol::memory::WATCH_CHANGE;
use gatehouse_protocol::memory::WORKSPACE_MEMORY;
use gatehouse_store::location::StoreLocation;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::audit::loggable;
use crate::link::registry::InvokeError;
use crate::link::registry::NodeConnection;
use crate::link::registry::NodeRegistry;

/// The index file in the Gateway state directory, when the store is SQLite.
pub(crate) const MEMORY_INDEX_FILE: &str = "memory.db";

/// Where the memory index lives for a Gateway whose store is at `store`: in the store's
/// PostgreSQL database, or in [`MEMORY_INDEX_FILE`] under `state_dir` beside a SQLite store.
///
/// # Errors
/// The PostgreSQL URL's password reference cannot be resolved, or this build has no PostgreSQL
/// support (`STORE_UNAVAILABLE`).
pub(crate) fn index_location(
    store: &StoreLocation,
    state_dir: &std::path::Path,
) -> Result<IndexLocation, MemoryServiceError> {
    match store {
        StoreLocation::Local(_) => Ok(IndexLocation::File(state_dir.join(MEMORY_INDEX_FILE))),
        #[cfg(feature = "postgres")]
        StoreLocation::Remote(database) => database
            .connect_options()
            .map(|options| IndexLocation::Postgres(Box::new(options)))
            .map_err(|error| {
                MemoryServiceError::from(gatehouse_memory::index::IndexError::Unavailable(
                    error.to_string(),
                ))
            }),
        #[cfg(not(feature = "postgres"))]
        StoreLocation::Remote(_) => Err(MemoryServiceError::from(
            gatehouse_memory::index::IndexError::Unavailable(String::from(
                "this gatehouse was built without the postgres feature",
            )),
        )),
    }
}

/// How long one `workspace.memory` request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a watch subscription may stay open.
const WATCH_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// How long after a failed sync (the index's database down, say) it is tried again, while the
/// node reports no change.
const SYNC_RETRY: Duration = Duration::from_secs(5);

/// How long a watch whose line stream closed waits for its invoke's outcome, to log it.
const WATCH_OUTCOME_GRACE: Duration = Duration::from_secs(5);

/// How following a watch's lines ended.
enum WatchEnd {
    /// The stream closed: the invoke ended.
    Closed,
    /// A line was refused; the watch is given up and started again.
    Abandoned,
}

/// The longest line of a memory watch: each is one short JSON string.
const MAX_WATCH_LINE_BYTES: usize = 4096;

/// Why a memory call failed, with a stable code.
#[derive(Debug, thiserror::Error)]
pub enum MemoryServiceError {
    /// No node serves the workspace (`DEPENDENCY_UNAVAILABLE`).
    #[error("the Harness workspace is unavailable: {0}")]
    WorkspaceUnavailable(String),
    /// The explicitly configured remote embedder failed, so search fails closed
    /// (`MEMORY_UNAVAILABLE`).
    #[error("memory search is unavailable: {0}")]
    SearchUnavailable(String),
    /// The node refused the request with a stable code.
    #[error("{0}")]
    Remote(gatehouse_protocol::error::WireError),
    /// The index failed.
    #[error(transparent)]
    Index(#[from] gatehouse_memory::MemoryError),
}

impl MemoryServiceError {
    /// Returns the stable code.
    pub fn code(&self) -> &str {
        match self {
            Self::WorkspaceUnavailable(_) => ErrorCode::DependencyUnavailable.as_str(),
            Self::SearchUnavailable(_) => ErrorCode::MemoryUnavailable.as_str(),
            Self::Remote(error) => &error.code,
            Self::Index(gatehouse_memory::MemoryError::Index(
                gatehouse_memory::index::IndexError::DiskFull,
            )) => ErrorCode::StorageFull.as_str(),
            // The index is in the store's PostgreSQL database: its outage is the store's.
            Self::Index(gatehouse_memory::MemoryError::Index(
                gatehouse_memory::index::IndexError::Unavailable(_),
            )) => ErrorCode::StoreUnavailable.as_str(),
            Self::Index(_) => ErrorCode::MemoryIndexFailed.as_str(),
        }
    }
}

impl From<gatehouse_memory::index::IndexError> for MemoryServiceError {
    fn from(error: gatehouse_memory::index::IndexError) -> Self {
        Self::Index(error.into())
    }
}

/// The memory index and its link to the Harness.
pub struct MemoryService {
    index: tokio::sync::RwLock<Arc<MemoryIndex>>,
    chunking: ChunkSettings,
    embedder: Option<Arc<dyn Embedder>>,
    registry: Arc<NodeRegistry>,
    stale: AtomicBool,
    sync_lock: tokio::sync::Mutex<()>,
    warnings: Mutex<Vec<String>>,
    debounce_ms: u64,
    /// Since when the index has been behind the node's files: from a change the node reported
    /// or from losing the node, until the next sync completes; `None` while in sync.
    behind_since: Mutex<Option<Instant>>,
}

impl MemoryService {
    /// Opens the index at `location` ([`index_location`]) for `embedder`. `configured` is what
    /// the operator asked for (`None` when unset): an unset or local embedder that is not
    /// available means keyword search with a warning.
    ///
    /// # Errors
    /// The index cannot be opened.
    pub async fn open(
        location: &IndexLocation,
        embedder: Option<Arc<dyn Embedder>>,
        configured: Option<EmbedderKind>,
        registry: Arc<NodeRegistry>,
    ) -> Result<Arc<Self>, MemoryServiceError> {
        let chunking = ChunkSettings::default();
        let identity = IndexIdentity::of(embedder.as_deref(), chunking);
        let index = MemoryIndex::open(location, identity, chunking).await?;
        let mut warnings = Vec::new();
        match (configured, &embedder) {
            (None, None) => warnings.push(String::from(
                "no memory embedder is configured: keyword search only (set --memory-embedder local or openai-compatible)",
            )),
            (Some(EmbedderKind::Local), None) => warnings.push(String::from(
                "the local embedder is not available (model files missing, or built without the local-embedder feature): keyword search only",
            )),
            _ => {}
        }
        for warning in &warnings {
            tracing::warn!("{warning}");
        }
        Ok(Arc::new(Self {
            index: tokio::sync::RwLock::new(Arc::new(index)),
            chunking,
            embedder,
            registry,
            stale: AtomicBool::new(true),
            sync_lock: tokio::sync::Mutex::new(()),
            warnings: Mutex::new(warnings),
            debounce_ms: DEFAULT_WATCH_DEBOUNCE_MS,
            behind_since: Mutex::new(Some(Instant::now())),
        }))
    }

    /// Keeps a watch subscription on the node that serves the workspace, syncing after every
    /// change, until `shutdown` fires.
    pub async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let node = tokio::select! {
                () = shutdown.cancelled() => return,
                node = self.registry.wait_serving(&[WORKSPACE_MEMORY], Duration::from_secs(1)) => node,
            };
            let Some(node) = node else {
                self.mark_stale();
                continue;
            };
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = self.watch(&node) => {}
            }
            self.mark_stale();
            tokio::select! {
                () = shutdown.cancelled() => return,
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
        }
    }

    async fn watch(&self, node: &Arc<NodeConnection>) {
        let (progress, mut lines) = node.progress_lines(MAX_WATCH_LINE_BYTES);
        let request = self.request(node, MemoryOp::Watch);
        let pending = match self
            .registry
            .start_invoke::<WorkspaceMemory>(node, &request, WATCH_LIFETIME, Some(progress))
            .await
        {
            Ok(pending) => pending,
            Err(error) => {
                tracing::warn!(error = %loggable(&error), "cannot watch the memory files");
                return;
            }
        };
        // Follows the watch's lines until the stream closes (the invoke ended: its outcome
        // follows at once) or a line is refused (the watch is abandoned and restarted). After a
        // failed sync, a quiet stream retries it every SYNC_RETRY.
        let follow = async {
            let mut retry = false;
            loop {
                let next = if retry {
                    match tokio::time::timeout(SYNC_RETRY, lines.next_line()).await {
                        Ok(next) => next,
                        Err(_) => {
                            retry = !self.sync_reported(node).await;
                            continue;
                        }
                    }
                } else {
                    lines.next_line().await
                };
                let line = match next {
                    Ok(Some(line)) => line,
                    Ok(None) => return WatchEnd::Closed,
                    Err(error) => {
                        tracing::warn!(error = %error, "the node sent an overlong watch line; restarting the watch");
                        return WatchEnd::Abandoned;
                    }
                };
                match serde_json::from_str::<String>(line.trim()) {
                    Ok(event) if event == WATCH_CHANGE => {
                        retry = !self.sync_reported(node).await;
                    }
                    Ok(_) => {
                        tracing::warn!("the node says the memory files are unavailable");
                        self.mark_stale();
                    }
                    Err(_) => tracing::warn!("the node sent a malformed watch line"),
                }
            }
        };
        let finish = pending.finish(WATCH_LIFETIME);
        tokio::pin!(finish);
        // The stream closing and the outcome arriving race; either way the outcome is logged.
        let outcome = tokio::select! {
            end = follow => match end {
                WatchEnd::Closed => tokio::time::timeout(WATCH_OUTCOME_GRACE, &mut finish).await.ok(),
                WatchEnd::Abandoned => None,
            },
            outcome = &mut finish => Some(outcome),
        };
        if let Some(Err(error)) = outcome {
            tracing::info!(error = %loggable(&error), "the memory watch ended");
        }
    }

    fn request(&self, node: &NodeConnection, op: MemoryOp) -> MemoryRequest {
        MemoryRequest {
            op,
            workspace_dir: node.workspace_root.clone().unwrap_or_default(),
            agent_id: Some(String::from("main")),
            extra_paths: Vec::new(),
            rel_path: None,
            from: None,
            lines: None,
            debounce_ms: (op == MemoryOp::Watch).then_some(self.debounce_ms),
        }
    }

    /// Runs one `workspace.memory` request and returns the answer of its operation.
    async fn call<T: FromMemoryAnswer>(
        &self,
        node: &Arc<NodeConnection>,
        request: &MemoryRequest,
    ) -> Result<T, MemoryServiceError> {
        let answer = self
            .registry
            .invoke::<WorkspaceMemory>(node, request, REQUEST_TIMEOUT)
            .await
            .map_err(|error| match error {
                InvokeError::Remote(error) => MemoryServiceError::Remote(error),
                other => MemoryServiceError::WorkspaceUnavailable(other.to_string()),
            })?;
        T::from_answer(answer).ok_or_else(|| {
            MemoryServiceError::WorkspaceUnavailable(format!(
                "the node's answer is not the result of {:?}",
                request.op
            ))
        })
    }

    fn node(&self) -> Result<Arc<NodeConnection>, MemoryServiceError> {
        self.registry
            .find_serving(&[WORKSPACE_MEMORY])
            .ok_or_else(|| {
                MemoryServiceError::WorkspaceUnavailable(String::from(
                    "no Harness node serving workspace.memory is connected",
                ))
            })
    }

    /// Brings the index up to date with the node's files: reads only files whose hash changed,
    /// and forgets files that are gone.
    ///
    /// # Errors
    /// [`MemoryServiceError`].
    pub async fn sync(&self, node: &Arc<NodeConnection>) -> Result<(), MemoryServiceError> {
        let _guard = self.sync_lock.lock().await;
        let index = Arc::clone(&*self.index.read().await);
        let listing: MemoryListResult =
            self.call(node, &self.request(node, MemoryOp::List)).await?;
        let known = index.file_hashes().await?;
        let mut present = BTreeSet::new();
        for file in &listing.files {
            present.insert(file.path.clone());
            if known.get(&file.path) == Some(&file.sha256) {
                continue;
            }
            self.index_file(&index, node, &file.path).await?;
        }
        for path in known.keys().filter(|path| !present.contains(*path)) {
            index.remove_file(path).await?;
        }
        for skipped in &listing.skipped {
            tracing::debug!(path = %loggable(&skipped.path), reason = %loggable(&skipped.reason), "a memory file was skipped");
        }
        Ok(())
    }

    async fn index_file(
        &self,
        index: &MemoryIndex,
        node: &Arc<NodeConnection>,
        path: &str,
    ) -> Result<(), MemoryServiceError> {
        let mut request = self.request(node, MemoryOp::ReadForIndexing);
        request.rel_path = Some(path.to_owned());
        let file: MemoryIndexingResult = self.call(node, &request).await?;
        let embedder = self.embedder.as_deref();
        match index
            .upsert_file(&file.path, &file.text, &file.sha256, embedder)
            .await
        {
            Ok(_) => Ok(()),
            Err(gatehouse_memory::MemoryError::Embed(error))
                if embedder.is_some_and(|embedder| !embedder.kind().fails_closed()) =>
            {
                self.warn(format!(
                    "embedding failed ({error}); {path} is indexed for keyword search only"
                ));
                index
                    .upsert_file(&file.path, &file.text, &file.sha256, None)
                    .await?;
                Ok(())
            }
            Err(error) => Err(error.into()),
        }
    }

    fn warn(&self, warning: String) {
        tracing::warn!("{warning}");
        let mut warnings = self.warnings.lock();
        if !warnings.contains(&warning) {
            warnings.push(warning);
        }
    }

    fn warnings(&self) -> Vec<String> {
        self.warnings.lock().clone()
    }

    /// Returns how long the index has been behind the node's files: since the oldest change
    /// (or loss of the node) that no completed sync has caught up with; zero while in sync.
    pub fn sync_lag(&self) -> Duration {
        self.behind_since
            .lock()
            .map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// Marks the index as stale: the node is away or says its files are unavailable.
    fn mark_stale(&self) {
        self.stale.store(true, Ordering::SeqCst);
        self.behind_since.lock().get_or_insert_with(Instant::now);
    }

    /// Marks the index as in sync with the node's files.
    fn mark_synced(&self) {
        self.stale.store(false, Ordering::SeqCst);
        *self.behind_since.lock() = None;
    }

    /// Syncs after the node reported a change, counting the lag from the report.
    async fn sync_change(&self, node: &Arc<NodeConnection>) -> Result<(), MemoryServiceError> {
        self.behind_since.lock().get_or_insert_with(Instant::now);
        self.sync(node).await
    }

    /// Syncs after a change (or to retry a failed sync), marking the index in sync or logging
    /// the failure; returns whether the sync completed.
    async fn sync_reported(&self, node: &Arc<NodeConnection>) -> bool {
        match self.sync_change(node).await {
            Ok(()) => {
                self.mark_synced();
                true
            }
            Err(error) => {
                tracing::warn!(code = error.code(), error = %loggable(&error), "memory sync failed; retrying");
                false
            }
        }
    }

    /// Whether answers come from a retained index that may be out of date.
    pub fn is_stale(&self) -> bool {
        self.stale.load(Ordering::SeqCst)
            || self.registry.find_serving(&[WORKSPACE_MEMORY]).is_none()
    }

    /// Searches the index.
    ///
    /// # Errors
    /// `MEMORY_UNAVAILABLE` when the explicitly configured remote embedder fails; index failures.
    pub async fn search(
        &self,
        query: &str,
        options: SearchOptions,
    ) -> Result<MemorySearchAnswer, MemoryServiceError> {
        let index = Arc::clone(&*self.index.read().await);
        let mut warnings = self.warnings();
        if let VectorState::Paused {
            built_with,
            configured,
        } = index.vector_state()
        {
            warnings.push(format!(
                "vector search is paused: the index was built with {built_with} and the Gateway runs {configured}; run `gatehouse memory reindex`"
            ));
        }
        let vector = match (&self.embedder, index.vector_state()) {
            (Some(embedder), VectorState::Active) => {
                match embedder.embed(&[query.to_owned()]).await {
                    Ok(mut vectors) => vectors.pop(),
                    Err(error) if embedder.kind().fails_closed() => {
                        return Err(MemoryServiceError::SearchUnavailable(error.to_string()));
                    }
                    Err(error) => {
                        warnings.push(format!(
                            "embedding the query failed ({error}): keyword search only"
                        ));
                        None
                    }
                }
            }
            _ => None,
        };
        let results =
            gatehouse_memory::search::search(&index, query, vector.as_deref(), options, today())
                .await?;
        Ok(MemorySearchAnswer {
            results,
            stale: self.is_stale(),
            mode: match vector {
                Some(_) => SearchMode::Hybrid,
                None => SearchMode::Keyword,
            },
            warnings,
        })
    }

    /// Reads lines of a memory file from the Harness (for `memory_get`).
    ///
    /// # Errors
    /// `DEPENDENCY_UNAVAILABLE` when no node serves the workspace; the node's codes.
    pub async fn get(
        &self,
        path: &str,
        from: Option<u32>,
        lines: Option<u32>,
    ) -> Result<MemoryReadResult, MemoryServiceError> {
        let node = self.node()?;
        let mut request = self.request(&node, MemoryOp::Read);
        request.rel_path = Some(path.to_owned());
        request.from = from;
        request.lines = lines;
        self.call(&node, &request).await
    }

    /// Returns the index state.
    ///
    /// # Errors
    /// Index failures.
    pub async fn status(&self) -> Result<MemoryStatus, MemoryServiceError> {
        let index = Arc::clone(&*self.index.read().await);
        Ok(MemoryStatus {
            stats: index.stats().await?,
            configured: index.identity().key(),
            vector_search: match index.vector_state() {
                VectorState::Off => VectorSearch::Off,
                VectorState::Active => VectorSearch::Active,
                VectorState::Paused { .. } => VectorSearch::Paused,
            },
            stale: self.is_stale(),
            warnings: self.warnings(),
        })
    }

    /// Rebuilds the index from the Harness's files with the running configuration: into a fresh
    /// index beside the live one first (a temporary file on SQLite, a new generation on
    /// PostgreSQL), which then replaces it at once. Searches meanwhile answer from the live
    /// index. `progress` gets a report after every file.
    ///
    /// # Errors
    /// `DEPENDENCY_UNAVAILABLE` without a node; index and embedder failures. On failure the old
    /// index stays in place.
    pub async fn reindex(
        &self,
        progress: mpsc::Sender<ReindexProgress>,
    ) -> Result<MemoryStatus, MemoryServiceError> {
        let node = self.node()?;
        let _guard = self.sync_lock.lock().await;
        let identity = IndexIdentity::of(self.embedder.as_deref(), self.chunking);
        let live = Arc::clone(&*self.index.read().await);
        let fresh = live.rebuild(identity).await?;
        let total = match self.fill(&fresh, &node, &progress).await {
            Ok(total) => total,
            Err(error) => {
                fresh.discard().await;
                return Err(error);
            }
        };
        let mut slot = self.index.write().await;
        *slot = Arc::new(fresh.replace(&slot).await?);
        drop(slot);
        self.mark_synced();
        tracing::info!(files = total, "rebuilt the memory index");
        self.status().await
    }

    /// Indexes every file the node lists into `fresh`; returns how many there were.
    async fn fill(
        &self,
        fresh: &MemoryIndex,
        node: &Arc<NodeConnection>,
        progress: &mpsc::Sender<ReindexProgress>,
    ) -> Result<usize, MemoryServiceError> {
        let listing: MemoryListResult =
            self.call(node, &self.request(node, MemoryOp::List)).await?;
        let total = listing.files.len();
        let _ = progress.send(ReindexProgress { done: 0, total }).await;
        for (done, file) in listing.files.iter().enumerate() {
            self.index_file(fresh, node, &file.path).await?;
            let _ = progress
                .send(ReindexProgress {
                    done: done + 1,
                    total,
                })
                .await;
        }
        Ok(total)
    }
}

/// Today as days since 1970-01-01 (UTC).
fn today() -> i64 {
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs());
    i64::try_from(seconds / 86_400).unwrap_or(0)
}

/// The result of one `workspace.memory` operation, taken out of the command's answer.
trait FromMemoryAnswer: Sized {
    /// Returns the result when `answer` is of this operation.
    fn from_answer(answer: MemoryAnswer) -> Option<Self>;
}

impl FromMemoryAnswer for MemoryListResult {
    fn from_answer(answer: MemoryAnswer) -> Option<Self> {
        match answer {
            MemoryAnswer::List(list) => Some(list),
            MemoryAnswer::Read(_) | MemoryAnswer::Indexing(_) | MemoryAnswer::WatchEnded => None,
        }
    }
}

impl FromMemoryAnswer for MemoryReadResult {
    fn from_answer(answer: MemoryAnswer) -> Option<Self> {
        match answer {
            MemoryAnswer::Read(read) => Some(read),
            MemoryAnswer::List(_) | MemoryAnswer::Indexing(_) | MemoryAnswer::WatchEnded => None,
        }
    }
}

impl FromMemoryAnswer for MemoryIndexingResult {
    fn from_answer(answer: MemoryAnswer) -> Option<Self> {
        match answer {
            MemoryAnswer::Indexing(file) => Some(file),
            MemoryAnswer::List(_) | MemoryAnswer::Read(_) | MemoryAnswer::WatchEnded => None,
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test fails loudly on any unexpected error"
    )]

    use super::*;

    #[tokio::test]
    async fn a_failing_remote_embedder_fails_search_closed() {
        let dir = tempfile::tempdir().unwrap();
        // Nothing listens on this port: the explicitly configured remote embedder fails.
        let embedder: Arc<dyn Embedder> = Arc::new(gatehouse_memory::embed::OpenAiEmbedder::new(
            "http://127.0.0.1:9/v1",
            "text-embedding-3-small",
            None,
            1536,
        ));
        let service = MemoryService::open(
            &IndexLocation::File(dir.path().join(MEMORY_INDEX_FILE)),
            Some(embedder),
            Some(EmbedderKind::OpenAiCompatible),
            Arc::new(NodeRegistry::default()),
        )
        .await
        .unwrap();
        let error = service
            .search("anything", SearchOptions::default())
            .await
            .unwrap_err();
        assert_eq!(error.code(), "MEMORY_UNAVAILABLE");
        // Without a node, memory_get never reads anything locally.
        let error = service.get("MEMORY.md", None, None).await.unwrap_err();
        assert_eq!(error.code(), "DEPENDENCY_UNAVAILABLE");
        // Keyword search with no node answers from the retained index and says it is stale.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let keyword_only = MemoryService::open(
            &IndexLocation::File(other.join(MEMORY_INDEX_FILE)),
            None,
            Some(EmbedderKind::None),
            Arc::new(NodeRegistry::default()),
        )
        .await
        .unwrap();
        let answer = keyword_only
            .search("anything", SearchOptions::default())
            .await
            .unwrap();
        assert!(answer.stale && answer.results.is_empty());
        assert_eq!(answer.mode, SearchMode::Keyword);
    }
}
