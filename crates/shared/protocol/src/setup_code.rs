//! Setup codes: the one-time enrollment credential the Gateway issues and an operator hands to a
//! node.
//!
//! A setup code is the base64url encoding, without padding, of the JSON object
//! `{"bootstrapToken","expiresAtMs","url","v":1}`. The Gateway encodes it
//! ([`SetupCodePayload::encode`]) and the Harness decodes it ([`SetupCodePayload::decode`]), so
//! both sides read one definition. The keys are written in that (sorted) order, the order of
//! the codes issued before this type existed, so an encoded code is byte for byte what it always
//! was.
//!
//! ```
//! use gatehouse_protocol::setup_code::SetupCodePayload;
//! let payload = SetupCodePayload {
//!     url: "ws://127.0.0.1:7420/node".into(),
//!     bootstrap_token: "bt-secret".into(),
//!     expires_at_ms: 1_900_000_000_000,
//! };
//! assert_eq!(SetupCodePayload::decode(&payload.encode()), Ok(payload));
//! ```

use std::fmt;

use base64::Engine;
use serde::Deserialize;
use serde::Serialize;

/// The setup code format version this build writes and reads.
pub const SETUP_CODE_VERSION: u64 = 1;

/// What a setup code carries.
///
/// Guarantees nothing by itself: a decoded payload has a non-blank URL and a non-empty token,
/// but whether the URL is an accepted Gateway URL is for the reader to judge, and whether the
/// code expired or was used only the Gateway knows. `Debug` never shows the token.
#[derive(Clone, PartialEq, Eq)]
pub struct SetupCodePayload {
    /// The Gateway's `/node` WebSocket URL, as the Gateway wrote it.
    pub url: String,
    /// The one-time bootstrap token, which the node presents in its first `connect`; the
    /// Gateway keeps only its SHA-256. Never log it.
    pub bootstrap_token: String,
    /// When the code expires, in Unix milliseconds.
    pub expires_at_ms: i64,
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
    /// The URL in the code is not an accepted Gateway URL. [`SetupCodePayload::decode`] never
    /// returns it: the reader that judges the URL does (the Harness normalizes it).
    #[error("the setup code gateway url is invalid: {reason}")]
    InvalidUrl {
        /// Why it is refused.
        reason: &'static str,
    },
}

/// The JSON object inside a setup code. Every field is optional so that a missing one gets its
/// own [`SetupCodeError::MissingField`]; the fields are declared in the order they are written.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SetupCodeWire {
    bootstrap_token: Option<String>,
    expires_at_ms: Option<i64>,
    url: Option<String>,
    v: Option<u64>,
}

impl SetupCodePayload {
    /// Returns the setup code text: base64url without padding of the payload's JSON, at
    /// version [`SETUP_CODE_VERSION`].
    pub fn encode(&self) -> String {
        let wire = SetupCodeWire {
            bootstrap_token: Some(self.bootstrap_token.clone()),
            expires_at_ms: Some(self.expires_at_ms),
            url: Some(self.url.clone()),
            v: Some(SETUP_CODE_VERSION),
        };
        // Serializing strings and integers into a byte vector cannot fail.
        let json = serde_json::to_vec(&wire).unwrap_or_default();
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json)
    }

    /// Decodes a setup code text; surrounding whitespace is ignored, and so is `=` padding.
    /// Unknown fields are ignored, so a newer Gateway can add some.
    ///
    /// # Errors
    /// A [`SetupCodeError`] saying what is wrong (never [`SetupCodeError::InvalidUrl`]).
    pub fn decode(text: &str) -> Result<SetupCodePayload, SetupCodeError> {
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
        Ok(SetupCodePayload {
            url,
            bootstrap_token,
            expires_at_ms,
        })
    }
}

impl fmt::Debug for SetupCodePayload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SetupCodePayload")
            .field("url", &self.url)
            .field("bootstrap_token", &"<redacted>")
            .field("expires_at_ms", &self.expires_at_ms)
            .finish()
    }
}

#[cfg(test)]
#[path = "setup_code_tests.rs"]
mod tests;
