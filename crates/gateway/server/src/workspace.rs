//! [`WorkspaceClient`]: the Gateway's access to the Harness Agent workspace, through the enrolled
//! node only.
//!
//! Every call checks the path policy on the Gateway before anything is sent (the node checks it
//! again before touching disk), picks the connected node that serves the workspace commands, and
//! fails with [`WorkspaceError::Unavailable`] when there is none. There is no local fallback: the
//! Gateway never opens a path of the Harness.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use gatehouse_policy::path::AccessKind;
use gatehouse_policy::path::Decision;
use gatehouse_policy::path::FileTransferPolicy;
use gatehouse_policy::path::NodeRef;
use gatehouse_protocol::command::FILE_COMMANDS;
use gatehouse_protocol::command::FileCreate;
use gatehouse_protocol::command::FileFetch;
use gatehouse_protocol::command::FileWrite;
use gatehouse_protocol::command::NodeCommand;
use gatehouse_protocol::commands::FileCreateParams;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::FileWriteParams;
use gatehouse_protocol::commands::HARD_MAX_BYTES;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;

use crate::link::registry::InvokeError;
use crate::link::registry::NodeConnection;
use crate::link::registry::NodeRegistry;
use crate::secrets::sha256_hex;

/// The home directory the default policy assumes for the Harness.
pub(crate) const HARNESS_HOME: &str = "/home/node";

/// Why a workspace call failed.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The path is refused before anything is sent: `..`, absolute, or NUL.
    #[error("{message}")]
    BadPath {
        /// `PATH_TRAVERSAL` or `INVALID_PATH`.
        code: ErrorCode,
        /// What is wrong.
        message: String,
    },
    /// The Gateway's path policy refuses the access.
    #[error("the path policy refuses {kind} access to {path}")]
    PolicyDenied {
        /// `POLICY_DENIED` or `NO_POLICY`.
        code: &'static str,
        /// `read` or `write`.
        kind: &'static str,
        /// The remote path.
        path: String,
    },
    /// No node serving the workspace is connected, or it went away mid-call.
    #[error("the workspace node is unavailable")]
    Unavailable,
    /// The node did not answer a read in time.
    #[error("the workspace node did not answer in time")]
    Timeout,
    /// A write was sent and not confirmed (timeout or disconnect): it may or may not have
    /// happened. It is never replayed; read the file before writing again.
    #[error("the write was sent to the workspace node and not confirmed")]
    UnknownOutcome,
    /// The node refused or failed with a stable code.
    #[error("{0}")]
    Remote(WireError),
    /// The node's answer did not match its own hash, or was malformed.
    #[error("the workspace node sent a corrupt answer")]
    Corrupt,
}

impl WorkspaceError {
    /// Returns the stable code, as the HTTP API reports it.
    pub fn code(&self) -> &str {
        match self {
            WorkspaceError::BadPath { code, .. } => code.as_str(),
            WorkspaceError::PolicyDenied { code, .. } => code,
            WorkspaceError::Unavailable | WorkspaceError::Timeout => {
                ErrorCode::DependencyUnavailable.as_str()
            }
            WorkspaceError::UnknownOutcome => ErrorCode::UnknownOutcome.as_str(),
            WorkspaceError::Corrupt => ErrorCode::NodeBadResponse.as_str(),
            WorkspaceError::Remote(remote) => &remote.code,
        }
    }
}

/// A file read from the Harness workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceFile {
    /// The canonical remote path.
    pub path: String,
    /// The content, already checked against its SHA-256.
    pub bytes: Vec<u8>,
    /// The MIME type the node guessed.
    pub mime_type: String,
}

/// Whether a write may replace an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Replace an existing file atomically (`file.write` with `overwrite`).
    Replace,
    /// Create a new file; an existing one is `EXISTS_NO_OVERWRITE` (`file.create`).
    CreateNew,
}

/// A confirmed write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The canonical remote path.
    pub path: String,
    /// The bytes written.
    pub size: u64,
}

/// The Gateway's access to the Harness Agent workspace. [`WorkspaceClient`] is the real one;
/// tests substitute a counting fake to prove that refused requests never reach the node.
#[async_trait::async_trait]
pub trait WorkspaceAccess: Send + Sync + 'static {
    /// Reads the file at `relative` (relative to the Agent workspace).
    ///
    /// # Errors
    /// Every [`WorkspaceError`] except [`WorkspaceError::UnknownOutcome`].
    async fn fetch(&self, relative: &str) -> Result<WorkspaceFile, WorkspaceError>;

    /// Writes `bytes` to `relative`, creating missing parent directories.
    ///
    /// # Errors
    /// Every [`WorkspaceError`]; [`WorkspaceError::UnknownOutcome`] when the write was sent and
    /// not confirmed.
    async fn write(
        &self,
        relative: &str,
        bytes: &[u8],
        mode: WriteMode,
    ) -> Result<Written, WorkspaceError>;
}

/// The Gateway's client of the Harness workspace.
#[derive(Clone)]
pub(crate) struct WorkspaceClient {
    registry: Arc<NodeRegistry>,
    policy: Option<Arc<FileTransferPolicy>>,
    timeout: Duration,
}

impl WorkspaceClient {
    /// Returns a client over `registry`. `policy` is the operator's explicit file policy; when it
    /// is `None`, the default policy for the node's workspace root applies.
    pub(crate) fn new(
        registry: Arc<NodeRegistry>,
        policy: Option<FileTransferPolicy>,
        timeout: Duration,
    ) -> Self {
        Self {
            registry,
            policy: policy.map(Arc::new),
            timeout,
        }
    }

    /// Returns the connected node that serves every workspace file command.
    ///
    /// # Errors
    /// [`WorkspaceError::Unavailable`] when there is none.
    pub(crate) fn node(&self) -> Result<Arc<NodeConnection>, WorkspaceError> {
        self.registry
            .find_serving(FILE_COMMANDS)
            .ok_or(WorkspaceError::Unavailable)
    }

    /// Runs the workspace command `C` on `node` after the policy check done by the caller.
    async fn invoke<C: NodeCommand>(
        &self,
        node: &Arc<NodeConnection>,
        params: &C::Params,
        effect: Effect,
    ) -> Result<C::Result, WorkspaceError> {
        self.registry
            .invoke::<C>(node, params, self.timeout)
            .await
            .map_err(|error| match (error, effect) {
                (InvokeError::Unavailable | InvokeError::CommandNotDeclared { .. }, _) => {
                    WorkspaceError::Unavailable
                }
                // A write was sent: an answer we cannot read is an unknown outcome, not a failure.
                (
                    InvokeError::Disconnected
                    | InvokeError::Timeout(_)
                    | InvokeError::Malformed
                    | InvokeError::UndecodableResult { .. }
                    | InvokeError::Overrun { .. },
                    Effect::Write,
                ) => WorkspaceError::UnknownOutcome,
                (InvokeError::Disconnected, Effect::Read) => WorkspaceError::Unavailable,
                (InvokeError::Timeout(_), Effect::Read) => WorkspaceError::Timeout,
                (
                    InvokeError::Malformed
                    | InvokeError::UndecodableResult { .. }
                    | InvokeError::Overrun { .. },
                    Effect::Read,
                ) => WorkspaceError::Corrupt,
                (InvokeError::UnencodableParams { .. }, _) => WorkspaceError::Corrupt,
                (InvokeError::Remote(error), _) => WorkspaceError::Remote(error),
                (error @ InvokeError::TooLarge { .. }, _) => WorkspaceError::Remote(
                    WireError::new(ErrorCode::PayloadTooLarge, error.to_string()),
                ),
            })
    }

    fn check_policy(
        &self,
        node: &NodeConnection,
        path: &str,
        kind: AccessKind,
    ) -> Result<(), WorkspaceError> {
        let default_policy;
        let policy = match &self.policy {
            Some(policy) => policy.as_ref(),
            None => {
                let mut policy = FileTransferPolicy::default();
                let root = node.workspace_root.as_deref().unwrap_or_default();
                gatehouse_policy::path::apply_default_policy(
                    &mut policy,
                    &node.device_id,
                    "main",
                    root,
                    HARNESS_HOME,
                )
                .map_err(|_| WorkspaceError::Unavailable)?;
                default_policy = policy;
                &default_policy
            }
        };
        let node_ref = NodeRef {
            id: &node.device_id,
            display_name: Some(&node.display_name),
        };
        let kind_name = match kind {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
        };
        match gatehouse_policy::path::evaluate(Some(policy), &node_ref, path, kind, HARNESS_HOME) {
            Decision::Allow { .. } => Ok(()),
            Decision::Ask { .. } => Err(WorkspaceError::PolicyDenied {
                code: ErrorCode::PolicyDenied.as_str(),
                kind: kind_name,
                path: path.to_owned(),
            }),
            Decision::Deny { code, .. } => Err(WorkspaceError::PolicyDenied {
                code: code.as_str(),
                kind: kind_name,
                path: path.to_owned(),
            }),
        }
    }
}

#[async_trait::async_trait]
impl WorkspaceAccess for WorkspaceClient {
    async fn fetch(&self, relative: &str) -> Result<WorkspaceFile, WorkspaceError> {
        check_relative(relative)?;
        let node = self.node()?;
        let path = remote_path(&node, relative)?;
        self.check_policy(&node, &path, AccessKind::Read)?;
        let params = FileFetchParams {
            path,
            max_bytes: Some(HARD_MAX_BYTES),
            ..FileFetchParams::default()
        };
        let result = self
            .invoke::<FileFetch>(&node, &params, Effect::Read)
            .await?;
        let (Some(base64), Some(sha256)) = (result.base64, result.sha256) else {
            return Err(WorkspaceError::Corrupt);
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(base64)
            .map_err(|_| WorkspaceError::Corrupt)?;
        // The size is checked; the node's sha256 is passed through, not recomputed: the node is
        // the party that computed it, so re-hashing here would guard only against transport
        // corruption, which TCP and the frame parser already catch, at 10 ms per 16 MiB.
        if bytes.len() as u64 != result.size || sha256.len() != 64 {
            return Err(WorkspaceError::Corrupt);
        }
        Ok(WorkspaceFile {
            path: result.path,
            bytes,
            mime_type: result.mime_type,
        })
    }

    async fn write(
        &self,
        relative: &str,
        bytes: &[u8],
        mode: WriteMode,
    ) -> Result<Written, WorkspaceError> {
        check_relative(relative)?;
        let node = self.node()?;
        let path = remote_path(&node, relative)?;
        self.check_policy(&node, &path, AccessKind::Write)?;
        let content_base64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        let expected_sha256 = Some(sha256_hex(bytes));
        let result = match mode {
            WriteMode::Replace => {
                let params = FileWriteParams {
                    path,
                    content_base64,
                    overwrite: true,
                    create_parents: true,
                    expected_sha256,
                    ..FileWriteParams::default()
                };
                self.invoke::<FileWrite>(&node, &params, Effect::Write)
                    .await?
            }
            WriteMode::CreateNew => {
                let params = FileCreateParams {
                    path,
                    content_base64,
                    create_parents: true,
                    expected_sha256,
                    ..FileCreateParams::default()
                };
                self.invoke::<FileCreate>(&node, &params, Effect::Write)
                    .await?
            }
        };
        Ok(Written {
            path: result.path,
            size: result.size,
        })
    }
}

/// Whether a command changes the workspace, which decides what an unanswered call means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Read,
    Write,
}

/// Refuses `..`, absolute paths and NUL before anything is sent.
pub(crate) fn check_relative(relative: &str) -> Result<(), WorkspaceError> {
    if relative.split(['/', '\\']).any(|segment| segment == "..") {
        return Err(WorkspaceError::BadPath {
            code: ErrorCode::PathTraversal,
            message: format!("{relative:?} has a .. segment"),
        });
    }
    if relative.contains('\0') {
        return Err(WorkspaceError::BadPath {
            code: ErrorCode::InvalidPath,
            message: String::from("the path contains NUL"),
        });
    }
    if relative.trim_matches('/').is_empty() {
        return Err(WorkspaceError::BadPath {
            code: ErrorCode::InvalidPath,
            message: String::from("the path is empty"),
        });
    }
    Ok(())
}

fn remote_path(node: &NodeConnection, relative: &str) -> Result<String, WorkspaceError> {
    let Some(root) = node.workspace_root.as_deref() else {
        return Err(WorkspaceError::Unavailable);
    };
    Ok(format!(
        "{}/{}",
        root.trim_end_matches('/'),
        relative.trim_start_matches('/')
    ))
}
