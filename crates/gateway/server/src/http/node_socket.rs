//! `GET /node`: the WebSocket upgrade of a Harness node's link.

use std::sync::Arc;

use axum::extract::Request;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::response::Response;
use gatehouse_protocol::error::ErrorCode;

use crate::GatewayState;
use crate::http::error::ApiError;

/// Hands the request to the link, which performs the upgrade itself (see
/// [`crate::link::ws::upgrade`]) so it can bound what a node sends before it is admitted.
///
/// A request that cannot be upgraded is answered `INVALID_REQUEST` with the link's reason.
pub(crate) async fn node_socket(
    State(state): State<Arc<GatewayState>>,
    request: Request,
) -> Response {
    match crate::link::ws::upgrade(state.link.clone(), request) {
        Ok(response) => response,
        Err(refusal) => {
            ApiError::new(ErrorCode::InvalidRequest, refusal.to_string()).into_response()
        }
    }
}
