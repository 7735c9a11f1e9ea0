//! `/v1/memory/...`: search, read, status and reindex of the Gateway's memory index.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

use crate::error::ErrorResponse;

pub use gatehouse_protocol::memory::MemoryReadResult;

/// The query of `GET /v1/memory/search`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemorySearchQuery {
    /// The query text; required and not blank.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub q: Option<String>,
    /// The most results, clamped to 1..=100.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
    /// The lowest score a result may have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
}

/// The answer of `GET /v1/memory/search` (and of the `memory_search` tool).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemorySearchAnswer {
    /// The results, best first.
    pub results: Vec<SearchHit>,
    /// True when the workspace is not connected (or not yet synced) and the retained index
    /// answered.
    pub stale: bool,
    /// How the results were ranked.
    pub mode: SearchMode,
    /// What the operator should know (a paused vector index, a missing embedder).
    pub warnings: Vec<String>,
}

/// How a search ranked its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// Keyword and vector scores combined.
    Hybrid,
    /// Keyword scores only (no embedder, or the vector index is paused).
    Keyword,
}

/// The query of `GET /v1/memory/get`: lines of a memory file, read from the Harness now
/// (never from the index); the answer is a [`MemoryReadResult`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryGetQuery {
    /// The workspace-relative path of the memory file; required.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The first line, 1-based.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u32>,
    /// How many lines.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<u32>,
}

/// The answer of `GET /v1/memory/status`, and the last line of a successful reindex.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryStatus {
    /// Counts of the index.
    #[serde(flatten)]
    pub stats: IndexStats,
    /// The identity of the running configuration.
    pub configured: String,
    /// The state of the vector leg.
    pub vector_search: VectorSearch,
    /// True when the workspace is not connected or not yet synced.
    pub stale: bool,
    /// What the operator should know.
    pub warnings: Vec<String>,
}

/// The state of the vector leg of the index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum VectorSearch {
    /// No embedder is configured.
    Off,
    /// Vectors match the configured embedder and are searched.
    Active,
    /// The index was built with another embedder; vectors are not searched until a reindex.
    Paused,
}

impl VectorSearch {
    /// Returns the state as the wire writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            VectorSearch::Off => "off",
            VectorSearch::Active => "active",
            VectorSearch::Paused => "paused",
        }
    }
}

/// One step of a reindex, for the progress bar.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ReindexProgress {
    /// Files indexed so far.
    pub done: usize,
    /// Files to index.
    pub total: usize,
}

/// One line of the `application/x-ndjson` answer of `POST /v1/memory/reindex`: progress lines,
/// then exactly one last line with the status or the error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ReindexLine {
    /// `{"done","total"}`.
    Progress(ReindexProgress),
    /// `{"status":…}`: the rebuild finished.
    Finished {
        /// The index after the rebuild.
        status: MemoryStatus,
    },
    /// `{"error":{"code","message"}}`: the rebuild failed.
    Failed(ErrorResponse),
}

/// Counts and state, for `gatehouse memory status`.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct IndexStats {
    /// Indexed files.
    pub files: u64,
    /// Indexed chunks.
    pub chunks: u64,
    /// Chunks with a vector.
    pub vectors: u64,
    /// The identity the index was built with.
    pub identity: String,
}

/// One result.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SearchHit {
    /// The workspace-relative path.
    pub path: String,
    /// The first line, 1-based.
    pub start_line: u32,
    /// The last line, 1-based.
    pub end_line: u32,
    /// The final score.
    pub score: f64,
    /// At most 700 characters of the chunk.
    pub snippet: String,
    /// `path#Lstart-Lend`.
    pub citation: String,
}
