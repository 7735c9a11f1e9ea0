//! Choosing and building a model client: the `--model` spec, timeouts, retries and the API key.

use std::sync::Arc;
use std::time::Duration;

use backon::BackoffBuilder;
use backon::ExponentialBuilder;

use crate::ModelClient;
use crate::anthropic::AnthropicClient;
use crate::chat::ChatCompletionsClient;
use crate::error::ModelError;
use crate::error::Result;
#[cfg(feature = "mock")]
use crate::mock::MockClient;
use crate::responses::ResponsesClient;

/// The variable the API key of an OpenAI API (and the mock) is read from unless another is
/// configured.
pub const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";

/// The variable the API key of an `anthropic:` model is read from unless another is configured.
pub const ANTHROPIC_KEY_ENV: &str = "ANTHROPIC_API_KEY";

/// The most retries a client makes before the first event.
pub const MAX_RETRIES: usize = 2;

/// Which wire API a model speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelApi {
    /// OpenAI Responses (`POST {base_url}/responses`, SSE).
    Responses,
    /// OpenAI Chat Completions (`POST {base_url}/chat/completions`, SSE chunks).
    Chat,
    /// The Anthropic Messages API (`POST {base_url}/messages`, SSE).
    Anthropic,
    /// The in-process deterministic mock (`gatehouse-mockmodel`), no HTTP and no key. Only with
    /// the crate's `mock` feature.
    #[cfg(feature = "mock")]
    Mock,
}

/// Which model to call and how.
///
/// The API key itself is not part of the configuration: `key_env` names the variable that holds
/// it, and the variable is read when the client is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelConfig {
    /// The wire API.
    pub api: ModelApi,
    /// The API base URL, for example `http://127.0.0.1:7430/v1` or `https://api.openai.com/v1`
    /// (empty for the mock).
    pub base_url: String,
    /// The model name sent in each request (`mock` for the mock).
    pub model: String,
    /// The NAME of the environment variable holding the API key (ignored for the mock).
    pub key_env: String,
    /// How long to wait for each phase of a call.
    pub timeouts: Timeouts,
    /// How often and when to retry before the first event.
    pub retry: RetryPolicy,
}

/// How long a client waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Opening the TCP connection (default 10 s).
    pub connect: Duration,
    /// From sending the request to the first event, headers included (default 60 s).
    pub first_event: Duration,
    /// Between two events once the stream has started; SSE comments (keep-alives) do not count as
    /// events (default 120 s).
    pub idle: Duration,
}

/// The pauses before each retry. A client retries only before the first event was received, and
/// only connect errors and statuses 429 and 5xx.
///
/// The pauses grow exponentially from `first_backoff`, [`BACKOFF_FACTOR`] times per retry, up to
/// `max_backoff`, and each is lengthened by a random share of up to itself (`backon`'s jitter), so
/// a pause lies between its delay and twice it and clients refused together do not come back in
/// lockstep. When a 429 or 503 answer carries `Retry-After`, the client waits that long instead of
/// its own pause, but never longer than [`RetryPolicy::max_retry_after`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The delay before the first retry.
    first_backoff: Duration,
    /// The longest delay before jitter.
    max_backoff: Duration,
    /// At most [`MAX_RETRIES`].
    n_retries: usize,
    /// The longest `Retry-After` honoured; a longer one is cut to this.
    max_retry_after: Duration,
}

/// How much longer each retry's delay is than the one before (500 ms, then 2 s by default).
pub const BACKOFF_FACTOR: f32 = 4.0;

/// The pauses of one request's retries, from [`RetryPolicy::pauses`].
#[derive(Debug)]
pub(crate) struct RetryPauses {
    backoffs: <ExponentialBuilder as BackoffBuilder>::Backoff,
    max_retry_after: Duration,
}

/// The longest `Retry-After` a client honours by default: 30 s.
pub const DEFAULT_MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// A `--model` spec that cannot be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelSpecError {
    /// The spec does not start with `mock`, `openai-responses:`, `openai-chat:` or `anthropic:`.
    #[error(
        "unknown model spec {spec:?} (expected mock, openai-responses:URL:MODEL, openai-chat:URL:MODEL or anthropic:URL:MODEL)"
    )]
    UnknownApi {
        /// The spec as given.
        spec: String,
    },
    /// The URL part is not an `http://` or `https://` URL.
    #[error("model spec {spec:?} has no http:// or https:// url")]
    InvalidUrl {
        /// The spec as given.
        spec: String,
    },
    /// The model name after the last `:` is missing (or looks like a port).
    #[error("model spec {spec:?} has no model name after the url")]
    MissingModel {
        /// The spec as given.
        spec: String,
    },
}

/// An API key. Its value never appears in `Debug` output or logs.
#[derive(Clone)]
pub struct ApiKey(String);

impl ApiKey {
    /// Wraps a key value.
    pub fn new(value: String) -> ApiKey {
        ApiKey(value)
    }

    /// Returns the key value, to put in a request header.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("ApiKey(<redacted>)")
    }
}

/// Everything an HTTP client needs, with the key already read.
#[derive(Debug, Clone)]
pub struct HttpClientConfig {
    /// The API base URL (`http://…`, without the endpoint path).
    pub base_url: String,
    /// The model name.
    pub model: String,
    /// The key, sent as `Authorization: Bearer` (OpenAI APIs) or `x-api-key` (Anthropic).
    pub api_key: ApiKey,
    /// How long to wait.
    pub timeouts: Timeouts,
    /// When to retry.
    pub retry: RetryPolicy,
}

impl Default for Timeouts {
    fn default() -> Timeouts {
        Timeouts {
            connect: Duration::from_secs(10),
            first_event: Duration::from_secs(60),
            idle: Duration::from_secs(120),
        }
    }
}

impl Default for RetryPolicy {
    /// Two retries, after 500 ms and 2 s (before jitter).
    fn default() -> RetryPolicy {
        RetryPolicy::new(
            Duration::from_millis(500),
            Duration::from_secs(2),
            MAX_RETRIES,
        )
    }
}

impl RetryPolicy {
    /// Returns a policy of `n_retries` retries (at most [`MAX_RETRIES`]), the first after
    /// `first_backoff`, each later one [`BACKOFF_FACTOR`] times longer up to `max_backoff`, all
    /// with jitter.
    /// A server's `Retry-After` is honoured up to [`DEFAULT_MAX_RETRY_AFTER`].
    pub fn new(first_backoff: Duration, max_backoff: Duration, n_retries: usize) -> RetryPolicy {
        RetryPolicy {
            first_backoff,
            max_backoff,
            n_retries: n_retries.min(MAX_RETRIES),
            max_retry_after: DEFAULT_MAX_RETRY_AFTER,
        }
    }

    /// Returns a policy that never retries.
    pub fn never() -> RetryPolicy {
        RetryPolicy::new(Duration::ZERO, Duration::ZERO, 0)
    }

    /// Returns this policy honouring a server's `Retry-After` up to `max_retry_after`.
    pub fn with_max_retry_after(self, max_retry_after: Duration) -> RetryPolicy {
        RetryPolicy {
            max_retry_after,
            ..self
        }
    }

    /// Returns how many retries the policy allows.
    pub fn n_retries(&self) -> usize {
        self.n_retries
    }

    /// Returns the longest `Retry-After` honoured.
    pub fn max_retry_after(&self) -> Duration {
        self.max_retry_after
    }

    /// Returns the pauses of one request's retries, with fresh jitter.
    pub(crate) fn pauses(&self) -> RetryPauses {
        let backoffs = ExponentialBuilder::new()
            .with_min_delay(self.first_backoff)
            .with_max_delay(self.max_backoff)
            .with_factor(BACKOFF_FACTOR)
            .with_max_times(self.n_retries)
            .with_jitter()
            .build();
        RetryPauses {
            backoffs,
            max_retry_after: self.max_retry_after,
        }
    }
}

impl RetryPauses {
    /// Returns the pause before the next retry, or `None` when the policy has no retry left: the
    /// server's `retry_after` when it sent one (at most [`RetryPolicy::max_retry_after`]), the
    /// policy's own jittered pause otherwise.
    pub(crate) fn next(&mut self, retry_after: Option<Duration>) -> Option<Duration> {
        let backoff = self.backoffs.next()?;
        Some(retry_after.map_or(backoff, |wait| wait.min(self.max_retry_after)))
    }
}

/// Returns the variable the API key of `spec` is read from when `--model-key-env` is not given:
/// [`ANTHROPIC_KEY_ENV`] for an `anthropic:` spec, [`DEFAULT_KEY_ENV`] for anything else.
pub fn default_key_env(spec: &str) -> &'static str {
    match spec.starts_with("anthropic:") {
        true => ANTHROPIC_KEY_ENV,
        false => DEFAULT_KEY_ENV,
    }
}

impl ModelConfig {
    /// Returns the configuration of the in-process mock model.
    #[cfg(feature = "mock")]
    pub fn mock() -> ModelConfig {
        ModelConfig {
            api: ModelApi::Mock,
            base_url: String::new(),
            model: String::from("mock"),
            key_env: String::from(DEFAULT_KEY_ENV),
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
        }
    }

    /// Parses a `--model` spec: `mock` (with the `mock` feature), `openai-responses:URL:MODEL`,
    /// `openai-chat:URL:MODEL` or `anthropic:URL:MODEL` (URL with the version path, such as
    /// `https://api.anthropic.com/v1`).
    ///
    /// The model name is what follows the LAST `:`, so the URL may contain colons (scheme, port)
    /// and the model name may not. A name made only of digits (optionally followed by a path) is
    /// taken for a port and refused. Timeouts and retries are the defaults.
    ///
    /// # Errors
    ///
    /// Returns a [`ModelSpecError`] saying which part is wrong.
    pub fn parse(spec: &str, key_env: &str) -> std::result::Result<ModelConfig, ModelSpecError> {
        #[cfg(feature = "mock")]
        if spec == "mock" {
            return Ok(ModelConfig {
                key_env: key_env.to_owned(),
                ..ModelConfig::mock()
            });
        }
        let (api, rest) = if let Some(rest) = spec.strip_prefix("openai-responses:") {
            (ModelApi::Responses, rest)
        } else if let Some(rest) = spec.strip_prefix("openai-chat:") {
            (ModelApi::Chat, rest)
        } else if let Some(rest) = spec.strip_prefix("anthropic:") {
            (ModelApi::Anthropic, rest)
        } else {
            return Err(ModelSpecError::UnknownApi {
                spec: spec.to_owned(),
            });
        };
        let Some((base_url, model)) = rest.rsplit_once(':') else {
            return Err(ModelSpecError::InvalidUrl {
                spec: spec.to_owned(),
            });
        };
        let host = base_url
            .strip_prefix("http://")
            .or_else(|| base_url.strip_prefix("https://"));
        if host.is_none_or(str::is_empty) {
            return Err(ModelSpecError::InvalidUrl {
                spec: spec.to_owned(),
            });
        }
        let port_like = model
            .split('/')
            .next()
            .is_some_and(|head| !head.is_empty() && head.bytes().all(|byte| byte.is_ascii_digit()));
        if model.is_empty() || port_like {
            return Err(ModelSpecError::MissingModel {
                spec: spec.to_owned(),
            });
        }
        Ok(ModelConfig {
            api,
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            key_env: key_env.to_owned(),
            timeouts: Timeouts::default(),
            retry: RetryPolicy::default(),
        })
    }

    /// Returns the spec this configuration was parsed from (`mock` or `API:URL:MODEL`).
    pub fn spec(&self) -> String {
        match self.api {
            #[cfg(feature = "mock")]
            ModelApi::Mock => String::from("mock"),
            ModelApi::Responses => format!("openai-responses:{}:{}", self.base_url, self.model),
            ModelApi::Chat => format!("openai-chat:{}:{}", self.base_url, self.model),
            ModelApi::Anthropic => format!("anthropic:{}:{}", self.base_url, self.model),
        }
    }

    /// Builds the client, reading the API key from the process environment.
    ///
    /// # Errors
    ///
    /// See [`ModelConfig::build_with_env`].
    pub fn build(&self) -> Result<Arc<dyn ModelClient>> {
        self.build_with_env(&|name| std::env::var(name).ok())
    }

    /// Builds the client, reading the API key through `env` (a lookup by variable name).
    ///
    /// # Errors
    ///
    /// For an HTTP API: [`ModelError::MissingKey`] when the variable is unset or empty,
    /// [`ModelError::UnsupportedUrl`] for a URL that is not `http://`, and
    /// [`ModelError::InvalidKey`] or [`ModelError::Client`] when the HTTP client cannot be made.
    /// Building the mock never fails.
    pub fn build_with_env(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Arc<dyn ModelClient>> {
        #[cfg(feature = "mock")]
        if self.api == ModelApi::Mock {
            return Ok(Arc::new(MockClient::new(self.timeouts)));
        }
        let api_key = match env(&self.key_env) {
            Some(value) if !value.is_empty() => ApiKey::new(value),
            Some(_) | None => {
                return Err(ModelError::MissingKey {
                    key_env: self.key_env.clone(),
                });
            }
        };
        let http = HttpClientConfig {
            base_url: self.base_url.clone(),
            model: self.model.clone(),
            api_key,
            timeouts: self.timeouts,
            retry: self.retry.clone(),
        };
        match self.api {
            ModelApi::Responses => Ok(Arc::new(ResponsesClient::new(http)?)),
            ModelApi::Chat => Ok(Arc::new(ChatCompletionsClient::new(http)?)),
            ModelApi::Anthropic => Ok(Arc::new(AnthropicClient::new(http)?)),
            #[cfg(feature = "mock")]
            ModelApi::Mock => Ok(Arc::new(MockClient::new(self.timeouts))),
        }
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
