//! `gatehouse bench turn`: end-to-end native turns in embedded mode with the in-process mock
//! model: from the POST to `turn.completed`, through a real worker process. The baseline is a
//! bare HTTP round trip to the same server (`GET /healthz`), measured in the same run.
//!
//! The tracing comparison runs warm `/say hi` turns alternately with this process's filter at
//! `info` and `off` (spans disabled), and then the same turns in a second `gatehouse bench turn`
//! process that exports its spans (and its workers') over OTLP to a receiver this process runs.

use std::time::Duration;
use std::time::Instant;

use gatehouse_api::client::Client;
use gatehouse_api::client::ClientError;
use gatehouse_api::sessions::MessageParams;
use gatehouse_api::sessions::TurnQuery;
use gatehouse_api::sessions::TurnStatus;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::Stats;

/// Arguments of `gatehouse bench turn`.
#[derive(Debug, clap::Args)]
pub(crate) struct TurnArgs {
    /// Warm `/say hi` turns.
    #[arg(long, default_value_t = 200)]
    say_iterations: usize,
    /// Warm turns with one `write` tool call.
    #[arg(long, default_value_t = 100)]
    tool_iterations: usize,
    /// First turns of new sessions (each starts a worker).
    #[arg(long, default_value_t = 10)]
    cold_iterations: usize,
    /// Warm `/say hi` turns of each side of the tracing comparison (tracing at `info` against
    /// spans disabled, and with OTLP export on); 0 skips the comparison.
    #[arg(long, default_value_t = 200)]
    tracing_iterations: usize,
}

/// The largest share of the `/say hi` p50 that tracing at `info` may add.
const TRACING_BUDGET_PERCENT: f64 = 5.0;

/// Runs the benchmark.
pub(crate) fn run(args: &TurnArgs) -> anyhow::Result<Report> {
    crate::signals::runtime()?.block_on(measure(args))
}

async fn measure(args: &TurnArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let config = crate::bench::gateway_config(base.join("gateway"))?;
    // The tool turn runs through the same hardened sandbox as a node's.
    let embedded =
        crate::bench::MockEmbedded::start(config, &base.join("harness"), args.cold_iterations + 4)
            .await?;
    let client = &embedded.client;
    let gateway_rss_before = rss_kib(std::process::id());

    let mut cold = Vec::with_capacity(args.cold_iterations);
    for index in 0..args.cold_iterations {
        cold.push(turn(client, &format!("cold-{index}"), "/say hi").await?);
    }
    let mut say = Vec::with_capacity(args.say_iterations);
    let mut write = Vec::with_capacity(args.tool_iterations);
    let mut baseline = Vec::with_capacity(args.say_iterations);
    for index in 0..args.say_iterations.max(args.tool_iterations) {
        if index < args.say_iterations {
            say.push(turn(client, "warm", "/say hi").await?);
            let started = Instant::now();
            client.health().await?;
            baseline.push(started.elapsed());
        }
        if index < args.tool_iterations {
            let text = format!(
                r#"/tool write {{"path":"f{}.txt","content":"x"}}"#,
                index % 8
            );
            write.push(turn(client, "warm-tool", &text).await?);
        }
    }
    let tracing = match args.tracing_iterations {
        0 => None,
        iterations => Some(compare_tracing(client, iterations).await?),
    };
    let worker_rss = worker_rss_kib();
    let gateway_rss_after = rss_kib(std::process::id());
    embedded.stop().await;
    let healthz = Stats::from_samples(&mut baseline);
    let row = |case: &str, samples: &mut Vec<Duration>, target: &str| Row {
        case: String::from(case),
        baseline_name: String::from("GET /healthz round trip"),
        baseline: healthz,
        candidate: Stats::from_samples(samples),
        target: String::from(target),
    };
    let mut rows = vec![
        row("/say hi, warm worker", &mut say, "p50 < 30ms"),
        row(
            "one write tool call, warm worker",
            &mut write,
            "informational",
        ),
        row(
            "/say hi, new session (starts a worker)",
            &mut cold,
            "informational",
        ),
    ];
    let mut notes = Vec::new();
    if let Some(tracing) = tracing {
        let exported = export_cost(args.tracing_iterations).await?;
        notes.push(tracing.note());
        notes.push(exported.note(tracing.info));
        rows.push(tracing.row());
        rows.push(exported.row(tracing.info));
    }
    Ok(Report {
        title: String::from(
            "gatehouse bench turn: native turns, POST to turn.completed, embedded mode with the mock model",
        ),
        rows,
        notes: [
            vec![format!(
                "idle RSS of the embedded process (Gateway and node host): {} KiB before the turns, {} KiB after (target for an idle Gateway: < 25 MiB)",
                gateway_rss_before.unwrap_or(0),
                gateway_rss_after.unwrap_or(0)
            ),
            format!("RSS of one idle worker: {} KiB", worker_rss.unwrap_or(0)),
            String::from(
                "each turn is measured with a POST and a long-poll of GET /v1/turns/{id}; the new-session row minus the warm row is the worker start-up",
            )],
            notes,
        ]
        .concat(),
    })
}

/// Warm `/say hi` turns with this process's spans at `info` and disabled.
struct TracingComparison {
    disabled: Stats,
    info: Stats,
}

impl TracingComparison {
    fn difference_percent(&self) -> f64 {
        percent_of(self.info.p50, self.disabled.p50)
    }

    fn row(&self) -> Row {
        Row {
            case: String::from("/say hi, tracing at info"),
            baseline_name: String::from("/say hi, spans disabled"),
            baseline: self.disabled,
            candidate: self.info,
            target: format!("difference < {TRACING_BUDGET_PERCENT}% of p50"),
        }
    }

    fn note(&self) -> String {
        let difference = self.difference_percent();
        let verdict = match difference < TRACING_BUDGET_PERCENT {
            true => "met",
            false => "not met",
        };
        format!(
            "tracing at info: p50 {} against {} with spans disabled, a difference of {difference:.1}% of the text-turn p50 (target < {TRACING_BUDGET_PERCENT}%: {verdict}); the Gateway and node host of this process switch, the worker processes stay at their own filter",
            crate::bench::stats::human(self.info.p50),
            crate::bench::stats::human(self.disabled.p50),
        )
    }
}

/// Warm `/say hi` turns of a second bench process that exports its spans over OTLP.
struct ExportCost {
    exported: Stats,
    requests: u64,
    spans: u64,
}

impl ExportCost {
    fn row(&self, info: Stats) -> Row {
        Row {
            case: String::from("/say hi, OTLP export on"),
            baseline_name: String::from("/say hi, tracing at info"),
            baseline: info,
            candidate: self.exported,
            target: String::from("informational"),
        }
    }

    fn note(&self, info: Stats) -> String {
        format!(
            "OTLP export on (a second bench process and its workers export to a receiver on loopback, {} spans in {} requests): p50 {} against {} at info without export, a cost of {:.1}% of the text-turn p50",
            self.spans,
            self.requests,
            crate::bench::stats::human(self.exported.p50),
            crate::bench::stats::human(info.p50),
            percent_of(self.exported.p50, info.p50),
        )
    }
}

/// Returns `(candidate - baseline) / baseline` in percent.
fn percent_of(candidate: Duration, baseline: Duration) -> f64 {
    let baseline = baseline.as_secs_f64();
    match baseline > 0.0 {
        true => (candidate.as_secs_f64() - baseline) / baseline * 100.0,
        false => f64::NAN,
    }
}

/// Runs `iterations` warm turns with spans disabled and as many at `info`, alternately, so
/// drift in the machine's speed affects both alike; the filter is restored afterwards.
async fn compare_tracing(client: &Client, iterations: usize) -> anyhow::Result<TracingComparison> {
    let mut disabled = Vec::with_capacity(iterations);
    let mut info = Vec::with_capacity(iterations);
    let result = async {
        for _ in 0..iterations {
            anyhow::ensure!(
                crate::logging::set_filter("off"),
                "cannot switch the log filter"
            );
            disabled.push(turn(client, "tracing", "/say hi").await?);
            crate::logging::set_filter("info");
            info.push(turn(client, "tracing", "/say hi").await?);
        }
        Ok(())
    }
    .await;
    let directives = std::env::var(crate::logging::LOG_FILTER_ENV)
        .unwrap_or_else(|_| String::from(crate::logging::DEFAULT_FILTER));
    if !crate::logging::set_filter(&directives) {
        crate::logging::set_filter(crate::logging::DEFAULT_FILTER);
    }
    result?;
    Ok(TracingComparison {
        disabled: Stats::from_samples(&mut disabled),
        info: Stats::from_samples(&mut info),
    })
}

/// Runs `iterations` warm turns in a second `gatehouse bench turn` whose spans, and its
/// workers', go over OTLP to a receiver started here, and returns their figures.
async fn export_cost(iterations: usize) -> anyhow::Result<ExportCost> {
    let receiver = crate::bench::otlp::OtlpReceiver::start().await?;
    let output = tokio::process::Command::new(std::env::current_exe()?)
        .args(["bench", "turn", "--json", "--tracing-iterations", "0"])
        .args(["--cold-iterations", "1", "--tool-iterations", "0"])
        .arg("--say-iterations")
        .arg(iterations.to_string())
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url())
        .env(crate::logging::LOG_FILTER_ENV, "info")
        .stdin(std::process::Stdio::null())
        .output()
        .await?;
    anyhow::ensure!(
        output.status.success(),
        "the OTLP run failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout)?;
    let say = &report["rows"][0];
    let nanos = |field: &str| Duration::from_nanos(say[field].as_u64().unwrap_or_default());
    let (requests, spans) = receiver.received();
    anyhow::ensure!(spans > 0, "the OTLP run exported no spans");
    let exported = Stats {
        p50: nanos("p50Ns"),
        p99: nanos("p99Ns"),
        samples: usize::try_from(say["samples"].as_u64().unwrap_or_default()).unwrap_or(0),
    };
    Ok(ExportCost {
        exported,
        requests,
        spans,
    })
}

/// The operator token of the Gateways the benchmarks start.
pub(super) const BENCH_TOKEN: &str = "bench-token";

/// Returns whether the Gateway answers `/readyz` with `200`; a Gateway that answers with an
/// error is not ready yet, one that does not answer is an error.
pub(super) async fn is_ready(client: &Client) -> anyhow::Result<bool> {
    match client.ready().await {
        Ok(_) => Ok(true),
        Err(ClientError::Api { .. } | ClientError::Status { .. }) => Ok(false),
        Err(error @ (ClientError::Unreachable { .. } | ClientError::Decode { .. })) => {
            Err(error.into())
        }
    }
}

/// Posts `text` to `session` and returns the time until its turn completed.
pub(super) async fn turn(client: &Client, session: &str, text: &str) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let message = MessageParams {
        text: text.to_owned(),
        attachments: Vec::new(),
        idempotency_key: None,
        queue_mode: None,
    };
    let accepted = client.post_message(session, &message).await?;
    let wait = TurnQuery { wait: Some(30) };
    loop {
        let turn = client.turn(&accepted.turn_id, &wait).await?;
        match turn.status {
            TurnStatus::Completed => return Ok(started.elapsed()),
            TurnStatus::Queued | TurnStatus::Running => {}
            TurnStatus::Failed | TurnStatus::Interrupted | TurnStatus::Aborted => {
                return Err(anyhow::anyhow!(
                    "the turn did not complete: {}",
                    serde_json::to_string(&turn).unwrap_or_default()
                ));
            }
        }
    }
}

/// Returns the resident set size of `pid` in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|value| value.split_whitespace().next())
        .and_then(|kib| kib.parse().ok())
}

/// Returns the RSS of one of this process's `gatehouse worker` children.
fn worker_rss_kib() -> Option<u64> {
    let me = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let parent = stat
            .rsplit(')')
            .next()
            .and_then(|rest| rest.split_whitespace().nth(1));
        let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
        if parent == Some(me.as_str()) && cmdline.ends_with(b"worker\0") {
            return rss_kib(pid);
        }
    }
    None
}
