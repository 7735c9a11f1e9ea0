//! `GET /v1/audit`: the audit trail.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The query of `GET /v1/audit`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditQuery {
    /// Only events after this seq (0 when left out); at most 1000 are answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
}

/// The answer of `GET /v1/audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditList {
    /// The events, oldest first.
    pub events: Vec<AuditEntry>,
}

/// One audited action.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// Its position in the trail.
    pub seq: i64,
    /// When it happened, Unix milliseconds.
    pub at: i64,
    /// Who acted: `operator`, a node id, a peer address.
    pub actor: String,
    /// What was done (`node.setup_code.issue`, `session.moved`, ...).
    pub action: String,
    /// `succeeded`, `denied` or `failed`.
    pub outcome: String,
    /// The stable code of a denial or failure; `null` otherwise.
    pub reason_code: Option<String>,
    /// The action's own context, shaped and bounded by the Gateway's audit module; never file
    /// content or secrets. Its members depend on the action.
    pub details: serde_json::Value,
}
