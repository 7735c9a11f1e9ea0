//! `exec`, and the sandboxed launch shared with `process`.
//!
//! A command runs as `/bin/sh -c COMMAND` in the session workspace, in a new process group, with
//! stdout and stderr merged into one pipe and an environment of only `PATH`, `HOME` (the
//! workspace), `LANG` and `TMPDIR`. When bubblewrap is found it runs in the hardened sandbox of
//! [`crate::sandbox`]: a user namespace with a non-zero uid and no capabilities, deny-by-default
//! mounts (the system directories read-only, the workspace read-write, a private `/tmp`), no
//! network, and the helper that applies the limits, Landlock and seccomp before the shell starts.
//! Without bubblewrap, [`SandboxPolicy`] decides between refusing (`SANDBOX_UNAVAILABLE`) and
//! running directly. Killing the process group kills everything: unsandboxed, the shell and its
//! children share the group; sandboxed, bubblewrap is the group, and `--die-with-parent` plus the
//! private PID namespace take the sandboxed processes with it.

use gatehouse_protocol::error::ErrorCode;
use std::ffi::OsStr;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitStatus;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_model::ToolInput;
use gatehouse_model::ToolKind;
use gatehouse_model::ToolSpec;
use gatehouse_protocol::worker::SandboxSettings;
use parking_lot::Mutex;
use rustix::process::Pid;
use rustix::process::Signal;
use serde::Deserialize;
use serde_json::json;
use tokio::io::AsyncReadExt;
use tokio::task::JoinHandle;

use crate::context::BwrapLocation;
use crate::context::DEFAULT_COMMAND_PATH;
use crate::context::SandboxPolicy;
use crate::context::ToolConfig;
use crate::context::ToolContext;
use crate::output::HeadTail;
use crate::sandbox::SandboxLaunch;
use crate::tool::Tool;
use crate::tool::ToolError;
use crate::tool::ToolOutcome;
use crate::tool::parse_arguments;

/// How long `exec` keeps reading output after the command ended and its group was killed.
const OUTPUT_DRAIN_GRACE: Duration = Duration::from_secs(2);

/// The size of one read from the output pipe.
const READ_CHUNK_BYTES: usize = 8 * 1024;

/// How a command was launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Launch {
    /// Under bubblewrap.
    Sandboxed,
    /// Directly, because bubblewrap is absent and the policy allows it.
    Unsandboxed,
}

impl Launch {
    /// Returns the line the output carries about the sandbox, if any.
    pub(crate) fn note(&self) -> Option<&'static str> {
        match self {
            Launch::Sandboxed => None,
            Launch::Unsandboxed => {
                Some("note: ran unsandboxed (bubblewrap not found; the sandbox policy allows it)")
            }
        }
    }
}

/// Kills a process group when dropped, unless disarmed.
#[derive(Debug)]
pub(crate) struct GroupGuard {
    pgid: Option<Pid>,
}

impl GroupGuard {
    /// Sends SIGKILL to the group.
    pub(crate) fn kill(&self) {
        if let Some(pgid) = self.pgid {
            kill_group(pgid);
        }
    }

    /// Stops the guard from killing the group when dropped.
    pub(crate) fn disarm(&mut self) {
        self.pgid = None;
    }

    /// Returns the group id.
    pub(crate) fn pgid(&self) -> Option<Pid> {
        self.pgid
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Sends SIGKILL to the process group `pgid`; a group that is already gone is fine.
pub(crate) fn kill_group(pgid: Pid) {
    if let Err(errno) = rustix::process::kill_process_group(pgid, Signal::KILL)
        && errno != rustix::io::Errno::SRCH
    {
        tracing::warn!(error = %errno, pgid = pgid.as_raw_nonzero().get(), "cannot kill process group");
    }
}

/// A started command: the child, its group, and its output being collected.
#[derive(Debug)]
pub(crate) struct Spawned {
    pub(crate) child: tokio::process::Child,
    pub(crate) group: GroupGuard,
    pub(crate) output: Arc<Mutex<HeadTail>>,
    pub(crate) reader: JoinHandle<()>,
    pub(crate) launch: Launch,
}

/// Starts `command` in the workspace, sandboxed when possible (see the module docs).
pub(crate) fn spawn_command(ctx: &ToolContext, command: &str) -> Result<Spawned, ToolError> {
    let config = ctx.config();
    let workspace = ctx.workspace_dir();
    let (mut cmd, launch) = match (find_bwrap(&config.bwrap), config.sandbox) {
        (Some(bwrap), _) => {
            let mut cmd = std::process::Command::new(bwrap);
            cmd.args(bwrap_args(config, workspace, command));
            (cmd, Launch::Sandboxed)
        }
        (None, SandboxPolicy::Require) => {
            return Err(ToolError::coded(
                ErrorCode::SandboxUnavailable,
                String::from(
                    "bubblewrap (bwrap) was not found and the sandbox policy requires it; the \
                     command was not run",
                ),
            ));
        }
        (None, SandboxPolicy::AllowUnsandboxed) => {
            let mut cmd = std::process::Command::new("/bin/sh");
            cmd.arg("-c").arg(command);
            (cmd, Launch::Unsandboxed)
        }
    };
    let spawn_error = |err: std::io::Error| {
        ToolError::coded(
            ErrorCode::ExecFailed,
            format!("cannot start the command: {err}"),
        )
    };
    let (pipe_reader, pipe_writer) = std::io::pipe().map_err(spawn_error)?;
    let stderr_writer = pipe_writer.try_clone().map_err(spawn_error)?;
    cmd.current_dir(workspace)
        .env_clear()
        .env("PATH", &config.command_path)
        .env("HOME", workspace)
        .env("LANG", "C.UTF-8")
        .stdin(Stdio::null())
        .stdout(pipe_writer)
        .stderr(stderr_writer)
        .process_group(0);
    match launch {
        Launch::Sandboxed => cmd.env("TMPDIR", "/tmp"),
        Launch::Unsandboxed => cmd.env("TMPDIR", &config.unsandboxed_tmpdir),
    };
    let mut cmd = tokio::process::Command::from(cmd);
    cmd.kill_on_drop(true);
    let child = cmd.spawn().map_err(spawn_error)?;
    // The command holds the parent's copies of the pipe's write end: drop it, or the output never
    // reaches end-of-file.
    drop(cmd);
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    let group = GroupGuard { pgid };
    let receiver = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(pipe_reader))
        .map_err(spawn_error)?;
    let output = Arc::new(Mutex::new(HeadTail::new(config.output_cap_bytes)));
    let reader = tokio::spawn(collect_output(receiver, Arc::clone(&output)));
    Ok(Spawned {
        child,
        group,
        output,
        reader,
        launch,
    })
}

/// Reads the pipe into `output` until end-of-file.
async fn collect_output(
    mut receiver: tokio::net::unix::pipe::Receiver,
    output: Arc<Mutex<HeadTail>>,
) {
    let mut buffer = vec![0u8; READ_CHUNK_BYTES];
    loop {
        match receiver.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n_read) => output.lock().push(&buffer[..n_read]),
        }
    }
}

/// Returns the bubblewrap arguments that run `command` under `/bin/sh -c` in the sandbox of
/// `config` (see [`crate::sandbox`]).
pub(crate) fn bwrap_args(config: &ToolConfig, workspace: &Path, command: &str) -> Vec<OsString> {
    let launch = SandboxLaunch {
        workspace,
        scratch: config.scratch_dir.as_deref(),
        hidden: &config.hidden_paths,
        settings: &config.sandbox_settings,
        helper: config.sandbox_helper.as_deref(),
    };
    crate::sandbox::bwrap_command_args(
        &launch,
        OsStr::new("/bin/sh"),
        &[OsStr::new("-c"), OsStr::new(command)],
    )
}

/// What [`trial_sandbox`] found: the bubblewrap binary and the version it reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxTrial {
    /// The bubblewrap binary found on `PATH`.
    pub bwrap: PathBuf,
    /// Its `--version` line.
    pub version: String,
}

/// Why [`trial_sandbox`] failed.
#[derive(Debug, thiserror::Error)]
pub enum SandboxTrialError {
    /// No executable `bwrap` in the directories of `PATH`.
    #[error("bubblewrap (bwrap) was not found on PATH")]
    NotFound,
    /// `bwrap` was found but could not be started, or the sandboxed `true` did not succeed.
    #[error("{bwrap} could not run a sandboxed command: {reason}")]
    Failed {
        /// The binary that was tried.
        bwrap: String,
        /// What went wrong, with bubblewrap's own message when it printed one.
        reason: String,
    },
}

/// Finds bubblewrap on `PATH` and runs `/bin/true` inside exactly the sandbox that `exec` uses
/// with `settings` and `helper`, with `workspace` (an existing directory) as the session
/// workspace, as the current user. `gatehouse doctor` and the startup of `gatehouse node` and
/// `gatehouse up` use it to prove that the sandbox really starts on this machine.
///
/// # Errors
/// [`SandboxTrialError::NotFound`] without bubblewrap, [`SandboxTrialError::Failed`] when it
/// cannot start the sandbox (for example when the kernel refuses its namespaces).
pub fn trial_sandbox(
    workspace: &Path,
    settings: &SandboxSettings,
    helper: Option<&Path>,
) -> Result<SandboxTrial, SandboxTrialError> {
    let bwrap = find_bwrap(&BwrapLocation::SearchPath).ok_or(SandboxTrialError::NotFound)?;
    let failed = |reason: String| SandboxTrialError::Failed {
        bwrap: bwrap.display().to_string(),
        reason,
    };
    let version = std::process::Command::new(&bwrap)
        .arg("--version")
        .output()
        .map_err(|error| failed(error.to_string()))?;
    let version = String::from_utf8_lossy(&version.stdout).trim().to_owned();
    let launch = SandboxLaunch {
        workspace,
        scratch: None,
        hidden: &[],
        settings,
        helper,
    };
    let args = crate::sandbox::bwrap_command_args(&launch, OsStr::new("/bin/true"), &[]);
    let output = std::process::Command::new(&bwrap)
        .args(args)
        .env_clear()
        .env("PATH", DEFAULT_COMMAND_PATH)
        .stdin(Stdio::null())
        .output()
        .map_err(|error| failed(error.to_string()))?;
    match output.status.success() {
        true => Ok(SandboxTrial { bwrap, version }),
        false => Err(failed(format!(
            "{}: {}",
            describe_exit(output.status),
            String::from_utf8_lossy(&output.stderr).trim()
        ))),
    }
}

/// Returns the bubblewrap binary to use, if there is one.
pub(crate) fn find_bwrap(location: &BwrapLocation) -> Option<PathBuf> {
    match location {
        BwrapLocation::At(path) => is_executable(path).then(|| path.clone()),
        BwrapLocation::SearchPath => {
            let path = std::env::var_os("PATH")?;
            std::env::split_paths(&path)
                .map(|dir| dir.join("bwrap"))
                .find(|candidate| is_executable(candidate))
        }
    }
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// Describes how a command ended.
pub(crate) fn describe_exit(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code: {code}"),
        (None, Some(signal)) => format!("exit code: none (killed by signal {signal})"),
        (None, None) => String::from("exit code: unknown"),
    }
}

/// `exec {command, timeout_ms?}`: runs a shell command in the workspace and waits for it.
///
/// The output starts with `exit code: N` (or the timeout), then a note when the command ran
/// unsandboxed, then the merged stdout and stderr, capped at the configured size with the head
/// and tail kept. When the command ends, or on timeout or cancellation, its whole process group
/// is killed, so background children do not outlive the call (use `process` for those).
#[derive(Debug, Clone, Copy, Default)]
pub struct ExecTool;

#[derive(Debug, Deserialize)]
struct ExecArgs {
    command: String,
    timeout_ms: Option<u64>,
}

#[async_trait::async_trait]
impl Tool for ExecTool {
    fn name(&self) -> &str {
        "exec"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: String::from("exec"),
            description: String::from(
                "Run a shell command (/bin/sh -c) in the workspace and wait for it. Returns the \
                 exit code and the combined stdout and stderr. Outside the workspace the \
                 filesystem is read-only, /tmp is private and there is no network.",
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout_ms": {"type": "integer", "minimum": 1, "description": "may only lower the default timeout"}
                },
                "required": ["command"],
                "additionalProperties": false
            }),
            kind: ToolKind::Function,
        }
    }

    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> ToolOutcome {
        let result = async {
            let args: ExecArgs = parse_arguments(&input)?;
            run_exec(ctx, &args).await
        }
        .await;
        match result {
            Ok(outcome) => outcome,
            Err(error) => error.into_outcome(),
        }
    }
}

async fn run_exec(ctx: &ToolContext, args: &ExecArgs) -> Result<ToolOutcome, ToolError> {
    let max_timeout = ctx.config().exec_timeout;
    let timeout = match args.timeout_ms {
        Some(ms) => Duration::from_millis(ms).min(max_timeout),
        None => max_timeout,
    };
    let mut spawned = spawn_command(ctx, &args.command)?;
    let waited = tokio::select! {
        status = spawned.child.wait() => Some(status),
        () = tokio::time::sleep(timeout) => None,
    };
    // Kill the whole group: everything on timeout, and leftover background children of an
    // unsandboxed shell (a sandboxed one's go with bubblewrap's PID namespace). After a normal
    // exit the leader is reaped, so the group id is only still valid while leftovers hold it.
    if waited.is_none() || spawned.launch == Launch::Unsandboxed {
        spawned.group.kill();
    }
    let (ok, header) = match waited {
        Some(Ok(status)) => (status.success(), describe_exit(status)),
        Some(Err(err)) => (false, format!("exit code: unknown (wait failed: {err})")),
        None => {
            let _ = spawned.child.wait().await;
            (
                false,
                format!(
                    "timed out after {} ms; the process group was killed",
                    timeout.as_millis()
                ),
            )
        }
    };
    spawned.group.disarm();
    // The group is gone, so the pipe reaches end-of-file once its content is read; a process
    // that escaped the group could hold it open, hence the grace period.
    let _ = tokio::time::timeout(OUTPUT_DRAIN_GRACE, &mut spawned.reader).await;
    spawned.reader.abort();
    let text = spawned.output.lock().take();
    let mut output = header;
    if let Some(note) = spawned.launch.note() {
        output.push('\n');
        output.push_str(note);
    }
    output.push('\n');
    match text.is_empty() {
        true => output.push_str("(no output)"),
        false => output.push_str(&text),
    }
    Ok(ToolOutcome { ok, output })
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::path::PathBuf;

    use crate::context::SandboxPolicy;
    use crate::context::ToolConfig;
    use crate::tools::exec::bwrap_args;

    fn position(args: &[&str], window: &[&str]) -> usize {
        args.windows(window.len())
            .position(|candidate| candidate == window)
            .unwrap_or_else(|| panic!("{window:?} not in {args:?}"))
    }

    #[test]
    fn builds_bwrap_arguments() {
        let mut config = ToolConfig::new(SandboxPolicy::Require);
        config.scratch_dir = Some(PathBuf::from("/s"));
        config.hidden_paths = vec![PathBuf::from("/usr/h"), PathBuf::from("/srv/h")];
        config.sandbox_helper = Some(PathBuf::from("/g"));
        let args = bwrap_args(&config, Path::new("/tmp/w"), "echo hi");
        let args: Vec<&str> = args.iter().map(|arg| arg.to_str().unwrap()).collect();
        for window in [
            &["--unshare-all", "--unshare-user", "--disable-userns"][..],
            &["--uid", "1000", "--gid", "1000", "--cap-drop", "ALL"],
            &["--die-with-parent", "--new-session"],
            &["--dir", "/etc"],
            &["--ro-bind", "/etc/passwd", "/etc/passwd"],
            &["--bind", "/s", "/sandbox/scratch"],
            &["--dev", "/dev", "--proc", "/proc"],
            &["--ro-bind", "/g", "/sandbox/gatehouse"],
            &["--", "/bin/sh", "-c", "echo hi"],
        ] {
            position(&args, window);
        }
        // Nothing binds the host's root; a hidden path is covered only where it is mounted.
        assert!(!args.contains(&"/"), "{args:?}");
        position(&args, &["--tmpfs", "/usr/h"]);
        assert!(!args.contains(&"/srv/h"), "{args:?}");
        // The private /tmp comes before the workspace, so a workspace under /tmp stays visible.
        assert!(position(&args, &["--tmpfs", "/tmp"]) < position(&args, &["--bind", "/tmp/w"]));
        let helper = position(&args, &["/sandbox/gatehouse", "sandbox-exec", "--spec"]);
        assert!(helper < position(&args, &["--", "/bin/sh"]));
    }
}
