//! [`ChannelStore`]: what the Gateway's channels keep, so that a message is judged once and a
//! reply is delivered once, across restarts and replicas.
//!
//! - **Inbound.** Every message a channel receives is recorded by its platform id
//!   (`channel_inbound`): an admitted one in the admission's own transaction
//!   ([`crate::records::NewUserMessage::origin`]), any other with its outcome
//!   ([`ChannelStore::record_channel_inbound`], [`ChannelStore::request_channel_pairing`]). A
//!   message seen again finds its row and changes nothing.
//! - **Outbox.** A channel-origin turn's end queues its reply in the transaction that ends the
//!   turn ([`crate::Store::finish_turn`], and the takeover of an interrupted turn); a pairing
//!   queues its reply with the pairing. A deliverer claims an entry for a while
//!   ([`ChannelStore::claim_channel_delivery`]), so two replicas never send it at once, and
//!   ends the attempt under its claim ([`ChannelStore::end_channel_delivery`]).
//! - **Pairing.** Pending pairings and the senders operators approved.
//! - **Polling.** A polling channel's cursor and the lease that lets one replica poll it.

use crate::records::TurnArtifact;
use async_trait::async_trait;

use crate::error::Result;
use crate::records::ChannelFigures;
use crate::records::ChannelOrigin;
use crate::records::DeliveryEnd;
use crate::records::InboundOutcome;
use crate::records::NewDelivery;
use crate::records::OutboxEntry;
use crate::records::PairingOutcome;
use crate::records::PairingRecord;
use crate::records::PairingRequest;

/// The channels' state in the store.
#[async_trait]
pub trait ChannelStore: Send + Sync + 'static {
    /// Records that `origin`'s message was judged `outcome` and admitted nothing; returns
    /// false, changing nothing, when the message was recorded before.
    ///
    /// # Errors
    /// Storage failures.
    async fn record_channel_inbound(
        &self,
        origin: &ChannelOrigin,
        outcome: InboundOutcome,
        now_ms: i64,
    ) -> Result<bool>;

    /// Whether an operator approved `sender` on `channel` by pairing.
    ///
    /// # Errors
    /// Storage failures.
    async fn channel_sender_approved(&self, channel: &str, sender: &str) -> Result<bool>;

    /// Handles a message from a sender who needs pairing, in one transaction: records the
    /// message ([`InboundOutcome::Pairing`]), drops the channel's expired pairings, and unless
    /// the sender has one pending or the channel has `max_pending`, creates the pairing and
    /// queues its reply.
    ///
    /// # Errors
    /// Storage failures.
    async fn request_channel_pairing(&self, request: &PairingRequest) -> Result<PairingOutcome>;

    /// Returns the channel's pairings that have not expired, oldest first.
    ///
    /// # Errors
    /// Storage failures.
    async fn channel_pairings(&self, channel: &str, now_ms: i64) -> Result<Vec<PairingRecord>>;

    /// Approves a pending, unexpired pairing: removes it, adds its sender to the channel's
    /// approved senders and queues `notice` to the sender, in one transaction. Returns the
    /// sender, or `None` when no such pairing is pending.
    ///
    /// # Errors
    /// Storage failures.
    async fn approve_channel_pairing(
        &self,
        channel: &str,
        code: &str,
        notice: &NewDelivery,
        now_ms: i64,
    ) -> Result<Option<String>>;

    /// Denies a pending pairing: removes it. Returns its sender, or `None` when no such
    /// pairing is pending.
    ///
    /// # Errors
    /// Storage failures.
    async fn deny_channel_pairing(
        &self,
        channel: &str,
        code: &str,
        now_ms: i64,
    ) -> Result<Option<String>>;

    /// Claims the oldest due entry of one of `channels` for `claimant` until `now_ms +
    /// claim_ms`: a pending entry whose next attempt is due and which no live claim of another
    /// claimant holds. A claimant's own claim is taken again: a replica id runs in one process
    /// at a time (its lease), so such a claim is one its earlier, dead process left.
    ///
    /// # Errors
    /// Storage failures.
    async fn claim_channel_delivery(
        &self,
        channels: &[String],
        claimant: &str,
        claim_ms: i64,
        now_ms: i64,
    ) -> Result<Option<OutboxEntry>>;

    /// Ends an attempt on an entry `claimant` holds; returns false, changing nothing, when the
    /// claim is no longer its own (it lapsed and another deliverer took the entry).
    ///
    /// # Errors
    /// Storage failures.
    async fn end_channel_delivery(
        &self,
        delivery_id: &str,
        claimant: &str,
        end: &DeliveryEnd,
        now_ms: i64,
    ) -> Result<bool>;

    /// Records that `origin`'s message was judged `outcome` and queues `notice` to its
    /// conversation, in one transaction; returns false, changing nothing, when the message was
    /// recorded before.
    ///
    /// # Errors
    /// Storage failures.
    async fn answer_channel_inbound(
        &self,
        origin: &ChannelOrigin,
        outcome: InboundOutcome,
        notice: &NewDelivery,
        now_ms: i64,
    ) -> Result<bool>;

    /// Takes or renews the sync lease of a polling channel for `holder` until `now_ms +
    /// lease_ms`: when no one holds it, its holder's lease lapsed, or `holder` holds it already.
    /// Returns whether `holder` holds it now.
    ///
    /// # Errors
    /// Storage failures.
    async fn hold_channel(
        &self,
        channel: &str,
        holder: &str,
        lease_ms: i64,
        now_ms: i64,
    ) -> Result<bool>;

    /// Returns the channel's stored cursor.
    ///
    /// # Errors
    /// Storage failures.
    async fn channel_cursor(&self, channel: &str) -> Result<Option<String>>;

    /// Stores the channel's cursor while `holder`'s lease lives; returns false, writing nothing,
    /// when it does not (another replica took the channel over).
    ///
    /// # Errors
    /// Storage failures.
    async fn set_channel_cursor(
        &self,
        channel: &str,
        holder: &str,
        cursor: &str,
        now_ms: i64,
    ) -> Result<bool>;

    /// Records that `channel` accepted `room` as a direct chat opened by `peer` (the first
    /// record of a room stays).
    ///
    /// # Errors
    /// Storage failures.
    async fn record_direct_room(
        &self,
        channel: &str,
        room: &str,
        peer: &str,
        now_ms: i64,
    ) -> Result<()>;

    /// Returns the peer who opened `room` as a direct chat with `channel`, if it was one.
    ///
    /// # Errors
    /// Storage failures.
    async fn direct_room_peer(&self, channel: &str, room: &str) -> Result<Option<String>>;

    /// Records `message` as the platform's id of the message that streams `turn_id`'s reply
    /// (the first one recorded stays): the final reply replaces it.
    ///
    /// # Errors
    /// Storage failures.
    async fn set_channel_stream_message(&self, turn_id: &str, message: &str) -> Result<()>;

    /// Returns the platform's id of the message that streams `turn_id`'s reply, if one was
    /// sent.
    ///
    /// # Errors
    /// Storage failures.
    async fn channel_stream_message(&self, turn_id: &str) -> Result<Option<String>>;

    /// Returns how many turns of `channel` that took a message of `sender` are queued or
    /// running.
    ///
    /// # Errors
    /// Storage failures.
    async fn channel_sender_open_turns(&self, channel: &str, sender: &str) -> Result<u32>;

    /// Returns the store's own clock (Unix milliseconds): the time the channels' leases and
    /// delivery claims are judged by, so two replicas' clocks never decide who holds what.
    ///
    /// # Errors
    /// Storage failures.
    async fn channel_clock_ms(&self) -> Result<i64>;

    /// Records `artifact` as a reply artifact of `turn_id` (once per path).
    ///
    /// # Errors
    /// Storage failures.
    async fn record_turn_artifact(
        &self,
        turn_id: &str,
        artifact: &TurnArtifact,
        now_ms: i64,
    ) -> Result<()>;

    /// Returns the reply artifacts of `turn_id`, in the order they were stored.
    ///
    /// # Errors
    /// Storage failures.
    async fn turn_artifacts(&self, turn_id: &str) -> Result<Vec<TurnArtifact>>;

    /// Returns the channel whose message `turn_id` took (the latest one), if a channel's did.
    ///
    /// # Errors
    /// Storage failures.
    async fn turn_channel(&self, turn_id: &str) -> Result<Option<String>>;

    /// Whether `channel` judged the message `message_id` already.
    ///
    /// # Errors
    /// Storage failures.
    async fn channel_message_judged(&self, channel: &str, message_id: &str) -> Result<bool>;

    /// Extends `claimant`'s claim on a delivery it is still sending to `now_ms + claim_ms`;
    /// returns false when the claim is no longer its own (it lapsed, or the delivery ended).
    ///
    /// # Errors
    /// Storage failures.
    async fn renew_channel_delivery(
        &self,
        delivery_id: &str,
        claimant: &str,
        claim_ms: i64,
        now_ms: i64,
    ) -> Result<bool>;

    /// Deletes what the channels no longer need of before `before_ms`: the records of
    /// messages received then, the deliveries that ended then, and where the replies of turns
    /// that ended then went. Returns how many rows went.
    ///
    /// # Errors
    /// Storage failures.
    async fn prune_channel_records(&self, before_ms: i64) -> Result<u64>;

    /// Returns what `GET /v1/channels` shows of `channel`.
    ///
    /// # Errors
    /// Storage failures.
    async fn channel_figures(&self, channel: &str) -> Result<ChannelFigures>;
}
