//! `gatehouse memory search|status|reindex`: the memory index, through the Gateway's HTTP API.

use std::io::Write;
use std::process::ExitCode;

use futures_util::StreamExt;

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
    let (base, token) = args.api.resolve()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async move {
        let client = reqwest::Client::new();
        let request = match &args.command {
            MemoryCommand::Search { query, limit } => {
                let mut params = vec![("q", query.clone())];
                if let Some(limit) = limit {
                    params.push(("limit", limit.to_string()));
                }
                let url = reqwest::Url::parse_with_params(&format!("{base}/v1/memory/search"), &params)
                    .map_err(|error| crate::exit::UsageError::new(format!("--url: {error}")))?;
                client.get(url)
            }
            MemoryCommand::Status => client.get(format!("{base}/v1/memory/status")),
            MemoryCommand::Reindex => client.post(format!("{base}/v1/memory/reindex")),
        };
        let response = request
            .bearer_auth(&token)
            .send()
            .await
            .map_err(|error| anyhow::anyhow!("cannot reach the gateway at {base}: {error}"))?;
        let status = response.status();
        if !status.is_success() {
            let body = response.text().await.unwrap_or_default();
            crate::output::line(&body);
            return Err(anyhow::anyhow!("the gateway refused ({status})"));
        }
        match args.command {
            MemoryCommand::Reindex => follow_reindex(response, args.api.json).await,
            MemoryCommand::Search { .. } => {
                let body: serde_json::Value = response.json().await?;
                print_search(&body, args.api.json);
                Ok(ExitCode::SUCCESS)
            }
            MemoryCommand::Status => {
                let body: serde_json::Value = response.json().await?;
                if args.api.json {
                    crate::output::json(&body);
                } else {
                    crate::output::line(&format!(
                        "files: {}  chunks: {}  vectors: {}  vector search: {}  stale: {}\nbuilt with: {}\nconfigured: {}",
                        body["files"],
                        body["chunks"],
                        body["vectors"],
                        body["vectorSearch"].as_str().unwrap_or_default(),
                        body["stale"],
                        body["identity"].as_str().unwrap_or_default(),
                        body["configured"].as_str().unwrap_or_default()
                    ));
                    print_warnings(&body);
                }
                Ok(ExitCode::SUCCESS)
            }
        }
    })
}

fn print_warnings(body: &serde_json::Value) {
    for warning in body["warnings"].as_array().into_iter().flatten() {
        eprintln_line(&format!(
            "warning: {}",
            warning.as_str().unwrap_or_default()
        ));
    }
}

fn print_search(body: &serde_json::Value, json: bool) {
    if json {
        crate::output::json(body);
        return;
    }
    if body["stale"] == true {
        eprintln_line(
            "note: the Harness workspace is not connected; these results come from the retained index (stale)",
        );
    }
    print_warnings(body);
    for hit in body["results"].as_array().into_iter().flatten() {
        crate::output::line(&format!(
            "{:.3}  {}\n{}\n",
            hit["score"].as_f64().unwrap_or_default(),
            hit["citation"].as_str().unwrap_or_default(),
            hit["snippet"].as_str().unwrap_or_default()
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
    let mut last: Option<serde_json::Value> = None;
    while let Some(chunk) = stream.next().await {
        records.push(&chunk?);
        while let Some(line) = records.next_record(b"\n") {
            let Ok(value) = serde_json::from_str::<serde_json::Value>(line.trim()) else {
                continue;
            };
            if let (Some(done), Some(total)) = (value["done"].as_u64(), value["total"].as_u64()) {
                let width: usize = 30;
                let filled = match usize::try_from(total) {
                    Ok(0) | Err(_) => width,
                    Ok(total) => {
                        (usize::try_from(done).unwrap_or(total) * width / total).min(width)
                    }
                };
                let mut stderr = std::io::stderr().lock();
                let _ = write!(
                    stderr,
                    "\rreindexing [{}{}] {done}/{total} files",
                    "#".repeat(filled),
                    " ".repeat(width - filled)
                );
                let _ = stderr.flush();
            } else {
                last = Some(value);
            }
        }
    }
    eprintln_line("");
    let Some(last) = last else {
        return Err(anyhow::anyhow!(
            "the gateway ended the reindex without a result"
        ));
    };
    if let Some(error) = last.get("error") {
        return Err(anyhow::anyhow!(
            "reindex failed: {} ({})",
            error["message"].as_str().unwrap_or_default(),
            error["code"].as_str().unwrap_or_default()
        ));
    }
    if json {
        crate::output::json(&last["status"]);
    } else {
        crate::output::line(&format!(
            "reindexed: {} files, {} chunks, {} vectors",
            last["status"]["files"], last["status"]["chunks"], last["status"]["vectors"]
        ));
    }
    Ok(ExitCode::SUCCESS)
}
