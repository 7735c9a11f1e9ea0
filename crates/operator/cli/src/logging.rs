//! The `tracing` subscriber of every `gatehouse` process.
//!
//! - The filter is `GATEHOUSE_LOG` (an `EnvFilter`), `info` when unset.
//! - `--log-format text|json` (or `GATEHOUSE_LOG_FORMAT`) picks the line format on stderr; a
//!   JSON line carries the fields of its span and of every span above it (request id, turn id).
//! - When `OTEL_EXPORTER_OTLP_ENDPOINT` (or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set, spans
//!   are also exported over OTLP/HTTP with protobuf, batched (`OTEL_BSP_SCHEDULE_DELAY` and the
//!   other standard `OTEL_*` variables apply), with `service.name` = `gatehouse-<role>` unless
//!   `OTEL_SERVICE_NAME` says otherwise, and the attribute `gatehouse.role`.
//!
//! The node host hands its filter, format and `OTEL_*` variables to its workers
//! ([`worker_env`]), whose environment is otherwise cleared.

use std::sync::OnceLock;

use opentelemetry::trace::TracerProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Registry;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::reload;
use tracing_subscriber::util::SubscriberInitExt;

/// The variable that holds the log filter.
pub(crate) const LOG_FILTER_ENV: &str = "GATEHOUSE_LOG";

/// The variable that holds the log format, the default of `--log-format`.
pub(crate) const LOG_FORMAT_ENV: &str = "GATEHOUSE_LOG_FORMAT";

/// The filter when `GATEHOUSE_LOG` is unset or invalid.
pub(crate) const DEFAULT_FILTER: &str = "info";

/// The prefix of the OpenTelemetry SDK's standard variables.
const OTEL_ENV_PREFIX: &str = "OTEL_";

/// The format of log lines on stderr.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub(crate) enum LogFormat {
    /// One human-readable line per event, with its spans' fields in front.
    #[default]
    Text,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields`, and `span` and
    /// `spans` with the fields of the current span and of every span above it.
    Json,
}

impl LogFormat {
    fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// The installed subscriber's exporter; [`Telemetry::shutdown`] flushes it.
#[derive(Debug)]
pub(crate) struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Exports the spans still batched and stops the exporter. Called on the graceful path of
    /// every command, after its runtime has stopped (a signal ends a server that way).
    pub(crate) fn shutdown(self) {
        if let Some(provider) = self.provider
            && let Err(error) = provider.shutdown()
        {
            tracing::warn!(error = %error, "cannot flush the exported spans");
        }
    }
}

/// The reload handle of the installed filter and the format, once [`init`] installed them.
static INSTALLED: OnceLock<(reload::Handle<EnvFilter, Registry>, LogFormat)> = OnceLock::new();

/// Installs the process's subscriber for a process of `role` (`gateway`, `node`, `worker`,
/// ...). A second call, or a failure to build the exporter, leaves logging working: an
/// exporter that cannot be built is reported as a warning and traces are not exported.
pub(crate) fn init(format: LogFormat, role: &str) -> Telemetry {
    let (filter, handle) = reload::Layer::new(filter_from_env());
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let text = (format == LogFormat::Text).then(|| {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(ansi)
    });
    let json = (format == LogFormat::Json).then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_current_span(true)
            .with_span_list(true)
            .with_writer(std::io::stderr)
    });
    let (provider, exporter_error) = match otlp_configured() {
        true => match otlp_provider(role) {
            Ok(provider) => (Some(provider), None),
            Err(error) => (None, Some(error)),
        },
        false => (None, None),
    };
    let otel = provider
        .as_ref()
        .map(|provider| tracing_opentelemetry::layer().with_tracer(provider.tracer("gatehouse")));
    let installed = tracing_subscriber::registry()
        .with(filter)
        .with(text)
        .with(json)
        .with(otel)
        .try_init()
        .is_ok();
    if installed {
        let _ = INSTALLED.set((handle, format));
    }
    if let Some(error) = exporter_error {
        tracing::warn!(error = %error, "cannot export traces over OTLP; spans stay local");
    }
    Telemetry { provider }
}

/// Replaces the filter of the installed subscriber with `directives` (`off` disables every
/// span and event). Returns false when no subscriber of [`init`] is installed or the
/// directives do not parse.
pub(crate) fn set_filter(directives: &str) -> bool {
    let Some((handle, _)) = INSTALLED.get() else {
        return false;
    };
    match EnvFilter::try_new(directives) {
        Ok(filter) => handle.reload(filter).is_ok(),
        Err(_) => false,
    }
}

/// Returns the environment a worker needs to log and trace like its node host: what differs
/// from a worker's defaults among `GATEHOUSE_LOG` (unless it is [`DEFAULT_FILTER`]), the log
/// format (unless it is text), and every `OTEL_*` variable but those that may hold a credential
/// ([`carries_secrets`]). A node host on the defaults gives
/// its workers none of them, so their environment stays the scrubbed minimum.
pub(crate) fn worker_env() -> Vec<(String, String)> {
    let mut env = Vec::new();
    if let Some((_, format)) = INSTALLED.get()
        && *format != LogFormat::default()
    {
        env.push((String::from(LOG_FORMAT_ENV), format.as_str().to_owned()));
    }
    for (name, value) in std::env::vars() {
        let passed = match name.as_str() {
            LOG_FILTER_ENV => value != DEFAULT_FILTER,
            _ => name.starts_with(OTEL_ENV_PREFIX) && !carries_secrets(&name),
        };
        if passed {
            env.push((name, value));
        }
    }
    env
}

/// Whether an `OTEL_*` variable may hold a credential (`OTEL_EXPORTER_OTLP_HEADERS` usually
/// carries the collector's bearer token; `*_CLIENT_KEY` and `*_CERTIFICATE` name key material):
/// such a variable stays with the node host, since a worker runs model-chosen tools.
fn carries_secrets(name: &str) -> bool {
    ["HEADERS", "KEY", "CERTIFICATE"]
        .iter()
        .any(|part| name.split('_').any(|word| word == *part))
}

/// Returns the filter of `GATEHOUSE_LOG`, or [`DEFAULT_FILTER`].
pub(crate) fn filter_from_env() -> EnvFilter {
    EnvFilter::try_from_env(LOG_FILTER_ENV).unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER))
}

/// Returns true when an OTLP endpoint is configured and the SDK is not disabled.
fn otlp_configured() -> bool {
    let set = |name: &str| std::env::var(name).is_ok_and(|value| !value.trim().is_empty());
    let disabled = std::env::var("OTEL_SDK_DISABLED").is_ok_and(|value| value.trim() == "true");
    !disabled && (set("OTEL_EXPORTER_OTLP_ENDPOINT") || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
}

/// Builds the tracer provider that batches spans to the OTLP/HTTP endpoint of the `OTEL_*`
/// variables.
fn otlp_provider(role: &str) -> anyhow::Result<SdkTracerProvider> {
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    let mut resource = opentelemetry_sdk::Resource::builder().with_attribute(
        opentelemetry::KeyValue::new("gatehouse.role", role.to_owned()),
    );
    if std::env::var("OTEL_SERVICE_NAME").is_err() {
        resource = resource.with_service_name(format!("gatehouse-{role}"));
    }
    Ok(SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build())
}

#[cfg(test)]
mod tests {
    use crate::logging::carries_secrets;

    #[test]
    fn credential_variables_stay_with_the_node_host() {
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE",
        ] {
            assert!(carries_secrets(name), "{name}");
        }
        for name in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_BSP_SCHEDULE_DELAY",
            "OTEL_SERVICE_NAME",
            "OTEL_SDK_DISABLED",
        ] {
            assert!(!carries_secrets(name), "{name}");
        }
    }
}
