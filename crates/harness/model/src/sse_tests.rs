use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use pretty_assertions::assert_eq;

use crate::error::ModelError;
use crate::sse::MAX_LINE_BYTES;
use crate::sse::SseEvent;
use crate::sse::decode;

fn event(name: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        name: name.map(str::to_owned),
        data: data.to_owned(),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Returns every item of the body made of `chunks`.
fn decode_chunks(chunks: Vec<Bytes>) -> Vec<Result<SseEvent, ModelError>> {
    let body = futures_util::stream::iter(chunks.into_iter().map(Ok));
    runtime().block_on(decode(body).collect())
}

fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let chunks = chunks
        .iter()
        .map(|chunk| Bytes::copy_from_slice(chunk))
        .collect();
    decode_chunks(chunks)
        .into_iter()
        .map(Result::unwrap)
        .collect()
}

#[test]
fn parses_fields_comments_and_multi_line_data() {
    let input = b"\xef\xbb\xbf: keepalive\n\nevent: one\ndata: {\"a\":\ndata:1}\nid: 7\nretry: 10\n\ndata\n\ndata: x\nunknown: y\n\n: only a comment\n\nevent: no data\n\n";
    assert_eq!(
        parse_chunks(&[input]),
        [
            event(Some("one"), "{\"a\":\n1}"),
            event(None, ""),
            event(None, "x"),
        ]
    );
}

#[test]
fn accepts_crlf_and_cr_line_ends() {
    let expected = [event(Some("e"), "1"), event(None, "2")];
    assert_eq!(
        parse_chunks(&[b"event: e\r\ndata: 1\r\n\r\ndata: 2\r\n\r\n"]),
        expected
    );
    assert_eq!(
        parse_chunks(&[b"event: e\rdata: 1\r\rdata: 2\r\r"]),
        expected
    );
}

#[test]
fn any_split_of_the_input_gives_the_same_events() {
    let input: &[u8] =
        "event: a\r\ndata: {\"t\":\"é\"}\r\n\r\n: c\r\ndata: [DONE]\r\n\r\n".as_bytes();
    let whole = parse_chunks(&[input]);
    assert_eq!(
        whole,
        [event(Some("a"), "{\"t\":\"é\"}"), event(None, "[DONE]")]
    );
    for split_idx in 0..=input.len() {
        let (head, tail) = input.split_at(split_idx);
        assert_eq!(parse_chunks(&[head, tail]), whole, "split at {split_idx}");
    }
    let bytes: Vec<&[u8]> = input.chunks(1).collect();
    assert_eq!(parse_chunks(&bytes), whole);
}

#[test]
fn finish_dispatches_an_event_without_its_blank_line() {
    assert_eq!(parse_chunks(&[b"data: [DONE]"]), [event(None, "[DONE]")]);
    assert_eq!(parse_chunks(&[b"data: [DONE]\n"]), [event(None, "[DONE]")]);
    assert_eq!(parse_chunks(&[b": comment"]), []);
}

#[test]
fn refuses_a_line_that_never_ends() {
    let chunk = Bytes::from(vec![b'x'; 1024 * 1024]);
    let items = decode_chunks(vec![chunk; 17]);
    let codes: Vec<_> = items
        .iter()
        .map(|item| item.as_ref().err().map(ModelError::code))
        .collect();
    assert_eq!(
        codes,
        [Some(gatehouse_protocol::error::ErrorCode::ModelBadResponse)]
    );
    assert!(
        matches!(
            items[0],
            Err(ModelError::LineTooLong {
                limit: MAX_LINE_BYTES
            })
        ),
        "{items:?}"
    );
}

#[test]
fn a_line_of_the_limit_is_read_and_one_byte_more_is_refused() {
    let data = "x".repeat(MAX_LINE_BYTES - "data: ".len());
    let line = format!("data: {data}");
    let events = decode_chunks(vec![Bytes::from(format!("{line}\r\n\r\n"))]);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].as_ref().unwrap().data.len(), data.len());
    // The limit holds for a line in the middle of a chunk (the chunk is refused whole), and for
    // one split across chunks.
    let too_long = format!("{line}x");
    let items = decode_chunks(vec![Bytes::from(format!("data: a\n\n{too_long}\n\n"))]);
    assert!(
        matches!(items[..], [Err(ModelError::LineTooLong { .. })]),
        "{items:?}"
    );
    let (head, tail) = too_long.split_at(10);
    let items = decode_chunks(vec![
        Bytes::from(head.to_owned()),
        Bytes::from(tail.to_owned()),
    ]);
    assert!(
        matches!(items[..], [Err(ModelError::LineTooLong { .. })]),
        "{items:?}"
    );
}

#[test]
fn an_event_comes_out_when_its_blank_line_arrives() {
    runtime().block_on(async {
        for input in ["event: e\ndata: 1\n\n", "data: 1\r\n\r\n", "data: 1\r\r"] {
            let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
            let body = channel_body(receiver);
            let mut events = decode(body);
            sender.send(Ok(Bytes::from(input))).unwrap();
            // The body stays open: the event must not wait for the next chunk or the end.
            let first = tokio::time::timeout(Duration::from_secs(5), events.next())
                .await
                .unwrap_or_else(|_| panic!("no event before the next chunk for {input:?}"));
            assert_eq!(first.unwrap().unwrap().data, "1");
            drop(sender);
            assert!(events.next().await.is_none());
        }
    });
}

#[test]
fn a_non_utf8_value_is_a_bad_response() {
    let items = decode_chunks(vec![Bytes::from_static(b"data: \xff\n\n")]);
    assert!(
        matches!(items[..], [Err(ModelError::InvalidSse { .. })]),
        "{items:?}"
    );
    assert_eq!(
        items[0].as_ref().err().map(ModelError::code),
        Some(gatehouse_protocol::error::ErrorCode::ModelBadResponse)
    );
}

/// Returns the chunks sent on `receiver` as a body stream.
fn channel_body(
    mut receiver: tokio::sync::mpsc::UnboundedReceiver<reqwest::Result<Bytes>>,
) -> impl futures_util::Stream<Item = reqwest::Result<Bytes>> + Send + 'static {
    futures_util::stream::poll_fn(move |context| receiver.poll_recv(context))
}

#[test]
fn a_character_split_across_chunks_is_decoded_whole() {
    let text = "event: message.delta\ndata: {\"text\":\"h\u{e9}llo \u{1f600}\"}\n\n".as_bytes();
    // Cut inside the two bytes of the e-acute and inside the four bytes of the emoji.
    let e_acute = text.iter().position(|byte| *byte == 0xc3).unwrap();
    let emoji = text.iter().position(|byte| *byte == 0xf0).unwrap();
    let chunks: Vec<&[u8]> = vec![
        &text[..=e_acute],
        &text[e_acute + 1..emoji + 2],
        &text[emoji + 2..],
    ];
    assert_eq!(
        parse_chunks(&chunks),
        vec![event(
            Some("message.delta"),
            "{\"text\":\"h\u{e9}llo \u{1f600}\"}"
        )]
    );
}
