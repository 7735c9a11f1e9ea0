//! Sessions and turns: admission, one active turn per session, queue modes, a global cap on
//! concurrent turns, dispatch to the runtime, and the durable record of every outcome.
//!
//! - A message is admitted (and durable) before the API answers; see [`TurnEngine::admit`].
//! - Each session has at most one driver task, which claims queued turns in order and runs them
//!   one at a time. A global semaphore caps concurrent turns; past it, turns wait as `queued`.
//! - A turn left `running` by a crash is marked `interrupted` at start and never replayed.

pub(crate) mod events;
pub(crate) mod node_runtime;
pub(crate) mod runtime;

use gatehouse_protocol::error::ErrorCode;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::model::Admitted;
use gatehouse_store::model::Attachment;
use gatehouse_store::model::NewUserMessage;
use gatehouse_store::model::QueueMode;
use gatehouse_store::model::TurnEnd;
use gatehouse_store::model::TurnRecord;
use gatehouse_store::model::TurnStatus;
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::clock::now_ms;
use crate::metrics::TurnMetrics;
use crate::turns::events::EventHub;
use crate::turns::runtime::TurnFailure;
use crate::turns::runtime::TurnInput;
use crate::turns::runtime::TurnReply;
use crate::turns::runtime::TurnRuntime;
use crate::turns::runtime::TurnSink;

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
}

struct RunningTurn {
    turn_id: String,
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
    slots: Arc<Semaphore>,
    max_concurrent_turns: usize,
    drivers: Mutex<Drivers>,
    shutdown: CancellationToken,
    /// The turn families of `/metrics`.
    pub metrics: TurnMetrics,
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
        max_concurrent_turns: usize,
    ) -> Arc<Self> {
        Arc::new(Self {
            store,
            hub,
            runtime,
            stager,
            slots: Arc::new(Semaphore::new(max_concurrent_turns.max(1))),
            max_concurrent_turns: max_concurrent_turns.max(1),
            drivers: Mutex::new(Drivers::default()),
            shutdown: CancellationToken::new(),
            metrics: TurnMetrics::default(),
        })
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

    /// Marks turns left running by a crash as interrupted, then starts drivers for every session
    /// with queued turns. Call once, at start.
    ///
    /// # Errors
    /// Storage failures.
    pub(crate) async fn recover(self: &Arc<Self>) -> Result<(), StoreError> {
        let interrupted = self.store.interrupt_running_turns(now_ms()).await?;
        for turn in &interrupted {
            tracing::warn!(turn_id = %turn.turn_id, session_key = %turn.session_key, "turn interrupted by a restart; it is not replayed");
            self.metrics.count(self.runtime_name(), "interrupted");
            self.hub.sync(&turn.session_key).await;
        }
        for session_key in self.store.sessions_with_queued_turns().await? {
            self.kick(&session_key);
        }
        Ok(())
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
            self.abort(&message.session_key);
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
            drivers
                .running
                .get(&message.session_key)
                .map(|running| (running.turn_id.clone(), running.steer.clone()))
        };
        let Some((turn_id, steer)) = target else {
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
    fn kick(self: &Arc<Self>, session_key: &str) {
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

    /// Runs the session's queued turns one at a time until none is left.
    async fn drive(self: Arc<Self>, session_key: String) {
        loop {
            let claimed = self.claim(&session_key).await;
            match claimed {
                Some((turn, permit)) => {
                    let span = tracing::info_span!(
                        "turn",
                        session_key = %turn.session_key,
                        turn_id = %turn.turn_id,
                        runtime = self.runtime_name(),
                        outcome = tracing::field::Empty,
                        error_code = tracing::field::Empty,
                    );
                    self.run(turn).instrument(span).await;
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

    async fn claim(
        &self,
        session_key: &str,
    ) -> Option<(TurnRecord, tokio::sync::OwnedSemaphorePermit)> {
        let permit = tokio::select! {
            permit = Arc::clone(&self.slots).acquire_owned() => permit.ok()?,
            () = self.shutdown.cancelled() => return None,
        };
        // While the store is unreachable the claim is retried (as the end of a turn is, see
        // `finish_durably`), so queued turns run once it answers rather than at the next message.
        let mut wait = STORE_RETRY_FIRST;
        loop {
            match self.store.claim_next_turn(session_key, now_ms()).await {
                Ok(Some(turn)) => {
                    self.metrics.queue_changed();
                    return Some((turn, permit));
                }
                Ok(None) => return None,
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

    async fn run(&self, turn: TurnRecord) {
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
                cancel: cancel.clone(),
                steer: steer_sender,
            },
        );
        self.hub.sync(&session_key).await;
        let outcome = self.execute(&turn, cancel.clone(), steer).await;
        self.drivers.lock().running.remove(&session_key);
        let end = match outcome {
            Ok(reply) => TurnEnd {
                status: TurnStatus::Completed,
                reply: Some(reply.text),
                error_code: None,
                error_message: None,
                usage: reply.usage,
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
        let span = tracing::Span::current();
        span.record("outcome", end.status.as_str());
        if let Some(code) = &end.error_code {
            // A node's code could be any text of any size; the span keeps catalogue codes only.
            let known = ErrorCode::parse(code)
                .map_or(crate::link::registry::UNRECOGNIZED_CODE, ErrorCode::as_str);
            span.record("error_code", known);
        }
        self.record_end(&turn, &end, started).await;
    }

    async fn execute(
        &self,
        turn: &TurnRecord,
        cancel: CancellationToken,
        steer: mpsc::Receiver<String>,
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
            turn.session_key.clone(),
            turn.turn_id.clone(),
        );
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

    async fn record_end(&self, turn: &TurnRecord, end: &TurnEnd, started: Instant) {
        let outcome = match end.status {
            TurnStatus::Completed => "completed",
            TurnStatus::Aborted => "aborted",
            TurnStatus::Interrupted => "interrupted",
            TurnStatus::Failed | TurnStatus::Queued | TurnStatus::Running => "failed",
        };
        self.metrics
            .record_end(self.runtime_name(), outcome, started.elapsed());
        let stored = match self.finish_durably(&turn.turn_id, end).await {
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
                self.finish_durably(&turn.turn_id, &fallback).await
            }
            other => other,
        };
        match stored {
            // A queued turn may end without running (an abort).
            Ok(true) => self.metrics.queue_changed(),
            Ok(false) => return,
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
    async fn finish_durably(&self, turn_id: &str, end: &TurnEnd) -> Result<bool, StoreError> {
        let mut wait = STORE_RETRY_FIRST;
        loop {
            match self.store.finish_turn(turn_id, end).await {
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
