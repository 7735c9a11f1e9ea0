//! The sandbox flags of `gatehouse node` and `gatehouse up`, and the startup decision: which
//! layers of the `exec` sandbox this kernel gives, one stderr line per layer, and a startup error
//! with a stable code for a layer it refuses unless the operator named it in
//! `--sandbox-allow-missing`. Workers get the decision in their launch envelope and never probe.

use gatehouse_protocol::error::ErrorCode;
use std::path::Path;
use std::path::PathBuf;

use gatehouse_agent::sandbox::ETC_ALLOWED;
use gatehouse_agent::sandbox::SYSTEM_DIRS;
use gatehouse_protocol::worker::DEFAULT_SANDBOX_ID;
use gatehouse_protocol::worker::SandboxLimits;
use gatehouse_protocol::worker::SandboxSettings;

use crate::exit::UsageError;

/// A sandbox layer the operator may accept as missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Layer {
    /// The Landlock ruleset (kernels without Landlock, or with it disabled).
    Landlock,
    /// The seccomp filter (kernels without seccomp filters).
    Seccomp,
}

impl Layer {
    fn name(self) -> &'static str {
        match self {
            Layer::Landlock => "landlock",
            Layer::Seccomp => "seccomp",
        }
    }
}

/// The sandbox flags shared by `gatehouse node` and `gatehouse up`.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct SandboxArgs {
    /// The uid (and, without --sandbox-gid, gid) of commands inside their user namespace; not 0
    /// (default 1000).
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(u32).range(1..))]
    sandbox_uid: Option<u32>,
    /// The gid of commands inside their user namespace; not 0 (default: the uid).
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(u32).range(1..))]
    sandbox_gid: Option<u32>,
    /// An extra host path commands may read and execute (repeatable). The system directories
    /// (/usr, /bin, /sbin, /lib*, /etc less its secrets) are always there; nothing else is.
    #[arg(long = "sandbox-read-only", value_name = "PATH")]
    sandbox_read_only: Vec<PathBuf>,
    /// RLIMIT_AS of each command process, in bytes (default 8 GiB).
    #[arg(long, value_name = "BYTES")]
    sandbox_address_space_bytes: Option<u64>,
    /// The most processes a command may have (default 256): RLIMIT_NPROC (processes and threads
    /// of the sandbox user, which the kernel does not enforce when the node runs as root), and
    /// the helper inside the sandbox kills every process of the command when it counts more.
    #[arg(long, value_name = "N")]
    sandbox_processes: Option<u64>,
    /// RLIMIT_NOFILE of each command process (default 1024).
    #[arg(long, value_name = "N")]
    sandbox_open_files: Option<u64>,
    /// RLIMIT_FSIZE: the largest file a command may write, in bytes (default 1 GiB).
    #[arg(long, value_name = "BYTES")]
    sandbox_file_size_bytes: Option<u64>,
    /// RLIMIT_CPU of each command process, in seconds (default 1800).
    #[arg(long, value_name = "SECONDS")]
    sandbox_cpu_seconds: Option<u64>,
    /// The size of a command's private /tmp, in bytes (default 512 MiB).
    #[arg(long, value_name = "BYTES")]
    sandbox_tmp_bytes: Option<u64>,
    /// Sandbox layers to run without when this machine cannot give them, comma-separated:
    /// landlock, seccomp. Without it, a missing layer is a startup error.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        env = "GATEHOUSE_SANDBOX_ALLOW_MISSING",
        value_name = "LAYER"
    )]
    sandbox_allow_missing: Vec<Layer>,
}

impl SandboxArgs {
    /// Fills what the flags leave unset from the node config file's `sandbox-read-only` and
    /// `sandbox-allow-missing`.
    pub(crate) fn with_file(
        mut self,
        read_only: Option<Vec<PathBuf>>,
        allow_missing: Option<Vec<Layer>>,
    ) -> SandboxArgs {
        if self.sandbox_read_only.is_empty() {
            self.sandbox_read_only = read_only.unwrap_or_default();
        }
        if self.sandbox_allow_missing.is_empty() {
            self.sandbox_allow_missing = allow_missing.unwrap_or_default();
        }
        self
    }

    /// Returns the settings the flags ask for, before the kernel is asked. `private` are the
    /// directories commands must never see (the Harness root, an embedded Gateway's state).
    ///
    /// # Errors
    /// A usage error for an extra path that is relative, `/`, missing, not UTF-8, or inside a
    /// private directory.
    pub(crate) fn requested(&self, private: &[PathBuf]) -> anyhow::Result<SandboxSettings> {
        let private: Vec<PathBuf> = private
            .iter()
            .map(|dir| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone()))
            .collect();
        let defaults = SandboxLimits::default();
        let uid = self.sandbox_uid.unwrap_or(DEFAULT_SANDBOX_ID);
        let mut read_only_paths = Vec::new();
        for path in &self.sandbox_read_only {
            let usage = |why: &str| {
                UsageError::new(format!("--sandbox-read-only {}: {why}", path.display()))
            };
            if !path.is_absolute() || path == Path::new("/") {
                return Err(usage("must be an absolute path other than /").into());
            }
            let canonical =
                std::fs::canonicalize(path).map_err(|error| usage(&error.to_string()))?;
            if canonical == Path::new("/") {
                return Err(usage("resolves to /").into());
            }
            if private
                .iter()
                .any(|dir| canonical.starts_with(dir) || dir.starts_with(&canonical))
            {
                return Err(usage(
                    "lies inside or contains the node's private state, which commands must never see",
                )
                .into());
            }
            let Some(text) = canonical.to_str() else {
                return Err(usage("is not UTF-8").into());
            };
            read_only_paths.push(text.to_owned());
        }
        Ok(SandboxSettings {
            uid,
            gid: self.sandbox_gid.unwrap_or(uid),
            read_only_paths,
            limits: SandboxLimits {
                address_space_bytes: self
                    .sandbox_address_space_bytes
                    .unwrap_or(defaults.address_space_bytes),
                processes: self.sandbox_processes.unwrap_or(defaults.processes),
                open_files: self.sandbox_open_files.unwrap_or(defaults.open_files),
                file_size_bytes: self
                    .sandbox_file_size_bytes
                    .unwrap_or(defaults.file_size_bytes),
                cpu_seconds: self.sandbox_cpu_seconds.unwrap_or(defaults.cpu_seconds),
                tmp_size_bytes: self.sandbox_tmp_bytes.unwrap_or(defaults.tmp_size_bytes),
            },
            landlock_abi: None,
            seccomp: false,
        })
    }

    fn allows(&self, layer: Layer) -> bool {
        self.sandbox_allow_missing.contains(&layer)
    }
}

/// What this machine gives, as the startup probes found it.
#[derive(Debug, Clone)]
pub(crate) struct Probes {
    /// The Landlock ABI, or why there is none.
    pub(crate) landlock: Result<i32, String>,
    /// Whether seccomp filters with the errno action are available, or why not.
    pub(crate) seccomp: Result<(), String>,
    /// Whether the node runs as root (the kernel then ignores RLIMIT_NPROC, and only the
    /// helper's count bounds the processes).
    pub(crate) root: bool,
}

impl Probes {
    /// Asks the kernel, with the same probes as `gatehouse doctor`.
    pub(crate) fn run() -> Probes {
        Probes {
            landlock: crate::doctor_cmd::probe_landlock(),
            seccomp: crate::doctor_cmd::probe_seccomp()
                .and_then(|_| gatehouse_agent::sandbox::check_seccomp_filter()),
            root: rustix::process::geteuid().is_root(),
        }
    }
}

/// The decision: the settings workers apply, and one report line per layer.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    /// What every worker's sandbox applies.
    pub(crate) settings: SandboxSettings,
    /// `layer: state` lines for stderr.
    pub(crate) lines: Vec<String>,
}

/// Decides the sandbox from the flags and the probes.
///
/// # Errors
/// `CODE: message` for a layer the machine refuses that the operator did not allow missing:
/// `SANDBOX_LANDLOCK_UNAVAILABLE` or `SANDBOX_SECCOMP_UNAVAILABLE`; a usage error for a bad
/// flag.
pub(crate) fn decide(
    args: &SandboxArgs,
    private: &[PathBuf],
    probes: &Probes,
) -> anyhow::Result<Decision> {
    let mut settings = args.requested(private)?;
    let mut lines = Vec::new();
    let allow = |layer: Layer| format!("--sandbox-allow-missing {}", layer.name());
    lines.push(format!(
        "userns: active: uid {} gid {} in a new user namespace, nested user namespaces disabled, every other namespace new (no network, private PIDs)",
        settings.uid, settings.gid
    ));
    lines.push(String::from("caps: active: every capability dropped"));
    lines.push(String::from("no_new_privs: active"));
    match &probes.seccomp {
        Ok(()) => {
            settings.seccomp = true;
            let names: Vec<&str> = gatehouse_agent::sandbox::denied_syscall_names().collect();
            lines.push(format!(
                "seccomp: active: {} system calls refused with EPERM ({})",
                names.len(),
                names.join(", ")
            ));
        }
        Err(reason) if args.allows(Layer::Seccomp) => lines.push(format!(
            "seccomp: MISSING, accepted by {}: {reason}",
            allow(Layer::Seccomp)
        )),
        Err(reason) => {
            return Err(anyhow::anyhow!(
                "{}: the kernel gives no seccomp filter ({reason}); run a kernel with seccomp filters, or accept running without with {}",
                ErrorCode::SandboxSeccompUnavailable,
                allow(Layer::Seccomp)
            ));
        }
    }
    match &probes.landlock {
        Ok(abi) => {
            let abi = u8::try_from(*abi).unwrap_or(u8::MAX).min(MAX_LANDLOCK_ABI);
            settings.landlock_abi = Some(abi);
            lines.push(format!(
                "landlock: active: ABI {abi}: read and execute on the system directories, read-write on the workspace, /tmp and the scratch mount"
            ));
        }
        Err(reason) if args.allows(Layer::Landlock) => lines.push(format!(
            "landlock: MISSING, accepted by {}: {reason}",
            allow(Layer::Landlock)
        )),
        Err(reason) => {
            return Err(anyhow::anyhow!(
                "{}: the kernel gives no Landlock ({reason}); enable Landlock (lsm=...,landlock), or accept running without with {}",
                ErrorCode::SandboxLandlockUnavailable,
                allow(Layer::Landlock)
            ));
        }
    }
    lines.push(mounts_line(&settings));
    let limits = settings.limits;
    lines.push(format!(
        "rlimits: active: address space {} bytes, open files {}, file size {} bytes, CPU {} s",
        limits.address_space_bytes, limits.open_files, limits.file_size_bytes, limits.cpu_seconds
    ));
    lines.push(match probes.root {
        false => format!(
            "process-limit: active: {} processes (RLIMIT_NPROC, and counted by the sandbox helper)",
            limits.processes
        ),
        true => format!(
            "process-limit: active: {} processes (counted by the sandbox helper, which kills the command past it; the kernel does not enforce RLIMIT_NPROC for a node running as root)",
            limits.processes
        ),
    });
    lines.push(String::from(
        "fds: active: only stdin, stdout and stderr reach the command",
    ));
    Ok(Decision { settings, lines })
}

/// Returns the settings with every layer this machine gives and the default limits, for
/// `gatehouse doctor`'s trial and the benchmark.
pub(crate) fn best_available() -> SandboxSettings {
    let args = SandboxArgs {
        sandbox_allow_missing: vec![Layer::Landlock, Layer::Seccomp],
        ..SandboxArgs::default()
    };
    decide(&args, &[], &Probes::run())
        .map(|decision| decision.settings)
        .unwrap_or_default()
}

/// The newest Landlock ABI this build knows how to ask for.
const MAX_LANDLOCK_ABI: u8 = 9;

fn mounts_line(settings: &SandboxSettings) -> String {
    let system: Vec<String> = SYSTEM_DIRS
        .iter()
        .filter_map(|dir| {
            let path = Path::new(dir);
            let metadata = std::fs::symlink_metadata(path).ok()?;
            match metadata.file_type().is_symlink() {
                true => Some(format!(
                    "{dir} -> {}",
                    std::fs::read_link(path).ok()?.display()
                )),
                false => Some((*dir).to_owned()),
            }
        })
        .collect();
    let extra = match settings.read_only_paths.is_empty() {
        true => String::from("none"),
        false => settings.read_only_paths.join(", "),
    };
    format!(
        "mounts: active: deny by default; read-only {} (/etc with only {} allowed entries); extra read-only: {extra}; workspace read-write; private /tmp of {} bytes; fresh /dev and /proc",
        system.join(", "),
        ETC_ALLOWED.len(),
        settings.limits.tmp_size_bytes
    )
}

/// Runs the startup decision for a node host whose workers run `helper` and whose private
/// directories are `private`, prints one line per
/// layer on stderr (prefixed with `prefix`), and proves the sandbox with a trial command. Without
/// bubblewrap it says so and returns the settings, since `exec` then refuses (or, with
/// `allow_unsandboxed`, runs unsandboxed and says so).
///
/// # Errors
/// As [`decide`]; `SANDBOX_TRIAL_FAILED` when the sandbox does not start.
pub(crate) fn startup(
    args: &SandboxArgs,
    private: &[PathBuf],
    helper: &Path,
    allow_unsandboxed: bool,
    prefix: &str,
) -> anyhow::Result<SandboxSettings> {
    let decision = decide(args, private, &Probes::run())?;
    let trial_dir = tempfile::Builder::new()
        .prefix("gatehouse-sandbox-trial-")
        .tempdir()?;
    match gatehouse_agent::trial_sandbox(trial_dir.path(), &decision.settings, Some(helper)) {
        Ok(_) => {}
        Err(gatehouse_agent::SandboxTrialError::NotFound) => {
            let consequence = match allow_unsandboxed {
                true => "exec runs commands unsandboxed (--allow-unsandboxed-exec)",
                false => "exec refuses to run commands (SANDBOX_UNAVAILABLE)",
            };
            crate::output::error_line(&format!(
                "{prefix} sandbox: bubblewrap (bwrap) not found: {consequence}"
            ));
            return Ok(decision.settings);
        }
        Err(error) => {
            return Err(anyhow::anyhow!(
                "{}: the exec sandbox does not start on this machine: {error}",
                ErrorCode::SandboxTrialFailed
            ));
        }
    }
    for line in &decision.lines {
        crate::output::error_line(&format!("{prefix} sandbox: {line}"));
    }
    Ok(decision.settings)
}

#[cfg(test)]
mod tests {
    use crate::sandbox_setup::Layer;
    use crate::sandbox_setup::Probes;
    use crate::sandbox_setup::SandboxArgs;
    use crate::sandbox_setup::decide;

    #[test]
    fn an_extra_path_inside_the_private_state_is_refused() {
        let private = tempfile::tempdir().unwrap();
        let inside = private.path().join("sessions");
        std::fs::create_dir(&inside).unwrap();
        let args = SandboxArgs {
            sandbox_read_only: vec![inside],
            ..SandboxArgs::default()
        };
        let error = args.requested(&[private.path().to_path_buf()]).unwrap_err();
        assert!(error.to_string().contains("private state"), "{error}");
        assert!(args.requested(&[]).is_ok());
    }

    #[test]
    fn an_extra_path_containing_the_private_state_is_refused() {
        let outer = tempfile::tempdir().unwrap();
        let outer_path = outer.path().canonicalize().unwrap();
        let private = outer_path.join("srv/gatehouse/gateway");
        std::fs::create_dir_all(&private).unwrap();
        let args = SandboxArgs {
            sandbox_read_only: vec![outer_path.join("srv")],
            ..SandboxArgs::default()
        };
        let error = args.requested(&[private]).unwrap_err();
        assert!(error.to_string().contains("contains"), "{error}");
    }

    fn probes(root: bool) -> Probes {
        Probes {
            landlock: Ok(6),
            seccomp: Ok(()),
            root,
        }
    }

    #[test]
    fn every_layer_is_on_when_the_machine_gives_it() {
        let decision = decide(&SandboxArgs::default(), &[], &probes(false)).unwrap();
        assert_eq!(decision.settings.landlock_abi, Some(6));
        assert!(decision.settings.seccomp);
        assert_eq!((decision.settings.uid, decision.settings.gid), (1000, 1000));
        assert!(
            decision.lines.iter().all(|line| line.contains(": active")),
            "{:?}",
            decision.lines
        );
    }

    #[test]
    fn a_missing_layer_is_an_error_unless_named() {
        let missing = Probes {
            landlock: Err(String::from("no landlock")),
            ..probes(false)
        };
        let error = decide(&SandboxArgs::default(), &[], &missing).unwrap_err();
        assert!(
            error
                .to_string()
                .starts_with("SANDBOX_LANDLOCK_UNAVAILABLE: "),
            "{error}"
        );
        let args = SandboxArgs {
            sandbox_allow_missing: vec![Layer::Landlock],
            ..SandboxArgs::default()
        };
        let decision = decide(&args, &[], &missing).unwrap();
        assert_eq!(decision.settings.landlock_abi, None);
        assert!(
            decision
                .lines
                .iter()
                .any(|line| line.starts_with("landlock: MISSING"))
        );
    }

    #[test]
    fn as_root_the_process_limit_is_active_without_a_flag() {
        let decision = decide(&SandboxArgs::default(), &[], &probes(true)).unwrap();
        let line = decision
            .lines
            .iter()
            .find(|line| line.starts_with("process-limit: "))
            .unwrap();
        assert!(
            line.starts_with("process-limit: active: 256 processes (counted by the sandbox helper"),
            "{line}"
        );
    }
}
