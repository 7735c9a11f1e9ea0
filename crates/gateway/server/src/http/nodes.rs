//! `GET /v1/nodes`, `POST /v1/nodes/setup-codes` and `GET /v1/replicas`: the enrolled nodes
//! (connected to any replica), one-time codes to enroll new ones, and the Gateway's replicas.

use gatehouse_api::nodes::NodeList;
use gatehouse_api::nodes::NodeSummary;
use gatehouse_api::nodes::ReplicaList;
use gatehouse_api::nodes::ReplicaSummary;
use gatehouse_api::nodes::SetupCode;
use gatehouse_api::nodes::SetupCodeParams;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::State;

use crate::GatewayState;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::http::error::store_error;
use crate::setup_code;
use gatehouse_protocol::time::now_ms;

/// `GET /v1/nodes`: every enrolled node, connected when a live replica holds its link, with
/// the commands of that link and the worker slots of its last report. A node linked here
/// shows its own connection's figures, which are fresher than the store's.
pub(crate) async fn list_nodes(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<NodeList>, ApiError> {
    let nodes = state
        .store
        .nodes()
        .await
        .map_err(|error| store_error(&error))?;
    let links = state
        .store
        .node_links()
        .await
        .map_err(|error| store_error(&error))?;
    let nodes = nodes
        .into_iter()
        .map(|node| {
            let link = links
                .links
                .iter()
                .find(|link| link.live && link.device_id == node.device_id);
            let local = state.registry.get(&node.device_id);
            let (commands, report, replica_id) = match (&local, link) {
                (Some(connection), _) => (
                    connection.commands.clone(),
                    connection
                        .report()
                        .map(|report| (report.worker_capacity, report.worker_slots_in_use)),
                    Some(state.replica.id().to_owned()),
                ),
                (None, Some(link)) => (
                    link.commands.clone(),
                    Some((link.capacity, link.slots_in_use)),
                    link.replica_id.clone(),
                ),
                (None, None) => (node.commands.clone(), None, None),
            };
            NodeSummary {
                node_id: node.device_id,
                display_name: node.display_name,
                connected: replica_id.is_some(),
                replica_id,
                runtime: node.runtime,
                commands,
                last_seen_at: node.last_seen_at_ms,
                worker_capacity: report.map(|(capacity, _)| capacity),
                worker_slots_in_use: report.map(|(_, used)| used),
            }
        })
        .collect();
    Ok(Json(NodeList { nodes }))
}

/// `GET /v1/replicas`: every replica that has held a lease on this Gateway's store.
pub(crate) async fn list_replicas(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<ReplicaList>, ApiError> {
    let replicas = state
        .store
        .replicas()
        .await
        .map_err(|error| store_error(&error))?;
    let links = state
        .store
        .node_links()
        .await
        .map_err(|error| store_error(&error))?;
    let fence = state.replica.fence();
    let replicas = replicas
        .into_iter()
        .map(|replica| {
            let node_links = links
                .links
                .iter()
                .filter(|link| link.live && link.replica_id.as_deref() == Some(&replica.replica_id))
                .count();
            ReplicaSummary {
                current: fence.as_ref().is_some_and(|fence| {
                    fence.replica_id == replica.replica_id && fence.epoch == replica.epoch
                }),
                replica_id: replica.replica_id,
                url: replica.url,
                live: replica.live,
                epoch: replica.epoch,
                acquired_at_ms: replica.acquired_at_ms,
                expires_at_ms: replica.expires_at_ms,
                node_links: u32::try_from(node_links).unwrap_or(u32::MAX),
            }
        })
        .collect();
    Ok(Json(ReplicaList { replicas }))
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
        .record_caller(
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
