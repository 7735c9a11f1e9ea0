//! The transport under a session: a duplex of text frames.
//!
//! A session never sees a socket. It reads frames from [`Link::inbound`] and writes them to
//! [`Link::outbound`]; one text message is one JSON frame. The WebSocket is one adapter
//! ([`WebSocketConnector`]); embedded mode opens its links with a [`ChannelConnector`] over the
//! channels of the Gateway's in-process connection.

use std::future::Future;

use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_protocol::frame::MAX_FRAME_BYTES;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::error::NodeHostError;
use crate::error::Result;

/// The capacity of each direction of a WebSocket link, in frames.
pub const LINK_CHANNEL_CAPACITY: usize = 64;

/// One connection to the Gateway, as a duplex of text frames.
///
/// The link is closed when `inbound` yields `None` (the peer went away) or when the session drops
/// `outbound`. Dropping the link stops any adapter tasks behind it.
#[derive(Debug)]
pub struct Link {
    /// Frames from the peer, in order.
    pub inbound: mpsc::Receiver<String>,
    /// Frames to the peer, in order.
    pub outbound: mpsc::Sender<String>,
    /// Adapter tasks, stopped when the link is dropped.
    _tasks: Vec<AbortOnDrop>,
}

impl Link {
    /// Returns a link over the given channels.
    pub fn new(inbound: mpsc::Receiver<String>, outbound: mpsc::Sender<String>) -> Link {
        Link {
            inbound,
            outbound,
            _tasks: Vec::new(),
        }
    }

    /// Returns two connected links: what one sends, the other receives. Each direction holds at
    /// most `capacity` frames.
    pub fn pair(capacity: usize) -> (Link, Link) {
        let (a_tx, a_rx) = mpsc::channel(capacity);
        let (b_tx, b_rx) = mpsc::channel(capacity);
        (Link::new(a_rx, b_tx), Link::new(b_rx, a_tx))
    }
}

/// Opens links to the Gateway for the reconnect loop.
pub trait Connector: Send {
    /// Opens a new link to the Gateway at `gateway_url`, the resolved URL, or `None` when no URL
    /// is known (an in-process connector does not need one).
    ///
    /// # Errors
    /// Any error that should count as a failed attempt; it is logged and retried with backoff,
    /// unless it is a startup error ([`NodeHostError::is_startup`]).
    fn connect(&mut self, gateway_url: Option<&str>) -> impl Future<Output = Result<Link>> + Send;
}

/// Opens each link by calling a function that returns the two channels of a fresh connection:
/// for a Gateway in the same process (embedded mode), whose in-process connection hands back
/// the frames from the Gateway and the sender of frames to it. No URL is needed.
pub struct ChannelConnector<F> {
    open: F,
}

impl<F> ChannelConnector<F>
where
    F: FnMut() -> (mpsc::Receiver<String>, mpsc::Sender<String>) + Send,
{
    /// Returns a connector that opens each link with `open`.
    pub fn new(open: F) -> Self {
        Self { open }
    }
}

impl<F> std::fmt::Debug for ChannelConnector<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChannelConnector").finish_non_exhaustive()
    }
}

impl<F> Connector for ChannelConnector<F>
where
    F: FnMut() -> (mpsc::Receiver<String>, mpsc::Sender<String>) + Send,
{
    async fn connect(&mut self, _gateway_url: Option<&str>) -> Result<Link> {
        let (inbound, outbound) = (self.open)();
        Ok(Link::new(inbound, outbound))
    }
}

/// Connects over WebSocket (`ws://` only).
#[derive(Debug, Clone, Copy, Default)]
pub struct WebSocketConnector;

impl Connector for WebSocketConnector {
    async fn connect(&mut self, gateway_url: Option<&str>) -> Result<Link> {
        let Some(url) = gateway_url else {
            return Err(NodeHostError::NoGatewayUrl);
        };
        connect_websocket(url).await
    }
}

/// Opens a WebSocket to `url` and returns it as a [`Link`]. Messages larger than
/// [`MAX_FRAME_BYTES`] close the link.
///
/// # Errors
/// [`NodeHostError::Connect`] when the connection or the WebSocket handshake fails.
pub async fn connect_websocket(url: &str) -> Result<Link> {
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    let (stream, _response) = tokio_tungstenite::connect_async_with_config(
        url,
        Some(config),
        /*disable_nagle*/ true,
    )
    .await
    .map_err(|source| NodeHostError::Connect {
        url: url.to_owned(),
        source: Box::new(source),
    })?;
    let (mut sink, mut stream) = stream.split();
    let (inbound_tx, inbound_rx) = mpsc::channel::<String>(LINK_CHANNEL_CAPACITY);
    let (outbound_tx, mut outbound_rx) = mpsc::channel::<String>(LINK_CHANNEL_CAPACITY);

    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            match message {
                Ok(Message::Text(text)) => {
                    if inbound_tx.send(text.as_str().to_owned()).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Binary(_)) => {
                    tracing::warn!("gateway sent a binary message; closing the link");
                    break;
                }
                Ok(Message::Close(_)) => break,
                Ok(Message::Ping(_) | Message::Pong(_) | Message::Frame(_)) => {}
                Err(err) => {
                    tracing::debug!(error = %err, "websocket read failed");
                    break;
                }
            }
        }
    });
    let writer = tokio::spawn(async move {
        while let Some(text) = outbound_rx.recv().await {
            if let Err(err) = sink.send(Message::text(text)).await {
                tracing::debug!(error = %err, "websocket write failed");
                return;
            }
        }
        let _ = sink.close().await;
    });
    Ok(Link {
        inbound: inbound_rx,
        outbound: outbound_tx,
        _tasks: vec![AbortOnDrop(reader), AbortOnDrop(writer)],
    })
}

/// Aborts the task when dropped.
#[derive(Debug)]
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
