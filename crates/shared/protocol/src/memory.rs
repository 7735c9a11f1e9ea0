//! `workspace.memory`: the node's memory file service. The Gateway keeps the index and the
//! embedding configuration; the node only lists, reads and watches the memory files of its
//! workspace: `MEMORY.md`, `memory.md`, `DREAMS.md`, `dreams.md` and `memory/**/*.md`, plus the
//! extra paths a request names. Nothing is followed through a symbolic link.
//!
//! Paths on the wire are workspace-relative and must already be canonical (no `.`, `..`, empty
//! segments or trailing `/`). The request names the workspace directory, which must be this
//! node's.
//!
//! `watch` is a streaming command: its `node.invoke.progress` chunks are JSON string lines,
//! `"change"` (after the debounce) or `"unavailable"`; it runs until it is cancelled. The watch
//! request carries only the agent id, the extra paths and the debounce, never the embedding
//! configuration.

use serde::Deserialize;
use serde::Serialize;

/// `workspace.memory`.
pub use crate::commands::WORKSPACE_MEMORY;

/// The default debounce of `watch`, in milliseconds.
pub const DEFAULT_WATCH_DEBOUNCE_MS: u64 = 1500;

/// The largest memory file the node reads, in bytes; larger ones are listed as skipped.
pub const MAX_MEMORY_FILE_BYTES: u64 = 4 * 1024 * 1024;

/// The default number of lines `read` returns.
pub const DEFAULT_READ_LINES: u32 = 120;

/// The most characters `read` returns.
pub const MAX_READ_CHARS: usize = 12_000;

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MemoryOp {
    /// List the memory files with their sizes and hashes.
    List,
    /// Read lines of one file, for `memory_get`.
    Read,
    /// Read one whole file and its hash, for indexing.
    ReadForIndexing,
    /// Stream `"change"` / `"unavailable"` lines.
    Watch,
}

/// Parameters of `workspace.memory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryRequest {
    /// The operation.
    pub op: MemoryOp,
    /// The workspace directory; it must be this node's workspace.
    pub workspace_dir: String,
    /// The agent whose memory this is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_id: Option<String>,
    /// Extra workspace-relative files or directories of Markdown notes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_paths: Vec<String>,
    /// The file, for `read` and `readForIndexing`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rel_path: Option<String>,
    /// The first line for `read`, 1-based (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<u32>,
    /// How many lines `read` returns (default [`DEFAULT_READ_LINES`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<u32>,
    /// The debounce of `watch`, in milliseconds (default [`DEFAULT_WATCH_DEBOUNCE_MS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub debounce_ms: Option<u64>,
}

/// One listed memory file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryFile {
    /// The workspace-relative path.
    pub path: String,
    /// The size in bytes.
    pub size: u64,
    /// The modification time in Unix milliseconds.
    pub mtime_ms: i64,
    /// The SHA-256 of the content, lowercase hex.
    pub sha256: String,
}

/// A file that was not listed, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedFile {
    /// The workspace-relative path.
    pub path: String,
    /// Why: `symlink`, `too-large`, `hardlink`, `unreadable`, `not-utf8`.
    pub reason: String,
}

/// Result of `list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryListResult {
    /// The memory files, sorted by path.
    pub files: Vec<MemoryFile>,
    /// What was left out.
    #[serde(default)]
    pub skipped: Vec<SkippedFile>,
}

/// Result of `read`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemoryReadResult {
    /// The workspace-relative path.
    pub path: String,
    /// The lines, joined with `\n`.
    pub text: String,
    /// The first line returned, 1-based.
    pub from: u32,
    /// How many lines were returned.
    pub lines: u32,
    /// The file's line count.
    pub total_lines: u32,
    /// True when lines follow the returned ones.
    pub more: bool,
}

/// Result of `readForIndexing`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MemoryIndexingResult {
    /// The workspace-relative path.
    pub path: String,
    /// The whole text.
    pub text: String,
    /// The SHA-256 of the content, lowercase hex.
    pub sha256: String,
}

/// Result of `workspace.memory`: its shape follows the request's [`MemoryOp`]. On the wire it
/// is the bare result of the operation (no tag); a reader tells them apart by their fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MemoryAnswer {
    /// The answer to `list`.
    List(MemoryListResult),
    /// The answer to `read`.
    Read(MemoryReadResult),
    /// The answer to `readForIndexing`.
    Indexing(MemoryIndexingResult),
    /// The end of a `watch`: `null`.
    WatchEnded,
}

/// A `watch` line: the node saw memory files change.
pub const WATCH_CHANGE: &str = "change";

/// A `watch` line: the node cannot watch the workspace any more.
pub const WATCH_UNAVAILABLE: &str = "unavailable";

/// Returns true when `path` (workspace-relative, canonical) is one of the memory files:
/// `MEMORY.md`, `memory.md`, `DREAMS.md`, `dreams.md` or a `.md` file under `memory/`.
pub fn is_memory_path(path: &str) -> bool {
    matches!(path, "MEMORY.md" | "memory.md" | "DREAMS.md" | "dreams.md")
        || (path.starts_with("memory/") && path.ends_with(".md"))
}

/// Returns true when `path` is canonical and relative: not empty, no leading or trailing `/`,
/// no empty, `.` or `..` segment, no NUL and no backslash.
pub fn is_canonical_relative(path: &str) -> bool {
    !path.is_empty()
        && !path.contains('\0')
        && !path.contains('\\')
        && path
            .split('/')
            .all(|segment| !segment.is_empty() && segment != "." && segment != "..")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_paths_and_canonical_forms() {
        for path in [
            "MEMORY.md",
            "memory.md",
            "DREAMS.md",
            "memory/2026-11-29.md",
            "memory/a/b.md",
        ] {
            assert!(is_memory_path(path), "{path}");
        }
        for path in ["USER.md", "memory/a.txt", "notes/memory.md", "Memory.md"] {
            assert!(!is_memory_path(path), "{path}");
        }
        for path in [
            "",
            "/MEMORY.md",
            "memory//a.md",
            "memory/./a.md",
            "memory/../x.md",
            "memory/",
            "a\\b",
        ] {
            assert!(!is_canonical_relative(path), "{path:?}");
        }
        assert!(is_canonical_relative("memory/2026/a.md"));
    }

    #[test]
    fn each_memory_answer_reads_back_as_its_own_operation() {
        let answers = [
            serde_json::json!({"files": [], "skipped": []}),
            serde_json::json!({"path": "MEMORY.md", "text": "a", "from": 1, "lines": 1, "totalLines": 1, "more": false}),
            serde_json::json!({"path": "MEMORY.md", "text": "a", "sha256": "00"}),
            serde_json::Value::Null,
        ];
        let kinds: Vec<&str> = answers
            .into_iter()
            .map(
                |answer| match serde_json::from_value::<MemoryAnswer>(answer) {
                    Ok(MemoryAnswer::List(_)) => "list",
                    Ok(MemoryAnswer::Read(_)) => "read",
                    Ok(MemoryAnswer::Indexing(_)) => "indexing",
                    Ok(MemoryAnswer::WatchEnded) => "watch",
                    Err(_) => "error",
                },
            )
            .collect();
        assert_eq!(kinds, ["list", "read", "indexing", "watch"]);
        let encoded = serde_json::to_value(MemoryAnswer::WatchEnded).unwrap_or_default();
        assert_eq!(encoded, serde_json::Value::Null);
        assert!(serde_json::from_value::<MemoryAnswer>(serde_json::json!({"path": "x"})).is_err());
    }

    #[test]
    fn requests_use_camel_case_and_omit_defaults() {
        let request = MemoryRequest {
            op: MemoryOp::ReadForIndexing,
            workspace_dir: String::from("/ws"),
            agent_id: None,
            extra_paths: Vec::new(),
            rel_path: Some(String::from("MEMORY.md")),
            from: None,
            lines: None,
            debounce_ms: None,
        };
        assert_eq!(
            serde_json::to_value(&request).unwrap_or_default(),
            serde_json::json!({"op": "readForIndexing", "workspaceDir": "/ws", "relPath": "MEMORY.md"})
        );
    }
}
