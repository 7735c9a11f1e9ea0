//! Setup codes: the one-time enrollment credential an operator hands to a node.
//!
//! A setup code is the base64url encoding, without padding, of the JSON
//! `{"v":1,"url":"ws://HOST:PORT/node","bootstrapToken":"...","expiresAtMs":...}`.

use std::fmt;
use std::path::Path;

use base64::Engine;
use serde::Deserialize;

use crate::error::NodeHostError;
use crate::gateway_url::normalize_gateway_url;

/// The setup code format version this build reads.
pub const SETUP_CODE_VERSION: u64 = 1;

/// A parsed setup code.
///
/// Guarantees: the version is [`SETUP_CODE_VERSION`], the bootstrap token is not empty and the
/// URL is a normalized Gateway URL. It does not guarantee that the code has not expired or been
/// used: only the Gateway knows. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
pub struct SetupCode {
    url: String,
    bootstrap_token: String,
    expires_at_ms: i64,
}

/// Why a setup code text is invalid. Messages never contain the code or the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SetupCodeError {
    /// The text is empty after trimming whitespace.
    #[error("the setup code is empty")]
    Empty,
    /// The text is not base64url.
    #[error("the setup code is not base64url")]
    NotBase64,
    /// The decoded bytes are not a JSON object of the expected shape.
    #[error("the setup code does not decode to the expected json (line {line}, column {column})")]
    NotJson {
        /// The line of the first JSON error.
        line: usize,
        /// The column of the first JSON error.
        column: usize,
    },
    /// The version is not [`SETUP_CODE_VERSION`].
    #[error("unsupported setup code version {version}")]
    UnsupportedVersion {
        /// The version found.
        version: u64,
    },
    /// A required field is missing or empty.
    #[error("the setup code has no {field}")]
    MissingField {
        /// The wire name of the field.
        field: &'static str,
    },
    /// The URL in the code is not an accepted Gateway URL.
    #[error("the setup code gateway url is invalid: {reason}")]
    InvalidUrl {
        /// Why it is refused.
        reason: &'static str,
    },
}

/// The JSON inside a setup code, with every field optional so a missing one gets its own error.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetupCodeWire {
    v: Option<u64>,
    url: Option<String>,
    bootstrap_token: Option<String>,
    expires_at_ms: Option<i64>,
}

impl SetupCode {
    /// Parses a setup code text; surrounding whitespace is ignored, and so is `=` padding.
    ///
    /// # Errors
    /// A [`SetupCodeError`] saying what is wrong.
    pub fn parse(text: &str) -> Result<SetupCode, SetupCodeError> {
        let text = text.trim().trim_end_matches('=');
        if text.is_empty() {
            return Err(SetupCodeError::Empty);
        }
        let Ok(bytes) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(text) else {
            return Err(SetupCodeError::NotBase64);
        };
        let wire: SetupCodeWire =
            serde_json::from_slice(&bytes).map_err(|err| SetupCodeError::NotJson {
                line: err.line(),
                column: err.column(),
            })?;
        let Some(version) = wire.v else {
            return Err(SetupCodeError::MissingField { field: "v" });
        };
        if version != SETUP_CODE_VERSION {
            return Err(SetupCodeError::UnsupportedVersion { version });
        }
        let url = match wire.url {
            Some(url) if !url.trim().is_empty() => url,
            Some(_) | None => return Err(SetupCodeError::MissingField { field: "url" }),
        };
        let url =
            normalize_gateway_url(&url).map_err(|reason| SetupCodeError::InvalidUrl { reason })?;
        let bootstrap_token = match wire.bootstrap_token {
            Some(token) if !token.is_empty() => token,
            Some(_) | None => {
                return Err(SetupCodeError::MissingField {
                    field: "bootstrapToken",
                });
            }
        };
        let Some(expires_at_ms) = wire.expires_at_ms else {
            return Err(SetupCodeError::MissingField {
                field: "expiresAtMs",
            });
        };
        Ok(SetupCode {
            url,
            bootstrap_token,
            expires_at_ms,
        })
    }

    /// Reads and parses the setup code in the file at `path`.
    ///
    /// # Errors
    /// [`NodeHostError::SetupCodeUnreadable`] when the file cannot be read,
    /// [`NodeHostError::SetupCodeInvalid`] when it does not hold a valid code.
    pub fn read_file(path: &Path) -> Result<SetupCode, NodeHostError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| NodeHostError::SetupCodeUnreadable {
                path: path.to_owned(),
                source,
            })?;
        SetupCode::parse(&text).map_err(|source| NodeHostError::SetupCodeInvalid {
            path: path.to_owned(),
            source,
        })
    }

    /// Returns the Gateway URL, normalized (see [`normalize_gateway_url`]).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Returns the one-time bootstrap token. Never log it.
    pub fn bootstrap_token(&self) -> &str {
        &self.bootstrap_token
    }

    /// Returns when the code expires, in Unix milliseconds.
    pub fn expires_at_ms(&self) -> i64 {
        self.expires_at_ms
    }
}

impl fmt::Debug for SetupCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetupCode")
            .field("url", &self.url)
            .field("bootstrap_token", &"<redacted>")
            .field("expires_at_ms", &self.expires_at_ms)
            .finish()
    }
}

#[cfg(test)]
#[path = "setup_code_tests.rs"]
mod tests;
