//! [`Audit`]: records every mutation and denial, without content or secrets, with every field
//! bounded.
//!
//! This is the one place where audit rows are shaped:
//! - every string (the actor, the action, the outcome, the reason code, and every string and key
//!   inside `details`) is cut to [`MAX_AUDIT_FIELD_BYTES`] with [`TRUNCATION_MARKER`];
//! - `details` keeps at most [`MAX_AUDIT_ITEMS`] members per array or object and
//!   [`MAX_AUDIT_DEPTH`] levels, and a row whose details still exceed [`MAX_AUDIT_DETAILS_BYTES`]
//!   keeps only their size;
//! - rows caused by a node or by an unauthenticated peer go through [`Audit::record_limited`]:
//!   at most [`LIMITED_ROWS_PER_WINDOW`] such rows per key (a node id or a peer address) per
//!   [`LIMIT_WINDOW`], the rest counted and written as one `audit.suppressed` summary row (and
//!   one log line) per key and window;
//! - rows caused by a caller of the API (an API key, whatever its scopes, the operator token,
//!   or a console session of either) go through [`Audit::record_caller`], the same limit keyed
//!   by the caller's actor (`key:NAME`, `operator`), so one key flooding an audited route
//!   (issue 33: 1,000 no-op aborts in 5 s) cannot push the others' rows out of the trail;
//! - rows older than [`AuditConfig::retention`] are deleted by [`prune_periodically`].
//!
//! So a hostile node, peer or key adds at most `LIMITED_ROWS_PER_WINDOW + 1` rows per minute,
//! each at most about `5 × 256 + 4096` bytes, and the trail holds at most the retention's worth.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_store::Store;
use gatehouse_store::records::NewAuditEvent;
use parking_lot::Mutex;

use gatehouse_protocol::time::now_ms;

/// The longest string kept in an audit field (identifiers, codes, names), in bytes.
pub const MAX_AUDIT_FIELD_BYTES: usize = 256;

/// The members kept per array or object of `details`.
pub(crate) const MAX_AUDIT_ITEMS: usize = 32;

/// The nesting levels kept in `details`.
pub(crate) const MAX_AUDIT_DEPTH: usize = 4;

/// The largest `details` kept, serialized, in bytes; larger ones are replaced by their size.
pub(crate) const MAX_AUDIT_DETAILS_BYTES: usize = 4096;

/// Appended to every string that was cut.
pub const TRUNCATION_MARKER: &str = "…[truncated]";

/// How many rows one node or one peer address may add through [`Audit::record_limited`] per
/// [`LIMIT_WINDOW`] before further rows are only counted.
pub const LIMITED_ROWS_PER_WINDOW: u32 = 30;

/// The window of [`LIMITED_ROWS_PER_WINDOW`] (the default of [`AuditConfig::limit_window`]).
pub const LIMIT_WINDOW: Duration = Duration::from_secs(60);

/// How long the audit trail keeps a row by default: 90 days.
pub const DEFAULT_AUDIT_RETENTION: Duration = Duration::from_secs(90 * 24 * 60 * 60);

/// The longest pause between two prunings of the audit trail; a shorter retention prunes
/// every tenth of the retention (at least every [`MIN_PRUNE_INTERVAL`]).
pub(crate) const MAX_PRUNE_INTERVAL: Duration = Duration::from_secs(60 * 60);

/// The shortest pause between two prunings, whatever the retention.
const MIN_PRUNE_INTERVAL: Duration = Duration::from_millis(100);

/// How long the audit trail keeps its rows, and the window of its rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AuditConfig {
    /// How long a row is kept: the Gateway deletes rows older than this at start and then
    /// periodically (every replica of a store does; the deletes are idempotent). `None` keeps
    /// every row. Defaults to [`DEFAULT_AUDIT_RETENTION`].
    pub retention: Option<Duration>,
    /// The window of the per-key rate limit, [`LIMIT_WINDOW`]; the CLI shortens it only for
    /// tests, from the hidden `GATEHOUSE_TEST_AUDIT_LIMIT_WINDOW_MS`.
    pub limit_window: Duration,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            retention: Some(DEFAULT_AUDIT_RETENTION),
            limit_window: LIMIT_WINDOW,
        }
    }
}

/// The most keys the limiter tracks; past it, new keys share one window, so a flood from many
/// addresses cannot grow the table.
pub(crate) const MAX_LIMITED_KEYS: usize = 4096;

/// The key shared by every key past [`MAX_LIMITED_KEYS`].
const OVERFLOW_KEY: &str = "*";

/// One audit row, before it is bounded.
#[derive(Debug, Clone)]
pub struct AuditRow<'a> {
    /// Who acted: `operator`, `node:<id>`, `node:unauthenticated`, ...
    pub actor: &'a str,
    /// What: for example `node.connect` or `gateway.tool.call`.
    pub action: &'a str,
    /// `allowed`, `denied`, `succeeded`, `failed`, ...
    pub outcome: &'a str,
    /// The stable code of a refusal or failure.
    pub reason_code: Option<&'a str>,
    /// Context; never file content or secrets.
    pub details: serde_json::Value,
}

/// Whether a limited row was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Limited {
    /// The row was written; log it too.
    Recorded,
    /// The key is over its budget: the row was only counted, and must not be logged either.
    Suppressed,
}

/// Appends events to the audit trail in the store. A failure to record is logged, never hidden
/// and never fatal to the request that caused it.
#[derive(Clone)]
pub struct Audit {
    store: Arc<dyn Store>,
    /// The windows of nodes and peers ([`Audit::record_limited`]).
    limiter: Arc<Limiter>,
    /// The windows of API callers ([`Audit::record_caller`]), apart from the nodes' and peers',
    /// so a flood of peer addresses that fills [`MAX_LIMITED_KEYS`] never folds a key into the
    /// shared overflow window.
    callers: Arc<Limiter>,
}

impl Audit {
    /// Returns an audit trail backed by `store`, rate-limited per [`LIMIT_WINDOW`].
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self::with_limit_window(store, LIMIT_WINDOW)
    }

    /// Returns an audit trail backed by `store` whose rate limit counts per `limit_window`.
    pub fn with_limit_window(store: Arc<dyn Store>, limit_window: Duration) -> Self {
        Self {
            store,
            limiter: Arc::new(Limiter::with_window(limit_window)),
            callers: Arc::new(Limiter::with_window(limit_window)),
        }
    }

    /// Returns the window of the rate limit.
    pub fn limit_window(&self) -> Duration {
        self.limiter.window
    }

    /// Records one event the Gateway itself caused (a garbage collection, a session it
    /// moved), every field bounded, without a rate limit: rows a caller, a node or a peer
    /// causes go through [`Audit::record_caller`] or [`Audit::record_limited`]. `details` must
    /// not contain file content or secrets.
    pub async fn record(
        &self,
        actor: &str,
        action: &str,
        outcome: &str,
        reason_code: Option<&str>,
        details: serde_json::Value,
    ) {
        self.write(AuditRow {
            actor,
            action,
            outcome,
            reason_code,
            details,
        })
        .await;
    }

    /// Records one event that the caller of an API request caused, with `actor` (the
    /// principal's `key:NAME` or `operator`) as both the row's actor and its rate-limit key:
    /// [`Audit::record_limited`] for every principal. An admin key is limited like any key, and
    /// so is the operator token, which is often a script's token: a runaway script floods the
    /// trail as well as a hostile key, and the summary row still counts what was suppressed.
    ///
    /// # Returns
    /// Whether the row was written, so the caller logs only written rows.
    pub(crate) async fn record_caller(
        &self,
        actor: &str,
        action: &str,
        outcome: &str,
        reason_code: Option<&str>,
        details: serde_json::Value,
    ) -> Limited {
        let row = AuditRow {
            actor,
            action,
            outcome,
            reason_code,
            details,
        };
        self.record_in(&self.callers, actor, row).await
    }

    /// Records `row` unless `key` (a node id, a peer address or a caller's actor) already added
    /// [`LIMITED_ROWS_PER_WINDOW`] rows in this window; a suppressed row is counted and
    /// summarised once the window ends. Before the row, writes the summary of the key's
    /// previous window if it suppressed anything.
    ///
    /// # Returns
    /// Whether the row was written, so the caller logs only written rows.
    pub async fn record_limited(&self, key: &str, row: AuditRow<'_>) -> Limited {
        self.record_in(&self.limiter, key, row).await
    }

    /// Records `row` under `key`'s window of `limiter`, as [`Audit::record_limited`] says.
    async fn record_in(&self, limiter: &Limiter, key: &str, row: AuditRow<'_>) -> Limited {
        let decision = limiter.admit(key, Instant::now());
        if let Some(summary) = decision.summary {
            self.write_summary(&summary).await;
        }
        match decision.limited {
            Limited::Recorded => self.write(row).await,
            Limited::Suppressed => {}
        }
        decision.limited
    }

    /// Writes the summaries of every window that ended with suppressed rows; called
    /// periodically so a key that went quiet is still summarised.
    pub async fn flush_summaries(&self) {
        let now = Instant::now();
        let mut ended = self.limiter.take_ended(now);
        ended.extend(self.callers.take_ended(now));
        for summary in ended {
            self.write_summary(&summary).await;
        }
    }

    async fn write_summary(&self, summary: &Summary) {
        tracing::warn!(key = %bounded_str(&summary.key), suppressed = summary.suppressed, "audit rows suppressed by the rate limit");
        self.write(AuditRow {
            actor: "gateway",
            action: "audit.suppressed",
            outcome: "summarised",
            reason_code: None,
            details: serde_json::json!({
                "key": summary.key,
                "suppressed": summary.suppressed,
                "windowSeconds": self.limiter.window.as_secs(),
            }),
        })
        .await;
    }

    async fn write(&self, row: AuditRow<'_>) {
        let event = NewAuditEvent {
            at_ms: now_ms(),
            actor: bounded_str(row.actor).into_owned(),
            action: bounded_str(row.action).into_owned(),
            outcome: bounded_str(row.outcome).into_owned(),
            reason_code: row.reason_code.map(|code| bounded_str(code).into_owned()),
            details: bounded_details(&row.details),
        };
        if let Err(error) = self.store.append_audit(&event).await {
            tracing::error!(error = %error, action = %event.action, outcome = %event.outcome, "cannot record an audit event");
        }
    }
}

/// Deletes the audit rows older than `retention` at once and then periodically (every tenth
/// of the retention, at most every [`MAX_PRUNE_INTERVAL`]) until `shutdown`. A failure is
/// logged and retried at the next tick. Several replicas may run it on one store: each delete
/// removes only rows that are old, whoever deletes them first.
pub(crate) async fn prune_periodically(
    store: Arc<dyn Store>,
    retention: Duration,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let interval = (retention / 10).clamp(MIN_PRUNE_INTERVAL, MAX_PRUNE_INTERVAL);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let retention_ms = i64::try_from(retention.as_millis()).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let cutoff_ms = now_ms().saturating_sub(retention_ms);
        match store.prune_audit(cutoff_ms).await {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, cutoff_ms, "pruned audit rows past the retention"),
            Err(error) => tracing::warn!(error = %error, "cannot prune the audit trail"),
        }
    }
}

/// Returns `text` cut to at most [`MAX_AUDIT_FIELD_BYTES`] (on a character boundary) followed by
/// [`TRUNCATION_MARKER`], or `text` itself when it is short enough.
pub fn bounded_str(text: &str) -> Cow<'_, str> {
    if text.len() <= MAX_AUDIT_FIELD_BYTES {
        return Cow::Borrowed(text);
    }
    let mut end = MAX_AUDIT_FIELD_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}{TRUNCATION_MARKER}", &text[..end]))
}

/// Returns text a peer chose (a node's error message, a path it reported, what a Codex
/// app-server said) fit for one text log line: cut like [`bounded_str`], with line breaks,
/// other control characters, quotes and backslashes escaped, so it can neither flood the log
/// nor forge a line of it. Log it with `%`.
pub fn loggable(text: &dyn std::fmt::Display) -> String {
    bounded_str(&text.to_string()).escape_debug().to_string()
}

/// Returns `details` with every bound of this module applied.
pub(crate) fn bounded_details(details: &serde_json::Value) -> serde_json::Value {
    let bounded = bounded_value(details, 0);
    let size = bounded.to_string().len();
    match size <= MAX_AUDIT_DETAILS_BYTES {
        true => bounded,
        false => serde_json::json!({"truncated": true, "bytes": size}),
    }
}

fn bounded_value(value: &serde_json::Value, depth: usize) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
        Value::String(text) => Value::String(bounded_str(text).into_owned()),
        Value::Array(_) | Value::Object(_) if depth >= MAX_AUDIT_DEPTH => {
            Value::String(format!("{TRUNCATION_MARKER} nested"))
        }
        Value::Array(items) => {
            let mut kept: Vec<Value> = items
                .iter()
                .take(MAX_AUDIT_ITEMS)
                .map(|item| bounded_value(item, depth + 1))
                .collect();
            if items.len() > MAX_AUDIT_ITEMS {
                kept.push(Value::String(format!(
                    "{TRUNCATION_MARKER} {} more",
                    items.len() - MAX_AUDIT_ITEMS
                )));
            }
            Value::Array(kept)
        }
        Value::Object(members) => {
            let mut kept = serde_json::Map::new();
            for (key, member) in members.iter().take(MAX_AUDIT_ITEMS) {
                kept.insert(
                    bounded_str(key).into_owned(),
                    bounded_value(member, depth + 1),
                );
            }
            if members.len() > MAX_AUDIT_ITEMS {
                kept.insert(
                    String::from(TRUNCATION_MARKER),
                    Value::from(members.len() - MAX_AUDIT_ITEMS),
                );
            }
            Value::Object(kept)
        }
    }
}

/// The suppressed rows of one key's ended window.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Summary {
    key: String,
    suppressed: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Decision {
    limited: Limited,
    summary: Option<Summary>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    recorded: u32,
    suppressed: u64,
}

/// Fixed windows per key: [`LIMITED_ROWS_PER_WINDOW`] rows, then only counting.
#[derive(Debug)]
struct Limiter {
    /// The length of one window.
    window: Duration,
    windows: Mutex<HashMap<String, Window>>,
}

impl Default for Limiter {
    fn default() -> Self {
        Self::with_window(LIMIT_WINDOW)
    }
}

impl Limiter {
    fn with_window(window: Duration) -> Self {
        Self {
            window,
            windows: Mutex::new(HashMap::new()),
        }
    }

    fn admit(&self, key: &str, now: Instant) -> Decision {
        let mut windows = self.windows.lock();
        let key = match windows.contains_key(key) || windows.len() < MAX_LIMITED_KEYS {
            true => key,
            false => OVERFLOW_KEY,
        };
        let window = windows.entry(key.to_owned()).or_insert(Window {
            started: now,
            recorded: 0,
            suppressed: 0,
        });
        let mut summary = None;
        if now.duration_since(window.started) >= self.window {
            if window.suppressed > 0 {
                summary = Some(Summary {
                    key: key.to_owned(),
                    suppressed: window.suppressed,
                });
            }
            *window = Window {
                started: now,
                recorded: 0,
                suppressed: 0,
            };
        }
        let limited = match window.recorded < LIMITED_ROWS_PER_WINDOW {
            true => {
                window.recorded += 1;
                Limited::Recorded
            }
            false => {
                window.suppressed += 1;
                Limited::Suppressed
            }
        };
        Decision { limited, summary }
    }

    /// Removes every ended window and returns the summaries of those that suppressed rows.
    fn take_ended(&self, now: Instant) -> Vec<Summary> {
        let mut windows = self.windows.lock();
        let mut summaries = Vec::new();
        windows.retain(|key, window| {
            let ended = now.duration_since(window.started) >= self.window;
            if ended && window.suppressed > 0 {
                summaries.push(Summary {
                    key: key.clone(),
                    suppressed: window.suppressed,
                });
            }
            !ended
        });
        summaries
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn peer_text_is_logged_on_one_line_and_within_the_field_bound() {
        let forged = format!(
            "no\n2026-12-01T00:00:00Z ERROR forged \"line\"\u{1b}[31m{}",
            "z".repeat(10_000)
        );
        let logged = loggable(&forged);
        assert!(
            !logged.contains('\n') && !logged.contains('\u{1b}'),
            "{logged}"
        );
        assert!(
            logged.starts_with("no\\n2026-12-01T00:00:00Z ERROR forged \\\"line\\\"\\u{1b}[31mzzz"),
            "{logged}"
        );
        assert!(logged.ends_with(TRUNCATION_MARKER), "{logged}");
        assert!(
            logged.len() < 2 * MAX_AUDIT_FIELD_BYTES,
            "{} bytes",
            logged.len()
        );
    }

    #[test]
    fn finding_5_every_audit_string_is_cut_with_a_marker() {
        let long = "é".repeat(1000);
        let cut = bounded_str(&long);
        assert!(cut.ends_with(TRUNCATION_MARKER));
        assert!(cut.len() <= MAX_AUDIT_FIELD_BYTES + TRUNCATION_MARKER.len());
        assert_eq!(bounded_str("short"), "short");

        let details = serde_json::json!({
            "sessionKey": "s".repeat(10_000),
            "list": (0..100).collect::<Vec<u32>>(),
            "deep": {"a": {"b": {"c": {"d": {"e": 1}}}}},
        });
        let bounded = bounded_details(&details);
        assert!(
            bounded["sessionKey"]
                .as_str()
                .unwrap()
                .ends_with(TRUNCATION_MARKER)
        );
        assert_eq!(
            bounded["list"].as_array().unwrap().len(),
            MAX_AUDIT_ITEMS + 1
        );
        assert_eq!(
            bounded["deep"]["a"]["b"]["c"],
            serde_json::json!(format!("{TRUNCATION_MARKER} nested"))
        );
        assert!(bounded.to_string().len() <= MAX_AUDIT_DETAILS_BYTES);

        let wide: serde_json::Map<String, serde_json::Value> = (0..MAX_AUDIT_ITEMS)
            .map(|index| (format!("k{index}"), serde_json::json!("v".repeat(300))))
            .collect();
        let bounded = bounded_details(&serde_json::Value::Object(wide));
        assert_eq!(bounded["truncated"], true);
    }

    #[test]
    fn finding_5_a_key_gets_its_budget_then_one_summary_per_window() {
        let limiter = Limiter::default();
        let start = Instant::now();
        let mut recorded = 0;
        for _ in 0..1000 {
            let decision = limiter.admit("peer:a", start);
            assert_eq!(decision.summary, None);
            if decision.limited == Limited::Recorded {
                recorded += 1;
            }
        }
        assert_eq!(recorded, LIMITED_ROWS_PER_WINDOW);
        // Another key has its own budget.
        assert_eq!(limiter.admit("peer:b", start).limited, Limited::Recorded);
        // The next window starts with the summary of the previous one.
        let later = start + LIMIT_WINDOW;
        let decision = limiter.admit("peer:a", later);
        assert_eq!(decision.limited, Limited::Recorded);
        assert_eq!(
            decision.summary,
            Some(Summary {
                key: "peer:a".into(),
                suppressed: 1000 - u64::from(LIMITED_ROWS_PER_WINDOW),
            })
        );
        // A quiet key is summarised by the periodic flush, and its window forgotten.
        for _ in 0..LIMITED_ROWS_PER_WINDOW + 5 {
            limiter.admit("peer:c", later);
        }
        let summaries = limiter.take_ended(later + LIMIT_WINDOW);
        assert_eq!(
            summaries,
            vec![Summary {
                key: "peer:c".into(),
                suppressed: 5
            }]
        );
        assert!(limiter.windows.lock().is_empty());
    }

    #[tokio::test]
    async fn peers_filling_the_table_never_fold_a_caller_into_the_overflow_window() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(
            gatehouse_store::sqlite::SqliteStore::open(&dir.path().join("audit.db"))
                .await
                .unwrap(),
        );
        let audit = Audit::new(Arc::clone(&store));
        for index in 0..MAX_LIMITED_KEYS + 10 {
            audit
                .limiter
                .admit(&format!("peer:{index}"), Instant::now());
        }
        let recorded = audit
            .record_caller(
                "key:app",
                "session.abort",
                "succeeded",
                None,
                serde_json::json!({}),
            )
            .await;
        assert_eq!(recorded, Limited::Recorded);
        assert!(audit.callers.windows.lock().contains_key("key:app"));
        assert!(!audit.callers.windows.lock().contains_key(OVERFLOW_KEY));
    }

    #[test]
    fn finding_5_the_limiter_table_is_bounded() {
        let limiter = Limiter::default();
        let now = Instant::now();
        for index in 0..MAX_LIMITED_KEYS + 100 {
            limiter.admit(&format!("peer:{index}"), now);
        }
        assert_eq!(limiter.windows.lock().len(), MAX_LIMITED_KEYS + 1);
    }
}
