//! One node connection, from challenge to close, over channels of text frames.

use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_protocol::command::Command;
use gatehouse_protocol::command::GatewayTool;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::MAX_FRAME_BYTES;
use gatehouse_protocol::frame::MAX_PREAUTH_FRAME_BYTES;
use gatehouse_protocol::frame::ResponseFrame;
use gatehouse_protocol::frame::Tick;
use gatehouse_protocol::frame::names;
use gatehouse_protocol::handshake::ConnectChallenge;
use gatehouse_protocol::handshake::ConnectParams;
use gatehouse_protocol::handshake::ConnectRefusalDetails;
use gatehouse_protocol::handshake::HelloAuth;
use gatehouse_protocol::handshake::HelloOk;
use gatehouse_protocol::handshake::HelloPolicy;
use gatehouse_protocol::handshake::PROTOCOL_VERSION;
use gatehouse_protocol::handshake::ServerInfo;
use gatehouse_protocol::invoke::InvokeResult;
use gatehouse_protocol::invoke::MAX_PROGRESS_CHUNK_BYTES;
use gatehouse_protocol::report::NodeReport;
use gatehouse_store::Store;
use gatehouse_store::records::NodeSeen;
use tokio::sync::mpsc;

use crate::audit::Audit;
use crate::audit::AuditRow;
use crate::audit::Limited;
use crate::link::handshake::Admission;
use crate::link::handshake::Refusal;
use crate::link::handshake::admit;
use crate::link::handshake::declared_runtime;
use crate::link::handshake::listed_name;
use crate::link::progress::ChunkRefusal;
use crate::link::registry::ConnectionIdentity;
use crate::link::registry::NodeConnection;
use crate::link::registry::NodeRegistry;
use crate::link::registry::event_frame;
use gatehouse_protocol::time::now_ms;

/// How long the node has to answer the challenge.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(15);

/// The capacity of a connection's outbound queue, in frames.
pub(crate) const OUTBOUND_CAPACITY: usize = 64;

/// The most bytes the Gateway buffers for one node before dropping it.
pub(crate) const MAX_BUFFERED_BYTES: u64 = 2 * MAX_FRAME_BYTES as u64;

/// A frame from the node, as the transport delivers it.
#[derive(Debug)]
pub(crate) enum Inbound {
    /// A text frame.
    Text(String),
    /// A binary frame; the protocol has none, so it is refused.
    Binary,
    /// A frame over the transport's hard limit.
    TooLarge,
    /// A keep-alive answer.
    Pong,
    /// The node closed the connection or it broke.
    Closed,
}

/// A frame for the node.
#[derive(Debug)]
pub(crate) enum Outbound {
    /// A text frame.
    Text(String),
    /// A keep-alive probe.
    Ping,
    /// Close the connection with this code and reason (the stable error code).
    Close {
        /// The WebSocket close code.
        code: u16,
        /// The reason: a stable error code.
        reason: String,
    },
}

/// What a session needs from the Gateway.
#[derive(Clone)]
pub(crate) struct LinkContext {
    /// The Gateway store.
    pub store: Arc<dyn Store>,
    /// The connected nodes.
    pub registry: Arc<NodeRegistry>,
    /// The audit trail.
    pub audit: Audit,
    /// The interval of `tick` events and keep-alive probes.
    pub tick_interval: Duration,
    /// Answers the requests nodes send the Gateway (`node.gateway.tool`).
    pub requests: Arc<dyn NodeRequestHandler>,
}

/// Answers the requests an admitted node sends the Gateway, besides the invoke envelope that the
/// link serves itself. The link owns no application service: the Gateway injects the handler
/// where it builds its state (the tools service implements it), so the transport depends on
/// this trait only.
#[async_trait::async_trait]
pub(crate) trait NodeRequestHandler: Send + Sync {
    /// Answers `node.gateway.tool` from `connection`, a call of a Gateway-provided tool for a
    /// turn that runs on it.
    ///
    /// # Errors
    /// The wire error the node is answered with.
    async fn gateway_tool(
        &self,
        connection: &NodeConnection,
        params: &<GatewayTool as Command>::Params,
    ) -> Result<<GatewayTool as Command>::Result, WireError>;
}

/// The peer name of in-process connections (embedded mode), which have no address.
pub(crate) const IN_PROCESS_PEER: &str = "in-process";

/// Runs one in-process node connection; see [`serve_from`].
pub(crate) async fn serve(
    context: LinkContext,
    inbound: mpsc::Receiver<Inbound>,
    outbound: mpsc::Sender<Outbound>,
) {
    serve_from(context, IN_PROCESS_PEER, || {}, inbound, outbound).await;
}

/// Runs one node connection from `peer` (its address): challenge, admission, then serving
/// until either side closes. `admitted` runs once the node is admitted, before `hello-ok` is
/// sent, so the transport can lift its pre-auth limits.
///
/// Every refusal sends the node a `res` with the stable code (when the request could be read)
/// and closes the transport with the code as the reason. It is logged and audited while the
/// peer is within [`crate::audit::LIMITED_ROWS_PER_WINDOW`] per minute, and only counted (then
/// summarised) past it, so a flood of bad connects adds a bounded number of rows and lines.
pub(crate) async fn serve_from(
    context: LinkContext,
    peer: &str,
    admitted: impl FnOnce(),
    mut inbound: mpsc::Receiver<Inbound>,
    outbound: mpsc::Sender<Outbound>,
) {
    let challenge = ConnectChallenge {
        nonce: match crate::secrets::random_token() {
            Ok(nonce) => nonce,
            Err(error) => {
                tracing::error!(error = %error, "cannot create a challenge nonce");
                return;
            }
        },
        ts: now_ms(),
    };
    let challenge_frame = event_frame(names::CONNECT_CHALLENGE, &challenge);
    if outbound
        .send(Outbound::Text(challenge_frame))
        .await
        .is_err()
    {
        return;
    }
    let first = tokio::time::timeout(HANDSHAKE_TIMEOUT, inbound.recv()).await;
    let text = match first {
        Err(_elapsed) => {
            refuse(
                &context,
                peer,
                &outbound,
                None,
                &plain_refusal(
                    ErrorCode::Timeout,
                    ErrorCode::HandshakeTimeout,
                    "no connect within 15 s",
                ),
            )
            .await;
            return;
        }
        Ok(None | Some(Inbound::Closed)) => return,
        Ok(Some(Inbound::TooLarge)) => {
            refuse(&context, peer, &outbound, None, &too_large()).await;
            return;
        }
        Ok(Some(Inbound::Binary | Inbound::Pong)) => {
            refuse(
                &context,
                peer,
                &outbound,
                None,
                &plain_refusal(
                    ErrorCode::InvalidRequest,
                    ErrorCode::BinaryFrame,
                    "the first frame must be a connect request",
                ),
            )
            .await;
            return;
        }
        Ok(Some(Inbound::Text(text))) => text,
    };
    if text.len() > MAX_PREAUTH_FRAME_BYTES {
        refuse(&context, peer, &outbound, None, &too_large()).await;
        return;
    }
    let request = match serde_json::from_str::<Frame>(&text) {
        Ok(Frame::Req(request)) if request.method == names::CONNECT => request,
        Ok(_) => {
            refuse(
                &context,
                peer,
                &outbound,
                None,
                &plain_refusal(
                    ErrorCode::InvalidRequest,
                    ErrorCode::ConnectRequired,
                    "the first frame must be a connect request",
                ),
            )
            .await;
            return;
        }
        Err(_) => {
            refuse(
                &context,
                peer,
                &outbound,
                None,
                &plain_refusal(
                    ErrorCode::InvalidRequest,
                    ErrorCode::MalformedFrame,
                    "the frame is not valid JSON of a known frame type",
                ),
            )
            .await;
            return;
        }
    };
    let Some(Ok(params)) = request
        .params
        .clone()
        .map(serde_json::from_value::<ConnectParams>)
    else {
        refuse(
            &context,
            peer,
            &outbound,
            Some(&request.id),
            &plain_refusal(
                ErrorCode::InvalidRequest,
                ErrorCode::ConnectParamsInvalid,
                "the connect parameters are malformed",
            ),
        )
        .await;
        return;
    };
    let admission = match admit(context.store.as_ref(), &challenge, &params, now_ms()).await {
        Ok(admission) => admission,
        Err(refusal) => {
            refuse(&context, peer, &outbound, Some(&request.id), &refusal).await;
            return;
        }
    };
    let Some(device) = params.device.as_ref() else {
        return;
    };
    let identity = ConnectionIdentity {
        device_id: device.id.clone(),
        display_name: listed_name(&params, &device.id),
        runtime: declared_runtime(&params),
        commands: params.commands.clone(),
        workspace_root: params.workspace_root.clone(),
        protocol: PROTOCOL_VERSION.min(params.max_protocol),
    };
    let seen = NodeSeen {
        device_id: identity.device_id.clone(),
        display_name: identity.display_name.clone(),
        runtime: identity.runtime.as_str().to_owned(),
        commands: identity.commands.clone(),
        workspace_root: identity.workspace_root.clone(),
        at_ms: now_ms(),
    };
    if let Err(error) = context.store.record_node_seen(&seen).await {
        tracing::warn!(error = %error, device_id = %seen.device_id, "cannot record node visit");
    }
    let conn_id = context.registry.next_id();
    let (method, device_token) = match admission {
        Admission::Enrolled { device_token } => ("bootstrap-token", Some(device_token)),
        Admission::Reconnected => ("device-token", None),
    };
    let hello = HelloOk {
        kind: String::from("hello-ok"),
        protocol: PROTOCOL_VERSION.min(params.max_protocol),
        server: ServerInfo {
            version: String::from(env!("CARGO_PKG_VERSION")),
            conn_id: format!("conn-{conn_id}"),
        },
        auth: HelloAuth {
            method: String::from(method),
            role: String::from("node"),
            scopes: Vec::new(),
            issued_at_ms: device_token.as_ref().map(|_| now_ms()),
            device_token,
        },
        policy: HelloPolicy {
            max_payload: MAX_FRAME_BYTES as u64,
            max_buffered_bytes: MAX_BUFFERED_BYTES,
            tick_interval_ms: u64::try_from(context.tick_interval.as_millis()).unwrap_or(u64::MAX),
        },
    };
    admitted();
    let hello_frame = Frame::Res(ResponseFrame::success(
        request.id.clone(),
        serde_json::to_value(&hello).unwrap_or_default(),
    ));
    if outbound
        .send(Outbound::Text(
            serde_json::to_string(&hello_frame).unwrap_or_default(),
        ))
        .await
        .is_err()
    {
        return;
    }
    let actor = format!("node:{}", identity.device_id);
    let row = AuditRow {
        actor: &actor,
        action: "node.connect",
        outcome: "allowed",
        reason_code: None,
        details: serde_json::json!({"method": method, "runtime": identity.runtime, "commands": identity.commands, "peer": peer}),
    };
    if context.audit.record_limited(&actor, row).await == Limited::Recorded {
        tracing::info!(device_id = %identity.device_id, method, runtime = %identity.runtime, "node connected");
    }
    let connection = Arc::new(NodeConnection::new(
        identity,
        conn_id,
        now_ms(),
        outbound.clone(),
    ));
    if let Some(replaced) = context.registry.insert(Arc::clone(&connection)) {
        replaced.fail_all();
        let _ = replaced.outbound_close("REPLACED").await;
    }
    run_connected(&context, &connection, &mut inbound, &outbound).await;
    context
        .registry
        .remove(&connection.device_id, connection.conn_id);
    connection.fail_all();
    tracing::info!(device_id = %connection.device_id, "node disconnected");
}

/// Serves an admitted connection until it closes or goes silent.
async fn run_connected(
    context: &LinkContext,
    connection: &Arc<NodeConnection>,
    inbound: &mut mpsc::Receiver<Inbound>,
    outbound: &mpsc::Sender<Outbound>,
) {
    let mut ticker = tokio::time::interval(context.tick_interval);
    ticker.tick().await;
    let mut last_heard = Instant::now();
    loop {
        tokio::select! {
            frame = inbound.recv() => {
                last_heard = Instant::now();
                match frame {
                    None | Some(Inbound::Closed) => return,
                    Some(Inbound::Pong) => {}
                    Some(Inbound::TooLarge) => {
                        let _ = outbound.send(close(ErrorCode::FrameTooLarge)).await;
                        audit_drop(context, connection, ErrorCode::FrameTooLarge).await;
                        return;
                    }
                    Some(Inbound::Binary) => {
                        let _ = outbound.send(close(ErrorCode::InvalidRequest)).await;
                        return;
                    }
                    Some(Inbound::Text(text)) => handle_frame(context, connection, outbound, &text).await,
                }
            }
            _ = ticker.tick() => {
                if last_heard.elapsed() > context.tick_interval * 3 {
                    tracing::warn!(device_id = %connection.device_id, "node silent for three ticks; dropping it");
                    let _ = outbound.send(close(ErrorCode::Timeout)).await;
                    return;
                }
                let tick = event_frame(names::TICK, &Tick { ts: now_ms() });
                if outbound.send(Outbound::Text(tick)).await.is_err() || outbound.send(Outbound::Ping).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// A frame from the node whose params stay unparsed until the method is known, so that a large
/// result (a 16 MiB file is 22 MB of base64) is parsed once, straight into its own type.
#[derive(serde::Deserialize)]
struct IncomingFrame<'a> {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    method: Option<String>,
    #[serde(borrow, default)]
    params: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    event: Option<String>,
    #[serde(borrow, default)]
    payload: Option<&'a serde_json::value::RawValue>,
}

async fn handle_frame(
    context: &LinkContext,
    connection: &Arc<NodeConnection>,
    outbound: &mpsc::Sender<Outbound>,
    text: &str,
) {
    let Ok(frame) = serde_json::from_str::<IncomingFrame<'_>>(text) else {
        if let Some(count) = connection.note_malformed_frame() {
            tracing::warn!(device_id = %connection.device_id, count, "malformed frame from node (logged at the 1st, 2nd, 4th, ... occurrence)");
        }
        return;
    };
    if frame.kind == "event" && frame.event.as_deref() == Some(names::NODE_REPORT) {
        keep_report(&context.registry, connection, frame.payload);
        return;
    }
    // Responses to our events do not exist in this protocol; other events from the node are
    // ignored.
    let (true, Some(id), Some(method)) = (frame.kind == "req", frame.id, frame.method) else {
        return;
    };
    let request = ParsedRequest {
        id,
        method,
        params: frame.params,
    };
    if request.method == GatewayTool::NAME {
        // A tool may take a while: answer from a task so the link keeps flowing.
        let params = gatehouse_protocol::command::decode_params::<GatewayTool>(
            request.params.map(serde_json::value::RawValue::get),
        );
        let Some(slot) = connection.try_tool_slot() else {
            let response = ResponseFrame::failure(
                request.id,
                WireError::new(
                    ErrorCode::TooManyToolCalls,
                    "too many node.gateway.tool calls in flight on this connection; retry when one has been answered",
                ),
            );
            let text = serde_json::to_string(&Frame::Res(response)).unwrap_or_default();
            let _ = outbound.send(Outbound::Text(text)).await;
            return;
        };
        let requests = Arc::clone(&context.requests);
        let connection = Arc::clone(connection);
        let outbound = outbound.clone();
        let id = request.id;
        tokio::spawn(async move {
            // Held until the reply has been handed to the connection's writer.
            let _slot = slot;
            let answer = match params {
                Ok(params) => requests.gateway_tool(&connection, &params).await,
                Err(_) => Err(WireError::new(
                    ErrorCode::InvalidParams,
                    "malformed node.gateway.tool",
                )),
            };
            let response = match answer
                .map(|result| gatehouse_protocol::command::encode_result::<GatewayTool>(&result))
            {
                Ok(Ok(payload)) => ResponseFrame::success(id, payload),
                Ok(Err(error)) => ResponseFrame::failure(
                    id,
                    WireError::new(
                        ErrorCode::Internal,
                        format!("cannot encode the tool result: {error}"),
                    ),
                ),
                Err(error) => ResponseFrame::failure(id, error),
            };
            let text = serde_json::to_string(&Frame::Res(response)).unwrap_or_default();
            let _ = outbound.send(Outbound::Text(text)).await;
        });
        return;
    }
    let response = match request.method.as_str() {
        names::NODE_INVOKE_RESULT => {
            match request
                .params
                .map(|raw| serde_json::from_str::<InvokeResult>(raw.get()))
            {
                Some(Ok(result)) => {
                    if !connection.complete(result) {
                        tracing::debug!(device_id = %connection.device_id, "result for an invoke nobody waits for");
                    }
                    ResponseFrame::ack(request.id)
                }
                Some(Err(_)) | None => ResponseFrame::failure(
                    request.id,
                    WireError::new(ErrorCode::InvalidParams, "malformed node.invoke.result"),
                ),
            }
        }
        names::NODE_INVOKE_PROGRESS => match request.params.map(progress_chunk) {
            Some(Ok((invoke_id, chunk))) => {
                let refusal = match chunk {
                    Some(chunk) => connection.progress(&invoke_id, chunk).err(),
                    None => {
                        connection.fail_invoke(&invoke_id, ChunkRefusal::TooLarge);
                        Some(ChunkRefusal::TooLarge)
                    }
                };
                match refusal {
                    None => ResponseFrame::ack(request.id),
                    Some(refusal) => {
                        audit_node_refusal(
                            context,
                            connection,
                            "node.invoke.progress",
                            refusal.code(),
                            serde_json::json!({"invokeId": invoke_id}),
                        )
                        .await;
                        ResponseFrame::failure(
                            request.id,
                            WireError::new(
                                refusal.code(),
                                "the progress chunk was refused and the invoke failed",
                            ),
                        )
                    }
                }
            }
            Some(Err(_)) | None => ResponseFrame::failure(
                request.id,
                WireError::new(ErrorCode::InvalidParams, "malformed node.invoke.progress"),
            ),
        },
        other => ResponseFrame::failure(
            request.id,
            WireError::new(ErrorCode::InvalidRequest, format!("unknown method {other}")),
        ),
    };
    let text = serde_json::to_string(&Frame::Res(response)).unwrap_or_default();
    let _ = outbound.send(Outbound::Text(text)).await;
}

/// Keeps a node's `node.report` for `/metrics`; a malformed one is counted with the malformed
/// frames and leaves the previous report in place.
fn keep_report(
    registry: &NodeRegistry,
    connection: &NodeConnection,
    payload: Option<&serde_json::value::RawValue>,
) {
    match payload.map(|raw| serde_json::from_str::<NodeReport>(raw.get())) {
        Some(Ok(report)) => {
            connection.set_report(report);
            registry.mark_changed(&connection.device_id);
        }
        Some(Err(_)) | None => {
            if let Some(count) = connection.note_malformed_frame() {
                tracing::warn!(device_id = %connection.device_id, count, "malformed node.report from node (logged at the 1st, 2nd, 4th, ... occurrence)");
            }
        }
    }
}

/// The largest `chunk` of a progress message as JSON text: a chunk of
/// [`MAX_PROGRESS_CHUNK_BYTES`] escaped at worst (six bytes per `\u00XX`), with its quotes.
const MAX_PROGRESS_CHUNK_JSON_BYTES: usize = MAX_PROGRESS_CHUNK_BYTES * 6 + 2;

/// The `node.invoke.progress` parameters, with the chunk left as raw JSON until its size is
/// known, so an oversized chunk is refused without being decoded.
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ProgressParams<'a> {
    #[serde(borrow)]
    invoke_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    chunk: &'a serde_json::value::RawValue,
}

/// Returns the invoke id and the decoded chunk of a progress message, or `None` for a chunk
/// over [`MAX_PROGRESS_CHUNK_BYTES`].
fn progress_chunk(
    raw: &serde_json::value::RawValue,
) -> Result<(String, Option<String>), serde_json::Error> {
    let params = serde_json::from_str::<ProgressParams<'_>>(raw.get())?;
    let invoke_id = crate::audit::bounded_str(&params.invoke_id).into_owned();
    if params.chunk.get().len() > MAX_PROGRESS_CHUNK_JSON_BYTES {
        return Ok((invoke_id, None));
    }
    let chunk = serde_json::from_str::<String>(params.chunk.get())?;
    match chunk.len() > MAX_PROGRESS_CHUNK_BYTES {
        true => Ok((invoke_id, None)),
        false => Ok((invoke_id, Some(chunk))),
    }
}

/// Audits (at most [`crate::audit::LIMITED_ROWS_PER_WINDOW`] rows per node and minute) and logs
/// a refusal of something an admitted node sent.
async fn audit_node_refusal(
    context: &LinkContext,
    connection: &NodeConnection,
    action: &str,
    code: ErrorCode,
    details: serde_json::Value,
) {
    let actor = format!("node:{}", connection.device_id);
    let row = AuditRow {
        actor: &actor,
        action,
        outcome: "denied",
        reason_code: Some(code.as_str()),
        details,
    };
    if context.audit.record_limited(&actor, row).await == Limited::Recorded {
        tracing::warn!(device_id = %connection.device_id, code = %code, action, "refused what a node sent");
    }
}

struct ParsedRequest<'a> {
    id: String,
    method: String,
    params: Option<&'a serde_json::value::RawValue>,
}

async fn refuse(
    context: &LinkContext,
    peer: &str,
    outbound: &mpsc::Sender<Outbound>,
    request_id: Option<&str>,
    refusal: &Refusal,
) {
    context
        .registry
        .metrics()
        .record_refusal(refusal.code, refusal.reason.as_str());
    let row = AuditRow {
        actor: "node:unauthenticated",
        action: "node.connect",
        outcome: "denied",
        reason_code: Some(refusal.code.as_str()),
        details: serde_json::json!({"reason": refusal.reason, "peer": peer}),
    };
    if context
        .audit
        .record_limited(&format!("peer:{peer}"), row)
        .await
        == Limited::Recorded
    {
        tracing::warn!(code = %refusal.code, reason = %refusal.reason, peer, "node connection refused");
    }
    if let Some(id) = request_id {
        let error = WireError::new(refusal.code, refusal.message.clone()).with_details(
            serde_json::to_value(ConnectRefusalDetails {
                reason: refusal.reason.as_str().to_owned(),
            })
            .unwrap_or_default(),
        );
        let frame = Frame::Res(ResponseFrame::failure(id, error));
        let _ = outbound
            .send(Outbound::Text(
                serde_json::to_string(&frame).unwrap_or_default(),
            ))
            .await;
    }
    let _ = outbound.send(close(refusal.code)).await;
}

async fn audit_drop(context: &LinkContext, connection: &NodeConnection, code: ErrorCode) {
    audit_node_refusal(
        context,
        connection,
        "node.frame",
        code,
        serde_json::json!({}),
    )
    .await;
}

fn close(code: ErrorCode) -> Outbound {
    let close_code = match code {
        ErrorCode::FrameTooLarge => gatehouse_protocol::frame::CLOSE_CODE_TOO_BIG,
        _ => gatehouse_protocol::frame::CLOSE_CODE_POLICY,
    };
    Outbound::Close {
        code: close_code,
        reason: code.as_str().to_owned(),
    }
}

fn too_large() -> Refusal {
    plain_refusal(
        ErrorCode::FrameTooLarge,
        ErrorCode::PreauthFrameTooLarge,
        "frames before the handshake may be at most 64 KiB",
    )
}

fn plain_refusal(code: ErrorCode, reason: ErrorCode, message: &str) -> Refusal {
    Refusal {
        code,
        reason,
        message: message.to_owned(),
    }
}
