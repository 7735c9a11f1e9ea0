//! The store's clock as the channels read it: a polling channel's lease and a delivery's claim
//! are judged by it, as the cluster's leases are, so a replica whose own clock is off never
//! takes a channel or a delivery another replica still holds. It is read from the store once
//! per [`CLOCK_REFRESH`] and followed in between through this replica's monotonic clock.
//!
//! When an outbox entry becomes due is still written with the clock of the replica that queued
//! it; a replica whose clock runs ahead of the store's delays the first attempt of what it
//! queued by that much, and nothing is ever sent twice for it.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_store::Store;
use gatehouse_store::StoreError;

/// How long a reading of the store's clock is followed before it is read again.
pub(crate) const CLOCK_REFRESH: Duration = Duration::from_secs(60);

/// The store's clock, for one task.
pub(crate) struct StoreClock {
    store: Arc<dyn Store>,
    /// The store's time at the last reading, and when (this replica's monotonic clock).
    reading: parking_lot::Mutex<Option<(i64, Instant)>>,
}

impl StoreClock {
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            reading: parking_lot::Mutex::new(None),
        }
    }

    /// Returns the store's time now (Unix milliseconds).
    ///
    /// # Errors
    /// The store's failure to answer when it must be read again.
    pub(crate) async fn now_ms(&self) -> Result<i64, StoreError> {
        let reading = *self.reading.lock();
        if let Some((at_ms, at)) = reading
            && at.elapsed() < CLOCK_REFRESH
        {
            return Ok(at_ms.saturating_add(elapsed_ms(at)));
        }
        let asked = Instant::now();
        let store_ms = self.store.channel_clock_ms().await?;
        // The answer was read somewhere within the round trip: take its middle.
        let at = asked + asked.elapsed() / 2;
        *self.reading.lock() = Some((store_ms, at));
        Ok(store_ms.saturating_add(elapsed_ms(at)))
    }
}

fn elapsed_ms(since: Instant) -> i64 {
    i64::try_from(since.elapsed().as_millis()).unwrap_or(i64::MAX)
}
