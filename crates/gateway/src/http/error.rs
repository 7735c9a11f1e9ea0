//! [`ApiError`]: every HTTP error as `{"error":{"code","message","details"?}}`.

use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use gatehouse_protocol::error::ErrorCode;

use crate::workspace::WorkspaceError;

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
        Self::new(StatusCode::BAD_REQUEST, "INVALID_REQUEST", message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
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
