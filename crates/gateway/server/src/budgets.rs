//! Token budgets: how many tokens an API key and a session may use per UTC day, and one turn in
//! all.
//!
//! The daily budgets are checked before a message is admitted, against the sums the store keeps
//! (each model call is added to its turn as it answers, see [`crate::turns::runtime::TurnSink`]),
//! so every replica of one store enforces the same budget. A key or a session whose turns
//! admitted today used at least its budget (`totalTokens`) is refused with `429
//! BUDGET_EXHAUSTED` and a `Retry-After` of the seconds to the next UTC midnight; nothing is
//! admitted. The check is not a reservation: turns admitted before the budget ran out finish,
//! so a day's use can pass the budget by what those turns use (bounded by the turn ceiling).
//!
//! The turn ceiling (`--turn-max-tokens`) is sent to the runtime with the turn (the native
//! worker asks each model call for at most the tokens left, and stops once passed) and checked
//! again by the Gateway after each reported call, so a node host that ignores it still has its
//! turn ended with `TURN_BUDGET_EXCEEDED`.

use gatehouse_store::Store;
use gatehouse_store::records::ApiKeyRecord;
use gatehouse_store::records::DAY_MS;
use gatehouse_store::records::UsageScope;

use gatehouse_store::StoreError;

/// The token budgets of the Gateway's flags (keys carry their own, `--tokens-per-day`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BudgetConfig {
    /// The most tokens one session's turns may use per UTC day (`--session-tokens-per-day`);
    /// `None`: no budget.
    pub session_tokens_per_day: Option<u64>,
    /// The most tokens one turn may use (`--turn-max-tokens`); `None`: no ceiling.
    pub turn_max_tokens: Option<u64>,
}

/// Returns the start of the UTC day of `now_ms`.
pub(crate) fn day_start_ms(now_ms: i64) -> i64 {
    now_ms.div_euclid(DAY_MS) * DAY_MS
}

/// Returns the whole seconds from `now_ms` to the next UTC midnight, at least 1.
pub(crate) fn seconds_to_next_day(now_ms: i64) -> u64 {
    let left_ms = day_start_ms(now_ms) + DAY_MS - now_ms;
    u64::try_from(left_ms.div_euclid(1000).max(1)).unwrap_or(1)
}

/// Why a message was not admitted for its budget.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BudgetError {
    /// A daily budget is used up: `429 BUDGET_EXHAUSTED` with `Retry-After`.
    #[error("{message}")]
    Exhausted {
        /// What was used of which budget.
        message: String,
        /// The seconds to the next UTC day.
        retry_after_seconds: u64,
    },
    /// The sums could not be read; nothing is admitted unchecked.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Checks the daily budgets of `key` (when the message comes with one) and of `session_key`
/// before a message is admitted.
///
/// # Errors
/// [`BudgetError::Exhausted`] when either budget is used up; [`BudgetError::Store`] when the
/// sums cannot be read.
pub(crate) async fn check_daily(
    store: &dyn Store,
    config: &BudgetConfig,
    key: Option<&ApiKeyRecord>,
    session_key: &str,
    now_ms: i64,
) -> Result<(), BudgetError> {
    let since = day_start_ms(now_ms);
    let budgets = [
        key.and_then(|key| {
            key.tokens_per_day
                .map(|budget| (UsageScope::ApiKey(&key.name), budget, "this API key"))
        }),
        config
            .session_tokens_per_day
            .map(|budget| (UsageScope::Session(session_key), budget, "this session")),
    ];
    for (scope, budget, whose) in budgets.into_iter().flatten() {
        let used = store.tokens_used(scope, since).await?;
        if used >= budget {
            return Err(BudgetError::Exhausted {
                message: format!(
                    "{whose} used {used} of its {budget} tokens for today (UTC); retry after midnight UTC"
                ),
                retry_after_seconds: seconds_to_next_day(now_ms),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_day_is_a_utc_day_and_the_wait_runs_to_its_end() {
        let noon = 20_000 * DAY_MS + DAY_MS / 2;
        assert_eq!(day_start_ms(noon), 20_000 * DAY_MS);
        assert_eq!(day_start_ms(20_000 * DAY_MS), 20_000 * DAY_MS);
        assert_eq!(seconds_to_next_day(noon), 43_200);
        assert_eq!(seconds_to_next_day(21_000 * DAY_MS - 1), 1);
        assert_eq!(seconds_to_next_day(21_000 * DAY_MS), 86_400);
    }
}
