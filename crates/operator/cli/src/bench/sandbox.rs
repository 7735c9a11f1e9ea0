//! `gatehouse bench sandbox`: spawning `true` through the full hardened `exec` sandbox (user
//! namespace with every capability dropped, deny-by-default mounts, and this binary as the helper
//! that applies the limits, Landlock and seccomp) against a bare `bwrap --ro-bind / / true`,
//! interleaved in the same run. A second row measures the same namespaces and mounts without the
//! helper, so the report shows how much of the cost is the kernel's and how much the helper's.

use std::ffi::OsStr;
use std::ffi::OsString;
use std::path::Path;
use std::process::Stdio;

use gatehouse_agent::sandbox::SandboxLaunch;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::compare;

/// The baseline's command line.
const BARE: &str = "bwrap --ro-bind / / true";

/// Arguments of `gatehouse bench sandbox`.
#[derive(Debug, clap::Args)]
pub(crate) struct SandboxBenchArgs {
    /// Spawns of each kind.
    #[arg(long, default_value_t = 200)]
    iterations: usize,
}

/// Runs the benchmark with a fresh workspace and returns its report.
pub(crate) fn run(args: &SandboxBenchArgs) -> anyhow::Result<Report> {
    let temp = tempfile::Builder::new()
        .prefix("gatehouse-bench-sandbox-")
        .tempdir()?;
    let workspace = temp.path().canonicalize()?;
    let settings = crate::sandbox_setup::best_available();
    let helper = std::env::current_exe()?;
    // The trial finds bubblewrap and proves the hardened sandbox starts before it is timed.
    let bwrap = gatehouse_agent::trial_sandbox(&workspace, &settings, Some(&helper))?.bwrap;
    let launch = SandboxLaunch {
        workspace: &workspace,
        scratch: None,
        hidden: &[],
        settings: &settings,
        helper: Some(&helper),
    };
    let hardened = gatehouse_agent::sandbox::bwrap_command_args(&launch, OsStr::new("true"), &[]);
    // The same namespaces and mounts without the helper, to tell the kernel's share of the cost
    // from the helper's.
    let outside_only = gatehouse_agent::sandbox::bwrap_command_args(
        &SandboxLaunch {
            helper: None,
            ..launch
        },
        OsStr::new("true"),
        &[],
    );
    let bare = ["--ro-bind", "/", "/", "true"];
    let (baseline, candidate) = compare(
        args.iterations,
        || spawn(&bwrap, bare.iter().map(OsStr::new), &workspace),
        || spawn(&bwrap, hardened.iter().map(OsString::as_os_str), &workspace),
    )?;
    let (outside_baseline, outside) = compare(
        args.iterations,
        || spawn(&bwrap, bare.iter().map(OsStr::new), &workspace),
        || {
            spawn(
                &bwrap,
                outside_only.iter().map(OsString::as_os_str),
                &workspace,
            )
        },
    )?;
    let layers = format!(
        "hardened: uid {} in a user namespace, no capabilities, deny-by-default mounts, limits, seccomp {}, Landlock {}",
        settings.uid,
        match settings.seccomp {
            true => "on",
            false => "missing",
        },
        settings
            .landlock_abi
            .map_or_else(|| String::from("missing"), |abi| format!("ABI {abi}")),
    );
    Ok(Report {
        title: String::from(
            "gatehouse bench sandbox: true through the hardened exec sandbox vs bare bwrap --ro-bind / / true",
        ),
        rows: vec![
            Row {
                case: String::from("spawn true"),
                baseline_name: String::from(BARE),
                baseline,
                candidate,
                target: String::from("ratio <= 1.50x"),
            },
            Row {
                case: String::from("namespaces and mounts only"),
                baseline_name: String::from(BARE),
                baseline: outside_baseline,
                candidate: outside,
                target: String::from("informational"),
            },
        ],
        notes: vec![
            layers,
            String::from("samples alternate between baseline and candidate"),
        ],
    })
}

fn spawn<'a>(
    bwrap: &Path,
    args: impl Iterator<Item = &'a OsStr>,
    workspace: &Path,
) -> anyhow::Result<()> {
    let status = std::process::Command::new(bwrap)
        .args(args)
        .current_dir(workspace)
        .env_clear()
        .env("PATH", gatehouse_agent::context::DEFAULT_COMMAND_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "a sandboxed true failed: {status}");
    Ok(())
}
