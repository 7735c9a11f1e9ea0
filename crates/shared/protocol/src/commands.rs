//! The workspace node commands: names, parameters and results.
//!
//! Paths on the wire are absolute POSIX paths on the node, valid UTF-8, without NUL. The node maps
//! them under its workspace root; anything outside the root is refused. Content travels as
//! standard base64 with padding.
//!
//! `followSymlinks` is accepted for compatibility with the OpenClaw file-transfer plugin, but a
//! Gatehouse node never follows a symbolic link, whatever it says.

use serde::Deserialize;
use serde::Serialize;

/// `file.fetch`: read a file.
pub const FILE_FETCH: &str = "file.fetch";
/// `file.stat`: describe a path.
pub const FILE_STAT: &str = "file.stat";
/// `file.write`: write a file atomically.
pub const FILE_WRITE: &str = "file.write";
/// `file.create`: write a file that must not exist yet.
pub const FILE_CREATE: &str = "file.create";
/// `dir.list`: list a directory, one page at a time.
pub const DIR_LIST: &str = "dir.list";
/// `workspace.memory`: the memory file service (duplex).
pub const WORKSPACE_MEMORY: &str = "workspace.memory";
/// `workspace.skills`: the skills discovery service (duplex).
pub const WORKSPACE_SKILLS: &str = "workspace.skills";

/// The five file commands every workspace node serves.
pub use crate::command::FILE_COMMANDS;

/// The default `maxBytes` of `file.fetch`: 8 MiB.
pub const DEFAULT_FETCH_MAX_BYTES: u64 = 8 * 1024 * 1024;

/// The hard limit of one transfer in either direction: 16 MiB. Larger `maxBytes` are clamped.
pub const HARD_MAX_BYTES: u64 = 16 * 1024 * 1024;

/// The default page size of `dir.list`.
pub const DEFAULT_DIR_LIST_LIMIT: u32 = 200;

/// The largest page size of `dir.list`; larger limits are clamped.
pub const MAX_DIR_LIST_LIMIT: u32 = 5000;

/// Parameters of `file.fetch`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileFetchParams {
    /// The absolute path to read.
    pub path: String,
    /// The largest size accepted; default [`DEFAULT_FETCH_MAX_BYTES`], clamped to [`HARD_MAX_BYTES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
    /// Accepted and ignored: symbolic links are never followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    /// When true, check and report the size without sending the content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight_only: Option<bool>,
}

/// Result of `file.fetch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileFetchResult {
    /// Always true.
    pub ok: bool,
    /// The canonical absolute path that was read.
    pub path: String,
    /// The file size in bytes.
    pub size: u64,
    /// A MIME type guessed from the file name.
    pub mime_type: String,
    /// The content, standard base64; absent on preflight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
    /// Lowercase hex SHA-256 of the content; absent on preflight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

/// Parameters of `file.stat`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileStatParams {
    /// The absolute path to describe.
    pub path: String,
    /// Accepted and ignored: symbolic links are never followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
}

/// The kind of a file-system entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum EntryKind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link (reported, never followed).
    Symlink,
    /// Anything else: FIFO, socket, device.
    Other,
}

/// Result of `file.stat`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileStatResult {
    /// Always true.
    pub ok: bool,
    /// The canonical absolute path.
    pub path: String,
    /// What the path is. A final symbolic link is described, not followed.
    pub kind: EntryKind,
    /// The size in bytes.
    pub size: u64,
    /// The permission bits, for example `0o644` as 420.
    pub mode: u32,
    /// The modification time in Unix milliseconds.
    pub mtime_ms: i64,
    /// True when the file has more than one hard link.
    pub hard_linked: bool,
}

/// Parameters of `file.write`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileWriteParams {
    /// The absolute path to write.
    pub path: String,
    /// The content, standard base64 with padding; must round-trip exactly.
    pub content_base64: String,
    /// Whether an existing file may be replaced.
    #[serde(default)]
    pub overwrite: bool,
    /// Whether missing parent directories are created.
    #[serde(default)]
    pub create_parents: bool,
    /// When set, the decoded content must have this lowercase hex SHA-256; checked before the disk
    /// is touched.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_sha256: Option<String>,
    /// Accepted and ignored: symbolic links are never followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub follow_symlinks: Option<bool>,
    /// When true, run every check and write nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight_only: Option<bool>,
}

/// Parameters of `file.create`: a write that never replaces an existing file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileCreateParams {
    /// The absolute path to create.
    pub path: String,
    /// The content, standard base64 with padding.
    pub content_base64: String,
    /// Whether missing parent directories are created.
    #[serde(default)]
    pub create_parents: bool,
    /// When set, the decoded content must have this lowercase hex SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_sha256: Option<String>,
    /// When true, run every check and write nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preflight_only: Option<bool>,
}

/// Result of `file.write` and `file.create`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileWriteResult {
    /// Always true.
    pub ok: bool,
    /// The canonical absolute path written.
    pub path: String,
    /// The number of bytes written.
    pub size: u64,
    /// Lowercase hex SHA-256 of the content.
    pub sha256: String,
    /// True when an existing file was replaced.
    pub overwritten: bool,
}

/// Parameters of `dir.list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirListParams {
    /// The absolute path of the directory.
    pub path: String,
    /// The page size; default [`DEFAULT_DIR_LIST_LIMIT`], clamped to [`MAX_DIR_LIST_LIMIT`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
    /// The `nextPageToken` of the previous page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_token: Option<String>,
}

/// One entry of a `dir.list` page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirEntry {
    /// The entry's file name (no slash).
    pub name: String,
    /// What the entry is; symbolic links are reported as such.
    pub kind: EntryKind,
    /// The size in bytes.
    pub size: u64,
    /// The modification time in Unix milliseconds.
    pub mtime_ms: i64,
}

/// Result of `dir.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirListResult {
    /// Always true.
    pub ok: bool,
    /// The canonical absolute path of the directory.
    pub path: String,
    /// The entries of this page, sorted by the bytes of their names.
    pub entries: Vec<DirEntry>,
    /// Present when more entries follow: pass it as `pageToken` to get the next page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_page_token: Option<String>,
}
