//! `GET /v1/audit`: the audit trail, oldest first, a page after or before a seq.

use gatehouse_api::audit::AuditEntry;
use gatehouse_api::audit::AuditList;
use gatehouse_api::audit::AuditQuery;
use gatehouse_api::audit::MAX_AUDIT_PAGE;
use std::sync::Arc;

use axum::Json;
use axum::extract::Query;
use axum::extract::State;

use crate::GatewayState;
use crate::http::error::ApiError;
use crate::http::error::store_error;

/// `GET /v1/audit?after=SEQ` or `?before=SEQ`, with `limit=N`: at most `limit` (default and
/// cap [`MAX_AUDIT_PAGE`]) events after `after` (0 when both are left out), or the newest ones
/// before `before`; oldest first either way.
///
/// # Errors
/// `400 INVALID_REQUEST` for both `after` and `before`, or a `limit` outside 1 to
/// [`MAX_AUDIT_PAGE`]; a store failure.
pub(crate) async fn list_audit(
    State(state): State<Arc<GatewayState>>,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    let limit = query.limit.unwrap_or(MAX_AUDIT_PAGE);
    if !(1..=MAX_AUDIT_PAGE).contains(&limit) {
        return Err(ApiError::invalid_request(format!(
            "limit must be between 1 and {MAX_AUDIT_PAGE}"
        )));
    }
    let events = match (query.after, query.before) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid_request(
                "give after= to read forward or before= to read backwards, not both",
            ));
        }
        (after, None) => state.store.audit_after(after.unwrap_or(0), limit).await,
        (None, Some(before)) => state.store.audit_before(before, limit).await,
    }
    .map_err(|error| store_error(&error))?;
    let events = events
        .into_iter()
        .map(|event| AuditEntry {
            seq: event.seq,
            at: event.at_ms,
            actor: event.actor,
            action: event.action,
            outcome: event.outcome,
            reason_code: event.reason_code,
            details: event.details,
        })
        .collect();
    Ok(Json(AuditList { events }))
}
