//! A line decoder that skips an over-long line and goes on reading.
//!
//! `tokio_util`'s `LinesCodec` with a maximum length discards the rest of a line past it, but
//! `FramedRead` ends the stream after any decoder error, so a reader that must survive one
//! over-long line (the worker's stdin) uses [`BoundedLines`], which reports it as an item.

use tokio_util::bytes::BytesMut;
use tokio_util::codec::Decoder;
use tokio_util::codec::LinesCodec;
use tokio_util::codec::LinesCodecError;

/// One item of a [`BoundedLines`] stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BoundedLine {
    /// A complete line, without its newline.
    Line(String),
    /// A line longer than the bound; its bytes are dropped as they arrive, up to its newline.
    TooLong,
}

/// `LinesCodec` with a maximum length, reporting an over-long line as [`BoundedLine::TooLong`]
/// instead of an error, so the stream goes on with the next line.
#[derive(Debug)]
pub(crate) struct BoundedLines {
    codec: LinesCodec,
}

impl BoundedLines {
    /// Returns a decoder of lines of at most `max_length` bytes, newline excluded.
    pub(crate) fn new(max_length: usize) -> Self {
        Self {
            codec: LinesCodec::new_with_max_length(max_length),
        }
    }
}

impl Decoder for BoundedLines {
    type Item = BoundedLine;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<BoundedLine>, std::io::Error> {
        item(self.codec.decode(buf))
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<BoundedLine>, std::io::Error> {
        item(self.codec.decode_eof(buf))
    }
}

fn item(
    decoded: Result<Option<String>, LinesCodecError>,
) -> Result<Option<BoundedLine>, std::io::Error> {
    match decoded {
        Ok(line) => Ok(line.map(BoundedLine::Line)),
        Err(LinesCodecError::MaxLineLengthExceeded) => Ok(Some(BoundedLine::TooLong)),
        Err(LinesCodecError::Io(error)) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use tokio_util::codec::Decoder;

    use crate::bounded_lines::BoundedLine;
    use crate::bounded_lines::BoundedLines;

    #[test]
    fn an_over_long_line_is_reported_once_and_the_next_line_is_read() {
        let mut decoder = BoundedLines::new(4);
        let mut buf = tokio_util::bytes::BytesMut::from(&b"abcdefgh"[..]);
        assert_eq!(
            decoder.decode(&mut buf).unwrap(),
            Some(BoundedLine::TooLong)
        );
        buf.extend_from_slice(b"ijk\nok\n");
        let mut items = Vec::new();
        while let Some(item) = decoder.decode(&mut buf).unwrap() {
            items.push(item);
        }
        assert_eq!(items, vec![BoundedLine::Line(String::from("ok"))]);
    }
}
