//! `gatehouse gateway`: the dedicated Gateway. It has no model configuration.

use gatehouse_protocol::runtime::RuntimeKind;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use gatehouse_gateway::GatewayConfig;
use gatehouse_gateway::OPERATOR_TOKEN_ENV;

use crate::exit::UsageError;

/// Arguments of `gatehouse gateway`.
#[derive(Debug, clap::Args)]
pub(crate) struct GatewayArgs {
    /// The Gateway's private state directory (created 0700).
    #[arg(long, env = "GATEHOUSE_STATE_DIR")]
    state: Option<PathBuf>,
    /// The address to listen on (default 127.0.0.1:7420).
    #[arg(long, env = "GATEHOUSE_LISTEN")]
    listen: Option<SocketAddr>,
    /// The base URL nodes use to reach this Gateway, written into setup codes (default: the Host
    /// header of the request that issues the code).
    #[arg(long, env = "GATEHOUSE_PUBLIC_URL")]
    public_url: Option<String>,
    /// The Harness runtime turns run on: `native` (default) or `codex`. The Gateway holds no
    /// model configuration either way.
    #[arg(long, env = "GATEHOUSE_RUNTIME", value_enum)]
    runtime: Option<RuntimeKind>,
    /// How Codex command approvals are answered: `accept` (default), `accept-for-session` or
    /// `decline`. Every decision is audited.
    #[arg(long)]
    codex_command_approval: Option<String>,
    /// How Codex file-change approvals are answered: `accept` (default), `accept-for-session`
    /// or `decline`.
    #[arg(long)]
    codex_file_approval: Option<String>,
    #[command(flatten)]
    memory_skills: crate::memory_setup::MemorySkillsArgs,
    #[command(flatten)]
    quotas: crate::quota_args::QuotaArgs,
    #[command(flatten)]
    shares: crate::share_args::ShareArgs,
    #[command(flatten)]
    store: crate::store_args::StoreArgs,
    /// Move a session whose node has been away this many seconds to another connected node at
    /// its next turn, restoring its workspace there from the last checkpoint (default: never;
    /// a session waits for its node, or for an operator's `POST /v1/sessions/{key}/move`).
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..))]
    move_sessions_after: Option<u64>,
    /// This replica's id among the Gateway processes on one store (1 to 128 letters, digits,
    /// `.`, `_`, `-`); default: the host name and the listen address. Two live processes with
    /// one id are refused (`REPLICA_ID_IN_USE`).
    #[arg(long, env = "GATEHOUSE_REPLICA_ID")]
    replica_id: Option<String>,
    /// The URL the other replicas reach this one at (`http://HOST:PORT`); default:
    /// `http://LISTEN-ADDRESS`, with the host name for `0.0.0.0`.
    #[arg(long, env = "GATEHOUSE_ADVERTISE_URL")]
    advertise_url: Option<String>,
    /// How long this replica's lease lasts without renewal, 1 to 300 (default 5): how long the
    /// other replicas wait before taking over the turns and nodes of one that died or stalled.
    #[arg(long, value_name = "SECONDS", value_parser = clap::value_parser!(u64).range(1..=300))]
    lease_seconds: Option<u64>,
    /// A TOML file with the same settings in kebab-case (`state`, `listen`, `public-url`,
    /// `max-concurrent-turns`, `media-max-bytes`, `media-quota-bytes`,
    /// `checkpoint-quota-bytes`, `checkpoints-kept`, `audit-retention-days`, `runtime`,
    /// `codex-command-approval`, `codex-file-approval`, `memory-embedder`, `memory-model-dir`,
    /// `skills-dir`, `bundled-skills-dir`, `store`, `media`, `move-sessions-after`,
    /// `replica-id`, `advertise-url`, `lease-seconds`, `key-max-streams`, `max-streams`,
    /// `key-concurrent-turns`, `key-media-quota-bytes`, `session-tokens-per-day`,
    /// `turn-max-tokens`); flags and their variables win over it.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The interval of keep-alive ticks on node links, in milliseconds.
    #[arg(long, default_value_t = 15_000, hide = true)]
    tick_interval_ms: u64,
}

/// The hidden test hook that pauses each worktree apply
/// ([`GatewayConfig::worktree_apply_delay`]), in milliseconds.
const WORKTREE_APPLY_DELAY_ENV: &str = "GATEHOUSE_TEST_WORKTREE_APPLY_DELAY_MS";

/// Returns the pause before each worktree apply: zero unless the hidden test hook
/// `GATEHOUSE_TEST_WORKTREE_APPLY_DELAY_MS` names one.
pub(crate) fn worktree_apply_delay() -> Duration {
    std::env::var(WORKTREE_APPLY_DELAY_ENV)
        .ok()
        .and_then(|ms| ms.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_millis)
}

/// Returns the replica settings, checked: a valid id, an `http(s)://` advertise URL without
/// credentials, and a lease of 1 to 300 seconds.
fn replica_config(
    replica_id: Option<String>,
    advertise_url: Option<String>,
    lease_seconds: Option<u64>,
) -> anyhow::Result<gatehouse_gateway::ReplicaConfig> {
    if let Some(id) = &replica_id {
        gatehouse_gateway::check_replica_id(id).map_err(UsageError::new)?;
    }
    if let Some(url) = &advertise_url {
        gatehouse_gateway::check_advertise_url(url).map_err(UsageError::new)?;
    }
    let lease = match lease_seconds {
        Some(seconds) if !(1..=300).contains(&seconds) => {
            return Err(UsageError::new("lease-seconds must be 1 to 300").into());
        }
        Some(seconds) => Duration::from_secs(seconds),
        None => gatehouse_gateway::DEFAULT_LEASE,
    };
    Ok(gatehouse_gateway::ReplicaConfig {
        replica_id,
        advertise_url,
        lease,
    })
}

/// Runs `gatehouse gateway` until SIGINT or SIGTERM.
pub(crate) fn run(args: GatewayArgs) -> anyhow::Result<ExitCode> {
    let file: crate::config_file::GatewayFile = crate::config_file::load(args.config.as_deref())?;
    let memory_skills = args.memory_skills.or_file(&file);
    let quotas = args.quotas.or_file(&file);
    let shares = args.shares.or_file(&file);
    let store = args.store.or_file(&file);
    let channels = file.channels()?;
    let Some(state) = args.state.or(file.state) else {
        return Err(UsageError::new("pass --state DIR (or `state` in the config file)").into());
    };
    let default_listen: SocketAddr = gatehouse_gateway::DEFAULT_LISTEN.parse()?;
    let listen = args.listen.or(file.listen).unwrap_or(default_listen);
    // Everything the Gateway writes is private to it.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let mut config = GatewayConfig::with_defaults(state, listen);
    config.channels = channels;
    config.public_url = args.public_url.or(file.public_url);
    if let Some(max) = file.max_concurrent_turns {
        config.max_concurrent_turns = max;
    }
    if let Some(max) = file.media_max_bytes {
        config.media_max_bytes = max;
    }
    quotas.apply(&mut config);
    shares.apply(&mut config)?;
    store.apply(&mut config)?;
    config.session_move_after = match args.move_sessions_after.or(file.move_sessions_after) {
        Some(0) => return Err(UsageError::new("move-sessions-after must be at least 1").into()),
        seconds => seconds.map(Duration::from_secs),
    };
    config.replica = replica_config(
        args.replica_id.or(file.replica_id),
        args.advertise_url.or(file.advertise_url),
        args.lease_seconds.or(file.lease_seconds),
    )?;
    config.tick_interval = Duration::from_millis(args.tick_interval_ms.max(100));
    config.worktree_apply_delay = worktree_apply_delay();
    config.operator_token_override = std::env::var(OPERATOR_TOKEN_ENV).ok();
    let memory_embedder = memory_skills.apply(&mut config)?;
    let mut extensions = match args.runtime.or(file.runtime).unwrap_or_default() {
        RuntimeKind::Native => gatehouse_gateway::Extensions::default(),
        RuntimeKind::Codex => {
            let command = args.codex_command_approval.or(file.codex_command_approval);
            let file_change = args.codex_file_approval.or(file.codex_file_approval);
            crate::codex_setup::gateway_extensions(gatehouse_codex_driver::runtime::CodexConfig {
                command_approval: crate::codex_setup::approval(
                    "--codex-command-approval",
                    command.as_deref(),
                )?,
                file_change_approval: crate::codex_setup::approval(
                    "--codex-file-approval",
                    file_change.as_deref(),
                )?,
                ..gatehouse_codex_driver::runtime::CodexConfig::default()
            })
        }
    };
    extensions.memory_embedder = memory_embedder;
    let runtime = crate::signals::runtime()?;
    runtime.block_on(async move {
        let running = crate::embedded::start_gateway_with(config, extensions).await?;
        crate::embedded::announce(&running, "gatehouse gateway");
        crate::signals::until_shutdown(&running).await;
        tracing::info!("shutting down");
        running.shutdown.cancel();
        running.wait().await?;
        Ok(ExitCode::SUCCESS)
    })
}
