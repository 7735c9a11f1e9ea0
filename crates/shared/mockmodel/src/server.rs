//! The HTTP face of the mock: routes, the request recorder and streamed bodies.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::Method;
use axum::http::StatusCode;
use axum::http::Uri;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use parking_lot::Mutex;
use serde::Deserialize;
use serde::Serialize;
use serde_json::Value;
use serde_json::json;
use tokio::sync::watch;

use crate::memory::MockMemory;
use crate::plan::FailPlan;
use crate::plan::Plan;
use crate::plan::Usage;
use crate::plan::flaky;
use crate::plan::plan;
use crate::plan::usage;
use crate::render::Context;
use crate::render::Step;
use crate::view::ModelRequestView;
use crate::view::ViewItem;

/// How often `/hang` sends a keep-alive comment.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_millis(500);

/// The largest request body the mock accepts.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// One request the mock received, as `GET /_mock/requests` returns it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The HTTP method, for example `POST`.
    pub method: String,
    /// The request path, without the query.
    pub path: String,
    /// The headers, by lowercase name; repeated headers are joined with `, `.
    pub headers: BTreeMap<String, String>,
    /// The body as JSON; a body that is not JSON is recorded as a JSON string (empty for none).
    pub body: Value,
}

/// Every request the mock received, oldest first. Cloning shares the same record.
///
/// Requests to `/_mock/...` are not recorded.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    requests: Arc<Mutex<Vec<RecordedRequest>>>,
}

impl Recorder {
    /// Returns a copy of every recorded request, oldest first.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.requests.lock().clone()
    }

    /// Records one request and returns its number (1 for the first).
    fn record(&self, method: &Method, uri: &Uri, headers: &HeaderMap, body: &Bytes) -> u64 {
        let mut header_map: BTreeMap<String, String> = BTreeMap::new();
        for (name, value) in headers {
            let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
            header_map
                .entry(name.as_str().to_owned())
                .and_modify(|joined| {
                    joined.push_str(", ");
                    joined.push_str(&value);
                })
                .or_insert(value);
        }
        let body = serde_json::from_slice(body)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
        let recorded = RecordedRequest {
            method: method.as_str().to_owned(),
            path: uri.path().to_owned(),
            headers: header_map,
            body,
        };
        let mut requests = self.requests.lock();
        requests.push(recorded);
        requests.len() as u64
    }
}

/// Returns the mock's router with a fresh recorder (readable at `GET /_mock/requests`).
///
/// Streams served by this router only end when their client goes away; use [`serve`] for a
/// server that also ends them at shutdown.
pub fn router() -> Router {
    router_with_recorder(Recorder::default())
}

/// Returns the mock's router, recording into `recorder`.
pub fn router_with_recorder(recorder: Recorder) -> Router {
    // The sender is dropped at once, which the streams read as "never shut down".
    let (_, shutdown) = watch::channel(false);
    build_router(recorder, shutdown)
}

/// Serves the mock on `listener` until `shutdown` completes, with a fresh recorder.
///
/// At shutdown, open streams (`/hang`, `/slow`) end and the server waits for the rest.
///
/// # Errors
///
/// Returns the I/O error that stopped the server.
pub async fn serve(
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with_recorder(listener, Recorder::default(), shutdown).await
}

/// Serves the mock on `listener`, recording into `recorder`, until `shutdown` completes.
///
/// # Errors
///
/// Returns the I/O error that stopped the server.
pub async fn serve_with_recorder(
    listener: tokio::net::TcpListener,
    recorder: Recorder,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let (shutdown_sender, shutdown_receiver) = watch::channel(false);
    let app = build_router(recorder, shutdown_receiver);
    let shutdown = async move {
        shutdown.await;
        tracing::debug!("mock model shutting down");
        shutdown_sender.send_replace(true);
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
}

#[derive(Clone)]
struct AppState {
    recorder: Recorder,
    /// The prompt-cache prefixes seen and the `/flaky` counts of this router.
    memory: MockMemory,
    shutdown: watch::Receiver<bool>,
}

fn build_router(recorder: Recorder, shutdown: watch::Receiver<bool>) -> Router {
    Router::new()
        .route("/v1/responses", post(responses))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .route("/_mock/requests", get(recorded_requests))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(AppState {
            recorder,
            memory: MockMemory::default(),
            shutdown,
        })
}

/// `POST /v1/responses`: SSE when the body says `"stream": true`, otherwise one JSON response
/// object.
async fn responses(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(WireApi::Responses, state, &method, &uri, &headers, &body).await
}

/// `POST /v1/chat/completions`: chunks when the body says `"stream": true`, otherwise one
/// `chat.completion` object.
async fn chat_completions(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(WireApi::Chat, state, &method, &uri, &headers, &body).await
}

/// `POST /v1/messages`: Anthropic Messages, SSE when the body says `"stream": true`, otherwise one
/// message object. A request without `x-api-key` gets 401 `authentication_error`, one without
/// `anthropic-version` or `max_tokens` 400 `invalid_request_error`.
async fn messages(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(WireApi::Anthropic, state, &method, &uri, &headers, &body).await
}

/// The request shapes the mock answers; they differ only in how a request is read and an answer
/// is rendered.
#[derive(Debug, Clone, Copy)]
enum WireApi {
    Responses,
    Chat,
    Anthropic,
}

impl WireApi {
    fn view(self, body: &Value) -> ModelRequestView {
        match self {
            WireApi::Responses => ModelRequestView::from_responses_body(body),
            WireApi::Chat => ModelRequestView::from_chat_body(body),
            WireApi::Anthropic => ModelRequestView::from_anthropic_body(body),
        }
    }

    fn error_body(self, fail: FailPlan) -> Value {
        match self {
            WireApi::Responses | WireApi::Chat => fail.error_body(),
            WireApi::Anthropic => fail.anthropic_error_body(),
        }
    }

    fn stream(self, plan: &Plan, context: &Context, body: &Value) -> Vec<Step> {
        match self {
            WireApi::Responses => crate::render::responses_stream(plan, context),
            WireApi::Chat => {
                let include_usage = body
                    .pointer("/stream_options/include_usage")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                crate::render::chat_stream(plan, context, include_usage)
            }
            WireApi::Anthropic => crate::render::anthropic_stream(plan, context),
        }
    }

    fn json(self, plan: &Plan, context: &Context) -> Value {
        match self {
            WireApi::Responses => crate::render::responses_json(plan, context),
            WireApi::Chat => crate::render::chat_json(plan, context),
            WireApi::Anthropic => crate::render::anthropic_json(plan, context),
        }
    }
}

/// Records one model request and answers it as its plan says, streamed or not.
async fn answer(
    api: WireApi,
    state: AppState,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Response {
    let seq = state.recorder.record(method, uri, headers, body);
    let Ok(body) = serde_json::from_slice::<Value>(body) else {
        return invalid_json();
    };
    if let WireApi::Anthropic = api
        && let Some(refusal) = anthropic_refusal(headers, &body)
    {
        return refusal;
    }
    let view = api.view(&body);
    let plan = plan(&view);
    if let Some(flaky) = flaky(&view) {
        let attempt = state.memory.flaky_attempt(last_user_text(&view));
        if attempt <= flaky.failures {
            tracing::debug!(
                seq,
                attempt,
                status = flaky.status,
                "mock model flaky failure"
            );
            let fail = FailPlan {
                status: flaky.status,
            };
            let mut response = fail_response(fail.status, api.error_body(fail));
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("0"));
            return response;
        }
    }
    let mut context = context(seq, &body, &view, &plan);
    if let WireApi::Anthropic = api {
        add_prefix_usage(&body, &state.memory, &mut context.usage);
    }
    tracing::debug!(seq, ?api, plan = ?plan, "mock model request");
    if let Plan::Fail(fail) = &plan {
        return fail_response(fail.status, api.error_body(*fail));
    }
    if is_stream(&body) {
        return stream_response(api.stream(&plan, &context, &body), state.shutdown);
    }
    match &plan {
        Plan::Hang => return hang_without_stream(state.shutdown).await,
        Plan::Text(text) => {
            sleep_or_shutdown(text.delay * pauses(text.deltas.len()), state.shutdown).await;
        }
        Plan::ToolCalls(_) | Plan::Fail(_) => {}
    }
    Json(api.json(&plan, &context)).into_response()
}

/// `GET /_mock/requests`: every recorded request, oldest first.
async fn recorded_requests(State(state): State<AppState>) -> Json<Vec<RecordedRequest>> {
    Json(state.recorder.requests())
}

async fn not_found(
    State(state): State<AppState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if !uri.path().starts_with("/_mock/") {
        state.recorder.record(&method, &uri, &headers, &body);
    }
    let body = json!({"error": {"message": "no such route", "type": "invalid_request_error", "param": null, "code": "not_found"}});
    (StatusCode::NOT_FOUND, Json(body)).into_response()
}

fn context(seq: u64, body: &Value, view: &ModelRequestView, plan: &Plan) -> Context {
    Context {
        seq,
        model: body
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or("mock")
            .to_owned(),
        usage: usage(view, plan),
    }
}

/// Returns the answer to an Anthropic request that lacks its key, version header or
/// `max_tokens`, as the API would give it; `None` for a complete request.
fn anthropic_refusal(headers: &HeaderMap, body: &Value) -> Option<Response> {
    let has = |name: &str| headers.get(name).is_some_and(|value| !value.is_empty());
    let (status, error_type, message) = if !has("x-api-key") {
        (
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "x-api-key header is required",
        )
    } else if !has("anthropic-version") {
        (
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "anthropic-version: header is required",
        )
    } else if body
        .get("max_tokens")
        .and_then(Value::as_u64)
        .is_none_or(|max_tokens| max_tokens == 0)
    {
        (
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "max_tokens: field required",
        )
    } else {
        return None;
    };
    let body = json!({"type": "error", "error": {"type": error_type, "message": message}});
    Some((status, Json(body)).into_response())
}

/// Adds the prompt-cache usage of an Anthropic request's prefix (its `system` and `tools`, about
/// one token per four characters of their JSON): when the request marks it with `cache_control`,
/// a cache read when this server saw the same prefix before and a cache write otherwise;
/// unmarked, plain input.
fn add_prefix_usage(body: &Value, memory: &MockMemory, usage: &mut Usage) {
    let parts = [body.get("system"), body.get("tools")];
    let prefix: String = parts.iter().flatten().map(ToString::to_string).collect();
    if prefix.is_empty() {
        return;
    }
    let n_tokens = prefix.chars().count().div_ceil(4) as u64;
    let marked = parts
        .iter()
        .flatten()
        .any(|part| part.to_string().contains("\"cache_control\""));
    if !marked {
        usage.input_tokens += n_tokens;
    } else if memory.cache_prefix(&prefix) {
        usage.cache_read_tokens = n_tokens;
    } else {
        usage.cache_write_tokens = n_tokens;
    }
}

/// Returns the text of the last user message of `view` (empty when there is none).
fn last_user_text(view: &ModelRequestView) -> &str {
    view.items
        .iter()
        .rev()
        .find_map(|item| match item {
            ViewItem::User { text } => Some(text.as_str()),
            ViewItem::Assistant { .. }
            | ViewItem::ToolCall { .. }
            | ViewItem::ToolResult { .. } => None,
        })
        .unwrap_or_default()
}

fn is_stream(body: &Value) -> bool {
    body.get("stream").and_then(Value::as_bool).unwrap_or(false)
}

fn pauses(n_deltas: usize) -> u32 {
    u32::try_from(n_deltas.saturating_sub(1)).unwrap_or(u32::MAX)
}

fn invalid_json() -> Response {
    let body = json!({"error": {"message": "request body is not json", "type": "invalid_request_error", "param": null, "code": "invalid_json"}});
    (StatusCode::BAD_REQUEST, Json(body)).into_response()
}

fn fail_response(status: u16, body: Value) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, Json(body)).into_response()
}

/// A non-streaming `/hang`: no answer until the server shuts down (or the client goes away and
/// the connection is dropped).
async fn hang_without_stream(mut shutdown: watch::Receiver<bool>) -> Response {
    shutdown_requested(&mut shutdown).await;
    fail_response(
        503,
        json!({"error": {"message": "mock model shutting down", "type": "server_error", "param": null, "code": "server_error"}}),
    )
}

async fn sleep_or_shutdown(duration: Duration, mut shutdown: watch::Receiver<bool>) {
    tokio::select! {
        () = tokio::time::sleep(duration) => {}
        () = shutdown_requested(&mut shutdown) => {}
    }
}

/// Returns once shutdown was requested; never, when the sender is gone without requesting it.
async fn shutdown_requested(shutdown: &mut watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow_and_update() {
            return;
        }
        if shutdown.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Returns a `text/event-stream` response that plays `steps`. The stream ends after the last
/// step, at shutdown, or when the client goes away (hyper then drops the body).
fn stream_response(steps: Vec<Step>, shutdown: watch::Receiver<bool>) -> Response {
    struct Playback {
        steps: VecDeque<Step>,
        shutdown: watch::Receiver<bool>,
    }
    let playback = Playback {
        steps: steps.into(),
        shutdown,
    };
    let stream = futures_util::stream::unfold(playback, |mut playback| async move {
        loop {
            match playback.steps.pop_front()? {
                Step::Send(bytes) => return Some((Ok::<Bytes, Infallible>(bytes), playback)),
                Step::Sleep(duration) => {
                    tokio::select! {
                        () = tokio::time::sleep(duration) => {}
                        () = shutdown_requested(&mut playback.shutdown) => return None,
                    }
                }
                Step::KeepAliveForever => {
                    tokio::select! {
                        () = tokio::time::sleep(KEEPALIVE_INTERVAL) => {}
                        () = shutdown_requested(&mut playback.shutdown) => return None,
                    }
                    playback.steps.push_front(Step::KeepAliveForever);
                    return Some((Ok(Bytes::from_static(b": keepalive\n\n")), playback));
                }
            }
        }
    });
    let mut response = Body::from_stream(stream).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}
