//! [`PgStore`]: the Gateway store in a PostgreSQL database, with versioned migrations applied at
//! start under an advisory lock.
//!
//! # Semantics
//! The store keeps the contract of [`crate::sqlite::SqliteStore`] on a server that runs many
//! writers at once, at PostgreSQL's default isolation (read committed):
//! - Every method that writes more than one row runs in one transaction; a lost connection rolls
//!   it back on the server, so an admission is stored whole or not at all.
//! - A session's row is its lock: admissions, claims, moves and every transcript or event append
//!   lock it first, so sequence numbers within a session are contiguous and a session never runs
//!   two turns.
//! - A turn's row fences its writers: a commit locks the running turn, so a message is never
//!   stored after the turn ended.
//! - Audit appends take a transaction-level advisory lock, so a reader that pages with
//!   [`Store::audit_after`] never skips an event whose sequence number committed late.
//! - A connection error (refused, reset, server shutdown, pool timeout) is
//!   [`StoreError::Unavailable`]; the pool opens fresh connections on the next call, so the
//!   Gateway recovers without a restart once the server is back.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Connection;
use sqlx::Row;
use sqlx::postgres::PgConnectOptions;
use sqlx::postgres::PgConnection;
use sqlx::postgres::PgPool;
use sqlx::postgres::PgPoolOptions;
use sqlx::postgres::PgRow;

mod cluster;

use crate::Store;
use crate::cluster::ClaimOutcome;
use crate::cluster::Fence;
use crate::cluster::TurnWriter;
use crate::error::Result;
use crate::error::StoreError;
use crate::location::PostgresLocation;

use crate::charges;
use crate::charges::Dialect;
use crate::model::API_KEY_LAST_USED_RESOLUTION_MS;
use crate::model::Admitted;
use crate::model::ApiKeyRecord;
use crate::model::AuditEvent;
use crate::model::CheckpointBlob;
use crate::model::CheckpointManifest;
use crate::model::EnrollOutcome;
use crate::model::Enrollment;
use crate::model::EventPayload;
use crate::model::EventRecord;
use crate::model::MediaCharge;
use crate::model::MediaChargeKind;
use crate::model::MessageRecord;
use crate::model::NewApiKey;
use crate::model::NewAuditEvent;
use crate::model::NewSetupCode;
use crate::model::NewTurnMessage;
use crate::model::NewUserMessage;
use crate::model::NewWorktreeVersion;
use crate::model::NodeRecord;
use crate::model::NodeSeen;
use crate::model::QueueMode;
use crate::model::ReleasedUpload;
use crate::model::ResultApply;
use crate::model::ResultState;
use crate::model::SessionMove;
use crate::model::SessionRecord;
use crate::model::SessionWorkspace;
use crate::model::StoreFigures;
use crate::model::StoredManifest;
use crate::model::TurnEnd;
use crate::model::TurnQueued;
use crate::model::TurnRecord;
use crate::model::TurnStarted;
use crate::model::TurnStatus;
use crate::model::WorkspaceSet;
use crate::model::WorkspaceSource;
use crate::model::WorktreeOrigin;
use crate::model::WorktreeResult;
use crate::model::WorktreeVersion;
use crate::model::manifest_json;
use crate::model::parse_manifest;
use crate::model::parse_paths;
use crate::model::paths_json;
use crate::model::stored_workspace;
use crate::model::usage_columns;
use crate::model::usage_from_columns;
use crate::model::workspace_json;

/// The most pooled connections of one Gateway.
pub const POOL_CONNECTIONS: u32 = 16;

/// How long a call waits for a connection (including connecting) before it fails with
/// [`StoreError::Unavailable`]: requests fail fast while the server is down instead of hanging.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long the server lets a transaction of this store sit idle before it ends it: the longest
/// a frozen replica can hold a turn's row (see [`crate::cluster`]).
pub const STALLED_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(5);

/// The key of the advisory lock that orders audit appends ("gh-audit" in ASCII).
const AUDIT_LOCK_KEY: i64 = 0x6768_2d61_7564_6974;

/// The Gateway store in a PostgreSQL database.
#[derive(Debug, Clone)]
pub struct PgStore {
    pool: PgPool,
    /// One connection of its own for renewing replica leases, so a busy main pool never makes
    /// a replica miss its renewal.
    lease_pool: PgPool,
    /// The connections that hold the media lock ([`crate::ClusterStore::hold_media_writes`]):
    /// a holder does its work on the main pool, so holders never starve it, and at most
    /// [`MEDIA_LOCK_CONNECTIONS`] hold at once (the rest wait their turn).
    media_lock_pool: PgPool,
}

/// How many media-lock holds one Gateway keeps at once; more wait for one, for up to
/// [`MEDIA_LOCK_WAIT`].
pub const MEDIA_LOCK_CONNECTIONS: u32 = 4;

/// How long a writer waits for a media-lock connection before its write fails.
const MEDIA_LOCK_WAIT: Duration = Duration::from_secs(60);

impl PgStore {
    /// Connects to the database at `location` and applies pending migrations under sqlx's
    /// PostgreSQL advisory lock, so Gateways starting at once against one database migrate one
    /// after the other.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the password reference cannot be resolved, or the server
    /// cannot be reached or migrated.
    pub async fn open(location: &PostgresLocation) -> Result<Self> {
        let options = location.connect_options()?;
        Self::open_with(options).await
    }

    /// Connects with `options` and applies pending migrations, as [`PgStore::open`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached or migrated.
    pub async fn open_with(options: PgConnectOptions) -> Result<Self> {
        // A transaction left open by a stalled process (a replica frozen mid-write) is ended by
        // the server, so it holds no turn's row past this: the survivors can take its turns
        // over. The store's transactions never wait on anything but the server between
        // statements.
        let options = options.options([(
            "idle_in_transaction_session_timeout",
            format!("{}", STALLED_TRANSACTION_TIMEOUT.as_millis()),
        )]);
        // One direct connection first: the pool would report an unreachable server only as a
        // timeout, and the operator needs the reason (refused, authentication, no database).
        let probe = PgConnection::connect_with(&options)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        // Closing is a courtesy to the server; the connection is gone either way.
        let _ = probe.close().await;
        let lease_pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(true)
            .connect_lazy_with(options.clone());
        let media_lock_pool = PgPoolOptions::new()
            .max_connections(MEDIA_LOCK_CONNECTIONS)
            .acquire_timeout(MEDIA_LOCK_WAIT)
            .test_before_acquire(true)
            .connect_lazy_with(options.clone());
        let pool = PgPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // A connection the server dropped is noticed here and replaced.
            .test_before_acquire(true)
            .connect_with(options)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        let mut migrator = sqlx::migrate!("./migrations/postgres");
        migrator.set_locking(true);
        migrator
            .run(&pool)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        Ok(Self {
            pool,
            lease_pool,
            media_lock_pool,
        })
    }

    /// Returns the connection pool, for callers that add their own tables in this crate.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn begin(
        &self,
        what: &'static str,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>> {
        self.pool.begin().await.map_err(|e| map_error(e, what))
    }
}

/// The columns of a [`WorktreeResult`], as [`worktree_result_from_row`] reads them.
macro_rules! worktree_result_columns {
    () => {
        "SELECT turn_id, session_key, staged_ref, manifest_json::text AS manifest_json, state, \
         applied_json::text AS applied_json, conflicts_json::text AS conflicts_json, version, \
         staged_at_ms FROM worktree_results"
    };
}

/// The columns of an [`ApiKeyRecord`], as [`api_key_from_row`] reads them (a macro, so each
/// query stays one literal).
macro_rules! api_key_columns {
    () => {
        "name, secret_sha256, scopes_json::text AS scopes_json, \
         session_prefix, created_at_ms, expires_at_ms, last_used_at_ms, requests_per_minute, \
         concurrent_turns, max_streams, media_quota_bytes"
    };
}

#[async_trait]
impl Store for PgStore {
    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        Ok(())
    }

    async fn insert_api_key(&self, key: &NewApiKey) -> Result<()> {
        sqlx::query(
            "INSERT INTO api_keys (name, secret_sha256, scopes_json, session_prefix, created_at_ms, \
             expires_at_ms, requests_per_minute, concurrent_turns, max_streams, media_quota_bytes) \
             VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9, $10)",
        )
        .bind(text(&key.name))
        .bind(&key.secret_sha256)
        .bind(crate::model::scopes_json(&key.scopes))
        .bind(key.session_prefix.as_deref().map(text))
        .bind(key.created_at_ms)
        .bind(key.expires_at_ms)
        .bind(key.requests_per_minute.map(i64::from))
        .bind(key.concurrent_turns.map(i64::from))
        .bind(key.max_streams.map(i64::from))
        .bind(
            key.media_quota_bytes
                .map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX)),
        )
        .execute(&self.pool)
        .await
        .map_err(|error| map_error(error, "api key"))?;
        Ok(())
    }

    async fn api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            api_key_columns!(),
            " FROM api_keys ORDER BY name"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(|error| map_error(error, "api keys"))?;
        rows.iter().map(api_key_from_row).collect()
    }

    async fn use_api_key(&self, secret_sha256: &str, now_ms: i64) -> Result<Option<ApiKeyRecord>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            api_key_columns!(),
            " FROM api_keys WHERE secret_sha256 = $1 \
             AND (expires_at_ms IS NULL OR expires_at_ms > $2)"
        ))
        .bind(secret_sha256)
        .bind(now_ms)
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| map_error(error, "api key"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let mut key = api_key_from_row(&row)?;
        if key
            .last_used_at_ms
            .is_none_or(|used| used <= now_ms - API_KEY_LAST_USED_RESOLUTION_MS)
        {
            sqlx::query(
                "UPDATE api_keys SET last_used_at_ms = $1 WHERE name = $2 \
                 AND (last_used_at_ms IS NULL OR last_used_at_ms <= $3)",
            )
            .bind(now_ms)
            .bind(&key.name)
            .bind(now_ms - API_KEY_LAST_USED_RESOLUTION_MS)
            .execute(&self.pool)
            .await
            .map_err(|error| map_error(error, "api key use"))?;
            key.last_used_at_ms = Some(now_ms);
        }
        Ok(Some(key))
    }

    async fn revoke_api_key(&self, name: &str) -> Result<bool> {
        let deleted = sqlx::query("DELETE FROM api_keys WHERE name = $1")
            .bind(text(name))
            .execute(&self.pool)
            .await
            .map_err(|error| map_error(error, "api key"))?;
        Ok(deleted.rows_affected() == 1)
    }

    async fn insert_setup_code(&self, code: &NewSetupCode) -> Result<()> {
        sqlx::query(
            "INSERT INTO setup_codes (token_sha256, created_at_ms, expires_at_ms) VALUES ($1, $2, $3)",
        )
        .bind(&code.token_sha256)
        .bind(code.created_at_ms)
        .bind(code.expires_at_ms)
        .execute(&self.pool)
        .await
        .map_err(|error| map_error(error, "setup code"))?;
        Ok(())
    }

    async fn enroll_node(&self, enrollment: &Enrollment) -> Result<EnrollOutcome> {
        let mut tx = self.begin("enrollment").await?;
        // Locking the code's row makes concurrent attempts with one code wait for each other, so
        // exactly one sees it unused.
        let row = sqlx::query(
            "SELECT expires_at_ms, used_at_ms FROM setup_codes WHERE token_sha256 = $1 FOR UPDATE",
        )
        .bind(&enrollment.token_sha256)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|error| map_error(error, "setup code"))?;
        let Some(row) = row else {
            return Ok(EnrollOutcome::UnknownCode);
        };
        let expires_at_ms: i64 = get(&row, "expires_at_ms")?;
        let used_at_ms: Option<i64> = get(&row, "used_at_ms")?;
        if used_at_ms.is_some() {
            return Ok(EnrollOutcome::UsedCode);
        }
        if enrollment.now_ms >= expires_at_ms {
            return Ok(EnrollOutcome::ExpiredCode);
        }
        let consumed = sqlx::query(
            "UPDATE setup_codes SET used_at_ms = $1, used_by_device_id = $2 \
             WHERE token_sha256 = $3 AND used_at_ms IS NULL",
        )
        .bind(enrollment.now_ms)
        .bind(&enrollment.node.device_id)
        .bind(&enrollment.token_sha256)
        .execute(&mut *tx)
        .await
        .map_err(|error| map_error(error, "setup code"))?;
        if consumed.rows_affected() != 1 {
            return Ok(EnrollOutcome::UsedCode);
        }
        let node = &enrollment.node;
        sqlx::query(
            "INSERT INTO nodes (device_id, public_key, display_name, runtime, commands_json, \
             workspace_root, device_token_sha256, enrolled_at_ms, last_seen_at_ms) \
             VALUES ($1, $2, $3, $4, $5::jsonb, $6, $7, $8, $9) \
             ON CONFLICT (device_id) DO UPDATE SET public_key = excluded.public_key, \
             display_name = excluded.display_name, runtime = excluded.runtime, \
             commands_json = excluded.commands_json, workspace_root = excluded.workspace_root, \
             device_token_sha256 = excluded.device_token_sha256, \
             enrolled_at_ms = excluded.enrolled_at_ms, last_seen_at_ms = excluded.last_seen_at_ms",
        )
        .bind(&node.device_id)
        .bind(&node.public_key)
        .bind(text(&node.display_name))
        .bind(&node.runtime)
        .bind(commands_json(&node.commands))
        .bind(&node.workspace_root)
        .bind(&node.device_token_sha256)
        .bind(node.enrolled_at_ms)
        .bind(node.last_seen_at_ms)
        .execute(&mut *tx)
        .await
        .map_err(|error| map_error(error, "node"))?;
        tx.commit()
            .await
            .map_err(|error| map_error(error, "enrollment"))?;
        Ok(EnrollOutcome::Enrolled)
    }

    async fn node(&self, device_id: &str) -> Result<Option<NodeRecord>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{NODE_COLUMNS} WHERE device_id = $1"
        )))
        .bind(device_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| map_error(error, "node"))?;
        row.as_ref().map(node_from_row).transpose()
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{NODE_COLUMNS} ORDER BY device_id COLLATE \"C\""
        )))
        .fetch_all(&self.pool)
        .await
        .map_err(|error| map_error(error, "node"))?;
        rows.iter().map(node_from_row).collect()
    }

    async fn record_node_seen(&self, seen: &NodeSeen) -> Result<()> {
        let updated = sqlx::query(
            "UPDATE nodes SET display_name = $1, runtime = $2, commands_json = $3::jsonb, \
             workspace_root = $4, last_seen_at_ms = $5 WHERE device_id = $6",
        )
        .bind(text(&seen.display_name))
        .bind(&seen.runtime)
        .bind(commands_json(&seen.commands))
        .bind(&seen.workspace_root)
        .bind(seen.at_ms)
        .bind(&seen.device_id)
        .execute(&self.pool)
        .await
        .map_err(|error| map_error(error, "node"))?;
        match updated.rows_affected() {
            0 => Err(StoreError::NotFound { what: "node" }),
            _ => Ok(()),
        }
    }

    async fn append_audit(&self, event: &NewAuditEvent) -> Result<i64> {
        let mut tx = self.begin("audit event").await?;
        // Identity values are handed out before commit; holding this lock to the commit makes
        // the order of the sequence numbers the order in which events become visible.
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(AUDIT_LOCK_KEY)
            .execute(&mut *tx)
            .await
            .map_err(|error| map_error(error, "audit event"))?;
        let seq: i64 = sqlx::query_scalar(
            "INSERT INTO audit_events (at_ms, actor, action, outcome, reason_code, details_json) \
             VALUES ($1, $2, $3, $4, $5, $6::jsonb) RETURNING seq",
        )
        .bind(event.at_ms)
        .bind(text(&event.actor))
        .bind(text(&event.action))
        .bind(text(&event.outcome))
        .bind(opt_text(event.reason_code.as_deref()))
        .bind(json_text(&event.details))
        .fetch_one(&mut *tx)
        .await
        .map_err(|error| map_error(error, "audit event"))?;
        tx.commit()
            .await
            .map_err(|error| map_error(error, "audit event"))?;
        Ok(seq)
    }

    async fn audit_after(&self, after: i64, limit: u32) -> Result<Vec<AuditEvent>> {
        let rows = sqlx::query(
            "SELECT seq, at_ms, actor, action, outcome, reason_code, details_json::text AS details_json \
             FROM audit_events WHERE seq > $1 ORDER BY seq LIMIT $2",
        )
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|error| map_error(error, "audit event"))?;
        audit_events(&rows)
    }

    async fn audit_before(&self, before: i64, limit: u32) -> Result<Vec<AuditEvent>> {
        let rows = sqlx::query(
            "SELECT seq, at_ms, actor, action, outcome, reason_code, details_json::text AS details_json \
             FROM audit_events WHERE seq < $1 ORDER BY seq DESC LIMIT $2",
        )
        .bind(before)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|error| map_error(error, "audit event"))?;
        let mut events = audit_events(&rows)?;
        events.reverse();
        Ok(events)
    }

    async fn prune_audit(&self, cutoff_ms: i64) -> Result<u64> {
        // A plain delete: replicas pruning at once each remove what the others have not.
        let pruned = sqlx::query("DELETE FROM audit_events WHERE at_ms < $1")
            .bind(cutoff_ms)
            .execute(&self.pool)
            .await
            .map_err(|error| map_error(error, "audit event"))?;
        Ok(pruned.rows_affected())
    }

    async fn admit_user_message(&self, message: &NewUserMessage) -> Result<Admitted> {
        let mut tx = self.begin("message").await?;
        // Creating or touching the session locks its row until the commit: admissions to one
        // session run one after the other.
        sqlx::query(
            "INSERT INTO sessions (session_key, runtime, created_at_ms, updated_at_ms) \
             VALUES ($1, $2, $3, $4) \
             ON CONFLICT (session_key) DO UPDATE SET updated_at_ms = excluded.updated_at_ms",
        )
        .bind(&message.session_key)
        .bind(&message.runtime)
        .bind(message.now_ms)
        .bind(message.now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session"))?;
        if let Some(key) = &message.idempotency_key {
            let existing = sqlx::query(sqlx::AssertSqlSafe(format!(
                "{TURN_COLUMNS} WHERE session_key = $1 AND idempotency_key = $2"
            )))
            .bind(&message.session_key)
            .bind(key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| map_error(e, "turn"))?;
            if let Some(row) = existing {
                return Ok(Admitted {
                    turn: turn_from_row(&row)?,
                    created: false,
                });
            }
        }
        let joined = match message.queue_mode {
            QueueMode::Collect => sqlx::query(sqlx::AssertSqlSafe(format!(
                "{TURN_COLUMNS} WHERE session_key = $1 AND status = 'queued' \
                 ORDER BY turn_no DESC LIMIT 1"
            )))
            .bind(&message.session_key)
            .fetch_optional(&mut *tx)
            .await
            .map_err(|e| map_error(e, "turn"))?,
            QueueMode::Followup | QueueMode::Steer | QueueMode::Interrupt => None,
        };
        let turn = match joined {
            Some(row) => turn_from_row(&row)?,
            None => {
                let turn_no: i64 = sqlx::query_scalar(
                    "SELECT COALESCE(MAX(turn_no), 0) + 1 FROM turns WHERE session_key = $1",
                )
                .bind(&message.session_key)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| map_error(e, "turn"))?;
                sqlx::query(
                    "INSERT INTO turns (turn_id, session_key, turn_no, status, queue_mode, \
                     idempotency_key, attachments_json, created_at_ms) \
                     VALUES ($1, $2, $3, 'queued', $4, $5, $6::jsonb, $7)",
                )
                .bind(&message.turn_id)
                .bind(&message.session_key)
                .bind(turn_no)
                .bind(message.queue_mode.as_str())
                .bind(&message.idempotency_key)
                .bind(serde_json::to_string(&message.attachments).map_err(|_| {
                    StoreError::Corrupt {
                        what: "attachments",
                    }
                })?)
                .bind(message.now_ms)
                .execute(&mut *tx)
                .await
                .map_err(|e| map_error(e, "turn"))?;
                let payload = TurnQueued {
                    turn_id: message.turn_id.clone(),
                    queue_mode: message.queue_mode,
                }
                .to_payload_json();
                insert_event(
                    &mut tx,
                    &message.session_key,
                    TurnQueued::KIND,
                    &payload,
                    message.now_ms,
                )
                .await?;
                TurnRecord {
                    turn_id: message.turn_id.clone(),
                    session_key: message.session_key.clone(),
                    turn_no,
                    status: TurnStatus::Queued,
                    queue_mode: message.queue_mode,
                    attachments: message.attachments.clone(),
                    reply: None,
                    error_code: None,
                    error_message: None,
                    created_at_ms: message.now_ms,
                    started_at_ms: None,
                    ended_at_ms: None,
                    usage: None,
                }
            }
        };
        insert_message(
            &mut tx,
            &message.session_key,
            &turn.turn_id,
            "user",
            &message.text,
            None,
            message.now_ms,
        )
        .await?;
        tx.commit().await.map_err(|e| map_error(e, "message"))?;
        Ok(Admitted {
            turn,
            created: true,
        })
    }

    async fn turn(&self, turn_id: &str) -> Result<Option<TurnRecord>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{TURN_COLUMNS} WHERE turn_id = $1"
        )))
        .bind(turn_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        row.as_ref().map(turn_from_row).transpose()
    }

    async fn turn_user_messages(&self, turn_id: &str) -> Result<Vec<MessageRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{MESSAGE_COLUMNS} WHERE turn_id = $1 AND role = 'user' ORDER BY seq"
        )))
        .bind(turn_id)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "message"))?;
        rows.iter().map(message_from_row).collect()
    }

    async fn claim_next_turn(
        &self,
        fence: &Fence,
        session_key: &str,
        now_ms: i64,
    ) -> Result<ClaimOutcome> {
        let mut tx = self.begin("turn").await?;
        if !lock_session(&mut tx, session_key).await? {
            return Ok(ClaimOutcome::Idle);
        }
        let live: bool = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT {}",
            fence_holds("$1", "$2")
        )))
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| map_error(e, "replica"))?;
        if !live {
            return Ok(ClaimOutcome::Fenced);
        }
        // The session's node must be linked to this replica under this lease: a replica claims
        // only the turns of sessions whose node it holds (an unbound session is placed first).
        let holder: Option<(Option<String>, Option<String>, Option<i64>)> = sqlx::query_as(
            "SELECT s.node_id, l.replica_id, l.epoch FROM sessions s \
             LEFT JOIN node_links l ON l.device_id = s.node_id WHERE s.session_key = $1",
        )
        .bind(session_key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        if let Some((Some(_), replica, epoch)) = holder
            && (replica.as_deref() != Some(fence.replica_id.as_str()) || epoch != Some(fence.epoch))
        {
            return Ok(ClaimOutcome::NotHolder);
        }
        let running: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM turns WHERE session_key = $1 AND status = 'running'",
        )
        .bind(session_key)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        if running > 0 {
            return Ok(ClaimOutcome::Idle);
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{TURN_COLUMNS} WHERE session_key = $1 AND status = 'queued' ORDER BY turn_no LIMIT 1"
        )))
        .bind(session_key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        let Some(row) = row else {
            return Ok(ClaimOutcome::Idle);
        };
        let mut turn = turn_from_row(&row)?;
        let claimed = sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE turns SET status = 'running', started_at_ms = $1, claim_replica = $3, \
             claim_epoch = $4 WHERE turn_id = $2 AND status = 'queued' AND {}",
            fence_holds("$3", "$4")
        )))
        .bind(now_ms)
        .bind(&turn.turn_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        if claimed.rows_affected() != 1 {
            // The turn is still queued (the session row is locked): the lease no longer holds.
            return Ok(ClaimOutcome::Fenced);
        }
        let payload = TurnStarted {
            turn_id: turn.turn_id.clone(),
        }
        .to_payload_json();
        insert_event(&mut tx, session_key, TurnStarted::KIND, &payload, now_ms).await?;
        tx.commit().await.map_err(|e| map_error(e, "turn"))?;
        turn.status = TurnStatus::Running;
        turn.started_at_ms = Some(now_ms);
        Ok(ClaimOutcome::Claimed(Box::new(turn)))
    }

    async fn finish_turn(&self, fence: &Fence, turn_id: &str, end: &TurnEnd) -> Result<bool> {
        let [input_tokens, output_tokens, total_tokens] = usage_columns(end.usage);
        let mut tx = self.begin("turn").await?;
        // The session's row first, then the turn's, as a claim takes them: a claim and the end
        // of a queued turn never wait for each other in a cycle.
        let session: Option<String> =
            sqlx::query_scalar("SELECT session_key FROM turns WHERE turn_id = $1")
                .bind(turn_id)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| map_error(e, "turn"))?;
        match session {
            Some(session_key) => {
                lock_session(&mut tx, &session_key).await?;
            }
            None => return Ok(false),
        }
        let session_key: Option<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "UPDATE turns SET status = $1, reply = $2, error_code = $3, error_message = $4, \
             ended_at_ms = $5, input_tokens = $7, output_tokens = $8, total_tokens = $9 \
             WHERE turn_id = $6 AND (status = 'queued' OR (status = 'running' \
             AND claim_replica = $10 AND claim_epoch = $11)) AND {} \
             RETURNING session_key",
            fence_holds("$10", "$11")
        )))
        .bind(end.status.as_str())
        .bind(opt_text(end.reply.as_deref()))
        .bind(opt_text(end.error_code.as_deref()))
        .bind(opt_text(end.error_message.as_deref()))
        .bind(end.now_ms)
        .bind(turn_id)
        .bind(input_tokens)
        .bind(output_tokens)
        .bind(total_tokens)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        let Some(session_key) = session_key else {
            return Ok(false);
        };
        let (kind, payload) = end.event(turn_id);
        insert_event(&mut tx, &session_key, kind, &payload, end.now_ms).await?;
        tx.commit().await.map_err(|e| map_error(e, "turn"))?;
        Ok(true)
    }

    async fn commit_turn_message(
        &self,
        fence: &Fence,
        message: &NewTurnMessage,
    ) -> Result<Option<i64>> {
        let mut tx = self.begin("message").await?;
        let Some(session_key) = lock_fenced_turn(&mut tx, fence, &message.turn_id).await? else {
            return Ok(None);
        };
        let seq = insert_message(
            &mut tx,
            &session_key,
            &message.turn_id,
            &message.role,
            &message.content,
            message.tool_name.as_deref(),
            message.now_ms,
        )
        .await?;
        tx.commit().await.map_err(|e| map_error(e, "message"))?;
        Ok(Some(seq))
    }

    async fn append_turn_event(
        &self,
        fence: &Fence,
        turn_id: &str,
        kind: &str,
        payload: &serde_json::Value,
        now_ms: i64,
    ) -> Result<Option<i64>> {
        let mut tx = self.begin("event").await?;
        let Some(session_key) = lock_fenced_turn(&mut tx, fence, turn_id).await? else {
            return Ok(None);
        };
        let seq = insert_event(&mut tx, &session_key, kind, payload, now_ms).await?;
        tx.commit().await.map_err(|e| map_error(e, "event"))?;
        Ok(Some(seq))
    }

    async fn append_event(
        &self,
        session_key: &str,
        kind: &str,
        payload: &serde_json::Value,
        now_ms: i64,
    ) -> Result<i64> {
        let mut tx = self.begin("event").await?;
        let seq = insert_event(&mut tx, session_key, kind, payload, now_ms).await?;
        tx.commit().await.map_err(|e| map_error(e, "event"))?;
        Ok(seq)
    }

    async fn events_after(
        &self,
        session_key: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRecord>> {
        let rows = sqlx::query(
            "SELECT seq, kind, payload_json::text AS payload_json, created_at_ms FROM session_events \
             WHERE session_key = $1 AND seq > $2 ORDER BY seq LIMIT $3",
        )
        .bind(session_key)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "event"))?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            events.push(EventRecord {
                seq: get(row, "seq")?,
                kind: get(row, "kind")?,
                payload: json(row, "payload_json", "event payload")?,
                created_at_ms: get(row, "created_at_ms")?,
            });
        }
        Ok(events)
    }

    async fn last_event_seq(&self, session_key: &str) -> Result<i64> {
        let next: Option<i64> =
            sqlx::query_scalar("SELECT next_event_seq FROM sessions WHERE session_key = $1")
                .bind(session_key)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| map_error(e, "session"))?;
        Ok(next.map_or(0, |next| next - 1))
    }

    async fn next_queued_turn(&self, session_key: &str) -> Result<Option<TurnRecord>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{TURN_COLUMNS} WHERE session_key = $1 AND status = 'queued' ORDER BY turn_no LIMIT 1"
        )))
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        row.as_ref().map(turn_from_row).transpose()
    }

    async fn transcript(&self, session_key: &str) -> Result<Vec<MessageRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{MESSAGE_COLUMNS} WHERE session_key = $1 ORDER BY seq"
        )))
        .bind(session_key)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "message"))?;
        rows.iter().map(message_from_row).collect()
    }

    async fn sessions(&self) -> Result<Vec<SessionRecord>> {
        let rows = sqlx::query(
            "SELECT s.session_key, s.runtime, s.node_id, s.created_at_ms, s.updated_at_ms, \
             (SELECT turn_id FROM turns t WHERE t.session_key = s.session_key \
              AND t.status = 'running' LIMIT 1) AS active_turn_id \
             FROM sessions s ORDER BY s.session_key COLLATE \"C\"",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "session"))?;
        let mut sessions = Vec::with_capacity(rows.len());
        for row in &rows {
            sessions.push(SessionRecord {
                session_key: get(row, "session_key")?,
                runtime: get(row, "runtime")?,
                active_turn_id: get(row, "active_turn_id")?,
                node_id: get(row, "node_id")?,
                created_at_ms: get(row, "created_at_ms")?,
                updated_at_ms: get(row, "updated_at_ms")?,
            });
        }
        Ok(sessions)
    }

    async fn figures(&self) -> Result<StoreFigures> {
        let (n_queued_turns, checkpoint_bytes): (i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM turns WHERE status = 'queued'), \
                    (SELECT coalesce(sum(size_bytes), 0)::bigint FROM checkpoint_blobs)",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(|e| map_error(e, "figures"))?;
        Ok(StoreFigures {
            n_queued_turns: u64::try_from(n_queued_turns).unwrap_or(0),
            checkpoint_bytes: u64::try_from(checkpoint_bytes).unwrap_or(0),
        })
    }

    async fn sessions_with_queued_turns(&self) -> Result<Vec<String>> {
        sqlx::query_scalar(
            "SELECT DISTINCT session_key COLLATE \"C\" AS session_key FROM turns \
             WHERE status = 'queued' ORDER BY 1",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "turn"))
    }

    async fn save_checkpoint(
        &self,
        session_key: &str,
        checkpoint_id: &str,
        manifest: &CheckpointManifest,
        now_ms: i64,
        writer: Option<TurnWriter<'_>>,
    ) -> Result<bool> {
        let mut tx = self.begin("checkpoint").await?;
        if let Some(writer) = writer
            && lock_fenced_turn(&mut tx, writer.fence, writer.turn_id)
                .await?
                .is_none()
        {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO checkpoints (checkpoint_id, session_key, manifest_json, created_at_ms) \
             VALUES ($1, $2, $3::jsonb, $4) ON CONFLICT (checkpoint_id) DO UPDATE \
             SET created_at_ms = GREATEST(checkpoints.created_at_ms, excluded.created_at_ms)",
        )
        .bind(checkpoint_id)
        .bind(session_key)
        .bind(manifest.to_json()?)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "checkpoint"))?;
        sqlx::query("UPDATE sessions SET latest_checkpoint_id = $1 WHERE session_key = $2")
            .bind(checkpoint_id)
            .bind(session_key)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_error(e, "session"))?;
        tx.commit().await.map_err(|e| map_error(e, "checkpoint"))?;
        Ok(true)
    }

    async fn latest_checkpoint(
        &self,
        session_key: &str,
    ) -> Result<Option<(String, CheckpointManifest)>> {
        let row = sqlx::query(
            "SELECT c.checkpoint_id, c.manifest_json::text AS manifest_json FROM sessions s \
             JOIN checkpoints c ON c.checkpoint_id = s.latest_checkpoint_id \
             WHERE s.session_key = $1",
        )
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "checkpoint"))?;
        row.as_ref().map(checkpoint_from_row).transpose()
    }

    async fn recent_checkpoints(
        &self,
        session_key: &str,
        except: &str,
        limit: u32,
    ) -> Result<Vec<(String, CheckpointManifest)>> {
        let rows = sqlx::query(
            "SELECT checkpoint_id, manifest_json::text AS manifest_json FROM checkpoints \
             WHERE session_key = $1 AND checkpoint_id != $2 \
             ORDER BY created_at_ms DESC, saved_order DESC LIMIT $3",
        )
        .bind(session_key)
        .bind(except)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "checkpoint"))?;
        rows.iter().map(checkpoint_from_row).collect()
    }

    async fn prune_checkpoints(&self, session_key: &str, keep: u32) -> Result<u64> {
        let pruned = sqlx::query(
            "DELETE FROM checkpoints WHERE session_key = $1 \
             AND checkpoint_id NOT IN \
                 (SELECT latest_checkpoint_id FROM sessions WHERE latest_checkpoint_id IS NOT NULL) \
             AND checkpoint_id NOT IN (SELECT checkpoint_id FROM checkpoints WHERE session_key = $1 \
                 ORDER BY created_at_ms DESC, saved_order DESC LIMIT $2)",
        )
        .bind(session_key)
        .bind(i64::from(keep))
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "checkpoint"))?;
        Ok(pruned.rows_affected())
    }

    async fn register_checkpoint_blobs(&self, blobs: &[CheckpointBlob], now_ms: i64) -> Result<()> {
        let ids: Vec<&str> = blobs.iter().map(|blob| blob.media_id.as_str()).collect();
        let sizes: Vec<i64> = blobs
            .iter()
            .map(|blob| i64::try_from(blob.size_bytes).unwrap_or(i64::MAX))
            .collect();
        // One statement over both arrays: all blobs are listed, or none.
        sqlx::query(
            "INSERT INTO checkpoint_blobs (media_id, size_bytes, registered_at_ms) \
             SELECT media_id, size_bytes, $3 FROM unnest($1::text[], $2::bigint[]) \
                 AS blob (media_id, size_bytes) \
             ON CONFLICT (media_id) DO NOTHING",
        )
        .bind(&ids)
        .bind(&sizes)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "checkpoint blob"))?;
        Ok(())
    }

    async fn checkpoint_blob_garbage(&self) -> Result<Vec<CheckpointBlob>> {
        let rows = sqlx::query(include_str!(
            "../queries/postgres/checkpoint_blob_garbage.sql"
        ))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "checkpoint blob"))?;
        let mut blobs = Vec::with_capacity(rows.len());
        for row in &rows {
            let size_bytes: i64 = get(row, "size_bytes")?;
            blobs.push(CheckpointBlob {
                media_id: get(row, "media_id")?,
                size_bytes: u64::try_from(size_bytes).unwrap_or(0),
            });
        }
        Ok(blobs)
    }

    async fn api_key_by_hash(&self, secret_sha256: &str) -> Result<Option<ApiKeyRecord>> {
        let row = sqlx::query(concat!(
            "SELECT ",
            api_key_columns!(),
            " FROM api_keys WHERE secret_sha256 = $1"
        ))
        .bind(secret_sha256)
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| map_error(error, "api key"))?;
        row.as_ref().map(api_key_from_row).transpose()
    }

    async fn claim_session_owner(
        &self,
        session_key: &str,
        owner: &str,
        now_ms: i64,
    ) -> Result<String> {
        charges::claim_session_owner(&self.pool, Dialect::Postgres, session_key, owner, now_ms)
            .await
            .map_err(|e| map_error(e, "session owner"))?;
        self.session_owner(session_key)
            .await?
            .ok_or(StoreError::Corrupt {
                what: "session owner",
            })
    }

    async fn session_owner(&self, session_key: &str) -> Result<Option<String>> {
        charges::session_owner(&self.pool, Dialect::Postgres, session_key)
            .await
            .map_err(|e| map_error(e, "session owner"))
    }

    async fn charge_media(
        &self,
        owner: &str,
        kind: MediaChargeKind,
        blobs: &[CheckpointBlob],
        quota_bytes: Option<u64>,
        now_ms: i64,
    ) -> Result<MediaCharge> {
        let mut tx = self.begin("media charge").await?;
        lock(&mut tx, owner, "media charge").await?;
        let charged = charges::charge::<sqlx::Postgres>(
            &mut tx,
            Dialect::Postgres,
            owner,
            kind,
            blobs,
            quota_bytes,
            now_ms,
        )
        .await
        .map_err(|e| map_error(e, "media charge"))?;
        tx.commit()
            .await
            .map_err(|e| map_error(e, "media charge"))?;
        Ok(charged)
    }

    async fn media_charged_bytes(&self, owner: &str) -> Result<u64> {
        charges::charged_bytes(&self.pool, Dialect::Postgres, owner)
            .await
            .map_err(|e| map_error(e, "media charge"))
    }

    async fn uncharge_media(
        &self,
        owner: &str,
        kind: MediaChargeKind,
        media_id: &str,
    ) -> Result<()> {
        charges::uncharge(&self.pool, Dialect::Postgres, Some(owner), kind, media_id)
            .await
            .map_err(|e| map_error(e, "media charge"))?;
        Ok(())
    }

    async fn release_upload(
        &self,
        owner: Option<&str>,
        media_id: &str,
        now_ms: i64,
    ) -> Result<ReleasedUpload> {
        let mut tx = self.begin("media release").await?;
        lock(&mut tx, media_id, "media release").await?;
        let released = charges::release_upload::<sqlx::Postgres>(
            &mut tx,
            Dialect::Postgres,
            owner,
            media_id,
            now_ms,
        )
        .await
        .map_err(|e| map_error(e, "media release"))?;
        tx.commit()
            .await
            .map_err(|e| map_error(e, "media release"))?;
        Ok(released)
    }

    async fn forget_checkpoint_blob(&self, media_id: &str) -> Result<()> {
        charges::uncharge(
            &self.pool,
            Dialect::Postgres,
            None,
            MediaChargeKind::Session,
            media_id,
        )
        .await
        .map_err(|e| map_error(e, "checkpoint blob"))?;
        sqlx::query("DELETE FROM checkpoint_blobs WHERE media_id = $1")
            .bind(media_id)
            .execute(&self.pool)
            .await
            .map_err(|e| map_error(e, "checkpoint blob"))?;
        Ok(())
    }

    async fn pin_media(&self, media_id: &str, reason: &str, now_ms: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO media_pins (media_id, reason, pinned_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (media_id) DO NOTHING",
        )
        .bind(media_id)
        .bind(reason)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "media pin"))?;
        Ok(())
    }

    async fn grant_media(&self, media_id: &str, grantee: &str, now_ms: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO media_grants (media_id, grantee, granted_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (media_id, grantee) DO NOTHING",
        )
        .bind(media_id)
        .bind(grantee)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "media grant"))?;
        Ok(())
    }

    async fn media_granted(
        &self,
        media_id: &str,
        key_grantee: &str,
        session_prefix: &str,
    ) -> Result<bool> {
        // substr rather than LIKE: a prefix may hold `_`, which LIKE reads as a wildcard.
        let sessions = format!("session:{session_prefix}");
        let found: Option<String> = sqlx::query_scalar(
            "SELECT media_id FROM media_grants WHERE media_id = $1 \
             AND (grantee = $2 OR substr(grantee, 1, length($3)) = $3) LIMIT 1",
        )
        .bind(media_id)
        .bind(key_grantee)
        .bind(sessions)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "media grant"))?;
        Ok(found.is_some())
    }

    async fn bind_codex_thread(
        &self,
        session_key: &str,
        thread_id: &str,
        now_ms: i64,
    ) -> Result<()> {
        sqlx::query(
            "INSERT INTO codex_threads (session_key, thread_id, bound_at_ms) VALUES ($1, $2, $3) \
             ON CONFLICT (session_key) DO UPDATE SET thread_id = excluded.thread_id, \
             bound_at_ms = excluded.bound_at_ms",
        )
        .bind(session_key)
        .bind(thread_id)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "session"))?;
        Ok(())
    }

    async fn codex_thread(&self, session_key: &str) -> Result<Option<String>> {
        sqlx::query_scalar("SELECT thread_id FROM codex_threads WHERE session_key = $1")
            .bind(session_key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_error(e, "codex thread"))
    }

    async fn session_node(&self, session_key: &str) -> Result<Option<String>> {
        let node: Option<Option<String>> =
            sqlx::query_scalar("SELECT node_id FROM sessions WHERE session_key = $1")
                .bind(session_key)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| map_error(e, "session"))?;
        Ok(node.flatten())
    }

    async fn bind_session_node(
        &self,
        session_key: &str,
        node_id: &str,
        now_ms: i64,
    ) -> Result<String> {
        let mut tx = self.begin("session node").await?;
        // A racing binder waits for the row lock, then finds the row bound and changes nothing;
        // the read that follows is a new statement, so it sees the winner's binding.
        sqlx::query(
            "UPDATE sessions SET node_id = $1, node_bound_at_ms = $2 \
             WHERE session_key = $3 AND node_id IS NULL",
        )
        .bind(node_id)
        .bind(now_ms)
        .bind(session_key)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session node"))?;
        let bound: Option<Option<String>> =
            sqlx::query_scalar("SELECT node_id FROM sessions WHERE session_key = $1")
                .bind(session_key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session node"))?;
        let Some(Some(bound)) = bound else {
            return Err(StoreError::NotFound { what: "session" });
        };
        tx.commit()
            .await
            .map_err(|e| map_error(e, "session node"))?;
        Ok(bound)
    }

    async fn rebind_session_node(
        &self,
        session_key: &str,
        from: &str,
        to: &str,
        now_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.begin("session node").await?;
        if !lock_session(&mut tx, session_key).await? {
            return Ok(false);
        }
        let updated = sqlx::query(
            "UPDATE sessions SET node_id = $1, node_bound_at_ms = $2 \
             WHERE session_key = $3 AND node_id = $4 AND NOT EXISTS (SELECT 1 FROM turns \
             WHERE turns.session_key = $3 AND turns.status = 'running')",
        )
        .bind(to)
        .bind(now_ms)
        .bind(session_key)
        .bind(from)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session node"))?;
        tx.commit()
            .await
            .map_err(|e| map_error(e, "session node"))?;
        Ok(updated.rows_affected() == 1)
    }

    async fn move_session_node(
        &self,
        session_key: &str,
        to: Option<&str>,
        now_ms: i64,
    ) -> Result<SessionMove> {
        let mut tx = self.begin("session node").await?;
        let current: Option<Option<String>> =
            sqlx::query_scalar("SELECT node_id FROM sessions WHERE session_key = $1 FOR UPDATE")
                .bind(session_key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session node"))?;
        let Some(from) = current else {
            return Ok(SessionMove::NotFound);
        };
        let running: Option<String> = sqlx::query_scalar(
            "SELECT turn_id FROM turns WHERE session_key = $1 AND status = 'running' LIMIT 1",
        )
        .bind(session_key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        if let Some(turn_id) = running {
            return Ok(SessionMove::Busy { turn_id });
        }
        if from.as_deref() == to {
            return Ok(SessionMove::Unchanged);
        }
        sqlx::query(
            "UPDATE sessions SET node_id = $1, node_bound_at_ms = $2 WHERE session_key = $3",
        )
        .bind(to)
        .bind(to.map(|_| now_ms))
        .bind(session_key)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session node"))?;
        tx.commit()
            .await
            .map_err(|e| map_error(e, "session node"))?;
        Ok(SessionMove::Moved { from })
    }

    async fn set_session_workspace(
        &self,
        session_key: &str,
        runtime: &str,
        source: &WorkspaceSource,
        now_ms: i64,
    ) -> Result<WorkspaceSet> {
        let source_json = workspace_json(source)?;
        let mut tx = self.begin("session").await?;
        let created: Option<String> = sqlx::query_scalar(
            "INSERT INTO sessions (session_key, runtime, created_at_ms, updated_at_ms, \
             workspace_json) VALUES ($1, $2, $3, $3, $4::jsonb) \
             ON CONFLICT (session_key) DO NOTHING RETURNING session_key",
        )
        .bind(session_key)
        .bind(runtime)
        .bind(now_ms)
        .bind(&source_json)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session"))?;
        let outcome = match created {
            Some(_) => WorkspaceSet::Created,
            None => {
                // The row lock keeps an admission from adding the first message meanwhile.
                let row = sqlx::query(
                    "SELECT workspace_json::text AS workspace_json, workspace_commit, \
                     next_message_seq FROM sessions WHERE session_key = $1 FOR UPDATE",
                )
                .bind(session_key)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session"))?;
                let current = stored_workspace(
                    get::<Option<String>>(&row, "workspace_json")?.as_deref(),
                    get(&row, "workspace_commit")?,
                )?;
                let next_seq: i64 = get(&row, "next_message_seq")?;
                if current.source == *source {
                    return Ok(WorkspaceSet::Unchanged);
                }
                if next_seq > 1 {
                    return Ok(WorkspaceSet::Locked(current));
                }
                sqlx::query(
                    "UPDATE sessions SET workspace_json = $1::jsonb, workspace_commit = NULL, \
                     worktree_base_json = NULL, updated_at_ms = $2 WHERE session_key = $3",
                )
                .bind(&source_json)
                .bind(now_ms)
                .bind(session_key)
                .execute(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session"))?;
                sqlx::query("DELETE FROM worktree_versions WHERE session_key = $1")
                    .bind(session_key)
                    .execute(&mut *tx)
                    .await
                    .map_err(|e| map_error(e, "worktree"))?;
                WorkspaceSet::Replaced
            }
        };
        if matches!(source, WorkspaceSource::Worktree { from: None }) {
            sqlx::query(
                "INSERT INTO worktree_versions (session_key, version, origin, turn_id, actor, \
                 manifest_json, created_at_ms) VALUES ($1, 1, $2, NULL, 'gateway', $3::jsonb, $4)",
            )
            .bind(session_key)
            .bind(WorktreeOrigin::Start.as_str())
            .bind(manifest_json(&StoredManifest::default())?)
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_error(e, "worktree"))?;
        }
        tx.commit().await.map_err(|e| map_error(e, "session"))?;
        Ok(outcome)
    }

    async fn session_workspace(&self, session_key: &str) -> Result<Option<SessionWorkspace>> {
        let row = sqlx::query(
            "SELECT workspace_json::text AS workspace_json, workspace_commit FROM sessions \
             WHERE session_key = $1",
        )
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "session"))?;
        row.map(|row| {
            stored_workspace(
                get::<Option<String>>(&row, "workspace_json")?.as_deref(),
                get(&row, "workspace_commit")?,
            )
        })
        .transpose()
    }

    async fn pin_session_commit(&self, session_key: &str, commit: &str) -> Result<String> {
        let pinned: Option<Option<String>> = sqlx::query_scalar(
            "UPDATE sessions SET workspace_commit = coalesce(workspace_commit, $1) \
             WHERE session_key = $2 RETURNING workspace_commit",
        )
        .bind(commit)
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "session"))?;
        match pinned {
            Some(Some(pinned)) => Ok(pinned),
            _ => Err(StoreError::NotFound { what: "session" }),
        }
    }

    async fn worktree_version(
        &self,
        session_key: &str,
        version: Option<i64>,
    ) -> Result<Option<WorktreeVersion>> {
        let row = sqlx::query(
            "SELECT session_key, version, origin, turn_id, actor, \
             manifest_json::text AS manifest_json, created_at_ms FROM worktree_versions \
             WHERE session_key = $1 AND ($2::bigint IS NULL OR version = $2) \
             ORDER BY version DESC LIMIT 1",
        )
        .bind(session_key)
        .bind(version)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "worktree"))?;
        row.as_ref().map(worktree_version_from_row).transpose()
    }

    async fn save_worktree_version(
        &self,
        version: &NewWorktreeVersion,
        now_ms: i64,
    ) -> Result<bool> {
        // Two writers that read the same head both insert head + 1: the primary key lets one.
        let inserted = sqlx::query(
            "INSERT INTO worktree_versions (session_key, version, origin, turn_id, actor, \
             manifest_json, created_at_ms) \
             SELECT $1, $2 + 1, $3, NULL, $4, $5::jsonb, $6 \
             WHERE (SELECT coalesce(max(version), 0) FROM worktree_versions \
                    WHERE session_key = $1) = $2 \
             ON CONFLICT (session_key, version) DO NOTHING",
        )
        .bind(&version.session_key)
        .bind(version.expected_head)
        .bind(version.origin.as_str())
        .bind(&version.actor)
        .bind(manifest_json(&version.manifest)?)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "worktree"))?;
        Ok(inserted.rows_affected() == 1)
    }

    async fn worktree_base(&self, session_key: &str) -> Result<Option<StoredManifest>> {
        let base: Option<Option<String>> = sqlx::query_scalar(
            "SELECT worktree_base_json::text FROM sessions WHERE session_key = $1",
        )
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "worktree"))?;
        base.flatten().as_deref().map(parse_manifest).transpose()
    }

    async fn set_worktree_base(&self, session_key: &str, base: &StoredManifest) -> Result<()> {
        sqlx::query("UPDATE sessions SET worktree_base_json = $1::jsonb WHERE session_key = $2")
            .bind(manifest_json(base)?)
            .bind(session_key)
            .execute(&self.pool)
            .await
            .map_err(|e| map_error(e, "worktree"))?;
        Ok(())
    }

    async fn stage_worktree_result(
        &self,
        turn_id: &str,
        session_key: &str,
        staged_ref: &str,
        manifest: &StoredManifest,
        now_ms: i64,
        fence: Option<&Fence>,
    ) -> Result<bool> {
        let mut tx = self.begin("worktree result").await?;
        if let Some(fence) = fence
            && lock_fenced_turn(&mut tx, fence, turn_id).await?.is_none()
        {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO worktree_results (turn_id, session_key, staged_ref, manifest_json, \
             state, staged_at_ms) VALUES ($1, $2, $3, $4::jsonb, 'staged', $5) \
             ON CONFLICT (turn_id) DO NOTHING",
        )
        .bind(turn_id)
        .bind(session_key)
        .bind(staged_ref)
        .bind(manifest_json(manifest)?)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        tx.commit()
            .await
            .map_err(|e| map_error(e, "worktree result"))?;
        Ok(true)
    }

    async fn staged_worktree_results(
        &self,
        session_key: Option<&str>,
    ) -> Result<Vec<WorktreeResult>> {
        let rows = sqlx::query(concat!(
            worktree_result_columns!(),
            " WHERE state = 'staged' AND ($1::text IS NULL OR session_key = $1) \
             ORDER BY staged_at_ms, turn_id COLLATE \"C\"",
        ))
        .bind(session_key)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        rows.iter().map(worktree_result_from_row).collect()
    }

    async fn worktree_result(&self, turn_id: &str) -> Result<Option<WorktreeResult>> {
        let row = sqlx::query(concat!(worktree_result_columns!(), " WHERE turn_id = $1"))
            .bind(turn_id)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_error(e, "worktree result"))?;
        row.as_ref().map(worktree_result_from_row).transpose()
    }

    async fn prune_worktree_versions(&self, session_key: &str, keep: i64) -> Result<u64> {
        let mut tx = self.begin("worktree").await?;
        let head: i64 = sqlx::query_scalar(
            "SELECT coalesce(max(version), 0) FROM worktree_versions WHERE session_key = $1",
        )
        .bind(session_key)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree"))?;
        let below = head - keep;
        sqlx::query(
            "DELETE FROM worktree_results WHERE session_key = $1 AND state = 'applied' \
             AND version > 1 AND version <= $2",
        )
        .bind(session_key)
        .bind(below)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        let pruned = sqlx::query(
            "DELETE FROM worktree_versions WHERE session_key = $1 AND version > 1 \
             AND version <= $2",
        )
        .bind(session_key)
        .bind(below)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree"))?;
        tx.commit().await.map_err(|e| map_error(e, "worktree"))?;
        Ok(pruned.rows_affected())
    }

    async fn apply_worktree_result(&self, apply: &ResultApply, now_ms: i64) -> Result<bool> {
        let mut tx = self.begin("worktree").await?;
        // Locking the result row serializes two applies of one result.
        let staged: Option<String> = sqlx::query_scalar(
            "SELECT manifest_json::text FROM worktree_results \
             WHERE turn_id = $1 AND state = 'staged' FOR UPDATE",
        )
        .bind(&apply.turn_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        let Some(staged) = staged else {
            return Ok(false);
        };
        let inserted = sqlx::query(
            "INSERT INTO worktree_versions (session_key, version, origin, turn_id, actor, \
             manifest_json, created_at_ms) \
             SELECT $1, $2 + 1, $3, $4, 'gateway', $5::jsonb, $6 \
             WHERE (SELECT coalesce(max(version), 0) FROM worktree_versions \
                    WHERE session_key = $1) = $2 \
             ON CONFLICT (session_key, version) DO NOTHING",
        )
        .bind(&apply.session_key)
        .bind(apply.expected_head)
        .bind(WorktreeOrigin::Turn.as_str())
        .bind(&apply.turn_id)
        .bind(manifest_json(&apply.merged)?)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree"))?;
        if inserted.rows_affected() != 1 {
            return Ok(false);
        }
        sqlx::query("UPDATE sessions SET worktree_base_json = $1::jsonb WHERE session_key = $2")
            .bind(&staged)
            .bind(&apply.session_key)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_error(e, "worktree"))?;
        sqlx::query(
            "UPDATE worktree_results SET state = 'applied', applied_json = $1::jsonb, \
             conflicts_json = $2::jsonb, version = $3, applied_at_ms = $4 WHERE turn_id = $5",
        )
        .bind(paths_json(&apply.applied)?)
        .bind(paths_json(&apply.conflicts)?)
        .bind(apply.expected_head + 1)
        .bind(now_ms)
        .bind(&apply.turn_id)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        tx.commit().await.map_err(|e| map_error(e, "worktree"))?;
        Ok(true)
    }
}

const NODE_COLUMNS: &str = "SELECT device_id, public_key, display_name, runtime, \
    commands_json::text AS commands_json, workspace_root, device_token_sha256, enrolled_at_ms, \
    last_seen_at_ms FROM nodes";

const TURN_COLUMNS: &str = "SELECT turn_id, session_key, turn_no, status, queue_mode, \
    attachments_json::text AS attachments_json, reply, error_code, error_message, created_at_ms, \
    started_at_ms, ended_at_ms, input_tokens, output_tokens, total_tokens FROM turns";

const MESSAGE_COLUMNS: &str =
    "SELECT seq, turn_id, role, content, tool_name, created_at_ms FROM messages";

/// Locks the session's row for the rest of the transaction; false when there is no session.
async fn lock_session(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    session_key: &str,
) -> Result<bool> {
    let found: Option<i32> =
        sqlx::query_scalar("SELECT 1 FROM sessions WHERE session_key = $1 FOR UPDATE")
            .bind(session_key)
            .fetch_optional(&mut **tx)
            .await
            .map_err(|e| map_error(e, "session"))?;
    Ok(found.is_some())
}

/// Returns the condition that the lease of replica `replica` with epoch `epoch` (two SQL
/// expressions, the statement's parameters) is live: its replica's newest lease, unexpired by
/// the server's clock. A write of a turn puts it in the statement that locks or changes the
/// turn's row, so the lease is judged at the moment the row is taken.
fn fence_holds(replica: &str, epoch: &str) -> String {
    format!(
        "EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = {replica} AND r.epoch = {epoch} \
         AND r.expires_at_ms > {DB_NOW_MS})"
    )
}

/// The server's clock in Unix milliseconds, the clock of every lease.
pub(crate) const DB_NOW_MS: &str = "(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// Locks the row of `turn_id` while it runs under `fence` and `fence` is live, and returns its
/// session; `None` (nothing locked) otherwise. Interrupting an orphaned turn takes the same row
/// first, so a write either commits before the takeover or finds the turn ended.
async fn lock_fenced_turn(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    fence: &Fence,
    turn_id: &str,
) -> Result<Option<String>> {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT session_key FROM turns WHERE turn_id = $1 AND status = 'running' \
         AND claim_replica = $2 AND claim_epoch = $3 AND {} FOR UPDATE",
        fence_holds("$2", "$3")
    )))
    .bind(turn_id)
    .bind(&fence.replica_id)
    .bind(fence.epoch)
    .fetch_optional(&mut **tx)
    .await
    .map_err(|e| map_error(e, "turn"))
}

fn turn_from_row(row: &PgRow) -> Result<TurnRecord> {
    let status: String = get(row, "status")?;
    let queue_mode: String = get(row, "queue_mode")?;
    Ok(TurnRecord {
        turn_id: get(row, "turn_id")?,
        session_key: get(row, "session_key")?,
        turn_no: get(row, "turn_no")?,
        status: TurnStatus::parse(&status).ok_or(StoreError::Corrupt {
            what: "turn status",
        })?,
        queue_mode: QueueMode::parse(&queue_mode)
            .ok_or(StoreError::Corrupt { what: "queue mode" })?,
        attachments: serde_json::from_str(&get::<String>(row, "attachments_json")?).map_err(
            |_| StoreError::Corrupt {
                what: "attachments",
            },
        )?,
        reply: get(row, "reply")?,
        error_code: get(row, "error_code")?,
        error_message: get(row, "error_message")?,
        created_at_ms: get(row, "created_at_ms")?,
        started_at_ms: get(row, "started_at_ms")?,
        ended_at_ms: get(row, "ended_at_ms")?,
        usage: usage_from_columns([
            get(row, "input_tokens")?,
            get(row, "output_tokens")?,
            get(row, "total_tokens")?,
        ])?,
    })
}

fn message_from_row(row: &PgRow) -> Result<MessageRecord> {
    Ok(MessageRecord {
        seq: get(row, "seq")?,
        turn_id: get(row, "turn_id")?,
        role: get(row, "role")?,
        content: get(row, "content")?,
        tool_name: get(row, "tool_name")?,
        created_at_ms: get(row, "created_at_ms")?,
    })
}

fn checkpoint_from_row(row: &PgRow) -> Result<(String, CheckpointManifest)> {
    Ok((
        get(row, "checkpoint_id")?,
        CheckpointManifest::parse(&get::<String>(row, "manifest_json")?)?,
    ))
}

fn api_key_from_row(row: &PgRow) -> Result<ApiKeyRecord> {
    let scopes: String = get(row, "scopes_json")?;
    Ok(ApiKeyRecord {
        name: get(row, "name")?,
        secret_sha256: get(row, "secret_sha256")?,
        scopes: crate::model::parse_scopes(&scopes)?,
        session_prefix: get(row, "session_prefix")?,
        created_at_ms: get(row, "created_at_ms")?,
        expires_at_ms: get(row, "expires_at_ms")?,
        last_used_at_ms: get(row, "last_used_at_ms")?,
        requests_per_minute: crate::model::stored_limit(get(row, "requests_per_minute")?)?,
        concurrent_turns: crate::model::stored_limit(get(row, "concurrent_turns")?)?,
        max_streams: crate::model::stored_limit(get(row, "max_streams")?)?,
        media_quota_bytes: crate::model::stored_bytes_limit(get(row, "media_quota_bytes")?)?,
    })
}

fn node_from_row(row: &PgRow) -> Result<NodeRecord> {
    Ok(NodeRecord {
        device_id: get(row, "device_id")?,
        public_key: get(row, "public_key")?,
        display_name: get(row, "display_name")?,
        runtime: get(row, "runtime")?,
        commands: serde_json::from_value(json(row, "commands_json", "node commands")?).map_err(
            |_| StoreError::Corrupt {
                what: "node commands",
            },
        )?,
        workspace_root: get(row, "workspace_root")?,
        device_token_sha256: get(row, "device_token_sha256")?,
        enrolled_at_ms: get(row, "enrolled_at_ms")?,
        last_seen_at_ms: get(row, "last_seen_at_ms")?,
    })
}

/// Appends a transcript message, taking the next seq from the session's row (which locks it).
async fn insert_message(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    session_key: &str,
    turn_id: &str,
    role: &str,
    content: &str,
    tool_name: Option<&str>,
    now_ms: i64,
) -> Result<i64> {
    let seq: i64 = sqlx::query_scalar(
        "UPDATE sessions SET next_message_seq = next_message_seq + 1, updated_at_ms = $1 \
         WHERE session_key = $2 RETURNING next_message_seq - 1",
    )
    .bind(now_ms)
    .bind(session_key)
    .fetch_one(&mut **tx)
    .await
    .map_err(|e| map_error(e, "session"))?;
    sqlx::query(
        "INSERT INTO messages (session_key, seq, turn_id, role, content, tool_name, created_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(session_key)
    .bind(seq)
    .bind(turn_id)
    .bind(role)
    .bind(text(content))
    .bind(opt_text(tool_name))
    .bind(now_ms)
    .execute(&mut **tx)
    .await
    .map_err(|e| map_error(e, "message"))?;
    Ok(seq)
}

/// Appends a session event, taking the next seq from the session's row (which locks it).
async fn insert_event(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    session_key: &str,
    kind: &str,
    payload: &serde_json::Value,
    now_ms: i64,
) -> Result<i64> {
    let seq: i64 = sqlx::query_scalar(
        "UPDATE sessions SET next_event_seq = next_event_seq + 1 WHERE session_key = $1 \
         RETURNING next_event_seq - 1",
    )
    .bind(session_key)
    .fetch_one(&mut **tx)
    .await
    .map_err(|e| map_error(e, "session"))?;
    sqlx::query(
        "INSERT INTO session_events (session_key, seq, kind, payload_json, created_at_ms) \
         VALUES ($1, $2, $3, $4::jsonb, $5)",
    )
    .bind(session_key)
    .bind(seq)
    .bind(kind)
    .bind(json_text(payload))
    .bind(now_ms)
    .execute(&mut **tx)
    .await
    .map_err(|e| map_error(e, "event"))?;
    Ok(seq)
}

/// The text PostgreSQL stores for `value` ([`crate::scrub_nul`]).
fn text(value: &str) -> std::borrow::Cow<'_, str> {
    crate::scrub_nul(value)
}

/// [`text`] for an optional value.
fn opt_text(value: Option<&str>) -> Option<std::borrow::Cow<'_, str>> {
    value.map(text)
}

/// The JSON text PostgreSQL stores for `value` in a `jsonb` column, which refuses `\u0000` in
/// strings: NUL in any string or key becomes U+FFFD, as in [`text`].
fn json_text(value: &serde_json::Value) -> String {
    fn clean(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::String(string) => {
                serde_json::Value::String(text(string).into_owned())
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(clean).collect())
            }
            serde_json::Value::Object(map) => serde_json::Value::Object(
                map.iter()
                    .map(|(key, item)| (text(key).into_owned(), clean(item)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let encoded = value.to_string();
    match encoded.contains("\\u0000") {
        true => clean(value).to_string(),
        false => encoded,
    }
}

fn commands_json(commands: &[String]) -> String {
    serde_json::Value::from(commands.to_vec()).to_string()
}

/// Returns the audit events of `rows` (the columns of [`Store::audit_after`]), in their order.
fn audit_events(rows: &[PgRow]) -> Result<Vec<AuditEvent>> {
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        events.push(AuditEvent {
            seq: get(row, "seq")?,
            at_ms: get(row, "at_ms")?,
            actor: get(row, "actor")?,
            action: get(row, "action")?,
            outcome: get(row, "outcome")?,
            reason_code: get(row, "reason_code")?,
            details: json(row, "details_json", "audit details")?,
        });
    }
    Ok(events)
}

fn get<'r, T>(row: &'r PgRow, column: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(column)
        .map_err(|error| map_error(error, column))
}

/// Reads a JSONB column selected as `column::text AS column`.
fn json(row: &PgRow, column: &'static str, what: &'static str) -> Result<serde_json::Value> {
    let text: String = get(row, column)?;
    serde_json::from_str(&text).map_err(|_| StoreError::Corrupt { what })
}

/// Translates an engine error into the backend-neutral error.
fn map_error(error: sqlx::Error, what: &'static str) -> StoreError {
    match &error {
        sqlx::Error::Database(database) => {
            let code = database.code();
            match code.as_deref() {
                // unique_violation
                Some("23505") => return StoreError::AlreadyExists { what },
                // foreign_key_violation: the session (or turn) a row refers to does not exist.
                Some("23503") => return StoreError::NotFound { what },
                // disk_full
                Some("53100") => return StoreError::DiskFull,
                // Class 08 (connection exception), too_many_connections, and the server
                // shutting down or starting up (admin_shutdown, crash_shutdown,
                // cannot_connect_now).
                Some(code)
                    if code.starts_with("08")
                        || matches!(code, "53300" | "57P01" | "57P02" | "57P03") =>
                {
                    return StoreError::Unavailable {
                        source: Box::new(error),
                    };
                }
                _ => {}
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => {
            return StoreError::Unavailable {
                source: Box::new(error),
            };
        }
        _ => {}
    }
    StoreError::Internal {
        source: Box::new(error),
    }
}

fn worktree_version_from_row(row: &PgRow) -> Result<WorktreeVersion> {
    Ok(WorktreeVersion {
        session_key: get(row, "session_key")?,
        version: get(row, "version")?,
        origin: WorktreeOrigin::parse(&get::<String>(row, "origin")?)?,
        turn_id: get(row, "turn_id")?,
        actor: get(row, "actor")?,
        manifest: parse_manifest(&get::<String>(row, "manifest_json")?)?,
        created_at_ms: get(row, "created_at_ms")?,
    })
}

fn worktree_result_from_row(row: &PgRow) -> Result<WorktreeResult> {
    let state = match get::<String>(row, "state")?.as_str() {
        "staged" => ResultState::Staged,
        "applied" => ResultState::Applied,
        _ => {
            return Err(StoreError::Corrupt {
                what: "worktree result state",
            });
        }
    };
    Ok(WorktreeResult {
        turn_id: get(row, "turn_id")?,
        session_key: get(row, "session_key")?,
        staged_ref: get(row, "staged_ref")?,
        manifest: parse_manifest(&get::<String>(row, "manifest_json")?)?,
        state,
        applied: parse_paths(get::<Option<String>>(row, "applied_json")?.as_deref())?,
        conflicts: parse_paths(get::<Option<String>>(row, "conflicts_json")?.as_deref())?,
        version: get(row, "version")?,
        staged_at_ms: get(row, "staged_at_ms")?,
    })
}

/// Takes the transaction-level advisory lock of `key` (its 64-bit text hash), so transactions
/// that lock the same key (the charges of one owner, the releases of one blob) run one at a time
/// on every replica.
async fn lock(
    tx: &mut sqlx::Transaction<'static, sqlx::Postgres>,
    key: &str,
    what: &'static str,
) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
        .bind(text(key))
        .execute(&mut **tx)
        .await
        .map_err(|e| map_error(e, what))?;
    Ok(())
}
