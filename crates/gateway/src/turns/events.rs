//! [`EventHub`]: live session events for subscribers, in the order of the durable log.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;

use gatehouse_store::Store;
use tokio::sync::broadcast;

/// How many events a subscriber may fall behind before it is dropped.
pub const SUBSCRIBER_BUFFER: usize = 1024;

/// One event of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionEvent {
    /// The seq of the durable event; a delta carries the seq of the last durable event before it.
    pub seq: i64,
    /// The event name, for example `message.delta` or `turn.completed`.
    pub kind: String,
    /// Its data.
    pub payload: serde_json::Value,
    /// False for streamed deltas, which are never stored.
    pub durable: bool,
}

#[derive(Debug)]
struct Channel {
    sender: broadcast::Sender<SessionEvent>,
    last_published: i64,
}

/// Publishes each session's durable events (read back from the store, so subscribers see
/// exactly the stored order) and its ephemeral deltas.
///
/// Publishing never waits for a subscriber: a subscriber that falls more than
/// [`SUBSCRIBER_BUFFER`] events behind is told it lagged and must resume from the store.
pub struct EventHub {
    store: Arc<dyn Store>,
    channels: Mutex<HashMap<String, Channel>>,
    sync_lock: tokio::sync::Mutex<()>,
}

impl EventHub {
    /// Returns a hub over `store`.
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            channels: Mutex::new(HashMap::new()),
            sync_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Subscribes to the live events of `session_key`.
    pub fn subscribe(&self, session_key: &str) -> broadcast::Receiver<SessionEvent> {
        let mut channels = lock(&self.channels);
        channels
            .entry(session_key.to_owned())
            .or_insert_with(new_channel)
            .sender
            .subscribe()
    }

    /// Publishes every durable event of `session_key` stored since the last call.
    pub async fn sync(&self, session_key: &str) {
        let _serialized = self.sync_lock.lock().await;
        let after = lock(&self.channels)
            .get(session_key)
            .map_or(0, |channel| channel.last_published);
        let events = match self.store.events_after(session_key, after, 10_000).await {
            Ok(events) => events,
            Err(error) => {
                tracing::error!(error = %error, session_key, "cannot read session events");
                return;
            }
        };
        let mut channels = lock(&self.channels);
        let channel = channels
            .entry(session_key.to_owned())
            .or_insert_with(new_channel);
        for event in events {
            channel.last_published = event.seq;
            let _ = channel.sender.send(SessionEvent {
                seq: event.seq,
                kind: event.kind,
                payload: event.payload,
                durable: true,
            });
        }
    }

    /// Publishes an ephemeral event (a delta) that is not stored.
    pub fn publish_ephemeral(&self, session_key: &str, kind: &str, payload: serde_json::Value) {
        let mut channels = lock(&self.channels);
        let channel = channels
            .entry(session_key.to_owned())
            .or_insert_with(new_channel);
        let _ = channel.sender.send(SessionEvent {
            seq: channel.last_published,
            kind: kind.to_owned(),
            payload,
            durable: false,
        });
    }
}

fn new_channel() -> Channel {
    let (sender, _) = broadcast::channel(SUBSCRIBER_BUFFER);
    Channel {
        sender,
        last_published: 0,
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
