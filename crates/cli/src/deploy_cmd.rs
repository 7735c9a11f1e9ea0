//! `gatehouse deploy`: Kubernetes manifests from an installation file.

use std::process::ExitCode;

/// Arguments of `gatehouse deploy`.
#[derive(Debug, clap::Args)]
pub(crate) struct DeployArgs {}

/// Runs `gatehouse deploy`.
pub(crate) fn run(_args: DeployArgs) -> anyhow::Result<ExitCode> {
    Err(anyhow::Error::new(crate::exit::UsageError::new(
        "deploy is not implemented yet",
    )))
}
