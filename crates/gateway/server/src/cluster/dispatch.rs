//! [`ClusterDispatcher`]: where each session's next turn runs.
//!
//! For a runtime whose turns need a node ([`Placement`]):
//! - An unbound session (native) is first placed, in the store, on the least loaded node with a
//!   live link anywhere ([`gatehouse_store::ClusterStore::place_session`]): the largest of its
//!   reported slots in use and its busy sessions, over its capacity; the most recently linked
//!   among equals.
//! - A session whose node is linked here runs here, claimed under this replica's lease.
//! - One whose node is linked to another live replica runs there: that replica hears of the
//!   queued turn (an announcement, or its sweep) and claims it.
//! - One whose node has no live link waits for it for [`DEFAULT_NODE_GRACE`] since it went
//!   away (or since this replica's lease began); with `--move-sessions-after` it moves to
//!   another node once away that long and past the grace (audited as `session.moved`, its
//!   workspace restored there from its last checkpoint); past the grace its queued turns fail with
//!   `DEPENDENCY_UNAVAILABLE` (the message names the node) without running, one per dispatch,
//!   until the node returns or the session moves.
//! - With no node serving the runtime anywhere, a turn waits the grace from its admission,
//!   then fails with `DEPENDENCY_UNAVAILABLE`.
//!
//! A session is never sent to two nodes: its binding changes only by a move, and the claim
//! checks in the store that the session's node is linked to the claiming replica.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::Store;
use gatehouse_store::cluster::NodeLink;
use gatehouse_store::cluster::NodeLinks;
use gatehouse_store::cluster::PlacementCandidate;
use gatehouse_store::cluster::pick_placement;

use super::Replica;
use super::peers::Peers;
use crate::audit::Audit;
use crate::audit::AuditRow;
use crate::audit::Limited;
use crate::link::registry::NodeRegistry;
use crate::turns::Dispatcher;
use crate::turns::Route;
use crate::turns::runtime::Placement;
use crate::turns::runtime::TurnFailure;
use crate::turns::runtime::TurnRuntime;

/// How long a turn waits for its session's node (or, for a new session, for any node serving
/// the runtime) before it fails: a node reconnects within its backoff after either side
/// restarts, or to another replica after one dies.
pub(crate) const DEFAULT_NODE_GRACE: Duration = Duration::from_secs(10);

/// Routes sessions' turns across replicas.
pub(crate) struct ClusterDispatcher {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) registry: Arc<NodeRegistry>,
    pub(crate) replica: Arc<Replica>,
    pub(crate) peers: Arc<Peers>,
    pub(crate) audit: Audit,
    /// How long a node may be away before its sessions move to another node; `None` never.
    pub(crate) move_after: Option<Duration>,
    /// How long a turn waits for a node before it fails.
    pub(crate) grace: Duration,
}

#[async_trait::async_trait]
impl Dispatcher for ClusterDispatcher {
    async fn route(&self, session_key: &str, runtime: Option<&Arc<dyn TurnRuntime>>) -> Route {
        let Some(fence) = self.replica.fence() else {
            return Route::Wait;
        };
        let Some(placement) = runtime.and_then(|runtime| runtime.placement()) else {
            return Route::Here(fence);
        };
        match self.route_to_node(session_key, placement).await {
            Ok(Decision::Here) => Route::Here(fence),
            Ok(Decision::Elsewhere) => Route::Elsewhere,
            Ok(Decision::Wait) => Route::Wait,
            Ok(Decision::Fail(failure)) => Route::Fail(fence, failure),
            Err(error) => {
                tracing::warn!(error = %error, session_key, "cannot route a session's turn; the sweep tries again");
                Route::Wait
            }
        }
    }

    async fn abort_elsewhere(&self, session_key: &str) -> bool {
        self.peers.abort(session_key).await
    }
}

/// What [`ClusterDispatcher::route_to_node`] decided.
enum Decision {
    Here,
    Elsewhere,
    Wait,
    Fail(TurnFailure),
}

impl ClusterDispatcher {
    async fn route_to_node(
        &self,
        session_key: &str,
        placement: Placement,
    ) -> Result<Decision, gatehouse_store::StoreError> {
        let links = self.store.node_links().await?;
        if !placement.binds_sessions {
            return self.route_to_any(session_key, placement, &links).await;
        }
        let bound = match self.store.session_node(session_key).await? {
            Some(node) => node,
            None => {
                let candidates = self.candidates(placement, &links);
                match self
                    .store
                    .place_session(session_key, &candidates, gatehouse_protocol::time::now_ms())
                    .await?
                {
                    Some(placement) => {
                        if placement.placed_now {
                            self.placed(session_key, &placement.device_id).await;
                        }
                        placement.device_id
                    }
                    None => return self.without_node(session_key).await,
                }
            }
        };
        let link = links.links.iter().find(|link| link.device_id == bound);
        let serving = |link: &NodeLink| link.live && link.serves_all(placement.commands);
        match link {
            Some(link) if serving(link) && self.held_here(link) => {
                match self.registry.get(&bound) {
                    Some(connection) if connection.serves_all(placement.commands) => {
                        Ok(Decision::Here)
                    }
                    // Linked here without the commands: as away since it linked.
                    Some(_) => {
                        self.node_away(
                            session_key,
                            &bound,
                            Some(link.linked_at_ms),
                            placement,
                            &links,
                        )
                        .await
                    }
                    // The link went a moment ago and the store does not know yet.
                    None => Ok(Decision::Wait),
                }
            }
            Some(link) if serving(link) => Ok(Decision::Elsewhere),
            // A live link whose node does not serve the runtime (it reconnected declaring other
            // commands) is as good as away, since it linked.
            Some(link) if link.live => {
                self.node_away(
                    session_key,
                    &bound,
                    Some(link.linked_at_ms),
                    placement,
                    &links,
                )
                .await
            }
            _ => {
                let since = link.and_then(|link| link.absent_since_ms);
                self.node_away(session_key, &bound, since, placement, &links)
                    .await
            }
        }
    }

    /// Routes a turn of a runtime that runs on any serving node (Codex).
    async fn route_to_any(
        &self,
        session_key: &str,
        placement: Placement,
        links: &NodeLinks,
    ) -> Result<Decision, gatehouse_store::StoreError> {
        if self.registry.find_serving(placement.commands).is_some() {
            return Ok(Decision::Here);
        }
        let elsewhere = links
            .links
            .iter()
            .any(|link| link.live && link.serves_all(placement.commands));
        match elsewhere {
            true => Ok(Decision::Elsewhere),
            false => self.without_node(session_key).await,
        }
    }

    /// Logs and audits (`session.placed`, by the Gateway) that `session_key` was bound to its
    /// node `device_id`.
    async fn placed(&self, session_key: &str, device_id: &str) {
        tracing::info!(session_key, device_id, replica_id = %self.replica.id(), "session placed on its node");
        self.audit
            .record(
                "gateway",
                "session.placed",
                "succeeded",
                None,
                serde_json::json!({"sessionKey": session_key, "nodeId": device_id}),
            )
            .await;
    }

    /// Returns true when `link` is held by this replica's current lease.
    fn held_here(&self, link: &NodeLink) -> bool {
        self.replica.fence().is_some_and(|fence| {
            link.replica_id.as_deref() == Some(fence.replica_id.as_str())
                && link.epoch == Some(fence.epoch)
        })
    }

    /// Returns the live nodes serving `placement`, with the fresher reports of those linked
    /// here.
    fn candidates(&self, placement: Placement, links: &NodeLinks) -> Vec<PlacementCandidate> {
        links
            .links
            .iter()
            .filter(|link| link.live && link.serves_all(placement.commands))
            .map(|link| {
                let local = self
                    .registry
                    .get(&link.device_id)
                    .filter(|_| self.held_here(link))
                    .and_then(|connection| connection.report());
                let (slots_in_use, capacity) = match local {
                    Some(report) => (report.worker_slots_in_use, report.worker_capacity),
                    None => (link.slots_in_use, link.capacity),
                };
                PlacementCandidate {
                    device_id: link.device_id.clone(),
                    slots_in_use,
                    capacity,
                    linked_at_ms: link.linked_at_ms,
                }
            })
            .collect()
    }

    /// Decides for a session whose node `bound` has no live link serving the runtime: away
    /// since `since` (the store's clock), or since this replica's lease began, whichever is
    /// later.
    async fn node_away(
        &self,
        session_key: &str,
        bound: &str,
        since: Option<i64>,
        placement: Placement,
        links: &NodeLinks,
    ) -> Result<Decision, gatehouse_store::StoreError> {
        let lease_began = self.replica.acquired_at_ms().unwrap_or(links.now_ms);
        let since = since.unwrap_or(lease_began).max(lease_began);
        let away = Duration::from_millis(u64::try_from(links.now_ms - since).unwrap_or(0));
        // A node that is only restarting keeps its sessions: a move waits the grace too.
        if let Some(after) = self.move_after
            && away >= after.max(self.grace)
            && self
                .move_session(session_key, bound, away, placement, links)
                .await?
        {
            // Moved: route again to its new node.
            return Box::pin(self.route_to_node(session_key, placement)).await;
        }
        if away < self.grace {
            return Ok(Decision::Wait);
        }
        if self.store.next_queued_turn(session_key).await?.is_none() {
            // Nothing to fail (the last queued turn just failed): nothing to audit either.
            return Ok(Decision::Wait);
        }
        let code = ErrorCode::DependencyUnavailable;
        let row = AuditRow {
            actor: "gateway",
            action: "session.dispatch",
            outcome: "denied",
            reason_code: Some(code.as_str()),
            details: serde_json::json!({"sessionKey": session_key, "nodeId": bound}),
        };
        if self
            .audit
            .record_limited(&format!("node:{bound}"), row)
            .await
            == Limited::Recorded
        {
            tracing::warn!(session_key, device_id = %bound, "the session's node is not connected; the turn is not sent to another node");
        }
        Ok(Decision::Fail(TurnFailure::new(
            code,
            format!(
                "the session is bound to node {bound}, which is not connected; reconnect it, or move the session with POST /v1/sessions/{session_key}/move"
            ),
        )))
    }

    /// Moves the session off `bound` to the node placement picks among the live ones; returns
    /// whether it moved (an operator's move meanwhile wins).
    async fn move_session(
        &self,
        session_key: &str,
        bound: &str,
        away: Duration,
        placement: Placement,
        links: &NodeLinks,
    ) -> Result<bool, gatehouse_store::StoreError> {
        let candidates = self.candidates(placement, links);
        let Some(target) = pick_placement(&candidates, &std::collections::HashMap::new()) else {
            return Ok(false);
        };
        let moved = self
            .store
            .rebind_session_node(
                session_key,
                bound,
                &target.device_id,
                gatehouse_protocol::time::now_ms(),
            )
            .await?;
        if moved {
            tracing::warn!(
                session_key,
                from = bound,
                to = %target.device_id,
                away_seconds = away.as_secs(),
                "the session's node has been away too long; moved the session"
            );
            self.audit
                .record(
                    "gateway",
                    "session.moved",
                    "succeeded",
                    None,
                    serde_json::json!({
                        "sessionKey": session_key,
                        "from": bound,
                        "to": target.device_id,
                        "awaySeconds": away.as_secs(),
                    }),
                )
                .await;
        }
        Ok(moved)
    }

    /// Decides for a session that no node serving its runtime can take: it waits the grace
    /// from its oldest queued turn's admission, then fails.
    async fn without_node(
        &self,
        session_key: &str,
    ) -> Result<Decision, gatehouse_store::StoreError> {
        let Some(queued) = self.store.next_queued_turn(session_key).await? else {
            return Ok(Decision::Wait);
        };
        let waited = gatehouse_protocol::time::now_ms().saturating_sub(queued.created_at_ms);
        if u128::try_from(waited).unwrap_or(0) < self.grace.as_millis() {
            return Ok(Decision::Wait);
        }
        Ok(Decision::Fail(TurnFailure::new(
            ErrorCode::DependencyUnavailable,
            "no Harness node serving this runtime is connected to any gateway replica; the turn is not run anywhere else",
        )))
    }
}
