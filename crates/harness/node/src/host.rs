//! The node host: prepares the node root, then keeps one session with the Gateway alive.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder;
use backon::ExponentialBuilder;
use gatehouse_fsops::Root;
use gatehouse_policy::path::FileTransferPolicy;
use gatehouse_protocol::command::AgentSessionRestore;
use gatehouse_protocol::command::AgentSessionSource;
use gatehouse_protocol::command::AgentSessionStop;
use gatehouse_protocol::command::AgentTurn;
use gatehouse_protocol::command::CodexAppServer;
use gatehouse_protocol::command::WorkspaceMemory;
use gatehouse_protocol::command::WorkspaceSkills;
use gatehouse_protocol::handshake::ConnectAuth;
use gatehouse_protocol::handshake::HelloOk;
use gatehouse_protocol::time::now_ms;
use gatehouse_scratch::ScratchReport;
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::error::NodeHostError;
use crate::error::Result;
use crate::file_commands::Workspace;
use crate::gateway_url::normalize_gateway_url;
use crate::identity::Identity;
use crate::invoke::CommandSet;
use crate::link::Connector;
use crate::link::Link;
use crate::link::WebSocketConnector;
use crate::model_spec::ModelSpec;
use crate::node_state;
use crate::node_state::DeviceTokenRecord;
use crate::session::ConnectSetup;
use crate::setup_code::SetupCode;
use crate::status::STATUS_HEARTBEAT;
use crate::status::StatusFile;
use crate::status::StatusUpdate;

/// The display name used when none is configured.
pub const DEFAULT_DISPLAY_NAME: &str = "gatehouse node";

/// The home directory used for the path policy when neither the config nor `$HOME` names one.
pub const DEFAULT_HOME: &str = "/home/node";

/// The agent id the node's default path policy binds the workspace to.
const AGENT_ID: &str = "main";

/// The runtime the node hosts: the protocol's one runtime kind, under the name the node host
/// has always used.
pub use gatehouse_protocol::runtime::RuntimeKind as Runtime;

/// What the node host needs to start.
#[derive(Debug, Clone)]
pub struct NodeHostConfig {
    /// The node root: `node/` (identity, device token), `workspace/` and `tmp/` live under it.
    /// Created if missing.
    pub root: PathBuf,
    /// The Gateway URLs (each `ws://host:port[/node]` or `http://host:port`), for a Gateway of
    /// several replicas: the node uses one at a time and moves to the next after a failed
    /// attempt or a lost link, so it reaches a surviving replica at its next attempt. When
    /// empty, the URL of the saved device token is used, else the setup code's.
    pub gateway_urls: Vec<String>,
    /// A file holding a setup code, read when the node has no device token yet.
    pub setup_code_file: Option<PathBuf>,
    /// The runtime the node hosts.
    pub runtime: Runtime,
    /// The name shown to operators; [`DEFAULT_DISPLAY_NAME`] when `None`.
    pub display_name: Option<String>,
    /// The home directory `~` expands to in the path policy; `$HOME`, else [`DEFAULT_HOME`], when
    /// `None`.
    pub home: Option<String>,
}

/// What the agent runtime and its tools will use, beyond [`NodeHostConfig`].
///
/// The node host validates and records these at startup; no runtime uses them yet. They are
/// kept apart from [`NodeHostConfig`] so that existing callers keep compiling; the default is the
/// `mock` model and no scratch volume.
#[derive(Debug, Clone, Default)]
pub struct RuntimeConfig {
    /// The model (`--model`, `--model-key-env`). Only the name of the key variable is kept; the
    /// native runtime will read the key from it when it calls the model.
    pub model: ModelSpec,
    /// The checked scratch volume (`--scratch`), if any. A later `exec` tool binds
    /// [`ScratchReport::bwrap_bind_args`] read-write at `/sandbox/scratch` inside its sandbox.
    /// It widens no permission: the file commands stay confined to the session workspace and
    /// never see the scratch directory.
    pub scratch: Option<ScratchReport>,
    /// How to run native workers; `None` serves no `agent.turn` (for example in codex mode, or a
    /// node that only serves files).
    pub workers: Option<crate::worker::WorkerSettings>,
    /// How to run Codex; `None` serves no `codex.appserver` (a native node, or a node that only
    /// serves files).
    pub codex: Option<crate::codex_supervisor::CodexSettings>,
}

/// Timing of the reconnect loop, the handshake and the status heartbeat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReconnectPolicy {
    /// The first delay after a failed attempt, and the delay after a session that reached
    /// `hello-ok` (before jitter, see [`ReconnectPolicy::backoffs`]).
    pub initial_backoff: Duration,
    /// The largest delay before jitter; the delay doubles after each round of failed attempts
    /// up to this.
    pub max_backoff: Duration,
    /// How long opening the link and each handshake step (challenge, `hello-ok`) may take.
    pub handshake_timeout: Duration,
    /// How often a connected session rewrites the status file
    /// ([`STATUS_HEARTBEAT`](crate::status::STATUS_HEARTBEAT) by default).
    pub status_heartbeat: Duration,
}

impl ReconnectPolicy {
    /// Returns the pauses between rounds of reconnect attempts, without end: `initial_backoff`,
    /// doubling up to `max_backoff`, each lengthened by a random share of up to itself (`backon`'s
    /// jitter), so every pause lies between its delay and twice it. A pause is never shorter than
    /// its delay, and nodes cut off together do not reconnect in lockstep.
    pub fn backoffs(&self) -> impl Iterator<Item = Duration> + use<> {
        ExponentialBuilder::new()
            .with_min_delay(self.initial_backoff)
            .with_max_delay(self.max_backoff)
            .with_factor(2.0)
            .without_max_times()
            .with_jitter()
            .build()
    }
}

impl Default for ReconnectPolicy {
    /// Returns 1 s doubling to 30 s, a 15 s handshake timeout and a 10 s status heartbeat.
    fn default() -> Self {
        ReconnectPolicy {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(15),
            status_heartbeat: STATUS_HEARTBEAT,
        }
    }
}

/// How a session that reached `hello-ok`, or was stopped, ended.
#[derive(Debug)]
#[non_exhaustive]
pub enum SessionEnd {
    /// The shutdown signal fired.
    Shutdown,
    /// The link failed after `hello-ok`: closed, idle, or a protocol error.
    Disconnected {
        /// Why the link failed.
        reason: NodeHostError,
    },
}

/// A prepared node host: its root, identity, workspace and credential are ready.
#[derive(Debug)]
pub struct NodeHost {
    identity: Identity,
    node_dir: PathBuf,
    workspace_root: String,
    runtime: Runtime,
    display_name: String,
    gateway_urls: Vec<String>,
    /// The index in `gateway_urls` of the URL the next attempt uses.
    next_gateway: std::sync::atomic::AtomicUsize,
    setup_code_file: Option<PathBuf>,
    credential: Mutex<Credential>,
    commands: CommandSet,
    status: Arc<StatusFile>,
    runtime_config: RuntimeConfig,
    codex: Option<Arc<crate::codex_supervisor::CodexSupervisor>>,
    /// The figures each session reports to the Gateway (`node.report`).
    figures: tokio::sync::watch::Receiver<gatehouse_protocol::report::NodeReport>,
}

/// What the node presents in `connect`.
#[derive(Debug, Clone)]
enum Credential {
    DeviceToken(DeviceTokenRecord),
    SetupCode(SetupCode),
}

impl NodeHost {
    /// Prepares the node root with the default [`RuntimeConfig`] (the `mock` model, no scratch
    /// volume); see [`NodeHost::prepare_with`].
    ///
    /// # Errors
    /// As [`NodeHost::prepare_with`].
    pub fn prepare(config: NodeHostConfig) -> Result<NodeHost> {
        NodeHost::prepare_with(config, RuntimeConfig::default())
    }

    /// Prepares the node root: creates `node/` (0700), `workspace/` and `tmp/`, loads or creates
    /// the identity, loads the saved device token or else reads the setup code, and opens the
    /// workspace. Records `runtime_config` as given. Does blocking file I/O.
    ///
    /// # Errors
    /// Startup errors only ([`NodeHostError::is_startup`]): an invalid URL or setup code, no
    /// credential, or an unusable node root.
    pub fn prepare_with(config: NodeHostConfig, runtime_config: RuntimeConfig) -> Result<NodeHost> {
        // Before anything reads the key: see [`forbid_inspection`].
        forbid_inspection();
        let NodeHostConfig {
            root,
            gateway_urls,
            setup_code_file,
            runtime,
            display_name,
            home,
        } = config;
        let gateway_urls = gateway_urls
            .into_iter()
            .map(|url| {
                normalize_gateway_url(&url)
                    .map_err(|reason| NodeHostError::InvalidGatewayUrl { url, reason })
            })
            .collect::<Result<Vec<String>>>()?;
        std::fs::create_dir_all(&root).map_err(|source| NodeHostError::StateIo {
            path: root.clone(),
            source,
        })?;
        let node_dir = root.join("node");
        let identity = Identity::load_or_create(&node_dir)?;
        node_state::ensure_private_dir(&root.join("tmp"))?;
        let workspace_dir = root.join("workspace");
        node_state::ensure_dir_exists(&workspace_dir)?;
        let workspace_dir =
            std::fs::canonicalize(&workspace_dir).map_err(|source| NodeHostError::StateIo {
                path: workspace_dir.clone(),
                source,
            })?;
        let workspace_root = workspace_str(&workspace_dir)?;

        let credential = match node_state::load_device_token(&node_dir)? {
            Some(record) if record.device_id != identity.device_id() => {
                return Err(NodeHostError::InvalidStateFile {
                    path: node_state::device_token_path(&node_dir),
                    reason: "the device token belongs to another device id".to_owned(),
                });
            }
            Some(record) => Credential::DeviceToken(record),
            None => {
                let Some(path) = &setup_code_file else {
                    return Err(NodeHostError::NoCredential);
                };
                let setup_code = SetupCode::read_file(path)?;
                warn_if_expired(&setup_code);
                Credential::SetupCode(setup_code)
            }
        };

        let home = home
            .or_else(|| std::env::var("HOME").ok().filter(|home| !home.is_empty()))
            .unwrap_or_else(|| DEFAULT_HOME.to_owned());
        let display_name = display_name.unwrap_or_else(|| DEFAULT_DISPLAY_NAME.to_owned());
        let root_handle =
            Root::open(&workspace_dir).map_err(|source| NodeHostError::WorkspaceUnusable {
                path: workspace_dir.clone(),
                source,
            })?;
        let mut policy = FileTransferPolicy::default();
        gatehouse_policy::path::apply_default_policy(
            &mut policy,
            identity.device_id(),
            AGENT_ID,
            &workspace_root,
            &home,
        )
        .map_err(|err| NodeHostError::InvalidStateFile {
            path: node_dir.join(crate::identity::IDENTITY_FILE),
            reason: err.to_string(),
        })?;
        let workspace = Arc::new(Workspace {
            root: root_handle,
            policy,
            node_id: identity.device_id().to_owned(),
            display_name: Some(display_name.clone()),
            home,
        });
        let mut commands = CommandSet::default();
        crate::file_commands::register(&mut commands, &workspace);
        commands.register::<WorkspaceMemory>(crate::memory_commands::MemoryCommand {
            workspace: Arc::clone(&workspace),
            workspace_dir: workspace_root.clone(),
        });
        commands.register::<WorkspaceSkills>(crate::skills_commands::SkillsCommand {
            workspace: Arc::clone(&workspace),
            workspace_dir: workspace_root.clone(),
        });
        // A node without workers reports zero slots of zero.
        let mut figures =
            tokio::sync::watch::channel(gatehouse_protocol::report::NodeReport::default()).1;
        match (runtime, &runtime_config.workers) {
            (Runtime::Native, Some(settings)) => {
                // Workers get absolute paths, whatever form `--root` took.
                let absolute_root = std::fs::canonicalize(&root).unwrap_or_else(|_| root.clone());
                let supervisor = Arc::new(crate::worker::WorkerSupervisor::new(
                    settings.clone(),
                    absolute_root,
                ));
                figures = supervisor.figures();
                crate::worker::spawn_idle_retirement(&supervisor);
                commands.register::<AgentTurn>(crate::worker::AgentTurnHandler {
                    supervisor: Arc::clone(&supervisor),
                });
                commands.register::<AgentSessionRestore>(crate::worker::SessionRestoreHandler {
                    supervisor: Arc::clone(&supervisor),
                });
                commands.register::<AgentSessionSource>(crate::source::SessionSourceHandler {
                    supervisor: Arc::clone(&supervisor),
                });
                commands
                    .register::<AgentSessionStop>(crate::worker::SessionStopHandler { supervisor });
            }
            (Runtime::Native | Runtime::Codex, _) => {}
        }
        // In codex mode the node is the companion file node: it serves the workspace commands and
        // the relay, and hosts no workers.
        let codex = match (runtime, &runtime_config.codex) {
            (Runtime::Codex, Some(settings)) => {
                let absolute_root = std::fs::canonicalize(&root).unwrap_or_else(|_| root.clone());
                let supervisor = Arc::new(crate::codex_supervisor::CodexSupervisor::prepare(
                    settings.clone(),
                    &absolute_root,
                    &workspace_dir,
                )?);
                commands.register::<CodexAppServer>(crate::codex_supervisor::CodexRelayHandler {
                    supervisor: Arc::clone(&supervisor),
                });
                Some(supervisor)
            }
            _ => None,
        };

        let status = Arc::new(StatusFile::new(node_dir.clone()));
        Ok(NodeHost {
            identity,
            node_dir,
            workspace_root,
            runtime,
            display_name,
            gateway_urls,
            next_gateway: std::sync::atomic::AtomicUsize::new(0),
            setup_code_file,
            credential: Mutex::new(credential),
            commands,
            status,
            runtime_config,
            codex,
            figures,
        })
    }

    /// Returns the device id.
    pub fn device_id(&self) -> &str {
        self.identity.device_id()
    }

    /// Returns the canonical absolute path of the workspace, as sent in `connect`.
    pub fn workspace_root(&self) -> &str {
        &self.workspace_root
    }

    /// Returns the model the node host was configured with. No runtime uses it yet.
    pub fn model(&self) -> &ModelSpec {
        &self.runtime_config.model
    }

    /// Returns the checked scratch volume, if one was configured. Nothing binds it yet.
    pub fn scratch(&self) -> Option<&ScratchReport> {
        self.runtime_config.scratch.as_ref()
    }

    /// Returns the commands the node declares in `connect`, sorted.
    pub fn commands(&self) -> Vec<String> {
        self.commands.names()
    }

    /// Returns the Gateway URL the next attempt uses: the current one of `--gateway`, else the
    /// saved device token's, else the setup code's.
    pub fn gateway_url(&self) -> Option<String> {
        if !self.gateway_urls.is_empty() {
            let next = self.next_gateway.load(std::sync::atomic::Ordering::Relaxed);
            return Some(self.gateway_urls[next % self.gateway_urls.len()].clone());
        }
        match &*self.credential.lock() {
            Credential::DeviceToken(record) if !record.gateway_url.is_empty() => {
                Some(record.gateway_url.clone())
            }
            Credential::DeviceToken(_) => None,
            Credential::SetupCode(setup_code) => Some(setup_code.url().to_owned()),
        }
    }

    /// Moves to the next of several Gateway URLs (nothing to do with one or none).
    fn next_gateway_url(&self) {
        let n_urls = self.gateway_urls.len();
        if n_urls < 2 {
            return;
        }
        let previous = self
            .next_gateway
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(url) = self.gateway_urls.get((previous + 1) % n_urls) {
            tracing::info!(gateway = %url, "trying the next gateway URL");
        }
    }

    /// Connects over WebSocket and keeps a session alive until `shutdown` fires; see
    /// [`NodeHost::run_with_connector`].
    ///
    /// # Errors
    /// [`NodeHostError::NoGatewayUrl`] when no URL is known; otherwise as
    /// [`NodeHost::run_with_connector`].
    pub async fn run(&self, shutdown: CancellationToken) -> Result<()> {
        if self.gateway_url().is_none() {
            return Err(NodeHostError::NoGatewayUrl);
        }
        self.run_with_connector(WebSocketConnector, ReconnectPolicy::default(), shutdown)
            .await
    }

    /// Opens links with `connector` and runs sessions on them until `shutdown` fires, then
    /// returns `Ok`.
    ///
    /// A failed attempt is logged and retried after a pause from [`ReconnectPolicy::backoffs`]:
    /// it starts at `reconnect.initial_backoff` and doubles up to `reconnect.max_backoff` once
    /// every Gateway URL failed in turn, with jitter, and starts over after a session that reached
    /// `hello-ok`. While the node has no device token, the setup code file
    /// is read again before each attempt. Opening the link may take at most
    /// `reconnect.handshake_timeout`.
    ///
    /// The status file (`node/status.json`) is written at every attempt and failure, by the
    /// session while it is connected, and when the loop stops.
    ///
    /// # Errors
    /// Only startup errors ([`NodeHostError::is_startup`]) end the loop with an error.
    pub async fn run_with_connector<C: Connector>(
        &self,
        connector: C,
        reconnect: ReconnectPolicy,
        shutdown: CancellationToken,
    ) -> Result<()> {
        let codex_stop = shutdown.child_token();
        let codex = self
            .codex
            .clone()
            .map(|supervisor| tokio::spawn(supervisor.run(codex_stop.clone())));
        let outcome = self.connect_loop(connector, reconnect, shutdown).await;
        codex_stop.cancel();
        if let Some(task) = codex {
            let _ = task.await;
        }
        outcome
    }

    async fn connect_loop<C: Connector>(
        &self,
        mut connector: C,
        reconnect: ReconnectPolicy,
        shutdown: CancellationToken,
    ) -> Result<()> {
        let mut backoffs = reconnect.backoffs();
        // The pause of the current round: every attempt of a round waits as long.
        let mut pause = next_pause(&mut backoffs, reconnect);
        // Failed attempts since the last session that reached `hello-ok`: the pause grows
        // once per round of every URL failing.
        let mut failures: usize = 0;
        let round = self.gateway_urls.len().max(1);
        loop {
            self.status.publish(StatusUpdate::Connecting).await;
            let attempt = async {
                let auth = self.connect_auth()?;
                let gateway_url = self.gateway_url();
                let connect = connector.connect(gateway_url.as_deref());
                let opened = tokio::select! {
                    () = shutdown.cancelled() => return Ok(SessionEnd::Shutdown),
                    opened = tokio::time::timeout(reconnect.handshake_timeout, connect) => opened,
                };
                let Ok(link) = opened else {
                    return Err(NodeHostError::HandshakeTimeout {
                        waiting_for: "the link to open",
                    });
                };
                self.session(link?, auth, gateway_url.as_deref(), reconnect, &shutdown)
                    .await
            };
            // The session watches `shutdown` itself and is awaited to its end: dropping it
            // half-way would leave its last status write running on a blocking thread, landing
            // after the host reported that it stopped.
            let outcome = attempt.await;
            let delay = match outcome {
                Ok(SessionEnd::Shutdown) => return self.stopped().await,
                Ok(SessionEnd::Disconnected { reason }) => {
                    tracing::warn!(code = reason.code(), error = %error_chain(&reason), "disconnected from the gateway; reconnecting");
                    // The replica may be gone: the next attempt goes to the next URL.
                    self.next_gateway_url();
                    failures = 0;
                    backoffs = reconnect.backoffs();
                    pause = next_pause(&mut backoffs, reconnect);
                    pause
                }
                Err(err) if err.is_startup() => {
                    let code = err.code().to_owned();
                    self.status.publish(StatusUpdate::Failed { code }).await;
                    return Err(err);
                }
                Err(err) => {
                    let code = err.code().to_owned();
                    self.status.publish(StatusUpdate::Failed { code }).await;
                    let delay = pause;
                    tracing::warn!(
                        code = err.code(),
                        error = %error_chain(&err),
                        retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        "connection to the gateway failed"
                    );
                    // The pause grows once every URL failed in turn, not at each of them.
                    self.next_gateway_url();
                    failures += 1;
                    if failures.is_multiple_of(round) {
                        pause = next_pause(&mut backoffs, reconnect);
                    }
                    delay
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => return self.stopped().await,
                () = tokio::time::sleep(delay) => {}
            }
        }
    }

    /// Marks the status file disconnected as the loop stops.
    async fn stopped(&self) -> Result<()> {
        self.status.publish(StatusUpdate::Stopped).await;
        Ok(())
    }

    /// Runs one session on `link`, for embedded mode: handshake, token saving, then serving
    /// until the link fails or `shutdown` fires. The status file is written as in
    /// [`NodeHost::run_with_connector`] from `hello-ok` on.
    ///
    /// # Errors
    /// Errors before `hello-ok`: [`NodeHostError::Refused`] and the link errors; and the
    /// credential errors of [`NodeHost::run_with_connector`].
    pub async fn run_session(
        &self,
        link: Link,
        shutdown: &CancellationToken,
    ) -> Result<SessionEnd> {
        let auth = self.connect_auth()?;
        let gateway_url = self.gateway_url();
        self.session(
            link,
            auth,
            gateway_url.as_deref(),
            ReconnectPolicy::default(),
            shutdown,
        )
        .await
    }

    async fn session(
        &self,
        mut link: Link,
        auth: ConnectAuth,
        gateway_url: Option<&str>,
        reconnect: ReconnectPolicy,
        shutdown: &CancellationToken,
    ) -> Result<SessionEnd> {
        let setup = ConnectSetup {
            identity: &self.identity,
            display_name: &self.display_name,
            runtime: self.runtime,
            workspace_root: &self.workspace_root,
            commands: self.commands.names(),
            auth,
            handshake_timeout: reconnect.handshake_timeout,
        };
        let handshake = crate::session::handshake(&mut link, setup);
        let (hello, outbound) = tokio::select! {
            () = shutdown.cancelled() => return Ok(SessionEnd::Shutdown),
            result = handshake => result?,
        };
        self.save_device_token(&hello, gateway_url).await?;
        tracing::info!(
            conn_id = %hello.server.conn_id,
            protocol = hello.protocol,
            auth_method = %hello.auth.method,
            "connected to the gateway"
        );
        let conn_id = hello.server.conn_id.clone();
        self.status
            .publish(StatusUpdate::Connected { conn_id })
            .await;
        // The heartbeat lives exactly as long as this session: the guard aborts it on every way
        // out of this function, including the caller dropping the future.
        let heartbeat = self.status.start_heartbeat(reconnect.status_heartbeat);
        let reporter = crate::report::start(outbound.clone(), self.figures.clone());
        let serve = crate::session::serve(
            link,
            &hello,
            outbound,
            self.identity.device_id(),
            &self.commands,
        );
        let end = tokio::select! {
            () = shutdown.cancelled() => SessionEnd::Shutdown,
            reason = serve => SessionEnd::Disconnected { reason },
        };
        drop(heartbeat);
        drop(reporter);
        let update = match &end {
            SessionEnd::Shutdown => StatusUpdate::Stopped,
            SessionEnd::Disconnected { reason } => StatusUpdate::Failed {
                code: reason.code().to_owned(),
            },
        };
        self.status.publish(update).await;
        Ok(end)
    }

    /// Returns the `auth` of the next `connect`. Without a device token, the setup code file is
    /// read again first; if that fails, the code read earlier is kept.
    fn connect_auth(&self) -> Result<ConnectAuth> {
        let mut credential = self.credential.lock();
        if let (Credential::SetupCode(_), Some(path)) = (&*credential, &self.setup_code_file) {
            match SetupCode::read_file(path) {
                Ok(setup_code) => *credential = Credential::SetupCode(setup_code),
                Err(err) => {
                    tracing::warn!(code = err.code(), error = %err, "keeping the setup code read earlier");
                }
            }
        }
        Ok(match &*credential {
            Credential::DeviceToken(record) => ConnectAuth {
                bootstrap_token: None,
                device_token: Some(record.device_token.clone()),
            },
            Credential::SetupCode(setup_code) => ConnectAuth {
                bootstrap_token: Some(setup_code.bootstrap_token().to_owned()),
                device_token: None,
            },
        })
    }

    /// Saves the device token `hello` carries, if any, before the session serves anything.
    async fn save_device_token(&self, hello: &HelloOk, gateway_url: Option<&str>) -> Result<()> {
        let Some(device_token) = hello.auth.device_token.clone() else {
            return Ok(());
        };
        let record = DeviceTokenRecord {
            gateway_url: gateway_url.unwrap_or_default().to_owned(),
            device_id: self.identity.device_id().to_owned(),
            device_token,
            issued_at_ms: hello.auth.issued_at_ms.unwrap_or_else(now_ms),
        };
        // Keep the token even if it cannot be saved, so that this process can reconnect.
        *self.credential.lock() = Credential::DeviceToken(record.clone());
        let node_dir = self.node_dir.clone();
        tokio::task::spawn_blocking(move || node_state::save_device_token(&node_dir, &record))
            .await??;
        tracing::info!(device_id = %self.identity.device_id(), "enrolled; saved the device token");
        Ok(())
    }
}

/// Prepares a node host from `config` with the default [`RuntimeConfig`] and runs it until
/// `shutdown` fires.
///
/// # Errors
/// As [`run_node_host_with`].
pub async fn run_node_host(config: NodeHostConfig, shutdown: CancellationToken) -> Result<()> {
    run_node_host_with(config, RuntimeConfig::default(), shutdown).await
}

/// Prepares a node host from `config` and `runtime_config` and runs it until `shutdown` fires.
///
/// # Errors
/// Startup errors from [`NodeHost::prepare_with`], and those of [`NodeHost::run`].
pub async fn run_node_host_with(
    config: NodeHostConfig,
    runtime_config: RuntimeConfig,
    shutdown: CancellationToken,
) -> Result<()> {
    let host = tokio::task::spawn_blocking(move || NodeHost::prepare_with(config, runtime_config))
        .await??;
    tracing::info!(
        device_id = %host.device_id(),
        workspace = %host.workspace_root(),
        runtime = host.runtime.as_str(),
        "node host ready"
    );
    host.run(shutdown).await
}

/// Makes this process non-dumpable, so a process of the same uid that is not root (a worker
/// taken over by what it runs) can neither read its `/proc/PID/environ`, where the model key
/// is, nor open its descriptors through `/proc/PID/fd`, nor trace it. Each `execve` resets
/// it, so every worker sets it for itself too. A node host run as root is not protected from
/// its root workers this way: run it as an unprivileged user.
pub fn forbid_inspection() {
    if let Err(error) =
        rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
    {
        tracing::warn!(error = %error, "cannot make the process non-dumpable");
    }
}

fn workspace_str(path: &Path) -> Result<String> {
    match path.to_str() {
        Some(text) => Ok(text.to_owned()),
        None => Err(NodeHostError::InvalidStateFile {
            path: path.to_owned(),
            reason: "the workspace path is not valid UTF-8".to_owned(),
        }),
    }
}

/// Returns `err` and its causes, joined by `: `, for logs.
fn error_chain(err: &NodeHostError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn warn_if_expired(setup_code: &SetupCode) {
    if setup_code.expires_at_ms() < now_ms() {
        tracing::warn!(
            expires_at_ms = setup_code.expires_at_ms(),
            "the setup code has expired; the gateway will likely refuse it"
        );
    }
}

/// Returns the next pause of `backoffs`. The schedule has no end; should it end anyway, the
/// policy's largest delay is used.
fn next_pause(
    backoffs: &mut impl Iterator<Item = Duration>,
    reconnect: ReconnectPolicy,
) -> Duration {
    backoffs.next().unwrap_or(reconnect.max_backoff)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::host::ReconnectPolicy;

    #[test]
    fn reconnect_pauses_double_to_the_maximum_and_lie_between_the_delay_and_twice_it() {
        let policy = ReconnectPolicy::default();
        let delays_s = [1, 2, 4, 8, 16, 30, 30, 30];
        for _ in 0..100 {
            let pauses: Vec<Duration> = policy.backoffs().take(delays_s.len()).collect();
            assert_eq!(pauses.len(), delays_s.len());
            for (pause, delay_s) in pauses.iter().zip(delays_s) {
                let delay = Duration::from_secs(delay_s);
                assert!(*pause >= delay && *pause < delay * 2, "{pauses:?}");
            }
        }
    }

    #[test]
    fn reconnect_pauses_are_not_in_lockstep() {
        let policy = ReconnectPolicy::default();
        let first_pauses: std::collections::HashSet<Duration> =
            (0..20).filter_map(|_| policy.backoffs().next()).collect();
        assert!(first_pauses.len() > 1, "{first_pauses:?}");
    }
}
