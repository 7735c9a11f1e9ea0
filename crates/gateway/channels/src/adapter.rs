//! The one small trait every channel kind implements to send what the outbox holds.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;

/// One message to send: an outbox entry with its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The outbox entry's id, the same on every attempt: the platform's idempotency key where
    /// it takes one.
    pub delivery_id: String,
    /// The attempts made before this one: a retry may find parts an earlier attempt sent.
    pub attempt: u32,
    /// The platform id of the message it answers.
    pub in_reply_to: Option<String>,
    /// Where it goes.
    pub conversation: String,
    /// Whom it answers.
    pub recipient: String,
    /// The thread it goes into, where the platform has threads.
    pub thread: Option<String>,
    /// The platform id of a message this one replaces (the message that streamed the reply
    /// while its turn ran), where the platform can edit messages.
    pub replaces: Option<String>,
    /// The text, in Markdown.
    pub text: String,
    /// Files sent after the text (a turn's reply artifacts).
    pub files: Vec<crate::files::OutgoingFile>,
}

/// Why a send failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// It may work later (a timeout, a refused connection, `429`, `5xx`, or any answer the
    /// platform documents as worth retrying); `retry_after` is the platform's own hint.
    #[error("{message}")]
    Transient {
        /// What happened; no content, no credential.
        message: String,
        /// The platform's `Retry-After`, when it sent one.
        retry_after: Option<Duration>,
    },
    /// It will never work (the platform refused the message itself).
    #[error("{message}")]
    Permanent {
        /// What happened; no content, no credential.
        message: String,
    },
}

/// The longest one delivery waits out a platform's rate limits (`429` with its `Retry-After`)
/// between the parts of a reply before it gives the attempt up to the outbox's retry schedule
/// (which honours the `Retry-After`, and the next attempt goes on from the refused part). Kept
/// short: one replica's deliverer sends one delivery at a time.
pub const MAX_INLINE_WAIT: Duration = Duration::from_secs(30);

/// The shortest wait a rate limit is given, whatever it says (a `Retry-After: 0` would spin).
pub const MIN_LIMIT_WAIT: Duration = Duration::from_secs(1);

/// Runs `step` (one call to a platform) until it succeeds or fails otherwise than by a rate
/// limit: a failure for which `limit` gives a wait is tried again after that wait, while
/// `waited` (the delivery's waits so far) stays within [`MAX_INLINE_WAIT`]. A wait is taken
/// as at least [`MIN_LIMIT_WAIT`].
///
/// # Errors
/// The step's failure.
pub async fn waiting_out_limits<T, E, F, Fut>(
    waited: &mut Duration,
    limit: impl Fn(&E) -> Option<Duration>,
    step: F,
) -> Result<T, E>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    loop {
        match step().await {
            Err(error) => match limit(&error).map(|wait| wait.max(MIN_LIMIT_WAIT)) {
                Some(wait) if waited.saturating_add(wait) <= MAX_INLINE_WAIT => {
                    *waited = waited.saturating_add(wait);
                    tokio::time::sleep(wait).await;
                }
                _ => return Err(error),
            },
            done => return done,
        }
    }
}

/// How far each delivery got in this process, for adapters whose platform has no idempotency
/// key: a retry after a failure part-way (a `5xx`, a rate limit waited out too long, an
/// attempt cut off by its time bound) goes on from the part it was sending. A delivery taken
/// over by another replica starts again.
#[derive(Default)]
pub struct Progress {
    done: parking_lot::Mutex<HashMap<String, usize>>,
}

/// The most deliveries [`Progress`] keeps; past it, it starts over (a retry then may send a
/// part again).
const MAX_TRACKED: usize = 10_000;

impl Progress {
    /// The parts of `delivery_id` sent before.
    pub fn sent(&self, delivery_id: &str) -> usize {
        self.done.lock().get(delivery_id).copied().unwrap_or(0)
    }

    /// Notes, before part `next` is sent, that the parts before it were.
    pub fn reached(&self, delivery_id: &str, next: usize) {
        let mut done = self.done.lock();
        if done.len() >= MAX_TRACKED && !done.contains_key(delivery_id) {
            done.clear();
        }
        done.insert(delivery_id.to_owned(), next);
    }

    /// Forgets `delivery_id`: it was sent whole, or will not be tried again.
    pub fn finished(&self, delivery_id: &str) {
        self.done.lock().remove(delivery_id);
    }

    /// Runs the `steps` steps of `delivery_id` (one call each: a part of the text, a file),
    /// from the first not sent before, each waiting out its rate limits
    /// ([`waiting_out_limits`] with `limit`, over the whole delivery). A failure ends the
    /// attempt there; one that is not `transient` also forgets the delivery.
    ///
    /// # Errors
    /// The failing step's.
    pub async fn send_steps<E, F, Fut>(
        &self,
        delivery_id: &str,
        steps: usize,
        limit: impl Fn(&E) -> Option<Duration>,
        transient: impl Fn(&E) -> bool,
        step: F,
    ) -> Result<(), E>
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
    {
        let mut waited = Duration::ZERO;
        for index in self.sent(delivery_id)..steps {
            self.reached(delivery_id, index);
            if let Err(error) = waiting_out_limits(&mut waited, &limit, || step(index)).await {
                if !transient(&error) {
                    self.finished(delivery_id);
                }
                return Err(error);
            }
        }
        self.finished(delivery_id);
        Ok(())
    }
}

/// Where a reply streams while its turn runs (`streaming = "edits"`): one message, sent
/// once and then edited.
#[async_trait]
pub trait StreamSink: Send + Sync + 'static {
    /// The longest text one edit may show; a longer reply stops streaming, and its final
    /// version is split as usual.
    fn max_chars(&self) -> usize;

    /// Shows `text`: sends the message when `shown` is `None`, else edits the message
    /// `shown`; `edits` counts the edits made so far (the platform's idempotency key, where
    /// it takes one). Returns the message's platform id.
    ///
    /// # Errors
    /// [`SendError`]; a rate limit's `retry_after` pauses the stream.
    async fn show(&self, text: &str, shown: Option<&str>, edits: u32) -> Result<String, SendError>;
}

/// A channel kind's way out to its platform.
#[async_trait]
pub trait Adapter: Send + Sync + 'static {
    /// Sends `message`; a send repeated with the same delivery id must not show twice where the
    /// platform allows it to be prevented.
    ///
    /// # Errors
    /// [`SendError`].
    async fn send(&self, message: &Outgoing) -> Result<(), SendError>;
}
