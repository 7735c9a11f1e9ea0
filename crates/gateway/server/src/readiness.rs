//! [`SharedCheck`]: a readiness check that concurrent `/readyz` callers share.
//!
//! `/readyz` needs no token, so whoever reaches the port can call it at will; without sharing,
//! each call would be one round trip to the store. A [`SharedCheck`] runs the check for the
//! first caller, makes concurrent callers wait for that result, and reuses it for
//! [`STORE_PING_REUSE`]: the store sees at most one ping per interval, however many callers.

use std::future::Future;
use std::time::Duration;
use std::time::Instant;

/// How long a store ping's result answers `/readyz`: short enough that a probe sees an outage
/// or a recovery within about a second.
pub(crate) const STORE_PING_REUSE: Duration = Duration::from_secs(1);

/// How long a store ping may take before `/readyz` reports the store unavailable.
pub(crate) const STORE_PING_TIMEOUT: Duration = Duration::from_secs(5);

/// A check whose outcome is shared by concurrent callers and reused for a while.
#[derive(Debug)]
pub(crate) struct SharedCheck {
    reuse: Duration,
    last: tokio::sync::Mutex<Option<(Instant, bool)>>,
}

impl SharedCheck {
    /// Returns a check whose outcome is reused for `reuse` after it finished.
    pub(crate) fn new(reuse: Duration) -> Self {
        Self {
            reuse,
            last: tokio::sync::Mutex::new(None),
        }
    }

    /// Returns the last outcome while it is fresh; otherwise runs `check` (callers arriving
    /// meanwhile wait for it, and get its outcome) and records its outcome.
    pub(crate) async fn run<F, Fut>(&self, check: F) -> bool
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = bool>,
    {
        let mut last = self.last.lock().await;
        if let Some((at, passed)) = *last
            && at.elapsed() < self.reuse
        {
            return passed;
        }
        let passed = check().await;
        *last = Some((Instant::now(), passed));
        passed
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use std::sync::atomic::Ordering;
    use std::time::Duration;

    use super::SharedCheck;

    async fn counted(check: &SharedCheck, runs: &AtomicUsize, outcome: bool) -> bool {
        check
            .run(|| async {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::task::yield_now().await;
                outcome
            })
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn concurrent_callers_share_one_run_while_it_is_fresh() {
        let check = Arc::new(SharedCheck::new(Duration::from_secs(3600)));
        let runs = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..64)
            .map(|_| {
                let (check, runs) = (Arc::clone(&check), Arc::clone(&runs));
                tokio::spawn(async move { counted(&check, &runs, false).await })
            })
            .collect();
        for caller in callers {
            assert!(!caller.await.unwrap(), "every caller gets the one outcome");
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_stale_outcome_is_checked_again() {
        let check = SharedCheck::new(Duration::ZERO);
        let runs = AtomicUsize::new(0);
        assert!(!counted(&check, &runs, false).await);
        assert!(counted(&check, &runs, true).await, "the recovery is seen");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
}
