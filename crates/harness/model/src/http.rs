//! What the HTTP clients share: sending with bounded, observable retries, and turning an SSE body
//! into model events under the first-event and idle timeouts.

use std::collections::VecDeque;
use std::time::Duration;

use futures_util::StreamExt;
use reqwest::StatusCode;
use reqwest::header::ACCEPT;
use reqwest::header::AUTHORIZATION;
use reqwest::header::CONTENT_TYPE;
use reqwest::header::HeaderMap;
use reqwest::header::HeaderValue;
use reqwest::header::RETRY_AFTER;
use serde_json::Value;
use tokio::time::Instant;

use crate::ModelEventStream;
use crate::config::ApiKey;
use crate::config::HttpClientConfig;
use crate::config::RetryPolicy;
use crate::config::Timeouts;
use crate::error::ModelError;
use crate::error::Result;
use crate::error::TimeoutPhase;
use crate::sse::SseEvent;
use crate::sse::SseEventStream;
use crate::types::ModelEvent;
use crate::types::RetryNotice;
use crate::types::RetryObserver;

/// The most bytes of an error body quoted in [`ModelError::Status`].
const MAX_ERROR_MESSAGE_CHARS: usize = 500;

/// The status Anthropic answers when its API is overloaded; retried like a 503.
const STATUS_OVERLOADED: u16 = 529;

/// An HTTP endpoint with its credential headers, timeouts and retry policy.
pub(crate) struct Transport {
    client: reqwest::Client,
    endpoint: String,
    /// Sent with every request: the credential (marked sensitive) and any API version header.
    headers: HeaderMap,
    timeouts: Timeouts,
    retry: RetryPolicy,
}

/// Whether the stream goes on after an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flow {
    Continue,
    /// The end marker arrived; nothing after it is read.
    Done,
}

/// Turns the SSE events of one API into model events.
pub(crate) trait Interpreter: Send + 'static {
    /// Handles one event, pushing model events to `out`.
    fn on_event(&mut self, event: SseEvent, out: &mut VecDeque<ModelEvent>) -> Result<Flow>;
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("Transport")
            .field("endpoint", &self.endpoint)
            .field("timeouts", &self.timeouts)
            .field("retry", &self.retry)
            .finish_non_exhaustive()
    }
}

impl Transport {
    /// Returns a transport posting to `{base_url}{path}` with `headers` (see [`bearer_headers`]).
    ///
    /// # Errors
    ///
    /// [`ModelError::UnsupportedUrl`] unless the base URL is `http://` or `https://` (TLS with
    /// rustls and the system's trust store), [`ModelError::Client`] when reqwest cannot build a
    /// client.
    pub(crate) fn new(
        config: &HttpClientConfig,
        path: &str,
        headers: HeaderMap,
    ) -> Result<Transport> {
        let host = config
            .base_url
            .strip_prefix("http://")
            .or_else(|| config.base_url.strip_prefix("https://"));
        let Some(host) = host else {
            return Err(ModelError::UnsupportedUrl {
                base_url: config.base_url.clone(),
            });
        };
        let mut builder = reqwest::Client::builder().connect_timeout(config.timeouts.connect);
        // A loopback model (the mock, a local server) is never reached through a proxy.
        let authority = host.split('/').next().unwrap_or_default();
        let host_name = match authority.strip_prefix('[') {
            Some(rest) => rest.split(']').next().unwrap_or_default(),
            None => authority.split(':').next().unwrap_or_default(),
        };
        if matches!(host_name, "127.0.0.1" | "localhost" | "::1") {
            builder = builder.no_proxy();
        }
        let client = builder
            .build()
            .map_err(|source| ModelError::Client { source })?;
        Ok(Transport {
            client,
            endpoint: format!("{}{path}", config.base_url.trim_end_matches('/')),
            headers,
            timeouts: config.timeouts,
            retry: config.retry.clone(),
        })
    }

    /// Posts `body` and returns the event stream, retrying connect errors, 429 and 5xx (529
    /// included; at most as many times as the policy allows, after its jittered pauses or the
    /// server's bounded `Retry-After`). Each retry is reported to `on_retry` before the wait.
    /// Nothing is retried once a response was accepted.
    ///
    /// # Errors
    ///
    /// The last attempt's error: [`ModelError::Connect`], [`ModelError::Status`],
    /// [`ModelError::Timeout`] or [`ModelError::Transport`].
    pub(crate) async fn stream(
        &self,
        body: Vec<u8>,
        interpreter: impl Interpreter,
        on_retry: &RetryObserver<'_>,
    ) -> Result<ModelEventStream> {
        let body = bytes::Bytes::from(body);
        let mut pauses = self.retry.pauses();
        let mut n_retries: u32 = 0;
        loop {
            let deadline = Instant::now() + self.timeouts.first_event;
            let Refusal { error, retry_after } = match self.send_once(body.clone(), deadline).await
            {
                Ok(response) => {
                    return Ok(event_stream(response, deadline, self.timeouts, interpreter));
                }
                Err(refusal) => refusal,
            };
            if !error.is_retryable() {
                return Err(error);
            }
            let Some(backoff) = pauses.next(retry_after) else {
                return Err(error);
            };
            n_retries += 1;
            tracing::warn!(
                endpoint = %self.endpoint,
                code = error.code().as_str(),
                error = %error,
                retry = n_retries,
                backoff_ms = backoff.as_millis() as u64,
                "model request failed, retrying"
            );
            on_retry(&RetryNotice {
                attempt: n_retries,
                code: error.code(),
                message: error.to_string(),
                delay: backoff,
            });
            tokio::time::sleep(backoff).await;
        }
    }

    async fn send_once(
        &self,
        body: bytes::Bytes,
        deadline: Instant,
    ) -> std::result::Result<reqwest::Response, Refusal> {
        tracing::debug!(endpoint = %self.endpoint, "model request");
        let request = self
            .client
            .post(&self.endpoint)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .header(ACCEPT, "text/event-stream")
            .body(body)
            .send();
        let response = match tokio::time::timeout_at(deadline, request).await {
            Err(_) => {
                return Err(Refusal::from(ModelError::Timeout {
                    phase: TimeoutPhase::FirstEvent,
                }));
            }
            Ok(Err(source)) if source.is_connect() => {
                return Err(Refusal::from(ModelError::Connect { source }));
            }
            Ok(Err(source)) => return Err(Refusal::from(ModelError::Transport { source })),
            Ok(Ok(response)) => response,
        };
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let honours_retry_after = status == StatusCode::TOO_MANY_REQUESTS
            || status == StatusCode::SERVICE_UNAVAILABLE
            || status.as_u16() == STATUS_OVERLOADED;
        let retry_after = match honours_retry_after {
            true => response
                .headers()
                .get(RETRY_AFTER)
                .and_then(|value| value.to_str().ok())
                .and_then(|value| parse_retry_after(value, std::time::SystemTime::now())),
            false => None,
        };
        let message = match tokio::time::timeout_at(deadline, response.bytes()).await {
            Ok(Ok(bytes)) => error_message(&bytes),
            Ok(Err(_)) | Err(_) => String::new(),
        };
        Err(Refusal {
            error: ModelError::Status {
                status: status.as_u16(),
                message,
            },
            retry_after,
        })
    }
}

/// Why one attempt failed, with the wait the server asked for.
struct Refusal {
    error: ModelError,
    /// The `Retry-After` of a 429, 503 or 529 answer.
    retry_after: Option<Duration>,
}

impl From<ModelError> for Refusal {
    fn from(error: ModelError) -> Refusal {
        Refusal {
            error,
            retry_after: None,
        }
    }
}

/// Parses a `Retry-After` value: delay seconds, or an HTTP date (a date already past is no
/// wait). Returns `None` for anything else.
pub(crate) fn parse_retry_after(value: &str, now: std::time::SystemTime) -> Option<Duration> {
    let value = value.trim();
    if let Ok(seconds) = value.parse::<u64>() {
        return Some(Duration::from_secs(seconds));
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(at.duration_since(now).unwrap_or(Duration::ZERO))
}

/// Returns the headers of an OpenAI-style credential: `Authorization: Bearer KEY` (sensitive).
///
/// # Errors
///
/// [`ModelError::InvalidKey`] for a key that cannot be a header value.
pub(crate) fn bearer_headers(api_key: &ApiKey) -> Result<HeaderMap> {
    let mut authorization = HeaderValue::from_str(&format!("Bearer {}", api_key.expose()))
        .map_err(|_| ModelError::InvalidKey)?;
    authorization.set_sensitive(true);
    let mut headers = HeaderMap::new();
    headers.insert(AUTHORIZATION, authorization);
    Ok(headers)
}

/// Returns `error.message` of an error body (OpenAI's and Anthropic's shapes both have it), or
/// the start of the body.
fn error_message(body: &[u8]) -> String {
    let from_json = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|value| {
            value
                .pointer("/error/message")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
    match from_json {
        Some(message) => message,
        None => String::from_utf8_lossy(body)
            .chars()
            .take(MAX_ERROR_MESSAGE_CHARS)
            .collect(),
    }
}

/// Where a stream stands.
enum PumpState {
    Reading,
    /// Emit what is pending, then end.
    Done,
    /// Emit what is pending, then this error, then end.
    Failed(ModelError),
}

struct Pump<I> {
    events: SseEventStream,
    interpreter: I,
    pending: VecDeque<ModelEvent>,
    deadline: Instant,
    timeouts: Timeouts,
    got_first_event: bool,
    state: PumpState,
}

/// Returns the model events of an SSE response.
///
/// The first event must arrive before `first_event_deadline`; after that, each event within
/// `timeouts.idle` of the one before (comments do not reset the clock). A body that ends before the
/// interpreter saw the end marker gives [`ModelError::Truncated`].
pub(crate) fn event_stream(
    response: reqwest::Response,
    first_event_deadline: Instant,
    timeouts: Timeouts,
    interpreter: impl Interpreter,
) -> ModelEventStream {
    let pump = Pump {
        events: crate::sse::events(response),
        interpreter,
        pending: VecDeque::new(),
        deadline: first_event_deadline,
        timeouts,
        got_first_event: false,
        state: PumpState::Reading,
    };
    Box::pin(futures_util::stream::unfold(pump, |mut pump| async move {
        loop {
            if let Some(event) = pump.pending.pop_front() {
                return Some((Ok(event), pump));
            }
            match std::mem::replace(&mut pump.state, PumpState::Done) {
                PumpState::Done => return None,
                PumpState::Failed(error) => return Some((Err(error), pump)),
                PumpState::Reading => {}
            }
            pump.state = match pump.next_sse_event().await {
                Ok(Some(event)) => match pump.interpreter.on_event(event, &mut pump.pending) {
                    Ok(Flow::Continue) => PumpState::Reading,
                    Ok(Flow::Done) => PumpState::Done,
                    Err(error) => PumpState::Failed(error),
                },
                Ok(None) => PumpState::Failed(ModelError::Truncated),
                Err(error) => PumpState::Failed(error),
            };
        }
    }))
}

impl<I: Interpreter> Pump<I> {
    /// Returns the next SSE event, or `None` at the end of the body.
    async fn next_sse_event(&mut self) -> Result<Option<SseEvent>> {
        match tokio::time::timeout_at(self.deadline, self.events.next()).await {
            Err(_) => {
                let phase = if self.got_first_event {
                    TimeoutPhase::Idle
                } else {
                    TimeoutPhase::FirstEvent
                };
                tracing::warn!(?phase, "model stream timed out");
                Err(ModelError::Timeout { phase })
            }
            Ok(None) => Ok(None),
            Ok(Some(Err(error))) => Err(error),
            Ok(Some(Ok(event))) => {
                self.got_first_event = true;
                self.deadline = Instant::now() + self.timeouts.idle;
                Ok(Some(event))
            }
        }
    }
}
