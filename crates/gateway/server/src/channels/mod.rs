//! The Gateway's channels: the chat platforms and signed webhooks it receives messages from
//! and delivers replies to ([`gatehouse_channels`] holds the platform-neutral core).
//!
//! - **Receiving.** A message is judged once ([`gatehouse_channels::access::judge`]): an
//!   admitted one goes through the same admission as `POST /v1/sessions/{key}/messages`, with
//!   the platform's message id recorded in the admission's transaction, so a redelivered message
//!   admits nothing, across restarts and replicas; a sender who must pair is sent one code; a
//!   refused or ignored one is recorded and reaches no session and no model.
//! - **Delivering.** A channel-origin turn's reply is queued in the store's outbox by the
//!   transaction that ends the turn. [`run_deliverer`] claims due entries of the enabled
//!   channels under this replica's id, sends them through the channel's adapter, and ends each
//!   attempt under its claim: delivered, retried with jittered backoff honouring `Retry-After`
//!   ([`gatehouse_channels::retry`]), or given up after
//!   [`gatehouse_channels::retry::MAX_ATTEMPTS`] with an audited `delivery.failed` (the
//!   transcript keeps the reply).
//!
//! Credentials stay in this process: they are read at start from the environment or a file,
//! used by the adapters and the signature checks, and never stored, logged, audited or sent to
//! a node.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_api::channels::NotAcceptedReason;
use gatehouse_api::sessions::QueueMode;
use gatehouse_channels::access::Arrival;
use gatehouse_channels::access::Verdict;
use gatehouse_channels::adapter::Adapter;
use gatehouse_channels::adapter::Outgoing;
use gatehouse_channels::adapter::SendError;
use gatehouse_channels::config::ChannelSpec;
use gatehouse_channels::pairing;
use gatehouse_channels::retry;
use gatehouse_channels::secret::Secret;
use gatehouse_channels::session_key::KeyParts;
use gatehouse_channels::session_key::Place;
use gatehouse_channels::setup::ChannelSetup;
use gatehouse_channels::setup::KindSetup;
use gatehouse_protocol::time::now_ms;
use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::records::ChannelOrigin;
use gatehouse_store::records::DeliveryEnd;
use gatehouse_store::records::InboundOutcome;
use gatehouse_store::records::NewDelivery;
use gatehouse_store::records::OutboxEntry;
use gatehouse_store::records::PairingOutcome;
use gatehouse_store::records::PairingRequest;
use gatehouse_store::records::TurnStatus;
use tokio_util::sync::CancellationToken;

use crate::audit::Audit;
use crate::audit::AuditRow;
use crate::instruments::ChannelMetrics;
use crate::turns::IncomingMessage;
use crate::turns::TurnEngine;

mod clock;
mod files;
mod matrix;
mod polling;
mod slack;
mod stream;
mod telegram;

pub(crate) use clock::StoreClock;
pub(crate) use files::ChannelFiles;
pub(crate) use files::FileSource;
pub(crate) use files::InboundFile;

pub(crate) use matrix::LoopParts;
pub(crate) use matrix::SYNC_LEASE_FACTOR;
pub(crate) use matrix::run_matrix_channels;
pub(crate) use slack::SlackBot;
pub(crate) use slack::receive_event;
pub(crate) use slack::run_slack_channels;
pub(crate) use telegram::TelegramBot;
pub(crate) use telegram::receive_update;
pub(crate) use telegram::run_telegram_channels;

/// How often the deliverer looks for due entries when it found none.
pub(crate) const DELIVERY_POLL: Duration = Duration::from_millis(250);

/// How long a claimed delivery is this replica's before another may take it: longer than
/// any send's timeout, so a live replica never loses a claim it is using.
pub(crate) const DELIVERY_CLAIM: Duration = Duration::from_secs(60);

/// How long the channels keep the record of a message they received, a delivery that ended and
/// where a turn's reply went: 30 days. A platform that redelivers a message later than that
/// would have it judged again.
pub(crate) const RECORD_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);

/// How often the channels' old records are pruned.
pub(crate) const PRUNE_INTERVAL: Duration = Duration::from_secs(3600);

/// Prunes the channels' records older than [`RECORD_RETENTION`] at start and then every
/// [`PRUNE_INTERVAL`], until `shutdown`.
pub(crate) async fn prune_periodically(store: Arc<dyn Store>, shutdown: CancellationToken) {
    loop {
        let retention = i64::try_from(RECORD_RETENTION.as_millis()).unwrap_or(i64::MAX);
        match store
            .prune_channel_records(now_ms().saturating_sub(retention))
            .await
        {
            Ok(0) => {}
            Ok(pruned) => tracing::info!(pruned, "pruned the channels' old records"),
            Err(error) => tracing::warn!(error = %error, "cannot prune the channels' records"),
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(PRUNE_INTERVAL) => {}
        }
    }
}

/// A configured channel as this Gateway runs it.
pub(crate) struct Channel {
    /// What the config file says.
    pub(crate) spec: ChannelSpec,
    /// The secret inbound requests are verified with (webhook kind).
    webhook_secret: Option<Secret>,
    /// The bot account of a Matrix channel, which its sync loop uses.
    matrix: Option<matrix::MatrixBot>,
    /// The bot of a Telegram channel, which its poll loop or inbound route uses.
    telegram: Option<telegram::TelegramBot>,
    /// The app of a Slack channel, which its Socket Mode loop or inbound route uses.
    slack: Option<slack::SlackBot>,
    /// The way out to the platform; `None` when the channel is disabled.
    adapter: Option<Arc<dyn Adapter>>,
    /// What its sync loop last found, for `GET /v1/channels`.
    status: parking_lot::Mutex<LoopStatus>,
}

/// What a polling channel's loop last found on this replica.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) enum LoopStatus {
    /// Not synced yet (or not a polling channel).
    #[default]
    Starting,
    /// Its last sync succeeded, at this instant.
    Synced(std::time::Instant),
    /// Another replica holds the channel's sync lease.
    Standby,
    /// Its last sync failed with this message (`CHANNEL_UNAVAILABLE`).
    Failing(String),
    /// The platform was told where to send updates (a Telegram webhook), and calls the
    /// inbound route from now on.
    Registered,
}

impl Channel {
    /// Whether the channel runs on this Gateway.
    pub(crate) fn enabled(&self) -> bool {
        self.adapter.is_some()
    }

    /// The secret of its signed inbound requests, when it takes them.
    pub(crate) fn webhook_secret(&self) -> Option<&Secret> {
        self.webhook_secret.as_ref()
    }

    /// Whether it polls its platform (a sync loop) rather than being called.
    pub(crate) fn polls(&self) -> bool {
        self.matrix.is_some()
            || self
                .telegram
                .as_ref()
                .is_some_and(|bot| bot.webhook.is_none())
            || self
                .slack
                .as_ref()
                .is_some_and(|bot| bot.signing_secret.is_none())
    }

    /// Its Slack app, when it is a Slack channel.
    pub(crate) fn slack(&self) -> Option<&slack::SlackBot> {
        self.slack.as_ref()
    }

    /// Its Telegram bot, when it is a Telegram channel.
    pub(crate) fn telegram(&self) -> Option<&telegram::TelegramBot> {
        self.telegram.as_ref()
    }

    /// What its sync loop last found on this replica. A loop whose last successful sync is
    /// older than `stale_after` (it hangs, or its task died) is reported failing, so a deaf
    /// channel never looks healthy.
    pub(crate) fn loop_status(&self, stale_after: Duration) -> LoopStatus {
        let status = self.status.lock().clone();
        match status {
            LoopStatus::Synced(at) if at.elapsed() > stale_after => LoopStatus::Failing(format!(
                "no sync succeeded for {} s",
                at.elapsed().as_secs()
            )),
            other => other,
        }
    }

    fn set_status(&self, status: LoopStatus) {
        *self.status.lock() = status;
    }
}

/// Every configured channel, in the config file's order.
#[derive(Default)]
pub(crate) struct Channels {
    list: Vec<Channel>,
    /// Their `/metrics` instruments.
    pub(crate) metrics: ChannelMetrics,
    /// Notified when this replica queued a message with its own text (a pairing code, a
    /// notice), so the deliverer sends it at once.
    queued: tokio::sync::Notify,
    /// The replies streaming on this replica (`streaming = "edits"`).
    streams: Arc<stream::Streams>,
    /// How files are taken in and reply artifacts read; `None` refuses files.
    files: Option<ChannelFiles>,
    /// How many turns one sender may have queued or running on a channel.
    sender_turns: u32,
}

impl Channels {
    /// Builds the channels of `setups` (validated, credentials read).
    ///
    /// # Errors
    /// An adapter's HTTP client cannot be built.
    pub(crate) fn new(
        setups: &[ChannelSetup],
        files: Option<ChannelFiles>,
        sender_turns: u32,
    ) -> Result<Self, reqwest::Error> {
        let list = setups
            .iter()
            .map(|setup| {
                let mut channel = Channel {
                    spec: setup.spec.clone(),
                    webhook_secret: None,
                    matrix: None,
                    telegram: None,
                    slack: None,
                    adapter: None,
                    status: parking_lot::Mutex::new(LoopStatus::Starting),
                };
                match &setup.kind {
                    Some(KindSetup::Webhook { reply_url, secret }) => {
                        channel.webhook_secret = Some(secret.clone());
                        channel.adapter =
                            Some(Arc::new(gatehouse_channels::webhook::WebhookAdapter::new(
                                reply_url.clone(),
                                secret.clone(),
                            )?));
                    }
                    Some(KindSetup::Matrix {
                        homeserver,
                        user_id,
                        access_token,
                    }) => {
                        let client = gatehouse_channels::matrix::MatrixClient::new(
                            homeserver.clone(),
                            access_token.clone(),
                        )?;
                        channel.adapter = Some(Arc::new(
                            gatehouse_channels::matrix::MatrixAdapter::new(client.clone()),
                        ));
                        channel.matrix = Some(matrix::MatrixBot {
                            client,
                            user_id: user_id.clone(),
                        });
                    }
                    Some(KindSetup::Telegram {
                        api_base,
                        bot_token,
                        webhook,
                    }) => {
                        let client = gatehouse_channels::telegram::TelegramClient::new(
                            api_base.clone(),
                            bot_token.clone(),
                        )?;
                        channel.adapter = Some(Arc::new(
                            gatehouse_channels::telegram::TelegramAdapter::new(client.clone()),
                        ));
                        channel.telegram =
                            Some(telegram::TelegramBot::new(client, webhook.clone()));
                    }
                    Some(KindSetup::Slack {
                        api_base,
                        bot_token,
                        app_token,
                        signing_secret,
                    }) => {
                        let client = gatehouse_channels::slack::SlackClient::new(
                            api_base.clone(),
                            bot_token.clone(),
                            app_token.clone(),
                        )?;
                        channel.adapter = Some(Arc::new(
                            gatehouse_channels::slack::SlackAdapter::new(client.clone()),
                        ));
                        channel.slack = Some(slack::SlackBot::new(client, signing_secret.clone()));
                    }
                    None => {}
                }
                Ok(channel)
            })
            .collect::<Result<Vec<Channel>, reqwest::Error>>()?;
        let names: Vec<String> = list
            .iter()
            .map(|channel| channel.spec.name.clone())
            .collect();
        Ok(Self {
            list,
            metrics: ChannelMetrics::for_channels(&names),
            queued: tokio::sync::Notify::new(),
            streams: Arc::default(),
            files,
            sender_turns: sender_turns.max(1),
        })
    }

    /// Wakes the deliverer: something was queued in the outbox.
    pub(crate) fn wake(&self) {
        self.queued.notify_one();
    }

    /// Returns every configured channel.
    pub(crate) fn all(&self) -> &[Channel] {
        &self.list
    }

    /// Returns the channel called `name`, enabled or not.
    pub(crate) fn get(&self, name: &str) -> Option<&Channel> {
        self.list.iter().find(|channel| channel.spec.name == name)
    }

    /// Returns the enabled channel called `name`.
    pub(crate) fn enabled(&self, name: &str) -> Option<&Channel> {
        self.get(name).filter(|channel| channel.enabled())
    }

    pub(crate) fn enabled_names(&self) -> Vec<String> {
        self.list
            .iter()
            .filter(|channel| channel.enabled())
            .map(|channel| channel.spec.name.clone())
            .collect()
    }
}

/// A message a channel received, in platform-neutral terms.
#[derive(Debug, Clone)]
pub(crate) struct Inbound {
    /// The platform's id of the message.
    pub(crate) message_id: String,
    /// The sender's platform id.
    pub(crate) sender: String,
    /// Where its reply goes (a room, a chat, or the sender of a direct webhook message).
    pub(crate) conversation: String,
    /// The group it was written in; `None` for a direct message.
    pub(crate) group: Option<String>,
    /// The thread, when the platform has one.
    pub(crate) thread: Option<String>,
    /// Whether it addresses the bot.
    pub(crate) mentioned: bool,
    /// The text.
    pub(crate) text: String,
    /// The files it carries; fetched only when it is admitted.
    pub(crate) files: Vec<InboundFile>,
}

/// What became of an inbound message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Received {
    /// It joined a turn of a session.
    Admitted {
        /// The session.
        session_key: String,
        /// The turn.
        turn_id: String,
    },
    /// It reached no session.
    NotAccepted(NotAcceptedReason),
    /// Its sender has as many turns queued or running on the channel as it may: it was not
    /// judged, and may be sent again once one ended.
    Busy {
        /// The sender's share.
        share: u32,
    },
}

/// What receiving needs of the Gateway.
pub(crate) struct ReceiveParts<'a> {
    /// The store.
    pub(crate) store: &'a Arc<dyn Store>,
    /// Admission.
    pub(crate) turns: &'a Arc<TurnEngine>,
    /// The audit trail.
    pub(crate) audit: &'a Audit,
    /// The channels: their instruments, and the deliverer to wake.
    pub(crate) channels: &'a Channels,
}

/// The audit actor of a channel's own rows.
fn actor(channel: &str) -> String {
    format!("channel:{channel}")
}

/// Judges and, when allowed, admits `message` received on `channel`, and counts its outcome
/// in `gatehouse_channel_inbound`.
///
/// # Errors
/// The store's failure; nothing was admitted.
pub(crate) async fn receive(
    parts: &ReceiveParts<'_>,
    channel: &Channel,
    message: Inbound,
) -> Result<Received, StoreError> {
    let received = judge(parts, channel, message).await?;
    let outcome = match &received {
        Received::Admitted { .. } => "admitted",
        Received::NotAccepted(NotAcceptedReason::Duplicate) => "duplicate",
        Received::NotAccepted(NotAcceptedReason::Pairing) => "pairing",
        Received::NotAccepted(NotAcceptedReason::Denied) | Received::Busy { .. } => "denied",
    };
    parts.channels.metrics.inbound(&channel.spec.name, outcome);
    Ok(received)
}

async fn judge(
    parts: &ReceiveParts<'_>,
    channel: &Channel,
    message: Inbound,
) -> Result<Received, StoreError> {
    let spec = &channel.spec;
    let approved = match message.group {
        None => {
            parts
                .store
                .channel_sender_approved(&spec.name, &message.sender)
                .await?
        }
        Some(_) => false,
    };
    let verdict = gatehouse_channels::access::judge(
        spec,
        &Arrival {
            sender: &message.sender,
            group: message.group.as_deref(),
            mentioned: message.mentioned,
            approved,
        },
    );
    let origin = ChannelOrigin {
        channel: spec.name.clone(),
        message_id: message.message_id.clone(),
        conversation: message.conversation.clone(),
        sender: message.sender.clone(),
        room: message.group.clone(),
        thread: message.thread.clone(),
    };
    match verdict {
        Verdict::Admit => admit(parts, spec, message, origin).await,
        Verdict::Pair => request_pairing(parts, spec, origin).await,
        Verdict::Deny | Verdict::Ignore => {
            let outcome = match verdict {
                Verdict::Deny => InboundOutcome::Denied,
                _ => InboundOutcome::Ignored,
            };
            let new = parts
                .store
                .record_channel_inbound(&origin, outcome, now_ms())
                .await?;
            if !new {
                return Ok(Received::NotAccepted(NotAcceptedReason::Duplicate));
            }
            if outcome == InboundOutcome::Denied {
                audit_channel(
                    parts.audit,
                    &spec.name,
                    "channel.denied",
                    "denied",
                    None,
                    serde_json::json!({
                        "channel": spec.name,
                        "sender": message.sender,
                        "group": message.group,
                    }),
                )
                .await;
            }
            Ok(Received::NotAccepted(NotAcceptedReason::Denied))
        }
    }
}

/// Admits an allowed message to its session.
async fn admit(
    parts: &ReceiveParts<'_>,
    spec: &ChannelSpec,
    message: Inbound,
    origin: ChannelOrigin,
) -> Result<Received, StoreError> {
    let place = match &message.group {
        Some(group) => Place::Group(group),
        None => Place::Direct,
    };
    // A sender's share of turns, as an API key has one: a flood from one allowed sender
    // cannot queue without bound.
    let open = parts
        .store
        .channel_sender_open_turns(&spec.name, &message.sender)
        .await?;
    if open >= parts.channels.sender_turns {
        audit_channel(
            parts.audit,
            &spec.name,
            "channel.busy",
            "denied",
            Some(gatehouse_protocol::error::ErrorCode::RateLimited.as_str()),
            serde_json::json!({"channel": spec.name, "sender": message.sender, "turns": open}),
        )
        .await;
        return Ok(Received::Busy {
            share: parts.channels.sender_turns,
        });
    }
    let session_key = gatehouse_channels::session_key::session_key(&KeyParts {
        agent: &spec.agent,
        channel: &spec.name,
        account: &spec.name,
        dm_scope: spec.dm_scope,
        sender: &message.sender,
        place,
        thread: message.thread.as_deref(),
    });
    let mut text = message.text;
    let mut attachments = Vec::new();
    if !message.files.is_empty() {
        // A message judged before fetches nothing again.
        if parts
            .store
            .channel_message_judged(&spec.name, &message.message_id)
            .await?
        {
            return Ok(Received::NotAccepted(NotAcceptedReason::Duplicate));
        }
        // A file without a text still tells the agent something came.
        if text.trim().is_empty() {
            let names: Vec<String> = message
                .files
                .iter()
                .map(|file| format!("{:?}", file.name))
                .collect();
            text = format!("(sent {})", names.join(", "));
        }
        let taken = match &parts.channels.files {
            Some(files) => {
                files
                    .take(&spec.name, &message.sender, &session_key, message.files)
                    .await
            }
            None => files::TakenFiles {
                attachments: Vec::new(),
                notes: message
                    .files
                    .iter()
                    .map(|file| {
                        gatehouse_channels::files::refusal_note(
                            &file.name,
                            "this Gateway takes no files from channels",
                        )
                    })
                    .collect(),
            },
        };
        attachments = taken.attachments;
        for note in taken.notes {
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&note);
        }
    }
    let admitted = parts
        .turns
        .admit(IncomingMessage {
            session_key: session_key.clone(),
            text,
            attachments,
            idempotency_key: None,
            queue_mode: spec.queue_mode.unwrap_or(QueueMode::Followup),
            origin: Some(origin),
            api_key: None,
        })
        .await;
    match admitted {
        Ok(admitted) if admitted.created => Ok(Received::Admitted {
            session_key,
            turn_id: admitted.turn.turn_id,
        }),
        Ok(_) | Err(crate::turns::AdmitError::Store(StoreError::AlreadyExists { .. })) => {
            Ok(Received::NotAccepted(NotAcceptedReason::Duplicate))
        }
        Err(crate::turns::AdmitError::Store(error)) => Err(error),
    }
}

/// Sends an unknown direct sender a pairing code, once.
async fn request_pairing(
    parts: &ReceiveParts<'_>,
    spec: &ChannelSpec,
    origin: ChannelOrigin,
) -> Result<Received, StoreError> {
    let now = now_ms();
    let code = pairing::new_code();
    let sender = origin.sender.clone();
    let outcome = parts
        .store
        .request_channel_pairing(&PairingRequest {
            origin,
            reply: NewDelivery {
                delivery_id: new_delivery_id(),
                text: pairing::pairing_reply(&code),
            },
            code,
            expires_at_ms: now.saturating_add(pairing::CODE_TTL_MS),
            max_pending: pairing::MAX_PENDING,
            now_ms: now,
        })
        .await?;
    let audited = match outcome {
        PairingOutcome::Duplicate => {
            return Ok(Received::NotAccepted(NotAcceptedReason::Duplicate));
        }
        PairingOutcome::Created => {
            parts.channels.wake();
            Some("requested")
        }
        PairingOutcome::Full => Some("full"),
        PairingOutcome::Pending => None,
    };
    if let Some(outcome) = audited {
        audit_channel(
            parts.audit,
            &spec.name,
            "channel.pairing",
            outcome,
            None,
            serde_json::json!({"channel": spec.name, "sender": sender}),
        )
        .await;
    }
    Ok(Received::NotAccepted(NotAcceptedReason::Pairing))
}

/// How often a sender whose share of turns is taken is told so, at most.
pub(crate) const BUSY_NOTICE_INTERVAL: Duration = Duration::from_secs(60);

/// The notice a sender whose share of `share` turns is taken gets.
pub(crate) fn busy_notice(share: u32) -> String {
    format!(
        "You have {share} messages waiting for an answer already; this one was not taken. \
         Send it again once the agent has answered."
    )
}

/// Records a message that admits nothing, with a notice to its room when `tell`.
pub(crate) async fn notice_or_record(
    store: &dyn Store,
    channels: &Channels,
    origin: &ChannelOrigin,
    outcome: InboundOutcome,
    tell: bool,
    notice: &str,
) -> Result<(), gatehouse_store::StoreError> {
    let now = now_ms();
    let counted = match outcome {
        InboundOutcome::Ignored => "ignored",
        _ => "denied",
    };
    channels.metrics.inbound(&origin.channel, counted);
    match tell {
        true => {
            let notice = NewDelivery {
                delivery_id: new_delivery_id(),
                text: notice.to_owned(),
            };
            store
                .answer_channel_inbound(origin, outcome, &notice, now)
                .await?;
            channels.wake();
        }
        false => {
            store.record_channel_inbound(origin, outcome, now).await?;
        }
    }
    Ok(())
}

/// When each sender of a channel was last told that its share of turns is taken.
#[derive(Default)]
pub(crate) struct BusyNotices {
    told: parking_lot::Mutex<std::collections::HashMap<String, std::time::Instant>>,
}

impl BusyNotices {
    /// Whether `sender` is to be told now (at most once per [`BUSY_NOTICE_INTERVAL`]).
    pub(crate) fn tell(&self, sender: &str) -> bool {
        let mut told = self.told.lock();
        told.retain(|_, at| at.elapsed() < BUSY_NOTICE_INTERVAL);
        match told.contains_key(sender) {
            true => false,
            false => {
                told.insert(sender.to_owned(), std::time::Instant::now());
                true
            }
        }
    }
}

/// Judges and admits `message` of a chat platform ([`receive`]); an admitted one streams its
/// reply into `stream` while its turn runs (`streaming = "edits"`), and a sender whose share of
/// turns is taken is told so at most once a minute (`busy`), its message recorded.
///
/// # Errors
/// The store's failure; nothing was admitted.
pub(crate) async fn receive_live(
    parts: &ReceiveParts<'_>,
    channel: &Channel,
    message: Inbound,
    stream: Option<Box<dyn gatehouse_channels::adapter::StreamSink>>,
    busy: &BusyNotices,
    shutdown: &CancellationToken,
) -> Result<Received, StoreError> {
    let origin = ChannelOrigin {
        channel: channel.spec.name.clone(),
        message_id: message.message_id.clone(),
        conversation: message.conversation.clone(),
        sender: message.sender.clone(),
        room: None,
        thread: message.thread.clone(),
    };
    let received = receive(parts, channel, message).await?;
    match &received {
        Received::Admitted {
            turn_id,
            session_key,
        } => {
            if let Some(sink) = stream {
                let target = stream::StreamTarget {
                    sink,
                    store: Arc::clone(parts.store),
                    hub: Arc::clone(parts.turns.hub()),
                    session_key: session_key.clone(),
                    turn_id: turn_id.clone(),
                };
                parts.channels.streams.start(target, shutdown);
            }
        }
        Received::Busy { share } => {
            notice_or_record(
                parts.store.as_ref(),
                parts.channels,
                &origin,
                gatehouse_store::records::InboundOutcome::Denied,
                busy.tell(&origin.sender),
                &busy_notice(*share),
            )
            .await?;
        }
        Received::NotAccepted(_) => {}
    }
    Ok(received)
}

/// Waits up to `within` for a message being judged: `Some` with its outcome when it ended in
/// time, `None` when it goes on (it is never cancelled). A judging task that panicked counts
/// as judged: nothing would make it pass on a second try.
pub(crate) async fn judged_within(
    judging: tokio::task::JoinHandle<Result<(), StoreError>>,
    within: Duration,
) -> Option<Result<(), StoreError>> {
    match tokio::time::timeout(within, judging).await {
        Ok(Ok(outcome)) => Some(outcome),
        Ok(Err(error)) => {
            tracing::error!(error = %error, "judging a channel message failed");
            Some(Ok(()))
        }
        Err(_) => None,
    }
}

/// Records a row a channel's traffic caused, at most
/// [`crate::audit::LIMITED_ROWS_PER_WINDOW`] per channel and action per window, so a flood of
/// messages cannot flood the trail.
pub(crate) async fn audit_channel(
    audit: &Audit,
    channel: &str,
    action: &str,
    outcome: &str,
    reason_code: Option<&str>,
    details: serde_json::Value,
) {
    let actor = actor(channel);
    let row = AuditRow {
        actor: &actor,
        action,
        outcome,
        reason_code,
        details,
    };
    // Each action has its own window, so a flood of one (unsigned requests) never hides
    // another (pairings, invites).
    audit
        .record_limited(&format!("{actor}:{action}"), row)
        .await;
}

/// A fresh outbox id for a message with its own text.
pub(crate) fn new_delivery_id() -> String {
    let mut bytes = [0_u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        // The random source failed: the time still tells ids apart here, and the store refuses
        // a duplicate rather than overwrite.
        return format!("note-{:024x}", now_ms());
    }
    format!("note-{}", hex::encode(bytes))
}

/// Sends the enabled channels' due outbox entries until `shutdown`, claiming each under
/// `claimant` (this replica's id).
pub(crate) async fn run_deliverer(
    channels: Arc<Channels>,
    store: Arc<dyn Store>,
    audit: Audit,
    claimant: String,
    turn_ends: Arc<tokio::sync::Notify>,
    shutdown: CancellationToken,
) {
    let names = channels.enabled_names();
    if names.is_empty() {
        return;
    }
    let claim_ms = i64::try_from(DELIVERY_CLAIM.as_millis()).unwrap_or(i64::MAX);
    let clock = StoreClock::new(Arc::clone(&store));
    loop {
        let claimed = match clock.now_ms().await {
            Ok(now) => {
                store
                    .claim_channel_delivery(&names, &claimant, claim_ms, now)
                    .await
            }
            Err(error) => Err(error),
        };
        match claimed {
            Ok(Some(entry)) => {
                deliver(&channels, store.as_ref(), &clock, &audit, &claimant, entry).await;
                continue;
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(error = %error, "cannot read the channels' outbox");
            }
        }
        // A turn that ended here or a message queued here is sent at once; the poll finds
        // what other replicas queued, and retries that came due.
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = turn_ends.notified() => {}
            () = channels.queued.notified() => {}
            () = tokio::time::sleep(DELIVERY_POLL) => {}
        }
    }
}

/// Makes one attempt at `entry` and ends it under the claim.
async fn deliver(
    channels: &Channels,
    store: &dyn Store,
    clock: &StoreClock,
    audit: &Audit,
    claimant: &str,
    entry: OutboxEntry,
) {
    let Some(adapter) = channels
        .enabled(&entry.channel)
        .and_then(|channel| channel.adapter.clone())
    else {
        return;
    };
    let sent = match outgoing(channels, store, &entry).await {
        Err(error) => Err(error),
        Ok(message) => send_holding_claim(adapter.as_ref(), &message, store, clock, claimant).await,
    };
    let end = match sent {
        Ok(()) => DeliveryEnd::Delivered,
        Err(SendError::Permanent { message }) => DeliveryEnd::Failed { error: message },
        Err(SendError::Transient {
            message,
            retry_after,
        }) => match retry::next_delay(
            entry.attempts.saturating_add(1),
            retry_after,
            retry::jitter_unit(),
        ) {
            // Due by the store's clock, which the claims are judged by (this replica's
            // when the store cannot say: a due time only decides when, never who).
            Some(delay) => DeliveryEnd::Retry {
                next_attempt_at_ms: clock
                    .now_ms()
                    .await
                    .unwrap_or_else(|_| now_ms())
                    .saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)),
                error: message,
            },
            None => DeliveryEnd::Failed { error: message },
        },
    };
    match store
        .end_channel_delivery(&entry.delivery_id, claimant, &end, now_ms())
        .await
    {
        Ok(true) => {}
        Ok(false) => {
            tracing::warn!(
                channel = %entry.channel,
                delivery = %entry.delivery_id,
                "a delivery's claim lapsed before its attempt ended"
            );
            return;
        }
        Err(error) => {
            tracing::warn!(error = %error, delivery = %entry.delivery_id, "cannot end a delivery attempt");
            return;
        }
    }
    let metrics = &channels.metrics;
    match &end {
        DeliveryEnd::Delivered => {
            metrics.delivery(&entry.channel, "delivered");
            let waited = now_ms().saturating_sub(entry.created_at_ms).max(0);
            metrics.delivered_after(
                &entry.channel,
                Duration::from_millis(u64::try_from(waited).unwrap_or(0)),
            );
            tracing::debug!(channel = %entry.channel, delivery = %entry.delivery_id, "delivered");
        }
        DeliveryEnd::Retry { error, .. } => {
            metrics.delivery(&entry.channel, "retried");
            tracing::info!(channel = %entry.channel, delivery = %entry.delivery_id, error = %error, "a delivery will be retried");
        }
        DeliveryEnd::Failed { error } => {
            metrics.delivery(&entry.channel, "failed");
            tracing::warn!(channel = %entry.channel, delivery = %entry.delivery_id, error = %error, "a delivery was given up");
            audit
                .record(
                    &actor(&entry.channel),
                    "delivery.failed",
                    "failed",
                    Some(gatehouse_protocol::error::ErrorCode::DeliveryFailed.as_str()),
                    serde_json::json!({
                        "channel": entry.channel,
                        "deliveryId": entry.delivery_id,
                        "turnId": entry.turn_id,
                        "attempts": entry.attempts.saturating_add(1),
                        "error": error,
                    }),
                )
                .await;
        }
    }
}

/// The longest one attempt at a delivery may take, its files included.
pub(crate) const MAX_SEND: Duration = Duration::from_secs(900);

/// Sends `message` within [`MAX_SEND`], renewing the claim every third of [`DELIVERY_CLAIM`]
/// while the send runs, so a long send (files) keeps its claim. A claim lost meanwhile is
/// logged and the send goes on: the platform's idempotency key covers a second sender.
async fn send_holding_claim(
    adapter: &dyn Adapter,
    message: &Outgoing,
    store: &dyn Store,
    clock: &StoreClock,
    claimant: &str,
) -> Result<(), SendError> {
    let claim_ms = i64::try_from(DELIVERY_CLAIM.as_millis()).unwrap_or(i64::MAX);
    let send = tokio::time::timeout(MAX_SEND, adapter.send(message));
    tokio::pin!(send);
    let every = DELIVERY_CLAIM / 3;
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    loop {
        tokio::select! {
            sent = &mut send => {
                return sent.unwrap_or_else(|_| Err(SendError::Transient {
                    message: format!("the send took longer than {} s", MAX_SEND.as_secs()),
                    retry_after: None,
                }));
            }
            _ = renew.tick() => {
                let renewed = match clock.now_ms().await {
                    Ok(now) => store
                        .renew_channel_delivery(&message.delivery_id, claimant, claim_ms, now)
                        .await,
                    Err(error) => Err(error),
                };
                if !matches!(renewed, Ok(true)) {
                    tracing::warn!(delivery = %message.delivery_id, "cannot renew the claim of a delivery being sent");
                }
            }
        }
    }
}

/// A failure to read what a delivery sends: the store's is worth another attempt.
fn store_failure(what: &str, error: &StoreError) -> SendError {
    SendError::Transient {
        message: format!("cannot read {what}: {error}"),
        retry_after: None,
    }
}

/// Returns the message `entry` sends. A turn's reply replaces the message that streamed it,
/// once the stream (when it runs here) has stopped, and carries the turn's reply artifacts
/// unless its channel denies `read` (an artifact is a file read from the workspace).
async fn outgoing(
    channels: &Channels,
    store: &dyn Store,
    entry: &OutboxEntry,
) -> Result<Outgoing, SendError> {
    let text = outgoing_text(store, entry).await?;
    let (replaces, files) = match &entry.turn_id {
        Some(turn_id) => {
            channels.streams.stop(turn_id).await;
            let replaces = store
                .channel_stream_message(turn_id)
                .await
                .map_err(|error| store_failure("the reply's streamed message", &error))?;
            let denied = channels
                .get(&entry.channel)
                .map(|channel| channel.spec.denied_tools())
                .unwrap_or_default();
            let files = match &channels.files {
                Some(_) if crate::tools::denied_by(&denied, "read") => {
                    tracing::info!(channel = %entry.channel, "the channel denies read: reply artifacts are not sent");
                    Vec::new()
                }
                Some(files) => files
                    .reply_files(turn_id)
                    .await
                    .map_err(|error| store_failure("the reply's artifacts", &error))?,
                None => Vec::new(),
            };
            (replaces, files)
        }
        None => (None, Vec::new()),
    };
    Ok(Outgoing {
        delivery_id: entry.delivery_id.clone(),
        // A delivery claimed before may have been sent in part by a deliverer that died.
        attempt: entry.attempts.max(entry.claims.saturating_sub(1)),
        in_reply_to: entry.in_reply_to.clone(),
        conversation: entry.conversation.clone(),
        recipient: entry.recipient.clone(),
        thread: entry.thread.clone(),
        replaces,
        text,
        files,
    })
}

/// Returns the text of `entry`: its own, or its turn's reply (a short notice with the code
/// when the turn did not complete).
async fn outgoing_text(store: &dyn Store, entry: &OutboxEntry) -> Result<String, SendError> {
    let permanent = |message: &str| SendError::Permanent {
        message: message.to_owned(),
    };
    if let Some(text) = &entry.text {
        return Ok(text.clone());
    }
    let Some(turn_id) = &entry.turn_id else {
        return Err(permanent("the outbox entry has neither text nor turn"));
    };
    let turn = match store.turn(turn_id).await {
        Ok(Some(turn)) => turn,
        Ok(None) => return Err(permanent("the reply's turn is gone")),
        Err(error) => return Err(store_failure("the reply's turn", &error)),
    };
    match (turn.status, turn.reply) {
        (TurnStatus::Completed, Some(reply)) if !reply.trim().is_empty() => Ok(reply),
        (TurnStatus::Completed, _) => Ok(String::from("(The agent finished without a reply.)")),
        (_, _) => Ok(format!(
            "The agent could not answer this message ({}).",
            turn.error_code.as_deref().unwrap_or("FAILED")
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    #[test]
    fn a_sync_loop_silent_past_its_bound_reports_failing() {
        let spec: ChannelSpec = serde_json::from_value(
            serde_json::json!({"name": "team", "kind": "matrix", "enabled": false}),
        )
        .unwrap();
        let channel = Channel {
            spec,
            webhook_secret: None,
            matrix: None,
            telegram: None,
            slack: None,
            adapter: None,
            status: parking_lot::Mutex::new(LoopStatus::Starting),
        };
        let bound = Duration::from_secs(30);
        assert_eq!(channel.loop_status(bound), LoopStatus::Starting);
        let now = std::time::Instant::now();
        channel.set_status(LoopStatus::Synced(now));
        assert_eq!(channel.loop_status(bound), LoopStatus::Synced(now));
        let long_ago = now.checked_sub(Duration::from_secs(31)).unwrap();
        channel.set_status(LoopStatus::Synced(long_ago));
        let LoopStatus::Failing(message) = channel.loop_status(bound) else {
            panic!("a silent loop looks healthy");
        };
        assert!(message.starts_with("no sync succeeded for 3"), "{message}");
    }
}
