//! `gatehouse session create|export`: a session's workspace source, and a `worktree` session's
//! history as a git repository, through the Gateway's HTTP API.

use std::io::Read;
use std::io::Write;
use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;
use std::process::Stdio;

use gatehouse_api::client::Client;
use gatehouse_api::sessions::RepositorySpec;
use gatehouse_api::sessions::SessionParams;
use gatehouse_api::sessions::WorkspaceSource;
use gatehouse_api::sessions::WorktreeTarQuery;
use gatehouse_api::sessions::WorktreeVersionSummary;
use gatehouse_protocol::checkpoint::c_quoted;

use crate::exit::UsageError;

/// Arguments of `gatehouse session`.
#[derive(Debug, clap::Args)]
pub(crate) struct SessionArgs {
    #[command(subcommand)]
    command: SessionCommand,
    #[command(flatten)]
    api: crate::chat_cmd::ApiArgs,
}

#[derive(Debug, clap::Subcommand)]
enum SessionCommand {
    /// Create a session with its workspace source (before its first message; `empty` when no
    /// source is given).
    Create {
        /// The session key.
        key: String,
        /// Start the workspace from this repository (`file://`, `https://` or `ssh://`),
        /// fetched by the Harness at the first turn.
        #[arg(long, conflicts_with = "worktree")]
        repository: Option<String>,
        /// The branch, tag or commit of `--repository` or `--from` (default: its `HEAD`).
        #[arg(long = "ref")]
        reference: Option<String>,
        /// Keep a worktree of the session on the Gateway, which every turn's result is merged
        /// into.
        #[arg(long)]
        worktree: bool,
        /// With `--worktree`: start the worktree from this repository.
        #[arg(long, requires = "worktree")]
        from: Option<String>,
    },
    /// Write a `worktree` session's history to a new git repository: one commit on `main` per
    /// worktree version (its start, each Gateway-side edit, each turn's merged result), and
    /// each turn's whole result as `refs/gatehouse/worker-results/<turn id>`.
    Export {
        /// The session key.
        key: String,
        /// The directory to create the repository in (it must not exist, or be empty).
        #[arg(long)]
        to: PathBuf,
    },
}

/// Runs `gatehouse session`: exit 0 on success, 1 when the Gateway refuses or git fails.
pub(crate) fn run(args: SessionArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let json = args.api.json;
    let runtime = crate::signals::client_runtime()?;
    runtime.block_on(async move {
        match args.command {
            SessionCommand::Create {
                key,
                repository,
                reference,
                worktree,
                from,
            } => {
                let source = source(repository, reference, worktree, from)?;
                let created = client
                    .put_session(&key, &SessionParams { workspace: source })
                    .await
                    .map_err(crate::memory_cmd::refused)?;
                match json {
                    true => crate::output::json(&created),
                    false => crate::output::line(&format!("session {key} is ready")),
                }
                Ok(ExitCode::SUCCESS)
            }
            SessionCommand::Export { key, to } => {
                let versions = export(&client, &key, &to).await?;
                match json {
                    true => crate::output::json(&serde_json::json!({
                        "sessionKey": key,
                        "versions": versions,
                        "to": to,
                    })),
                    false => crate::output::line(&format!(
                        "exported {versions} worktree versions of {key} to {}",
                        to.display()
                    )),
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

/// Returns the source the flags of `create` name.
fn source(
    repository: Option<String>,
    reference: Option<String>,
    worktree: bool,
    from: Option<String>,
) -> anyhow::Result<WorkspaceSource> {
    Ok(match (repository, worktree, from) {
        (Some(url), _, _) => WorkspaceSource::Repository { url, reference },
        (None, true, from) => {
            if from.is_none() && reference.is_some() {
                return Err(UsageError::new("--ref needs --repository or --from").into());
            }
            WorkspaceSource::Worktree {
                from: from.map(|url| RepositorySpec { url, reference }),
            }
        }
        (None, false, _) => {
            if reference.is_some() {
                return Err(UsageError::new("--ref needs --repository or --from").into());
            }
            WorkspaceSource::Empty
        }
    })
}

/// Exports the worktree of `key` into a new repository at `to` and returns how many versions
/// it wrote.
async fn export(client: &Client, key: &str, to: &Path) -> anyhow::Result<usize> {
    if std::fs::read_dir(to).is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(UsageError::new(format!(
            "{} exists and is not empty; export writes a new repository",
            to.display()
        ))
        .into());
    }
    let log = client
        .worktree_log(key)
        .await
        .map_err(crate::memory_cmd::refused)?;
    git(None, &["init", "-q", "-b", "main"], Some(to))?;
    let mut import = std::process::Command::new("git")
        .args(["fast-import", "--quiet", "--done"])
        .current_dir(to)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|error| anyhow::anyhow!("cannot run git fast-import: {error}"))?;
    let mut stream = import
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("git fast-import has no input"))?;
    let mut previous: Option<usize> = None;
    let mut mark = 0;
    for version in &log.versions {
        if let (Some(turn_id), Some(staged_ref)) = (&version.turn_id, &version.staged_ref) {
            let result = client
                .worktree_tar(
                    key,
                    &WorktreeTarQuery {
                        version: None,
                        turn: Some(turn_id.clone()),
                    },
                )
                .await
                .map_err(crate::memory_cmd::refused)?;
            mark += 1;
            let message = format!("the whole result of turn {turn_id}\n");
            write_commit(
                &mut stream,
                staged_ref,
                mark,
                previous,
                version,
                &message,
                &result,
            )?;
        }
        let tree = client
            .worktree_tar(
                key,
                &WorktreeTarQuery {
                    version: Some(version.version),
                    turn: None,
                },
            )
            .await
            .map_err(crate::memory_cmd::refused)?;
        mark += 1;
        write_commit(
            &mut stream,
            "refs/heads/main",
            mark,
            previous,
            version,
            &message_of(version),
            &tree,
        )?;
        previous = Some(mark);
    }
    stream.write_all(b"done\n")?;
    drop(stream);
    let status = import.wait()?;
    if !status.success() {
        anyhow::bail!("git fast-import failed ({status})");
    }
    if !log.versions.is_empty() {
        git(Some(to), &["reset", "-q", "--hard", "main"], None)?;
    }
    Ok(log.versions.len())
}

/// Runs git (in `dir`, when given, with `target` appended to its arguments, when given).
fn git(dir: Option<&Path>, args: &[&str], target: Option<&Path>) -> anyhow::Result<()> {
    let mut command = std::process::Command::new("git");
    command.args(args);
    if let Some(dir) = dir {
        command.current_dir(dir);
    }
    if let Some(target) = target {
        command.arg(target);
    }
    let output = command
        .output()
        .map_err(|error| anyhow::anyhow!("cannot run git: {error}"))?;
    if !output.status.success() {
        anyhow::bail!(
            "git {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// The commit message of a version.
fn message_of(version: &WorktreeVersionSummary) -> String {
    let mut message = match (version.origin.as_str(), &version.turn_id) {
        ("turn", Some(turn_id)) => format!("turn {turn_id}\n"),
        ("edit", _) => format!("edit by {}\n", version.actor),
        _ => String::from("start\n"),
    };
    if !version.conflicts.is_empty() {
        message.push_str("\nKept the worktree's version of (changed on both sides):\n");
        for path in &version.conflicts {
            message.push_str(&format!("  {path}\n"));
        }
    }
    message.push_str(&format!(
        "\nGatehouse-Worktree-Version: {}\n",
        version.version
    ));
    message
}

/// Writes one fast-import commit of the tree in `archive` to `reference`.
fn write_commit(
    stream: &mut impl Write,
    reference: &str,
    mark: usize,
    parent: Option<usize>,
    version: &WorktreeVersionSummary,
    message: &str,
    archive: &[u8],
) -> anyhow::Result<()> {
    let seconds = version.created_at / 1000;
    writeln!(stream, "commit {reference}")?;
    writeln!(stream, "mark :{mark}")?;
    writeln!(
        stream,
        "committer gatehouse <gatehouse@localhost> {seconds} +0000"
    )?;
    writeln!(stream, "data {}", message.len())?;
    stream.write_all(message.as_bytes())?;
    writeln!(stream)?;
    if let Some(parent) = parent {
        writeln!(stream, "from :{parent}")?;
    }
    writeln!(stream, "deleteall")?;
    let mut tar = tar::Archive::new(archive);
    for entry in tar.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let (mode, content) = match entry.header().entry_type() {
            tar::EntryType::Symlink => {
                let target = entry
                    .link_name()?
                    .map(|target| target.to_string_lossy().into_owned())
                    .unwrap_or_default();
                ("120000", target.into_bytes())
            }
            tar::EntryType::Regular => {
                let executable = entry.header().mode()? & 0o111 != 0;
                let mut content = Vec::new();
                entry.read_to_end(&mut content)?;
                (if executable { "100755" } else { "100644" }, content)
            }
            _ => continue,
        };
        writeln!(stream, "M {mode} inline {}", c_quoted(&path))?;
        writeln!(stream, "data {}", content.len())?;
        stream.write_all(&content)?;
        writeln!(stream)?;
    }
    writeln!(stream)?;
    Ok(())
}
