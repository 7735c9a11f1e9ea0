//! `GET /healthz` and `GET /readyz`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The answer of `GET /healthz` (`{"status":"ok"}`) and of a ready `GET /readyz`
/// (`{"status":"ready"}`). A `/readyz` that is not ready answers `503` with an
/// [`ErrorResponse`](crate::error::ErrorResponse) instead. Neither names a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HealthResponse {
    /// `ok` for `/healthz`, `ready` for `/readyz`.
    pub status: HealthStatus,
}

/// What [`HealthResponse`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// The process answers (`/healthz`).
    Ok,
    /// The store is open and a node with every command its runtime needs is connected
    /// (`/readyz`).
    Ready,
}
