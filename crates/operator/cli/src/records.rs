//! Splitting a streamed HTTP body into complete records before decoding them.
//!
//! A network chunk may end in the middle of a multi-byte UTF-8 character, so the bytes are kept
//! until a whole record (an SSE block, an NDJSON line) has arrived, and only then decoded. A
//! record that is not valid UTF-8 is decoded with replacement characters: the Gateway never sends
//! one, and a display must not stop on it.

/// Bytes received so far and not yet returned as a record.
#[derive(Debug, Default)]
pub(crate) struct Records {
    pending: Vec<u8>,
}

impl Records {
    /// Appends a chunk as it came off the network.
    pub(crate) fn push(&mut self, chunk: &[u8]) {
        self.pending.extend_from_slice(chunk);
    }

    /// Removes and returns the next complete record, its `delimiter` included.
    pub(crate) fn next_record(&mut self, delimiter: &[u8]) -> Option<String> {
        let end = self
            .pending
            .windows(delimiter.len())
            .position(|window| window == delimiter)?
            + delimiter.len();
        let record: Vec<u8> = self.pending.drain(..end).collect();
        Some(match String::from_utf8(record) {
            Ok(text) => text,
            Err(err) => String::from_utf8_lossy(err.as_bytes()).into_owned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Records;

    #[test]
    fn a_character_split_across_chunks_is_decoded_whole() {
        let text = "data: {\"text\":\"h\u{e9}llo \u{1f600}\"}\n\n";
        let bytes = text.as_bytes();
        // Split inside the four-byte emoji and inside the two-byte é.
        let emoji_start = text.find('\u{1f600}').unwrap();
        let e_start = text.find('\u{e9}').unwrap();
        let mut records = Records::default();
        records.push(&bytes[..e_start + 1]);
        assert_eq!(records.next_record(b"\n\n"), None);
        records.push(&bytes[e_start + 1..emoji_start + 2]);
        assert_eq!(records.next_record(b"\n\n"), None);
        records.push(&bytes[emoji_start + 2..]);
        assert_eq!(records.next_record(b"\n\n").as_deref(), Some(text));
        assert_eq!(records.next_record(b"\n\n"), None);
    }

    #[test]
    fn records_come_out_one_at_a_time_and_a_partial_one_waits() {
        let mut records = Records::default();
        records.push(b"{\"a\":1}\n{\"b\":2}\n{\"c\"");
        assert_eq!(records.next_record(b"\n").as_deref(), Some("{\"a\":1}\n"));
        assert_eq!(records.next_record(b"\n").as_deref(), Some("{\"b\":2}\n"));
        assert_eq!(records.next_record(b"\n"), None);
        records.push(b":3}\n");
        assert_eq!(records.next_record(b"\n").as_deref(), Some("{\"c\":3}\n"));
    }

    #[test]
    fn invalid_utf8_in_a_record_is_replaced_not_fatal() {
        let mut records = Records::default();
        records.push(b"a\xffb\n");
        assert_eq!(records.next_record(b"\n").as_deref(), Some("a\u{fffd}b\n"));
    }
}
