//! Route handlers: decode, call the domain, map the result.

use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::runtime::RuntimeKind;
use std::sync::Arc;

use axum::Json;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use gatehouse_protocol::codex::CODEX_APPSERVER;
use gatehouse_protocol::commands::FILE_COMMANDS;
use gatehouse_protocol::commands::WORKSPACE_MEMORY;
use gatehouse_protocol::commands::WORKSPACE_SKILLS;
use gatehouse_protocol::worker::AGENT_SESSION_RESTORE;
use gatehouse_protocol::worker::AGENT_SESSION_STOP;
use gatehouse_protocol::worker::AGENT_TURN;

/// The commands a node hosting the native runtime must serve to be ready.
const NATIVE_COMMANDS: &[&str] = &[AGENT_TURN, AGENT_SESSION_STOP, AGENT_SESSION_RESTORE];
use serde::Deserialize;

use crate::GatewayState;
use crate::clock::now_ms;
use crate::http::error::ApiError;
use crate::setup_code;

pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(serde_json::json!({"status": "ok"}))
}

pub(crate) async fn readyz(State(state): State<Arc<GatewayState>>) -> Response {
    if let Err(error) = state.store.ping().await {
        tracing::error!(error = %error, "store ping failed");
        return ApiError::new(
            ErrorCode::StoreUnavailable,
            "the gateway store does not answer",
        )
        .into_response();
    }
    match state.registry.find_serving(FILE_COMMANDS) {
        Some(node) if node.runtime == RuntimeKind::Native && !node.serves_all(NATIVE_COMMANDS) => ApiError::new(ErrorCode::NodeRuntimeIncomplete,
            "the connected node hosts the native runtime but does not serve agent.turn; restart it with a current gatehouse",
        )
        .into_response(),
        Some(node) if !node.serves_all(&[WORKSPACE_MEMORY, WORKSPACE_SKILLS]) => ApiError::new(ErrorCode::NodeRuntimeIncomplete,
            "the connected node does not serve workspace.memory and workspace.skills; restart it with a current gatehouse",
        )
        .into_response(),
        Some(node) if node.runtime == RuntimeKind::Codex && !node.serves_all(&[CODEX_APPSERVER]) => ApiError::new(ErrorCode::NodeRuntimeIncomplete,
            "the connected node hosts the codex runtime but does not serve codex.appserver; restart it with a current gatehouse",
        )
        .into_response(),
        Some(_) => match runtime_readiness(&state).await {
            // No identifiers: `/readyz` needs no token.
            Ok(()) => Json(serde_json::json!({"status": "ready"})).into_response(),
            Err(failure) => ApiError::with_text_code(StatusCode::SERVICE_UNAVAILABLE, &failure.code, failure.message).into_response(),
        },
        None => ApiError::new(ErrorCode::NodeNotConnected,
            "no Harness node with the workspace commands is connected; start `gatehouse node` with a setup code",
        )
        .into_response(),
    }
}

async fn runtime_readiness(state: &GatewayState) -> Result<(), crate::turns::runtime::TurnFailure> {
    match state.turns.runtime() {
        Some(runtime) => runtime.readiness().await,
        None => Ok(()),
    }
}

/// `GET /v1/skills`: the catalog of both hosts, with each skill's host, tier and why it is gated
/// out or shadowed.
pub(crate) async fn list_skills(State(state): State<Arc<GatewayState>>) -> Response {
    Json(state.skills.catalog().await).into_response()
}

/// `GET /metrics`: every family of [`crate::metrics::GatewayMetrics`] in the Prometheus text
/// format.
pub(crate) async fn metrics(State(state): State<Arc<GatewayState>>) -> Response {
    let body = state.metrics.render(&state).await;
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response()
}

pub(crate) async fn node_socket(
    State(state): State<Arc<GatewayState>>,
    request: axum::extract::Request,
) -> Response {
    crate::link::ws::upgrade(state.link.clone(), request)
}

pub(crate) async fn not_found() -> ApiError {
    ApiError::not_found("no such route")
}

pub(crate) async fn list_nodes(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let nodes = state.store.nodes().await.map_err(|error| {
        tracing::error!(error = %error, "cannot list nodes");
        ApiError::internal(error.code())
    })?;
    let rows: Vec<serde_json::Value> = nodes
        .into_iter()
        .map(|node| {
            let live = state.registry.get(&node.device_id);
            let commands = live.as_ref().map_or(node.commands.clone(), |connection| {
                connection.commands.clone()
            });
            serde_json::json!({
                "nodeId": node.device_id,
                "displayName": node.display_name,
                "connected": live.is_some(),
                "runtime": node.runtime,
                "commands": commands,
                "lastSeenAt": node.last_seen_at_ms,
            })
        })
        .collect();
    Ok(Json(serde_json::json!({"nodes": rows})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(crate) struct SetupCodeRequest {
    ttl_seconds: Option<u64>,
}

pub(crate) async fn create_setup_code(
    State(state): State<Arc<GatewayState>>,
    body: axum::body::Bytes,
) -> Result<Json<serde_json::Value>, ApiError> {
    let request = match body.is_empty() {
        true => SetupCodeRequest { ttl_seconds: None },
        false => serde_json::from_slice::<SetupCodeRequest>(&body)
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
        .map_err(|error| {
            tracing::error!(error = %error, "cannot issue a setup code");
            ApiError::internal(error.code())
        })?;
    state
        .audit
        .record(
            "operator",
            "node.setup_code.issue",
            "succeeded",
            None,
            serde_json::json!({"ttlSeconds": ttl_seconds, "expiresAtMs": issued.expires_at_ms}),
        )
        .await;
    Ok(Json(
        serde_json::json!({"setupCode": issued.code, "expiresAtMs": issued.expires_at_ms}),
    ))
}

pub(crate) async fn read_workspace_file(
    State(state): State<Arc<GatewayState>>,
    Path((agent, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    if agent != "main" {
        return Err(ApiError::not_found(format!(
            "no agent {agent:?}; the agent is \"main\""
        )));
    }
    let file = state.workspace.fetch(&path).await?;
    let content_type = axum::http::HeaderValue::from_str(&file.mime_type).unwrap_or(
        axum::http::HeaderValue::from_static("application/octet-stream"),
    );
    let headers = crate::http::media::untrusted_download_headers(
        content_type,
        axum::http::HeaderValue::from_static("attachment"),
    );
    Ok((headers, file.bytes).into_response())
}

#[derive(Debug, Deserialize)]
pub(crate) struct AuditQuery {
    after: Option<i64>,
}

pub(crate) async fn list_audit(
    State(state): State<Arc<GatewayState>>,
    Query(query): Query<AuditQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let events = state
        .store
        .audit_after(query.after.unwrap_or(0), 1000)
        .await
        .map_err(|error| {
            tracing::error!(error = %error, "cannot read the audit trail");
            ApiError::internal(error.code())
        })?;
    let rows: Vec<serde_json::Value> = events
        .into_iter()
        .map(|event| {
            serde_json::json!({
                "seq": event.seq,
                "at": event.at_ms,
                "actor": event.actor,
                "action": event.action,
                "outcome": event.outcome,
                "reasonCode": event.reason_code,
                "details": event.details,
            })
        })
        .collect();
    Ok(Json(serde_json::json!({"events": rows})))
}
