//! `gatehouse gateway`: the dedicated Gateway. It has no model configuration.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use gatehouse_gateway::GatewayConfig;
use gatehouse_gateway::secrets::OPERATOR_TOKEN_ENV;

use crate::exit::UsageError;

/// Arguments of `gatehouse gateway`.
#[derive(Debug, clap::Args)]
pub(crate) struct GatewayArgs {
    /// The Gateway's private state directory (created 0700).
    #[arg(long, env = "GATEHOUSE_STATE_DIR")]
    state: PathBuf,
    /// The address to listen on.
    #[arg(long, env = "GATEHOUSE_LISTEN", default_value = gatehouse_gateway::DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// The base URL nodes use to reach this Gateway, written into setup codes (default: the Host
    /// header of the request that issues the code).
    #[arg(long, env = "GATEHOUSE_PUBLIC_URL")]
    public_url: Option<String>,
    /// A configuration file (TOML). Accepted for forward compatibility; the flags above are the
    /// settings read today.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The interval of keep-alive ticks on node links, in milliseconds.
    #[arg(long, default_value_t = 15_000, hide = true)]
    tick_interval_ms: u64,
}

/// Runs `gatehouse gateway` until SIGINT or SIGTERM.
pub(crate) fn run(args: GatewayArgs) -> anyhow::Result<ExitCode> {
    if let Some(config) = &args.config
        && !config.is_file()
    {
        return Err(UsageError::new(format!("no config file at {}", config.display())).into());
    }
    // Everything the Gateway writes is private to it.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let mut config = GatewayConfig::with_defaults(args.state, args.listen);
    config.public_url = args.public_url;
    config.tick_interval = Duration::from_millis(args.tick_interval_ms.max(100));
    config.operator_token_override = std::env::var(OPERATOR_TOKEN_ENV).ok();
    let runtime = crate::signals::runtime()?;
    runtime.block_on(async move {
        let running = crate::embedded::start_gateway(config).await?;
        crate::embedded::announce(&running, "gatehouse gateway");
        crate::signals::shutdown_signal().await;
        tracing::info!("shutting down");
        running.shutdown.cancel();
        running.wait().await?;
        Ok(ExitCode::SUCCESS)
    })
}
