//! One-time enrollment codes: issuing them, and their text form.
//!
//! A setup code is a [`SetupCodePayload`] (its URL, bootstrap token and expiry) in its text form,
//! which the protocol crate defines for both sides. The Gateway keeps only the SHA-256 of the
//! bootstrap token; the code is shown once.

use gatehouse_protocol::setup_code::SetupCodePayload;
use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::records::NewSetupCode;

use crate::secrets::random_token;
use crate::secrets::sha256_hex;

/// The default lifetime of a setup code: 10 minutes.
pub const DEFAULT_TTL_SECONDS: u64 = 600;

/// The longest lifetime accepted: 24 hours.
pub(crate) const MAX_TTL_SECONDS: u64 = 86_400;

/// An issued code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedCode {
    /// The code text to hand to the node.
    pub code: String,
    /// When it expires, in Unix milliseconds.
    pub expires_at_ms: i64,
}

/// Issues a code for a node to enroll at `url` within `ttl_seconds` of `now_ms`.
///
/// # Errors
/// Storage failures, or a failed random source (reported as [`StoreError::Internal`]).
pub(crate) async fn issue(
    store: &dyn Store,
    url: &str,
    ttl_seconds: u64,
    now_ms: i64,
) -> Result<IssuedCode, StoreError> {
    let token = random_token().map_err(|error| StoreError::Internal {
        source: Box::new(error),
    })?;
    let ttl_ms = i64::try_from(ttl_seconds.saturating_mul(1000)).unwrap_or(i64::MAX);
    let expires_at_ms = now_ms.saturating_add(ttl_ms);
    store
        .insert_setup_code(&NewSetupCode {
            token_sha256: sha256_hex(token.as_bytes()),
            created_at_ms: now_ms,
            expires_at_ms,
        })
        .await?;
    let payload = SetupCodePayload {
        url: url.to_owned(),
        bootstrap_token: token,
        expires_at_ms,
    };
    Ok(IssuedCode {
        code: payload.encode(),
        expires_at_ms,
    })
}

/// Returns the `/node` WebSocket URL for a configured public base URL such as
/// `https://gw.example.com` or `ws://10.0.0.5:7420`.
pub(crate) fn node_url(public_url: &str) -> String {
    let base = public_url.trim_end_matches('/');
    let base = match base.split_once("://") {
        Some(("https", rest)) => format!("wss://{rest}"),
        Some(("http", rest)) => format!("ws://{rest}"),
        Some(_) => base.to_owned(),
        None => format!("ws://{base}"),
    };
    match base.ends_with("/node") {
        true => base,
        false => format!("{base}/node"),
    }
}
