//! `GET /v1/skills`: the skills catalog of both hosts.

use gatehouse_api::skills::SkillsView;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use crate::GatewayState;

/// Answers the catalog of both hosts, with each skill's host, tier and why it is gated out or
/// shadowed.
pub(crate) async fn list_skills(State(state): State<Arc<GatewayState>>) -> Json<SkillsView> {
    Json(state.skills.catalog().await)
}
