//! [`RpcClient`]: a JSON-RPC client for the Codex app-server protocol over any line transport.
//!
//! - Messages are one JSON object per line; the `"jsonrpc"` member is left out, as Codex does.
//! - Client request ids are integers from 1; the server's own requests have ids of their own
//!   (from 0) and are answered with [`RpcClient::respond`].
//! - Notifications and server requests that name a `threadId` go to that thread's subscriber
//!   ([`RpcClient::subscribe`]); a server request nobody is subscribed for is answered with an
//!   error, so Codex never waits on it.
//! - Each line is decoded as a [`Envelope`]; [`RpcClient::call`] sends a typed
//!   [`ClientRequest`] and decodes its typed response, so a field Codex renamed is a
//!   [`RpcError::BadResponse`], never a silently empty answer.
//! - Unknown fields and methods are ignored. When the transport closes, every pending request
//!   fails with [`RpcError::Closed`] and every subscription ends.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::sync::oneshot;

use crate::messages::ClientInfo;
use crate::messages::ClientRequest;
use crate::messages::DecodeError;
use crate::messages::Envelope;
use crate::messages::Initialize;
use crate::messages::InitializeCapabilities;
use crate::messages::InitializeParams;
use crate::messages::InitializeResponse;
use crate::messages::JsonRpcError;
use crate::messages::thread_of;

/// The JSON-RPC error code Codex uses for invalid requests.
pub const INVALID_REQUEST: i64 = -32600;

/// The JSON-RPC error code for a method the receiver does not implement.
pub const METHOD_NOT_FOUND: i64 = -32601;

/// The JSON-RPC error code for params that do not decode.
pub const INVALID_PARAMS: i64 = -32602;

/// The JSON-RPC error code for an internal error.
pub const INTERNAL_ERROR: i64 = -32603;

/// How long one request waits for its response by default.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RpcError {
    /// The connection to the app-server is gone; the request may or may not have been served.
    #[error("the connection to codex app-server is closed")]
    Closed,
    /// No response came in time.
    #[error("codex app-server did not answer {method} within {timeout:?}")]
    Timeout {
        /// The request's method.
        method: String,
        /// How long it waited.
        timeout: Duration,
    },
    /// The server answered with a JSON-RPC error.
    #[error("codex app-server refused {method}: {message} ({code})")]
    Server {
        /// The request's method.
        method: String,
        /// The JSON-RPC error code.
        code: i64,
        /// The server's message.
        message: String,
    },
    /// The server's answer does not decode into the method's response type.
    #[error(transparent)]
    BadResponse(#[from] DecodeError),
}

/// A message from the server that concerns one thread.
#[derive(Debug, Clone, PartialEq)]
pub enum ThreadMessage {
    /// A notification.
    Notification {
        /// Its method, for example `item/completed`.
        method: String,
        /// Its params.
        params: serde_json::Value,
    },
    /// A request the client must answer with [`RpcClient::respond`].
    Request {
        /// The server's request id.
        id: serde_json::Value,
        /// Its method, for example `item/commandExecution/requestApproval`.
        method: String,
        /// Its params.
        params: serde_json::Value,
    },
}

/// The two ends of a line transport: lines to send, and lines received. Lines carry no newline.
pub struct Transport {
    /// Lines to the server.
    pub outgoing: mpsc::Sender<String>,
    /// Lines from the server; the channel ends when the connection does.
    pub incoming: mpsc::Receiver<String>,
}

type Subscribers = HashMap<String, mpsc::UnboundedSender<ThreadMessage>>;

struct Shared {
    pending: Mutex<HashMap<i64, oneshot::Sender<Result<serde_json::Value, RpcError>>>>,
    subscribers: Mutex<Subscribers>,
    closed: AtomicBool,
    closed_notify: tokio::sync::Notify,
}

/// A JSON-RPC client of one app-server connection. Cheap to clone.
#[derive(Clone)]
pub struct RpcClient {
    outgoing: mpsc::Sender<String>,
    shared: Arc<Shared>,
    next_id: Arc<AtomicI64>,
}

impl std::fmt::Debug for RpcClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RpcClient")
            .field("closed", &self.is_closed())
            .finish_non_exhaustive()
    }
}

impl RpcClient {
    /// Starts a client over `transport`; a task reads the incoming lines until they end.
    pub fn start(transport: Transport) -> RpcClient {
        let shared = Arc::new(Shared {
            pending: Mutex::new(HashMap::new()),
            subscribers: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            closed_notify: tokio::sync::Notify::new(),
        });
        let client = RpcClient {
            outgoing: transport.outgoing,
            shared: Arc::clone(&shared),
            next_id: Arc::new(AtomicI64::new(1)),
        };
        let reader = client.clone();
        tokio::spawn(reader.read_loop(transport.incoming));
        client
    }

    /// Returns true once the connection has ended.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::SeqCst)
    }

    /// Waits until the connection ends.
    pub async fn closed(&self) {
        let notified = self.shared.closed_notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if self.is_closed() {
            return;
        }
        notified.await;
    }

    /// Sends a request and waits at most `timeout` for its result.
    ///
    /// # Errors
    /// Every [`RpcError`].
    pub async fn request(
        &self,
        method: &str,
        params: serde_json::Value,
        timeout: Duration,
    ) -> Result<serde_json::Value, RpcError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (sender, receiver) = oneshot::channel();
        self.shared.pending.lock().insert(id, sender);
        if self.is_closed() {
            self.shared.pending.lock().remove(&id);
            return Err(RpcError::Closed);
        }
        let line = encode_line(&Envelope {
            id: Some(id.into()),
            method: Some(method.to_owned()),
            params: Some(params),
            result: None,
            error: None,
        });
        if self.outgoing.send(line).await.is_err() {
            self.shared.pending.lock().remove(&id);
            return Err(RpcError::Closed);
        }
        match tokio::time::timeout(timeout, receiver).await {
            Ok(Ok(Ok(result))) => Ok(result),
            Ok(Ok(Err(RpcError::Server { code, message, .. }))) => Err(RpcError::Server {
                method: method.to_owned(),
                code,
                message,
            }),
            Ok(Ok(Err(error))) => Err(error),
            Ok(Err(_)) => Err(RpcError::Closed),
            Err(_) => {
                self.shared.pending.lock().remove(&id);
                Err(RpcError::Timeout {
                    method: method.to_owned(),
                    timeout,
                })
            }
        }
    }

    /// Sends the typed request `R` and decodes its typed response.
    ///
    /// # Errors
    /// Every [`RpcError`]; [`RpcError::BadResponse`] when the answer lacks a field of
    /// `R::Response`.
    pub async fn call<R: ClientRequest>(
        &self,
        params: &R::Params,
        timeout: Duration,
    ) -> Result<R::Response, RpcError> {
        let result = self
            .request(R::METHOD, crate::messages::encode(params), timeout)
            .await?;
        Ok(crate::messages::decode(R::METHOD, result)?)
    }

    /// Sends a notification.
    ///
    /// # Errors
    /// [`RpcError::Closed`].
    pub async fn notify(
        &self,
        method: &str,
        params: Option<serde_json::Value>,
    ) -> Result<(), RpcError> {
        let line = encode_line(&Envelope {
            id: None,
            method: Some(method.to_owned()),
            params,
            result: None,
            error: None,
        });
        self.send_line(line).await
    }

    /// Answers the server request `id` with `result`.
    ///
    /// # Errors
    /// [`RpcError::Closed`].
    pub async fn respond<T: serde::Serialize>(
        &self,
        id: &serde_json::Value,
        result: &T,
    ) -> Result<(), RpcError> {
        let line = encode_line(&Envelope {
            id: Some(id.clone()),
            method: None,
            params: None,
            result: Some(crate::messages::encode(result)),
            error: None,
        });
        self.send_line(line).await
    }

    /// Answers the server request `id` with a JSON-RPC error.
    ///
    /// # Errors
    /// [`RpcError::Closed`].
    pub async fn respond_error(
        &self,
        id: &serde_json::Value,
        code: i64,
        message: &str,
    ) -> Result<(), RpcError> {
        let line = encode_line(&Envelope {
            id: Some(id.clone()),
            method: None,
            params: None,
            result: None,
            error: Some(JsonRpcError {
                code,
                message: message.to_owned(),
            }),
        });
        self.send_line(line).await
    }

    /// Routes every notification and server request of `thread_id` to the returned receiver,
    /// replacing an earlier subscriber. The receiver ends when the connection does.
    pub fn subscribe(&self, thread_id: &str) -> mpsc::UnboundedReceiver<ThreadMessage> {
        let (sender, receiver) = mpsc::unbounded_channel();
        if !self.is_closed() {
            self.shared
                .subscribers
                .lock()
                .insert(thread_id.to_owned(), sender);
        }
        receiver
    }

    /// Stops routing messages of `thread_id`.
    pub fn unsubscribe(&self, thread_id: &str) {
        self.shared.subscribers.lock().remove(thread_id);
    }

    /// Sends `initialize` (with the experimental API, which dynamic tools need) and then
    /// `initialized`, and returns the server's answer.
    ///
    /// # Errors
    /// Every [`RpcError`].
    pub async fn initialize(&self, client_name: &str) -> Result<InitializeResponse, RpcError> {
        let params = InitializeParams {
            client_info: ClientInfo {
                name: client_name.to_owned(),
                title: Some(String::from("Gatehouse Gateway")),
                version: String::from(env!("CARGO_PKG_VERSION")),
            },
            capabilities: InitializeCapabilities {
                experimental_api: true,
                opt_out_notification_methods: vec![String::from("item/reasoning/textDelta")],
            },
        };
        let result = self
            .call::<Initialize>(&params, DEFAULT_REQUEST_TIMEOUT)
            .await?;
        self.notify("initialized", None).await?;
        Ok(result)
    }

    async fn send_line(&self, line: String) -> Result<(), RpcError> {
        if self.is_closed() {
            return Err(RpcError::Closed);
        }
        self.outgoing.send(line).await.map_err(|_| RpcError::Closed)
    }

    async fn read_loop(self, mut incoming: mpsc::Receiver<String>) {
        while let Some(line) = incoming.recv().await {
            tracing::trace!(line = %line, "codex app-server line in");
            let message = match serde_json::from_str::<Envelope>(&line) {
                Ok(message) => message,
                Err(error) => {
                    tracing::warn!(error = %error, "codex app-server sent a line that is not a JSON-RPC message; ignoring it");
                    continue;
                }
            };
            self.dispatch(message).await;
        }
        self.shared.closed.store(true, Ordering::SeqCst);
        self.shared.pending.lock().clear();
        self.shared.subscribers.lock().clear();
        self.shared.closed_notify.notify_waiters();
    }

    async fn dispatch(&self, message: Envelope) {
        let Envelope {
            id,
            method,
            params,
            result,
            error,
        } = message;
        match (method, id) {
            (None, Some(id)) => {
                let Some(id) = id.as_i64() else {
                    return;
                };
                let Some(sender) = self.shared.pending.lock().remove(&id) else {
                    return;
                };
                let outcome = match error {
                    Some(error) => Err(RpcError::Server {
                        method: String::new(),
                        code: error.code,
                        message: error.message,
                    }),
                    None => Ok(result.unwrap_or_default()),
                };
                let _ = sender.send(outcome);
            }
            (Some(method), id) => {
                let params = params.unwrap_or_default();
                let thread_id = thread_of(&params);
                let routed = match &id {
                    Some(id) => ThreadMessage::Request {
                        id: id.clone(),
                        method: method.clone(),
                        params,
                    },
                    None => ThreadMessage::Notification {
                        method: method.clone(),
                        params,
                    },
                };
                let delivered = thread_id.is_some_and(|thread_id| {
                    let mut subscribers = self.shared.subscribers.lock();
                    match subscribers.get(&thread_id) {
                        Some(sender) if sender.send(routed).is_ok() => true,
                        Some(_) => {
                            subscribers.remove(&thread_id);
                            false
                        }
                        None => false,
                    }
                });
                if let (false, Some(id)) = (delivered, id) {
                    tracing::warn!(
                        method,
                        "codex app-server asked for something no turn is waiting for; refusing"
                    );
                    let _ = self
                        .respond_error(
                            &id,
                            INTERNAL_ERROR,
                            "no active Gatehouse turn handles this request",
                        )
                        .await;
                }
            }
            (None, None) => {}
        }
    }
}

/// Encodes one outgoing line.
fn encode_line(envelope: &Envelope) -> String {
    let line = serde_json::to_string(envelope).unwrap_or_default();
    tracing::trace!(line = %line, "codex app-server line out");
    line
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test fails loudly on any unexpected error"
    )]

    use super::*;

    fn pair() -> (RpcClient, mpsc::Receiver<String>, mpsc::Sender<String>) {
        let (to_server, from_client) = mpsc::channel(16);
        let (to_client, from_server) = mpsc::channel(16);
        let client = RpcClient::start(Transport {
            outgoing: to_server,
            incoming: from_server,
        });
        (client, from_client, to_client)
    }

    #[tokio::test]
    async fn responses_match_requests_and_threads_get_their_messages() {
        let (client, mut sent, server) = pair();
        let request = tokio::spawn({
            let client = client.clone();
            async move {
                client
                    .request(
                        "thread/start",
                        serde_json::json!({}),
                        DEFAULT_REQUEST_TIMEOUT,
                    )
                    .await
            }
        });
        let line: serde_json::Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(line["method"], "thread/start");
        assert!(line.get("jsonrpc").is_none());
        let mut events = client.subscribe("t1");
        server
            .send(r#"{"method":"turn/started","params":{"threadId":"t1","turn":{}},"emittedAtMs":1,"extra":true}"#.into())
            .await
            .unwrap();
        server
            .send(format!(
                r#"{{"id":{},"result":{{"thread":{{"id":"t1"}}}}}}"#,
                line["id"]
            ))
            .await
            .unwrap();
        assert_eq!(request.await.unwrap().unwrap()["thread"]["id"], "t1");
        match events.recv().await.unwrap() {
            ThreadMessage::Notification { method, .. } => assert_eq!(method, "turn/started"),
            other @ ThreadMessage::Request { .. } => panic!("unexpected {other:?}"),
        }
    }

    #[tokio::test]
    async fn an_unclaimed_server_request_is_refused_and_a_closed_link_fails_requests() {
        let (client, mut sent, server) = pair();
        server
            .send(r#"{"id":0,"method":"item/tool/call","params":{"threadId":"nobody"}}"#.into())
            .await
            .unwrap();
        let answer: serde_json::Value = serde_json::from_str(&sent.recv().await.unwrap()).unwrap();
        assert_eq!(answer["id"], 0);
        assert_eq!(answer["error"]["code"], INTERNAL_ERROR);
        let request = tokio::spawn({
            let client = client.clone();
            async move {
                client
                    .request("turn/start", serde_json::json!({}), DEFAULT_REQUEST_TIMEOUT)
                    .await
            }
        });
        let _ = sent.recv().await.unwrap();
        drop(server);
        assert_eq!(request.await.unwrap(), Err(RpcError::Closed));
        client.closed().await;
        assert!(client.is_closed());
    }
}
