//! `gatehouse bench link`: `file.fetch` over a real Gateway and node host connected by a
//! WebSocket on loopback, against a local fsops `file.fetch` of the same file in the same run.

use std::hint::black_box;
use std::time::Duration;
use std::time::Instant;

use gatehouse_fsops::Root;
use gatehouse_fsops::commands::file_fetch;
use gatehouse_harness::CancellationToken;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::HARD_MAX_BYTES;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::Stats;

/// Arguments of `gatehouse bench link`.
#[derive(Debug, clap::Args)]
pub(crate) struct LinkArgs {
    /// Round trips of the 4 KiB case.
    #[arg(long, default_value_t = 2_000)]
    small_iterations: usize,
    /// Transfers of the 16 MiB case.
    #[arg(long, default_value_t = 20)]
    large_iterations: usize,
}

/// Starts a Gateway and an enrolled node in this process, over a real loopback WebSocket, and
/// measures.
pub(crate) fn run(args: &LinkArgs) -> anyhow::Result<Report> {
    crate::signals::runtime()?.block_on(measure(args))
}

async fn measure(args: &LinkArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let base = temp.path().canonicalize()?;
    let config = crate::bench::gateway_config(base.join("gateway"))?;
    let running = crate::embedded::start_gateway(config).await?;
    let url = format!("ws://{}/node", running.local_addr);
    let harness_root = base.join("harness");
    let code_file = crate::embedded::enrollment_code(&running, &harness_root).await?;
    let host =
        gatehouse_harness::host::NodeHost::prepare(gatehouse_harness::host::NodeHostConfig {
            root: harness_root.clone(),
            gateway_urls: vec![url],
            setup_code_file: code_file,
            runtime: gatehouse_harness::host::Runtime::Native,
            display_name: Some(String::from("bench node")),
            home: None,
        })?;
    let shutdown = CancellationToken::new();
    let node_shutdown = shutdown.clone();
    let node = tokio::spawn(async move { host.run(node_shutdown).await });
    let deadline = Instant::now() + Duration::from_secs(30);
    while running
        .workspace()
        .fetch("missing-probe")
        .await
        .is_err_and(|error| matches!(error, gatehouse_gateway::WorkspaceError::Unavailable))
    {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the node did not connect within 30 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let workspace_dir = harness_root.join("workspace");
    let small = vec![0x5a_u8; 4 * 1024];
    let large: Vec<u8> = (0..16 * 1024 * 1024_u32).map(|index| index as u8).collect();
    std::fs::write(workspace_dir.join("small.bin"), &small)?;
    std::fs::write(workspace_dir.join("large.bin"), &large)?;
    let local_root = Root::open(&workspace_dir)?;
    let workspace = running.workspace();
    let mut rows = Vec::new();
    for (case, name, iterations, target) in [
        (
            "4 KiB round trip",
            "small.bin",
            args.small_iterations,
            "p50 < 1ms",
        ),
        (
            "16 MiB transfer",
            "large.bin",
            args.large_iterations,
            "link >= 1/3 of local throughput",
        ),
    ] {
        let params = FileFetchParams {
            path: format!("{}/{name}", workspace_dir.display()),
            max_bytes: Some(HARD_MAX_BYTES),
            ..FileFetchParams::default()
        };
        let mut local = Vec::with_capacity(iterations);
        let mut linked = Vec::with_capacity(iterations);
        for _ in 0..iterations {
            let started = Instant::now();
            black_box(file_fetch(&local_root, &params)?);
            local.push(started.elapsed());
            let started = Instant::now();
            let file = workspace.fetch(name).await?;
            linked.push(started.elapsed());
            black_box(file);
        }
        rows.push(Row {
            case: format!("{case} file.fetch"),
            baseline_name: String::from("local fsops file.fetch"),
            baseline: Stats::from_samples(&mut local),
            candidate: Stats::from_samples(&mut linked),
            target: String::from(target),
        });
    }
    shutdown.cancel();
    let _ = node.await;
    running.shutdown.cancel();
    let _ = running.wait().await;
    let large_row = &rows[1];
    let megabytes = 16.0;
    let local_throughput = megabytes / large_row.baseline.p50.as_secs_f64();
    let link_throughput = megabytes / large_row.candidate.p50.as_secs_f64();
    Ok(Report {
        title: String::from(
            "gatehouse bench link: file.fetch over Gateway <-> node on loopback vs local fsops",
        ),
        rows,
        notes: vec![
            format!(
                "16 MiB throughput: link {link_throughput:.0} MiB/s, local {local_throughput:.0} MiB/s, link/local {:.2} (target >= 0.33)",
                link_throughput / local_throughput
            ),
            String::from(
                "both sides include the node's sha256 and base64; the link adds the WebSocket, JSON framing, base64 decoding and the Gateway's policy and size checks",
            ),
        ],
    })
}
