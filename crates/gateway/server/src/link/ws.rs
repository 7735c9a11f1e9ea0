//! The WebSocket adapter of the node link: `/node` frames to and from the session's channels.
//!
//! The Gateway performs the upgrade itself (rather than through axum's extractor) so that the
//! pre-auth limit holds while reading: until the session admits the node, the upgraded stream
//! is read through a [`PreauthGate`] that lets at most [`PREAUTH_READ_BUDGET`] bytes through
//! and then fails the read. A 24 MiB frame sent before `connect` is therefore refused after
//! about 64 KiB has been read, never buffered whole. Once the node is admitted the gate opens
//! and tungstenite's own limits ([`MAX_WS_MESSAGE_BYTES`]) apply; tungstenite cannot change its
//! limits on a running stream, which is why the pre-auth bound is a separate layer.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::task::Context;
use std::task::Poll;

use axum::extract::Request;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_protocol::frame::MAX_FRAME_BYTES;
use gatehouse_protocol::frame::MAX_PREAUTH_FRAME_BYTES;
use hyper_util::rt::TokioIo;
use tokio::io::AsyncRead;
use tokio::io::AsyncWrite;
use tokio::io::ReadBuf;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::link::session::Inbound;
use crate::link::session::LinkContext;
use crate::link::session::OUTBOUND_CAPACITY;
use crate::link::session::Outbound;

/// The largest WebSocket message accepted after admission; frames above the protocol limit are
/// refused by the session, so the transport allows a little more to be able to say why.
pub(crate) const MAX_WS_MESSAGE_BYTES: usize = MAX_FRAME_BYTES + 64 * 1024;

/// The most bytes read from a connection before its node is admitted: one pre-auth frame, its
/// WebSocket header, and room for a close frame.
pub(crate) const PREAUTH_READ_BUDGET: usize = MAX_PREAUTH_FRAME_BYTES + 1024;

/// How long a finished session waits for its last frames to be written.
const WRITER_DRAIN: std::time::Duration = std::time::Duration::from_secs(5);

/// The largest piece read through a closed gate at once.
const GATED_READ_CHUNK: usize = 8 * 1024;

/// Why a `/node` request was not upgraded; the HTTP layer answers it as `INVALID_REQUEST`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UpgradeRefusal {
    /// The request is not a WebSocket (version 13) upgrade.
    #[error("/node takes a WebSocket upgrade (version 13)")]
    NotWebSocket,
    /// The connection the request came on cannot be taken over (no upgrade handle).
    #[error("this connection cannot be upgraded")]
    NotUpgradable,
}

/// Answers the `/node` upgrade request and serves the node session on the upgraded stream.
///
/// # Errors
/// [`UpgradeRefusal`] when the request cannot be upgraded; nothing is served then.
pub(crate) fn upgrade(
    context: LinkContext,
    mut request: Request,
) -> Result<Response, UpgradeRefusal> {
    let Some(accept) = accept_key(request.headers()) else {
        return Err(UpgradeRefusal::NotWebSocket);
    };
    let Some(on_upgrade) = request
        .extensions_mut()
        .remove::<hyper::upgrade::OnUpgrade>()
    else {
        return Err(UpgradeRefusal::NotUpgradable);
    };
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<SocketAddr>>()
        .map_or_else(|| String::from("unknown"), |info| info.0.ip().to_string());
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(upgraded) => upgraded,
            Err(error) => {
                tracing::debug!(error = %error, "the /node upgrade failed");
                return;
            }
        };
        let gate = Arc::new(PreauthGate::default());
        let stream = GatedStream {
            inner: TokioIo::new(upgraded),
            gate: Arc::clone(&gate),
        };
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_WS_MESSAGE_BYTES))
            .max_frame_size(Some(MAX_WS_MESSAGE_BYTES));
        let socket = WebSocketStream::from_raw_socket(stream, Role::Server, Some(config)).await;
        serve_socket(context, &peer, socket, gate).await;
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    if let Ok(value) = HeaderValue::from_str(&accept) {
        headers.insert(header::SEC_WEBSOCKET_ACCEPT, value);
    }
    Ok(response)
}

/// Returns the `Sec-WebSocket-Accept` value for a valid version 13 upgrade request.
fn accept_key(headers: &HeaderMap) -> Option<String> {
    let has_token = |name: header::HeaderName, token: &str| {
        headers
            .get_all(name)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','))
            .any(|part| part.trim().eq_ignore_ascii_case(token))
    };
    if !has_token(header::CONNECTION, "upgrade") || !has_token(header::UPGRADE, "websocket") {
        return None;
    }
    if headers.get(header::SEC_WEBSOCKET_VERSION)?.as_bytes() != b"13" {
        return None;
    }
    let key = headers.get(header::SEC_WEBSOCKET_KEY)?;
    Some(tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes()))
}

/// The pre-auth read limit of one connection: closed (counting) until the node is admitted.
#[derive(Debug, Default)]
pub(crate) struct PreauthGate {
    open: AtomicBool,
    read: AtomicUsize,
    overrun: AtomicBool,
}

impl PreauthGate {
    /// Lifts the limit: the node was admitted.
    pub(crate) fn open(&self) {
        self.open.store(true, Ordering::Release);
    }

    /// Returns true when a read was refused because the budget was spent.
    pub(crate) fn overrun(&self) -> bool {
        self.overrun.load(Ordering::Acquire)
    }
}

/// A stream whose reads pass through a [`PreauthGate`].
struct GatedStream<S> {
    inner: S,
    gate: Arc<PreauthGate>,
}

impl<S: AsyncRead + Unpin> AsyncRead for GatedStream<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.gate.open.load(Ordering::Acquire) {
            return Pin::new(&mut self.inner).poll_read(cx, buf);
        }
        let spent = self.gate.read.load(Ordering::Acquire);
        let left = PREAUTH_READ_BUDGET.saturating_sub(spent);
        if left == 0 {
            self.gate.overrun.store(true, Ordering::Release);
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "more than the pre-auth read budget arrived before the handshake",
            )));
        }
        // Read into a small bounded buffer, so no read can take more than what is left.
        let mut piece = [0_u8; GATED_READ_CHUNK];
        let wanted = left.min(buf.remaining()).min(GATED_READ_CHUNK);
        let mut limited = ReadBuf::new(&mut piece[..wanted]);
        match Pin::new(&mut self.inner).poll_read(cx, &mut limited) {
            Poll::Ready(Ok(())) => {
                let filled = limited.filled();
                self.gate.read.fetch_add(filled.len(), Ordering::AcqRel);
                buf.put_slice(filled);
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for GatedStream<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// Runs a node session from `peer` over an upgraded WebSocket whose reads pass `gate`.
async fn serve_socket<S>(
    context: LinkContext,
    peer: &str,
    socket: WebSocketStream<S>,
    gate: Arc<PreauthGate>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = socket.split();
    let (inbound_sender, inbound) = mpsc::channel::<Inbound>(OUTBOUND_CAPACITY);
    let (outbound, mut outbound_receiver) = mpsc::channel::<Outbound>(OUTBOUND_CAPACITY);
    let reader_gate = Arc::clone(&gate);
    let reader = tokio::spawn(async move {
        while let Some(message) = stream.next().await {
            let inbound = match message {
                // The frame's bytes become the session's text without a copy.
                Ok(Message::Text(text)) => {
                    match String::from_utf8(Vec::from(bytes::Bytes::from(text))) {
                        Ok(text) => Inbound::Text(text),
                        Err(_) => Inbound::Binary,
                    }
                }
                Ok(Message::Binary(_)) => Inbound::Binary,
                Ok(Message::Pong(_)) => Inbound::Pong,
                Ok(Message::Ping(_) | Message::Frame(_)) => continue,
                Ok(Message::Close(_)) => Inbound::Closed,
                Err(error) => {
                    let too_large = reader_gate.overrun()
                        || matches!(error, tokio_tungstenite::tungstenite::Error::Capacity(_));
                    match too_large {
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
                        code: code.into(),
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
    crate::link::session::serve_from(context, peer, move || gate.open(), inbound, outbound).await;
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
