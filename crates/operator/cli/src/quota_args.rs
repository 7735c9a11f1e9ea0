//! The quota and retention flags of `gatehouse gateway` and `gatehouse up`.

use std::time::Duration;

use gatehouse_gateway::DEFAULT_AUDIT_RETENTION;
use gatehouse_gateway::DEFAULT_CHECKPOINT_QUOTA_BYTES;
use gatehouse_gateway::DEFAULT_CHECKPOINTS_KEPT;
use gatehouse_gateway::DEFAULT_MEDIA_QUOTA_BYTES;
use gatehouse_gateway::GatewayConfig;

/// How much the Gateway's media store and each session's checkpoints may hold, and how long the
/// audit trail keeps its rows.
#[derive(Debug, clap::Args)]
pub(crate) struct QuotaArgs {
    /// The most bytes of file content one session's retained checkpoints may refer to (default
    /// 64 MiB). A turn whose checkpoint would pass it fails with CHECKPOINT_QUOTA_EXCEEDED and
    /// the session keeps its last good checkpoint.
    #[arg(long, env = "GATEHOUSE_CHECKPOINT_QUOTA_BYTES", value_name = "BYTES")]
    checkpoint_quota_bytes: Option<u64>,
    /// How many of its newest checkpoints each session keeps (default 1, at least 1); blobs
    /// only older checkpoints referred to are deleted.
    #[arg(long, env = "GATEHOUSE_CHECKPOINTS_KEPT", value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..))]
    checkpoints_kept: Option<u32>,
    /// The most bytes of blobs the media store may hold: uploads, reply artifacts and
    /// checkpoints (default 10 GiB). New bytes past it are refused with MEDIA_QUOTA_EXCEEDED.
    #[arg(long, env = "GATEHOUSE_MEDIA_QUOTA_BYTES", value_name = "BYTES")]
    media_quota_bytes: Option<u64>,
    /// How many days the audit trail keeps a row (default 90); older rows are deleted at start
    /// and then hourly. 0 keeps every row.
    #[arg(long, env = "GATEHOUSE_AUDIT_RETENTION_DAYS", value_name = "DAYS")]
    audit_retention_days: Option<u32>,
    /// The most tokens (`totalTokens`) one session's turns may use per UTC day (default: no
    /// budget). Past it the session's messages are refused with 429 BUDGET_EXHAUSTED until the
    /// next UTC day; an API key's own budget is `keys create --tokens-per-day`.
    #[arg(long, env = "GATEHOUSE_SESSION_TOKENS_PER_DAY", value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..))]
    session_tokens_per_day: Option<u64>,
    /// The most tokens one turn may use (default: no ceiling): sent to the runtime as each
    /// model call's output limit, and a turn that passes it fails with TURN_BUDGET_EXCEEDED.
    #[arg(long, env = "GATEHOUSE_TURN_MAX_TOKENS", value_name = "N",
        value_parser = clap::value_parser!(u64).range(1..))]
    turn_max_tokens: Option<u64>,
}

/// The hidden test hook that shortens the window of the audit's per-key rate limit
/// ([`gatehouse_gateway::AuditConfig::limit_window`]), in milliseconds.
const AUDIT_LIMIT_WINDOW_ENV: &str = "GATEHOUSE_TEST_AUDIT_LIMIT_WINDOW_MS";

/// The seconds of one day of `--audit-retention-days`.
const SECONDS_PER_DAY: u64 = 24 * 60 * 60;

impl QuotaArgs {
    /// Fills the unset flags from the config file's values.
    pub(crate) fn or_file(self, file: &crate::config_file::GatewayFile) -> Self {
        Self {
            checkpoint_quota_bytes: self.checkpoint_quota_bytes.or(file.checkpoint_quota_bytes),
            checkpoints_kept: self.checkpoints_kept.or(file.checkpoints_kept),
            media_quota_bytes: self.media_quota_bytes.or(file.media_quota_bytes),
            audit_retention_days: self.audit_retention_days.or(file.audit_retention_days),
            session_tokens_per_day: self.session_tokens_per_day.or(file.session_tokens_per_day),
            turn_max_tokens: self.turn_max_tokens.or(file.turn_max_tokens),
        }
    }

    /// Applies the flags, or the documented defaults, to `config`.
    pub(crate) fn apply(&self, config: &mut GatewayConfig) {
        config.retention.checkpoint_quota_bytes = self
            .checkpoint_quota_bytes
            .unwrap_or(DEFAULT_CHECKPOINT_QUOTA_BYTES);
        config.retention.checkpoints_kept = self
            .checkpoints_kept
            .unwrap_or(DEFAULT_CHECKPOINTS_KEPT)
            .max(1);
        config.media_quota_bytes = self.media_quota_bytes.unwrap_or(DEFAULT_MEDIA_QUOTA_BYTES);
        config.budgets = gatehouse_gateway::budgets::BudgetConfig {
            session_tokens_per_day: self.session_tokens_per_day,
            turn_max_tokens: self.turn_max_tokens,
        };
        config.audit.retention = match self.audit_retention_days {
            None => Some(DEFAULT_AUDIT_RETENTION),
            Some(0) => None,
            Some(days) => Some(Duration::from_secs(u64::from(days) * SECONDS_PER_DAY)),
        };
        if let Some(window) = std::env::var(AUDIT_LIMIT_WINDOW_ENV)
            .ok()
            .and_then(|ms| ms.parse::<u64>().ok())
        {
            config.audit.limit_window = Duration::from_millis(window.max(1));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::path::PathBuf;
    use std::time::Duration;

    use clap::Parser;
    use pretty_assertions::assert_eq;

    use crate::config_file::GatewayFile;
    use crate::quota_args::QuotaArgs;

    #[derive(Debug, Parser)]
    struct Flags {
        #[command(flatten)]
        quotas: QuotaArgs,
    }

    /// Returns the audit retention that `flags` and the config file `file` give the Gateway.
    fn retention(flags: &[&str], file: &str) -> Option<Duration> {
        let file: GatewayFile = toml::from_str(file).unwrap();
        let flags =
            Flags::try_parse_from(std::iter::once("gatehouse").chain(flags.iter().copied()))
                .unwrap();
        let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let mut config = gatehouse_gateway::GatewayConfig::with_defaults(PathBuf::new(), listen);
        flags.quotas.or_file(&file).apply(&mut config);
        config.audit.retention
    }

    #[test]
    fn issue_33_the_audit_retention_is_90_days_unless_a_flag_or_the_file_says_otherwise() {
        const DAY: Duration = Duration::from_secs(24 * 60 * 60);
        assert_eq!(retention(&[], ""), Some(90 * DAY));
        assert_eq!(
            retention(&["--audit-retention-days", "7"], ""),
            Some(7 * DAY)
        );
        assert_eq!(retention(&["--audit-retention-days", "0"], ""), None);
        assert_eq!(retention(&[], "audit-retention-days = 30"), Some(30 * DAY));
        assert_eq!(
            retention(
                &["--audit-retention-days", "1"],
                "audit-retention-days = 30"
            ),
            Some(DAY)
        );
        assert_eq!(retention(&[], "audit-retention-days = 0"), None);
    }
}
