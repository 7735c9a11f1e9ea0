//! Session routes: messages, turns, transcripts, the event stream, and abort.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

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
use gatehouse_store::StoreError;
use gatehouse_store::model::QueueMode;
use gatehouse_store::model::TurnRecord;
use serde::Deserialize;
use tokio::sync::broadcast::error::RecvError;

use crate::GatewayState;
use crate::http::error::ApiError;
use crate::turns::IncomingMessage;
use crate::turns::events::SessionEvent;

/// The longest user text accepted, in bytes.
pub(crate) const MAX_TEXT_BYTES: usize = 256 * 1024;

/// The most attachments one message may carry.
pub(crate) const MAX_ATTACHMENTS: usize = 16;

/// The longest `wait` of `GET /v1/turns/{id}`, in seconds.
pub(crate) const MAX_WAIT_SECONDS: u64 = 60;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct MessageBody {
    text: String,
    #[serde(default)]
    attachments: Vec<AttachmentBody>,
    idempotency_key: Option<String>,
    queue_mode: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct AttachmentBody {
    media_id: String,
    required: Option<bool>,
}

pub(crate) async fn post_message(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    check_session_key(&session_key)?;
    let body: MessageBody = serde_json::from_slice(&body)
        .map_err(|error| ApiError::invalid_request(format!("invalid body: {error}")))?;
    if body.text.trim().is_empty() {
        return Err(ApiError::invalid_request("text must not be empty"));
    }
    if body.text.len() > MAX_TEXT_BYTES {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "PAYLOAD_TOO_LARGE",
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
    let queue_mode = match body.queue_mode.as_deref() {
        None => QueueMode::Followup,
        Some(text) => QueueMode::parse(text).ok_or_else(|| {
            ApiError::invalid_request("queueMode must be followup, steer, collect or interrupt")
        })?,
    };
    let attachments: Vec<serde_json::Value> = body
        .attachments
        .into_iter()
        .map(|attachment| {
            serde_json::json!({"mediaId": attachment.media_id, "required": attachment.required.unwrap_or(true)})
        })
        .collect();
    let admitted = state
        .turns
        .admit(IncomingMessage {
            session_key: session_key.clone(),
            text: body.text,
            attachments: serde_json::Value::Array(attachments),
            idempotency_key: body.idempotency_key,
            queue_mode,
        })
        .await
        .map_err(|error| match error {
            crate::turns::AdmitError::Store(store) => store_error(&store),
        })?;
    let body = serde_json::json!({
        "sessionKey": session_key,
        "turnId": admitted.turn.turn_id,
        "status": admitted.turn.status.as_str(),
    });
    Ok((StatusCode::ACCEPTED, Json(body)).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct WaitQuery {
    wait: Option<u64>,
}

pub(crate) async fn get_turn(
    State(state): State<Arc<GatewayState>>,
    Path(turn_id): Path<String>,
    Query(query): Query<WaitQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let wait = Duration::from_secs(query.wait.unwrap_or(0).min(MAX_WAIT_SECONDS));
    let turn = load_turn(&state, &turn_id).await?;
    if turn.status.is_terminal() || wait.is_zero() {
        return Ok(Json(turn_json(&turn)));
    }
    let mut events = state.hub.subscribe(&turn.session_key);
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        // Read after subscribing, so an end that happens in between is not missed.
        let turn = load_turn(&state, &turn_id).await?;
        if turn.status.is_terminal() {
            return Ok(Json(turn_json(&turn)));
        }
        match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_elapsed) => return Ok(Json(turn_json(&turn))),
            Ok(Ok(_) | Err(RecvError::Lagged(_))) => {}
            Ok(Err(RecvError::Closed)) => return Ok(Json(turn_json(&turn))),
        }
    }
}

pub(crate) async fn list_sessions(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let sessions = state
        .store
        .sessions()
        .await
        .map_err(|error| store_error(&error))?;
    let rows: Vec<serde_json::Value> = sessions
        .into_iter()
        .map(|session| {
            let mut row = serde_json::json!({
                "sessionKey": session.session_key,
                "runtime": session.runtime,
                "createdAt": session.created_at_ms,
                "updatedAt": session.updated_at_ms,
            });
            if let Some(active) = session.active_turn_id {
                row["activeTurnId"] = active.into();
            }
            row
        })
        .collect();
    Ok(Json(serde_json::json!({"sessions": rows})))
}

pub(crate) async fn get_transcript(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    check_session_key(&session_key)?;
    let messages = state
        .store
        .transcript(&session_key)
        .await
        .map_err(|error| store_error(&error))?;
    let rows: Vec<serde_json::Value> = messages
        .into_iter()
        .map(|message| {
            let mut row = serde_json::json!({
                "seq": message.seq,
                "turnId": message.turn_id,
                "role": message.role,
                "content": message.content,
                "createdAt": message.created_at_ms,
            });
            if let Some(tool) = message.tool_name {
                row["toolName"] = tool.into();
            }
            row
        })
        .collect();
    Ok(Json(serde_json::json!({"messages": rows})))
}

pub(crate) async fn abort_session(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    check_session_key(&session_key)?;
    let aborted = state.turns.abort(&session_key);
    state
        .audit
        .record(
            "operator",
            "session.abort",
            "succeeded",
            None,
            serde_json::json!({"sessionKey": session_key, "aborted": aborted}),
        )
        .await;
    Ok(Json(serde_json::json!({"aborted": aborted})))
}

#[derive(Debug, Deserialize)]
pub(crate) struct EventsQuery {
    after: Option<i64>,
}

pub(crate) async fn session_events(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
    Query(query): Query<EventsQuery>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    check_session_key(&session_key)?;
    // Subscribe before reading the log, so nothing falls between the two.
    let mut live = state.hub.subscribe(&session_key);
    let after = query.after.unwrap_or(0);
    let stored = state
        .store
        .events_after(&session_key, after, 10_000)
        .await
        .map_err(|error| store_error(&error))?;
    let stream = async_stream(move |sender| async move {
        let mut last = after;
        for event in stored {
            last = event.seq;
            let event = SessionEvent {
                seq: event.seq,
                kind: event.kind,
                payload: event.payload,
                durable: true,
            };
            if sender.send(sse_event(&event)).await.is_err() {
                return;
            }
        }
        loop {
            match live.recv().await {
                Ok(event) if event.durable && event.seq <= last => {}
                Ok(event) => {
                    if event.durable {
                        last = event.seq;
                    }
                    if sender.send(sse_event(&event)).await.is_err() {
                        return;
                    }
                }
                Err(RecvError::Lagged(_)) => {
                    // The client is too slow: it is dropped with a clear last event and resumes
                    // from the durable log with `after`.
                    let dropped = Event::default().event("stream.dropped").data(
                        serde_json::json!({"code": "SLOW_CONSUMER", "message": "the client fell too far behind; reconnect with after=resumeAfter", "resumeAfter": last}).to_string(),
                    );
                    let _ = sender.send(dropped).await;
                    return;
                }
                Err(RecvError::Closed) => return,
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

fn sse_event(event: &SessionEvent) -> Event {
    let mut data = match &event.payload {
        serde_json::Value::Object(map) => serde_json::Value::Object(map.clone()),
        other => serde_json::json!({"value": other}),
    };
    data["seq"] = event.seq.into();
    let built = Event::default().event(&event.kind).data(data.to_string());
    match event.durable {
        true => built.id(event.seq.to_string()),
        false => built,
    }
}

/// Turns a producer that sends events into a stream, with a small bounded buffer.
fn async_stream<F, Fut>(producer: F) -> impl Stream<Item = Result<Event, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Event>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (sender, receiver) = tokio::sync::mpsc::channel::<Event>(64);
    tokio::spawn(producer(sender));
    futures_util::stream::unfold(receiver, |mut receiver| async move {
        receiver.recv().await.map(|event| (Ok(event), receiver))
    })
}

async fn load_turn(state: &GatewayState, turn_id: &str) -> Result<TurnRecord, ApiError> {
    state
        .store
        .turn(turn_id)
        .await
        .map_err(|error| store_error(&error))?
        .ok_or_else(|| ApiError::not_found(format!("no turn {turn_id}")))
}

fn turn_json(turn: &TurnRecord) -> serde_json::Value {
    let mut body = serde_json::json!({
        "turnId": turn.turn_id,
        "sessionKey": turn.session_key,
        "status": turn.status.as_str(),
    });
    if let Some(reply) = &turn.reply {
        body["reply"] = reply.clone().into();
    }
    if let Some(code) = &turn.error_code {
        body["error"] = serde_json::json!({"code": code, "message": turn.error_message});
    }
    body
}

/// Session keys: 1 to 128 characters of letters, digits, `.`, `_`, `:` and `-`, starting with a
/// letter or digit.
fn check_session_key(key: &str) -> Result<(), ApiError> {
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

fn store_error(error: &StoreError) -> ApiError {
    tracing::error!(error = %error, "store failure");
    match error {
        StoreError::DiskFull => ApiError::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "STORAGE_FULL",
            "the gateway state disk is full; nothing was stored; free space and retry",
        ),
        other => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            other.code(),
            "the gateway store failed; retry later",
        ),
    }
}

/// `POST /v1/sessions/{key}/stop`: stops the session's native worker on the node and frees its
/// slot. The transcript stays; the next message starts a new worker.
pub(crate) async fn stop_session(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    use gatehouse_protocol::worker::AGENT_SESSION_STOP;
    check_session_key(&session_key)?;
    let aborted = state.turns.abort(&session_key);
    let Some(node) = state.registry.find_serving(&[AGENT_SESSION_STOP]) else {
        return Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "DEPENDENCY_UNAVAILABLE",
            "no Harness node hosting native workers is connected",
        ));
    };
    let params = serde_json::json!({"sessionKey": session_key});
    let answer = state
        .registry
        .invoke(&node, AGENT_SESSION_STOP, &params, Duration::from_secs(30))
        .await
        .map_err(|error| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "DEPENDENCY_UNAVAILABLE",
                format!("the node did not stop the session: {error}"),
            )
        })?;
    let stopped = answer["stopped"].as_bool().unwrap_or(false);
    state
        .audit
        .record(
            "operator",
            "session.stop",
            "succeeded",
            None,
            serde_json::json!({"sessionKey": session_key, "stopped": stopped}),
        )
        .await;
    Ok(Json(
        serde_json::json!({"stopped": stopped, "aborted": aborted}),
    ))
}
