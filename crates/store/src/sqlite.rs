//! [`SqliteStore`]: the Gateway store in one SQLite file, in WAL mode, with versioned migrations.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::sqlite::SqliteJournalMode;
use sqlx::sqlite::SqlitePool;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::sqlite::SqliteRow;
use sqlx::sqlite::SqliteSynchronous;

mod cluster;

use crate::Store;
use crate::cluster::ClaimOutcome;
use crate::cluster::Fence;
use crate::cluster::TurnWriter;
use crate::error::Result;
use crate::error::StoreError;

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

/// The number of pooled connections; SQLite serializes writers anyway.
const POOL_CONNECTIONS: u32 = 8;

/// How long a writer waits for the lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The Gateway store in one SQLite file.
#[derive(Debug, Clone)]
pub struct SqliteStore {
    pool: SqlitePool,
}

impl SqliteStore {
    /// Opens (creating if missing) the database at `path`, switches it to WAL mode with full
    /// synchronous commits, and applies pending migrations.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or migrated.
    pub async fn open(path: &Path) -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .after_release(|connection, _meta| Box::pin(still_usable(connection)))
            .connect_with(options)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        Ok(Self { pool })
    }

    /// Starts a write transaction with `BEGIN IMMEDIATE`, so it takes the write lock up front:
    /// a deferred transaction that reads and then writes fails at once with "database is
    /// locked" when another writer committed in between, instead of waiting.
    async fn begin_write(
        &self,
    ) -> std::result::Result<sqlx::Transaction<'static, sqlx::Sqlite>, sqlx::Error> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }

    /// Returns the connection pool, for callers that add their own tables in this crate.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

/// The columns of an [`ApiKeyRecord`], as [`api_key_from_row`] reads them (a macro, so each
/// query stays one literal).
macro_rules! api_key_columns {
    () => {
        "name, secret_sha256, scopes_json, session_prefix, created_at_ms, \
         expires_at_ms, last_used_at_ms, requests_per_minute, concurrent_turns, max_streams, media_quota_bytes"
    };
}

#[async_trait]
impl Store for SqliteStore {
    async fn insert_api_key(&self, key: &NewApiKey) -> Result<()> {
        sqlx::query(
            "INSERT INTO api_keys (name, secret_sha256, scopes_json, session_prefix, created_at_ms, \
             expires_at_ms, requests_per_minute, concurrent_turns, max_streams, media_quota_bytes) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .bind(&key.name)
        .bind(&key.secret_sha256)
        .bind(crate::model::scopes_json(&key.scopes))
        .bind(&key.session_prefix)
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
            " FROM api_keys WHERE secret_sha256 = ? \
             AND (expires_at_ms IS NULL OR expires_at_ms > ?)"
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
                "UPDATE api_keys SET last_used_at_ms = ? WHERE name = ? \
                 AND (last_used_at_ms IS NULL OR last_used_at_ms <= ?)",
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
        let deleted = sqlx::query("DELETE FROM api_keys WHERE name = ?")
            .bind(name)
            .execute(&self.pool)
            .await
            .map_err(|error| map_error(error, "api key"))?;
        Ok(deleted.rows_affected() == 1)
    }

    async fn ping(&self) -> Result<()> {
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        Ok(())
    }

    async fn insert_setup_code(&self, code: &NewSetupCode) -> Result<()> {
        sqlx::query(
            "INSERT INTO setup_codes (token_sha256, created_at_ms, expires_at_ms) VALUES (?, ?, ?)",
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|error| map_error(error, "enrollment"))?;
        let row =
            sqlx::query("SELECT expires_at_ms, used_at_ms FROM setup_codes WHERE token_sha256 = ?")
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
        // The conditional update makes the code single-use even if two attempts race past the
        // read above in separate transactions.
        let consumed = sqlx::query(
            "UPDATE setup_codes SET used_at_ms = ?, used_by_device_id = ? \
             WHERE token_sha256 = ? AND used_at_ms IS NULL",
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
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (device_id) DO UPDATE SET public_key = excluded.public_key, \
             display_name = excluded.display_name, runtime = excluded.runtime, \
             commands_json = excluded.commands_json, workspace_root = excluded.workspace_root, \
             device_token_sha256 = excluded.device_token_sha256, \
             enrolled_at_ms = excluded.enrolled_at_ms, last_seen_at_ms = excluded.last_seen_at_ms",
        )
        .bind(&node.device_id)
        .bind(&node.public_key)
        .bind(&node.display_name)
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
        let row = sqlx::query(
            "SELECT device_id, public_key, display_name, runtime, commands_json, workspace_root, \
             device_token_sha256, enrolled_at_ms, last_seen_at_ms FROM nodes WHERE device_id = ?",
        )
        .bind(device_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|error| map_error(error, "node"))?;
        row.as_ref().map(node_from_row).transpose()
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        let rows = sqlx::query(
            "SELECT device_id, public_key, display_name, runtime, commands_json, workspace_root, \
             device_token_sha256, enrolled_at_ms, last_seen_at_ms FROM nodes ORDER BY device_id",
        )
        .fetch_all(&self.pool)
        .await
        .map_err(|error| map_error(error, "node"))?;
        rows.iter().map(node_from_row).collect()
    }

    async fn record_node_seen(&self, seen: &NodeSeen) -> Result<()> {
        let updated = sqlx::query(
            "UPDATE nodes SET display_name = ?, runtime = ?, commands_json = ?, \
             workspace_root = ?, last_seen_at_ms = ? WHERE device_id = ?",
        )
        .bind(&seen.display_name)
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
        let row = sqlx::query(
            "INSERT INTO audit_events (at_ms, actor, action, outcome, reason_code, details_json) \
             VALUES (?, ?, ?, ?, ?, ?) RETURNING seq",
        )
        .bind(event.at_ms)
        .bind(&event.actor)
        .bind(&event.action)
        .bind(&event.outcome)
        .bind(&event.reason_code)
        .bind(event.details.to_string())
        .fetch_one(&self.pool)
        .await
        .map_err(|error| map_error(error, "audit event"))?;
        get(&row, "seq")
    }

    async fn audit_after(&self, after: i64, limit: u32) -> Result<Vec<AuditEvent>> {
        let rows = sqlx::query(
            "SELECT seq, at_ms, actor, action, outcome, reason_code, details_json \
             FROM audit_events WHERE seq > ? ORDER BY seq LIMIT ?",
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
            "SELECT seq, at_ms, actor, action, outcome, reason_code, details_json \
             FROM audit_events WHERE seq < ? ORDER BY seq DESC LIMIT ?",
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
        let pruned = sqlx::query("DELETE FROM audit_events WHERE at_ms < ?")
            .bind(cutoff_ms)
            .execute(&self.pool)
            .await
            .map_err(|error| map_error(error, "audit event"))?;
        Ok(pruned.rows_affected())
    }

    async fn admit_user_message(&self, message: &NewUserMessage) -> Result<Admitted> {
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "message"))?;
        sqlx::query(
            "INSERT INTO sessions (session_key, runtime, created_at_ms, updated_at_ms) \
             VALUES (?, ?, ?, ?) ON CONFLICT (session_key) DO UPDATE SET updated_at_ms = excluded.updated_at_ms",
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
                "{TURN_COLUMNS} WHERE session_key = ? AND idempotency_key = ?"
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
                "{TURN_COLUMNS} WHERE session_key = ? AND status = 'queued' ORDER BY turn_no DESC LIMIT 1"
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
                    "SELECT COALESCE(MAX(turn_no), 0) + 1 FROM turns WHERE session_key = ?",
                )
                .bind(&message.session_key)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| map_error(e, "turn"))?;
                let inserted = sqlx::query(
                    "INSERT INTO turns (turn_id, session_key, turn_no, status, queue_mode, idempotency_key, \
                     attachments_json, created_at_ms) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?)",
                )
                .bind(&message.turn_id)
                .bind(&message.session_key)
                .bind(turn_no)
                .bind(message.queue_mode.as_str())
                .bind(&message.idempotency_key)
                .bind(
                    serde_json::to_string(&message.attachments)
                        .map_err(|_| StoreError::Corrupt { what: "attachments" })?,
                )
                .bind(message.now_ms)
                .execute(&mut *tx)
                .await;
                if let Err(error) = inserted {
                    let error = map_error(error, "turn");
                    // A concurrent duplicate with the same idempotency key won the race: answer
                    // with its turn.
                    if let (StoreError::AlreadyExists { .. }, Some(key)) =
                        (&error, &message.idempotency_key)
                    {
                        drop(tx);
                        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
                            "{TURN_COLUMNS} WHERE session_key = ? AND idempotency_key = ?"
                        )))
                        .bind(&message.session_key)
                        .bind(key)
                        .fetch_one(&self.pool)
                        .await
                        .map_err(|e| map_error(e, "turn"))?;
                        return Ok(Admitted {
                            turn: turn_from_row(&row)?,
                            created: false,
                        });
                    }
                    return Err(error);
                }
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
            "{TURN_COLUMNS} WHERE turn_id = ?"
        )))
        .bind(turn_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        row.as_ref().map(turn_from_row).transpose()
    }

    async fn turn_user_messages(&self, turn_id: &str) -> Result<Vec<MessageRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{MESSAGE_COLUMNS} WHERE turn_id = ? AND role = 'user' ORDER BY seq"
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
        let mut tx = self.begin_write().await.map_err(|e| map_error(e, "turn"))?;
        if !fence_holds(&mut tx, fence).await? {
            return Ok(ClaimOutcome::Fenced);
        }
        // The session's node must be linked to this replica under this lease: a replica claims
        // only the turns of sessions whose node it holds (an unbound session is placed first).
        let holder: Option<(Option<String>, Option<String>, Option<i64>)> = sqlx::query_as(
            "SELECT s.node_id, l.replica_id, l.epoch FROM sessions s \
             LEFT JOIN node_links l ON l.device_id = s.node_id WHERE s.session_key = ?",
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
            "SELECT COUNT(*) FROM turns WHERE session_key = ? AND status = 'running'",
        )
        .bind(session_key)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        if running > 0 {
            return Ok(ClaimOutcome::Idle);
        }
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{TURN_COLUMNS} WHERE session_key = ? AND status = 'queued' ORDER BY turn_no LIMIT 1"
        )))
        .bind(session_key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        let Some(row) = row else {
            return Ok(ClaimOutcome::Idle);
        };
        let mut turn = turn_from_row(&row)?;
        sqlx::query(
            "UPDATE turns SET status = 'running', started_at_ms = ?, claim_replica = ?, \
             claim_epoch = ? WHERE turn_id = ? AND status = 'queued'",
        )
        .bind(now_ms)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(&turn.turn_id)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "turn"))?;
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
        let mut tx = self.begin_write().await.map_err(|e| map_error(e, "turn"))?;
        if !fence_holds(&mut tx, fence).await? {
            return Ok(false);
        }
        let session_key: Option<String> = sqlx::query_scalar(
            "UPDATE turns SET status = ?, reply = ?, error_code = ?, error_message = ?, ended_at_ms = ?, \
             input_tokens = ?, output_tokens = ?, total_tokens = ? \
             WHERE turn_id = ? AND (status = 'queued' OR (status = 'running' \
             AND claim_replica = ? AND claim_epoch = ?)) RETURNING session_key",
        )
        .bind(end.status.as_str())
        .bind(&end.reply)
        .bind(&end.error_code)
        .bind(&end.error_message)
        .bind(end.now_ms)
        .bind(input_tokens)
        .bind(output_tokens)
        .bind(total_tokens)
        .bind(turn_id)
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "message"))?;
        let Some(session_key) = fenced_turn(&mut tx, fence, &message.turn_id).await? else {
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "event"))?;
        let Some(session_key) = fenced_turn(&mut tx, fence, turn_id).await? else {
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "event"))?;
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
            "SELECT seq, kind, payload_json, created_at_ms FROM session_events \
             WHERE session_key = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session_key)
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "event"))?;
        let mut events = Vec::with_capacity(rows.len());
        for row in &rows {
            let payload: String = get(row, "payload_json")?;
            events.push(EventRecord {
                seq: get(row, "seq")?,
                kind: get(row, "kind")?,
                payload: serde_json::from_str(&payload).map_err(|_| StoreError::Corrupt {
                    what: "event payload",
                })?,
                created_at_ms: get(row, "created_at_ms")?,
            });
        }
        Ok(events)
    }

    async fn last_event_seq(&self, session_key: &str) -> Result<i64> {
        let next: Option<i64> =
            sqlx::query_scalar("SELECT next_event_seq FROM sessions WHERE session_key = ?")
                .bind(session_key)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| map_error(e, "session"))?;
        Ok(next.map_or(0, |next| next - 1))
    }

    async fn next_queued_turn(&self, session_key: &str) -> Result<Option<TurnRecord>> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{TURN_COLUMNS} WHERE session_key = ? AND status = 'queued' ORDER BY turn_no LIMIT 1"
        )))
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "turn"))?;
        row.as_ref().map(turn_from_row).transpose()
    }

    async fn transcript(&self, session_key: &str) -> Result<Vec<MessageRecord>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{MESSAGE_COLUMNS} WHERE session_key = ? ORDER BY seq"
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
             (SELECT turn_id FROM turns t WHERE t.session_key = s.session_key AND t.status = 'running' LIMIT 1) AS active_turn_id \
             FROM sessions s ORDER BY s.session_key",
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
                    (SELECT coalesce(sum(size_bytes), 0) FROM checkpoint_blobs)",
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
            "SELECT DISTINCT session_key FROM turns WHERE status = 'queued' ORDER BY session_key",
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "checkpoint"))?;
        if let Some(writer) = writer
            && fenced_turn(&mut tx, writer.fence, writer.turn_id)
                .await?
                .is_none()
        {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO checkpoints (checkpoint_id, session_key, manifest_json, created_at_ms) \
             VALUES (?, ?, ?, ?) \
             ON CONFLICT (checkpoint_id) DO UPDATE SET created_at_ms = max(created_at_ms, excluded.created_at_ms)",
        )
        .bind(checkpoint_id)
        .bind(session_key)
        .bind(manifest.to_json()?)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "checkpoint"))?;
        sqlx::query("UPDATE sessions SET latest_checkpoint_id = ? WHERE session_key = ?")
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
            "SELECT c.checkpoint_id, c.manifest_json FROM sessions s \
             JOIN checkpoints c ON c.checkpoint_id = s.latest_checkpoint_id WHERE s.session_key = ?",
        )
        .bind(session_key)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "checkpoint"))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let manifest = CheckpointManifest::parse(&get::<String>(&row, "manifest_json")?)?;
        Ok(Some((get(&row, "checkpoint_id")?, manifest)))
    }

    async fn recent_checkpoints(
        &self,
        session_key: &str,
        except: &str,
        limit: u32,
    ) -> Result<Vec<(String, CheckpointManifest)>> {
        let rows = sqlx::query(
            "SELECT checkpoint_id, manifest_json FROM checkpoints \
             WHERE session_key = ? AND checkpoint_id != ? \
             ORDER BY created_at_ms DESC, rowid DESC LIMIT ?",
        )
        .bind(session_key)
        .bind(except)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "checkpoint"))?;
        let mut checkpoints = Vec::with_capacity(rows.len());
        for row in &rows {
            let manifest = CheckpointManifest::parse(&get::<String>(row, "manifest_json")?)?;
            checkpoints.push((get(row, "checkpoint_id")?, manifest));
        }
        Ok(checkpoints)
    }

    async fn prune_checkpoints(&self, session_key: &str, keep: u32) -> Result<u64> {
        let pruned = sqlx::query(
            "DELETE FROM checkpoints WHERE session_key = ?1 \
             AND checkpoint_id NOT IN \
                 (SELECT latest_checkpoint_id FROM sessions WHERE latest_checkpoint_id IS NOT NULL) \
             AND checkpoint_id NOT IN (SELECT checkpoint_id FROM checkpoints WHERE session_key = ?1 \
                 ORDER BY created_at_ms DESC, rowid DESC LIMIT ?2)",
        )
        .bind(session_key)
        .bind(i64::from(keep))
        .execute(&self.pool)
        .await
        .map_err(|e| map_error(e, "checkpoint"))?;
        Ok(pruned.rows_affected())
    }

    async fn register_checkpoint_blobs(&self, blobs: &[CheckpointBlob], now_ms: i64) -> Result<()> {
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "checkpoint blob"))?;
        for blob in blobs {
            sqlx::query(
                "INSERT INTO checkpoint_blobs (media_id, size_bytes, registered_at_ms) \
                 VALUES (?, ?, ?) ON CONFLICT (media_id) DO NOTHING",
            )
            .bind(&blob.media_id)
            .bind(i64::try_from(blob.size_bytes).unwrap_or(i64::MAX))
            .bind(now_ms)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_error(e, "checkpoint blob"))?;
        }
        tx.commit()
            .await
            .map_err(|e| map_error(e, "checkpoint blob"))?;
        Ok(())
    }

    async fn checkpoint_blob_garbage(&self) -> Result<Vec<CheckpointBlob>> {
        let rows = sqlx::query(include_str!(
            "../queries/sqlite/checkpoint_blob_garbage.sql"
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
            " FROM api_keys WHERE secret_sha256 = ?"
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
        charges::claim_session_owner(&self.pool, Dialect::Sqlite, session_key, owner, now_ms)
            .await
            .map_err(|e| map_error(e, "session owner"))?;
        self.session_owner(session_key)
            .await?
            .ok_or(StoreError::Corrupt {
                what: "session owner",
            })
    }

    async fn session_owner(&self, session_key: &str) -> Result<Option<String>> {
        charges::session_owner(&self.pool, Dialect::Sqlite, session_key)
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "media charge"))?;
        let charged = charges::charge::<sqlx::Sqlite>(
            &mut tx,
            Dialect::Sqlite,
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
        charges::charged_bytes(&self.pool, Dialect::Sqlite, owner)
            .await
            .map_err(|e| map_error(e, "media charge"))
    }

    async fn uncharge_media(
        &self,
        owner: &str,
        kind: MediaChargeKind,
        media_id: &str,
    ) -> Result<()> {
        charges::uncharge(&self.pool, Dialect::Sqlite, Some(owner), kind, media_id)
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "media release"))?;
        let released = charges::release_upload::<sqlx::Sqlite>(
            &mut tx,
            Dialect::Sqlite,
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
            Dialect::Sqlite,
            None,
            MediaChargeKind::Session,
            media_id,
        )
        .await
        .map_err(|e| map_error(e, "checkpoint blob"))?;
        sqlx::query("DELETE FROM checkpoint_blobs WHERE media_id = ?")
            .bind(media_id)
            .execute(&self.pool)
            .await
            .map_err(|e| map_error(e, "checkpoint blob"))?;
        Ok(())
    }

    async fn pin_media(&self, media_id: &str, reason: &str, now_ms: i64) -> Result<()> {
        sqlx::query(
            "INSERT INTO media_pins (media_id, reason, pinned_at_ms) VALUES (?, ?, ?) \
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
            "INSERT INTO media_grants (media_id, grantee, granted_at_ms) VALUES (?, ?, ?) \
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
            "SELECT media_id FROM media_grants WHERE media_id = ?1 \
             AND (grantee = ?2 OR substr(grantee, 1, length(?3)) = ?3) LIMIT 1",
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "codex thread"))?;
        sqlx::query(
            "INSERT INTO codex_threads (session_key, thread_id, bound_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (session_key) DO UPDATE SET thread_id = excluded.thread_id, bound_at_ms = excluded.bound_at_ms",
        )
        .bind(session_key)
        .bind(thread_id)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session"))?;
        tx.commit()
            .await
            .map_err(|e| map_error(e, "codex thread"))?;
        Ok(())
    }

    async fn codex_thread(&self, session_key: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT thread_id FROM codex_threads WHERE session_key = ?")
            .bind(session_key)
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| map_error(e, "codex thread"))?;
        row.map(|row| get(&row, "thread_id")).transpose()
    }

    async fn session_node(&self, session_key: &str) -> Result<Option<String>> {
        let node: Option<Option<String>> =
            sqlx::query_scalar("SELECT node_id FROM sessions WHERE session_key = ?")
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "session node"))?;
        sqlx::query(
            "UPDATE sessions SET node_id = ?, node_bound_at_ms = ? \
             WHERE session_key = ? AND node_id IS NULL",
        )
        .bind(node_id)
        .bind(now_ms)
        .bind(session_key)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session node"))?;
        let bound: Option<Option<String>> =
            sqlx::query_scalar("SELECT node_id FROM sessions WHERE session_key = ?")
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
        let updated = sqlx::query(
            "UPDATE sessions SET node_id = ?1, node_bound_at_ms = ?2 \
             WHERE session_key = ?3 AND node_id = ?4 AND NOT EXISTS (SELECT 1 FROM turns \
             WHERE turns.session_key = ?3 AND turns.status = 'running')",
        )
        .bind(to)
        .bind(now_ms)
        .bind(session_key)
        .bind(from)
        .execute(&self.pool)
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "session node"))?;
        let current: Option<Option<String>> =
            sqlx::query_scalar("SELECT node_id FROM sessions WHERE session_key = ?")
                .bind(session_key)
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session node"))?;
        let Some(from) = current else {
            return Ok(SessionMove::NotFound);
        };
        let running: Option<String> = sqlx::query_scalar(
            "SELECT turn_id FROM turns WHERE session_key = ? AND status = 'running' LIMIT 1",
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
        sqlx::query("UPDATE sessions SET node_id = ?, node_bound_at_ms = ? WHERE session_key = ?")
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "session"))?;
        let row = sqlx::query(
            "SELECT workspace_json, workspace_commit, next_message_seq FROM sessions \
             WHERE session_key = ?",
        )
        .bind(session_key)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "session"))?;
        let outcome = match row {
            None => {
                sqlx::query(
                    "INSERT INTO sessions (session_key, runtime, created_at_ms, updated_at_ms, \
                     workspace_json) VALUES (?, ?, ?, ?, ?)",
                )
                .bind(session_key)
                .bind(runtime)
                .bind(now_ms)
                .bind(now_ms)
                .bind(&source_json)
                .execute(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session"))?;
                WorkspaceSet::Created
            }
            Some(row) => {
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
                    "UPDATE sessions SET workspace_json = ?, workspace_commit = NULL, \
                     worktree_base_json = NULL, updated_at_ms = ? WHERE session_key = ?",
                )
                .bind(&source_json)
                .bind(now_ms)
                .bind(session_key)
                .execute(&mut *tx)
                .await
                .map_err(|e| map_error(e, "session"))?;
                sqlx::query("DELETE FROM worktree_versions WHERE session_key = ?")
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
                 manifest_json, created_at_ms) VALUES (?, 1, ?, NULL, 'gateway', ?, ?)",
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
            "SELECT workspace_json, workspace_commit FROM sessions WHERE session_key = ?",
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
            "UPDATE sessions SET workspace_commit = coalesce(workspace_commit, ?) \
             WHERE session_key = ? RETURNING workspace_commit",
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
            "SELECT session_key, version, origin, turn_id, actor, manifest_json, created_at_ms \
             FROM worktree_versions WHERE session_key = ? AND (? IS NULL OR version = ?) \
             ORDER BY version DESC LIMIT 1",
        )
        .bind(session_key)
        .bind(version)
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "worktree"))?;
        let head = worktree_head(&mut tx, &version.session_key).await?;
        if head != version.expected_head {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO worktree_versions (session_key, version, origin, turn_id, actor, \
             manifest_json, created_at_ms) VALUES (?, ?, ?, NULL, ?, ?, ?)",
        )
        .bind(&version.session_key)
        .bind(head + 1)
        .bind(version.origin.as_str())
        .bind(&version.actor)
        .bind(manifest_json(&version.manifest)?)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree"))?;
        tx.commit().await.map_err(|e| map_error(e, "worktree"))?;
        Ok(true)
    }

    async fn worktree_base(&self, session_key: &str) -> Result<Option<StoredManifest>> {
        let base: Option<Option<String>> =
            sqlx::query_scalar("SELECT worktree_base_json FROM sessions WHERE session_key = ?")
                .bind(session_key)
                .fetch_optional(&self.pool)
                .await
                .map_err(|e| map_error(e, "worktree"))?;
        base.flatten().as_deref().map(parse_manifest).transpose()
    }

    async fn set_worktree_base(&self, session_key: &str, base: &StoredManifest) -> Result<()> {
        sqlx::query("UPDATE sessions SET worktree_base_json = ? WHERE session_key = ?")
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "worktree result"))?;
        if let Some(fence) = fence
            && fenced_turn(&mut tx, fence, turn_id).await?.is_none()
        {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO worktree_results (turn_id, session_key, staged_ref, manifest_json, \
             state, staged_at_ms) VALUES (?, ?, ?, ?, 'staged', ?) \
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
        let rows = sqlx::query(
            "SELECT turn_id, session_key, staged_ref, manifest_json, state, applied_json, \
             conflicts_json, version, staged_at_ms FROM worktree_results \
             WHERE state = 'staged' AND (? IS NULL OR session_key = ?) \
             ORDER BY staged_at_ms, rowid",
        )
        .bind(session_key)
        .bind(session_key)
        .fetch_all(&self.pool)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        rows.iter().map(worktree_result_from_row).collect()
    }

    async fn worktree_result(&self, turn_id: &str) -> Result<Option<WorktreeResult>> {
        let row = sqlx::query(
            "SELECT turn_id, session_key, staged_ref, manifest_json, state, applied_json, \
             conflicts_json, version, staged_at_ms FROM worktree_results WHERE turn_id = ?",
        )
        .bind(turn_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        row.as_ref().map(worktree_result_from_row).transpose()
    }

    async fn prune_worktree_versions(&self, session_key: &str, keep: i64) -> Result<u64> {
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "worktree"))?;
        let head = worktree_head(&mut tx, session_key).await?;
        let below = head - keep;
        sqlx::query(
            "DELETE FROM worktree_results WHERE session_key = ? AND state = 'applied' \
             AND version > 1 AND version <= ?",
        )
        .bind(session_key)
        .bind(below)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        let pruned = sqlx::query(
            "DELETE FROM worktree_versions WHERE session_key = ? AND version > 1 AND version <= ?",
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
        let mut tx = self
            .begin_write()
            .await
            .map_err(|e| map_error(e, "worktree"))?;
        let head = worktree_head(&mut tx, &apply.session_key).await?;
        let staged: Option<String> = sqlx::query_scalar(
            "SELECT manifest_json FROM worktree_results WHERE turn_id = ? AND state = 'staged'",
        )
        .bind(&apply.turn_id)
        .fetch_optional(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        let Some(staged) = staged else {
            return Ok(false);
        };
        if head != apply.expected_head {
            return Ok(false);
        }
        sqlx::query(
            "INSERT INTO worktree_versions (session_key, version, origin, turn_id, actor, \
             manifest_json, created_at_ms) VALUES (?, ?, ?, ?, 'gateway', ?, ?)",
        )
        .bind(&apply.session_key)
        .bind(head + 1)
        .bind(WorktreeOrigin::Turn.as_str())
        .bind(&apply.turn_id)
        .bind(manifest_json(&apply.merged)?)
        .bind(now_ms)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree"))?;
        sqlx::query("UPDATE sessions SET worktree_base_json = ? WHERE session_key = ?")
            .bind(&staged)
            .bind(&apply.session_key)
            .execute(&mut *tx)
            .await
            .map_err(|e| map_error(e, "worktree"))?;
        sqlx::query(
            "UPDATE worktree_results SET state = 'applied', applied_json = ?, \
             conflicts_json = ?, version = ?, applied_at_ms = ? WHERE turn_id = ?",
        )
        .bind(paths_json(&apply.applied)?)
        .bind(paths_json(&apply.conflicts)?)
        .bind(head + 1)
        .bind(now_ms)
        .bind(&apply.turn_id)
        .execute(&mut *tx)
        .await
        .map_err(|e| map_error(e, "worktree result"))?;
        tx.commit().await.map_err(|e| map_error(e, "worktree"))?;
        Ok(true)
    }
}

const TURN_COLUMNS: &str = "SELECT turn_id, session_key, turn_no, status, queue_mode, attachments_json, reply, \
    error_code, error_message, created_at_ms, started_at_ms, ended_at_ms, input_tokens, output_tokens, \
    total_tokens FROM turns";

const MESSAGE_COLUMNS: &str =
    "SELECT seq, turn_id, role, content, tool_name, created_at_ms FROM messages";

fn turn_from_row(row: &SqliteRow) -> Result<TurnRecord> {
    let status: String = get(row, "status")?;
    let queue_mode: String = get(row, "queue_mode")?;
    let attachments: String = get(row, "attachments_json")?;
    Ok(TurnRecord {
        turn_id: get(row, "turn_id")?,
        session_key: get(row, "session_key")?,
        turn_no: get(row, "turn_no")?,
        status: TurnStatus::parse(&status).ok_or(StoreError::Corrupt {
            what: "turn status",
        })?,
        queue_mode: QueueMode::parse(&queue_mode)
            .ok_or(StoreError::Corrupt { what: "queue mode" })?,
        attachments: serde_json::from_str(&attachments).map_err(|_| StoreError::Corrupt {
            what: "attachments",
        })?,
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

fn message_from_row(row: &SqliteRow) -> Result<MessageRecord> {
    Ok(MessageRecord {
        seq: get(row, "seq")?,
        turn_id: get(row, "turn_id")?,
        role: get(row, "role")?,
        content: get(row, "content")?,
        tool_name: get(row, "tool_name")?,
        created_at_ms: get(row, "created_at_ms")?,
    })
}

/// Returns whether `fence` is its replica's newest lease and unexpired now, inside `tx` (a
/// write transaction, which SQLite runs one at a time).
async fn fence_holds(tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>, fence: &Fence) -> Result<bool> {
    let live: Option<i64> = sqlx::query_scalar(
        "SELECT 1 FROM replicas WHERE replica_id = ? AND epoch = ? AND expires_at_ms > ?",
    )
    .bind(&fence.replica_id)
    .bind(fence.epoch)
    .bind(cluster::clock_ms())
    .fetch_optional(&mut **tx)
    .await
    .map_err(|e| map_error(e, "replica"))?;
    Ok(live.is_some())
}

/// Returns the session of `turn_id` while it runs under `fence` and `fence` is live; `None`
/// otherwise.
async fn fenced_turn(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    fence: &Fence,
    turn_id: &str,
) -> Result<Option<String>> {
    if !fence_holds(tx, fence).await? {
        return Ok(None);
    }
    sqlx::query_scalar(
        "SELECT session_key FROM turns WHERE turn_id = ? AND status = 'running' \
         AND claim_replica = ? AND claim_epoch = ?",
    )
    .bind(turn_id)
    .bind(&fence.replica_id)
    .bind(fence.epoch)
    .fetch_optional(&mut **tx)
    .await
    .map_err(|e| map_error(e, "turn"))
}

async fn insert_message(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    session_key: &str,
    turn_id: &str,
    role: &str,
    content: &str,
    tool_name: Option<&str>,
    now_ms: i64,
) -> Result<i64> {
    let seq: i64 = sqlx::query_scalar(
        "UPDATE sessions SET next_message_seq = next_message_seq + 1, updated_at_ms = ? \
         WHERE session_key = ? RETURNING next_message_seq - 1",
    )
    .bind(now_ms)
    .bind(session_key)
    .fetch_one(&mut **tx)
    .await
    .map_err(|e| map_error(e, "session"))?;
    sqlx::query(
        "INSERT INTO messages (session_key, seq, turn_id, role, content, tool_name, created_at_ms) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(session_key)
    .bind(seq)
    .bind(turn_id)
    .bind(role)
    .bind(content)
    .bind(tool_name)
    .bind(now_ms)
    .execute(&mut **tx)
    .await
    .map_err(|e| map_error(e, "message"))?;
    Ok(seq)
}

async fn insert_event(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    session_key: &str,
    kind: &str,
    payload: &serde_json::Value,
    now_ms: i64,
) -> Result<i64> {
    let seq: i64 = sqlx::query_scalar(
        "UPDATE sessions SET next_event_seq = next_event_seq + 1 WHERE session_key = ? \
         RETURNING next_event_seq - 1",
    )
    .bind(session_key)
    .fetch_one(&mut **tx)
    .await
    .map_err(|e| map_error(e, "session"))?;
    sqlx::query(
        "INSERT INTO session_events (session_key, seq, kind, payload_json, created_at_ms) VALUES (?, ?, ?, ?, ?)",
    )
    .bind(session_key)
    .bind(seq)
    .bind(kind)
    .bind(payload.to_string())
    .bind(now_ms)
    .execute(&mut **tx)
    .await
    .map_err(|e| map_error(e, "event"))?;
    Ok(seq)
}

fn node_from_row(row: &SqliteRow) -> Result<NodeRecord> {
    let commands: String = get(row, "commands_json")?;
    Ok(NodeRecord {
        device_id: get(row, "device_id")?,
        public_key: get(row, "public_key")?,
        display_name: get(row, "display_name")?,
        runtime: get(row, "runtime")?,
        commands: serde_json::from_str(&commands).map_err(|_| StoreError::Corrupt {
            what: "node commands",
        })?,
        workspace_root: get(row, "workspace_root")?,
        device_token_sha256: get(row, "device_token_sha256")?,
        enrolled_at_ms: get(row, "enrolled_at_ms")?,
        last_seen_at_ms: get(row, "last_seen_at_ms")?,
    })
}

fn api_key_from_row(row: &SqliteRow) -> Result<ApiKeyRecord> {
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

fn commands_json(commands: &[String]) -> String {
    serde_json::Value::from(commands.to_vec()).to_string()
}

/// Returns the audit events of `rows` (the columns of [`Store::audit_after`]), in their order.
fn audit_events(rows: &[SqliteRow]) -> Result<Vec<AuditEvent>> {
    let mut events = Vec::with_capacity(rows.len());
    for row in rows {
        let details: String = get(row, "details_json")?;
        events.push(AuditEvent {
            seq: get(row, "seq")?,
            at_ms: get(row, "at_ms")?,
            actor: get(row, "actor")?,
            action: get(row, "action")?,
            outcome: get(row, "outcome")?,
            reason_code: get(row, "reason_code")?,
            details: serde_json::from_str(&details).map_err(|_| StoreError::Corrupt {
                what: "audit details",
            })?,
        });
    }
    Ok(events)
}

fn get<'r, T>(row: &'r SqliteRow, column: &'static str) -> Result<T>
where
    T: sqlx::Decode<'r, sqlx::Sqlite> + sqlx::Type<sqlx::Sqlite>,
{
    row.try_get(column)
        .map_err(|error| map_error(error, column))
}

/// Translates an engine error into the backend-neutral error.
/// Returns whether a connection given back to the pool may be used again: not when it is still
/// inside a transaction by sqlx's count.
///
/// When SQLite rolls a transaction back on its own (a `COMMIT` or a statement that fails with
/// `SQLITE_FULL` or an I/O error, for example on a full disk), sqlx's `COMMIT` fails, the
/// `ROLLBACK` it sends when the transaction is dropped fails too ("no transaction is active"),
/// and its count stays at one. Every later `BEGIN IMMEDIATE` on that connection would then fail
/// with `InvalidSavePointStatement`, a `STORE_FAILURE`, long after space was freed, and an
/// admission that happened to get it would answer that instead of `STORAGE_FULL`. The ping runs
/// after the rollback the drop queued, so a transaction that was rolled back normally counts
/// as ended.
async fn still_usable(
    connection: &mut sqlx::SqliteConnection,
) -> std::result::Result<bool, sqlx::Error> {
    use sqlx::Connection;
    connection.ping().await?;
    Ok(!connection.is_in_transaction())
}

fn map_error(error: sqlx::Error, what: &'static str) -> StoreError {
    if let sqlx::Error::Database(database) = &error {
        let code = database.code();
        match code.as_deref() {
            // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
            Some("2067" | "1555") => return StoreError::AlreadyExists { what },
            // SQLITE_FULL, and SQLITE_IOERR_SHMSIZE: SQLite grows the WAL index (`-shm`) by
            // writing to each new page, and reports a full disk there as this I/O error.
            Some("13" | "4874") => return StoreError::DiskFull,
            // SQLITE_BUSY (with its _RECOVERY and _SNAPSHOT forms) and SQLITE_LOCKED: another
            // connection held the file past the busy timeout. Nothing was written; a retry later
            // may succeed.
            Some("5" | "261" | "517" | "6" | "262") => {
                return StoreError::Unavailable {
                    source: Box::new(error),
                };
            }
            _ => {}
        }
        if database.message().contains("disk is full") {
            return StoreError::DiskFull;
        }
    }
    if let sqlx::Error::Io(io) = &error
        && (io.raw_os_error() == Some(28) || io.kind() == std::io::ErrorKind::StorageFull)
    {
        return StoreError::DiskFull;
    }
    // Every pooled connection stayed busy past the pool's acquire timeout.
    if matches!(error, sqlx::Error::PoolTimedOut) {
        return StoreError::Unavailable {
            source: Box::new(error),
        };
    }
    StoreError::Internal {
        source: Box::new(error),
    }
}

/// Returns the head version of a session's worktree (0 when it has none), inside `tx`.
async fn worktree_head(
    tx: &mut sqlx::Transaction<'static, sqlx::Sqlite>,
    session_key: &str,
) -> Result<i64> {
    sqlx::query_scalar(
        "SELECT coalesce(max(version), 0) FROM worktree_versions WHERE session_key = ?",
    )
    .bind(session_key)
    .fetch_one(&mut **tx)
    .await
    .map_err(|e| map_error(e, "worktree"))
}

fn worktree_version_from_row(row: &SqliteRow) -> Result<WorktreeVersion> {
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

fn worktree_result_from_row(row: &SqliteRow) -> Result<WorktreeResult> {
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

#[cfg(test)]
mod tests {
    use crate::Store;
    use crate::model::NewUserMessage;
    use crate::model::QueueMode;
    use crate::sqlite::POOL_CONNECTIONS;
    use crate::sqlite::SqliteStore;

    fn message(turn_id: &str) -> NewUserMessage {
        NewUserMessage {
            session_key: String::from("s"),
            runtime: String::from("native"),
            turn_id: turn_id.to_owned(),
            text: String::from("hello"),
            attachments: Vec::new(),
            idempotency_key: None,
            queue_mode: QueueMode::Followup,
            now_ms: 1,
        }
    }

    /// A file another process holds locked past the busy timeout is "busy, retry later"
    /// (`STORE_UNAVAILABLE`, 503), not a store failure; nothing of the refused admission is
    /// written, and the next one after the lock is gone succeeds.
    #[tokio::test]
    async fn a_file_locked_past_the_busy_timeout_is_unavailable_not_a_failure() {
        use sqlx::Connection;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.db");
        let store = SqliteStore::open(&path).await.unwrap();
        let mut holder = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
        )
        .await
        .unwrap();
        sqlx::raw_sql("BEGIN EXCLUSIVE")
            .execute(&mut holder)
            .await
            .unwrap();
        let refused = store.admit_user_message(&message("turn-1")).await;
        let error = refused.expect_err("the file is locked");
        assert_eq!(
            error.code(),
            gatehouse_protocol::error::ErrorCode::StoreUnavailable,
            "{error:?}"
        );
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut holder)
            .await
            .unwrap();
        let admitted = store.admit_user_message(&message("turn-2")).await.unwrap();
        assert!(admitted.created);
        assert_eq!(admitted.turn.turn_id, "turn-2");
        assert!(store.turn("turn-1").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_transaction_sqlite_ended_on_its_own_leaves_no_spoiled_connection_in_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("gateway.db"))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE probe (k INTEGER PRIMARY KEY)")
            .execute(&store.pool)
            .await
            .unwrap();
        sqlx::query("INSERT INTO probe (k) VALUES (1)")
            .execute(&store.pool)
            .await
            .unwrap();
        // A conflicting `INSERT OR ROLLBACK` makes SQLite end the transaction itself, as a
        // commit that fails on a full disk does; then the transaction is dropped.
        for _ in 0..2 * POOL_CONNECTIONS {
            let Ok(mut transaction) = store.begin_write().await else {
                continue;
            };
            let conflict = sqlx::query("INSERT OR ROLLBACK INTO probe (k) VALUES (1)")
                .execute(&mut *transaction)
                .await;
            assert!(conflict.is_err());
        }
        // Every later write transaction starts, whichever connection it gets.
        for index in 0..2 * POOL_CONNECTIONS {
            let admitted = store
                .admit_user_message(&NewUserMessage {
                    session_key: String::from("s"),
                    runtime: String::from("native"),
                    turn_id: format!("turn-{index}"),
                    text: String::from("hello"),
                    attachments: Vec::new(),
                    idempotency_key: None,
                    queue_mode: QueueMode::Followup,
                    now_ms: 1,
                })
                .await;
            assert!(admitted.is_ok(), "admission {index}: {admitted:?}");
        }
    }
}
