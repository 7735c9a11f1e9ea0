//! `gatehouse memory search|status|reindex`: the memory index, through the Gateway's HTTP API.

use std::io::Write;
use std::process::ExitCode;

use futures_util::StreamExt;
use gatehouse_api::client::ClientError;
use gatehouse_api::error::ErrorBody;
use gatehouse_api::error::ErrorResponse;
use gatehouse_api::memory::MemorySearchAnswer;
use gatehouse_api::memory::MemorySearchQuery;
use gatehouse_api::memory::MemoryStatus;
use gatehouse_api::memory::ReindexLine;
use gatehouse_api::memory::ReindexProgress;

/// Arguments of `gatehouse memory`.
#[derive(Debug, clap::Args)]
pub(crate) struct MemoryArgs {
    #[command(subcommand)]
    command: MemoryCommand,
    #[command(flatten)]
    api: crate::chat_cmd::ApiArgs,
}

#[derive(Debug, clap::Subcommand)]
enum MemoryCommand {
    /// Search the memory index.
    Search {
        /// The query.
        query: String,
        /// The most results (default 6).
        #[arg(long)]
        limit: Option<usize>,
    },
    /// Show the index: files, chunks, vectors, whether it is stale.
    Status,
    /// Rebuild the index with the running embedder (into a temporary index, then swapped in).
    Reindex,
}

/// Runs `gatehouse memory`: exit 0 on success, 1 when the Gateway refuses.
pub(crate) fn run(args: MemoryArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let runtime = crate::signals::client_runtime()?;
    runtime.block_on(async move {
        match args.command {
            MemoryCommand::Search { query, limit } => {
                let query = MemorySearchQuery {
                    q: Some(query),
                    limit,
                    min_score: None,
                };
                let answer = client.memory_search(&query).await.map_err(refused)?;
                print_search(&answer, args.api.json);
                Ok(ExitCode::SUCCESS)
            }
            MemoryCommand::Status => {
                let status = client.memory_status().await.map_err(refused)?;
                if args.api.json {
                    crate::output::json(&status);
                } else {
                    crate::output::line(&format!(
                        "files: {}  chunks: {}  vectors: {}  vector search: {}  stale: {}\nbuilt with: {}\nconfigured: {}",
                        status.stats.files,
                        status.stats.chunks,
                        status.stats.vectors,
                        status.vector_search.as_str(),
                        status.stale,
                        status.stats.identity,
                        status.configured
                    ));
                    print_warnings(&status.warnings);
                }
                Ok(ExitCode::SUCCESS)
            }
            MemoryCommand::Reindex => {
                let response = client.memory_reindex().await.map_err(refused)?;
                follow_reindex(response, args.api.json).await
            }
        }
    })
}

/// Prints the Gateway's error body on stdout, as the command always has, and returns the
/// error to exit with.
/// Prints the Gateway's error answer (its JSON, with the stable code) and returns the error.
pub(crate) fn refused(error: ClientError) -> anyhow::Error {
    match &error {
        ClientError::Api { error: body, .. } => crate::output::json(&ErrorResponse {
            error: body.clone(),
        }),
        ClientError::Status { body, .. } => crate::output::line(body),
        ClientError::Unreachable { .. } | ClientError::Decode { .. } => {}
    }
    anyhow::anyhow!(error)
}

fn print_warnings(warnings: &[String]) {
    for warning in warnings {
        eprintln_line(&format!("warning: {warning}"));
    }
}

fn print_search(answer: &MemorySearchAnswer, json: bool) {
    if json {
        crate::output::json(answer);
        return;
    }
    if answer.stale {
        eprintln_line(
            "note: the Harness workspace is not connected; these results come from the retained index (stale)",
        );
    }
    print_warnings(&answer.warnings);
    for hit in &answer.results {
        crate::output::line(&format!(
            "{:.3}  {}\n{}\n",
            hit.score, hit.citation, hit.snippet
        ));
    }
}

fn eprintln_line(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{text}");
}

/// Renders the reindex progress as a bar on stderr and prints the final status.
async fn follow_reindex(response: reqwest::Response, json: bool) -> anyhow::Result<ExitCode> {
    let mut stream = response.bytes_stream();
    let mut records = crate::records::Records::default();
    let mut outcome: Option<Result<MemoryStatus, ErrorBody>> = None;
    while let Some(chunk) = stream.next().await {
        records.push(&chunk?);
        while let Some(line) = records.next_record(b"\n") {
            let Ok(line) = serde_json::from_str::<ReindexLine>(line.trim()) else {
                continue;
            };
            match line {
                ReindexLine::Progress(ReindexProgress { done, total }) => {
                    let width: usize = 30;
                    let filled = match total {
                        0 => width,
                        total => (done * width / total).min(width),
                    };
                    let mut stderr = std::io::stderr().lock();
                    let _ = write!(
                        stderr,
                        "\rreindexing [{}{}] {done}/{total} files",
                        "#".repeat(filled),
                        " ".repeat(width - filled)
                    );
                    let _ = stderr.flush();
                }
                ReindexLine::Finished { status } => outcome = Some(Ok(status)),
                ReindexLine::Failed(ErrorResponse { error }) => outcome = Some(Err(error)),
            }
        }
    }
    eprintln_line("");
    let status = match outcome {
        None => {
            return Err(anyhow::anyhow!(
                "the gateway ended the reindex without a result"
            ));
        }
        Some(Err(error)) => {
            return Err(anyhow::anyhow!(
                "reindex failed: {} ({})",
                error.message,
                error.code
            ));
        }
        Some(Ok(status)) => status,
    };
    if json {
        crate::output::json(&status);
    } else {
        crate::output::line(&format!(
            "reindexed: {} files, {} chunks, {} vectors",
            status.stats.files, status.stats.chunks, status.stats.vectors
        ));
    }
    Ok(ExitCode::SUCCESS)
}
