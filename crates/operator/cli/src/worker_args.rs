//! The worker flags of `gatehouse node` and `gatehouse up`: retirement, and the hosts a
//! session's repository may be fetched from (`--source-allow-hosts`).

use gatehouse_harness::worker::DEFAULT_WORKER_IDLE;
use gatehouse_harness::worker::WorkerRetirement;

use crate::exit::UsageError;

/// The longest `--worker-idle-seconds` takes: one week.
const MAX_WORKER_IDLE_SECONDS: u64 = 7 * 24 * 3600;

/// When idle native workers give their slot back: the `--worker-retirement` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum RetirementMode {
    /// A new session that finds every slot taken gets the least recently used idle worker's
    /// slot, and a worker idle for `--worker-idle-seconds` is stopped.
    Idle,
    /// A worker keeps its slot until its session is stopped; a new session past capacity is
    /// refused with WORKER_CAPACITY_EXHAUSTED.
    Never,
}

/// How native workers give their slot back.
#[derive(Debug, Clone, Copy, Default, clap::Args)]
pub(crate) struct RetirementArgs {
    /// When an idle native worker (one with no running turn) gives its slot back: `idle`
    /// (default; the least recently used idle worker when a new session needs a slot, and any
    /// worker idle for --worker-idle-seconds) or `never`. A running worker is never displaced,
    /// and a retired worker's session workspace stays on disk.
    #[arg(long, value_enum, value_name = "WHEN")]
    worker_retirement: Option<RetirementMode>,
    /// How long a native worker may stay idle before it is stopped, in seconds (default 600,
    /// at most 604800); only with `--worker-retirement idle`.
    #[arg(long, value_name = "SECONDS")]
    worker_idle_seconds: Option<u64>,
}

impl RetirementArgs {
    /// Returns the retirement these flags ask for, the config file's `worker-retirement` and
    /// `worker-idle-seconds` filling unset flags.
    ///
    /// # Errors
    /// A usage error for an idle time of 0 or past one week, or one given with `never`.
    pub(crate) fn resolve(
        self,
        file_mode: Option<RetirementMode>,
        file_idle_seconds: Option<u64>,
    ) -> anyhow::Result<WorkerRetirement> {
        let mode = self
            .worker_retirement
            .or(file_mode)
            .unwrap_or(RetirementMode::Idle);
        let idle_seconds = self.worker_idle_seconds.or(file_idle_seconds);
        match (mode, idle_seconds) {
            (RetirementMode::Never, None) => Ok(WorkerRetirement::Never),
            (RetirementMode::Never, Some(_)) => Err(UsageError::new(
                "--worker-idle-seconds applies only with --worker-retirement idle",
            )
            .into()),
            (RetirementMode::Idle, None) => Ok(WorkerRetirement::Idle {
                after: DEFAULT_WORKER_IDLE,
            }),
            (RetirementMode::Idle, Some(seconds)) => {
                match (1..=MAX_WORKER_IDLE_SECONDS).contains(&seconds) {
                    true => Ok(WorkerRetirement::Idle {
                        after: std::time::Duration::from_secs(seconds),
                    }),
                    false => Err(UsageError::new(format!(
                        "--worker-idle-seconds must be between 1 and {MAX_WORKER_IDLE_SECONDS}"
                    ))
                    .into()),
                }
            }
        }
    }
}

/// Returns the node host's `source-allow-hosts` of `entries` (`--source-allow-hosts`, else the
/// config file's list).
///
/// # Errors
/// A usage error naming the first entry that is no host name, address or network.
pub(crate) fn source_allow_list(
    entries: &[String],
) -> Result<gatehouse_policy::repository::SourceAllowList, UsageError> {
    gatehouse_policy::repository::SourceAllowList::new(entries)
        .map_err(|error| UsageError::new(error.to_string()))
}
