//! Setup codes: the one-time enrollment credential an operator hands to a node.
//!
//! The text form and its payload are defined once, for the Gateway and the node alike, in
//! [`gatehouse_protocol::setup_code`]; this module reads a code from its file and checks its
//! Gateway URL.

use std::path::Path;

use gatehouse_protocol::setup_code::SetupCodeError;
use gatehouse_protocol::setup_code::SetupCodePayload;

use crate::error::NodeHostError;
use crate::gateway_url::normalize_gateway_url;

/// A parsed setup code.
///
/// Guarantees: the version is
/// [`SETUP_CODE_VERSION`](gatehouse_protocol::setup_code::SETUP_CODE_VERSION), the bootstrap token is not empty and the
/// URL is a normalized Gateway URL. It does not guarantee that the code has not expired or been
/// used: only the Gateway knows. `Debug` never shows the token (it is the payload's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupCode {
    /// The decoded payload, its URL replaced by the normalized one.
    payload: SetupCodePayload,
}

impl SetupCode {
    /// Parses a setup code text ([`SetupCodePayload::decode`]: surrounding whitespace and `=`
    /// padding are ignored) and normalizes its Gateway URL.
    ///
    /// # Errors
    /// A [`SetupCodeError`] saying what is wrong.
    pub fn parse(text: &str) -> Result<SetupCode, SetupCodeError> {
        let mut payload = SetupCodePayload::decode(text)?;
        payload.url = normalize_gateway_url(&payload.url)
            .map_err(|reason| SetupCodeError::InvalidUrl { reason })?;
        Ok(SetupCode { payload })
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
        &self.payload.url
    }

    /// Returns the one-time bootstrap token. Never log it.
    pub fn bootstrap_token(&self) -> &str {
        &self.payload.bootstrap_token
    }

    /// Returns when the code expires, in Unix milliseconds.
    pub fn expires_at_ms(&self) -> i64 {
        self.payload.expires_at_ms
    }
}

#[cfg(test)]
#[path = "setup_code_tests.rs"]
mod tests;
