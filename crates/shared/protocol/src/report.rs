//! `node.report`: the figures a node reports of itself.
//!
//! The node host listens on no port, so nothing can scrape it; instead it sends a
//! `node.report` event over its link when a session starts, whenever a figure changes, and
//! every [`NODE_REPORT_INTERVAL_MS`] in between. The Gateway keeps the last report of each
//! connected node and forgets it when the node disconnects.
//!
//! ```
//! use gatehouse_protocol::report::NodeReport;
//! let report: NodeReport =
//!     serde_json::from_str(r#"{"workerSlotsInUse":1,"workerCapacity":8,"future":true}"#).unwrap();
//! assert_eq!(report, NodeReport { worker_slots_in_use: 1, worker_capacity: 8 });
//! ```

use serde::Deserialize;
use serde::Serialize;

/// How often a node repeats its report when nothing changed, in milliseconds.
pub const NODE_REPORT_INTERVAL_MS: u64 = 15_000;

/// The payload of a `node.report` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    /// Worker slots held by sessions now (a session keeps its slot between turns until it is
    /// stopped); 0 on a node that hosts no workers.
    pub worker_slots_in_use: u32,
    /// The node's worker capacity (`--capacity`); 0 on a node that hosts no workers.
    pub worker_capacity: u32,
}
