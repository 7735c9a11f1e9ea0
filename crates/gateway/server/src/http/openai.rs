//! `GET /v1/models` and `POST /v1/chat/completions`: the OpenAI-compatible routes.
//!
//! A chat completion is a real turn of the agent, admitted and followed through the same code
//! as `POST /v1/sessions/{key}/messages` and the session's event stream
//! ([`sessions::admit_message`], the [`crate::turns::events::EventHub`]):
//! - the session is the `X-Gatehouse-Session` header, else the request's `user`, else a new
//!   session `openai-<id>` (after the key's session prefix, if it has one), whose id derives from
//!   the `Idempotency-Key` header when there is one, so a retried request finds its turn again;
//! - only the last `user` message of `messages` becomes the turn's message: the session's
//!   transcript on the Gateway is the conversation's history, and what the client sends before
//!   that message is not replayed;
//! - `Idempotency-Key` is the message's idempotency key;
//! - tool activity is content (`[tool NAME]` on a line of its own, before the reply), never a
//!   `tool_calls` the client would have to run;
//! - without `stream` the answer waits for the turn's end (at most [`COMPLETION_WAIT`]); with it,
//!   Server-Sent Events of chunks carry the reply as it streams and end with `data: [DONE]`; a
//!   turn that fails mid-stream ends the stream with an error event instead;
//! - `usage` is the turn's token counts, summed over its model calls, when the model reported
//!   them (it is left out otherwise); a stream sends it in one more chunk with no choices
//!   before `data: [DONE]` when the request's `stream_options.include_usage` is true.
//!
//! Every error of these routes, the authentication layer's and axum's own included, is in
//! OpenAI's shape with the Gateway's stable code in `code` ([`error_shape`]).

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::response::sse::Event;
use axum::response::sse::KeepAlive;
use axum::response::sse::Sse;
use gatehouse_api::error::ErrorResponse;
use gatehouse_api::events::MESSAGE_DELTA;
use gatehouse_api::events::MessageDelta;
use gatehouse_api::events::TOOL_STARTED;
use gatehouse_api::events::TURN_COMPLETED;
use gatehouse_api::events::TURN_FAILED;
use gatehouse_api::events::ToolStarted;
use gatehouse_api::openai::CHUNK_OBJECT;
use gatehouse_api::openai::COMPLETION_OBJECT;
use gatehouse_api::openai::ChatChoice;
use gatehouse_api::openai::ChatCompletion;
use gatehouse_api::openai::ChatCompletionChunk;
use gatehouse_api::openai::ChatCompletionMessage;
use gatehouse_api::openai::ChatCompletionParams;
use gatehouse_api::openai::ChatUsage;
use gatehouse_api::openai::ChunkChoice;
use gatehouse_api::openai::ChunkDelta;
use gatehouse_api::openai::IDEMPOTENCY_HEADER;
use gatehouse_api::openai::LIST_OBJECT;
use gatehouse_api::openai::MODEL_OBJECT;
use gatehouse_api::openai::Model;
use gatehouse_api::openai::ModelList;
use gatehouse_api::openai::OpenAiError;
use gatehouse_api::openai::OpenAiErrorResponse;
use gatehouse_api::openai::SESSION_HEADER;
use gatehouse_api::openai::STREAM_DONE;
use gatehouse_api::sessions::MessageParams;
use gatehouse_api::sessions::TurnStatus;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::records::TurnRecord;

use crate::GatewayState;
use crate::documents::MAIN_AGENT;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::http::sessions;
use crate::secrets::random_token;
use crate::secrets::sha256_hex;
use crate::turns::events::Lagged;
use crate::turns::events::Subscription;

/// The longest a chat completion without `stream` waits for its turn to end; past it the
/// answer is `TIMEOUT`, and the turn goes on (`GET /v1/turns/{id}` follows it).
pub(crate) const COMPLETION_WAIT: Duration = Duration::from_secs(600);

/// The largest body of `POST /v1/chat/completions`, larger than the other JSON routes' 2 MiB:
/// a client sends the whole conversation every time, though only its last user message is read
/// (and held to the message limit of 256 KiB).
pub(crate) const MAX_COMPLETION_BODY_BYTES: usize = 8 * 1024 * 1024;

/// The largest error body [`error_shape`] reads to rewrite it.
const MAX_ERROR_BODY_BYTES: usize = 64 * 1024;

/// The `owned_by` of every model.
const OWNER: &str = "gatehouse";

pub(crate) async fn list_models(State(state): State<Arc<GatewayState>>) -> Json<ModelList> {
    Json(ModelList {
        object: LIST_OBJECT.to_owned(),
        data: vec![Model {
            id: MAIN_AGENT.to_owned(),
            object: MODEL_OBJECT.to_owned(),
            created: state.started_at_ms / 1000,
            owned_by: OWNER.to_owned(),
        }],
    })
}

pub(crate) async fn chat_completions(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let params: ChatCompletionParams = serde_json::from_slice(&body)
        .map_err(|error| ApiError::invalid_request(format!("invalid body: {error}")))?;
    if params.model != MAIN_AGENT {
        return Err(ApiError::not_found(format!(
            "no model {:?}; GET /v1/models lists them",
            params.model
        )));
    }
    let text = params
        .messages
        .iter()
        .rev()
        .find(|message| message.role == "user")
        .and_then(|message| message.content.as_ref())
        .map(gatehouse_api::openai::ChatContent::text)
        .ok_or_else(|| ApiError::invalid_request("messages holds no user message"))?;
    let idempotency_key = header_text(&headers, IDEMPOTENCY_HEADER)?;
    let (session_key, one_turn) = match header_text(&headers, SESSION_HEADER)? {
        Some(session_key) => (session_key, false),
        None => match params.user {
            Some(user) => (user, false),
            None => (
                new_session_key(&principal, idempotency_key.as_deref())?,
                true,
            ),
        },
    };
    sessions::check_session_key(&session_key)?;
    principal.check_session(&session_key)?;
    // The answer waits for the turn: it holds one of the key's streams, taken before anything
    // is admitted.
    let ticket = state.streams.open(principal.key())?;
    // Subscribe before admitting, so no event of the new turn falls in between.
    let live = state.hub.subscribe(&session_key).await;
    let message = MessageParams {
        text,
        attachments: Vec::new(),
        idempotency_key,
        queue_mode: None,
    };
    let admitted = sessions::admit_message(&state, &principal, &session_key, message).await?;
    if one_turn {
        release_when_ended(Arc::clone(&state), admitted.turn.clone());
    }
    let follower = TurnFollower {
        state: Arc::clone(&state),
        turn: admitted.turn,
        live,
        principal,
        recheck: sessions::key_recheck(),
        checked_end: false,
        _ticket: Some(ticket),
    };
    let answer = Answer {
        id: format!("chatcmpl-{}", follower.turn.turn_id),
        created: follower.turn.created_at_ms / 1000,
        model: params.model,
    };
    match params.stream.unwrap_or(false) {
        true => {
            let include_usage = params
                .stream_options
                .and_then(|options| options.include_usage)
                .unwrap_or(false);
            Ok(stream_answer(answer, follower, include_usage).into_response())
        }
        false => complete_answer(answer, follower).await,
    }
}

/// Stops the worker of a session a request made for itself ([`new_session_key`]) once its turn
/// ends, whether or not the client is still connected: nothing sends to that session again (a
/// retry with the same `Idempotency-Key` finds its ended turn in the store), so its worker slot
/// goes back to the node instead of staying taken until an operator stops it.
fn release_when_ended(state: Arc<GatewayState>, turn: TurnRecord) {
    tokio::spawn(async move {
        let mut follower = TurnFollower {
            live: state.hub.subscribe(&turn.session_key).await,
            state: Arc::clone(&state),
            turn,
            principal: Principal::operator(),
            recheck: sessions::key_recheck(),
            checked_end: false,
            _ticket: None,
        };
        loop {
            match follower.next().await {
                Ok(TurnPiece::End(_)) => break,
                Ok(TurnPiece::Text(_) | TurnPiece::Tool(_)) => {}
                Err(error) => {
                    tracing::info!(turn = %follower.turn.turn_id, error = %error.message, "stopped following a one-turn session");
                    return;
                }
            }
        }
        sessions::release_worker(&state, &follower.turn.session_key).await;
    });
}

/// What every chunk and completion of one request repeats.
struct Answer {
    id: String,
    created: i64,
    model: String,
}

impl Answer {
    /// A chunk with the next piece of the reply.
    fn chunk(&self, delta: ChunkDelta, finish_reason: Option<String>) -> ChatCompletionChunk {
        let choice = ChunkChoice {
            index: 0,
            delta,
            finish_reason,
        };
        self.chunk_of(vec![choice], None)
    }

    /// The chunk after the last choice that carries the turn's `usage`.
    fn usage_chunk(&self, usage: ChatUsage) -> ChatCompletionChunk {
        self.chunk_of(Vec::new(), Some(usage))
    }

    fn chunk_of(&self, choices: Vec<ChunkChoice>, usage: Option<ChatUsage>) -> ChatCompletionChunk {
        ChatCompletionChunk {
            id: self.id.clone(),
            object: CHUNK_OBJECT.to_owned(),
            created: self.created,
            model: self.model.clone(),
            choices,
            usage,
        }
    }
}

/// One thing that happened in a followed turn.
enum TurnPiece {
    /// A piece of the reply.
    Text(String),
    /// A line of tool activity.
    Tool(String),
    /// The turn ended; its stored record.
    End(Box<TurnRecord>),
}

/// Follows one turn through its session's live events.
struct TurnFollower {
    state: Arc<GatewayState>,
    turn: TurnRecord,
    live: Subscription,
    /// Who asked, checked again every [`crate::http::auth::KEY_RECHECK_INTERVAL`].
    principal: Principal,
    recheck: tokio::time::Interval,
    /// Whether the stored turn was read since the subscription started (a turn that had ended
    /// before, as for a retried idempotency key, sends no more events).
    checked_end: bool,
    /// The request's place in its key's stream share, while it waits for the turn.
    _ticket: Option<crate::shares::StreamTicket>,
}

impl TurnFollower {
    /// Returns the next piece of the turn.
    async fn next(&mut self) -> Result<TurnPiece, ApiError> {
        loop {
            if !self.checked_end {
                self.checked_end = true;
                let stored = sessions::load_turn(&self.state, &self.turn.turn_id).await?;
                if stored.status.is_terminal() {
                    return Ok(TurnPiece::End(Box::new(stored)));
                }
            }
            let received = tokio::select! {
                received = self.live.recv() => received,
                _ = self.recheck.tick() => {
                    if self.principal.still_valid(self.state.store.as_ref()).await {
                        continue;
                    }
                    return Err(ApiError::unauthorized(
                        "the key of this request was revoked or has expired",
                    ));
                }
            };
            let event = match received {
                Ok(event) => event,
                Err(Lagged) => {
                    // Dropped for falling behind: follow afresh; what streamed meanwhile is lost,
                    // the end is not.
                    self.live = self.state.hub.subscribe(&self.turn.session_key).await;
                    self.checked_end = false;
                    continue;
                }
            };
            let ours = event
                .payload
                .get("turnId")
                .and_then(serde_json::Value::as_str)
                == Some(self.turn.turn_id.as_str());
            if !ours {
                continue;
            }
            match event.kind.as_str() {
                MESSAGE_DELTA => {
                    if let Ok(delta) = serde_json::from_value::<MessageDelta>(event.payload.clone())
                    {
                        return Ok(TurnPiece::Text(delta.text));
                    }
                }
                TOOL_STARTED => {
                    if let Ok(tool) = serde_json::from_value::<ToolStarted>(event.payload.clone()) {
                        return Ok(TurnPiece::Tool(format!("[tool {}]\n", tool.tool)));
                    }
                }
                TURN_COMPLETED | TURN_FAILED => {
                    let stored = sessions::load_turn(&self.state, &self.turn.turn_id).await?;
                    return Ok(TurnPiece::End(Box::new(stored)));
                }
                _ => {}
            }
        }
    }
}

/// Waits for the turn's end and answers one `chat.completion`, or the turn's error.
async fn complete_answer(answer: Answer, mut follower: TurnFollower) -> Result<Response, ApiError> {
    let deadline = tokio::time::Instant::now() + COMPLETION_WAIT;
    let mut tools = String::new();
    let ended = loop {
        let piece = match tokio::time::timeout_at(deadline, follower.next()).await {
            Ok(piece) => piece?,
            Err(_elapsed) => {
                return Err(ApiError::new(
                    ErrorCode::Timeout,
                    format!(
                        "turn {} did not end in time; it goes on: GET /v1/turns/{} follows it",
                        follower.turn.turn_id, follower.turn.turn_id
                    ),
                ));
            }
        };
        match piece {
            TurnPiece::Text(_) => {}
            TurnPiece::Tool(line) => tools.push_str(&line),
            TurnPiece::End(turn) => break *turn,
        }
    };
    let reply = turn_outcome(&ended)?;
    let completion = ChatCompletion {
        id: answer.id,
        object: COMPLETION_OBJECT.to_owned(),
        created: answer.created,
        model: answer.model,
        choices: vec![ChatChoice {
            index: 0,
            message: ChatCompletionMessage {
                role: String::from("assistant"),
                content: format!("{tools}{reply}"),
            },
            finish_reason: String::from("stop"),
        }],
        usage: ended.usage.map(ChatUsage::from),
    };
    Ok(Json(completion).into_response())
}

/// Returns the reply of an ended turn, or the error to answer for it.
fn turn_outcome(turn: &TurnRecord) -> Result<String, ApiError> {
    match turn.status {
        TurnStatus::Completed => Ok(turn.reply.clone().unwrap_or_default()),
        TurnStatus::Queued
        | TurnStatus::Running
        | TurnStatus::Failed
        | TurnStatus::Interrupted
        | TurnStatus::Aborted => {
            let code = turn
                .error_code
                .clone()
                .unwrap_or_else(|| ErrorCode::Internal.as_str().to_owned());
            let status = ErrorCode::parse(&code)
                .map_or(StatusCode::BAD_GATEWAY, crate::http::error::status_of);
            let message = turn
                .error_message
                .clone()
                .unwrap_or_else(|| format!("the turn ended {}", turn.status.as_str()));
            Err(ApiError::with_text_code(status, &code, message))
        }
    }
}

/// Where a streamed answer is.
enum StreamPhase {
    /// The first chunk, with the role, is next.
    Start,
    /// Following the turn; whether any reply text was sent.
    Turn { sent_text: bool },
    /// The usage chunk is next.
    Usage(ChatUsage),
    /// `data: [DONE]` is next.
    Done,
    /// Nothing more.
    Ended,
}

/// Answers Server-Sent Events of chunks, ending with `data: [DONE]` (or an error event).
fn stream_answer(
    answer: Answer,
    follower: TurnFollower,
    include_usage: bool,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let events = futures_util::stream::unfold(
        (answer, follower, StreamPhase::Start),
        move |(answer, mut follower, phase)| async move {
            let (event, next) = match phase {
                StreamPhase::Start => {
                    let delta = ChunkDelta {
                        role: Some(String::from("assistant")),
                        content: Some(String::new()),
                    };
                    let event = json_event(&answer.chunk(delta, None));
                    (event, StreamPhase::Turn { sent_text: false })
                }
                StreamPhase::Turn { sent_text } => match follower.next().await {
                    Ok(TurnPiece::Text(text)) => {
                        let delta = ChunkDelta {
                            role: None,
                            content: Some(text),
                        };
                        (
                            json_event(&answer.chunk(delta, None)),
                            StreamPhase::Turn { sent_text: true },
                        )
                    }
                    Ok(TurnPiece::Tool(line)) => {
                        let delta = ChunkDelta {
                            role: None,
                            content: Some(line),
                        };
                        (
                            json_event(&answer.chunk(delta, None)),
                            StreamPhase::Turn { sent_text },
                        )
                    }
                    Ok(TurnPiece::End(turn)) => match turn_outcome(&turn) {
                        Ok(reply) => {
                            // A turn that ended before it was followed (a retry) streamed
                            // nothing here: its whole reply goes in the last chunk.
                            let content = match sent_text {
                                true => None,
                                false => Some(reply),
                            };
                            let delta = ChunkDelta {
                                role: None,
                                content,
                            };
                            let next = match turn.usage {
                                Some(usage) if include_usage => StreamPhase::Usage(usage.into()),
                                _ => StreamPhase::Done,
                            };
                            (
                                json_event(&answer.chunk(delta, Some(String::from("stop")))),
                                next,
                            )
                        }
                        Err(error) => (json_event(&openai_error(&error)), StreamPhase::Ended),
                    },
                    Err(error) => (json_event(&openai_error(&error)), StreamPhase::Ended),
                },
                StreamPhase::Usage(usage) => {
                    (json_event(&answer.usage_chunk(usage)), StreamPhase::Done)
                }
                StreamPhase::Done => (Event::default().data(STREAM_DONE), StreamPhase::Ended),
                StreamPhase::Ended => return None,
            };
            Some((Ok(event), (answer, follower, next)))
        },
    );
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// Returns an SSE event whose data is `value` as JSON. The chunk and error types hold only
/// strings, numbers and lists of them, so serializing cannot fail; `{}` stands in if it did.
fn json_event<T: serde::Serialize>(value: &T) -> Event {
    Event::default().data(serde_json::to_string(value).unwrap_or_else(|_| String::from("{}")))
}

/// Returns `error` in OpenAI's shape.
fn openai_error(error: &ApiError) -> OpenAiErrorResponse {
    OpenAiErrorResponse {
        error: OpenAiError {
            message: error.message.clone(),
            kind: OpenAiError::kind_of_status(error.status.as_u16()).to_owned(),
            code: error.code.clone(),
        },
    }
}

/// Returns the text of header `name`, `None` when it is absent.
///
/// # Errors
/// `INVALID_REQUEST` for a value that is not visible ASCII.
fn header_text(headers: &HeaderMap, name: &str) -> Result<Option<String>, ApiError> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(|text| Some(text.trim().to_owned()))
            .map_err(|_| ApiError::invalid_request(format!("the {name} header is not text"))),
    }
}

/// Returns the key of a new session for a request that names none: `openai-` and an id, after
/// the principal's session prefix. With an idempotency key the id is derived from it, so a
/// retry of the request lands in the same session and finds its turn.
///
/// # Errors
/// `INTERNAL` when the random source fails.
fn new_session_key(
    principal: &Principal,
    idempotency_key: Option<&str>,
) -> Result<String, ApiError> {
    let id = match idempotency_key {
        Some(key) => {
            // Scoped to the key itself (its secret's hash), not its name, so a key created
            // again under a revoked key's name never lands in the old key's sessions.
            let owner = principal
                .key()
                .map_or(principal.actor(), |record| record.secret_sha256.as_str());
            let scoped = format!("{owner}\n{key}");
            sha256_hex(scoped.as_bytes())[..32].to_owned()
        }
        None => sha256_hex(
            random_token()
                .map_err(|error| {
                    tracing::error!(error = %error, "cannot draw a session id");
                    ApiError::internal(ErrorCode::Internal)
                })?
                .as_bytes(),
        )[..32]
            .to_owned(),
    };
    let prefix = principal.session_prefix().unwrap_or_default();
    Ok(format!("{prefix}openai-{id}"))
}

/// Rewrites every error answer of the OpenAI-compatible routes (the handlers', the
/// authentication layer's, axum's rejections) into OpenAI's shape,
/// `{"error":{"message","type","code"}}`, keeping the status and the stable code.
pub(crate) async fn error_shape(response: Response) -> Response {
    let status = response.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let response = crate::http::error::json_error_shape(response).await;
    let (mut parts, body) = response.into_parts();
    let bytes = axum::body::to_bytes(body, MAX_ERROR_BODY_BYTES)
        .await
        .unwrap_or_default();
    let error = match serde_json::from_slice::<ErrorResponse>(&bytes) {
        Ok(answer) => answer.error,
        Err(_) => gatehouse_api::error::ErrorBody {
            code: ErrorCode::HttpError.as_str().to_owned(),
            message: String::from("the request cannot be served"),
            details: None,
        },
    };
    let shaped = OpenAiErrorResponse {
        error: OpenAiError {
            message: error.message,
            kind: OpenAiError::kind_of_status(status.as_u16()).to_owned(),
            code: error.code,
        },
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let (_, body) = Json(shaped).into_response().into_parts();
    Response::from_parts(parts, body)
}
