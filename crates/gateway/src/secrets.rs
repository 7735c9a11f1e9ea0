//! Random tokens, hashes, constant-time comparison and the operator token file.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;

use base64::Engine;
use sha2::Digest;
use subtle::ConstantTimeEq;

/// The name of the operator token file in the Gateway state directory.
pub(crate) const OPERATOR_TOKEN_FILE: &str = "operator-token";

/// The environment variable that overrides the operator token file.
pub const OPERATOR_TOKEN_ENV: &str = "GATEHOUSE_TOKEN";

/// Returns 32 random bytes as base64url without padding (43 characters).
///
/// # Errors
/// The operating system's random source failed.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes).map_err(std::io::Error::other)?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// Returns the lowercase hex SHA-256 of `text`.
pub(crate) fn sha256_hex(text: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(text))
}

/// Compares two secrets in time that does not depend on where they differ.
pub(crate) fn secrets_equal(left: &[u8], right: &[u8]) -> bool {
    left.ct_eq(right).into()
}

/// The operator's bearer token for `/v1`.
#[derive(Clone)]
pub(crate) struct OperatorToken {
    token: String,
    source: TokenSource,
}

/// Where the operator token came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// The `GATEHOUSE_TOKEN` environment variable.
    Environment,
    /// The token file in the state directory.
    File(PathBuf),
}

impl std::fmt::Debug for OperatorToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OperatorToken")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl OperatorToken {
    /// Returns the token from `override_token` (the value of `GATEHOUSE_TOKEN`, if set and not
    /// empty), else from `<state_dir>/operator-token`, creating that file with mode 0600 and a new
    /// random token the first time.
    ///
    /// # Errors
    /// The file cannot be read or created, or it is empty.
    pub(crate) fn load_or_create(
        state_dir: &Path,
        override_token: Option<String>,
    ) -> std::io::Result<Self> {
        if let Some(token) = override_token.filter(|token| !token.trim().is_empty()) {
            return Ok(Self {
                token: token.trim().to_owned(),
                source: TokenSource::Environment,
            });
        }
        let path = state_dir.join(OPERATOR_TOKEN_FILE);
        let token = match std::fs::read_to_string(&path) {
            Ok(text) => text.trim().to_owned(),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let token = random_token()?;
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(&path)?;
                file.write_all(token.as_bytes())?;
                file.write_all(b"\n")?;
                file.sync_all()?;
                token
            }
            Err(error) => return Err(error),
        };
        if token.is_empty() {
            return Err(std::io::Error::other(format!(
                "{} is empty; delete it to get a new token",
                path.display()
            )));
        }
        Ok(Self {
            token,
            source: TokenSource::File(path),
        })
    }

    /// Returns true when `presented` is the token, compared in constant time.
    pub(crate) fn matches(&self, presented: &str) -> bool {
        secrets_equal(self.token.as_bytes(), presented.as_bytes())
    }

    /// Returns where the token came from.
    pub(crate) fn source(&self) -> &TokenSource {
        &self.source
    }
}
