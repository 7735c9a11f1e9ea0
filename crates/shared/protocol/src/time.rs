//! The wall clock in the unit of the link's times: Unix milliseconds.
//!
//! It lives here, at the bottom of the workspace, because every side that stamps or judges a
//! `*_ms` time (the Gateway, the node host, the CLI) already depends on this crate.

/// Returns the current time in Unix milliseconds.
///
/// A clock set before 1970 reads as `0`, and one past the range of `i64` as `i64::MAX`: callers
/// compare these values with stored ones and never need an error.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use crate::time::now_ms;

    #[test]
    fn the_clock_reads_unix_milliseconds() {
        let seconds = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let now_ms = now_ms();
        // Between 2020 and 2200, and within a second of the clock read just before.
        assert!(
            now_ms > 1_577_836_800_000 && now_ms < 7_258_118_400_000,
            "{now_ms}"
        );
        assert!((now_ms / 1000).abs_diff(i64::try_from(seconds).unwrap()) <= 1);
    }
}
