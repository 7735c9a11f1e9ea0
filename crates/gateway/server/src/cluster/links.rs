//! The mirror of this replica's node links in the store: when a node connects, goes, or
//! reports its worker slots, the store's `node_links` row follows (under the current lease),
//! so every replica knows which one holds each node and how loaded it is.
//!
//! Changes are coalesced per node ([`NodeRegistry::take_changed`]): a node that reports in a
//! loop costs one write per round, not a queue.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_store::Store;
use gatehouse_store::cluster::Fence;
use gatehouse_store::cluster::NewNodeLink;
use tokio_util::sync::CancellationToken;

use super::Replica;
use crate::link::registry::NodeRegistry;

/// What the store holds of one of this replica's links.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mirrored {
    /// The lease it was recorded under.
    fence: Fence,
    conn_id: u64,
    /// The slots in use and capacity last recorded.
    load: Option<(u32, u32)>,
}

/// How long the mirror waits before trying a failed write again.
const RETRY: Duration = Duration::from_millis(500);

/// Mirrors the registry's links into the store until `stop`.
pub(crate) async fn run(
    replica: Arc<Replica>,
    store: Arc<dyn Store>,
    registry: Arc<NodeRegistry>,
    stop: CancellationToken,
) {
    let mut mirrored: HashMap<String, Mirrored> = HashMap::new();
    loop {
        let changed = registry.take_changed();
        let mut failed = Vec::new();
        let mut linked = false;
        for device_id in changed {
            match mirror(
                &replica,
                store.as_ref(),
                &registry,
                &mut mirrored,
                &device_id,
            )
            .await
            {
                Ok(new_link) => linked |= new_link,
                Err(error) => {
                    tracing::warn!(error = %error, device_id, "cannot record a node link in the store; retrying");
                    failed.push(device_id);
                }
            }
        }
        if linked {
            // Sessions of a node that just linked here may have turns waiting.
            replica.sweep_soon();
        }
        let retry = !failed.is_empty();
        for device_id in failed {
            registry.mark_changed(&device_id);
        }
        tokio::select! {
            () = registry.wait_changed(), if !retry => {}
            () = tokio::time::sleep(RETRY), if retry => {}
            () = stop.cancelled() => return,
        }
    }
}

/// Brings the store's link of `device_id` in line with the registry; returns true when it
/// recorded a new link.
async fn mirror(
    replica: &Replica,
    store: &dyn Store,
    registry: &NodeRegistry,
    mirrored: &mut HashMap<String, Mirrored>,
    device_id: &str,
) -> Result<bool, gatehouse_store::StoreError> {
    let Some(fence) = replica.fence() else {
        // No lease: the links are closed and come back under the next one.
        mirrored.clear();
        return Ok(false);
    };
    let Some(connection) = registry.get(device_id) else {
        if let Some(gone) = mirrored.get(device_id) {
            // Forgotten only once the store has it: a failed unlink is retried, never lost.
            store
                .unlink_node(&gone.fence, device_id, gone.conn_id)
                .await?;
            mirrored.remove(device_id);
        }
        return Ok(false);
    };
    let mut new_link = false;
    let current = mirrored
        .get(device_id)
        .filter(|entry| entry.fence == fence && entry.conn_id == connection.conn_id)
        .cloned();
    let mut entry = match current {
        Some(entry) => entry,
        None => {
            let link = NewNodeLink {
                device_id: device_id.to_owned(),
                conn_id: connection.conn_id,
                runtime: connection.runtime.as_str().to_owned(),
                commands: connection.commands.clone(),
            };
            if !store.link_node(&fence, &link).await? {
                // The lease lapsed between the read and the write: the renewal loop closes
                // the links, and they come back under the next lease.
                return Ok(false);
            }
            new_link = true;
            Mirrored {
                fence: fence.clone(),
                conn_id: connection.conn_id,
                load: None,
            }
        }
    };
    if let Some(report) = connection.report() {
        let load = (report.worker_slots_in_use, report.worker_capacity);
        if entry.load != Some(load) {
            store
                .report_node_load(&fence, device_id, connection.conn_id, load.0, load.1)
                .await?;
            entry.load = Some(load);
        }
    }
    mirrored.insert(device_id.to_owned(), entry);
    Ok(new_link)
}
