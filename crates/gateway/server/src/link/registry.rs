//! [`NodeRegistry`]: the connected nodes, and invoking a command on one of them.

use gatehouse_protocol::runtime::RuntimeKind;
use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use gatehouse_protocol::command::NodeCommand;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::frame::EventFrame;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::names;
use gatehouse_protocol::invoke::InvokeCancel;
use gatehouse_protocol::invoke::InvokeRequest;
use gatehouse_protocol::invoke::InvokeResult;
use gatehouse_protocol::report::NodeReport;
use parking_lot::Mutex;
use tokio::sync::OwnedSemaphorePermit;
use tokio::sync::Semaphore;
use tokio::sync::mpsc;
use tokio::sync::oneshot;

use crate::link::progress::ByteBudget;
use crate::link::progress::ChunkRefusal;
use gatehouse_protocol::frame::MAX_FRAME_BYTES;

use crate::instruments::INVOKE_CANCELLED;
use crate::instruments::LinkMetrics;
use crate::link::progress::MAX_CONNECTION_BUFFERED_BYTES;
use crate::link::progress::ProgressLines;
use crate::link::progress::ProgressSink;
use crate::link::session::Outbound;

/// Why an invoke did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum InvokeError {
    /// No node is connected, so nothing was sent. Nothing falls back to a local path; the
    /// caller reports `DEPENDENCY_UNAVAILABLE`.
    #[error("the workspace node is not connected")]
    Unavailable,
    /// The request was sent and the node disconnected before answering: the command may or may
    /// not have run.
    #[error("the workspace node disconnected before answering")]
    Disconnected,
    /// The node did not answer within the timeout; the Gateway sent a cancel. The command may or
    /// may not have run.
    #[error("the workspace node did not answer within {0:?}")]
    Timeout(Duration),
    /// The node does not serve this command.
    #[error("the node does not serve {command}")]
    CommandNotDeclared {
        /// The command.
        command: String,
    },
    /// The node ran the command and it failed with a stable code.
    #[error("{0}")]
    Remote(WireError),
    /// The node's `node.invoke.result` is not a well-formed result envelope.
    #[error("the node sent a malformed result")]
    Malformed,
    /// The node answered with a payload that is not the command's result type.
    #[error("the node's answer to {command} is not its result: {reason}")]
    UndecodableResult {
        /// The command.
        command: &'static str,
        /// What the decoder found wrong.
        reason: String,
    },
    /// The parameters could not be encoded, so nothing was sent.
    #[error("cannot encode the parameters of {command}: {reason}")]
    UnencodableParams {
        /// The command.
        command: &'static str,
        /// What the encoder found wrong.
        reason: String,
    },
    /// The node sent more than the Gateway holds for an invoke (a progress chunk over 16 KiB,
    /// or progress past the connection's buffer); the invoke was failed with `code`, and the
    /// node was sent a cancel so it stops the command.
    #[error("the node overran the gateway's progress bounds ({code})")]
    Overrun {
        /// `PROGRESS_CHUNK_TOO_LARGE` or `NODE_BUFFER_EXHAUSTED`.
        code: ErrorCode,
    },
    /// The request would be a frame longer than the link carries, so nothing was sent (the
    /// node would drop the whole link, and every invoke on it, for a longer one).
    #[error("the {command} request is {bytes} bytes, past the link's {max} bytes per frame")]
    TooLarge {
        /// The command.
        command: &'static str,
        /// The frame's length.
        bytes: usize,
        /// [`MAX_FRAME_BYTES`].
        max: usize,
    },
}

impl InvokeError {
    /// Returns the stable code the node or the bounds gave, for the invoke's span: a code of the
    /// catalogue, or `unrecognized` for any other text a node sent, which could be of any size.
    fn code(&self) -> Option<&'static str> {
        match self {
            Self::Remote(error) => {
                Some(ErrorCode::parse(&error.code).map_or(UNRECOGNIZED_CODE, ErrorCode::as_str))
            }
            Self::Overrun { code } => Some(code.as_str()),
            Self::TooLarge { .. } => Some(ErrorCode::PayloadTooLarge.as_str()),
            _ => None,
        }
    }
}

/// Returns the `outcome` label of an invoke that ended with `error` (`None` for a result, `ok`):
/// a class, never the node's own code, which a node could choose without bound. The invoke's
/// span records the same class, and [`LinkMetrics::record_invoke`] counts it.
pub(crate) fn invoke_outcome(error: Option<&InvokeError>) -> &'static str {
    let Some(error) = error else {
        return "ok";
    };
    match error {
        InvokeError::Unavailable => "unavailable",
        InvokeError::Disconnected => "disconnected",
        InvokeError::Timeout(_) => "timeout",
        InvokeError::CommandNotDeclared { .. } => "not_declared",
        InvokeError::Remote(_) => "error",
        // An answer that is not the command's result type is as malformed as a broken frame.
        InvokeError::Malformed | InvokeError::UndecodableResult { .. } => "malformed",
        InvokeError::UnencodableParams { .. } => "unencodable",
        InvokeError::Overrun { .. } => "overrun",
        InvokeError::TooLarge { .. } => "too_large",
    }
}

/// What a span records, and a failed turn stores, for an error code that is not in this
/// build's catalogue.
pub(crate) const UNRECOGNIZED_CODE: &str = ErrorCode::UnrecognizedCode.as_str();

/// A node's answer to one invoke.
pub(crate) type InvokeOutcome = Result<InvokeResult, InvokeError>;

/// One live node connection.
#[derive(Debug)]
pub struct NodeConnection {
    /// The node's device id.
    pub device_id: String,
    /// The name the node gave.
    pub display_name: String,
    /// The runtime the node hosts.
    pub runtime: RuntimeKind,
    /// The commands the node declared.
    pub commands: Vec<String>,
    /// The node's Agent workspace root, as it declared.
    pub workspace_root: Option<String>,
    /// The protocol version the handshake settled on.
    pub protocol: u32,
    /// Unique per connection, to tell a replaced connection from its successor.
    pub conn_id: u64,
    /// When the connection was admitted, in Unix milliseconds.
    pub connected_at_ms: i64,
    outbound: mpsc::Sender<Outbound>,
    pending: Mutex<HashMap<String, Pending>>,
    /// Every progress byte held for this connection, across its invokes.
    budget: Arc<ByteBudget>,
    /// The turns (session key, turn id) whose `agent.turn` invoke runs on this connection now.
    turns: Mutex<HashSet<(String, String)>>,
    /// Slots for `node.gateway.tool` calls answered at once on this connection.
    tool_calls: Arc<Semaphore>,
    /// Malformed frames this connection sent, for sparse logging.
    malformed_frames: AtomicU64,
    /// The node's last `node.report`, exported by `/metrics` while the connection lives.
    report: Mutex<Option<NodeReport>>,
}

/// Whether the `count`-th occurrence of something a peer repeats at will is logged: the 1st,
/// 2nd, 4th, 8th, ..., so a flood writes a logarithmic number of lines, each with its count.
pub(crate) fn log_sparsely(count: u64) -> bool {
    count.is_power_of_two()
}

/// The most `node.gateway.tool` calls one connection may have in flight. Each holds a task and
/// its reply until the node reads it, so a node that sends calls and stops reading could
/// otherwise make the Gateway hold replies without bound; past it a call is refused at once
/// with `TOO_MANY_TOOL_CALLS`.
pub(crate) const MAX_GATEWAY_TOOL_CALLS_IN_FLIGHT: usize = 8;

/// A caller waiting for an invoke's result, and where its progress chunks go.
#[derive(Debug)]
struct Pending {
    result: oneshot::Sender<InvokeOutcome>,
    progress: Option<ProgressSink>,
}

impl NodeConnection {
    /// Counts a malformed frame and returns the count when it should be logged
    /// ([`log_sparsely`]).
    pub(crate) fn note_malformed_frame(&self) -> Option<u64> {
        let count = self.malformed_frames.fetch_add(1, Ordering::Relaxed) + 1;
        log_sparsely(count).then_some(count)
    }

    /// Takes one of the connection's [`MAX_GATEWAY_TOOL_CALLS_IN_FLIGHT`] tool-call slots, or
    /// `None` when all are in use; the slot is given back when the permit is dropped.
    pub(crate) fn try_tool_slot(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.tool_calls).try_acquire_owned().ok()
    }

    /// Returns a connection record; the session owns the other end of `outbound`.
    pub(crate) fn new(
        identity: ConnectionIdentity,
        conn_id: u64,
        connected_at_ms: i64,
        outbound: mpsc::Sender<Outbound>,
    ) -> Self {
        Self {
            device_id: identity.device_id,
            display_name: identity.display_name,
            runtime: identity.runtime,
            commands: identity.commands,
            workspace_root: identity.workspace_root,
            protocol: identity.protocol,
            conn_id,
            connected_at_ms,
            outbound,
            pending: Mutex::new(HashMap::new()),
            budget: Arc::new(ByteBudget::new(MAX_CONNECTION_BUFFERED_BYTES)),
            turns: Mutex::new(HashSet::new()),
            tool_calls: Arc::new(Semaphore::new(MAX_GATEWAY_TOOL_CALLS_IN_FLIGHT)),
            malformed_frames: AtomicU64::new(0),
            report: Mutex::new(None),
        }
    }

    /// Keeps `report` as the node's figures, replacing the previous report.
    pub(crate) fn set_report(&self, report: NodeReport) {
        *self.report.lock() = Some(report);
    }

    /// Returns the node's last `node.report`, or `None` before its first.
    pub fn report(&self) -> Option<NodeReport> {
        *self.report.lock()
    }

    /// Returns `(worker slots in use, capacity)` from the last report, as `u64`s to compare
    /// loads by cross-multiplying; `(0, 1)` for a node without a report or without workers.
    fn load(&self) -> (u64, u64) {
        match self.report() {
            Some(report) if report.worker_capacity > 0 => (
                u64::from(report.worker_slots_in_use),
                u64::from(report.worker_capacity),
            ),
            _ => (0, 1),
        }
    }

    /// Returns a progress channel for an invoke on this connection: the sink to pass to
    /// [`NodeRegistry::start_invoke`], and its lines, each at most `max_line` bytes. Both ends
    /// charge this connection's budget.
    pub fn progress_lines(&self, max_line: usize) -> (ProgressSink, ProgressLines) {
        ProgressLines::new(Arc::clone(&self.budget), max_line)
    }

    /// Returns the progress bytes held for this connection now.
    pub fn buffered_bytes(&self) -> usize {
        self.budget.used()
    }

    /// Records that the turn `turn_id` of `session_key` runs on this connection until the
    /// returned guard is dropped; only such a turn may call Gateway tools from this node.
    pub fn hold_turn(self: &Arc<Self>, session_key: &str, turn_id: &str) -> TurnHold {
        let key = (session_key.to_owned(), turn_id.to_owned());
        self.turns.lock().insert(key.clone());
        TurnHold {
            connection: Arc::clone(self),
            key,
        }
    }

    /// Returns true when the turn `turn_id` of `session_key` runs on this connection.
    pub fn runs_turn(&self, session_key: &str, turn_id: &str) -> bool {
        self.turns
            .lock()
            .contains(&(session_key.to_owned(), turn_id.to_owned()))
    }

    /// Returns true when the node declared every command in `commands`.
    pub fn serves_all(&self, commands: &[&str]) -> bool {
        commands
            .iter()
            .all(|command| self.commands.iter().any(|declared| declared == command))
    }

    /// Delivers a node's `node.invoke.result` to its waiting caller. Returns false when no caller
    /// waits (it timed out or went away).
    pub(crate) fn complete(&self, result: InvokeResult) -> bool {
        let waiter = self.pending.lock().remove(&result.id);
        match waiter {
            Some(pending) => pending.result.send(Ok(result)).is_ok(),
            None => false,
        }
    }

    /// Delivers a progress chunk of `invoke_id` to its caller, in order. A chunk over
    /// [`crate::link::progress::MAX_PROGRESS_CHUNK_BYTES`], or one that does not fit the
    /// connection's budget or the invoke's queue, fails that invoke rather than grow the
    /// Gateway or stall the link. A chunk for an invoke nobody waits for is dropped.
    ///
    /// # Errors
    /// The [`ChunkRefusal`] that failed the invoke, for the caller to audit.
    pub(crate) fn progress(&self, invoke_id: &str, chunk: String) -> Result<(), ChunkRefusal> {
        let mut pending = self.pending.lock();
        let Some(entry) = pending.get(invoke_id) else {
            return Ok(());
        };
        let Some(sink) = &entry.progress else {
            return Ok(());
        };
        let refusal = match crate::link::progress::deliver(&self.budget, sink, chunk) {
            Ok(()) => return Ok(()),
            Err(refusal) => refusal,
        };
        let waiter = pending.remove(invoke_id);
        drop(pending);
        if let Some(waiter) = waiter {
            self.overrun(invoke_id, waiter, refusal);
        }
        Err(refusal)
    }

    /// Fails the invoke `invoke_id` (if anyone waits for it) because of `refusal`.
    pub(crate) fn fail_invoke(&self, invoke_id: &str, refusal: ChunkRefusal) {
        let waiter = self.pending.lock().remove(invoke_id);
        if let Some(waiter) = waiter {
            self.overrun(invoke_id, waiter, refusal);
        }
    }

    /// Fails the caller of `invoke_id` with [`InvokeError::Overrun`] and tells the node to stop
    /// the command, whose further progress nobody reads.
    fn overrun(&self, invoke_id: &str, waiter: Pending, refusal: ChunkRefusal) {
        let _ = waiter.result.send(Err(InvokeError::Overrun {
            code: refusal.code(),
        }));
        self.send_cancel(invoke_id);
    }

    /// Sends `node.invoke.cancel` for `invoke_id`. When the outbound queue is full (a node that
    /// reads slowly), a task sends it once there is room, so the cancel is never dropped while
    /// the connection lives.
    fn send_cancel(&self, invoke_id: &str) {
        let cancel = InvokeCancel {
            id: invoke_id.to_owned(),
            node_id: self.device_id.clone(),
        };
        let frame = Outbound::Text(event_frame(names::NODE_INVOKE_CANCEL, &cancel));
        let frame = match self.outbound.try_send(frame) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => return,
            Err(mpsc::error::TrySendError::Full(frame)) => frame,
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let outbound = self.outbound.clone();
        runtime.spawn(async move {
            // Fails only when the connection ended, which ends the command too.
            let _ = outbound.send(frame).await;
        });
    }

    /// Fails every waiting caller at once; called when the connection ends. Dropping the senders
    /// wakes each receiver with an error that maps to [`InvokeError::Unavailable`].
    pub(crate) fn fail_all(&self) {
        self.pending.lock().clear();
    }

    /// Asks the transport to close this connection with `reason`.
    pub(crate) async fn outbound_close(&self, reason: &str) -> Result<(), ()> {
        self.outbound
            .send(Outbound::Close {
                code: gatehouse_protocol::frame::CLOSE_CODE_POLICY,
                reason: reason.to_owned(),
            })
            .await
            .map_err(|_| ())
    }

    fn register(
        &self,
        id: String,
        progress: Option<ProgressSink>,
    ) -> oneshot::Receiver<InvokeOutcome> {
        let (sender, receiver) = oneshot::channel();
        self.pending.lock().insert(
            id,
            Pending {
                result: sender,
                progress,
            },
        );
        receiver
    }

    fn forget(&self, id: &str) -> bool {
        self.pending.lock().remove(id).is_some()
    }
}

/// Keeps a turn recorded on its connection; see [`NodeConnection::hold_turn`].
#[derive(Debug)]
pub struct TurnHold {
    connection: Arc<NodeConnection>,
    key: (String, String),
}

impl Drop for TurnHold {
    fn drop(&mut self) {
        self.connection.turns.lock().remove(&self.key);
    }
}

/// What a node declared in its `connect`.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionIdentity {
    pub(crate) device_id: String,
    pub(crate) display_name: String,
    pub(crate) runtime: RuntimeKind,
    pub(crate) commands: Vec<String>,
    pub(crate) workspace_root: Option<String>,
    /// The protocol version the handshake settled on.
    pub(crate) protocol: u32,
}

/// The connected nodes, by device id.
#[derive(Debug, Default)]
pub struct NodeRegistry {
    connections: Mutex<HashMap<String, Arc<NodeConnection>>>,
    next_id: AtomicU64,
    connected: tokio::sync::Notify,
    metrics: LinkMetrics,
    /// When each node that connected since the start last disconnected.
    disconnected: Mutex<HashMap<String, tokio::time::Instant>>,
    /// When the registry was made (the Gateway started).
    started: StartedAt,
    /// The devices whose link or report changed since [`NodeRegistry::take_changed`], which the
    /// cluster mirrors into the store (one entry per device, so a node that reports in a loop
    /// costs one entry, not a queue).
    changed: Mutex<HashSet<String>>,
    /// Wakes [`NodeRegistry::wait_changed`].
    change: tokio::sync::Notify,
}

/// The moment a [`NodeRegistry`] was made.
#[derive(Debug)]
struct StartedAt(tokio::time::Instant);

impl Default for StartedAt {
    fn default() -> Self {
        Self(tokio::time::Instant::now())
    }
}

impl NodeRegistry {
    /// Returns the link's `/metrics` instruments: invokes and refused handshakes.
    pub fn metrics(&self) -> &LinkMetrics {
        &self.metrics
    }

    /// Returns a fresh id for a connection or an invoke.
    pub(crate) fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Adds `connection`, replacing (and returning) an earlier connection of the same device.
    pub(crate) fn insert(&self, connection: Arc<NodeConnection>) -> Option<Arc<NodeConnection>> {
        let replaced = self
            .connections
            .lock()
            .insert(connection.device_id.clone(), connection.clone());
        self.disconnected.lock().remove(&connection.device_id);
        self.connected.notify_waiters();
        self.mark_changed(&connection.device_id);
        replaced
    }

    /// Records that the link or the report of `device_id` changed.
    pub(crate) fn mark_changed(&self, device_id: &str) {
        self.changed.lock().insert(device_id.to_owned());
        self.change.notify_one();
    }

    /// Returns the devices whose link or report changed since the last call, and forgets them.
    pub(crate) fn take_changed(&self) -> HashSet<String> {
        std::mem::take(&mut *self.changed.lock())
    }

    /// Waits until a link or a report changes (at once when one changed since the last
    /// [`NodeRegistry::take_changed`]).
    pub(crate) async fn wait_changed(&self) {
        self.change.notified().await;
    }

    /// Asks every live connection to close with `reason` (the stable code); each node
    /// reconnects by itself.
    pub(crate) async fn close_all(&self, reason: &str) {
        for connection in self.all() {
            let _ = connection.outbound_close(reason).await;
        }
    }

    /// Returns how long `device_id` has been away: since its last connection ended, or since
    /// the Gateway started when it has not connected since; `None` while it is connected.
    pub fn absent_for(&self, device_id: &str) -> Option<Duration> {
        if self.connections.lock().contains_key(device_id) {
            return None;
        }
        let since = self
            .disconnected
            .lock()
            .get(device_id)
            .copied()
            .unwrap_or(self.started.0);
        Some(since.elapsed())
    }

    /// Removes the connection `conn_id` of `device_id`, unless a newer one replaced it.
    pub(crate) fn remove(&self, device_id: &str, conn_id: u64) {
        let mut connections = self.connections.lock();
        if connections
            .get(device_id)
            .is_some_and(|connection| connection.conn_id == conn_id)
        {
            connections.remove(device_id);
            self.disconnected
                .lock()
                .insert(device_id.to_owned(), tokio::time::Instant::now());
            drop(connections);
            self.mark_changed(device_id);
        }
    }

    /// Returns the connection of `device_id`.
    pub fn get(&self, device_id: &str) -> Option<Arc<NodeConnection>> {
        self.connections.lock().get(device_id).cloned()
    }

    /// Returns every live connection, ordered by device id.
    pub fn all(&self) -> Vec<Arc<NodeConnection>> {
        let mut all: Vec<Arc<NodeConnection>> = self.connections.lock().values().cloned().collect();
        all.sort_by(|left, right| left.device_id.cmp(&right.device_id));
        all
    }

    /// Returns the most recently connected node that serves every command in `commands`.
    pub fn find_serving(&self, commands: &[&str]) -> Option<Arc<NodeConnection>> {
        self.all()
            .into_iter()
            .filter(|connection| connection.serves_all(commands))
            .max_by_key(|connection| (connection.connected_at_ms, connection.conn_id))
    }

    /// Returns the connection of `device_id` once it serves every command in `commands`,
    /// waiting up to `grace` for it to connect (a session's own node reconnecting).
    pub async fn wait_node(
        &self,
        device_id: &str,
        commands: &[&str],
        grace: Duration,
    ) -> Option<Arc<NodeConnection>> {
        self.wait_for(grace, || {
            self.get(device_id)
                .filter(|connection| connection.serves_all(commands))
        })
        .await
    }

    /// Returns the node a new session is placed on: among the connected nodes serving every
    /// command in `commands`, the least loaded by its last `node.report` (worker slots in use
    /// over its capacity; a node that has not reported, or hosts no workers, counts as empty),
    /// and the most recently connected among equally loaded ones. The reports lag a session's
    /// first turn by a moment, so sessions that start at once may land on the same node.
    pub fn find_placement(&self, commands: &[&str]) -> Option<Arc<NodeConnection>> {
        self.all()
            .into_iter()
            .filter(|connection| connection.serves_all(commands))
            .min_by(|a, b| {
                let (a_used, a_capacity) = a.load();
                let (b_used, b_capacity) = b.load();
                (a_used * b_capacity)
                    .cmp(&(b_used * a_capacity))
                    .then_with(|| {
                        (b.connected_at_ms, b.conn_id).cmp(&(a.connected_at_ms, a.conn_id))
                    })
            })
    }

    /// Returns [`Self::find_placement`], waiting up to `grace` for a node to connect.
    pub async fn wait_placement(
        &self,
        commands: &[&str],
        grace: Duration,
    ) -> Option<Arc<NodeConnection>> {
        self.wait_for(grace, || self.find_placement(commands)).await
    }

    /// Returns a node serving every command in `commands`, waiting up to `grace` for one to
    /// connect (a node reconnecting after a restart of either side).
    pub async fn wait_serving(
        &self,
        commands: &[&str],
        grace: Duration,
    ) -> Option<Arc<NodeConnection>> {
        self.wait_for(grace, || self.find_serving(commands)).await
    }

    /// Returns what `find` finds, looking again whenever a node connects, for up to `grace`.
    async fn wait_for(
        &self,
        grace: Duration,
        find: impl Fn() -> Option<Arc<NodeConnection>>,
    ) -> Option<Arc<NodeConnection>> {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            // Register for the wake-up before looking, so a node that connects in between is
            // not missed.
            let notified = self.connected.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(connection) = find() {
                return Some(connection);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return find();
            }
        }
    }

    /// Runs the command `C` with `params` on `connection` and waits at most `timeout` for its
    /// result.
    ///
    /// When the caller's future is dropped, or the timeout passes, the node is sent a
    /// `node.invoke.cancel`. When the connection ends, the call fails at once with
    /// [`InvokeError::Unavailable`].
    ///
    /// # Errors
    /// Every [`InvokeError`]; an answer that is not a `C::Result` is
    /// [`InvokeError::UndecodableResult`].
    pub async fn invoke<C: NodeCommand>(
        &self,
        connection: &Arc<NodeConnection>,
        params: &C::Params,
        timeout: Duration,
    ) -> Result<C::Result, InvokeError> {
        self.invoke_streaming::<C>(connection, params, timeout, None)
            .await
    }

    /// Runs the command `C` like [`NodeRegistry::invoke`], and delivers its
    /// `node.invoke.progress` chunks, in order, to `progress`; the sender is dropped when the
    /// invoke ends, after the last chunk.
    ///
    /// # Errors
    /// Every [`InvokeError`].
    pub async fn invoke_streaming<C: NodeCommand>(
        &self,
        connection: &Arc<NodeConnection>,
        params: &C::Params,
        timeout: Duration,
        progress: Option<ProgressSink>,
    ) -> Result<C::Result, InvokeError> {
        self.start_invoke::<C>(connection, params, timeout, progress)
            .await?
            .finish(timeout)
            .await
    }

    /// Sends `node.invoke.request` for the command `C` and returns the invoke in flight, whose
    /// `node.invoke.progress` chunks go to `progress`. A duplex command takes input through
    /// [`PendingInvoke::input`]; [`PendingInvoke::finish`] waits for the result. Dropping the
    /// invoke before its result sends `node.invoke.cancel`.
    ///
    /// # Errors
    /// [`InvokeError::CommandNotDeclared`], and [`InvokeError::Unavailable`] when the
    /// connection is gone.
    pub async fn start_invoke<C: NodeCommand>(
        &self,
        connection: &Arc<NodeConnection>,
        params: &C::Params,
        timeout: Duration,
        progress: Option<ProgressSink>,
    ) -> Result<PendingInvoke<C>, InvokeError> {
        let params_json =
            gatehouse_protocol::command::encode_params::<C>(params).map_err(|error| {
                InvokeError::UnencodableParams {
                    command: C::NAME,
                    // The decoder's message quotes the node's value: keep it short.
                    reason: crate::audit::bounded_str(&error.to_string()).into_owned(),
                }
            })?;
        let raw = self
            .start_raw(connection, C::NAME, params_json, timeout, progress)
            .await?;
        Ok(PendingInvoke {
            raw,
            command: std::marker::PhantomData,
        })
    }

    /// Sends `node.invoke.request` for `command` with the JSON text `params_json`; the typed
    /// [`NodeRegistry::start_invoke`] is the only caller.
    async fn start_raw(
        &self,
        connection: &Arc<NodeConnection>,
        command: &'static str,
        params_json: String,
        timeout: Duration,
        progress: Option<ProgressSink>,
    ) -> Result<RawInvoke, InvokeError> {
        let started = Instant::now();
        if !connection.serves_all(&[command]) {
            let error = InvokeError::CommandNotDeclared {
                command: command.to_owned(),
            };
            self.metrics
                .record_invoke(command, invoke_outcome(Some(&error)), started.elapsed());
            return Err(error);
        }
        let id = format!("inv-{}", self.next_id());
        let span = tracing::info_span!(
            "node_invoke",
            command,
            node = %connection.device_id,
            invoke_id = %id,
            outcome = tracing::field::Empty,
            error_code = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        let request = InvokeRequest {
            id: id.clone(),
            node_id: connection.device_id.clone(),
            command: command.to_owned(),
            params_json: Some(params_json),
            timeout_ms: Some(u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX)),
            traceparent: gatehouse_telemetry::traceparent(&span),
        };
        let frame = event_frame(names::NODE_INVOKE_REQUEST, &request);
        if frame.len() > MAX_FRAME_BYTES {
            let error = InvokeError::TooLarge {
                command,
                bytes: frame.len(),
                max: MAX_FRAME_BYTES,
            };
            self.metrics
                .record_invoke(command, invoke_outcome(Some(&error)), started.elapsed());
            return Err(error);
        }
        let receiver = connection.register(id.clone(), progress);
        let mut pending = RawInvoke {
            connection: Arc::clone(connection),
            id,
            receiver: Some(receiver),
            next_input_seq: Arc::new(AtomicU64::new(0)),
            command,
            span,
            started,
            metrics: self.metrics.clone(),
            recorded: false,
        };
        if connection
            .outbound
            .send(Outbound::Text(frame))
            .await
            .is_err()
        {
            let error = InvokeError::Unavailable;
            pending.note_end(Some(&error));
            return Err(error);
        }
        Ok(pending)
    }
}

/// An invoke of the command `C` that was sent and has no result yet. Dropping it before
/// [`PendingInvoke::finish`] returns sends `node.invoke.cancel` (the caller gave up).
#[derive(Debug)]
pub struct PendingInvoke<C: NodeCommand> {
    raw: RawInvoke,
    command: std::marker::PhantomData<fn() -> C>,
}

impl<C: NodeCommand> PendingInvoke<C> {
    /// Returns the invoke id.
    pub fn id(&self) -> &str {
        &self.raw.id
    }

    /// Returns a handle that sends `node.invoke.input` to this invoke, usable while another task
    /// waits in [`PendingInvoke::finish`].
    pub fn inputs(&self) -> InvokeInputs {
        InvokeInputs {
            connection: Arc::clone(&self.raw.connection),
            id: self.raw.id.clone(),
            next_seq: Arc::clone(&self.raw.next_input_seq),
        }
    }

    /// Sends one `node.invoke.input` to a duplex command; `payload_json` is a JSON text.
    ///
    /// # Errors
    /// [`InvokeError::Unavailable`] when the connection is gone.
    pub async fn input(&self, payload_json: String) -> Result<(), InvokeError> {
        self.inputs().send(payload_json).await
    }

    /// Waits at most `timeout` for the result and decodes it as a `C::Result`.
    ///
    /// # Errors
    /// Every [`InvokeError`]; on a timeout the node is sent a cancel.
    pub async fn finish(mut self, timeout: Duration) -> Result<C::Result, InvokeError> {
        let outcome = self.raw.wait(timeout).await.and_then(|payload| {
            gatehouse_protocol::command::decode_result::<C>(payload).map_err(|error| {
                InvokeError::UndecodableResult {
                    command: C::NAME,
                    // The decoder's message quotes the node's value: keep it short.
                    reason: crate::audit::bounded_str(&error.to_string()).into_owned(),
                }
            })
        });
        self.raw.note_end(outcome.as_ref().err());
        outcome
    }
}

/// The untyped part of an invoke in flight: the waiting caller's receiver and the cancel on
/// drop.
#[derive(Debug)]
struct RawInvoke {
    connection: Arc<NodeConnection>,
    id: String,
    receiver: Option<oneshot::Receiver<InvokeOutcome>>,
    next_input_seq: Arc<AtomicU64>,
    /// The command, its start and where its end is counted for `/metrics`.
    command: &'static str,
    /// The `node_invoke` span: it starts when the request is sent, gets its outcome and
    /// duration when the invoke ends, and closes when this value is dropped.
    span: tracing::Span,
    started: Instant,
    metrics: LinkMetrics,
    /// Whether the end was counted; an invoke dropped before that was cancelled by its caller.
    recorded: bool,
}

impl RawInvoke {
    /// Counts the invoke's end, once, with `error` (`None` for a result), in `/metrics` and
    /// on its span.
    fn note_end(&mut self, error: Option<&InvokeError>) {
        if std::mem::replace(&mut self.recorded, true) {
            return;
        }
        let elapsed = self.started.elapsed();
        self.metrics
            .record_invoke(self.command, invoke_outcome(error), elapsed);
        self.span.record("outcome", invoke_outcome(error));
        if let Some(code) = error.and_then(InvokeError::code) {
            self.span.record("error_code", code);
        }
        self.span.record(
            "duration_ms",
            u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX),
        );
    }

    /// Waits at most `timeout` for the result payload (`null` when the node sent none).
    async fn wait(&mut self, timeout: Duration) -> Result<serde_json::Value, InvokeError> {
        let Some(receiver) = self.receiver.as_mut() else {
            return Err(InvokeError::Malformed);
        };
        let outcome = tokio::time::timeout(timeout, receiver).await;
        let result = match outcome {
            Err(_elapsed) => return Err(InvokeError::Timeout(timeout)),
            Ok(Err(_closed)) => {
                self.receiver = None;
                return Err(InvokeError::Disconnected);
            }
            Ok(Ok(result)) => {
                self.receiver = None;
                result?
            }
        };
        match (result.ok, result.payload, result.payload_json, result.error) {
            (true, Some(payload), _, _) => Ok(payload),
            (true, None, Some(text), _) => {
                serde_json::from_str(&text).map_err(|_| InvokeError::Malformed)
            }
            (true, None, None, _) => Ok(serde_json::Value::Null),
            (false, _, _, Some(error)) => Err(InvokeError::Remote(error)),
            (false, _, _, None) => Err(InvokeError::Malformed),
        }
    }
}

/// Sends `node.invoke.input` events to one duplex invoke, in order.
#[derive(Debug, Clone)]
pub struct InvokeInputs {
    connection: Arc<NodeConnection>,
    id: String,
    next_seq: Arc<AtomicU64>,
}

impl InvokeInputs {
    /// Sends one input; `payload_json` is a JSON text.
    ///
    /// # Errors
    /// [`InvokeError::Unavailable`] when the connection is gone.
    pub async fn send(&self, payload_json: String) -> Result<(), InvokeError> {
        let input = gatehouse_protocol::invoke::InvokeInput {
            id: self.id.clone(),
            node_id: self.connection.device_id.clone(),
            seq: self.next_seq.fetch_add(1, Ordering::Relaxed),
            payload_json,
        };
        let frame = event_frame(names::NODE_INVOKE_INPUT, &input);
        self.connection
            .outbound
            .send(Outbound::Text(frame))
            .await
            .map_err(|_| InvokeError::Unavailable)
    }
}

impl Drop for RawInvoke {
    /// Counts an invoke whose caller stopped waiting before its end as cancelled, and sends
    /// `node.invoke.cancel` if the invoke ends without a result (timeout or caller gone).
    fn drop(&mut self) {
        if !self.recorded {
            self.metrics
                .record_invoke(self.command, INVOKE_CANCELLED, self.started.elapsed());
            self.span.record("outcome", INVOKE_CANCELLED);
        }
        if self.receiver.is_some() && self.connection.forget(&self.id) {
            self.connection.send_cancel(&self.id);
        }
    }
}

/// Returns the text of an event frame carrying `payload`.
pub(crate) fn event_frame(event: &str, payload: &impl serde::Serialize) -> String {
    let frame = Frame::Event(EventFrame {
        event: event.to_owned(),
        payload: serde_json::to_value(payload).ok(),
        seq: None,
    });
    serde_json::to_string(&frame).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::ConnectionIdentity;
    use super::MAX_GATEWAY_TOOL_CALLS_IN_FLIGHT;
    use super::NodeConnection;

    /// A connected native node `device_id`, connected at `connected_at_ms`, whose last report
    /// says `report` (`(slots in use, capacity)`), or none.
    fn native_node(
        device_id: &str,
        connected_at_ms: i64,
        report: Option<(u32, u32)>,
    ) -> std::sync::Arc<NodeConnection> {
        let (outbound, _receiver) = tokio::sync::mpsc::channel(1);
        let identity = ConnectionIdentity {
            device_id: device_id.to_owned(),
            display_name: device_id.to_owned(),
            runtime: gatehouse_protocol::runtime::RuntimeKind::Native,
            commands: vec![String::from("agent.turn")],
            workspace_root: None,
            protocol: gatehouse_protocol::handshake::PROTOCOL_VERSION,
        };
        let connection = NodeConnection::new(identity, 1, connected_at_ms, outbound);
        if let Some((worker_slots_in_use, worker_capacity)) = report {
            connection.set_report(gatehouse_protocol::report::NodeReport {
                worker_slots_in_use,
                worker_capacity,
            });
        }
        std::sync::Arc::new(connection)
    }

    #[test]
    fn issue_16_a_new_session_goes_to_the_least_loaded_node_the_newest_among_equals() {
        // Each node: its id, when it connected, its last report; then the node expected.
        type Nodes<'a> = &'a [(&'a str, i64, Option<(u32, u32)>)];
        let cases: &[(Nodes<'_>, &str)] = &[
            // By share of slots in use, not by count: 3 of 16 is less loaded than 1 of 2.
            (&[("a", 1, Some((1, 2))), ("b", 2, Some((3, 16)))], "b"),
            (&[("a", 2, Some((2, 8))), ("b", 1, Some((1, 8)))], "b"),
            // A full node only when every node is full.
            (&[("a", 1, Some((8, 8))), ("b", 2, Some((7, 8)))], "b"),
            // Equal loads: the most recently connected.
            (&[("a", 1, Some((1, 4))), ("b", 2, Some((2, 8)))], "b"),
            (&[("a", 3, Some((1, 4))), ("b", 2, Some((2, 8)))], "a"),
            // A node that has not reported yet counts as empty.
            (&[("a", 1, Some((1, 8))), ("b", 2, None)], "b"),
            (&[("a", 1, Some((0, 8))), ("b", 2, None)], "b"),
        ];
        for (nodes, expected) in cases {
            let registry = super::NodeRegistry::default();
            for (device_id, connected_at_ms, report) in *nodes {
                registry.insert(native_node(device_id, *connected_at_ms, *report));
            }
            let placed = registry.find_placement(&["agent.turn"]).expect("a node");
            assert_eq!(placed.device_id, *expected, "{nodes:?}");
        }
        let registry = super::NodeRegistry::default();
        assert!(registry.find_placement(&["agent.turn"]).is_none());
    }

    #[test]
    fn finding_5_a_connection_has_a_bounded_number_of_gateway_tool_slots() {
        let (outbound, _receiver) = tokio::sync::mpsc::channel(1);
        let identity = ConnectionIdentity {
            device_id: String::from("n"),
            display_name: String::from("n"),
            runtime: gatehouse_protocol::runtime::RuntimeKind::Native,
            commands: Vec::new(),
            workspace_root: None,
            protocol: gatehouse_protocol::handshake::PROTOCOL_VERSION,
        };
        let connection = NodeConnection::new(identity, 1, 0, outbound);
        let mut held: Vec<_> = (0..MAX_GATEWAY_TOOL_CALLS_IN_FLIGHT)
            .map(|_| connection.try_tool_slot().expect("a free slot"))
            .collect();
        assert!(connection.try_tool_slot().is_none());
        held.pop();
        assert!(connection.try_tool_slot().is_some());
    }

    #[tokio::test]
    async fn a_cancel_waits_for_room_when_a_slow_node_filled_the_outbound_queue() {
        use crate::link::session::Outbound;
        let (outbound, mut sent) = tokio::sync::mpsc::channel(1);
        let identity = ConnectionIdentity {
            device_id: String::from("n"),
            display_name: String::from("n"),
            runtime: gatehouse_protocol::runtime::RuntimeKind::Native,
            commands: Vec::new(),
            workspace_root: None,
            protocol: gatehouse_protocol::handshake::PROTOCOL_VERSION,
        };
        let connection = NodeConnection::new(identity, 1, 0, outbound.clone());
        outbound
            .send(Outbound::Text(String::from("queued before")))
            .await
            .unwrap();
        connection.send_cancel("inv-7");
        let mut frames = Vec::new();
        for _ in 0..2 {
            match sent.recv().await {
                Some(Outbound::Text(text)) => frames.push(text),
                other => panic!("not a text frame: {other:?}"),
            }
        }
        let cancel: serde_json::Value = serde_json::from_str(&frames[1]).unwrap();
        assert_eq!(
            (
                frames[0].as_str(),
                &cancel["event"],
                &cancel["payload"]["id"]
            ),
            (
                "queued before",
                &serde_json::json!("node.invoke.cancel"),
                &serde_json::json!("inv-7")
            )
        );
    }

    /// Invokes `agent.turn` on a connection whose node answers `payload`, and returns the
    /// params the node was sent and the typed outcome.
    async fn turn_answered_with(
        payload: serde_json::Value,
    ) -> (
        serde_json::Value,
        Result<gatehouse_protocol::worker::AgentTurnResult, super::InvokeError>,
    ) {
        use gatehouse_protocol::command::AgentTurn;
        use gatehouse_protocol::command::Command;
        let (outbound, mut sent) = tokio::sync::mpsc::channel(4);
        let identity = ConnectionIdentity {
            device_id: String::from("n"),
            display_name: String::from("n"),
            runtime: gatehouse_protocol::runtime::RuntimeKind::Native,
            commands: vec![AgentTurn::NAME.to_owned()],
            workspace_root: None,
            protocol: gatehouse_protocol::handshake::PROTOCOL_VERSION,
        };
        let connection = std::sync::Arc::new(NodeConnection::new(identity, 1, 0, outbound));
        let registry = super::NodeRegistry::default();
        let params = gatehouse_protocol::worker::AgentTurnParams {
            session_key: String::from("s"),
            turn_id: String::from("t"),
            history: Vec::new(),
            user_texts: vec![String::from("hello")],
            attachments: Vec::new(),
            checkpoint_id: None,
            workspace_required: false,
            gateway_tools: Vec::new(),
            denied_tools: Vec::new(),
            skills_prompt: None,
            skill_copies: Vec::new(),
            traceparent: None,
            max_turn_tokens: None,
        };
        let pending = registry
            .start_invoke::<AgentTurn>(
                &connection,
                &params,
                std::time::Duration::from_secs(5),
                None,
            )
            .await
            .expect("the invoke is sent");
        let Some(super::Outbound::Text(frame)) = sent.recv().await else {
            panic!("no request frame");
        };
        let frame: serde_json::Value = serde_json::from_str(&frame).expect("a JSON frame");
        let request: gatehouse_protocol::invoke::InvokeRequest =
            serde_json::from_value(frame["payload"].clone()).expect("an invoke request");
        assert_eq!(request.command, "agent.turn");
        let sent_params: serde_json::Value =
            serde_json::from_str(request.params_json.as_deref().unwrap_or("null"))
                .expect("JSON params");
        let answered = connection.complete(gatehouse_protocol::invoke::InvokeResult {
            id: request.id,
            node_id: String::from("n"),
            ok: true,
            payload: Some(payload),
            payload_json: None,
            error: None,
        });
        assert!(answered);
        (
            sent_params,
            pending.finish(std::time::Duration::from_secs(5)).await,
        )
    }

    #[tokio::test]
    async fn a_typed_invoke_sends_its_params_and_decodes_its_result() {
        let (params, outcome) = turn_answered_with(serde_json::json!({"reply": "hi"})).await;
        assert_eq!(params["sessionKey"], "s");
        assert_eq!(params["userTexts"], serde_json::json!(["hello"]));
        assert_eq!(outcome.expect("a turn result").reply, "hi");
    }

    #[tokio::test]
    async fn an_answer_of_another_shape_is_an_undecodable_result() {
        let (_, outcome) = turn_answered_with(serde_json::json!({"stopped": true})).await;
        match outcome {
            Err(super::InvokeError::UndecodableResult { command, reason }) => {
                assert_eq!(command, "agent.turn");
                assert!(reason.contains("reply"), "{reason}");
            }
            other => panic!("expected an undecodable result, got {other:?}"),
        }
    }

    #[test]
    fn a_span_records_only_catalogue_codes_of_a_node() {
        let huge = super::InvokeError::Remote(gatehouse_protocol::error::WireError {
            code: "A".repeat(25 * 1024 * 1024),
            message: String::from("m"),
            details: None,
            retryable: None,
        });
        assert_eq!(huge.code(), Some(super::UNRECOGNIZED_CODE));
        let known = super::InvokeError::Remote(gatehouse_protocol::error::WireError::new(
            gatehouse_protocol::error::ErrorCode::NotFound,
            "m",
        ));
        assert_eq!(
            known.code(),
            Some(gatehouse_protocol::error::ErrorCode::NotFound.as_str())
        );
    }

    #[test]
    fn finding_5_malformed_frames_are_logged_sparsely() {
        let logged: Vec<u64> = (1..=1000)
            .filter(|count| super::log_sparsely(*count))
            .collect();
        assert_eq!(logged, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
    }
}
