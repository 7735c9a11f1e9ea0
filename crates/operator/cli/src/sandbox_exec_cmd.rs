//! `gatehouse sandbox-exec --spec JSON -- PROGRAM ARGS...`: the hidden helper that bubblewrap
//! runs inside the `exec` sandbox. It applies the layers of the spec (descriptors, limits,
//! `no_new_privs`, Landlock, seccomp), starts the program as its child and supervises its
//! process count; see `gatehouse_agent::sandbox`. The program and its arguments are taken as raw bytes.

use gatehouse_protocol::error::ErrorCode;
use std::ffi::OsString;
use std::process::ExitCode;

/// Arguments of `gatehouse sandbox-exec`.
#[derive(Debug, clap::Args)]
struct SandboxExecArgs {
    /// What to apply, as the node host wrote it.
    #[arg(long, value_name = "JSON", required_unless_present = "lower_priority")]
    spec: Option<String>,
    /// Only lower this process's priority and execute the command: the step the supervisor
    /// starts the command through.
    #[arg(long, conflicts_with = "spec")]
    lower_priority: bool,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// `gatehouse sandbox-exec` parsed on its own, without the rest of the command line.
#[derive(Debug, clap::Parser)]
#[command(name = "gatehouse sandbox-exec")]
struct HelperCli {
    #[command(flatten)]
    args: SandboxExecArgs,
}

/// Runs the helper when this process was started as `gatehouse sandbox-exec ...`, else returns
/// `None`. A usage error exits 126 like any other helper failure.
pub(crate) fn run_if_invoked() -> Option<ExitCode> {
    let mut argv = std::env::args_os().skip(1).peekable();
    if argv.peek().is_none_or(|first| first != HELPER_NAME) {
        return None;
    }
    match <HelperCli as clap::Parser>::try_parse_from(argv) {
        Ok(cli) => Some(run(cli.args)),
        Err(error) => {
            let _ = error.print();
            Some(ExitCode::from(HELPER_FAILED))
        }
    }
}

/// The subcommand's name, as bubblewrap runs it.
const HELPER_NAME: &str = gatehouse_agent::sandbox::HELPER_SUBCOMMAND;

/// Exit code of a helper that could not run the command (as a shell's "cannot execute").
const HELPER_FAILED: u8 = 126;

/// Exit code of a command whose sandbox outgrew its process limit and was killed whole.
const PROCESS_LIMIT_EXCEEDED: u8 = 125;

/// Runs the helper: the command's own exit status when it ends, [`PROCESS_LIMIT_EXCEEDED`] when
/// the supervisor killed it for its process count, [`HELPER_FAILED`] when a layer failed; the
/// reason of the last two goes to stderr (which is the command's output, so the model reads it).
fn run(args: SandboxExecArgs) -> ExitCode {
    use gatehouse_agent::sandbox::HelperOutcome;
    let outcome = match &args.spec {
        Some(spec) => gatehouse_agent::sandbox::run_helper(spec, &args.command),
        None => gatehouse_agent::sandbox::exec_with_lower_priority(&args.command)
            .map(|never| match never {}),
    };
    match outcome {
        Ok(HelperOutcome::Exited(code)) => ExitCode::from(code),
        Ok(HelperOutcome::ProcessLimitExceeded(limit)) => {
            crate::output::error_line(&format!(
                "gatehouse sandbox: process limit of {limit} exceeded; every process of the command was killed ({})",
                ErrorCode::SandboxProcessLimit
            ));
            ExitCode::from(PROCESS_LIMIT_EXCEEDED)
        }
        Err(error) => {
            crate::output::error_line(&format!(
                "gatehouse sandbox-exec: {}: {error}",
                error.code()
            ));
            ExitCode::from(HELPER_FAILED)
        }
    }
}
