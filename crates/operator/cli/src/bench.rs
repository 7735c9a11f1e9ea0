//! `gatehouse bench`: benchmarks that print each figure with its ratio to a baseline measured in
//! the same run.
//!
//! Benchmarks measure; they never assert on time. Each prints its target next to the figure so a
//! reader can judge, and `--json` gives the same figures to a script.

mod channel;
mod cluster;
mod codex;
mod fsops;
mod gateway;
mod link;
mod memory;
mod otlp;
mod sandbox;
mod stats;
mod turn;

use std::process::ExitCode;

/// Arguments of `gatehouse bench`.
#[derive(Debug, clap::Args)]
pub(crate) struct BenchArgs {
    #[command(subcommand)]
    target: BenchTarget,
    /// Print the figures as JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
}

#[derive(Debug, clap::Subcommand)]
enum BenchTarget {
    /// `file.fetch` of a 4 KiB and a 16 MiB file through fsops, against `std::fs::read`.
    Fsops(fsops::FsopsArgs),
    /// Message admission (HTTP to durable commit to 202) against a bare SQLite insert.
    Gateway(gateway::GatewayBenchArgs),
    /// Native turns end to end in embedded mode with the mock model, with tracing at `info`
    /// against spans disabled and with OTLP export on.
    Turn(turn::TurnArgs),
    /// `file.fetch` round trips and throughput over a real Gateway and node on loopback.
    Link(link::LinkArgs),
    /// `/say hi` Codex turns through Gateway → relay → app-server, against the same app-server
    /// driven directly over stdio.
    Codex(codex::CodexArgs),
    /// The memory index on 2,000 generated notes against brute-force scans, and an edit on the
    /// Harness found by search end to end.
    Memory(memory::MemoryBenchArgs),
    /// Spawning `true` through the full hardened exec sandbox against a bare
    /// `bwrap --ro-bind / / true`.
    Sandbox(sandbox::SandboxBenchArgs),
    /// Gateway replicas on one PostgreSQL (1 and 3) with 1 and 2 node hosts: message admission
    /// and `/say hi` turns with many clients, against 1 replica and 1 node.
    Cluster(cluster::ClusterArgs),
    /// A message through a signed webhook channel to its reply, against an API turn; given a
    /// Matrix homeserver and two accounts on it, also a Matrix channel's round trip and the
    /// homeserver's own.
    Channel(channel::ChannelArgs),
}

/// Runs `gatehouse bench`.
pub(crate) fn run(args: BenchArgs) -> anyhow::Result<ExitCode> {
    let report = match args.target {
        BenchTarget::Fsops(fsops_args) => fsops::run(&fsops_args)?,
        BenchTarget::Link(link_args) => link::run(&link_args)?,
        BenchTarget::Gateway(gateway_args) => gateway::run(&gateway_args)?,
        BenchTarget::Turn(turn_args) => turn::run(&turn_args)?,
        BenchTarget::Codex(codex_args) => codex::run(&codex_args)?,
        BenchTarget::Memory(memory_args) => memory::run(&memory_args)?,
        BenchTarget::Sandbox(sandbox_args) => sandbox::run(&sandbox_args)?,
        BenchTarget::Cluster(cluster_args) => cluster::run(&cluster_args)?,
        BenchTarget::Channel(channel_args) => channel::run(&channel_args)?,
    };
    match args.json {
        true => crate::output::json(&report.to_json()),
        false => crate::output::line(&report.to_table()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Returns the configuration of a benchmark's Gateway: its state in `state_dir`, listening on a
/// free loopback port, with the operator token fixed to [`turn::BENCH_TOKEN`].
fn gateway_config(
    state_dir: std::path::PathBuf,
) -> anyhow::Result<gatehouse_gateway::GatewayConfig> {
    let mut config =
        gatehouse_gateway::GatewayConfig::with_defaults(state_dir, "127.0.0.1:0".parse()?);
    config.operator_token_override = Some(String::from(turn::BENCH_TOKEN));
    Ok(config)
}

/// Returns the settings of `capacity` native workers that run this executable with the mock
/// model and the hardened sandbox a node uses.
fn mock_workers(capacity: usize) -> anyhow::Result<gatehouse_harness::worker::WorkerSettings> {
    Ok(gatehouse_harness::worker::WorkerSettings {
        program: std::env::current_exe()?,
        capacity,
        retirement: gatehouse_harness::worker::WorkerRetirement::default(),
        model: String::from("mock"),
        model_key_env: String::from("OPENAI_API_KEY"),
        allow_unsandboxed: false,
        scratch: None,
        hidden_paths: Vec::new(),
        denied_tools: Vec::new(),
        exec_timeout_seconds: gatehouse_protocol::worker::DEFAULT_EXEC_TIMEOUT_SECONDS,
        sandbox: crate::sandbox_setup::best_available(),
        telemetry_env: crate::logging::worker_env(),
        source_allow: Default::default(),
    })
}

/// A Gateway and an in-process native node whose workers use the mock model, ready for turns.
struct MockEmbedded {
    running: gatehouse_gateway::RunningGateway,
    node: crate::embedded::InProcessNode,
    shutdown: gatehouse_harness::CancellationToken,
    /// A client of the Gateway with [`turn::BENCH_TOKEN`].
    client: gatehouse_api::client::Client,
}

impl MockEmbedded {
    /// Starts a Gateway with `config` and a node on `harness_root` with `capacity` workers,
    /// and waits (up to 30 s) until the Gateway is ready.
    async fn start(
        config: gatehouse_gateway::GatewayConfig,
        harness_root: &std::path::Path,
        capacity: usize,
    ) -> anyhow::Result<Self> {
        let running = crate::embedded::start_gateway(config).await?;
        let url = format!("http://{}", running.local_addr);
        let runtime_config = gatehouse_harness::host::RuntimeConfig {
            model: gatehouse_harness::model_spec::ModelSpec::Mock,
            scratch: None,
            workers: Some(mock_workers(capacity)?),
            codex: None,
        };
        let shutdown = gatehouse_harness::CancellationToken::new();
        let node = crate::embedded::start_node(
            &running,
            harness_root,
            gatehouse_harness::host::Runtime::Native,
            runtime_config,
            shutdown.clone(),
        )
        .await?;
        let client = gatehouse_api::client::Client::new(&url, turn::BENCH_TOKEN);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while !turn::is_ready(&client).await? {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "the node did not connect within 30 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        Ok(Self {
            running,
            node,
            shutdown,
            client,
        })
    }

    /// Stops the node, then the Gateway.
    async fn stop(self) {
        self.shutdown.cancel();
        let _ = self.node.task.await;
        self.running.shutdown.cancel();
        let _ = self.running.wait().await;
    }
}
