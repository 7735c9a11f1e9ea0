//! `gatehouse bench turn`: end-to-end native turns in embedded mode with the in-process mock
//! model: from the POST to `turn.completed`, through a real worker process. The baseline is a
//! bare HTTP round trip to the same server (`GET /healthz`), measured in the same run.

use std::time::Duration;
use std::time::Instant;

use gatehouse_gateway::GatewayConfig;
use gatehouse_harness::CancellationToken;
use gatehouse_harness::host::Runtime;
use gatehouse_harness::host::RuntimeConfig;
use gatehouse_harness::model::ModelSpec;
use gatehouse_harness::worker::WorkerSettings;

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
}

/// Runs the benchmark.
pub(crate) fn run(args: &TurnArgs) -> anyhow::Result<Report> {
    crate::signals::runtime()?.block_on(measure(args))
}

async fn measure(args: &TurnArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let mut config = GatewayConfig::with_defaults(base.join("gateway"), "127.0.0.1:0".parse()?);
    config.operator_token_override = Some(String::from("bench-token"));
    let running = crate::embedded::start_gateway(config).await?;
    let url = format!("http://{}", running.local_addr);
    let workers = WorkerSettings {
        program: std::env::current_exe()?,
        capacity: args.cold_iterations + 4,
        model: String::from("mock"),
        model_key_env: String::from("OPENAI_API_KEY"),
        allow_unsandboxed: false,
        scratch: None,
        hidden_paths: Vec::new(),
        denied_tools: Vec::new(),
        exec_timeout_seconds: gatehouse_protocol::worker::DEFAULT_EXEC_TIMEOUT_SECONDS,
        // The tool turn runs through the same hardened sandbox as a node's.
        sandbox: crate::sandbox_setup::best_available(),
        telemetry_env: crate::logging::worker_env(),
    };
    let runtime_config = RuntimeConfig {
        model: ModelSpec::Mock,
        scratch: None,
        workers: Some(workers),
        codex: None,
    };
    let shutdown = CancellationToken::new();
    let node = crate::embedded::start_node(
        &running,
        &base.join("harness"),
        Runtime::Native,
        runtime_config,
        shutdown.clone(),
    )
    .await?;
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while client
        .get(format!("{url}/readyz"))
        .send()
        .await?
        .status()
        .as_u16()
        != 200
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the node did not connect within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let gateway_rss_before = rss_kib(std::process::id());

    let mut cold = Vec::with_capacity(args.cold_iterations);
    for index in 0..args.cold_iterations {
        cold.push(turn(&client, &url, &format!("cold-{index}"), "/say hi").await?);
    }
    let mut say = Vec::with_capacity(args.say_iterations);
    let mut write = Vec::with_capacity(args.tool_iterations);
    let mut baseline = Vec::with_capacity(args.say_iterations);
    for index in 0..args.say_iterations.max(args.tool_iterations) {
        if index < args.say_iterations {
            say.push(turn(&client, &url, "warm", "/say hi").await?);
            let started = Instant::now();
            client
                .get(format!("{url}/healthz"))
                .send()
                .await?
                .error_for_status()?;
            baseline.push(started.elapsed());
        }
        if index < args.tool_iterations {
            let text = format!(
                r#"/tool write {{"path":"f{}.txt","content":"x"}}"#,
                index % 8
            );
            write.push(turn(&client, &url, "warm-tool", &text).await?);
        }
    }
    let worker_rss = worker_rss_kib();
    let gateway_rss_after = rss_kib(std::process::id());
    shutdown.cancel();
    let _ = node.task.await;
    running.shutdown.cancel();
    let _ = running.wait().await;
    let healthz = Stats::from_samples(&mut baseline);
    let row = |case: &str, samples: &mut Vec<Duration>, target: &str| Row {
        case: String::from(case),
        baseline_name: String::from("GET /healthz round trip"),
        baseline: healthz,
        candidate: Stats::from_samples(samples),
        target: String::from(target),
    };
    Ok(Report {
        title: String::from(
            "gatehouse bench turn: native turns, POST to turn.completed, embedded mode with the mock model",
        ),
        rows: vec![
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
        ],
        notes: vec![
            format!(
                "idle RSS of the embedded process (Gateway and node host): {} KiB before the turns, {} KiB after (target for an idle Gateway: < 25 MiB)",
                gateway_rss_before.unwrap_or(0),
                gateway_rss_after.unwrap_or(0)
            ),
            format!("RSS of one idle worker: {} KiB", worker_rss.unwrap_or(0)),
            String::from(
                "each turn is measured with a POST and a long-poll of GET /v1/turns/{id}; the new-session row minus the warm row is the worker start-up",
            ),
        ],
    })
}

/// Posts `text` to `session` with the bench token and returns the time until its turn completed.
pub(super) async fn turn(
    client: &reqwest::Client,
    url: &str,
    session: &str,
    text: &str,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let posted: serde_json::Value = client
        .post(format!("{url}/v1/sessions/{session}/messages"))
        .bearer_auth("bench-token")
        .json(&serde_json::json!({"text": text}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let turn_id = posted["turnId"].as_str().unwrap_or_default().to_owned();
    loop {
        let body: serde_json::Value = client
            .get(format!("{url}/v1/turns/{turn_id}?wait=30"))
            .bearer_auth("bench-token")
            .send()
            .await?
            .json()
            .await?;
        match body["status"].as_str() {
            Some("completed") => return Ok(started.elapsed()),
            Some("queued" | "running") => {}
            _ => return Err(anyhow::anyhow!("the turn did not complete: {body}")),
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
