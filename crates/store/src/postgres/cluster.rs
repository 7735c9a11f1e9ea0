//! [`ClusterStore`] on PostgreSQL: leases judged by the server's clock, announcements on
//! `LISTEN`/`NOTIFY`.

use std::collections::HashMap;

use async_trait::async_trait;
use sqlx::postgres::PgListener;

use super::DB_NOW_MS;
use super::PgStore;
use super::TURN_COLUMNS;
use super::get;
use super::insert_event;
use super::lock_session;
use super::map_error;
use super::turn_from_row;
use crate::cluster::Acquired;
use crate::cluster::Announcement;
use crate::cluster::CHANNEL;
use crate::cluster::ClusterListener;
use crate::cluster::ClusterStore;
use crate::cluster::Fence;
use crate::cluster::Heard;
use crate::cluster::LinkRow;
use crate::cluster::MEDIA_LOCK_KEY;
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
use crate::model::EventPayload;
use crate::model::INTERRUPTED_MESSAGE;
use crate::model::TurnFailed;
use crate::model::TurnRecord;
use crate::model::TurnStatus;
use gatehouse_protocol::error::ErrorCode;

#[async_trait]
impl ClusterStore for PgStore {
    async fn acquire_replica(
        &self,
        replica_id: &str,
        url: Option<&str>,
        lease_ms: i64,
    ) -> Result<Acquired> {
        let mut tx = self.begin("replica").await?;
        // The row exists before it is locked, so two first starts of one id take turns.
        sqlx::query(
            "INSERT INTO replicas (replica_id, epoch, url, acquired_at_ms, expires_at_ms) \
             VALUES ($1, 0, NULL, 0, 0) ON CONFLICT (replica_id) DO NOTHING",
        )
        .bind(replica_id)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "replica"))?;
        let (epoch, expires_at_ms, now_ms): (i64, i64, i64) =
            sqlx::query_as(sqlx::AssertSqlSafe(format!(
                "SELECT epoch, expires_at_ms, {DB_NOW_MS} FROM replicas WHERE replica_id = $1 \
                 FOR UPDATE"
            )))
            .bind(replica_id)
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| map_error(e, "replica"))?;
        if expires_at_ms > now_ms {
            return Ok(Acquired::Held { expires_at_ms });
        }
        let epoch = epoch + 1;
        let expires_at_ms = now_ms.saturating_add(lease_ms);
        sqlx::query(
            "UPDATE replicas SET epoch = $2, url = $3, acquired_at_ms = $4, expires_at_ms = $5 \
             WHERE replica_id = $1",
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
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "UPDATE replicas SET expires_at_ms = {DB_NOW_MS} + $3 \
             WHERE replica_id = $1 AND epoch = $2 AND expires_at_ms > {DB_NOW_MS} \
             RETURNING expires_at_ms"
        )))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(lease_ms)
        .fetch_optional(&self.lease_pool)
        .await
        .map_err(|e| map_error(e, "replica"))
    }

    async fn release_replica(&self, fence: &Fence) -> Result<()> {
        let mut tx = self.begin("replica").await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = {DB_NOW_MS} \
             WHERE replica_id = $1 AND epoch = $2"
        )))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE replicas SET expires_at_ms = LEAST(expires_at_ms, {DB_NOW_MS}) \
             WHERE replica_id = $1 AND epoch = $2"
        )))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "replica"))?;
        tx.commit().await.map_err(|e| map_error(e, "replica"))
    }

    async fn end_all_leases(&self) -> Result<()> {
        let mut tx = self.begin("replica").await?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = {DB_NOW_MS} \
             WHERE replica_id IS NOT NULL"
        )))
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE replicas SET expires_at_ms = LEAST(expires_at_ms, {DB_NOW_MS})"
        )))
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "replica"))?;
        tx.commit().await.map_err(|e| map_error(e, "replica"))
    }

    async fn replicas(&self) -> Result<Vec<ReplicaRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT replica_id, epoch, url, acquired_at_ms, expires_at_ms, \
             expires_at_ms > {DB_NOW_MS} AS live FROM replicas WHERE epoch > 0 \
             ORDER BY replica_id COLLATE \"C\""
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "replica"))?;
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
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{TURN_COLUMNS} WHERE status = 'running' AND NOT EXISTS (SELECT 1 FROM replicas r \
             WHERE r.replica_id = turns.claim_replica AND r.epoch = turns.claim_epoch \
             AND r.expires_at_ms > {DB_NOW_MS}) \
             ORDER BY session_key COLLATE \"C\", turn_no FOR UPDATE SKIP LOCKED"
        )))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        let now_ms: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {DB_NOW_MS}")))
            .fetch_one(&mut *tx)
            .await
            .map_err(|e| map_error(e, "turn"))?;
        let mut interrupted = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut turn = turn_from_row(row)?;
            sqlx::query(
                "UPDATE turns SET status = 'interrupted', error_code = $1, \
                 error_message = $2, ended_at_ms = $3 WHERE turn_id = $4",
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
        let linked = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO node_links (device_id, replica_id, epoch, conn_id, runtime, \
             commands_json, slots_in_use, capacity, linked_at_ms, unlinked_at_ms) \
             SELECT $1, $2, $3, $4, $5, $6::jsonb, 0, 0, {DB_NOW_MS}, NULL \
             WHERE EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = $2 AND r.epoch = $3 \
             AND r.expires_at_ms > {DB_NOW_MS}) \
             ON CONFLICT (device_id) DO UPDATE SET replica_id = excluded.replica_id, \
             epoch = excluded.epoch, conn_id = excluded.conn_id, runtime = excluded.runtime, \
             commands_json = excluded.commands_json, slots_in_use = 0, capacity = 0, \
             linked_at_ms = excluded.linked_at_ms, unlinked_at_ms = NULL"
        )))
        .bind(&link.device_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(conn_id_column(link.conn_id))
        .bind(super::text(&link.runtime))
        .bind(super::text(&commands))
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        Ok(linked.rows_affected() == 1)
    }

    async fn unlink_node(&self, fence: &Fence, device_id: &str, conn_id: u64) -> Result<()> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE node_links SET replica_id = NULL, epoch = NULL, unlinked_at_ms = {DB_NOW_MS} \
             WHERE device_id = $1 AND replica_id = $2 AND epoch = $3 AND conn_id = $4"
        )))
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
            "UPDATE node_links SET slots_in_use = $5, capacity = $6 \
             WHERE device_id = $1 AND replica_id = $2 AND epoch = $3 AND conn_id = $4",
        )
        .bind(device_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(conn_id_column(conn_id))
        .bind(i64::from(slots_in_use))
        .bind(i64::from(capacity))
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        Ok(())
    }

    async fn node_links(&self) -> Result<NodeLinks> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT l.device_id, l.replica_id, l.epoch, l.conn_id, l.runtime, \
             l.commands_json::text AS commands_json, l.slots_in_use, l.capacity, l.linked_at_ms, \
             l.unlinked_at_ms, r.url, r.epoch AS holder_epoch, \
             r.acquired_at_ms AS holder_acquired_at_ms, r.expires_at_ms AS holder_expires_at_ms, \
             {DB_NOW_MS} AS now_ms \
             FROM node_links l LEFT JOIN replicas r ON r.replica_id = l.replica_id \
             ORDER BY l.device_id COLLATE \"C\""
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "node link"))?;
        let now_ms = match rows.first() {
            Some(row) => get(row, "now_ms")?,
            None => self.now_ms().await?,
        };
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
        let mut tx = self.begin("session node").await?;
        if !lock_session(&mut tx, session_key).await? {
            return Ok(None);
        }
        let bound: Option<String> =
            sqlx::query_scalar("SELECT node_id FROM sessions WHERE session_key = $1")
                .bind(session_key)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session node"))?;
        if let Some(device_id) = bound {
            return Ok(Some(SessionPlacement {
                device_id,
                placed_now: false,
            }));
        }
        let devices: Vec<String> = candidates.iter().map(|c| c.device_id.clone()).collect();
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT s.node_id, COUNT(*) FROM sessions s WHERE s.node_id = ANY($1) \
             AND EXISTS (SELECT 1 FROM turns t WHERE t.session_key = s.session_key \
             AND t.status IN ('queued', 'running')) GROUP BY s.node_id",
        )
        .bind(&devices)
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
            "UPDATE sessions SET node_id = $1, node_bound_at_ms = $2 \
             WHERE session_key = $3 AND node_id IS NULL",
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
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT DISTINCT t.session_key COLLATE \"C\" AS session_key FROM turns t \
             JOIN sessions s ON s.session_key = t.session_key \
             LEFT JOIN node_links l ON l.device_id = s.node_id \
             LEFT JOIN replicas r ON r.replica_id = l.replica_id \
             WHERE t.status = 'queued' AND NOT EXISTS (SELECT 1 FROM turns x \
             WHERE x.session_key = t.session_key AND x.status = 'running') \
             AND (s.node_id IS NULL OR l.device_id IS NULL OR l.replica_id IS NULL \
             OR (l.replica_id = $1 AND l.epoch = $2) OR r.epoch IS DISTINCT FROM l.epoch \
             OR r.expires_at_ms <= {DB_NOW_MS}) ORDER BY 1"
        )))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "turn"))
    }

    async fn running_turn(&self, session_key: &str) -> Result<Option<(String, Option<Fence>)>> {
        let row: Option<(String, Option<String>, Option<i64>)> = sqlx::query_as(
            "SELECT turn_id, claim_replica, claim_epoch FROM turns \
             WHERE session_key = $1 AND status = 'running' LIMIT 1",
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
            "INSERT INTO shared_secrets (name, value, created_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (name) DO NOTHING",
        )
        .bind(name)
        .bind(proposed)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "shared secret"))?;
        sqlx::query_scalar("SELECT value FROM shared_secrets WHERE name = $1")
            .bind(name)
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map_error(e, "shared secret"))
    }

    async fn announce(&self, announcements: &[Announcement]) -> Result<()> {
        let mut payloads = Vec::with_capacity(announcements.len());
        for announcement in announcements {
            let payload = serde_json::to_string(announcement).map_err(|_| StoreError::Corrupt {
                what: "announcement",
            })?;
            match payload.len() <= crate::cluster::MAX_ANNOUNCEMENT_BYTES {
                true => payloads.push(payload),
                false => tracing::warn!(
                    bytes = payload.len(),
                    "an announcement is longer than a notification carries; not sent"
                ),
            }
        }
        if payloads.is_empty() {
            return Ok(());
        }
        // One statement, so the notifications leave in order and as one transaction.
        sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
            .bind(CHANNEL)
            .bind(&payloads)
            .execute(&self.pool)
            .await
            .map_err(|e| map_error(e, "announcement"))?;
        Ok(())
    }

    async fn hold_media_writes(&self) -> Result<Box<dyn MediaHold>> {
        let mut hold = PgMediaHold::open(&self.media_lock_pool, "60s").await?;
        if let Some(connection) = hold.connection.as_mut() {
            sqlx::query("SELECT pg_advisory_lock_shared($1)")
                .bind(MEDIA_LOCK_KEY)
                .execute(&mut **connection)
                .await
                .map_err(|e| map_error(e, "media lock"))?;
        }
        hold.shared = true;
        hold.held = true;
        Ok(Box::new(hold))
    }

    async fn try_hold_media_collection(&self) -> Result<Option<Box<dyn MediaHold>>> {
        let mut hold = PgMediaHold::open(&self.media_lock_pool, "10s").await?;
        let Some(connection) = hold.connection.as_mut() else {
            return Ok(None);
        };
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(MEDIA_LOCK_KEY)
            .fetch_one(&mut **connection)
            .await
            .map_err(|e| map_error(e, "media lock"))?;
        hold.held = taken;
        match taken {
            true => Ok(Some(Box::new(hold))),
            false => {
                Box::new(hold).release().await;
                Ok(None)
            }
        }
    }

    async fn listen(&self) -> Result<Option<Box<dyn ClusterListener>>> {
        let mut listener = PgListener::connect_with(&self.pool)
            .await
            .map_err(|e| map_error(e, "listener"))?;
        listener
            .listen(CHANNEL)
            .await
            .map_err(|e| map_error(e, "listener"))?;
        Ok(Some(Box::new(PgClusterListener { listener })))
    }
}

impl PgStore {
    /// Returns the server's clock, in Unix milliseconds.
    async fn now_ms(&self) -> Result<i64> {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT {DB_NOW_MS}")))
            .fetch_one(&self.pool)
            .await
            .map_err(|e| map_error(e, "clock"))
    }
}

/// A hold on [`MEDIA_LOCK_KEY`]: a pooled connection of its own, whose session holds the
/// advisory lock, shared or exclusive.
struct PgMediaHold {
    connection: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    shared: bool,
    /// Whether the session took the lock (a collection's try may not have).
    held: bool,
}

impl PgMediaHold {
    /// Takes a connection of `pool` whose session the server ends after `idle` without a
    /// statement (so a frozen process cannot keep the lock).
    async fn open(pool: &sqlx::PgPool, idle: &str) -> Result<Self> {
        let mut connection = pool
            .acquire()
            .await
            .map_err(|e| map_error(e, "media lock"))?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET idle_session_timeout = '{idle}'"
        )))
        .execute(&mut *connection)
        .await
        .map_err(|e| map_error(e, "media lock"))?;
        Ok(Self {
            connection: Some(connection),
            shared: false,
            held: false,
        })
    }
}

#[async_trait]
impl MediaHold for PgMediaHold {
    async fn release(mut self: Box<Self>) {
        let Some(mut connection) = self.connection.take() else {
            return;
        };
        let unlocked = match (self.held, self.shared) {
            (false, _) => Ok(()),
            (true, shared) => {
                let unlock = match shared {
                    true => "SELECT pg_advisory_unlock_shared($1)",
                    false => "SELECT pg_advisory_unlock($1)",
                };
                sqlx::query(unlock)
                    .bind(MEDIA_LOCK_KEY)
                    .execute(&mut *connection)
                    .await
                    .map(|_| ())
            }
        };
        let released = unlocked.and(
            sqlx::query("RESET idle_session_timeout")
                .execute(&mut *connection)
                .await
                .map(|_| ()),
        );
        if released.is_err() {
            // Closing the session releases whatever it held.
            drop(connection.detach());
        }
    }

    async fn still_held(&mut self) -> bool {
        let Some(connection) = self.connection.as_mut() else {
            return false;
        };
        sqlx::query("SELECT 1")
            .execute(&mut **connection)
            .await
            .is_ok()
    }
}

impl Drop for PgMediaHold {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            // Not released: close the session, so the server releases the lock.
            drop(connection.detach());
        }
    }
}

/// A connection listening on [`CHANNEL`].
struct PgClusterListener {
    listener: PgListener,
}

#[async_trait]
impl ClusterListener for PgClusterListener {
    async fn next(&mut self) -> Result<Heard> {
        loop {
            let notification =
                self.listener
                    .try_recv()
                    .await
                    .map_err(|error| StoreError::Unavailable {
                        source: Box::new(error),
                    })?;
            let Some(notification) = notification else {
                // The connection was lost; the next call opens it again and listens anew.
                return Ok(Heard::Resumed);
            };
            match serde_json::from_str::<Announcement>(notification.payload()) {
                Ok(announcement) => return Ok(Heard::Announcement(announcement)),
                Err(error) => {
                    tracing::warn!(error = %error, "an announcement on the cluster channel does not decode; skipping it");
                }
            }
        }
    }
}
