//! `gatehouse mock-model`: the deterministic mock model over HTTP (DESIGN §10).

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `gatehouse mock-model`.
#[derive(Debug, clap::Args)]
pub(crate) struct MockModelArgs {
    /// The address to listen on (port 0 picks a free port; the first line printed names it).
    #[arg(long, default_value = gatehouse_mockmodel::DEFAULT_LISTEN)]
    listen: SocketAddr,
}

/// Runs `gatehouse mock-model` until SIGINT or SIGTERM.
///
/// The first line on stdout is `mock model listening on http://ADDR`, with the bound port.
pub(crate) fn run(args: MockModelArgs) -> anyhow::Result<ExitCode> {
    let runtime = crate::signals::runtime()?;
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("cannot listen on {}", args.listen))?;
        let local_addr = listener.local_addr()?;
        crate::output::line(&format!("mock model listening on http://{local_addr}"));
        gatehouse_mockmodel::serve(listener, crate::signals::shutdown_signal()).await?;
        tracing::info!("mock model stopped");
        Ok(ExitCode::SUCCESS)
    })
}
