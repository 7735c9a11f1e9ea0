//! The five workspace file commands: `file.fetch`, `file.stat`, `file.write`, `file.create` and
//! `dir.list`.
//!
//! Every request goes through, in order:
//! 1. parameter parsing (`INVALID_PARAMS`);
//! 2. the `..` check (`PATH_TRAVERSAL`) and the path shape check (`INVALID_PATH`);
//! 3. the node's path policy (`POLICY_DENIED` / `NO_POLICY`; `ask` counts as denied because the
//!    node has no interactive approvals);
//! 4. the no-follow fsops command on the workspace root, on a blocking thread.

use std::sync::Arc;

use gatehouse_fsops::FsError;
use gatehouse_fsops::Root;
use gatehouse_fsops::path::has_dot_dot_segment;
use gatehouse_fsops::path::map_wire_path;
use gatehouse_policy::path::AccessKind;
use gatehouse_policy::path::Decision;
use gatehouse_policy::path::DenyCode;
use gatehouse_policy::path::FileTransferPolicy;
use gatehouse_policy::path::NodeRef;
use gatehouse_protocol::command::DirList;
use gatehouse_protocol::command::FileCreate;
use gatehouse_protocol::command::FileFetch;
use gatehouse_protocol::command::FileStat;
use gatehouse_protocol::command::FileWrite;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::commands::DirListParams;
use gatehouse_protocol::commands::DirListResult;
use gatehouse_protocol::commands::FileCreateParams;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::FileFetchResult;
use gatehouse_protocol::commands::FileStatParams;
use gatehouse_protocol::commands::FileStatResult;
use gatehouse_protocol::commands::FileWriteParams;
use gatehouse_protocol::commands::FileWriteResult;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;

use crate::invoke::CommandSet;
use crate::invoke::InvokeContext;

/// The workspace as the file commands see it: the open root and the policy that guards it.
#[derive(Debug)]
pub(crate) struct Workspace {
    /// The workspace directory, opened once at startup.
    pub(crate) root: Root,
    /// The node's path policy: the default workspace-node policy for this device.
    pub(crate) policy: FileTransferPolicy,
    /// The device id, the policy's node key.
    pub(crate) node_id: String,
    /// The node's display name, the policy's second lookup key.
    pub(crate) display_name: Option<String>,
    /// The home directory that `~` in policy patterns expands to.
    pub(crate) home: String,
}

/// Checks that a duplex workspace command names this node's workspace directory.
///
/// # Errors
/// `POLICY_DENIED` ("Workspace does not belong to this node") for any other directory.
pub(crate) fn check_workspace_dir(requested: &str, own: &str) -> Result<(), WireError> {
    if requested.trim_end_matches('/') == own {
        Ok(())
    } else {
        Err(WireError::new(
            ErrorCode::PolicyDenied,
            "Workspace does not belong to this node",
        ))
    }
}

/// The five file commands, bound to the workspace; one [`Serve`] implementation per command.
#[derive(Debug, Clone)]
struct FileCommands {
    workspace: Arc<Workspace>,
}

/// Adds the five file commands on `workspace` to `commands`.
pub(crate) fn register(commands: &mut CommandSet, workspace: &Arc<Workspace>) {
    let files = FileCommands {
        workspace: Arc::clone(workspace),
    };
    commands.register::<FileFetch>(files.clone());
    commands.register::<FileStat>(files.clone());
    commands.register::<FileWrite>(files.clone());
    commands.register::<FileCreate>(files.clone());
    commands.register::<DirList>(files);
}

impl Serve<FileFetch, InvokeContext> for FileCommands {
    fn serve(
        &self,
        mut params: FileFetchParams,
        _context: InvokeContext,
    ) -> Served<FileFetchResult> {
        let workspace = Arc::clone(&self.workspace);
        Box::pin(async move {
            let max_bytes = check_path(&workspace, &params.path, AccessKind::Read)?;
            if let Some(limit) = max_bytes {
                params.max_bytes = Some(params.max_bytes.map_or(limit, |asked| asked.min(limit)));
            }
            blocking(workspace, move |root| {
                gatehouse_fsops::commands::file_fetch(root, &params)
            })
            .await
        })
    }
}

impl Serve<FileStat, InvokeContext> for FileCommands {
    fn serve(&self, params: FileStatParams, _context: InvokeContext) -> Served<FileStatResult> {
        let workspace = Arc::clone(&self.workspace);
        Box::pin(async move {
            check_path(&workspace, &params.path, AccessKind::Read)?;
            blocking(workspace, move |root| {
                gatehouse_fsops::commands::file_stat(root, &params)
            })
            .await
        })
    }
}

impl Serve<FileWrite, InvokeContext> for FileCommands {
    fn serve(&self, params: FileWriteParams, _context: InvokeContext) -> Served<FileWriteResult> {
        let workspace = Arc::clone(&self.workspace);
        Box::pin(async move {
            let max_bytes = check_path(&workspace, &params.path, AccessKind::Write)?;
            check_write_size(&params.content_base64, max_bytes)?;
            blocking(workspace, move |root| {
                gatehouse_fsops::commands::file_write(root, &params)
            })
            .await
        })
    }
}

impl Serve<FileCreate, InvokeContext> for FileCommands {
    fn serve(&self, params: FileCreateParams, _context: InvokeContext) -> Served<FileWriteResult> {
        let workspace = Arc::clone(&self.workspace);
        Box::pin(async move {
            let max_bytes = check_path(&workspace, &params.path, AccessKind::Write)?;
            check_write_size(&params.content_base64, max_bytes)?;
            blocking(workspace, move |root| {
                gatehouse_fsops::commands::file_create(root, &params)
            })
            .await
        })
    }
}

impl Serve<DirList, InvokeContext> for FileCommands {
    fn serve(&self, params: DirListParams, _context: InvokeContext) -> Served<DirListResult> {
        let workspace = Arc::clone(&self.workspace);
        Box::pin(async move {
            check_path(&workspace, &params.path, AccessKind::Read)?;
            blocking(workspace, move |root| {
                gatehouse_fsops::commands::dir_list(root, &params)
            })
            .await
        })
    }
}

/// Checks `path` for `kind` and returns the policy's byte limit, if it sets one.
///
/// A `..` segment is reported as `PATH_TRAVERSAL` and a malformed path as `INVALID_PATH`, before
/// the policy, so that callers can tell them from a policy refusal.
fn check_path(
    workspace: &Workspace,
    path: &str,
    kind: AccessKind,
) -> Result<Option<u64>, WireError> {
    if has_dot_dot_segment(path) {
        return Err(FsError::PathTraversal {
            path: path.to_owned(),
        }
        .to_wire());
    }
    if let Err(err @ FsError::InvalidPath { .. }) =
        map_wire_path(workspace.root.logical_path(), path)
    {
        return Err(err.to_wire());
    }
    let node = NodeRef {
        id: &workspace.node_id,
        display_name: workspace.display_name.as_deref(),
    };
    let decision = gatehouse_policy::path::evaluate(
        Some(&workspace.policy),
        &node,
        path,
        kind,
        &workspace.home,
    );
    match decision {
        Decision::Allow { max_bytes, .. } => Ok(max_bytes),
        Decision::Ask { .. } => Err(WireError::new(
            ErrorCode::PolicyDenied,
            "the path policy asks for approval, and the node cannot ask",
        )),
        Decision::Deny { code, reason, .. } => {
            let code = match code {
                DenyCode::PolicyDenied => ErrorCode::PolicyDenied,
                DenyCode::NoPolicy => ErrorCode::NoPolicy,
            };
            Err(WireError::new(code, reason.as_str()))
        }
    }
}

/// Refuses a write whose decoded content would exceed the policy's byte limit.
fn check_write_size(content_base64: &str, max_bytes: Option<u64>) -> Result<(), WireError> {
    let Some(limit) = max_bytes else {
        return Ok(());
    };
    // The decoded size of canonical base64 is at most 3/4 of its length.
    let decoded_upper_bound = (content_base64.len() as u64).div_ceil(4) * 3;
    let padding = content_base64
        .bytes()
        .rev()
        .take_while(|byte| *byte == b'=')
        .count() as u64;
    let size = decoded_upper_bound.saturating_sub(padding);
    if size > limit {
        return Err(WireError::new(
            ErrorCode::FileTooLarge,
            format!("the content is {size} bytes, over the policy limit of {limit} bytes"),
        ));
    }
    Ok(())
}

/// Runs an fsops command on a blocking thread.
async fn blocking<T, F>(workspace: Arc<Workspace>, command: F) -> Result<T, WireError>
where
    F: FnOnce(&Root) -> gatehouse_fsops::Result<T> + Send + 'static,
    T: Send + 'static,
{
    let joined = tokio::task::spawn_blocking(move || command(&workspace.root)).await;
    match joined {
        Ok(result) => result.map_err(|err| err.to_wire()),
        Err(err) => Err(WireError::new(
            ErrorCode::Internal,
            format!("the command failed: {err}"),
        )),
    }
}

#[cfg(test)]
#[path = "file_commands_tests.rs"]
mod tests;
