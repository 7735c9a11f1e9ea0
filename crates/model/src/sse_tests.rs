use pretty_assertions::assert_eq;

use crate::sse::SseEvent;
use crate::sse::SseParser;

fn event(name: Option<&str>, data: &str) -> SseEvent {
    SseEvent {
        name: name.map(str::to_owned),
        data: data.to_owned(),
    }
}

fn parse_chunks(chunks: &[&[u8]]) -> Vec<SseEvent> {
    let mut parser = SseParser::default();
    let mut events = Vec::new();
    for chunk in chunks {
        parser.push(chunk).unwrap();
        while let Some(event) = parser.next_event() {
            events.push(event);
        }
    }
    parser.finish();
    while let Some(event) = parser.next_event() {
        events.push(event);
    }
    events
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
    let mut parser = SseParser::default();
    let chunk = vec![b'x'; 1024 * 1024];
    let mut result = Ok(());
    for _ in 0..=16 {
        result = parser.push(&chunk);
        if result.is_err() {
            break;
        }
    }
    assert_eq!(
        result.map_err(|error| error.code()),
        Err(gatehouse_protocol::error::ErrorCode::ModelBadResponse)
    );
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
