//! Checkpoints of a session workspace: after each turn the worker reports every eligible entry
//! (regular files with their exec bit, and symbolic links as links), with the content of the
//! files that changed since its previous report. The Gateway keeps them as an immutable,
//! content-addressed checkpoint from which a lost session workspace is rebuilt.
//!
//! Eligible: everything under the workspace except `.git/` and staged inputs
//! (`media/inbound/gatehouse-staged-*`), up to [`MAX_CHECKPOINT_BYTES`] of file content in
//! total; files past the bound are left out and logged. Empty directories are not kept.

use std::collections::BTreeMap;

use base64::Engine;
use gatehouse_fsops::RelPath;
use gatehouse_fsops::Root;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::FetchLimits;
use gatehouse_fsops::root::Kind;
use gatehouse_protocol::worker::CheckpointEntry;
pub use gatehouse_protocol::worker::MAX_CHECKPOINT_BYTES;

/// The page size of directory walks.
const LIST_PAGE: usize = 1000;

/// The most entries a checkpoint holds.
pub const MAX_CHECKPOINT_ENTRIES: usize = 20_000;

/// Returns true for paths a checkpoint leaves out: `.git`, staged inputs, and the turn's skill
/// copies.
pub fn is_excluded(path: &str) -> bool {
    let skills = gatehouse_protocol::worker::SKILL_COPIES_DIR;
    path == ".git"
        || path.starts_with(".git/")
        || path == skills
        || path
            .strip_prefix(skills)
            .is_some_and(|rest| rest.starts_with('/'))
        || path
            .strip_prefix("media/inbound/")
            .is_some_and(|rest| rest.starts_with("gatehouse-staged-"))
}

/// Scans the workspace and returns every eligible entry; a file's content is included when its
/// hash differs from `previous` (path → sha256 of the last report).
pub fn scan(root: &Root, previous: &BTreeMap<String, String>) -> Vec<CheckpointEntry> {
    let mut entries = Vec::new();
    let mut budget = MAX_CHECKPOINT_BYTES;
    let mut pending = vec![String::new()];
    while let Some(dir) = pending.pop() {
        let Ok(rel) = RelPath::parse(&dir) else {
            continue;
        };
        let mut token: Option<String> = None;
        while let Ok(listing) = root.list(&rel, LIST_PAGE, token.as_deref()) {
            for entry in &listing.entries {
                let path = match dir.is_empty() {
                    true => entry.name.clone(),
                    false => format!("{dir}/{}", entry.name),
                };
                if is_excluded(&path) || entries.len() >= MAX_CHECKPOINT_ENTRIES {
                    continue;
                }
                match entry.kind {
                    Kind::Directory => pending.push(path),
                    Kind::Symlink => {
                        // The target is read as a string; the link is never followed.
                        let target = std::fs::read_link(root_path(root, &path)).ok();
                        entries.push(CheckpointEntry {
                            path,
                            kind: String::from("symlink"),
                            executable: false,
                            sha256: None,
                            size: 0,
                            target: target.map(|target| target.to_string_lossy().into_owned()),
                            content_base64: None,
                        });
                    }
                    Kind::File => {
                        if entry.size > budget {
                            tracing::warn!(
                                path,
                                size = entry.size,
                                "left out of the checkpoint: over the size bound"
                            );
                            continue;
                        }
                        if let Some(file) = file_entry(root, &path, previous) {
                            budget -= file.size;
                            entries.push(file);
                        }
                    }
                    Kind::Other => {}
                }
            }
            token = listing.next_page_token;
            if token.is_none() {
                break;
            }
        }
    }
    entries.sort_by(|left, right| left.path.cmp(&right.path));
    entries
}

fn file_entry(
    root: &Root,
    path: &str,
    previous: &BTreeMap<String, String>,
) -> Option<CheckpointEntry> {
    let rel = RelPath::parse(path).ok()?;
    let metadata = root.stat(&rel).ok()?;
    let fetched = root
        .fetch(
            &rel,
            FetchLimits {
                max_bytes: MAX_CHECKPOINT_BYTES,
                content: ContentMode::Transfer,
            },
        )
        .ok()?;
    let content = fetched.content?;
    let sha256 = gatehouse_fsops::commands::sha256_hex(&content);
    let changed = previous.get(path) != Some(&sha256);
    Some(CheckpointEntry {
        path: path.to_owned(),
        kind: String::from("file"),
        executable: metadata.mode & 0o111 != 0,
        size: content.len() as u64,
        content_base64: changed.then(|| base64::engine::general_purpose::STANDARD.encode(&content)),
        sha256: Some(sha256),
        target: None,
    })
}

fn root_path(root: &Root, path: &str) -> std::path::PathBuf {
    std::path::Path::new(root.logical_path()).join(path)
}

/// Returns path → sha256 of the files in `entries`, the `previous` of the next scan.
pub fn hashes(entries: &[CheckpointEntry]) -> BTreeMap<String, String> {
    entries
        .iter()
        .filter_map(|entry| entry.sha256.clone().map(|sha| (entry.path.clone(), sha)))
        .collect()
}
