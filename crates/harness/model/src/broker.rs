//! The inference broker's wire types and its client side.
//!
//! A native worker never holds the model key: it asks its node host, the Harness's trusted
//! supervisor, for each model call, and the node host's broker adds the credential, calls the
//! provider and streams the answer back. The channel is the worker's own pipe to its node host
//! (a call goes up on stdout, its events come back on stdin, each a JSON line the pipe protocol
//! carries), so no process the worker starts can reach it.
//!
//! - Worker → broker: one [`ModelRequest`] with an id the worker chose, at most one call at a
//!   time.
//! - Broker → worker: [`BrokerEvent`]s for that id, in order: any number of
//!   [`BrokerEvent::Retry`], [`BrokerEvent::TextDelta`] (one per provider delta) and
//!   [`BrokerEvent::ToolCall`], then exactly one [`BrokerEvent::Completed`] or
//!   [`BrokerEvent::Failed`].
//!
//! [`BrokeredClient`] is the worker's [`ModelClient`] over that exchange: the transport (how a
//! call is written, how events are delivered) is given to it, so it does not know the pipe.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use gatehouse_protocol::error::ErrorCode;
use serde::Deserialize;
use serde::Serialize;

use crate::ModelClient;
use crate::ModelError;
use crate::ModelEvent;
use crate::ModelEventStream;
use crate::ModelRequest;
use crate::Result;
use crate::RetryNotice;
use crate::RetryObserver;
use crate::ToolCall;
use crate::Usage;

/// What the broker sends a worker about its current call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase",
    deny_unknown_fields
)]
pub enum BrokerEvent {
    /// A failed attempt the broker retries after `delay_ms`; sent before it waits.
    Retry {
        /// The attempt that failed, from 1.
        attempt: u32,
        /// The failure's stable code.
        code: ErrorCode,
        /// What happened (never the key).
        message: String,
        /// The wait before the next attempt, in milliseconds.
        delay_ms: u64,
    },
    /// A piece of assistant text, exactly as the provider's delta.
    TextDelta {
        /// The text.
        text: String,
    },
    /// A complete tool call.
    ToolCall {
        /// The call.
        call: ToolCall,
    },
    /// The call ended; `usage` is what the broker read from the provider's answer.
    Completed {
        /// The whole assistant text.
        text: String,
        /// The provider's token counts, when it reported them.
        usage: Option<Usage>,
    },
    /// The call failed: a provider error after the broker's retries, or the broker's refusal.
    Failed {
        /// The stable code, such as `MODEL_UNAVAILABLE` or `TURN_BUDGET_EXCEEDED`.
        code: ErrorCode,
        /// What happened (never the key).
        message: String,
    },
}

impl BrokerEvent {
    /// Returns the broker event of a model event.
    pub fn from_model_event(event: ModelEvent) -> BrokerEvent {
        match event {
            ModelEvent::TextDelta(text) => BrokerEvent::TextDelta { text },
            ModelEvent::ToolCall(call) => BrokerEvent::ToolCall { call },
            ModelEvent::Completed { text, usage } => BrokerEvent::Completed { text, usage },
        }
    }

    /// Returns the broker event of a retry notice.
    pub fn from_retry(notice: &RetryNotice) -> BrokerEvent {
        BrokerEvent::Retry {
            attempt: notice.attempt,
            code: notice.code,
            message: notice.message.clone(),
            delay_ms: u64::try_from(notice.delay.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// Returns true when this event ends its call.
    pub fn is_last(&self) -> bool {
        match self {
            BrokerEvent::Completed { .. } | BrokerEvent::Failed { .. } => true,
            BrokerEvent::Retry { .. }
            | BrokerEvent::TextDelta { .. }
            | BrokerEvent::ToolCall { .. } => false,
        }
    }
}

/// Sends one call to the broker: its id and request. Returns an error when the call cannot be
/// sent (too large for the channel, or the channel is closed); the call then fails with it.
pub type BrokerSend = dyn Fn(u64, &ModelRequest) -> Result<()> + Send + Sync;

/// The calls of one worker waiting for broker events; the worker's reader hands it each event
/// it reads ([`BrokerInbox::deliver`]) and closes it when the broker's side is gone.
#[derive(Debug, Default)]
pub struct BrokerInbox {
    current: std::sync::Mutex<InboxState>,
    next_id: AtomicU64,
}

#[derive(Debug, Default)]
struct InboxState {
    /// The open call, if any.
    call: Option<(u64, tokio::sync::mpsc::UnboundedSender<BrokerEvent>)>,
    /// The broker's side is gone: every later call fails at once.
    closed: bool,
}

impl BrokerInbox {
    /// Passes `event` to the open call `id`; returns false when no call with that id is open
    /// (a late event of an abandoned call), and the event is dropped.
    pub fn deliver(&self, id: u64, event: BrokerEvent) -> bool {
        let mut state = self.state();
        let Some((open_id, sender)) = &state.call else {
            return false;
        };
        if *open_id != id {
            return false;
        }
        let last = event.is_last();
        let delivered = sender.send(event).is_ok();
        if last {
            state.call = None;
        }
        delivered
    }

    /// Marks the broker's side as gone: the open call ends with `MODEL_UNAVAILABLE`, and so
    /// does every later one.
    pub fn close(&self) {
        let mut state = self.state();
        state.closed = true;
        state.call = None;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, InboxState> {
        self.current
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Opens call `id`, replacing (and so abandoning) any open one; `None` once closed.
    fn open(&self) -> Option<(u64, tokio::sync::mpsc::UnboundedReceiver<BrokerEvent>)> {
        let mut state = self.state();
        if state.closed {
            return None;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed) + 1;
        // Unbounded: the broker is the worker's trusted supervisor, and it sends one event per
        // provider event of one call. A bound here could deadlock the pipe: the worker's reader
        // would wait for the turn, which waits to write its own output the node host reads.
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        state.call = Some((id, sender));
        Some((id, receiver))
    }
}

/// A [`ModelClient`] that asks the inference broker instead of calling a provider: it holds no
/// key and no network client.
///
/// `stream_observing` sends the call and passes each [`BrokerEvent::Retry`] to the observer
/// until the answer starts; a [`BrokerEvent::Failed`] before that is its `Err`, and one after
/// that ends the stream with it. A broker that goes away mid-call ends the call with
/// `MODEL_UNAVAILABLE`. Dropping the stream abandons the call: its late events are dropped.
pub struct BrokeredClient {
    model: String,
    send: Arc<BrokerSend>,
    inbox: Arc<BrokerInbox>,
}

impl std::fmt::Debug for BrokeredClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("BrokeredClient")
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl BrokeredClient {
    /// Returns a client for the broker's model `model` (its name, for spans) that sends calls
    /// with `send` and reads their events from `inbox`.
    pub fn new(model: String, send: Arc<BrokerSend>, inbox: Arc<BrokerInbox>) -> BrokeredClient {
        BrokeredClient { model, send, inbox }
    }
}

/// The error of a call whose broker went away.
fn broker_gone() -> ModelError {
    ModelError::Brokered {
        code: ErrorCode::ModelUnavailable,
        message: String::from("the inference broker went away during the call"),
    }
}

#[async_trait::async_trait]
impl ModelClient for BrokeredClient {
    async fn stream(&self, request: &ModelRequest) -> Result<ModelEventStream> {
        self.stream_observing(request, &|_| {}).await
    }

    async fn stream_observing(
        &self,
        request: &ModelRequest,
        on_retry: &RetryObserver<'_>,
    ) -> Result<ModelEventStream> {
        let Some((id, mut receiver)) = self.inbox.open() else {
            return Err(broker_gone());
        };
        (self.send)(id, request)?;
        let first = loop {
            match receiver.recv().await {
                Some(BrokerEvent::Retry {
                    attempt,
                    code,
                    message,
                    delay_ms,
                }) => on_retry(&RetryNotice {
                    attempt,
                    code,
                    message,
                    delay: Duration::from_millis(delay_ms),
                }),
                Some(BrokerEvent::Failed { code, message }) => {
                    return Err(ModelError::Brokered { code, message });
                }
                Some(event) => break event,
                None => return Err(broker_gone()),
            }
        };
        let events = futures_util::stream::unfold(
            (Some(first), receiver, false),
            |(next, mut receiver, ended)| async move {
                if ended {
                    return None;
                }
                let event = match next {
                    Some(event) => Some(event),
                    None => receiver.recv().await,
                };
                let item = match event {
                    Some(BrokerEvent::TextDelta { text }) => Ok(ModelEvent::TextDelta(text)),
                    Some(BrokerEvent::ToolCall { call }) => Ok(ModelEvent::ToolCall(call)),
                    Some(BrokerEvent::Completed { text, usage }) => {
                        return Some((
                            Ok(ModelEvent::Completed { text, usage }),
                            (None, receiver, true),
                        ));
                    }
                    Some(BrokerEvent::Failed { code, message }) => {
                        return Some((
                            Err(ModelError::Brokered { code, message }),
                            (None, receiver, true),
                        ));
                    }
                    Some(BrokerEvent::Retry { .. }) => Err(ModelError::Brokered {
                        code: ErrorCode::ModelBadResponse,
                        message: String::from("the broker sent a retry after the answer started"),
                    }),
                    None => Err(broker_gone()),
                };
                let ended = item.is_err();
                Some((item, (None, receiver, ended)))
            },
        );
        Ok(events.boxed())
    }

    fn model(&self) -> &str {
        &self.model
    }
}

#[cfg(test)]
#[path = "broker_tests.rs"]
mod tests;
