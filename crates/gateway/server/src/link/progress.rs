//! Bounded delivery of `node.invoke.progress` chunks: each chunk at most
//! [`MAX_PROGRESS_CHUNK_BYTES`], each assembled line at most a caller-chosen bound, and every byte
//! a connection has sent but its callers have not yet taken as a complete line charged to one
//! [`ByteBudget`] of [`MAX_CONNECTION_BUFFERED_BYTES`].
//!
//! A chunk is charged when it arrives and released when the line it belongs to is handed to the
//! caller (or the caller goes away), so a node that streams without a newline, or faster than
//! its caller reads, cannot make the Gateway hold more than the budget for it.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use bytes::BytesMut;
use gatehouse_protocol::error::ErrorCode;
use tokio::sync::mpsc;
use tokio_util::codec::Decoder;
use tokio_util::codec::LinesCodec;
use tokio_util::codec::LinesCodecError;

pub(crate) use gatehouse_protocol::invoke::MAX_PROGRESS_CHUNK_BYTES;
pub use gatehouse_protocol::invoke::MAX_PROGRESS_LINE_BYTES;

/// The most progress bytes the Gateway holds for one node connection, across all of its
/// invokes: queued chunks plus partial lines. Past it the invoke whose chunk does not fit fails
/// with `NODE_BUFFER_EXHAUSTED`.
pub(crate) const MAX_CONNECTION_BUFFERED_BYTES: usize = 64 * 1024 * 1024;

/// How many progress chunks may wait for a slow caller before the invoke is failed.
pub const PROGRESS_CAPACITY: usize = 1024;

/// The most one node connection can grow the Gateway's memory, by construction: the frame being
/// read and the frame being handled (each at most [`crate::link::ws::MAX_WS_MESSAGE_BYTES`];
/// frames are handled one at a time), the connection's progress budget
/// ([`MAX_CONNECTION_BUFFERED_BYTES`]), and one complete line being decoded (about twice
/// [`MAX_PROGRESS_LINE_BYTES`]). A node that sends more than this is refused, not buffered.
pub const MAX_NODE_RSS_GROWTH_BYTES: usize = 2 * crate::link::ws::MAX_WS_MESSAGE_BYTES
    + MAX_CONNECTION_BUFFERED_BYTES
    + 2 * MAX_PROGRESS_LINE_BYTES;

/// A count of bytes held, with a ceiling.
#[derive(Debug)]
pub(crate) struct ByteBudget {
    used: AtomicUsize,
    limit: usize,
}

impl ByteBudget {
    /// Returns an empty budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Self {
        Self {
            used: AtomicUsize::new(0),
            limit,
        }
    }

    /// Takes `bytes` from the budget; returns false (taking nothing) when they do not fit.
    pub(crate) fn try_take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.limit)
            })
            .is_ok()
    }

    /// Gives back `bytes` taken earlier.
    pub(crate) fn release(&self, bytes: usize) {
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }

    /// Returns the bytes held now.
    pub(crate) fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }
}

/// The sending end of an invoke's progress, registered with the invoke; created only with its
/// [`ProgressLines`] by [`crate::link::registry::NodeConnection::progress_lines`], so both ends
/// charge the same connection budget.
#[derive(Debug)]
pub struct ProgressSink {
    pub(crate) sender: mpsc::Sender<String>,
}

/// Why a progress chunk was refused; the invoke fails with [`ChunkRefusal::code`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChunkRefusal {
    /// The chunk is over [`MAX_PROGRESS_CHUNK_BYTES`].
    TooLarge,
    /// The connection's budget, or the invoke's queue, is full.
    BufferExhausted,
}

impl ChunkRefusal {
    /// Returns the stable code the invoke fails with.
    pub(crate) fn code(self) -> ErrorCode {
        match self {
            ChunkRefusal::TooLarge => ErrorCode::ProgressChunkTooLarge,
            ChunkRefusal::BufferExhausted => ErrorCode::NodeBufferExhausted,
        }
    }
}

/// Charges `chunk` to `budget` and queues it on `sink`.
///
/// # Errors
/// A [`ChunkRefusal`]; nothing stays charged.
pub(crate) fn deliver(
    budget: &ByteBudget,
    sink: &ProgressSink,
    chunk: String,
) -> Result<(), ChunkRefusal> {
    let bytes = chunk.len();
    if bytes > MAX_PROGRESS_CHUNK_BYTES {
        return Err(ChunkRefusal::TooLarge);
    }
    if !budget.try_take(bytes) {
        return Err(ChunkRefusal::BufferExhausted);
    }
    if sink.sender.try_send(chunk).is_err() {
        budget.release(bytes);
        return Err(ChunkRefusal::BufferExhausted);
    }
    Ok(())
}

/// A line grew past its bound without a newline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("a streamed line is longer than {limit} bytes")]
pub struct LineTooLong {
    /// The bound.
    pub limit: usize,
}

/// The receiving end of an invoke's progress, as complete lines (split by a bounded
/// [`LinesCodec`]).
#[derive(Debug)]
pub struct ProgressLines {
    receiver: mpsc::Receiver<String>,
    budget: Arc<ByteBudget>,
    /// The chunks received and not yet taken as lines.
    buffer: BytesMut,
    codec: LinesCodec,
    max_line: usize,
}

impl ProgressLines {
    pub(crate) fn new(budget: Arc<ByteBudget>, max_line: usize) -> (ProgressSink, ProgressLines) {
        let (sender, receiver) = mpsc::channel(PROGRESS_CAPACITY);
        let lines = ProgressLines {
            receiver,
            budget,
            buffer: BytesMut::new(),
            codec: LinesCodec::new_with_max_length(max_line),
            max_line,
        };
        (ProgressSink { sender }, lines)
    }

    /// Returns the next complete line without its line ending, or `None` once the invoke ended
    /// (a partial line left at the end is dropped).
    ///
    /// # Errors
    /// [`LineTooLong`] when a line grows past the bound; the caller should give up on the
    /// invoke (dropping it cancels it).
    pub async fn next_line(&mut self) -> Result<Option<String>, LineTooLong> {
        loop {
            let before = self.buffer.len();
            let decoded = self.codec.decode(&mut self.buffer);
            // The bytes the codec consumed (a line with its ending, or a discarded overlong
            // prefix) are no longer held.
            self.budget.release(before - self.buffer.len());
            match decoded {
                Ok(Some(line)) => return Ok(Some(line)),
                Ok(None) => {}
                Err(LinesCodecError::MaxLineLengthExceeded | LinesCodecError::Io(_)) => {
                    return Err(LineTooLong {
                        limit: self.max_line,
                    });
                }
            }
            match self.receiver.recv().await {
                Some(chunk) => self.buffer.extend_from_slice(chunk.as_bytes()),
                None => return Ok(None),
            }
        }
    }
}

impl Drop for ProgressLines {
    /// Gives back every byte still held: the partial line and the chunks still queued.
    fn drop(&mut self) {
        self.receiver.close();
        let mut held = self.buffer.len();
        while let Ok(chunk) = self.receiver.try_recv() {
            held += chunk.len();
        }
        self.budget.release(held);
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[tokio::test]
    async fn finding_5_lines_are_bounded_and_every_byte_is_given_back() {
        let budget = Arc::new(ByteBudget::new(64));
        let (sink, mut lines) = ProgressLines::new(Arc::clone(&budget), 16);
        deliver(&budget, &sink, "one\ntw".into()).unwrap();
        deliver(&budget, &sink, "o\r\n".into()).unwrap();
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("one"));
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("two"));
        assert_eq!(budget.used(), 0);

        // A chunk over the protocol limit is refused and charges nothing.
        let big = "x".repeat(MAX_PROGRESS_CHUNK_BYTES + 1);
        assert_eq!(deliver(&budget, &sink, big), Err(ChunkRefusal::TooLarge));
        // The connection budget caps what waits.
        deliver(&budget, &sink, "a".repeat(40)).unwrap();
        assert_eq!(
            deliver(&budget, &sink, "b".repeat(40)),
            Err(ChunkRefusal::BufferExhausted)
        );
        assert_eq!(budget.used(), 40);
        // A line past its bound fails, and dropping the reader gives everything back.
        assert_eq!(lines.next_line().await, Err(LineTooLong { limit: 16 }));
        deliver(&budget, &sink, "c".repeat(10)).unwrap();
        drop(lines);
        assert_eq!(budget.used(), 0);
        assert_eq!(
            deliver(&budget, &sink, "d".into()),
            Err(ChunkRefusal::BufferExhausted)
        );
        assert_eq!(budget.used(), 0);
    }
}
