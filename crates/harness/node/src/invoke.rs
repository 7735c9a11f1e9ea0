//! The command framework: how one `node.invoke.request` becomes one `node.invoke.result`.
//!
//! Each command is a [`Serve`] implementation for its marker type (`gatehouse_protocol::command`),
//! registered with [`CommandSet::register`]. The session spawns one task per invoke; the
//! dispatcher decodes the parameters into the command's type and gives the handler them and an
//! [`InvokeContext`]: a [`ProgressSender`] for streaming commands (`node.invoke.progress`) and a
//! receiver of `node.invoke.input` events for duplex commands. The handler returns the command's
//! result type or a wire error; the dispatcher encodes it and the session sends exactly one
//! `node.invoke.result` for it.

use std::collections::BTreeMap;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use futures_util::future::BoxFuture;
use gatehouse_protocol::command::GatewayRequest;
use gatehouse_protocol::command::NodeCommand;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::decode_params;
use gatehouse_protocol::command::decode_result;
use gatehouse_protocol::command::encode_result;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::RequestFrame;
use gatehouse_protocol::frame::names;
use gatehouse_protocol::invoke::InvokeInput;
use gatehouse_protocol::invoke::InvokeProgress;
use gatehouse_protocol::invoke::MAX_PROGRESS_CHUNK_BYTES;
use tokio::sync::mpsc;

/// The capacity of one invoke's input channel, in `node.invoke.input` events.
pub(crate) const INPUT_CHANNEL_CAPACITY: usize = 64;

/// A command the node serves, with its types erased: the dispatcher's view of one
/// [`Serve`] implementation registered with [`CommandSet::register`].
///
/// Implementors must not block the async runtime: file-system work goes to `spawn_blocking`.
/// The returned future may be dropped at any await point when the Gateway cancels the invoke.
pub(crate) trait CommandHandler: Send + Sync {
    /// Runs one invoke and returns its result payload, or the error to report.
    fn invoke(
        &self,
        context: InvokeContext,
    ) -> BoxFuture<'static, Result<serde_json::Value, WireError>>;
}

/// What a handler gets for one invoke besides its parameters.
#[derive(Debug)]
pub(crate) struct InvokeContext {
    /// The `paramsJSON` of the request, as sent; only the dispatcher reads it.
    pub(crate) params_json: Option<String>,
    /// Sends `node.invoke.progress` for this invoke.
    pub(crate) progress: ProgressSender,
    /// The `node.invoke.input` events for this invoke, in arrival order.
    pub(crate) input: mpsc::Receiver<InvokeInput>,
}

/// A [`Serve`] implementation for the command `C` behind the untyped [`CommandHandler`]: it
/// decodes the parameters as `C::Params` (`INVALID_PARAMS` when they are not) and encodes the
/// `C::Result`.
struct Typed<C, H> {
    handler: H,
    command: PhantomData<fn() -> C>,
}

impl<C: NodeCommand, H: Serve<C, InvokeContext>> CommandHandler for Typed<C, H> {
    fn invoke(
        &self,
        context: InvokeContext,
    ) -> BoxFuture<'static, Result<serde_json::Value, WireError>> {
        let params = match decode_params::<C>(context.params_json.as_deref()) {
            Ok(params) => params,
            Err(err) => {
                let error =
                    WireError::new(ErrorCode::InvalidParams, format!("invalid params: {err}"));
                return Box::pin(std::future::ready(Err(error)));
            }
        };
        let served = self.handler.serve(params, context);
        Box::pin(async move {
            let result = served.await?;
            encode_result::<C>(&result).map_err(|err| {
                WireError::new(
                    ErrorCode::Internal,
                    format!("cannot encode the result: {err}"),
                )
            })
        })
    }
}

/// The commands a node serves, by name.
#[derive(Clone, Default)]
pub(crate) struct CommandSet {
    handlers: BTreeMap<&'static str, Arc<dyn CommandHandler>>,
}

impl CommandSet {
    /// Serves the command `C` with `handler`, replacing any earlier handler of `C`; the node
    /// declares the command under `C::NAME`.
    pub(crate) fn register<C: NodeCommand>(&mut self, handler: impl Serve<C, InvokeContext>) {
        let typed = Typed::<C, _> {
            handler,
            command: PhantomData,
        };
        self.handlers.insert(C::NAME, Arc::new(typed));
    }

    /// Returns the handler of `name`, if the node serves it.
    pub(crate) fn get(&self, name: &str) -> Option<Arc<dyn CommandHandler>> {
        self.handlers.get(name).cloned()
    }

    /// Returns the names of the commands, sorted; the node declares exactly these.
    pub(crate) fn names(&self) -> Vec<String> {
        self.handlers
            .keys()
            .map(|name| (*name).to_owned())
            .collect()
    }
}

impl std::fmt::Debug for CommandSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.handlers.keys()).finish()
    }
}

/// Why a frame was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendError {
    /// The frame is larger than the peer accepts.
    TooLarge {
        /// The frame's size in bytes.
        size: usize,
    },
    /// The link is gone.
    Closed,
}

/// The sending half of a session: numbers requests and enforces the frame size limit.
#[derive(Debug, Clone)]
pub(crate) struct Outbound {
    tx: mpsc::Sender<String>,
    next_id: Arc<AtomicU64>,
    max_frame_bytes: usize,
    /// Node requests waiting for the Gateway's `res`, by request id.
    waiters: Arc<
        parking_lot::Mutex<
            std::collections::HashMap<
                String,
                tokio::sync::oneshot::Sender<gatehouse_protocol::frame::ResponseFrame>,
            >,
        >,
    >,
}

impl Outbound {
    pub(crate) fn new(tx: mpsc::Sender<String>, max_frame_bytes: usize) -> Outbound {
        Outbound {
            tx,
            next_id: Arc::new(AtomicU64::new(1)),
            max_frame_bytes,
            waiters: Arc::default(),
        }
    }

    /// Returns a copy that enforces `max_frame_bytes` instead.
    pub(crate) fn with_max_frame_bytes(&self, max_frame_bytes: usize) -> Outbound {
        Outbound {
            max_frame_bytes,
            ..self.clone()
        }
    }

    /// Sends a request frame and returns its id.
    pub(crate) async fn request(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<String, SendError> {
        let id = format!("n{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let frame = Frame::Req(RequestFrame {
            id: id.clone(),
            method: method.to_owned(),
            params: Some(params),
        });
        self.send_frame(&frame).await?;
        Ok(id)
    }

    /// Sends the request `C` to the Gateway and waits at most `timeout` for its answer.
    ///
    /// # Errors
    /// The Gateway's error; `UNAVAILABLE` when the link closes or the answer does not come;
    /// `INTERNAL` when the answer is not a `C::Result`.
    pub(crate) async fn call<C: GatewayRequest>(
        &self,
        params: &C::Params,
        timeout: std::time::Duration,
    ) -> Result<C::Result, WireError> {
        let params = serde_json::to_value(params)
            .map_err(|err| WireError::new(ErrorCode::Internal, err.to_string()))?;
        let answer = self.request_and_wait(C::NAME, params, timeout).await?;
        decode_result::<C>(answer).map_err(|err| {
            WireError::new(
                ErrorCode::Internal,
                format!(
                    "the gateway's answer to {} is not its result: {err}",
                    C::NAME
                ),
            )
        })
    }

    /// Sends a request to the Gateway and waits at most `timeout` for its answer.
    async fn request_and_wait(
        &self,
        method: &str,
        params: serde_json::Value,
        timeout: std::time::Duration,
    ) -> Result<serde_json::Value, WireError> {
        let id = format!("n{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (sender, receiver) = tokio::sync::oneshot::channel();
        self.lock_waiters().insert(id.clone(), sender);
        let frame = Frame::Req(RequestFrame {
            id: id.clone(),
            method: method.to_owned(),
            params: Some(params),
        });
        let unavailable = |message: &str| WireError::new(ErrorCode::Unavailable, message);
        if self.send_frame(&frame).await.is_err() {
            self.lock_waiters().remove(&id);
            return Err(unavailable("the link to the gateway is closed"));
        }
        let answer = tokio::time::timeout(timeout, receiver).await;
        self.lock_waiters().remove(&id);
        match answer {
            Ok(Ok(response)) if response.ok => Ok(response.payload.unwrap_or_default()),
            Ok(Ok(response)) => Err(response
                .error
                .unwrap_or_else(|| unavailable("the gateway refused without an error"))),
            Ok(Err(_)) => Err(unavailable("the link to the gateway closed")),
            Err(_) => Err(unavailable("the gateway did not answer in time")),
        }
    }

    /// Hands a `res` from the Gateway to the request waiting for it; returns false when none
    /// waits.
    pub(crate) fn resolve(&self, response: gatehouse_protocol::frame::ResponseFrame) -> bool {
        match self.lock_waiters().remove(&response.id) {
            Some(sender) => sender.send(response).is_ok(),
            None => false,
        }
    }

    fn lock_waiters(
        &self,
    ) -> parking_lot::MutexGuard<
        '_,
        std::collections::HashMap<
            String,
            tokio::sync::oneshot::Sender<gatehouse_protocol::frame::ResponseFrame>,
        >,
    > {
        self.waiters.lock()
    }

    /// Sends any frame.
    pub(crate) async fn send_frame(&self, frame: &Frame) -> Result<(), SendError> {
        let Ok(text) = serde_json::to_string(frame) else {
            return Err(SendError::Closed);
        };
        if text.len() > self.max_frame_bytes {
            return Err(SendError::TooLarge { size: text.len() });
        }
        self.tx.send(text).await.map_err(|_| SendError::Closed)
    }

    /// Sends the `node.invoke.result` of invoke `invoke_id`. A result frame over the size limit
    /// is replaced by a `FILE_TOO_LARGE` error.
    ///
    /// The frame is serialized in one pass from borrowed parts, with the result as `payload`
    /// (not the escaped `payloadJSON` text): a 16 MiB file is 22 MB of base64, and every extra
    /// copy or escaping pass shows in transfer time.
    pub(crate) async fn send_result(
        &self,
        invoke_id: &str,
        node_id: &str,
        outcome: Result<serde_json::Value, WireError>,
    ) -> Result<(), SendError> {
        let sent = match &outcome {
            Ok(payload) => {
                self.send_result_frame(invoke_id, node_id, Ok(payload))
                    .await
            }
            Err(error) => self.send_result_frame(invoke_id, node_id, Err(error)).await,
        };
        match sent {
            Ok(()) => Ok(()),
            Err(SendError::TooLarge { size }) => {
                let error = WireError::new(
                    ErrorCode::FileTooLarge,
                    format!(
                        "the result is {size} bytes, over the link limit of {} bytes",
                        self.max_frame_bytes
                    ),
                );
                self.send_result_frame(invoke_id, node_id, Err(&error))
                    .await
            }
            Err(SendError::Closed) => Err(SendError::Closed),
        }
    }

    async fn send_result_frame(
        &self,
        invoke_id: &str,
        node_id: &str,
        outcome: Result<&serde_json::Value, &WireError>,
    ) -> Result<(), SendError> {
        let id = format!("n{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (payload, error) = match outcome {
            Ok(payload) => (Some(payload), None),
            Err(error) => (None, Some(error)),
        };
        let frame = ResultFrame {
            kind: "req",
            id: &id,
            method: names::NODE_INVOKE_RESULT,
            params: ResultParams {
                id: invoke_id,
                node_id,
                ok: payload.is_some(),
                payload,
                error,
            },
        };
        let Ok(text) = serde_json::to_string(&frame) else {
            return Err(SendError::Closed);
        };
        if text.len() > self.max_frame_bytes {
            return Err(SendError::TooLarge { size: text.len() });
        }
        self.tx.send(text).await.map_err(|_| SendError::Closed)
    }
}

/// A `node.invoke.result` request frame, serialized from borrowed parts.
#[derive(serde::Serialize)]
struct ResultFrame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    id: &'a str,
    method: &'static str,
    params: ResultParams<'a>,
}

/// The params of [`ResultFrame`]: the wire shape of `InvokeResult`.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct ResultParams<'a> {
    id: &'a str,
    node_id: &'a str,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<&'a serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a WireError>,
}

/// Sends the `node.invoke.progress` chunks of one invoke.
#[derive(Debug)]
pub(crate) struct ProgressSender {
    outbound: Outbound,
    invoke_id: String,
    node_id: String,
    next_seq: u64,
}

impl ProgressSender {
    /// Returns the link, for requests the command makes to the Gateway.
    pub(crate) fn outbound(&self) -> &Outbound {
        &self.outbound
    }

    pub(crate) fn new(outbound: Outbound, invoke_id: String, node_id: String) -> ProgressSender {
        ProgressSender {
            outbound,
            invoke_id,
            node_id,
            next_seq: 0,
        }
    }

    /// Sends `text` as one or more chunks of at most 16 KiB, split on character boundaries.
    pub(crate) async fn send(&mut self, text: &str) -> Result<(), SendError> {
        let mut rest = text;
        while !rest.is_empty() {
            let mut end = rest.len().min(MAX_PROGRESS_CHUNK_BYTES);
            while !rest.is_char_boundary(end) {
                end -= 1;
            }
            let (chunk, tail) = rest.split_at(end);
            let progress = InvokeProgress {
                invoke_id: self.invoke_id.clone(),
                node_id: self.node_id.clone(),
                seq: self.next_seq,
                chunk: chunk.to_owned(),
            };
            self.outbound
                .request(names::NODE_INVOKE_PROGRESS, to_value(&progress))
                .await?;
            self.next_seq += 1;
            rest = tail;
        }
        Ok(())
    }
}

/// Serializes a protocol type; these have string keys only, so this cannot fail.
fn to_value<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}
