//! The body of every error answer of the API: `{"error":{"code","message","details"?}}`.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The body of every error answer, whatever its status.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorResponse {
    /// The error.
    pub error: ErrorBody,
}

/// One error: a stable code from the catalogue (`docs/errors.md`), or a code relayed from a
/// node as text, which this build may not know.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    /// The stable code, upper snake case.
    pub code: String,
    /// What happened and what to do, for a person.
    pub message: String,
    /// Structured context that depends on the code (for example [`ContentErrorDetails`] or
    /// [`PayloadTooLargeDetails`], or a node's own details); never content or secrets. Left out
    /// when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<serde_json::Value>,
}

/// The `details` of an `INVALID_REQUEST` or `INVALID_DOCUMENT` about a document's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ContentErrorDetails {
    /// The JSON pointer of the refused field: `/content`.
    pub path: String,
    /// Which rule the content broke (for example `INVALID_FORMAT` for a NUL byte).
    pub code: String,
}

/// The `details` of a `PAYLOAD_TOO_LARGE` upload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PayloadTooLargeDetails {
    /// The largest upload the Gateway accepts, in bytes.
    pub max_bytes: u64,
}
