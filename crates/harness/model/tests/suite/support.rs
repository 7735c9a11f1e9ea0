//! Servers on `127.0.0.1:0` (the mock model, canned byte streams) and stream helpers.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::body::Bytes;
use axum::response::Response;
use futures_util::StreamExt;
use gatehouse_mockmodel::RecordedRequest;
use gatehouse_model::ModelApi;
use gatehouse_model::ModelClient;
use gatehouse_model::ModelConfig;
use gatehouse_model::ModelError;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelEventStream;
use gatehouse_model::RetryPolicy;
use gatehouse_model::Timeouts;
use tokio::sync::oneshot;

/// How long any wait in these tests may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// The key the tests configure; it must reach the mock.
pub(crate) const KEY: &str = "sk-test-key-123";

/// Retries that keep tests quick.
pub(crate) fn quick_retry() -> RetryPolicy {
    RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(20), 2)
}

/// What a canned body does after its chunks.
#[derive(Clone, Copy)]
enum Tail {
    Close,
    Silent,
}

/// A server on `127.0.0.1:0`, stopped when dropped.
pub(crate) struct Server {
    /// The API base URL, ending in `/v1`.
    pub(crate) base_url: String,
    root: String,
    shutdown: Option<oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

impl Server {
    /// Starts the real mock model.
    pub(crate) async fn mock() -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let root = format!("http://{}", listener.local_addr().unwrap());
        let (shutdown, shutdown_receiver) = oneshot::channel::<()>();
        tokio::spawn(gatehouse_mockmodel::serve(listener, async move {
            let _ = shutdown_receiver.await;
        }));
        Server {
            base_url: format!("{root}/v1"),
            root,
            shutdown: Some(shutdown),
        }
    }

    /// Starts a server that answers every POST with `status` and `chunks`, each sent as its own
    /// HTTP chunk (the client sees the same splits).
    pub(crate) async fn canned(status: u16, chunks: Vec<Vec<u8>>) -> Server {
        Server::canned_with(status, chunks, Tail::Close).await
    }

    /// Like [`Server::canned`], but the body stays open and silent after the chunks.
    pub(crate) async fn canned_then_silent(chunks: Vec<Vec<u8>>) -> Server {
        Server::canned_with(200, chunks, Tail::Silent).await
    }

    async fn canned_with(status: u16, chunks: Vec<Vec<u8>>, tail: Tail) -> Server {
        let chunks = Arc::new(chunks);
        let handler = move || {
            let chunks = Arc::clone(&chunks);
            async move {
                let stream =
                    futures_util::stream::iter(chunks.as_ref().clone()).then(|chunk| async move {
                        tokio::task::yield_now().await;
                        Ok::<Bytes, std::convert::Infallible>(Bytes::from(chunk))
                    });
                let stream = match tail {
                    Tail::Close => stream.boxed(),
                    Tail::Silent => stream.chain(futures_util::stream::pending()).boxed(),
                };
                Response::builder()
                    .status(status)
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(stream))
                    .unwrap()
            }
        };
        let app = axum::Router::new()
            .route("/v1/responses", axum::routing::post(handler.clone()))
            .route("/v1/chat/completions", axum::routing::post(handler));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let root = format!("http://{}", listener.local_addr().unwrap());
        let (shutdown, shutdown_receiver) = oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = shutdown_receiver.await;
                })
                .await
        });
        Server {
            base_url: format!("{root}/v1"),
            root,
            shutdown: Some(shutdown),
        }
    }

    /// Returns what the mock recorded, read over HTTP from `GET /_mock/requests`.
    pub(crate) async fn recorded(&self) -> Vec<RecordedRequest> {
        let response =
            tokio::time::timeout(WAIT, reqwest::get(format!("{}/_mock/requests", self.root)))
                .await
                .unwrap()
                .unwrap();
        tokio::time::timeout(WAIT, response.json())
            .await
            .unwrap()
            .unwrap()
    }
}

/// Returns a client of `api` for `base_url` whose key variable holds [`KEY`].
pub(crate) fn client(
    api: ModelApi,
    base_url: &str,
    timeouts: Timeouts,
    retry: RetryPolicy,
) -> Arc<dyn ModelClient> {
    let config = ModelConfig {
        api,
        base_url: base_url.to_owned(),
        model: String::from("mock-model"),
        key_env: String::from("GATEHOUSE_TEST_MODEL_KEY"),
        timeouts,
        retry,
    };
    config
        .build_with_env(&|name| {
            assert_eq!(name, "GATEHOUSE_TEST_MODEL_KEY");
            Some(String::from(KEY))
        })
        .unwrap()
}

/// Reads a stream to its end: the events, and the error it ended with, if any. A stream must
/// yield nothing after an error.
pub(crate) async fn drain(mut stream: ModelEventStream) -> (Vec<ModelEvent>, Option<ModelError>) {
    let mut events = Vec::new();
    loop {
        match tokio::time::timeout(WAIT, stream.next()).await.unwrap() {
            None => return (events, None),
            Some(Ok(event)) => events.push(event),
            Some(Err(error)) => {
                let after = tokio::time::timeout(WAIT, stream.next()).await.unwrap();
                assert!(after.is_none(), "the stream went on after {error}");
                return (events, Some(error));
            }
        }
    }
}

/// Returns the text deltas of `events`.
pub(crate) fn deltas(events: &[ModelEvent]) -> Vec<String> {
    events
        .iter()
        .filter_map(|event| match event {
            ModelEvent::TextDelta(delta) => Some(delta.clone()),
            ModelEvent::ToolCall(_) | ModelEvent::Completed { .. } => None,
        })
        .collect()
}

/// Returns the error of a call that must fail before its stream starts.
pub(crate) fn refused(result: gatehouse_model::Result<ModelEventStream>) -> ModelError {
    match result {
        Ok(_) => panic!("the call was not refused"),
        Err(error) => error,
    }
}
