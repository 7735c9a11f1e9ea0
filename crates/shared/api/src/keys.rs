//! `POST /v1/keys`, `GET /v1/keys` and `DELETE /v1/keys/{name}`: scoped API keys.
//!
//! A key is sent as `Authorization: Bearer <key>`, like the operator token. Its secret is
//! answered once, by `POST /v1/keys`; the Gateway keeps only its hash.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// The body of `POST /v1/keys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ApiKeyParams {
    /// The key's unique name: 1 to 64 letters, digits, `.`, `_` or `-`, starting with a letter
    /// or digit. It is the only thing about the key that logs and the audit trail show.
    pub name: String,
    /// What the key may do; at least one.
    pub scopes: Vec<Scope>,
    /// For a key with the `chat` scope: the session-key prefix its session routes are limited
    /// to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<String>,
    /// How long the key stays valid; it never expires when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_in_seconds: Option<u64>,
    /// The most requests the key may send per minute; unlimited when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// The most turns the key's requests may have queued or running at once; the Gateway's
    /// default share when left out (half its worker capacity).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_turns: Option<u32>,
    /// The most event streams and long polls the key may hold open at once; the Gateway's
    /// default share when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_streams: Option<u32>,
    /// The most media bytes the key may hold: its uploads plus the checkpoints and worktree
    /// versions of the sessions it created; the Gateway's default share when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_quota_bytes: Option<u64>,
    /// The most tokens (`totalTokens`) the turns the key sends may use per UTC day; past it
    /// its messages are refused with `429 BUDGET_EXHAUSTED`. No budget when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
}

/// The answer of `POST /v1/keys`: the key's secret, shown this once, and what it may do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeyCreated {
    /// The key's name.
    pub name: String,
    /// The secret to send as `Authorization: Bearer <key>`; the Gateway cannot show it again.
    pub key: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// The session-key prefix it is limited to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<String>,
    /// When it expires, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// Its requests per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Its concurrent turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_turns: Option<u32>,
    /// Its open streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_streams: Option<u32>,
    /// Its media bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_quota_bytes: Option<u64>,
    /// Its tokens per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
}

/// The answer of `GET /v1/keys`: every key, by name (never a secret or its hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApiKeyList {
    /// The keys, ordered by name.
    pub keys: Vec<ApiKeySummary>,
}

/// One key as `GET /v1/keys` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKeySummary {
    /// The key's name.
    pub name: String,
    /// What it may do.
    pub scopes: Vec<Scope>,
    /// The session-key prefix it is limited to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<String>,
    /// When it was created, Unix milliseconds.
    pub created_at_ms: i64,
    /// When it expires, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<i64>,
    /// When a request last presented it, Unix milliseconds, to within a minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_at_ms: Option<i64>,
    /// Its requests per minute.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requests_per_minute: Option<u32>,
    /// Its concurrent turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrent_turns: Option<u32>,
    /// Its open streams.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_streams: Option<u32>,
    /// Its media bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_quota_bytes: Option<u64>,
    /// Its tokens per UTC day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_day: Option<u64>,
}

/// The answer of `DELETE /v1/keys/{name}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApiKeyRevoked {
    /// Whether a key of that name existed; it is refused from the next request on.
    pub revoked: bool,
}

/// What an API key may do; each `/v1` route needs one of these (the Gateway's route table).
// It is also the wire form of a scope in `POST /v1/keys` and `GET /v1/keys` (`"chat"`, ...), so
// it is serialized as the wire writes it; the doc line above is its description in the API's
// JSON Schema.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Post messages, read its sessions' turns, transcripts and events, upload media, and the
    /// OpenAI-compatible routes.
    Chat,
    /// Every `GET` route.
    Read,
    /// The four Agent documents.
    Documents,
    /// Everything, keys and setup codes included.
    Admin,
}

impl Scope {
    /// Every scope, in the order of the contract.
    pub const ALL: [Scope; 4] = [Scope::Chat, Scope::Read, Scope::Documents, Scope::Admin];

    /// Returns the scope as stored and accepted by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::Chat => "chat",
            Scope::Read => "read",
            Scope::Documents => "documents",
            Scope::Admin => "admin",
        }
    }

    /// Parses a scope.
    pub fn parse(text: &str) -> Option<Scope> {
        Scope::ALL.into_iter().find(|scope| scope.as_str() == text)
    }
}
