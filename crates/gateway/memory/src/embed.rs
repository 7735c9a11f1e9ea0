//! Embedders: what turns chunk texts and queries into vectors. The Gateway holds the embedder and
//! its credential; the Harness never sees either.
//!
//! - `none`: keyword search only.
//! - `local`: all-MiniLM-L6-v2 in process (feature `local-embedder`), from a model directory.
//! - `openai-compatible`: `POST {base}/embeddings` with the Gateway's embedding key, a different
//!   credential from the model key.

use std::time::Duration;

/// Why texts could not be embedded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmbedError {
    /// The embedder is not usable (model files missing, feature not built).
    #[error("the embedder is unavailable: {0}")]
    Unavailable(String),
    /// The remote embedding service failed or answered nonsense.
    #[error("the embedding service failed: {0}")]
    Remote(String),
}

/// Which embedder the operator configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedderKind {
    /// Keyword search only.
    None,
    /// The in-process MiniLM model.
    Local,
    /// An OpenAI-compatible `/embeddings` endpoint.
    OpenAiCompatible,
}

impl EmbedderKind {
    /// Parses `none`, `local` or `openai-compatible` (also `openai`).
    ///
    /// # Errors
    /// A message listing the accepted values.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "none" => Ok(Self::None),
            "local" => Ok(Self::Local),
            "openai-compatible" | "openai" => Ok(Self::OpenAiCompatible),
            other => Err(format!(
                "unknown memory embedder {other:?}: use none, local or openai-compatible"
            )),
        }
    }

    /// Returns the configuration name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::None => "none",
            Self::Local => "local",
            Self::OpenAiCompatible => "openai-compatible",
        }
    }

    /// Whether a failure of this embedder fails the search closed (an explicitly named remote
    /// service) rather than degrading to keyword search with a warning.
    pub fn fails_closed(self) -> bool {
        matches!(self, Self::OpenAiCompatible)
    }
}

/// Turns texts into L2-normalised vectors.
#[async_trait::async_trait]
pub trait Embedder: Send + Sync {
    /// Which embedder this is.
    fn kind(&self) -> EmbedderKind;
    /// The model name, part of the index identity.
    fn model(&self) -> &str;
    /// The vector length.
    fn dimensions(&self) -> usize;
    /// Embeds `texts`, one vector each, in order.
    ///
    /// # Errors
    /// [`EmbedError`].
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

/// Returns `vector` scaled to unit length (a zero vector is returned as it is).
pub fn normalize(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        for x in &mut vector {
            *x /= norm;
        }
    }
    vector
}

/// An OpenAI-compatible embeddings endpoint.
pub struct OpenAiEmbedder {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    dimensions: usize,
}

impl std::fmt::Debug for OpenAiEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key is never printed.
        f.debug_struct("OpenAiEmbedder")
            .field("url", &self.url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

/// How many texts go into one embeddings request.
const BATCH: usize = 64;

impl OpenAiEmbedder {
    /// Returns an embedder for `base_url` (for example `https://api.openai.com/v1`) and `model`,
    /// with vectors of `dimensions`.
    pub fn new(base_url: &str, model: &str, api_key: Option<String>, dimensions: usize) -> Self {
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .build()
            .unwrap_or_default();
        Self {
            client,
            url: format!("{}/embeddings", base_url.trim_end_matches('/')),
            model: model.to_owned(),
            api_key,
            dimensions,
        }
    }
}

#[async_trait::async_trait]
impl Embedder for OpenAiEmbedder {
    fn kind(&self) -> EmbedderKind {
        EmbedderKind::OpenAiCompatible
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn dimensions(&self) -> usize {
        self.dimensions
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors = Vec::with_capacity(texts.len());
        for batch in texts.chunks(BATCH) {
            let mut request = self
                .client
                .post(&self.url)
                .json(&serde_json::json!({"model": self.model, "input": batch}));
            if let Some(key) = &self.api_key {
                request = request.bearer_auth(key);
            }
            let response = request
                .send()
                .await
                .map_err(|error| EmbedError::Remote(error.without_url().to_string()))?;
            let status = response.status();
            if !status.is_success() {
                return Err(EmbedError::Remote(format!("HTTP {status}")));
            }
            let body: serde_json::Value = response
                .json()
                .await
                .map_err(|error| EmbedError::Remote(error.without_url().to_string()))?;
            let mut data: Vec<(u64, Vec<f32>)> = body["data"]
                .as_array()
                .ok_or_else(|| EmbedError::Remote(String::from("no data in the answer")))?
                .iter()
                .map(|item| {
                    let vector: Vec<f32> = item["embedding"]
                        .as_array()
                        .map(|values| {
                            values
                                .iter()
                                .filter_map(serde_json::Value::as_f64)
                                .map(|value| value as f32)
                                .collect()
                        })
                        .unwrap_or_default();
                    (item["index"].as_u64().unwrap_or(0), vector)
                })
                .collect();
            data.sort_by_key(|(index, _)| *index);
            if data.len() != batch.len()
                || data
                    .iter()
                    .any(|(_, vector)| vector.len() != self.dimensions)
            {
                return Err(EmbedError::Remote(format!(
                    "expected {} vectors of {} dimensions",
                    batch.len(),
                    self.dimensions
                )));
            }
            vectors.extend(data.into_iter().map(|(_, vector)| normalize(vector)));
        }
        Ok(vectors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_parse_and_only_remote_ones_fail_closed() {
        assert_eq!(EmbedderKind::parse("local"), Ok(EmbedderKind::Local));
        assert_eq!(
            EmbedderKind::parse("openai"),
            Ok(EmbedderKind::OpenAiCompatible)
        );
        assert!(EmbedderKind::parse("bert").is_err());
        assert!(EmbedderKind::OpenAiCompatible.fails_closed());
        assert!(!EmbedderKind::Local.fails_closed() && !EmbedderKind::None.fails_closed());
    }

    #[test]
    fn vectors_are_normalised() {
        let vector = normalize(vec![3.0, 4.0]);
        assert!((vector[0] - 0.6).abs() < 1e-6 && (vector[1] - 0.8).abs() < 1e-6);
        assert_eq!(normalize(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }
}
