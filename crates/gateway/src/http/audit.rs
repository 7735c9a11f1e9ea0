//! `GET /v1/audit`: the audit trail, oldest first, after a seq.

use gatehouse_api::audit::AuditEntry;
use gatehouse_api::audit::AuditList;
use gatehouse_api::audit::AuditQuery;
use std::sync::Arc;

use axum::Json;
use axum::extract::Query;
use axum::extract::State;

use crate::GatewayState;
use crate::http::error::ApiError;
use crate::http::error::store_error;

/// The most events one answer carries; the client pages with `after=`.
const AUDIT_PAGE: u32 = 1000;

/// `GET /v1/audit?after=SEQ`: at most [`AUDIT_PAGE`] events after `after` (0 when left out).
pub(crate) async fn list_audit(
    State(state): State<Arc<GatewayState>>,
    Query(query): Query<AuditQuery>,
) -> Result<Json<AuditList>, ApiError> {
    let events = state
        .store
        .audit_after(query.after.unwrap_or(0), AUDIT_PAGE)
        .await
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
