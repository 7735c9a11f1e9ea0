//! The native worker child (`gatehouse worker`): the node host starts one per hosted session
//! ([`crate::worker`]); it reads its launch envelope and then one [`WorkerRequest`] per line on
//! stdin, and writes the turn's [`WorkerEvent`]s as JSON lines on stdout. It holds no Gateway
//! credential, no model key, and listens on nothing: it asks the node host's inference broker
//! for every model call over the same pipes ([`WorkerEvent::ModelCall`] out, one
//! [`WorkerRequest::ModelEvent`] back per provider event) through a
//! [`gatehouse_model::broker::BrokeredClient`]. Without a broker in its envelope (a worker
//! started by hand) it can run only the in-process `mock` model. The executable that runs it
//! must also serve as the in-sandbox helper (`ToolConfig::sandbox_helper` is set to it).

use std::io::Write;
use std::path::Path;

use futures_util::StreamExt;
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
use gatehouse_model::ModelError;
use gatehouse_model::ModelRequest;
use gatehouse_model::ToolInput;
use gatehouse_model::ToolKind;
use gatehouse_model::ToolSpec;
use gatehouse_model::broker::BrokerEvent;
use gatehouse_model::broker::BrokerInbox;
use gatehouse_model::broker::BrokeredClient;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::worker::GatewayToolResult;
use gatehouse_protocol::worker::GatewayToolSpec;
use gatehouse_protocol::worker::MAX_WORKER_EVENT_LINE_BYTES;
use gatehouse_protocol::worker::MAX_WORKER_REQUEST_LINE_BYTES;
use gatehouse_protocol::worker::WorkerEvent;
use gatehouse_protocol::worker::WorkerLaunch;
use gatehouse_protocol::worker::WorkerRequest;
use tokio_util::codec::FramedRead;
use tracing::Instrument;

use crate::bounded_lines::BoundedLine;
use crate::bounded_lines::BoundedLines;

/// Why a worker child could not start or stopped reading.
#[derive(Debug, thiserror::Error)]
pub enum WorkerChildError {
    /// Stdin closed before the launch envelope.
    #[error("no launch envelope on stdin")]
    NoLaunch,
    /// The first line is not a [`WorkerLaunch`].
    #[error("the launch envelope is malformed: {0}")]
    MalformedLaunch(#[source] serde_json::Error),
    /// Stdin could not be read.
    #[error("cannot read stdin: {0}")]
    Stdin(#[source] std::io::Error),
    /// The launch envelope is longer than [`MAX_WORKER_REQUEST_LINE_BYTES`].
    #[error("the launch envelope is longer than {MAX_WORKER_REQUEST_LINE_BYTES} bytes")]
    LaunchTooLong,
    /// The running executable, the in-sandbox helper, cannot be found.
    #[error("cannot find the worker's own executable: {0}")]
    CurrentExe(#[source] std::io::Error),
    /// The session workspace cannot be opened.
    #[error("cannot open the session workspace: {0}")]
    Workspace(#[source] gatehouse_agent::AgentError),
}

/// Gateway-tool calls waiting for their answer, by call id.
type Pending = std::sync::Arc<
    parking_lot::Mutex<
        std::collections::HashMap<String, tokio::sync::oneshot::Sender<GatewayToolResult>>,
    >,
>;

/// A Gateway-provided tool, as the worker offers it: a call goes to the node as an event line
/// and the answer comes back on stdin.
#[derive(Debug)]
struct GatewayToolProxy {
    spec: GatewayToolSpec,
    pending: Pending,
}

#[async_trait::async_trait]
impl gatehouse_agent::Tool for GatewayToolProxy {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: self.spec.name.clone(),
            description: self.spec.description.clone(),
            parameters: self.spec.parameters.clone(),
            kind: ToolKind::Function,
        }
    }

    async fn call(&self, _ctx: &ToolContext, input: ToolInput) -> gatehouse_agent::ToolOutcome {
        static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let arguments = match input {
            ToolInput::Function { arguments_json } => {
                serde_json::from_str(&arguments_json).unwrap_or_else(|_| serde_json::json!({}))
            }
            ToolInput::Freeform { input } => serde_json::json!({"input": input}),
        };
        let id = format!(
            "g{}",
            NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.pending.lock().insert(id.clone(), sender);
        emit(&WorkerEvent::GatewayTool {
            id,
            tool: self.spec.name.clone(),
            arguments,
        });
        match receiver.await {
            Ok(result) => gatehouse_agent::ToolOutcome {
                ok: result.ok,
                output: result.output,
            },
            Err(_) => gatehouse_agent::ToolOutcome::failure(
                ErrorCode::Unavailable,
                "the gateway did not answer",
            ),
        }
    }
}

/// Runs the worker on this process's stdin and stdout until stdin closes: one turn at a time,
/// in the order the node host sends them.
///
/// # Errors
/// [`WorkerChildError`] when the worker cannot start; a failed turn is reported as a
/// [`WorkerEvent::Failed`] line instead.
pub async fn run_worker() -> Result<(), WorkerChildError> {
    // No other worker of the same uid may read this one's memory or write into its pipes.
    crate::host::forbid_inspection();
    // Every line is bounded, so a runaway writer costs at most one bound of memory.
    let mut lines = FramedRead::new(
        tokio::io::stdin(),
        BoundedLines::new(MAX_WORKER_REQUEST_LINE_BYTES),
    );
    let first = match lines
        .next()
        .await
        .transpose()
        .map_err(WorkerChildError::Stdin)?
    {
        Some(BoundedLine::Line(first)) => first,
        Some(BoundedLine::TooLong) => return Err(WorkerChildError::LaunchTooLong),
        None => return Err(WorkerChildError::NoLaunch),
    };
    let launch: WorkerLaunch =
        serde_json::from_str(&first).map_err(WorkerChildError::MalformedLaunch)?;
    let inbox = std::sync::Arc::new(BrokerInbox::default());
    let model: Result<std::sync::Arc<dyn ModelClient>, (String, String)> = match &launch.broker {
        Some(broker) => Ok(std::sync::Arc::new(BrokeredClient::new(
            broker.model.clone(),
            std::sync::Arc::new(send_model_call),
            std::sync::Arc::clone(&inbox),
        ))),
        // Started by hand: only the in-process mock, which needs no key.
        None if launch.model == "mock" => ModelConfig::mock()
            .build()
            .map_err(|error| (String::from(error.code()), error.to_string())),
        None => Err((
            String::from(ErrorCode::ModelUnavailable),
            String::from("this worker has no inference broker, and runs only the mock model"),
        )),
    };
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
    config.exec_timeout = std::time::Duration::from_secs(launch.exec_timeout_seconds.max(1));
    // Exactly the sandbox the node host decided on at startup, applied by this same executable
    // as the in-sandbox helper.
    config.sandbox_settings = launch.sandbox.clone();
    config.sandbox_helper = Some(std::env::current_exe().map_err(WorkerChildError::CurrentExe)?);
    // The operator's denials; the Gateway already filtered the Gateway tools it offers.
    let layers = vec![gatehouse_policy::tool::ToolLayer::denying(
        gatehouse_policy::tool::LayerSource::Global,
        launch.denied_tools.clone(),
    )];
    let context = ToolContext::new(Path::new(&launch.workspace), config)
        .map_err(WorkerChildError::Workspace)?;
    let mut reported = std::collections::BTreeMap::new();
    // Turns and Gateway-tool answers share stdin: a reader task sorts them.
    let pending: Pending = std::sync::Arc::default();
    let (turns, mut turn_requests) = tokio::sync::mpsc::channel(4);
    let reader_pending = std::sync::Arc::clone(&pending);
    let reader_inbox = std::sync::Arc::clone(&inbox);
    tokio::spawn(async move {
        // Whatever ends the reader, the broker's answers end with it.
        let _closed = CloseOnDrop(std::sync::Arc::clone(&reader_inbox));
        while let Some(next) = lines.next().await {
            let line = match next {
                Ok(BoundedLine::Line(line)) => line,
                // The decoder drops the rest of the line; the next one is read as usual.
                Ok(BoundedLine::TooLong) => {
                    emit(&WorkerEvent::Failed {
                        code: String::from(ErrorCode::WorkerLineTooLong),
                        message: format!(
                            "a worker request is longer than {MAX_WORKER_REQUEST_LINE_BYTES} bytes; it was skipped"
                        ),
                    });
                    continue;
                }
                Err(_) => return,
            };
            match serde_json::from_str::<WorkerRequest>(&line) {
                Ok(WorkerRequest::Turn(params)) => {
                    if turns.send(Some(*params)).await.is_err() {
                        return;
                    }
                }
                // Handled in order with the turns, so it never overlaps one.
                Ok(WorkerRequest::StopBackground) => {
                    if turns.send(None).await.is_err() {
                        return;
                    }
                }
                Ok(WorkerRequest::ModelEvent { id, event }) => {
                    match serde_json::from_value::<BrokerEvent>(event) {
                        // A late event of an abandoned call is dropped.
                        Ok(event) => {
                            reader_inbox.deliver(id, event);
                        }
                        Err(error) => {
                            reader_inbox.deliver(
                                id,
                                BrokerEvent::Failed {
                                    code: ErrorCode::ModelBadResponse,
                                    message: format!("malformed broker event: {error}"),
                                },
                            );
                        }
                    }
                }
                Ok(WorkerRequest::GatewayToolResult { id, result }) => {
                    let waiter = reader_pending.lock().remove(&id);
                    if let Some(waiter) = waiter {
                        let _ = waiter.send(result);
                    }
                }
                Err(error) => emit(&WorkerEvent::Failed {
                    code: String::from(ErrorCode::InvalidRequest),
                    message: format!("malformed worker request: {error}"),
                }),
            }
        }
    });
    while let Some(request) = turn_requests.recv().await {
        // `None` is a stop request from the node host, sent between turns.
        let Some(params) = request else {
            let stopped = context.stop_background().await;
            emit(&WorkerEvent::BackgroundStopped { stopped });
            continue;
        };
        let mut tool_list = gatehouse_agent::tools::native_tools();
        for spec in &params.gateway_tools {
            tool_list.push(Box::new(GatewayToolProxy {
                spec: spec.clone(),
                pending: std::sync::Arc::clone(&pending),
            }));
        }
        // The turn's own denials (its channel's `deny-tools`) narrow the operator's.
        let mut turn_layers = layers.clone();
        if !params.denied_tools.is_empty() {
            turn_layers.push(gatehouse_policy::tool::ToolLayer::denying(
                gatehouse_policy::tool::LayerSource::Group,
                params.denied_tools.clone(),
            ));
        }
        let tools = ToolSet::new(tool_list).filtered(&turn_layers);
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
        let mut system = match gatehouse_fsops::Root::open(Path::new(&launch.agent_workspace)) {
            Ok(agent_workspace) => gatehouse_agent::build_system_prompt(&agent_workspace).text,
            Err(error) => {
                tracing::warn!(error = %error, "cannot read the bootstrap documents");
                String::from(gatehouse_agent::prompt::PREAMBLE)
            }
        };
        if let Some(skills) = &params.skills_prompt {
            system.push_str("\n\n");
            system.push_str(skills);
        }
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
            max_turn_tokens: params.max_turn_tokens,
        };
        let mut on_event = |event: AgentEvent| {
            if let Some(event) = worker_event(event) {
                emit(&event);
            }
        };
        let cancel = crate::CancellationToken::new();
        // The turn's spans here join the trace of the node host's invoke.
        let span = tracing::info_span!(
            "worker_turn",
            session_key = %params.session_key,
            turn_id = %params.turn_id,
            outcome = tracing::field::Empty,
        );
        gatehouse_telemetry::set_remote_parent(&span, params.traceparent.as_deref());
        let outcome =
            gatehouse_agent::run_turn(model, request, &tools, &context, &mut on_event, &cancel)
                .instrument(span.clone())
                .await;
        span.record(
            "outcome",
            match &outcome {
                Ok(_) => "ok",
                Err(error) => error.code().as_str(),
            },
        );
        match outcome {
            Ok(output) => {
                // Report the workspace before the turn ends, so the Gateway has accepted the
                // checkpoint by the time the next turn can start.
                let scan = gatehouse_agent::checkpoint::scan(context.workspace(), &reported);
                reported = gatehouse_agent::checkpoint::hashes(&scan.entries);
                emit(&WorkerEvent::Checkpoint {
                    entries: scan.entries,
                    omitted: scan.omitted,
                });
                emit(&WorkerEvent::Done {
                    reply: output.reply,
                    usage: output.usage,
                });
            }
            Err(error) => emit(&WorkerEvent::Failed {
                code: String::from(error.code()),
                message: error.to_string(),
            }),
        }
    }
    Ok(())
}

/// Closes the broker inbox when the stdin reader ends.
struct CloseOnDrop(std::sync::Arc<BrokerInbox>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// A model call as the worker writes it: a [`WorkerEvent::ModelCall`] line, encoded from the
/// request without an intermediate JSON value.
#[derive(serde::Serialize)]
#[serde(tag = "type", rename = "modelCall")]
struct ModelCallLine<'a> {
    id: u64,
    request: &'a ModelRequest,
}

/// Writes model call `id` for the node host's broker.
///
/// # Errors
/// `WORKER_LINE_TOO_LONG` for a call longer than [`MAX_WORKER_EVENT_LINE_BYTES`], which is never
/// written (the node host would stop the worker); `MODEL_UNAVAILABLE` when stdout is closed.
fn send_model_call(id: u64, request: &ModelRequest) -> gatehouse_model::Result<()> {
    let line = serde_json::to_string(&ModelCallLine { id, request })
        .map_err(|source| ModelError::InvalidJson { source })?;
    if line.len() > MAX_WORKER_EVENT_LINE_BYTES {
        return Err(ModelError::Brokered {
            code: ErrorCode::WorkerLineTooLong,
            message: format!(
                "the model request is {} bytes, more than the {MAX_WORKER_EVENT_LINE_BYTES} a worker may send",
                line.len()
            ),
        });
    }
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .map_err(|_| ModelError::Brokered {
            code: ErrorCode::ModelUnavailable,
            message: String::from("the pipe to the node host is closed"),
        })
}

/// Returns the line of an agent event, if it has one: a call's usage has none, since the node
/// host's broker reports every call's usage from its own count.
fn worker_event(event: AgentEvent) -> Option<WorkerEvent> {
    let event = match event {
        AgentEvent::ModelUsage { .. } => return None,
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
        AgentEvent::ModelRetry {
            attempt,
            code,
            message,
            delay_ms,
        } => WorkerEvent::ModelRetry {
            attempt,
            code: String::from(code),
            message,
            delay_ms,
        },
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
    };
    Some(event)
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
