//! `GET /v1/usage`: the tokens and model calls of turns, summed by session, API key, agent or
//! UTC day, from the counts the store keeps with each turn (see [`crate::budgets`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::Query;
use axum::extract::State;
use gatehouse_api::usage::UsageGroupBy;
use gatehouse_api::usage::UsageParams;
use gatehouse_api::usage::UsageRowView;
use gatehouse_api::usage::UsageTotals;
use gatehouse_api::usage::UsageView;
use gatehouse_store::records::DAY_MS;
use gatehouse_store::records::UsageGroup;
use gatehouse_store::records::UsageGrouping;
use gatehouse_store::records::UsageQuery;
use gatehouse_store::records::UsageRow;

use crate::GatewayState;
use crate::http::error::ApiError;
use crate::http::error::store_error;

/// The group of turns no API key sent (the operator token, channels), grouping by key.
const NO_KEY_GROUP: &str = "-";

/// The agent of a session whose key does not name one.
const DEFAULT_AGENT: &str = "main";

/// `GET /v1/usage?groupBy=session|key|agent|day&from=MS&to=MS`.
///
/// # Errors
/// `400 INVALID_REQUEST` for a `from` after `to` (or an unknown `groupBy`, by the query's
/// decoding); a store failure.
pub(crate) async fn get_usage(
    State(state): State<Arc<GatewayState>>,
    Query(params): Query<UsageParams>,
) -> Result<Json<UsageView>, ApiError> {
    if let (Some(from), Some(to)) = (params.from, params.to)
        && from > to
    {
        return Err(ApiError::invalid_request("from must not be after to"));
    }
    let group_by = match params.group_by {
        // Agents are read from session keys, so the store groups by session.
        UsageGroupBy::Session | UsageGroupBy::Agent => UsageGrouping::Session,
        UsageGroupBy::Key => UsageGrouping::ApiKey,
        UsageGroupBy::Day => UsageGrouping::Day,
    };
    let rows = state
        .store
        .usage(&UsageQuery {
            session_key: None,
            group_by,
            from_ms: params.from,
            to_ms: params.to,
        })
        .await
        .map_err(|error| store_error(&error))?;
    let mut groups: BTreeMap<String, UsageTotals> = BTreeMap::new();
    for row in rows {
        let sum = groups
            .entry(group_name(params.group_by, &row.group))
            .or_default();
        *sum = sum.plus(totals(&row));
    }
    Ok(Json(UsageView {
        rows: groups
            .into_iter()
            .map(|(group, totals)| UsageRowView { group, totals })
            .collect(),
    }))
}

/// Returns the name `group` is answered under.
fn group_name(group_by: UsageGroupBy, group: &UsageGroup) -> String {
    match group {
        UsageGroup::NoKey => String::from(NO_KEY_GROUP),
        UsageGroup::Day(day) => day_name(*day),
        UsageGroup::Name(session) if group_by == UsageGroupBy::Agent => agent_of(session),
        UsageGroup::Name(name) => name.clone(),
    }
}

/// Returns the agent of a session key: `<agent>` of `agent:<agent>:…`, else `main`.
fn agent_of(session_key: &str) -> String {
    let mut parts = session_key.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some("agent"), Some(agent), Some(_)) if !agent.is_empty() => agent.to_owned(),
        _ => String::from(DEFAULT_AGENT),
    }
}

/// Returns a day (days since 1970-01-01) as `YYYY-MM-DD`.
fn day_name(day: i64) -> String {
    jiff::Timestamp::from_second(day.saturating_mul(DAY_MS / 1000))
        .map(|start| start.to_zoned(jiff::tz::TimeZone::UTC).date().to_string())
        .unwrap_or_else(|_| day.to_string())
}

/// Returns every session's sums, by session key.
///
/// # Errors
/// A store failure.
pub(crate) async fn by_session(
    store: &dyn gatehouse_store::Store,
) -> Result<std::collections::HashMap<String, UsageTotals>, ApiError> {
    let rows = store
        .usage(&UsageQuery {
            session_key: None,
            group_by: UsageGrouping::Session,
            from_ms: None,
            to_ms: None,
        })
        .await
        .map_err(|error| store_error(&error))?;
    Ok(rows
        .iter()
        .filter_map(|row| match &row.group {
            UsageGroup::Name(session) => Some((session.clone(), totals(row))),
            UsageGroup::NoKey | UsageGroup::Day(_) => None,
        })
        .collect())
}

/// Returns the sums of a store row.
pub(crate) fn totals(row: &UsageRow) -> UsageTotals {
    UsageTotals {
        turns: row.turns,
        model_calls: row.model_calls,
        input_tokens: row.input_tokens,
        cached_input_tokens: row.cached_input_tokens,
        output_tokens: row.output_tokens,
        total_tokens: row.total_tokens,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agents_come_from_session_keys_and_days_are_utc_dates() {
        assert_eq!(agent_of("agent:ops:matrix:direct:abc"), "ops");
        assert_eq!(agent_of("agent:main:main"), "main");
        assert_eq!(agent_of("app1-session"), "main");
        assert_eq!(agent_of("agent::x"), "main");
        assert_eq!(day_name(0), "1970-01-01");
        assert_eq!(day_name(20_794), "2026-12-07");
    }
}
