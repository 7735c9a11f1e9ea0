//! `gatehouse scratch`: checks of the operator-owned scratch volume.
//!
//! - `gatehouse scratch verify DIR [--json]` is the operator's post-deploy check. It exits 0
//!   only if every check passes, and 1 otherwise.
//! - `gatehouse scratch prepare DIR [--json]` runs exactly the check that `gatehouse node
//!   --scratch DIR` runs at start (it creates `DIR/gatehouse` with mode 0700 when absent). It
//!   exits 1 with the error code, such as `SCRATCH_UNSAFE`, when the check fails.

use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_scratch::ScratchReport;
use gatehouse_scratch::verify::VerifyReport;

use crate::output;

/// Arguments of `gatehouse scratch`.
#[derive(Debug, clap::Args)]
pub(crate) struct ScratchArgs {
    #[command(subcommand)]
    command: ScratchCommand,
}

#[derive(Debug, clap::Subcommand)]
enum ScratchCommand {
    /// Verify a mounted scratch directory: capacity, filesystem, permissions and a write,
    /// read-back and removal in a new private temporary directory. Leaves nothing behind.
    Verify(DirArgs),
    /// Run the node host's start check on a scratch directory, creating its private
    /// `gatehouse` directory (mode 0700) when absent. Never repairs an existing one.
    Prepare(DirArgs),
}

#[derive(Debug, clap::Args)]
struct DirArgs {
    /// The scratch directory, e.g. /sandbox/scratch.
    #[arg(value_name = "DIR")]
    dir: PathBuf,
    /// Print a JSON report instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `gatehouse scratch`.
pub(crate) fn run(args: ScratchArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ScratchCommand::Verify(dir_args) => Ok(run_verify(&dir_args)),
        ScratchCommand::Prepare(dir_args) => Ok(run_prepare(&dir_args)),
    }
}

fn run_verify(args: &DirArgs) -> ExitCode {
    let report = gatehouse_scratch::verify(&args.dir);
    match args.json {
        true => output::json(&serde_json::to_value(&report).unwrap_or(serde_json::Value::Null)),
        false => print_verify_text(&report),
    }
    match report.passed {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}

fn print_verify_text(report: &VerifyReport) {
    output::line(&format!("scratch directory: {}", report.path.display()));
    if let Some(capacity) = &report.capacity {
        output::line(&format!("total bytes: {}", capacity.total_bytes));
        output::line(&format!("available bytes: {}", capacity.available_bytes));
    }
    if let Some(filesystem) = &report.filesystem {
        output::line(&format!(
            "filesystem: {} ({}), device {}",
            filesystem.fs_type, filesystem.fs_magic, filesystem.device
        ));
    }
    for check in &report.checks {
        let verdict = match check.passed {
            true => "pass",
            false => "FAIL",
        };
        let code = check
            .code
            .map(|code| format!("[{code}] "))
            .unwrap_or_default();
        output::line(&format!(
            "{verdict} {:<20} {code}{}",
            check.name, check.detail
        ));
    }
    output::line(match report.passed {
        true => "result: pass",
        false => "result: FAIL",
    });
}

fn run_prepare(args: &DirArgs) -> ExitCode {
    match gatehouse_scratch::prepare(&args.dir) {
        Ok(report) => {
            match args.json {
                true => output::json(&prepare_json(&report)),
                false => print_prepare_text(&report),
            }
            ExitCode::SUCCESS
        }
        Err(err) => {
            if args.json {
                output::json(&serde_json::json!({
                    "ok": false,
                    "code": err.code(),
                    "message": err.to_string(),
                }));
            }
            output::error_line(&format!("error: {}: {err}", err.code()));
            ExitCode::from(1)
        }
    }
}

fn prepare_json(report: &ScratchReport) -> serde_json::Value {
    serde_json::json!({
        "ok": true,
        "root": report.root().display().to_string(),
        "privateDir": report.private_dir().display().to_string(),
        "created": report.created(),
        "capacity": report.capacity(),
        "filesystem": report.filesystem(),
    })
}

fn print_prepare_text(report: &ScratchReport) {
    let capacity = report.capacity();
    let filesystem = report.filesystem();
    let action = match report.created() {
        true => "created",
        false => "checked",
    };
    output::line(&format!(
        "{action} {} (mode 0700)",
        report.private_dir().display()
    ));
    output::line(&format!("total bytes: {}", capacity.total_bytes));
    output::line(&format!("available bytes: {}", capacity.available_bytes));
    output::line(&format!(
        "filesystem: {} ({}), device {}",
        filesystem.fs_type, filesystem.fs_magic, filesystem.device
    ));
}
