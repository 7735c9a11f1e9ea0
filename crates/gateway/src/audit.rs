//! [`Audit`]: records every mutation and denial, without content or secrets.

use std::sync::Arc;

use gatehouse_store::Store;
use gatehouse_store::model::NewAuditEvent;

use crate::clock::now_ms;

/// Appends events to the audit trail in the store. A failure to record is logged, never hidden
/// and never fatal to the request that caused it.
#[derive(Clone)]
pub struct Audit {
    store: Arc<dyn Store>,
}

impl Audit {
    /// Returns an audit trail backed by `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self { store }
    }

    /// Records one event. `details` must not contain file content or secrets.
    pub async fn record(
        &self,
        actor: &str,
        action: &str,
        outcome: &str,
        reason_code: Option<&str>,
        details: serde_json::Value,
    ) {
        let event = NewAuditEvent {
            at_ms: now_ms(),
            actor: actor.to_owned(),
            action: action.to_owned(),
            outcome: outcome.to_owned(),
            reason_code: reason_code.map(str::to_owned),
            details,
        };
        if let Err(error) = self.store.append_audit(&event).await {
            tracing::error!(error = %error, action, outcome, "cannot record an audit event");
        }
    }
}
