//! `gatehouse bench fsops`: `file.fetch` through fsops against a plain `std::fs::read` of the
//! same file, for a 4 KiB and a 16 MiB file.
//!
//! Two fsops figures are printed for each size: [`Root::fetch`] (the confined open, the checks and
//! the read, which is what the targets are about) and the whole `file.fetch` command, which also
//! hashes the content with SHA-256 and encodes it as base64 for the wire.

use std::hint::black_box;
use std::path::Path;

use gatehouse_fsops::RelPath;
use gatehouse_fsops::Root;
use gatehouse_fsops::commands::file_fetch;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::FetchLimits;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::HARD_MAX_BYTES;

use crate::bench::stats::Report;
use crate::bench::stats::Row;
use crate::bench::stats::compare;

/// Arguments of `gatehouse bench fsops`.
#[derive(Debug, clap::Args)]
pub(crate) struct FsopsArgs {
    /// Iterations of the 4 KiB case.
    #[arg(long, default_value_t = 20_000)]
    small_iterations: usize,
    /// Iterations of the 16 MiB case.
    #[arg(long, default_value_t = 60)]
    large_iterations: usize,
}

/// Runs the benchmark in a fresh temporary directory and returns its report.
pub(crate) fn run(args: &FsopsArgs) -> anyhow::Result<Report> {
    let temp = tempfile::tempdir()?;
    let root_dir = temp.path().canonicalize()?;
    let small = vec![0x5a_u8; 4 * 1024];
    let large: Vec<u8> = (0..16 * 1024 * 1024_u32).map(|index| index as u8).collect();
    std::fs::write(root_dir.join("small.bin"), &small)?;
    std::fs::write(root_dir.join("large.bin"), &large)?;
    let root = Root::open(&root_dir)?;
    let mut rows = Vec::new();
    for (case, name, iterations) in [
        ("4 KiB", "small.bin", args.small_iterations),
        ("16 MiB", "large.bin", args.large_iterations),
    ] {
        let target = match case {
            "4 KiB" => "extra < 20µs",
            _ => "ratio <= 1.30x",
        };
        let path = root_dir.join(name);
        // Warm the page cache so both sides read from memory.
        std::fs::read(&path)?;
        let rel = RelPath::parse(name)?;
        let limits = FetchLimits {
            max_bytes: HARD_MAX_BYTES,
            content: ContentMode::Transfer,
        };
        let (baseline, candidate) = compare(
            iterations,
            || read_plain(&path),
            || {
                black_box(root.fetch(&rel, limits)?);
                Ok(())
            },
        )?;
        rows.push(Row {
            case: format!("{case} Root::fetch"),
            baseline_name: String::from("std::fs::read"),
            baseline,
            candidate,
            target: String::from(target),
        });
        let params = FileFetchParams {
            path: format!("{}/{name}", root_dir.display()),
            max_bytes: Some(HARD_MAX_BYTES),
            ..FileFetchParams::default()
        };
        let (baseline, candidate) = compare(
            iterations,
            || read_plain(&path),
            || {
                black_box(file_fetch(&root, &params)?);
                Ok(())
            },
        )?;
        rows.push(Row {
            case: format!("{case} file.fetch (+sha256, base64)"),
            baseline_name: String::from("std::fs::read"),
            baseline,
            candidate,
            target: String::from("informational"),
        });
    }
    Ok(Report {
        title: String::from("gatehouse bench fsops: file.fetch through fsops vs std::fs::read"),
        rows,
        notes: vec![format!(
            "resolver {:?}; files in the page cache; samples alternate between baseline and candidate",
            root.resolver()
        )],
    })
}

fn read_plain(path: &Path) -> anyhow::Result<()> {
    black_box(std::fs::read(path)?);
    Ok(())
}
