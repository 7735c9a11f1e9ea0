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

/// The name of the store's shared secret that is the operator token of every replica on the
/// store.
const OPERATOR_TOKEN: &str = "operator-token";

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

/// Writes `token` and a newline to `path` with mode 0600, as a new file renamed over the old
/// one, so a reader sees the old token or the new one and never a mix.
fn write_private(path: &Path, token: &str) -> std::io::Result<()> {
    let temporary = path.with_extension(format!("tmp-{}", std::process::id()));
    // A crash between create and rename leaves it behind (in a container the pid repeats).
    match std::fs::remove_file(&temporary) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)?;
    let written = file
        .write_all(token.as_bytes())
        .and_then(|()| file.write_all(b"\n"))
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temporary, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&temporary);
    }
    written
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
    /// Returns the operator token every replica on `store` shares: `override_token` (the value
    /// of `GATEHOUSE_TOKEN`) when set, which stays this process's own; otherwise the store's
    /// token, which the first replica creates (from `<state_dir>/operator-token` when that file
    /// exists, so an installation keeps its token, else a new random one). The file is written
    /// (mode 0600, replaced whole) whenever it is missing or holds another token.
    ///
    /// # Errors
    /// The file cannot be read or written, or the store failed.
    pub(crate) async fn shared(
        state_dir: &Path,
        override_token: Option<String>,
        store: &dyn gatehouse_store::Store,
    ) -> std::io::Result<Self> {
        if let Some(token) = override_token.filter(|token| !token.trim().is_empty()) {
            return Ok(Self {
                token: token.trim().to_owned(),
                source: TokenSource::Environment,
            });
        }
        let path = state_dir.join(OPERATOR_TOKEN_FILE);
        let on_disk = match std::fs::read_to_string(&path) {
            Ok(text) => Some(text.trim().to_owned()).filter(|token| !token.is_empty()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        };
        let proposed = match &on_disk {
            Some(token) => token.clone(),
            None => random_token()?,
        };
        let token = store
            .shared_secret(
                OPERATOR_TOKEN,
                &proposed,
                gatehouse_protocol::time::now_ms(),
            )
            .await
            .map_err(std::io::Error::other)?;
        if on_disk.as_deref() != Some(token.as_str()) {
            if on_disk.is_some() {
                tracing::warn!(path = %path.display(), "the operator token file held another token than this gateway's store; it now holds the store's");
            }
            write_private(&path, &token)?;
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
