//! `/metrics`: every metric family of the Gateway, named once (with its help text) in
//! [`GatewayMetrics::new`], in one `prometheus-client` registry owned by the Gateway state.
//!
//! Instruments are recorded where things happen: the turn engine owns its [`TurnMetrics`], the
//! node registry its [`LinkMetrics`] (invokes and handshake refusals), both defined below them
//! in `crate::instruments`, and [`GatewayMetrics`] the HTTP, event-stream and sampled families.
//! The registry holds clones of them (each instrument is a shared handle), so recording never
//! goes through the registry.
//! Figures that are a state rather than an event (connected nodes, queued turns, the memory
//! index, stored bytes) are sampled when `/metrics` is read; the worker figures of each node are
//! the last `node.report` it sent, collected from the connected nodes at each scrape, so a node
//! that disconnects drops its series.
//!
//! Every label value comes from a bounded set: route templates (never raw paths), the Gateway's
//! own command names and error codes, outcome classes, and the device ids of connected nodes.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;

use axum::extract::MatchedPath;
use axum::extract::Request;
use axum::extract::State;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use gatehouse_protocol::error::ErrorCode;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::EncodeMetric;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::GatewayState;
use crate::instruments::ChannelMetrics;
use crate::instruments::LatencyFamily;
use crate::instruments::TurnMetrics;
use crate::instruments::latency_family;
use crate::link::registry::NodeRegistry;

/// The `Content-Type` of the answer: the Prometheus text format, version 0.0.4.
pub(crate) const CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;

/// The `route` label of a request that matched no route (the fallback's `404`).
pub(crate) const UNMATCHED_ROUTE: &str = "unmatched";

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HttpLabels {
    method: &'static str,
    route: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabels {
    code: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct NodeLabels {
    node: String,
}

/// How long a scrape reuses the figures it read from the store and the memory index (queued
/// turns, checkpoint bytes, memory files and chunks) before it reads them again: 5 s.
///
/// `/metrics` needs no token, so reading SQLite at every scrape would let anyone who reaches
/// the port load the store at will; with the cache, scrapes read the store at most once per
/// interval, and once more after each change of the turn queue (admission, claim, end), which
/// keeps `gatehouse_turns_queued` current and costs at most one read per turn transition, a
/// write that an operator or a turn caused. Figures held in memory (sessions, connections, the
/// sync lag, the media store's counted bytes, the node reports) are read at every scrape.
pub const DEFAULT_METRICS_REFRESH_INTERVAL: Duration = Duration::from_secs(5);

/// Every metric family of the Gateway, in one registry.
#[derive(Debug)]
pub(crate) struct GatewayMetrics {
    registry: Registry,
    http_requests: Family<HttpLabels, Counter>,
    http_duration: LatencyFamily<HttpLabels>,
    sse_subscribers: Gauge,
    sse_dropped: Family<CodeLabels, Counter>,
    active_sessions: Gauge,
    queued_turns: Gauge,
    max_concurrent_turns: Gauge,
    node_connections: Gauge,
    memory_files: Gauge,
    memory_chunks: Gauge,
    memory_sync_lag: Gauge<f64, AtomicU64>,
    media_bytes: Gauge,
    checkpoint_bytes: Gauge,
    /// Gateway replicas with a live lease on the store.
    replicas_live: Gauge,
    /// Nodes linked to any live replica.
    cluster_nodes: Gauge,
    /// Worker capacity over every linked node, as their holders recorded their reports.
    cluster_capacity: Gauge,
    /// Worker slots in use over every linked node.
    cluster_slots: Gauge,
    /// Reads of the store's and the memory index's figures, so a test (and an operator) can
    /// see that scrapes reuse them.
    samplings: Counter,
    queue_changes: Arc<AtomicU64>,
    /// When those figures were last read; held while they are read, so concurrent scrapes of
    /// stale figures read them once.
    sampled: tokio::sync::Mutex<SampleCache>,
}

/// When the figures a scrape reads from the store and the memory index were last read, and
/// whether they may be reused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SampleCache {
    refresh_interval: Duration,
    /// The instant of the last read and the queue generation it saw.
    last: Option<(Instant, u64)>,
}

impl SampleCache {
    /// Returns a cache that keeps a read for `refresh_interval` (zero: never).
    pub(crate) fn new(refresh_interval: Duration) -> Self {
        Self {
            refresh_interval,
            last: None,
        }
    }

    /// Returns whether the last read may be reused at `now`, with the turn queue at
    /// `queue_generation`: it is younger than the interval and the queue did not change since.
    pub(crate) fn is_fresh(&self, now: Instant, queue_generation: u64) -> bool {
        self.last.is_some_and(|(read_at, generation)| {
            generation == queue_generation
                && now.saturating_duration_since(read_at) < self.refresh_interval
        })
    }

    /// Records a read at `now` that saw the turn queue at `queue_generation`.
    pub(crate) fn record(&mut self, now: Instant, queue_generation: u64) {
        self.last = Some((now, queue_generation));
    }
}

impl GatewayMetrics {
    /// Returns the registry with every family: the instruments of `turns` and of `nodes`,
    /// the worker figures `nodes` keeps from each node's reports, and the Gateway's own.
    ///
    /// The figures read from the store and the memory index are reused for
    /// `refresh_interval` (see [`DEFAULT_METRICS_REFRESH_INTERVAL`]).
    pub(crate) fn new(
        turns: &TurnMetrics,
        nodes: &Arc<NodeRegistry>,
        channels: &ChannelMetrics,
        refresh_interval: Duration,
    ) -> Self {
        let mut metrics = Self {
            registry: Registry::default(),
            http_requests: Family::default(),
            http_duration: latency_family(),
            sse_subscribers: Gauge::default(),
            sse_dropped: Family::default(),
            active_sessions: Gauge::default(),
            queued_turns: Gauge::default(),
            max_concurrent_turns: Gauge::default(),
            node_connections: Gauge::default(),
            memory_files: Gauge::default(),
            memory_chunks: Gauge::default(),
            memory_sync_lag: Gauge::default(),
            media_bytes: Gauge::default(),
            checkpoint_bytes: Gauge::default(),
            replicas_live: Gauge::default(),
            cluster_nodes: Gauge::default(),
            cluster_capacity: Gauge::default(),
            cluster_slots: Gauge::default(),
            samplings: Counter::default(),
            queue_changes: Arc::clone(&turns.queue_changes),
            sampled: tokio::sync::Mutex::new(SampleCache::new(refresh_interval)),
        };
        // A stream is only ever dropped as a slow consumer; its series shows from the start.
        let slow_consumer = CodeLabels {
            code: ErrorCode::SlowConsumer.as_str(),
        };
        drop(metrics.sse_dropped.get_or_create(&slow_consumer));
        let registry = &mut metrics.registry;
        let link = nodes.metrics();
        registry.register(
            "gatehouse_http_requests",
            "HTTP requests answered, by method, route template and status",
            metrics.http_requests.clone(),
        );
        registry.register(
            "gatehouse_http_request_duration_seconds",
            "Time from a request's arrival to its response head, by method, route template and status",
            metrics.http_duration.clone(),
        );
        registry.register(
            "gatehouse_turns",
            "Turns that ended, by outcome",
            turns.turns.clone(),
        );
        registry.register(
            "gatehouse_turn_duration_seconds",
            "Time from dispatch to the end of a turn",
            turns.duration.clone(),
        );
        registry.register(
            "gatehouse_runtime_turns",
            "Turns that ended, by runtime and outcome",
            turns.runtime_turns.clone(),
        );
        registry.register(
            "gatehouse_runtime_turn_duration_seconds",
            "Time from dispatch to the end of a turn, by runtime and outcome",
            turns.runtime_duration.clone(),
        );
        registry.register(
            "gatehouse_model_tokens",
            "Tokens of the model calls of ended turns, by model and kind (input, cached_input, output)",
            turns.tokens.clone(),
        );
        registry.register(
            "gatehouse_model_calls",
            "Model calls of ended turns that answered, by model",
            turns.model_calls.clone(),
        );
        registry.register(
            "gatehouse_model_retries",
            "Retried model call attempts of ended turns, by model",
            turns.model_retries.clone(),
        );
        registry.register(
            "gatehouse_active_sessions",
            "Sessions with a running turn (each session runs at most one)",
            metrics.active_sessions.clone(),
        );
        registry.register(
            "gatehouse_turns_queued",
            "Turns admitted and waiting to run",
            metrics.queued_turns.clone(),
        );
        registry.register(
            "gatehouse_turns_max_concurrent",
            "The cap on turns running at once (the max-concurrent-turns setting)",
            metrics.max_concurrent_turns.clone(),
        );
        registry.register(
            "gatehouse_node_connections",
            "Harness nodes connected now",
            metrics.node_connections.clone(),
        );
        registry.register(
            "gatehouse_node_invokes",
            "Commands invoked on nodes, by command and outcome",
            link.invokes.clone(),
        );
        registry.register(
            "gatehouse_node_invoke_duration_seconds",
            "Time from sending an invoke to its end, by command and outcome",
            link.invoke_duration.clone(),
        );
        registry.register(
            "gatehouse_handshake_refusals",
            "Node connections refused before admission, by code and reason",
            link.handshake_refusals.clone(),
        );
        registry.register(
            "gatehouse_sse_subscribers",
            "Open session event streams",
            metrics.sse_subscribers.clone(),
        );
        registry.register(
            "gatehouse_sse_dropped",
            "Session event streams the Gateway ended, by code (SLOW_CONSUMER)",
            metrics.sse_dropped.clone(),
        );
        registry.register(
            "gatehouse_memory_index_files",
            "Files in the memory index",
            metrics.memory_files.clone(),
        );
        registry.register(
            "gatehouse_memory_index_chunks",
            "Chunks in the memory index",
            metrics.memory_chunks.clone(),
        );
        registry.register(
            "gatehouse_memory_sync_lag_seconds",
            "How long the memory index has been behind the node's files (0 when in sync)",
            metrics.memory_sync_lag.clone(),
        );
        registry.register(
            "gatehouse_media_stored_bytes",
            "Bytes of blobs in the media store (uploads, artifacts and checkpoint contents)",
            metrics.media_bytes.clone(),
        );
        registry.register(
            "gatehouse_checkpoint_stored_bytes",
            "Bytes of the media blobs listed as checkpoint contents",
            metrics.checkpoint_bytes.clone(),
        );
        registry.register(
            "gatehouse_replicas_live",
            "Gateway replicas with a live lease on this Gateway's store",
            metrics.replicas_live.clone(),
        );
        registry.register(
            "gatehouse_cluster_nodes",
            "Harness nodes linked to any live replica of this Gateway",
            metrics.cluster_nodes.clone(),
        );
        registry.register(
            "gatehouse_cluster_worker_capacity",
            "Worker capacity over every node linked to any live replica, as last reported",
            metrics.cluster_capacity.clone(),
        );
        registry.register(
            "gatehouse_cluster_worker_slots_in_use",
            "Worker slots in use over every node linked to any live replica, as last reported",
            metrics.cluster_slots.clone(),
        );
        registry.register(
            "gatehouse_metrics_samplings",
            "Reads of the store's and the memory index's figures by scrapes (at most one per refresh interval, and one after each change of the turn queue)",
            metrics.samplings.clone(),
        );
        registry.register(
            "gatehouse_channel_inbound",
            "Messages the channels received, by channel and outcome (admitted, duplicate, denied, pairing, ignored, invalid)",
            channels.inbound.clone(),
        );
        registry.register(
            "gatehouse_channel_deliveries",
            "Delivery attempts of the channels' outboxes, by channel and outcome (delivered, retried, failed)",
            channels.deliveries.clone(),
        );
        registry.register(
            "gatehouse_channel_delivery_latency_seconds",
            "Time from a reply's queueing in the outbox to its platform taking it, by channel",
            channels.latency.clone(),
        );
        registry.register(
            "gatehouse_channel_outbox_depth",
            "Replies in a channel's outbox not yet delivered or given up",
            channels.outbox_depth.clone(),
        );
        registry.register_collector(Box::new(NodeFigures {
            nodes: Arc::clone(nodes),
        }));
        metrics
    }

    /// Returns a guard that counts one open event stream until it is dropped.
    pub(crate) fn sse_subscriber(&self) -> SseSubscriber {
        self.sse_subscribers.inc();
        SseSubscriber {
            gauge: self.sse_subscribers.clone(),
        }
    }

    /// Counts an event stream the Gateway ended with `code`.
    pub(crate) fn record_sse_dropped(&self, code: ErrorCode) {
        let labels = CodeLabels {
            code: code.as_str(),
        };
        self.sse_dropped.get_or_create(&labels).inc();
    }

    fn record_http(&self, labels: HttpLabels, elapsed: Duration) {
        self.http_requests.get_or_create(&labels).inc();
        self.http_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Samples the figures that are a state, then returns the text of every family.
    ///
    /// The figures read from the store and the memory index are reused while they are fresh
    /// ([`DEFAULT_METRICS_REFRESH_INTERVAL`]). A figure whose source fails (the store, the
    /// memory index, the media store) keeps its last value, and the failure is logged: a scrape
    /// never fails.
    pub(crate) async fn render(&self, state: &GatewayState) -> String {
        self.sample(state).await;
        let mut text = String::new();
        if let Err(error) =
            prometheus_client::encoding::prometheus_text::encode(&mut text, &self.registry)
        {
            tracing::error!(error = %error, "cannot encode the metrics");
        }
        text
    }

    async fn sample(&self, state: &GatewayState) {
        self.active_sessions
            .set(saturating_i64(state.turns.active_sessions() as u64));
        self.max_concurrent_turns
            .set(saturating_i64(state.turns.max_concurrent_turns() as u64));
        self.node_connections
            .set(saturating_i64(state.registry.all().len() as u64));
        self.memory_sync_lag
            .set(state.memory.sync_lag().as_secs_f64());
        // Counted in memory against the media quota, which `start` always sets.
        match state.media.stored_bytes().await {
            Ok(bytes) => {
                self.media_bytes.set(saturating_i64(bytes));
            }
            Err(error) => tracing::warn!(error = %error, "cannot measure the media store"),
        }
        let mut sampled = self.sampled.lock().await;
        // Read before the figures, so a change while they are read makes the next scrape read
        // them again.
        let queue_generation = self.queue_changes.load(Ordering::SeqCst);
        if sampled.is_fresh(Instant::now(), queue_generation) {
            return;
        }
        self.samplings.inc();
        match state.store.figures().await {
            Ok(figures) => {
                self.queued_turns
                    .set(saturating_i64(figures.n_queued_turns));
                self.checkpoint_bytes
                    .set(saturating_i64(figures.checkpoint_bytes));
            }
            Err(error) => tracing::warn!(error = %error, "cannot read the store's figures"),
        }
        match state.store.replicas().await {
            Ok(replicas) => {
                let live = replicas.iter().filter(|replica| replica.live).count();
                self.replicas_live.set(saturating_i64(live as u64));
            }
            Err(error) => tracing::warn!(error = %error, "cannot read the replicas"),
        }
        match state.store.node_links().await {
            Ok(links) => {
                let live: Vec<_> = links.links.iter().filter(|link| link.live).collect();
                let capacity: u64 = live.iter().map(|link| u64::from(link.capacity)).sum();
                let slots: u64 = live.iter().map(|link| u64::from(link.slots_in_use)).sum();
                self.cluster_nodes.set(saturating_i64(live.len() as u64));
                self.cluster_capacity.set(saturating_i64(capacity));
                self.cluster_slots.set(saturating_i64(slots));
            }
            Err(error) => tracing::warn!(error = %error, "cannot read the node links"),
        }
        for channel in state.channels.enabled_names() {
            match state.store.channel_figures(&channel).await {
                Ok(figures) => state
                    .channels
                    .metrics
                    .set_outbox_depth(&channel, figures.pending_deliveries),
                Err(error) => tracing::warn!(error = %error, "cannot read a channel's outbox"),
            }
        }
        match state.memory.status().await {
            Ok(status) => {
                self.memory_files.set(saturating_i64(status.stats.files));
                self.memory_chunks.set(saturating_i64(status.stats.chunks));
            }
            Err(error) => tracing::warn!(error = %error, "cannot read the memory index figures"),
        }
        sampled.record(Instant::now(), queue_generation);
    }
}

/// Counts one open event stream while it lives; see [`GatewayMetrics::sse_subscriber`].
#[derive(Debug)]
pub(crate) struct SseSubscriber {
    gauge: Gauge,
}

impl Drop for SseSubscriber {
    fn drop(&mut self) {
        self.gauge.dec();
    }
}

/// The worker figures of every connected node, from the last `node.report` each sent; a node
/// that has not reported, or has disconnected, has no series.
#[derive(Debug)]
struct NodeFigures {
    nodes: Arc<NodeRegistry>,
}

impl Collector for NodeFigures {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let in_use = Family::<NodeLabels, Gauge>::default();
        let capacity = Family::<NodeLabels, Gauge>::default();
        for connection in self.nodes.all() {
            let Some(report) = connection.report() else {
                continue;
            };
            let labels = NodeLabels {
                node: connection.device_id.clone(),
            };
            in_use
                .get_or_create(&labels)
                .set(i64::from(report.worker_slots_in_use));
            capacity
                .get_or_create(&labels)
                .set(i64::from(report.worker_capacity));
        }
        let family = encoder.encode_descriptor(
            "gatehouse_node_worker_slots_in_use",
            "Worker slots held by sessions on a node, as the node last reported, by node id.",
            None,
            in_use.metric_type(),
        )?;
        in_use.encode(family)?;
        let family = encoder.encode_descriptor(
            "gatehouse_node_worker_capacity",
            "A node's worker capacity, as the node last reported, by node id.",
            None,
            capacity.metric_type(),
        )?;
        capacity.encode(family)
    }
}

/// Counts every HTTP request by method, route template (`/v1/sessions/{key}/events`, never the
/// raw path) and status, and observes its latency up to the response head (for an event
/// stream, until the stream starts).
pub(crate) async fn track_http(
    State(state): State<Arc<GatewayState>>,
    request: Request,
    next: Next,
) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or(UNMATCHED_ROUTE, MatchedPath::as_str)
        .to_owned();
    let method = method_label(request.method());
    let started = Instant::now();
    let response = next.run(request).await;
    let labels = HttpLabels {
        method,
        route,
        status: response.status().as_u16(),
    };
    state.metrics.record_http(labels, started.elapsed());
    response
}

/// Returns the `method` label: a standard method's name, or `other` for an extension method,
/// which a client could choose without bound.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        Method::CONNECT => "CONNECT",
        Method::TRACE => "TRACE",
        _ => "other",
    }
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use pretty_assertions::assert_eq;

    use gatehouse_protocol::command::FileFetch;
    use gatehouse_protocol::command::FileStat;
    use gatehouse_protocol::commands::FileFetchParams;
    use gatehouse_protocol::commands::FileStatParams;

    use crate::instruments::TurnMetrics;
    use crate::link::registry::ConnectionIdentity;
    use crate::link::registry::NodeConnection;
    use crate::link::registry::NodeRegistry;
    use crate::metrics::GatewayMetrics;
    use crate::metrics::SampleCache;

    #[test]
    fn sampled_figures_are_reused_until_the_interval_passes_or_the_queue_changes() {
        let interval = Duration::from_secs(5);
        let read_at = std::time::Instant::now();
        let mut cache = SampleCache::new(interval);
        assert!(!cache.is_fresh(read_at, 0), "nothing was read yet");
        cache.record(read_at, 7);
        let just_before = read_at + interval - Duration::from_millis(1);
        assert_eq!(
            [
                cache.is_fresh(read_at, 7),
                cache.is_fresh(just_before, 7),
                cache.is_fresh(read_at + interval, 7),
                cache.is_fresh(read_at, 8),
            ],
            [true, true, false, false]
        );
        let mut never = SampleCache::new(Duration::ZERO);
        never.record(read_at, 7);
        assert!(
            !never.is_fresh(read_at, 7),
            "a zero interval never reuses a read"
        );
    }

    /// Returns the lines of `gatehouse_node_invokes_total` in the registry's text, sorted.
    fn invoke_lines(metrics: &GatewayMetrics) -> Vec<String> {
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry).unwrap();
        let mut lines: Vec<String> = text
            .lines()
            .filter(|line| line.starts_with("gatehouse_node_invokes_total{"))
            .map(str::to_owned)
            .collect();
        lines.sort();
        lines
    }

    #[tokio::test]
    async fn an_invoke_is_counted_once_with_the_class_of_its_end() {
        let registry = Arc::new(NodeRegistry::default());
        let metrics = GatewayMetrics::new(
            &TurnMetrics::default(),
            &registry,
            &crate::instruments::ChannelMetrics::default(),
            crate::metrics::DEFAULT_METRICS_REFRESH_INTERVAL,
        );
        let (outbound, mut node_side) = tokio::sync::mpsc::channel(16);
        let identity = ConnectionIdentity {
            device_id: String::from("n"),
            display_name: String::from("n"),
            runtime: gatehouse_protocol::runtime::RuntimeKind::Native,
            commands: vec![String::from("file.stat")],
            workspace_root: None,
            protocol: gatehouse_protocol::handshake::PROTOCOL_VERSION,
        };
        let connection = Arc::new(NodeConnection::new(identity, 1, 0, outbound));
        let stat = FileStatParams::default();
        // The node never answers: the caller times out, once.
        let timed_out = registry
            .invoke::<FileStat>(&connection, &stat, Duration::from_millis(10))
            .await;
        assert!(timed_out.is_err());
        // The caller gives up before the end.
        let pending = registry
            .start_invoke::<FileStat>(&connection, &stat, Duration::from_secs(5), None)
            .await
            .unwrap();
        drop(pending);
        // A command the node did not declare is never sent.
        let undeclared = registry
            .invoke::<FileFetch>(
                &connection,
                &FileFetchParams::default(),
                Duration::from_secs(5),
            )
            .await;
        assert!(undeclared.is_err());
        assert_eq!(
            invoke_lines(&metrics),
            vec![
                "gatehouse_node_invokes_total{command=\"file.fetch\",outcome=\"not_declared\"} 1",
                "gatehouse_node_invokes_total{command=\"file.stat\",outcome=\"cancelled\"} 1",
                "gatehouse_node_invokes_total{command=\"file.stat\",outcome=\"timeout\"} 1",
            ]
        );
        node_side.close();
    }
}
