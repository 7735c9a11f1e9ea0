//! `gatehouse worker`: the native worker child. The node host starts one per hosted session; it
//! reads its launch envelope and then one turn request per line on stdin, and writes the turn's
//! events as JSON lines on stdout. It holds no Gateway credential and listens on nothing; the
//! model key arrives in the environment variable its envelope names.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use gatehouse_agent::AgentEvent;
use gatehouse_agent::MessageRole;
use gatehouse_agent::SandboxPolicy;
use gatehouse_agent::ToolConfig;
use gatehouse_agent::ToolContext;
use gatehouse_agent::ToolSet;
use gatehouse_agent::TurnRequest;
use gatehouse_model::Message;
use gatehouse_model::ModelClient;
use gatehouse_model::ModelConfig;
use gatehouse_protocol::worker::WorkerEvent;
use gatehouse_protocol::worker::WorkerLaunch;
use gatehouse_protocol::worker::WorkerRequest;
use tokio::io::AsyncBufReadExt;

/// Arguments of `gatehouse worker` (none: everything arrives on stdin).
#[derive(Debug, clap::Args)]
pub(crate) struct WorkerArgs {}

/// Runs the worker until stdin closes.
pub(crate) fn run(_args: WorkerArgs) -> anyhow::Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    runtime.block_on(serve())
}

async fn serve() -> anyhow::Result<ExitCode> {
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    let Some(first) = lines.next_line().await? else {
        return Err(anyhow::anyhow!("no launch envelope on stdin"));
    };
    let launch: WorkerLaunch = serde_json::from_str(&first)
        .map_err(|error| anyhow::anyhow!("the launch envelope is malformed: {error}"))?;
    let model: Result<std::sync::Arc<dyn ModelClient>, (String, String)> =
        ModelConfig::parse(&launch.model, &launch.model_key_env)
            .map_err(|error| (String::from("MODEL_AUTH_FAILED"), error.to_string()))
            .and_then(|config| {
                config
                    .build()
                    .map_err(|error| (error.code().to_owned(), error.to_string()))
            });
    let sandbox = match launch.allow_unsandboxed {
        true => SandboxPolicy::AllowUnsandboxed,
        false => SandboxPolicy::Require,
    };
    let mut config = ToolConfig::new(sandbox);
    config.scratch_dir = launch.scratch.as_ref().map(std::path::PathBuf::from);
    config.hidden_paths = launch
        .hidden_paths
        .iter()
        .map(std::path::PathBuf::from)
        .collect();
    let context = ToolContext::new(Path::new(&launch.workspace), config)?;
    let tools = ToolSet::native();
    let mut reported = std::collections::BTreeMap::new();
    while let Some(line) = lines.next_line().await? {
        let request: WorkerRequest = match serde_json::from_str(&line) {
            Ok(request) => request,
            Err(error) => {
                emit(&WorkerEvent::Failed {
                    code: String::from("INVALID_REQUEST"),
                    message: format!("malformed worker request: {error}"),
                });
                continue;
            }
        };
        let WorkerRequest::Turn(params) = request;
        let model = match &model {
            Ok(model) => model.as_ref(),
            Err((code, message)) => {
                emit(&WorkerEvent::Failed {
                    code: code.clone(),
                    message: message.clone(),
                });
                continue;
            }
        };
        let system = match gatehouse_fsops::Root::open(Path::new(&launch.agent_workspace)) {
            Ok(agent_workspace) => gatehouse_agent::build_system_prompt(&agent_workspace).text,
            Err(error) => {
                tracing::warn!(error = %error, "cannot read the bootstrap documents");
                String::from(gatehouse_agent::prompt::PREAMBLE)
            }
        };
        let history = params
            .history
            .iter()
            .map(|message| match message.role.as_str() {
                "assistant" => Message::Assistant {
                    text: message.content.clone(),
                },
                _ => Message::User {
                    text: message.content.clone(),
                },
            })
            .collect();
        let mut user_texts = params.user_texts.clone();
        if let (false, Some(last)) = (params.attachments.is_empty(), user_texts.last_mut()) {
            last.push_str(&format!(
                "\n\nAttached files (in the workspace): {}",
                params.attachments.join(", ")
            ));
        }
        let request = TurnRequest {
            system,
            history,
            user_texts,
        };
        let mut on_event = |event: AgentEvent| emit(&worker_event(event));
        let cancel = gatehouse_harness::CancellationToken::new();
        let outcome =
            gatehouse_agent::run_turn(model, request, &tools, &context, &mut on_event, &cancel)
                .await;
        match outcome {
            Ok(output) => {
                // Report the workspace before the turn ends, so the Gateway has accepted the
                // checkpoint by the time the next turn can start.
                let entries = gatehouse_agent::checkpoint::scan(context.workspace(), &reported);
                reported = gatehouse_agent::checkpoint::hashes(&entries);
                emit(&WorkerEvent::Checkpoint { entries });
                emit(&WorkerEvent::Done {
                    reply: output.reply,
                });
            }
            Err(error) => emit(&WorkerEvent::Failed {
                code: error.code().to_owned(),
                message: error.to_string(),
            }),
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn worker_event(event: AgentEvent) -> WorkerEvent {
    match event {
        AgentEvent::TextDelta(text) => WorkerEvent::Delta { text },
        AgentEvent::ToolStarted {
            name, arguments, ..
        } => WorkerEvent::ToolStarted {
            tool: name,
            // The model's argument text, as JSON when it is JSON (a freeform patch is not).
            arguments: serde_json::from_str(&arguments)
                .unwrap_or(serde_json::Value::String(arguments)),
        },
        AgentEvent::ToolCompleted { name, ok, .. } => WorkerEvent::ToolCompleted { tool: name, ok },
        AgentEvent::MessageCompleted {
            role,
            content,
            tool_name,
        } => WorkerEvent::Message {
            role: match role {
                MessageRole::Assistant => String::from("assistant"),
                MessageRole::Tool => String::from("tool"),
            },
            content,
            tool_name,
        },
    }
}

/// Writes one event line to stdout; the node host reads it.
fn emit(event: &WorkerEvent) {
    let Ok(line) = serde_json::to_string(event) else {
        return;
    };
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}
