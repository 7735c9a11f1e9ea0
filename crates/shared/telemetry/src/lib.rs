//! W3C trace context (`traceparent`) for the spans of Gatehouse's processes.
//!
//! One turn is one trace: the Gateway writes the `traceparent` of its invoke span into the
//! `node.invoke.request` envelope, the node host makes it the parent of its own invoke span and
//! hands that span's `traceparent` to the worker with the turn, and the worker parents its turn
//! span on it.
//!
//! The trace context lives in the OpenTelemetry layer of the process's `tracing` subscriber,
//! which the binary installs only when it exports traces (`OTEL_EXPORTER_OTLP_ENDPOINT`).
//! Without that layer a span has no trace context: [`traceparent`] returns `None` (the envelope
//! then carries none) and [`set_remote_parent`] does nothing, so an untraced process costs no
//! more than its `tracing` spans.
//!
//! ```
//! let span = tracing::info_span!("node_invoke");
//! gatehouse_telemetry::set_remote_parent(&span, None);
//! assert_eq!(gatehouse_telemetry::traceparent(&span), None);
//! ```

#![deny(missing_docs)]

use std::collections::HashMap;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header (and carrier key) of the trace context.
pub const TRACEPARENT: &str = "traceparent";

/// Returns the W3C `traceparent` of `span`, or `None` when the span has no valid trace context
/// (no OpenTelemetry layer is installed, or the span is disabled).
pub fn traceparent(span: &tracing::Span) -> Option<String> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut carrier = HashMap::new();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.remove(TRACEPARENT)
}

/// Makes the remote span that `traceparent` names the parent of `span`, so `span` joins that
/// trace. Does nothing when `traceparent` is `None` or not a valid W3C value (a peer's garbage
/// starts a new trace instead of failing anything), or when no OpenTelemetry layer is installed.
///
/// Call it before the span is first entered: the parent of a span that has started is fixed.
pub fn set_remote_parent(span: &tracing::Span, traceparent: Option<&str>) {
    let Some(traceparent) = traceparent else {
        return;
    };
    let carrier = HashMap::from([(TRACEPARENT.to_owned(), traceparent.to_owned())]);
    let context = TraceContextPropagator::new().extract(&carrier);
    if context.span().span_context().is_valid() {
        // Fails only when the subscriber has no OpenTelemetry layer, which is the no-op case.
        let _ = span.set_parent(context);
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TracerProvider;
    use pretty_assertions::assert_eq;
    use tracing_subscriber::layer::SubscriberExt;

    use crate::set_remote_parent;
    use crate::traceparent;

    fn trace_id(traceparent: &str) -> &str {
        traceparent.split('-').nth(1).unwrap_or_default()
    }

    #[test]
    fn a_span_with_a_remote_parent_joins_its_trace() {
        let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
        let subscriber = tracing_subscriber::registry()
            .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("test")));
        tracing::subscriber::with_default(subscriber, || {
            let gateway = tracing::info_span!("gateway");
            let sent = traceparent(&gateway).expect("an exported span has a traceparent");
            let node = tracing::info_span!("node");
            set_remote_parent(&node, Some(&sent));
            let received = traceparent(&node).expect("the node span has a traceparent");
            assert_eq!(trace_id(&received), trace_id(&sent));
            assert!(
                received != sent,
                "the node span is a new span of the same trace"
            );

            let fresh = tracing::info_span!("fresh");
            set_remote_parent(&fresh, Some("not-a-traceparent"));
            let own = traceparent(&fresh).expect("a fresh span still has a context");
            assert!(trace_id(&own) != trace_id(&sent));
        });
    }

    #[test]
    fn without_an_opentelemetry_layer_nothing_is_carried() {
        let subscriber = tracing_subscriber::registry();
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("plain");
            set_remote_parent(
                &span,
                Some("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            );
            assert_eq!(traceparent(&span), None);
        });
    }
}
