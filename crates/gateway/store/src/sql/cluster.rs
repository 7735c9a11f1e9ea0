//! [`ClusterStore`] for [`SqlStore`]: leases judged by the store's clock ([`NOW_MS`]: the
//! PostgreSQL server's, or on SQLite the one machine's), and announcements, media holds and
//! listening as the [`Backend`] provides them (PostgreSQL's `LISTEN`/`NOTIFY` and advisory
//! locks; nothing on SQLite, where one process owns the file).

use std::collections::HashMap;

use async_trait::async_trait;

use super::Backend;
use super::NOW_MS;
use super::SqlStore;
use super::body::TURN_COLUMNS;
use super::body::insert_event;
use super::body::lock_session;
use super::body::turn_from_row;
use super::channels::queue_turn_reply;
use super::get;
use super::get_json;
use super::query;
use crate::cluster::Acquired;
use crate::cluster::Announcement;
use crate::cluster::ClusterListener;
use crate::cluster::ClusterStore;
use crate::cluster::Fence;
use crate::cluster::LinkRow;
use crate::cluster::MediaHold;
use crate::cluster::NewNodeLink;
use crate::cluster::NodeLink;
use crate::cluster::NodeLinks;
use crate::cluster::PlacementCandidate;
use crate::cluster::ReplicaLease;
use crate::cluster::ReplicaRecord;
use crate::cluster::SessionPlacement;
use crate::cluster::conn_id_column;
use crate::cluster::count_column;
use crate::cluster::pick_placement;
use crate::error::Result;
use crate::error::StoreError;
use crate::records::EventPayload;
use crate::records::INTERRUPTED_MESSAGE;
use crate::records::TurnFailed;
use crate::records::TurnRecord;
use crate::records::TurnStatus;
use gatehouse_protocol::error::ErrorCode;

#[async_trait]
impl<B: Backend> ClusterStore for SqlStore<B> {
    async fn acquire_replica(
        &self,
        replica_id: &str,
        url: Option<&str>,
        lease_ms: i64,
    ) -> Result<Acquired> {
        let mut tx = self.begin("replica").await?;
        // The row exists before it is locked, so two first starts of one id take turns.
        query(
            "INSERT INTO replicas (replica_id, epoch, url, acquired_at_ms, expires_at_ms) \
             VALUES (?, 0, NULL, 0, 0) ON CONFLICT (replica_id) DO NOTHING",
        )
        .bind(replica_id)
        .execute(&mut tx, "replica")
        .await?;
        let row = query(format!(
            "SELECT epoch, expires_at_ms, {NOW_MS} AS now_ms FROM replicas \
             WHERE replica_id = ? FOR UPDATE"
        ))
        .bind(replica_id)
        .one(&mut tx, "replica")
        .await?;
        let epoch: i64 = get(&row, "epoch")?;
        let expires_at_ms: i64 = get(&row, "expires_at_ms")?;
        let now_ms: i64 = get(&row, "now_ms")?;
        if expires_at_ms > now_ms {
            return Ok(Acquired::Held { expires_at_ms });
        }
        let epoch = epoch + 1;
        let expires_at_ms = now_ms.saturating_add(lease_ms);
        query(
            "UPDATE replicas SET epoch = ?, url = ?, acquired_at_ms = ?, expires_at_ms = ? \
             WHERE replica_id = ?",
        )
        .bind(epoch)
        .bind(url)
        .bind(now_ms)
        .bind(expires_at_ms)
        .bind(replica_id)
        .execute(&mut tx, "replica")
        .await?;
        tx.commit("replica").await?;
        Ok(Acquired::Taken(ReplicaLease {
            fence: Fence {
                replica_id: replica_id.to_owned(),
                epoch,
            },
            acquired_at_ms: now_ms,
            expires_at_ms,
        }))
    }

    async fn renew_replica(&self, fence: &Fence, lease_ms: i64) -> Result<Option<i64>> {
        query(format!(
            "UPDATE replicas SET expires_at_ms = {NOW_MS} + ? \
             WHERE replica_id = ? AND epoch = ? AND expires_at_ms > {NOW_MS} \
             RETURNING expires_at_ms"
        ))
        .bind(lease_ms)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .opt_scalar(&self.db.for_leases(), "replica")
        .await
    }

    async fn release_replica(&self, fence: &Fence) -> Result<()> {
        let mut tx = self.begin("replica").await?;
        query(format!(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = {NOW_MS} \
             WHERE replica_id = ? AND epoch = ?"
        ))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&mut tx, "node link")
        .await?;
        query(format!(
            "UPDATE replicas SET expires_at_ms = LEAST(expires_at_ms, {NOW_MS}) \
             WHERE replica_id = ? AND epoch = ?"
        ))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&mut tx, "replica")
        .await?;
        tx.commit("replica").await
    }

    async fn end_all_leases(&self) -> Result<()> {
        let mut tx = self.begin("replica").await?;
        query(format!(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = {NOW_MS} \
             WHERE replica_id IS NOT NULL"
        ))
        .execute(&mut tx, "node link")
        .await?;
        query(format!(
            "UPDATE replicas SET expires_at_ms = LEAST(expires_at_ms, {NOW_MS})"
        ))
        .execute(&mut tx, "replica")
        .await?;
        tx.commit("replica").await
    }

    async fn replicas(&self) -> Result<Vec<ReplicaRecord>> {
        let rows = query(format!(
            "SELECT replica_id, epoch, url, acquired_at_ms, expires_at_ms, \
             expires_at_ms > {NOW_MS} AS live FROM replicas WHERE epoch > 0 \
             ORDER BY replica_id COLLATE \"C\""
        ))
        .all(&self.db, "replica")
        .await?;
        rows.iter()
            .map(|row| {
                Ok(ReplicaRecord {
                    replica_id: get(row, "replica_id")?,
                    epoch: get(row, "epoch")?,
                    url: get(row, "url")?,
                    acquired_at_ms: get(row, "acquired_at_ms")?,
                    expires_at_ms: get(row, "expires_at_ms")?,
                    live: get(row, "live")?,
                })
            })
            .collect()
    }

    async fn interrupt_orphaned_turns(&self) -> Result<Vec<TurnRecord>> {
        let mut tx = self.begin("turn").await?;
        // A turn whose row a write holds is skipped: that write either commits first or finds
        // the turn ended; the next call takes it.
        let rows = query(format!(
            "{TURN_COLUMNS} WHERE status = 'running' AND NOT EXISTS (SELECT 1 FROM replicas r \
             WHERE r.replica_id = turns.claim_replica AND r.epoch = turns.claim_epoch \
             AND r.expires_at_ms > {NOW_MS}) \
             ORDER BY session_key COLLATE \"C\", turn_no FOR UPDATE SKIP LOCKED"
        ))
        .all(&mut tx, "turn")
        .await?;
        let now_ms: i64 = query(format!("SELECT {NOW_MS}"))
            .scalar(&mut tx, "turn")
            .await?;
        let mut interrupted = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut turn = turn_from_row(row)?;
            query(
                "UPDATE turns SET status = 'interrupted', error_code = ?, \
                 error_message = ?, ended_at_ms = ? WHERE turn_id = ?",
            )
            .bind(ErrorCode::Interrupted.as_str())
            .bind(INTERRUPTED_MESSAGE)
            .bind(now_ms)
            .bind(&turn.turn_id)
            .execute(&mut tx, "turn")
            .await?;
            let payload = TurnFailed::interrupted(&turn.turn_id).to_payload_json();
            insert_event(
                &mut tx,
                &turn.session_key,
                TurnFailed::KIND,
                &payload,
                now_ms,
            )
            .await?;
            queue_turn_reply(&mut tx, &turn.turn_id, now_ms).await?;
            turn.status = TurnStatus::Interrupted;
            turn.ended_at_ms = Some(now_ms);
            interrupted.push(turn);
        }
        tx.commit("turn").await?;
        Ok(interrupted)
    }

    async fn link_node(&self, fence: &Fence, link: &NewNodeLink) -> Result<bool> {
        let commands = serde_json::to_string(&link.commands).map_err(|_| StoreError::Corrupt {
            what: "node commands",
        })?;
        let linked = query(format!(
            "INSERT INTO node_links (device_id, replica_id, epoch, conn_id, runtime, \
             commands_json, slots_in_use, capacity, linked_at_ms, unlinked_at_ms) \
             SELECT ?, ?, ?, ?, ?, ?::jsonb, 0, 0, {NOW_MS}, NULL \
             WHERE EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = ? AND r.epoch = ? \
             AND r.expires_at_ms > {NOW_MS}) \
             ON CONFLICT (device_id) DO UPDATE SET replica_id = excluded.replica_id, \
             epoch = excluded.epoch, conn_id = excluded.conn_id, runtime = excluded.runtime, \
             commands_json = excluded.commands_json, slots_in_use = 0, capacity = 0, \
             linked_at_ms = excluded.linked_at_ms, unlinked_at_ms = NULL"
        ))
        .bind(&link.device_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(conn_id_column(link.conn_id))
        .text(&link.runtime)
        .text(&commands)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&self.db, "node link")
        .await?;
        Ok(linked == 1)
    }

    async fn unlink_node(&self, fence: &Fence, device_id: &str, conn_id: u64) -> Result<()> {
        query(format!(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = {NOW_MS} \
             WHERE device_id = ? AND replica_id = ? AND epoch = ? AND conn_id = ?"
        ))
        .bind(device_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(conn_id_column(conn_id))
        .execute(&self.db, "node link")
        .await?;
        Ok(())
    }

    async fn report_node_load(
        &self,
        fence: &Fence,
        device_id: &str,
        conn_id: u64,
        slots_in_use: u32,
        capacity: u32,
    ) -> Result<()> {
        query(
            "UPDATE node_links SET slots_in_use = ?, capacity = ? \
             WHERE device_id = ? AND replica_id = ? AND epoch = ? AND conn_id = ?",
        )
        .bind(i64::from(slots_in_use))
        .bind(i64::from(capacity))
        .bind(device_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(conn_id_column(conn_id))
        .execute(&self.db, "node link")
        .await?;
        Ok(())
    }

    async fn node_links(&self) -> Result<NodeLinks> {
        let rows = query(format!(
            "SELECT l.device_id, l.replica_id, l.epoch, l.conn_id, l.runtime, \
             l.commands_json::text AS commands_json, l.slots_in_use, l.capacity, l.linked_at_ms, \
             l.unlinked_at_ms, r.url, r.epoch AS holder_epoch, \
             r.acquired_at_ms AS holder_acquired_at_ms, r.expires_at_ms AS holder_expires_at_ms, \
             {NOW_MS} AS now_ms \
             FROM node_links l LEFT JOIN replicas r ON r.replica_id = l.replica_id \
             ORDER BY l.device_id COLLATE \"C\""
        ))
        .all(&self.db, "node link")
        .await?;
        let now_ms: i64 = match rows.first() {
            Some(row) => get(row, "now_ms")?,
            None => {
                query(format!("SELECT {NOW_MS}"))
                    .scalar(&self.db, "clock")
                    .await?
            }
        };
        let mut links = Vec::with_capacity(rows.len());
        for row in &rows {
            let link = LinkRow {
                link: NodeLink {
                    device_id: get(row, "device_id")?,
                    replica_id: get(row, "replica_id")?,
                    epoch: get(row, "epoch")?,
                    replica_url: get(row, "url")?,
                    live: false,
                    conn_id: u64::try_from(get::<i64>(row, "conn_id")?).unwrap_or(0),
                    runtime: get(row, "runtime")?,
                    commands: get_json(row, "commands_json", "node commands")?,
                    slots_in_use: count_column(get(row, "slots_in_use")?),
                    capacity: count_column(get(row, "capacity")?),
                    linked_at_ms: get(row, "linked_at_ms")?,
                    absent_since_ms: None,
                },
                unlinked_at_ms: get(row, "unlinked_at_ms")?,
                holder_epoch: get(row, "holder_epoch")?,
                holder_acquired_at_ms: get(row, "holder_acquired_at_ms")?,
                holder_expires_at_ms: get(row, "holder_expires_at_ms")?,
            };
            links.push(link.judge(now_ms));
        }
        Ok(NodeLinks { now_ms, links })
    }

    async fn place_session(
        &self,
        session_key: &str,
        candidates: &[PlacementCandidate],
        now_ms: i64,
    ) -> Result<Option<SessionPlacement>> {
        let mut tx = self.begin("session node").await?;
        if !lock_session(&mut tx, session_key).await? {
            return Ok(None);
        }
        let bound: Option<String> = query("SELECT node_id FROM sessions WHERE session_key = ?")
            .bind(session_key)
            .scalar(&mut tx, "session node")
            .await?;
        if let Some(device_id) = bound {
            return Ok(Some(SessionPlacement {
                device_id,
                placed_now: false,
            }));
        }
        // Every node's busy sessions; the pick reads only the candidates'.
        let rows = query(
            "SELECT s.node_id, COUNT(*) AS busy FROM sessions s WHERE s.node_id IS NOT NULL \
             AND EXISTS (SELECT 1 FROM turns t WHERE t.session_key = s.session_key \
             AND t.status IN ('queued', 'running')) GROUP BY s.node_id",
        )
        .all(&mut tx, "session node")
        .await?;
        let mut busy = HashMap::with_capacity(rows.len());
        for row in &rows {
            busy.insert(
                get::<String>(row, "node_id")?,
                count_column(get(row, "busy")?),
            );
        }
        let Some(picked) = pick_placement(candidates, &busy) else {
            return Ok(None);
        };
        query(
            "UPDATE sessions SET node_id = ?, node_bound_at_ms = ? \
             WHERE session_key = ? AND node_id IS NULL",
        )
        .bind(&picked.device_id)
        .bind(now_ms)
        .bind(session_key)
        .execute(&mut tx, "session node")
        .await?;
        tx.commit("session node").await?;
        Ok(Some(SessionPlacement {
            device_id: picked.device_id.clone(),
            placed_now: true,
        }))
    }

    async fn dispatchable_sessions(&self, fence: &Fence) -> Result<Vec<String>> {
        query(format!(
            "SELECT DISTINCT t.session_key COLLATE \"C\" AS session_key FROM turns t \
             JOIN sessions s ON s.session_key = t.session_key \
             LEFT JOIN node_links l ON l.device_id = s.node_id \
             LEFT JOIN replicas r ON r.replica_id = l.replica_id \
             WHERE t.status = 'queued' AND NOT EXISTS (SELECT 1 FROM turns x \
             WHERE x.session_key = t.session_key AND x.status = 'running') \
             AND (s.node_id IS NULL OR l.device_id IS NULL OR l.replica_id IS NULL \
             OR (l.replica_id = ? AND l.epoch = ?) OR r.epoch IS DISTINCT FROM l.epoch \
             OR r.expires_at_ms <= {NOW_MS}) ORDER BY 1"
        ))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .column(&self.db, "turn")
        .await
    }

    async fn running_turn(&self, session_key: &str) -> Result<Option<(String, Option<Fence>)>> {
        let row = query(
            "SELECT turn_id, claim_replica, claim_epoch FROM turns \
             WHERE session_key = ? AND status = 'running' LIMIT 1",
        )
        .bind(session_key)
        .optional(&self.db, "turn")
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let replica: Option<String> = get(&row, "claim_replica")?;
        let epoch: Option<i64> = get(&row, "claim_epoch")?;
        let fence = match (replica, epoch) {
            (Some(replica_id), Some(epoch)) => Some(Fence { replica_id, epoch }),
            _ => None,
        };
        Ok(Some((get(&row, "turn_id")?, fence)))
    }

    async fn shared_secret(&self, name: &str, proposed: &str, now_ms: i64) -> Result<String> {
        query(
            "INSERT INTO shared_secrets (name, value, created_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(proposed)
        .bind(now_ms)
        .execute(&self.db, "shared secret")
        .await?;
        query("SELECT value FROM shared_secrets WHERE name = ?")
            .bind(name)
            .scalar(&self.db, "shared secret")
            .await
    }

    async fn announce(&self, announcements: &[Announcement]) -> Result<()> {
        self.db.announce(announcements).await
    }

    async fn hold_media_writes(&self) -> Result<Box<dyn MediaHold>> {
        self.db.hold_media_writes().await
    }

    async fn try_hold_media_collection(&self) -> Result<Option<Box<dyn MediaHold>>> {
        self.db.try_hold_media_collection().await
    }

    async fn listen(&self) -> Result<Option<Box<dyn ClusterListener>>> {
        self.db.listen().await
    }
}
