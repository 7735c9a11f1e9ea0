//! `gatehouse bench gateway`: the cost of admitting a message (HTTP request → durable commit of
//! the user message and its turn → 202), against a bare SQLite insert of the same row with the
//! same durability settings, in the same run, with one client and with many at once. With
//! `--store postgres://...` the same is measured on PostgreSQL, against a bare insert of the
//! same row into a table of that database, beside the SQLite figures.

use gatehouse_protocol::error::ErrorCode;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::client::Client;
use gatehouse_api::sessions::MessageParams;
use gatehouse_gateway::TurnFailure;
use gatehouse_gateway::TurnInput;
use gatehouse_gateway::TurnReply;
use gatehouse_gateway::TurnRuntime;
use gatehouse_gateway::TurnSink;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::sqlite::SqliteJournalMode;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::sqlite::SqliteSynchronous;

use gatehouse_store::location::PostgresLocation;
use gatehouse_store::location::StoreLocation;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::Stats;
use crate::exit::UsageError;

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
    /// Also measure on this PostgreSQL database (`postgres://...`), beside the SQLite figures.
    /// Give it an empty database used only for benchmarks: the Gateway's tables are created
    /// in it and keep the benchmark's sessions.
    #[arg(long, value_name = "URL")]
    store: Option<String>,
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

    async fn run_turn(&self, input: TurnInput, _sink: TurnSink) -> Result<TurnReply, TurnFailure> {
        input.cancel.cancelled().await;
        Err(TurnFailure::new(ErrorCode::Aborted, "benchmark over"))
    }
}

/// Runs the benchmark.
pub(crate) fn run(args: &GatewayBenchArgs) -> anyhow::Result<Report> {
    let postgres = args
        .store
        .as_deref()
        .map(|url| match url.parse::<StoreLocation>() {
            Ok(StoreLocation::Remote(location)) => Ok(location),
            Ok(StoreLocation::Local(_)) => Err(UsageError::new(
                "--store takes a postgres:// URL; the SQLite figures are always measured, in a temporary file",
            )),
            Err(error) => Err(UsageError::new(error.to_string())),
        })
        .transpose()?;
    crate::signals::runtime()?.block_on(measure(args, postgres))
}

async fn measure(
    args: &GatewayBenchArgs,
    postgres: Option<PostgresLocation>,
) -> anyhow::Result<Report> {
    if let Some(location) = &postgres {
        let store = gatehouse_store::open(&StoreLocation::Remote(location.clone())).await?;
        if !store.sessions().await?.is_empty() {
            return Err(UsageError::new(
                "the benchmark's store already holds sessions; give --store an empty database used only for benchmarks",
            )
            .into());
        }
    }
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    let baseline = Baseline::sqlite(&base.join("baseline.db")).await?;
    measure_backend(
        args,
        &base.join("sqlite"),
        None,
        &baseline,
        &mut rows,
        &mut notes,
    )
    .await?;
    notes.push(String::from(
        "sqlite: both use SQLite in WAL mode with synchronous=FULL; admission also writes the turn, the queued event and the session row",
    ));
    let mut title = String::from(
        "gatehouse bench gateway: message admission (HTTP -> durable commit -> 202) vs a bare SQLite insert",
    );
    if let Some(location) = postgres {
        let store = StoreLocation::Remote(location.clone());
        let baseline = Baseline::postgres(&location).await?;
        let measured = measure_backend(
            args,
            &base.join("postgres"),
            Some(store),
            &baseline,
            &mut rows,
            &mut notes,
        )
        .await;
        baseline.drop_table().await;
        measured?;
        notes.push(String::from(
            "postgres: the bare insert goes to a table of the same database on the same server, through a pool of as many connections as the Gateway's",
        ));
        title.push_str(", and the same on PostgreSQL vs a bare PostgreSQL insert");
    }
    Ok(Report { title, rows, notes })
}

/// Measures admission on one backend (`store`: `None` for the default SQLite file in
/// `state_dir`) against `baseline`, with one client and with `--clients` clients, and adds its
/// rows and throughput notes.
async fn measure_backend(
    args: &GatewayBenchArgs,
    state_dir: &std::path::Path,
    store: Option<StoreLocation>,
    baseline: &Baseline,
    rows: &mut Vec<Row>,
    notes: &mut Vec<String>,
) -> anyhow::Result<()> {
    let backend = baseline.backend();
    let mut config = crate::bench::gateway_config(state_dir.to_path_buf())?;
    config.store = store;
    let extensions = gatehouse_gateway::Extensions {
        runtime: Some(Arc::new(ParkedRuntime)),
        ..gatehouse_gateway::Extensions::default()
    };
    let running = gatehouse_gateway::start(config, extensions).await?;
    let url = format!("http://{}", running.local_addr);
    let client = Client::new(&url, crate::bench::turn::BENCH_TOKEN);
    let baseline = Arc::new(baseline.clone());
    for (clients, per_client) in [(1, args.sequential), (args.clients, args.per_client)] {
        let shape = Shape {
            clients,
            per_client,
        };
        let (admitted_rate, mut admit) = concurrent(shape, |client_index, message| {
            let client = client.clone();
            async move { post(&client, &format!("c{clients}-{client_index}"), message).await }
        })
        .await?;
        let (inserted_rate, mut insert) = concurrent(shape, |client_index, message| {
            let baseline = Arc::clone(&baseline);
            async move {
                baseline
                    .insert(&format!("c{clients}-{client_index}"), message)
                    .await
            }
        })
        .await?;
        let noun = match clients {
            1 => String::from("1 client"),
            _ => format!("{clients} clients"),
        };
        rows.push(Row {
            case: format!("{backend}: admit, {noun} (p50/p99)"),
            baseline_name: format!("bare {backend} insert, {noun}"),
            baseline: Stats::from_samples(&mut insert),
            candidate: Stats::from_samples(&mut admit),
            target: String::from("informational"),
        });
        notes.push(format!(
            "{backend}, {noun} x {per_client} messages: {admitted_rate:.0} messages/s admitted, {inserted_rate:.0} inserts/s bare, ratio {:.2}",
            admitted_rate / inserted_rate
        ));
    }
    running.shutdown.cancel();
    let _ = running.wait().await;
    Ok(())
}

/// How many clients send how many messages each.
#[derive(Debug, Clone, Copy)]
struct Shape {
    clients: usize,
    per_client: usize,
}

/// Runs `shape.per_client` jobs one after another in each of `shape.clients` tasks at once, and
/// returns the jobs per second and each job's latency.
async fn concurrent<F, Fut>(shape: Shape, work: F) -> anyhow::Result<(f64, Vec<Duration>)>
where
    F: Fn(usize, usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(shape.clients);
    for client_index in 0..shape.clients {
        let jobs: Vec<Fut> = (0..shape.per_client)
            .map(|message| work(client_index, message))
            .collect();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(jobs.len());
            for job in jobs {
                let started = Instant::now();
                job.await?;
                latencies.push(started.elapsed());
            }
            Ok::<Vec<Duration>, anyhow::Error>(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(shape.clients * shape.per_client);
    for task in tasks {
        latencies.extend(task.await??);
    }
    let total = (shape.clients * shape.per_client) as f64;
    let rate = total
        / started
            .elapsed()
            .max(Duration::from_micros(1))
            .as_secs_f64();
    Ok((rate, latencies))
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

/// The table of the bare PostgreSQL inserts, created in the benchmark's database and dropped
/// after the run.
const POSTGRES_BASELINE_TABLE: &str = "gatehouse_bench_baseline_messages";

/// A bare table with the same message row: in its own SQLite database with the Gateway's
/// settings, or in the benchmark's PostgreSQL database.
#[derive(Debug, Clone)]
enum Baseline {
    Sqlite(sqlx::SqlitePool),
    Postgres(sqlx::PgPool),
}

impl Baseline {
    async fn sqlite(path: &std::path::Path) -> anyhow::Result<Self> {
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
        Ok(Self::Sqlite(pool))
    }

    async fn postgres(location: &PostgresLocation) -> anyhow::Result<Self> {
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(gatehouse_store::postgres::POOL_CONNECTIONS)
            .connect_with(location.connect_options()?)
            .await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP TABLE IF EXISTS {POSTGRES_BASELINE_TABLE}; \
             CREATE TABLE {POSTGRES_BASELINE_TABLE} (session_key TEXT NOT NULL, seq BIGINT NOT NULL, \
             turn_id TEXT NOT NULL, role TEXT NOT NULL, content TEXT NOT NULL, tool_name TEXT, \
             created_at_ms BIGINT NOT NULL, PRIMARY KEY (session_key, seq))"
        )))
        .execute(&pool)
        .await?;
        Ok(Self::Postgres(pool))
    }

    fn backend(&self) -> &'static str {
        match self {
            Baseline::Sqlite(_) => "sqlite",
            Baseline::Postgres(_) => "postgres",
        }
    }

    async fn insert(&self, session: &str, index: usize) -> anyhow::Result<()> {
        match self {
            Baseline::Sqlite(pool) => {
                sqlx::query(
                    "INSERT INTO messages (session_key, seq, turn_id, role, content, created_at_ms) VALUES (?, ?, ?, 'user', ?, 0)",
                )
                .bind(session)
                .bind(index as i64)
                .bind(format!("turn-{index}"))
                .bind(format!("message {index}"))
                .execute(pool)
                .await?;
            }
            Baseline::Postgres(pool) => {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO {POSTGRES_BASELINE_TABLE} (session_key, seq, turn_id, role, content, created_at_ms) \
                     VALUES ($1, $2, $3, 'user', $4, 0)"
                )))
                .bind(session)
                .bind(index as i64)
                .bind(format!("turn-{index}"))
                .bind(format!("message {index}"))
                .execute(pool)
                .await?;
            }
        }
        Ok(())
    }

    /// Drops the PostgreSQL baseline table; nothing to do for SQLite (a temporary file).
    async fn drop_table(&self) {
        if let Baseline::Postgres(pool) = self {
            let _ = sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP TABLE IF EXISTS {POSTGRES_BASELINE_TABLE}"
            )))
            .execute(pool)
            .await;
        }
    }
}
