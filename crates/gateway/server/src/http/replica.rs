//! The replica-to-replica routes, `/internal/replica/...`: what another replica of this
//! Gateway asks of the one holding a node's link (see [`crate::cluster::peers`]). Each request
//! carries the replica key as its bearer token; anything else is `401`. They act on this
//! replica's own nodes and turns only, so a request is never forwarded twice.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::extract::Path;
use axum::extract::Request;
use axum::extract::State;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::post;
use gatehouse_api::memory::MemoryReadResult;
use gatehouse_api::sessions::AbortResponse;
use gatehouse_protocol::error::ErrorCode;

use crate::GatewayState;
use crate::cluster::wire::DiscoveryAnswer;
use crate::cluster::wire::FetchAnswer;
use crate::cluster::wire::FetchRequest;
use crate::cluster::wire::Forwarded;
use crate::cluster::wire::ForwardedError;
use crate::cluster::wire::MemoryGetRequest;
use crate::cluster::wire::WriteAnswer;
use crate::cluster::wire::WriteRequest;
use crate::http::error::ApiError;

/// The largest forwarded body: a 16 MiB file as base64, with room for the JSON around it.
const MAX_FORWARDED_BODY_BYTES: usize = 24 * 1024 * 1024;

/// Returns the routes, behind the replica key.
pub(crate) fn router(state: Arc<GatewayState>) -> Router<Arc<GatewayState>> {
    Router::new()
        .route("/sessions/{key}/abort", post(abort))
        .route("/workspace/fetch", post(fetch))
        .route("/workspace/write", post(write))
        .route("/memory/get", post(memory_get))
        .route("/skills/discover", post(skills_discover))
        .layer(axum::extract::DefaultBodyLimit::max(
            MAX_FORWARDED_BODY_BYTES,
        ))
        .layer(axum::middleware::from_fn_with_state(state, authenticate))
}

/// Lets through only requests whose bearer token is the replica key.
async fn authenticate(
    State(state): State<Arc<GatewayState>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = request
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "));
    match presented {
        Some(key) if state.peers.accepts(key) => next.run(request).await,
        _ => ApiError::new(
            ErrorCode::Unauthorized,
            "replica routes take the replica key of this gateway's store",
        )
        .into_response(),
    }
}

/// Aborts the session's turn if it runs on this replica.
async fn abort(
    State(state): State<Arc<GatewayState>>,
    Path(key): Path<String>,
) -> Json<AbortResponse> {
    Json(AbortResponse {
        aborted: state.turns.abort(&key),
    })
}

/// Reads an Agent-workspace file through a node linked here.
async fn fetch(
    State(state): State<Arc<GatewayState>>,
    Json(request): Json<FetchRequest>,
) -> Json<Forwarded<FetchAnswer>> {
    Json(match state.local_workspace.fetch(&request.path).await {
        Ok(file) => Forwarded::Ok(file.into()),
        Err(error) => Forwarded::Err(ForwardedError::from(&error)),
    })
}

/// Writes an Agent-workspace file through a node linked here.
async fn write(
    State(state): State<Arc<GatewayState>>,
    Json(request): Json<WriteRequest>,
) -> Json<Forwarded<WriteAnswer>> {
    let Ok(bytes) = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        &request.content_base64,
    ) else {
        return Json(Forwarded::Err(ForwardedError::Corrupt));
    };
    Json(
        match state
            .local_workspace
            .write(&request.path, &bytes, request.mode.into())
            .await
        {
            Ok(written) => Forwarded::Ok(written.into()),
            Err(error) => Forwarded::Err(ForwardedError::from(&error)),
        },
    )
}

/// Reads lines of a memory file through a node linked here.
async fn memory_get(
    State(state): State<Arc<GatewayState>>,
    Json(request): Json<MemoryGetRequest>,
) -> Json<Forwarded<MemoryReadResult>> {
    Json(
        match state
            .memory
            .get(&request.path, request.from, request.lines)
            .await
        {
            Ok(read) => Forwarded::Ok(read),
            Err(error) => Forwarded::Err(ForwardedError::from(&error)),
        },
    )
}

/// Lists the Harness workspace's skills through a node linked here.
async fn skills_discover(State(state): State<Arc<GatewayState>>) -> Json<DiscoveryAnswer> {
    Json(match state.skills.workspace_skills().await {
        Ok(discovery) => DiscoveryAnswer::Found(discovery),
        Err(reason) => DiscoveryAnswer::Unavailable { reason },
    })
}
