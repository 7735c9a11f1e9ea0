//! [`ApiError`]: every HTTP error as `{"error":{"code","message","details"?}}`.
//!
//! Handlers return [`ApiError`]; what axum itself answers (an extractor's rejection: a body over
//! the route's limit, invalid JSON, a wrong `Content-Type`, a missing field, a bad path or query;
//! an unknown route or method) is rewritten into the same shape by [`json_error_shape`], the
//! outermost layer of the router, so no error is ever plain text.

use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use gatehouse_protocol::error::ErrorCode;

use crate::workspace::WorkspaceError;

/// The stable codes of errors the HTTP layer answers itself, before any handler runs.
pub mod codes {
    /// `400`/`422`: the request is malformed: invalid JSON, a missing or mistyped field, a bad
    /// path parameter or query string. Not retryable as sent.
    pub const INVALID_REQUEST: &str = "INVALID_REQUEST";
    /// `413`: the body is larger than the route accepts (2 MiB for JSON bodies, the media upload
    /// limit for `POST /v1/media`).
    pub const PAYLOAD_TOO_LARGE: &str = "PAYLOAD_TOO_LARGE";
    /// `415`: a JSON route got a body without `Content-Type: application/json`.
    pub const UNSUPPORTED_MEDIA_TYPE: &str = "UNSUPPORTED_MEDIA_TYPE";
    /// `404`: no route matches the path.
    pub const NOT_FOUND: &str = "NOT_FOUND";
    /// `405`: the route exists but not for this method; the `Allow` header lists the methods.
    pub const METHOD_NOT_ALLOWED: &str = "METHOD_NOT_ALLOWED";
    /// Any other error status the HTTP layer answers without a handler (for example `426` for
    /// a `/node` request that is not a WebSocket upgrade).
    pub const HTTP_ERROR: &str = "HTTP_ERROR";
}

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
}

impl ApiError {
    /// Returns an error with no details.
    pub fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            code: code.to_owned(),
            message: message.into(),
            details: None,
        }
    }

    /// 401 `UNAUTHORIZED`.
    pub fn unauthorized(message: &str) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", message)
    }

    /// 400 `INVALID_REQUEST`.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, codes::INVALID_REQUEST, message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, codes::NOT_FOUND, message)
    }

    /// 500 with a generic message; the cause is logged where it happened.
    pub fn internal(code: &str) -> Self {
        Self::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            code,
            "the gateway failed; see its log",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut error = serde_json::json!({"code": self.code, "message": self.message});
        if let Some(details) = self.details {
            error["details"] = details;
        }
        (self.status, axum::Json(serde_json::json!({"error": error}))).into_response()
    }
}

/// Rewrites an error response that is not in the API's JSON shape (axum's plain-text
/// rejections, its empty `405`) into `{"error":{"code","message"}}`, keeping the status and the
/// other headers (`Allow` of a `405`). The code follows the status ([`codes`]); the message is
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
            (codes::INVALID_REQUEST, "the request is malformed")
        }
        StatusCode::PAYLOAD_TOO_LARGE => (
            codes::PAYLOAD_TOO_LARGE,
            "the request body is larger than this route accepts",
        ),
        StatusCode::UNSUPPORTED_MEDIA_TYPE => (
            codes::UNSUPPORTED_MEDIA_TYPE,
            "send the body with Content-Type: application/json",
        ),
        StatusCode::NOT_FOUND => (codes::NOT_FOUND, "no such route"),
        StatusCode::METHOD_NOT_ALLOWED => (
            codes::METHOD_NOT_ALLOWED,
            "this route does not accept this method; see the Allow header",
        ),
        _ => (codes::HTTP_ERROR, "the request cannot be served"),
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
    let error = ApiError::new(status, code, message).into_response();
    let (_, body) = error.into_parts();
    Response::from_parts(parts, body)
}

impl From<WorkspaceError> for ApiError {
    fn from(error: WorkspaceError) -> Self {
        match error {
            WorkspaceError::BadPath { code, message } => {
                let status = match code {
                    ErrorCode::PathTraversal => StatusCode::FORBIDDEN,
                    _ => StatusCode::BAD_REQUEST,
                };
                Self::new(status, code.as_str(), message)
            }
            WorkspaceError::PolicyDenied { .. } => {
                Self::new(StatusCode::FORBIDDEN, error.code(), error.to_string())
            }
            WorkspaceError::Unavailable | WorkspaceError::Timeout => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                error.code(),
                format!("{error}; check that the Harness node is running and enrolled"),
            ),
            WorkspaceError::UnknownOutcome => Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                error.code(),
                format!("{error}; it is never replayed: read the file before writing again"),
            ),
            WorkspaceError::Corrupt => {
                Self::new(StatusCode::BAD_GATEWAY, error.code(), error.to_string())
            }
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
                // The node's details carry its canonical path, which is not a secret.
                Self {
                    status,
                    code: remote.code,
                    message: remote.message,
                    details: remote.details,
                }
            }
        }
    }
}
