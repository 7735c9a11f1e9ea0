//! Checkpoints of a session workspace: after each turn the worker reports every eligible entry
//! (regular files with their exec bit, and symbolic links as links), with the content of the
//! files that changed since its previous report. The Gateway keeps them as an immutable,
//! content-addressed checkpoint from which a lost session workspace is rebuilt.
//!
//! Eligible: everything under the workspace except `.git/` and staged inputs
//! (`media/inbound/gatehouse-staged-*`), up to [`MAX_CHECKPOINT_BYTES`] of file content in
//! total; files past the bound are left out, logged and named in the report's omitted list (so
//! a rebuild over a pinned commit keeps the commit's version of them). Empty directories are not
//! kept.
//!
//! The scan never follows a link: directories are listed and files read through the no-follow
//! [`Root`], a link's target is read with `readlinkat` on its directory's handle and reported as
//! a link, and a link to a directory is never descended into. Every reported entry passes
//! [`gatehouse_protocol::checkpoint::validate_entry`], so the Gateway accepts the manifest.

use std::collections::BTreeMap;

use base64::Engine;
use gatehouse_fsops::RelPath;
use gatehouse_fsops::Root;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::FetchLimits;
use gatehouse_fsops::root::Kind;
use gatehouse_protocol::checkpoint::KIND_FILE;
use gatehouse_protocol::checkpoint::KIND_SYMLINK;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_OMITTED;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_OMITTED_BYTES;
use gatehouse_protocol::checkpoint::MAX_REPORTED_PATH_BYTES;
use gatehouse_protocol::checkpoint::truncated;
use gatehouse_protocol::checkpoint::validate_entry;
use gatehouse_protocol::checkpoint::validate_path;
use gatehouse_protocol::worker::CheckpointEntry;
use gatehouse_protocol::worker::Inline;
pub use gatehouse_protocol::worker::MAX_CHECKPOINT_BYTES;
use gatehouse_protocol::worker::OmittedPaths;

/// The page size of directory walks.
const LIST_PAGE: usize = 1000;

pub use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_ENTRIES;

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

/// What [`scan`] found: the entries, and the paths it left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Scan {
    /// Every eligible entry, in path order.
    pub entries: Vec<CheckpointEntry>,
    /// The eligible paths left out: a file past the size bound or one that cannot be read, a
    /// link that cannot be reported, and whatever came after the entry bound (a directory then
    /// stands for everything below it). At most [`MAX_CHECKPOINT_OMITTED`] are named; past
    /// that, or past [`MAX_CHECKPOINT_OMITTED_BYTES`] of them, the list is marked truncated.
    pub omitted: OmittedPaths,
    /// The bytes of path in `omitted`.
    omitted_bytes: usize,
}

impl Scan {
    /// Names `path` as left out, unless no manifest could name it (an odd name the rules
    /// refuse, which no earlier tree holds either), or the list is full.
    fn omit(&mut self, path: String) {
        if validate_path(&path).is_err() {
            return;
        }
        let fits = self.omitted.paths.len() < MAX_CHECKPOINT_OMITTED
            && self.omitted_bytes + path.len() <= MAX_CHECKPOINT_OMITTED_BYTES;
        match fits {
            true => {
                self.omitted_bytes += path.len();
                self.omitted.paths.push(path);
            }
            false => self.omitted.truncated = true,
        }
    }
}

/// Scans the workspace and returns every eligible entry, a file's content included when its
/// hash differs from `previous` (path → sha256 of the last report), and what it left out.
pub fn scan(root: &Root, previous: &BTreeMap<String, String>) -> Scan {
    let mut scan = Scan::default();
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
                if is_excluded(&path) || entry.kind == Kind::Other {
                    continue;
                }
                if scan.entries.len() >= MAX_CHECKPOINT_ENTRIES {
                    scan.omit(path);
                    continue;
                }
                match entry.kind {
                    Kind::Directory => pending.push(path),
                    Kind::Symlink => match link_entry(root, path.clone()) {
                        Some(link) => scan.entries.push(link),
                        None => scan.omit(path),
                    },
                    Kind::File => {
                        if entry.size > budget {
                            tracing::warn!(
                                path,
                                size = entry.size,
                                "left out of the checkpoint: over the size bound"
                            );
                            scan.omit(path);
                            continue;
                        }
                        // The file may have grown since the listing: the bound holds on what
                        // was read.
                        match file_entry(root, &path, previous).filter(|file| file.size <= budget) {
                            Some(file) => {
                                budget -= file.size;
                                scan.entries.push(file);
                            }
                            None => scan.omit(path),
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
    scan.entries
        .sort_by(|left, right| left.path.cmp(&right.path));
    scan.omitted.paths.sort();
    scan
}

/// Returns the entry of the link at `path`: its target is read on the handle of its directory
/// (`readlinkat`), never followed. A link that cannot be read, or whose target is not UTF-8 or
/// not a valid manifest target, is left out and logged.
fn link_entry(root: &Root, path: String) -> Option<CheckpointEntry> {
    let rel = RelPath::parse(&path).ok()?;
    let target = match root.read_link(&rel) {
        Ok(target) => target,
        Err(error) => {
            tracing::warn!(path, error = %error, "left out of the checkpoint: the link cannot be read");
            return None;
        }
    };
    let Ok(target) = target.into_string() else {
        tracing::warn!(
            path,
            "left out of the checkpoint: the link target is not UTF-8"
        );
        return None;
    };
    reportable(CheckpointEntry {
        path,
        kind: String::from(KIND_SYMLINK),
        executable: false,
        sha256: None,
        size: 0,
        target: Some(target),
        content: Inline::default(),
    })
}

/// Returns `entry` when the manifest rules accept it on its own, and leaves it out (logged)
/// otherwise, so one odd name (too long, `a\..`) cannot make the whole checkpoint refused.
fn reportable(entry: CheckpointEntry) -> Option<CheckpointEntry> {
    match validate_entry(&entry) {
        Ok(()) => Some(entry),
        Err(violation) => {
            tracing::warn!(
                path = truncated(&entry.path, MAX_REPORTED_PATH_BYTES),
                reason = violation.reason(),
                "left out of the checkpoint: the manifest rules refuse the entry"
            );
            None
        }
    }
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
    reportable(CheckpointEntry {
        path: path.to_owned(),
        kind: String::from(KIND_FILE),
        executable: metadata.mode & 0o111 != 0,
        size: content.len() as u64,
        content: Inline {
            base64: changed.then(|| base64::engine::general_purpose::STANDARD.encode(&content)),
        },
        sha256: Some(sha256),
        target: None,
    })
}

/// Returns path → sha256 of the files in `entries`, the `previous` of the next scan.
pub fn hashes(entries: &[CheckpointEntry]) -> BTreeMap<String, String> {
    entries
        .iter()
        .filter_map(|entry| entry.sha256.clone().map(|sha| (entry.path.clone(), sha)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use gatehouse_fsops::Root;
    use gatehouse_protocol::checkpoint::validate_manifest;
    use pretty_assertions::assert_eq;

    use crate::checkpoint::scan;

    /// Links planted by the sandbox (to a directory outside, to a file outside, absolute) are
    /// captured as link entries with their targets; nothing behind them is read or listed.
    #[test]
    fn planted_links_are_captured_as_links_and_never_followed() {
        let temp = tempfile::tempdir().unwrap();
        let base = temp.path().canonicalize().unwrap();
        let outside = base.join("outside");
        std::fs::create_dir_all(outside.join("deep")).unwrap();
        std::fs::write(outside.join("secret.txt"), "OUTSIDE-SECRET").unwrap();
        std::fs::write(outside.join("deep/secret.txt"), "OUTSIDE-SECRET").unwrap();
        let workspace = base.join("workspace");
        std::fs::create_dir_all(workspace.join("dir")).unwrap();
        std::fs::write(workspace.join("dir/a.txt"), "inside").unwrap();
        std::os::unix::fs::symlink(&outside, workspace.join("to-outside")).unwrap();
        std::os::unix::fs::symlink(outside.join("secret.txt"), workspace.join("dir/secret"))
            .unwrap();
        std::os::unix::fs::symlink("/etc", workspace.join("etc")).unwrap();
        let root = Root::open(&workspace).unwrap();
        let entries = scan(&root, &BTreeMap::new()).entries;
        let summary: Vec<(&str, &str, Option<&str>)> = entries
            .iter()
            .map(|entry| {
                (
                    entry.path.as_str(),
                    entry.kind.as_str(),
                    entry.target.as_deref(),
                )
            })
            .collect();
        let outside_text = outside.to_str().unwrap().to_owned();
        let secret_text = outside.join("secret.txt").to_str().unwrap().to_owned();
        assert_eq!(
            summary,
            vec![
                ("dir/a.txt", "file", None),
                ("dir/secret", "symlink", Some(secret_text.as_str())),
                ("etc", "symlink", Some("/etc")),
                ("to-outside", "symlink", Some(outside_text.as_str())),
            ]
        );
        let serialized = serde_json::to_string(&entries).unwrap();
        assert!(
            !serialized.contains("T1VUU0lERS1TRUNSRVQ"),
            "outside content was read"
        );
        assert_eq!(validate_manifest(&entries), Ok(()));
    }

    /// A file past the size bound is left out and named in the omitted list, so a rebuild can
    /// keep another version of it rather than lose it; the rest is reported.
    #[test]
    fn a_file_past_the_bound_is_named_as_omitted() {
        let temp = tempfile::tempdir().unwrap();
        let workspace = temp.path().canonicalize().unwrap();
        std::fs::create_dir_all(workspace.join("data")).unwrap();
        let big = vec![7u8; usize::try_from(crate::checkpoint::MAX_CHECKPOINT_BYTES).unwrap() + 1];
        std::fs::write(workspace.join("data/big.bin"), big).unwrap();
        std::fs::write(workspace.join("small.txt"), "small").unwrap();
        // A name the manifest rules refuse is left out of the entries and of the omitted list,
        // so it cannot make the Gateway refuse the whole checkpoint.
        std::os::unix::fs::symlink("small.txt", workspace.join("odd\\..")).unwrap();
        let root = Root::open(&workspace).unwrap();
        let scan = scan(&root, &BTreeMap::new());
        let paths: Vec<&str> = scan
            .entries
            .iter()
            .map(|entry| entry.path.as_str())
            .collect();
        assert_eq!(paths, ["small.txt"]);
        assert_eq!(scan.omitted.paths, ["data/big.bin"]);
        assert!(!scan.omitted.truncated);
    }
}
