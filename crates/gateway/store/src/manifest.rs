//! The trees the store keeps: a checkpoint's manifest ([`CheckpointManifest`]) and a worktree's
//! versions, staged results and merge base ([`StoredManifest`]). Their entries are the worker
//! protocol's [`TreeEntry`], with a file's content as a media blob ([`Blob`]) instead of inline.
//!
//! The JSON text of each is fixed, since stored rows are read back by later releases and a
//! checkpoint's id is the blake3 of its text:
//! - a [`StoredManifest`] is `{"entries":[…]}`, each entry's keys in field order and absent
//!   fields left out;
//! - a [`CheckpointManifest`] has the keys of every object in lexical order (`entries` before
//!   `omitted`, `executable` … `target` in an entry), and the omitted list only when something
//!   was left out. A node's report writes every key of an entry, an absent one as `null`; a tree
//!   committed as a checkpoint leaves absent ones out (see [`CheckpointManifest::report`] and
//!   [`CheckpointManifest::tree`]).

use gatehouse_protocol::worker::EntryContent;
use gatehouse_protocol::worker::OmittedPaths;
use gatehouse_protocol::worker::TreeEntry;

/// Where a stored file's content is: the media blob `media_id` (absent for a link).
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct Blob {
    /// The media blob of the content (files).
    #[serde(rename = "mediaId", default, skip_serializing_if = "Option::is_none")]
    pub media_id: Option<String>,
}

impl EntryContent for Blob {
    /// A stored entry carries no content of its own: the rules judge it as an unchanged file.
    fn inline_len(&self) -> Option<usize> {
        None
    }
}

/// One entry of a stored tree (a checkpoint's or a worktree's): a regular file, whose content
/// is the media blob `content.media_id`, or a link, kept as its target and never followed.
pub type StoredEntry = TreeEntry<Blob>;

/// A stored tree: its entries in path order.
#[derive(
    Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct StoredManifest {
    /// The entries.
    pub entries: Vec<StoredEntry>,
}

/// A checkpoint's manifest: the session workspace's entries, each file's content a media blob,
/// and the paths the checkpoint left out.
///
/// Two manifests are equal when they hold the same entries and omitted list; how absent fields
/// are written ([`CheckpointManifest::report`] or [`CheckpointManifest::tree`]) only decides
/// the text of a new checkpoint. A manifest read back from the store is never written again
/// (a checkpoint is immutable, and its id was computed when it was made).
///
/// It reads every stored form (see [`CheckpointManifest::parse`]).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(from = "ReadCheckpoint")]
pub struct CheckpointManifest {
    /// The entries, in the order the node reported them (path order for a tree).
    pub entries: Vec<StoredEntry>,
    /// What the checkpoint left out.
    pub omitted: OmittedPaths,
    /// How absent fields of an entry are written.
    absent: Absent,
}

/// How a [`CheckpointManifest`] writes the absent fields of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Absent {
    /// As `null` (a node's report).
    Null,
    /// Left out (a tree committed as a checkpoint).
    LeftOut,
}

impl PartialEq for CheckpointManifest {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries && self.omitted == other.omitted
    }
}

impl Eq for CheckpointManifest {}

impl CheckpointManifest {
    /// The manifest of a node's checkpoint report: `entries` with the blobs the Gateway stored
    /// for them, and what the node (or the Gateway) left out. Its text names every field of an
    /// entry, an absent one as `null`.
    #[must_use]
    pub fn report(entries: Vec<StoredEntry>, omitted: OmittedPaths) -> Self {
        Self {
            entries,
            omitted,
            absent: Absent::Null,
        }
    }

    /// A stored tree committed as a checkpoint (a worktree's first tree), with nothing left
    /// out. Its text leaves absent fields out.
    #[must_use]
    pub fn tree(tree: StoredManifest) -> Self {
        Self {
            entries: tree.entries,
            omitted: OmittedPaths::default(),
            absent: Absent::LeftOut,
        }
    }

    /// Returns the entries as a stored tree, without the omitted list.
    #[must_use]
    pub fn to_tree(&self) -> StoredManifest {
        StoredManifest {
            entries: self.entries.clone(),
        }
    }

    /// Returns the manifest's text: what the store keeps, and what a checkpoint's id is the
    /// blake3 of (see the module documentation).
    ///
    /// # Errors
    /// [`crate::StoreError::Internal`] if it cannot be serialized.
    pub fn to_json(&self) -> crate::Result<String> {
        let present = |value| match (value, self.absent) {
            (None, Absent::LeftOut) => None,
            (value, _) => Some(value),
        };
        let written = WrittenCheckpoint {
            entries: self
                .entries
                .iter()
                .map(|entry| WrittenEntry {
                    executable: entry.executable,
                    kind: &entry.kind,
                    media_id: present(entry.content.media_id.as_deref()),
                    path: &entry.path,
                    sha256: present(entry.sha256.as_deref()),
                    size: entry.size,
                    target: present(entry.target.as_deref()),
                })
                .collect(),
            omitted: &self.omitted,
        };
        serde_json::to_string(&written).map_err(|error| crate::StoreError::Internal {
            source: Box::new(error),
        })
    }

    /// Parses a stored manifest (as [`CheckpointManifest::to_json`] wrote it, or as PostgreSQL
    /// gives a `jsonb` back): a missing `entries` or `omitted` is empty, a `null` field absent.
    ///
    /// # Errors
    /// [`crate::StoreError::Corrupt`] (`checkpoint`) when the text is not a manifest.
    pub fn parse(text: &str) -> crate::Result<Self> {
        serde_json::from_str(text).map_err(|_| crate::StoreError::Corrupt { what: "checkpoint" })
    }
}

/// A [`CheckpointManifest`] as it is written, keys in lexical order.
#[derive(serde::Serialize)]
struct WrittenCheckpoint<'a> {
    entries: Vec<WrittenEntry<'a>>,
    #[serde(skip_serializing_if = "OmittedPaths::is_empty")]
    omitted: &'a OmittedPaths,
}

/// One entry of a [`WrittenCheckpoint`], keys in lexical order; `None` leaves a field out and
/// `Some(None)` writes it as `null`.
#[derive(serde::Serialize)]
struct WrittenEntry<'a> {
    executable: bool,
    kind: &'a str,
    #[serde(rename = "mediaId", skip_serializing_if = "Option::is_none")]
    media_id: Option<Option<&'a str>>,
    path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<Option<&'a str>>,
    size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    target: Option<Option<&'a str>>,
}

/// A [`CheckpointManifest`] as it is read.
#[derive(serde::Deserialize)]
struct ReadCheckpoint {
    #[serde(default)]
    entries: Vec<StoredEntry>,
    #[serde(default)]
    omitted: OmittedPaths,
}

impl From<ReadCheckpoint> for CheckpointManifest {
    fn from(read: ReadCheckpoint) -> Self {
        Self::report(read.entries, read.omitted)
    }
}

/// Parses a stored tree.
///
/// # Errors
/// [`crate::StoreError::Corrupt`] when the text is not a manifest.
pub(crate) fn parse_manifest(text: &str) -> crate::Result<StoredManifest> {
    serde_json::from_str(text).map_err(|_| crate::StoreError::Corrupt {
        what: "stored manifest",
    })
}

/// Serializes a stored tree.
///
/// # Errors
/// [`crate::StoreError::Internal`] if it cannot be serialized.
pub(crate) fn manifest_json(manifest: &StoredManifest) -> crate::Result<String> {
    serde_json::to_string(manifest).map_err(|error| crate::StoreError::Internal {
        source: Box::new(error),
    })
}

#[cfg(test)]
#[path = "manifest_tests.rs"]
mod tests;
