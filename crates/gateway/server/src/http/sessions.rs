//! Session routes: messages, turns, transcripts, the event stream, and abort.

use gatehouse_api::events::EventData;
use gatehouse_api::events::EventsQuery;
use gatehouse_api::events::STREAM_DROPPED;
use gatehouse_api::events::StreamDropped;
use gatehouse_api::sessions::AbortResponse;
use gatehouse_api::sessions::MessageAccepted;
use gatehouse_api::sessions::MessageParams;
use gatehouse_api::sessions::MoveParams;
use gatehouse_api::sessions::MoveResponse;
use gatehouse_api::sessions::SessionList;
use gatehouse_api::sessions::SessionSummary;
use gatehouse_api::sessions::StopResponse;
use gatehouse_api::sessions::Transcript;
use gatehouse_api::sessions::TranscriptMessage;
use gatehouse_api::sessions::Turn;
use gatehouse_api::sessions::TurnError;
use gatehouse_api::sessions::TurnQuery;
use gatehouse_protocol::error::ErrorCode;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::http::error::store_error;
use axum::Extension;
use axum::Json;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::response::sse::Event;
use axum::response::sse::KeepAlive;
use axum::response::sse::Sse;
use futures_util::Stream;
use gatehouse_api::sessions::QueueMode;
use gatehouse_store::records::Admitted;
use gatehouse_store::records::TurnRecord;

use crate::GatewayState;
use crate::http::auth::KEY_RECHECK_INTERVAL;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::turns::IncomingMessage;
use crate::turns::events::Lagged;
use crate::turns::events::SessionEvent;
use crate::turns::events::Subscription;

/// The longest user text accepted, in bytes.
pub(crate) const MAX_TEXT_BYTES: usize = 256 * 1024;

/// The most attachments one message may carry.
pub(crate) const MAX_ATTACHMENTS: usize = 16;

/// The longest `wait` of `GET /v1/turns/{id}`, in seconds.
pub(crate) const MAX_WAIT_SECONDS: u64 = 60;

pub(crate) async fn post_message(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(session_key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    check_session_key(&session_key)?;
    let body: MessageParams = serde_json::from_slice(&body)
        .map_err(|error| ApiError::invalid_request(format!("invalid body: {error}")))?;
    let admitted = admit_message(&state, &principal, &session_key, body).await?;
    let accepted = MessageAccepted {
        session_key,
        turn_id: admitted.turn.turn_id,
        status: admitted.turn.status,
    };
    Ok((StatusCode::ACCEPTED, Json(accepted)).into_response())
}

/// Checks a message's text, attachments and idempotency key and admits it to `session_key`
/// (already checked with [`check_session_key`]): what `POST /v1/sessions/{key}/messages` and
/// `POST /v1/chat/completions` both do before they answer. The turn counts against the
/// concurrent turns of `principal`'s key until it ends ([`crate::http::limits`]).
///
/// # Errors
/// `INVALID_REQUEST` or `PAYLOAD_TOO_LARGE` for a message outside the limits; `429
/// BUDGET_EXHAUSTED` when the key or the session used its tokens for the day ([`crate::budgets`]);
/// `429 RATE_LIMITED` when the key's turns are all taken; a store failure ([`store_error`]) when
/// nothing was admitted.
pub(crate) async fn admit_message(
    state: &Arc<GatewayState>,
    principal: &Principal,
    session_key: &str,
    body: MessageParams,
) -> Result<Admitted, ApiError> {
    if body.text.trim().is_empty() {
        return Err(ApiError::invalid_request("text must not be empty"));
    }
    if body.text.len() > MAX_TEXT_BYTES {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("text is over {MAX_TEXT_BYTES} bytes"),
        ));
    }
    if body.attachments.len() > MAX_ATTACHMENTS {
        return Err(ApiError::invalid_request(format!(
            "at most {MAX_ATTACHMENTS} attachments"
        )));
    }
    if let Some(key) = &body.idempotency_key
        && (key.is_empty() || key.len() > 256)
    {
        return Err(ApiError::invalid_request(
            "idempotencyKey must be 1 to 256 characters",
        ));
    }
    for attachment in &body.attachments {
        principal
            .check_media(state.store.as_ref(), &attachment.media_id)
            .await?;
    }
    let queue_mode = body.queue_mode.unwrap_or(QueueMode::Followup);
    crate::budgets::check_daily(
        state.store.as_ref(),
        &state.config.budgets,
        principal.key(),
        session_key,
        gatehouse_protocol::time::now_ms(),
    )
    .await
    .map_err(|error| match error {
        crate::budgets::BudgetError::Exhausted {
            message,
            retry_after_seconds,
        } => {
            ApiError::new(ErrorCode::BudgetExhausted, message).with_retry_after(retry_after_seconds)
        }
        crate::budgets::BudgetError::Store(store) => store_error(&store),
    })?;
    let slots = match principal.key() {
        Some(key) => Some(
            state
                .key_limits
                .reserve_turn(state.store.as_ref(), key, state.turn_share(key))
                .await?,
        ),
        None => None,
    };
    claim_session(state, principal, session_key).await?;
    // The session holds its attachments from now on: a key limited to its prefix may read them.
    let session_grantee = format!("session:{session_key}");
    for attachment in &body.attachments {
        state
            .store
            .grant_media(
                &attachment.media_id,
                &session_grantee,
                gatehouse_protocol::time::now_ms(),
            )
            .await
            .map_err(|error| store_error(&error))?;
    }
    let admitted = state
        .turns
        .admit(IncomingMessage {
            session_key: session_key.to_owned(),
            text: body.text,
            attachments: body.attachments,
            idempotency_key: body.idempotency_key,
            queue_mode,
            origin: None,
            api_key: principal.key().map(|key| key.name.clone()),
        })
        .await
        .map_err(|error| match error {
            crate::turns::AdmitError::Store(store) => store_error(&store),
        })?;
    if let Some(slots) = slots {
        slots.hold(&admitted.turn.turn_id);
    }
    Ok(admitted)
}

/// `GET /v1/turns/{id}`: the turn, after waiting up to `wait` seconds for its end. A wait
/// holds one of the key's streams ([`crate::shares`]) while it lasts.
pub(crate) async fn get_turn(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(turn_id): Path<String>,
    Query(query): Query<TurnQuery>,
) -> Result<Json<Turn>, ApiError> {
    let wait = Duration::from_secs(query.wait.unwrap_or(0).min(MAX_WAIT_SECONDS));
    let _ticket = match wait.is_zero() {
        true => None,
        false => Some(state.streams.open(principal.key())?),
    };
    let turn = wait_for_turn_end(&state, &turn_id, wait).await?;
    let workspace = state
        .store
        .worktree_result(&turn.turn_id)
        .await
        .map_err(|error| store_error(&error))?
        .map(|result| gatehouse_api::sessions::TurnWorkspace {
            state: result.state,
            staged_ref: result.staged_ref,
            applied: result.applied,
            conflicts: result.conflicts,
        });
    Ok(Json(Turn {
        workspace,
        ..turn_answer(turn)
    }))
}

/// Records `principal` as the creator of `session_key` unless the session has one: the
/// checkpoints and worktree versions of a session count against its creator's media share.
///
/// # Errors
/// A store failure.
pub(crate) async fn claim_session(
    state: &GatewayState,
    principal: &Principal,
    session_key: &str,
) -> Result<(), ApiError> {
    // A read first: a session's later messages cost no write.
    let recorded = state
        .store
        .session_owner(session_key)
        .await
        .map_err(|error| store_error(&error))?;
    if recorded.is_none() {
        state
            .store
            .claim_session_owner(
                session_key,
                &principal.owner(),
                gatehouse_protocol::time::now_ms(),
            )
            .await
            .map_err(|error| store_error(&error))?;
    }
    Ok(())
}

/// Returns the turn `turn_id` once it has ended, or as it is when `wait` passes first (at once
/// for a zero `wait`).
///
/// # Errors
/// `NOT_FOUND` for an unknown turn; a store failure.
pub(crate) async fn wait_for_turn_end(
    state: &GatewayState,
    turn_id: &str,
    wait: Duration,
) -> Result<TurnRecord, ApiError> {
    let turn = load_turn(state, turn_id).await?;
    if turn.status.is_terminal() || wait.is_zero() {
        return Ok(turn);
    }
    let mut events = state.hub.subscribe(&turn.session_key).await;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Read after subscribing, so an end that happens in between is not missed.
        let turn = load_turn(state, turn_id).await?;
        if turn.status.is_terminal() {
            return Ok(turn);
        }
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_elapsed) => return Ok(turn),
            Ok(Ok(_)) => {}
            // Dropped for falling behind: subscribe afresh, then look at the turn again.
            Ok(Err(Lagged)) => events = state.hub.subscribe(&turn.session_key).await,
        }
    }
}

/// Returns a stored session as `GET /v1/sessions` lists it.
pub(crate) fn summary_of(session: gatehouse_store::records::SessionRecord) -> SessionSummary {
    SessionSummary {
        session_key: session.session_key,
        runtime: session.runtime,
        created_at: session.created_at_ms,
        updated_at: session.updated_at_ms,
        active_turn_id: session.active_turn_id,
        node_id: session.node_id,
        channel: session.channel,
        peer: session.peer,
        room: session.room,
        usage: gatehouse_api::usage::UsageTotals::default(),
    }
}

pub(crate) async fn list_sessions(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<SessionList>, ApiError> {
    let sessions = state
        .store
        .sessions()
        .await
        .map_err(|error| store_error(&error))?;
    let usage = crate::http::usage::by_session(state.store.as_ref()).await?;
    let sessions = sessions
        .into_iter()
        .map(|session| {
            let usage = usage.get(&session.session_key).copied().unwrap_or_default();
            SessionSummary {
                usage,
                ..summary_of(session)
            }
        })
        .collect();
    Ok(Json(SessionList { sessions }))
}

pub(crate) async fn get_transcript(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
) -> Result<Json<Transcript>, ApiError> {
    check_session_key(&session_key)?;
    let messages = state
        .store
        .transcript(&session_key)
        .await
        .map_err(|error| store_error(&error))?;
    let messages = messages
        .into_iter()
        .map(|message| TranscriptMessage {
            seq: message.seq,
            turn_id: message.turn_id,
            role: message.role,
            content: message.content,
            created_at: message.created_at_ms,
            tool_name: message.tool_name,
        })
        .collect();
    Ok(Json(Transcript { messages }))
}

pub(crate) async fn abort_session(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(session_key): Path<String>,
) -> Result<Json<AbortResponse>, ApiError> {
    check_session_key(&session_key)?;
    let aborted = state.turns.abort_anywhere(&session_key).await;
    state
        .audit
        .record_caller(
            principal.actor(),
            "session.abort",
            "succeeded",
            None,
            serde_json::json!({"sessionKey": session_key, "aborted": aborted}),
        )
        .await;
    Ok(Json(AbortResponse { aborted }))
}

/// How many durable events the stream reads from the store at a time when it replays `after=`.
const REPLAY_PAGE: u32 = 100;

/// Where an event stream is: replaying the durable log, following live events, or done.
enum StreamPhase {
    Replay(std::collections::VecDeque<SessionEvent>),
    Live,
    Done,
}

struct EventStream {
    state: Arc<GatewayState>,
    /// Who opened the stream, checked again every [`KEY_RECHECK_INTERVAL`].
    principal: Principal,
    recheck: tokio::time::Interval,
    session_key: String,
    live: Subscription,
    /// Counts this stream in `/metrics` while it is open.
    _subscriber: crate::metrics::SseSubscriber,
    /// The stream's place in its key's share and the Gateway's total.
    _ticket: crate::shares::StreamTicket,
    /// The seq of the last durable event sent.
    last: i64,
    /// The last durable event published before the subscription; later ones arrive live.
    replay_until: i64,
    phase: StreamPhase,
}

impl EventStream {
    /// Returns the next SSE event, or `None` when the stream ends.
    async fn next(&mut self) -> Option<Event> {
        loop {
            match &mut self.phase {
                StreamPhase::Replay(page) => {
                    if let Some(event) = page.pop_front() {
                        self.last = event.seq;
                        return Some(sse_event(&event));
                    }
                    match self.next_page().await {
                        Ok(Some(page)) => self.phase = StreamPhase::Replay(page),
                        Ok(None) => self.phase = StreamPhase::Live,
                        Err(()) => {
                            self.phase = StreamPhase::Done;
                            return None;
                        }
                    }
                }
                StreamPhase::Live => match tokio::select! {
                    received = self.live.recv() => received,
                    _ = self.recheck.tick() => {
                        if self.principal.still_valid(self.state.store.as_ref()).await {
                            continue;
                        }
                        self.phase = StreamPhase::Done;
                        let dropped = StreamDropped {
                            code: ErrorCode::Unauthorized.as_str().to_owned(),
                            message: String::from(
                                "the key that opened this stream was revoked or has expired",
                            ),
                            resume_after: self.last,
                        };
                        return Some(
                            Event::default()
                                .event(STREAM_DROPPED)
                                .data(event_json(&dropped)),
                        );
                    }
                } {
                    Ok(event) if event.durable && event.seq <= self.last => {}
                    Ok(event) => {
                        if event.durable {
                            self.last = event.seq;
                        }
                        return Some(sse_event(&event));
                    }
                    Err(Lagged) => {
                        // The client is too slow: it is dropped with a clear last event and
                        // resumes from the durable log with `after`.
                        self.phase = StreamPhase::Done;
                        let code = gatehouse_protocol::error::ErrorCode::SlowConsumer;
                        self.state.metrics.record_sse_dropped(code);
                        let dropped = StreamDropped {
                            code: code.as_str().to_owned(),
                            message: String::from(
                                "the client fell too far behind; reconnect with after=resumeAfter",
                            ),
                            resume_after: self.last,
                        };
                        return Some(
                            Event::default()
                                .event(STREAM_DROPPED)
                                .data(event_json(&dropped)),
                        );
                    }
                },
                StreamPhase::Done => return None,
            }
        }
    }

    /// Reads the next page of durable events after the last one sent, up to `replay_until`;
    /// `None` when there is none left.
    async fn next_page(&self) -> Result<Option<std::collections::VecDeque<SessionEvent>>, ()> {
        let stored = match self
            .state
            .store
            .events_after(&self.session_key, self.last, REPLAY_PAGE)
            .await
        {
            Ok(stored) => stored,
            Err(error) => {
                tracing::error!(error = %error, session_key = %self.session_key, "cannot replay session events");
                return Err(());
            }
        };
        let page: std::collections::VecDeque<SessionEvent> = stored
            .into_iter()
            .filter(|event| event.seq <= self.replay_until)
            .map(|event| SessionEvent {
                seq: event.seq,
                kind: event.kind,
                payload: event.payload,
                durable: true,
            })
            .collect();
        match page.is_empty() {
            true => Ok(None),
            false => Ok(Some(page)),
        }
    }
}

/// `GET /v1/sessions/{key}/events`: the durable log after `after=`, then live events. Nothing
/// is buffered for the client beyond its subscription's bounds (see
/// [`crate::turns::events`]): the stream pulls the next event only when the connection takes
/// it, and a client that falls behind ends with `stream.dropped` (`SLOW_CONSUMER`).
pub(crate) async fn session_events(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(session_key): Path<String>,
    Query(query): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    check_session_key(&session_key)?;
    let ticket = state.streams.open(principal.key())?;
    // Subscribe before reading the log, so nothing falls between the two.
    let (live, replay_until) = state.hub.subscribe_from(&session_key).await;
    let after = query.after.unwrap_or(0);
    let mut stream = EventStream {
        _subscriber: state.metrics.sse_subscriber(),
        _ticket: ticket,
        state: Arc::clone(&state),
        principal,
        recheck: key_recheck(),
        session_key,
        live,
        last: after,
        replay_until,
        phase: StreamPhase::Replay(std::collections::VecDeque::new()),
    };
    // The first page is read now, so a store failure is an error answer, not an empty stream.
    match stream.next_page().await {
        Ok(Some(page)) => stream.phase = StreamPhase::Replay(page),
        Ok(None) => stream.phase = StreamPhase::Live,
        Err(()) => {
            return Err(ApiError::new(
                ErrorCode::StoreUnavailable,
                "the gateway store failed; retry later",
            ));
        }
    }
    let events = futures_util::stream::unfold(stream, |mut stream| async move {
        let event = stream.next().await?;
        Some((Ok(event), stream))
    });
    Ok(Sse::new(events).keep_alive(KeepAlive::default()))
}

/// Returns the timer of [`Principal::still_valid`] checks for a long-lived answer: the first
/// tick comes one interval from now (the request itself was just checked).
pub(crate) fn key_recheck() -> tokio::time::Interval {
    let mut interval = tokio::time::interval_at(
        tokio::time::Instant::now() + KEY_RECHECK_INTERVAL,
        KEY_RECHECK_INTERVAL,
    );
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval
}

/// Returns the SSE event of a session event: its kind as the name, its payload's fields and its
/// seq as the data ([`EventData`]), and for a durable event its seq as the id.
fn sse_event(event: &SessionEvent) -> Event {
    let mut payload = match &event.payload {
        serde_json::Value::Object(map) => map.clone(),
        other => serde_json::Map::from_iter([(String::from("value"), other.clone())]),
    };
    // The event's own seq wins over a `seq` inside the payload (rows written before
    // `message.completed` stopped carrying the transcript seq have one).
    payload.remove("seq");
    let data = EventData {
        seq: event.seq,
        payload,
    };
    let built = Event::default().event(&event.kind).data(event_json(&data));
    match event.durable {
        true => built.id(event.seq.to_string()),
        false => built,
    }
}

pub(crate) async fn load_turn(state: &GatewayState, turn_id: &str) -> Result<TurnRecord, ApiError> {
    state
        .store
        .turn(turn_id)
        .await
        .map_err(|error| store_error(&error))?
        .ok_or_else(|| ApiError::not_found(format!("no turn {turn_id}")))
}

/// Returns the JSON text of an event's data. The event types hold only strings, numbers,
/// booleans and maps with string keys, so serializing them cannot fail; an empty object stands
/// in if it ever did.
fn event_json<T: serde::Serialize>(data: &T) -> String {
    serde_json::to_string(data).unwrap_or_else(|_| String::from("{}"))
}

/// Returns the answer of `GET /v1/turns/{id}` for `turn`: the error only once it has a code.
fn turn_answer(turn: TurnRecord) -> Turn {
    let error = turn.error_code.map(|code| TurnError {
        code: Some(code),
        message: turn.error_message,
    });
    Turn {
        turn_id: turn.turn_id,
        session_key: turn.session_key,
        status: turn.status,
        reply: turn.reply,
        error,
        usage: turn.usage,
        workspace: None,
    }
}

/// Session keys: 1 to 128 characters of letters, digits, `.`, `_`, `:` and `-`, starting with a
/// letter or digit.
pub(crate) fn check_session_key(key: &str) -> Result<(), ApiError> {
    let valid = !key.is_empty()
        && key.len() <= 128
        && key
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphanumeric())
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    match valid {
        true => Ok(()),
        false => Err(ApiError::invalid_request(
            "the session key must be 1 to 128 letters, digits, '.', '_', ':' or '-', starting with a letter or digit",
        )),
    }
}

/// `POST /v1/sessions/{key}/stop`: stops the session's native worker on the session's own node
/// and frees its slot. The transcript stays; the next message starts a new worker. A session
/// that is bound to no node has no worker: nothing is sent anywhere.
pub(crate) async fn stop_session(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(session_key): Path<String>,
) -> Result<Json<StopResponse>, ApiError> {
    check_session_key(&session_key)?;
    let aborted = state.turns.abort_anywhere(&session_key).await;
    let owner = state
        .store
        .session_node(&session_key)
        .await
        .map_err(|error| store_error(&error))?;
    let stopped = match owner {
        Some(owner) => stop_worker(&state, &owner, &session_key, false).await?,
        None => false,
    };
    state
        .audit
        .record_caller(
            principal.actor(),
            "session.stop",
            "succeeded",
            None,
            serde_json::json!({"sessionKey": session_key, "stopped": stopped}),
        )
        .await;
    Ok(Json(StopResponse { stopped, aborted }))
}

/// Stops the worker of `session_key` on the node the session is bound to, if any, for a
/// session nothing will send to again; a node that is gone or refuses is logged, not an error
/// (its worker went with it, or the node's own idle handling ends it).
pub(crate) async fn release_worker(state: &GatewayState, session_key: &str) {
    let owner = match state.store.session_node(session_key).await {
        Ok(Some(owner)) => owner,
        Ok(None) => return,
        Err(error) => {
            tracing::warn!(session = session_key, error = %error, "cannot find the session's node to release its worker");
            return;
        }
    };
    match stop_worker(state, &owner, session_key, false).await {
        Ok(stopped) => tracing::debug!(
            session = session_key,
            stopped,
            "released the worker of a one-turn session"
        ),
        Err(error) => {
            tracing::info!(session = session_key, error = %error.message, "could not release the worker of a one-turn session")
        }
    }
}

/// Stops the worker of `session_key` on node `node_id` (and with `discard` deletes the
/// session's directory there); returns whether a worker was running.
async fn stop_worker(
    state: &GatewayState,
    node_id: &str,
    session_key: &str,
    discard: bool,
) -> Result<bool, ApiError> {
    use gatehouse_protocol::command::AgentSessionStop;
    use gatehouse_protocol::worker::AGENT_SESSION_STOP;
    let Some(node) = state
        .registry
        .get(node_id)
        .filter(|node| node.serves_all(&[AGENT_SESSION_STOP]))
    else {
        return Err(ApiError::new(
            ErrorCode::DependencyUnavailable,
            "the session's Harness node is not connected",
        ));
    };
    let params = gatehouse_protocol::worker::AgentSessionStopParams {
        session_key: session_key.to_owned(),
        discard,
    };
    let answer = state
        .registry
        .invoke::<AgentSessionStop>(&node, &params, Duration::from_secs(30))
        .await
        .map_err(|error| {
            ApiError::new(
                ErrorCode::DependencyUnavailable,
                format!("the node did not stop the session: {error}"),
            )
        })?;
    Ok(answer.stopped)
}

/// `POST /v1/sessions/{key}/move` with `{"node"?: ID}`: binds the session to node `ID` (an
/// enrolled node), or with no node unbinds it so that its next turn binds it to whichever node
/// serves the native runtime. Refused with `409 SESSION_BUSY` while a turn runs. The worker on
/// the old node is stopped when that node is connected; the next turn rebuilds the session
/// workspace on the new node from the latest checkpoint. Audited as `session.moved`.
pub(crate) async fn move_session(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(session_key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Json<MoveResponse>, ApiError> {
    use gatehouse_store::records::SessionMove;
    check_session_key(&session_key)?;
    let body: MoveParams = match body.is_empty() {
        true => MoveParams::default(),
        false => serde_json::from_slice(&body)
            .map_err(|error| ApiError::invalid_request(format!("invalid body: {error}")))?,
    };
    if let Some(node) = &body.node {
        let enrolled = state
            .store
            .node(node)
            .await
            .map_err(|error| store_error(&error))?;
        if enrolled.is_none() {
            return Err(ApiError::not_found("no enrolled node has that id"));
        }
    }
    let to = body.node.as_deref();
    let outcome = state
        .store
        .move_session_node(&session_key, to, gatehouse_protocol::time::now_ms())
        .await
        .map_err(|error| store_error(&error))?;
    let from = match outcome {
        SessionMove::Moved { from } => from,
        SessionMove::Unchanged => return Ok(Json(MoveResponse { moved: false })),
        SessionMove::NotFound => {
            return Err(ApiError::not_found(format!("no session {session_key}")));
        }
        SessionMove::Busy { turn_id } => {
            let code = gatehouse_protocol::error::ErrorCode::SessionBusy;
            state
                .audit
                .record_caller(
                    principal.actor(),
                    "session.moved",
                    "denied",
                    Some(code.as_str()),
                    serde_json::json!({"sessionKey": session_key, "to": to, "turnId": turn_id}),
                )
                .await;
            return Err(ApiError::new(
                code,
                format!(
                    "turn {turn_id} of this session is running; move it after the turn ends (or abort it)"
                ),
            ));
        }
    };
    // The old node keeps no worker for a session it no longer owns. It may be gone: the move
    // stands either way, and it never receives the session again unless moved back.
    let stopped = match &from {
        Some(old) if Some(old.as_str()) != to => {
            match stop_worker(&state, old, &session_key, true).await {
                Ok(stopped) => stopped,
                Err(_) => {
                    tracing::info!(session_key, device_id = %old, "the session's old node is not connected; its worker was not stopped");
                    false
                }
            }
        }
        Some(_) | None => false,
    };
    state
        .audit
        .record_caller(
            principal.actor(),
            "session.moved",
            "succeeded",
            None,
            serde_json::json!({"sessionKey": session_key, "from": from, "to": to, "workerStopped": stopped}),
        )
        .await;
    tracing::info!(session_key, from = ?from, to = ?to, "session moved");
    Ok(Json(MoveResponse { moved: true }))
}
