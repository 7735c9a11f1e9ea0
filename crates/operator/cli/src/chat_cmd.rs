//! `gatehouse chat`: sends a message to a session and streams the reply from its event stream.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use futures_util::StreamExt;
use gatehouse_api::client::Client;
use gatehouse_api::events::EventsQuery;
use gatehouse_api::events::SessionEvent;
use gatehouse_api::sessions::MessageParams;
use gatehouse_gateway::OPERATOR_TOKEN_ENV;

use crate::exit::UsageError;

/// Arguments of `gatehouse chat`.
#[derive(Debug, clap::Args)]
pub(crate) struct ChatArgs {
    /// The message.
    text: String,
    /// The session to talk in.
    #[arg(long, default_value = "main")]
    session: String,
    /// The Gateway's base URL.
    #[arg(long, env = "GATEHOUSE_URL", default_value = "http://127.0.0.1:7420")]
    url: String,
    /// A file holding the operator token (default: GATEHOUSE_TOKEN, else the token file of the
    /// default data directory).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// How long to wait for the reply, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout_seconds: u64,
}

/// Runs `gatehouse chat`: exit 0 when the turn completes, 1 when it fails.
pub(crate) fn run(args: ChatArgs) -> anyhow::Result<ExitCode> {
    let token = operator_token(args.token_file.as_deref())?;
    let base = args.url.trim_end_matches('/').to_owned();
    let runtime = crate::signals::client_runtime()?;
    runtime.block_on(async move {
        let client = Client::new(&base, &token);
        // Open the event stream first, so no event of the new turn is missed.
        let events = client
            .session_events(&args.session, &EventsQuery::default())
            .await
            .map_err(|error| anyhow::anyhow!("cannot open the event stream: {error}"))?;
        let message = MessageParams {
            text: args.text,
            attachments: Vec::new(),
            idempotency_key: Some(gatehouse_gateway::random_token()?),
            queue_mode: None,
        };
        let accepted = client
            .post_message(&args.session, &message)
            .await
            .map_err(|error| anyhow::anyhow!("the message was not accepted: {error}"))?;
        let turn_id = accepted.turn_id;
        let outcome = tokio::time::timeout(
            Duration::from_secs(args.timeout_seconds),
            follow(events, &turn_id),
        )
        .await;
        match outcome {
            Err(_) => Err(anyhow::anyhow!(
                "no reply within {} s; the turn is {turn_id}",
                args.timeout_seconds
            )),
            Ok(result) => result,
        }
    })
}

/// Prints the turn's deltas as they arrive, then its end.
async fn follow(response: reqwest::Response, turn_id: &str) -> anyhow::Result<ExitCode> {
    let mut events = gatehouse_model::sse::events(response);
    let mut streamed = false;
    while let Some(event) = events.next().await {
        let event = event?;
        let name = event.name.unwrap_or_else(|| String::from("message"));
        // An event of another shape (or from a newer Gateway) is not this command's.
        let Ok((_seq, event)) = SessionEvent::parse(&name, &event.data) else {
            continue;
        };
        if event.turn_id() != Some(turn_id) {
            continue;
        }
        match event {
            SessionEvent::MessageDelta(delta) => {
                let mut stdout = std::io::stdout().lock();
                let _ = write!(stdout, "{}", delta.text);
                let _ = stdout.flush();
                streamed = true;
            }
            SessionEvent::TurnCompleted(completed) => {
                match streamed {
                    true => crate::output::line(""),
                    false => crate::output::line(completed.reply.as_deref().unwrap_or_default()),
                }
                return Ok(ExitCode::SUCCESS);
            }
            SessionEvent::TurnFailed(failed) => {
                if streamed {
                    crate::output::line("");
                }
                let code = failed.error.code.as_deref().unwrap_or("UNKNOWN");
                let message = failed.error.message.as_deref().unwrap_or_default();
                crate::output::error_line(&format!(
                    "turn {} {}: {code}: {message}",
                    turn_id,
                    failed.status.as_str()
                ));
                return Ok(ExitCode::from(1));
            }
            // Said on stderr, so a waiting user knows why the answer is late.
            SessionEvent::ModelRetry(retry) => crate::output::error_line(&format!(
                "the model call failed ({}: {}); retrying in {} ms (attempt {})",
                retry.code,
                retry.message,
                retry.delay_ms,
                retry.attempt + 1
            )),
            SessionEvent::TurnQueued(_)
            | SessionEvent::TurnStarted(_)
            | SessionEvent::MessageCompleted(_)
            | SessionEvent::ToolStarted(_)
            | SessionEvent::ToolCompleted(_)
            | SessionEvent::ArtifactStored(_)
            | SessionEvent::ArtifactRefused(_)
            | SessionEvent::StreamDropped(_)
            | SessionEvent::WorkspaceConflict(_)
            | SessionEvent::Other { .. } => {}
        }
    }
    Err(anyhow::anyhow!(
        "the event stream ended before the turn did; the turn is {turn_id}"
    ))
}

/// How an operator command reaches the Gateway's API: `--url`, `--token-file`, `--json`.
#[derive(Debug, clap::Args)]
pub(crate) struct ApiArgs {
    /// The Gateway's base URL.
    #[arg(
        long,
        global = true,
        env = "GATEHOUSE_URL",
        default_value = "http://127.0.0.1:7420"
    )]
    pub(crate) url: String,
    /// A file holding the operator token (default: GATEHOUSE_TOKEN, else the token file of the
    /// default data directory).
    #[arg(long, global = true)]
    pub(crate) token_file: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long, global = true)]
    pub(crate) json: bool,
}

impl ApiArgs {
    /// Returns the base URL without a trailing `/`, and the operator token.
    ///
    /// # Errors
    /// A usage error when the token cannot be read.
    pub(crate) fn resolve(&self) -> anyhow::Result<(String, String)> {
        let token = operator_token(self.token_file.as_deref())?;
        Ok((self.url.trim_end_matches('/').to_owned(), token))
    }

    /// Returns the typed API client of the Gateway these arguments name.
    ///
    /// # Errors
    /// A usage error when the token cannot be read.
    pub(crate) fn client(&self) -> anyhow::Result<Client> {
        let (base, token) = self.resolve()?;
        Ok(Client::new(&base, &token))
    }
}

pub(crate) fn operator_token(token_file: Option<&std::path::Path>) -> anyhow::Result<String> {
    let path = match token_file {
        Some(path) => path.to_path_buf(),
        None => {
            if let Ok(token) = std::env::var(OPERATOR_TOKEN_ENV)
                && !token.trim().is_empty()
            {
                return Ok(token.trim().to_owned());
            }
            crate::paths::default_data_dir()?
                .join("gateway")
                .join("operator-token")
        }
    };
    let token = std::fs::read_to_string(&path).map_err(|error| {
        UsageError::new(format!("cannot read the operator token at {}: {error}; pass --token-file or set GATEHOUSE_TOKEN", path.display()))
    })?;
    Ok(token.trim().to_owned())
}
