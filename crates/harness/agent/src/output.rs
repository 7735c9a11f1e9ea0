//! Bounded text: truncation markers and a head-and-tail byte buffer for process output.

use std::collections::VecDeque;

/// Returns the marker put where `n_more` units (chars or bytes, named by `unit`) were cut.
pub(crate) fn truncation_marker(n_more: usize, unit: &str) -> String {
    format!("[…truncated: {n_more} more {unit}]")
}

/// Returns `text` cut to at most `max_chars` characters, and the number of characters cut.
pub(crate) fn cut_chars(text: &str, max_chars: usize) -> (&str, usize) {
    match text.char_indices().nth(max_chars) {
        None => (text, 0),
        Some((byte_idx, _)) => {
            let kept = &text[..byte_idx];
            (kept, text.chars().count() - max_chars)
        }
    }
}

/// Returns `text` cut to at most `max_bytes` bytes on a character boundary, followed by a marker
/// when something was cut.
pub(crate) fn cap_bytes(mut text: String, max_bytes: usize) -> String {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let n_more = text.len() - end;
    text.truncate(end);
    text.push('\n');
    text.push_str(&truncation_marker(n_more, "bytes"));
    text
}

/// A byte buffer that keeps the first `head_cap` and the last `tail_cap` bytes of a stream and
/// counts what fell in between.
#[derive(Debug)]
pub(crate) struct HeadTail {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    n_dropped: usize,
}

impl HeadTail {
    /// Returns an empty buffer that holds at most `cap` bytes, half head and half tail.
    pub(crate) fn new(cap: usize) -> HeadTail {
        let head_cap = cap / 2;
        HeadTail {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap,
            tail_cap: cap - head_cap,
            n_dropped: 0,
        }
    }

    /// Appends `bytes`.
    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < self.head_cap {
            let n_head = (self.head_cap - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n_head]);
            bytes = &bytes[n_head..];
        }
        self.tail.extend(bytes);
        if self.tail.len() > self.tail_cap {
            let n_over = self.tail.len() - self.tail_cap;
            self.tail.drain(..n_over);
            self.n_dropped += n_over;
        }
    }

    /// Returns the text held (invalid UTF-8 replaced), with a marker where bytes were dropped, and
    /// empties the buffer.
    pub(crate) fn take(&mut self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.n_dropped > 0 {
            if !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&truncation_marker(self.n_dropped, "bytes"));
            text.push('\n');
        }
        let tail: Vec<u8> = self.tail.drain(..).collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        self.head.clear();
        self.n_dropped = 0;
        text
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use crate::output::HeadTail;
    use crate::output::cap_bytes;
    use crate::output::cut_chars;

    #[test]
    fn head_tail_keeps_both_ends() {
        let mut buffer = HeadTail::new(8);
        buffer.push(b"0123");
        buffer.push(b"456789ab");
        assert_eq!(buffer.take(), "0123\n[…truncated: 4 more bytes]\n89ab");
        assert_eq!(buffer.take(), "");
        buffer.push(b"xy");
        assert_eq!(buffer.take(), "xy");
    }

    #[test]
    fn cuts_on_char_boundaries() {
        assert_eq!(cut_chars("héllo", 2), ("hé", 3));
        assert_eq!(cut_chars("hé", 2), ("hé", 0));
        assert_eq!(
            cap_bytes(String::from("éé"), 3),
            "é\n[…truncated: 2 more bytes]"
        );
        assert_eq!(cap_bytes(String::from("ab"), 3), "ab");
    }
}
