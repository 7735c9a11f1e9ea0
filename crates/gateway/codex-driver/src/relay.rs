//! The Gateway end of the `codex.appserver` relay: a [`Transport`] whose lines travel as
//! `node.invoke.input` (to the node) and `node.invoke.progress` (from it) of one long-lived
//! invoke on the enrolled node.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_gateway::InvokeError;
use gatehouse_gateway::MAX_PROGRESS_LINE_BYTES;
use gatehouse_gateway::NodeConnection;
use gatehouse_gateway::NodeRegistry;
use gatehouse_gateway::PROGRESS_CAPACITY;
use gatehouse_protocol::codex::CodexAttachParams;
use gatehouse_protocol::command::CodexAppServer;
use tokio::sync::mpsc;
use tokio::sync::oneshot;

use crate::rpc::Transport;

/// How long a relay may stay open: it lives as long as the app-server connection.
const RELAY_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);

/// How many lines to the node may wait for the link.
const OUTGOING_CAPACITY: usize = 256;

/// An open relay: its transport, and why it ended once it has.
pub struct Relay {
    /// The lines to and from the app-server.
    pub transport: Transport,
    /// Resolves with the reason when the relay ends.
    pub ended: oneshot::Receiver<String>,
}

/// Opens the relay on `node`. The relay ends when the node's app-server exits, the link drops,
/// or every sender of the transport is dropped (which cancels the invoke, so the node replaces
/// its app-server).
///
/// # Errors
/// [`InvokeError::CommandNotDeclared`] when the node is not a codex node;
/// [`InvokeError::Unavailable`] when it is gone.
pub async fn open(
    registry: &NodeRegistry,
    node: &Arc<NodeConnection>,
) -> Result<Relay, InvokeError> {
    // Lines are bounded and every buffered byte is charged to the node's connection.
    let (progress_tx, mut lines) = node.progress_lines(MAX_PROGRESS_LINE_BYTES);
    let pending = registry
        .start_invoke::<CodexAppServer>(
            node,
            &CodexAttachParams::default(),
            RELAY_LIFETIME,
            Some(progress_tx),
        )
        .await?;
    let inputs = pending.inputs();
    let (outgoing, mut to_node) = mpsc::channel::<String>(OUTGOING_CAPACITY);
    let (from_node, incoming) = mpsc::channel::<String>(PROGRESS_CAPACITY);
    let (ended_tx, ended) = oneshot::channel();
    tokio::spawn(async move {
        loop {
            match lines.next_line().await {
                Ok(Some(line)) => {
                    if from_node.send(line).await.is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                // Ending the incoming side closes the client, which drops the transport and so
                // cancels the relay.
                Err(error) => {
                    tracing::warn!(error = %error, "the codex node sent an overlong line; closing the relay");
                    return;
                }
            }
        }
    });
    tokio::spawn(async move {
        let writer = async {
            while let Some(line) = to_node.recv().await {
                if inputs.send(line).await.is_err() {
                    return String::from("the link to the Harness node closed");
                }
            }
            String::from("the Gateway closed the relay")
        };
        let reason = tokio::select! {
            result = pending.finish(RELAY_LIFETIME) => match result {
                Ok(_) => String::from("the node ended the relay"),
                Err(InvokeError::Remote(error)) => error.message,
                Err(error) => error.to_string(),
            },
            reason = writer => reason,
        };
        tracing::warn!(reason = %reason, "the codex app-server relay ended");
        let _ = ended_tx.send(reason);
    });
    Ok(Relay {
        transport: Transport { outgoing, incoming },
        ended,
    })
}
