//! One session over a [`Link`]: the client side of the handshake, then the serve loop.
//!
//! The session knows frames and nothing of sockets or files: the host opens the link, saves the
//! device token between [`handshake`] and [`serve`], and decides when to reconnect.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::frame::EventFrame;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::MAX_FRAME_BYTES;
use gatehouse_protocol::frame::MAX_PREAUTH_FRAME_BYTES;
use gatehouse_protocol::frame::ResponseFrame;
use gatehouse_protocol::frame::names;
use gatehouse_protocol::handshake::CLIENT_ID_NODE_HOST;
use gatehouse_protocol::handshake::CLIENT_MODE_NODE;
use gatehouse_protocol::handshake::ClientInfo;
use gatehouse_protocol::handshake::ConnectAuth;
use gatehouse_protocol::handshake::ConnectChallenge;
use gatehouse_protocol::handshake::ConnectParams;
use gatehouse_protocol::handshake::DeviceProof;
use gatehouse_protocol::handshake::HelloOk;
use gatehouse_protocol::handshake::PROTOCOL_VERSION;
use gatehouse_protocol::handshake::ROLE_NODE;
use gatehouse_protocol::handshake::SignatureFields;
use gatehouse_protocol::handshake::device_signature_payload_v3;
use gatehouse_protocol::invoke::InvokeCancel;
use gatehouse_protocol::invoke::InvokeInput;
use gatehouse_protocol::invoke::InvokeRequest;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use crate::error::NodeHostError;
use crate::error::Result;
use crate::identity::Identity;
use crate::invoke::CommandSet;
use crate::invoke::INPUT_CHANNEL_CAPACITY;
use crate::invoke::InvokeContext;
use crate::invoke::Outbound;
use crate::invoke::ProgressSender;
use crate::invoke::SendError;
use crate::link::Link;

/// The lowest protocol version the node speaks.
pub(crate) const MIN_PROTOCOL: u32 = 3;

/// The platform the node reports and signs.
pub(crate) const PLATFORM: &str = "linux";

/// The device family the node reports and signs.
pub(crate) const DEVICE_FAMILY: &str = "server";

/// Who the node says it is in `connect`.
#[derive(Debug)]
pub(crate) struct ConnectSetup<'a> {
    pub(crate) identity: &'a Identity,
    pub(crate) display_name: &'a str,
    pub(crate) runtime: gatehouse_protocol::runtime::RuntimeKind,
    pub(crate) workspace_root: &'a str,
    pub(crate) commands: Vec<String>,
    pub(crate) auth: ConnectAuth,
    pub(crate) handshake_timeout: Duration,
}

/// Runs the client side of the handshake on `link`: waits for `connect.challenge`, sends
/// `connect`, and waits for its response.
///
/// Returns `hello-ok` and the sender to use for the rest of the session.
///
/// # Errors
/// [`NodeHostError::Refused`] when the Gateway answers with an error,
/// [`NodeHostError::HandshakeTimeout`], [`NodeHostError::LinkClosed`] or
/// [`NodeHostError::Protocol`] otherwise.
pub(crate) async fn handshake(
    link: &mut Link,
    setup: ConnectSetup<'_>,
) -> Result<(HelloOk, Outbound)> {
    let outbound = Outbound::new(link.outbound.clone(), MAX_PREAUTH_FRAME_BYTES);
    let first = recv_preauth(link, setup.handshake_timeout, "connect.challenge").await?;
    let challenge = match first {
        Frame::Event(EventFrame { event, payload, .. }) if event == names::CONNECT_CHALLENGE => {
            decode::<ConnectChallenge>(payload, "connect.challenge")?
        }
        Frame::Event(_) | Frame::Req(_) | Frame::Res(_) => {
            return Err(NodeHostError::Protocol {
                reason: "the first frame is not connect.challenge".to_owned(),
            });
        }
    };
    let params = connect_params(&setup, &challenge);
    let Ok(params) = serde_json::to_value(&params) else {
        return Err(NodeHostError::Protocol {
            reason: "cannot encode connect".to_owned(),
        });
    };
    let connect_id = match outbound.request(names::CONNECT, params).await {
        Ok(id) => id,
        Err(SendError::Closed) => return Err(NodeHostError::LinkClosed),
        Err(SendError::TooLarge { size }) => {
            return Err(NodeHostError::Protocol {
                reason: format!("connect is {size} bytes, over the pre-auth limit"),
            });
        }
    };
    loop {
        let frame = recv_preauth(link, setup.handshake_timeout, "hello-ok").await?;
        match frame {
            Frame::Res(response) if response.id == connect_id => {
                return match response {
                    ResponseFrame {
                        ok: true, payload, ..
                    } => {
                        let hello = decode::<HelloOk>(payload, "hello-ok")?;
                        let max_frame_bytes = usize::try_from(hello.policy.max_payload)
                            .unwrap_or(usize::MAX)
                            .min(MAX_FRAME_BYTES);
                        let outbound = outbound.with_max_frame_bytes(max_frame_bytes);
                        Ok((hello, outbound))
                    }
                    ResponseFrame { error, .. } => Err(NodeHostError::Refused {
                        error: error.unwrap_or_else(|| {
                            WireError::new(
                                ErrorCode::Unauthorized,
                                "connect refused without an error",
                            )
                        }),
                    }),
                };
            }
            Frame::Event(event) => {
                tracing::debug!(event = %event.event, "ignoring an event before hello-ok");
            }
            Frame::Res(_) | Frame::Req(_) => {
                return Err(NodeHostError::Protocol {
                    reason: "unexpected frame before hello-ok".to_owned(),
                });
            }
        }
    }
}

/// Serves invokes on `link` until it fails; returns why it ended.
///
/// Every invoke runs in its own task; when this function returns, the tasks still running are
/// aborted (the Gateway fails in-flight invokes on disconnect).
pub(crate) async fn serve(
    mut link: Link,
    hello: &HelloOk,
    outbound: Outbound,
    node_id: &str,
    commands: &CommandSet,
) -> NodeHostError {
    let mut serve = Serve {
        outbound,
        node_id: node_id.to_owned(),
        commands,
        in_flight: HashMap::new(),
        invoke_of_task: HashMap::new(),
        tasks: JoinSet::new(),
    };
    let idle_timeout = match hello.policy.tick_interval_ms {
        0 => None,
        tick_ms => Some(Duration::from_millis(tick_ms.saturating_mul(2))),
    };
    let mut last_frame_at = Instant::now();
    loop {
        let idle_deadline = idle_timeout.map(|timeout| last_frame_at + timeout);
        tokio::select! {
            text = link.inbound.recv() => {
                let Some(text) = text else {
                    return NodeHostError::LinkClosed;
                };
                last_frame_at = Instant::now();
                if text.len() > MAX_FRAME_BYTES {
                    return NodeHostError::Protocol {
                        reason: format!("a frame of {} bytes is over the limit", text.len()),
                    };
                }
                if let Err(err) = serve.handle_text(&text).await {
                    return err;
                }
            }
            Some(joined) = serve.tasks.join_next_with_id(), if !serve.tasks.is_empty() => {
                if let Err(err) = serve.handle_joined(joined).await {
                    return err;
                }
            }
            () = sleep_until_deadline(idle_deadline), if idle_deadline.is_some() => {
                let idle_ms = idle_timeout.map_or(0, |timeout| u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX));
                return NodeHostError::LinkIdle { idle_ms };
            }
        }
    }
}

/// One running invoke.
#[derive(Debug)]
struct InFlight {
    abort: AbortHandle,
    input: mpsc::Sender<InvokeInput>,
    /// Set by whoever sends the invoke's one result: the task, or a cancel.
    answered: Arc<AtomicBool>,
}

struct Serve<'a> {
    outbound: Outbound,
    node_id: String,
    commands: &'a CommandSet,
    in_flight: HashMap<String, InFlight>,
    invoke_of_task: HashMap<tokio::task::Id, String>,
    tasks: JoinSet<()>,
}

impl Serve<'_> {
    async fn handle_text(&mut self, text: &str) -> Result<()> {
        let frame = match serde_json::from_str::<Frame>(text) {
            Ok(frame) => frame,
            Err(err) => {
                tracing::warn!(error = %err, "ignoring a malformed frame from the gateway");
                return Ok(());
            }
        };
        match frame {
            Frame::Event(event) => self.handle_event(event).await,
            Frame::Req(request) => {
                tracing::warn!(method = %request.method, "the gateway sent a request the node does not serve");
                let error = WireError::new(
                    ErrorCode::InvalidRequest,
                    format!("the node serves no method {}", request.method),
                );
                self.send(&Frame::Res(ResponseFrame::failure(request.id, error)))
                    .await
            }
            Frame::Res(response) => {
                if let Some(error) = response.error.as_ref().filter(|_| !response.ok) {
                    tracing::warn!(id = %response.id, code = %error.code, message = %error.message, "the gateway refused a node request");
                }
                self.outbound.resolve(response);
                Ok(())
            }
        }
    }

    async fn handle_event(&mut self, event: EventFrame) -> Result<()> {
        match event.event.as_str() {
            names::NODE_INVOKE_REQUEST => {
                match decode::<InvokeRequest>(event.payload, names::NODE_INVOKE_REQUEST) {
                    Ok(request) => self.start_invoke(request).await,
                    Err(err) => {
                        tracing::warn!(error = %err, "ignoring a malformed invoke request");
                        Ok(())
                    }
                }
            }
            names::NODE_INVOKE_CANCEL => {
                match decode::<InvokeCancel>(event.payload, names::NODE_INVOKE_CANCEL) {
                    Ok(cancel) => self.cancel_invoke(&cancel.id).await,
                    Err(err) => {
                        tracing::warn!(error = %err, "ignoring a malformed invoke cancel");
                        Ok(())
                    }
                }
            }
            names::NODE_INVOKE_INPUT => {
                match decode::<InvokeInput>(event.payload, names::NODE_INVOKE_INPUT) {
                    Ok(input) => {
                        self.route_input(input);
                        Ok(())
                    }
                    Err(err) => {
                        tracing::warn!(error = %err, "ignoring a malformed invoke input");
                        Ok(())
                    }
                }
            }
            names::TICK => Ok(()),
            other => {
                tracing::debug!(event = %other, "ignoring an unknown event");
                Ok(())
            }
        }
    }

    async fn start_invoke(&mut self, request: InvokeRequest) -> Result<()> {
        let InvokeRequest {
            id: invoke_id,
            node_id,
            command,
            params_json,
            timeout_ms: _,
            traceparent,
        } = request;
        if self.in_flight.contains_key(&invoke_id) {
            tracing::warn!(invoke_id = %invoke_id, "ignoring a duplicate invoke id");
            return Ok(());
        }
        if node_id != self.node_id {
            let error = WireError::new(ErrorCode::InvalidRequest, "the invoke is for another node");
            return self.send_result(&invoke_id, Err(error)).await;
        }
        let Some(handler) = self.commands.get(&command) else {
            let error = WireError::new(
                ErrorCode::UnknownCommand,
                format!("the node does not serve {command}"),
            );
            return self.send_result(&invoke_id, Err(error)).await;
        };
        tracing::debug!(invoke_id = %invoke_id, command = %command, "invoke started");
        let (input_tx, input_rx) = mpsc::channel(INPUT_CHANNEL_CAPACITY);
        let context = InvokeContext {
            params_json,
            progress: ProgressSender::new(
                self.outbound.clone(),
                invoke_id.clone(),
                self.node_id.clone(),
            ),
            input: input_rx,
        };
        let answered = Arc::new(AtomicBool::new(false));
        let task_answered = Arc::clone(&answered);
        let outbound = self.outbound.clone();
        let task_invoke_id = invoke_id.clone();
        let task_node_id = self.node_id.clone();
        let span = tracing::info_span!(
            "node_invoke",
            command = %command,
            invoke_id = %invoke_id,
            outcome = tracing::field::Empty,
            error_code = tracing::field::Empty,
            duration_ms = tracing::field::Empty,
        );
        gatehouse_telemetry::set_remote_parent(&span, traceparent.as_deref());
        let abort = self.tasks.spawn(async move {
            let started = Instant::now();
            let outcome = handler.invoke(context).instrument(span.clone()).await;
            match &outcome {
                Ok(_) => span.record("outcome", "ok"),
                Err(error) => span
                    .record("outcome", "error")
                    .record("error_code", error.code.as_str()),
            };
            span.record(
                "duration_ms",
                u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            );
            if task_answered.swap(true, Ordering::SeqCst) {
                return;
            }
            if let Err(err) = outbound.send_result(&task_invoke_id, &task_node_id, outcome).await {
                tracing::debug!(invoke_id = %task_invoke_id, error = ?err, "cannot send an invoke result");
            }
        });
        self.invoke_of_task.insert(abort.id(), invoke_id.clone());
        self.in_flight.insert(
            invoke_id,
            InFlight {
                abort,
                input: input_tx,
                answered,
            },
        );
        Ok(())
    }

    async fn cancel_invoke(&mut self, invoke_id: &str) -> Result<()> {
        let Some(in_flight) = self.in_flight.remove(invoke_id) else {
            tracing::debug!(invoke_id = %invoke_id, "cancel for an invoke that is not running");
            return Ok(());
        };
        in_flight.abort.abort();
        if in_flight.answered.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        tracing::debug!(invoke_id = %invoke_id, "invoke cancelled");
        let error = WireError::new(ErrorCode::Cancelled, "the invoke was cancelled");
        self.send_result(invoke_id, Err(error)).await
    }

    fn route_input(&mut self, input: InvokeInput) {
        let Some(in_flight) = self.in_flight.get(&input.id) else {
            tracing::debug!(invoke_id = %input.id, "input for an invoke that is not running");
            return;
        };
        match in_flight.input.try_send(input) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(input)) => {
                tracing::warn!(invoke_id = %input.id, "dropping invoke input: the command is not reading");
            }
            Err(mpsc::error::TrySendError::Closed(input)) => {
                tracing::debug!(invoke_id = %input.id, "the command takes no input");
            }
        }
    }

    async fn handle_joined(
        &mut self,
        joined: std::result::Result<(tokio::task::Id, ()), tokio::task::JoinError>,
    ) -> Result<()> {
        let task_id = match &joined {
            Ok((task_id, ())) => *task_id,
            Err(err) => err.id(),
        };
        let Some(invoke_id) = self.invoke_of_task.remove(&task_id) else {
            return Ok(());
        };
        let Some(in_flight) = self.in_flight.remove(&invoke_id) else {
            return Ok(());
        };
        match joined {
            Err(err) if err.is_panic() && !in_flight.answered.swap(true, Ordering::SeqCst) => {
                tracing::error!(invoke_id = %invoke_id, "a command panicked");
                let error = WireError::new(ErrorCode::Internal, "the command failed");
                self.send_result(&invoke_id, Err(error)).await
            }
            Ok(_) | Err(_) => Ok(()),
        }
    }

    async fn send_result(
        &self,
        invoke_id: &str,
        outcome: std::result::Result<serde_json::Value, WireError>,
    ) -> Result<()> {
        match self
            .outbound
            .send_result(invoke_id, &self.node_id, outcome)
            .await
        {
            Ok(()) | Err(SendError::TooLarge { .. }) => Ok(()),
            Err(SendError::Closed) => Err(NodeHostError::LinkClosed),
        }
    }

    async fn send(&self, frame: &Frame) -> Result<()> {
        match self.outbound.send_frame(frame).await {
            Ok(()) | Err(SendError::TooLarge { .. }) => Ok(()),
            Err(SendError::Closed) => Err(NodeHostError::LinkClosed),
        }
    }
}

/// Builds and signs the `connect` parameters.
fn connect_params(setup: &ConnectSetup<'_>, challenge: &ConnectChallenge) -> ConnectParams {
    let scopes: Vec<String> = Vec::new();
    let device_id = setup.identity.device_id();
    let payload = device_signature_payload_v3(&SignatureFields {
        device_id,
        client_id: CLIENT_ID_NODE_HOST,
        client_mode: CLIENT_MODE_NODE,
        role: ROLE_NODE,
        scopes: &scopes,
        signed_at_ms: challenge.ts,
        token: setup.auth.signed_token(),
        nonce: &challenge.nonce,
        platform: PLATFORM,
        device_family: DEVICE_FAMILY,
    });
    ConnectParams {
        min_protocol: MIN_PROTOCOL,
        max_protocol: PROTOCOL_VERSION,
        client: ClientInfo {
            id: CLIENT_ID_NODE_HOST.to_owned(),
            display_name: Some(setup.display_name.to_owned()),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            platform: PLATFORM.to_owned(),
            device_family: Some(DEVICE_FAMILY.to_owned()),
            mode: CLIENT_MODE_NODE.to_owned(),
        },
        role: ROLE_NODE.to_owned(),
        scopes,
        commands: setup.commands.clone(),
        device: Some(DeviceProof {
            id: device_id.to_owned(),
            public_key: setup.identity.public_key_base64(),
            signature: setup.identity.sign_base64(payload.as_bytes()),
            signed_at: challenge.ts,
            nonce: challenge.nonce.clone(),
        }),
        auth: Some(setup.auth.clone()),
        runtime: Some(setup.runtime),
        workspace_root: Some(setup.workspace_root.to_owned()),
    }
}

/// Receives one frame before `hello-ok`, within `timeout`, checking the pre-auth size limit.
async fn recv_preauth(
    link: &mut Link,
    timeout: Duration,
    waiting_for: &'static str,
) -> Result<Frame> {
    let Ok(text) = tokio::time::timeout(timeout, link.inbound.recv()).await else {
        return Err(NodeHostError::HandshakeTimeout { waiting_for });
    };
    let Some(text) = text else {
        return Err(NodeHostError::LinkClosed);
    };
    if text.len() > MAX_PREAUTH_FRAME_BYTES {
        return Err(NodeHostError::Protocol {
            reason: format!("a pre-auth frame of {} bytes is over the limit", text.len()),
        });
    }
    serde_json::from_str(&text).map_err(|err| NodeHostError::Protocol {
        reason: format!("malformed frame while waiting for {waiting_for}: {err}"),
    })
}

fn decode<T: serde::de::DeserializeOwned>(
    payload: Option<serde_json::Value>,
    what: &str,
) -> Result<T> {
    let payload = payload.unwrap_or(serde_json::Value::Null);
    serde_json::from_value(payload).map_err(|err| NodeHostError::Protocol {
        reason: format!("malformed {what}: {err}"),
    })
}

async fn sleep_until_deadline(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
