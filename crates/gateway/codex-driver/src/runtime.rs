//! [`CodexRuntime`]: runs Gateway turns on the Harness's `codex app-server`, reached through the
//! `codex.appserver` relay.
//!
//! - One app-server connection at a time, opened as soon as a codex node is connected and kept
//!   open (`initialize` with the experimental API, then `initialized`); `/readyz` reports ready
//!   only while it is initialized.
//! - One Codex thread per session, started with the node's workspace as `cwd`, approval policy
//!   `untrusted` (so the Gateway answers every approval), the `workspace-write` sandbox and the
//!   Gateway tools as dynamic tools (without the Gateway-local ones). The binding is stored; on a
//!   new connection (a Gateway or Codex restart) the thread is resumed, never replaced.
//! - Notifications become deltas, tool events and committed transcript messages; approvals are
//!   answered by the configured policy and audited; `item/tool/call` runs the Gateway tool after
//!   the Gateway's own policy check.
//! - An abort sends `turn/interrupt`; a lost connection fails the turn, which is not replayed.
//! - `MEDIA:<path>` lines of the reply name reply artifacts: they are fetched through the
//!   workspace service (no symlinks, nothing outside the workspace) into the media store.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::Weak;
use std::time::Duration;

use parking_lot::Mutex;

use gatehouse_gateway::CODEX_EXCLUDED_TOOLS;
use gatehouse_gateway::NodeConnection;
use gatehouse_gateway::RuntimeParts;
use gatehouse_gateway::TurnFailure;
use gatehouse_gateway::TurnInput;
use gatehouse_gateway::TurnReply;
use gatehouse_gateway::TurnRuntime;
use gatehouse_gateway::TurnSink;
use gatehouse_gateway::denied_by;
use gatehouse_gateway::loggable;
use gatehouse_gateway::without_codex_excluded;
use gatehouse_protocol::codex::CODEX_APPSERVER;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::worker::GatewayToolParams;
use gatehouse_protocol::worker::TokenUsage;

use crate::messages::ApprovalResponse;
use crate::messages::CodexErrorInfo;
use crate::messages::DynamicToolCallParams;
use crate::messages::DynamicToolCallResponse;
use crate::messages::DynamicToolSpec;
use crate::messages::ElicitationResponse;
use crate::messages::FileUpdateChange;
use crate::messages::ItemStatus;
use crate::messages::PermissionsApprovalResponse;
use crate::messages::ServerNotification;
use crate::messages::ServerRequest;
use crate::messages::ThreadItem;
use crate::messages::ThreadResume;
use crate::messages::ThreadResumeParams;
use crate::messages::ThreadSettings;
use crate::messages::ThreadStart;
use crate::messages::ThreadStartParams;
use crate::messages::ToolContentItem;
use crate::messages::TurnInterrupt;
use crate::messages::TurnInterruptParams;
use crate::messages::TurnStart;
use crate::messages::TurnStartParams;
use crate::messages::TurnStatus;
use crate::messages::TurnSteer;
use crate::messages::TurnSteerParams;
use crate::messages::UserInput;
use crate::rpc::DEFAULT_REQUEST_TIMEOUT;
use crate::rpc::INVALID_PARAMS;
use crate::rpc::METHOD_NOT_FOUND;
use crate::rpc::RpcClient;
use crate::rpc::ThreadMessage;

/// How long a turn waits for a codex node to connect before failing.
pub const DEFAULT_NODE_GRACE: Duration = Duration::from_secs(10);

/// How often the runtime checks that its app-server connection is up.
const MAINTAIN_INTERVAL: Duration = Duration::from_millis(500);

/// The most reply artifacts fetched per message.
pub const MAX_ARTIFACTS: usize = 16;

/// The most bytes of reply artifacts fetched per message: 64 MiB.
pub const MAX_ARTIFACT_BYTES: u64 = 64 * 1024 * 1024;

/// How long fetching the reply artifacts of one message may take.
pub const ARTIFACT_DEADLINE: Duration = Duration::from_secs(60);

/// How the Gateway answers one kind of Codex approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalDecision {
    /// Approve this request.
    Accept,
    /// Approve this and the same request again in this session (Codex remembers it).
    AcceptForSession,
    /// Refuse; the agent carries on without it.
    Decline,
}

impl ApprovalDecision {
    /// Parses `accept`, `accept-for-session` or `decline`.
    ///
    /// # Errors
    /// A message listing the accepted values.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "accept" => Ok(Self::Accept),
            "accept-for-session" => Ok(Self::AcceptForSession),
            "decline" => Ok(Self::Decline),
            other => Err(format!(
                "invalid approval decision {other:?}: use accept, accept-for-session or decline"
            )),
        }
    }

    /// Returns the decision as Codex spells it.
    pub fn wire(self) -> &'static str {
        match self {
            Self::Accept => "accept",
            Self::AcceptForSession => "acceptForSession",
            Self::Decline => "decline",
        }
    }
}

/// The tool names of the tool policy a Codex command approval stands for: a channel's
/// `deny-tools` naming one of them (or `group:runtime`) declines every command.
const COMMAND_TOOLS: &[&str] = &["exec"];

/// The tool names a Codex file-change approval stands for: a channel's `deny-tools` naming one
/// of them (or `group:fs`) declines every file change.
const FILE_CHANGE_TOOLS: &[&str] = &["write", "edit", "apply_patch"];

/// The Gateway's policy for Codex.
#[derive(Debug, Clone)]
pub struct CodexConfig {
    /// How command-execution approvals are answered.
    pub command_approval: ApprovalDecision,
    /// How file-change approvals are answered.
    pub file_change_approval: ApprovalDecision,
    /// How long a turn waits for a codex node.
    pub node_grace: Duration,
}

impl Default for CodexConfig {
    /// Accepts commands and file changes (Codex runs them in its `workspace-write` sandbox on
    /// the Harness) and waits [`DEFAULT_NODE_GRACE`] for a node.
    fn default() -> Self {
        Self {
            command_approval: ApprovalDecision::Accept,
            file_change_approval: ApprovalDecision::Accept,
            node_grace: DEFAULT_NODE_GRACE,
        }
    }
}

/// One initialized app-server connection.
struct Connection {
    rpc: RpcClient,
    node: Arc<NodeConnection>,
    workspace_root: String,
    loaded_threads: Mutex<HashSet<String>>,
}

/// Runs turns on the Harness's Codex.
pub struct CodexRuntime {
    parts: RuntimeParts,
    config: CodexConfig,
    connection: tokio::sync::Mutex<Option<Arc<Connection>>>,
}

impl CodexRuntime {
    /// Returns the runtime, and starts keeping an app-server connection open whenever a codex
    /// node is connected. Must be called inside a Tokio runtime.
    pub fn new(parts: RuntimeParts, config: CodexConfig) -> Arc<Self> {
        let runtime = Arc::new(Self {
            parts,
            config,
            connection: tokio::sync::Mutex::new(None),
        });
        tokio::spawn(maintain(Arc::downgrade(&runtime)));
        runtime
    }

    /// Returns the live connection, opening one (relay, `initialize`) when there is none.
    async fn connection(&self, grace: Duration) -> Result<Arc<Connection>, TurnFailure> {
        let mut slot = self.connection.lock().await;
        if let Some(connection) = slot.as_ref()
            && !connection.rpc.is_closed()
        {
            return Ok(Arc::clone(connection));
        }
        *slot = None;
        let registry = &self.parts.registry;
        let Some(node) = registry.wait_serving(&[CODEX_APPSERVER], grace).await else {
            return Err(TurnFailure::new(
                ErrorCode::DependencyUnavailable,
                "no Harness node serving the codex runtime is connected; the turn is not run anywhere else",
            ));
        };
        let Some(workspace_root) = node.workspace_root.clone() else {
            return Err(TurnFailure::new(
                ErrorCode::NodeBadResponse,
                "the codex node did not declare its workspace root",
            ));
        };
        let relay = crate::relay::open(registry, &node).await.map_err(|error| {
            TurnFailure::new(
                ErrorCode::DependencyUnavailable,
                format!("cannot open the codex app-server relay: {error}"),
            )
        })?;
        let rpc = RpcClient::start(relay.transport);
        let ended = relay.ended;
        let answer = rpc.initialize("gatehouse").await;
        let info = answer.map_err(|error| {
            let reason = ended_reason(ended);
            TurnFailure::new(
                ErrorCode::CodexUnavailable,
                format!("codex app-server did not initialize: {error}{reason}"),
            )
        })?;
        tracing::info!(
            node = %node.device_id,
            user_agent = %info.user_agent,
            "initialized codex app-server over the relay"
        );
        let connection = Arc::new(Connection {
            rpc,
            node,
            workspace_root,
            loaded_threads: Mutex::new(HashSet::new()),
        });
        *slot = Some(Arc::clone(&connection));
        Ok(connection)
    }

    /// Returns the session's thread on `connection`: resumes the bound one, or starts and binds
    /// a new one, offered the Gateway tools the turn `turn_id` may call (a later turn's
    /// denials are checked again on each call).
    async fn thread_for(
        &self,
        connection: &Connection,
        session_key: &str,
        turn_id: &str,
    ) -> Result<String, TurnFailure> {
        let bound = self
            .parts
            .store
            .codex_thread(session_key)
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
        match bound {
            Some(thread_id) if connection.loaded_threads.lock().contains(&thread_id) => {
                Ok(thread_id)
            }
            Some(thread_id) => {
                let params = ThreadResumeParams {
                    thread_id: thread_id.clone(),
                    exclude_turns: true,
                    settings: self.thread_settings(connection).await,
                };
                connection
                    .rpc
                    .call::<ThreadResume>(&params, DEFAULT_REQUEST_TIMEOUT)
                    .await
                    .map_err(|error| {
                        TurnFailure::new(
                            ErrorCode::CodexThreadUnavailable,
                            format!("cannot resume the session's Codex thread {thread_id}: {error}; the session is not moved to a new thread"),
                        )
                    })?;
                tracing::info!(session_key, thread_id = %thread_id, "resumed the session's Codex thread");
                connection.loaded_threads.lock().insert(thread_id.clone());
                Ok(thread_id)
            }
            None => {
                let denied = self
                    .parts
                    .tools
                    .denied_for(turn_id)
                    .await
                    .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
                let dynamic_tools =
                    without_codex_excluded(self.parts.tools.offered_without(&denied))
                        .into_iter()
                        .map(|spec| DynamicToolSpec {
                            kind: String::from("function"),
                            name: spec.name,
                            description: spec.description,
                            input_schema: spec.parameters,
                        })
                        .collect();
                let params = ThreadStartParams {
                    settings: self.thread_settings(connection).await,
                    dynamic_tools,
                    service_name: String::from("gatehouse"),
                };
                let started = connection
                    .rpc
                    .call::<ThreadStart>(&params, DEFAULT_REQUEST_TIMEOUT)
                    .await
                    .map_err(|error| match error {
                        crate::rpc::RpcError::BadResponse(error) => {
                            TurnFailure::new(ErrorCode::CodexBadResponse, error.to_string())
                        }
                        other => TurnFailure::new(
                            ErrorCode::CodexUnavailable,
                            format!("cannot start a Codex thread: {other}"),
                        ),
                    })?;
                let thread_id = started.thread.id;
                self.parts
                    .store
                    .bind_codex_thread(session_key, &thread_id, gatehouse_protocol::time::now_ms())
                    .await
                    .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
                self.parts
                    .audit
                    .record(
                        &actor(connection),
                        "codex.thread.bind",
                        "succeeded",
                        None,
                        serde_json::json!({"sessionKey": session_key, "threadId": thread_id}),
                    )
                    .await;
                connection.loaded_threads.lock().insert(thread_id.clone());
                Ok(thread_id)
            }
        }
    }

    /// The settings of `thread/start` and `thread/resume`: the node's workspace as cwd, every
    /// approval asked of the Gateway, the `workspace-write` sandbox, and the workspace's skills
    /// (as of this start or resume) as developer instructions.
    async fn thread_settings(&self, connection: &Connection) -> ThreadSettings {
        ThreadSettings {
            cwd: connection.workspace_root.clone(),
            approval_policy: String::from("untrusted"),
            sandbox: String::from("workspace-write"),
            developer_instructions: self.parts.skills.for_codex_thread().await,
        }
    }

    /// Answers one server request of the running turn. A request whose params do not decode is
    /// refused with `invalid params`, so Codex never waits on it.
    async fn answer(
        &self,
        connection: &Connection,
        input: &TurnInput,
        id: &serde_json::Value,
        method: &str,
        params: serde_json::Value,
    ) {
        let rpc = &connection.rpc;
        let request = match ServerRequest::decode(method, params) {
            Ok(request) => request,
            Err(error) => {
                tracing::warn!(error = %error, "refusing a codex request the Gateway cannot read");
                if let Err(error) = rpc
                    .respond_error(id, INVALID_PARAMS, &error.to_string())
                    .await
                {
                    tracing::warn!(error = %error, method, "cannot answer codex app-server");
                }
                return;
            }
        };
        let details = |kind: &str, item_id: &str, decision: &str| {
            serde_json::json!({"sessionKey": input.session_key, "turnId": input.turn_id, "kind": kind,
                "itemId": item_id, "decision": decision})
        };
        let sent = match request {
            ServerRequest::CommandExecutionApproval(params)
            | ServerRequest::FileChangeApproval(params) => {
                let (kind, configured, tools) = if method.starts_with("item/command") {
                    ("command", self.config.command_approval, COMMAND_TOOLS)
                } else {
                    (
                        "fileChange",
                        self.config.file_change_approval,
                        FILE_CHANGE_TOOLS,
                    )
                };
                // The turn's channel may narrow the tools: what it denies is declined,
                // and so is everything when the store cannot say (fail closed).
                let narrowed = match self.parts.tools.denied_for(&input.turn_id).await {
                    Ok(denied) => tools.iter().any(|tool| denied_by(&denied, tool)),
                    Err(error) => {
                        tracing::warn!(error = %error, "cannot read the session's channel; declining");
                        true
                    }
                };
                let decision = match narrowed {
                    true => ApprovalDecision::Decline,
                    false => configured,
                };
                let outcome = if decision == ApprovalDecision::Decline {
                    "declined"
                } else {
                    "accepted"
                };
                self.parts
                    .audit
                    .record(
                        &actor(connection),
                        "codex.approval",
                        outcome,
                        (decision == ApprovalDecision::Decline)
                            .then_some(ErrorCode::PolicyDeclined.as_str()),
                        details(kind, &params.item_id, decision.wire()),
                    )
                    .await;
                let response = ApprovalResponse {
                    decision: decision.wire().to_owned(),
                };
                rpc.respond(id, &response).await
            }
            ServerRequest::DynamicToolCall(params) => {
                let response = self.call_gateway_tool(connection, input, params).await;
                rpc.respond(id, &response).await
            }
            ServerRequest::PermissionsApproval(params) => {
                self.parts
                    .audit
                    .record(
                        &actor(connection),
                        "codex.approval",
                        "declined",
                        Some(ErrorCode::PolicyDeclined.as_str()),
                        details("permissions", &params.item_id, "none"),
                    )
                    .await;
                let response = PermissionsApprovalResponse {
                    permissions: serde_json::Map::new(),
                    scope: String::from("turn"),
                };
                rpc.respond(id, &response).await
            }
            ServerRequest::McpServerElicitation => {
                let response = ElicitationResponse {
                    action: String::from("decline"),
                    content: None,
                };
                rpc.respond(id, &response).await
            }
            ServerRequest::Other { method } => {
                tracing::warn!(
                    method,
                    "refusing a codex request the Gateway does not handle"
                );
                rpc.respond_error(
                    id,
                    METHOD_NOT_FOUND,
                    "not supported by the Gatehouse Gateway",
                )
                .await
            }
        };
        if let Err(error) = sent {
            tracing::warn!(error = %error, method, "cannot answer codex app-server");
        }
    }

    /// Runs a dynamic tool call (`item/tool/call`) as a Gateway tool and returns the answer.
    async fn call_gateway_tool(
        &self,
        connection: &Connection,
        input: &TurnInput,
        params: DynamicToolCallParams,
    ) -> DynamicToolCallResponse {
        let tool = params.tool;
        let outcome = if CODEX_EXCLUDED_TOOLS.contains(&tool.as_str()) {
            Err(format!(
                "POLICY_DENIED: {tool} is Gateway-local and never runs for a Codex agent"
            ))
        } else {
            let call = GatewayToolParams {
                session_key: input.session_key.clone(),
                turn_id: input.turn_id.clone(),
                tool: tool.clone(),
                arguments: params.arguments,
            };
            match self.parts.tools.call_as(&actor(connection), &call).await {
                Ok(result) if result.ok => Ok(result.output),
                Ok(result) => Err(result.output),
                Err(error) => Err(format!("{}: {}", error.code, error.message)),
            }
        };
        let (text, success) = match outcome {
            Ok(text) => (text, true),
            Err(text) => (text, false),
        };
        DynamicToolCallResponse {
            content_items: vec![ToolContentItem::InputText { text }],
            success,
        }
    }

    /// Fetches the reply's `MEDIA:` artifacts into the media store and records each outcome.
    async fn store_artifacts(&self, connection: &Connection, reply: &str, sink: &TurnSink) {
        let paths = artifact_paths(reply, &connection.workspace_root);
        if paths.is_empty() {
            return;
        }
        let fetch_all = async {
            let mut total: u64 = 0;
            for (index, path) in paths.iter().enumerate() {
                if index >= MAX_ARTIFACTS {
                    sink.artifact_refused(
                        path,
                        ErrorCode::TooManyArtifacts.as_str(),
                        &format!("at most {MAX_ARTIFACTS} artifacts per message"),
                    )
                    .await;
                    continue;
                }
                let file = match self.parts.workspace.fetch(path).await {
                    Ok(file) => file,
                    Err(error) => {
                        sink.artifact_refused(path, error.code(), &error.to_string())
                            .await;
                        continue;
                    }
                };
                total += file.bytes.len() as u64;
                if total > MAX_ARTIFACT_BYTES {
                    sink.artifact_refused(
                        path,
                        ErrorCode::ArtifactsTooLarge.as_str(),
                        "over 64 MiB of artifacts in one message",
                    )
                    .await;
                    continue;
                }
                let size = file.bytes.len() as u64;
                let name = path.rsplit('/').next();
                match self
                    .parts
                    .media
                    .put(file.bytes.into(), &file.mime_type, name)
                    .await
                {
                    Ok(record) => sink.artifact_stored(path, &record.id, size).await,
                    Err(error) => {
                        sink.artifact_refused(path, error.code().as_str(), &error.to_string())
                            .await
                    }
                }
            }
        };
        if tokio::time::timeout(ARTIFACT_DEADLINE, fetch_all)
            .await
            .is_err()
        {
            sink.artifact_refused(
                "*",
                ErrorCode::Timeout.as_str(),
                "fetching the reply artifacts took longer than 60 s",
            )
            .await;
        }
    }
}

/// Keeps an app-server connection open while the runtime lives.
async fn maintain(runtime: Weak<CodexRuntime>) {
    loop {
        let Some(strong) = runtime.upgrade() else {
            return;
        };
        if strong
            .parts
            .registry
            .find_serving(&[CODEX_APPSERVER])
            .is_some()
            && let Err(failure) = strong.connection(Duration::ZERO).await
        {
            tracing::debug!(code = %loggable(&failure.code), message = %loggable(&failure.message), "codex app-server not connected yet");
        }
        drop(strong);
        tokio::time::sleep(MAINTAIN_INTERVAL).await;
    }
}

#[async_trait::async_trait]
impl TurnRuntime for CodexRuntime {
    fn name(&self) -> &str {
        "codex"
    }

    fn supports_steer(&self) -> bool {
        true
    }

    fn placement(&self) -> Option<gatehouse_gateway::Placement> {
        Some(gatehouse_gateway::Placement {
            commands: &[CODEX_APPSERVER],
            binds_sessions: false,
        })
    }

    async fn readiness(&self) -> Result<(), TurnFailure> {
        let not_ready = || {
            TurnFailure::new(
                ErrorCode::CodexNotInitialized,
                "the Harness's codex app-server is not initialized over the relay yet; check the node's log",
            )
        };
        match self.connection.try_lock() {
            Ok(slot) => match slot.as_ref() {
                Some(connection) if !connection.rpc.is_closed() => Ok(()),
                _ => Err(not_ready()),
            },
            Err(_) => Err(not_ready()),
        }
    }

    async fn run_turn(
        &self,
        mut input: TurnInput,
        sink: TurnSink,
    ) -> Result<TurnReply, TurnFailure> {
        let connection = self.connection(self.config.node_grace).await?;
        let thread_id = self
            .thread_for(&connection, &input.session_key, &input.turn_id)
            .await?;
        let mut messages = connection.rpc.subscribe(&thread_id);
        let params = TurnStartParams {
            thread_id: thread_id.clone(),
            input: user_input(&input, &connection.workspace_root),
        };
        let started = connection
            .rpc
            .call::<TurnStart>(&params, DEFAULT_REQUEST_TIMEOUT)
            .await
            .map_err(|error| connection_failure(&error))?;
        let codex_turn = started.turn.id;
        let mut interrupt = InterruptOnDrop {
            rpc: connection.rpc.clone(),
            thread_id: thread_id.clone(),
            turn_id: codex_turn.clone(),
            armed: true,
        };
        let mut state = TurnState::new(codex_turn.clone());
        let mut steer_open = true;
        let outcome = loop {
            tokio::select! {
                steer = input.steer.recv(), if steer_open => match steer {
                    Some(text) => {
                        let params = TurnSteerParams {
                            thread_id: thread_id.clone(),
                            expected_turn_id: codex_turn.clone(),
                            input: vec![UserInput::Text { text }],
                        };
                        if let Err(error) = connection.rpc.call::<TurnSteer>(&params, DEFAULT_REQUEST_TIMEOUT).await {
                            tracing::warn!(error = %loggable(&error), "codex refused the steered input");
                        }
                    }
                    None => steer_open = false,
                },
                message = messages.recv() => match message {
                    None => break Err(TurnFailure::new(
                        ErrorCode::DependencyUnavailable,
                        "the connection to codex app-server on the Harness ended during the turn; the turn is not replayed",
                    )),
                    Some(ThreadMessage::Request { id, method, params }) => {
                        self.answer(&connection, &input, &id, &method, params).await;
                    }
                    Some(ThreadMessage::Notification { method, params }) => {
                        let notification = match ServerNotification::decode(&method, params) {
                            Ok(notification) => notification,
                            Err(error) => break Err(TurnFailure::new(ErrorCode::CodexBadResponse, error.to_string())),
                        };
                        if let Some(end) = apply(state.observe(notification), &sink).await? {
                            break end;
                        }
                    }
                },
            }
        };
        interrupt.armed = false;
        connection.rpc.unsubscribe(&thread_id);
        let reply = outcome?;
        self.store_artifacts(&connection, &reply, &sink).await;
        Ok(TurnReply {
            text: reply,
            usage: state.usage(),
        })
    }
}

/// What the driver does for one notification of the running turn, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum TurnEvent {
    /// Publish more reply text.
    Delta(String),
    /// A tool started, with its arguments.
    ToolStarted {
        /// The tool as the Gateway names it (`exec_command`, `apply_patch`, or a Gateway tool).
        tool: String,
        /// Its arguments.
        arguments: serde_json::Value,
    },
    /// Commit a transcript message.
    Commit {
        /// `assistant` or `tool`.
        role: &'static str,
        /// The message text.
        content: String,
        /// The tool of a `tool` message.
        tool: Option<&'static str>,
    },
    /// A tool ended.
    ToolCompleted {
        /// The tool.
        tool: String,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A model response of the turn was counted: its tokens (`modelCalls` 1, `retries` the
    /// retries Codex announced since the previous response).
    Usage(TokenUsage),
    /// Codex retries a failed model request by itself (an `error` with `willRetry`).
    Retry {
        /// The retry's number within the turn, from 1.
        attempt: u32,
        /// The stable code of the failure.
        code: &'static str,
        /// Codex's message.
        message: String,
    },
    /// The turn ended with the reply, or with a failure.
    Ended(Result<String, TurnFailure>),
}

/// The driver's view of one Codex turn: turns its notifications into [`TurnEvent`]s.
#[derive(Debug)]
pub struct TurnState {
    codex_turn: String,
    reply: Option<String>,
    last_error: Option<(String, String)>,
    usage: Option<TokenUsage>,
    /// Retries Codex announced in this turn, and those not yet counted into a response's usage.
    retries: u32,
    uncounted_retries: u64,
}

impl TurnState {
    /// Returns the state of the Codex turn `codex_turn`, before any notification.
    pub fn new(codex_turn: String) -> Self {
        Self {
            codex_turn,
            reply: None,
            last_error: None,
            usage: None,
            retries: 0,
            uncounted_retries: 0,
        }
    }

    /// Returns the tokens of the turn's model responses so far: the sum of the `last` counts of
    /// the turn's `thread/tokenUsage/updated` notifications, or `None` before the first.
    pub fn usage(&self) -> Option<TokenUsage> {
        self.usage.clone()
    }

    /// Returns what to do for `notification`; the last event is [`TurnEvent::Ended`] once the
    /// turn has completed.
    pub fn observe(&mut self, notification: ServerNotification) -> Vec<TurnEvent> {
        match notification {
            ServerNotification::AgentMessageDelta(delta) => vec![TurnEvent::Delta(delta.delta)],
            ServerNotification::ItemStarted(started) => match started.item {
                ThreadItem::CommandExecution { command, .. } => vec![TurnEvent::ToolStarted {
                    tool: String::from("exec_command"),
                    arguments: serde_json::json!({"command": command}),
                }],
                ThreadItem::FileChange { changes, .. } => vec![TurnEvent::ToolStarted {
                    tool: String::from("apply_patch"),
                    arguments: serde_json::json!({"changes": change_list(&changes)}),
                }],
                ThreadItem::DynamicToolCall {
                    tool, arguments, ..
                } => vec![TurnEvent::ToolStarted { tool, arguments }],
                ThreadItem::AgentMessage { .. } | ThreadItem::Other => Vec::new(),
            },
            ServerNotification::ItemCompleted(completed) => match completed.item {
                ThreadItem::AgentMessage { text, .. } => {
                    self.reply = Some(text.clone());
                    vec![TurnEvent::Commit {
                        role: "assistant",
                        content: text,
                        tool: None,
                    }]
                }
                ThreadItem::CommandExecution {
                    command,
                    status,
                    exit_code,
                    aggregated_output,
                    ..
                } => {
                    let content = format!(
                        "$ {command}\nstatus: {}\nexit code: {}\n{}",
                        status.wire(),
                        exit_code.map_or_else(|| String::from("none"), |code| code.to_string()),
                        aggregated_output.unwrap_or_default(),
                    );
                    vec![
                        TurnEvent::Commit {
                            role: "tool",
                            content,
                            tool: Some("exec_command"),
                        },
                        TurnEvent::ToolCompleted {
                            tool: String::from("exec_command"),
                            ok: status == ItemStatus::Completed && exit_code == Some(0),
                        },
                    ]
                }
                ThreadItem::FileChange {
                    changes, status, ..
                } => {
                    let content = format!(
                        "status: {}\n{}",
                        status.wire(),
                        change_list(&changes).join("\n")
                    );
                    vec![
                        TurnEvent::Commit {
                            role: "tool",
                            content,
                            tool: Some("apply_patch"),
                        },
                        TurnEvent::ToolCompleted {
                            tool: String::from("apply_patch"),
                            ok: status == ItemStatus::Completed,
                        },
                    ]
                }
                ThreadItem::DynamicToolCall { tool, success, .. } => {
                    vec![TurnEvent::ToolCompleted {
                        tool,
                        ok: success.unwrap_or(false),
                    }]
                }
                ThreadItem::Other => Vec::new(),
            },
            ServerNotification::Error(error)
                if error.will_retry && error.turn_id == self.codex_turn =>
            {
                self.retries = self.retries.saturating_add(1);
                self.uncounted_retries = self.uncounted_retries.saturating_add(1);
                vec![TurnEvent::Retry {
                    attempt: self.retries,
                    code: error_code(error.error.codex_error_info.as_ref()),
                    message: error.error.message,
                }]
            }
            ServerNotification::Error(error) => {
                self.last_error = Some((
                    error_code(error.error.codex_error_info.as_ref()).to_owned(),
                    error.error.message,
                ));
                Vec::new()
            }
            ServerNotification::Warning(warning) => {
                tracing::warn!(message = %loggable(&warning.message), "codex warning");
                Vec::new()
            }
            ServerNotification::TurnCompleted(completed)
                if completed.turn.id == self.codex_turn =>
            {
                let turn = completed.turn;
                let outcome = match turn.status {
                    TurnStatus::Completed => Ok(self.reply.take().unwrap_or_default()),
                    TurnStatus::Interrupted => Err(TurnFailure::new(
                        ErrorCode::Aborted,
                        "the Codex turn was interrupted",
                    )),
                    TurnStatus::Failed | TurnStatus::InProgress | TurnStatus::Other => {
                        let (code, message) =
                            self.last_error.take().unwrap_or_else(|| match turn.error {
                                Some(error) => (
                                    error_code(error.codex_error_info.as_ref()).to_owned(),
                                    error.message,
                                ),
                                None => (
                                    error_code(None).to_owned(),
                                    String::from("the Codex turn failed"),
                                ),
                            });
                        Err(TurnFailure::new(&code, message))
                    }
                };
                vec![TurnEvent::Ended(outcome)]
            }
            ServerNotification::TokenUsageUpdated(updated)
                if updated.turn_id == self.codex_turn =>
            {
                let last = updated.token_usage.last;
                // Codex counts cached input inside its input; the contract counts it apart.
                let cached = last.cached_input_tokens.min(last.input_tokens);
                let last = TokenUsage {
                    input_tokens: last.input_tokens - cached,
                    cached_input_tokens: cached,
                    output_tokens: last.output_tokens,
                    total_tokens: last.total_tokens,
                    model_calls: 1,
                    retries: std::mem::take(&mut self.uncounted_retries),
                    ..TokenUsage::default()
                };
                self.usage = Some(match self.usage.take() {
                    Some(usage) => usage.plus(last.clone()),
                    None => last.clone(),
                });
                vec![TurnEvent::Usage(last)]
            }
            ServerNotification::TurnCompleted(_)
            | ServerNotification::TokenUsageUpdated(_)
            | ServerNotification::TurnStarted(_)
            | ServerNotification::Other { .. } => Vec::new(),
        }
    }
}

/// Carries out `events` on `sink`; returns the turn's outcome once it has ended.
async fn apply(
    events: Vec<TurnEvent>,
    sink: &TurnSink,
) -> Result<Option<Result<String, TurnFailure>>, TurnFailure> {
    for event in events {
        match event {
            TurnEvent::Delta(text) => sink.delta(&text),
            TurnEvent::ToolStarted { tool, arguments } => {
                sink.tool_started(&tool, &arguments).await?;
            }
            TurnEvent::Commit {
                role,
                content,
                tool,
            } => {
                sink.commit(role, &content, tool).await?;
            }
            TurnEvent::ToolCompleted { tool, ok } => sink.tool_completed(&tool, ok).await?,
            // Past the turn's ceiling this ends the turn, and the Codex turn is interrupted.
            TurnEvent::Usage(usage) => sink.model_usage(usage).await?,
            // Codex waits by its own backoff, which it does not announce.
            TurnEvent::Retry {
                attempt,
                code,
                message,
            } => sink.model_retry(attempt, code, &message, 0).await?,
            TurnEvent::Ended(outcome) => return Ok(Some(outcome)),
        }
    }
    Ok(None)
}

/// Sends `turn/interrupt` when a turn's future is dropped before the turn ended (an abort).
struct InterruptOnDrop {
    rpc: RpcClient,
    thread_id: String,
    turn_id: String,
    armed: bool,
}

impl Drop for InterruptOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let rpc = self.rpc.clone();
        let params = TurnInterruptParams {
            thread_id: self.thread_id.clone(),
            turn_id: self.turn_id.clone(),
        };
        rpc.unsubscribe(&self.thread_id);
        tokio::spawn(async move {
            if let Err(error) = rpc
                .call::<TurnInterrupt>(&params, DEFAULT_REQUEST_TIMEOUT)
                .await
            {
                tracing::warn!(error = %loggable(&error), "cannot interrupt the Codex turn");
            }
        });
    }
}

/// Builds the `turn/start` input: the user texts, with staged attachments as `localImage` items
/// (images) or as path mentions.
fn user_input(input: &TurnInput, workspace_root: &str) -> Vec<UserInput> {
    let mut text = input.user_texts.join("\n\n");
    let mut items = Vec::new();
    let mut mentioned = Vec::new();
    for relative in &input.attachments {
        let path = format!("{}/{}", workspace_root.trim_end_matches('/'), relative);
        let lower = relative.to_ascii_lowercase();
        if [".png", ".jpg", ".jpeg", ".gif", ".webp"]
            .iter()
            .any(|ext| lower.ends_with(ext))
        {
            items.push(UserInput::LocalImage { path });
        } else {
            mentioned.push(path);
        }
    }
    if !mentioned.is_empty() {
        text.push_str("\n\nAttached files:\n");
        for path in mentioned {
            text.push_str(&format!("- {path}\n"));
        }
    }
    items.insert(0, UserInput::Text { text });
    items
}

/// Returns the workspace-relative paths named by `MEDIA:` lines of `reply`. Absolute paths
/// under `workspace_root` are made relative; the workspace service refuses everything else.
pub fn artifact_paths(reply: &str, workspace_root: &str) -> Vec<String> {
    let root = format!("{}/", workspace_root.trim_end_matches('/'));
    let mut seen = HashSet::new();
    reply
        .lines()
        .filter_map(|line| line.trim().strip_prefix("MEDIA:"))
        .map(|path| path.trim().trim_matches('`'))
        .filter(|path| !path.is_empty())
        .map(|path| path.strip_prefix(&root).unwrap_or(path).to_owned())
        .filter(|path| seen.insert(path.clone()))
        .collect()
}

fn change_list(changes: &[FileUpdateChange]) -> Vec<String> {
    changes
        .iter()
        .map(|change| format!("{} {}", change.kind.wire(), change.path))
        .collect()
}

/// Maps Codex's `codexErrorInfo` onto our stable codes.
pub fn error_code(info: Option<&CodexErrorInfo>) -> &'static str {
    match info.map_or("other", CodexErrorInfo::name) {
        "unauthorized" => ErrorCode::ModelAuthFailed.as_str(),
        "rateLimitExceeded" | "usageLimitExceeded" => ErrorCode::ModelRateLimited.as_str(),
        "internalServerError"
        | "serverOverloaded"
        | "httpConnectionFailed"
        | "responseStreamConnectionFailed"
        | "responseStreamDisconnected"
        | "responseTooManyFailedAttempts" => ErrorCode::ModelUnavailable.as_str(),
        "contextWindowExceeded" => ErrorCode::ContextWindowExceeded.as_str(),
        "sandboxError" => ErrorCode::SandboxError.as_str(),
        _ => ErrorCode::CodexTurnFailed.as_str(),
    }
}

fn connection_failure(error: &crate::rpc::RpcError) -> TurnFailure {
    match error {
        crate::rpc::RpcError::Closed => TurnFailure::new(
            ErrorCode::DependencyUnavailable,
            "the connection to codex app-server on the Harness is closed; the turn is not run anywhere else",
        ),
        other => TurnFailure::new(ErrorCode::CodexUnavailable, other.to_string()),
    }
}

fn ended_reason(mut ended: tokio::sync::oneshot::Receiver<String>) -> String {
    match ended.try_recv() {
        Ok(reason) => format!(" ({reason})"),
        Err(_) => String::new(),
    }
}

fn actor(connection: &Connection) -> String {
    format!("codex:{}", connection.node.device_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn media_lines_name_workspace_paths_once() {
        let reply = "Done.\nMEDIA: out/report.txt\nMEDIA:/srv/ws/chart.png\nMEDIA:`out/report.txt`\nMEDIA: ../etc/passwd\nnot MEDIA: x";
        assert_eq!(
            artifact_paths(reply, "/srv/ws"),
            vec!["out/report.txt", "chart.png", "../etc/passwd"]
        );
    }

    #[test]
    fn codex_errors_map_onto_stable_codes() {
        let info = |value: serde_json::Value| -> CodexErrorInfo {
            crate::messages::decode("error", value).unwrap_or(CodexErrorInfo::Name(String::new()))
        };
        assert_eq!(
            error_code(Some(&info(serde_json::json!("unauthorized")))),
            "MODEL_AUTH_FAILED"
        );
        assert_eq!(
            error_code(Some(&info(
                serde_json::json!({"httpConnectionFailed": {"httpStatusCode": 502}})
            ))),
            "MODEL_UNAVAILABLE"
        );
        assert_eq!(
            error_code(Some(&info(serde_json::json!("somethingNew")))),
            "CODEX_TURN_FAILED"
        );
        assert_eq!(error_code(None), "CODEX_TURN_FAILED");
    }

    #[test]
    fn a_failed_turn_ends_with_the_code_of_its_last_error() {
        let notification = |method: &str, params: serde_json::Value| {
            ServerNotification::decode(method, params).unwrap_or(ServerNotification::Other {
                method: String::from("undecodable"),
            })
        };
        let mut state = TurnState::new(String::from("t1"));
        let error = notification(
            "error",
            serde_json::json!({"threadId": "th", "turnId": "t1", "willRetry": false,
                "error": {"message": "upstream 502", "codexErrorInfo": {"httpConnectionFailed": {"httpStatusCode": 502}}}}),
        );
        assert_eq!(state.observe(error), Vec::new());
        let other_turn = notification(
            "turn/completed",
            serde_json::json!({"threadId": "th", "turn": {"id": "t0", "status": "completed"}}),
        );
        assert_eq!(state.observe(other_turn), Vec::new());
        let failed = notification(
            "turn/completed",
            serde_json::json!({"threadId": "th", "turn": {"id": "t1", "status": "failed", "error": null}}),
        );
        assert_eq!(
            state.observe(failed),
            vec![TurnEvent::Ended(Err(TurnFailure::new(
                "MODEL_UNAVAILABLE",
                "upstream 502"
            )))]
        );
    }

    #[test]
    fn approval_decisions_parse_and_use_codex_spelling() {
        assert_eq!(
            ApprovalDecision::parse("accept-for-session").map(ApprovalDecision::wire),
            Ok("acceptForSession")
        );
        assert!(ApprovalDecision::parse("maybe").is_err());
    }
}
