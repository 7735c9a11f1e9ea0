//! `GET /v1/nodes` and `POST /v1/nodes/setup-codes`: the enrolled nodes, and one-time codes
//! to enroll new ones.

use gatehouse_api::nodes::NodeList;
use gatehouse_api::nodes::NodeSummary;
use gatehouse_api::nodes::SetupCode;
use gatehouse_api::nodes::SetupCodeParams;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::State;

use crate::GatewayState;
use crate::clock::now_ms;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::http::error::store_error;
use crate::setup_code;

/// `GET /v1/nodes`: every enrolled node, with the commands of its live connection and the worker
/// slots of its last report when it is connected.
pub(crate) async fn list_nodes(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<NodeList>, ApiError> {
    let nodes = state
        .store
        .nodes()
        .await
        .map_err(|error| store_error(&error))?;
    let nodes = nodes
        .into_iter()
        .map(|node| {
            let live = state.registry.get(&node.device_id);
            let commands = live.as_ref().map_or(node.commands.clone(), |connection| {
                connection.commands.clone()
            });
            let report = live.as_ref().and_then(|connection| connection.report());
            NodeSummary {
                node_id: node.device_id,
                display_name: node.display_name,
                connected: live.is_some(),
                runtime: node.runtime,
                commands,
                last_seen_at: node.last_seen_at_ms,
                worker_capacity: report.map(|report| report.worker_capacity),
                worker_slots_in_use: report.map(|report| report.worker_slots_in_use),
            }
        })
        .collect();
    Ok(Json(NodeList { nodes }))
}

/// `POST /v1/nodes/setup-codes`: issues a one-time setup code (audited as
/// `node.setup_code.issue`). The node URL inside it comes from `--public-url` or the listen
/// address, never from the request.
pub(crate) async fn create_setup_code(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<Json<SetupCode>, ApiError> {
    let request = match body.is_empty() {
        true => SetupCodeParams::default(),
        false => serde_json::from_slice::<SetupCodeParams>(&body)
            .map_err(|error| ApiError::invalid_request(format!("invalid body: {error}")))?,
    };
    let ttl_seconds = request
        .ttl_seconds
        .unwrap_or(setup_code::DEFAULT_TTL_SECONDS);
    if !(1..=setup_code::MAX_TTL_SECONDS).contains(&ttl_seconds) {
        return Err(ApiError::invalid_request(format!(
            "ttlSeconds must be between 1 and {}",
            setup_code::MAX_TTL_SECONDS
        )));
    }
    // The URL a node will connect to comes from the configuration, never from the request's
    // `Host` header, which whoever sends the request chooses.
    let url = match &state.config.public_url {
        Some(url) => setup_code::node_url(url),
        None if state.local_addr.ip().is_unspecified() => {
            return Err(ApiError::invalid_request(format!(
                "the gateway listens on all interfaces ({}), so a setup code cannot name an address nodes reach; configure --public-url",
                state.local_addr
            )));
        }
        None => format!("ws://{}/node", state.local_addr),
    };
    let issued = setup_code::issue(state.store.as_ref(), &url, ttl_seconds, now_ms())
        .await
        .map_err(|error| store_error(&error))?;
    state
        .audit
        .record(
            principal.actor(),
            "node.setup_code.issue",
            "succeeded",
            None,
            serde_json::json!({"ttlSeconds": ttl_seconds, "expiresAtMs": issued.expires_at_ms}),
        )
        .await;
    Ok(Json(SetupCode {
        setup_code: issued.code,
        expires_at_ms: issued.expires_at_ms,
    }))
}
