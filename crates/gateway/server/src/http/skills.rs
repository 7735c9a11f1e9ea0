//! `GET /v1/skills`: the skills catalog of both hosts.

use gatehouse_api::skills::SkillsView;
use gatehouse_protocol::skills::WORKSPACE_SKILLS;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;

use crate::GatewayState;

/// Answers the catalog of both hosts, with each skill's host, tier and why it is gated out or
/// shadowed. The Harness workspace's skills come from a node linked here or, without one, from
/// the replica that holds one.
pub(crate) async fn list_skills(State(state): State<Arc<GatewayState>>) -> Json<SkillsView> {
    let holder = state
        .peers
        .forward_target(&state.registry, &[WORKSPACE_SKILLS])
        .await;
    let workspace = match holder {
        Some(url) => state.peers.skills_discover(&url).await,
        None => state.skills.workspace_skills().await,
    };
    Json(state.skills.catalog_with(workspace).await)
}
