//! `GET /metrics`: the Prometheus exposition of the Gateway (and of its nodes' reports).

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::GatewayState;

/// Answers every family of [`crate::metrics::GatewayMetrics`] in the Prometheus text format.
pub(crate) async fn metrics(State(state): State<Arc<GatewayState>>) -> Response {
    let body = state.metrics.render(&state).await;
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], body).into_response()
}
