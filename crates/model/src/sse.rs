//! An incremental Server-Sent Events parser (the WHATWG event-stream format).
//!
//! Bytes go in as they arrive, in chunks of any size; complete events come out. Lines end with LF,
//! CRLF or CR, also when the terminator is split across chunks. `event:` sets the event name,
//! `data:` lines are joined with newlines, lines starting with `:` are comments, `id:`, `retry:`
//! and unknown fields are ignored. An event is dispatched at a blank line when it has data.
//!
//! It is the workspace's one SSE reader: the model clients and `gatehouse chat` use it. Lines are
//! split on bytes and decoded whole, so a character split across chunks is never mangled.

use crate::error::ModelError;

/// The longest line the parser buffers.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, if any.
    pub name: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The parser state between chunks.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, unterminated line.
    line: Vec<u8>,
    /// The last chunk ended with CR, so a LF at the start of the next one belongs to it.
    after_cr: bool,
    /// Nothing was read yet (a leading byte-order mark is skipped).
    started: bool,
    name: Option<String>,
    data: Option<String>,
    /// Events parsed and not yet taken.
    ready: std::collections::VecDeque<SseEvent>,
}

impl SseParser {
    /// Feeds the next chunk of bytes.
    ///
    /// # Errors
    ///
    /// Returns [`ModelError::LineTooLong`] when a line grows past [`MAX_LINE_BYTES`].
    pub fn push(&mut self, mut chunk: &[u8]) -> Result<(), ModelError> {
        if !self.started && !chunk.is_empty() {
            self.started = true;
            if let Some(rest) = chunk.strip_prefix("\u{feff}".as_bytes()) {
                chunk = rest;
            }
        }
        for &byte in chunk {
            let after_cr = std::mem::replace(&mut self.after_cr, false);
            match byte {
                b'\n' if after_cr => {}
                b'\n' => self.end_line(),
                b'\r' => {
                    self.after_cr = true;
                    self.end_line();
                }
                _ => {
                    if self.line.len() >= MAX_LINE_BYTES {
                        return Err(ModelError::LineTooLong {
                            limit: MAX_LINE_BYTES,
                        });
                    }
                    self.line.push(byte);
                }
            }
        }
        Ok(())
    }

    /// Returns the next complete event, if one is ready.
    pub fn next_event(&mut self) -> Option<SseEvent> {
        self.ready.pop_front()
    }

    /// Ends the input: a last line without terminator is processed, and an event that lacks only
    /// its blank line is dispatched (lenient: some servers close right after `data: [DONE]`).
    pub fn finish(&mut self) {
        if !self.line.is_empty() {
            self.end_line();
        }
        self.dispatch();
    }

    fn end_line(&mut self) {
        let line = std::mem::take(&mut self.line);
        if line.is_empty() {
            self.dispatch();
            return;
        }
        let line = String::from_utf8_lossy(&line);
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.name = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            _ => {}
        }
    }

    fn dispatch(&mut self) {
        let name = self.name.take();
        if let Some(data) = self.data.take() {
            self.ready.push_back(SseEvent { name, data });
        }
    }
}

#[cfg(test)]
#[path = "sse_tests.rs"]
mod tests;
