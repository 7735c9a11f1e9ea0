//! `GET /v1/nodes`, `POST /v1/nodes/setup-codes` and `GET /v1/replicas`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The answer of `GET /v1/nodes`: every enrolled node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct NodeList {
    /// The enrolled nodes, connected or not.
    pub nodes: Vec<NodeSummary>,
}

/// One enrolled node as `GET /v1/nodes` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeSummary {
    /// The device id (the hash of its public key).
    pub node_id: String,
    /// The name the node gave itself; not unique.
    pub display_name: String,
    /// Whether the node is connected now, to any replica of the Gateway.
    pub connected: bool,
    /// The Gateway replica holding its link, while it is connected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica_id: Option<String>,
    /// The runtime it declared: `native` or `codex`.
    pub runtime: String,
    /// The commands it serves: those of its live connection when connected, else the last
    /// ones it declared.
    pub commands: Vec<String>,
    /// When it was last seen, Unix milliseconds.
    pub last_seen_at: i64,
    /// The node's worker capacity (`--capacity`), from its last `node.report` (as the replica
    /// holding its link recorded it); absent while it is not connected or before its first
    /// report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_capacity: Option<u32>,
    /// The worker slots its sessions hold now, from the same report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_slots_in_use: Option<u32>,
}

/// The body of `POST /v1/nodes/setup-codes`; an empty body is the same as `{}`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SetupCodeParams {
    /// How long the code stays valid, 1 to the Gateway's maximum; the Gateway's default when
    /// left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_seconds: Option<u64>,
}

/// The answer of `POST /v1/nodes/setup-codes`: a one-time code a node enrolls with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SetupCode {
    /// The code; it names the Gateway's node URL and is consumed at most once.
    pub setup_code: String,
    /// When it expires, Unix milliseconds.
    pub expires_at_ms: i64,
}

/// The answer of `GET /v1/replicas`: the Gateway's replicas on its store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReplicaList {
    /// Every replica that has held a lease on the store, ordered by id.
    pub replicas: Vec<ReplicaSummary>,
}

/// One Gateway replica as `GET /v1/replicas` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaSummary {
    /// Its id (`--replica-id`).
    pub replica_id: String,
    /// The URL the other replicas reach it at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Whether its lease is live now.
    pub live: bool,
    /// The epoch of its newest lease: one more each time it took its lease afresh.
    pub epoch: i64,
    /// When its newest lease was taken, Unix milliseconds of the store's clock.
    pub acquired_at_ms: i64,
    /// When its lease expires (or expired) unless renewed, in the store's clock.
    pub expires_at_ms: i64,
    /// Whether it is the replica that answered.
    pub current: bool,
    /// How many node links it holds.
    pub node_links: u32,
}
