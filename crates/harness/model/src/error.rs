//! Model errors and their stable wire codes.

use gatehouse_protocol::error::ErrorCode;

/// Returns of this crate.
pub type Result<T> = std::result::Result<T, ModelError>;

/// Which wait ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// Waiting for the response headers and the first event after sending the request.
    FirstEvent,
    /// Waiting for the next event once the stream had started (comments do not count).
    Idle,
}

/// Why a model call failed.
///
/// Each variant maps to one `MODEL_*` code of [`ErrorCode`] through [`ModelError::code`]. The clients retry
/// [`ModelError::Connect`] and [`ModelError::Status`] with 429 or 5xx on their own, before the
/// first event only; whatever reaches the caller has already been retried as far as allowed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The variable that should hold the API key is unset or empty. Returned when a client is
    /// built; not retryable until the configuration changes.
    #[error("model api key variable {key_env} is unset or empty")]
    MissingKey {
        /// The name of the variable (never its value).
        key_env: String,
    },
    /// The API key cannot be sent in an HTTP header (it holds control characters). Returned when
    /// a client is built.
    #[error("model api key is not a valid header value")]
    InvalidKey,
    /// The base URL is neither `http://…` nor `https://…`.
    /// Returned when a client is built.
    #[error("model url {base_url} is not supported (only http:// in this build)")]
    UnsupportedUrl {
        /// The configured base URL.
        base_url: String,
    },
    /// The HTTP client could not be built.
    #[error("cannot build the http client")]
    Client {
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The connection could not be opened or the request not sent (retried before giving up).
    #[error("cannot reach the model")]
    Connect {
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// The model answered with an error status; 429 and 5xx were retried before giving up.
    #[error("model answered with status {status}: {message}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The `error.message` of the body, or a prefix of the body.
        message: String,
    },
    /// The model did not send the next thing in time.
    #[error("model timed out ({phase:?})")]
    Timeout {
        /// Which wait ran out.
        phase: TimeoutPhase,
    },
    /// The connection broke after the request was sent, before or while the answer was read. Not
    /// retried: the model may have started working on it.
    #[error("model connection broke")]
    Transport {
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
    /// An SSE line was longer than the parser accepts.
    #[error("model stream line is longer than {limit} bytes")]
    LineTooLong {
        /// The limit in bytes.
        limit: usize,
    },
    /// The SSE stream could not be decoded: a `data:` or `event:` value is not UTF-8.
    #[error("model sent an undecodable event stream")]
    InvalidSse {
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A `data:` payload was not valid JSON.
    #[error("model sent invalid json")]
    InvalidJson {
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// The stream ended before its end marker (`response.completed`, `data: [DONE]` or
    /// `message_stop`).
    #[error("model stream ended before completion")]
    Truncated,
    /// The model sent a shape that cannot be interpreted, for example a tool call without a name.
    #[error("model sent an unexpected shape: {what}")]
    UnexpectedShape {
        /// What was wrong.
        what: &'static str,
    },
    /// The model reported a failure inside the stream (`response.failed`, an `error` event or a
    /// chunk with an `error` object). Not retried: the stream had already started.
    #[error("model failed: {message}")]
    Failed {
        /// The upstream error code, such as `server_error`, `rate_limit_exceeded` or (Anthropic's
        /// error type) `overloaded_error`.
        code: Option<String>,
        /// The upstream message.
        message: String,
    },
    /// The model stopped early (`response.incomplete`).
    #[error("model response is incomplete: {reason}")]
    Incomplete {
        /// The upstream reason, such as `max_output_tokens`.
        reason: String,
    },
    /// The inference broker ended the call with a failure: the provider's error as the broker
    /// coded it, the broker's own refusal (`TURN_BUDGET_EXCEEDED` past the turn's ceiling,
    /// `INVALID_REQUEST`), or a broker that went away (`MODEL_UNAVAILABLE`). Returned by
    /// [`crate::broker::BrokeredClient`]; the broker has already retried what it retries.
    #[error("{message}")]
    Brokered {
        /// The stable code the broker sent.
        code: ErrorCode,
        /// What happened, as the broker said (never the key).
        message: String,
    },
}

impl ModelError {
    /// Returns the stable code of this error, one of the `MODEL_*` codes of [`ErrorCode`].
    ///
    /// Statuses: 401 and 403 are `MODEL_AUTH_FAILED`, 429 is `MODEL_RATE_LIMITED`, 408 and 5xx
    /// (Anthropic's 529 "overloaded" included) are `MODEL_UNAVAILABLE`, any other status is
    /// `MODEL_BAD_RESPONSE`. In-stream failures ([`ModelError::Failed`]) map by their upstream
    /// code (OpenAI's `error.code`, Anthropic's `error.type`): `server_error`,
    /// `server_is_overloaded`, `overloaded_error` and `api_error` are `MODEL_UNAVAILABLE`,
    /// `rate_limit_exceeded` and `rate_limit_error` are `MODEL_RATE_LIMITED`,
    /// `authentication_error` and `permission_error` are `MODEL_AUTH_FAILED`, anything else
    /// `MODEL_BAD_RESPONSE`.
    pub fn code(&self) -> ErrorCode {
        match self {
            ModelError::MissingKey { .. } | ModelError::InvalidKey => ErrorCode::ModelAuthFailed,
            ModelError::UnsupportedUrl { .. }
            | ModelError::Client { .. }
            | ModelError::Connect { .. }
            | ModelError::Timeout { .. }
            | ModelError::Transport { .. } => ErrorCode::ModelUnavailable,
            ModelError::Status { status, .. } => match status {
                401 | 403 => ErrorCode::ModelAuthFailed,
                429 => ErrorCode::ModelRateLimited,
                408 | 500..=599 => ErrorCode::ModelUnavailable,
                _ => ErrorCode::ModelBadResponse,
            },
            ModelError::Failed { code, .. } => match code.as_deref() {
                Some(
                    "server_error" | "server_is_overloaded" | "overloaded_error" | "api_error",
                ) => ErrorCode::ModelUnavailable,
                Some("rate_limit_exceeded" | "rate_limit_error") => ErrorCode::ModelRateLimited,
                Some("authentication_error" | "permission_error") => ErrorCode::ModelAuthFailed,
                Some(_) | None => ErrorCode::ModelBadResponse,
            },
            ModelError::LineTooLong { .. }
            | ModelError::InvalidSse { .. }
            | ModelError::InvalidJson { .. }
            | ModelError::Truncated
            | ModelError::UnexpectedShape { .. }
            | ModelError::Incomplete { .. } => ErrorCode::ModelBadResponse,
            ModelError::Brokered { code, .. } => *code,
        }
    }

    /// Returns true when the clients retry this error before the first event: a connect error,
    /// or status 429 or 5xx.
    pub fn is_retryable(&self) -> bool {
        match self {
            ModelError::Connect { .. } => true,
            ModelError::Status { status, .. } => *status == 429 || (500..=599).contains(status),
            ModelError::MissingKey { .. }
            | ModelError::InvalidKey
            | ModelError::UnsupportedUrl { .. }
            | ModelError::Client { .. }
            | ModelError::Timeout { .. }
            | ModelError::Transport { .. }
            | ModelError::LineTooLong { .. }
            | ModelError::InvalidSse { .. }
            | ModelError::InvalidJson { .. }
            | ModelError::Truncated
            | ModelError::UnexpectedShape { .. }
            | ModelError::Failed { .. }
            | ModelError::Incomplete { .. }
            | ModelError::Brokered { .. } => false,
        }
    }

    /// Returns true when the model stopped because it reached the request's output limit
    /// (`response.incomplete` with reason `max_output_tokens`).
    pub fn is_output_limit(&self) -> bool {
        matches!(self, ModelError::Incomplete { reason } if reason == "max_output_tokens")
    }

    /// Returns true when the model did not answer in time.
    pub fn is_timeout(&self) -> bool {
        matches!(self, ModelError::Timeout { .. })
    }
}
