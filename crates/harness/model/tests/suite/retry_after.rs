//! `Retry-After` on 429 and 503, against a real local HTTP server that refuses the first
//! request and then streams a recorded Responses body.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::response::Response;
use gatehouse_model::ModelApi;
use gatehouse_model::ModelRequest;
use gatehouse_model::RetryPolicy;
use gatehouse_model::Timeouts;
use pretty_assertions::assert_eq;
use tokio::sync::oneshot;

use crate::suite::support::WAIT;
use crate::suite::support::client;
use crate::suite::support::drain;

const RESPONSES_TEXT_AND_CALL: &str = include_str!("../fixtures/responses_text_and_call.sse");

/// A pause no test may ever wait.
const FOREVER: Duration = Duration::from_secs(3600);

/// A server whose first POST is answered with `status` and `Retry-After: retry_after`, and
/// every later one with the recorded stream. Returns its base URL, the request counter and the
/// guard that stops it.
async fn refusing_once(
    status: u16,
    retry_after: &'static str,
) -> (String, Arc<AtomicUsize>, oneshot::Sender<()>) {
    let n_requests = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&n_requests);
    let handler = move || {
        let counter = Arc::clone(&counter);
        async move {
            if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                return Response::builder()
                    .status(status)
                    .header("retry-after", retry_after)
                    .header("content-type", "application/json")
                    .body(Body::from(r#"{"error":{"message":"slow down"}}"#))
                    .unwrap();
            }
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from(RESPONSES_TEXT_AND_CALL))
                .unwrap()
        }
    };
    let app = axum::Router::new().route("/v1/responses", axum::routing::post(handler));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
    let (shutdown, stopped) = oneshot::channel::<()>();
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await
    });
    (base_url, n_requests, shutdown)
}

/// Streams one request with `retry` against a server refusing once, and returns how many
/// requests it served; fails the test if the client waits longer than [`WAIT`].
async fn requests_until_success(
    status: u16,
    retry_after: &'static str,
    retry: RetryPolicy,
) -> usize {
    let (base_url, n_requests, _shutdown) = refusing_once(status, retry_after).await;
    let client = client(ModelApi::Responses, &base_url, Timeouts::default(), retry);
    let stream = tokio::time::timeout(WAIT, client.stream(&ModelRequest::default()))
        .await
        .expect("the client waited longer than the test allows")
        .unwrap();
    let (events, error) = drain(stream).await;
    assert!(error.is_none(), "{error:?}");
    assert!(!events.is_empty());
    n_requests.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_retry_after_of_429_and_503_replaces_the_clients_own_pause() {
    for status in [429, 503] {
        // The policy's own pause is an hour: only the server's zero lets the retry happen now.
        let retry = RetryPolicy::new(FOREVER, FOREVER, 1);
        assert_eq!(
            requests_until_success(status, "0", retry).await,
            2,
            "{status}"
        );
    }
}

#[tokio::test]
async fn a_long_retry_after_is_cut_to_the_policys_maximum() {
    let retry = RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(10), 1)
        .with_max_retry_after(Duration::from_millis(20));
    assert_eq!(requests_until_success(429, "3600", retry).await, 2);
}

#[tokio::test]
async fn a_retry_after_on_other_statuses_is_ignored() {
    // A 500 is retried after the policy's pause; its Retry-After of an hour (cut to the default
    // 30 s maximum, longer than the test allows) must not be honoured.
    let retry = RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(10), 1);
    assert_eq!(requests_until_success(500, "3600", retry).await, 2);
}
