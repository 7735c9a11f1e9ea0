//! `POST /v1/media` and `GET /v1/media/{mediaId}` through the real router, with the real media
//! store in a temporary state directory.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use axum::body::Body;
use axum::body::Bytes;
use axum::http::Request;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::Response;
use futures_util::StreamExt;
use pretty_assertions::assert_eq;
use serde_json::json;
use sha2::Digest;
use tower::ServiceExt;

use crate::suite::support::FakeWorkspace;
use crate::suite::support::FetchAnswer;
use crate::suite::support::TestGateway;
use crate::suite::support::WriteAnswer;
use crate::suite::support::gateway;
use crate::suite::support::operator_request;

const MIB: usize = 1024 * 1024;

/// The default upload cap (`media_max_bytes`).
const CAP: usize = 20 * MIB;

async fn test_gateway() -> TestGateway {
    gateway(FakeWorkspace::new(
        FetchAnswer::Unavailable,
        WriteAnswer::Unavailable,
    ))
    .await
}

async fn call(gateway: &TestGateway, request: Request<Body>) -> Response {
    gateway.router.clone().oneshot(request).await.unwrap()
}

async fn body_bytes(response: Response) -> Bytes {
    axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
}

async fn json_body(response: Response) -> serde_json::Value {
    serde_json::from_slice(&body_bytes(response).await).unwrap()
}

fn upload(body: Body, content_type: Option<&str>, filename: Option<&str>) -> Request<Body> {
    let mut request = operator_request("POST", "/v1/media", body);
    if let Some(content_type) = content_type {
        request
            .headers_mut()
            .insert(header::CONTENT_TYPE, content_type.parse().unwrap());
    }
    if let Some(filename) = filename {
        request
            .headers_mut()
            .insert("x-filename", filename.parse().unwrap());
    }
    request
}

/// A body of `n_chunks` chunks of 1 MiB, streamed without `Content-Length`, that counts how
/// many chunks the server pulled.
fn streamed(n_chunks: usize, pulled: &Arc<AtomicUsize>) -> Body {
    let chunk = Bytes::from(vec![b'z'; MIB]);
    let pulled = Arc::clone(pulled);
    let chunks = futures_util::stream::iter(0..n_chunks).map(move |_| {
        pulled.fetch_add(1, Ordering::SeqCst);
        Ok::<Bytes, std::io::Error>(chunk.clone())
    });
    Body::from_stream(chunks)
}

#[tokio::test]
async fn upload_then_download_returns_identical_bytes() {
    let gateway = test_gateway().await;
    let content: Vec<u8> = (0..=255_u8).cycle().take(70_000).collect();
    let response = call(
        &gateway,
        upload(
            Body::from(content.clone()),
            Some("image/png"),
            Some("../shots/screen shot.png"),
        ),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let uploaded = json_body(response).await;
    let media_id = blake3::hash(&content).to_hex().to_string();
    assert_eq!(
        uploaded,
        json!({
            "mediaId": media_id,
            "sha256": hex::encode(sha2::Sha256::digest(&content)),
            "size": 70_000,
            "mimeType": "image/png",
        })
    );

    let response = call(
        &gateway,
        operator_request("GET", &format!("/v1/media/{media_id}"), Body::empty()),
    )
    .await;
    assert_eq!(response.status(), StatusCode::OK);
    let headers = response.headers().clone();
    assert_eq!(headers[header::CONTENT_TYPE], "image/png");
    assert_eq!(
        headers[header::CONTENT_DISPOSITION],
        "attachment; filename=\"screen_shot.png\""
    );
    assert_eq!(headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    assert_eq!(body_bytes(response).await, content);

    // The same bytes again give the same id, even streamed and with other headers.
    let shared = Bytes::from(content.clone());
    let chunks = (0..shared.len()).step_by(10_000).map(move |start| {
        let end = (start + 10_000).min(shared.len());
        Ok::<Bytes, std::io::Error>(shared.slice(start..end))
    });
    let again = call(
        &gateway,
        upload(
            Body::from_stream(futures_util::stream::iter(chunks)),
            None,
            None,
        ),
    )
    .await;
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(json_body(again).await, uploaded);

    // Uploads are audited, without content.
    let events = gateway.audit_events().await;
    let uploads: Vec<&serde_json::Value> = events
        .iter()
        .filter(|event| event["action"] == "media.upload")
        .collect();
    assert_eq!(uploads.len(), 2);
    assert_eq!(uploads[0]["actor"], "operator");
    assert_eq!(uploads[0]["outcome"], "succeeded");
    assert_eq!(
        uploads[0]["details"],
        json!({"mediaId": media_id, "size": 70_000, "mimeType": "image/png"})
    );
}

#[tokio::test]
async fn upload_defaults_to_octet_stream() {
    let gateway = test_gateway().await;
    let response = call(&gateway, upload(Body::from("raw"), None, None)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let uploaded = json_body(response).await;
    assert_eq!(uploaded["mimeType"], "application/octet-stream");
    let media_id = uploaded["mediaId"].as_str().unwrap();
    let response = call(
        &gateway,
        operator_request("GET", &format!("/v1/media/{media_id}"), Body::empty()),
    )
    .await;
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/octet-stream"
    );
    assert_eq!(
        response.headers()[header::CONTENT_DISPOSITION],
        "attachment"
    );
    assert_eq!(&body_bytes(response).await[..], b"raw");
}

#[tokio::test]
async fn upload_with_an_invalid_content_type_is_refused() {
    let gateway = test_gateway().await;
    let (status, body) = gateway
        .send(upload(Body::from("x"), Some("no-slash"), None))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["error"]["code"], "INVALID_MIME_TYPE");
}

#[tokio::test]
async fn declared_over_cap_upload_is_payload_too_large() {
    let gateway = test_gateway().await;
    let mut request = upload(Body::from("small"), Some("text/plain"), None);
    request.headers_mut().insert(
        header::CONTENT_LENGTH,
        (CAP + 1).to_string().parse().unwrap(),
    );
    let (status, body) = gateway.send(request).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        body,
        json!({"error": {
            "code": "PAYLOAD_TOO_LARGE",
            "message": format!("the upload is larger than {CAP} bytes"),
            "details": {"maxBytes": CAP},
        }})
    );
}

#[tokio::test]
async fn streamed_over_cap_upload_is_payload_too_large_without_reading_it_all() {
    let gateway = test_gateway().await;
    let pulled = Arc::new(AtomicUsize::new(0));
    let (status, body) = gateway
        .send(upload(streamed(64, &pulled), Some("text/plain"), None))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(body["error"]["code"], "PAYLOAD_TOO_LARGE");
    // The 21st MiB passes the cap; nothing after it is read.
    assert_eq!(pulled.load(Ordering::SeqCst), CAP / MIB + 1);
    let events = gateway.audit_events().await;
    assert!(
        events.iter().all(|event| event["action"] != "media.upload"),
        "{events:?}"
    );
}

#[tokio::test]
async fn upload_of_exactly_the_cap_is_accepted() {
    let gateway = test_gateway().await;
    let pulled = Arc::new(AtomicUsize::new(0));
    let (status, body) = gateway
        .send(upload(streamed(CAP / MIB, &pulled), None, None))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["size"], CAP);
}

#[tokio::test]
async fn missing_or_wrong_token_is_unauthorized() {
    let gateway = test_gateway().await;
    let media_id = "0".repeat(64);
    let requests = [
        Request::builder()
            .method("POST")
            .uri("/v1/media")
            .body(Body::from("x"))
            .unwrap(),
        Request::builder()
            .method("GET")
            .uri(format!("/v1/media/{media_id}"))
            .body(Body::empty())
            .unwrap(),
        Request::builder()
            .method("POST")
            .uri("/v1/media")
            .header(header::AUTHORIZATION, "Bearer wrong-token")
            .body(Body::from("x"))
            .unwrap(),
    ];
    for request in requests {
        let (status, body) = gateway.send(request).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
        assert_eq!(body["error"]["code"], "UNAUTHORIZED");
    }
    let events = gateway.audit_events().await;
    assert!(events.iter().all(|event| event["action"] != "media.upload"));
}

#[tokio::test]
async fn download_with_a_bad_id_is_invalid_media_id() {
    let gateway = test_gateway().await;
    let bad_ids = [
        "not-hex".to_owned(),
        "a".repeat(63),
        "a".repeat(65),
        "A".repeat(64),
        "..%2F..%2Fmeta".to_owned(),
    ];
    for media_id in bad_ids {
        let (status, body) = gateway
            .send(operator_request(
                "GET",
                &format!("/v1/media/{media_id}"),
                Body::empty(),
            ))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{media_id}");
        assert_eq!(body["error"]["code"], "INVALID_MEDIA_ID", "{media_id}");
    }
}

#[tokio::test]
async fn download_of_missing_media_is_not_found() {
    let gateway = test_gateway().await;
    let (status, body) = gateway
        .send(operator_request(
            "GET",
            &format!("/v1/media/{}", "0".repeat(64)),
            Body::empty(),
        ))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["error"]["code"], "NOT_FOUND");
}
