//! `gatehouse scratch`: checks of the operator-owned scratch volume.

use std::process::ExitCode;

/// Arguments of `gatehouse scratch`.
#[derive(Debug, clap::Args)]
pub(crate) struct ScratchArgs {}

/// Runs `gatehouse scratch`.
pub(crate) fn run(_args: ScratchArgs) -> anyhow::Result<ExitCode> {
    Err(anyhow::Error::new(crate::exit::UsageError::new(
        "scratch is not implemented yet",
    )))
}
