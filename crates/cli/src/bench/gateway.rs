//! `gatehouse bench gateway`: the cost of admitting a message (HTTP request → durable commit of
//! the user message and its turn → 202), against a bare SQLite insert of the same row with the
//! same durability settings, in the same run.

use gatehouse_protocol::error::ErrorCode;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::client::Client;
use gatehouse_api::sessions::MessageParams;
use gatehouse_gateway::GatewayConfig;
use gatehouse_gateway::TurnFailure;
use gatehouse_gateway::TurnInput;
use gatehouse_gateway::TurnRuntime;
use gatehouse_gateway::TurnSink;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::sqlite::SqliteJournalMode;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::sqlite::SqliteSynchronous;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::Stats;

/// Arguments of `gatehouse bench gateway`.
#[derive(Debug, clap::Args)]
pub(crate) struct GatewayBenchArgs {
    /// Messages admitted one after another, for the latency figures.
    #[arg(long, default_value_t = 500)]
    sequential: usize,
    /// Concurrent clients for the throughput figure.
    #[arg(long, default_value_t = 64)]
    clients: usize,
    /// Messages per concurrent client.
    #[arg(long, default_value_t = 20)]
    per_client: usize,
}

/// A runtime whose turns wait until they are cancelled, so that only admission is measured:
/// each session's first turn parks and later messages queue behind it.
struct ParkedRuntime;

#[async_trait::async_trait]
impl TurnRuntime for ParkedRuntime {
    fn name(&self) -> &str {
        "parked"
    }

    fn supports_steer(&self) -> bool {
        false
    }

    async fn run_turn(&self, input: TurnInput, _sink: TurnSink) -> Result<String, TurnFailure> {
        input.cancel.cancelled().await;
        Err(TurnFailure::new(ErrorCode::Aborted, "benchmark over"))
    }
}

/// Runs the benchmark.
pub(crate) fn run(args: &GatewayBenchArgs) -> anyhow::Result<Report> {
    crate::signals::runtime()?.block_on(measure(args))
}

async fn measure(args: &GatewayBenchArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let mut config = GatewayConfig::with_defaults(base.join("gateway"), "127.0.0.1:0".parse()?);
    config.operator_token_override = Some(String::from(crate::bench::turn::BENCH_TOKEN));
    let extensions = gatehouse_gateway::Extensions {
        runtime: Some(Arc::new(ParkedRuntime)),
        ..gatehouse_gateway::Extensions::default()
    };
    let running = gatehouse_gateway::start(config, extensions).await?;
    let url = format!("http://{}", running.local_addr);
    let client = Client::new(&url, crate::bench::turn::BENCH_TOKEN);
    let baseline = Baseline::open(&base.join("baseline.db")).await?;

    // Latency: one client, one message at a time.
    let mut admit = Vec::with_capacity(args.sequential);
    let mut insert = Vec::with_capacity(args.sequential);
    for index in 0..args.sequential {
        let started = Instant::now();
        post(&client, "latency", index).await?;
        admit.push(started.elapsed());
        let started = Instant::now();
        baseline.insert("latency", index).await?;
        insert.push(started.elapsed());
    }
    let latency = Row {
        case: String::from("admit one message (p50/p99)"),
        baseline_name: String::from("bare sqlite insert"),
        baseline: Stats::from_samples(&mut insert),
        candidate: Stats::from_samples(&mut admit),
        target: String::from("informational"),
    };

    // Throughput: many clients at once, each in its own session.
    let admitted_rate = concurrent(args, |client_index, message| {
        let client = client.clone();
        async move { post(&client, &format!("c{client_index}"), message).await }
    })
    .await?;
    let baseline = Arc::new(baseline);
    let inserted_rate = concurrent(args, |client_index, message| {
        let baseline = Arc::clone(&baseline);
        async move { baseline.insert(&format!("c{client_index}"), message).await }
    })
    .await?;
    running.shutdown.cancel();
    let _ = running.wait().await;
    Ok(Report {
        title: String::from(
            "gatehouse bench gateway: message admission (HTTP -> durable commit -> 202) vs a bare SQLite insert",
        ),
        rows: vec![latency],
        notes: vec![
            format!(
                "{} clients x {} messages: {admitted_rate:.0} messages/s admitted, {inserted_rate:.0} inserts/s bare, ratio {:.2}",
                args.clients,
                args.per_client,
                admitted_rate / inserted_rate
            ),
            String::from(
                "both use SQLite in WAL mode with synchronous=FULL; admission also writes the turn, the queued event and the session row",
            ),
        ],
    })
}

async fn concurrent<F, Fut>(args: &GatewayBenchArgs, work: F) -> anyhow::Result<f64>
where
    F: Fn(usize, usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(args.clients);
    for client_index in 0..args.clients {
        let jobs: Vec<Fut> = (0..args.per_client)
            .map(|message| work(client_index, message))
            .collect();
        tasks.push(tokio::spawn(async move {
            for job in jobs {
                job.await?;
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let total = (args.clients * args.per_client) as f64;
    Ok(total
        / started
            .elapsed()
            .max(Duration::from_micros(1))
            .as_secs_f64())
}

async fn post(client: &Client, session: &str, index: usize) -> anyhow::Result<()> {
    let message = MessageParams {
        text: format!("message {index}"),
        attachments: Vec::new(),
        idempotency_key: None,
        queue_mode: None,
    };
    client
        .post_message(session, &message)
        .await
        .map_err(|error| anyhow::anyhow!("admission failed: {error}"))?;
    Ok(())
}

/// A bare table with the same message row, in its own database with the same settings.
struct Baseline {
    pool: sqlx::SqlitePool,
}

impl Baseline {
    async fn open(path: &std::path::Path) -> anyhow::Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        sqlx::query(
            "CREATE TABLE messages (session_key TEXT NOT NULL, seq INTEGER NOT NULL, turn_id TEXT NOT NULL, \
             role TEXT NOT NULL, content TEXT NOT NULL, tool_name TEXT, created_at_ms INTEGER NOT NULL, \
             PRIMARY KEY (session_key, seq)) STRICT",
        )
        .execute(&pool)
        .await?;
        Ok(Self { pool })
    }

    async fn insert(&self, session: &str, index: usize) -> anyhow::Result<()> {
        sqlx::query(
            "INSERT INTO messages (session_key, seq, turn_id, role, content, created_at_ms) VALUES (?, ?, ?, 'user', ?, 0)",
        )
        .bind(session)
        .bind(index as i64)
        .bind(format!("turn-{index}"))
        .bind(format!("message {index}"))
        .execute(&self.pool)
        .await?;
        Ok(())
    }
}
