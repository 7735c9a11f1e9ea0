//! `gatehouse state`: moving an installation to another store (`migrate`) and checking a
//! store's integrity (`check`). The work is done by the `gatehouse-state` crate; this module
//! parses the arguments and prints.

use std::io::IsTerminal;
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use gatehouse_protocol::error::ErrorCode;
use gatehouse_state::check::CheckReport;
use gatehouse_state::migrate::MigrateOptions;
use gatehouse_state::migrate::MigrationReport;
use gatehouse_state::migrate::Progress;
use gatehouse_store::StoreError;
use gatehouse_store::exclusive::StoreLock;
use gatehouse_store::location::StoreLocation;

use crate::exit::UsageError;
use crate::media_url::MediaRole;
use crate::media_url::open_media_url;

/// Arguments of `gatehouse state`.
#[derive(Debug, clap::Args)]
pub(crate) struct StateArgs {
    #[command(subcommand)]
    command: StateCommand,
}

#[derive(Debug, clap::Subcommand)]
enum StateCommand {
    /// Copy every table of a Gateway store (and optionally every media blob) to another store,
    /// verify the copy, and continue an interrupted copy when run again. Stop the Gateway first.
    Migrate(MigrateArgs),
    /// Check a Gateway store's integrity: sequence gaps, dangling references, blobs missing
    /// from the media store. Exits 1 when anything is found.
    Check(CheckArgs),
}

/// Arguments of `gatehouse state migrate`.
#[derive(Debug, clap::Args)]
struct MigrateArgs {
    /// The store to copy from (`sqlite://PATH` or `postgres://...`); it is only read.
    #[arg(long, value_name = "URL")]
    from: String,
    /// The store to copy to; it is created and migrated when new.
    #[arg(long, value_name = "URL")]
    to: String,
    /// The media store to copy blobs from (`file://DIR` or `s3://BUCKET/PREFIX`).
    #[arg(long, value_name = "URL", requires = "media_to")]
    media_from: Option<String>,
    /// The media store to copy blobs to (`file://DIR` or `s3://BUCKET/PREFIX`).
    #[arg(long, value_name = "URL", requires = "media_from")]
    media_to: Option<String>,
    /// Delete the Gateway state the target already holds and copy the source in its place
    /// (without it, a target holding state that no earlier run of this copy wrote is refused).
    #[arg(long)]
    replace_target: bool,
    /// Print the summary as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Rows per transaction.
    #[arg(long, hide = true, env = "GATEHOUSE_STATE_MIGRATE_BATCH_ROWS", default_value_t = gatehouse_state::migrate::DEFAULT_BATCH_ROWS)]
    batch_rows: u32,
    /// A pause after each batch, in milliseconds (for tests that interrupt a copy).
    #[arg(long, hide = true, env = "GATEHOUSE_STATE_MIGRATE_PAUSE_MS")]
    pause_ms: Option<u64>,
}

/// Arguments of `gatehouse state check`.
#[derive(Debug, clap::Args)]
struct CheckArgs {
    /// The store to check (`sqlite://PATH` or `postgres://...`); it is only read.
    #[arg(long, value_name = "URL")]
    store: String,
    /// The media store its checkpoints and attachments refer to (`file://DIR` or
    /// `s3://BUCKET/PREFIX`).
    #[arg(long, value_name = "URL")]
    media: Option<String>,
    /// Print `{"store","ok","findings":[{"code","detail",...}]}` on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs `gatehouse state`.
pub(crate) fn run(args: StateArgs) -> anyhow::Result<ExitCode> {
    let runtime = crate::signals::runtime()?;
    match args.command {
        StateCommand::Migrate(args) => runtime.block_on(migrate(args)),
        StateCommand::Check(args) => runtime.block_on(check(args)),
    }
}

fn location(url: &str) -> anyhow::Result<StoreLocation> {
    url.parse::<StoreLocation>()
        .map_err(|error| UsageError::new(error.to_string()).into())
}

async fn migrate(args: MigrateArgs) -> anyhow::Result<ExitCode> {
    let from = location(&args.from)?;
    let to = location(&args.to)?;
    let media = match (&args.media_from, &args.media_to) {
        (Some(source), Some(target)) => Some((
            open_media_url(source, MediaRole::Existing)?,
            open_media_url(target, MediaRole::Create)?,
        )),
        _ => None,
    };
    let locks = lock_both(&from, &to).await?;
    let options = MigrateOptions {
        replace_target: args.replace_target,
        batch_rows: args.batch_rows,
        pause_after_batch: args.pause_ms.map(Duration::from_millis),
    };
    let mut display = ProgressDisplay::new();
    let copy = async {
        let mut report = gatehouse_state::migrate::migrate(&from, &to, &options, &mut |event| {
            display.show(event);
        })
        .await?;
        if let Some((source, target)) = &media {
            let copied = gatehouse_state::media::copy_media(source, target, &mut |event| {
                display.show(event);
            })
            .await?;
            report.verified &= copied.verified;
            report.media = Some(copied);
        }
        anyhow::Ok(report)
    };
    // A lock lost to a Gateway during the copy (after a broken connection) ends it: the copy
    // must not write beside a Gateway. A rerun resumes where it stopped.
    let lost = async {
        match locks.is_empty() {
            // `select_all` of nothing would panic; the target is always locked, but be safe.
            true => std::future::pending::<()>().await,
            false => {
                futures_util::future::select_all(locks.iter().map(|lock| Box::pin(lock.lost())))
                    .await;
            }
        }
    };
    let report = tokio::select! {
        report = copy => report?,
        () = lost => {
            return Err(anyhow::anyhow!(
                "{}: a Gateway took one of the stores during the copy; stop it, then run the \
                 same command again to resume",
                ErrorCode::StoreInUse.as_str()
            ));
        }
    };
    display.finish();
    Ok(report_outcome(
        args.json,
        &report,
        print_migration,
        report.verified,
    ))
}

/// Takes the exclusive use of both stores ([`StoreLock`], as a Gateway does), so that no
/// Gateway serves either while they are copied. A source whose lock file cannot be created (a
/// read-only copy of a SQLite file) is copied with a warning; a store a Gateway holds is refused.
///
/// # Errors
/// `STORE_IN_USE` when a Gateway holds either store; the target's lock errors.
async fn lock_both(from: &StoreLocation, to: &StoreLocation) -> anyhow::Result<Vec<StoreLock>> {
    let in_use = |which: &str, location: &StoreLocation| {
        anyhow::anyhow!(
            "the {which} store {location} is in use ({}): stop the Gateway that serves it \
             before moving it{}",
            ErrorCode::StoreInUse.as_str(),
            match which {
                "target" => ", and check that the target is not the source",
                _ => "",
            }
        )
    };
    let mut locks = Vec::new();
    match StoreLock::acquire(from, Duration::ZERO).await {
        Ok(lock) => locks.push(lock),
        Err(StoreError::InUse { .. }) => return Err(in_use("source", from)),
        Err(error) => crate::output::error_line(&format!(
            "warning: cannot lock the source store {from} ({error}); make sure no Gateway \
             serves it during the copy"
        )),
    }
    match StoreLock::acquire(to, Duration::ZERO).await {
        Ok(lock) => locks.push(lock),
        Err(StoreError::InUse { .. }) => return Err(in_use("target", to)),
        Err(error) => return Err(error.into()),
    }
    Ok(locks)
}

fn print_migration(report: &MigrationReport) {
    crate::output::line(&format!(
        "{:<18} {:>10} {:>10} {:>10}  verified",
        "table", "source", "target", "copied"
    ));
    for table in &report.tables {
        crate::output::line(&format!(
            "{:<18} {:>10} {:>10} {:>10}  {}",
            table.table,
            table.source_rows,
            table.target_rows,
            table.copied_rows,
            yes_no(table.verified)
        ));
    }
    if let Some(media) = &report.media {
        crate::output::line(&format!(
            "media: {} blobs, {} copied ({} bytes), {} already present, {} without a record; verified: {}",
            media.blobs,
            media.copied,
            media.bytes_copied,
            media.already_present,
            media.orphans,
            yes_no(media.verified)
        ));
    }
    crate::output::line(&match report.verified {
        true => format!("{} copied to {} and verified", report.source, report.target),
        false => format!(
            "the copy of {} in {} does not match the source; if the source changed since an \
             interrupted run (a Gateway served it in between), a rerun keeps the tables it \
             already finished: run again with --replace-target to copy everything anew",
            report.source, report.target
        ),
    });
}

fn yes_no(value: bool) -> &'static str {
    match value {
        true => "yes",
        false => "NO",
    }
}

/// Progress on stderr: a line rewritten in place on a terminal, one line per step otherwise.
struct ProgressDisplay {
    terminal: bool,
    open_line: bool,
}

impl ProgressDisplay {
    fn new() -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
            open_line: false,
        }
    }

    fn show(&mut self, event: Progress<'_>) {
        let (text, last) = match event {
            Progress::Rows {
                table,
                copied,
                total,
            } => (
                format!(
                    "migrate: {table} {} {copied}/{total} rows",
                    bar(copied, total)
                ),
                false,
            ),
            Progress::TableDone { table, total } => (
                format!("migrate: {table} {} {total}/{total} rows", bar(1, 1)),
                true,
            ),
            Progress::Verifying => (String::from("migrate: verifying counts and hashes"), true),
            Progress::Blobs { done, total } => (
                format!("migrate: media {} {done}/{total} blobs", bar(done, total)),
                done == total,
            ),
        };
        let mut stderr = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(stderr, "\r\x1b[2K{text}");
            self.open_line = !last;
            if last {
                let _ = writeln!(stderr);
            }
        } else {
            let _ = writeln!(stderr, "{text}");
        }
        let _ = stderr.flush();
    }

    fn finish(&mut self) {
        if self.open_line {
            crate::output::error_line("");
            self.open_line = false;
        }
    }
}

/// A 20-character bar of `done` out of `total`.
fn bar(done: u64, total: u64) -> String {
    let filled = match total {
        0 => 20,
        _ => (done.min(total) * 20 / total) as usize,
    };
    format!("[{}{}]", "#".repeat(filled), " ".repeat(20 - filled))
}

async fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let store = location(&args.store)?;
    let media = args
        .media
        .as_deref()
        .map(|url| open_media_url(url, MediaRole::Existing))
        .transpose()?;
    let report = gatehouse_state::check::check(&store, media.as_ref()).await?;
    Ok(report_outcome(args.json, &report, print_check, report.ok))
}

/// Prints `report` as JSON or, with `print`, as text, and returns exit 0 when it is `ok`, else 1.
fn report_outcome<T: serde::Serialize>(
    json: bool,
    report: &T,
    print: fn(&T),
    ok: bool,
) -> ExitCode {
    match json {
        true => crate::output::json(report),
        false => print(report),
    }
    match ok {
        true => ExitCode::SUCCESS,
        false => ExitCode::from(1),
    }
}

fn print_check(report: &CheckReport) {
    for finding in &report.findings {
        crate::output::line(&format!("{}: {}", finding.code.as_str(), finding.detail));
    }
    crate::output::line(&match report.ok {
        true => format!("{}: ok", report.store),
        false => format!("{}: {} findings", report.store, report.findings.len()),
    });
}
