//! The model a node host is configured with: `--model SPEC` and `--model-key-env NAME`.
//!
//! A spec is `mock`, `openai-responses:URL:MODEL`, `openai-chat:URL:MODEL` or
//! `anthropic:URL:MODEL` (URL with the version path, such as `https://api.anthropic.com/v1`). The
//! URL contains
//! `:` itself (`http://host:port/v1`), so the model name is split off at the last `:`; a model
//! name therefore never contains `:`.
//!
//! The API key is never part of the spec and never passes through argv: it lives in the
//! environment variable named by `--model-key-env` (default [`default_key_env`]:
//! `ANTHROPIC_API_KEY` for an `anthropic:` spec, [`DEFAULT_MODEL_KEY_ENV`] otherwise). This
//! module records only that name; it never reads the variable.
//!
//! The node host validates the spec at start-up and passes it to each native worker, which
//! parses it again with `gatehouse_model::ModelConfig::parse` and reads the key from the named
//! variable. [`ModelSpec::parse`] runs that same parser, so a spec the node accepts is one its
//! workers accept.

use std::fmt;

use gatehouse_model::ModelConfig;

/// The variable that holds the model API key of an OpenAI API when `--model-key-env` is not
/// given.
pub const DEFAULT_MODEL_KEY_ENV: &str = "OPENAI_API_KEY";

/// The accepted spec forms, for error messages.
pub const EXPECTED_FORMS: &str =
    "mock, openai-responses:URL:MODEL, openai-chat:URL:MODEL or anthropic:URL:MODEL";

/// Returns the variable that holds the API key of `spec` when `--model-key-env` is not given:
/// `ANTHROPIC_API_KEY` for an `anthropic:` spec, [`DEFAULT_MODEL_KEY_ENV`] for any other. An
/// explicit `--model-key-env` always wins.
pub fn default_key_env(spec: &str) -> &'static str {
    gatehouse_model::default_key_env(spec)
}

/// A validated model configuration, as the node host records and passes it to its workers.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ModelSpec {
    /// The deterministic test model; needs no key. The default.
    #[default]
    Mock,
    /// An HTTP model API (OpenAI-compatible or Anthropic).
    Remote(RemoteModel),
}

/// An HTTP model endpoint. Built only by [`ModelSpec::parse`], so every value has an
/// `http(s)` URL without credentials, a non-empty model name and a valid variable name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteModel {
    api: ModelApi,
    base_url: String,
    model: String,
    key_env: String,
}

/// The wire API of a remote model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ModelApi {
    /// The Responses API (`openai-responses`).
    Responses,
    /// The Chat Completions API (`openai-chat`).
    Chat,
    /// The Anthropic Messages API (`anthropic`).
    Anthropic,
}

/// Why a model spec or key variable name was refused. The message never repeats the spec, which
/// may hold a secret pasted by mistake.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ModelSpecError {
    /// The spec is not one of [`EXPECTED_FORMS`]. Returned by [`ModelSpec::parse`]; the operator
    /// must fix the flag.
    #[error("invalid model spec ({reason}): expected {EXPECTED_FORMS}")]
    InvalidSpec {
        /// What is wrong, without the spec itself.
        reason: &'static str,
    },
    /// The key variable name is not a valid environment variable name. Returned by
    /// [`ModelSpec::parse`]; the operator must fix the flag.
    #[error(
        "invalid key variable name {name:?}: use letters, digits and '_', not starting with a digit"
    )]
    InvalidKeyEnv {
        /// The name as given.
        name: String,
    },
}

impl ModelSpec {
    /// Parses `spec` (`mock`, `openai-responses:URL:MODEL`, `openai-chat:URL:MODEL` or
    /// `anthropic:URL:MODEL`) with the
    /// key variable `key_env`. The model name is everything after the last `:`.
    ///
    /// # Errors
    /// [`ModelSpecError::InvalidSpec`] for an unknown API, a missing model name, a URL that is not
    /// `http://` or `https://`, or a URL with credentials in it;
    /// [`ModelSpecError::InvalidKeyEnv`] for a key variable name that is not valid.
    pub fn parse(spec: &str, key_env: &str) -> Result<ModelSpec, ModelSpecError> {
        if !is_env_name(key_env) {
            return Err(ModelSpecError::InvalidKeyEnv {
                name: key_env.to_owned(),
            });
        }
        if spec == "mock" {
            return Ok(ModelSpec::Mock);
        }
        let invalid = |reason| ModelSpecError::InvalidSpec { reason };
        // The worker parses the same spec with `ModelConfig::parse`; using it here too means the
        // node never accepts a spec its workers would refuse. The model crate's errors quote the
        // spec, so they are mapped to reasons that do not.
        let config = ModelConfig::parse(spec, key_env).map_err(|error| {
            invalid(match error {
                gatehouse_model::ModelSpecError::InvalidUrl { .. } => {
                    "the url must start with http:// or https://"
                }
                gatehouse_model::ModelSpecError::MissingModel { .. } => {
                    "no model name after the url (a number there is taken for a port)"
                }
                gatehouse_model::ModelSpecError::UnknownApi { .. } => "unknown api",
                _ => "not a valid spec",
            })
        })?;
        let api = match config.api {
            gatehouse_model::ModelApi::Responses => ModelApi::Responses,
            gatehouse_model::ModelApi::Chat => ModelApi::Chat,
            gatehouse_model::ModelApi::Anthropic => ModelApi::Anthropic,
            gatehouse_model::ModelApi::Mock => return Ok(ModelSpec::Mock),
        };
        let base_url = config.base_url.as_str();
        let model = config.model.as_str();
        let after_scheme = base_url
            .strip_prefix("http://")
            .or_else(|| base_url.strip_prefix("https://"))
            .unwrap_or_default();
        let authority = after_scheme
            .split(['/', '?', '#'])
            .next()
            .unwrap_or_default();
        if authority.is_empty() {
            return Err(invalid("the url has no host"));
        }
        if authority.contains('@') {
            return Err(invalid(
                "the url must not carry credentials; put the key in the variable named by --model-key-env",
            ));
        }
        Ok(ModelSpec::Remote(RemoteModel {
            api,
            base_url: base_url.to_owned(),
            model: model.to_owned(),
            key_env: key_env.to_owned(),
        }))
    }

    /// Returns the name of the variable the key must be read from; `None` for the mock, which
    /// needs no key.
    pub fn key_env(&self) -> Option<&str> {
        match self {
            ModelSpec::Mock => None,
            ModelSpec::Remote(remote) => Some(remote.key_env()),
        }
    }
}

impl fmt::Display for ModelSpec {
    /// Writes the spec as given on the command line (`mock` or `API:URL:MODEL`); never a key.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSpec::Mock => f.write_str("mock"),
            ModelSpec::Remote(remote) => write!(
                f,
                "{}:{}:{}",
                remote.api.as_str(),
                remote.base_url,
                remote.model
            ),
        }
    }
}

impl RemoteModel {
    /// Returns the wire API.
    pub fn api(&self) -> ModelApi {
        self.api
    }

    /// Returns the base URL, for example `https://api.openai.com/v1`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Returns the model name.
    pub fn model(&self) -> &str {
        &self.model
    }

    /// Returns the name of the environment variable that holds the API key.
    pub fn key_env(&self) -> &str {
        &self.key_env
    }
}

impl ModelApi {
    /// Returns the spec prefix: `openai-responses`, `openai-chat` or `anthropic`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelApi::Responses => "openai-responses",
            ModelApi::Chat => "openai-chat",
            ModelApi::Anthropic => "anthropic",
        }
    }
}

fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphabetic() || first == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
#[path = "model_spec_tests.rs"]
mod tests;
