//! The instruments that the turn engine ([`TurnMetrics`]), the node link ([`LinkMetrics`]) and
//! the channels ([`ChannelMetrics`]) record into where things happen, and what every latency
//! histogram shares.
//!
//! Each instrument is a shared handle: `crate::metrics` registers clones of them in the one
//! `/metrics` registry, under the family names it gives them, so recording never goes through
//! the registry. This module sits below both users, so neither depends on `/metrics`.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gatehouse_protocol::error::ErrorCode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;

/// Upper bounds, in seconds, of every latency histogram's buckets.
pub(crate) const LATENCY_BUCKETS: [f64; 10] =
    [0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0];

/// A family of latency histograms with [`LATENCY_BUCKETS`].
pub(crate) type LatencyFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// Returns a latency histogram with [`LATENCY_BUCKETS`].
pub(crate) fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// Returns an empty family of latency histograms with [`LATENCY_BUCKETS`].
pub(crate) fn latency_family<L: Clone + std::hash::Hash + Eq>() -> LatencyFamily<L> {
    Family::new_with_constructor(latency_histogram)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct OutcomeLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RuntimeOutcomeLabels {
    runtime: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct TokenLabels {
    model: String,
    kind: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ModelLabels {
    model: String,
}

/// The most distinct `model` label values the usage families keep; the model names a node host
/// reports past them are counted as `other`, so a hostile node cannot grow `/metrics` without
/// bound.
pub(crate) const MAX_MODEL_LABELS: usize = 32;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct InvokeLabels {
    command: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct RefusalLabels {
    code: &'static str,
    reason: &'static str,
}

/// The `outcome` values of the turn families, one per way a turn ends.
pub(crate) const TURN_OUTCOMES: [&str; 4] = ["completed", "failed", "aborted", "interrupted"];

/// The turn engine's instruments: turns that ended, by outcome (and by runtime), and their
/// latency from dispatch to the end.
#[derive(Debug, Clone)]
pub(crate) struct TurnMetrics {
    /// `gatehouse_turns`: turns that ended, by outcome.
    pub(crate) turns: Family<OutcomeLabels, Counter>,
    /// `gatehouse_turn_duration_seconds`: their latency.
    pub(crate) duration: Histogram,
    /// `gatehouse_runtime_turns`: turns that ended, by runtime and outcome.
    pub(crate) runtime_turns: Family<RuntimeOutcomeLabels, Counter>,
    /// `gatehouse_runtime_turn_duration_seconds`: their latency, by runtime and outcome.
    pub(crate) runtime_duration: LatencyFamily<RuntimeOutcomeLabels>,
    /// Bumped at every change of the turn queue; a scrape that sees it moved reads the store's
    /// figures again (see [`crate::metrics::DEFAULT_METRICS_REFRESH_INTERVAL`]).
    pub(crate) queue_changes: Arc<AtomicU64>,
    /// `gatehouse_model_tokens`: tokens of ended turns, by model and kind (`input`,
    /// `cached_input`, `output`).
    pub(crate) tokens: Family<TokenLabels, Counter>,
    /// `gatehouse_model_calls`: model calls of ended turns, by model.
    pub(crate) model_calls: Family<ModelLabels, Counter>,
    /// `gatehouse_model_retries`: retried model call attempts of ended turns, by model.
    pub(crate) model_retries: Family<ModelLabels, Counter>,
    /// The model label values in use, at most [`MAX_MODEL_LABELS`].
    models: Arc<parking_lot::Mutex<std::collections::HashSet<String>>>,
}

impl Default for TurnMetrics {
    /// Returns zeroed instruments with a series for every outcome, so a scrape shows each
    /// outcome from the start.
    fn default() -> Self {
        let turns = Family::default();
        for outcome in TURN_OUTCOMES {
            drop(turns.get_or_create(&OutcomeLabels { outcome }));
        }
        Self {
            turns,
            duration: latency_histogram(),
            runtime_turns: Family::default(),
            runtime_duration: latency_family(),
            queue_changes: Arc::default(),
            tokens: Family::default(),
            model_calls: Family::default(),
            model_retries: Family::default(),
            models: Arc::default(),
        }
    }
}

impl TurnMetrics {
    /// Notes that the turn queue changed (a turn was admitted, claimed or ended), so the next
    /// scrape reads the queued turns again.
    pub(crate) fn queue_changed(&self) {
        self.queue_changes.fetch_add(1, Ordering::SeqCst);
    }

    /// Records a turn of `runtime` that ended with `outcome` (one of [`TURN_OUTCOMES`]) after
    /// `elapsed`.
    pub(crate) fn record_end(&self, runtime: &str, outcome: &'static str, elapsed: Duration) {
        self.count(runtime, outcome);
        let labels = RuntimeOutcomeLabels {
            runtime: runtime.to_owned(),
            outcome,
        };
        self.duration.observe(elapsed.as_secs_f64());
        self.runtime_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts the tokens, calls and retries of a turn's `usage` under its model's label (`unknown`
    /// when the runtime named none, `other` past [`MAX_MODEL_LABELS`] names).
    pub(crate) fn record_usage(&self, usage: &gatehouse_protocol::worker::TokenUsage) {
        let model = {
            let name = usage.model.as_deref().unwrap_or("unknown");
            let mut models = self.models.lock();
            match models.contains(name) || models.len() < MAX_MODEL_LABELS {
                true => {
                    models.insert(name.to_owned());
                    name.to_owned()
                }
                false => String::from("other"),
            }
        };
        for (kind, count) in [
            ("input", usage.input_tokens),
            ("cached_input", usage.cached_input_tokens),
            ("output", usage.output_tokens),
        ] {
            self.tokens
                .get_or_create(&TokenLabels {
                    model: model.clone(),
                    kind,
                })
                .inc_by(count);
        }
        let labels = ModelLabels { model };
        self.model_calls
            .get_or_create(&labels)
            .inc_by(usage.model_calls);
        self.model_retries
            .get_or_create(&labels)
            .inc_by(usage.retries);
    }

    /// Counts a turn of `runtime` that ended with `outcome` without a latency (one a restart
    /// interrupted, whose start this process did not see).
    pub(crate) fn count(&self, runtime: &str, outcome: &'static str) {
        self.turns.get_or_create(&OutcomeLabels { outcome }).inc();
        let labels = RuntimeOutcomeLabels {
            runtime: runtime.to_owned(),
            outcome,
        };
        self.runtime_turns.get_or_create(&labels).inc();
    }
}

/// The node link's instruments: invokes by command and outcome with their latency, and
/// refused handshakes by code.
#[derive(Debug, Clone)]
pub struct LinkMetrics {
    /// `gatehouse_node_invokes`: invokes by command and outcome.
    pub(crate) invokes: Family<InvokeLabels, Counter>,
    /// `gatehouse_node_invoke_duration_seconds`: their latency, by command and outcome.
    pub(crate) invoke_duration: LatencyFamily<InvokeLabels>,
    /// `gatehouse_handshake_refusals`: refused handshakes, by code and reason.
    pub(crate) handshake_refusals: Family<RefusalLabels, Counter>,
}

impl Default for LinkMetrics {
    fn default() -> Self {
        Self {
            invokes: Family::default(),
            invoke_duration: latency_family(),
            handshake_refusals: Family::default(),
        }
    }
}

/// The `outcome` of an invoke that ended without a result because its caller gave up.
pub(crate) const INVOKE_CANCELLED: &str = "cancelled";

impl LinkMetrics {
    /// Records an invoke of `command` that ended with `outcome` after `elapsed`.
    pub(crate) fn record_invoke(&self, command: &str, outcome: &'static str, elapsed: Duration) {
        let labels = InvokeLabels {
            command: command.to_owned(),
            outcome,
        };
        self.invokes.get_or_create(&labels).inc();
        self.invoke_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
    }

    /// Counts a refused handshake with its stable `code` and the Gateway's `reason`.
    pub(crate) fn record_refusal(&self, code: ErrorCode, reason: &'static str) {
        let labels = RefusalLabels {
            code: code.as_str(),
            reason,
        };
        self.handshake_refusals.get_or_create(&labels).inc();
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ChannelOutcomeLabels {
    channel: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct ChannelLabels {
    channel: String,
}

/// The `outcome` values of `gatehouse_channel_inbound`.
pub(crate) const INBOUND_OUTCOMES: [&str; 6] = [
    "admitted",
    "duplicate",
    "denied",
    "pairing",
    "ignored",
    "invalid",
];

/// The `outcome` values of `gatehouse_channel_deliveries`.
pub(crate) const DELIVERY_OUTCOMES: [&str; 3] = ["delivered", "retried", "failed"];

/// The channels' instruments, labelled by the configured channel name (a bounded set).
#[derive(Debug, Clone)]
pub(crate) struct ChannelMetrics {
    /// `gatehouse_channel_inbound`: messages received, by channel and outcome.
    pub(crate) inbound: Family<ChannelOutcomeLabels, Counter>,
    /// `gatehouse_channel_deliveries`: delivery attempts, by channel and outcome.
    pub(crate) deliveries: Family<ChannelOutcomeLabels, Counter>,
    /// `gatehouse_channel_delivery_latency_seconds`: from queueing to the platform taking it.
    pub(crate) latency: LatencyFamily<ChannelLabels>,
    /// `gatehouse_channel_outbox_depth`: replies not yet delivered or given up.
    pub(crate) outbox_depth: Family<ChannelLabels, Gauge>,
}

impl ChannelMetrics {
    /// Returns zeroed instruments with a series for each of `channels` and every outcome.
    pub(crate) fn for_channels(channels: &[String]) -> Self {
        let metrics = Self {
            inbound: Family::default(),
            deliveries: Family::default(),
            latency: latency_family(),
            outbox_depth: Family::default(),
        };
        for channel in channels {
            for outcome in INBOUND_OUTCOMES {
                drop(metrics.inbound.get_or_create(&labels(channel, outcome)));
            }
            for outcome in DELIVERY_OUTCOMES {
                drop(metrics.deliveries.get_or_create(&labels(channel, outcome)));
            }
            drop(metrics.outbox_depth.get_or_create(&ChannelLabels {
                channel: channel.clone(),
            }));
        }
        metrics
    }

    /// Counts a message `channel` received, with one of [`INBOUND_OUTCOMES`].
    pub(crate) fn inbound(&self, channel: &str, outcome: &'static str) {
        self.inbound.get_or_create(&labels(channel, outcome)).inc();
    }

    /// Counts a delivery attempt, with one of [`DELIVERY_OUTCOMES`].
    pub(crate) fn delivery(&self, channel: &str, outcome: &'static str) {
        self.deliveries
            .get_or_create(&labels(channel, outcome))
            .inc();
    }

    /// Records a delivery the platform took `elapsed` after it was queued.
    pub(crate) fn delivered_after(&self, channel: &str, elapsed: Duration) {
        self.latency
            .get_or_create(&ChannelLabels {
                channel: channel.to_owned(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Sets the outbox depth of `channel`.
    pub(crate) fn set_outbox_depth(&self, channel: &str, depth: u64) {
        self.outbox_depth
            .get_or_create(&ChannelLabels {
                channel: channel.to_owned(),
            })
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }
}

impl Default for ChannelMetrics {
    /// Returns instruments without a channel.
    fn default() -> Self {
        Self::for_channels(&[])
    }
}

fn labels(channel: &str, outcome: &'static str) -> ChannelOutcomeLabels {
    ChannelOutcomeLabels {
        channel: channel.to_owned(),
        outcome,
    }
}
