//! The sweep: every [`super::SWEEP_INTERVAL`] (or sooner when asked), each replica
//! - reads which replicas are live (for forwarding and for sending deltas);
//! - marks `interrupted` the running turns whose lease lapsed: a dead or stalled replica's, or
//!   an earlier lease of a live one (never replayed);
//! - starts a driver for every session it may dispatch (unbound, its node held here, or its
//!   node linked nowhere), so a turn queued on another replica, or left behind by one that
//!   died, runs without waiting for the next message.

use std::sync::Arc;

use gatehouse_store::Store;
use tokio_util::sync::CancellationToken;

use super::Replica;
use super::SWEEP_INTERVAL;
use crate::turns::TurnEngine;

/// Runs the sweep until `stop`.
pub(crate) async fn run(
    replica: Arc<Replica>,
    store: Arc<dyn Store>,
    turns: Arc<TurnEngine>,
    stop: CancellationToken,
) {
    loop {
        sweep_once(&replica, store.as_ref(), &turns).await;
        tokio::select! {
            () = tokio::time::sleep(SWEEP_INTERVAL) => {}
            () = replica.sweep_now.notified() => {}
            () = stop.cancelled() => return,
        }
    }
}

/// One sweep; a store failure skips the rest of it (the next one tries again).
pub(crate) async fn sweep_once(replica: &Replica, store: &dyn Store, turns: &Arc<TurnEngine>) {
    match store.replicas().await {
        Ok(replicas) => *replica.replicas.write() = replicas,
        Err(error) => {
            tracing::warn!(error = %error, "cannot read the replicas; the sweep waits for the store");
            return;
        }
    }
    match store.interrupt_orphaned_turns().await {
        Ok(interrupted) => turns.record_interrupted(&interrupted).await,
        Err(error) => tracing::warn!(error = %error, "cannot take over lapsed leases' turns"),
    }
    let Some(fence) = replica.fence() else {
        return;
    };
    match store.dispatchable_sessions(&fence).await {
        Ok(sessions) => {
            for session_key in sessions {
                if !turns.drives(&session_key) {
                    turns.kick(&session_key);
                }
            }
        }
        Err(error) => tracing::warn!(error = %error, "cannot list the sessions to dispatch"),
    }
}
