//! The node's Ed25519 device identity.

use std::fmt;
use std::path::Path;

use base64::Engine;
use ed25519_dalek::Signer;
use ed25519_dalek::SigningKey;
use ed25519_dalek::VerifyingKey;
use serde::Deserialize;
use serde::Serialize;
use sha2::Digest;

use crate::error::NodeHostError;
use crate::error::Result;
use crate::node_state;

/// The name of the identity file under `node/`.
pub const IDENTITY_FILE: &str = "identity.json";

/// The node's device identity: an Ed25519 key pair and the device id derived from it.
///
/// Guarantees: the device id is the lowercase hex SHA-256 of the raw 32-byte public key, and the
/// public key belongs to the secret key. `Debug` never shows the secret key.
pub struct Identity {
    device_id: String,
    signing_key: SigningKey,
}

/// `identity.json` on disk.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct IdentityFile {
    device_id: String,
    public_key: String,
    secret_key: String,
}

impl Identity {
    /// Loads the identity from `node_dir/identity.json`, or creates one there on first start.
    ///
    /// `node_dir` is created with mode 0700 if missing, and an existing one is tightened to 0700.
    /// A new identity file is written atomically with mode 0600.
    ///
    /// # Errors
    /// - [`NodeHostError::StateSymlink`]: the directory or the identity file is a symbolic link;
    /// - [`NodeHostError::InvalidStateFile`]: the file exists but is not a consistent identity;
    /// - [`NodeHostError::StateIo`]: the directory or file cannot be read or written.
    pub fn load_or_create(node_dir: &Path) -> Result<Identity> {
        node_state::ensure_private_dir(node_dir)?;
        let path = node_dir.join(IDENTITY_FILE);
        if let Some(bytes) = node_state::read_secret_file(&path)? {
            return Identity::from_file_bytes(&path, &bytes);
        }
        let mut seed = [0_u8; 32];
        getrandom::fill(&mut seed).map_err(|err| NodeHostError::StateIo {
            path: path.clone(),
            source: std::io::Error::other(err),
        })?;
        let identity = Identity::from_seed(seed);
        let file = IdentityFile {
            device_id: identity.device_id.clone(),
            public_key: identity.public_key_base64(),
            secret_key: base64url(&identity.signing_key.to_bytes()),
        };
        let bytes = serde_json::to_vec_pretty(&file).map_err(|err| NodeHostError::StateIo {
            path: path.clone(),
            source: std::io::Error::other(err),
        })?;
        node_state::write_secret_file(node_dir, IDENTITY_FILE, &bytes)
            .map_err(|source| NodeHostError::StateIo { path, source })?;
        tracing::info!(device_id = %identity.device_id, "created a new node identity");
        Ok(identity)
    }

    /// Returns the device id: lowercase hex SHA-256 of the raw public key.
    pub fn device_id(&self) -> &str {
        &self.device_id
    }

    /// Returns the raw public key, base64url without padding.
    pub fn public_key_base64(&self) -> String {
        base64url(self.signing_key.verifying_key().as_bytes())
    }

    /// Returns the public key.
    pub fn verifying_key(&self) -> VerifyingKey {
        self.signing_key.verifying_key()
    }

    /// Returns the Ed25519 signature of `message`, base64url without padding.
    pub fn sign_base64(&self, message: &[u8]) -> String {
        base64url(&self.signing_key.sign(message).to_bytes())
    }

    fn from_seed(seed: [u8; 32]) -> Identity {
        let signing_key = SigningKey::from_bytes(&seed);
        Identity {
            device_id: device_id_of(&signing_key.verifying_key()),
            signing_key,
        }
    }

    fn from_file_bytes(path: &Path, bytes: &[u8]) -> Result<Identity> {
        let invalid = |reason: &str| NodeHostError::InvalidStateFile {
            path: path.to_owned(),
            reason: reason.to_owned(),
        };
        let Ok(file) = serde_json::from_slice::<IdentityFile>(bytes) else {
            return Err(invalid("not an identity record"));
        };
        let Ok(seed) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(&file.secret_key)
        else {
            return Err(invalid("secretKey is not base64url"));
        };
        let Ok(seed) = <[u8; 32]>::try_from(seed.as_slice()) else {
            return Err(invalid("secretKey is not 32 bytes"));
        };
        let identity = Identity::from_seed(seed);
        if identity.public_key_base64() != file.public_key {
            return Err(invalid("publicKey does not match secretKey"));
        }
        if identity.device_id != file.device_id {
            return Err(invalid("deviceId does not match publicKey"));
        }
        Ok(identity)
    }
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("device_id", &self.device_id)
            .finish_non_exhaustive()
    }
}

/// Returns the device id of `key`: lowercase hex SHA-256 of its raw 32 bytes.
pub fn device_id_of(key: &VerifyingKey) -> String {
    hex::encode(sha2::Sha256::digest(key.as_bytes()))
}

fn base64url(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[cfg(test)]
#[path = "identity_tests.rs"]
mod tests;
