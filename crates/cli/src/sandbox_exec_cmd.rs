//! `gatehouse sandbox-exec --spec JSON -- PROGRAM ARGS...`: the hidden helper that bubblewrap
//! runs inside the `exec` sandbox. It applies the layers of the spec (descriptors, limits,
//! `no_new_privs`, Landlock, seccomp) and replaces itself with the program; see
//! `gatehouse_agent::sandbox`. The program and its arguments are taken as raw bytes.

use std::ffi::OsString;
use std::process::ExitCode;

/// Arguments of `gatehouse sandbox-exec`.
#[derive(Debug, clap::Args)]
pub(crate) struct SandboxExecArgs {
    /// What to apply, as the node host wrote it.
    #[arg(long, value_name = "JSON")]
    spec: String,
    /// The program and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<OsString>,
}

/// Exit code of a helper that could not run the command (as a shell's "cannot execute").
const HELPER_FAILED: u8 = 126;

/// Runs the helper; it returns only when a layer or the `execve` failed, with the reason on
/// stderr (which is the command's output, so the model reads it).
pub(crate) fn run(args: SandboxExecArgs) -> ExitCode {
    match gatehouse_agent::sandbox::run_helper(&args.spec, &args.command) {
        Ok(never) => match never {},
        Err(error) => {
            crate::output::error_line(&format!(
                "gatehouse sandbox-exec: {}: {error}",
                error.code()
            ));
            ExitCode::from(HELPER_FAILED)
        }
    }
}
