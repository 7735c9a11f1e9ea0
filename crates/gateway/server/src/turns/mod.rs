//! Sessions and turns: admission, one active turn per session, queue modes, a global cap on
//! concurrent turns, dispatch to the runtime, and the durable record of every outcome.
//!
//! - A message is admitted (and durable) before the API answers; see [`TurnEngine::admit`].
//! - Each session has at most one driver task, which claims queued turns in order and runs them
//!   one at a time. A global semaphore caps concurrent turns; past it, turns wait as `queued`.
//! - Before each claim the [`Dispatcher`] says where the session's next turn runs: here (the
//!   claim is made under this replica's lease, the [`Fence`] every write of the turn carries),
//!   on the replica that holds the session's node, later (its node is away), or nowhere (the
//!   turn fails without running).
//! - A turn left `running` by a crash, or by a replica whose lease expired, is marked
//!   `interrupted` (by the next lease of its replica, or by a surviving replica) and never
//!   replayed.

pub(crate) mod events;
pub(crate) mod runtime;

use gatehouse_protocol::error::ErrorCode;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::cluster::ClaimOutcome;
use gatehouse_store::cluster::Fence;
use gatehouse_store::records::Admitted;
use gatehouse_store::records::Attachment;
use gatehouse_store::records::NewUserMessage;
use gatehouse_store::records::QueueMode;
use gatehouse_store::records::TurnEnd;
use gatehouse_store::records::TurnRecord;
use gatehouse_store::records::TurnStatus;
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::instruments::TurnMetrics;
use crate::turns::events::EventHub;
use crate::turns::runtime::TurnFailure;
use crate::turns::runtime::TurnInput;
use crate::turns::runtime::TurnReply;
use crate::turns::runtime::TurnRuntime;
use crate::turns::runtime::TurnSink;
use crate::turns::runtime::UsageMeter;
use gatehouse_protocol::time::now_ms;

/// The default cap on turns running at once across all sessions.
pub const DEFAULT_MAX_CONCURRENT_TURNS: usize = 64;

/// The capacity of a running turn's steer channel.
const STEER_CAPACITY: usize = 16;

/// The first wait before the end of a turn is stored again after the store was unreachable; it
/// doubles up to [`STORE_RETRY_MAX`] until the store answers or the Gateway shuts down.
const STORE_RETRY_FIRST: std::time::Duration = std::time::Duration::from_millis(200);

/// The longest wait between two attempts to store the end of a turn.
const STORE_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// Stages a turn's attachments on the Harness before dispatch.
#[async_trait::async_trait]
pub(crate) trait AttachmentStager: Send + Sync + 'static {
    /// Stages `attachments` for `turn_id` and returns the
    /// workspace-relative paths of the staged files.
    ///
    /// # Errors
    /// A [`TurnFailure`] when a required attachment cannot be staged; the turn then fails before
    /// dispatch.
    async fn stage(
        &self,
        turn_id: &str,
        attachments: &[Attachment],
    ) -> Result<Vec<String>, TurnFailure>;
}

/// Where a session's next turn runs, as the [`Dispatcher`] decides it.
#[derive(Debug)]
pub(crate) enum Route {
    /// On this replica, claimed under this lease.
    Here(Fence),
    /// On the replica holding the session's node, which claims it itself.
    Elsewhere,
    /// Not now: the session's node is away (within its grace) or this replica has no lease;
    /// the sweep asks again.
    Wait,
    /// Nowhere: the oldest queued turn fails with this failure, without running (its node has
    /// been away past the grace, or no node serves the runtime), written under this lease.
    Fail(Fence, TurnFailure),
}

/// Decides where each session's turns run, and reaches turns that run on another replica.
#[async_trait::async_trait]
pub(crate) trait Dispatcher: Send + Sync + 'static {
    /// Returns where the next turn of `session_key` runs, for turns of `runtime`.
    async fn route(&self, session_key: &str, runtime: Option<&Arc<dyn TurnRuntime>>) -> Route;

    /// Aborts the running turn of `session_key` on the replica it runs on, when that is another
    /// one; returns whether one was aborted.
    async fn abort_elsewhere(&self, session_key: &str) -> bool;
}

/// A message to admit.
#[derive(Debug, Clone)]
pub(crate) struct IncomingMessage {
    /// The session.
    pub session_key: String,
    /// The user's text.
    pub text: String,
    /// The attachments, in request order.
    pub attachments: Vec<Attachment>,
    /// The caller's idempotency key.
    pub idempotency_key: Option<String>,
    /// How it is queued.
    pub queue_mode: QueueMode,
    /// The channel message it is, when it came from a channel.
    pub origin: Option<gatehouse_store::records::ChannelOrigin>,
    /// The name of the API key that sent it, when one did.
    pub api_key: Option<String>,
}

struct RunningTurn {
    turn_id: String,
    fence: Fence,
    cancel: CancellationToken,
    steer: mpsc::Sender<String>,
}

#[derive(Default)]
struct Drivers {
    /// Sessions with a driver task, and whether new work arrived while it ran.
    active: HashMap<String, bool>,
    running: HashMap<String, RunningTurn>,
}

/// Admits messages and drives turns.
pub(crate) struct TurnEngine {
    store: Arc<dyn Store>,
    hub: Arc<EventHub>,
    runtime: Option<Arc<dyn TurnRuntime>>,
    stager: Option<Arc<dyn AttachmentStager>>,
    dispatcher: Arc<dyn Dispatcher>,
    slots: Arc<Semaphore>,
    max_concurrent_turns: usize,
    drivers: Mutex<Drivers>,
    shutdown: CancellationToken,
    /// Notified when a turn ends here, so the channels' deliverer sends its reply at once.
    ends: Arc<tokio::sync::Notify>,
    /// The turn families of `/metrics`.
    pub metrics: TurnMetrics,
    /// The most tokens one turn may use (`--turn-max-tokens`).
    max_turn_tokens: Option<u64>,
}

/// Why a message was not admitted.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AdmitError {
    /// The store refused (for example a full disk); nothing was admitted.
    #[error("the message was not admitted")]
    Store(#[from] StoreError),
}

impl TurnEngine {
    /// Returns an engine. `runtime` is `None` until a runtime is configured: turns then fail with
    /// `NO_RUNTIME`.
    pub(crate) fn new(
        store: Arc<dyn Store>,
        hub: Arc<EventHub>,
        runtime: Option<Arc<dyn TurnRuntime>>,
        stager: Option<Arc<dyn AttachmentStager>>,
        dispatcher: Arc<dyn Dispatcher>,
        max_concurrent_turns: usize,
        max_turn_tokens: Option<u64>,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            hub,
            runtime,
            stager,
            dispatcher,
            slots: Arc::new(Semaphore::new(max_concurrent_turns.max(1))),
            max_concurrent_turns: max_concurrent_turns.max(1),
            drivers: Mutex::new(Drivers::default()),
            shutdown: CancellationToken::new(),
            ends: Arc::new(tokio::sync::Notify::new()),
            metrics: TurnMetrics::default(),
            max_turn_tokens,
        })
    }

    /// Returns what is notified (once, keeping a permit when nobody waits) each time a turn
    /// ends on this replica.
    pub(crate) fn turn_ends(&self) -> Arc<tokio::sync::Notify> {
        Arc::clone(&self.ends)
    }

    /// Returns the hub of the sessions' live events.
    pub(crate) fn hub(&self) -> &Arc<EventHub> {
        &self.hub
    }

    /// Returns the runtime turns are dispatched to, if one is configured.
    pub(crate) fn runtime(&self) -> Option<&Arc<dyn TurnRuntime>> {
        self.runtime.as_ref()
    }

    /// Returns the runtime name new sessions record.
    pub(crate) fn runtime_name(&self) -> &str {
        self.runtime
            .as_ref()
            .map_or("none", |runtime| runtime.name())
    }

    /// Records turns another lease left running, which [`ClusterStore::interrupt_orphaned_turns`]
    /// marked interrupted: their events reach the subscribers and `/metrics` counts them.
    ///
    /// [`ClusterStore::interrupt_orphaned_turns`]: gatehouse_store::ClusterStore::interrupt_orphaned_turns
    pub(crate) async fn record_interrupted(&self, interrupted: &[TurnRecord]) {
        for turn in interrupted {
            tracing::warn!(turn_id = %turn.turn_id, session_key = %turn.session_key, "turn interrupted: the gateway replica that ran it stopped or lost its lease; it is not replayed");
            self.metrics.count(self.runtime_name(), "interrupted");
            self.hub.sync(&turn.session_key).await;
        }
    }

    /// Returns whether a driver of `session_key` runs on this replica now.
    pub(crate) fn drives(&self, session_key: &str) -> bool {
        self.drivers.lock().active.contains_key(session_key)
    }

    /// Cancels every running turn of this replica (its lease was lost, so none of them can
    /// write any more); each ends as the store already has it.
    pub(crate) fn cancel_running(&self) {
        for running in self.drivers.lock().running.values() {
            running.cancel.cancel();
        }
    }

    /// Admits a message durably and schedules its session. For `interrupt`, the running turn is
    /// aborted first; for `steer`, the text goes to the running turn when the runtime supports it
    /// (and is otherwise queued as a follow-up).
    ///
    /// # Errors
    /// [`AdmitError::Store`]: nothing was admitted.
    pub(crate) async fn admit(
        self: &Arc<Self>,
        message: IncomingMessage,
    ) -> Result<Admitted, AdmitError> {
        if message.queue_mode == QueueMode::Interrupt {
            self.abort_anywhere(&message.session_key).await;
        }
        if message.queue_mode == QueueMode::Steer
            && let Some(admitted) = self.try_steer(&message).await?
        {
            return Ok(admitted);
        }
        let admitted = self
            .store
            .admit_user_message(&NewUserMessage {
                session_key: message.session_key.clone(),
                runtime: self.runtime_name().to_owned(),
                turn_id: new_turn_id(),
                text: message.text,
                attachments: message.attachments,
                idempotency_key: message.idempotency_key,
                queue_mode: message.queue_mode,
                origin: message.origin,
                api_key: message.api_key,
                now_ms: now_ms(),
            })
            .await?;
        if admitted.created {
            self.metrics.queue_changed();
            self.hub.sync(&message.session_key).await;
            self.kick(&message.session_key);
        }
        Ok(admitted)
    }

    /// Aborts the running turn of `session_key`; returns whether one was running.
    pub(crate) fn abort(&self, session_key: &str) -> bool {
        let drivers = self.drivers.lock();
        match drivers.running.get(session_key) {
            Some(running) => {
                running.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Aborts the running turn of `session_key` on this replica or, when it runs on another
    /// one, there; returns whether one was running.
    pub(crate) async fn abort_anywhere(&self, session_key: &str) -> bool {
        self.abort(session_key) || self.dispatcher.abort_elsewhere(session_key).await
    }

    /// Returns the cap on turns running at once.
    pub(crate) fn max_concurrent_turns(&self) -> usize {
        self.max_concurrent_turns
    }

    /// Returns the number of sessions with a running turn.
    pub(crate) fn active_sessions(&self) -> usize {
        self.drivers.lock().running.len()
    }

    /// Stops dispatching and cancels running turns (they end as `interrupted`).
    pub(crate) fn shut_down(&self) {
        self.shutdown.cancel();
        for running in self.drivers.lock().running.values() {
            running.cancel.cancel();
        }
    }

    async fn try_steer(&self, message: &IncomingMessage) -> Result<Option<Admitted>, AdmitError> {
        let supports = self
            .runtime
            .as_ref()
            .is_some_and(|runtime| runtime.supports_steer());
        if !supports {
            return Ok(None);
        }
        let target = {
            let drivers = self.drivers.lock();
            drivers.running.get(&message.session_key).map(|running| {
                (
                    running.turn_id.clone(),
                    running.fence.clone(),
                    running.steer.clone(),
                )
            })
        };
        let Some((turn_id, fence, steer)) = target else {
            return Ok(None);
        };
        // Reserve room first and commit before handing the text over: a message the runtime
        // sees is always in the transcript, and one that cannot be steered (the turn ended, or
        // its queue is full) is admitted as a new turn instead, never both.
        let Ok(permit) = steer.try_reserve() else {
            return Ok(None);
        };
        let sink = TurnSink::new(
            Arc::clone(&self.store),
            Arc::clone(&self.hub),
            fence,
            message.session_key.clone(),
            turn_id.clone(),
        );
        if sink.commit_user(&message.text).await.is_err() {
            return Ok(None);
        }
        permit.send(message.text.clone());
        let turn = self.store.turn(&turn_id).await?;
        Ok(turn.map(|turn| Admitted {
            turn,
            created: true,
        }))
    }

    /// Starts the session's driver, or tells the running one that new work arrived.
    pub(crate) fn kick(self: &Arc<Self>, session_key: &str) {
        if self.shutdown.is_cancelled() {
            return;
        }
        {
            let mut drivers = self.drivers.lock();
            if let Some(dirty) = drivers.active.get_mut(session_key) {
                *dirty = true;
                return;
            }
            drivers.active.insert(session_key.to_owned(), false);
        }
        let engine = Arc::clone(self);
        let session_key = session_key.to_owned();
        tokio::spawn(async move { engine.drive(session_key).await });
    }

    /// Runs the session's queued turns one at a time until none is left here.
    async fn drive(self: Arc<Self>, session_key: String) {
        loop {
            match self.next_turn(&session_key).await {
                Some((turn, fence, permit)) => {
                    let span = tracing::info_span!(
                        "turn",
                        session_key = %turn.session_key,
                        turn_id = %turn.turn_id,
                        runtime = self.runtime_name(),
                        outcome = tracing::field::Empty,
                        error_code = tracing::field::Empty,
                    );
                    self.run(turn, fence).instrument(span).await;
                    drop(permit);
                }
                None => {
                    let mut drivers = self.drivers.lock();
                    let dirty = drivers.active.get(&session_key).copied().unwrap_or(false);
                    if dirty && !self.shutdown.is_cancelled() {
                        drivers.active.insert(session_key.clone(), false);
                        continue;
                    }
                    drivers.active.remove(&session_key);
                    return;
                }
            }
        }
    }

    /// Returns the session's next turn claimed here, after failing the queued turns the
    /// dispatcher says can run nowhere; `None` when no turn of the session is this replica's to
    /// run now.
    async fn next_turn(
        &self,
        session_key: &str,
    ) -> Option<(TurnRecord, Fence, tokio::sync::OwnedSemaphorePermit)> {
        loop {
            if self.shutdown.is_cancelled() {
                return None;
            }
            match self
                .dispatcher
                .route(session_key, self.runtime.as_ref())
                .await
            {
                Route::Here(fence) => {
                    return self
                        .claim(session_key, &fence)
                        .await
                        .map(|(turn, permit)| (turn, fence, permit));
                }
                Route::Elsewhere | Route::Wait => return None,
                Route::Fail(fence, failure) => {
                    if !self.fail_queued(session_key, &fence, failure).await {
                        return None;
                    }
                }
            }
        }
    }

    /// Ends the oldest queued turn of `session_key` with `failure`, without running it; returns
    /// whether one ended.
    async fn fail_queued(&self, session_key: &str, fence: &Fence, failure: TurnFailure) -> bool {
        let queued = match self.store.next_queued_turn(session_key).await {
            Ok(Some(turn)) => turn,
            Ok(None) => return false,
            Err(error) => {
                tracing::error!(error = %error, session_key, "cannot read the next queued turn");
                return false;
            }
        };
        let failure = failure.bounded();
        let end = TurnEnd {
            status: TurnStatus::Failed,
            reply: None,
            error_code: Some(failure.code),
            error_message: Some(failure.message),
            usage: None,
            now_ms: now_ms(),
        };
        match self.store.finish_turn(fence, &queued.turn_id, &end).await {
            Ok(true) => {
                tracing::warn!(session_key, turn_id = %queued.turn_id, code = ?end.error_code, "a queued turn failed without running");
                self.metrics
                    .record_end(self.runtime_name(), "failed", std::time::Duration::ZERO);
                self.metrics.queue_changed();
                self.ends.notify_one();
                self.hub.sync(session_key).await;
                true
            }
            Ok(false) => false,
            Err(error) => {
                tracing::error!(error = %error, session_key, "cannot fail a queued turn");
                false
            }
        }
    }

    async fn claim(
        &self,
        session_key: &str,
        fence: &Fence,
    ) -> Option<(TurnRecord, tokio::sync::OwnedSemaphorePermit)> {
        let permit = tokio::select! {
            permit = Arc::clone(&self.slots).acquire_owned() => permit.ok()?,
            () = self.shutdown.cancelled() => return None,
        };
        // While the store is unreachable the claim is retried (as the end of a turn is, see
        // `finish_durably`), so queued turns run once it answers rather than at the next message.
        let mut wait = STORE_RETRY_FIRST;
        loop {
            match self
                .store
                .claim_next_turn(fence, session_key, now_ms())
                .await
            {
                Ok(ClaimOutcome::Claimed(turn)) => {
                    self.metrics.queue_changed();
                    return Some((*turn, permit));
                }
                Ok(ClaimOutcome::Idle) => return None,
                Ok(outcome @ (ClaimOutcome::NotHolder | ClaimOutcome::Fenced)) => {
                    tracing::debug!(
                        session_key,
                        ?outcome,
                        "the session's next turn is not this replica's to claim"
                    );
                    return None;
                }
                Err(StoreError::Unavailable { .. }) if !self.shutdown.is_cancelled() => {
                    tracing::warn!(
                        session_key,
                        retry_in_ms = wait.as_millis(),
                        "the store is unreachable; the next turn is claimed when it answers"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.shutdown.cancelled() => return None,
                    }
                    wait = (wait * 2).min(STORE_RETRY_MAX);
                }
                Err(error) => {
                    tracing::error!(error = %error, session_key, "cannot claim the next turn");
                    return None;
                }
            }
        }
    }

    async fn run(&self, turn: TurnRecord, fence: Fence) {
        let started = Instant::now();
        let session_key = turn.session_key.clone();
        let cancel = self.shutdown.child_token();
        let (steer_sender, steer) = mpsc::channel(STEER_CAPACITY);
        // Registered before `turn.started` is published, so a client that saw the turn start
        // can always abort or steer it.
        self.drivers.lock().running.insert(
            session_key.clone(),
            RunningTurn {
                turn_id: turn.turn_id.clone(),
                fence: fence.clone(),
                cancel: cancel.clone(),
                steer: steer_sender,
            },
        );
        self.hub.sync(&session_key).await;
        tracing::info!(replica_id = %fence.replica_id, epoch = fence.epoch, "turn started");
        let meter = UsageMeter::default();
        let outcome = self
            .execute(&turn, &fence, cancel.clone(), steer, &meter)
            .await;
        self.drivers.lock().running.remove(&session_key);
        // The calls counted one by one are the turn's usage; a runtime that reports only at the
        // end (an older node host) gives it with its reply.
        let counted = meter.lock().take();
        let end = match outcome {
            Ok(reply) => TurnEnd {
                status: TurnStatus::Completed,
                reply: Some(reply.text),
                error_code: None,
                error_message: None,
                usage: counted.clone().or(reply.usage),
                now_ms: now_ms(),
            },
            Err(_) if cancel.is_cancelled() && self.shutdown.is_cancelled() => TurnEnd {
                status: TurnStatus::Interrupted,
                reply: None,
                error_code: Some(ErrorCode::Interrupted.as_str().to_owned()),
                error_message: Some(String::from(
                    "the gateway shut down while this turn ran; it is not replayed",
                )),
                usage: None,
                now_ms: now_ms(),
            },
            Err(_) if cancel.is_cancelled() => TurnEnd {
                status: TurnStatus::Aborted,
                reply: None,
                error_code: Some(String::from(ErrorCode::Aborted)),
                error_message: Some(String::from("the turn was aborted")),
                usage: None,
                now_ms: now_ms(),
            },
            Err(failure) => {
                // What a node or a runtime chose is stored only within bounds.
                let failure = failure.bounded();
                TurnEnd {
                    status: TurnStatus::Failed,
                    reply: None,
                    error_code: Some(failure.code),
                    error_message: Some(failure.message),
                    usage: None,
                    now_ms: now_ms(),
                }
            }
        };
        // Aborted and interrupted turns used their counted calls too.
        let end = TurnEnd {
            usage: end.usage.clone().or(counted),
            ..end
        };
        let span = tracing::Span::current();
        span.record("outcome", end.status.as_str());
        if let Some(code) = &end.error_code {
            // A node's code could be any text of any size; the span keeps catalogue codes only.
            let known = ErrorCode::parse(code)
                .map_or(crate::link::registry::UNRECOGNIZED_CODE, ErrorCode::as_str);
            span.record("error_code", known);
        }
        tracing::info!(
            outcome = end.status.as_str(),
            elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "turn ended"
        );
        self.record_end(&turn, &fence, &end, started).await;
    }

    async fn execute(
        &self,
        turn: &TurnRecord,
        fence: &Fence,
        cancel: CancellationToken,
        steer: mpsc::Receiver<String>,
        meter: &UsageMeter,
    ) -> Result<TurnReply, TurnFailure> {
        let user_texts: Vec<String> = self
            .store
            .turn_user_messages(&turn.turn_id)
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?
            .into_iter()
            .map(|message| message.content)
            .collect();
        let has_attachments = !turn.attachments.is_empty();
        let attachments = match (&self.stager, has_attachments) {
            (_, false) => Vec::new(),
            (Some(stager), true) => stager.stage(&turn.turn_id, &turn.attachments).await?,
            (None, true) => {
                return Err(TurnFailure::new(
                    ErrorCode::AttachmentsUnsupported,
                    "this gateway cannot stage attachments",
                ));
            }
        };
        let Some(runtime) = self.runtime.clone() else {
            return Err(TurnFailure::new(
                ErrorCode::NoRuntime,
                "no runtime is configured, so no model runs this turn; start a Harness runtime (native or codex)",
            ));
        };
        let sink = TurnSink::new(
            Arc::clone(&self.store),
            Arc::clone(&self.hub),
            fence.clone(),
            turn.session_key.clone(),
            turn.turn_id.clone(),
        )
        .with_usage(self.max_turn_tokens, Arc::clone(meter));
        let input = TurnInput {
            session_key: turn.session_key.clone(),
            turn_id: turn.turn_id.clone(),
            user_texts,
            attachments,
            cancel: cancel.clone(),
            steer,
        };
        tokio::select! {
            result = runtime.run_turn(input, sink) => result,
            () = cancel.cancelled() => Err(TurnFailure::new(ErrorCode::Aborted, "the turn was aborted")),
        }
    }

    async fn record_end(&self, turn: &TurnRecord, fence: &Fence, end: &TurnEnd, started: Instant) {
        let outcome = match end.status {
            TurnStatus::Completed => "completed",
            TurnStatus::Aborted => "aborted",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::Failed | TurnStatus::Queued | TurnStatus::Running => "failed",
        };
        self.metrics
            .record_end(self.runtime_name(), outcome, started.elapsed());
        if let Some(usage) = &end.usage {
            self.metrics.record_usage(usage);
        }
        let stored = match self.finish_durably(fence, &turn.turn_id, end).await {
            // The store refused this end itself (not an outage): end the turn with a failure the
            // Gateway writes, without the runtime's text, so the session is never left running.
            Err(error) if !matches!(error, StoreError::Unavailable { .. }) => {
                tracing::error!(error = %error, turn_id = %turn.turn_id, "cannot record the end of a turn; recording a store failure instead");
                let fallback = TurnEnd {
                    status: TurnStatus::Failed,
                    reply: None,
                    error_code: Some(ErrorCode::StoreFailure.as_str().to_owned()),
                    error_message: Some(String::from(
                        "the gateway could not store the result of this turn",
                    )),
                    usage: None,
                    now_ms: now_ms(),
                };
                self.finish_durably(fence, &turn.turn_id, &fallback).await
            }
            other => other,
        };
        match stored {
            // A queued turn may end without running (an abort).
            Ok(true) => {
                self.metrics.queue_changed();
                self.ends.notify_one();
            }
            Ok(false) => {
                // Ended meanwhile (aborted, or interrupted by a survivor after this replica's
                // lease passed): the store keeps that end.
                tracing::info!(turn_id = %turn.turn_id, "the store refused this end of the turn: it had ended already or its lease is gone");
                return;
            }
            Err(error) => {
                // Only at shutdown: the next start marks the turn `interrupted`.
                tracing::error!(error = %error, turn_id = %turn.turn_id, "cannot record the end of a turn");
                return;
            }
        }
        self.hub.sync(&turn.session_key).await;
    }

    /// Stores the end of a turn, retrying with a growing wait ([`STORE_RETRY_FIRST`] to
    /// [`STORE_RETRY_MAX`]) while the store is unreachable, so an outage of the store delays the
    /// end of a turn rather than leaving its session running for good. Gives up only when the
    /// Gateway shuts down.
    async fn finish_durably(
        &self,
        fence: &Fence,
        turn_id: &str,
        end: &TurnEnd,
    ) -> Result<bool, StoreError> {
        let mut wait = STORE_RETRY_FIRST;
        loop {
            match self.store.finish_turn(fence, turn_id, end).await {
                Err(StoreError::Unavailable { .. }) if !self.shutdown.is_cancelled() => {
                    tracing::warn!(
                        turn_id,
                        retry_in_ms = wait.as_millis(),
                        "the store is unreachable; the end of the turn is stored when it answers"
                    );
                    tokio::select! {
                        () = tokio::time::sleep(wait) => {}
                        () = self.shutdown.cancelled() => {}
                    }
                    wait = (wait * 2).min(STORE_RETRY_MAX);
                }
                other => return other,
            }
        }
    }
}

/// Returns a new turn id: `turn-` and 24 hex digits.
fn new_turn_id() -> String {
    let mut bytes = [0_u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        // The random source failed; a time-based id is still unique enough here because the
        // store refuses duplicates.
        return format!("turn-{:024x}", now_ms());
    }
    format!("turn-{}", hex::encode(bytes))
}
