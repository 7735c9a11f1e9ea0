//! [`ClusterStore`]: what Gateway replicas on one store share beyond the conversation state.
//!
//! Several Gateway processes on one PostgreSQL database are replicas of one Gateway. They find
//! each other only through the store:
//! - **Leases.** Each replica holds a lease ([`ClusterStore::acquire_replica`]): an expiry it
//!   renews while it lives ([`ClusterStore::renew_replica`]) and an epoch that grows each time
//!   the lease is taken afresh. A lease that expired can never be renewed, only taken again
//!   under a new epoch. Lease times are the store's own clock (the database server's), so the
//!   replicas' clocks never matter.
//! - **Fencing.** A turn is claimed under a lease ([`Fence`]) and records it; every write of the
//!   turn (a transcript message, a turn event, its end) checks in its own transaction that the
//!   fence is still the replica's live lease, holding a share lock on the replica's row while it
//!   commits. The survivors' takeover of an expired replica's turns
//!   ([`ClusterStore::interrupt_orphaned_turns`]) takes that row exclusively, so a write either
//!   committed before the takeover or is refused: a paused or partitioned replica never commits
//!   after its lease passed.
//! - **Node links.** Which replica holds each node's link ([`ClusterStore::link_node`]), what the
//!   node serves and its last reported worker slots; a link is live only while its replica's
//!   lease is. A replica claims a queued turn only for a session whose node it holds.
//! - **Announcements.** On PostgreSQL every durable session event is announced on the channel
//!   [`CHANNEL`] by a trigger, and replicas send their streamed deltas on it
//!   ([`ClusterStore::announce`]); [`ClusterStore::listen`] receives both. SQLite has one
//!   replica and no channel.
//! - **Shared secrets** ([`ClusterStore::shared_secret`]): the operator token and the key of
//!   replica-to-replica calls, created by the first replica and read by the others. They are
//!   the only secrets the store keeps in clear, because every replica must present them.

use async_trait::async_trait;

use crate::error::Result;
use crate::records::TurnRecord;

/// The PostgreSQL notification channel of replica announcements.
pub const CHANNEL: &str = "gatehouse_cluster";

/// The key of the advisory lock on media collection ("gh-media" in ASCII).
pub const MEDIA_LOCK_KEY: i64 = 0x6768_2d6d_6564_6961;

/// A hold that holds nothing: where one process owns the store, its own lock suffices.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct NoHold;

#[async_trait]
impl MediaHold for NoHold {
    async fn release(self: Box<Self>) {}

    async fn still_held(&mut self) -> bool {
        true
    }
}

/// The longest announcement payload, in bytes (PostgreSQL refuses longer than 8000).
pub const MAX_ANNOUNCEMENT_BYTES: usize = 7900;

/// The lease a turn was claimed under: which replica, and which of its leases. Every write of
/// the turn carries it, and the store refuses the write once the lease is no longer live.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    /// The replica.
    pub replica_id: String,
    /// The epoch of the lease.
    pub epoch: i64,
}

/// A turn writing under its claim: the writes that belong to a running turn (a checkpoint, a
/// worktree result) take effect only while it runs under `fence`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnWriter<'a> {
    /// The lease the turn was claimed under.
    pub fence: &'a Fence,
    /// The turn.
    pub turn_id: &'a str,
}

/// A lease the store granted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaLease {
    /// The replica and the lease's epoch.
    pub fence: Fence,
    /// When it was taken, in the store's clock (Unix milliseconds).
    pub acquired_at_ms: i64,
    /// When it expires unless renewed, in the store's clock.
    pub expires_at_ms: i64,
}

/// What [`ClusterStore::acquire_replica`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquired {
    /// The lease is this caller's.
    Taken(ReplicaLease),
    /// A live lease of the same replica id is held (by another process, or by this replica's
    /// previous run until it expires).
    Held {
        /// When that lease expires unless renewed, in the store's clock.
        expires_at_ms: i64,
    },
}

/// A replica as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaRecord {
    /// Its id.
    pub replica_id: String,
    /// The epoch of its newest lease.
    pub epoch: i64,
    /// The URL other replicas reach it at, when it gave one.
    pub url: Option<String>,
    /// When its newest lease was taken.
    pub acquired_at_ms: i64,
    /// When its lease expires (or expired).
    pub expires_at_ms: i64,
    /// Whether its lease is live now.
    pub live: bool,
}

/// A node link a replica records when a node connects to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNodeLink {
    /// The node.
    pub device_id: String,
    /// The replica's id of this connection, so an older connection's end never unlinks a newer
    /// one.
    pub conn_id: u64,
    /// The runtime the node hosts.
    pub runtime: String,
    /// The commands the node declared.
    pub commands: Vec<String>,
}

/// Where a node's link is, as the store knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLink {
    /// The node.
    pub device_id: String,
    /// The replica holding the link, while one does (also when its lease has expired; see
    /// `live`).
    pub replica_id: Option<String>,
    /// The epoch of the lease the link was recorded under.
    pub epoch: Option<i64>,
    /// The holder's URL.
    pub replica_url: Option<String>,
    /// Whether the link is held by a replica whose lease is live and is the lease it was
    /// recorded under.
    pub live: bool,
    /// The holder's connection id.
    pub conn_id: u64,
    /// The runtime the node hosts.
    pub runtime: String,
    /// The commands the node declared.
    pub commands: Vec<String>,
    /// Worker slots in use at its last report.
    pub slots_in_use: u32,
    /// Worker capacity at its last report.
    pub capacity: u32,
    /// When the link was recorded.
    pub linked_at_ms: i64,
    /// Since when the node has had no live link: when its link ended, or when its holder's
    /// lease expired; `None` while live.
    pub absent_since_ms: Option<i64>,
}

impl NodeLink {
    /// Returns true when the node declared every command in `commands`.
    pub fn serves_all(&self, commands: &[&str]) -> bool {
        commands
            .iter()
            .all(|command| self.commands.iter().any(|declared| declared == command))
    }
}

/// Every node link, read at one moment of the store's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLinks {
    /// The store's clock when they were read (Unix milliseconds).
    pub now_ms: i64,
    /// The links, ordered by device id.
    pub links: Vec<NodeLink>,
}

/// A node a new session may be placed on, with its load as the placing replica knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementCandidate {
    /// The node.
    pub device_id: String,
    /// Worker slots in use at its last report.
    pub slots_in_use: u32,
    /// Worker capacity at its last report; 0 for a node without workers (counted as 1).
    pub capacity: u32,
    /// When its link was recorded; the most recent wins among equally loaded nodes.
    pub linked_at_ms: i64,
}

/// The node a session is bound to, as [`ClusterStore::place_session`] found or made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionPlacement {
    /// The node.
    pub device_id: String,
    /// Whether this call bound the session (else it was bound already).
    pub placed_now: bool,
}

/// What [`crate::Store::claim_next_turn`] did.
#[derive(Debug, Clone, PartialEq)]
pub enum ClaimOutcome {
    /// The oldest queued turn now runs under the fence.
    Claimed(Box<TurnRecord>),
    /// Nothing to claim: no queued turn, or one of the session's turns runs already.
    Idle,
    /// The session's node is linked to another replica (or to none): its holder claims it.
    NotHolder,
    /// The fence is not the replica's live lease: it claims nothing until it takes a new one.
    Fenced,
}

/// An announcement heard on [`CHANNEL`].
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "k")]
pub enum Announcement {
    /// A durable session event was stored (announced by the store itself).
    #[serde(rename = "event")]
    Event {
        /// The session.
        #[serde(rename = "s")]
        session_key: String,
        /// The event's seq.
        #[serde(rename = "q")]
        seq: i64,
        /// The event's name.
        #[serde(rename = "t")]
        kind: String,
    },
    /// A replica streamed an ephemeral event (a delta), which is never stored.
    #[serde(rename = "delta")]
    Delta {
        /// The replica that sent it, which ignores its own.
        #[serde(rename = "r")]
        origin: String,
        /// The sender's count of its deltas: two equal deltas sent together stay two (the
        /// server folds identical notifications of one transaction into one).
        #[serde(rename = "n")]
        number: u64,
        /// The session.
        #[serde(rename = "s")]
        session_key: String,
        /// The event's name.
        #[serde(rename = "t")]
        kind: String,
        /// Its data, opaque to the store.
        #[serde(rename = "p")]
        payload: serde_json::Value,
    },
}

/// What a listener hears.
#[derive(Debug, Clone, PartialEq)]
pub enum Heard {
    /// One announcement.
    Announcement(Announcement),
    /// The listening connection was lost and is open again: announcements made meanwhile were
    /// missed, so a listener reads what it follows from the store again.
    Resumed,
}

/// A hold on the store's media lock, which keeps the collection of checkpoint blobs from
/// running while any replica stores media and records its reference ([`ClusterStore::hold_media_writes`]),
/// and lets one collection run at a time ([`ClusterStore::try_hold_media_collection`]). Give it
/// back with [`MediaHold::release`]; dropped without it, its connection is closed, which
/// releases it too.
#[async_trait]
pub trait MediaHold: Send + Sync {
    /// Releases the hold.
    async fn release(self: Box<Self>);

    /// Returns whether the hold is still held (its connection was not lost); a collection
    /// checks it before each deletion.
    async fn still_held(&mut self) -> bool;
}

/// A connection listening on [`CHANNEL`].
#[async_trait]
pub trait ClusterListener: Send {
    /// Waits for the next announcement. A payload that does not decode is skipped (logged).
    ///
    /// # Errors
    /// [`crate::StoreError::Unavailable`] while the server cannot be reached; the next call
    /// tries again.
    async fn next(&mut self) -> Result<Heard>;
}

/// What Gateway replicas on one store share; see the module documentation.
#[async_trait]
pub trait ClusterStore: Send + Sync + 'static {
    /// Takes the lease of `replica_id` for `lease_ms` under a new epoch, recording `url` as
    /// where other replicas reach it, unless a live lease of that id is held.
    ///
    /// # Errors
    /// Storage failures.
    async fn acquire_replica(
        &self,
        replica_id: &str,
        url: Option<&str>,
        lease_ms: i64,
    ) -> Result<Acquired>;

    /// Extends the lease `fence` to `lease_ms` from now and returns its new expiry; `None` when
    /// it is no longer live (it expired, or a newer lease of the id was taken).
    ///
    /// # Errors
    /// Storage failures.
    async fn renew_replica(&self, fence: &Fence, lease_ms: i64) -> Result<Option<i64>>;

    /// Ends the lease `fence` now (a replica shutting down), so the others take over its nodes'
    /// sessions at once.
    ///
    /// # Errors
    /// Storage failures.
    async fn release_replica(&self, fence: &Fence) -> Result<()>;

    /// Ends every replica's lease now and unlinks their nodes. Only for a store one process
    /// holds exclusively (a SQLite file under its lock), where no other replica can be alive:
    /// a restarted Gateway then takes its previous run's turns over at once rather than after
    /// the lease.
    ///
    /// # Errors
    /// Storage failures.
    async fn end_all_leases(&self) -> Result<()>;

    /// Returns every replica the store has seen, ordered by id.
    ///
    /// # Errors
    /// Storage failures.
    async fn replicas(&self) -> Result<Vec<ReplicaRecord>>;

    /// Marks `interrupted` every running turn whose claim is not a live lease: turns of a
    /// replica whose lease expired, of an earlier lease of a live replica, or claimed before
    /// leases existed; appends their `turn.failed` events and returns them. A replica still
    /// committing a write under its just-expired lease is left for a later call. Interrupted
    /// turns are never replayed.
    ///
    /// # Errors
    /// Storage failures.
    async fn interrupt_orphaned_turns(&self) -> Result<Vec<TurnRecord>>;

    /// Records that the replica of `fence` holds `link` now, replacing the node's earlier link
    /// wherever it was. Returns false, recording nothing, when the fence is not live.
    ///
    /// # Errors
    /// Storage failures.
    async fn link_node(&self, fence: &Fence, link: &NewNodeLink) -> Result<bool>;

    /// Records that the link `conn_id` of `device_id` held by `fence`'s replica ended, unless a
    /// newer link replaced it.
    ///
    /// # Errors
    /// Storage failures.
    async fn unlink_node(&self, fence: &Fence, device_id: &str, conn_id: u64) -> Result<()>;

    /// Records the node's reported worker slots on its link `conn_id`.
    ///
    /// # Errors
    /// Storage failures.
    async fn report_node_load(
        &self,
        fence: &Fence,
        device_id: &str,
        conn_id: u64,
        slots_in_use: u32,
        capacity: u32,
    ) -> Result<()>;

    /// Returns every node link, with the store's clock.
    ///
    /// # Errors
    /// Storage failures.
    async fn node_links(&self) -> Result<NodeLinks>;

    /// Binds the unbound session `session_key` to the least loaded of `candidates` and returns
    /// the node it is bound to (an earlier binding wins and is returned as it is, with
    /// `placed_now` false); `None` when the session does not exist or there is no candidate. A candidate's load is its share of
    /// capacity in use: the larger of its reported slots in use and the number of sessions
    /// bound to it that have a turn queued or running (which counts placements made since its
    /// last report); among equals the most recently linked wins.
    ///
    /// # Errors
    /// Storage failures.
    async fn place_session(
        &self,
        session_key: &str,
        candidates: &[PlacementCandidate],
        now_ms: i64,
    ) -> Result<Option<SessionPlacement>>;

    /// Returns the sessions with a queued turn and none running that `fence`'s replica may
    /// dispatch: unbound ones, those whose node it holds, and those whose node has no live
    /// link.
    ///
    /// # Errors
    /// Storage failures.
    async fn dispatchable_sessions(&self, fence: &Fence) -> Result<Vec<String>>;

    /// Returns the running turn of `session_key` and the lease it runs under.
    ///
    /// # Errors
    /// Storage failures.
    async fn running_turn(&self, session_key: &str) -> Result<Option<(String, Option<Fence>)>>;

    /// Returns the shared secret `name`, storing `proposed` as its value when it has none yet:
    /// the first replica's value wins.
    ///
    /// # Errors
    /// Storage failures.
    async fn shared_secret(&self, name: &str, proposed: &str, now_ms: i64) -> Result<String>;

    /// Announces `announcements` to every listening replica, in order; a no-op where the store
    /// has no channel (SQLite).
    ///
    /// # Errors
    /// Storage failures.
    async fn announce(&self, announcements: &[Announcement]) -> Result<()>;

    /// Takes the media lock shared, waiting while a collection holds it: held while media is
    /// stored and its reference recorded, on any replica. A hold left idle for a minute (its
    /// process froze) is ended by the server. SQLite has one process, whose own lock suffices:
    /// its hold is empty.
    ///
    /// # Errors
    /// Storage failures.
    async fn hold_media_writes(&self) -> Result<Box<dyn MediaHold>>;

    /// Takes the media lock exclusively if no replica holds it, for a collection; `None`
    /// while one does (the collection then waits for a later run). A hold left idle for 10
    /// seconds is ended by the server.
    ///
    /// # Errors
    /// Storage failures.
    async fn try_hold_media_collection(&self) -> Result<Option<Box<dyn MediaHold>>>;

    /// Opens a connection listening on [`CHANNEL`]; `None` where the store has no channel
    /// (SQLite, which has one replica).
    ///
    /// # Errors
    /// Storage failures.
    async fn listen(&self) -> Result<Option<Box<dyn ClusterListener>>>;
}

/// Returns the candidate [`ClusterStore::place_session`] picks, given the number of sessions
/// with a queued or running turn already bound to each (`busy`): the lowest share of capacity
/// in use (the larger of the reported slots and the busy sessions, over the capacity, a node
/// without workers counting as one slot), then the most recently linked.
pub fn pick_placement<'a>(
    candidates: &'a [PlacementCandidate],
    busy: &std::collections::HashMap<String, u32>,
) -> Option<&'a PlacementCandidate> {
    let load = |candidate: &PlacementCandidate| {
        let used = candidate
            .slots_in_use
            .max(busy.get(&candidate.device_id).copied().unwrap_or(0));
        (u64::from(used), u64::from(candidate.capacity.max(1)))
    };
    candidates.iter().min_by(|a, b| {
        let (a_used, a_capacity) = load(a);
        let (b_used, b_capacity) = load(b);
        (a_used * b_capacity)
            .cmp(&(b_used * a_capacity))
            .then_with(|| b.linked_at_ms.cmp(&a.linked_at_ms))
            .then_with(|| a.device_id.cmp(&b.device_id))
    })
}

/// Returns a connection id as the stores' 64-bit integer columns keep it.
pub(crate) fn conn_id_column(conn_id: u64) -> i64 {
    i64::try_from(conn_id).unwrap_or(i64::MAX)
}

/// Returns a stored count as a `u32`, saturating.
pub(crate) fn count_column(count: i64) -> u32 {
    u32::try_from(count.max(0)).unwrap_or(u32::MAX)
}

/// A node link's row with its holder's newest lease, as both backends read it.
#[derive(Debug, Clone)]
pub(crate) struct LinkRow {
    pub(crate) link: NodeLink,
    pub(crate) unlinked_at_ms: Option<i64>,
    pub(crate) holder_epoch: Option<i64>,
    pub(crate) holder_acquired_at_ms: Option<i64>,
    pub(crate) holder_expires_at_ms: Option<i64>,
}

impl LinkRow {
    /// Returns the link with `live` and `absent_since_ms` judged at `now_ms`: live while its
    /// holder's newest lease is the one it was recorded under and unexpired; otherwise absent
    /// since it ended, since the holder's lease expired, or (the holder took a newer lease)
    /// since that newer lease began.
    pub(crate) fn judge(self, now_ms: i64) -> NodeLink {
        let mut link = self.link;
        let (live, absent_since) = match (&link.replica_id, self.holder_epoch) {
            (None, _) => (false, self.unlinked_at_ms.or(Some(link.linked_at_ms))),
            (Some(_), None) => (false, Some(link.linked_at_ms)),
            (Some(_), Some(epoch)) if Some(epoch) == link.epoch => {
                let expires = self.holder_expires_at_ms.unwrap_or(0);
                match expires > now_ms {
                    true => (true, None),
                    false => (false, Some(expires)),
                }
            }
            (Some(_), Some(_)) => (false, self.holder_acquired_at_ms),
        };
        link.live = live;
        link.absent_since_ms = absent_since;
        if !live {
            link.replica_url = None;
        }
        link
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn candidate(device_id: &str, used: u32, capacity: u32, linked: i64) -> PlacementCandidate {
        PlacementCandidate {
            device_id: device_id.to_owned(),
            slots_in_use: used,
            capacity,
            linked_at_ms: linked,
        }
    }

    #[test]
    fn placement_takes_the_lowest_share_in_use_then_the_newest_link() {
        let none = std::collections::HashMap::new();
        /// The candidates, the busy sessions per node, and the node picked.
        type Case<'a> = (
            &'a [PlacementCandidate],
            &'a [(&'a str, u32)],
            Option<&'a str>,
        );
        let cases: &[Case<'_>] = &[
            (&[], &[], None),
            (
                &[candidate("a", 1, 8, 1), candidate("b", 0, 8, 0)],
                &[],
                Some("b"),
            ),
            // Equal shares: the most recently linked.
            (
                &[candidate("a", 1, 2, 1), candidate("b", 4, 8, 2)],
                &[],
                Some("b"),
            ),
            // Busy sessions count when they exceed the report (placements since it).
            (
                &[candidate("a", 0, 8, 1), candidate("b", 0, 8, 2)],
                &[("b", 3)],
                Some("a"),
            ),
            (
                &[candidate("a", 5, 8, 1), candidate("b", 0, 8, 2)],
                &[("b", 3), ("a", 1)],
                Some("b"),
            ),
            // A node without workers counts as one slot.
            (
                &[candidate("a", 0, 0, 1), candidate("b", 1, 8, 0)],
                &[],
                Some("a"),
            ),
        ];
        for (candidates, busy, expected) in cases {
            let busy: std::collections::HashMap<String, u32> = busy
                .iter()
                .map(|(device, count)| ((*device).to_owned(), *count))
                .collect();
            let busy = if busy.is_empty() { &none } else { &busy };
            assert_eq!(
                pick_placement(candidates, busy).map(|picked| picked.device_id.as_str()),
                *expected,
                "{candidates:?} {busy:?}"
            );
        }
    }

    #[test]
    fn a_link_is_live_only_under_its_holders_unexpired_lease() {
        let row =
            |replica: Option<&str>, epoch: Option<i64>, holder: Option<(i64, i64, i64)>| LinkRow {
                link: NodeLink {
                    device_id: String::from("n"),
                    replica_id: replica.map(str::to_owned),
                    epoch,
                    replica_url: Some(String::from("http://r")),
                    live: false,
                    conn_id: 1,
                    runtime: String::from("native"),
                    commands: Vec::new(),
                    slots_in_use: 0,
                    capacity: 8,
                    linked_at_ms: 100,
                    absent_since_ms: None,
                },
                unlinked_at_ms: replica.is_none().then_some(150),
                holder_epoch: holder.map(|(epoch, _, _)| epoch),
                holder_acquired_at_ms: holder.map(|(_, acquired, _)| acquired),
                holder_expires_at_ms: holder.map(|(_, _, expires)| expires),
            };
        let judged = |row: LinkRow| {
            let link = row.judge(1_000);
            (link.live, link.absent_since_ms, link.replica_url.is_some())
        };
        // Held under the holder's live lease.
        assert_eq!(
            judged(row(Some("r"), Some(2), Some((2, 50, 2_000)))),
            (true, None, true)
        );
        // The holder's lease expired at 900.
        assert_eq!(
            judged(row(Some("r"), Some(2), Some((2, 50, 900)))),
            (false, Some(900), false)
        );
        // The holder took a newer lease at 700: the link died with the older one.
        assert_eq!(
            judged(row(Some("r"), Some(2), Some((3, 700, 2_000)))),
            (false, Some(700), false)
        );
        // The link ended at 150.
        assert_eq!(judged(row(None, None, None)), (false, Some(150), false));
    }
}
