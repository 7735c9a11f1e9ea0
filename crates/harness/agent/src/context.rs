//! [`ToolContext`]: the session workspace, the sandbox settings and the background processes
//! that every tool call runs against.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_fsops::Root;
use gatehouse_protocol::worker::SandboxSettings;

use crate::error::AgentError;
use crate::error::Result;
use crate::tools::process::ProcessRegistry;

/// The default (and largest) run time of one `exec` call: 1800 s.
pub const DEFAULT_EXEC_TIMEOUT: Duration = Duration::from_secs(1800);

/// The default cap of the output kept from one command: 64 KiB (head and tail halves).
pub const DEFAULT_OUTPUT_CAP_BYTES: usize = 64 * 1024;

/// The `PATH` commands get by default.
pub const DEFAULT_COMMAND_PATH: &str =
    "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Where the operator scratch directory appears inside the sandbox.
pub const SANDBOX_SCRATCH_PATH: &str = "/sandbox/scratch";

/// What `exec` and `process` do when bubblewrap cannot be found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SandboxPolicy {
    /// Refuse to run the command (`SANDBOX_UNAVAILABLE`).
    Require,
    /// Run the command directly in the workspace and say so in the output.
    AllowUnsandboxed,
}

/// Where to find the bubblewrap binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BwrapLocation {
    /// Look for `bwrap` in the directories of this process's `PATH`.
    SearchPath,
    /// Use this file; when it does not exist, bubblewrap counts as absent.
    At(PathBuf),
}

/// The settings of a [`ToolContext`]. [`ToolConfig::new`] fills in the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolConfig {
    /// What to do when bubblewrap is absent.
    pub sandbox: SandboxPolicy,
    /// Where bubblewrap is.
    pub bwrap: BwrapLocation,
    /// An operator scratch directory bound read-write at [`SANDBOX_SCRATCH_PATH`] inside the
    /// sandbox. The mount point must exist on the host (it does where the operator mounts the
    /// volume there); it is not used for unsandboxed commands.
    pub scratch_dir: Option<PathBuf>,
    /// The longest an `exec` call may run; a call's `timeout_ms` may only lower it.
    pub exec_timeout: Duration,
    /// The output kept per command (or per `process` poll), in bytes.
    pub output_cap_bytes: usize,
    /// The `PATH` given to commands.
    pub command_path: String,
    /// The `TMPDIR` of unsandboxed commands (sandboxed ones get a private `/tmp`).
    pub unsandboxed_tmpdir: PathBuf,
    /// Directories hidden from sandboxed commands (covered by an empty file system): the node's
    /// identity and other sessions, and in embedded mode the Gateway's state. Mounts are deny by
    /// default, so only those inside a mounted system directory or extra read-only path need the
    /// cover; the session workspace is bound back on top when it lies inside one.
    pub hidden_paths: Vec<PathBuf>,
    /// The sandbox the node host decided on (user, extra read-only paths, limits, Landlock,
    /// seccomp); see [`crate::sandbox`].
    pub sandbox_settings: SandboxSettings,
    /// The `gatehouse` executable that runs inside the sandbox as the helper that applies
    /// Landlock, seccomp, the limits and the descriptor cleanup before the command. `None`, as
    /// in [`ToolConfig::new`], runs the command directly under bubblewrap with only the
    /// namespace, capability and mount layers; workers always set it.
    pub sandbox_helper: Option<PathBuf>,
}

impl ToolConfig {
    /// Returns the default settings with the given sandbox policy: bubblewrap from `PATH`, no
    /// scratch directory, [`DEFAULT_EXEC_TIMEOUT`], [`DEFAULT_OUTPUT_CAP_BYTES`],
    /// [`DEFAULT_COMMAND_PATH`], this process's temporary directory for unsandboxed commands, the
    /// default [`SandboxSettings`] and no sandbox helper.
    pub fn new(sandbox: SandboxPolicy) -> ToolConfig {
        ToolConfig {
            sandbox,
            bwrap: BwrapLocation::SearchPath,
            scratch_dir: None,
            exec_timeout: DEFAULT_EXEC_TIMEOUT,
            output_cap_bytes: DEFAULT_OUTPUT_CAP_BYTES,
            command_path: String::from(DEFAULT_COMMAND_PATH),
            hidden_paths: Vec::new(),
            unsandboxed_tmpdir: std::env::temp_dir(),
            sandbox_settings: SandboxSettings::default(),
            sandbox_helper: None,
        }
    }
}

/// What every tool call runs against: the session workspace (a [`Root`]), the sandbox settings,
/// and the background processes started by `process`.
///
/// Dropping the context kills every background process (its whole process group).
#[derive(Debug)]
pub struct ToolContext {
    workspace: Arc<Root>,
    workspace_dir: PathBuf,
    config: ToolConfig,
    processes: ProcessRegistry,
}

impl ToolContext {
    /// Opens the session workspace at `workspace_dir` (absolute, UTF-8, not a symbolic link).
    ///
    /// # Errors
    /// [`AgentError::Workspace`] when fsops cannot open the directory.
    pub fn new(workspace_dir: &Path, config: ToolConfig) -> Result<ToolContext> {
        let workspace =
            Root::open(workspace_dir).map_err(|source| AgentError::Workspace { source })?;
        Ok(ToolContext {
            workspace_dir: PathBuf::from(workspace.logical_path()),
            workspace: Arc::new(workspace),
            config,
            processes: ProcessRegistry::default(),
        })
    }

    /// Returns the session workspace.
    pub fn workspace(&self) -> &Root {
        &self.workspace
    }

    /// Returns the absolute path of the session workspace.
    pub fn workspace_dir(&self) -> &Path {
        &self.workspace_dir
    }

    /// Returns the settings.
    pub fn config(&self) -> &ToolConfig {
        &self.config
    }

    /// Kills every background process started by `process` (each whole process group, and so
    /// the sandbox it runs in) and waits until each is reaped; returns how many were still
    /// running. The registry is empty afterwards, so the next turn starts with none.
    pub async fn stop_background(&self) -> u64 {
        self.processes.stop_all().await
    }

    pub(crate) fn shared_workspace(&self) -> Arc<Root> {
        Arc::clone(&self.workspace)
    }

    pub(crate) fn processes(&self) -> &ProcessRegistry {
        &self.processes
    }
}
