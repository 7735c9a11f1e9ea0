//! Helpers for tests that prove a tree was not touched: a snapshot of every entry with its mode
//! and its content or link target. They read by path and follow nothing; they are for tests
//! only and no product code calls them.

use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::path::PathBuf;

/// One entry of a [`tree`] snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The permission bits.
    pub mode: u32,
    /// The content of a file, the target of a link, or `<dir>`.
    pub content: Vec<u8>,
}

/// Returns every entry under `dir`, and `dir` itself, with its mode and its content (or link
/// target), so a creation, a removal, a chmod or a write anywhere below shows as a difference.
/// Links are recorded, never followed.
///
/// # Panics
/// When an entry cannot be read: a snapshot must be complete to prove anything.
pub fn tree(dir: &Path) -> BTreeMap<PathBuf, Snapshot> {
    let mut entries = BTreeMap::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(metadata) = std::fs::symlink_metadata(&current) else {
            panic!("cannot stat {}", current.display());
        };
        let content = match metadata.file_type() {
            kind if kind.is_dir() => {
                let Ok(listing) = std::fs::read_dir(&current) else {
                    panic!("cannot list {}", current.display());
                };
                for entry in listing.flatten() {
                    pending.push(entry.path());
                }
                b"<dir>".to_vec()
            }
            kind if kind.is_symlink() => std::fs::read_link(&current)
                .map(|target| target.into_os_string().into_encoded_bytes())
                .unwrap_or_default(),
            _ => std::fs::read(&current).unwrap_or_default(),
        };
        entries.insert(
            current,
            Snapshot {
                mode: metadata.mode() & 0o7777,
                content,
            },
        );
    }
    entries
}
