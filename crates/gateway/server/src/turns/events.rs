//! [`EventHub`]: live session events for subscribers, in the order of the durable log.
//!
//! Each subscriber has its own queue, bounded by [`SUBSCRIBER_BUFFER`] events and
//! [`SUBSCRIBER_MAX_BYTES`] bytes. Publishing never waits: a subscriber whose queue would pass
//! either bound is dropped at once (its queue freed), and its next [`Subscription::recv`] says it
//! lagged, so the event stream ends with `SLOW_CONSUMER` and the client resumes from the durable
//! log with `after=`. Memory held for live events is therefore at most
//! `SUBSCRIBER_MAX_BYTES` per subscriber, whatever a node streams and however slow a client is.

use std::collections::HashMap;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Weak;

use gatehouse_store::Store;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// How many events a subscriber may fall behind before it is dropped.
pub(crate) const SUBSCRIBER_BUFFER: usize = 1024;

/// How many bytes of events (their JSON size, roughly) a subscriber may fall behind before it
/// is dropped.
pub const SUBSCRIBER_MAX_BYTES: usize = 4 * 1024 * 1024;

/// One event of a session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SessionEvent {
    /// The seq of the durable event; a delta carries the seq of the last durable event before it.
    pub seq: i64,
    /// The event name, for example `message.delta` or `turn.completed`.
    pub kind: String,
    /// Its data.
    pub payload: serde_json::Value,
    /// False for streamed deltas, which are never stored.
    pub durable: bool,
}

/// The subscriber fell behind by more than its bounds and was dropped; resume from the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Lagged;

#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<Arc<SessionEvent>>,
    bytes: usize,
    lagged: bool,
}

#[derive(Debug, Default)]
struct Subscriber {
    queue: Mutex<Queue>,
    ready: Notify,
}

impl Subscriber {
    /// Queues `event` of `bytes`, or drops the subscriber's backlog and marks it lagged when
    /// that would pass a bound. Returns false once the subscriber has lagged.
    fn offer(&self, event: &Arc<SessionEvent>, bytes: usize) -> bool {
        let mut queue = self.queue.lock();
        if queue.lagged {
            return false;
        }
        let fits = queue.events.len() < SUBSCRIBER_BUFFER
            && queue.bytes.saturating_add(bytes) <= SUBSCRIBER_MAX_BYTES;
        if fits {
            queue.events.push_back(Arc::clone(event));
            queue.bytes += bytes;
        } else {
            queue.events = VecDeque::new();
            queue.bytes = 0;
            queue.lagged = true;
        }
        drop(queue);
        self.ready.notify_one();
        fits
    }
}

/// The live events of one session for one subscriber; dropping it unsubscribes.
#[derive(Debug)]
pub(crate) struct Subscription {
    subscriber: Arc<Subscriber>,
}

impl Subscription {
    /// Waits for the next event.
    ///
    /// # Errors
    /// [`Lagged`] once the subscriber fell too far behind; it stays lagged, so subscribe again
    /// (after reading the durable log) to go on.
    pub(crate) async fn recv(&mut self) -> Result<Arc<SessionEvent>, Lagged> {
        loop {
            let notified = self.subscriber.ready.notified();
            {
                let mut queue = self.subscriber.queue.lock();
                if queue.lagged {
                    return Err(Lagged);
                }
                if let Some(event) = queue.events.pop_front() {
                    queue.bytes = queue.bytes.saturating_sub(event_bytes(&event));
                    return Ok(event);
                }
            }
            notified.await;
        }
    }

    /// Returns the bytes queued for this subscriber now.
    #[cfg(test)]
    pub(crate) fn queued_bytes(&self) -> usize {
        self.subscriber.queue.lock().bytes
    }
}

#[derive(Debug, Default)]
struct Channel {
    subscribers: Vec<Weak<Subscriber>>,
    /// The seq of the last durable event published (or, when the channel was made, the last
    /// one stored).
    last_published: i64,
}

impl Channel {
    fn publish(&mut self, event: SessionEvent) {
        let event = Arc::new(event);
        let bytes = event_bytes(&event);
        self.subscribers.retain(|weak| match weak.upgrade() {
            Some(subscriber) => subscriber.offer(&event, bytes),
            None => false,
        });
    }

    /// Returns true while someone subscribes.
    fn followed(&mut self) -> bool {
        self.subscribers.retain(|weak| weak.strong_count() > 0);
        !self.subscribers.is_empty()
    }
}

/// Sends a replica's deltas to the other replicas; see [`crate::cluster`].
pub(crate) trait DeltaOutbox: Send + Sync + 'static {
    /// Queues a delta of `session_key` for the other replicas, never waiting.
    fn send(&self, session_key: &str, kind: &str, payload: &serde_json::Value);
}

/// Publishes each session's durable events (read back from the store, so subscribers see
/// exactly the stored order) and its ephemeral deltas.
///
/// Publishing never waits for a subscriber: one that falls more than [`SUBSCRIBER_BUFFER`]
/// events or [`SUBSCRIBER_MAX_BYTES`] bytes behind is dropped and must resume from the store.
/// A session nobody follows on this replica has no channel and costs no store read: the first
/// subscriber makes its channel from the store's last event, and every later event reaches it.
pub(crate) struct EventHub {
    store: Arc<dyn Store>,
    channels: Mutex<HashMap<String, Channel>>,
    sync_lock: tokio::sync::Mutex<()>,
    /// Where this replica's deltas go for the other replicas, when there are any.
    outbox: Mutex<Option<Arc<dyn DeltaOutbox>>>,
}

impl EventHub {
    /// Returns a hub over `store`.
    pub(crate) fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            channels: Mutex::new(HashMap::new()),
            sync_lock: tokio::sync::Mutex::new(()),
            outbox: Mutex::new(None),
        }
    }

    /// Sends this replica's deltas to `outbox` as well as to its own subscribers.
    pub(crate) fn set_outbox(&self, outbox: Arc<dyn DeltaOutbox>) {
        *self.outbox.lock() = Some(outbox);
    }

    /// Subscribes to the live events of `session_key`.
    pub(crate) async fn subscribe(&self, session_key: &str) -> Subscription {
        self.subscribe_from(session_key).await.0
    }

    /// Subscribes to the live events of `session_key` and returns, with the subscription, the
    /// seq of the last durable event published before it: every later durable event reaches
    /// the subscription, every earlier one is only in the store.
    pub(crate) async fn subscribe_from(&self, session_key: &str) -> (Subscription, i64) {
        let _serialized = self.sync_lock.lock().await;
        let known = self.channels.lock().contains_key(session_key);
        let last_stored = match known {
            true => None,
            false => match self.store.last_event_seq(session_key).await {
                Ok(seq) => Some(seq),
                Err(error) => {
                    // The stream replays from the store itself; live events then start after
                    // whatever the next sync reads.
                    tracing::warn!(error = %error, session_key, "cannot read the last session event");
                    None
                }
            },
        };
        let subscriber = Arc::new(Subscriber::default());
        let mut channels = self.channels.lock();
        let channel = channels.entry(session_key.to_owned()).or_default();
        if let Some(seq) = last_stored {
            channel.last_published = channel.last_published.max(seq);
        }
        channel.subscribers.retain(|weak| weak.strong_count() > 0);
        channel.subscribers.push(Arc::downgrade(&subscriber));
        (Subscription { subscriber }, channel.last_published)
    }

    /// Returns the sessions someone on this replica follows.
    pub(crate) fn followed_sessions(&self) -> Vec<String> {
        let mut channels = self.channels.lock();
        channels.retain(|_, channel| channel.followed());
        channels.keys().cloned().collect()
    }

    /// Publishes every durable event of `session_key` stored since the last call, when someone
    /// follows the session here; forgets the session otherwise.
    pub(crate) async fn sync(&self, session_key: &str) {
        let _serialized = self.sync_lock.lock().await;
        let after = {
            let mut channels = self.channels.lock();
            let Some(channel) = channels.get_mut(session_key) else {
                return;
            };
            if !channel.followed() {
                channels.remove(session_key);
                return;
            }
            channel.last_published
        };
        let events = match self.store.events_after(session_key, after, 10_000).await {
            Ok(events) => events,
            Err(error) => {
                tracing::error!(error = %error, session_key, "cannot read session events");
                return;
            }
        };
        let mut channels = self.channels.lock();
        let Some(channel) = channels.get_mut(session_key) else {
            return;
        };
        for event in events {
            channel.last_published = event.seq;
            channel.publish(SessionEvent {
                seq: event.seq,
                kind: event.kind,
                payload: event.payload,
                durable: true,
            });
        }
    }

    /// Publishes an ephemeral event (a delta) of this replica, which is not stored, to its
    /// subscribers here and to the other replicas.
    pub(crate) fn publish_ephemeral(
        &self,
        session_key: &str,
        kind: &str,
        payload: serde_json::Value,
    ) {
        let outbox = self.outbox.lock().clone();
        if let Some(outbox) = outbox {
            outbox.send(session_key, kind, &payload);
        }
        self.publish_local(session_key, kind, payload);
    }

    /// Publishes an ephemeral event another replica sent, to the subscribers here.
    pub(crate) fn publish_local(&self, session_key: &str, kind: &str, payload: serde_json::Value) {
        let mut channels = self.channels.lock();
        let Some(channel) = channels.get_mut(session_key) else {
            return;
        };
        let seq = channel.last_published;
        channel.publish(SessionEvent {
            seq,
            kind: kind.to_owned(),
            payload,
            durable: false,
        });
    }
}

/// Returns about how many bytes `event` takes as an SSE event: its JSON size plus the framing.
fn event_bytes(event: &SessionEvent) -> usize {
    const FRAMING: usize = 64;
    FRAMING + event.kind.len() + json_bytes(&event.payload)
}

/// Returns about how many bytes `value` takes as JSON text, without serializing it.
fn json_bytes(value: &serde_json::Value) -> usize {
    use serde_json::Value;
    match value {
        Value::Null => 4,
        Value::Bool(_) => 5,
        Value::Number(_) => 20,
        Value::String(text) => text.len() + 2,
        Value::Array(items) => 2 + items.iter().map(|item| json_bytes(item) + 1).sum::<usize>(),
        Value::Object(members) => {
            2 + members
                .iter()
                .map(|(key, member)| key.len() + 4 + json_bytes(member))
                .sum::<usize>()
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    fn delta(text: String) -> SessionEvent {
        SessionEvent {
            seq: 0,
            kind: String::from("message.delta"),
            payload: serde_json::json!({"text": text}),
            durable: false,
        }
    }

    #[tokio::test]
    async fn finding_5_a_subscriber_that_falls_behind_in_bytes_is_dropped_and_freed() {
        let mut channel = Channel::default();
        let subscriber = Arc::new(Subscriber::default());
        channel.subscribers.push(Arc::downgrade(&subscriber));
        let mut subscription = Subscription {
            subscriber: Arc::clone(&subscriber),
        };
        channel.publish(delta(String::from("small")));
        assert_eq!(subscription.recv().await.unwrap().payload["text"], "small");
        assert_eq!(subscription.queued_bytes(), 0);
        // Three 2 MiB deltas do not fit a 4 MiB backlog: the subscriber is dropped at the third.
        for _ in 0..3 {
            channel.publish(delta("x".repeat(2 * 1024 * 1024)));
        }
        assert_eq!(subscription.queued_bytes(), 0);
        assert_eq!(subscription.recv().await, Err(Lagged));
        assert!(
            channel.subscribers.is_empty(),
            "a dropped subscriber stays listed"
        );
        // A dropped subscription disappears from the channel.
        let other = Arc::new(Subscriber::default());
        channel.subscribers.push(Arc::downgrade(&other));
        drop(other);
        channel.publish(delta(String::from("after")));
        assert!(channel.subscribers.is_empty());
    }
}
