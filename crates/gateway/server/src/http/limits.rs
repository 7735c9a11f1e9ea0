//! The rate limits of API keys: requests per minute (optional, set when the key is created) and
//! concurrent turns (the key's own limit, else its default share, see [`crate::shares`]). A
//! key over either is answered `429 RATE_LIMITED` with `Retry-After`. The operator token has no
//! limits.
//!
//! Both are counted by each Gateway process: behind several replicas a key may send up to its
//! limit to each one. Requests are counted in a window of [`WINDOW`] that starts with the
//! key's first request after the previous window ended; `Retry-After` is the rest of the window.
//! A key's turns are those its messages created that have not ended (the store says which);
//! `Retry-After` is then [`TURN_RETRY_AFTER_SECONDS`], since when a turn ends is not known.
//!
//! The counts belong to the key itself (its secret's hash), not to its name: a key revoked and
//! created again under the same name starts with nothing of the old one's. Each key's turns
//! have a lock of their own, so a key that waits on the store while it checks its turns holds
//! up no other key.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::Store;
use gatehouse_store::records::ApiKeyRecord;

use crate::http::error::ApiError;
use crate::http::error::store_error;

/// The window of a key's requests-per-minute limit.
pub(crate) const WINDOW: Duration = Duration::from_secs(60);

/// The `Retry-After` of a refusal for too many concurrent turns.
pub(crate) const TURN_RETRY_AFTER_SECONDS: u64 = 1;

/// The request windows and the unended turns of the keys that have limits.
#[derive(Debug, Default)]
pub(crate) struct KeyLimiter {
    /// By the key's secret hash.
    windows: parking_lot::Mutex<HashMap<String, Window>>,
    /// By the key's secret hash: the turns its messages created that were not seen ending.
    turns: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<Vec<String>>>>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    started: Instant,
    requests: u32,
}

/// A key's turn slots, held while one of its messages is admitted, so two messages of the key
/// cannot both take the last slot.
pub(crate) struct TurnSlots {
    held: tokio::sync::OwnedMutexGuard<Vec<String>>,
}

impl TurnSlots {
    /// Counts `turn_id` (the turn the message was admitted to) against the key until it ends.
    pub(crate) fn hold(mut self, turn_id: &str) {
        if !self.held.iter().any(|held| held == turn_id) {
            self.held.push(turn_id.to_owned());
        }
    }
}

impl KeyLimiter {
    /// Counts one request of `key` at `now`.
    ///
    /// # Errors
    /// `429 RATE_LIMITED` past the key's requests per minute.
    pub(crate) fn admit_request(&self, key: &ApiKeyRecord, now: Instant) -> Result<(), ApiError> {
        let Some(limit) = key.requests_per_minute else {
            return Ok(());
        };
        let mut windows = self.windows.lock();
        let window = windows.entry(key.secret_sha256.clone()).or_insert(Window {
            started: now,
            requests: 0,
        });
        if now.saturating_duration_since(window.started) >= WINDOW {
            *window = Window {
                started: now,
                requests: 0,
            };
        }
        if window.requests >= limit {
            let rest = WINDOW.saturating_sub(now.saturating_duration_since(window.started));
            let seconds = rest.as_secs() + u64::from(rest.subsec_nanos() > 0);
            return Err(ApiError::new(
                ErrorCode::RateLimited,
                format!("this key may send {limit} requests per minute; retry in {seconds} s"),
            )
            .with_retry_after(seconds.max(1)));
        }
        window.requests += 1;
        Ok(())
    }

    /// Returns the key's turn slots when one of its `limit` slots is free (after forgetting
    /// its turns that have ended).
    ///
    /// # Errors
    /// `429 RATE_LIMITED` when every slot is taken; a store failure.
    pub(crate) async fn reserve_turn(
        &self,
        store: &dyn Store,
        key: &ApiKeyRecord,
        limit: u32,
    ) -> Result<TurnSlots, ApiError> {
        let slots = Arc::clone(
            self.turns
                .lock()
                .entry(key.secret_sha256.clone())
                .or_default(),
        );
        let mut held = slots.lock_owned().await;
        let mut unended = Vec::with_capacity(held.len());
        for turn_id in held.iter() {
            let turn = store
                .turn(turn_id)
                .await
                .map_err(|error| store_error(&error))?;
            if turn.is_some_and(|turn| !turn.status.is_terminal()) {
                unended.push(turn_id.clone());
            }
        }
        *held = unended;
        if held.len() >= usize::try_from(limit).unwrap_or(usize::MAX) {
            return Err(ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "this key may have {limit} turns queued or running at once; retry when one ends"
                ),
            )
            .with_retry_after(TURN_RETRY_AFTER_SECONDS));
        }
        Ok(TurnSlots { held })
    }
}
