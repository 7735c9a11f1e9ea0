//! Telegram channels ([`gatehouse_channels::telegram`] holds the Bot API client).
//!
//! - **Polling** (the default): one replica at a time holds the channel's lease and long-polls
//!   `getUpdates` from the offset kept in the store (the channel's cursor). The offset moves on
//!   only after every update it covers was judged, so a restart (kill -9 included) asks again
//!   for what it had not finished, and what was judged before finds its record and admits
//!   nothing; no update is skipped. A webhook left set on the bot is deleted first (the Bot API
//!   refuses to poll while one is set), and a `409` (another process polls the same bot) shows
//!   the channel `degraded` until it stops.
//! - **Webhook**: each replica sets the webhook (`setWebhook` with the secret token) at start,
//!   retrying with backoff until the Bot API takes it, and the inbound route
//!   (`POST /channels/{name}/inbound`) admits what the Bot API posts there, once its
//!   `X-Telegram-Bot-Api-Secret-Token` matches.
//! - **Typing.** While an admitted message's turn runs, the bot shows as typing in its chat.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_channels::secret::Secret;
use gatehouse_channels::telegram::BotIdentity;
use gatehouse_channels::telegram::Incoming;
use gatehouse_channels::telegram::TelegramClient;
use gatehouse_store::StoreError;
use tokio_util::sync::CancellationToken;

use super::Channel;
use super::FileSource;
use super::Inbound;
use super::InboundFile;
use super::LoopParts;
use super::LoopStatus;
use super::ReceiveParts;
use super::Received;
use super::StoreClock;
use super::polling::Step;

/// How often the typing indicator is renewed: Telegram shows it for 5 s.
const TYPING_EVERY: Duration = Duration::from_secs(4);

/// A Telegram channel's bot.
pub(crate) struct TelegramBot {
    /// Its client.
    pub(crate) client: TelegramClient,
    /// In webhook mode: where updates are posted, and the secret token they carry.
    pub(crate) webhook: Option<(url::Url, Secret)>,
    /// Its id and username, asked once (`getMe`).
    identity: tokio::sync::OnceCell<BotIdentity>,
    /// When each sender was last told that its share of turns is taken.
    busy: super::BusyNotices,
}

impl TelegramBot {
    pub(crate) fn new(client: TelegramClient, webhook: Option<(url::Url, Secret)>) -> Self {
        Self {
            client,
            webhook,
            identity: tokio::sync::OnceCell::new(),
            busy: super::BusyNotices::default(),
        }
    }

    /// The bot's id and username.
    ///
    /// # Errors
    /// `getMe` failed (the token is wrong, or the Bot API is unreachable).
    pub(crate) async fn identity(&self) -> Result<BotIdentity, String> {
        self.identity
            .get_or_try_init(|| self.client.get_me())
            .await
            .cloned()
            .map_err(|error| format!("cannot read the bot's account (getMe): {error}"))
    }
}

/// Starts every enabled Telegram channel: its poll loop, or its webhook's registration; each
/// runs until `shutdown`.
pub(crate) fn run_telegram_channels(parts: &LoopParts, shutdown: &CancellationToken) {
    for (index, channel) in parts.channels.all().iter().enumerate() {
        let Some(bot) = channel.telegram().filter(|_| channel.enabled()) else {
            continue;
        };
        match bot.webhook {
            None => tokio::spawn(poll_loop(parts.clone(), index, shutdown.child_token())),
            Some(_) => tokio::spawn(register_webhook(
                parts.clone(),
                index,
                shutdown.child_token(),
            )),
        };
    }
}

async fn poll_loop(parts: LoopParts, index: usize, shutdown: CancellationToken) {
    let channel = &parts.channels.all()[index];
    let Some(bot) = channel.telegram() else {
        return;
    };
    let clock = StoreClock::new(Arc::clone(&parts.store));
    let mut webhook_deleted = false;
    let mut pacing = super::polling::Pacing::default();
    loop {
        let step = tokio::select! {
            () = shutdown.cancelled() => return,
            step = poll_once(&parts, channel, bot, &clock, &mut webhook_deleted, &shutdown) => step,
        };
        if !pacing.after(channel, "telegram", step, &shutdown).await {
            return;
        }
    }
}

/// Takes the lease, polls once, judges each update, and stores the next offset.
async fn poll_once(
    parts: &LoopParts,
    channel: &Channel,
    bot: &TelegramBot,
    clock: &StoreClock,
    webhook_deleted: &mut bool,
    shutdown: &CancellationToken,
) -> Result<Step, String> {
    let name = &channel.spec.name;
    if !super::polling::hold(parts, clock, name).await? {
        return Ok(Step::Standby);
    }
    let me = bot.identity().await?;
    if !*webhook_deleted {
        bot.client
            .delete_webhook()
            .await
            .map_err(|error| format!("cannot delete the bot's webhook to poll: {error}"))?;
        *webhook_deleted = true;
    }
    let offset = match parts
        .store
        .channel_cursor(name)
        .await
        .map_err(|error| format!("cannot read the channel's offset: {error}"))?
    {
        Some(cursor) => Some(
            cursor
                .parse::<i64>()
                .map_err(|_| String::from("the channel's stored offset is not a number"))?,
        ),
        None => None,
    };
    let updates = bot
        .client
        .get_updates(offset, parts.lease / 3)
        .await
        .map_err(|error| match error {
            gatehouse_channels::telegram::TelegramError::Api { code: 409, .. } => format!(
                "{error} (another process polls this bot, or a webhook was set again: one bot token serves one Gatehouse channel)"
            ),
            other => other.to_string(),
        })?;
    let mut next = None;
    for update in updates {
        // Renewed before each update, so a long answer (files to fetch) never outlives the
        // lease; one lost stops here, and the holder judges the updates again.
        if !super::polling::hold(parts, clock, name).await? {
            return Ok(Step::Standby);
        }
        if let Some(incoming) = gatehouse_channels::telegram::interpret(&update, &me) {
            let receive = parts.receive();
            receive_update(&receive, channel, bot, incoming, shutdown)
                .await
                .map_err(|error| error.to_string())?;
        }
        next = Some(update.update_id.saturating_add(1));
    }
    let Some(next) = next else {
        return Ok(Step::Synced);
    };
    let stored = parts
        .store
        .set_channel_cursor(
            name,
            &parts.holder,
            &next.to_string(),
            super::polling::store_now(clock).await?,
        )
        .await
        .map_err(|error| format!("cannot store the channel's offset: {error}"))?;
    Ok(match stored {
        true => Step::Synced,
        false => Step::Standby,
    })
}

/// Sets the channel's webhook, retrying with backoff until the Bot API takes it.
async fn register_webhook(parts: LoopParts, index: usize, shutdown: CancellationToken) {
    let channel = &parts.channels.all()[index];
    let Some((bot, (url, secret))) = channel
        .telegram()
        .and_then(|bot| Some((bot, bot.webhook.as_ref()?)))
    else {
        return;
    };
    let mut failures: u32 = 0;
    loop {
        let registered = match bot.identity().await {
            Ok(_) => bot
                .client
                .set_webhook(url, secret)
                .await
                .map_err(|error| format!("cannot set the bot's webhook: {error}")),
            Err(error) => Err(error),
        };
        match registered {
            Ok(()) => {
                channel.set_status(LoopStatus::Registered);
                tracing::info!(channel = %channel.spec.name, "the Telegram webhook is set");
                return;
            }
            Err(message) => {
                failures = failures.saturating_add(1);
                tracing::warn!(channel = %channel.spec.name, error = %message, "cannot set a Telegram webhook");
                channel.set_status(LoopStatus::Failing(message));
            }
        }
        tokio::select! {
            () = shutdown.cancelled() => return,
            () = tokio::time::sleep(super::polling::backoff(failures)) => {}
        }
    }
}

/// Judges and admits one message the bot received (polled, or posted to the inbound route);
/// an admitted one shows the bot typing until its turn ends, and a sender whose share of turns
/// is taken is told so at most once a minute.
///
/// # Errors
/// The store's failure; nothing was admitted.
pub(crate) async fn receive_update(
    parts: &ReceiveParts<'_>,
    channel: &Channel,
    bot: &TelegramBot,
    incoming: Incoming,
    shutdown: &CancellationToken,
) -> Result<Received, StoreError> {
    let files = incoming
        .files
        .into_iter()
        .map(|file| InboundFile {
            name: file.name,
            mime_type: file.mime_type,
            source: FileSource::Telegram {
                client: bot.client.clone(),
                file_id: file.file_id,
                size: file.size,
            },
        })
        .collect();
    let chat = incoming.chat.clone();
    let thread = incoming.thread.clone();
    let inbound = Inbound {
        message_id: incoming.message_id.clone(),
        sender: incoming.sender,
        conversation: incoming.chat.clone(),
        group: incoming.group.then_some(incoming.chat),
        thread: incoming.thread,
        mentioned: incoming.mentioned,
        text: incoming.text,
        files,
    };
    let stream =
        (channel.spec.streaming == gatehouse_channels::config::Streaming::Edits).then(|| {
            Box::new(gatehouse_channels::telegram::TelegramStream {
                client: bot.client.clone(),
                chat: chat.clone(),
                in_reply_to: incoming.message_id,
                thread: thread.clone(),
            }) as Box<dyn gatehouse_channels::adapter::StreamSink>
        });
    let received =
        super::receive_live(parts, channel, inbound, stream, &bot.busy, shutdown).await?;
    if let Received::Admitted { turn_id, .. } = &received {
        let client = bot.client.clone();
        super::polling::keep_typing(
            parts.store,
            turn_id.clone(),
            TYPING_EVERY,
            shutdown.clone(),
            move |shown| {
                let (client, chat, thread) = (client.clone(), chat.clone(), thread.clone());
                async move {
                    if shown && let Err(error) = client.typing(&chat, thread.as_deref()).await {
                        tracing::debug!(error = %error, "cannot show typing");
                    }
                }
            },
        );
    }
    Ok(received)
}
