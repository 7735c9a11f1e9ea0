//! Replies streamed by editing one message (`streaming = "edits"`; Matrix `m.replace`, Telegram
//! `editMessageText`, behind [`StreamSink`]): while a channel turn runs, its reply's deltas are
//! shown in one message of the conversation, sent at the first delta and edited at most once
//! per [`EDIT_INTERVAL`], with a trailing ` …` while the turn runs. The message's id is
//! recorded with the turn, so the final reply, which the outbox delivers as for any channel
//! turn, replaces that message instead of posting a second one, across restarts too.
//!
//! - The streamed text is the assistant message being written: a message committed before a
//!   tool call is replaced by the next one's deltas.
//! - A stream stops when its turn ends, when the deliverer is about to send the final reply
//!   ([`Streams::stop`] waits for an edit in flight, so no streamed edit lands after the final
//!   one), after [`MAX_STREAM`], once the text outgrows one edit (the final reply is then split
//!   as usual), or when it fell too far behind the session's events. A replica that delivers a reply whose stream runs on another replica
//!   cannot wait for it: that stream checks the turn in the store before every edit and stops
//!   once it ended, so only an edit already in flight can race the final one.
//! - A rate-limited edit (`429`) is skipped until the platform's `retry_after` passed; a
//!   failed one is skipped; the final reply carries the whole text either way.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_api::events::MESSAGE_COMPLETED;
use gatehouse_api::events::MESSAGE_DELTA;
use gatehouse_api::events::MessageDelta;
use gatehouse_channels::adapter::SendError;
use gatehouse_channels::adapter::StreamSink;
use gatehouse_store::Store;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::turns::events::EventHub;

/// The shortest time between two edits of a streamed message.
pub(crate) const EDIT_INTERVAL: Duration = Duration::from_secs(1);

/// The longest a reply is streamed; the final reply comes through the outbox either way.
pub(crate) const MAX_STREAM: Duration = Duration::from_secs(600);

/// The longest pause a rate-limited stream takes before its next edit.
const MAX_EDIT_PAUSE: Duration = Duration::from_secs(30);

/// How long [`Streams::stop`] waits for a stream's edit in flight.
const STOP_WAIT: Duration = Duration::from_secs(35);

/// The marker a streamed message carries while its turn runs.
const RUNNING_MARK: &str = " …";

/// The streams running on this replica, by turn.
#[derive(Default)]
pub(crate) struct Streams {
    running: parking_lot::Mutex<HashMap<String, Running>>,
}

struct Running {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// Where a turn's reply streams to.
pub(crate) struct StreamTarget {
    /// The message the reply streams into.
    pub(crate) sink: Box<dyn StreamSink>,
    /// The store: the turn's state, and where the message's id is recorded.
    pub(crate) store: Arc<dyn Store>,
    /// The session's live events.
    pub(crate) hub: Arc<EventHub>,
    /// The turn's session.
    pub(crate) session_key: String,
    /// The turn.
    pub(crate) turn_id: String,
}

impl Streams {
    /// Starts streaming `target`'s turn, unless a stream of it runs here already; it stops by
    /// itself or with `shutdown`.
    pub(crate) fn start(self: &Arc<Self>, target: StreamTarget, shutdown: &CancellationToken) {
        let mut running = self.running.lock();
        if running.contains_key(&target.turn_id) {
            return;
        }
        let stop = shutdown.child_token();
        let turn_id = target.turn_id.clone();
        let streams = Arc::clone(self);
        let task_stop = stop.clone();
        let task_turn = turn_id.clone();
        let task = tokio::spawn(async move {
            stream(target, task_stop).await;
            streams.running.lock().remove(&task_turn);
        });
        running.insert(turn_id, Running { stop, task });
    }

    /// Stops the stream of `turn_id` running here, if any, and waits for an edit in flight.
    pub(crate) async fn stop(&self, turn_id: &str) {
        let Some(running) = self.running.lock().remove(turn_id) else {
            return;
        };
        running.stop.cancel();
        if tokio::time::timeout(STOP_WAIT, running.task).await.is_err() {
            tracing::warn!(
                turn_id,
                "a streamed reply's last edit did not finish in time"
            );
        }
    }
}

/// What a stream knows of its turn's reply so far.
#[derive(Debug, Default, PartialEq, Eq)]
struct Draft {
    /// The text of the assistant message being written.
    text: String,
    /// A message was committed: the next delta starts a new one.
    committed: bool,
    /// Changed since it was last shown.
    dirty: bool,
}

impl Draft {
    fn delta(&mut self, piece: &str) {
        if self.committed {
            self.text.clear();
            self.committed = false;
        }
        self.text.push_str(piece);
        self.dirty = true;
    }
}

/// Shows `target`'s reply as it streams until its turn ends or `stop`.
async fn stream(target: StreamTarget, stop: CancellationToken) {
    let mut events = target.hub.subscribe(&target.session_key).await;
    // A turn that ended before the stream began has nothing to stream.
    if ended(&target).await {
        return;
    }
    let deadline = Instant::now() + MAX_STREAM;
    let mut draft = Draft::default();
    let mut shown: Option<String> = None;
    let mut edits: u32 = 0;
    let mut next_edit = Instant::now();
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep_until(deadline) => return,
            event = events.recv() => {
                // Too far behind: the draft misses deltas, so the stream stops; the final reply
                // replaces what it showed.
                let Ok(event) = event else {
                    return;
                };
                if event.payload.get("turnId").and_then(|id| id.as_str())
                    != Some(target.turn_id.as_str())
                {
                    continue;
                }
                match event.kind.as_str() {
                    MESSAGE_DELTA => {
                        if let Ok(delta) =
                            serde_json::from_value::<MessageDelta>(event.payload.clone())
                        {
                            draft.delta(&delta.text);
                        }
                    }
                    MESSAGE_COMPLETED => draft.committed = true,
                    kind if kind.starts_with("turn.") && event.durable && ended(&target).await => {
                        return;
                    }
                    _ => {}
                }
            }
            () = tokio::time::sleep_until(next_edit), if draft.dirty => {
                if draft.text.chars().count() > target.sink.max_chars() || ended(&target).await {
                    return;
                }
                let running = format!("{}{RUNNING_MARK}", draft.text);
                next_edit = match target.sink.show(&running, shown.as_deref(), edits).await {
                    Ok(event_id) => {
                        if shown.is_none() {
                            if let Err(error) = target
                                .store
                                .set_channel_stream_message(&target.turn_id, &event_id)
                                .await
                            {
                                tracing::warn!(error = %error, "cannot record a streamed message");
                            }
                            shown = Some(event_id);
                        }
                        edits = edits.saturating_add(1);
                        draft.dirty = false;
                        Instant::now() + EDIT_INTERVAL
                    }
                    Err(SendError::Transient {
                        retry_after: Some(retry_after),
                        ..
                    }) => Instant::now() + retry_after.clamp(EDIT_INTERVAL, MAX_EDIT_PAUSE),
                    Err(error) => {
                        tracing::debug!(error = %error, "cannot stream a reply");
                        Instant::now() + EDIT_INTERVAL * 2
                    }
                };
            }
        }
    }
}

/// Whether the stream's turn has ended (or cannot be read).
async fn ended(target: &StreamTarget) -> bool {
    !matches!(
        target.store.turn(&target.turn_id).await,
        Ok(Some(turn)) if !turn.status.is_terminal()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_committed_message_is_replaced_by_the_next_ones_deltas() {
        let mut draft = Draft::default();
        draft.delta("Looking");
        draft.delta(" it up");
        assert_eq!(draft.text, "Looking it up");
        draft.dirty = false;
        draft.committed = true;
        assert_eq!(draft.text, "Looking it up");
        draft.delta("Found");
        assert_eq!(
            draft,
            Draft {
                text: String::from("Found"),
                committed: false,
                dirty: true,
            }
        );
    }
}
