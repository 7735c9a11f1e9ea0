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

/// The answer of `DELETE /v1/media/{mediaId}`: the caller's upload of the blob is gone and no
/// longer counts against its media share. The bytes are deleted once nothing else holds them
/// (another key's upload of the same bytes, a turn's attachment, a checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MediaDeleted {
    /// Always `true`: a caller that holds no upload of the blob is answered `404`.
    pub deleted: bool,
    /// Whether no upload holds the blob any more, so its bytes were collected unless something
    /// else refers to them.
    pub unpinned: bool,
}
