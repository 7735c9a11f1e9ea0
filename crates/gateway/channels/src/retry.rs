//! When a failed delivery is tried again, and when it is given up.
//!
//! Attempt `n` (counting from 0) that fails transiently is retried after `2^n` seconds, capped
//! at [`MAX_BACKOFF`], with jitter drawn from the upper half of that delay so replicas that
//! failed together do not retry together; a platform's `Retry-After` is honoured when it asks
//! for longer (up to [`MAX_RETRY_AFTER`]). After [`MAX_ATTEMPTS`] attempts the delivery is
//! given up (`delivery.failed`), about 15 minutes after the first when every attempt fails
//! fast.

use std::time::Duration;

/// The most attempts a delivery gets.
pub const MAX_ATTEMPTS: u32 = 10;

/// The longest backoff between two attempts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(300);

/// The longest `Retry-After` honoured as given; a longer one is capped.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3_600);

/// Returns how long to wait before the next attempt after `attempts` failed ones (this one
/// included), or `None` when the delivery is to be given up. `unit` in `[0, 1)` draws the
/// jitter.
#[must_use]
pub fn next_delay(attempts: u32, retry_after: Option<Duration>, unit: f64) -> Option<Duration> {
    if attempts >= MAX_ATTEMPTS {
        return None;
    }
    let exponent = attempts.saturating_sub(1).min(16);
    let backoff = Duration::from_secs(1_u64 << exponent).min(MAX_BACKOFF);
    let jittered = backoff.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0));
    Some(match retry_after {
        Some(asked) => jittered.max(asked.min(MAX_RETRY_AFTER)),
        None => jittered,
    })
}

/// Returns a uniform draw in `[0, 1)` for [`next_delay`]'s jitter.
#[must_use]
pub fn jitter_unit() -> f64 {
    let mut bytes = [0_u8; 4];
    if getrandom::fill(&mut bytes).is_err() {
        return 0.5;
    }
    f64::from(u32::from_le_bytes(bytes)) / (f64::from(u32::MAX) + 1.0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    #[test]
    fn backoff_grows_is_jittered_honours_retry_after_and_ends() {
        assert_eq!(next_delay(1, None, 0.0), Some(Duration::from_millis(500)));
        let high = next_delay(1, None, 0.999_999).unwrap();
        assert!(high > Duration::from_millis(999) && high <= Duration::from_secs(1));
        assert_eq!(next_delay(4, None, 0.0), Some(Duration::from_secs(4)));
        assert_eq!(next_delay(9, None, 0.0), Some(Duration::from_secs(128)));
        assert_eq!(
            next_delay(2, Some(Duration::from_secs(30)), 0.5),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            next_delay(2, Some(Duration::from_secs(86_400)), 0.5),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(next_delay(MAX_ATTEMPTS, None, 0.5), None);
        let unit = jitter_unit();
        assert!((0.0..1.0).contains(&unit));
    }
}
