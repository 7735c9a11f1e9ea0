//! `gatehouse bench channel`: a message through a signed `webhook` channel, from its inbound
//! POST to the signed reply POSTed back to a receiver on loopback, in embedded mode with the
//! mock model; the baseline is an API turn of the same text (the POST to the turn's end),
//! measured alternately in the same run. The ratio is the channel layer's cost: the signature
//! check, the access decision, admission with the platform's message id, the reply written to
//! the outbox as the turn ends, and the deliverer's signed POST. A platform's own round trips
//! (a homeserver's sync and send) come on top and are not measured here.

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
}

/// The channel's configuration: anyone may write, as a benchmark's sender is unknown.
const CHANNEL_TOML: &str = "name = \"bench\"\nkind = \"webhook\"\ndm-policy = \"open\"\n";

/// Runs the benchmark.
pub(crate) fn run(args: &ChannelArgs) -> anyhow::Result<Report> {
    crate::signals::runtime()?.block_on(measure(args))
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

async fn measure(args: &ChannelArgs) -> anyhow::Result<Report> {
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
    let embedded = crate::bench::MockEmbedded::start(config, &base.join("harness"), 4).await?;
    let url = format!("http://{}", embedded.running.local_addr);
    let http = reqwest::Client::new();
    let inbound = format!("{url}/channels/bench/inbound");
    let secret = Arc::new(secret);
    let mut channel = Vec::with_capacity(args.iterations);
    let mut api = Vec::with_capacity(args.iterations);
    // One warm-up of each side starts the sessions' workers.
    for index in 0..=args.iterations {
        let through_channel =
            channel_message(&http, &inbound, &secret, &mut replies, index).await?;
        let through_api =
            crate::bench::turn::turn(&embedded.client, "bench-api", "/say hi").await?;
        if index > 0 {
            channel.push(through_channel);
            api.push(through_api);
        }
    }
    embedded.stop().await;
    Ok(Report {
        title: String::from(
            "gatehouse bench channel: a signed webhook message to its signed reply, against an API turn, embedded mode with the mock model",
        ),
        rows: vec![Row {
            case: String::from("webhook message to reply POSTed"),
            baseline_name: String::from("API turn, POST to turn end"),
            baseline: Stats::from_samples(&mut api),
            candidate: Stats::from_samples(&mut channel),
            target: String::from("ratio <= 1.50x"),
        }],
        notes: vec![String::from(
            "both sides run /say hi on a warm worker; a platform's own round trips (a Matrix homeserver's sync and send) come on top of the channel's figure",
        )],
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
