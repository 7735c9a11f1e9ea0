//! The in-process adapter: a node host in the same process (embedded mode) exchanges the same
//! text frames with a Gateway session as over `/node`, through two channels instead of a socket.

use tokio::sync::mpsc;

use crate::link::session::Inbound;
use crate::link::session::LinkContext;
use crate::link::session::OUTBOUND_CAPACITY;
use crate::link::session::Outbound;

/// The node's end of one in-process connection: text frames in each direction.
///
/// The connection ends when the node drops `to_gateway`, or when the Gateway closes it, which
/// the node sees as `from_gateway` yielding `None`.
#[derive(Debug)]
pub struct InProcessLink {
    /// Frames for the Gateway, in order.
    pub to_gateway: mpsc::Sender<String>,
    /// Frames from the Gateway, in order.
    pub from_gateway: mpsc::Receiver<String>,
}

/// Connects node hosts in this process to a running Gateway, as often as the node reconnects.
#[derive(Clone)]
pub struct InProcessConnector {
    context: LinkContext,
}

impl InProcessConnector {
    /// Returns a connector whose sessions use `context`.
    pub(crate) fn new(context: LinkContext) -> Self {
        Self { context }
    }

    /// Starts one Gateway session for a node host in this process and returns the node's end
    /// (see [`connect_in_process`]).
    pub fn connect(&self) -> InProcessLink {
        connect_in_process(self.context.clone())
    }
}

/// Starts a Gateway session with `context` for a node host in this process and returns the
/// node's end. The session runs the same handshake and admission as a WebSocket peer, with
/// [`crate::link::session::IN_PROCESS_PEER`] as its peer name; a keep-alive probe is answered at
/// once, since the peer lives as long as its channel.
pub(crate) fn connect_in_process(context: LinkContext) -> InProcessLink {
    let (to_gateway, mut from_node) = mpsc::channel::<String>(OUTBOUND_CAPACITY);
    let (to_node, from_gateway) = mpsc::channel::<String>(OUTBOUND_CAPACITY);
    let (inbound_sender, inbound) = mpsc::channel::<Inbound>(OUTBOUND_CAPACITY);
    let (outbound, mut outbound_receiver) = mpsc::channel::<Outbound>(OUTBOUND_CAPACITY);
    let keepalive = inbound_sender.clone();
    tokio::spawn(async move {
        while let Some(text) = from_node.recv().await {
            if inbound_sender.send(Inbound::Text(text)).await.is_err() {
                return;
            }
        }
        let _ = inbound_sender.send(Inbound::Closed).await;
    });
    tokio::spawn(async move {
        while let Some(frame) = outbound_receiver.recv().await {
            match frame {
                Outbound::Text(text) => {
                    if to_node.send(text).await.is_err() {
                        break;
                    }
                }
                Outbound::Ping => {
                    let _ = keepalive.send(Inbound::Pong).await;
                }
                Outbound::Close { .. } => break,
            }
        }
        // Dropping `to_node` ends the node's session.
    });
    tokio::spawn(crate::link::session::serve(context, inbound, outbound));
    InProcessLink {
        to_gateway,
        from_gateway,
    }
}
