//! Announcements between replicas (PostgreSQL `LISTEN`/`NOTIFY` on
//! [`gatehouse_store::cluster::CHANNEL`]).
//!
//! - [`listen`]: every durable session event is announced by the store itself. A replica
//!   whose clients follow that session reads the new events from the store and publishes them
//!   in order; a replica holding nodes starts the driver of a session whose turn was just
//!   queued (it claims it when the session's node is its own). When the listening connection
//!   was lost, every followed session is read again, so a missed announcement never means a
//!   missed durable event.
//! - [`Outbox`]: a replica's deltas go to the others, only while another replica is live,
//!   through a bounded queue (a full queue drops the delta, never blocks a turn), at most
//!   [`MAX_DELTAS_PER_SECOND`] pieces and [`MAX_DELTA_BYTES_PER_SECOND`] of text a second, in
//!   pieces of at most [`MAX_DELTA_TEXT_BYTES`] of text so each notification stays within the
//!   server's bound.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gatehouse_store::Store;
use gatehouse_store::cluster::Announcement;
use gatehouse_store::cluster::Heard;
use gatehouse_store::records::EventPayload;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Replica;
use crate::link::registry::NodeRegistry;
use crate::turns::TurnEngine;
use crate::turns::events::DeltaOutbox;
use crate::turns::events::EventHub;

/// The most text one announced delta carries; a longer one is sent in pieces (escaped JSON
/// text of this many bytes stays within a notification's 8000 bytes).
pub(crate) const MAX_DELTA_TEXT_BYTES: usize = 1024;

/// How many deltas may wait to be announced before new ones are dropped.
pub(crate) const OUTBOX_CAPACITY: usize = 4096;

/// The most delta pieces a replica announces per second; past it they are dropped, so a node
/// streaming without pause cannot fill the server's notification queue or slow every commit
/// (each notification is taken under a server-wide lock at commit).
pub(crate) const MAX_DELTAS_PER_SECOND: u32 = 1000;

/// The most bytes of delta text a replica announces per second.
pub(crate) const MAX_DELTA_BYTES_PER_SECOND: usize = 1024 * 1024;

/// The most deltas announced in one statement.
const BATCH: usize = 64;

/// How long the listener waits before listening again after the store failed.
const RELISTEN: Duration = Duration::from_secs(1);

/// Hears announcements until `stop`; returns at once on a store without a channel (SQLite).
pub(crate) async fn listen(
    replica: Arc<Replica>,
    store: Arc<dyn Store>,
    hub: Arc<EventHub>,
    turns: Arc<TurnEngine>,
    registry: Arc<NodeRegistry>,
    stop: CancellationToken,
) {
    loop {
        let listener = tokio::select! {
            listener = store.listen() => listener,
            () = stop.cancelled() => return,
        };
        let mut listener = match listener {
            Ok(Some(listener)) => listener,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(error = %error, "cannot listen for replica announcements; retrying");
                tokio::select! {
                    () = tokio::time::sleep(RELISTEN) => continue,
                    () = stop.cancelled() => return,
                }
            }
        };
        // Anything announced before this listener existed is read from the store.
        resync(&hub).await;
        loop {
            let heard = tokio::select! {
                heard = listener.next() => heard,
                () = stop.cancelled() => return,
            };
            match heard {
                Ok(Heard::Announcement(Announcement::Event {
                    session_key, kind, ..
                })) => {
                    hub.sync(&session_key).await;
                    // A session this replica drives already takes its next turn by itself.
                    if kind == gatehouse_store::records::TurnQueued::KIND
                        && !registry.all().is_empty()
                        && !turns.drives(&session_key)
                    {
                        turns.kick(&session_key);
                    }
                }
                Ok(Heard::Announcement(Announcement::Delta {
                    origin,
                    session_key,
                    kind,
                    payload,
                    ..
                })) => {
                    if origin != replica.id() {
                        hub.publish_local(&session_key, &kind, payload);
                    }
                }
                Ok(Heard::Resumed) => {
                    tracing::warn!(
                        "the announcement connection was lost and is back; reading followed sessions again"
                    );
                    resync(&hub).await;
                    replica.sweep_soon();
                }
                Err(error) => {
                    tracing::warn!(error = %error, "lost the announcement connection; listening again");
                    tokio::select! {
                        () = tokio::time::sleep(RELISTEN) => break,
                        () = stop.cancelled() => return,
                    }
                }
            }
        }
    }
}

/// Publishes what every followed session stored meanwhile.
async fn resync(hub: &EventHub) {
    for session_key in hub.followed_sessions() {
        hub.sync(&session_key).await;
    }
}

/// Sends this replica's deltas to the others.
pub(crate) struct Outbox {
    replica: Arc<Replica>,
    queue: mpsc::Sender<Announcement>,
    sent: AtomicU64,
    dropped: AtomicU64,
    /// The current one-second window: when it began, pieces and bytes announced in it.
    window: parking_lot::Mutex<(std::time::Instant, u32, usize)>,
}

impl Outbox {
    /// Returns the outbox and starts the task that announces what it queues, until `stop`.
    pub(crate) fn start(
        replica: Arc<Replica>,
        store: Arc<dyn Store>,
        stop: CancellationToken,
    ) -> Arc<Self> {
        let (queue, receiver) = mpsc::channel(OUTBOX_CAPACITY);
        tokio::spawn(announce(store, receiver, stop));
        Arc::new(Self {
            replica,
            queue,
            sent: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            window: parking_lot::Mutex::new((std::time::Instant::now(), 0, 0)),
        })
    }

    /// Returns whether one more piece of `bytes` fits this second's budget, and counts it.
    fn within_budget(&self, bytes: usize) -> bool {
        let mut window = self.window.lock();
        if window.0.elapsed() >= Duration::from_secs(1) {
            *window = (std::time::Instant::now(), 0, 0);
        }
        let fits = window.1 < MAX_DELTAS_PER_SECOND
            && window.2.saturating_add(bytes) <= MAX_DELTA_BYTES_PER_SECOND;
        if fits {
            window.1 += 1;
            window.2 += bytes;
        }
        fits
    }

    fn queue(&self, announcement: Announcement, bytes: usize) {
        if !self.within_budget(bytes) || self.queue.try_send(announcement).is_err() {
            let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if crate::link::registry::log_sparsely(dropped) {
                tracing::warn!(
                    dropped,
                    "the deltas to the other replicas are over their queue or their rate; dropping deltas (their clients still get every durable event)"
                );
            }
        }
    }
}

impl DeltaOutbox for Outbox {
    fn send(&self, session_key: &str, kind: &str, payload: &serde_json::Value) {
        if !self.replica.has_peers() {
            return;
        }
        for piece in pieces(payload) {
            let bytes = piece
                .get("text")
                .and_then(serde_json::Value::as_str)
                .map_or(0, str::len);
            let number = self.sent.fetch_add(1, Ordering::Relaxed);
            self.queue(
                Announcement::Delta {
                    origin: self.replica.id().to_owned(),
                    number,
                    session_key: session_key.to_owned(),
                    kind: kind.to_owned(),
                    payload: piece,
                },
                bytes,
            );
        }
    }
}

/// Returns `payload` as announced: whole, or, when its `text` is longer than
/// [`MAX_DELTA_TEXT_BYTES`], as copies each carrying the next piece of the text (cut at
/// character boundaries).
fn pieces(payload: &serde_json::Value) -> Vec<serde_json::Value> {
    let Some(text) = payload.get("text").and_then(serde_json::Value::as_str) else {
        return vec![payload.clone()];
    };
    if text.len() <= MAX_DELTA_TEXT_BYTES {
        return vec![payload.clone()];
    }
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(MAX_DELTA_TEXT_BYTES);
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let mut piece = payload.clone();
        piece["text"] = serde_json::Value::String(rest[..end].to_owned());
        pieces.push(piece);
        rest = &rest[end..];
    }
    pieces
}

/// Announces queued deltas in order, up to [`BATCH`] per statement, until `stop`.
async fn announce(
    store: Arc<dyn Store>,
    mut receiver: mpsc::Receiver<Announcement>,
    stop: CancellationToken,
) {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        let first = tokio::select! {
            first = receiver.recv() => first,
            () = stop.cancelled() => return,
        };
        let Some(first) = first else {
            return;
        };
        batch.push(first);
        while batch.len() < BATCH {
            match receiver.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        if let Err(error) = store.announce(&batch).await {
            tracing::warn!(error = %error, deltas = batch.len(), "cannot announce deltas to the other replicas; dropping them");
        }
        batch.clear();
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn a_long_delta_is_announced_in_pieces_that_fit_a_notification() {
        let short = serde_json::json!({"turnId": "t", "text": "hello"});
        assert_eq!(pieces(&short), vec![short.clone()]);
        let other = serde_json::json!({"turnId": "t"});
        assert_eq!(pieces(&other), vec![other.clone()]);
        // Multi-byte characters and characters JSON escapes six-fold.
        let text: String = "é\u{1}".repeat(2_000);
        let long = serde_json::json!({"turnId": "t", "text": text});
        let split = pieces(&long);
        assert!(split.len() > 1);
        let joined: String = split
            .iter()
            .map(|piece| piece["text"].as_str().unwrap())
            .collect();
        assert_eq!(joined, text);
        for piece in &split {
            assert_eq!(piece["turnId"], "t");
            let announcement = Announcement::Delta {
                origin: "x".repeat(128),
                number: u64::MAX,
                session_key: "s".repeat(128),
                kind: String::from("message.delta"),
                payload: piece.clone(),
            };
            let bytes = serde_json::to_string(&announcement).unwrap().len();
            assert!(
                bytes <= gatehouse_store::cluster::MAX_ANNOUNCEMENT_BYTES,
                "{bytes}"
            );
        }
    }
}
