//! The sync loop of a Matrix channel: one replica at a time holds the channel's lease in the
//! store and long-polls `/sync`; what an answer asks ([`gatehouse_channels::matrix::interpret`])
//! is judged and admitted as any channel message; the answer's `next_batch` is stored only
//! after everything it covers was judged, so a restart (of the Gateway or the homeserver)
//! resumes where it stopped, and what was judged before finds its record and admits nothing.
//!
//! - **Invites.** The bot joins a room it is invited to when the invite is a direct chat and
//!   the channel takes direct messages from the inviter (`open`, `pairing`, or the inviter is
//!   in `allow-from` or approved), or the room is one the group policy allows; it rejects every
//!   other invite, and every invite into an end-to-end encrypted room.
//! - **Messages.** A room whose joined members are the bot and one other user is a direct chat;
//!   any other room is a group. Text messages are judged as the contract says; files and images
//!   in a direct chat get a notice that they are not passed on; an encrypted message gets, once
//!   per room and process, a notice that encrypted rooms are not supported.
//! - **Typing.** While an admitted message's turn runs, the bot shows as typing in its room.
//! - **Failures.** A failed sync is retried with jittered backoff up to a minute, and the channel
//!   shows `degraded` with `CHANNEL_UNAVAILABLE` until a sync succeeds.

use std::collections::HashMap;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_channels::config::DmPolicy;
use gatehouse_channels::config::GroupPolicy;
use gatehouse_channels::config::Streaming;
use gatehouse_channels::matrix::BotIdentity;
use gatehouse_channels::matrix::Input;
use gatehouse_channels::matrix::MatrixClient;
use gatehouse_protocol::time::now_ms;
use gatehouse_store::Store;
use gatehouse_store::records::ChannelOrigin;
use gatehouse_store::records::InboundOutcome;
use tokio_util::sync::CancellationToken;

use super::Channel;
use super::Channels;
use super::FileSource;
use super::Inbound;
use super::InboundFile;
use super::ReceiveParts;
use super::Received;
use super::audit_channel;
use super::polling::Step;
use crate::audit::Audit;
use crate::turns::TurnEngine;

/// How many replica leases (`--lease-seconds`) a Matrix channel's sync lease lasts. The holder
/// renews it before every sync, whose long poll lasts a third of it and is given up after two
/// thirds, so a live holder never loses it and another replica takes a dead holder's channel
/// within this bound (30 s with the default 5 s replica lease).
pub(crate) const SYNC_LEASE_FACTOR: u32 = 6;

/// A Matrix channel's bot account.
pub(crate) struct MatrixBot {
    /// Its client.
    pub(crate) client: MatrixClient,
    /// The user id the config file names; the access token must belong to it.
    pub(crate) user_id: String,
}

/// What one sync loop needs, owned.
#[derive(Clone)]
pub(crate) struct LoopParts {
    /// The channels.
    pub(crate) channels: Arc<Channels>,
    /// The store.
    pub(crate) store: Arc<dyn Store>,
    /// Admission.
    pub(crate) turns: Arc<TurnEngine>,
    /// The audit trail.
    pub(crate) audit: Audit,
    /// This replica's id: the lease's holder.
    pub(crate) holder: String,
    /// The channel sync lease ([`SYNC_LEASE_FACTOR`] replica leases).
    pub(crate) lease: Duration,
}

impl LoopParts {
    /// What receiving needs, borrowed from these parts.
    pub(crate) fn receive(&self) -> ReceiveParts<'_> {
        ReceiveParts {
            store: &self.store,
            turns: &self.turns,
            audit: &self.audit,
            channels: &self.channels,
        }
    }
}

/// Starts the sync loop of every enabled Matrix channel; each runs until `shutdown`.
pub(crate) fn run_matrix_channels(parts: &LoopParts, shutdown: &CancellationToken) {
    for (index, channel) in parts.channels.all().iter().enumerate() {
        if channel.enabled() && channel.matrix.is_some() {
            tokio::spawn(run_loop(parts.clone(), index, shutdown.child_token()));
        }
    }
}

/// The loop's memory between syncs.
#[derive(Default)]
struct LoopMemory {
    /// The bot's identity, checked against its token once.
    identity: Option<BotIdentity>,
    /// Rooms told in this process that encrypted rooms are not supported.
    told_encrypted: HashSet<String>,
    /// The joined members of each room, from the sync's room summaries (or asked once).
    members: HashMap<String, u64>,
    /// The peer who opened each direct room, as the store records it (asked once).
    direct_peers: HashMap<String, Option<String>>,
    /// Rooms where the bot shows as typing now: one indicator task per room.
    typing: Arc<parking_lot::Mutex<HashSet<String>>>,
    /// Stops the typing tasks with the loop.
    shutdown: CancellationToken,
    /// The store's clock, which the channel's lease is judged by.
    clock: Option<super::StoreClock>,
    /// When each sender was last told that its share of turns is taken.
    told_busy: HashMap<String, std::time::Instant>,
}

async fn run_loop(parts: LoopParts, index: usize, shutdown: CancellationToken) {
    let channel = &parts.channels.all()[index];
    let mut memory = LoopMemory {
        shutdown: shutdown.clone(),
        clock: Some(super::StoreClock::new(Arc::clone(&parts.store))),
        ..LoopMemory::default()
    };
    let mut pacing = super::polling::Pacing::default();
    loop {
        let step = tokio::select! {
            () = shutdown.cancelled() => return,
            step = sync_once(&parts, channel, &mut memory) => step,
        };
        if !pacing.after(channel, "matrix", step, &shutdown).await {
            return;
        }
    }
}

/// Takes the lease, syncs once, judges what the answer asks, and stores its cursor.
async fn sync_once(
    parts: &LoopParts,
    channel: &Channel,
    memory: &mut LoopMemory,
) -> Result<Step, String> {
    let name = &channel.spec.name;
    let Some(bot) = &channel.matrix else {
        return Err(String::from("the channel has no Matrix account"));
    };
    if !hold(parts, memory, name).await? {
        return Ok(Step::Standby);
    }
    let identity = match &memory.identity {
        Some(identity) => identity.clone(),
        None => {
            let identity = identify(bot).await?;
            memory.identity = Some(identity.clone());
            identity
        }
    };
    let cursor = parts
        .store
        .channel_cursor(name)
        .await
        .map_err(|error| format!("cannot read the channel's cursor: {error}"))?;
    // The first sync only learns where "now" is (and the invites waiting): history from before
    // the channel ran is not answered.
    let timeout = match cursor {
        Some(_) => parts.lease / 3,
        None => Duration::ZERO,
    };
    let answer = bot
        .client
        .sync(cursor.as_deref(), timeout)
        .await
        .map_err(|error| error.to_string())?;
    for input in gatehouse_channels::matrix::interpret(&answer, &identity) {
        let invite = matches!(input, Input::Invite { .. });
        if cursor.is_some() || invite {
            // Renewed before each input, so a long answer (files to fetch) never outlives the
            // lease; one lost stops here, and the holder judges the answer again.
            if !hold(parts, memory, name).await? {
                return Ok(Step::Standby);
            }
            handle(parts, channel, bot, memory, input).await?;
        }
    }
    let stored = parts
        .store
        .set_channel_cursor(
            name,
            &parts.holder,
            answer.next_batch(),
            store_now(memory).await?,
        )
        .await
        .map_err(|error| format!("cannot store the channel's cursor: {error}"))?;
    Ok(match stored {
        true => Step::Synced,
        false => Step::Standby,
    })
}

/// Takes or renews the channel's sync lease for this replica; returns whether it holds it.
async fn hold(parts: &LoopParts, memory: &LoopMemory, name: &str) -> Result<bool, String> {
    match &memory.clock {
        Some(clock) => super::polling::hold(parts, clock, name).await,
        None => Err(String::from("the loop has no clock")),
    }
}

/// The store's time, which the channel's lease is judged by.
async fn store_now(memory: &LoopMemory) -> Result<i64, String> {
    match &memory.clock {
        Some(clock) => super::polling::store_now(clock).await,
        None => Err(String::from("the loop has no clock")),
    }
}

/// Checks that the access token belongs to the configured user and reads its display name.
async fn identify(bot: &MatrixBot) -> Result<BotIdentity, String> {
    let user_id = bot
        .client
        .whoami()
        .await
        .map_err(|error| error.to_string())?;
    if user_id != bot.user_id {
        return Err(format!(
            "the access token belongs to {user_id}, not to the configured user-id {}",
            bot.user_id
        ));
    }
    let display_name = bot
        .client
        .display_name(&user_id)
        .await
        .map_err(|error| error.to_string())?;
    Ok(BotIdentity {
        user_id,
        display_name,
    })
}

/// Does what one input asks. An error leaves the cursor where it was, so the answer is judged
/// again (and what was judged already admits nothing).
async fn handle(
    parts: &LoopParts,
    channel: &Channel,
    bot: &MatrixBot,
    memory: &mut LoopMemory,
    input: Input,
) -> Result<(), String> {
    let store_error = |error: gatehouse_store::StoreError| error.to_string();
    match input {
        Input::Invite {
            room,
            inviter,
            direct,
            encrypted,
        } => {
            let mut accept =
                !encrypted && invite_allowed(parts, channel, &inviter, &room, direct).await?;
            let done = match accept {
                true => bot.client.join(&room).await,
                false => bot.client.leave(&room).await,
            };
            if let Err(error) = done {
                // A room that vanished or refuses the bot must not stall the channel.
                tracing::warn!(channel = %channel.spec.name, error = %error, "cannot answer a Matrix invite");
            }
            // An invite marked direct into a room of more than the inviter and the bot was
            // accepted on a false premise: leave it.
            if accept && direct && !spec_lists(channel, &room) {
                let members = bot.client.joined_member_count(&room).await.unwrap_or(0);
                memory.members.insert(room.clone(), members as u64);
                if members > 2 {
                    accept = false;
                    if let Err(error) = bot.client.leave(&room).await {
                        tracing::warn!(channel = %channel.spec.name, error = %error, "cannot leave a room");
                    }
                } else {
                    parts
                        .store
                        .record_direct_room(&channel.spec.name, &room, &inviter, now_ms())
                        .await
                        .map_err(store_error)?;
                    memory
                        .direct_peers
                        .insert(room.clone(), Some(inviter.clone()));
                }
            }
            audit_channel(
                &parts.audit,
                &channel.spec.name,
                "channel.invite",
                if accept { "accepted" } else { "rejected" },
                None,
                serde_json::json!({
                    "channel": channel.spec.name,
                    "room": room,
                    "inviter": inviter,
                    "encrypted": encrypted,
                }),
            )
            .await;
            Ok(())
        }
        Input::Members { room, joined } => {
            memory.members.insert(room, joined);
            Ok(())
        }
        Input::Message {
            room,
            event_id,
            sender,
            text,
            file,
            thread,
            mentioned,
        } => {
            let direct = is_direct(parts, bot, memory, channel, &room, &sender).await?;
            let stream_thread = thread.clone();
            let files = file
                .into_iter()
                .map(|file| InboundFile {
                    name: file.name,
                    mime_type: file.mime_type,
                    source: FileSource::Matrix {
                        client: bot.client.clone(),
                        url: file.url,
                        // Well within the lease, which the loop renews before each message.
                        timeout: parts.lease / 3,
                    },
                })
                .collect();
            let inbound = Inbound {
                message_id: event_id.clone(),
                sender: sender.clone(),
                conversation: room.clone(),
                group: (!direct).then(|| room.clone()),
                thread,
                mentioned,
                text,
                files,
            };
            let receive = parts.receive();
            let received = super::receive(&receive, channel, inbound)
                .await
                .map_err(store_error)?;
            if let Received::Admitted {
                turn_id,
                session_key,
            } = received
            {
                if channel.spec.streaming == Streaming::Edits {
                    let target = super::stream::StreamTarget {
                        sink: Box::new(gatehouse_channels::matrix::MatrixStream {
                            client: bot.client.clone(),
                            room: room.clone(),
                            in_reply_to: event_id,
                            thread: stream_thread,
                            turn_id: turn_id.clone(),
                        }),
                        store: Arc::clone(&parts.store),
                        hub: Arc::clone(parts.turns.hub()),
                        session_key,
                        turn_id: turn_id.clone(),
                    };
                    parts.channels.streams.start(target, &memory.shutdown);
                }
                show_typing(bot, &parts.store, memory, room, turn_id);
                return Ok(());
            }
            if let Received::Busy { share } = received {
                // Recorded, so a restart does not judge it again; the sender is told at most
                // once a minute.
                memory
                    .told_busy
                    .retain(|_, told| told.elapsed() < super::BUSY_NOTICE_INTERVAL);
                let tell = !memory.told_busy.contains_key(&sender);
                if tell {
                    memory
                        .told_busy
                        .insert(sender.clone(), std::time::Instant::now());
                }
                let origin = origin(channel, &room, event_id, sender);
                super::notice_or_record(
                    parts.store.as_ref(),
                    &parts.channels,
                    &origin,
                    InboundOutcome::Denied,
                    tell,
                    &super::busy_notice(share),
                )
                .await
                .map_err(store_error)?;
            }
            Ok(())
        }
        Input::Encrypted {
            room,
            event_id,
            sender,
        } => {
            // Only a sender the channel would answer is told, once per room and process.
            let direct = is_direct(parts, bot, memory, channel, &room, &sender).await?;
            let tell = answers(parts, channel, &sender, &room, direct).await?
                && memory.told_encrypted.insert(room.clone());
            let origin = origin(channel, &room, event_id, sender);
            super::notice_or_record(
                parts.store.as_ref(),
                &parts.channels,
                &origin,
                InboundOutcome::Denied,
                tell,
                gatehouse_channels::matrix::ENCRYPTED_NOTICE,
            )
            .await
            .map_err(store_error)
        }
        Input::Unsupported {
            room,
            event_id,
            sender,
        } => {
            // Only a sender the channel would answer, in a direct chat, is told.
            let direct = is_direct(parts, bot, memory, channel, &room, &sender).await?;
            let tell = direct && answers(parts, channel, &sender, &room, direct).await?;
            let origin = origin(channel, &room, event_id, sender);
            super::notice_or_record(
                parts.store.as_ref(),
                &parts.channels,
                &origin,
                InboundOutcome::Ignored,
                tell,
                gatehouse_channels::matrix::UNSUPPORTED_NOTICE,
            )
            .await
            .map_err(store_error)
        }
    }
}

/// The origin of a message that admits nothing; its room is the conversation either way.
fn origin(channel: &Channel, room: &str, event_id: String, sender: String) -> ChannelOrigin {
    ChannelOrigin {
        channel: channel.spec.name.clone(),
        message_id: event_id,
        conversation: room.to_owned(),
        sender,
        room: None,
        thread: None,
    }
}

/// Whether `room` is listed in the channel's `groups`.
fn spec_lists(channel: &Channel, room: &str) -> bool {
    channel.spec.groups.iter().any(|id| id == room)
}

/// Whether a message of `sender` in `room` is a direct message: the room is a direct chat
/// `sender` opened with the bot (recorded when its invite was accepted) and the bot and one
/// other user are joined. A room listed in `groups` is a group without asking; the member
/// count comes from the sync's room summaries, or is asked once and kept.
async fn is_direct(
    parts: &LoopParts,
    bot: &MatrixBot,
    memory: &mut LoopMemory,
    channel: &Channel,
    room: &str,
    sender: &str,
) -> Result<bool, String> {
    if spec_lists(channel, room) {
        return Ok(false);
    }
    let peer = match memory.direct_peers.get(room) {
        Some(peer) => peer.clone(),
        None => {
            let peer = parts
                .store
                .direct_room_peer(&channel.spec.name, room)
                .await
                .map_err(|error| error.to_string())?;
            memory.direct_peers.insert(room.to_owned(), peer.clone());
            peer
        }
    };
    if peer.as_deref() != Some(sender) {
        return Ok(false);
    }
    let count = match memory.members.get(room) {
        Some(count) => *count,
        None => {
            let count = bot
                .client
                .joined_member_count(room)
                .await
                .map_err(|error| error.to_string())? as u64;
            memory.members.insert(room.to_owned(), count);
            count
        }
    };
    Ok(count == 2)
}

/// Whether the channel would answer `sender` in `room` (an addressed message): only such a
/// sender is sent a notice.
async fn answers(
    parts: &LoopParts,
    channel: &Channel,
    sender: &str,
    room: &str,
    direct: bool,
) -> Result<bool, String> {
    let approved = match direct {
        true => parts
            .store
            .channel_sender_approved(&channel.spec.name, sender)
            .await
            .map_err(|error| error.to_string())?,
        false => false,
    };
    let verdict = gatehouse_channels::access::judge(
        &channel.spec,
        &gatehouse_channels::access::Arrival {
            sender,
            group: (!direct).then_some(room),
            mentioned: true,
            approved,
        },
    );
    Ok(verdict == gatehouse_channels::access::Verdict::Admit)
}

/// Whether the bot accepts `inviter`'s invite into `room`.
async fn invite_allowed(
    parts: &LoopParts,
    channel: &Channel,
    inviter: &str,
    room: &str,
    direct: bool,
) -> Result<bool, String> {
    let spec = &channel.spec;
    if direct {
        return Ok(match spec.dm_policy {
            DmPolicy::Open | DmPolicy::Pairing => true,
            DmPolicy::Disabled => false,
            DmPolicy::Allowlist => {
                spec.allow_from.iter().any(|id| id == inviter)
                    || parts
                        .store
                        .channel_sender_approved(&spec.name, inviter)
                        .await
                        .map_err(|error| error.to_string())?
            }
        });
    }
    let member_allowed =
        spec.group_allow_from.is_empty() || spec.group_allow_from.iter().any(|id| id == inviter);
    Ok(member_allowed
        && match spec.group_policy {
            GroupPolicy::Open => true,
            GroupPolicy::Disabled => false,
            GroupPolicy::Allowlist => spec.groups.iter().any(|id| id == room),
        })
}

/// Shows the bot typing in `room` until `turn_id` ends, unless an indicator already runs
/// there; stops with the loop.
fn show_typing(
    bot: &MatrixBot,
    store: &Arc<dyn Store>,
    memory: &LoopMemory,
    room: String,
    turn_id: String,
) {
    if !memory.typing.lock().insert(room.clone()) {
        return;
    }
    let typing = Arc::clone(&memory.typing);
    let client = bot.client.clone();
    let user_id = bot.user_id.clone();
    // Matrix drops the indicator after its 30 s timeout: renewed every 20 s.
    super::polling::keep_typing(
        store,
        turn_id,
        Duration::from_secs(20),
        memory.shutdown.clone(),
        move |shown| {
            let (client, user_id, room, typing) = (
                client.clone(),
                user_id.clone(),
                room.clone(),
                Arc::clone(&typing),
            );
            async move {
                if !shown {
                    typing.lock().remove(&room);
                }
                if let Err(error) = client.typing(&room, &user_id, shown).await {
                    tracing::debug!(error = %error, "cannot show typing");
                }
            }
        },
    );
}
