//! Embedded mode's in-process link: the node host's connector hands one end of a channel pair to
//! the Gateway's session, so the two roles exchange the same frames as over `/node`, without a
//! socket.

use gatehouse_gateway::link::session::Inbound;
use gatehouse_gateway::link::session::LinkContext;
use gatehouse_gateway::link::session::OUTBOUND_CAPACITY;
use gatehouse_gateway::link::session::Outbound;
use gatehouse_harness::link::Connector;
use gatehouse_harness::link::LINK_CHANNEL_CAPACITY;
use gatehouse_harness::link::Link;
use tokio::sync::mpsc;

/// Connects the in-process node host to the in-process Gateway.
pub(crate) struct InProcessConnector {
    context: LinkContext,
}

impl InProcessConnector {
    /// Returns a connector whose links end in Gateway sessions with `context`.
    pub(crate) fn new(context: LinkContext) -> Self {
        Self { context }
    }
}

impl Connector for InProcessConnector {
    async fn connect(&mut self, _gateway_url: Option<&str>) -> gatehouse_harness::Result<Link> {
        let (node_side, gateway_side) = Link::pair(LINK_CHANNEL_CAPACITY);
        let Link {
            inbound: mut from_node,
            outbound: to_node,
            ..
        } = gateway_side;
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
                    // The in-process peer is alive as long as its channel is: answer the probe.
                    Outbound::Ping => {
                        let _ = keepalive.send(Inbound::Pong).await;
                    }
                    Outbound::Close { .. } => break,
                }
            }
            // Dropping `to_node` ends the node's session.
        });
        tokio::spawn(gatehouse_gateway::link::session::serve(
            self.context.clone(),
            inbound,
            outbound,
        ));
        Ok(node_side)
    }
}
