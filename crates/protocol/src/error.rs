//! Stable error codes and the wire error shape.
//!
//! Every refusal that crosses the link or the HTTP API carries one of these codes. The set is
//! closed on purpose: a caller matches on [`ErrorCode`], never on message text. A code received
//! from a newer peer that this build does not know is kept as text in [`WireError::code`].

use serde::Deserialize;
use serde::Serialize;

/// A stable, machine-readable error code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request is malformed: bad JSON, a missing or mistyped field, an unknown method.
    InvalidRequest,
    /// A command's parameters are well-formed JSON but not valid for the command.
    InvalidParams,
    /// The path is empty, relative, not valid UTF-8, or contains NUL.
    InvalidPath,
    /// The path has a `..` segment or resolves outside the root.
    PathTraversal,
    /// The path policy refuses the access.
    PolicyDenied,
    /// No path policy entry applies to the node.
    NoPolicy,
    /// Nothing exists at the path.
    NotFound,
    /// The operating system refused the access.
    PermissionDenied,
    /// The path names a directory where a file was expected.
    IsDirectory,
    /// A path component that must be a directory is not one.
    NotDirectory,
    /// The file is larger than the limit of the request or the hard limit.
    FileTooLarge,
    /// The path crosses a symbolic link, which is never followed.
    SymlinkRedirect,
    /// The target of a write is a symbolic link.
    SymlinkTargetDenied,
    /// The file has more than one hard link, so it may be an alias of a file outside the root.
    HardlinkDenied,
    /// Reading failed, or the path is not a regular file.
    ReadError,
    /// Writing failed.
    WriteError,
    /// The content is not canonical base64.
    InvalidBase64,
    /// The content does not match `expectedSha256`.
    IntegrityFailure,
    /// The file exists and the request does not allow overwriting it.
    ExistsNoOverwrite,
    /// The parent directory does not exist and `createParents` is false.
    ParentNotFound,
    /// The device is not enrolled, or its token is wrong.
    Unauthorized,
    /// The device signature is invalid, stale, or for another nonce or key.
    DeviceAuthFailed,
    /// The setup code is unknown, expired or already used.
    SetupCodeInvalid,
    /// A frame is larger than the limit for the connection state.
    FrameTooLarge,
    /// A `node.invoke.progress` chunk is larger than
    /// [`crate::invoke::MAX_PROGRESS_CHUNK_BYTES`]; the Gateway fails that invoke.
    ProgressChunkTooLarge,
    /// A line streamed through progress chunks grew past its bound without a newline; the
    /// Gateway fails that invoke.
    ProgressLineTooLong,
    /// A node sent progress faster than its caller took it, past the bytes the Gateway buffers
    /// for one connection; the Gateway fails that invoke. Retrying later may succeed.
    NodeBufferExhausted,
    /// The session is bound to a node that is not connected; the turn fails rather than run on
    /// another node. Reconnect that node, or move the session explicitly.
    SessionNodeUnavailable,
    /// A node acted for a turn whose invoke does not run on its own connection (another node's
    /// turn, or one that ended); refused and audited.
    TurnNotOwned,
    /// A node tried to commit a message with a role other than `assistant` or `tool`; the turn
    /// fails.
    RoleNotAllowed,
    /// A turn's runtime tried to store more than the Gateway keeps for one turn (messages and
    /// tool events together, `MAX_TURN_STORED_BYTES` in the Gateway); the turn fails and what it
    /// stored before stays.
    TurnStorageExceeded,
    /// A node had more `node.gateway.tool` calls in flight on one connection than the Gateway
    /// answers at once; the call is refused without running and may be retried.
    TooManyToolCalls,
    /// The session has a running turn, so it cannot be moved now; retry after the turn ends.
    SessionBusy,
    /// An event-stream subscriber fell further behind than the Gateway buffers for it; the
    /// stream ends and the client resumes from the durable log with `after=`.
    SlowConsumer,
    /// The command is not declared by the node or not known to it.
    UnknownCommand,
    /// The peer that would serve the request is not connected.
    Unavailable,
    /// A dependency of the Gateway (the node, the workspace service) is unreachable.
    DependencyUnavailable,
    /// The request was sent, and no answer came before the deadline.
    Timeout,
    /// The request was cancelled by its caller.
    Cancelled,
    /// An unexpected internal failure.
    Internal,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: &'static [ErrorCode] = &[
        ErrorCode::InvalidRequest,
        ErrorCode::InvalidParams,
        ErrorCode::InvalidPath,
        ErrorCode::PathTraversal,
        ErrorCode::PolicyDenied,
        ErrorCode::NoPolicy,
        ErrorCode::NotFound,
        ErrorCode::PermissionDenied,
        ErrorCode::IsDirectory,
        ErrorCode::NotDirectory,
        ErrorCode::FileTooLarge,
        ErrorCode::SymlinkRedirect,
        ErrorCode::SymlinkTargetDenied,
        ErrorCode::HardlinkDenied,
        ErrorCode::ReadError,
        ErrorCode::WriteError,
        ErrorCode::InvalidBase64,
        ErrorCode::IntegrityFailure,
        ErrorCode::ExistsNoOverwrite,
        ErrorCode::ParentNotFound,
        ErrorCode::Unauthorized,
        ErrorCode::DeviceAuthFailed,
        ErrorCode::SetupCodeInvalid,
        ErrorCode::FrameTooLarge,
        ErrorCode::ProgressChunkTooLarge,
        ErrorCode::ProgressLineTooLong,
        ErrorCode::NodeBufferExhausted,
        ErrorCode::SessionNodeUnavailable,
        ErrorCode::TurnNotOwned,
        ErrorCode::RoleNotAllowed,
        ErrorCode::TurnStorageExceeded,
        ErrorCode::TooManyToolCalls,
        ErrorCode::SessionBusy,
        ErrorCode::SlowConsumer,
        ErrorCode::UnknownCommand,
        ErrorCode::Unavailable,
        ErrorCode::DependencyUnavailable,
        ErrorCode::Timeout,
        ErrorCode::Cancelled,
        ErrorCode::Internal,
    ];

    /// Returns the code as it appears on the wire, for example `SYMLINK_REDIRECT`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidRequest => "INVALID_REQUEST",
            ErrorCode::InvalidParams => "INVALID_PARAMS",
            ErrorCode::InvalidPath => "INVALID_PATH",
            ErrorCode::PathTraversal => "PATH_TRAVERSAL",
            ErrorCode::PolicyDenied => "POLICY_DENIED",
            ErrorCode::NoPolicy => "NO_POLICY",
            ErrorCode::NotFound => "NOT_FOUND",
            ErrorCode::PermissionDenied => "PERMISSION_DENIED",
            ErrorCode::IsDirectory => "IS_DIRECTORY",
            ErrorCode::NotDirectory => "NOT_DIRECTORY",
            ErrorCode::FileTooLarge => "FILE_TOO_LARGE",
            ErrorCode::SymlinkRedirect => "SYMLINK_REDIRECT",
            ErrorCode::SymlinkTargetDenied => "SYMLINK_TARGET_DENIED",
            ErrorCode::HardlinkDenied => "HARDLINK_DENIED",
            ErrorCode::ReadError => "READ_ERROR",
            ErrorCode::WriteError => "WRITE_ERROR",
            ErrorCode::InvalidBase64 => "INVALID_BASE64",
            ErrorCode::IntegrityFailure => "INTEGRITY_FAILURE",
            ErrorCode::ExistsNoOverwrite => "EXISTS_NO_OVERWRITE",
            ErrorCode::ParentNotFound => "PARENT_NOT_FOUND",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::DeviceAuthFailed => "DEVICE_AUTH_FAILED",
            ErrorCode::SetupCodeInvalid => "SETUP_CODE_INVALID",
            ErrorCode::FrameTooLarge => "FRAME_TOO_LARGE",
            ErrorCode::ProgressChunkTooLarge => "PROGRESS_CHUNK_TOO_LARGE",
            ErrorCode::ProgressLineTooLong => "PROGRESS_LINE_TOO_LONG",
            ErrorCode::NodeBufferExhausted => "NODE_BUFFER_EXHAUSTED",
            ErrorCode::SessionNodeUnavailable => "SESSION_NODE_UNAVAILABLE",
            ErrorCode::TurnNotOwned => "TURN_NOT_OWNED",
            ErrorCode::RoleNotAllowed => "ROLE_NOT_ALLOWED",
            ErrorCode::TurnStorageExceeded => "TURN_STORAGE_EXCEEDED",
            ErrorCode::TooManyToolCalls => "TOO_MANY_TOOL_CALLS",
            ErrorCode::SessionBusy => "SESSION_BUSY",
            ErrorCode::SlowConsumer => "SLOW_CONSUMER",
            ErrorCode::UnknownCommand => "UNKNOWN_COMMAND",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::DependencyUnavailable => "DEPENDENCY_UNAVAILABLE",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::Cancelled => "CANCELLED",
            ErrorCode::Internal => "INTERNAL",
        }
    }

    /// Parses a wire code; returns `None` for a code this build does not know.
    pub fn parse(text: &str) -> Option<ErrorCode> {
        ErrorCode::ALL
            .iter()
            .copied()
            .find(|code| code.as_str() == text)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for ErrorCode {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for ErrorCode {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        ErrorCode::parse(&text)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown error code {text}")))
    }
}

/// The error shape of a `res` frame and of a failed node command.
///
/// `code` is text so that a code from a newer peer survives a round trip; use [`WireError::known_code`]
/// to match on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireError {
    /// The stable code, for example `NOT_FOUND`.
    pub code: String,
    /// A short human-readable explanation that says what to do.
    pub message: String,
    /// Structured context, such as `canonicalPath`; never file content or secrets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
    /// True when the same request may succeed if sent again later.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retryable: Option<bool>,
}

impl WireError {
    /// Returns an error with `code` and `message` and no details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code: code.as_str().to_owned(),
            message: message.into(),
            details: None,
            retryable: None,
        }
    }

    /// Returns the same error with another code, for codes outside [`ErrorCode`] (for example
    /// a model's or a worker's code passed through).
    #[must_use]
    pub fn with_code(mut self, code: &str) -> Self {
        self.code = code.to_owned();
        self
    }

    /// Returns the same error with `details` attached.
    #[must_use]
    pub fn with_details(mut self, details: serde_json::Value) -> Self {
        self.details = Some(details);
        self
    }

    /// Returns the code as an [`ErrorCode`], or `None` when this build does not know it.
    pub fn known_code(&self) -> Option<ErrorCode> {
        ErrorCode::parse(&self.code)
    }
}

impl std::fmt::Display for WireError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for WireError {}
