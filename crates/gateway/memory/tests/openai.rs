//! The `openai-compatible` embedder against a small local HTTP server speaking the embeddings
//! API: the request it sends, the key it presents, and its failures.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::io::BufRead;
use std::io::BufReader;
use std::io::Read;
use std::io::Write;

use gatehouse_memory::embed::EmbedError;
use gatehouse_memory::embed::Embedder;
use gatehouse_memory::embed::OpenAiEmbedder;

/// Serves one request with `status` and `body`, and returns the request head and body.
fn serve_once(
    status: &'static str,
    body: String,
) -> (String, std::thread::JoinHandle<(String, String)>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut reader = BufReader::new(stream.try_clone().unwrap());
        let mut head = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().unwrap();
            }
            if line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let mut request = vec![0; length];
        reader.read_exact(&mut request).unwrap();
        let mut stream = stream;
        write!(
            stream,
            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        (head, String::from_utf8(request).unwrap())
    });
    (url, handle)
}

#[tokio::test]
async fn vectors_come_back_in_input_order_normalised_with_the_gateway_key() {
    let body = serde_json::json!({"data": [
        {"index": 1, "embedding": [0.0, 2.0, 0.0]},
        {"index": 0, "embedding": [3.0, 0.0, 4.0]}
    ]})
    .to_string();
    let (url, server) = serve_once("200 OK", body);
    let embedder = OpenAiEmbedder::new(
        &url,
        "embed-small",
        Some(String::from("embedding-key-1")),
        3,
    );
    let vectors = embedder
        .embed(&[String::from("first"), String::from("second")])
        .await
        .unwrap();
    assert_eq!(vectors, vec![vec![0.6, 0.0, 0.8], vec![0.0, 1.0, 0.0]]);
    let (head, request) = server.join().unwrap();
    assert!(head.starts_with("POST /v1/embeddings "), "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("authorization: bearer embedding-key-1")
    );
    let request: serde_json::Value = serde_json::from_str(&request).unwrap();
    assert_eq!(
        request,
        serde_json::json!({"model": "embed-small", "input": ["first", "second"]})
    );
    // The key is never in Debug output.
    assert!(!format!("{embedder:?}").contains("embedding-key-1"));
}

#[tokio::test]
async fn failures_are_remote_errors() {
    let (url, server) = serve_once("500 Internal Server Error", String::from("{}"));
    let embedder = OpenAiEmbedder::new(&url, "embed-small", None, 3);
    let error = embedder.embed(&[String::from("x")]).await.unwrap_err();
    assert!(
        matches!(error, EmbedError::Remote(ref message) if message.contains("500")),
        "{error}"
    );
    server.join().unwrap();
    let (url, server) = serve_once(
        "200 OK",
        serde_json::json!({"data": [{"index": 0, "embedding": [1.0]}]}).to_string(),
    );
    let wrong_size = OpenAiEmbedder::new(&url, "embed-small", None, 3);
    assert!(wrong_size.embed(&[String::from("x")]).await.is_err());
    server.join().unwrap();
}
