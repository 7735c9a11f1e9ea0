//! A minimal OTLP/HTTP trace receiver on loopback, so `gatehouse bench turn` can measure the
//! cost of exporting spans without an external collector.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

/// What the receiver has taken so far.
#[derive(Debug, Default)]
struct Counts {
    requests: AtomicU64,
    spans: AtomicU64,
}

/// A running receiver; it stops when dropped.
#[derive(Debug)]
pub(crate) struct OtlpReceiver {
    url: String,
    counts: Arc<Counts>,
    server: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    /// Starts the receiver on `127.0.0.1` at a free port.
    ///
    /// # Errors
    /// When the port cannot be bound.
    pub(crate) async fn start() -> anyhow::Result<OtlpReceiver> {
        let counts = Arc::new(Counts::default());
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(accept))
            .with_state(Arc::clone(&counts));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let server = tokio::spawn(async move {
            if let Err(error) = axum::serve(listener, app).await {
                tracing::warn!(error = %error, "the bench's OTLP receiver stopped");
            }
        });
        Ok(OtlpReceiver {
            url,
            counts,
            server,
        })
    }

    /// Returns the base URL, the value of `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// Returns the export requests and the spans received so far.
    pub(crate) fn received(&self) -> (u64, u64) {
        (
            self.counts.requests.load(Ordering::Relaxed),
            self.counts.spans.load(Ordering::Relaxed),
        )
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

/// Decodes one protobuf export and counts its spans; a body that does not decode is refused
/// with `400`, as a collector would.
async fn accept(
    axum::extract::State(counts): axum::extract::State<Arc<Counts>>,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return axum::http::StatusCode::BAD_REQUEST.into_response();
    };
    let spans: usize = request
        .resource_spans
        .iter()
        .flat_map(|resource| &resource.scope_spans)
        .map(|scope| scope.spans.len())
        .sum();
    counts.requests.fetch_add(1, Ordering::Relaxed);
    counts.spans.fetch_add(spans as u64, Ordering::Relaxed);
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}
