//! What every polling channel's loop shares: one replica at a time holds the channel's lease in
//! the store (judged by the store's clock), a failed poll is retried with jittered backoff up to
//! a minute while the channel shows `degraded`, and a typing indicator is kept up while an
//! admitted message's turn runs.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_store::Store;
use tokio_util::sync::CancellationToken;

use super::Channel;
use super::LoopParts;
use super::LoopStatus;
use super::StoreClock;

/// How often a replica that does not hold a channel's lease tries to take it.
pub(crate) const STANDBY_POLL: Duration = Duration::from_secs(2);

/// The longest wait after failed polls.
pub(crate) const MAX_POLL_BACKOFF: Duration = Duration::from_secs(60);

/// The longest a typing indicator is kept up for one turn.
pub(crate) const MAX_TYPING: Duration = Duration::from_secs(600);

/// What one turn of a loop came to.
pub(crate) enum Step {
    /// It polled and judged what the answer asked.
    Synced,
    /// Another replica holds the channel.
    Standby,
}

/// The pace of a polling loop: after each step it keeps the channel's status and waits: not at
/// all after a poll, [`STANDBY_POLL`] while another replica holds the channel, with backoff
/// after a failure.
#[derive(Default)]
pub(crate) struct Pacing {
    failures: u32,
}

impl Pacing {
    /// Records `step` of `channel` (`kind` names the platform in the log) and waits before
    /// the next; returns `false` when `shutdown` came first.
    pub(crate) async fn after(
        &mut self,
        channel: &Channel,
        kind: &str,
        step: Result<Step, String>,
        shutdown: &CancellationToken,
    ) -> bool {
        let pause = match step {
            Ok(Step::Synced) => {
                self.failures = 0;
                channel.set_status(LoopStatus::Synced(std::time::Instant::now()));
                return !shutdown.is_cancelled();
            }
            Ok(Step::Standby) => {
                channel.set_status(LoopStatus::Standby);
                STANDBY_POLL
            }
            Err(message) => {
                self.failures = self.failures.saturating_add(1);
                tracing::warn!(channel = %channel.spec.name, kind, error = %message, "a channel's poll failed");
                channel.set_status(LoopStatus::Failing(message));
                backoff(self.failures)
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => false,
            () = tokio::time::sleep(pause) => true,
        }
    }
}

/// The wait after `failures` failures in a row: doubling from 2 s up to [`MAX_POLL_BACKOFF`],
/// jittered down by up to half.
pub(crate) fn backoff(failures: u32) -> Duration {
    let backoff = Duration::from_secs(1_u64 << failures.min(6)).min(MAX_POLL_BACKOFF);
    backoff.mul_f64(0.5 + 0.5 * gatehouse_channels::retry::jitter_unit())
}

/// Takes or renews the channel's lease for this replica; returns whether it holds it.
pub(crate) async fn hold(
    parts: &LoopParts,
    clock: &StoreClock,
    name: &str,
) -> Result<bool, String> {
    let lease_ms = i64::try_from(parts.lease.as_millis()).unwrap_or(i64::MAX);
    parts
        .store
        .hold_channel(name, &parts.holder, lease_ms, store_now(clock).await?)
        .await
        .map_err(|error| format!("cannot hold the channel's lease: {error}"))
}

/// The store's time, which the channel's lease is judged by.
pub(crate) async fn store_now(clock: &StoreClock) -> Result<i64, String> {
    clock
        .now_ms()
        .await
        .map_err(|error| format!("cannot read the store's clock: {error}"))
}

/// Calls `show(true)` every `every` until `turn_id` ends (at most [`MAX_TYPING`]) or
/// `shutdown`, then `show(false)`; the platform drops an indicator that is not renewed.
pub(crate) fn keep_typing<F, Fut>(
    store: &Arc<dyn Store>,
    turn_id: String,
    every: Duration,
    shutdown: CancellationToken,
    show: F,
) where
    F: Fn(bool) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let store = Arc::clone(store);
    tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let checks = every.as_secs().max(1);
        'shown: while started.elapsed() < MAX_TYPING {
            show(true).await;
            for _ in 0..checks {
                tokio::select! {
                    () = shutdown.cancelled() => break 'shown,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                match store.turn(&turn_id).await {
                    Ok(Some(turn)) if !turn.status.is_terminal() => {}
                    _ => break 'shown,
                }
            }
        }
        show(false).await;
    });
}
