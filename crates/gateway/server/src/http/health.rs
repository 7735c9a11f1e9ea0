//! `GET /healthz` and `GET /readyz`: liveness, and readiness to run turns.

use gatehouse_api::health::HealthResponse;
use gatehouse_api::health::HealthStatus;
use gatehouse_protocol::codex::CODEX_APPSERVER;
use gatehouse_protocol::commands::FILE_COMMANDS;
use gatehouse_protocol::commands::WORKSPACE_MEMORY;
use gatehouse_protocol::commands::WORKSPACE_SKILLS;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::runtime::RuntimeKind;
use gatehouse_protocol::worker::AGENT_SESSION_RESTORE;
use gatehouse_protocol::worker::AGENT_SESSION_STOP;
use gatehouse_protocol::worker::AGENT_TURN;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::GatewayState;
use crate::http::error::ApiError;
use crate::readiness::STORE_PING_TIMEOUT;

/// The commands a node hosting the native runtime must serve to be ready.
const NATIVE_COMMANDS: &[&str] = &[AGENT_TURN, AGENT_SESSION_STOP, AGENT_SESSION_RESTORE];

/// `GET /healthz`: the process answers.
pub(crate) async fn healthz() -> Json<HealthResponse> {
    Json(HealthResponse {
        status: HealthStatus::Ok,
    })
}

/// `GET /readyz`: `200` when the store and the media store answer and a node serving every
/// command of its runtime is connected (to this replica, or to another live replica, which
/// this one forwards to, unless [`crate::GatewayConfig::ready_needs_own_node`]), else `503` with a code that says which check failed.
/// It needs no token, so it names no node, and its callers share one store ping per
/// [`crate::readiness::STORE_PING_REUSE`] and one media probe per [`gatehouse_media::READY_CACHE`]:
/// frequent probes never become frequent requests to PostgreSQL or S3.
pub(crate) async fn readyz(State(state): State<Arc<GatewayState>>) -> Response {
    let store_answers = state
        .store_ping
        .run(|| async {
            let ping = tokio::time::timeout(STORE_PING_TIMEOUT, state.store.ping()).await;
            match ping {
                Ok(Ok(())) => true,
                Ok(Err(error)) => {
                    tracing::error!(error = %error, "store ping failed");
                    false
                }
                Err(_) => {
                    tracing::error!(
                        timeout_ms = STORE_PING_TIMEOUT.as_millis(),
                        "store ping timed out"
                    );
                    false
                }
            }
        })
        .await;
    if !store_answers {
        return ApiError::new(
            ErrorCode::StoreUnavailable,
            "the gateway store does not answer",
        )
        .into_response();
    }
    // An endpoint that accepts connections and never answers must not hold `/readyz` for the
    // S3 request timeout.
    let media_answers = tokio::time::timeout(STORE_PING_TIMEOUT, state.media.ready()).await;
    if !matches!(media_answers, Ok(true)) {
        return ApiError::with_text_code(
            StatusCode::SERVICE_UNAVAILABLE,
            ErrorCode::MediaStoreFailure.as_str(),
            "the media store does not answer",
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
            Ok(()) => Json(HealthResponse { status: HealthStatus::Ready }).into_response(),
            Err(failure) => ApiError::with_text_code(StatusCode::SERVICE_UNAVAILABLE, &failure.code, failure.message).into_response(),
        },
        // A node linked to another replica serves this one too: it forwards what needs it.
        None if !state.config.ready_needs_own_node && linked_elsewhere(&state).await => {
            Json(HealthResponse { status: HealthStatus::Ready }).into_response()
        }
        None => ApiError::new(ErrorCode::NodeNotConnected,
            "no Harness node with the workspace commands is connected to any replica; start `gatehouse node` with a setup code",
        )
        .into_response(),
    }
}

/// Returns whether a live replica other than this one holds the link of a node serving the
/// workspace commands, checked at most once per [`crate::readiness::STORE_PING_REUSE`].
async fn linked_elsewhere(state: &GatewayState) -> bool {
    state
        .remote_nodes
        .run(|| async {
            let links = tokio::time::timeout(STORE_PING_TIMEOUT, state.store.node_links()).await;
            match links {
                Ok(Ok(links)) => links.links.iter().any(|link| {
                    link.live
                        && link.serves_all(FILE_COMMANDS)
                        && link.replica_id.as_deref() != Some(state.replica.id())
                }),
                Ok(Err(error)) => {
                    tracing::warn!(error = %error, "cannot read the node links");
                    false
                }
                Err(_) => false,
            }
        })
        .await
}

async fn runtime_readiness(state: &GatewayState) -> Result<(), crate::turns::runtime::TurnFailure> {
    match state.turns.runtime() {
        Some(runtime) => runtime.readiness().await,
        None => Ok(()),
    }
}
