//! The Matrix side of `gatehouse bench channel`: a Matrix channel in the bench's Gateway, on a
//! homeserver the operator names, written to by a second account of that homeserver.
//!
//! The homeserver is infrastructure the bench cannot install, so it takes its base URL and the
//! access tokens of two accounts, each named by an environment variable or a file (never put
//! on argv): the bot, which the Gateway's channel runs as (`dm-policy = "open"`), and the
//! sender, which opens a direct chat with the bot (the Gateway joins it, as its policy says)
//! and a room of its own.
//!
//! Each iteration measures two things, alternately with the webhook message and the API turn:
//! - **the channel round trip**: the sender's `PUT /rooms/{room}/send/m.room.message/{txn}` of
//!   `/say hi` to the bot's reply arriving in the sender's own `/sync` long poll;
//! - **the homeserver round trip**: the sender's `PUT` of a message to its own room to that
//!   message arriving in the same `/sync` long poll.
//!
//! The channel round trip contains two homeserver round trips (the message reaching the
//! Gateway's `/sync`, the reply reaching the sender's); the report prints both figures and the
//! channel's own share, each channel round trip less twice the homeserver's p50, against the
//! API turn.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use anyhow::Context;
use gatehouse_channels::config::ChannelSpec;
use gatehouse_channels::matrix::BotIdentity;
use gatehouse_channels::matrix::Input;
use gatehouse_channels::matrix::MatrixClient;
use gatehouse_channels::matrix::MatrixError;
use gatehouse_channels::matrix::SyncAnswer;
use gatehouse_channels::secret::CredentialRef;
use gatehouse_channels::secret::Secret;
use gatehouse_channels::setup::ChannelSetup;
use gatehouse_channels::setup::KindSetup;
use tokio::sync::mpsc;

use crate::bench::stats::Row;
use crate::bench::stats::Stats;
use crate::bench::stats::human;
use crate::exit::UsageError;

/// The Matrix channel's configuration: anyone may write, as the sender is any account.
const CHANNEL_TOML: &str = "name = \"bench-matrix\"\nkind = \"matrix\"\ndm-policy = \"open\"\n";

/// How long the sender's `/sync` is held open by the homeserver.
const SYNC_POLL: Duration = Duration::from_secs(30);

/// How long the bench waits for the bot to join, for a reply, or for a message's echo.
const WAIT: Duration = Duration::from_secs(60);

/// How many homeserver round trips a channel round trip contains.
const HOMESERVER_TRIPS: u32 = 2;

/// The Matrix options of `gatehouse bench channel`.
#[derive(Debug, clap::Args)]
pub(super) struct MatrixArgs {
    /// Also measure a Matrix channel on this homeserver (the base URL of its client API, e.g.
    /// `https://matrix.example.org`), with the tokens of two accounts on it: the bot and the
    /// sender.
    #[arg(long, value_name = "URL")]
    matrix_homeserver: Option<url::Url>,
    /// The environment variable holding the access token of the bot, the account the
    /// Gateway's Matrix channel runs as.
    #[arg(long, value_name = "NAME", requires = "matrix_homeserver")]
    matrix_bot_token_env: Option<String>,
    /// The file holding the bot's access token (one line).
    #[arg(long, value_name = "PATH", requires = "matrix_homeserver")]
    matrix_bot_token_file: Option<PathBuf>,
    /// The environment variable holding the access token of the sender, another account that
    /// writes to the bot.
    #[arg(long, value_name = "NAME", requires = "matrix_homeserver")]
    matrix_sender_token_env: Option<String>,
    /// The file holding the sender's access token (one line).
    #[arg(long, value_name = "PATH", requires = "matrix_homeserver")]
    matrix_sender_token_file: Option<PathBuf>,
}

/// The homeserver and the two accounts' tokens, read.
pub(super) struct Accounts {
    homeserver: url::Url,
    bot_token: Secret,
    sender_token: Secret,
}

impl MatrixArgs {
    /// Reads the tokens the options name; `None` without `--matrix-homeserver`.
    ///
    /// # Errors
    /// A [`UsageError`]: a homeserver that is not an `http` or `https` URL, a token named both
    /// ways or not at all, or one that cannot be read.
    pub(super) fn accounts(&self) -> anyhow::Result<Option<Accounts>> {
        let Some(homeserver) = &self.matrix_homeserver else {
            return Ok(None);
        };
        if !matches!(homeserver.scheme(), "http" | "https") || homeserver.host().is_none() {
            return Err(UsageError::new(
                "--matrix-homeserver takes the http or https base URL of the homeserver's client API",
            )
            .into());
        }
        Ok(Some(Accounts {
            homeserver: homeserver.clone(),
            bot_token: token(
                "--matrix-bot-token",
                self.matrix_bot_token_env.as_deref(),
                self.matrix_bot_token_file.as_deref(),
            )?,
            sender_token: token(
                "--matrix-sender-token",
                self.matrix_sender_token_env.as_deref(),
                self.matrix_sender_token_file.as_deref(),
            )?,
        }))
    }
}

/// Reads the token that `{option}-env` or `{option}-file` names, as a channel's credential is
/// read (a relative file is taken from the current directory).
fn token(option: &str, env: Option<&str>, file: Option<&Path>) -> Result<Secret, UsageError> {
    let file = file
        .map(std::path::absolute)
        .transpose()
        .map_err(|error| UsageError::new(format!("{option}-file: {error}")))?;
    let credential = CredentialRef::from_keys(env, file.as_deref())
        .map_err(|message| UsageError::new(format!("{option}-env or {option}-file: {message}")))?;
    credential
        .resolve()
        .map_err(|error| UsageError::new(format!("{option}-env or {option}-file: {error}")))
}

/// The two accounts, with the user id each token belongs to.
pub(super) struct Matrix {
    homeserver: url::Url,
    bot: MatrixClient,
    bot_token: Secret,
    bot_id: String,
    sender: MatrixClient,
    sender_id: String,
}

impl Matrix {
    /// Asks the homeserver whose each token is (`/account/whoami`).
    ///
    /// # Errors
    /// The homeserver does not answer, refuses a token, or both tokens are one account's.
    pub(super) async fn identify(accounts: Accounts) -> anyhow::Result<Self> {
        let bot = MatrixClient::new(accounts.homeserver.clone(), accounts.bot_token.clone())?;
        let sender = MatrixClient::new(accounts.homeserver.clone(), accounts.sender_token)?;
        let bot_id = bot
            .whoami()
            .await
            .map_err(|error| anyhow::anyhow!("the bot's token: {error}"))?;
        let sender_id = sender
            .whoami()
            .await
            .map_err(|error| anyhow::anyhow!("the sender's token: {error}"))?;
        anyhow::ensure!(
            bot_id != sender_id,
            "the bot's and the sender's tokens both belong to {bot_id}: give two accounts"
        );
        Ok(Self {
            homeserver: accounts.homeserver,
            bot,
            bot_token: accounts.bot_token,
            bot_id,
            sender,
            sender_id,
        })
    }

    /// The Matrix channel the bench's Gateway runs, as the bot.
    ///
    /// # Errors
    /// Never in practice: the fixed part of its configuration is parsed.
    pub(super) fn channel(&self) -> anyhow::Result<ChannelSetup> {
        let mut spec: ChannelSpec = toml::from_str(CHANNEL_TOML)?;
        spec.homeserver = Some(self.homeserver.to_string());
        spec.user_id = Some(self.bot_id.clone());
        Ok(ChannelSetup {
            spec,
            kind: Some(KindSetup::Matrix {
                homeserver: self.homeserver.clone(),
                user_id: self.bot_id.clone(),
                access_token: self.bot_token.clone(),
            }),
        })
    }

    /// Once the Gateway runs: starts following the sender's `/sync`, opens a direct chat with
    /// the bot and a room of the sender's own, and waits until the bot joined the chat.
    ///
    /// # Errors
    /// A request fails, or the bot does not join within [`WAIT`].
    pub(super) async fn open(&self) -> anyhow::Result<Conversation<'_>> {
        let first = self
            .sender
            .sync(None, Duration::ZERO)
            .await
            .context("the sender's first /sync")?;
        let (answers, sync) = follow(self.sender.clone(), first.next_batch().to_owned());
        let direct = self
            .sender
            .create_room(&[&self.bot_id], true)
            .await
            .context("creating the sender's direct chat with the bot")?;
        let own = self
            .sender
            .create_room(&[], false)
            .await
            .context("creating the sender's own room")?;
        let deadline = Instant::now() + WAIT;
        while self
            .sender
            .joined_member_count(&direct)
            .await
            .context("counting the direct chat's members")?
            < 2
        {
            anyhow::ensure!(
                Instant::now() < deadline,
                "the bot {} did not join the direct chat within {WAIT:?}",
                self.bot_id
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(Conversation {
            matrix: self,
            run: gatehouse_gateway::random_token()?,
            direct,
            own,
            answers,
            sync,
        })
    }
}

/// One answer of the sender's `/sync` and when it arrived, or why the sync stopped.
type Synced = Result<(SyncAnswer, Instant), MatrixError>;

/// Long-polls `client`'s `/sync` from `since` until the receiver is dropped or a sync fails,
/// passing on every answer with the instant it arrived.
fn follow(
    client: MatrixClient,
    mut since: String,
) -> (mpsc::UnboundedReceiver<Synced>, tokio::task::JoinHandle<()>) {
    let (sender, answers) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        loop {
            let answer = client.sync(Some(&since), SYNC_POLL).await;
            let arrived = Instant::now();
            let stop = answer.is_err();
            if let Ok(answer) = &answer {
                answer.next_batch().clone_into(&mut since);
            }
            if sender.send(answer.map(|answer| (answer, arrived))).is_err() || stop {
                return;
            }
        }
    });
    (answers, task)
}

/// The rooms of one run and the sender's `/sync`.
pub(super) struct Conversation<'a> {
    matrix: &'a Matrix,
    /// Makes the transaction ids of this run new to the homeserver.
    run: String,
    /// The direct chat with the bot.
    direct: String,
    /// The sender's own room, which the bot is not in.
    own: String,
    answers: mpsc::UnboundedReceiver<Synced>,
    sync: tokio::task::JoinHandle<()>,
}

impl Conversation<'_> {
    /// Measures iteration `index`: a channel round trip, then a homeserver round trip.
    ///
    /// # Errors
    /// A request fails, or the reply or the echo does not come within [`WAIT`].
    pub(super) async fn measure(&mut self, index: usize) -> anyhow::Result<(Duration, Duration)> {
        let channel = self.round_trip(index).await?;
        let homeserver = self.homeserver_trip(index).await?;
        Ok((channel, homeserver))
    }

    /// Sends `/say hi` to the direct chat and returns the time until the bot's reply arrived in
    /// the sender's `/sync`.
    async fn round_trip(&mut self, index: usize) -> anyhow::Result<Duration> {
        self.drain()?;
        let started = Instant::now();
        let txn = format!("gatehouse-bench-{}-{index}-channel", self.run);
        self.matrix
            .sender
            .send_text(&self.direct, &txn, "/say hi")
            .await
            .context("sending to the direct chat")?;
        // Read as the sender, the answer's messages are the others'.
        let reader = BotIdentity {
            user_id: self.matrix.sender_id.clone(),
            display_name: None,
        };
        let (direct, bot) = (&self.direct, &self.matrix.bot_id);
        let arrived = wait(&mut self.answers, "the bot's reply", |answer| {
            gatehouse_channels::matrix::interpret(answer, &reader)
                .iter()
                .any(|input| {
                    matches!(input, Input::Message { room, sender, .. }
                        if room == direct && sender == bot)
                })
        })
        .await?;
        Ok(arrived.saturating_duration_since(started))
    }

    /// Sends a message to the sender's own room and returns the time until it arrived in the
    /// sender's `/sync`.
    async fn homeserver_trip(&mut self, index: usize) -> anyhow::Result<Duration> {
        self.drain()?;
        let started = Instant::now();
        let txn = format!("gatehouse-bench-{}-{index}-homeserver", self.run);
        let sent = self
            .matrix
            .sender
            .send_text(&self.own, &txn, &format!("homeserver round trip {index}"))
            .await
            .context("sending to the sender's own room")?;
        // Read as anyone else, the answer's messages include the sender's own.
        let reader = BotIdentity {
            user_id: self.matrix.bot_id.clone(),
            display_name: None,
        };
        let arrived = wait(&mut self.answers, "the sender's own message", |answer| {
            gatehouse_channels::matrix::interpret(answer, &reader)
                .iter()
                .any(|input| matches!(input, Input::Message { event_id, .. } if *event_id == sent))
        })
        .await?;
        Ok(arrived.saturating_duration_since(started))
    }

    /// Drops the answers that arrived before a measurement starts.
    fn drain(&mut self) -> anyhow::Result<()> {
        while let Ok(synced) = self.answers.try_recv() {
            synced.map_err(|error| anyhow::anyhow!("the sender's /sync failed: {error}"))?;
        }
        Ok(())
    }

    /// After the Gateway stopped: stops the sender's `/sync`, and the bot and the sender leave
    /// the rooms of the run, so that the accounts do not gather rooms across runs. A room that
    /// cannot be left stays; the figures stand either way.
    pub(super) async fn close(self) {
        self.sync.abort();
        let _ = self.matrix.bot.leave(&self.direct).await;
        let _ = self.matrix.sender.leave(&self.direct).await;
        let _ = self.matrix.sender.leave(&self.own).await;
    }
}

/// Returns when the first answer of `answers` that `found` accepts arrived.
async fn wait(
    answers: &mut mpsc::UnboundedReceiver<Synced>,
    what: &str,
    found: impl Fn(&SyncAnswer) -> bool,
) -> anyhow::Result<Instant> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match tokio::time::timeout_at(deadline, answers.recv()).await {
            Ok(Some(Ok((answer, arrived)))) if found(&answer) => return Ok(arrived),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(error))) => anyhow::bail!("the sender's /sync failed: {error}"),
            Ok(None) => anyhow::bail!("the sender's /sync stopped"),
            Err(_) => anyhow::bail!("{what} did not arrive in the sender's /sync within {WAIT:?}"),
        }
    }
}

/// The Matrix figures of the measured iterations.
pub(super) struct Samples {
    channel: Vec<Duration>,
    homeserver: Vec<Duration>,
}

impl Samples {
    /// No samples yet, room for `iterations`.
    pub(super) fn with_capacity(iterations: usize) -> Self {
        Self {
            channel: Vec::with_capacity(iterations),
            homeserver: Vec::with_capacity(iterations),
        }
    }

    /// Adds an iteration's channel and homeserver round trips, when there is one.
    pub(super) fn extend(&mut self, sample: Option<(Duration, Duration)>) {
        if let Some((channel, homeserver)) = sample {
            self.channel.push(channel);
            self.homeserver.push(homeserver);
        }
    }

    /// The rows and notes of the Matrix figures against `api`, the API turn named
    /// `baseline_name`: the channel round trip, the homeserver round trip, and the channel
    /// round trip less the homeserver round trips it contains.
    pub(super) fn report(mut self, baseline_name: &str, api: Stats) -> (Vec<Row>, Vec<String>) {
        let channel = Stats::from_samples(&mut self.channel);
        let homeserver = Stats::from_samples(&mut self.homeserver);
        let contained = homeserver.p50 * HOMESERVER_TRIPS;
        let mut own: Vec<Duration> = self
            .channel
            .iter()
            .map(|trip| trip.saturating_sub(contained))
            .collect();
        let own = Stats::from_samples(&mut own);
        let row = |case: &str, candidate: Stats, target: &str| Row {
            case: case.to_owned(),
            baseline_name: baseline_name.to_owned(),
            baseline: api,
            candidate,
            target: target.to_owned(),
        };
        let rows = vec![
            row(
                "Matrix message to reply in /sync",
                channel,
                "contains 2 homeserver trips",
            ),
            row(
                "homeserver trip: send to /sync",
                homeserver,
                "reported separately",
            ),
            row("Matrix less 2 homeserver trips", own, "ratio <= 1.50x"),
        ];
        let notes = vec![format!(
            "Matrix: from the sender's PUT of /say hi to the bot's reply in the sender's /sync long poll; it contains {HOMESERVER_TRIPS} homeserver trips (the message reaching the Gateway's /sync, the reply reaching the sender's), each measured as a message the sender PUTs to a room of its own until its /sync returns it (p50 {}); the last row is each channel trip less {HOMESERVER_TRIPS} x that p50 ({})",
            human(homeserver.p50),
            human(contained),
        )];
        (rows, notes)
    }
}
