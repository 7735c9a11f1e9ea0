//! Server-Sent Events (the WHATWG event-stream format) from an HTTP response body.
//!
//! The decoding is `sse-stream`'s: bytes go in as they arrive, in chunks of any size; complete
//! events come out, each as soon as its blank line arrived, without waiting for the next chunk.
//! Lines end with LF, CRLF or CR, also when the terminator is split across chunks. `event:` sets
//! the event name, `data:` lines are joined with newlines, lines starting with `:` are comments,
//! `id:`, `retry:` and unknown fields are ignored, and a leading byte-order mark is skipped. An
//! event is dispatched at a blank line when it has data. A character split across chunks is
//! decoded whole; a `data:` or `event:` value that is not UTF-8 ends the stream with
//! [`ModelError::InvalidSse`].
//!
//! This module adds what the model clients rely on and the crate does not do:
//! - a line longer than [`MAX_LINE_BYTES`] ends the stream with [`ModelError::LineTooLong`],
//!   before it is buffered whole;
//! - at the end of the body, a last line without terminator is read, and an event that lacks only
//!   its blank line is dispatched (lenient: some servers close right after `data: [DONE]`);
//! - errors are [`ModelError`]s: a broken body is [`ModelError::Transport`].
//!
//! It is the workspace's one SSE reader: the model clients and `gatehouse chat` use it.

use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use futures_util::StreamExt;

use crate::error::ModelError;

/// The longest line the decoder buffers.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// What ends the body once it is over: an unterminated last line and a last event without its
/// blank line are then complete. Blank lines without data dispatch nothing.
const END_OF_BODY: &[u8] = b"\n\n";

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub name: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The events of a body, in order; the stream ends after the body or after the first error.
pub type SseEventStream = Pin<Box<dyn Stream<Item = Result<SseEvent, ModelError>> + Send>>;

/// Returns the events of `response`'s body.
///
/// # Errors
///
/// Each error ends the stream: [`ModelError::Transport`] when the body breaks,
/// [`ModelError::LineTooLong`] for a line longer than [`MAX_LINE_BYTES`],
/// [`ModelError::InvalidSse`] for a field value that is not UTF-8.
pub fn events(response: reqwest::Response) -> SseEventStream {
    decode(response.bytes_stream())
}

/// Returns the events of a body given as chunks.
fn decode<S>(body: S) -> SseEventStream
where
    S: Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
{
    let mut line_limit = LineLimit::default();
    let chunks = body
        .map(move |chunk| {
            let chunk = chunk.map_err(|source| ModelError::Transport { source })?;
            line_limit.check(&chunk)?;
            Ok::<Bytes, ModelError>(chunk)
        })
        .chain(futures_util::stream::once(async {
            Ok(Bytes::from_static(END_OF_BODY))
        }));
    let events = sse_stream::SseByteStream::new(chunks).filter_map(|block| async move {
        match block {
            Ok(sse_stream::Sse {
                event,
                data,
                id: _,
                retry: _,
            }) => data.map(|data| Ok(SseEvent { name: event, data })),
            Err(error) => Some(Err(model_error(error))),
        }
    });
    Box::pin(events)
}

/// Returns the [`ModelError`] of a decoding error: the body's own error as it was, any other as
/// [`ModelError::InvalidSse`].
fn model_error(error: sse_stream::Error) -> ModelError {
    match error {
        sse_stream::Error::Body(source) => match source.downcast::<ModelError>() {
            Ok(error) => *error,
            Err(source) => ModelError::InvalidSse { source },
        },
        other => ModelError::InvalidSse {
            source: Box::new(other),
        },
    }
}

/// The length of the line that is still open at the end of the chunks seen so far.
#[derive(Debug, Default)]
struct LineLimit {
    line_len: usize,
}

impl LineLimit {
    /// Takes the next chunk into account.
    ///
    /// # Errors
    ///
    /// Returns [`ModelError::LineTooLong`] when a line grows past [`MAX_LINE_BYTES`].
    fn check(&mut self, chunk: &[u8]) -> Result<(), ModelError> {
        // The first piece continues the open line; each later one starts after a CR or LF.
        for (piece_idx, piece) in chunk
            .split(|byte| matches!(byte, b'\n' | b'\r'))
            .enumerate()
        {
            self.line_len = match piece_idx {
                0 => self.line_len.saturating_add(piece.len()),
                _ => piece.len(),
            };
            if self.line_len > MAX_LINE_BYTES {
                return Err(ModelError::LineTooLong {
                    limit: MAX_LINE_BYTES,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
