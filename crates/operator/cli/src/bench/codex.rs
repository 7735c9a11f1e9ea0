//! `gatehouse bench codex`: the latency of a `/say hi` Codex turn through the Gateway (HTTP
//! POST → admission → relay over the node link → `codex app-server` on the Harness → back to
//! `turn.completed`), against a client driving a second app-server with the same configuration
//! directly over stdio, measured in the same run and interleaved turn by turn.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::client::Client;
use gatehouse_codex_driver::messages::DynamicToolSpec;
use gatehouse_codex_driver::messages::ServerNotification;
use gatehouse_codex_driver::messages::ThreadSettings;
use gatehouse_codex_driver::messages::ThreadStart;
use gatehouse_codex_driver::messages::ThreadStartParams;
use gatehouse_codex_driver::messages::TurnStart;
use gatehouse_codex_driver::messages::TurnStartParams;
use gatehouse_codex_driver::messages::TurnStatus;
use gatehouse_codex_driver::messages::UserInput;
use gatehouse_codex_driver::rpc::DEFAULT_REQUEST_TIMEOUT;
use gatehouse_codex_driver::rpc::RpcClient;
use gatehouse_codex_driver::rpc::ThreadMessage;
use gatehouse_harness::CancellationToken;
use gatehouse_harness::host::Runtime;
use gatehouse_harness::host::RuntimeConfig;
use gatehouse_harness::model_spec::ModelSpec;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::Stats;

/// Arguments of `gatehouse bench codex`.
#[derive(Debug, clap::Args)]
pub(crate) struct CodexArgs {
    /// Warm `/say hi` turns on each path.
    #[arg(long, default_value_t = 100)]
    iterations: usize,
    /// The `codex` executable (default: `$GATEHOUSE_CODEX_BIN`, else `codex` on PATH).
    #[arg(long, value_name = "PATH")]
    codex_bin: Option<PathBuf>,
}

/// Runs the benchmark.
pub(crate) fn run(args: &CodexArgs) -> anyhow::Result<Report> {
    crate::signals::runtime()?.block_on(measure(args))
}

async fn measure(args: &CodexArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let mock_addr = listener.local_addr()?;
    tokio::spawn(gatehouse_mockmodel::serve(listener, std::future::pending()));
    let model = ModelSpec::parse(
        &format!(
            "openai-responses:http://{mock_addr}/v1:{}",
            crate::codex_setup::MOCK_CODEX_MODEL
        ),
        "OPENAI_API_KEY",
    )?;
    let settings = crate::codex_setup::node_settings(&model, args.codex_bin.as_deref(), false)?;

    // The Gateway path: an embedded Gateway with the Codex runtime and an in-process node host.
    let config = crate::bench::gateway_config(base.join("gateway"))?;
    let extensions = crate::codex_setup::gateway_extensions(
        gatehouse_codex_driver::runtime::CodexConfig::default(),
    );
    let running = crate::embedded::start_gateway_with(config, extensions).await?;
    let url = format!("http://{}", running.local_addr);
    let shutdown = CancellationToken::new();
    let node = crate::embedded::start_node(
        &running,
        &base.join("harness"),
        Runtime::Codex,
        RuntimeConfig {
            model: model.clone(),
            scratch: None,
            workers: None,
            codex: Some(settings.clone()),
        },
        shutdown.clone(),
    )
    .await?;
    let client = Client::new(&url, crate::bench::turn::BENCH_TOKEN);
    wait_ready(&client).await?;

    // The direct path: the same binary and configuration, driven over stdio.
    let direct = base.join("direct");
    let (_server, rpc, thread_id) = direct_client(&settings, &direct).await?;

    // Warm both paths, then interleave.
    crate::bench::turn::turn(&client, "bench", "/say hi").await?;
    direct_turn(&rpc, &thread_id, "/say hi").await?;
    let mut through_gateway = Vec::with_capacity(args.iterations);
    let mut direct_samples = Vec::with_capacity(args.iterations);
    for _ in 0..args.iterations {
        through_gateway.push(crate::bench::turn::turn(&client, "bench", "/say hi").await?);
        direct_samples.push(direct_turn(&rpc, &thread_id, "/say hi").await?);
    }
    shutdown.cancel();
    let _ = node.task.await;
    running.shutdown.cancel();
    let _ = running.wait().await;
    Ok(Report {
        title: String::from(
            "gatehouse bench codex: /say hi turns on a real codex app-server with the mock model",
        ),
        rows: vec![Row {
            case: String::from("Gateway → relay → app-server (POST to turn completed)"),
            baseline_name: String::from(
                "client → app-server over stdio (turn/start to turn/completed)",
            ),
            baseline: Stats::from_samples(&mut direct_samples),
            candidate: Stats::from_samples(&mut through_gateway),
            target: String::from("ratio ≤ 1.10"),
        }],
        notes: vec![String::from(
            "both paths run the same codex binary and config.toml against the same loopback mock model; turns alternate between the paths",
        )],
    })
}

async fn wait_ready(client: &Client) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if crate::bench::turn::is_ready(client).await? {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the codex node did not become ready within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts an app-server under `dir` configured like the node's, initializes it and starts a
/// thread.
async fn direct_client(
    settings: &gatehouse_harness::codex_supervisor::CodexSettings,
    dir: &Path,
) -> anyhow::Result<(
    gatehouse_codex_driver::stdio::StdioServer,
    RpcClient,
    String,
)> {
    use std::os::unix::fs::DirBuilderExt;
    let home = dir.join("codex-home");
    let tmp = dir.join("tmp");
    let workspace = dir.join("workspace");
    for path in [&home, &tmp, &workspace] {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)?;
    }
    std::fs::write(
        home.join("config.toml"),
        gatehouse_harness::codex_supervisor::render_config(&settings.model, settings.send_key),
    )?;
    let text = |path: &Path| path.to_string_lossy().into_owned();
    let env = vec![
        (
            String::from("PATH"),
            std::env::var("PATH").unwrap_or_default(),
        ),
        (String::from("HOME"), text(&home)),
        (String::from("CODEX_HOME"), text(&home)),
        (String::from("TMPDIR"), text(&tmp)),
        (String::from("LANG"), String::from("C.UTF-8")),
        (String::from("RUST_LOG"), String::from("warn")),
    ];
    let (server, transport) =
        gatehouse_codex_driver::stdio::StdioServer::spawn(&settings.program, &workspace, &env)?;
    let rpc = RpcClient::start(transport);
    rpc.initialize("gatehouse-bench").await?;
    // The same thread settings the Gateway uses, including its one dynamic tool.
    let params = ThreadStartParams {
        settings: ThreadSettings {
            cwd: text(&workspace),
            approval_policy: String::from("untrusted"),
            sandbox: String::from("workspace-write"),
            developer_instructions: None,
        },
        dynamic_tools: vec![DynamicToolSpec {
            kind: String::from("function"),
            name: String::from("session_status"),
            description: String::from("Returns the state of this conversation."),
            input_schema: serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
        }],
        service_name: String::from("gatehouse"),
    };
    let started = rpc
        .call::<ThreadStart>(&params, DEFAULT_REQUEST_TIMEOUT)
        .await?;
    let thread_id = started.thread.id;
    Ok((server, rpc, thread_id))
}

/// Runs one turn directly and returns the time from `turn/start` to `turn/completed`.
async fn direct_turn(rpc: &RpcClient, thread_id: &str, text: &str) -> anyhow::Result<Duration> {
    let mut messages = rpc.subscribe(thread_id);
    let started = Instant::now();
    let params = TurnStartParams {
        thread_id: thread_id.to_owned(),
        input: vec![UserInput::Text {
            text: text.to_owned(),
        }],
    };
    rpc.call::<TurnStart>(&params, DEFAULT_REQUEST_TIMEOUT)
        .await?;
    while let Some(message) = messages.recv().await {
        if let ThreadMessage::Notification { method, params } = message
            && let ServerNotification::TurnCompleted(completed) =
                ServerNotification::decode(&method, params)?
        {
            anyhow::ensure!(
                completed.turn.status == TurnStatus::Completed,
                "the direct turn did not complete: {:?}",
                completed.turn
            );
            return Ok(started.elapsed());
        }
    }
    Err(anyhow::anyhow!("the direct app-server connection closed"))
}
