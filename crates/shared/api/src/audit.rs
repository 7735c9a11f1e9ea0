//! `GET /v1/audit`: the audit trail.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The most events one answer of `GET /v1/audit` carries, and the largest `limit`.
pub const MAX_AUDIT_PAGE: u32 = 1000;

/// The query of `GET /v1/audit`: `after=SEQ` reads forward (the first events after it),
/// `before=SEQ` reads backwards (the last events before it); not both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AuditQuery {
    /// Only the oldest events after this seq (0 when left out and `before` is too).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
    /// Only the newest events before this seq; a seq past the end (such as
    /// `9223372036854775807`) answers the newest events. The next older page is `before=` the
    /// first seq of this one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before: Option<i64>,
    /// How many events at most, 1 to 1000 ([`MAX_AUDIT_PAGE`], the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// The answer of `GET /v1/audit`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AuditList {
    /// The events, oldest first, with `before=` as with `after=`.
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
