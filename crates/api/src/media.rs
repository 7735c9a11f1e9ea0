//! `POST /v1/media`: an upload (the raw body, with `Content-Type` and `X-Filename`).
//! `GET /v1/media/{mediaId}` answers the bytes themselves.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The answer of `POST /v1/media`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MediaUploaded {
    /// The media id: the blake3 of the bytes, 64 lowercase hex digits.
    pub media_id: String,
    /// The SHA-256 of the bytes, lowercase hex.
    pub sha256: String,
    /// The size in bytes.
    pub size: u64,
    /// The MIME type recorded for downloads.
    pub mime_type: String,
}
