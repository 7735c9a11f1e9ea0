//! `gatehouse bench channel`: a message through a signed `webhook` channel, from its inbound
//! POST to the signed reply POSTed back to a receiver on loopback, in embedded mode with the
//! mock model; the baseline is an API turn of the same text (the POST to the turn's end),
//! measured alternately in the same run. The ratio is the channel layer's cost: the signature
//! check, the access decision, admission with the platform's message id, the reply written to
//! the outbox as the turn ends, and the deliverer's signed POST. A platform's own round trips
//! come on top: given a Matrix homeserver and two accounts on it (`--matrix-*`), the bench also
//! runs a Matrix channel in the same Gateway and measures them apart ([`matrix`]).

mod matrix;

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::channels::WebhookDelivery;
use gatehouse_channels::config::ChannelSpec;
use gatehouse_channels::secret::Secret;
use gatehouse_channels::setup::ChannelSetup;
use gatehouse_channels::setup::KindSetup;
use tokio::sync::mpsc;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::Stats;

/// Arguments of `gatehouse bench channel`.
#[derive(Debug, clap::Args)]
pub(crate) struct ChannelArgs {
    /// Messages of each side (a channel message and an API turn, alternately).
    #[arg(long, default_value_t = 100)]
    iterations: usize,
    #[command(flatten)]
    matrix: matrix::MatrixArgs,
}

/// The channel's configuration: anyone may write, as a benchmark's sender is unknown.
const CHANNEL_TOML: &str = "name = \"bench\"\nkind = \"webhook\"\ndm-policy = \"open\"\n";

/// Runs the benchmark.
pub(crate) fn run(args: &ChannelArgs) -> anyhow::Result<Report> {
    let accounts = args.matrix.accounts()?;
    crate::signals::runtime()?.block_on(measure(args, accounts))
}

/// Starts the reply receiver on loopback: every reply's `inReplyTo` goes to the returned
/// channel with the instant it arrived.
async fn receiver() -> anyhow::Result<(url::Url, mpsc::UnboundedReceiver<(String, Instant)>)> {
    let (sender, replies) = mpsc::unbounded_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = url::Url::parse(&format!("http://{}/replies", listener.local_addr()?))?;
    let app = axum::Router::new().route(
        "/replies",
        axum::routing::post(move |body: axum::body::Bytes| {
            let sender = sender.clone();
            async move {
                let arrived = Instant::now();
                if let Ok(reply) = serde_json::from_slice::<WebhookDelivery>(&body) {
                    let _ = sender.send((reply.in_reply_to.unwrap_or_default(), arrived));
                }
                axum::http::StatusCode::OK
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, replies))
}

async fn measure(args: &ChannelArgs, accounts: Option<matrix::Accounts>) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let (reply_url, mut replies) = receiver().await?;
    let secret = Secret::new(gatehouse_gateway::random_token()?);
    let spec: ChannelSpec = toml::from_str(CHANNEL_TOML)?;
    let mut config = crate::bench::gateway_config(base.join("gateway"))?;
    config.channels = vec![ChannelSetup {
        spec,
        kind: Some(KindSetup::Webhook {
            reply_url,
            secret: secret.clone(),
        }),
    }];
    let accounts = match accounts {
        Some(accounts) => Some(matrix::Matrix::identify(accounts).await?),
        None => None,
    };
    if let Some(accounts) = &accounts {
        config.channels.push(accounts.channel()?);
    }
    let embedded = crate::bench::MockEmbedded::start(config, &base.join("harness"), 4).await?;
    let url = format!("http://{}", embedded.running.local_addr);
    let http = reqwest::Client::new();
    let inbound = format!("{url}/channels/bench/inbound");
    let secret = Arc::new(secret);
    let mut conversation = match &accounts {
        Some(accounts) => Some(accounts.open().await?),
        None => None,
    };
    let mut channel = Vec::with_capacity(args.iterations);
    let mut api = Vec::with_capacity(args.iterations);
    let mut through_matrix = matrix::Samples::with_capacity(args.iterations);
    // One warm-up of each side starts the sessions' workers.
    for index in 0..=args.iterations {
        let through_channel =
            channel_message(&http, &inbound, &secret, &mut replies, index).await?;
        let through_api =
            crate::bench::turn::turn(&embedded.client, "bench-api", "/say hi").await?;
        let matrix_sample = match &mut conversation {
            Some(conversation) => Some(conversation.measure(index).await?),
            None => None,
        };
        if index > 0 {
            channel.push(through_channel);
            api.push(through_api);
            through_matrix.extend(matrix_sample);
        }
    }
    embedded.stop().await;
    if let Some(conversation) = conversation {
        conversation.close().await;
    }
    let api = Stats::from_samples(&mut api);
    let mut rows = vec![Row {
        case: String::from("webhook message to reply POSTed"),
        baseline_name: String::from("API turn, POST to turn end"),
        baseline: api,
        candidate: Stats::from_samples(&mut channel),
        target: String::from("ratio <= 1.50x"),
    }];
    let mut notes = vec![String::from(
        "both sides run /say hi on a warm worker; a platform's own round trips (a Matrix homeserver's sync and send) come on top of the webhook's figure",
    )];
    let title = match accounts {
        Some(_) => {
            let (matrix_rows, matrix_notes) = through_matrix.report(&rows[0].baseline_name, api);
            rows.extend(matrix_rows);
            notes.extend(matrix_notes);
            "gatehouse bench channel: a signed webhook message to its signed reply and a Matrix message to its reply in the sender's /sync, against an API turn, embedded mode with the mock model"
        }
        None => {
            "gatehouse bench channel: a signed webhook message to its signed reply, against an API turn, embedded mode with the mock model"
        }
    };
    Ok(Report {
        title: String::from(title),
        rows,
        notes,
    })
}

/// Sends message `index` through the channel and returns the time until its reply arrived.
async fn channel_message(
    http: &reqwest::Client,
    inbound: &str,
    secret: &Secret,
    replies: &mut mpsc::UnboundedReceiver<(String, Instant)>,
    index: usize,
) -> anyhow::Result<Duration> {
    let message_id = format!("bench-{index}");
    let body = serde_json::to_vec(&gatehouse_api::channels::WebhookMessage {
        message_id: message_id.clone(),
        sender: String::from("bench-user"),
        conversation: None,
        text: String::from("/say hi"),
        attachments: Vec::new(),
    })?;
    let started = Instant::now();
    let timestamp = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs(),
    )?;
    let answer = http
        .post(inbound)
        .header("content-type", "application/json")
        .header(
            gatehouse_channels::webhook::TIMESTAMP_HEADER,
            timestamp.to_string(),
        )
        .header(
            gatehouse_channels::webhook::SIGNATURE_HEADER,
            gatehouse_channels::webhook::sign(secret, timestamp, &body),
        )
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(
        answer.status() == reqwest::StatusCode::ACCEPTED,
        "the channel answered {}: {}",
        answer.status(),
        answer.text().await.unwrap_or_default()
    );
    loop {
        let next = tokio::time::timeout(Duration::from_secs(30), replies.recv()).await;
        match next {
            Ok(Some((in_reply_to, arrived))) if in_reply_to == message_id => {
                return Ok(arrived.saturating_duration_since(started));
            }
            Ok(Some(_)) => {}
            Ok(None) | Err(_) => anyhow::bail!("no reply to {message_id} within 30 s"),
        }
    }
}
