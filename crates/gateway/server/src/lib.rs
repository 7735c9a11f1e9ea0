//! The trusted Gateway.
//!
//! It accepts Harness nodes on `/node` (a WebSocket the node dials out to), verifies their signed
//! device identity and enrollment, keeps a registry of connected nodes, and reaches the Harness
//! workspace only through them. Operators use the HTTP API under `/v1`, behind a bearer token.
//!
//! The Gateway never opens a path of the Harness and never falls back to a local copy: when no
//! node is connected, workspace calls fail with `DEPENDENCY_UNAVAILABLE`.
//!
//! # Public surface
//! The modules are private; an embedding program (the CLI), a runtime plug-in (the Codex
//! driver) and tests use only what is re-exported here:
//! - [`start`] with a [`GatewayConfig`] and [`Extensions`], giving a [`RunningGateway`] whose
//!   methods issue setup codes, connect a node host in the same process and reach the store and
//!   the workspace;
//! - the runtime interface ([`TurnRuntime`], [`TurnInput`], [`TurnSink`], [`TurnFailure`]) and
//!   the parts a runtime may use ([`RuntimeParts`]: [`NodeRegistry`], [`GatewayTools`],
//!   [`Audit`], [`SkillsService`], [`WorkspaceAccess`]);
//! - the documented limits and defaults an operator or a test relies on.
//!
//! # Layers
//! A module uses only its own layer and lower ones, so the crate reads from the bottom up and no
//! cycle spans two layers (`tests/suite/module_layers.rs` reads this list and holds it):
//! 1. `secrets`, `instruments`: tokens, hashes and the operator token
//!    file; the metric instruments the turn engine and the link record into.
//! 2. `audit`, `setup_code`, `readiness`, `shares`, `budgets`: the audit trail, one-time
//!    enrollment codes, the shared `/readyz` check, the fair shares of API keys, and the token
//!    budgets checked before admission.
//! 3. `link`: the node link: handshake, sessions and the registry of connected nodes.
//! 4. `workspace`, `memory`, `skills`: what the Gateway reaches through a node: the workspace
//!    client, the memory index and the skills catalog.
//! 5. `tools`, `documents`: the Gateway-provided tools and the four Agent documents.
//! 6. `turns`: admission, queue modes, the runtime interface, dispatch, and the event hub.
//! 7. `retention`, `intake`, `worktree`, `staging`, `channels`: what a turn keeps and takes:
//!    the checkpoint quota and blob collection, bytes taken into the media store (uploads and
//!    channel files), the worktrees of sessions, and the staging of attachments; and the chat
//!    platforms' channels, whose messages are admitted as turns and whose replies are
//!    delivered from the store's outbox.
//! 8. `cluster`: replicas on one store: leases, node links in the store, dispatch to the replica
//!    holding a session's node, the sweep, announcements and forwarding.
//! 9. `node_runtime`: the runtime that runs a turn on the enrolled node, with its checkpoint and
//!    worktree.
//! 10. `crate`, `http`, `metrics`: the assembled Gateway: the root (`start`, `GatewayState`), the
//!     router and its error mapping, and `/metrics`, which samples the whole state.

#![deny(missing_docs)]

mod audit;
pub mod budgets;
mod channels;
mod cluster;
mod documents;
#[expect(
    unreachable_pub,
    reason = "the handlers' items are written `pub` inside this private module"
)]
mod http;
mod instruments;
mod intake;
mod link;
mod memory;
mod metrics;
mod node_runtime;
mod readiness;
mod retention;
mod secrets;
mod setup_code;
pub mod shares;
mod skills;
mod staging;
mod tools;
mod turns;
mod workspace;
mod worktree;

/// The audit trail, its bounds and its per-peer rate limit.
pub use crate::audit::{
    Audit, AuditConfig, DEFAULT_AUDIT_RETENTION, LIMIT_WINDOW, LIMITED_ROWS_PER_WINDOW,
    MAX_AUDIT_FIELD_BYTES, TRUNCATION_MARKER, bounded_str, loggable,
};
/// How replicas on one store identify themselves, and their defaults.
pub use crate::cluster::{
    DEFAULT_LEASE, LeaseError, MIN_LEASE, ReplicaConfig, SWEEP_INTERVAL, check_advertise_url,
    check_replica_id, default_replica_id,
};
/// Embedded mode's in-process link to a node host.
pub use crate::link::in_process::{InProcessConnector, InProcessLink};
/// The bounds of a node's progress stream.
pub use crate::link::progress::{
    MAX_NODE_RSS_GROWTH_BYTES, MAX_PROGRESS_LINE_BYTES, PROGRESS_CAPACITY,
};
/// The connected nodes and what an invoke on one of them can fail with.
pub use crate::link::registry::{InvokeError, NodeConnection, NodeRegistry};
/// The memory index's failure to open.
pub use crate::memory::MemoryServiceError;
/// How long `/metrics` reuses the figures it read from the store and the memory index.
pub use crate::metrics::DEFAULT_METRICS_REFRESH_INTERVAL;
/// The checkpoint quota and retention settings and their defaults.
pub use crate::retention::{
    DEFAULT_CHECKPOINT_QUOTA_BYTES, DEFAULT_CHECKPOINTS_KEPT, DEFAULT_MEDIA_QUOTA_BYTES,
    RetentionConfig,
};
/// The operator token's environment variable, where the token came from, and fresh tokens.
pub use crate::secrets::{OPERATOR_TOKEN_ENV, TokenSource, random_token};
/// One-time enrollment codes.
pub use crate::setup_code::{DEFAULT_TTL_SECONDS as DEFAULT_SETUP_CODE_TTL_SECONDS, IssuedCode};
/// The skills catalog of both hosts.
pub use crate::skills::SkillsService;
/// The Gateway-provided tools, and those a Codex runtime must not be offered.
pub use crate::tools::{CODEX_EXCLUDED_TOOLS, GatewayTools, denied_by, without_codex_excluded};
/// The default cap on turns running at once.
pub use crate::turns::DEFAULT_MAX_CONCURRENT_TURNS;
/// How much an SSE subscriber may fall behind before it is dropped.
pub use crate::turns::events::SUBSCRIBER_MAX_BYTES;
/// The interface a turn runtime implements, and the bounds of what it reports.
pub use crate::turns::runtime::{
    MAX_MESSAGE_BYTES, MAX_TOOL_ARGUMENTS_BYTES, MAX_TURN_STORED_BYTES, Placement, TurnFailure,
    TurnInput, TurnReply, TurnRuntime, TurnSink,
};
/// The Harness workspace as the Gateway reaches it.
pub use crate::workspace::{WorkspaceAccess, WorkspaceError, WorkspaceFile, WriteMode, Written};

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_policy::path::FileTransferPolicy;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::Store;
use gatehouse_store::location::StoreLocation;
use tokio_util::sync::CancellationToken;

use crate::link::session::LinkContext;
use crate::secrets::OperatorToken;
use crate::turns::TurnEngine;
use crate::turns::events::EventHub;
use crate::workspace::WorkspaceClient;

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:7420";

/// The default upload limit of the media store: 20 MiB.
pub const DEFAULT_MEDIA_MAX_BYTES: u64 = 20 * 1024 * 1024;

/// The media store's directory name in the state directory.
pub const MEDIA_DIR: &str = "media";

/// The file name of the Gateway database in the state directory.
pub const DATABASE_FILE: &str = "gateway.db";

/// How the Gateway runs.
#[derive(Debug, Clone)]
pub struct GatewayConfig {
    /// The private state directory (created 0700).
    pub state_dir: PathBuf,
    /// The address to listen on.
    pub listen: SocketAddr,
    /// The base URL nodes use to reach this Gateway, written into setup codes. When `None`, the
    /// `Host` header of the request that issues the code is used.
    pub public_url: Option<String>,
    /// The interval of ticks and keep-alive probes on node links.
    pub tick_interval: Duration,
    /// How long a workspace call waits for the node.
    pub invoke_timeout: Duration,
    /// The value of `GATEHOUSE_TOKEN`, when set.
    pub operator_token_override: Option<String>,
    /// The operator's explicit file policy; `None` applies the default policy.
    pub file_policy: Option<FileTransferPolicy>,
    /// The largest accepted upload to `POST /v1/media`, in bytes.
    pub media_max_bytes: u64,
    /// The cap on turns running at once across all sessions.
    pub max_concurrent_turns: usize,
    /// The most bytes of blobs the media store may hold (uploads, artifacts and checkpoints);
    /// new bytes past it are refused with `MEDIA_QUOTA_EXCEEDED`.
    pub media_quota_bytes: u64,
    /// The checkpoint quota per session and how many checkpoints a session keeps.
    pub retention: retention::RetentionConfig,
    /// The memory embedder the operator configured; `None` when unset (keyword search with a
    /// warning unless [`Extensions::memory_embedder`] provides one).
    pub memory_embedder: Option<gatehouse_memory::embed::EmbedderKind>,
    /// The Gateway's managed skills directory.
    pub skills_dir: Option<PathBuf>,
    /// The Gateway's bundled skills directory.
    pub bundled_skills_dir: Option<PathBuf>,
    /// Where the Gateway state lives; `None` is the SQLite file [`DATABASE_FILE`] in the state
    /// directory.
    pub store: Option<StoreLocation>,
    /// Where the media store keeps its blobs; `None` is the directory [`MEDIA_DIR`] in the state
    /// directory.
    pub media: Option<gatehouse_media::MediaLocation>,
    /// How long `/metrics` reuses the figures it read from the store and the memory index
    /// ([`DEFAULT_METRICS_REFRESH_INTERVAL`]); zero reads them at every scrape.
    pub metrics_refresh_interval: Duration,
    /// How long a starting Gateway waits for another one to let go of the store before it
    /// refuses to start with `STORE_IN_USE` ([`gatehouse_store::exclusive::DEFAULT_WAIT`]).
    pub store_lock_wait: Duration,
    /// How long a session's node may be away before the session's next turn moves it to
    /// another connected node (its workspace restored there from the last checkpoint); `None`
    /// (the default) never moves a session by itself.
    pub session_move_after: Option<Duration>,
    /// How this replica identifies itself to the other replicas on its store.
    pub replica: ReplicaConfig,
    /// A pause before each worktree result is applied; zero (the default) outside tests. The
    /// CLI reads it from the hidden `GATEHOUSE_TEST_WORKTREE_APPLY_DELAY_MS`, so a test can
    /// observe a result while it is staged (back-pressure, a kill between staging and apply).
    pub worktree_apply_delay: Duration,
    /// Whether `/readyz` waits for a node linked to this replica and ignores nodes linked to
    /// other replicas. Embedded mode (`gatehouse up`) sets it: the node in its own process is
    /// the one it serves with, and the link a replaced process left in the store names a
    /// replica that no longer answers until that process's lease lapses.
    pub ready_needs_own_node: bool,
    /// The shares of API keys: their defaults and the total of streams ([`shares`]).
    pub shares: shares::ShareConfig,
    /// How long audit rows are kept and the window of the audit's per-key rate limit.
    pub audit: AuditConfig,
    /// The channels of the config file (`[[channels]]`), validated and with their credentials
    /// read ([`gatehouse_channels::setup::prepare`]).
    pub channels: Vec<gatehouse_channels::setup::ChannelSetup>,
    /// The sessions' daily token budget and the turn ceiling ([`budgets`]).
    pub budgets: budgets::BudgetConfig,
}

impl GatewayConfig {
    /// Returns a configuration with the documented defaults for `state_dir`.
    pub fn with_defaults(state_dir: PathBuf, listen: SocketAddr) -> Self {
        Self {
            state_dir,
            listen,
            public_url: None,
            tick_interval: Duration::from_secs(15),
            invoke_timeout: Duration::from_secs(30),
            operator_token_override: None,
            file_policy: None,
            media_max_bytes: DEFAULT_MEDIA_MAX_BYTES,
            max_concurrent_turns: turns::DEFAULT_MAX_CONCURRENT_TURNS,
            media_quota_bytes: retention::DEFAULT_MEDIA_QUOTA_BYTES,
            retention: retention::RetentionConfig {
                checkpoint_quota_bytes: retention::DEFAULT_CHECKPOINT_QUOTA_BYTES,
                checkpoints_kept: retention::DEFAULT_CHECKPOINTS_KEPT,
            },
            memory_embedder: None,
            skills_dir: None,
            bundled_skills_dir: None,
            store: None,
            media: None,
            metrics_refresh_interval: metrics::DEFAULT_METRICS_REFRESH_INTERVAL,
            store_lock_wait: gatehouse_store::exclusive::DEFAULT_WAIT,
            session_move_after: None,
            replica: ReplicaConfig::default(),
            worktree_apply_delay: Duration::ZERO,
            ready_needs_own_node: false,
            shares: shares::ShareConfig::default(),
            audit: AuditConfig::default(),
            channels: Vec::new(),
            budgets: budgets::BudgetConfig::default(),
        }
    }

    /// Returns where the Gateway state lives: [`GatewayConfig::store`], else the SQLite file in
    /// the state directory.
    pub fn store_location(&self) -> StoreLocation {
        self.store
            .clone()
            .unwrap_or_else(|| StoreLocation::Local(self.state_dir.join(DATABASE_FILE)))
    }

    /// Returns where the media store keeps its blobs: [`GatewayConfig::media`], else the
    /// directory [`MEDIA_DIR`] in the state directory.
    pub fn media_location(&self) -> gatehouse_media::MediaLocation {
        self.media.clone().unwrap_or_else(|| {
            gatehouse_media::MediaLocation::Local(self.state_dir.join(MEDIA_DIR))
        })
    }
}

/// Everything the handlers share.
pub(crate) struct GatewayState {
    /// The configuration.
    pub(crate) config: GatewayConfig,
    /// The address the Gateway listens on (the bound port when the configured one was 0); a
    /// setup code names it when no public URL is configured.
    pub(crate) local_addr: std::net::SocketAddr,
    /// The store.
    pub(crate) store: Arc<dyn Store>,
    /// Connected nodes.
    pub(crate) registry: Arc<NodeRegistry>,
    /// The audit trail.
    pub(crate) audit: Audit,
    /// The operator token.
    pub(crate) operator_token: OperatorToken,
    /// The Harness workspace, through a node linked here or the replica holding one.
    pub(crate) workspace: Arc<dyn WorkspaceAccess>,
    /// The Harness workspace through the nodes linked to this replica only, which the
    /// replica routes serve.
    pub(crate) local_workspace: Arc<dyn WorkspaceAccess>,
    /// This replica: its id and lease.
    pub(crate) replica: Arc<cluster::Replica>,
    /// The other replicas, reached over HTTP.
    pub(crate) peers: Arc<cluster::peers::Peers>,
    /// What node sessions need.
    pub(crate) link: LinkContext,
    /// The content-addressed media store (`<state>/media/` unless `--media` names another).
    pub(crate) media: Arc<gatehouse_media::MediaStore>,
    /// The checkpoint quota and the collection of checkpoint blobs; uploads hold its guard.
    pub(crate) retention: Arc<retention::MediaRetention>,
    /// Live session events.
    pub(crate) hub: Arc<EventHub>,
    /// Admission and dispatch of turns.
    pub(crate) turns: Arc<TurnEngine>,
    /// The memory index of the Harness's memory files.
    pub(crate) memory: Arc<memory::MemoryService>,
    /// The skills catalog of both hosts.
    pub(crate) skills: Arc<skills::SkillsService>,
    /// Every `/metrics` family.
    pub(crate) metrics: metrics::GatewayMetrics,
    /// The store ping `/readyz` callers share.
    pub(crate) store_ping: readiness::SharedCheck,
    /// Whether a node is linked to another replica, as `/readyz` callers share it.
    pub(crate) remote_nodes: readiness::SharedCheck,
    /// When this Gateway started, Unix milliseconds (the `created` of `GET /v1/models`).
    pub(crate) started_at_ms: i64,
    /// The API keys' request windows and unended turns, for their rate limits.
    pub(crate) key_limits: http::limits::KeyLimiter,
    /// The console's login sessions (cookie id to key), kept in this process only.
    pub(crate) console_sessions: Arc<http::console::session::ConsoleSessions>,
    /// The open event streams and long polls, per key and in all.
    pub(crate) streams: Arc<shares::StreamGate>,
    /// The configured channels.
    pub(crate) channels: Arc<channels::Channels>,
}

impl GatewayState {
    /// Returns the turns `key` may have queued or running at once: its own limit, else the
    /// configured default share, else half the worker capacity of the smallest node linked here
    /// (each report bounded by [`shares::MAX_REPORTED_CAPACITY`]) or of the Gateway's cap on
    /// concurrent turns, whichever is smaller, so a hostile node cannot lift the share.
    /// A session's worker lives on one node, so half the smallest node is what keeps one key
    /// from holding every slot of any node.
    pub(crate) fn turn_share(&self, key: &gatehouse_store::records::ApiKeyRecord) -> u32 {
        if let Some(limit) = key
            .concurrent_turns
            .or(self.config.shares.key_concurrent_turns)
        {
            return limit;
        }
        let smallest = self
            .registry
            .all()
            .iter()
            .filter_map(|node| node.report())
            .map(|report| report.worker_capacity)
            .filter(|capacity| *capacity > 0)
            .map(|capacity| u64::from(capacity.min(shares::MAX_REPORTED_CAPACITY)))
            .min();
        // The Gateway runs at most `max_concurrent_turns` at once: half of those is the most a
        // key is given whatever the nodes say.
        let gateway_cap = self.config.max_concurrent_turns as u64;
        let capacity = smallest.map_or(gateway_cap, |smallest| smallest.min(gateway_cap));
        shares::default_turn_share(capacity)
    }

    /// Returns the way bytes are taken into the media store ([`intake::Intake`]).
    pub(crate) fn intake(&self) -> intake::Intake {
        intake::Intake::new(&self.store, &self.media, &self.retention)
    }

    /// Returns the media bytes `key` may have charged to it: its own quota, else the configured
    /// default share, else a quarter of the Gateway's media quota.
    pub(crate) fn media_share(&self, key: &gatehouse_store::records::ApiKeyRecord) -> u64 {
        shares::key_media_share(
            key.media_quota_bytes,
            &self.config.shares,
            self.config.media_quota_bytes,
        )
    }
}

/// What the embedding program plugs into the Gateway.
#[derive(Default)]
pub struct Extensions {
    /// The runtime that runs turns; `None` runs them on the enrolled node's native runtime
    /// (`agent.turn`), failing each turn with `DEPENDENCY_UNAVAILABLE` while no node serves it.
    pub runtime: Option<Arc<dyn TurnRuntime>>,
    /// Builds the runtime from the Gateway's parts, for runtimes that need them (Codex). Used
    /// when `runtime` is `None`.
    pub runtime_factory: Option<RuntimeFactory>,
    /// The memory embedder (built by the embedding program, which holds its credential or model
    /// files); `None` for keyword search only.
    pub memory_embedder: Option<Arc<dyn gatehouse_memory::embed::Embedder>>,
    /// The Harness workspace the HTTP handlers, the attachment stager and the runtime parts
    /// use; `None` reaches it through the enrolled node with the configured file policy and
    /// invoke timeout. A test plugs in a fake that records its calls.
    pub workspace: Option<Arc<dyn WorkspaceAccess>>,
    /// What runs turns when neither `runtime` nor `runtime_factory` is given.
    pub fallback_runtime: FallbackRuntime,
}

/// What runs turns when the embedding program plugs in no runtime.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub enum FallbackRuntime {
    /// The enrolled node's native runtime (`agent.turn`).
    #[default]
    Node,
    /// No runtime: every turn fails with `NO_RUNTIME` and its message is kept, so admission and
    /// queueing can be tested on their own.
    Off,
}

/// Builds a [`TurnRuntime`] from the Gateway's parts.
pub type RuntimeFactory = Box<dyn FnOnce(RuntimeParts) -> Arc<dyn TurnRuntime> + Send>;

/// The Gateway's parts a runtime may use.
#[derive(Clone)]
pub struct RuntimeParts {
    /// The connected nodes.
    pub registry: Arc<NodeRegistry>,
    /// The store.
    pub store: Arc<dyn Store>,
    /// The media store.
    pub media: Arc<gatehouse_media::MediaStore>,
    /// The Gateway-provided tools and their policy.
    pub tools: Arc<tools::GatewayTools>,
    /// The audit trail.
    pub audit: Audit,
    /// The Harness workspace, through the enrolled node.
    pub workspace: Arc<dyn WorkspaceAccess>,
    /// The skills catalog of both hosts.
    pub skills: Arc<skills::SkillsService>,
}

/// A failure to start the Gateway.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The state directory cannot be created or secured.
    #[error("cannot prepare the state directory {path}")]
    StateDir {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The operator token cannot be read or created.
    #[error("cannot read or create the operator token")]
    OperatorToken(#[source] std::io::Error),
    /// The media store cannot be opened.
    #[error("cannot open the media store")]
    Media(#[from] gatehouse_media::MediaError),
    /// The store cannot be opened.
    #[error("cannot open the gateway store")]
    Store(#[from] gatehouse_store::StoreError),
    /// The memory index cannot be opened.
    #[error("cannot open the memory index")]
    Memory(#[from] memory::MemoryServiceError),
    /// The replica's lease cannot be taken (`REPLICA_ID_IN_USE`, or the store failed).
    #[error("cannot take the replica's lease: {0}")]
    Lease(#[source] LeaseError),
    /// A channel's HTTP client cannot be built.
    #[error("cannot prepare the channels")]
    Channels(#[source] reqwest::Error),
    /// The listen address cannot be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl GatewayError {
    /// Returns true when the operator must change the configuration (exit code 2).
    pub fn is_config_error(&self) -> bool {
        matches!(
            self,
            GatewayError::Bind { .. }
                | GatewayError::StateDir { .. }
                | GatewayError::Lease(LeaseError::InUse { .. })
        )
    }
}

/// A running Gateway.
pub struct RunningGateway {
    /// The address it listens on (with the real port when 0 was asked).
    pub local_addr: SocketAddr,
    state: Arc<GatewayState>,
    /// Stops the server when cancelled; also cancelled by the Gateway itself when another
    /// Gateway took its store over.
    pub shutdown: CancellationToken,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    /// Set when the Gateway stopped because it lost its store to another Gateway.
    store_lost: Arc<std::sync::atomic::AtomicBool>,
}

impl RunningGateway {
    /// Returns where the operator token came from (its file, or `GATEHOUSE_TOKEN`).
    pub fn operator_token_source(&self) -> &TokenSource {
        self.state.operator_token.source()
    }

    /// Returns the store, for an embedding program or a test that inspects or seeds its rows.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.state.store
    }

    /// Returns the Harness workspace as the HTTP handlers reach it (through the enrolled node,
    /// unless [`Extensions::workspace`] replaced it).
    pub fn workspace(&self) -> Arc<dyn WorkspaceAccess> {
        Arc::clone(&self.state.workspace)
    }

    /// Returns the connector a node host in this process (embedded mode) dials instead of
    /// `/node`; each connection runs the same handshake and admission as a WebSocket peer.
    pub fn in_process_connector(&self) -> InProcessConnector {
        InProcessConnector::new(self.state.link.clone())
    }

    /// Returns the HTTP router over this Gateway's state, so a test can send requests to it
    /// without a socket; it answers exactly as the listening server does.
    pub fn router(&self) -> axum::Router {
        http::app(Arc::clone(&self.state))
    }

    /// Issues a one-time setup code that enrolls a node dialing `url`, valid for `ttl_seconds`.
    ///
    /// # Errors
    /// The store's error.
    pub async fn issue_setup_code(
        &self,
        url: &str,
        ttl_seconds: u64,
    ) -> Result<IssuedCode, gatehouse_store::StoreError> {
        setup_code::issue(
            self.state.store.as_ref(),
            url,
            ttl_seconds,
            gatehouse_protocol::time::now_ms(),
        )
        .await
    }

    /// Waits for the server to stop (after [`RunningGateway::shutdown`] is cancelled). The
    /// store stays locked until the server has stopped.
    ///
    /// # Errors
    /// The server's I/O error, or an error with the code `STORE_IN_USE` when the Gateway
    /// stopped because another Gateway took its store over.
    pub async fn wait(self) -> std::io::Result<()> {
        let served = match self.server.await {
            Ok(result) => result,
            Err(join) => Err(std::io::Error::other(join)),
        };
        if self.store_lost.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(std::io::Error::other(format!(
                "{}: another process took this gateway's store over while its connection was \
                 lost; this one stopped so that one gateway writes the store",
                ErrorCode::StoreInUse.as_str()
            )));
        }
        served
    }
}

/// Prepares the state directory (0700), opens the store, takes this replica's lease, loads the
/// operator token and starts serving.
///
/// # Errors
/// Every [`GatewayError`].
pub async fn start(
    config: GatewayConfig,
    extensions: Extensions,
) -> Result<RunningGateway, GatewayError> {
    prepare_state_dir(&config.state_dir)?;
    let location = config.store_location();
    // The location never holds a password (a store URL with one is refused), so it is logged.
    tracing::info!(store = %location, "opening the gateway store");
    // A SQLite store is one process's; on PostgreSQL every Gateway on the database is a replica
    // of one Gateway, held apart by their leases, and shares the lock that keeps a copy of the
    // store (`gatehouse state migrate`) from running beside them.
    let store_lock = Arc::new(
        gatehouse_store::exclusive::StoreLock::acquire_shared(&location, config.store_lock_wait)
            .await?,
    );
    let store: Arc<dyn Store> = gatehouse_store::open(&location).await?;
    if matches!(location, StoreLocation::Local(_)) {
        // This process holds the file alone: no lease on it can belong to a live replica.
        store.end_all_leases().await?;
    }
    let operator_token = OperatorToken::shared(
        &config.state_dir,
        config.operator_token_override.clone(),
        store.as_ref(),
    )
    .await
    .map_err(GatewayError::OperatorToken)?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| GatewayError::Bind {
            addr: config.listen,
            source,
        })?;
    let local_addr = listener.local_addr().map_err(|source| GatewayError::Bind {
        addr: config.listen,
        source,
    })?;
    let replica_id = config
        .replica
        .replica_id
        .clone()
        .unwrap_or_else(|| default_replica_id(local_addr));
    let replica_url = config
        .replica
        .advertise_url
        .clone()
        .unwrap_or_else(|| cluster::default_advertise_url(local_addr));
    let replica = cluster::Replica::acquire(
        Arc::clone(&store),
        replica_id,
        replica_url,
        match location {
            // One process holds a SQLite file (its lock): its lease never needs to lapse, so
            // neither a suspended machine nor a step of the wall clock fences its turns.
            StoreLocation::Local(_) => cluster::SQLITE_LEASE,
            StoreLocation::Remote(_) => config.replica.lease.max(MIN_LEASE),
        },
        config.store_lock_wait,
    )
    .await
    .map_err(GatewayError::Lease)?;
    let replica_key = store
        .shared_secret(
            cluster::REPLICA_KEY,
            &random_token().map_err(GatewayError::OperatorToken)?,
            gatehouse_protocol::time::now_ms(),
        )
        .await?;
    let media_location = config.media_location();
    // A media URL holds no secret (S3 credentials come from the environment), so it is logged.
    tracing::info!(media = %media_location, "opening the media store");
    let media = Arc::new(
        gatehouse_media::MediaStore::open_location(&media_location)?
            .with_quota(config.media_quota_bytes),
    );
    let registry = Arc::new(NodeRegistry::default());
    let audit = Audit::with_limit_window(Arc::clone(&store), config.audit.limit_window);
    let retention = Arc::new(
        retention::MediaRetention::new(
            Arc::clone(&store),
            Arc::clone(&media),
            audit.clone(),
            config.retention,
        )
        .with_key_shares(shares::key_media_share(
            None,
            &config.shares,
            config.media_quota_bytes,
        )),
    );
    // Collect what a crash or an older version left behind, before anything is dispatched.
    if let Err(error) = retention.collect_all().await {
        tracing::error!(error = %error, "cannot collect checkpoint blobs at start");
    }
    let memory = memory::MemoryService::open(
        &memory::index_location(&location, &config.state_dir)?,
        extensions.memory_embedder.clone(),
        config.memory_embedder,
        Arc::clone(&registry),
    )
    .await?;
    let tools = Arc::new(
        tools::GatewayTools::new(Arc::clone(&store), audit.clone(), Vec::new())
            .with_memory(Arc::clone(&memory))
            .with_channel_denials(
                config
                    .channels
                    .iter()
                    .map(|setup| (setup.spec.name.clone(), setup.spec.denied_tools())),
            ),
    );
    let skills = Arc::new(skills::SkillsService::new(
        config.skills_dir.clone(),
        config.bundled_skills_dir.clone(),
        Arc::clone(&registry),
    ));
    let link = LinkContext {
        store: Arc::clone(&store),
        registry: Arc::clone(&registry),
        audit: audit.clone(),
        tick_interval: config.tick_interval,
        requests: Arc::clone(&tools) as Arc<dyn crate::link::session::NodeRequestHandler>,
    };
    let peers = Arc::new(cluster::peers::Peers::new(
        replica_key,
        Arc::clone(&replica),
        Arc::clone(&store),
        config.invoke_timeout,
    ));
    let (workspace, local_workspace): (Arc<dyn WorkspaceAccess>, Arc<dyn WorkspaceAccess>) =
        match extensions.workspace {
            Some(workspace) => (Arc::clone(&workspace), workspace),
            None => {
                let local: Arc<dyn WorkspaceAccess> = Arc::new(WorkspaceClient::new(
                    Arc::clone(&registry),
                    config.file_policy.clone(),
                    config.invoke_timeout,
                ));
                let cluster: Arc<dyn WorkspaceAccess> =
                    Arc::new(cluster::peers::ClusterWorkspace {
                        local: Arc::clone(&local),
                        registry: Arc::clone(&registry),
                        peers: Arc::clone(&peers),
                    });
                (cluster, local)
            }
        };
    let hub = Arc::new(EventHub::new(Arc::clone(&store)));
    let worktrees = Arc::new(worktree::WorktreeService::new(
        Arc::clone(&store),
        Arc::clone(&hub),
        config.worktree_apply_delay,
    ));
    // Results staged before a crash are applied before the turns that were running are
    // marked interrupted (the first sweep), and are never replayed.
    worktrees.recover().await;
    let stager = Arc::new(staging::WorkspaceStager::new(
        Arc::clone(&workspace),
        Arc::clone(&media),
    ));
    let parts = RuntimeParts {
        registry: Arc::clone(&registry),
        store: Arc::clone(&store),
        media: Arc::clone(&media),
        tools: Arc::clone(&tools),
        audit: audit.clone(),
        workspace: Arc::clone(&workspace),
        skills: Arc::clone(&skills),
    };
    let runtime: Option<Arc<dyn TurnRuntime>> = match (
        extensions.runtime,
        extensions.runtime_factory,
        extensions.fallback_runtime,
    ) {
        (Some(runtime), _, _) => Some(runtime),
        (None, Some(factory), _) => Some(factory(parts)),
        (None, None, FallbackRuntime::Node) => Some(Arc::new(
            node_runtime::NodeRuntime::new(
                Arc::clone(&registry),
                Arc::clone(&store),
                Arc::clone(&media),
                Arc::clone(&tools),
                audit.clone(),
                Arc::clone(&retention),
                node_runtime::DEFAULT_TURN_TIMEOUT,
            )
            .with_skills(Arc::clone(&skills))
            .with_worktrees(Arc::clone(&worktrees)),
        )),
        (None, None, FallbackRuntime::Off) => None,
    };
    let dispatcher = Arc::new(cluster::dispatch::ClusterDispatcher {
        store: Arc::clone(&store),
        registry: Arc::clone(&registry),
        replica: Arc::clone(&replica),
        peers: Arc::clone(&peers),
        audit: audit.clone(),
        move_after: config.session_move_after,
        grace: cluster::dispatch::DEFAULT_NODE_GRACE,
    });
    let turns = TurnEngine::new(
        Arc::clone(&store),
        Arc::clone(&hub),
        runtime,
        Some(stager),
        dispatcher,
        config.max_concurrent_turns,
        config.budgets.turn_max_tokens,
    );
    // The turns this replica's earlier lease (or a replica that died) left running end as
    // interrupted before anything is dispatched; the sweep does the same from now on.
    cluster::sweep::sweep_once(&replica, store.as_ref(), &turns).await;
    // A channel's files are charged to it with an API key's default media share.
    let channel_files = channels::ChannelFiles {
        intake: intake::Intake::new(&store, &media, &retention),
        max_bytes: config.media_max_bytes,
        share_bytes: shares::key_media_share(None, &config.shares, config.media_quota_bytes),
    };
    let channels = Arc::new(
        channels::Channels::new(
            &config.channels,
            Some(channel_files),
            // A sender's share: what an API key gets by default, before the nodes report.
            config
                .shares
                .key_concurrent_turns
                .unwrap_or_else(|| shares::default_turn_share(config.max_concurrent_turns as u64)),
        )
        .map_err(GatewayError::Channels)?,
    );
    let metrics = metrics::GatewayMetrics::new(
        &turns.metrics,
        &registry,
        &channels.metrics,
        config.metrics_refresh_interval,
    );
    let streams = shares::StreamGate::new(
        shares::fd_budget(config.shares.max_streams),
        config.shares.key_max_streams,
    );
    let state = Arc::new(GatewayState {
        config,
        local_addr,
        store,
        registry,
        audit,
        operator_token,
        workspace,
        local_workspace,
        replica: Arc::clone(&replica),
        peers,
        link,
        media,
        retention,
        hub,
        turns,
        memory,
        skills,
        metrics,
        store_ping: readiness::SharedCheck::new(readiness::STORE_PING_REUSE),
        remote_nodes: readiness::SharedCheck::new(readiness::STORE_PING_REUSE),
        started_at_ms: gatehouse_protocol::time::now_ms(),
        key_limits: http::limits::KeyLimiter::default(),
        console_sessions: Arc::new(http::console::session::ConsoleSessions::default()),
        streams,
        channels,
    });
    let shutdown = CancellationToken::new();
    if !state.channels.enabled_names().is_empty() {
        tokio::spawn(channels::prune_periodically(
            Arc::clone(&state.store),
            shutdown.child_token(),
        ));
    }
    let loop_parts = channels::LoopParts {
        channels: Arc::clone(&state.channels),
        store: Arc::clone(&state.store),
        turns: Arc::clone(&state.turns),
        audit: state.audit.clone(),
        holder: state.replica.id().to_owned(),
        lease: state.config.replica.lease * channels::SYNC_LEASE_FACTOR,
    };
    channels::run_matrix_channels(&loop_parts, &shutdown);
    channels::run_telegram_channels(&loop_parts, &shutdown);
    channels::run_slack_channels(&loop_parts, &shutdown);
    tokio::spawn(channels::run_deliverer(
        Arc::clone(&state.channels),
        Arc::clone(&state.store),
        state.audit.clone(),
        state.replica.id().to_owned(),
        state.turns.turn_ends(),
        shutdown.child_token(),
    ));
    tokio::spawn(Arc::clone(&state.memory).run(shutdown.child_token()));
    tokio::spawn(flush_audit_summaries(
        state.audit.clone(),
        shutdown.child_token(),
    ));
    if let Some(retention) = state.config.audit.retention {
        tokio::spawn(audit::prune_periodically(
            Arc::clone(&state.store),
            retention,
            shutdown.child_token(),
        ));
    }
    // The lease is renewed until the server stopped (its last turns end under it), then
    // released.
    let lease_stop = CancellationToken::new();
    spawn_cluster(&state, &shutdown, &lease_stop);
    let router = http::app(Arc::clone(&state));
    let stop = shutdown.clone();
    let engine = Arc::clone(&state.turns);
    // Small frames (a 4 KiB fetch) must not wait for Nagle's algorithm and delayed ACKs.
    let listener =
        axum::serve::ListenerExt::tap_io(listener, |stream: &mut tokio::net::TcpStream| {
            if let Err(error) = stream.set_nodelay(true) {
                tracing::debug!(error = %error, "cannot set TCP_NODELAY");
            }
        });
    let store_lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(stop_when_store_lost(
        Arc::clone(&store_lock),
        shutdown.clone(),
        Arc::clone(&store_lost),
    ));
    let server = tokio::spawn(async move {
        let served = axum::serve(
            listener,
            router.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .with_graceful_shutdown(async move {
            stop.cancelled().await;
            engine.shut_down();
        })
        .await;
        // The other replicas take this one's nodes and sessions over at once.
        lease_stop.cancel();
        replica.release().await;
        // Another Gateway may take the store only once this one stopped serving.
        drop(store_lock);
        served
    });
    Ok(RunningGateway {
        local_addr,
        state,
        shutdown,
        server,
        store_lost,
    })
}

/// Starts the replica's background tasks (see [`cluster`]): the lease's renewal (until
/// `lease_stop`), the sweep, the mirror of node links, the announcement listener and the outbox
/// of deltas (until `shutdown`).
fn spawn_cluster(
    state: &Arc<GatewayState>,
    shutdown: &CancellationToken,
    lease_stop: &CancellationToken,
) {
    let replica = &state.replica;
    tokio::spawn(cluster::keep_lease(
        Arc::clone(replica),
        Arc::clone(&state.turns),
        Arc::clone(&state.registry),
        lease_stop.clone(),
        shutdown.clone(),
    ));
    tokio::spawn(cluster::sweep::run(
        Arc::clone(replica),
        Arc::clone(&state.store),
        Arc::clone(&state.turns),
        shutdown.child_token(),
    ));
    tokio::spawn(cluster::links::run(
        Arc::clone(replica),
        Arc::clone(&state.store),
        Arc::clone(&state.registry),
        shutdown.child_token(),
    ));
    tokio::spawn(cluster::announce::listen(
        Arc::clone(replica),
        Arc::clone(&state.store),
        Arc::clone(&state.hub),
        Arc::clone(&state.turns),
        Arc::clone(&state.registry),
        shutdown.child_token(),
    ));
    state.hub.set_outbox(cluster::announce::Outbox::start(
        Arc::clone(replica),
        Arc::clone(&state.store),
        shutdown.child_token(),
    ));
}

/// Stops the Gateway (cancels `shutdown`, sets `lost`) when another Gateway took its store
/// over; ends with the shutdown otherwise.
async fn stop_when_store_lost(
    lock: Arc<gatehouse_store::exclusive::StoreLock>,
    shutdown: CancellationToken,
    lost: Arc<std::sync::atomic::AtomicBool>,
) {
    tokio::select! {
        () = lock.lost() => {
            tracing::error!(
                code = ErrorCode::StoreInUse.as_str(),
                "another process took this gateway's store over (another gateway on its SQLite file, or a copy of its database); stopping"
            );
            lost.store(true, std::sync::atomic::Ordering::SeqCst);
            shutdown.cancel();
        }
        () = shutdown.cancelled() => {}
    }
}

/// Writes the audit trail's suppression summaries once per window, so a peer that flooded and
/// went quiet is still summarised.
async fn flush_audit_summaries(audit: Audit, shutdown: CancellationToken) {
    let mut ticker = tokio::time::interval(audit.limit_window());
    ticker.tick().await;
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => audit.flush_summaries().await,
        }
    }
}

fn prepare_state_dir(path: &std::path::Path) -> Result<(), GatewayError> {
    use std::os::unix::fs::DirBuilderExt;
    use std::os::unix::fs::PermissionsExt;
    let error = |source| GatewayError::StateDir {
        path: path.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)
        .map_err(error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o700)).map_err(error)?;
    Ok(())
}
