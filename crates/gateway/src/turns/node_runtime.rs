//! [`NodeRuntime`]: runs turns on the enrolled Harness node (`agent.turn`), where native workers
//! call the model with the Harness's credential and run the native tools. The Gateway never calls
//! a model itself: without a node serving `agent.turn`, the turn fails.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_protocol::worker::AGENT_TURN;
use gatehouse_protocol::worker::AgentTurnParams;
use gatehouse_protocol::worker::AgentTurnResult;
use gatehouse_protocol::worker::HistoryMessage;
use gatehouse_protocol::worker::WorkerEvent;
use gatehouse_store::Store;
use tokio::sync::mpsc;

use crate::link::registry::InvokeError;
use crate::link::registry::NodeRegistry;
use crate::link::registry::PROGRESS_CAPACITY;
use crate::turns::runtime::TurnFailure;
use crate::turns::runtime::TurnInput;
use crate::turns::runtime::TurnRuntime;
use crate::turns::runtime::TurnSink;

/// The longest a native turn may run before the Gateway gives up on it.
pub const DEFAULT_TURN_TIMEOUT: Duration = Duration::from_secs(3600);

/// How long a turn waits for a node to connect before failing (a node reconnects within its
/// backoff after either side restarts).
pub const DEFAULT_NODE_GRACE: Duration = Duration::from_secs(10);

/// The most prior messages sent with a turn for context.
pub const MAX_HISTORY_MESSAGES: usize = 200;

/// Runs turns on the node that serves `agent.turn`.
pub struct NodeRuntime {
    registry: Arc<NodeRegistry>,
    store: Arc<dyn Store>,
    turn_timeout: Duration,
}

impl NodeRuntime {
    /// Returns a runtime over the connected nodes of `registry`.
    pub fn new(registry: Arc<NodeRegistry>, store: Arc<dyn Store>, turn_timeout: Duration) -> Self {
        Self {
            registry,
            store,
            turn_timeout,
        }
    }

    /// Returns the session's earlier user and assistant messages, without those of this turn.
    async fn history(&self, input: &TurnInput) -> Result<Vec<HistoryMessage>, TurnFailure> {
        let transcript = self
            .store
            .transcript(&input.session_key)
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
        let mut history: Vec<HistoryMessage> = transcript
            .into_iter()
            .filter(|message| message.turn_id != input.turn_id)
            .filter(|message| message.role == "user" || message.role == "assistant")
            .map(|message| HistoryMessage {
                role: message.role,
                content: message.content,
            })
            .collect();
        let excess = history.len().saturating_sub(MAX_HISTORY_MESSAGES);
        history.drain(..excess);
        Ok(history)
    }
}

#[async_trait::async_trait]
impl TurnRuntime for NodeRuntime {
    fn name(&self) -> &str {
        "native"
    }

    fn supports_steer(&self) -> bool {
        false
    }

    async fn run_turn(&self, input: TurnInput, sink: TurnSink) -> Result<String, TurnFailure> {
        let Some(node) = self
            .registry
            .wait_serving(&[AGENT_TURN], DEFAULT_NODE_GRACE)
            .await
        else {
            return Err(TurnFailure::new(
                "DEPENDENCY_UNAVAILABLE",
                "no Harness node serving the native runtime is connected; the turn is not run anywhere else",
            ));
        };
        let params = AgentTurnParams {
            session_key: input.session_key.clone(),
            turn_id: input.turn_id.clone(),
            history: self.history(&input).await?,
            user_texts: input.user_texts.clone(),
            attachments: input.attachments.clone(),
        };
        let params = serde_json::to_value(&params)
            .map_err(|error| TurnFailure::new("INTERNAL", error.to_string()))?;
        let (progress, mut chunks) = mpsc::channel::<String>(PROGRESS_CAPACITY);
        let invoke = self.registry.invoke_streaming(
            &node,
            AGENT_TURN,
            &params,
            self.turn_timeout,
            Some(progress),
        );
        let relay = async {
            let mut buffer = String::new();
            while let Some(chunk) = chunks.recv().await {
                buffer.push_str(&chunk);
                while let Some(end) = buffer.find('\n') {
                    let line: String = buffer.drain(..=end).collect();
                    relay_event(&sink, line.trim_end()).await?;
                }
            }
            Ok::<(), TurnFailure>(())
        };
        let (result, relayed) = tokio::join!(invoke, relay);
        relayed?;
        let value = result.map_err(|error| match error {
            InvokeError::Unavailable | InvokeError::CommandNotDeclared { .. } => TurnFailure::new(
                "DEPENDENCY_UNAVAILABLE",
                "the Harness node is not connected; the turn is not run anywhere else",
            ),
            InvokeError::Disconnected => TurnFailure::new(
                "DEPENDENCY_UNAVAILABLE",
                "the Harness node disconnected during the turn; it is not replayed",
            ),
            InvokeError::Timeout(timeout) => TurnFailure::new(
                "TURN_TIMEOUT",
                format!("the turn ran longer than {timeout:?}"),
            ),
            InvokeError::Remote(error) => TurnFailure::new(&error.code, error.message),
            InvokeError::Malformed => {
                TurnFailure::new("NODE_BAD_RESPONSE", "the node sent a malformed turn result")
            }
        })?;
        let result: AgentTurnResult = serde_json::from_value(value).map_err(|_| {
            TurnFailure::new("NODE_BAD_RESPONSE", "the node sent a malformed turn result")
        })?;
        Ok(result.reply)
    }
}

/// Passes one worker event line on to the Gateway's record of the turn.
async fn relay_event(sink: &TurnSink, line: &str) -> Result<(), TurnFailure> {
    let Ok(event) = serde_json::from_str::<WorkerEvent>(line) else {
        tracing::warn!("the node streamed a malformed event line; ignoring it");
        return Ok(());
    };
    match event {
        WorkerEvent::Delta { text } => {
            sink.delta(&text);
            Ok(())
        }
        WorkerEvent::ToolStarted { tool, arguments } => sink.tool_started(&tool, &arguments).await,
        WorkerEvent::ToolCompleted { tool, ok } => sink.tool_completed(&tool, ok).await,
        WorkerEvent::Message {
            role,
            content,
            tool_name,
        } => sink
            .commit(&role, &content, tool_name.as_deref())
            .await
            .map(|_| ()),
        // The node turns these into the invoke's result; they are not streamed.
        WorkerEvent::Done { .. } | WorkerEvent::Failed { .. } => Ok(()),
    }
}
