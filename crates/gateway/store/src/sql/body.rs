//! [`Store`] for [`SqlStore`]: one body for SQLite and PostgreSQL.
//!
//! # Concurrency
//! On SQLite one write transaction runs at a time (it begins with `BEGIN IMMEDIATE`). On
//! PostgreSQL many run at once, at read committed, and the body takes the locks that keep the
//! same guarantees:
//! - A session's row is its lock: admissions, claims, moves and every transcript or event append
//!   lock it first, so sequence numbers within a session are contiguous and a session never runs
//!   two turns.
//! - A turn's row fences its writers: a commit locks the running turn, so a message is never
//!   stored after the turn ended.
//! - Audit appends take a transaction-level advisory lock, so a reader that pages with
//!   [`Store::audit_after`] never skips an event whose sequence number committed late; charges
//!   of one owner and releases of one blob take one each ([`lock_key`]).
//!
//! The `FOR UPDATE` clauses below are those locks; SQLite reads them without the clause
//! ([`super::Dialect::translate`]).

use std::collections::HashSet;

use async_trait::async_trait;

use super::Backend;
use super::Dialect;
use super::NOW_MS;
use super::Query;
use super::SqlRow;
use super::SqlStore;
use super::Tx;
use super::channels::insert_inbound;
use super::channels::queue_turn_reply;
use super::channels::record_channel_session;
use super::channels::record_channel_turn;
use super::get;
use super::get_json;
use super::query;
use crate::Store;
use crate::cluster::ClaimOutcome;
use crate::cluster::Fence;
use crate::cluster::TurnWriter;
use crate::error::Result;
use crate::error::StoreError;
use crate::records::API_KEY_LAST_USED_RESOLUTION_MS;
use crate::records::Admitted;
use crate::records::ApiKeyRecord;
use crate::records::AuditEvent;
use crate::records::CheckpointBlob;
use crate::records::CheckpointManifest;
use crate::records::EnrollOutcome;
use crate::records::Enrollment;
use crate::records::EventPayload;
use crate::records::EventRecord;
use crate::records::MediaCharge;
use crate::records::MediaChargeKind;
use crate::records::MessageRecord;
use crate::records::NewApiKey;
use crate::records::NewAuditEvent;
use crate::records::NewSetupCode;
use crate::records::NewTurnMessage;
use crate::records::NewUserMessage;
use crate::records::NewWorktreeVersion;
use crate::records::NodeRecord;
use crate::records::NodeSeen;
use crate::records::QueueMode;
use crate::records::ReleasedUpload;
use crate::records::ResultApply;
use crate::records::ResultState;
use crate::records::SessionMove;
use crate::records::SessionRecord;
use crate::records::SessionWorkspace;
use crate::records::StoreFigures;
use crate::records::StoredManifest;
use crate::records::TurnEnd;
use crate::records::TurnQueued;
use crate::records::TurnRecord;
use crate::records::TurnStarted;
use crate::records::TurnStatus;
use crate::records::USAGE_COUNT_COLUMNS;
use crate::records::UsageColumns;
use crate::records::UsageGroup;
use crate::records::UsageGrouping;
use crate::records::UsageQuery;
use crate::records::UsageRow;
use crate::records::UsageScope;
use crate::records::WorkspaceSet;
use crate::records::WorkspaceSource;
use crate::records::WorktreeOrigin;
use crate::records::WorktreeResult;
use crate::records::WorktreeVersion;
use crate::records::manifest_json;
use crate::records::parse_manifest;
use crate::records::parse_paths;
use crate::records::paths_json;
use crate::records::stored_workspace;
use crate::records::usage_columns;
use crate::records::usage_from_columns;
use crate::records::workspace_json;
use gatehouse_protocol::worker::TokenUsage;

/// The key of the advisory lock that orders audit appends on PostgreSQL ("gh-audit" in ASCII).
const AUDIT_LOCK_KEY: i64 = 0x6768_2d61_7564_6974;

/// The columns of an [`ApiKeyRecord`], as [`api_key_from_row`] reads them.
const API_KEY_COLUMNS: &str = "SELECT name, secret_sha256, scopes_json::text AS scopes_json, \
    session_prefix, created_at_ms, expires_at_ms, last_used_at_ms, requests_per_minute, \
    concurrent_turns, max_streams, media_quota_bytes, tokens_per_day FROM api_keys";

/// The columns of a [`NodeRecord`], as [`node_from_row`] reads them.
const NODE_COLUMNS: &str = "SELECT device_id, public_key, display_name, runtime, \
    commands_json::text AS commands_json, workspace_root, device_token_sha256, enrolled_at_ms, \
    last_seen_at_ms FROM nodes";

/// The columns of a [`TurnRecord`], as [`turn_from_row`] reads them.
pub(super) const TURN_COLUMNS: &str = "SELECT turn_id, session_key, turn_no, status, queue_mode, \
    attachments_json::text AS attachments_json, reply, error_code, error_message, created_at_ms, \
    started_at_ms, ended_at_ms, input_tokens, cached_input_tokens, output_tokens, total_tokens, \
    model_calls, retries, model FROM turns";

/// The columns of a [`MessageRecord`], as [`message_from_row`] reads them.
const MESSAGE_COLUMNS: &str =
    "SELECT seq, turn_id, role, content, tool_name, created_at_ms FROM messages";

/// The columns of a [`WorktreeResult`], as [`worktree_result_from_row`] reads them.
const WORKTREE_RESULT_COLUMNS: &str = "SELECT turn_id, session_key, staged_ref, \
    manifest_json::text AS manifest_json, state, applied_json::text AS applied_json, \
    conflicts_json::text AS conflicts_json, version, staged_at_ms FROM worktree_results";

/// The columns of a [`WorktreeVersion`], as [`worktree_version_from_row`] reads them.
const WORKTREE_VERSION_COLUMNS: &str = "SELECT session_key, version, origin, turn_id, actor, \
    manifest_json::text AS manifest_json, created_at_ms FROM worktree_versions";

/// The most rows one multi-row insert carries (SQLite allows 32,766 parameters per statement,
/// PostgreSQL 65,535).
const INSERT_BATCH_ROWS: usize = 500;

#[async_trait]
impl<B: Backend> Store for SqlStore<B> {
    async fn ping(&self) -> Result<()> {
        query("SELECT 1")
            .execute(&self.db, "ping")
            .await
            .map_err(|error| match error {
                StoreError::Unavailable { .. } => error,
                other => StoreError::Unavailable {
                    source: Box::new(other),
                },
            })?;
        Ok(())
    }

    async fn insert_api_key(&self, key: &NewApiKey) -> Result<()> {
        query(
            "INSERT INTO api_keys (name, secret_sha256, scopes_json, session_prefix, \
             created_at_ms, expires_at_ms, last_used_at_ms, requests_per_minute, \
             concurrent_turns, max_streams, media_quota_bytes, tokens_per_day) \
             VALUES (?, ?, ?::jsonb, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        )
        .text(&key.name)
        .bind(&key.secret_sha256)
        .bind(crate::records::scopes_json(&key.scopes))
        .opt_text(key.session_prefix.as_deref())
        .bind(key.created_at_ms)
        .bind(key.expires_at_ms)
        .bind(key.last_used_at_ms)
        .bind(key.requests_per_minute.map(i64::from))
        .bind(key.concurrent_turns.map(i64::from))
        .bind(key.max_streams.map(i64::from))
        .bind(
            key.media_quota_bytes
                .map(|bytes| i64::try_from(bytes).unwrap_or(i64::MAX)),
        )
        .bind(
            key.tokens_per_day
                .map(|tokens| i64::try_from(tokens).unwrap_or(i64::MAX)),
        )
        .execute(&self.db, "api key")
        .await?;
        Ok(())
    }

    async fn api_keys(&self) -> Result<Vec<ApiKeyRecord>> {
        query(format!("{API_KEY_COLUMNS} ORDER BY name"))
            .all(&self.db, "api keys")
            .await?
            .iter()
            .map(api_key_from_row)
            .collect()
    }

    async fn use_api_key(&self, secret_sha256: &str, now_ms: i64) -> Result<Option<ApiKeyRecord>> {
        let row = query(format!(
            "{API_KEY_COLUMNS} WHERE secret_sha256 = ? \
             AND (expires_at_ms IS NULL OR expires_at_ms > ?)"
        ))
        .bind(secret_sha256)
        .bind(now_ms)
        .optional(&self.db, "api key")
        .await?;
        let Some(row) = row else {
            return Ok(None);
        };
        let mut key = api_key_from_row(&row)?;
        if key
            .last_used_at_ms
            .is_none_or(|used| used <= now_ms - API_KEY_LAST_USED_RESOLUTION_MS)
        {
            query(
                "UPDATE api_keys SET last_used_at_ms = ? WHERE name = ? \
                 AND (last_used_at_ms IS NULL OR last_used_at_ms <= ?)",
            )
            .bind(now_ms)
            .bind(&key.name)
            .bind(now_ms - API_KEY_LAST_USED_RESOLUTION_MS)
            .execute(&self.db, "api key use")
            .await?;
            key.last_used_at_ms = Some(now_ms);
        }
        Ok(Some(key))
    }

    async fn revoke_api_key(&self, name: &str) -> Result<bool> {
        let deleted = query("DELETE FROM api_keys WHERE name = ?")
            .text(name)
            .execute(&self.db, "api key")
            .await?;
        Ok(deleted == 1)
    }

    async fn insert_setup_code(&self, code: &NewSetupCode) -> Result<()> {
        query(
            "INSERT INTO setup_codes (token_sha256, created_at_ms, expires_at_ms) VALUES (?, ?, ?)",
        )
        .bind(&code.token_sha256)
        .bind(code.created_at_ms)
        .bind(code.expires_at_ms)
        .execute(&self.db, "setup code")
        .await?;
        Ok(())
    }

    async fn enroll_node(&self, enrollment: &Enrollment) -> Result<EnrollOutcome> {
        let mut tx = self.begin("enrollment").await?;
        // Locking the code's row makes concurrent attempts with one code wait for each other, so
        // exactly one sees it unused.
        let row = query(
            "SELECT expires_at_ms, used_at_ms FROM setup_codes WHERE token_sha256 = ? FOR UPDATE",
        )
        .bind(&enrollment.token_sha256)
        .optional(&mut tx, "setup code")
        .await?;
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
        // read above.
        let consumed = query(
            "UPDATE setup_codes SET used_at_ms = ?, used_by_device_id = ? \
             WHERE token_sha256 = ? AND used_at_ms IS NULL",
        )
        .bind(enrollment.now_ms)
        .bind(&enrollment.node.device_id)
        .bind(&enrollment.token_sha256)
        .execute(&mut tx, "setup code")
        .await?;
        if consumed != 1 {
            return Ok(EnrollOutcome::UsedCode);
        }
        let node = &enrollment.node;
        query(
            "INSERT INTO nodes (device_id, public_key, display_name, runtime, commands_json, \
             workspace_root, device_token_sha256, enrolled_at_ms, last_seen_at_ms) \
             VALUES (?, ?, ?, ?, ?::jsonb, ?, ?, ?, ?) \
             ON CONFLICT (device_id) DO UPDATE SET public_key = excluded.public_key, \
             display_name = excluded.display_name, runtime = excluded.runtime, \
             commands_json = excluded.commands_json, workspace_root = excluded.workspace_root, \
             device_token_sha256 = excluded.device_token_sha256, \
             enrolled_at_ms = excluded.enrolled_at_ms, last_seen_at_ms = excluded.last_seen_at_ms",
        )
        .bind(&node.device_id)
        .bind(&node.public_key)
        .text(&node.display_name)
        .bind(&node.runtime)
        .bind(commands_json(&node.commands))
        .bind(&node.workspace_root)
        .bind(&node.device_token_sha256)
        .bind(node.enrolled_at_ms)
        .bind(node.last_seen_at_ms)
        .execute(&mut tx, "node")
        .await?;
        tx.commit("enrollment").await?;
        Ok(EnrollOutcome::Enrolled)
    }

    async fn node(&self, device_id: &str) -> Result<Option<NodeRecord>> {
        query(format!("{NODE_COLUMNS} WHERE device_id = ?"))
            .bind(device_id)
            .optional(&self.db, "node")
            .await?
            .as_ref()
            .map(node_from_row)
            .transpose()
    }

    async fn nodes(&self) -> Result<Vec<NodeRecord>> {
        query(format!("{NODE_COLUMNS} ORDER BY device_id COLLATE \"C\""))
            .all(&self.db, "node")
            .await?
            .iter()
            .map(node_from_row)
            .collect()
    }

    async fn record_node_seen(&self, seen: &NodeSeen) -> Result<()> {
        let updated = query(
            "UPDATE nodes SET display_name = ?, runtime = ?, commands_json = ?::jsonb, \
             workspace_root = ?, last_seen_at_ms = ? WHERE device_id = ?",
        )
        .text(&seen.display_name)
        .bind(&seen.runtime)
        .bind(commands_json(&seen.commands))
        .bind(&seen.workspace_root)
        .bind(seen.at_ms)
        .bind(&seen.device_id)
        .execute(&self.db, "node")
        .await?;
        match updated {
            0 => Err(StoreError::NotFound { what: "node" }),
            _ => Ok(()),
        }
    }

    async fn append_audit(&self, event: &NewAuditEvent) -> Result<i64> {
        let mut tx = self.begin("audit event").await?;
        if B::DIALECT == Dialect::Postgres {
            // Identity values are handed out before commit; holding this lock to the commit
            // makes the order of the sequence numbers the order in which events become visible.
            query("SELECT pg_advisory_xact_lock(?)")
                .bind(AUDIT_LOCK_KEY)
                .execute(&mut tx, "audit event")
                .await?;
        }
        let seq: i64 = query(
            "INSERT INTO audit_events (at_ms, actor, action, outcome, reason_code, details_json) \
             VALUES (?, ?, ?, ?, ?, ?::jsonb) RETURNING seq",
        )
        .bind(event.at_ms)
        .text(&event.actor)
        .text(&event.action)
        .text(&event.outcome)
        .opt_text(event.reason_code.as_deref())
        .json(event.details.to_string())
        .scalar(&mut tx, "audit event")
        .await?;
        tx.commit("audit event").await?;
        Ok(seq)
    }

    async fn audit_after(&self, after: i64, limit: u32) -> Result<Vec<AuditEvent>> {
        let rows = query(
            "SELECT seq, at_ms, actor, action, outcome, reason_code, \
             details_json::text AS details_json FROM audit_events WHERE seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(after)
        .bind(i64::from(limit))
        .all(&self.db, "audit event")
        .await?;
        rows.iter().map(audit_event_from_row).collect()
    }

    async fn audit_before(&self, before: i64, limit: u32) -> Result<Vec<AuditEvent>> {
        let rows = query(
            "SELECT seq, at_ms, actor, action, outcome, reason_code, \
             details_json::text AS details_json FROM audit_events WHERE seq < ? \
             ORDER BY seq DESC LIMIT ?",
        )
        .bind(before)
        .bind(i64::from(limit))
        .all(&self.db, "audit event")
        .await?;
        let mut events = rows
            .iter()
            .map(audit_event_from_row)
            .collect::<Result<Vec<_>>>()?;
        events.reverse();
        Ok(events)
    }

    async fn prune_audit(&self, cutoff_ms: i64) -> Result<u64> {
        // A plain delete: replicas pruning at once each remove what the others have not.
        query("DELETE FROM audit_events WHERE at_ms < ?")
            .bind(cutoff_ms)
            .execute(&self.db, "audit event")
            .await
    }

    async fn admit_user_message(&self, message: &NewUserMessage) -> Result<Admitted> {
        let mut tx = self.begin("message").await?;
        // Creating or touching the session locks its row until the commit: admissions to one
        // session run one after the other.
        query(
            "INSERT INTO sessions (session_key, runtime, created_at_ms, updated_at_ms) \
             VALUES (?, ?, ?, ?) \
             ON CONFLICT (session_key) DO UPDATE SET updated_at_ms = excluded.updated_at_ms",
        )
        .bind(&message.session_key)
        .bind(&message.runtime)
        .bind(message.now_ms)
        .bind(message.now_ms)
        .execute(&mut tx, "session")
        .await?;
        if let Some(origin) = &message.origin
            && !insert_inbound(&mut tx, origin, "admitted", message.now_ms).await?
        {
            // The channel delivered this message before: answer with the turn it joined, or
            // refuse when it admitted nothing then.
            let turn_id: Option<Option<String>> =
                query("SELECT turn_id FROM channel_inbound WHERE channel = ? AND message_id = ?")
                    .bind(&origin.channel)
                    .text(&origin.message_id)
                    .opt_scalar(&mut tx, "channel message")
                    .await?;
            let Some(turn_id) = turn_id.flatten() else {
                return Err(StoreError::AlreadyExists {
                    what: "channel message",
                });
            };
            let row = query(format!("{TURN_COLUMNS} WHERE turn_id = ?"))
                .bind(&turn_id)
                .one(&mut tx, "turn")
                .await?;
            return Ok(Admitted {
                turn: turn_from_row(&row)?,
                created: false,
            });
        }
        if let Some(key) = &message.idempotency_key
            && let Some(turn) = self
                .turn_by_idempotency_key(&mut tx, &message.session_key, key)
                .await?
        {
            return Ok(Admitted {
                turn,
                created: false,
            });
        }
        let joined = match message.queue_mode {
            QueueMode::Collect => {
                query(format!(
                    "{TURN_COLUMNS} WHERE session_key = ? AND status = 'queued' \
                     ORDER BY turn_no DESC LIMIT 1"
                ))
                .bind(&message.session_key)
                .optional(&mut tx, "turn")
                .await?
            }
            QueueMode::Followup | QueueMode::Steer | QueueMode::Interrupt => None,
        };
        let turn = match joined {
            Some(row) => turn_from_row(&row)?,
            None => {
                let turn_no: i64 =
                    query("SELECT COALESCE(MAX(turn_no), 0) + 1 FROM turns WHERE session_key = ?")
                        .bind(&message.session_key)
                        .scalar(&mut tx, "turn")
                        .await?;
                let inserted = query(
                    "INSERT INTO turns (turn_id, session_key, turn_no, status, queue_mode, \
                     idempotency_key, attachments_json, created_at_ms, api_key) \
                     VALUES (?, ?, ?, 'queued', ?, ?, ?::jsonb, ?, ?)",
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
                .opt_text(message.api_key.as_deref())
                .execute(&mut tx, "turn")
                .await;
                if let Err(error) = inserted {
                    // A concurrent duplicate with the same idempotency key won the race: answer
                    // with its turn.
                    if let (StoreError::AlreadyExists { .. }, Some(key)) =
                        (&error, &message.idempotency_key)
                    {
                        drop(tx);
                        let row = query(format!(
                            "{TURN_COLUMNS} WHERE session_key = ? AND idempotency_key = ?"
                        ))
                        .bind(&message.session_key)
                        .bind(key)
                        .one(&self.db, "turn")
                        .await?;
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
        if let Some(origin) = &message.origin {
            record_channel_turn(&mut tx, &turn.turn_id, origin).await?;
            record_channel_session(&mut tx, &message.session_key, origin).await?;
        }
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
        tx.commit("message").await?;
        Ok(Admitted {
            turn,
            created: true,
        })
    }

    async fn turn(&self, turn_id: &str) -> Result<Option<TurnRecord>> {
        query(format!("{TURN_COLUMNS} WHERE turn_id = ?"))
            .bind(turn_id)
            .optional(&self.db, "turn")
            .await?
            .as_ref()
            .map(turn_from_row)
            .transpose()
    }

    async fn turn_user_messages(&self, turn_id: &str) -> Result<Vec<MessageRecord>> {
        query(format!(
            "{MESSAGE_COLUMNS} WHERE turn_id = ? AND role = 'user' ORDER BY seq"
        ))
        .bind(turn_id)
        .all(&self.db, "message")
        .await?
        .iter()
        .map(message_from_row)
        .collect()
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
        let live: bool = query(format!("SELECT {}", fence_holds()))
            .bind(&fence.replica_id)
            .bind(fence.epoch)
            .scalar(&mut tx, "replica")
            .await?;
        if !live {
            return Ok(ClaimOutcome::Fenced);
        }
        // The session's node must be linked to this replica under this lease: a replica claims
        // only the turns of sessions whose node it holds (an unbound session is placed first).
        let holder = query(
            "SELECT s.node_id, l.replica_id, l.epoch FROM sessions s \
             LEFT JOIN node_links l ON l.device_id = s.node_id WHERE s.session_key = ?",
        )
        .bind(session_key)
        .optional(&mut tx, "turn")
        .await?;
        if let Some(holder) = holder {
            let node: Option<String> = get(&holder, "node_id")?;
            let replica: Option<String> = get(&holder, "replica_id")?;
            let epoch: Option<i64> = get(&holder, "epoch")?;
            if node.is_some()
                && (replica.as_deref() != Some(fence.replica_id.as_str())
                    || epoch != Some(fence.epoch))
            {
                return Ok(ClaimOutcome::NotHolder);
            }
        }
        let running: i64 =
            query("SELECT COUNT(*) FROM turns WHERE session_key = ? AND status = 'running'")
                .bind(session_key)
                .scalar(&mut tx, "turn")
                .await?;
        if running > 0 {
            return Ok(ClaimOutcome::Idle);
        }
        let Some(mut turn) = next_queued(&mut tx, session_key).await? else {
            return Ok(ClaimOutcome::Idle);
        };
        let claimed = query(format!(
            "UPDATE turns SET status = 'running', started_at_ms = ?, claim_replica = ?, \
             claim_epoch = ? WHERE turn_id = ? AND status = 'queued' AND {}",
            fence_holds()
        ))
        .bind(now_ms)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(&turn.turn_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&mut tx, "turn")
        .await?;
        if claimed != 1 {
            // The turn is still queued (the session row is locked): the lease no longer holds.
            return Ok(ClaimOutcome::Fenced);
        }
        let payload = TurnStarted {
            turn_id: turn.turn_id.clone(),
        }
        .to_payload_json();
        insert_event(&mut tx, session_key, TurnStarted::KIND, &payload, now_ms).await?;
        tx.commit("turn").await?;
        turn.status = TurnStatus::Running;
        turn.started_at_ms = Some(now_ms);
        Ok(ClaimOutcome::Claimed(Box::new(turn)))
    }

    async fn finish_turn(&self, fence: &Fence, turn_id: &str, end: &TurnEnd) -> Result<bool> {
        let usage = usage_columns(end.usage.as_ref());
        let mut tx = self.begin("turn").await?;
        // The session's row first, then the turn's, as a claim takes them: a claim and the end
        // of a queued turn never wait for each other in a cycle.
        let session: Option<String> = query("SELECT session_key FROM turns WHERE turn_id = ?")
            .bind(turn_id)
            .opt_scalar(&mut tx, "turn")
            .await?;
        match session {
            Some(session_key) => {
                lock_session(&mut tx, &session_key).await?;
            }
            None => return Ok(false),
        }
        let session_key: Option<String> = query(format!(
            "UPDATE turns SET status = ?, reply = ?, error_code = ?, error_message = ?, \
             ended_at_ms = ?, {} \
             WHERE turn_id = ? AND (status = 'queued' OR (status = 'running' \
             AND claim_replica = ? AND claim_epoch = ?)) AND {} \
             RETURNING session_key",
            // Calls already counted one by one keep their sums; a runtime that reports only
            // at the end fills them now.
            USAGE_COUNT_COLUMNS
                .iter()
                .chain(["model"].iter())
                .map(|column| format!("{column} = COALESCE({column}, ?)"))
                .collect::<Vec<_>>()
                .join(", "),
            fence_holds()
        ))
        .bind(end.status.as_str())
        .opt_text(end.reply.as_deref())
        .opt_text(end.error_code.as_deref())
        .opt_text(end.error_message.as_deref())
        .bind(end.now_ms)
        .bind(usage.counts[0])
        .bind(usage.counts[1])
        .bind(usage.counts[2])
        .bind(usage.counts[3])
        .bind(usage.counts[4])
        .bind(usage.counts[5])
        .opt_text(usage.model.as_deref())
        .bind(turn_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .opt_scalar(&mut tx, "turn")
        .await?;
        let Some(session_key) = session_key else {
            return Ok(false);
        };
        let (kind, payload) = end.event(turn_id);
        insert_event(&mut tx, &session_key, kind, &payload, end.now_ms).await?;
        queue_turn_reply(&mut tx, turn_id, end.now_ms).await?;
        tx.commit("turn").await?;
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
        tx.commit("message").await?;
        Ok(Some(seq))
    }

    async fn add_turn_usage(
        &self,
        fence: &Fence,
        turn_id: &str,
        usage: &TokenUsage,
    ) -> Result<bool> {
        let columns = usage_columns(Some(usage));
        let updated = query(format!(
            "UPDATE turns SET {}, model = COALESCE(model, ?) \
             WHERE turn_id = ? AND status = 'running' AND claim_replica = ? \
             AND claim_epoch = ? AND {}",
            USAGE_COUNT_COLUMNS
                .iter()
                .map(|column| format!("{column} = COALESCE({column}, 0) + ?"))
                .collect::<Vec<_>>()
                .join(", "),
            fence_holds()
        ))
        .bind(columns.counts[0])
        .bind(columns.counts[1])
        .bind(columns.counts[2])
        .bind(columns.counts[3])
        .bind(columns.counts[4])
        .bind(columns.counts[5])
        .opt_text(columns.model.as_deref())
        .bind(turn_id)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .bind(&fence.replica_id)
        .bind(fence.epoch)
        .execute(&self.db, "turn usage")
        .await?;
        Ok(updated > 0)
    }

    async fn tokens_used(&self, scope: UsageScope<'_>, since_ms: i64) -> Result<u64> {
        let (column, value) = match scope {
            UsageScope::ApiKey(name) => ("api_key", name),
            UsageScope::Session(key) => ("session_key", key),
        };
        let used: i64 = query(format!(
            "SELECT COALESCE(SUM(total_tokens), 0)::bigint FROM turns \
             WHERE {column} = ? AND created_at_ms >= ?"
        ))
        .bind(value)
        .bind(since_ms)
        .scalar(&self.db, "token usage")
        .await?;
        Ok(u64::try_from(used).unwrap_or(0))
    }

    async fn usage(&self, usage_query: &UsageQuery) -> Result<Vec<UsageRow>> {
        let group = match usage_query.group_by {
            UsageGrouping::Session => "session_key",
            UsageGrouping::ApiKey => "api_key",
            UsageGrouping::Day => "CAST(created_at_ms / 86400000 AS TEXT)",
        };
        let rows = query(format!(
            "SELECT {group} AS usage_group, COUNT(*)::bigint AS turns, \
             COALESCE(SUM(model_calls), 0)::bigint AS model_calls, \
             COALESCE(SUM(input_tokens), 0)::bigint AS input_tokens, \
             COALESCE(SUM(cached_input_tokens), 0)::bigint AS cached_input_tokens, \
             COALESCE(SUM(output_tokens), 0)::bigint AS output_tokens, \
             COALESCE(SUM(total_tokens), 0)::bigint AS total_tokens \
             FROM turns WHERE created_at_ms >= ? AND created_at_ms < ? \
             AND (? IS NULL OR session_key = ?) GROUP BY {group}"
        ))
        .bind(usage_query.from_ms.unwrap_or(i64::MIN))
        .bind(usage_query.to_ms.unwrap_or(i64::MAX))
        .opt_text(usage_query.session_key.as_deref())
        .opt_text(usage_query.session_key.as_deref())
        .all(&self.db, "usage")
        .await?;
        let count = |row: &_, column| -> Result<u64> {
            let value: i64 = get(row, column)?;
            Ok(u64::try_from(value).unwrap_or(0))
        };
        let mut usage = rows
            .iter()
            .map(|row| {
                let name: Option<String> = get(row, "usage_group")?;
                let group = match (usage_query.group_by, name) {
                    (_, None) => UsageGroup::NoKey,
                    (UsageGrouping::Day, Some(day)) => UsageGroup::Day(
                        day.parse()
                            .map_err(|_| StoreError::Corrupt { what: "usage day" })?,
                    ),
                    (_, Some(name)) => UsageGroup::Name(name),
                };
                Ok(UsageRow {
                    group,
                    turns: count(row, "turns")?,
                    model_calls: count(row, "model_calls")?,
                    input_tokens: count(row, "input_tokens")?,
                    cached_input_tokens: count(row, "cached_input_tokens")?,
                    output_tokens: count(row, "output_tokens")?,
                    total_tokens: count(row, "total_tokens")?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        usage.sort_by(|a, b| a.group.cmp(&b.group));
        Ok(usage)
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
        tx.commit("event").await?;
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
        tx.commit("event").await?;
        Ok(seq)
    }

    async fn events_after(
        &self,
        session_key: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<EventRecord>> {
        let rows = query(
            "SELECT seq, kind, payload_json::text AS payload_json, created_at_ms \
             FROM session_events WHERE session_key = ? AND seq > ? ORDER BY seq LIMIT ?",
        )
        .bind(session_key)
        .bind(after)
        .bind(i64::from(limit))
        .all(&self.db, "event")
        .await?;
        rows.iter()
            .map(|row| {
                Ok(EventRecord {
                    seq: get(row, "seq")?,
                    kind: get(row, "kind")?,
                    payload: get_json(row, "payload_json", "event payload")?,
                    created_at_ms: get(row, "created_at_ms")?,
                })
            })
            .collect()
    }

    async fn last_event_seq(&self, session_key: &str) -> Result<i64> {
        let next: Option<i64> = query("SELECT next_event_seq FROM sessions WHERE session_key = ?")
            .bind(session_key)
            .opt_scalar(&self.db, "session")
            .await?;
        Ok(next.map_or(0, |next| next - 1))
    }

    async fn next_queued_turn(&self, session_key: &str) -> Result<Option<TurnRecord>> {
        query(format!(
            "{TURN_COLUMNS} WHERE session_key = ? AND status = 'queued' ORDER BY turn_no LIMIT 1"
        ))
        .bind(session_key)
        .optional(&self.db, "turn")
        .await?
        .as_ref()
        .map(turn_from_row)
        .transpose()
    }

    async fn transcript(&self, session_key: &str) -> Result<Vec<MessageRecord>> {
        query(format!(
            "{MESSAGE_COLUMNS} WHERE session_key = ? ORDER BY seq"
        ))
        .bind(session_key)
        .all(&self.db, "message")
        .await?
        .iter()
        .map(message_from_row)
        .collect()
    }

    async fn sessions(&self) -> Result<Vec<SessionRecord>> {
        let rows = query(
            "SELECT s.session_key, s.runtime, s.node_id, s.created_at_ms, s.updated_at_ms, \
             (SELECT turn_id FROM turns t WHERE t.session_key = s.session_key \
              AND t.status = 'running' LIMIT 1) AS active_turn_id, \
             c.channel, c.peer, c.room \
             FROM sessions s LEFT JOIN channel_sessions c ON c.session_key = s.session_key \
             ORDER BY s.session_key COLLATE \"C\"",
        )
        .all(&self.db, "session")
        .await?;
        rows.iter()
            .map(|row| {
                Ok(SessionRecord {
                    session_key: get(row, "session_key")?,
                    runtime: get(row, "runtime")?,
                    active_turn_id: get(row, "active_turn_id")?,
                    node_id: get(row, "node_id")?,
                    created_at_ms: get(row, "created_at_ms")?,
                    updated_at_ms: get(row, "updated_at_ms")?,
                    channel: get(row, "channel")?,
                    peer: get(row, "peer")?,
                    room: get(row, "room")?,
                })
            })
            .collect()
    }

    async fn figures(&self) -> Result<StoreFigures> {
        let row = query(
            "SELECT (SELECT count(*) FROM turns WHERE status = 'queued') AS queued, \
             (SELECT CAST(coalesce(sum(size_bytes), 0) AS BIGINT) FROM checkpoint_blobs) AS bytes",
        )
        .one(&self.db, "figures")
        .await?;
        Ok(StoreFigures {
            n_queued_turns: u64::try_from(get::<i64>(&row, "queued")?).unwrap_or(0),
            checkpoint_bytes: u64::try_from(get::<i64>(&row, "bytes")?).unwrap_or(0),
        })
    }

    async fn sessions_with_queued_turns(&self) -> Result<Vec<String>> {
        query(
            "SELECT DISTINCT session_key COLLATE \"C\" AS session_key FROM turns \
             WHERE status = 'queued' ORDER BY 1",
        )
        .column(&self.db, "turn")
        .await
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
        query(
            "INSERT INTO checkpoints (checkpoint_id, session_key, manifest_json, created_at_ms) \
             VALUES (?, ?, ?::jsonb, ?) ON CONFLICT (checkpoint_id) DO UPDATE \
             SET created_at_ms = GREATEST(checkpoints.created_at_ms, excluded.created_at_ms)",
        )
        .bind(checkpoint_id)
        .bind(session_key)
        .bind(manifest.to_json()?)
        .bind(now_ms)
        .execute(&mut tx, "checkpoint")
        .await?;
        query("UPDATE sessions SET latest_checkpoint_id = ? WHERE session_key = ?")
            .bind(checkpoint_id)
            .bind(session_key)
            .execute(&mut tx, "session")
            .await?;
        tx.commit("checkpoint").await?;
        Ok(true)
    }

    async fn latest_checkpoint(
        &self,
        session_key: &str,
    ) -> Result<Option<(String, CheckpointManifest)>> {
        query(
            "SELECT c.checkpoint_id, c.manifest_json::text AS manifest_json FROM sessions s \
             JOIN checkpoints c ON c.checkpoint_id = s.latest_checkpoint_id \
             WHERE s.session_key = ?",
        )
        .bind(session_key)
        .optional(&self.db, "checkpoint")
        .await?
        .as_ref()
        .map(checkpoint_from_row)
        .transpose()
    }

    async fn recent_checkpoints(
        &self,
        session_key: &str,
        except: &str,
        limit: u32,
    ) -> Result<Vec<(String, CheckpointManifest)>> {
        query(format!(
            "SELECT checkpoint_id, manifest_json::text AS manifest_json FROM checkpoints \
             WHERE session_key = ? AND checkpoint_id != ? \
             ORDER BY created_at_ms DESC, {} DESC LIMIT ?",
            saved_order::<B>()
        ))
        .bind(session_key)
        .bind(except)
        .bind(i64::from(limit))
        .all(&self.db, "checkpoint")
        .await?
        .iter()
        .map(checkpoint_from_row)
        .collect()
    }

    async fn prune_checkpoints(&self, session_key: &str, keep: u32) -> Result<u64> {
        query(format!(
            "DELETE FROM checkpoints WHERE session_key = ? \
             AND checkpoint_id NOT IN \
                 (SELECT latest_checkpoint_id FROM sessions WHERE latest_checkpoint_id IS NOT NULL) \
             AND checkpoint_id NOT IN (SELECT checkpoint_id FROM checkpoints WHERE session_key = ? \
                 ORDER BY created_at_ms DESC, {} DESC LIMIT ?)",
            saved_order::<B>()
        ))
        .bind(session_key)
        .bind(session_key)
        .bind(i64::from(keep))
        .execute(&self.db, "checkpoint")
        .await
    }

    async fn register_checkpoint_blobs(&self, blobs: &[CheckpointBlob], now_ms: i64) -> Result<()> {
        // One transaction: all blobs are listed, or none.
        let mut tx = self.begin("checkpoint blob").await?;
        for batch in blobs.chunks(INSERT_BATCH_ROWS) {
            let rows = vec!["(?, ?, ?)"; batch.len()].join(", ");
            let mut insert = query(format!(
                "INSERT INTO checkpoint_blobs (media_id, size_bytes, registered_at_ms) \
                 VALUES {rows} ON CONFLICT (media_id) DO NOTHING"
            ));
            for blob in batch {
                insert = insert
                    .bind(&blob.media_id)
                    .bind(i64::try_from(blob.size_bytes).unwrap_or(i64::MAX))
                    .bind(now_ms);
            }
            insert.execute(&mut tx, "checkpoint blob").await?;
        }
        tx.commit("checkpoint blob").await
    }

    async fn checkpoint_blob_garbage(&self) -> Result<Vec<CheckpointBlob>> {
        let rows = query(B::DIALECT.pick(
            include_str!("../../queries/sqlite/checkpoint_blob_garbage.sql"),
            include_str!("../../queries/postgres/checkpoint_blob_garbage.sql"),
        ))
        .all(&self.db, "checkpoint blob")
        .await?;
        rows.iter()
            .map(|row| {
                Ok(CheckpointBlob {
                    media_id: get(row, "media_id")?,
                    size_bytes: u64::try_from(get::<i64>(row, "size_bytes")?).unwrap_or(0),
                })
            })
            .collect()
    }

    async fn api_key_by_hash(&self, secret_sha256: &str) -> Result<Option<ApiKeyRecord>> {
        query(format!("{API_KEY_COLUMNS} WHERE secret_sha256 = ?"))
            .bind(secret_sha256)
            .optional(&self.db, "api key")
            .await?
            .as_ref()
            .map(api_key_from_row)
            .transpose()
    }

    async fn claim_session_owner(
        &self,
        session_key: &str,
        owner: &str,
        now_ms: i64,
    ) -> Result<String> {
        query(
            "INSERT INTO session_owners (session_key, owner, created_at_ms) \
             VALUES (?, ?, ?) ON CONFLICT (session_key) DO NOTHING",
        )
        .text(session_key)
        .text(owner)
        .bind(now_ms)
        .execute(&self.db, "session owner")
        .await?;
        self.session_owner(session_key)
            .await?
            .ok_or(StoreError::Corrupt {
                what: "session owner",
            })
    }

    async fn session_owner(&self, session_key: &str) -> Result<Option<String>> {
        query("SELECT owner FROM session_owners WHERE session_key = ?")
            .text(session_key)
            .opt_scalar(&self.db, "session owner")
            .await
    }

    async fn charge_media(
        &self,
        owner: &str,
        kind: MediaChargeKind,
        blobs: &[CheckpointBlob],
        quota_bytes: Option<u64>,
        now_ms: i64,
    ) -> Result<MediaCharge> {
        const WHAT: &str = "media charge";
        let mut tx = self.begin(WHAT).await?;
        // No other charge of this owner interleaves.
        lock_key(&mut tx, owner, WHAT).await?;
        let used_bytes: i64 = charged_bytes(owner).scalar(&mut tx, WHAT).await?;
        let used_bytes = u64::try_from(used_bytes).unwrap_or(0);
        let mut seen = HashSet::new();
        let mut fresh = Vec::new();
        for blob in blobs {
            if !seen.insert(blob.media_id.as_str()) {
                continue;
            }
            let charged: Option<String> = query(
                "SELECT media_id FROM media_charges WHERE owner = ? AND media_id = ? AND kind = ?",
            )
            .text(owner)
            .text(&blob.media_id)
            .bind(kind.as_str())
            .opt_scalar(&mut tx, WHAT)
            .await?;
            if charged.is_none() {
                fresh.push(blob);
            }
        }
        let new_bytes: u64 = fresh.iter().map(|blob| blob.size_bytes).sum();
        if new_bytes > 0
            && quota_bytes.is_some_and(|quota| used_bytes.saturating_add(new_bytes) > quota)
        {
            return Ok(MediaCharge::OverQuota {
                used_bytes,
                new_bytes,
            });
        }
        for blob in fresh {
            query(
                "INSERT INTO media_charges (owner, media_id, kind, size_bytes, charged_at_ms) \
                 VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, media_id, kind) DO NOTHING",
            )
            .text(owner)
            .text(&blob.media_id)
            .bind(kind.as_str())
            .bind(i64::try_from(blob.size_bytes).unwrap_or(i64::MAX))
            .bind(now_ms)
            .execute(&mut tx, WHAT)
            .await?;
        }
        tx.commit(WHAT).await?;
        Ok(MediaCharge::Charged {
            new_bytes,
            used_bytes: used_bytes.saturating_add(new_bytes),
        })
    }

    async fn media_charged_bytes(&self, owner: &str) -> Result<u64> {
        let used: i64 = charged_bytes(owner)
            .scalar(&self.db, "media charge")
            .await?;
        Ok(u64::try_from(used).unwrap_or(0))
    }

    async fn uncharge_media(
        &self,
        owner: &str,
        kind: MediaChargeKind,
        media_id: &str,
    ) -> Result<()> {
        uncharge(Some(owner), kind, media_id)
            .execute(&self.db, "media charge")
            .await?;
        Ok(())
    }

    async fn release_upload(
        &self,
        owner: Option<&str>,
        media_id: &str,
        now_ms: i64,
    ) -> Result<ReleasedUpload> {
        const WHAT: &str = "media release";
        let mut tx = self.begin(WHAT).await?;
        // No other release of this blob interleaves.
        lock_key(&mut tx, media_id, WHAT).await?;
        let upload = MediaChargeKind::Upload.as_str();
        let size: Option<i64> =
            query("SELECT max(size_bytes) FROM media_charges WHERE media_id = ? AND kind = ?")
                .text(media_id)
                .bind(upload)
                .scalar(&mut tx, WHAT)
                .await?;
        if let Some(owner) = owner {
            query("DELETE FROM media_grants WHERE media_id = ? AND grantee = ?")
                .text(media_id)
                .text(owner)
                .execute(&mut tx, WHAT)
                .await?;
        }
        let removed = uncharge(owner, MediaChargeKind::Upload, media_id)
            .execute(&mut tx, WHAT)
            .await?;
        let left: i64 = query("SELECT count(*) FROM media_charges WHERE media_id = ? AND kind = ?")
            .text(media_id)
            .bind(upload)
            .scalar(&mut tx, WHAT)
            .await?;
        let unpinned = removed > 0 && left == 0;
        if unpinned {
            query("DELETE FROM media_pins WHERE media_id = ?")
                .text(media_id)
                .execute(&mut tx, WHAT)
                .await?;
            query(
                "INSERT INTO checkpoint_blobs (media_id, size_bytes, registered_at_ms) \
                 VALUES (?, ?, ?) ON CONFLICT (media_id) DO NOTHING",
            )
            .text(media_id)
            .bind(size.unwrap_or(0))
            .bind(now_ms)
            .execute(&mut tx, WHAT)
            .await?;
        }
        tx.commit(WHAT).await?;
        Ok(ReleasedUpload {
            released: removed > 0,
            unpinned,
        })
    }

    async fn forget_checkpoint_blob(&self, media_id: &str) -> Result<()> {
        let mut tx = self.begin("checkpoint blob").await?;
        uncharge(None, MediaChargeKind::Session, media_id)
            .execute(&mut tx, "checkpoint blob")
            .await?;
        query("DELETE FROM checkpoint_blobs WHERE media_id = ?")
            .bind(media_id)
            .execute(&mut tx, "checkpoint blob")
            .await?;
        tx.commit("checkpoint blob").await
    }

    async fn pin_media(&self, media_id: &str, reason: &str, now_ms: i64) -> Result<()> {
        query(
            "INSERT INTO media_pins (media_id, reason, pinned_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (media_id) DO NOTHING",
        )
        .bind(media_id)
        .bind(reason)
        .bind(now_ms)
        .execute(&self.db, "media pin")
        .await?;
        Ok(())
    }

    async fn grant_media(&self, media_id: &str, grantee: &str, now_ms: i64) -> Result<()> {
        query(
            "INSERT INTO media_grants (media_id, grantee, granted_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (media_id, grantee) DO NOTHING",
        )
        .bind(media_id)
        .bind(grantee)
        .bind(now_ms)
        .execute(&self.db, "media grant")
        .await?;
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
        let found: Option<String> = query(
            "SELECT media_id FROM media_grants WHERE media_id = ? \
             AND (grantee = ? OR substr(grantee, 1, length(?)) = ?) LIMIT 1",
        )
        .bind(media_id)
        .bind(key_grantee)
        .bind(&sessions)
        .bind(sessions)
        .opt_scalar(&self.db, "media grant")
        .await?;
        Ok(found.is_some())
    }

    async fn bind_codex_thread(
        &self,
        session_key: &str,
        thread_id: &str,
        now_ms: i64,
    ) -> Result<()> {
        query(
            "INSERT INTO codex_threads (session_key, thread_id, bound_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (session_key) DO UPDATE SET thread_id = excluded.thread_id, \
             bound_at_ms = excluded.bound_at_ms",
        )
        .bind(session_key)
        .bind(thread_id)
        .bind(now_ms)
        .execute(&self.db, "session")
        .await?;
        Ok(())
    }

    async fn codex_thread(&self, session_key: &str) -> Result<Option<String>> {
        query("SELECT thread_id FROM codex_threads WHERE session_key = ?")
            .bind(session_key)
            .opt_scalar(&self.db, "codex thread")
            .await
    }

    async fn session_node(&self, session_key: &str) -> Result<Option<String>> {
        let node: Option<Option<String>> =
            query("SELECT node_id FROM sessions WHERE session_key = ?")
                .bind(session_key)
                .opt_scalar(&self.db, "session")
                .await?;
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
        query(
            "UPDATE sessions SET node_id = ?, node_bound_at_ms = ? \
             WHERE session_key = ? AND node_id IS NULL",
        )
        .bind(node_id)
        .bind(now_ms)
        .bind(session_key)
        .execute(&mut tx, "session node")
        .await?;
        let bound: Option<Option<String>> =
            query("SELECT node_id FROM sessions WHERE session_key = ?")
                .bind(session_key)
                .opt_scalar(&mut tx, "session node")
                .await?;
        let Some(Some(bound)) = bound else {
            return Err(StoreError::NotFound { what: "session" });
        };
        tx.commit("session node").await?;
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
        let updated = query(
            "UPDATE sessions SET node_id = ?, node_bound_at_ms = ? \
             WHERE session_key = ? AND node_id = ? AND NOT EXISTS (SELECT 1 FROM turns \
             WHERE turns.session_key = ? AND turns.status = 'running')",
        )
        .bind(to)
        .bind(now_ms)
        .bind(session_key)
        .bind(from)
        .bind(session_key)
        .execute(&mut tx, "session node")
        .await?;
        tx.commit("session node").await?;
        Ok(updated == 1)
    }

    async fn move_session_node(
        &self,
        session_key: &str,
        to: Option<&str>,
        now_ms: i64,
    ) -> Result<SessionMove> {
        let mut tx = self.begin("session node").await?;
        let current: Option<Option<String>> =
            query("SELECT node_id FROM sessions WHERE session_key = ? FOR UPDATE")
                .bind(session_key)
                .opt_scalar(&mut tx, "session node")
                .await?;
        let Some(from) = current else {
            return Ok(SessionMove::NotFound);
        };
        let running: Option<String> =
            query("SELECT turn_id FROM turns WHERE session_key = ? AND status = 'running' LIMIT 1")
                .bind(session_key)
                .opt_scalar(&mut tx, "turn")
                .await?;
        if let Some(turn_id) = running {
            return Ok(SessionMove::Busy { turn_id });
        }
        if from.as_deref() == to {
            return Ok(SessionMove::Unchanged);
        }
        query("UPDATE sessions SET node_id = ?, node_bound_at_ms = ? WHERE session_key = ?")
            .bind(to)
            .bind(to.map(|_| now_ms))
            .bind(session_key)
            .execute(&mut tx, "session node")
            .await?;
        tx.commit("session node").await?;
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
        let created: Option<String> = query(
            "INSERT INTO sessions (session_key, runtime, created_at_ms, updated_at_ms, \
             workspace_json) VALUES (?, ?, ?, ?, ?::jsonb) \
             ON CONFLICT (session_key) DO NOTHING RETURNING session_key",
        )
        .bind(session_key)
        .bind(runtime)
        .bind(now_ms)
        .bind(now_ms)
        .bind(&source_json)
        .opt_scalar(&mut tx, "session")
        .await?;
        let outcome = match created {
            Some(_) => WorkspaceSet::Created,
            None => {
                // The row lock keeps an admission from adding the first message meanwhile.
                let row = query(
                    "SELECT workspace_json::text AS workspace_json, workspace_commit, \
                     next_message_seq FROM sessions WHERE session_key = ? FOR UPDATE",
                )
                .bind(session_key)
                .one(&mut tx, "session")
                .await?;
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
                query(
                    "UPDATE sessions SET workspace_json = ?::jsonb, workspace_commit = NULL, \
                     worktree_base_json = NULL, updated_at_ms = ? WHERE session_key = ?",
                )
                .bind(&source_json)
                .bind(now_ms)
                .bind(session_key)
                .execute(&mut tx, "session")
                .await?;
                query("DELETE FROM worktree_versions WHERE session_key = ?")
                    .bind(session_key)
                    .execute(&mut tx, "worktree")
                    .await?;
                WorkspaceSet::Replaced
            }
        };
        if matches!(source, WorkspaceSource::Worktree { from: None }) {
            query(
                "INSERT INTO worktree_versions (session_key, version, origin, turn_id, actor, \
                 manifest_json, created_at_ms) VALUES (?, 1, ?, NULL, 'gateway', ?::jsonb, ?)",
            )
            .bind(session_key)
            .bind(WorktreeOrigin::Start.as_str())
            .bind(manifest_json(&StoredManifest::default())?)
            .bind(now_ms)
            .execute(&mut tx, "worktree")
            .await?;
        }
        tx.commit("session").await?;
        Ok(outcome)
    }

    async fn session_workspace(&self, session_key: &str) -> Result<Option<SessionWorkspace>> {
        let row = query(
            "SELECT workspace_json::text AS workspace_json, workspace_commit FROM sessions \
             WHERE session_key = ?",
        )
        .bind(session_key)
        .optional(&self.db, "session")
        .await?;
        row.map(|row| {
            stored_workspace(
                get::<Option<String>>(&row, "workspace_json")?.as_deref(),
                get(&row, "workspace_commit")?,
            )
        })
        .transpose()
    }

    async fn pin_session_commit(&self, session_key: &str, commit: &str) -> Result<String> {
        let pinned: Option<Option<String>> = query(
            "UPDATE sessions SET workspace_commit = coalesce(workspace_commit, ?) \
             WHERE session_key = ? RETURNING workspace_commit",
        )
        .bind(commit)
        .bind(session_key)
        .opt_scalar(&self.db, "session")
        .await?;
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
        query(format!(
            "{WORKTREE_VERSION_COLUMNS} WHERE session_key = ? \
             AND (?::bigint IS NULL OR version = ?) ORDER BY version DESC LIMIT 1"
        ))
        .bind(session_key)
        .bind(version)
        .bind(version)
        .optional(&self.db, "worktree")
        .await?
        .as_ref()
        .map(worktree_version_from_row)
        .transpose()
    }

    async fn save_worktree_version(
        &self,
        version: &NewWorktreeVersion,
        now_ms: i64,
    ) -> Result<bool> {
        // Two writers that read the same head both insert head + 1: the primary key lets one.
        let inserted = query(
            "INSERT INTO worktree_versions (session_key, version, origin, turn_id, actor, \
             manifest_json, created_at_ms) \
             SELECT ?, ? + 1, ?, NULL, ?, ?::jsonb, ? \
             WHERE (SELECT coalesce(max(version), 0) FROM worktree_versions \
                    WHERE session_key = ?) = ? \
             ON CONFLICT (session_key, version) DO NOTHING",
        )
        .bind(&version.session_key)
        .bind(version.expected_head)
        .bind(version.origin.as_str())
        .bind(&version.actor)
        .bind(manifest_json(&version.manifest)?)
        .bind(now_ms)
        .bind(&version.session_key)
        .bind(version.expected_head)
        .execute(&self.db, "worktree")
        .await?;
        Ok(inserted == 1)
    }

    async fn worktree_base(&self, session_key: &str) -> Result<Option<StoredManifest>> {
        let base: Option<Option<String>> =
            query("SELECT worktree_base_json::text FROM sessions WHERE session_key = ?")
                .bind(session_key)
                .opt_scalar(&self.db, "worktree")
                .await?;
        base.flatten().as_deref().map(parse_manifest).transpose()
    }

    async fn set_worktree_base(&self, session_key: &str, base: &StoredManifest) -> Result<()> {
        query("UPDATE sessions SET worktree_base_json = ?::jsonb WHERE session_key = ?")
            .bind(manifest_json(base)?)
            .bind(session_key)
            .execute(&self.db, "worktree")
            .await?;
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
        query(
            "INSERT INTO worktree_results (turn_id, session_key, staged_ref, manifest_json, \
             state, staged_at_ms) VALUES (?, ?, ?, ?::jsonb, 'staged', ?) \
             ON CONFLICT (turn_id) DO NOTHING",
        )
        .bind(turn_id)
        .bind(session_key)
        .bind(staged_ref)
        .bind(manifest_json(manifest)?)
        .bind(now_ms)
        .execute(&mut tx, "worktree result")
        .await?;
        tx.commit("worktree result").await?;
        Ok(true)
    }

    async fn staged_worktree_results(
        &self,
        session_key: Option<&str>,
    ) -> Result<Vec<WorktreeResult>> {
        // Results staged in one millisecond: SQLite keeps their insertion order, PostgreSQL
        // orders them by turn.
        let tie = B::DIALECT.pick("rowid", "turn_id COLLATE \"C\"");
        query(format!(
            "{WORKTREE_RESULT_COLUMNS} WHERE state = 'staged' \
             AND (?::text IS NULL OR session_key = ?) ORDER BY staged_at_ms, {tie}"
        ))
        .bind(session_key)
        .bind(session_key)
        .all(&self.db, "worktree result")
        .await?
        .iter()
        .map(worktree_result_from_row)
        .collect()
    }

    async fn worktree_result(&self, turn_id: &str) -> Result<Option<WorktreeResult>> {
        query(format!("{WORKTREE_RESULT_COLUMNS} WHERE turn_id = ?"))
            .bind(turn_id)
            .optional(&self.db, "worktree result")
            .await?
            .as_ref()
            .map(worktree_result_from_row)
            .transpose()
    }

    async fn prune_worktree_versions(&self, session_key: &str, keep: i64) -> Result<u64> {
        let mut tx = self.begin("worktree").await?;
        let head = worktree_head(&mut tx, session_key).await?;
        let below = head - keep;
        query(
            "DELETE FROM worktree_results WHERE session_key = ? AND state = 'applied' \
             AND version > 1 AND version <= ?",
        )
        .bind(session_key)
        .bind(below)
        .execute(&mut tx, "worktree result")
        .await?;
        let pruned = query(
            "DELETE FROM worktree_versions WHERE session_key = ? AND version > 1 \
             AND version <= ?",
        )
        .bind(session_key)
        .bind(below)
        .execute(&mut tx, "worktree")
        .await?;
        tx.commit("worktree").await?;
        Ok(pruned)
    }

    async fn apply_worktree_result(&self, apply: &ResultApply, now_ms: i64) -> Result<bool> {
        let mut tx = self.begin("worktree").await?;
        // Locking the result row serializes two applies of one result.
        let staged: Option<String> = query(
            "SELECT manifest_json::text FROM worktree_results \
             WHERE turn_id = ? AND state = 'staged' FOR UPDATE",
        )
        .bind(&apply.turn_id)
        .opt_scalar(&mut tx, "worktree result")
        .await?;
        let Some(staged) = staged else {
            return Ok(false);
        };
        let inserted = query(
            "INSERT INTO worktree_versions (session_key, version, origin, turn_id, actor, \
             manifest_json, created_at_ms) \
             SELECT ?, ? + 1, ?, ?, 'gateway', ?::jsonb, ? \
             WHERE (SELECT coalesce(max(version), 0) FROM worktree_versions \
                    WHERE session_key = ?) = ? \
             ON CONFLICT (session_key, version) DO NOTHING",
        )
        .bind(&apply.session_key)
        .bind(apply.expected_head)
        .bind(WorktreeOrigin::Turn.as_str())
        .bind(&apply.turn_id)
        .bind(manifest_json(&apply.merged)?)
        .bind(now_ms)
        .bind(&apply.session_key)
        .bind(apply.expected_head)
        .execute(&mut tx, "worktree")
        .await?;
        if inserted != 1 {
            return Ok(false);
        }
        query("UPDATE sessions SET worktree_base_json = ?::jsonb WHERE session_key = ?")
            .bind(staged)
            .bind(&apply.session_key)
            .execute(&mut tx, "worktree")
            .await?;
        query(
            "UPDATE worktree_results SET state = 'applied', applied_json = ?::jsonb, \
             conflicts_json = ?::jsonb, version = ?, applied_at_ms = ? WHERE turn_id = ?",
        )
        .bind(paths_json(&apply.applied)?)
        .bind(paths_json(&apply.conflicts)?)
        .bind(apply.expected_head + 1)
        .bind(now_ms)
        .bind(&apply.turn_id)
        .execute(&mut tx, "worktree result")
        .await?;
        tx.commit("worktree").await?;
        Ok(true)
    }
}

impl<B: Backend> SqlStore<B> {
    /// The turn of `session_key` admitted under idempotency key `key`, if any.
    async fn turn_by_idempotency_key(
        &self,
        tx: &mut Tx<B>,
        session_key: &str,
        key: &str,
    ) -> Result<Option<TurnRecord>> {
        query(format!(
            "{TURN_COLUMNS} WHERE session_key = ? AND idempotency_key = ?"
        ))
        .bind(session_key)
        .bind(key)
        .optional(tx, "turn")
        .await?
        .as_ref()
        .map(turn_from_row)
        .transpose()
    }
}

/// The column that orders checkpoints saved in one millisecond: SQLite's `rowid`, PostgreSQL's
/// `saved_order` identity.
fn saved_order<B: Backend>() -> &'static str {
    B::DIALECT.pick("rowid", "saved_order")
}

/// The oldest queued turn of `session_key`.
pub(super) async fn next_queued<B: Backend>(
    tx: &mut Tx<B>,
    session_key: &str,
) -> Result<Option<TurnRecord>> {
    query(format!(
        "{TURN_COLUMNS} WHERE session_key = ? AND status = 'queued' ORDER BY turn_no LIMIT 1"
    ))
    .bind(session_key)
    .optional(tx, "turn")
    .await?
    .as_ref()
    .map(turn_from_row)
    .transpose()
}

/// The newest worktree version of `session_key` (0 when it has none).
async fn worktree_head<B: Backend>(tx: &mut Tx<B>, session_key: &str) -> Result<i64> {
    query("SELECT coalesce(max(version), 0) FROM worktree_versions WHERE session_key = ?")
        .bind(session_key)
        .scalar(tx, "worktree")
        .await
}

/// Takes the transaction-level advisory lock of `key` (its 64-bit text hash) on PostgreSQL, so
/// transactions that lock the same key (the charges of one owner, the releases of one blob) run
/// one at a time on every replica. On SQLite the write transaction already runs alone.
pub(super) async fn lock_key<B: Backend>(
    tx: &mut Tx<B>,
    key: &str,
    what: &'static str,
) -> Result<()> {
    if B::DIALECT == Dialect::Postgres {
        query("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))")
            .text(key)
            .execute(tx, what)
            .await?;
    }
    Ok(())
}

/// The bytes charged to `owner`, every kind.
fn charged_bytes(owner: &str) -> Query {
    query("SELECT CAST(coalesce(sum(size_bytes), 0) AS BIGINT) FROM media_charges WHERE owner = ?")
        .text(owner)
}

/// Removes `owner`'s charge of `kind` for `media_id`, or, for `owner` `None`, every charge of
/// `kind` for it; it changes as many rows as charges went.
fn uncharge(owner: Option<&str>, kind: MediaChargeKind, media_id: &str) -> Query {
    let delete = match owner {
        Some(owner) => {
            query("DELETE FROM media_charges WHERE owner = ? AND media_id = ? AND kind = ?")
                .text(owner)
        }
        None => query("DELETE FROM media_charges WHERE media_id = ? AND kind = ?"),
    };
    delete.text(media_id).bind(kind.as_str())
}

/// Locks the session's row for the rest of the transaction; false when there is no session.
pub(super) async fn lock_session<B: Backend>(tx: &mut Tx<B>, session_key: &str) -> Result<bool> {
    let found: Option<String> =
        query("SELECT session_key FROM sessions WHERE session_key = ? FOR UPDATE")
            .bind(session_key)
            .opt_scalar(tx, "session")
            .await?;
    Ok(found.is_some())
}

/// Returns the condition that the lease of a replica and epoch (the statement's next two
/// parameters) is live: its replica's newest lease, unexpired by the store's clock. A write of
/// a turn puts it in the statement that locks or changes the turn's row, so the lease is judged
/// at the moment the row is taken.
fn fence_holds() -> String {
    format!(
        "EXISTS (SELECT 1 FROM replicas r WHERE r.replica_id = ? AND r.epoch = ? \
         AND r.expires_at_ms > {NOW_MS})"
    )
}

/// Locks the row of `turn_id` while it runs under `fence` and `fence` is live, and returns its
/// session; `None` (nothing locked) otherwise. Interrupting an orphaned turn takes the same row
/// first, so a write either commits before the takeover or finds the turn ended.
async fn lock_fenced_turn<B: Backend>(
    tx: &mut Tx<B>,
    fence: &Fence,
    turn_id: &str,
) -> Result<Option<String>> {
    query(format!(
        "SELECT session_key FROM turns WHERE turn_id = ? AND status = 'running' \
         AND claim_replica = ? AND claim_epoch = ? AND {} FOR UPDATE",
        fence_holds()
    ))
    .bind(turn_id)
    .bind(&fence.replica_id)
    .bind(fence.epoch)
    .bind(&fence.replica_id)
    .bind(fence.epoch)
    .opt_scalar(tx, "turn")
    .await
}

/// Appends a transcript message, taking the next seq from the session's row (which locks it).
async fn insert_message<B: Backend>(
    tx: &mut Tx<B>,
    session_key: &str,
    turn_id: &str,
    role: &str,
    content: &str,
    tool_name: Option<&str>,
    now_ms: i64,
) -> Result<i64> {
    let seq: i64 = query(
        "UPDATE sessions SET next_message_seq = next_message_seq + 1, updated_at_ms = ? \
         WHERE session_key = ? RETURNING next_message_seq - 1",
    )
    .bind(now_ms)
    .bind(session_key)
    .scalar(&mut *tx, "session")
    .await?;
    query(
        "INSERT INTO messages (session_key, seq, turn_id, role, content, tool_name, \
         created_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
    )
    .bind(session_key)
    .bind(seq)
    .bind(turn_id)
    .bind(role)
    .text(content)
    .opt_text(tool_name)
    .bind(now_ms)
    .execute(tx, "message")
    .await?;
    Ok(seq)
}

/// Appends a session event, taking the next seq from the session's row (which locks it).
pub(super) async fn insert_event<B: Backend>(
    tx: &mut Tx<B>,
    session_key: &str,
    kind: &str,
    payload: &serde_json::Value,
    now_ms: i64,
) -> Result<i64> {
    let seq: i64 = query(
        "UPDATE sessions SET next_event_seq = next_event_seq + 1 WHERE session_key = ? \
         RETURNING next_event_seq - 1",
    )
    .bind(session_key)
    .scalar(&mut *tx, "session")
    .await?;
    query(
        "INSERT INTO session_events (session_key, seq, kind, payload_json, created_at_ms) \
         VALUES (?, ?, ?, ?::jsonb, ?)",
    )
    .bind(session_key)
    .bind(seq)
    .bind(kind)
    .json(payload.to_string())
    .bind(now_ms)
    .execute(tx, "event")
    .await?;
    Ok(seq)
}

/// The JSON of a node's commands.
fn commands_json(commands: &[String]) -> String {
    serde_json::Value::from(commands.to_vec()).to_string()
}

/// Reads a turn ([`TURN_COLUMNS`]).
pub(super) fn turn_from_row(row: &impl SqlRow) -> Result<TurnRecord> {
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
        attachments: get_json(row, "attachments_json", "attachments")?,
        reply: get(row, "reply")?,
        error_code: get(row, "error_code")?,
        error_message: get(row, "error_message")?,
        created_at_ms: get(row, "created_at_ms")?,
        started_at_ms: get(row, "started_at_ms")?,
        ended_at_ms: get(row, "ended_at_ms")?,
        usage: usage_from_columns(UsageColumns {
            counts: [
                get(row, "input_tokens")?,
                get(row, "cached_input_tokens")?,
                get(row, "output_tokens")?,
                get(row, "total_tokens")?,
                get(row, "model_calls")?,
                get(row, "retries")?,
            ],
            model: get(row, "model")?,
        })?,
    })
}

/// Reads a transcript message ([`MESSAGE_COLUMNS`]).
fn message_from_row(row: &impl SqlRow) -> Result<MessageRecord> {
    Ok(MessageRecord {
        seq: get(row, "seq")?,
        turn_id: get(row, "turn_id")?,
        role: get(row, "role")?,
        content: get(row, "content")?,
        tool_name: get(row, "tool_name")?,
        created_at_ms: get(row, "created_at_ms")?,
    })
}

/// Reads a checkpoint's id and manifest.
fn checkpoint_from_row(row: &impl SqlRow) -> Result<(String, CheckpointManifest)> {
    Ok((
        get(row, "checkpoint_id")?,
        CheckpointManifest::parse(&get::<String>(row, "manifest_json")?)?,
    ))
}

/// Reads an API key ([`API_KEY_COLUMNS`]).
fn api_key_from_row(row: &impl SqlRow) -> Result<ApiKeyRecord> {
    let scopes: String = get(row, "scopes_json")?;
    Ok(ApiKeyRecord {
        name: get(row, "name")?,
        secret_sha256: get(row, "secret_sha256")?,
        scopes: crate::records::parse_scopes(&scopes)?,
        session_prefix: get(row, "session_prefix")?,
        created_at_ms: get(row, "created_at_ms")?,
        expires_at_ms: get(row, "expires_at_ms")?,
        last_used_at_ms: get(row, "last_used_at_ms")?,
        requests_per_minute: crate::records::stored_limit(get(row, "requests_per_minute")?)?,
        concurrent_turns: crate::records::stored_limit(get(row, "concurrent_turns")?)?,
        max_streams: crate::records::stored_limit(get(row, "max_streams")?)?,
        media_quota_bytes: crate::records::stored_bytes_limit(get(row, "media_quota_bytes")?)?,
        tokens_per_day: crate::records::stored_bytes_limit(get(row, "tokens_per_day")?)?,
    })
}

/// Reads a node ([`NODE_COLUMNS`]).
fn node_from_row(row: &impl SqlRow) -> Result<NodeRecord> {
    Ok(NodeRecord {
        device_id: get(row, "device_id")?,
        public_key: get(row, "public_key")?,
        display_name: get(row, "display_name")?,
        runtime: get(row, "runtime")?,
        commands: get_json(row, "commands_json", "node commands")?,
        workspace_root: get(row, "workspace_root")?,
        device_token_sha256: get(row, "device_token_sha256")?,
        enrolled_at_ms: get(row, "enrolled_at_ms")?,
        last_seen_at_ms: get(row, "last_seen_at_ms")?,
    })
}

/// Reads an audit event.
fn audit_event_from_row(row: &impl SqlRow) -> Result<AuditEvent> {
    Ok(AuditEvent {
        seq: get(row, "seq")?,
        at_ms: get(row, "at_ms")?,
        actor: get(row, "actor")?,
        action: get(row, "action")?,
        outcome: get(row, "outcome")?,
        reason_code: get(row, "reason_code")?,
        details: get_json(row, "details_json", "audit details")?,
    })
}

/// Reads a worktree version ([`WORKTREE_VERSION_COLUMNS`]).
fn worktree_version_from_row(row: &impl SqlRow) -> Result<WorktreeVersion> {
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

/// Reads a worktree result ([`WORKTREE_RESULT_COLUMNS`]).
fn worktree_result_from_row(row: &impl SqlRow) -> Result<WorktreeResult> {
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
