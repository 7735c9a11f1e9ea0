//! The `webhook` kind: HMAC-SHA256 signatures over `"<timestamp>.<raw body>"` in both
//! directions, and the adapter that POSTs replies to `reply-url`.
//!
//! Headers: `X-Gatehouse-Timestamp: <unix seconds>` and
//! `X-Gatehouse-Signature: sha256=<hex>`. A timestamp more than [`MAX_SKEW_SECONDS`] from the
//! clock is refused, so a captured request cannot be replayed later; a replay inside the window
//! carries the same `messageId` and admits nothing.

use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use gatehouse_api::channels::WebhookAttachment;
use gatehouse_api::channels::WebhookDelivery;
use hmac::Mac;
use sha2::Sha256;

use crate::adapter::Adapter;
use crate::adapter::Outgoing;
use crate::adapter::SendError;
use crate::secret::Secret;

/// The header with the request's Unix time in seconds.
pub const TIMESTAMP_HEADER: &str = "x-gatehouse-timestamp";

/// The header with `sha256=<hex HMAC>`.
pub const SIGNATURE_HEADER: &str = "x-gatehouse-signature";

/// How far a request's timestamp may be from the clock: five minutes.
pub const MAX_SKEW_SECONDS: i64 = 300;

/// How long one reply POST may take.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(15);

type HmacSha256 = hmac::Hmac<Sha256>;

/// How a platform signs its requests with HMAC-SHA256: the headers, what is signed
/// (`<signed_prefix><timestamp><separator><body>`), and the prefix of the hex tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scheme {
    /// The header with the Unix seconds the request was signed at.
    pub timestamp_header: &'static str,
    /// The header with the signature.
    pub signature_header: &'static str,
    /// What the signed text starts with.
    pub signed_prefix: &'static str,
    /// What separates the timestamp and the body in the signed text.
    pub separator: &'static str,
    /// What the hex tag starts with in the header.
    pub tag_prefix: &'static str,
}

/// The `webhook` kind's scheme: `sha256=HMAC("<timestamp>.<body>")`.
pub const GATEHOUSE: Scheme = Scheme {
    timestamp_header: TIMESTAMP_HEADER,
    signature_header: SIGNATURE_HEADER,
    signed_prefix: "",
    separator: ".",
    tag_prefix: "sha256=",
};

fn mac(scheme: &Scheme, secret: &Secret, timestamp: &str, body: &[u8]) -> HmacSha256 {
    #[expect(clippy::expect_used, reason = "HMAC takes a key of any length")]
    let mut mac = HmacSha256::new_from_slice(secret.expose().as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(scheme.signed_prefix.as_bytes());
    mac.update(timestamp.as_bytes());
    mac.update(scheme.separator.as_bytes());
    mac.update(body);
    mac
}

/// Returns the `X-Gatehouse-Signature` value of `body` sent at `timestamp`.
#[must_use]
pub fn sign(secret: &Secret, timestamp: i64, body: &[u8]) -> String {
    let tag = mac(&GATEHOUSE, secret, &timestamp.to_string(), body)
        .finalize()
        .into_bytes();
    format!("sha256={}", hex::encode(tag))
}

/// Why a request's signature was refused (each answers `CHANNEL_SIGNATURE_INVALID`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// A header is missing.
    #[error("the request has no {0} header")]
    Missing(&'static str),
    /// The timestamp is not Unix seconds.
    #[error("the timestamp is not Unix seconds")]
    BadTimestamp,
    /// The timestamp is more than [`MAX_SKEW_SECONDS`] from the clock.
    #[error("the timestamp is more than 300 seconds from the Gateway's clock")]
    Stale,
    /// The signature is not `sha256=<64 hex digits>` or does not match.
    #[error("the signature does not match")]
    Mismatch,
}

/// Checks a request's headers against `body` at `now_s` (Unix seconds), in constant time.
///
/// # Errors
/// [`SignatureError`].
pub fn verify(
    secret: &Secret,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_s: i64,
) -> Result<(), SignatureError> {
    verify_with(&GATEHOUSE, secret, timestamp, signature, body, now_s)
}

/// [`verify`] under another platform's `scheme`.
///
/// # Errors
/// [`SignatureError`].
pub fn verify_with(
    scheme: &Scheme,
    secret: &Secret,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_s: i64,
) -> Result<(), SignatureError> {
    let timestamp = timestamp.ok_or(SignatureError::Missing(scheme.timestamp_header))?;
    let signature = signature.ok_or(SignatureError::Missing(scheme.signature_header))?;
    if timestamp.is_empty()
        || timestamp.len() > 12
        || !timestamp.bytes().all(|b| b.is_ascii_digit())
    {
        return Err(SignatureError::BadTimestamp);
    }
    let seconds: i64 = timestamp
        .parse()
        .map_err(|_| SignatureError::BadTimestamp)?;
    if (now_s - seconds).abs() > MAX_SKEW_SECONDS {
        return Err(SignatureError::Stale);
    }
    let tag = signature
        .strip_prefix(scheme.tag_prefix)
        .and_then(|hex_tag| hex::decode(hex_tag).ok())
        .ok_or(SignatureError::Mismatch)?;
    mac(scheme, secret, timestamp, body)
        .verify_slice(&tag)
        .map_err(|_| SignatureError::Mismatch)
}

/// Sends replies to a webhook channel's `reply-url`.
pub struct WebhookAdapter {
    client: reqwest::Client,
    reply_url: url::Url,
    secret: Secret,
}

impl WebhookAdapter {
    /// An adapter that POSTs to `reply_url`, signed with `secret`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(reply_url: url::Url, secret: Secret) -> Result<Self, reqwest::Error> {
        let client = reqwest::Client::builder()
            .timeout(SEND_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            client,
            reply_url,
            secret,
        })
    }
}

#[async_trait]
impl Adapter for WebhookAdapter {
    async fn send(&self, message: &Outgoing) -> Result<(), SendError> {
        // Files inline up to a bound; the others are named in the text.
        let mut text = message.text.clone();
        let mut attachments = Vec::new();
        let mut inline: u64 = 0;
        for file in &message.files {
            inline = inline.saturating_add(file.bytes.len() as u64);
            if inline > crate::files::MAX_WEBHOOK_FILE_BYTES {
                text.push_str("\n\n");
                text.push_str(&crate::files::unsent_note(
                    &file.name,
                    &format!(
                        "a webhook reply carries at most {} bytes of files",
                        crate::files::MAX_WEBHOOK_FILE_BYTES
                    ),
                ));
                continue;
            }
            attachments.push(WebhookAttachment {
                file_name: file.name.clone(),
                mime_type: file.mime_type.clone(),
                base64: base64::engine::general_purpose::STANDARD.encode(&file.bytes),
            });
        }
        let body = WebhookDelivery {
            delivery_id: message.delivery_id.clone(),
            in_reply_to: message.in_reply_to.clone(),
            conversation: message.conversation.clone(),
            sender: message.recipient.clone(),
            text,
            attachments,
        };
        let body = serde_json::to_vec(&body).map_err(|error| SendError::Permanent {
            message: format!("cannot encode the reply: {error}"),
        })?;
        let timestamp = unix_seconds();
        let answer = self
            .client
            .post(self.reply_url.clone())
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(TIMESTAMP_HEADER, timestamp.to_string())
            .header(SIGNATURE_HEADER, sign(&self.secret, timestamp, &body))
            .body(body)
            .send()
            .await
            .map_err(|error| SendError::Transient {
                // reqwest's text names the URL, which holds no credential (refused at config).
                message: format!("the reply URL did not answer: {}", error.without_url()),
                retry_after: None,
            })?;
        let status = answer.status();
        if status.is_success() {
            return Ok(());
        }
        Err(SendError::Transient {
            message: format!("the reply URL answered HTTP {}", status.as_u16()),
            retry_after: retry_after(answer.headers()),
        })
    }
}

/// Reads `Retry-After` given in seconds (the form webhook receivers and chat APIs use).
#[must_use]
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    headers
        .get(reqwest::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

fn unix_seconds() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    fn secret() -> Secret {
        Secret::new("shared-secret".into())
    }

    #[test]
    fn a_signature_verifies_only_for_its_body_time_and_secret() {
        let body = br#"{"messageId":"m1"}"#;
        let signature = sign(&secret(), 1_000, body);
        assert!(signature.starts_with("sha256=") && signature.len() == 7 + 64);
        assert_eq!(
            verify(&secret(), Some("1000"), Some(&signature), body, 1_100),
            Ok(())
        );
        assert_eq!(
            verify(&secret(), Some("1000"), Some(&signature), b"{}", 1_100),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(
                &Secret::new("other".into()),
                Some("1000"),
                Some(&signature),
                body,
                1_100
            ),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&secret(), Some("1001"), Some(&signature), body, 1_100),
            Err(SignatureError::Mismatch)
        );
        assert_eq!(
            verify(&secret(), Some("1000"), Some(&signature), body, 1_301),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(&secret(), Some("1000"), Some(&signature), body, 699),
            Err(SignatureError::Stale)
        );
        assert_eq!(
            verify(&secret(), None, Some(&signature), body, 1_000),
            Err(SignatureError::Missing(TIMESTAMP_HEADER))
        );
        assert_eq!(
            verify(&secret(), Some("1000"), None, body, 1_000),
            Err(SignatureError::Missing(SIGNATURE_HEADER))
        );
        assert_eq!(
            verify(&secret(), Some("-5"), Some(&signature), body, 1_000),
            Err(SignatureError::BadTimestamp)
        );
        let upper = signature.replace("sha256=", "SHA256=");
        assert_eq!(
            verify(&secret(), Some("1000"), Some(&upper), body, 1_000),
            Err(SignatureError::Mismatch)
        );
    }
}
