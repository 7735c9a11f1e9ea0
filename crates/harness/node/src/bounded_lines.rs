//! A line decoder that skips an over-long line and goes on reading.
//!
//! `tokio_util`'s `LinesCodec` with a maximum length discards the rest of a line past it, but
//! `FramedRead` ends the stream after any decoder error, so a reader that must survive one
//! over-long line (the worker's stdin) uses [`BoundedLines`], which reports it as an item.

use tokio_util::bytes::BytesMut;
use tokio_util::codec::AnyDelimiterCodec;
use tokio_util::codec::AnyDelimiterCodecError;
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
    codec: Codec,
}

/// What a [`BoundedLines`] decodes with.
#[derive(Debug)]
enum Codec {
    /// UTF-8 lines; invalid UTF-8 is an error that ends the stream.
    Strict(LinesCodec),
    /// Lines of any bytes, invalid UTF-8 replaced by U+FFFD: for diagnostics such as a child's
    /// stderr, which must be drained whatever it writes.
    Lossy(AnyDelimiterCodec),
}

impl BoundedLines {
    /// Returns a decoder of UTF-8 lines of at most `max_length` bytes, newline excluded.
    pub(crate) fn new(max_length: usize) -> Self {
        Self {
            codec: Codec::Strict(LinesCodec::new_with_max_length(max_length)),
        }
    }

    /// Returns a decoder of lines of at most `max_length` bytes, newline excluded, that
    /// replaces invalid UTF-8 instead of failing, so the stream only ends at end of input.
    pub(crate) fn lossy(max_length: usize) -> Self {
        Self {
            codec: Codec::Lossy(AnyDelimiterCodec::new_with_max_length(
                b"\n".to_vec(),
                Vec::new(),
                max_length,
            )),
        }
    }

    fn decode_with(
        &mut self,
        buf: &mut BytesMut,
        eof: bool,
    ) -> Result<Option<BoundedLine>, std::io::Error> {
        match &mut self.codec {
            Codec::Strict(codec) => item(match eof {
                true => codec.decode_eof(buf),
                false => codec.decode(buf),
            }),
            Codec::Lossy(codec) => {
                let decoded = match eof {
                    true => codec.decode_eof(buf),
                    false => codec.decode(buf),
                };
                match decoded {
                    Ok(chunk) => Ok(chunk.map(|bytes| {
                        let text = String::from_utf8_lossy(&bytes);
                        BoundedLine::Line(text.strip_suffix('\r').unwrap_or(&text).to_owned())
                    })),
                    Err(AnyDelimiterCodecError::MaxChunkLengthExceeded) => {
                        Ok(Some(BoundedLine::TooLong))
                    }
                    Err(AnyDelimiterCodecError::Io(error)) => Err(error),
                }
            }
        }
    }
}

impl Decoder for BoundedLines {
    type Item = BoundedLine;
    type Error = std::io::Error;

    fn decode(&mut self, buf: &mut BytesMut) -> Result<Option<BoundedLine>, std::io::Error> {
        self.decode_with(buf, false)
    }

    fn decode_eof(&mut self, buf: &mut BytesMut) -> Result<Option<BoundedLine>, std::io::Error> {
        self.decode_with(buf, true)
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

    #[test]
    fn a_lossy_decoder_reads_past_invalid_utf8_and_over_long_lines() {
        let mut decoder = BoundedLines::lossy(4);
        let mut buf = tokio_util::bytes::BytesMut::from(&b"a\xffb\r\nabcdefgh\nok\n"[..]);
        let mut items = Vec::new();
        while let Some(item) = decoder.decode(&mut buf).unwrap() {
            items.push(item);
        }
        buf.extend_from_slice(b"end");
        while let Some(item) = decoder.decode_eof(&mut buf).unwrap() {
            items.push(item);
        }
        assert_eq!(
            items,
            vec![
                BoundedLine::Line(String::from("a\u{fffd}b")),
                BoundedLine::TooLong,
                BoundedLine::Line(String::from("ok")),
                BoundedLine::Line(String::from("end")),
            ]
        );
    }
}
