//! The request id and the `http_request` span of every HTTP request.
//!
//! A request keeps the `X-Request-Id` it brings when that is a short token
//! ([`is_fit_request_id`]); otherwise the Gateway generates one. Every answer, errors and the
//! fallback `404` included, echoes it in `X-Request-Id`, and the request's span carries it, so
//! a log line or exported span of the request names it.

use std::time::Duration;

use axum::Router;
use axum::extract::MatchedPath;
use axum::extract::Request;
use axum::http::HeaderName;
use axum::http::HeaderValue;
use tower_http::request_id::MakeRequestId;
use tower_http::request_id::PropagateRequestIdLayer;
use tower_http::request_id::RequestId;
use tower_http::request_id::SetRequestIdLayer;
use tower_http::trace::TraceLayer;

/// The header that carries the request id, in both directions.
pub(crate) const REQUEST_ID_HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id a client may choose, in bytes.
pub(crate) const MAX_REQUEST_ID_BYTES: usize = 64;

/// Wraps `router` so every request gets a request id and an `http_request` span with its
/// method, matched route, request id and, once answered, status.
///
/// The layers wrap each route (and the fallback) of `router`, so the span sees the matched
/// route template (`/v1/sessions/{key}/messages`), never the raw path with its keys.
pub(crate) fn layer(router: Router) -> Router {
    router
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(request_span)
                .on_request(())
                .on_response(record_response)
                // A `503` of `/readyz` is an answer, not a fault; handlers log their own faults
                // with their cause, so the layer adds no error line of its own.
                .on_failure(()),
        )
        .layer(PropagateRequestIdLayer::new(REQUEST_ID_HEADER))
        .layer(SetRequestIdLayer::new(REQUEST_ID_HEADER, GenerateRequestId))
        .layer(axum::middleware::map_request(drop_unfit_request_id))
}

/// Returns true for a request id the Gateway keeps: 1 to [`MAX_REQUEST_ID_BYTES`] bytes of
/// ASCII letters, digits, `-`, `_`, `.` and `:`, so it can be logged and echoed as it came.
pub(crate) fn is_fit_request_id(value: &[u8]) -> bool {
    (1..=MAX_REQUEST_ID_BYTES).contains(&value.len())
        && value
            .iter()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b':'))
}

/// Removes an `X-Request-Id` the Gateway does not keep (too long, odd bytes, or sent twice), so
/// [`GenerateRequestId`] replaces it.
async fn drop_unfit_request_id(mut request: Request) -> Request {
    let mut values = request.headers().get_all(&REQUEST_ID_HEADER).iter();
    let fit = match (values.next(), values.next()) {
        (Some(value), None) => is_fit_request_id(value.as_bytes()),
        (None, _) => true,
        // Two ids are one too many: neither is checked, so both go and one is generated.
        (Some(_), Some(_)) => false,
    };
    if !fit {
        request.headers_mut().remove(&REQUEST_ID_HEADER);
    }
    request
}

/// Generates a request id: 32 random hex digits.
#[derive(Debug, Clone, Copy)]
struct GenerateRequestId;

impl MakeRequestId for GenerateRequestId {
    fn make_request_id<B>(&mut self, _request: &axum::http::Request<B>) -> Option<RequestId> {
        let mut bytes = [0_u8; 16];
        // Without randomness the request simply has no id; nothing else depends on it.
        getrandom::fill(&mut bytes).ok()?;
        HeaderValue::from_str(&hex::encode(bytes))
            .ok()
            .map(RequestId::new)
    }
}

fn request_span<B>(request: &axum::http::Request<B>) -> tracing::Span {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str);
    let request_id = request
        .headers()
        .get(&REQUEST_ID_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    tracing::info_span!(
        "http_request",
        method = %request.method(),
        route,
        request_id,
        actor = tracing::field::Empty,
        status = tracing::field::Empty,
    )
}

fn record_response<B>(response: &axum::http::Response<B>, latency: Duration, span: &tracing::Span) {
    let status = response.status().as_u16();
    span.record("status", status);
    tracing::debug!(
        status,
        latency_ms = u64::try_from(latency.as_millis()).unwrap_or(u64::MAX),
        "request answered"
    );
}

#[cfg(test)]
mod tests {
    use crate::http::request_trace::MAX_REQUEST_ID_BYTES;
    use crate::http::request_trace::REQUEST_ID_HEADER;
    use crate::http::request_trace::drop_unfit_request_id;
    use crate::http::request_trace::is_fit_request_id;

    #[tokio::test]
    async fn an_id_sent_twice_is_dropped_even_when_the_first_is_fit() {
        let mut request = axum::extract::Request::new(axum::body::Body::empty());
        for value in ["fit-id", "two words"] {
            request
                .headers_mut()
                .append(&REQUEST_ID_HEADER, value.parse().unwrap());
        }
        let request = drop_unfit_request_id(request).await;
        assert_eq!(
            request.headers().get_all(&REQUEST_ID_HEADER).iter().count(),
            0
        );
        let mut single = axum::extract::Request::new(axum::body::Body::empty());
        single
            .headers_mut()
            .insert(&REQUEST_ID_HEADER, "fit-id".parse().unwrap());
        let single = drop_unfit_request_id(single).await;
        assert_eq!(single.headers()[&REQUEST_ID_HEADER], "fit-id");
    }

    #[test]
    fn only_short_plain_tokens_are_kept() {
        let longest = "a".repeat(MAX_REQUEST_ID_BYTES);
        let too_long = "a".repeat(MAX_REQUEST_ID_BYTES + 1);
        let cases: [(&str, bool); 9] = [
            ("abc-123", true),
            ("0f1e2d3c4b5a69788796a5b4c3d2e1f0", true),
            ("svc:req_1.2", true),
            (&longest, true),
            ("", false),
            (&too_long, false),
            ("two words", false),
            ("quote\"", false),
            ("caf\u{e9}", false),
        ];
        for (value, expected) in cases {
            assert_eq!(is_fit_request_id(value.as_bytes()), expected, "{value:?}");
        }
    }
}
