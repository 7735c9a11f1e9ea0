//! [`ChannelStore`] for [`SqlStore`], and the outbox writes the turn statements make.

use async_trait::async_trait;

use super::Backend;
use super::NOW_MS;
use super::SqlRow;
use super::SqlStore;
use super::Tx;
use super::body::lock_key;
use super::get;
use super::query;
use crate::channels::ChannelStore;
use crate::error::Result;
use crate::error::StoreError;
use crate::records::ChannelFigures;
use crate::records::ChannelOrigin;
use crate::records::DeliveryEnd;
use crate::records::InboundOutcome;
use crate::records::NewDelivery;
use crate::records::OutboxEntry;
use crate::records::PairingOutcome;
use crate::records::PairingRecord;
use crate::records::PairingRequest;
use crate::records::TurnArtifact;

/// The longest reply artifact path kept in `turn_artifacts`.
const MAX_ARTIFACT_PATH_BYTES: usize = 1024;

/// The columns of an [`OutboxEntry`].
const OUTBOX_COLUMNS: &str = "delivery_id, channel, turn_id, in_reply_to, conversation, \
     recipient, thread, text, attempts, claims, created_at_ms";

/// Records `origin`'s message with `outcome` unless it was recorded before; returns whether it
/// was new.
pub(super) async fn insert_inbound<B: Backend>(
    tx: &mut Tx<B>,
    origin: &ChannelOrigin,
    outcome: &str,
    now_ms: i64,
) -> Result<bool> {
    let inserted = query(
        "INSERT INTO channel_inbound (channel, message_id, outcome, turn_id, received_at_ms) \
         VALUES (?, ?, ?, NULL, ?) ON CONFLICT (channel, message_id) DO NOTHING",
    )
    .bind(&origin.channel)
    .text(&origin.message_id)
    .bind(outcome)
    .bind(now_ms)
    .execute(tx, "channel message")
    .await?;
    Ok(inserted == 1)
}

/// Where the reply of `turn_id` goes: `origin`, the latest message the turn took.
pub(super) async fn record_channel_turn<B: Backend>(
    tx: &mut Tx<B>,
    turn_id: &str,
    origin: &ChannelOrigin,
) -> Result<()> {
    query("UPDATE channel_inbound SET turn_id = ? WHERE channel = ? AND message_id = ?")
        .bind(turn_id)
        .bind(&origin.channel)
        .text(&origin.message_id)
        .execute(&mut *tx, "channel message")
        .await?;
    query(
        "INSERT INTO channel_turns (turn_id, channel, message_id, conversation, sender, thread) \
         VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (turn_id) DO UPDATE SET \
         channel = excluded.channel, message_id = excluded.message_id, \
         conversation = excluded.conversation, sender = excluded.sender, \
         thread = excluded.thread",
    )
    .bind(turn_id)
    .bind(&origin.channel)
    .text(&origin.message_id)
    .text(&origin.conversation)
    .text(&origin.sender)
    .opt_text(origin.thread.as_deref())
    .execute(tx, "channel turn")
    .await?;
    Ok(())
}

/// Records, once, the channel `session_key` belongs to and its platform ids.
pub(super) async fn record_channel_session<B: Backend>(
    tx: &mut Tx<B>,
    session_key: &str,
    origin: &ChannelOrigin,
) -> Result<()> {
    let peer = match origin.room {
        Some(_) => None,
        None => Some(origin.sender.as_str()),
    };
    query(
        "INSERT INTO channel_sessions (session_key, channel, peer, room) VALUES (?, ?, ?, ?) \
         ON CONFLICT (session_key) DO NOTHING",
    )
    .bind(session_key)
    .bind(&origin.channel)
    .opt_text(peer)
    .opt_text(origin.room.as_deref())
    .execute(tx, "channel session")
    .await?;
    Ok(())
}

/// Queues the reply of `turn_id` when the turn came from a channel (nothing otherwise). Its
/// text is read from the turn when it is sent; its id is `reply-<turn id>`, so a turn's reply
/// is queued once.
pub(super) async fn queue_turn_reply<B: Backend>(
    tx: &mut Tx<B>,
    turn_id: &str,
    now_ms: i64,
) -> Result<()> {
    query(
        "INSERT INTO channel_outbox (delivery_id, channel, turn_id, in_reply_to, conversation, \
         recipient, thread, text, state, attempts, next_attempt_at_ms, created_at_ms) \
         SELECT 'reply-' || turn_id, channel, turn_id, message_id, conversation, sender, thread, \
         NULL, 'pending', 0, ?, ? FROM channel_turns WHERE turn_id = ? \
         ON CONFLICT (delivery_id) DO NOTHING",
    )
    .bind(now_ms)
    .bind(now_ms)
    .bind(turn_id)
    .execute(tx, "channel delivery")
    .await?;
    Ok(())
}

/// Where a message with its own text goes.
struct Reach<'a> {
    channel: &'a str,
    in_reply_to: Option<&'a str>,
    conversation: &'a str,
    recipient: &'a str,
    thread: Option<&'a str>,
}

impl<'a> Reach<'a> {
    /// The answer to `origin`'s message: to its sender, in its conversation and thread.
    fn answering(origin: &'a ChannelOrigin) -> Self {
        Self {
            channel: &origin.channel,
            in_reply_to: Some(&origin.message_id),
            conversation: &origin.conversation,
            recipient: &origin.sender,
            thread: origin.thread.as_deref(),
        }
    }
}

/// Queues `delivery` to where `reach` says.
async fn queue_delivery<B: Backend>(
    tx: &mut Tx<B>,
    reach: &Reach<'_>,
    delivery: &NewDelivery,
    now_ms: i64,
) -> Result<()> {
    query(
        "INSERT INTO channel_outbox (delivery_id, channel, turn_id, in_reply_to, conversation, \
         recipient, thread, text, state, attempts, next_attempt_at_ms, created_at_ms) \
         VALUES (?, ?, NULL, ?, ?, ?, ?, ?, 'pending', 0, ?, ?)",
    )
    .bind(&delivery.delivery_id)
    .bind(reach.channel)
    .opt_text(reach.in_reply_to)
    .text(reach.conversation)
    .text(reach.recipient)
    .opt_text(reach.thread)
    .text(&delivery.text)
    .bind(now_ms)
    .bind(now_ms)
    .execute(tx, "channel delivery")
    .await?;
    Ok(())
}

#[async_trait]
impl<B: Backend> ChannelStore for SqlStore<B> {
    async fn record_channel_inbound(
        &self,
        origin: &ChannelOrigin,
        outcome: InboundOutcome,
        now_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.begin("channel message").await?;
        let new = insert_inbound(&mut tx, origin, outcome.as_str(), now_ms).await?;
        tx.commit("channel message").await?;
        Ok(new)
    }

    async fn channel_sender_approved(&self, channel: &str, sender: &str) -> Result<bool> {
        let found: Option<i64> =
            query("SELECT approved_at_ms FROM channel_senders WHERE channel = ? AND sender = ?")
                .bind(channel)
                .text(sender)
                .opt_scalar(&self.db, "channel sender")
                .await?;
        Ok(found.is_some())
    }

    async fn request_channel_pairing(&self, request: &PairingRequest) -> Result<PairingOutcome> {
        let origin = &request.origin;
        let mut tx = self.begin("channel pairing").await?;
        // One pairing decision per channel at a time, so the count of pending ones holds.
        lock_key(
            &mut tx,
            &format!("channel-pairing:{}", origin.channel),
            "channel pairing",
        )
        .await?;
        if !insert_inbound(
            &mut tx,
            origin,
            InboundOutcome::Pairing.as_str(),
            request.now_ms,
        )
        .await?
        {
            return Ok(PairingOutcome::Duplicate);
        }
        query("DELETE FROM channel_pairings WHERE channel = ? AND expires_at_ms <= ?")
            .bind(&origin.channel)
            .bind(request.now_ms)
            .execute(&mut tx, "channel pairing")
            .await?;
        let pending: Option<String> =
            query("SELECT code FROM channel_pairings WHERE channel = ? AND sender = ?")
                .bind(&origin.channel)
                .text(&origin.sender)
                .opt_scalar(&mut tx, "channel pairing")
                .await?;
        let count: i64 = query("SELECT COUNT(*) FROM channel_pairings WHERE channel = ?")
            .bind(&origin.channel)
            .scalar(&mut tx, "channel pairing")
            .await?;
        let outcome = if pending.is_some() {
            PairingOutcome::Pending
        } else if count >= i64::from(request.max_pending) {
            PairingOutcome::Full
        } else {
            query(
                "INSERT INTO channel_pairings (channel, code, sender, conversation, \
                 created_at_ms, expires_at_ms) VALUES (?, ?, ?, ?, ?, ?)",
            )
            .bind(&origin.channel)
            .bind(&request.code)
            .text(&origin.sender)
            .text(&origin.conversation)
            .bind(request.now_ms)
            .bind(request.expires_at_ms)
            .execute(&mut tx, "channel pairing")
            .await?;
            queue_delivery(
                &mut tx,
                &Reach::answering(origin),
                &request.reply,
                request.now_ms,
            )
            .await?;
            PairingOutcome::Created
        };
        tx.commit("channel pairing").await?;
        Ok(outcome)
    }

    async fn channel_pairings(&self, channel: &str, now_ms: i64) -> Result<Vec<PairingRecord>> {
        query(
            "SELECT code, sender, conversation, expires_at_ms FROM channel_pairings \
             WHERE channel = ? AND expires_at_ms > ? ORDER BY created_at_ms, code",
        )
        .bind(channel)
        .bind(now_ms)
        .all(&self.db, "channel pairing")
        .await?
        .iter()
        .map(|row| {
            Ok(PairingRecord {
                code: get(row, "code")?,
                sender: get(row, "sender")?,
                conversation: get(row, "conversation")?,
                expires_at_ms: get(row, "expires_at_ms")?,
            })
        })
        .collect()
    }

    async fn approve_channel_pairing(
        &self,
        channel: &str,
        code: &str,
        notice: &NewDelivery,
        now_ms: i64,
    ) -> Result<Option<String>> {
        let mut tx = self.begin("channel pairing").await?;
        let Some(row) = query(
            "DELETE FROM channel_pairings WHERE channel = ? AND code = ? AND expires_at_ms > ? \
             RETURNING sender, conversation",
        )
        .bind(channel)
        .bind(code)
        .bind(now_ms)
        .optional(&mut tx, "channel pairing")
        .await?
        else {
            return Ok(None);
        };
        let sender: String = get(&row, "sender")?;
        let conversation: String = get(&row, "conversation")?;
        query(
            "INSERT INTO channel_senders (channel, sender, approved_at_ms) VALUES (?, ?, ?) \
             ON CONFLICT (channel, sender) DO NOTHING",
        )
        .bind(channel)
        .text(&sender)
        .bind(now_ms)
        .execute(&mut tx, "channel sender")
        .await?;
        let reach = Reach {
            channel,
            in_reply_to: None,
            conversation: &conversation,
            recipient: &sender,
            thread: None,
        };
        queue_delivery(&mut tx, &reach, notice, now_ms).await?;
        tx.commit("channel pairing").await?;
        Ok(Some(sender))
    }

    async fn deny_channel_pairing(
        &self,
        channel: &str,
        code: &str,
        now_ms: i64,
    ) -> Result<Option<String>> {
        query(
            "DELETE FROM channel_pairings WHERE channel = ? AND code = ? AND expires_at_ms > ? \
             RETURNING sender",
        )
        .bind(channel)
        .bind(code)
        .bind(now_ms)
        .opt_scalar(&self.db, "channel pairing")
        .await
    }

    async fn claim_channel_delivery(
        &self,
        channels: &[String],
        claimant: &str,
        claim_ms: i64,
        now_ms: i64,
    ) -> Result<Option<OutboxEntry>> {
        if channels.is_empty() {
            return Ok(None);
        }
        let names = vec!["?"; channels.len()].join(", ");
        let mut claim = query(format!(
            "UPDATE channel_outbox SET claimed_by = ?, claimed_until_ms = ?, claims = claims + 1 \
             WHERE delivery_id = (SELECT delivery_id FROM channel_outbox \
             WHERE channel IN ({names}) AND state = 'pending' AND next_attempt_at_ms <= ? \
             AND (claimed_until_ms IS NULL OR claimed_until_ms <= ? OR claimed_by = ?) \
             ORDER BY next_attempt_at_ms, created_at_ms, delivery_id LIMIT 1 \
             FOR UPDATE SKIP LOCKED) \
             AND (claimed_until_ms IS NULL OR claimed_until_ms <= ? OR claimed_by = ?) \
             RETURNING {OUTBOX_COLUMNS}"
        ))
        .bind(claimant)
        .bind(now_ms.saturating_add(claim_ms));
        for channel in channels {
            claim = claim.bind(channel.as_str());
        }
        claim
            .bind(now_ms)
            .bind(now_ms)
            .bind(claimant)
            .bind(now_ms)
            .bind(claimant)
            .optional(&self.db, "channel delivery")
            .await?
            .as_ref()
            .map(outbox_entry_from_row)
            .transpose()
    }

    async fn end_channel_delivery(
        &self,
        delivery_id: &str,
        claimant: &str,
        end: &DeliveryEnd,
        now_ms: i64,
    ) -> Result<bool> {
        let (state, next_attempt_at_ms, error, ended_at_ms) = match end {
            DeliveryEnd::Delivered => ("delivered", None, None, Some(now_ms)),
            DeliveryEnd::Retry {
                next_attempt_at_ms,
                error,
            } => (
                "pending",
                Some(*next_attempt_at_ms),
                Some(error.as_str()),
                None,
            ),
            DeliveryEnd::Failed { error } => ("failed", None, Some(error.as_str()), Some(now_ms)),
        };
        let changed = query(
            "UPDATE channel_outbox SET state = ?, attempts = attempts + 1, \
             next_attempt_at_ms = COALESCE(?, next_attempt_at_ms), \
             last_error = COALESCE(?, last_error), ended_at_ms = ?, \
             claimed_by = NULL, claimed_until_ms = NULL \
             WHERE delivery_id = ? AND claimed_by = ? AND state = 'pending'",
        )
        .bind(state)
        .bind(next_attempt_at_ms)
        .opt_text(error)
        .bind(ended_at_ms)
        .bind(delivery_id)
        .bind(claimant)
        .execute(&self.db, "channel delivery")
        .await?;
        Ok(changed == 1)
    }

    async fn answer_channel_inbound(
        &self,
        origin: &ChannelOrigin,
        outcome: InboundOutcome,
        notice: &NewDelivery,
        now_ms: i64,
    ) -> Result<bool> {
        let mut tx = self.begin("channel message").await?;
        if !insert_inbound(&mut tx, origin, outcome.as_str(), now_ms).await? {
            return Ok(false);
        }
        queue_delivery(&mut tx, &Reach::answering(origin), notice, now_ms).await?;
        tx.commit("channel message").await?;
        Ok(true)
    }

    async fn hold_channel(
        &self,
        channel: &str,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let held = query(
            "INSERT INTO channel_state (channel, cursor, holder, held_until_ms, updated_at_ms) \
             VALUES (?, NULL, ?, ?, ?) ON CONFLICT (channel) DO UPDATE SET \
             holder = excluded.holder, held_until_ms = excluded.held_until_ms, \
             updated_at_ms = excluded.updated_at_ms \
             WHERE channel_state.holder = excluded.holder OR channel_state.held_until_ms <= ?",
        )
        .bind(channel)
        .bind(holder)
        .bind(now_ms.saturating_add(lease_ms))
        .bind(now_ms)
        .bind(now_ms)
        .execute(&self.db, "channel lease")
        .await?;
        Ok(held == 1)
    }

    async fn channel_cursor(&self, channel: &str) -> Result<Option<String>> {
        let cursor: Option<Option<String>> =
            query("SELECT cursor FROM channel_state WHERE channel = ?")
                .bind(channel)
                .opt_scalar(&self.db, "channel cursor")
                .await?;
        Ok(cursor.flatten())
    }

    async fn set_channel_cursor(
        &self,
        channel: &str,
        holder: &str,
        cursor: &str,
        now_ms: i64,
    ) -> Result<bool> {
        let written = query(
            "UPDATE channel_state SET cursor = ?, updated_at_ms = ? \
             WHERE channel = ? AND holder = ? AND held_until_ms > ?",
        )
        .text(cursor)
        .bind(now_ms)
        .bind(channel)
        .bind(holder)
        .bind(now_ms)
        .execute(&self.db, "channel cursor")
        .await?;
        Ok(written == 1)
    }

    async fn record_direct_room(
        &self,
        channel: &str,
        room: &str,
        peer: &str,
        now_ms: i64,
    ) -> Result<()> {
        query(
            "INSERT INTO channel_rooms (channel, room, peer, created_at_ms) VALUES (?, ?, ?, ?) \
             ON CONFLICT (channel, room) DO NOTHING",
        )
        .bind(channel)
        .text(room)
        .text(peer)
        .bind(now_ms)
        .execute(&self.db, "channel room")
        .await?;
        Ok(())
    }

    async fn direct_room_peer(&self, channel: &str, room: &str) -> Result<Option<String>> {
        query("SELECT peer FROM channel_rooms WHERE channel = ? AND room = ?")
            .bind(channel)
            .text(room)
            .opt_scalar(&self.db, "channel room")
            .await
    }

    async fn set_channel_stream_message(&self, turn_id: &str, message: &str) -> Result<()> {
        query(
            "UPDATE channel_turns SET stream_message = ? \
             WHERE turn_id = ? AND stream_message IS NULL",
        )
        .text(message)
        .bind(turn_id)
        .execute(&self.db, "channel turn")
        .await?;
        Ok(())
    }

    async fn channel_stream_message(&self, turn_id: &str) -> Result<Option<String>> {
        let message: Option<Option<String>> =
            query("SELECT stream_message FROM channel_turns WHERE turn_id = ?")
                .bind(turn_id)
                .opt_scalar(&self.db, "channel turn")
                .await?;
        Ok(message.flatten())
    }

    async fn channel_sender_open_turns(&self, channel: &str, sender: &str) -> Result<u32> {
        let count: i64 = query(
            "SELECT COUNT(*) FROM channel_turns c JOIN turns t ON t.turn_id = c.turn_id \
             WHERE c.channel = ? AND c.sender = ? AND t.status IN ('queued', 'running')",
        )
        .bind(channel)
        .text(sender)
        .scalar(&self.db, "channel turn")
        .await?;
        Ok(u32::try_from(count).unwrap_or(u32::MAX))
    }

    async fn channel_clock_ms(&self) -> Result<i64> {
        query(format!("SELECT {NOW_MS}"))
            .scalar(&self.db, "clock")
            .await
    }

    async fn record_turn_artifact(
        &self,
        turn_id: &str,
        artifact: &TurnArtifact,
        now_ms: i64,
    ) -> Result<()> {
        // A path past the bound (which no workspace file has) is not kept: an index entry has
        // a bounded size on PostgreSQL.
        if artifact.path.len() > MAX_ARTIFACT_PATH_BYTES {
            return Ok(());
        }
        query(
            "INSERT INTO turn_artifacts (turn_id, path, media_id, size_bytes, created_at_ms) \
             VALUES (?, ?, ?, ?, ?) ON CONFLICT (turn_id, path) DO NOTHING",
        )
        .bind(turn_id)
        .text(&artifact.path)
        .bind(&artifact.media_id)
        .bind(i64::try_from(artifact.size_bytes).unwrap_or(i64::MAX))
        .bind(now_ms)
        .execute(&self.db, "turn artifact")
        .await?;
        Ok(())
    }

    async fn turn_artifacts(&self, turn_id: &str) -> Result<Vec<TurnArtifact>> {
        query(
            "SELECT path, media_id, size_bytes FROM turn_artifacts WHERE turn_id = ? \
             ORDER BY created_at_ms, path COLLATE \"C\"",
        )
        .bind(turn_id)
        .all(&self.db, "turn artifact")
        .await?
        .iter()
        .map(|row| {
            let size: i64 = get(row, "size_bytes")?;
            Ok(TurnArtifact {
                path: get(row, "path")?,
                media_id: get(row, "media_id")?,
                size_bytes: u64::try_from(size).map_err(|_| StoreError::Corrupt {
                    what: "turn artifact",
                })?,
            })
        })
        .collect()
    }

    async fn turn_channel(&self, turn_id: &str) -> Result<Option<String>> {
        query("SELECT channel FROM channel_turns WHERE turn_id = ?")
            .bind(turn_id)
            .opt_scalar(&self.db, "channel turn")
            .await
    }

    async fn channel_message_judged(&self, channel: &str, message_id: &str) -> Result<bool> {
        let found: Option<i64> =
            query("SELECT 1 FROM channel_inbound WHERE channel = ? AND message_id = ?")
                .bind(channel)
                .text(message_id)
                .opt_scalar(&self.db, "channel message")
                .await?;
        Ok(found.is_some())
    }

    async fn renew_channel_delivery(
        &self,
        delivery_id: &str,
        claimant: &str,
        claim_ms: i64,
        now_ms: i64,
    ) -> Result<bool> {
        let renewed = query(
            "UPDATE channel_outbox SET claimed_until_ms = ? \
             WHERE delivery_id = ? AND claimed_by = ? AND state = 'pending' \
             AND claimed_until_ms > ?",
        )
        .bind(now_ms.saturating_add(claim_ms))
        .bind(delivery_id)
        .bind(claimant)
        .bind(now_ms)
        .execute(&self.db, "channel delivery")
        .await?;
        Ok(renewed == 1)
    }

    async fn prune_channel_records(&self, before_ms: i64) -> Result<u64> {
        let mut tx = self.begin("channel prune").await?;
        let mut pruned = query("DELETE FROM channel_inbound WHERE received_at_ms < ?")
            .bind(before_ms)
            .execute(&mut tx, "channel message")
            .await?;
        pruned += query("DELETE FROM channel_outbox WHERE state <> 'pending' AND ended_at_ms < ?")
            .bind(before_ms)
            .execute(&mut tx, "channel delivery")
            .await?;
        pruned += query(
            "DELETE FROM channel_turns WHERE turn_id IN (SELECT turn_id FROM turns \
             WHERE ended_at_ms IS NOT NULL AND ended_at_ms < ?)",
        )
        .bind(before_ms)
        .execute(&mut tx, "channel turn")
        .await?;
        pruned += query("DELETE FROM turn_artifacts WHERE created_at_ms < ?")
            .bind(before_ms)
            .execute(&mut tx, "turn artifact")
            .await?;
        tx.commit("channel prune").await?;
        Ok(pruned)
    }

    async fn channel_figures(&self, channel: &str) -> Result<ChannelFigures> {
        let last_inbound_at_ms: Option<i64> =
            query("SELECT MAX(received_at_ms) FROM channel_inbound WHERE channel = ?")
                .bind(channel)
                .scalar(&self.db, "channel message")
                .await?;
        let last_delivery_at_ms: Option<i64> = query(
            "SELECT MAX(ended_at_ms) FROM channel_outbox WHERE channel = ? AND state = 'delivered'",
        )
        .bind(channel)
        .scalar(&self.db, "channel delivery")
        .await?;
        let pending: i64 =
            query("SELECT COUNT(*) FROM channel_outbox WHERE channel = ? AND state = 'pending'")
                .bind(channel)
                .scalar(&self.db, "channel delivery")
                .await?;
        let last_error: Option<String> = query(
            "SELECT last_error FROM channel_outbox WHERE channel = ? AND last_error IS NOT NULL \
             AND (state = 'pending' OR (state = 'failed' AND ended_at_ms > ?)) \
             ORDER BY created_at_ms DESC, delivery_id DESC LIMIT 1",
        )
        .bind(channel)
        .bind(last_delivery_at_ms.unwrap_or(0))
        .opt_scalar(&self.db, "channel delivery")
        .await?;
        Ok(ChannelFigures {
            last_inbound_at_ms,
            last_delivery_at_ms,
            pending_deliveries: u64::try_from(pending).unwrap_or(0),
            last_error,
        })
    }
}

/// Reads an [`OutboxEntry`] ([`OUTBOX_COLUMNS`]).
fn outbox_entry_from_row(row: &impl SqlRow) -> Result<OutboxEntry> {
    let attempts: i64 = get(row, "attempts")?;
    Ok(OutboxEntry {
        delivery_id: get(row, "delivery_id")?,
        channel: get(row, "channel")?,
        turn_id: get(row, "turn_id")?,
        in_reply_to: get(row, "in_reply_to")?,
        conversation: get(row, "conversation")?,
        recipient: get(row, "recipient")?,
        thread: get(row, "thread")?,
        text: get(row, "text")?,
        attempts: u32::try_from(attempts).map_err(|_| StoreError::Corrupt {
            what: "channel delivery",
        })?,
        claims: u32::try_from(get::<i64>(row, "claims")?).map_err(|_| StoreError::Corrupt {
            what: "channel delivery",
        })?,
        created_at_ms: get(row, "created_at_ms")?,
    })
}
