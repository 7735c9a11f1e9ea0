//! [`ClusterStore`] on SQLite: one replica at a time (the file is locked), whose lease is
//! judged by this process's clock and fences its turns exactly as on PostgreSQL; there is no
//! announcement channel.

use std::collections::HashMap;

use async_trait::async_trait;

use super::SqliteStore;
use super::TURN_COLUMNS;
use super::get;
use super::insert_event;
use super::map_error;
use super::turn_from_row;
use crate::cluster::Acquired;
use crate::cluster::Announcement;
use crate::cluster::ClusterListener;
use crate::cluster::ClusterStore;
use crate::cluster::Fence;
use crate::cluster::LinkRow;
use crate::cluster::MediaHold;
use crate::cluster::NewNodeLink;
use crate::cluster::NoHold;
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
use crate::model::EventPayload;
use crate::model::INTERRUPTED_MESSAGE;
use crate::model::TurnFailed;
use crate::model::TurnRecord;
use crate::model::TurnStatus;
use gatehouse_protocol::error::ErrorCode;

/// Returns this process's clock in Unix milliseconds, the clock of a SQLite store's leases.
pub(crate) fn clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_millis()).unwrap_or(i64::MAX)
        })
}

#[async_trait]
impl ClusterStore for SqliteStore {
    async fn acquire_replica(
        &self,
        replica_id: &str,
        url: Option<&str>,
        lease_ms: i64,
    ) -> Result<Acquired> {
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "replica"))?;
        let now_ms = clock_ms();
        let row: Option<(i64, i64)> =
            sqlx::query_as("SELECT epoch, expires_at_ms FROM replicas WHERE replica_id = ?")
                .bind(replica_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| map_error(e, "replica"))?;
        if let Some((_, expires_at_ms)) = row
            && expires_at_ms > now_ms
        {
            return Ok(Acquired::Held { expires_at_ms });
        }
        let epoch = row.map_or(0, |(epoch, _)| epoch) + 1;
        let expires_at_ms = now_ms.saturating_add(lease_ms);
        sqlx::query(
            "INSERT INTO replicas (replica_id, epoch, url, acquired_at_ms, expires_at_ms) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (replica_id) DO UPDATE SET \
             epoch = excluded.epoch, url = excluded.url, acquired_at_ms = excluded.acquired_at_ms, \
             expires_at_ms = excluded.expires_at_ms",
        )
        .bind(replica_id)
        .bind(epoch)
        .bind(url)
        .bind(now_ms)
        .bind(expires_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "replica"))?;
        tx.commit().await.map_err(|e| map_error(e, "replica"))?;
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
        let now_ms = clock_ms();
        sqlx::query_scalar(
            "UPDATE replicas SET expires_at_ms = ? \
             WHERE replica_id = ? AND epoch = ? AND expires_at_ms > ? RETURNING expires_at_ms",
        )
        .bind(now_ms.saturating_add(lease_ms))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(now_ms)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "replica"))
    }

    async fn release_replica(&self, fence: &Fence) -> Result<()> {
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "replica"))?;
        let now_ms = clock_ms();
        sqlx::query(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = ? \
             WHERE replica_id = ? AND epoch = ?",
        )
        .bind(now_ms)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        sqlx::query(
            "UPDATE replicas SET expires_at_ms = MIN(expires_at_ms, ?) \
             WHERE replica_id = ? AND epoch = ?",
        )
        .bind(now_ms)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "replica"))?;
        tx.commit().await.map_err(|e| map_error(e, "replica"))
    }

    async fn end_all_leases(&self) -> Result<()> {
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "replica"))?;
        let now_ms = clock_ms();
        sqlx::query(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = ? \
             WHERE replica_id IS NOT NULL",
        )
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        sqlx::query("UPDATE replicas SET expires_at_ms = MIN(expires_at_ms, ?)")
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_error(e, "replica"))?;
        tx.commit().await.map_err(|e| map_error(e, "replica"))
    }

    async fn replicas(&self) -> Result<Vec<ReplicaRecord>> {
        let now_ms = clock_ms();
        let rows = sqlx::query(
            "SELECT replica_id, epoch, url, acquired_at_ms, expires_at_ms FROM replicas \
             ORDER BY replica_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "replica"))?;
        rows.iter()
            .map(|row| {
                let expires_at_ms: i64 = get(row, "expires_at_ms")?;
                Ok(ReplicaRecord {
                    replica_id: get(row, "replica_id")?,
                    epoch: get(row, "epoch")?,
                    url: get(row, "url")?,
                    acquired_at_ms: get(row, "acquired_at_ms")?,
                    expires_at_ms,
                    live: expires_at_ms > now_ms,
                })
            })
            .collect()
    }

    async fn interrupt_orphaned_turns(&self) -> Result<Vec<TurnRecord>> {
        let mut tx = self.begin_write().await.map_err(|e| map_error(e, "turn"))?;
        let now_ms = clock_ms();
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{TURN_COLUMNS} WHERE status = 'running' AND NOT EXISTS (SELECT 1 FROM replicas r \
             WHERE r.replica_id = turns.claim_replica AND r.epoch = turns.claim_epoch \
             AND r.expires_at_ms > ?) ORDER BY session_key, turn_no"
        )))
        .bind(now_ms)
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        let mut interrupted = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut turn = turn_from_row(row)?;
            sqlx::query(
                "UPDATE turns SET status = 'interrupted', error_code = ?, error_message = ?, \
                 ended_at_ms = ? WHERE turn_id = ?",
            )
            .bind(ErrorCode::Interrupted.as_str())
            .bind(INTERRUPTED_MESSAGE)
            .bind(now_ms)
            .bind(&turn.turn_id)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_error(e, "turn"))?;
            let payload = TurnFailed::interrupted(&turn.turn_id).to_payload_json();
            insert_event(
                &mut tx,
                &turn.session_key,
                TurnFailed::KIND,
                &payload,
                now_ms,
            )
            .await?;
            turn.status = TurnStatus::Interrupted;
            turn.ended_at_ms = Some(now_ms);
            interrupted.push(turn);
        }
        tx.commit().await.map_err(|e| map_error(e, "turn"))?;
        Ok(interrupted)
    }

    async fn link_node(&self, fence: &Fence, link: &NewNodeLink) -> Result<bool> {
        let commands = serde_json::to_string(&link.commands).map_err(|_| StoreError::Corrupt {
            what: "node commands",
        })?;
        let now_ms = clock_ms();
        let linked = sqlx::query(
            "INSERT INTO node_links (device_id, replica_id, epoch, conn_id, runtime, \
             commands_json, slots_in_use, capacity, linked_at_ms, unlinked_at_ms) \
             SELECT ?1, ?2, ?3, ?4, ?5, ?6, 0, 0, ?7, NULL \
             WHERE EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = ?2 AND r.epoch = ?3 \
             AND r.expires_at_ms > ?7) \
             ON CONFLICT (device_id) DO UPDATE SET replica_id = excluded.replica_id, \
             epoch = excluded.epoch, conn_id = excluded.conn_id, runtime = excluded.runtime, \
             commands_json = excluded.commands_json, slots_in_use = 0, capacity = 0, \
             linked_at_ms = excluded.linked_at_ms, unlinked_at_ms = NULL",
        )
        .bind(&link.device_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(conn_id_column(link.conn_id))
        .bind(&link.runtime)
        .bind(&commands)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        Ok(linked.rows_affected() == 1)
    }

    async fn unlink_node(&self, fence: &Fence, device_id: &str, conn_id: u64) -> Result<()> {
        sqlx::query(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = ? \
             WHERE device_id = ? AND replica_id = ? AND epoch = ? AND conn_id = ?",
        )
        .bind(clock_ms())
        .bind(device_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(conn_id_column(conn_id))
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "node link"))?;
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
        sqlx::query(
            "UPDATE node_links SET slots_in_use = ?, capacity = ? \
             WHERE device_id = ? AND replica_id = ? AND epoch = ? AND conn_id = ?",
        )
        .bind(i64::from(slots_in_use))
        .bind(i64::from(capacity))
        .bind(device_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(conn_id_column(conn_id))
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        Ok(())
    }

    async fn node_links(&self) -> Result<NodeLinks> {
        let now_ms = clock_ms();
        let rows = sqlx::query(
            "SELECT l.device_id, l.replica_id, l.epoch, l.conn_id, l.runtime, l.commands_json, \
             l.slots_in_use, l.capacity, l.linked_at_ms, l.unlinked_at_ms, r.url, \
             r.epoch AS holder_epoch, r.acquired_at_ms AS holder_acquired_at_ms, \
             r.expires_at_ms AS holder_expires_at_ms \
             FROM node_links l LEFT JOIN replicas r ON r.replica_id = l.replica_id \
             ORDER BY l.device_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        let mut links = Vec::with_capacity(rows.len());
        for row in &rows {
            let commands: String = get(row, "commands_json")?;
            let link = LinkRow {
                link: NodeLink {
                    device_id: get(row, "device_id")?,
                    replica_id: get(row, "replica_id")?,
                    epoch: get(row, "epoch")?,
                    replica_url: get(row, "url")?,
                    live: false,
                    conn_id: u64::try_from(get::<i64>(row, "conn_id")?).unwrap_or(0),
                    runtime: get(row, "runtime")?,
                    commands: serde_json::from_str(&commands).map_err(|_| StoreError::Corrupt {
                        what: "node commands",
                    })?,
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "session node"))?;
        let bound: Option<Option<String>> =
            sqlx::query_scalar("SELECT node_id FROM sessions WHERE session_key = ?")
                .bind(session_key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session node"))?;
        let Some(bound) = bound else {
            return Ok(None);
        };
        if let Some(device_id) = bound {
            return Ok(Some(SessionPlacement {
                device_id,
                placed_now: false,
            }));
        }
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT s.node_id, COUNT(*) FROM sessions s WHERE s.node_id IS NOT NULL \
             AND EXISTS (SELECT 1 FROM turns t WHERE t.session_key = s.session_key \
             AND t.status IN ('queued', 'running')) GROUP BY s.node_id",
        )
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session node"))?;
        let busy: HashMap<String, u32> = rows
            .into_iter()
            .map(|(device, count)| (device, count_column(count)))
            .collect();
        let Some(picked) = pick_placement(candidates, &busy) else {
            return Ok(None);
        };
        sqlx::query(
            "UPDATE sessions SET node_id = ?, node_bound_at_ms = ? \
             WHERE session_key = ? AND node_id IS NULL",
        )
        .bind(&picked.device_id)
        .bind(now_ms)
        .bind(session_key)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session node"))?;
        tx.commit()
            .await
            .map_err(|e| map_error(e, "session node"))?;
        Ok(Some(SessionPlacement {
            device_id: picked.device_id.clone(),
            placed_now: true,
        }))
    }

    async fn dispatchable_sessions(&self, fence: &Fence) -> Result<Vec<String>> {
        sqlx::query_scalar(
            "SELECT DISTINCT t.session_key FROM turns t \
             JOIN sessions s ON s.session_key = t.session_key \
             LEFT JOIN node_links l ON l.device_id = s.node_id \
             LEFT JOIN replicas r ON r.replica_id = l.replica_id \
             WHERE t.status = 'queued' AND NOT EXISTS (SELECT 1 FROM turns x \
             WHERE x.session_key = t.session_key AND x.status = 'running') \
             AND (s.node_id IS NULL OR l.device_id IS NULL OR l.replica_id IS NULL \
             OR (l.replica_id = ?1 AND l.epoch = ?2) OR r.epoch IS NOT l.epoch \
             OR r.expires_at_ms <= ?3) ORDER BY 1",
        )
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(clock_ms())
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "turn"))
    }

    async fn running_turn(&self, session_key: &str) -> Result<Option<(String, Option<Fence>)>> {
        let row: Option<(String, Option<String>, Option<i64>)> = sqlx::query_as(
            "SELECT turn_id, claim_replica, claim_epoch FROM turns \
             WHERE session_key = ? AND status = 'running' LIMIT 1",
        )
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        Ok(row.map(|(turn_id, replica, epoch)| {
            let fence = match (replica, epoch) {
                (Some(replica_id), Some(epoch)) => Some(Fence { replica_id, epoch }),
                _ => None,
            };
            (turn_id, fence)
        }))
    }

    async fn shared_secret(&self, name: &str, proposed: &str, now_ms: i64) -> Result<String> {
        sqlx::query(
            "INSERT INTO shared_secrets (name, value, created_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(proposed)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "shared secret"))?;
        sqlx::query_scalar("SELECT value FROM shared_secrets WHERE name = ?")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map_error(e, "shared secret"))
    }

    async fn announce(&self, _announcements: &[Announcement]) -> Result<()> {
        Ok(())
    }

    async fn hold_media_writes(&self) -> Result<Box<dyn MediaHold>> {
        Ok(Box::new(NoHold))
    }

    async fn try_hold_media_collection(&self) -> Result<Option<Box<dyn MediaHold>>> {
        Ok(Some(Box::new(NoHold)))
    }

    async fn listen(&self) -> Result<Option<Box<dyn ClusterListener>>> {
        Ok(None)
    }
}
