//! `GET /node`: the WebSocket upgrade of a Harness node's link.

use std::sync::Arc;

use axum::extract::Request;
use axum::extract::State;
use axum::response::Response;

use crate::GatewayState;

/// Hands the request to the link, which performs the upgrade itself (see
/// [`crate::link::ws::upgrade`]) so it can bound what a node sends before it is admitted.
pub(crate) async fn node_socket(
    State(state): State<Arc<GatewayState>>,
    request: Request,
) -> Response {
    crate::link::ws::upgrade(state.link.clone(), request)
}
