//! Slack channels ([`gatehouse_channels::slack`] holds the Web API client).
//!
//! - **Socket Mode** (an app-level token; no public URL): one replica at a time holds the
//!   channel's lease and keeps one WebSocket from `apps.connections.open`, renewing the lease a
//!   third of the way through it and dropping the socket when the lease is lost. Each envelope is
//!   acknowledged by its `envelope_id` as soon as it arrives, then judged; a `disconnect`
//!   message (Slack refreshes connections every few hours) opens a new connection at once, and a
//!   dropped one is opened again after a backoff, so exactly one socket is open while the
//!   channel runs (the previous one is closed before the next opens).
//! - **Events API** (a signing secret): Slack posts to `POST /channels/{name}/inbound`; the
//!   route checks the `v0` signature and its 5-minute window, answers the `url_verification`
//!   challenge, and judges an event within about 2 s; one that takes longer (files to fetch)
//!   goes on after the answer, as Slack's 3 s limit asks. A retried event (`X-Slack-Retry-Num`)
//!   carries the same message, whose id was recorded when first judged: it admits nothing.

use std::sync::Arc;
use std::time::Duration;

use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_channels::secret::Secret;
use gatehouse_channels::slack::BotIdentity;
use gatehouse_channels::slack::Incoming;
use gatehouse_channels::slack::SlackClient;
use gatehouse_channels::slack::SocketMessage;
use gatehouse_store::StoreError;
use tokio_tungstenite::tungstenite::Message;
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

/// How long a user's name is kept before `users.info` is asked again.
const NAME_TTL: Duration = Duration::from_secs(3600);

/// The most names kept; past it the cache starts over.
const MAX_NAMES: usize = 10_000;

/// The most mentions of one message written as names.
const MAX_NAMED_MENTIONS: usize = 10;

/// How long an event is judged before its envelope is acknowledged anyway (Slack allows 3 s).
const JUDGE_WITHIN: Duration = Duration::from_secs(2);

/// The longest a Socket Mode connection may take to open and say `hello`.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// A Slack channel's app.
pub(crate) struct SlackBot {
    /// Its client.
    pub(crate) client: SlackClient,
    /// Events API: the signing secret of Slack's requests; `None` in Socket Mode.
    pub(crate) signing_secret: Option<Secret>,
    /// Its bot user, asked once (`auth.test`).
    identity: tokio::sync::OnceCell<BotIdentity>,
    /// When each sender was last told that its share of turns is taken.
    busy: super::BusyNotices,
    /// Users' names from `users.info`, and when each was asked.
    names: parking_lot::Mutex<std::collections::HashMap<String, (String, std::time::Instant)>>,
}

impl SlackBot {
    pub(crate) fn new(client: SlackClient, signing_secret: Option<Secret>) -> Self {
        Self {
            client,
            signing_secret,
            identity: tokio::sync::OnceCell::new(),
            busy: super::BusyNotices::default(),
            names: parking_lot::Mutex::default(),
        }
    }

    /// The name `user` shows under, from the cache or `users.info`; `None` when Slack cannot
    /// say (the mention then stays as it is).
    async fn name(&self, user: &str) -> Option<String> {
        if let Some((name, at)) = self.names.lock().get(user)
            && at.elapsed() < NAME_TTL
        {
            return Some(name.clone());
        }
        match self.client.user_name(user).await {
            Ok(name) if !name.is_empty() => {
                let mut names = self.names.lock();
                if names.len() >= MAX_NAMES {
                    names.clear();
                }
                names.insert(user.to_owned(), (name.clone(), std::time::Instant::now()));
                Some(name)
            }
            Ok(_) => None,
            Err(error) => {
                tracing::debug!(error = %error, "cannot read a user's name");
                None
            }
        }
    }

    /// `text` with the users it mentions written by name.
    async fn named(&self, text: &str) -> String {
        let mut names = Vec::new();
        for user in gatehouse_channels::slack::mentioned_users(text, MAX_NAMED_MENTIONS) {
            if let Some(name) = self.name(&user).await {
                names.push((user, name));
            }
        }
        gatehouse_channels::slack::with_names(text, &names)
    }

    /// The bot's user id.
    ///
    /// # Errors
    /// `auth.test` failed (the token is wrong, or Slack is unreachable).
    pub(crate) async fn identity(&self) -> Result<BotIdentity, String> {
        self.identity
            .get_or_try_init(|| self.client.auth_test())
            .await
            .cloned()
            .map_err(|error| format!("cannot read the bot's identity (auth.test): {error}"))
    }
}

/// Starts the Socket Mode loop of every enabled Slack channel that uses it; each runs until
/// `shutdown`.
pub(crate) fn run_slack_channels(parts: &LoopParts, shutdown: &CancellationToken) {
    for (index, channel) in parts.channels.all().iter().enumerate() {
        if channel.enabled()
            && channel
                .slack()
                .is_some_and(|bot| bot.signing_secret.is_none())
        {
            tokio::spawn(socket_loop(parts.clone(), index, shutdown.child_token()));
        }
    }
}

async fn socket_loop(parts: LoopParts, index: usize, shutdown: CancellationToken) {
    let channel = &parts.channels.all()[index];
    let Some(bot) = channel.slack() else {
        return;
    };
    let clock = StoreClock::new(Arc::clone(&parts.store));
    let mut pacing = super::polling::Pacing::default();
    loop {
        let step = connect_once(&parts, index, bot, &clock, &shutdown).await;
        if !pacing.after(channel, "slack", step, &shutdown).await {
            return;
        }
    }
}

/// Takes the lease and runs one Socket Mode connection until Slack asks for a new one (a
/// poll's worth), it drops (an error), the lease is lost (standby) or `shutdown`.
async fn connect_once(
    parts: &LoopParts,
    index: usize,
    bot: &SlackBot,
    clock: &StoreClock,
    shutdown: &CancellationToken,
) -> Result<Step, String> {
    let channel = &parts.channels.all()[index];
    let name = &channel.spec.name;
    if !super::polling::hold(parts, clock, name).await? {
        return Ok(Step::Standby);
    }
    let me = bot.identity().await?;
    let url = bot
        .client
        .open_connection()
        .await
        .map_err(|error| format!("cannot open a Socket Mode connection: {error}"))?;
    let (mut socket, _) = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio_tungstenite::connect_async(url.as_str()),
    )
    .await
    .map_err(|_| String::from("the Socket Mode connection did not open in time"))?
    // The URL carries a ticket: the error is shown without it.
    .map_err(|error| {
        format!(
            "the Socket Mode connection failed: {}",
            socket_error(&error)
        )
    })?;
    let every = parts.lease / 3;
    let mut renew = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    let opened = std::time::Instant::now();
    let mut last_frame = std::time::Instant::now();
    let mut hello = false;
    let ended = loop {
        let message = tokio::select! {
            () = shutdown.cancelled() => break Ok(Step::Synced),
            _ = renew.tick() => {
                // A connection that never said hello, or fell silent for a whole lease (not
                // even a pong to the ping below), is dead however open it looks.
                if !hello && opened.elapsed() > CONNECT_TIMEOUT {
                    break Err(String::from("Slack never said hello on the Socket Mode connection"));
                }
                if last_frame.elapsed() > parts.lease {
                    break Err(format!(
                        "the Socket Mode connection was silent for {} s",
                        last_frame.elapsed().as_secs()
                    ));
                }
                match super::polling::hold(parts, clock, name).await {
                    Ok(true) => {
                        if let Err(error) = socket.send(Message::Ping(Default::default())).await {
                            break Err(format!("the Socket Mode connection broke: {}", socket_error(&error)));
                        }
                        if hello {
                            channel.set_status(LoopStatus::Synced(std::time::Instant::now()));
                        }
                        continue;
                    }
                    Ok(false) => break Ok(Step::Standby),
                    Err(error) => break Err(error),
                }
            }
            message = socket.next() => message,
        };
        last_frame = std::time::Instant::now();
        let text = match message {
            Some(Ok(Message::Text(text))) => text.to_string(),
            Some(Ok(Message::Close(_))) | None => {
                break Err(String::from("Slack closed the Socket Mode connection"));
            }
            Some(Ok(_)) => continue,
            Some(Err(error)) => {
                break Err(format!(
                    "the Socket Mode connection broke: {}",
                    socket_error(&error)
                ));
            }
        };
        let envelope = gatehouse_channels::slack::envelope_id(&text);
        match serde_json::from_str::<SocketMessage>(&text) {
            Ok(SocketMessage::Hello) => {
                hello = true;
                channel.set_status(LoopStatus::Synced(std::time::Instant::now()));
            }
            Ok(SocketMessage::Disconnect { reason }) => {
                tracing::info!(channel = %name, reason = reason.as_deref().unwrap_or("unknown"), "Slack asked for a new Socket Mode connection");
                break Ok(Step::Synced);
            }
            Ok(SocketMessage::EventsApi { payload, .. }) => {
                // Judged before it is acknowledged: an envelope this replica cannot judge (its
                // lease lost, the store failing) is not acknowledged, and Slack sends it again.
                // One that takes longer than Slack's 3 s allow (files) is acknowledged while
                // it goes on.
                if !super::polling::hold(parts, clock, name).await? {
                    break Ok(Step::Standby);
                }
                let incoming = payload.event_for(&me).and_then(|event| {
                    gatehouse_channels::slack::interpret(&event, &me, channel.spec.require_mention)
                });
                if let Some(incoming) = incoming {
                    let task_parts = parts.clone();
                    let task_shutdown = shutdown.clone();
                    let judging = tokio::spawn(async move {
                        let channel = &task_parts.channels.all()[index];
                        let Some(bot) = channel.slack() else {
                            return Ok(());
                        };
                        receive_event(
                            &task_parts.receive(),
                            channel,
                            bot,
                            incoming,
                            &task_shutdown,
                        )
                        .await
                        .map(|_| ())
                    });
                    if let Some(Err(error)) = super::judged_within(judging, JUDGE_WITHIN).await {
                        tracing::warn!(channel = %name, error = %error, "cannot judge a Slack event; not acknowledged, so Slack sends it again");
                        continue;
                    }
                }
            }
            Ok(SocketMessage::Other) => {}
            Err(error) => {
                tracing::debug!(channel = %name, error = %error, "skipped a Socket Mode message this build does not read");
            }
        }
        if let Some(envelope_id) = envelope {
            let ack = serde_json::json!({"envelope_id": envelope_id}).to_string();
            if let Err(error) = socket.send(Message::text(ack)).await {
                break Err(format!(
                    "cannot acknowledge an envelope: {}",
                    socket_error(&error)
                ));
            }
        }
    };
    // The socket is closed before another may open.
    let _ = socket.close(None).await;
    ended
}

/// A WebSocket error without the URL it may name.
fn socket_error(error: &tokio_tungstenite::tungstenite::Error) -> String {
    use tokio_tungstenite::tungstenite::Error;
    match error {
        Error::Http(response) => format!("HTTP {}", response.status()),
        Error::Url(_) => String::from("the connection URL is not usable"),
        other => other.to_string(),
    }
}

/// Judges and admits one message the app received (by Socket Mode, or posted to the inbound
/// route); an admitted one streams its reply when the channel streams, and a sender whose
/// share of turns is taken is told so at most once a minute.
///
/// # Errors
/// The store's failure; nothing was admitted.
pub(crate) async fn receive_event(
    parts: &ReceiveParts<'_>,
    channel: &Channel,
    bot: &SlackBot,
    incoming: Incoming,
    shutdown: &CancellationToken,
) -> Result<Received, StoreError> {
    let files = incoming
        .files
        .into_iter()
        .map(|file| InboundFile {
            name: file.name.clone().unwrap_or_else(|| String::from("file")),
            mime_type: file
                .mimetype
                .clone()
                .unwrap_or_else(|| gatehouse_channels::files::OCTET_STREAM.to_owned()),
            source: FileSource::Slack {
                client: bot.client.clone(),
                file,
            },
        })
        .collect();
    let stream =
        (channel.spec.streaming == gatehouse_channels::config::Streaming::Edits).then(|| {
            Box::new(gatehouse_channels::slack::SlackStream {
                client: bot.client.clone(),
                channel: incoming.channel.clone(),
                thread: incoming.thread.clone(),
            }) as Box<dyn gatehouse_channels::adapter::StreamSink>
        });
    let inbound = Inbound {
        message_id: incoming.message_id,
        sender: incoming.sender,
        conversation: incoming.channel.clone(),
        group: incoming.group.then_some(incoming.channel),
        thread: incoming.thread,
        mentioned: incoming.mentioned,
        text: bot.named(&incoming.text).await,
        files,
    };
    super::receive_live(parts, channel, inbound, stream, &bot.busy, shutdown).await
}
