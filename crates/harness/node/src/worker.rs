//! The native runtime on the node host: one `gatehouse worker` child process per hosted session,
//! and the `agent.turn` and `agent.session.stop` commands the Gateway invokes.
//!
//! - Capacity is fixed at start (1..=1024). A session holds a slot from its first turn until
//!   its worker is retired or the session is stopped. A worker with no running turn is *idle*:
//!   under [`WorkerRetirement::Idle`] (the default) a new session that finds every slot taken
//!   gets the slot of the least recently used idle worker, which is stopped first, and a worker
//!   idle for the configured time is stopped by itself; its session workspace stays on disk and
//!   its next turn starts a new worker. Only when every slot runs a turn (or under
//!   [`WorkerRetirement::Never`], when every slot is taken) is a new session refused with
//!   `WORKER_CAPACITY_EXHAUSTED`. A running worker is never displaced.
//! - A worker gets its launch envelope on stdin (never argv), an environment scrubbed to `HOME`,
//!   `PATH`, `LANG`, `TMPDIR` and the telemetry settings, and a private `TMPDIR` (created, then
//!   chmod 0700 even when it existed). It runs in its own process group.
//! - A worker never holds the model key: it asks the node host's inference broker
//!   ([`crate::broker`]) for every model call over its own pipe, and the Gateway hears each call's
//!   usage from the broker's count.
//! - Each session has an execution workspace `<root>/sessions/<id>/workspace`, distinct from the
//!   Agent workspace.
//! - Aborting a turn (the Gateway's cancel) kills the worker's process group; the next turn of
//!   the session starts a new worker.

use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use futures_util::StreamExt;
use gatehouse_fsops::Dir;
use gatehouse_fsops::root::Kind;
use gatehouse_fsops::root::Overwrite;
use gatehouse_protocol::checkpoint::KIND_FILE;
use gatehouse_protocol::checkpoint::KIND_SYMLINK;
use gatehouse_protocol::checkpoint::validate_manifest;
use gatehouse_protocol::command::AgentSessionRestore;
use gatehouse_protocol::command::AgentSessionStop;
use gatehouse_protocol::command::AgentTurn;
use gatehouse_protocol::command::GatewayTool;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::report::NodeReport;
use gatehouse_protocol::worker::AgentSessionRestoreParams;
use gatehouse_protocol::worker::AgentSessionRestoreResult;
use gatehouse_protocol::worker::AgentSessionSourceParams;
use gatehouse_protocol::worker::AgentSessionSourceResult;
use gatehouse_protocol::worker::AgentSessionStopParams;
use gatehouse_protocol::worker::AgentSessionStopResult;
use gatehouse_protocol::worker::AgentTurnParams;
use gatehouse_protocol::worker::AgentTurnResult;
use gatehouse_protocol::worker::CheckpointEntry;
use gatehouse_protocol::worker::GatewayToolParams;
use gatehouse_protocol::worker::GatewayToolResult;
use gatehouse_protocol::worker::MAX_WORKER_EVENT_LINE_BYTES;
use gatehouse_protocol::worker::MAX_WORKER_REQUEST_LINE_BYTES;
use gatehouse_protocol::worker::WorkerBroker;
use gatehouse_protocol::worker::WorkerEvent;
use gatehouse_protocol::worker::WorkerLaunch;
use gatehouse_protocol::worker::WorkerRequest;
use sha2::Digest;
use tokio::io::AsyncWriteExt;
use tokio::process::Child;
use tokio::process::ChildStdin;
use tokio::process::ChildStdout;
use tokio_util::codec::FramedRead;
use tokio_util::codec::LinesCodec;
use tokio_util::codec::LinesCodecError;

use crate::invoke::InvokeContext;

/// How long a worker may take to stop its background processes before it is replaced.
const STOP_BACKGROUND_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(15);

/// How long a Gateway tool call may take.
const GATEWAY_TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The default number of worker slots.
pub const DEFAULT_CAPACITY: usize = 8;

/// The largest number of worker slots.
pub const MAX_CAPACITY: usize = 1024;

/// How long a worker may stay idle before it is stopped, by default: 10 minutes.
pub const DEFAULT_WORKER_IDLE: std::time::Duration = std::time::Duration::from_secs(600);

/// When an idle worker (one with no running turn) gives its slot back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerRetirement {
    /// When a new session needs a slot and none is free, the least recently used idle worker is
    /// stopped and its slot given to the new session; and a worker idle for `after` is stopped.
    Idle {
        /// How long a worker may stay idle.
        after: std::time::Duration,
    },
    /// Never: a worker keeps its slot until its session is stopped, and a new session past
    /// capacity is refused (the original system's behaviour).
    Never,
}

impl Default for WorkerRetirement {
    fn default() -> Self {
        Self::Idle {
            after: DEFAULT_WORKER_IDLE,
        }
    }
}

/// How the node host runs workers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSettings {
    /// The `gatehouse` executable; workers run `<program> worker`.
    pub program: PathBuf,
    /// Worker slots, 1..=1024.
    pub capacity: usize,
    /// When idle workers give their slot back.
    pub retirement: WorkerRetirement,
    /// The model spec workers use (`mock` or `API:URL:MODEL`).
    pub model: String,
    /// The name of the node host's environment variable holding the model key; only the node
    /// host's inference broker reads it, and workers never get it.
    pub model_key_env: String,
    /// Whether `exec` may run without bubblewrap when it is missing.
    pub allow_unsandboxed: bool,
    /// The checked scratch directory, bound at `/sandbox/scratch` for `exec`.
    pub scratch: Option<PathBuf>,
    /// Directories hidden from `exec` besides the Harness root, which is always hidden (for
    /// example the Gateway state in embedded mode).
    pub hidden_paths: Vec<PathBuf>,
    /// Native tools denied by the operator (names or groups).
    pub denied_tools: Vec<String>,
    /// The longest an `exec` may run, in seconds.
    pub exec_timeout_seconds: u64,
    /// The sandbox decided at startup; every worker gets exactly this in its launch envelope.
    pub sandbox: gatehouse_protocol::worker::SandboxSettings,
    /// Environment variables every worker gets besides its fixed ones: the node host's log
    /// filter and log format and its `OTEL_*` settings, so a worker logs and exports traces
    /// the way its node host does. Nothing else of the node host's environment reaches it.
    pub telemetry_env: Vec<(String, String)>,
    /// The host names and networks a session's repository may be fetched from although the
    /// default rule refuses their addresses (`source-allow-hosts`); see
    /// [`gatehouse_policy::repository`].
    pub source_allow: gatehouse_policy::repository::SourceAllowList,
}

/// One running worker.
struct Worker {
    child: Child,
    stdin: ChildStdin,
    /// Event lines, each at most [`MAX_WORKER_EVENT_LINE_BYTES`].
    stdout: FramedRead<ChildStdout, LinesCodec>,
}

impl Worker {
    /// Asks the worker to kill every background process of its session
    /// ([`WorkerRequest::StopBackground`]) and waits, at most [`STOP_BACKGROUND_TIMEOUT`], for
    /// its answer; returns how many were running.
    ///
    /// # Errors
    /// Why no answer came: the pipe closed, the worker exited or did not answer in time. The
    /// caller then replaces the worker.
    async fn stop_background(&mut self) -> Result<u64, &'static str> {
        let line = request_line(&WorkerRequest::StopBackground)
            .map_err(|_| "the request cannot be encoded")?;
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(|_| "the worker's input is closed")?;
        let stdout = &mut self.stdout;
        let answer = tokio::time::timeout(STOP_BACKGROUND_TIMEOUT, async move {
            loop {
                let line = match stdout.next().await {
                    Some(Ok(line)) => line,
                    Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                        return Err("the worker wrote an over-long line");
                    }
                    Some(Err(LinesCodecError::Io(_))) | None => return Err("the worker exited"),
                };
                // Anything else is a late line of an ended turn.
                if let Ok(WorkerEvent::BackgroundStopped { stopped }) =
                    serde_json::from_str::<WorkerEvent>(&line)
                {
                    return Ok(stopped);
                }
            }
        })
        .await;
        answer.unwrap_or(Err("the worker did not answer in time"))
    }

    fn kill_group(&mut self) {
        if let Some(pid) = self
            .child
            .id()
            .and_then(|pid| rustix::process::Pid::from_raw(pid as i32))
        {
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        let _ = self.child.start_kill();
    }
}

/// One session's worker slot.
struct Slot {
    /// The worker, once started; `None` before the first turn and after a crash or an abort.
    worker: tokio::sync::Mutex<Option<Worker>>,
    /// Whether a turn holds the slot, and since when it is idle.
    usage: std::sync::Mutex<SlotUsage>,
}

/// How a [`Slot`] is being used.
struct SlotUsage {
    /// The turns holding the slot ([`SlotLease`]s); taken only under the supervisor's map lock.
    leases: usize,
    /// When the last lease ended (or the slot was made).
    idle_since: tokio::time::Instant,
}

impl Slot {
    fn new() -> Self {
        Self {
            worker: tokio::sync::Mutex::new(None),
            usage: std::sync::Mutex::new(SlotUsage {
                leases: 0,
                idle_since: tokio::time::Instant::now(),
            }),
        }
    }

    /// Returns since when the slot is idle, or `None` while a turn holds it.
    fn idle_since(&self) -> Option<tokio::time::Instant> {
        let usage = self
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        (usage.leases == 0).then_some(usage.idle_since)
    }
}

/// A turn's hold on its session's slot: while it lives the worker is not idle and is never
/// retired; dropping it marks the slot idle from now.
struct SlotLease {
    slot: Arc<Slot>,
}

impl SlotLease {
    /// Takes a lease on `slot`; called only under the supervisor's map lock, so a slot chosen
    /// for retirement as idle cannot be leased meanwhile.
    fn take(slot: &Arc<Slot>) -> Self {
        slot.usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .leases += 1;
        Self {
            slot: Arc::clone(slot),
        }
    }
}

impl Drop for SlotLease {
    fn drop(&mut self) {
        let mut usage = self
            .slot
            .usage
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        usage.leases = usage.leases.saturating_sub(1);
        usage.idle_since = tokio::time::Instant::now();
    }
}

/// Stops the worker of a slot no longer in the supervisor's map: the worker's background
/// processes first (unsandboxed jobs run in process groups of their own), then its own group.
async fn retire(slot: &Slot) {
    if let Some(mut worker) = slot.worker.lock().await.take() {
        let _ = worker.stop_background().await;
        worker.kill_group();
        let _ = worker.child.wait().await;
    }
}

/// Retires idle workers of `supervisor` as [`WorkerRetirement::Idle`] says, until the
/// supervisor is dropped: it looks every quarter of the idle time (at least every 30 s, at most
/// every 100 ms), so a worker is stopped at most a quarter of that time late.
pub(crate) fn spawn_idle_retirement(supervisor: &Arc<WorkerSupervisor>) {
    let WorkerRetirement::Idle { after } = supervisor.settings.retirement else {
        return;
    };
    let period = (after / 4).clamp(
        std::time::Duration::from_millis(100),
        std::time::Duration::from_secs(30),
    );
    let supervisor = Arc::downgrade(supervisor);
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let Some(supervisor) = supervisor.upgrade() else {
                return;
            };
            supervisor.retire_idle(after).await;
        }
    });
}

/// Runs workers, at most `capacity` at once.
pub(crate) struct WorkerSupervisor {
    settings: WorkerSettings,
    /// The inference broker's model client, built once from the settings; its error fails
    /// every model call of every turn.
    model: Result<Arc<dyn gatehouse_model::ModelClient>, WireError>,
    root: PathBuf,
    workers: tokio::sync::Mutex<HashMap<String, Arc<Slot>>>,
    /// The slots in use and the capacity, for the node's `node.report`; updated whenever a
    /// session takes or gives back a slot.
    figures: tokio::sync::watch::Sender<NodeReport>,
}

impl WorkerSupervisor {
    pub(crate) fn new(settings: WorkerSettings, root: PathBuf) -> Self {
        let figures = tokio::sync::watch::Sender::new(NodeReport {
            worker_slots_in_use: 0,
            worker_capacity: u32::try_from(settings.capacity).unwrap_or(u32::MAX),
        });
        let model = crate::broker::build_client(&settings.model, &settings.model_key_env);
        if let Err(error) = &model {
            tracing::warn!(code = %error.code, error = %error.message, "cannot build the model client; turns will fail");
        }
        Self {
            settings,
            model,
            root,
            workers: tokio::sync::Mutex::new(HashMap::new()),
            figures,
        }
    }

    /// Returns the supervisor's figures (slots in use, capacity), which change as sessions
    /// take and give back slots.
    pub(crate) fn figures(&self) -> tokio::sync::watch::Receiver<NodeReport> {
        self.figures.subscribe()
    }

    /// Publishes `n_slots_in_use` in the figures, when it changed.
    fn publish_slots_in_use(&self, n_slots_in_use: usize) {
        let in_use = u32::try_from(n_slots_in_use).unwrap_or(u32::MAX);
        self.figures.send_if_modified(|report| {
            let changed = report.worker_slots_in_use != in_use;
            report.worker_slots_in_use = in_use;
            changed
        });
    }

    /// Returns a lease on the session's worker slot, claiming a new slot when the session has
    /// none. With every slot taken, the least recently used idle worker is retired first
    /// (under [`WorkerRetirement::Idle`]); with none idle the session is refused.
    async fn slot(&self, session_key: &str) -> Result<SlotLease, WireError> {
        let mut workers = self.workers.lock().await;
        if let Some(slot) = workers.get(session_key) {
            return Ok(SlotLease::take(slot));
        }
        if workers.len() >= self.settings.capacity {
            let idle = match self.settings.retirement {
                WorkerRetirement::Idle { .. } => workers
                    .iter()
                    .filter_map(|(key, slot)| slot.idle_since().map(|since| (since, key)))
                    .min()
                    .map(|(_, key)| key.clone()),
                WorkerRetirement::Never => None,
            };
            let Some(idle) = idle else {
                let message = match self.settings.retirement {
                    WorkerRetirement::Idle { .. } => format!(
                        "all {} worker slots are running turns of other sessions; retry when one ends",
                        self.settings.capacity
                    ),
                    WorkerRetirement::Never => format!(
                        "all {} worker slots are taken by other sessions; stop a session to free one",
                        self.settings.capacity
                    ),
                };
                return Err(WireError::new(ErrorCode::WorkerCapacityExhausted, message));
            };
            // Retired under the map lock, so no turn of that session starts a new worker while
            // the old one (and its background processes) still runs in its workspace.
            if let Some(slot) = workers.remove(&idle) {
                tracing::info!(
                    session_key = %idle,
                    for_session = session_key,
                    "retiring the least recently used idle worker for a new session"
                );
                retire(&slot).await;
            }
        }
        let slot = Arc::new(Slot::new());
        let lease = SlotLease::take(&slot);
        workers.insert(session_key.to_owned(), slot);
        self.publish_slots_in_use(workers.len());
        Ok(lease)
    }

    /// Stops every worker idle for `after` or longer, giving its slot back.
    async fn retire_idle(&self, after: std::time::Duration) {
        let mut workers = self.workers.lock().await;
        let now = tokio::time::Instant::now();
        let expired: Vec<String> = workers
            .iter()
            .filter(|(_, slot)| {
                slot.idle_since()
                    .is_some_and(|since| now.saturating_duration_since(since) >= after)
            })
            .map(|(key, _)| key.clone())
            .collect();
        for session_key in expired {
            if let Some(slot) = workers.remove(&session_key) {
                tracing::info!(
                    session_key,
                    idle_seconds = after.as_secs(),
                    "retiring an idle worker"
                );
                retire(&slot).await;
            }
        }
        self.publish_slots_in_use(workers.len());
    }

    async fn stop(&self, session_key: &str) -> bool {
        let slot = {
            let mut workers = self.workers.lock().await;
            let slot = workers.remove(session_key);
            self.publish_slots_in_use(workers.len());
            slot
        };
        match slot {
            Some(slot) => {
                retire(&slot).await;
                true
            }
            None => false,
        }
    }

    /// Returns true when the session's execution workspace exists (as a directory, not a link).
    fn has_session_workspace(&self, session_key: &str) -> bool {
        let session_dir = self
            .root
            .join("sessions")
            .join(session_dir_name(session_key));
        Dir::open(&session_dir)
            .and_then(|dir| dir.kind(SESSION_WORKSPACE))
            .is_ok_and(|kind| kind == Some(Kind::Directory))
    }

    /// Stops every background process of the session's worker before the node host works in
    /// the session workspace; a worker that does not answer is killed and replaced.
    async fn stop_background(&self, session_key: &str, slot: &mut Option<Worker>) {
        let Some(worker) = slot.as_mut() else {
            return;
        };
        if !matches!(worker.child.try_wait(), Ok(None)) {
            return;
        }
        match worker.stop_background().await {
            Ok(0) => {}
            Ok(stopped) => {
                tracing::info!(
                    session_key,
                    stopped,
                    "stopped the background processes of the previous turn"
                );
            }
            Err(reason) => {
                tracing::warn!(
                    session_key,
                    reason,
                    "cannot stop the background processes; replacing the worker"
                );
                worker.kill_group();
                let _ = worker.child.wait().await;
                *slot = None;
            }
        }
    }

    /// Rebuilds a missing session workspace from a checkpoint's entries.
    async fn restore(&self, params: AgentSessionRestoreParams) -> Result<usize, WireError> {
        let root = self.root.clone();
        let id = session_dir_name(&params.session_key);
        let session_key = params.session_key.clone();
        // A worker holding the old (deleted) directory must not serve the restored one, and no
        // background process may run while the workspace is rebuilt.
        self.stop(&session_key).await;
        let restored = tokio::task::spawn_blocking(move || {
            let session_dir = open_session_dir(&root, &id).map_err(|error| error.to_wire())?;
            restore_entries(&session_dir, &params.entries)
        })
        .await
        .map_err(|error| WireError::new(ErrorCode::Internal, error.to_string()))??;
        tracing::info!(
            session_key,
            restored,
            "rebuilt a session workspace from its checkpoint"
        );
        Ok(restored)
    }

    /// Writes one commit of a repository into the session's missing workspace
    /// (`agent.session.source`, see [`crate::source`]): the parameters are checked first, then
    /// the session's worker is stopped as for a restore, then the commit is fetched and written.
    ///
    /// # Errors
    /// `INVALID_PARAMS` for refused parameters, `EXISTS_NO_OVERWRITE` when the workspace
    /// exists, `SOURCE_UNAVAILABLE` when the commit cannot be had or written within the bounds.
    pub(crate) async fn source(
        &self,
        mut params: AgentSessionSourceParams,
    ) -> Result<AgentSessionSourceResult, WireError> {
        let request = crate::source::SourceRequest::parse(&params)?;
        let overlay = params.overlay.take();
        // A worker holding an old directory must not serve the new one, and no background
        // process may run while the workspace is written.
        self.stop(&params.session_key).await;
        crate::source::fetch_into_session(
            &self.root,
            &params.session_key,
            &request,
            overlay,
            &self.settings.source_allow,
        )
        .await
    }

    /// Runs one turn on the session's worker, streaming its events as progress lines.
    async fn run_turn(
        &self,
        mut params: AgentTurnParams,
        context: &mut InvokeContext,
    ) -> Result<AgentTurnResult, WireError> {
        let workspace_expected = params.checkpoint_id.is_some() || params.workspace_required;
        if workspace_expected && !self.has_session_workspace(&params.session_key) {
            // The workspace was lost (node replaced, disk wiped), or it comes from a workspace
            // source: the Gateway restores or fetches it first.
            self.stop(&params.session_key).await;
            return Err(WireError::new(
                ErrorCode::WorkspaceMissing,
                "the session workspace is missing; restore it from the checkpoint or its source",
            ));
        }
        let lease = self.slot(&params.session_key).await?;
        let mut guard = lease.slot.worker.lock().await;
        // Before the node host touches the session workspace, no process of an earlier turn
        // runs there any more.
        self.stop_background(&params.session_key, &mut guard).await;
        {
            // Then, before anything else of this turn: the previous turn's skill copies go,
            // this turn's come in, and the staged inputs are copied. A failed cleanup stops
            // here. Every step goes through directory handles that never follow a link.
            let root = self.root.clone();
            let id = session_dir_name(&params.session_key);
            let copies = std::mem::take(&mut params.skill_copies);
            let attachments = params.attachments.clone();
            tokio::task::spawn_blocking(move || {
                let session_workspace = open_session_dir(&root, &id)
                    .and_then(|dir| dir.ensure_dir(SESSION_WORKSPACE, PRIVATE_DIR_MODE))
                    .map_err(|error| error.to_wire())?;
                let agent_workspace = root.join("workspace");
                crate::skill_copies::prepare(&session_workspace, &agent_workspace, &copies)?;
                match attachments.is_empty() {
                    true => Ok(()),
                    false => copy_attachments(&agent_workspace, &session_workspace, &attachments),
                }
            })
            .await
            .map_err(|error| WireError::new(ErrorCode::Internal, error.to_string()))??;
        }
        let alive = match guard.as_mut() {
            Some(worker) => matches!(worker.child.try_wait(), Ok(None)),
            None => false,
        };
        if !alive {
            *guard = Some(self.spawn(&params.session_key).await?);
        }
        let Some(worker) = guard.as_mut() else {
            return Err(WireError::new(ErrorCode::Internal, "no worker"));
        };
        let session_key = params.session_key.clone();
        let turn_id = params.turn_id.clone();
        let max_turn_tokens = params.max_turn_tokens;
        // The worker's spans join the trace of this node host's invoke span.
        params.traceparent = gatehouse_telemetry::traceparent(&tracing::Span::current());
        // Refused before anything is written, so the worker stays in step.
        let line = request_line(&WorkerRequest::Turn(Box::new(params)))?;
        // Until the turn ends, dropping this future (a cancel) kills the worker.
        let mut kill_on_drop = KillOnDrop {
            worker: Some(worker),
        };
        let Some(worker) = kill_on_drop.worker.as_deref_mut() else {
            return Err(WireError::new(ErrorCode::Internal, "no worker"));
        };
        if worker.stdin.write_all(line.as_bytes()).await.is_err() {
            return Err(crashed(&session_key));
        }
        let mut broker = crate::broker::TurnBroker::new(self.model.clone(), max_turn_tokens);
        loop {
            let next = tokio::select! {
                actions = broker.next_actions() => Err(actions),
                line = worker.stdout.next() => Ok(line),
            };
            let next = match next {
                Ok(next) => next,
                Err(actions) => {
                    apply_broker_actions(actions, worker, context, &session_key, &turn_id).await?;
                    continue;
                }
            };
            let line = match next {
                Some(Ok(line)) => line,
                // The rest of its output is out of step; the next turn starts a new worker.
                Some(Err(LinesCodecError::MaxLineLengthExceeded)) => {
                    worker.kill_group();
                    tracing::warn!(session_key, "a worker wrote an over-long line; stopped it");
                    return Err(WireError::new(
                        ErrorCode::WorkerLineTooLong,
                        format!(
                            "the worker wrote a line longer than {MAX_WORKER_EVENT_LINE_BYTES} bytes; it was stopped"
                        ),
                    ));
                }
                // The next turn sees the exited child and starts a new worker.
                Some(Err(LinesCodecError::Io(_))) | None => {
                    worker.kill_group();
                    return Err(crashed(&session_key));
                }
            };
            let event: WorkerEvent = match serde_json::from_str(&line) {
                Ok(event) => event,
                Err(_) => {
                    tracing::warn!(session_key, "a worker wrote a malformed line; ignoring it");
                    continue;
                }
            };
            match event {
                WorkerEvent::Done { reply, .. } => {
                    kill_on_drop.worker = None;
                    // The worker's own sum is not trusted: the turn's usage is the broker's.
                    if let Some(error) = broker.exceeded() {
                        return Err(error);
                    }
                    return Ok(AgentTurnResult {
                        reply,
                        usage: broker.usage().cloned(),
                    });
                }
                WorkerEvent::Failed { code, message } => {
                    kill_on_drop.worker = None;
                    return Err(WireError::new(ErrorCode::Internal, message).with_code(&code));
                }
                WorkerEvent::GatewayTool {
                    id,
                    tool,
                    arguments,
                } => {
                    let params = GatewayToolParams {
                        session_key: session_key.clone(),
                        turn_id: turn_id.clone(),
                        tool,
                        arguments,
                    };
                    let result = match context
                        .progress
                        .outbound()
                        .call::<GatewayTool>(&params, GATEWAY_TOOL_TIMEOUT)
                        .await
                    {
                        Ok(result) => result,
                        Err(error) => GatewayToolResult {
                            ok: false,
                            output: format!("{}: {}", error.code, error.message),
                        },
                    };
                    let answer = WorkerRequest::GatewayToolResult {
                        id: id.clone(),
                        result,
                    };
                    // An answer past the bound reaches the model as a failed call instead.
                    let line = match request_line(&answer) {
                        Ok(line) => line,
                        Err(error) => request_line(&WorkerRequest::GatewayToolResult {
                            id,
                            result: GatewayToolResult {
                                ok: false,
                                output: format!("{}: {}", error.code, error.message),
                            },
                        })?,
                    };
                    if worker.stdin.write_all(line.as_bytes()).await.is_err() {
                        return Err(crashed(&session_key));
                    }
                }
                WorkerEvent::ModelCall { id, request } => {
                    let actions = broker.start(id, request);
                    apply_broker_actions(actions, worker, context, &session_key, &turn_id).await?;
                }
                // Only the answer to a stop request; never forwarded. A worker's own usage
                // claim is dropped: the broker reports every call's usage itself.
                WorkerEvent::BackgroundStopped { .. } | WorkerEvent::ModelUsage { .. } => {}
                WorkerEvent::Delta { .. }
                | WorkerEvent::Checkpoint { .. }
                | WorkerEvent::ToolStarted { .. }
                | WorkerEvent::ToolCompleted { .. }
                | WorkerEvent::ModelRetry { .. }
                | WorkerEvent::Message { .. } => {
                    if context.progress.send(&format!("{line}\n")).await.is_err() {
                        return Err(WireError::new(
                            ErrorCode::Unavailable,
                            "the link closed during the turn",
                        ));
                    }
                }
            }
        }
    }

    async fn spawn(&self, session_key: &str) -> Result<Worker, WireError> {
        let id = session_dir_name(session_key);
        let session_dir = self.root.join("sessions").join(&id);
        let workspace = session_dir.join(SESSION_WORKSPACE);
        let tmp = self.root.join("tmp").join(format!("worker-{id}"));
        prepare_dirs(&self.root, &id).map_err(|error| {
            WireError::new(
                ErrorCode::Internal,
                format!("cannot prepare the session workspace: {error}"),
            )
        })?;
        let launch = WorkerLaunch {
            session_key: session_key.to_owned(),
            workspace: workspace.to_string_lossy().into_owned(),
            agent_workspace: self.root.join("workspace").to_string_lossy().into_owned(),
            model: self.settings.model.clone(),
            broker: Some(WorkerBroker {
                model: match &self.model {
                    Ok(client) => client.model().to_owned(),
                    Err(_) => self.settings.model.clone(),
                },
            }),
            allow_unsandboxed: self.settings.allow_unsandboxed,
            scratch: self
                .settings
                .scratch
                .as_ref()
                .map(|dir| dir.to_string_lossy().into_owned()),
            denied_tools: self.settings.denied_tools.clone(),
            exec_timeout_seconds: self.settings.exec_timeout_seconds,
            sandbox: self.settings.sandbox.clone(),
            hidden_paths: std::iter::once(&self.root)
                .chain(self.settings.hidden_paths.iter())
                .map(|path| path.to_string_lossy().into_owned())
                .collect(),
        };
        let mut command = tokio::process::Command::new(&self.settings.program);
        command
            .arg("worker")
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
            )
            .env("HOME", &session_dir)
            .env("LANG", "C.UTF-8")
            .env("TMPDIR", &tmp)
            .envs(
                self.settings
                    .telemetry_env
                    .iter()
                    .map(|(name, value)| (name, value)),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0)
            .kill_on_drop(true);
        let mut child = command.spawn().map_err(|error| {
            WireError::new(
                ErrorCode::Internal,
                format!("cannot start a worker: {error}"),
            )
        })?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(WireError::new(ErrorCode::Internal, "a worker has no pipes"));
        };
        let line = request_line(&launch)?;
        if stdin.write_all(line.as_bytes()).await.is_err() {
            return Err(crashed(session_key));
        }
        tracing::info!(session_key, pid = child.id(), "started a worker");
        Ok(Worker {
            child,
            stdin,
            stdout: FramedRead::new(
                stdout,
                LinesCodec::new_with_max_length(MAX_WORKER_EVENT_LINE_BYTES),
            ),
        })
    }
}

/// Does what the turn's broker asks: writes its lines to the worker and sends its events to the
/// Gateway.
///
/// # Errors
/// `WORKER_CRASHED` when the worker's input is closed, `UNAVAILABLE` when the link closed.
async fn apply_broker_actions(
    actions: Vec<crate::broker::BrokerAction>,
    worker: &mut Worker,
    context: &mut InvokeContext,
    session_key: &str,
    turn_id: &str,
) -> Result<(), WireError> {
    for action in actions {
        match action {
            crate::broker::BrokerAction::ToWorker(request) => {
                let line = request_line(&request)?;
                if worker.stdin.write_all(line.as_bytes()).await.is_err() {
                    return Err(crashed(session_key));
                }
            }
            crate::broker::BrokerAction::ToGateway(event) => {
                if let WorkerEvent::ModelUsage { usage } = &event {
                    tracing::info!(
                        session_key,
                        turn_id,
                        input_tokens = usage.input_tokens,
                        cached_input_tokens = usage.cached_input_tokens,
                        output_tokens = usage.output_tokens,
                        total_tokens = usage.total_tokens,
                        retries = usage.retries,
                        "model call counted"
                    );
                }
                let line = serde_json::to_string(&event)
                    .map_err(|error| WireError::new(ErrorCode::Internal, error.to_string()))?;
                if context.progress.send(&format!("{line}\n")).await.is_err() {
                    return Err(WireError::new(
                        ErrorCode::Unavailable,
                        "the link closed during the turn",
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Kills the worker if the turn's future is dropped before the turn ends.
struct KillOnDrop<'a> {
    worker: Option<&'a mut Worker>,
}

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(worker) = self.worker.take() {
            worker.kill_group();
        }
    }
}

/// Encodes one line for a worker's stdin, newline included.
///
/// # Errors
/// `WORKER_LINE_TOO_LONG` when it is longer than [`MAX_WORKER_REQUEST_LINE_BYTES`], which the
/// worker would refuse; `INTERNAL` when it cannot be encoded.
fn request_line(request: &impl serde::Serialize) -> Result<String, WireError> {
    let mut line = serde_json::to_string(request)
        .map_err(|error| WireError::new(ErrorCode::Internal, error.to_string()))?;
    if line.len() > MAX_WORKER_REQUEST_LINE_BYTES {
        return Err(WireError::new(
            ErrorCode::WorkerLineTooLong,
            format!(
                "the request for the worker is {} bytes, more than {MAX_WORKER_REQUEST_LINE_BYTES}",
                line.len()
            ),
        ));
    }
    line.push('\n');
    Ok(line)
}

fn crashed(session_key: &str) -> WireError {
    tracing::warn!(session_key, "a worker exited during a turn");
    WireError::new(
        ErrorCode::WorkerCrashed,
        "the worker exited during the turn; the next message starts a new one",
    )
}

/// Returns the directory name of a session: 32 hex digits of the sha256 of its key, so any key
/// maps to a safe, fixed-length name.
pub(crate) fn session_dir_name(session_key: &str) -> String {
    hex::encode(&sha2::Sha256::digest(session_key.as_bytes())[..16])
}

/// Deletes the session's directory `<root>/sessions/<id>` (its execution workspace) and its
/// source cache `<root>/sources/<id>` through directory handles, never following a link the
/// sandbox planted; returns whether the session directory existed. The session's worker must
/// be stopped first.
pub(crate) fn discard_session_dir(root: &Path, session_key: &str) -> Result<bool, WireError> {
    let id = session_dir_name(session_key);
    let existed = remove_below_root(root, "sessions", &id)?;
    remove_below_root(root, crate::source::SOURCES_DIR, &id)?;
    Ok(existed)
}

/// Removes `<root>/<parent>/<name>` through handles; returns whether it existed.
fn remove_below_root(root: &Path, parent: &str, name: &str) -> Result<bool, WireError> {
    let parent = match Dir::open(root).and_then(|root| root.open_dir(parent)) {
        Ok(parent) => parent,
        Err(error) if error.code() == ErrorCode::NotFound => return Ok(false),
        Err(error) => return Err(error.to_wire()),
    };
    parent.remove(name).map_err(|error| error.to_wire())
}

/// The name of a session's execution workspace in its session directory.
pub(crate) const SESSION_WORKSPACE: &str = "workspace";

/// The mode of the node host's private directories.
pub(crate) const PRIVATE_DIR_MODE: u32 = 0o700;

/// Opens `<root>/sessions/<id>`, creating the missing directories 0700, one handle at a time.
pub(crate) fn open_session_dir(root: &Path, id: &str) -> gatehouse_fsops::Result<Dir> {
    Dir::open(root)?
        .ensure_dir("sessions", PRIVATE_DIR_MODE)?
        .ensure_dir(id, PRIVATE_DIR_MODE)
}

/// Creates, when missing, the session's execution workspace `<root>/sessions/<id>/workspace`
/// and the worker's private `TMPDIR` `<root>/tmp/worker-<id>`, whose mode is set to 0700 on
/// its handle even when it existed (an unsandboxed command can write there).
fn prepare_dirs(root: &Path, id: &str) -> gatehouse_fsops::Result<()> {
    open_session_dir(root, id)?.ensure_dir(SESSION_WORKSPACE, PRIVATE_DIR_MODE)?;
    Dir::open(root)?
        .ensure_dir("tmp", PRIVATE_DIR_MODE)?
        .ensure_dir(&format!("worker-{id}"), PRIVATE_DIR_MODE)?
        .set_mode(PRIVATE_DIR_MODE)
}

/// `agent.turn`.
pub(crate) struct AgentTurnHandler {
    pub(crate) supervisor: Arc<WorkerSupervisor>,
}

impl Serve<AgentTurn, InvokeContext> for AgentTurnHandler {
    fn serve(
        &self,
        params: AgentTurnParams,
        mut context: InvokeContext,
    ) -> Served<AgentTurnResult> {
        let supervisor = Arc::clone(&self.supervisor);
        Box::pin(async move { supervisor.run_turn(params, &mut context).await })
    }
}

/// Copies staged inputs (workspace-relative paths under `media/inbound/gatehouse-staged-*`)
/// from the Agent workspace, where the Gateway staged them, into the session workspace, at the
/// same relative paths. Both sides go through fsops: no link is followed on either.
fn copy_attachments(
    agent_workspace: &Path,
    session_workspace: &Dir,
    paths: &[String],
) -> Result<(), WireError> {
    let source = gatehouse_fsops::Root::open(agent_workspace).map_err(|error| error.to_wire())?;
    for path in paths {
        if !path.starts_with("media/inbound/gatehouse-staged-") {
            return Err(WireError::new(
                ErrorCode::PolicyDenied,
                format!("{path} is not a staged input"),
            ));
        }
        let rel = gatehouse_fsops::RelPath::parse(path).map_err(|error| error.to_wire())?;
        let fetched = source
            .fetch(
                &rel,
                gatehouse_fsops::root::FetchLimits {
                    max_bytes: gatehouse_protocol::commands::HARD_MAX_BYTES,
                    content: gatehouse_fsops::root::ContentMode::Transfer,
                },
            )
            .map_err(|error| error.to_wire())?;
        let Some((parent, name)) = rel.split_last() else {
            return Err(WireError::new(
                ErrorCode::InvalidPath,
                "a staged input names no file",
            ));
        };
        session_workspace
            .ensure_dirs(&parent, STAGED_DIR_MODE)
            .and_then(|dir| {
                dir.write_file(
                    name,
                    &fetched.content.unwrap_or_default(),
                    STAGED_FILE_MODE,
                    Overwrite::Allow,
                )
            })
            .map_err(|error| error.to_wire())?;
    }
    Ok(())
}

/// The mode of the directories of staged inputs and restored files in a session workspace.
const STAGED_DIR_MODE: u32 = 0o755;

/// The mode of a staged input.
const STAGED_FILE_MODE: u32 = 0o644;

/// Creates the session workspace `workspace` in `session_dir` (it must not exist) and writes
/// the checkpoint entries into it.
///
/// The manifest is checked first ([`validate_manifest`]: canonical paths, nothing below a link,
/// known kinds, the bounds), then each file's content is decoded and checked against its hash
/// as [`write_new_workspace`] writes the entries.
///
/// # Errors
/// `CHECKPOINT_INVALID` for a manifest the rules refuse; `INVALID_PARAMS` for a file without
/// content; `INTEGRITY_FAILURE` for content that does not match its hash; and the errors of
/// [`write_new_workspace`].
fn restore_entries(session_dir: &Dir, entries: &[CheckpointEntry]) -> Result<usize, WireError> {
    validate_manifest(entries).map_err(|error| error.to_wire())?;
    let decoded = entries
        .iter()
        .enumerate()
        .map(|(index, entry)| decode_entry(index, entry));
    write_new_workspace(session_dir, decoded)
}

/// Decodes entry `index` of a checkpoint for [`write_new_workspace`].
///
/// # Errors
/// `INVALID_PARAMS` for a file without content; `INTEGRITY_FAILURE` for content that does not
/// match its hash; the decoder's error for content that is not strict base64.
pub(crate) fn decode_entry(index: usize, entry: &CheckpointEntry) -> Result<NewEntry, WireError> {
    match (entry.kind.as_str(), &entry.content.base64, &entry.target) {
        (KIND_FILE, Some(content), _) => {
            let content = gatehouse_fsops::commands::decode_base64_strict(content)
                .map_err(|error| error.to_wire())?;
            let sha256 = gatehouse_fsops::commands::sha256_hex(&content);
            if entry.sha256.as_deref() != Some(sha256.as_str()) {
                return Err(WireError::new(
                    ErrorCode::IntegrityFailure,
                    format!("the content of entry {index} does not match its sha256"),
                ));
            }
            Ok(NewEntry {
                path: entry.path.clone(),
                kind: NewEntryKind::File {
                    content,
                    executable: entry.executable,
                },
            })
        }
        (KIND_SYMLINK, _, Some(target)) => Ok(NewEntry {
            path: entry.path.clone(),
            kind: NewEntryKind::Symlink {
                target: target.clone(),
            },
        }),
        _ => Err(WireError::new(
            ErrorCode::InvalidParams,
            format!("entry {index} is incomplete"),
        )),
    }
}

/// One entry written into a new session workspace by [`write_new_workspace`], its content
/// decoded.
pub(crate) struct NewEntry {
    /// The path relative to the session workspace; parsed as a [`gatehouse_fsops::RelPath`].
    pub(crate) path: String,
    /// What is written there.
    pub(crate) kind: NewEntryKind,
}

/// What a [`NewEntry`] is.
pub(crate) enum NewEntryKind {
    /// A regular file, mode 0755 when `executable`, else 0644.
    File {
        /// The file's bytes.
        content: Vec<u8>,
        /// Whether the file is executable.
        executable: bool,
    },
    /// A symbolic link; its target is text, stored as given and never resolved.
    Symlink {
        /// The link target.
        target: String,
    },
}

/// Creates the session workspace `workspace` in `session_dir` (nothing may be there) and writes
/// `entries` into it, in order; returns how many were written. The one writer of
/// `agent.session.restore` and `agent.session.source`.
///
/// Every entry is created through directory handles: parents with `mkdirat` and `O_NOFOLLOW`
/// opens (mode 0755), files as temporary files renamed into place with their mode (never over
/// anything), links with `symlinkat`. A link is never followed, so even an entry below a link
/// that the caller's checks missed could not be written through it. The entries are consumed
/// one at a time, so a caller can produce each one as it is written. When an entry fails, the
/// partly written workspace is removed again (through handles), so a retry starts afresh.
///
/// # Errors
/// `EXISTS_NO_OVERWRITE` when the workspace exists; the first error `entries` yields;
/// `INVALID_PATH` for an entry naming the workspace itself; fsops codes for I/O failures.
pub(crate) fn write_new_workspace(
    session_dir: &Dir,
    entries: impl Iterator<Item = Result<NewEntry, WireError>>,
) -> Result<usize, WireError> {
    let workspace = match session_dir.create_dir(SESSION_WORKSPACE, PRIVATE_DIR_MODE) {
        Ok(workspace) => workspace,
        Err(gatehouse_fsops::FsError::ExistsNoOverwrite { .. }) => {
            return Err(workspace_exists());
        }
        Err(error) => return Err(error.to_wire()),
    };
    let mut written = 0;
    for entry in entries {
        let outcome = entry.and_then(|entry| write_new_entry(&workspace, &entry));
        if let Err(error) = outcome {
            if let Err(cleanup) = session_dir.remove(SESSION_WORKSPACE) {
                tracing::warn!(error = %cleanup, "cannot remove a partly written session workspace");
            }
            return Err(error);
        }
        written += 1;
    }
    Ok(written)
}

/// Writes one entry of [`write_new_workspace`].
fn write_new_entry(workspace: &Dir, entry: &NewEntry) -> Result<(), WireError> {
    let rel = gatehouse_fsops::RelPath::parse(&entry.path).map_err(|error| error.to_wire())?;
    let Some((parent, name)) = rel.split_last() else {
        return Err(WireError::new(
            ErrorCode::InvalidPath,
            "an entry names the workspace itself",
        ));
    };
    let parent_dir = workspace
        .ensure_dirs(&parent, STAGED_DIR_MODE)
        .map_err(|error| error.to_wire())?;
    match &entry.kind {
        NewEntryKind::File {
            content,
            executable,
        } => {
            let mode = match executable {
                true => 0o755,
                false => STAGED_FILE_MODE,
            };
            parent_dir.write_file(name, content, mode, Overwrite::Deny)
        }
        NewEntryKind::Symlink { target } => parent_dir.symlink(name, target),
    }
    .map_err(|error| error.to_wire())
}

/// The error of a session workspace that exists where a new one is to be created.
pub(crate) fn workspace_exists() -> WireError {
    WireError::new(
        ErrorCode::ExistsNoOverwrite,
        "the session workspace exists; it is not overwritten",
    )
}

/// `agent.session.restore`.
pub(crate) struct SessionRestoreHandler {
    pub(crate) supervisor: Arc<WorkerSupervisor>,
}

impl Serve<AgentSessionRestore, InvokeContext> for SessionRestoreHandler {
    fn serve(
        &self,
        params: AgentSessionRestoreParams,
        _context: InvokeContext,
    ) -> Served<AgentSessionRestoreResult> {
        let supervisor = Arc::clone(&self.supervisor);
        Box::pin(async move {
            let restored = supervisor.restore(params).await?;
            Ok(AgentSessionRestoreResult {
                restored: u64::try_from(restored).unwrap_or(u64::MAX),
            })
        })
    }
}

/// `agent.session.stop`.
pub(crate) struct SessionStopHandler {
    pub(crate) supervisor: Arc<WorkerSupervisor>,
}

impl Serve<AgentSessionStop, InvokeContext> for SessionStopHandler {
    fn serve(
        &self,
        params: AgentSessionStopParams,
        _context: InvokeContext,
    ) -> Served<AgentSessionStopResult> {
        let supervisor = Arc::clone(&self.supervisor);
        Box::pin(async move {
            let stopped = supervisor.stop(&params.session_key).await;
            let discarded = match params.discard {
                true => discard_session_dir(&supervisor.root, &params.session_key)?,
                false => false,
            };
            Ok(AgentSessionStopResult { stopped, discarded })
        })
    }
}

#[cfg(test)]
#[path = "worker_tests.rs"]
mod tests;
