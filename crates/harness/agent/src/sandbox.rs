//! The hardened sandbox of `exec` and `process`: the bubblewrap arguments that build it, and the
//! helper that runs inside it before the command.
//!
//! A sandboxed command never runs with privileges and sees only what it needs:
//!
//! - **User namespace.** bubblewrap runs the command as [`SandboxSettings::uid`] and
//!   [`SandboxSettings::gid`] (never 0) in a new user namespace, with every capability dropped
//!   (`--cap-drop ALL`), further user namespaces disabled (`--disable-userns`), every other
//!   namespace new (`--unshare-all`: no network, a private PID space), a new session and
//!   `--die-with-parent`.
//! - **Deny-by-default mounts.** The root is an empty file system. Mounted on it are only the
//!   system directories of [`SYSTEM_DIRS`] read-only (symbolic links such as a merged-usr `/bin`
//!   are recreated as links), `/etc` only with the entries of [`ETC_ALLOWED`], the operator's extra
//!   read-only paths, a private `/tmp` (a tmpfs of [`SandboxLimits::tmp_size_bytes`]), the session
//!   workspace read-write, the scratch directory at [`SANDBOX_SCRATCH_PATH`], a fresh `/dev` and
//!   `/proc`, and the helper at [`SANDBOX_HELPER_PATH`]. The Gateway's state, the Harness root,
//!   other sessions, `/root` and `/home` are simply absent. `/tmp` is mounted before the
//!   workspace, so a workspace under `/tmp` stays visible.
//! - **The helper** ([`run_helper`], the hidden `gatehouse sandbox-exec`) then closes every file
//!   descriptor above 2, sets the resource limits of [`SandboxLimits`], sets `no_new_privs`,
//!   applies a Landlock ruleset (read and execute on the system directories and the extra paths,
//!   read-write on the workspace, `/tmp` and the scratch mount), installs a seccomp filter that
//!   refuses the system calls of [`DENIED_SYSCALLS`] with `EPERM`, and only then starts the
//!   command as its child, at nice [`COMMAND_NICE`]. Each step that fails stops the command; none
//!   is skipped unless the node host decided at startup, on the operator's explicit flag, that
//!   the kernel lacks it.
//! - **The process limit** holds twice: `RLIMIT_NPROC`, which the kernel does not enforce when
//!   the node runs as root, and the helper's own count of the sandbox's processes every
//!   [`PROCESS_POLL_INTERVAL`], past which it kills all of them (see `supervise`).

use gatehouse_protocol::error::ErrorCode;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ffi::OsStr;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::path::PathBuf;

use gatehouse_protocol::worker::SandboxLimits;
use gatehouse_protocol::worker::SandboxSettings;
use serde::Deserialize;
use serde::Serialize;

use crate::context::SANDBOX_SCRATCH_PATH;

/// Where the helper (the node's own `gatehouse` executable) is bound inside the sandbox.
pub const SANDBOX_HELPER_PATH: &str = "/sandbox/gatehouse";

/// The hidden `gatehouse` subcommand the sandbox runs first.
pub const HELPER_SUBCOMMAND: &str = "sandbox-exec";

/// The host directories a sandboxed command sees read-only, when they exist. A directory that is
/// a symbolic link on the host (`/bin -> usr/bin` with merged-usr) is recreated as the same link.
pub const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// The entries of `/etc` a sandboxed command sees, read-only, when they exist: the names and
/// addresses the C library resolves, the dynamic linker's configuration, certificates, time
/// zone, shell start-up files and the Debian alternatives. Everything else in `/etc` (password
/// hashes, sudo rules, SSH host keys, TLS, VPN and cloud credentials, service configuration that
/// may hold passwords) is simply absent: an allow-list, because no deny-list can name every
/// secret a host keeps there. A root node's sandbox uid is uid 0 on the host, so it could read
/// any root-only file that were mounted.
pub const ETC_ALLOWED: [&str; 24] = [
    "passwd",
    "group",
    "hosts",
    "hostname",
    "host.conf",
    "resolv.conf",
    "nsswitch.conf",
    "gai.conf",
    "protocols",
    "services",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "ssl/certs",
    "ssl/openssl.cnf",
    "ca-certificates",
    "localtime",
    "timezone",
    "alternatives",
    "mime.types",
    "os-release",
    "debian_version",
    "bash.bashrc",
    "profile",
];

/// The system calls the seccomp filter refuses with `EPERM`: mounting and namespaces (`mount`,
/// `umount2`, `pivot_root`, `chroot`, `unshare`, `setns` and the new mount API), debugging and
/// reading other processes (`ptrace`, `process_vm_readv`, `process_vm_writev`), the kernel
/// keyring (`keyctl`, `add_key`, `request_key`), `bpf`, `perf_event_open`, `userfaultfd`,
/// io_uring (which bypasses the filter for the operations it runs), kernel images and modules
/// (`kexec_load`, `kexec_file_load`, `init_module`, `finit_module`, `delete_module`), file
/// handles (`open_by_handle_at`, `name_to_handle_at`), and `swapon`, `swapoff`, `reboot`,
/// `acct`, `quotactl` and `syslog`.
pub const DENIED_SYSCALLS: [(&str, i64); 38] = [
    ("mount", libc::SYS_mount),
    ("umount2", libc::SYS_umount2),
    ("pivot_root", libc::SYS_pivot_root),
    ("chroot", libc::SYS_chroot),
    ("unshare", libc::SYS_unshare),
    ("setns", libc::SYS_setns),
    ("fsopen", libc::SYS_fsopen),
    ("fsconfig", libc::SYS_fsconfig),
    ("fsmount", libc::SYS_fsmount),
    ("fspick", libc::SYS_fspick),
    ("move_mount", libc::SYS_move_mount),
    ("open_tree", libc::SYS_open_tree),
    ("mount_setattr", libc::SYS_mount_setattr),
    ("ptrace", libc::SYS_ptrace),
    ("process_vm_readv", libc::SYS_process_vm_readv),
    ("process_vm_writev", libc::SYS_process_vm_writev),
    ("keyctl", libc::SYS_keyctl),
    ("add_key", libc::SYS_add_key),
    ("request_key", libc::SYS_request_key),
    ("bpf", libc::SYS_bpf),
    ("perf_event_open", libc::SYS_perf_event_open),
    ("userfaultfd", libc::SYS_userfaultfd),
    ("io_uring_setup", libc::SYS_io_uring_setup),
    ("io_uring_enter", libc::SYS_io_uring_enter),
    ("io_uring_register", libc::SYS_io_uring_register),
    ("kexec_load", libc::SYS_kexec_load),
    ("kexec_file_load", libc::SYS_kexec_file_load),
    ("init_module", libc::SYS_init_module),
    ("finit_module", libc::SYS_finit_module),
    ("delete_module", libc::SYS_delete_module),
    ("open_by_handle_at", libc::SYS_open_by_handle_at),
    ("name_to_handle_at", libc::SYS_name_to_handle_at),
    ("swapon", libc::SYS_swapon),
    ("swapoff", libc::SYS_swapoff),
    ("reboot", libc::SYS_reboot),
    ("acct", libc::SYS_acct),
    ("quotactl", libc::SYS_quotactl),
    ("syslog", libc::SYS_syslog),
];

/// What one sandboxed launch needs besides the command.
#[derive(Debug, Clone, Copy)]
pub struct SandboxLaunch<'a> {
    /// The session workspace (absolute), bound read-write at the same path.
    pub workspace: &'a Path,
    /// The operator scratch directory, bound read-write at [`SANDBOX_SCRATCH_PATH`].
    pub scratch: Option<&'a Path>,
    /// Host directories to cover with an empty file system where they would otherwise be
    /// visible (inside a system directory or an extra read-only path).
    pub hidden: &'a [PathBuf],
    /// The settings the node host decided on.
    pub settings: &'a SandboxSettings,
    /// The `gatehouse` executable that runs as the helper. Without one, the command runs
    /// directly under bubblewrap: the namespace, capability and mount layers hold, but no
    /// Landlock, seccomp, limits or descriptor cleanup. Workers always have one; only this
    /// crate's tests and the benchmark's namespaces-only row go without.
    pub helper: Option<&'a Path>,
}

/// What the helper applies inside the sandbox before it executes the command; it travels as one
/// JSON argument.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HelperSpec {
    /// Paths that get read and execute rights under Landlock.
    read_only: Vec<PathBuf>,
    /// Paths that get every right under Landlock.
    read_write: Vec<PathBuf>,
    /// The resource limits.
    limits: SandboxLimits,
    /// The Landlock ABI to enforce, if any.
    landlock_abi: Option<u8>,
    /// Whether to install the seccomp filter.
    seccomp: bool,
}

/// Returns the bubblewrap arguments that run `program` with `args` in the sandbox of `launch`
/// (through the helper when there is one).
pub fn bwrap_command_args(
    launch: &SandboxLaunch<'_>,
    program: &OsStr,
    args: &[&OsStr],
) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut push = |items: &[&dyn AsRef<OsStr>]| {
        out.extend(items.iter().map(|item| item.as_ref().to_owned()));
    };
    let settings = launch.settings;
    let uid = settings.uid.to_string();
    let gid = settings.gid.to_string();
    push(&[&"--unshare-all", &"--unshare-user", &"--disable-userns"]);
    push(&[&"--uid", &uid, &"--gid", &gid, &"--cap-drop", &"ALL"]);
    push(&[&"--die-with-parent", &"--new-session"]);
    let tmp_size = settings.limits.tmp_size_bytes.to_string();
    push(&[
        &"--perms", &"1777", &"--size", &tmp_size, &"--tmpfs", &"/tmp",
    ]);
    let mut read_only = Vec::new();
    for dir in SYSTEM_DIRS {
        let path = Path::new(dir);
        match std::fs::symlink_metadata(path) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(path) {
                    push(&[&"--symlink", &target, &path]);
                }
            }
            Ok(metadata) if metadata.is_dir() => {
                push(&[&"--ro-bind", &path, &path]);
                read_only.push(path.to_path_buf());
            }
            Ok(_) | Err(_) => {}
        }
    }
    push(&[&"--dir", &"/etc"]);
    for entry in ETC_ALLOWED {
        let path = Path::new("/etc").join(entry);
        match std::fs::symlink_metadata(&path) {
            Ok(metadata) if metadata.file_type().is_symlink() => {
                if let Ok(target) = std::fs::read_link(&path) {
                    push(&[&"--symlink", &target, &path]);
                }
            }
            Ok(_) => push(&[&"--ro-bind", &path, &path]),
            Err(_) => {}
        }
    }
    read_only.push(PathBuf::from("/etc"));
    for extra in &settings.read_only_paths {
        push(&[&"--ro-bind", &extra, &extra]);
        read_only.push(PathBuf::from(extra));
    }
    for hidden in launch.hidden {
        if read_only.iter().any(|mounted| hidden.starts_with(mounted)) {
            push(&[&"--tmpfs", hidden]);
        }
    }
    push(&[&"--bind", &launch.workspace, &launch.workspace]);
    let mut read_write = vec![PathBuf::from("/tmp"), launch.workspace.to_path_buf()];
    if let Some(scratch) = launch.scratch {
        push(&[&"--bind", &scratch, &SANDBOX_SCRATCH_PATH]);
        read_write.push(PathBuf::from(SANDBOX_SCRATCH_PATH));
    }
    push(&[&"--dev", &"/dev", &"--proc", &"/proc"]);
    push(&[&"--chdir", &launch.workspace]);
    if let Some(helper) = launch.helper {
        push(&[&"--ro-bind", &helper, &SANDBOX_HELPER_PATH]);
        let spec = HelperSpec {
            read_only,
            read_write,
            limits: settings.limits,
            landlock_abi: settings.landlock_abi,
            seccomp: settings.seccomp,
        };
        // Serialising plain strings, numbers and UTF-8 paths cannot fail.
        let spec = serde_json::to_string(&spec).unwrap_or_default();
        push(&[
            &"--",
            &SANDBOX_HELPER_PATH,
            &HELPER_SUBCOMMAND,
            &"--spec",
            &spec,
        ]);
    }
    push(&[&"--", &program]);
    out.extend(args.iter().map(|arg| arg.to_os_string()));
    out
}

/// Why the helper could not run the command. Every variant has a stable [`HelperError::code`].
#[derive(Debug, thiserror::Error)]
pub enum HelperError {
    /// The `--spec` argument is not what the node host writes.
    #[error("the sandbox spec is malformed: {0}")]
    Spec(String),
    /// A file descriptor above 2 could not be listed or closed.
    #[error("cannot close the inherited file descriptors: {0}")]
    Descriptors(String),
    /// A resource limit could not be set.
    #[error("cannot set {limit}: {reason}")]
    Limit {
        /// The limit, for example `RLIMIT_NPROC`.
        limit: &'static str,
        /// The kernel's answer.
        reason: String,
    },
    /// `no_new_privs` could not be set.
    #[error("cannot set no_new_privs: {0}")]
    NoNewPrivs(String),
    /// The Landlock ruleset could not be enforced in full.
    #[error("cannot enforce the Landlock ruleset: {0}")]
    Landlock(String),
    /// The seccomp filter could not be built or installed.
    #[error("cannot install the seccomp filter: {0}")]
    Seccomp(String),
    /// The command could not be executed.
    #[error("cannot execute the command: {0}")]
    Exec(String),
    /// The supervisor could not watch the command's processes, so it killed them.
    #[error("cannot supervise the command's processes: {0}")]
    Supervise(String),
}

impl HelperError {
    /// Returns the stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            HelperError::Spec(_) => ErrorCode::SandboxSpecInvalid,
            HelperError::Descriptors(_)
            | HelperError::Limit { .. }
            | HelperError::NoNewPrivs(_)
            | HelperError::Landlock(_)
            | HelperError::Seccomp(_)
            | HelperError::Supervise(_) => ErrorCode::SandboxLayerFailed,
            HelperError::Exec(_) => ErrorCode::ExecFailed,
        }
    }
}

/// How the supervised command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HelperOutcome {
    /// The command exited with this status (128 + N when signal N ended it, as a shell reports).
    Exited(u8),
    /// The sandbox held more than this many processes, so the supervisor killed all of them.
    ProcessLimitExceeded(u64),
}

/// How often the supervisor counts the processes of the sandbox while the command runs. A fork
/// bomb can outgrow [`SandboxLimits::processes`] by what it forks in one interval (plus the time
/// the supervisor waits for a core on a loaded machine) before it is killed; each count reads
/// the sandbox's `/proc`, a few microseconds with few processes.
pub const PROCESS_POLL_INTERVAL: std::time::Duration = std::time::Duration::from_millis(2);

/// The helper's body (`gatehouse sandbox-exec --spec JSON -- PROGRAM ARGS...`): applies the
/// layers of `spec` to itself in order (descriptors, limits, `no_new_privs`, Landlock, seccomp;
/// children inherit each of them), starts `command` as its child with the same stdin, stdout and
/// stderr, and supervises it until it exits (see `supervise`).
///
/// # Errors
/// The first layer that could not be applied, a command that could not be started, or a
/// supervision that could not count the sandbox's processes (the command is then killed).
pub fn run_helper(spec: &str, command: &[OsString]) -> Result<HelperOutcome, HelperError> {
    let spec: HelperSpec =
        serde_json::from_str(spec).map_err(|error| HelperError::Spec(error.to_string()))?;
    let Some((program, args)) = command.split_first() else {
        return Err(HelperError::Spec(String::from("no command after --")));
    };
    check_fresh_pid_namespace()?;
    close_inherited_descriptors()?;
    set_limits(&spec.limits)?;
    rustix::thread::set_no_new_privs(true)
        .map_err(|error| HelperError::NoNewPrivs(error.to_string()))?;
    if let Some(abi) = spec.landlock_abi {
        restrict_with_landlock(abi, &spec.read_only, &spec.read_write)?;
    }
    if spec.seccomp {
        install_seccomp_filter()?;
    }
    // The command starts through the helper's own [`LOWER_PRIORITY_FLAG`] step, which lowers its
    // priority before it executes the program, so no process of the command ever runs at the
    // supervisor's priority.
    let child = std::process::Command::new(SANDBOX_HELPER_PATH)
        .args([HELPER_SUBCOMMAND, LOWER_PRIORITY_FLAG, "--"])
        .arg(program)
        .args(args)
        .spawn()
        .map_err(|error| HelperError::Exec(format!("{}: {error}", Path::new(program).display())))?;
    supervise(child, spec.limits.processes)
}

/// The flag of `gatehouse sandbox-exec` that runs the step between the supervisor and the
/// command: [`exec_with_lower_priority`].
pub const LOWER_PRIORITY_FLAG: &str = "--lower-priority";

/// The nice value of every process of a sandboxed command. The supervisor keeps nice 0: a fork
/// bomb's processes then weigh about a tenth of it each for the scheduler, so the supervisor
/// still gets a core within its polling interval while thousands of them are runnable (at the
/// same priority it was starved for tens of milliseconds, long enough for tens of thousands of
/// processes). Commands run a little behind the host's own work, as model-generated code should.
pub const COMMAND_NICE: i32 = 10;

/// The step between the supervisor and the command (`gatehouse sandbox-exec --lower-priority --
/// PROGRAM ARGS...`): sets this process's nice value to [`COMMAND_NICE`] (raising it needs no
/// privilege, and no process of the command can lower it again) and replaces itself with the
/// program. It returns only on failure.
///
/// # Errors
/// The nice value could not be set, or the `execve` failed.
pub fn exec_with_lower_priority(command: &[OsString]) -> Result<Infallible, HelperError> {
    let Some((program, args)) = command.split_first() else {
        return Err(HelperError::Spec(String::from("no command after --")));
    };
    rustix::process::setpriority_process(None, COMMAND_NICE)
        .map_err(|errno| HelperError::Supervise(format!("cannot lower the priority: {errno}")))?;
    scope_signals()?;
    let error = std::process::Command::new(program).args(args).exec();
    Err(HelperError::Exec(format!(
        "{}: {error}",
        Path::new(program).display()
    )))
}

/// Puts the command in a Landlock domain of its own that may not signal processes outside it
/// (`LANDLOCK_SCOPE_SIGNAL`, Landlock ABI 6), so no process of the command can stop or kill the
/// supervisor that bounds it. On a kernel without ABI 6 the scope is not available and this does
/// nothing; the startup report names the Landlock ABI.
fn scope_signals() -> Result<(), HelperError> {
    use landlock::CompatLevel;
    use landlock::Compatible;
    use landlock::RulesetAttr;
    let fail = |error: landlock::RulesetError| HelperError::Landlock(error.to_string());
    let ruleset = landlock::Ruleset::default().set_compatibility(CompatLevel::BestEffort);
    match ruleset.scope(landlock::Scope::Signal) {
        Ok(ruleset) => ruleset
            .create()
            .map_err(fail)?
            .restrict_self()
            .map(drop)
            .map_err(fail),
        Err(_) => Ok(()),
    }
}

/// The helper's process id in the sandbox: bubblewrap's init is 1 and starts the helper first.
const HELPER_PID: u32 = 2;

/// Refuses to supervise outside a fresh PID namespace: the supervisor's `kill(-1, SIGKILL)` must
/// reach only the sandbox. There the helper is the first child of bubblewrap's init, so its pid
/// is 2; outside one, pid 2 is the kernel's `kthreadd`.
fn check_fresh_pid_namespace() -> Result<(), HelperError> {
    let pid = std::process::id();
    match pid == HELPER_PID {
        true => Ok(()),
        false => Err(HelperError::Supervise(format!(
            "the helper runs as pid {pid}, not as the first process of a fresh PID namespace"
        ))),
    }
}

/// Waits for `child` while counting the processes of the sandbox every
/// [`PROCESS_POLL_INTERVAL`]. The sandbox has its own PID namespace and `/proc`, so its processes
/// are the numeric entries of `/proc` less bubblewrap's init and the supervisor. When they are
/// more than `limit`, `kill(-1, SIGKILL)` kills every one of them (in a PID namespace it reaches
/// exactly the namespace's processes but its init and the caller), the supervisor waits until
/// none is left and reports [`HelperOutcome::ProcessLimitExceeded`]. This bounds a fork bomb
/// where the kernel does not enforce `RLIMIT_NPROC` (a node running as root). The child's exit is
/// seen at once through a pidfd, so a command's status and timing stay as without supervision.
fn supervise(mut child: std::process::Child, limit: u64) -> Result<HelperOutcome, HelperError> {
    let fail = |error: std::io::Error| HelperError::Supervise(error.to_string());
    let pid = rustix::process::Pid::from_child(&child);
    let pidfd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
        .map_err(|errno| fail(errno.into()));
    let pidfd = match pidfd {
        Ok(pidfd) => pidfd,
        Err(error) => {
            kill_sandbox(&mut child);
            return Err(error);
        }
    };
    let interval = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: i64::try_from(PROCESS_POLL_INTERVAL.as_nanos()).unwrap_or(i64::MAX),
    };
    loop {
        let mut fds = [rustix::event::PollFd::new(
            &pidfd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, Some(&interval)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(errno) => {
                kill_sandbox(&mut child);
                return Err(fail(errno.into()));
            }
        }
        if let Some(status) = child.try_wait().map_err(fail)? {
            return Ok(HelperOutcome::Exited(exit_code(status)));
        }
        match count_sandbox_processes(limit) {
            Ok(count) if count <= limit => {}
            Ok(_) => {
                kill_sandbox(&mut child);
                return Ok(HelperOutcome::ProcessLimitExceeded(limit));
            }
            Err(error) => {
                kill_sandbox(&mut child);
                return Err(fail(error));
            }
        }
    }
}

/// Counts the processes of the sandbox's PID namespace but bubblewrap's init and the supervisor
/// (zombies not yet reaped included), stopping as soon as there are more than `most`: the cost
/// of a count is bounded by the limit, not by the size of a fork bomb.
fn count_sandbox_processes(most: u64) -> std::io::Result<u64> {
    let mut count = 0;
    for entry in std::fs::read_dir("/proc")? {
        let name = entry?.file_name();
        match name.to_str().and_then(|name| name.parse::<u32>().ok()) {
            Some(1 | HELPER_PID) | None => {}
            Some(_) => count += 1,
        }
        if count > most {
            break;
        }
    }
    Ok(count)
}

/// Kills every process of the sandbox but its init and the supervisor, reaps `child`, and
/// returns once `/proc` shows none of them (bubblewrap's init reaps the rest); it gives up after
/// a second, when the supervisor's exit ends the namespace and so every process left in it.
fn kill_sandbox(child: &mut std::process::Child) {
    let everyone = nix::unistd::Pid::from_raw(-1);
    let _ = nix::sys::signal::kill(everyone, nix::sys::signal::Signal::SIGKILL);
    let _ = child.wait();
    for _ in 0..1000 {
        let _ = nix::sys::signal::kill(everyone, nix::sys::signal::Signal::SIGKILL);
        if count_sandbox_processes(0).is_ok_and(|count| count == 0) {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The status a shell reports for `status`: the exit code, or 128 + N after signal N.
fn exit_code(status: std::process::ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    let code = match (status.code(), status.signal()) {
        (Some(code), _) => code,
        (None, Some(signal)) => 128 + signal,
        (None, None) => 1,
    };
    u8::try_from(code & 0xff).unwrap_or(1)
}

/// Closes every descriptor above 2, so the command inherits only stdin, stdout and stderr.
fn close_inherited_descriptors() -> Result<(), HelperError> {
    let fail = |error: std::io::Error| HelperError::Descriptors(error.to_string());
    // Collect first: the listing holds a descriptor of its own while it is open.
    let numbers: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map_err(fail)?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|number| *number > 2)
        .collect();
    for number in numbers {
        match nix::unistd::close(number) {
            // The listing's own descriptor is already closed.
            Ok(()) | Err(nix::errno::Errno::EBADF) => {}
            Err(errno) => return Err(HelperError::Descriptors(format!("fd {number}: {errno}"))),
        }
    }
    Ok(())
}

/// Sets each limit of `limits` as both soft and hard limit (never above the inherited hard one).
fn set_limits(limits: &SandboxLimits) -> Result<(), HelperError> {
    use rustix::process::Resource;
    let wanted = [
        (Resource::As, "RLIMIT_AS", limits.address_space_bytes),
        (Resource::Nproc, "RLIMIT_NPROC", limits.processes),
        (Resource::Nofile, "RLIMIT_NOFILE", limits.open_files),
        (Resource::Fsize, "RLIMIT_FSIZE", limits.file_size_bytes),
        (Resource::Cpu, "RLIMIT_CPU", limits.cpu_seconds),
    ];
    for (resource, limit, value) in wanted {
        let value = match rustix::process::getrlimit(resource).maximum {
            Some(hard) => value.min(hard),
            None => value,
        };
        let new = rustix::process::Rlimit {
            current: Some(value),
            maximum: Some(value),
        };
        rustix::process::setrlimit(resource, new).map_err(|error| HelperError::Limit {
            limit,
            reason: error.to_string(),
        })?;
    }
    Ok(())
}

/// Restricts this process (and so the command) to read and execute under `read_only` and every
/// right under `read_write`, plus reading `/proc`, reading and writing the devices of `/dev`,
/// and listing any directory.
fn restrict_with_landlock(
    abi: u8,
    read_only: &[PathBuf],
    read_write: &[PathBuf],
) -> Result<(), HelperError> {
    use landlock::Access;
    use landlock::AccessFs;
    use landlock::CompatLevel;
    use landlock::Compatible;
    use landlock::RulesetAttr;
    use landlock::RulesetCreatedAttr;
    use landlock::RulesetStatus;
    let abi = landlock::ABI::from(i32::from(abi));
    let fail = |error: landlock::RulesetError| HelperError::Landlock(error.to_string());
    for path in read_only.iter().chain(read_write) {
        if !path.exists() {
            return Err(HelperError::Landlock(format!(
                "{} is not in the sandbox",
                path.display()
            )));
        }
    }
    let devices = AccessFs::from_read(abi) | AccessFs::WriteFile;
    // Listing directories anywhere is harmless: the mounts hold nothing else.
    let list_root = landlock::path_beneath_rules(["/"], AccessFs::ReadDir);
    let status = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(abi))
        .map_err(fail)?
        .create()
        .map_err(fail)?
        .add_rules(landlock::path_beneath_rules(
            read_only
                .iter()
                .map(PathBuf::as_path)
                .chain([Path::new("/proc"), Path::new(SANDBOX_HELPER_PATH)]),
            AccessFs::from_read(abi),
        ))
        .map_err(fail)?
        .add_rules(landlock::path_beneath_rules(["/dev"], devices))
        .map_err(fail)?
        .add_rules(list_root)
        .map_err(fail)?
        .add_rules(landlock::path_beneath_rules(
            read_write,
            AccessFs::from_all(abi),
        ))
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok(()),
        other => Err(HelperError::Landlock(format!(
            "the kernel enforced the ruleset only as {other:?}"
        ))),
    }
}

/// Installs the filter that refuses [`DENIED_SYSCALLS`] with `EPERM` and allows the rest.
fn install_seccomp_filter() -> Result<(), HelperError> {
    let fail = |error: seccompiler::Error| HelperError::Seccomp(error.to_string());
    let program = seccomp_program().map_err(fail)?;
    seccompiler::apply_filter(&program).map_err(fail)
}

fn seccomp_program() -> Result<seccompiler::BpfProgram, seccompiler::Error> {
    let rules: BTreeMap<i64, Vec<seccompiler::SeccompRule>> = DENIED_SYSCALLS
        .iter()
        .map(|(_, number)| (*number, Vec::new()))
        .collect();
    let arch = seccompiler::TargetArch::try_from(std::env::consts::ARCH)?;
    let filter = seccompiler::SeccompFilter::new(
        rules,
        seccompiler::SeccompAction::Allow,
        seccompiler::SeccompAction::Errno(libc::EPERM.unsigned_abs()),
        arch,
    )?;
    let program: seccompiler::BpfProgram =
        filter.try_into().map_err(seccompiler::Error::Backend)?;
    Ok(with_x32_refused(program))
}

/// Puts three instructions before `program` that refuse every x32 system call (number with bit
/// 30 set, same `AUDIT_ARCH_X86_64`) with `EPERM`: the deny list names x86-64 numbers, and an
/// x32 alias of a denied call would otherwise pass it. Jumps in `program` are relative, so a
/// prologue leaves them intact.
fn with_x32_refused(program: seccompiler::BpfProgram) -> seccompiler::BpfProgram {
    if std::env::consts::ARCH != "x86_64" {
        return program;
    }
    const BPF_LD_W_ABS: u16 = 0x20;
    const BPF_JMP_JGE_K: u16 = 0x35;
    const BPF_RET_K: u16 = 0x06;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    let instruction = |code, jt, jf, k| seccompiler::sock_filter { code, jt, jf, k };
    let mut out = vec![
        // Load seccomp_data.nr (offset 0).
        instruction(BPF_LD_W_ABS, 0, 0, 0),
        instruction(BPF_JMP_JGE_K, 0, 1, X32_SYSCALL_BIT),
        instruction(
            BPF_RET_K,
            0,
            0,
            SECCOMP_RET_ERRNO | libc::EPERM.unsigned_abs(),
        ),
    ];
    out.extend(program);
    out
}

/// Returns the names of the system calls the seccomp filter refuses, for the startup report.
pub fn denied_syscall_names() -> impl Iterator<Item = &'static str> {
    DENIED_SYSCALLS.iter().map(|(name, _)| *name)
}

/// Checks that the seccomp filter builds for this machine's architecture.
///
/// # Errors
/// seccompiler's reason, for example an unsupported architecture.
pub fn check_seccomp_filter() -> Result<(), String> {
    seccomp_program()
        .map(drop)
        .map_err(|error| error.to_string())
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::path::Path;
    use std::path::PathBuf;

    use gatehouse_protocol::worker::SandboxSettings;

    use crate::context::SANDBOX_SCRATCH_PATH;
    use crate::sandbox::HelperSpec;
    use crate::sandbox::SandboxLaunch;
    use crate::sandbox::bwrap_command_args;
    use crate::sandbox::check_seccomp_filter;

    #[test]
    fn the_seccomp_filter_builds() {
        assert_eq!(check_seccomp_filter(), Ok(()));
    }

    #[test]
    fn the_seccomp_filter_refuses_x32_calls_first() {
        let program = crate::sandbox::seccomp_program().unwrap();
        if std::env::consts::ARCH == "x86_64" {
            assert_eq!((program[0].code, program[0].k), (0x20, 0));
            assert_eq!((program[1].code, program[1].k), (0x35, 0x4000_0000));
            assert_eq!(program[2].k, 0x0005_0000 | 1);
        }
    }

    #[test]
    fn only_allowed_etc_entries_are_mounted() {
        let settings = SandboxSettings::default();
        let launch = SandboxLaunch {
            workspace: Path::new("/w"),
            scratch: None,
            hidden: &[],
            settings: &settings,
            helper: None,
        };
        let args = bwrap_command_args(&launch, OsStr::new("/bin/sh"), &[]);
        let mounted: Vec<&OsStr> = args
            .windows(3)
            .filter(|window| window[0] == "--ro-bind" || window[0] == "--symlink")
            .map(|window| window[2].as_os_str())
            .collect();
        assert!(!mounted.contains(&OsStr::new("/etc")), "{args:?}");
        for secret in ["/etc/shadow", "/etc/gshadow", "/etc/ssh", "/etc/sudoers"] {
            assert!(!mounted.contains(&OsStr::new(secret)), "{secret}: {args:?}");
        }
        if Path::new("/etc/passwd").exists() {
            assert!(mounted.contains(&OsStr::new("/etc/passwd")), "{args:?}");
        }
    }

    #[test]
    fn the_helper_spec_round_trips_through_the_arguments() {
        let settings = SandboxSettings::default();
        let launch = SandboxLaunch {
            workspace: Path::new("/w"),
            scratch: Some(Path::new("/s")),
            hidden: &[],
            settings: &settings,
            helper: Some(Path::new("/g")),
        };
        let args = bwrap_command_args(&launch, OsStr::new("/bin/sh"), &[OsStr::new("-c")]);
        let position = args.iter().position(|arg| arg == "--spec").unwrap();
        let spec: HelperSpec = serde_json::from_str(args[position + 1].to_str().unwrap()).unwrap();
        assert!(spec.read_write.contains(&PathBuf::from("/w")));
        assert!(
            spec.read_write
                .contains(&PathBuf::from(SANDBOX_SCRATCH_PATH))
        );
        assert_eq!(spec.limits, settings.limits);
        assert!(!args.iter().any(|arg| arg == "/"), "{args:?}");
        assert_eq!(&args[args.len() - 3..], ["--", "/bin/sh", "-c"]);
    }
}
