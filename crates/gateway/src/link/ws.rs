//! The WebSocket adapter of the node link: `/node` frames to and from the session's channels.

use axum::extract::ws::CloseFrame;
use axum::extract::ws::Message;
use axum::extract::ws::WebSocket;
use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_protocol::frame::MAX_FRAME_BYTES;
use tokio::sync::mpsc;

use crate::link::session::Inbound;
use crate::link::session::LinkContext;
use crate::link::session::OUTBOUND_CAPACITY;
use crate::link::session::Outbound;

/// The largest WebSocket message accepted; frames above the protocol limit are refused by the
/// session, so the transport allows a little more to be able to say why.
pub const MAX_WS_MESSAGE_BYTES: usize = MAX_FRAME_BYTES + 64 * 1024;

/// How long a finished session waits for its last frames to be written.
const WRITER_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Runs a node session over an upgraded WebSocket.
pub async fn serve_socket(context: LinkContext, socket: WebSocket) {
    let (mut sink, mut stream) = socket.split();
    let (inbound_sender, inbound) = mpsc::channel::<Inbound>(OUTBOUND_CAPACITY);
    let (outbound, mut outbound_receiver) = mpsc::channel::<Outbound>(OUTBOUND_CAPACITY);
    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            let inbound = match message {
                Ok(Message::Text(text)) => Inbound::Text(text.as_str().to_owned()),
                Ok(Message::Binary(_)) => Inbound::Binary,
                Ok(Message::Pong(_)) => Inbound::Pong,
                Ok(Message::Ping(_)) => continue,
                Ok(Message::Close(_)) => Inbound::Closed,
                Err(error) => {
                    let text = error.to_string();
                    match text.contains("too long")
                        || text.contains("too big")
                        || text.contains("Space limit")
                    {
                        true => Inbound::TooLarge,
                        false => Inbound::Closed,
                    }
                }
            };
            let closed = matches!(inbound, Inbound::Closed | Inbound::TooLarge);
            if inbound_sender.send(inbound).await.is_err() || closed {
                break;
            }
        }
        let _ = inbound_sender.send(Inbound::Closed).await;
    });
    let writer = tokio::spawn(async move {
        while let Some(frame) = outbound_receiver.recv().await {
            let (message, last) = match frame {
                Outbound::Text(text) => (Message::Text(text.into()), false),
                Outbound::Ping => (Message::Ping(Vec::new().into()), false),
                Outbound::Close { code, reason } => (
                    Message::Close(Some(CloseFrame {
                        code,
                        reason: reason.into(),
                    })),
                    true,
                ),
            };
            if sink.send(message).await.is_err() || last {
                break;
            }
        }
        let _ = sink.close().await;
    });
    let closer = outbound.clone();
    crate::link::session::serve(context, inbound, outbound).await;
    // The session is over. A refusal already queued its close frame; otherwise close normally.
    // Callers may still hold the connection's sender, so the writer is told to stop explicitly.
    let _ = closer
        .send(Outbound::Close {
            code: 1000,
            reason: String::from("session ended"),
        })
        .await;
    let _ = tokio::time::timeout(WRITER_DRAIN, writer).await;
    reader.abort();
}
