//! The one error type of the node host.

use gatehouse_protocol::error::ErrorCode;
use std::path::PathBuf;

use gatehouse_protocol::error::WireError;

use gatehouse_protocol::setup_code::SetupCodeError;

/// A failure of the node host.
///
/// Variants split in two classes, told apart by [`NodeHostError::is_startup`]:
/// - startup errors: the configuration or the node's state directory is wrong. The operator must
///   fix something; nothing is retried. The CLI exits with code 2.
/// - runtime errors: one connection attempt or session failed. The reconnect loop logs them and
///   tries again after a backoff; the CLI exits with code 1 if one ever escapes.
///
/// No message ever contains a token or the setup code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeHostError {
    /// The setup code file could not be read. Startup error.
    #[error("cannot read the setup code file {path}")]
    SetupCodeUnreadable {
        /// The file given with `--setup-code-file`.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The setup code file does not hold a valid setup code. Startup error.
    #[error("the setup code in {path} is invalid")]
    SetupCodeInvalid {
        /// The file given with `--setup-code-file`.
        path: PathBuf,
        /// What is wrong with the code.
        #[source]
        source: SetupCodeError,
    },
    /// The node has no device token yet and no setup code was given. Startup error.
    #[error(
        "this node is not enrolled: pass --setup-code-file with a code from `gatehouse setup-code`"
    )]
    NoCredential,
    /// The Codex runtime was configured with a model API Codex cannot speak (only the OpenAI
    /// Responses API works; `anthropic:` and `openai-chat:` do not). Startup error; the operator
    /// must change `--model` or the runtime.
    #[error("{reason}")]
    CodexModel {
        /// Which API and why, with the fix.
        reason: String,
    },
    /// No Gateway URL is known: no `--gateway`, no saved device token, no setup code. Startup
    /// error.
    #[error("no gateway url: pass --gateway")]
    NoGatewayUrl,
    /// The Gateway URL is not one of the accepted forms. Startup error.
    #[error("invalid gateway url {url:?}: {reason}")]
    InvalidGatewayUrl {
        /// The URL as given.
        url: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A node state file or directory is a symbolic link, which is never followed. Startup error.
    #[error("refusing {path}: it is a symbolic link")]
    StateSymlink {
        /// The refused path.
        path: PathBuf,
    },
    /// A node state file exists but cannot be used. Startup error.
    #[error("invalid node state file {path}: {reason}")]
    InvalidStateFile {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The node root or one of its directories cannot be created or read. Startup error.
    #[error("cannot prepare {path}")]
    StateIo {
        /// The path that failed.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The workspace directory cannot be opened. Startup error.
    #[error("cannot open the workspace {path}")]
    WorkspaceUnusable {
        /// The workspace directory.
        path: PathBuf,
        /// Why it cannot be opened.
        #[source]
        source: gatehouse_fsops::FsError,
    },
    /// The WebSocket connection to the Gateway failed. Runtime error; retried.
    #[error("cannot connect to {url}")]
    Connect {
        /// The Gateway URL.
        url: String,
        /// The transport's error.
        #[source]
        source: Box<tokio_tungstenite::tungstenite::Error>,
    },
    /// The Gateway answered `connect` with an error. Runtime error; retried with backoff.
    #[error("the gateway refused the connection: {error}")]
    Refused {
        /// The Gateway's error, with its stable code.
        error: WireError,
    },
    /// The link closed. Runtime error; retried.
    #[error("the link to the gateway closed")]
    LinkClosed,
    /// Nothing arrived from the Gateway for two tick intervals. Runtime error; retried.
    #[error("no frame from the gateway for {idle_ms} ms")]
    LinkIdle {
        /// How long the link was silent.
        idle_ms: u64,
    },
    /// A handshake step did not complete in time. Runtime error; retried.
    #[error("timed out waiting for {waiting_for}")]
    HandshakeTimeout {
        /// What the node was waiting for.
        waiting_for: &'static str,
    },
    /// The Gateway broke the protocol. Runtime error; retried.
    #[error("protocol violation: {reason}")]
    Protocol {
        /// What was wrong.
        reason: String,
    },
    /// The issued device token could not be saved. Runtime error; the session is dropped.
    #[error("cannot save the device token to {path}")]
    SaveDeviceToken {
        /// The device token file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The node status file could not be read or written. Runtime error: the host logs it and
    /// keeps running; a probe reports it as unhealthy.
    #[error("cannot access the node status file {path}")]
    StatusIo {
        /// The status file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// A background task failed.
    #[error(transparent)]
    Join(#[from] tokio::task::JoinError),
}

/// The result type of the node host.
pub type Result<T> = std::result::Result<T, NodeHostError>;

impl NodeHostError {
    /// Returns a stable code for logs and exit reporting. For [`NodeHostError::Refused`] it is
    /// the Gateway's code, for example `SETUP_CODE_INVALID`.
    pub fn code(&self) -> &str {
        match self {
            NodeHostError::SetupCodeUnreadable { .. } => ErrorCode::SetupCodeUnreadable.as_str(),
            NodeHostError::SetupCodeInvalid { .. } => ErrorCode::SetupCodeInvalid.as_str(),
            NodeHostError::NoCredential => ErrorCode::NoCredential.as_str(),
            NodeHostError::NoGatewayUrl => ErrorCode::NoGatewayUrl.as_str(),
            NodeHostError::CodexModel { .. } => ErrorCode::InvalidParams.as_str(),
            NodeHostError::InvalidGatewayUrl { .. } => ErrorCode::InvalidGatewayUrl.as_str(),
            NodeHostError::StateSymlink { .. } => ErrorCode::StateSymlink.as_str(),
            NodeHostError::InvalidStateFile { .. } => ErrorCode::InvalidStateFile.as_str(),
            NodeHostError::StateIo { .. } => ErrorCode::StateIo.as_str(),
            NodeHostError::WorkspaceUnusable { .. } => ErrorCode::WorkspaceUnusable.as_str(),
            NodeHostError::Connect { .. } => ErrorCode::ConnectFailed.as_str(),
            NodeHostError::Refused { error } => &error.code,
            NodeHostError::LinkClosed => ErrorCode::LinkClosed.as_str(),
            NodeHostError::LinkIdle { .. } => ErrorCode::LinkIdle.as_str(),
            NodeHostError::HandshakeTimeout { .. } => ErrorCode::HandshakeTimeout.as_str(),
            NodeHostError::Protocol { .. } => ErrorCode::ProtocolError.as_str(),
            NodeHostError::SaveDeviceToken { .. } => ErrorCode::SaveDeviceTokenFailed.as_str(),
            NodeHostError::StatusIo { .. } => ErrorCode::StatusIo.as_str(),
            NodeHostError::Join(_) => ErrorCode::Internal.as_str(),
        }
    }

    /// Returns true for startup and configuration errors, which the operator must fix and which
    /// are never retried; false for runtime errors.
    pub fn is_startup(&self) -> bool {
        match self {
            NodeHostError::SetupCodeUnreadable { .. }
            | NodeHostError::SetupCodeInvalid { .. }
            | NodeHostError::NoCredential
            | NodeHostError::NoGatewayUrl
            | NodeHostError::CodexModel { .. }
            | NodeHostError::InvalidGatewayUrl { .. }
            | NodeHostError::StateSymlink { .. }
            | NodeHostError::InvalidStateFile { .. }
            | NodeHostError::StateIo { .. }
            | NodeHostError::WorkspaceUnusable { .. } => true,
            NodeHostError::Connect { .. }
            | NodeHostError::Refused { .. }
            | NodeHostError::LinkClosed
            | NodeHostError::LinkIdle { .. }
            | NodeHostError::HandshakeTimeout { .. }
            | NodeHostError::Protocol { .. }
            | NodeHostError::SaveDeviceToken { .. }
            | NodeHostError::StatusIo { .. }
            | NodeHostError::Join(_) => false,
        }
    }
}
