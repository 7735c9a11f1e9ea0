//! `gatehouse worker`: the native worker child that the node host starts per hosted session. The
//! loop lives in `gatehouse_harness::worker_child`; this command only gives it a runtime.

use std::process::ExitCode;

/// Arguments of `gatehouse worker` (none: everything arrives on stdin).
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {}

/// Runs the worker until stdin closes.
pub(crate) fn run(_args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(gatehouse_harness::worker_child::run_worker())?;
    Ok(ExitCode::SUCCESS)
}
