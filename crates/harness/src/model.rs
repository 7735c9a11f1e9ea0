//! The model a node host is configured with: `--model SPEC` and `--model-key-env NAME`.
//!
//! A spec is `mock`, `openai-responses:URL:MODEL` or `openai-chat:URL:MODEL`. The URL contains
//! `:` itself (`http://host:port/v1`), so the model name is split off at the last `:`; a model
//! name therefore never contains `:`.
//!
//! The API key is never part of the spec and never passes through argv: it lives in the
//! environment variable named by `--model-key-env` (default [`DEFAULT_MODEL_KEY_ENV`]). This
//! module records only that name; it never reads the variable.
//!
//! No runtime uses the model yet: the node host validates and records it, and the native runtime
//! will read the key from the named variable when it talks to the model.

use std::fmt;

/// The variable that holds the model API key when `--model-key-env` is not given.
pub const DEFAULT_MODEL_KEY_ENV: &str = "OPENAI_API_KEY";

/// The accepted spec forms, for error messages.
pub const EXPECTED_FORMS: &str = "mock, openai-responses:URL:MODEL or openai-chat:URL:MODEL";

/// A validated model configuration.
///
/// No runtime reads it yet; the node host records it so that the native runtime can use it
/// later.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ModelSpec {
    /// The deterministic test model; needs no key. The default.
    #[default]
    Mock,
    /// An OpenAI-compatible HTTP API.
    Remote(RemoteModel),
}

/// An OpenAI-compatible model endpoint. Built only by [`ModelSpec::parse`], so every value has an
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
    /// Parses `spec` (`mock`, `openai-responses:URL:MODEL` or `openai-chat:URL:MODEL`) with the
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
        let Some((api, rest)) = spec.split_once(':') else {
            return Err(invalid("no api prefix"));
        };
        let api = match api {
            "openai-responses" => ModelApi::Responses,
            "openai-chat" => ModelApi::Chat,
            _ => return Err(invalid("unknown api")),
        };
        let Some((base_url, model)) = rest.rsplit_once(':') else {
            return Err(invalid("no model name"));
        };
        if model.is_empty() {
            return Err(invalid("empty model name"));
        }
        let Some(after_scheme) = base_url
            .strip_prefix("http://")
            .or_else(|| base_url.strip_prefix("https://"))
        else {
            return Err(invalid("the url must start with http:// or https://"));
        };
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
    /// Returns the spec prefix: `openai-responses` or `openai-chat`.
    pub fn as_str(self) -> &'static str {
        match self {
            ModelApi::Responses => "openai-responses",
            ModelApi::Chat => "openai-chat",
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
#[path = "model_tests.rs"]
mod tests;
