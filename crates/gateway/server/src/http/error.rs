//! [`ApiError`]: every HTTP error as `{"error":{"code","message","details"?}}`.
//!
//! Handlers return [`ApiError`]; what axum itself answers (an extractor's rejection: a body over
//! the route's limit, invalid JSON, a wrong `Content-Type`, a missing field, a bad path or query;
//! an unknown route or method) is rewritten into the same shape by [`json_error_shape`], the
//! outermost layer of the router, so no error is ever plain text.
//!
//! The status of an error is its code's status in the catalogue
//! ([`ErrorCode::http_status`], listed in `docs/errors.md`). Where a route answers a code with
//! another status, it says so explicitly with [`ApiError::with_status`]:
//! - the rewritten rejections keep axum's own status (`INVALID_REQUEST` is also `422` for a body
//!   that does not deserialize, `HTTP_ERROR` any status without a more specific code);
//! - a store failure is `503` whatever its code ([`store_error`]), since retrying later may
//!   succeed;
//! - [`ApiError::internal`] is always `500`.
//!
//! A code relayed from a node or a runtime as text, which this build may not know, is answered
//! with a status chosen by the caller ([`ApiError::with_text_code`]).

use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use gatehouse_api::error::ErrorBody;
use gatehouse_api::error::ErrorResponse;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::StoreError;

use crate::shares::STREAM_RETRY_AFTER_SECONDS;
use crate::shares::StreamRefusal;
use crate::workspace::WorkspaceError;

/// The most bytes of a rejection's own text kept as the message of its JSON error.
const MAX_REJECTION_TEXT: usize = 1024;

/// An HTTP error with a stable code.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code.
    pub code: String,
    /// What happened and what to do.
    pub message: String,
    /// Structured context; never content or secrets.
    pub details: Option<serde_json::Value>,
    /// The seconds of a `Retry-After` header, for a `429`.
    pub retry_after_seconds: Option<u64>,
}

/// Returns the HTTP status of `code` in the catalogue.
pub fn status_of(code: ErrorCode) -> StatusCode {
    StatusCode::from_u16(code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
}

impl ApiError {
    /// Returns an error with `code`, its status from the catalogue, and no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self::with_text_code(status_of(code), code.as_str(), message)
    }

    /// Returns an error whose code is text: a code relayed from a node or a runtime, which this
    /// build may not know, or a domain error's code text. The caller chooses the status.
    pub fn with_text_code(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
            details: None,
            retry_after_seconds: None,
        }
    }

    /// Returns the same error answered with `Retry-After: seconds`.
    #[must_use]
    pub fn with_retry_after(mut self, seconds: u64) -> Self {
        self.retry_after_seconds = Some(seconds);
        self
    }

    /// Returns the same error with another status, for a route documented to answer its code
    /// with a status other than the catalogue's.
    #[must_use]
    pub fn with_status(mut self, status: StatusCode) -> Self {
        self.status = status;
        self
    }

    /// 401 `UNAUTHORIZED`.
    pub fn unauthorized(message: &str) -> Self {
        Self::new(ErrorCode::Unauthorized, message)
    }

    /// 400 `INVALID_REQUEST`.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidRequest, message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::NotFound, message)
    }

    /// 500 with `code` and a generic message, whatever the code's own status; the cause is
    /// logged where it happened.
    pub fn internal(code: ErrorCode) -> Self {
        Self::new(code, "the gateway failed; see its log")
            .with_status(StatusCode::INTERNAL_SERVER_ERROR)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorResponse {
            error: ErrorBody {
                code: self.code,
                message: self.message,
                details: self.details,
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after_seconds {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

/// The router's fallback: an unknown route is `404 NOT_FOUND` in the API's shape.
pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

/// Rewrites an error response that is not in the API's JSON shape (axum's plain-text
/// rejections, its empty `405`) into `{"error":{"code","message"}}`, keeping the status and the
/// other headers (`Allow` of a `405`). The code follows the status; the message is
/// the rejection's own text, which says what was wrong, or a fixed one when it has none.
/// Successful responses and errors already in JSON pass untouched, without being buffered.
pub(crate) async fn json_error_shape(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // Rejection texts are short; a longer body is replaced by the fixed message.
    let text = axum::body::to_bytes(body, MAX_REJECTION_TEXT)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_owned())
        .unwrap_or_default();
    let (code, fallback) = match status {
        StatusCode::BAD_REQUEST | StatusCode::UNPROCESSABLE_ENTITY => {
            (ErrorCode::InvalidRequest, "the request is malformed")
        }
        StatusCode::PAYLOAD_TOO_LARGE => (
            ErrorCode::PayloadTooLarge,
            "the request body is larger than this route accepts",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            ErrorCode::UnsupportedMediaType,
            "send the body with Content-Type: application/json",
        ),
        StatusCode::NOT_FOUND => (ErrorCode::NotFound, "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => (
            ErrorCode::MethodNotAllowed,
            "this route does not accept this method; see the Allow header",
        ),
        _ => (ErrorCode::HttpError, "the request cannot be served"),
    };
    let message = match text.is_empty() {
        true => fallback.to_owned(),
        false => text,
    };
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    let error = ApiError::new(code, message)
        .with_status(status)
        .into_response();
    let (_, body) = error.into_parts();
    Response::from_parts(parts, body)
}

impl From<StreamRefusal> for ApiError {
    /// Answers a refused stream `429 STREAM_SHARE_EXHAUSTED`, with `Retry-After`.
    fn from(refusal: StreamRefusal) -> Self {
        Self::new(ErrorCode::StreamShareExhausted, refusal.to_string())
            .with_retry_after(STREAM_RETRY_AFTER_SECONDS)
    }
}

impl From<WorkspaceError> for ApiError {
    fn from(error: WorkspaceError) -> Self {
        match error {
            WorkspaceError::BadPath { code, message } => {
                // `PATH_TRAVERSAL` is 403, `INVALID_PATH` 400.
                Self::new(code, message)
            }
            WorkspaceError::PolicyDenied { .. } => {
                Self::with_text_code(StatusCode::FORBIDDEN, error.code(), error.to_string())
            }
            WorkspaceError::Unavailable | WorkspaceError::Timeout => Self::new(
                ErrorCode::DependencyUnavailable,
                format!("{error}; check that the Harness node is running and enrolled"),
            ),
            WorkspaceError::UnknownOutcome => Self::new(
                ErrorCode::UnknownOutcome,
                format!("{error}; it is never replayed: read the file before writing again"),
            ),
            WorkspaceError::Corrupt => Self::new(ErrorCode::NodeBadResponse, error.to_string()),
            WorkspaceError::Remote(remote) => {
                let status = match remote.known_code() {
                    Some(
                        ErrorCode::PathTraversal
                        | ErrorCode::SymlinkRedirect
                        | ErrorCode::SymlinkTargetDenied
                        | ErrorCode::PolicyDenied
                        | ErrorCode::NoPolicy
                        | ErrorCode::HardlinkDenied
                        | ErrorCode::PermissionDenied,
                    ) => StatusCode::FORBIDDEN,
                    Some(ErrorCode::NotFound) => StatusCode::NOT_FOUND,
                    Some(ErrorCode::FileTooLarge) => StatusCode::PAYLOAD_TOO_LARGE,
                    Some(
                        ErrorCode::IsDirectory
                        | ErrorCode::NotDirectory
                        | ErrorCode::InvalidPath
                        | ErrorCode::InvalidParams,
                    ) => StatusCode::BAD_REQUEST,
                    Some(ErrorCode::ReadError) => StatusCode::UNPROCESSABLE_ENTITY,
                    Some(ErrorCode::Unavailable | ErrorCode::Cancelled | ErrorCode::Timeout) => {
                        StatusCode::SERVICE_UNAVAILABLE
                    }
                    _ => StatusCode::BAD_GATEWAY,
                };
                // A relayed code keeps this table rather than the catalogue's status: a code the
                // node should not send for a read is the Gateway's problem (502).
                // The node's details carry its canonical path, which is not a secret.
                Self {
                    status,
                    code: remote.code,
                    message: remote.message,
                    details: remote.details,
                    retry_after_seconds: None,
                }
            }
        }
    }
}

/// The answer to a failed store call: `507 STORAGE_FULL` when the disk is full, else `503` with
/// the store's code (`STORE_UNAVAILABLE`, `STORE_FAILURE`, ...), since retrying later may
/// succeed. The engine's own error is logged, never sent.
pub(crate) fn store_error(error: &StoreError) -> ApiError {
    // The engine's own error is the cause an operator needs; the answer never carries it.
    let cause = std::error::Error::source(error).map(ToString::to_string);
    tracing::error!(error = %error, cause = cause.as_deref().unwrap_or("none"), "store failure");
    match error {
        StoreError::DiskFull => ApiError::new(
            ErrorCode::StorageFull,
            "the gateway state disk is full; nothing was stored; free space and retry",
        ),
        // Any other store failure is 503 whatever its code: retrying later may succeed.
        other => ApiError::new(other.code(), "the gateway store failed; retry later")
            .with_status(StatusCode::SERVICE_UNAVAILABLE),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use gatehouse_protocol::error::ErrorCode;
    use pretty_assertions::assert_eq;

    use crate::http::error::ApiError;
    use crate::shares::STREAM_RETRY_AFTER_SECONDS;
    use crate::shares::StreamRefusal;

    #[test]
    fn a_refused_stream_is_429_with_retry_after_and_says_which_share_is_full() {
        let cases = [
            (
                StreamRefusal::GatewayFull { max_total: 5 },
                "this Gateway serves 5 event streams and long polls at once; retry in 5 s",
            ),
            (
                StreamRefusal::KeyFull { share: 2 },
                "this key may hold 2 event streams and long polls open at once; close one or retry in 5 s",
            ),
        ];
        for (refusal, message) in cases {
            assert_eq!(
                ApiError::from(refusal),
                ApiError {
                    status: StatusCode::TOO_MANY_REQUESTS,
                    code: ErrorCode::StreamShareExhausted.as_str().to_owned(),
                    message: message.to_owned(),
                    details: None,
                    retry_after_seconds: Some(STREAM_RETRY_AFTER_SECONDS),
                }
            );
        }
    }
}
