//! `GET` and `PUT /v1/agents/{agent}/files/{name}`: the four Agent documents (`AGENTS.md`,
//! `SOUL.md`, `IDENTITY.md`, `USER.md`).

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The answer of `GET /v1/agents/{agent}/files/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Document {
    /// The document's name.
    pub name: String,
    /// Its content.
    pub content: String,
}

/// The body of `PUT /v1/agents/{agent}/files/{name}`: exactly this one field (the Gateway
/// checks the raw body itself, to answer each malformed shape with its own message).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DocumentWrite {
    /// The new content: valid UTF-8 without NUL, at most the document limit.
    pub content: String,
}

/// The answer of `PUT /v1/agents/{agent}/files/{name}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DocumentWritten {
    /// The document's name.
    pub name: String,
    /// The bytes written.
    pub size: u64,
}
