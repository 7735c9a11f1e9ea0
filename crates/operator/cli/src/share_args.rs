//! The share flags of `gatehouse gateway` and `gatehouse up`: what one API key may hold of the
//! Gateway unless the key sets its own share (`gatehouse keys create --max-streams …`), and the
//! Gateway's total of open streams. See `docs/operations.md`, "Sharing one Gateway".

use gatehouse_gateway::shares::DEFAULT_KEY_MAX_STREAMS;
use gatehouse_gateway::shares::DEFAULT_MAX_STREAMS;
use gatehouse_gateway::shares::MAX_STREAMS_LIMIT;
use gatehouse_gateway::shares::ShareConfig;

use gatehouse_gateway::GatewayConfig;

use crate::exit::UsageError;

/// The default shares of keys and the total of streams.
#[derive(Debug, clap::Args)]
pub(crate) struct ShareArgs {
    /// The event streams and long polls one key may hold open at once, unless the key sets
    /// its own (default 64). Past it the key is answered 429 STREAM_SHARE_EXHAUSTED.
    #[arg(long, env = "GATEHOUSE_KEY_MAX_STREAMS", value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_STREAMS_LIMIT)))]
    key_max_streams: Option<u32>,
    /// The event streams and long polls this Gateway process holds open at once, every key and
    /// the operator together (default 4096, and at most three quarters of the open-files
    /// limit, which the Gateway raises to its hard limit at start).
    #[arg(long, env = "GATEHOUSE_MAX_STREAMS", value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_STREAMS_LIMIT)))]
    max_streams: Option<u32>,
    /// The turns one key may have queued or running at once, unless the key sets its own
    /// (default: half the worker capacity of the smallest linked node and at most half of
    /// max-concurrent-turns, at least 1). Past it the key is answered 429 RATE_LIMITED.
    #[arg(long, env = "GATEHOUSE_KEY_CONCURRENT_TURNS", value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..))]
    key_concurrent_turns: Option<u32>,
    /// The media bytes one key may hold (its uploads, and the checkpoints and worktree versions
    /// of the sessions it created), unless the key sets its own (default: a quarter of
    /// --media-quota-bytes). Past it the key is answered 507 KEY_MEDIA_QUOTA_EXCEEDED.
    #[arg(long, env = "GATEHOUSE_KEY_MEDIA_QUOTA_BYTES", value_name = "BYTES")]
    key_media_quota_bytes: Option<u64>,
}

impl ShareArgs {
    /// Fills the unset flags from the config file's values.
    pub(crate) fn or_file(self, file: &crate::config_file::GatewayFile) -> Self {
        Self {
            key_max_streams: self.key_max_streams.or(file.key_max_streams),
            max_streams: self.max_streams.or(file.max_streams),
            key_concurrent_turns: self.key_concurrent_turns.or(file.key_concurrent_turns),
            key_media_quota_bytes: self.key_media_quota_bytes.or(file.key_media_quota_bytes),
        }
    }

    /// Applies the flags, or the documented defaults, to `config`.
    ///
    /// # Errors
    /// A usage error for a count of 0 or past [`MAX_STREAMS_LIMIT`] (the config file's values
    /// are not checked by the flag parser).
    pub(crate) fn apply(&self, config: &mut GatewayConfig) -> Result<(), UsageError> {
        let counts = [
            ("key-max-streams", self.key_max_streams),
            ("max-streams", self.max_streams),
            ("key-concurrent-turns", self.key_concurrent_turns),
        ];
        for (name, value) in counts {
            if value.is_some_and(|value| !(1..=MAX_STREAMS_LIMIT).contains(&value)) {
                return Err(UsageError::new(format!(
                    "{name} must be between 1 and {MAX_STREAMS_LIMIT}"
                )));
            }
        }
        config.shares = ShareConfig {
            key_max_streams: self.key_max_streams.unwrap_or(DEFAULT_KEY_MAX_STREAMS),
            max_streams: self.max_streams.unwrap_or(DEFAULT_MAX_STREAMS),
            key_concurrent_turns: self.key_concurrent_turns,
            key_media_quota_bytes: self.key_media_quota_bytes,
        };
        Ok(())
    }
}
