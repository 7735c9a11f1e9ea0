//! The `gatehouse` binary: parses arguments, dispatches to the subcommand, and turns the final
//! error into an exit code (0 success, 1 runtime failure, 2 usage or configuration error).

mod bench;
mod deploy_cmd;
mod exit;
mod output;
mod scratch_cmd;

use std::process::ExitCode;

use clap::Parser;
use clap::Subcommand;

use crate::exit::UsageError;

/// Gatehouse runs AI agents with a hard split between a trusted Gateway and an untrusted Harness.
#[derive(Debug, Parser)]
#[command(name = "gatehouse", version, about, long_about = None, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run a benchmark and print its figures with their ratio to a baseline measured in the same run.
    Bench(bench::BenchArgs),
    /// Render and validate Kubernetes manifests from an installation file.
    Deploy(deploy_cmd::DeployArgs),
    /// Check an operator-owned scratch volume.
    Scratch(scratch_cmd::ScratchArgs),
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // `--help` and `--version` are a parse result, not a failure.
            let _ = err.print();
            return match err.use_stderr() {
                true => ExitCode::from(2),
                false => ExitCode::SUCCESS,
            };
        }
    };
    init_tracing();
    let result = match cli.command {
        Command::Bench(args) => bench::run(args),
        Command::Deploy(args) => deploy_cmd::run(args),
        Command::Scratch(args) => scratch_cmd::run(args),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            output::error_line(&format!("error: {err:#}"));
            match err.downcast_ref::<UsageError>() {
                Some(_) => ExitCode::from(2),
                None => ExitCode::from(1),
            }
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("GATEHOUSE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}
