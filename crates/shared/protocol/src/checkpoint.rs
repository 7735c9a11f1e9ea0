//! Validation of checkpoint manifests: the one rule set that the Gateway applies when a node
//! reports a manifest and before it sends one for a restore, and that the node applies before
//! it restores one. It is a pure function of the entries (no I/O, no clock), so both sides
//! refuse exactly the same manifests.
//!
//! A valid manifest:
//! - has at most [`MAX_CHECKPOINT_ENTRIES`] entries and at most [`MAX_CHECKPOINT_BYTES`] of file
//!   content in total (the sum of the `size` fields);
//! - names each entry by a canonical relative path: not empty, no leading `/`, no empty, `.` or
//!   `..` segment (with either slash), no NUL, at most [`MAX_CHECKPOINT_PATH_BYTES`] bytes and
//!   255 bytes per segment;
//! - names no path twice, and no entry below another entry: every ancestor of an entry is an
//!   implicit directory, so an entry below a `symlink` (or a `file`) entry is refused; this is
//!   what keeps a restore from writing through a link it has just created;
//! - has only the known kinds, each complete and consistent: a `file` has a 64-digit lowercase
//!   hex `sha256`, no `target`, and content (when present) whose base64 length matches `size`;
//!   a `symlink` has a `target` of 1 to [`MAX_CHECKPOINT_LINK_TARGET_BYTES`] bytes without NUL,
//!   and no content, hash or size.
//!
//! Link targets may be absolute or point outside the workspace: a restore creates the link with
//! `symlinkat` and never resolves it, and the node host never follows a link in a session
//! workspace, so a target is only text to it; inside the sandbox a link to `/etc` reaches what
//! the sandbox already shows.

use crate::error::ErrorCode;
use crate::error::WireError;
use crate::worker::EntryContent;
pub use crate::worker::MAX_CHECKPOINT_BYTES;
use crate::worker::OmittedPaths;
use crate::worker::TreeEntry;

/// The most entries a checkpoint manifest holds.
pub const MAX_CHECKPOINT_ENTRIES: usize = 20_000;

/// The most paths a checkpoint's omitted list names; past it the list is truncated.
pub const MAX_CHECKPOINT_OMITTED: usize = 10_000;

/// The most bytes of path a checkpoint's omitted list holds (256 KiB), so the list adds little
/// to a checkpoint event or a rebuild's request; past it the list is truncated. (A request that
/// would still not fit one frame is refused by the Gateway before it is sent.)
pub const MAX_CHECKPOINT_OMITTED_BYTES: usize = 256 * 1024;

/// The longest entry path, in bytes (the Linux `PATH_MAX`).
pub const MAX_CHECKPOINT_PATH_BYTES: usize = 4096;

/// The longest link target, in bytes (the Linux `PATH_MAX`).
pub const MAX_CHECKPOINT_LINK_TARGET_BYTES: usize = 4096;

/// The longest segment of an entry path, in bytes (the Linux `NAME_MAX`).
const MAX_SEGMENT_BYTES: usize = 255;

/// How much of an offending path a [`ManifestError`] keeps, in bytes, so an error, a log line
/// or an audit row about a hostile manifest stays small.
pub const MAX_REPORTED_PATH_BYTES: usize = 128;

/// The kind of a regular file entry.
pub const KIND_FILE: &str = "file";

/// The kind of a symbolic link entry.
pub const KIND_SYMLINK: &str = "symlink";

/// Why a manifest is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ManifestViolation {
    /// More than [`MAX_CHECKPOINT_ENTRIES`] entries.
    TooManyEntries,
    /// More than [`MAX_CHECKPOINT_BYTES`] of file content.
    TooLarge,
    /// A path that is not canonical and relative.
    InvalidPath(&'static str),
    /// A path named twice.
    Duplicate,
    /// An entry below a `symlink` entry.
    BelowSymlink,
    /// An entry below a `file` entry.
    BelowFile,
    /// A kind other than `file` and `symlink`.
    UnknownKind,
    /// A `symlink` without a usable target.
    InvalidTarget(&'static str),
    /// A `file` whose fields contradict each other, or a `symlink` with file fields.
    Inconsistent(&'static str),
    /// A link whose target is absolute or leads out of the tree (only where links must stay
    /// inside, see [`validate_contained_links`]).
    LinkOutside,
    /// Two paths that differ only in letter case (only where [`validate_contained_links`]
    /// applies).
    CaseCollision,
}

impl ManifestViolation {
    /// Returns the stable, machine-readable reason, for example `below_symlink`.
    pub const fn reason(self) -> &'static str {
        match self {
            ManifestViolation::TooManyEntries => "too_many_entries",
            ManifestViolation::TooLarge => "too_large",
            ManifestViolation::InvalidPath(_) => "invalid_path",
            ManifestViolation::Duplicate => "duplicate",
            ManifestViolation::BelowSymlink => "below_symlink",
            ManifestViolation::BelowFile => "below_file",
            ManifestViolation::UnknownKind => "unknown_kind",
            ManifestViolation::InvalidTarget(_) => "invalid_target",
            ManifestViolation::Inconsistent(_) => "inconsistent",
            ManifestViolation::LinkOutside => "link_outside",
            ManifestViolation::CaseCollision => "case_collision",
        }
    }

    fn describe(self) -> String {
        match self {
            ManifestViolation::TooManyEntries => {
                format!("more than {MAX_CHECKPOINT_ENTRIES} entries")
            }
            ManifestViolation::TooLarge => {
                format!("more than {MAX_CHECKPOINT_BYTES} bytes of file content")
            }
            ManifestViolation::InvalidPath(why)
            | ManifestViolation::InvalidTarget(why)
            | ManifestViolation::Inconsistent(why) => why.to_owned(),
            ManifestViolation::Duplicate => String::from("the path is named twice"),
            ManifestViolation::BelowSymlink => {
                String::from("the entry is below a symbolic link entry")
            }
            ManifestViolation::BelowFile => String::from("the entry is below a file entry"),
            ManifestViolation::LinkOutside => {
                String::from("the link's target is absolute or leads out of the tree")
            }
            ManifestViolation::CaseCollision => {
                String::from("the path differs from another only in letter case")
            }
            ManifestViolation::UnknownKind => {
                format!("the kind is neither {KIND_FILE:?} nor {KIND_SYMLINK:?}")
            }
        }
    }
}

/// A refused manifest: what is wrong and, when one entry is to blame, which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManifestError {
    /// What is wrong.
    pub violation: ManifestViolation,
    /// The index of the offending entry, when one is to blame.
    pub index: Option<usize>,
    /// The start of the offending entry's path (at most [`MAX_REPORTED_PATH_BYTES`], cut at a
    /// character boundary), when one is to blame.
    pub path: Option<String>,
}

impl ManifestError {
    fn at<C>(index: usize, entry: &TreeEntry<C>, violation: ManifestViolation) -> ManifestError {
        ManifestError {
            violation,
            index: Some(index),
            path: Some(truncated(&entry.path, MAX_REPORTED_PATH_BYTES).to_owned()),
        }
    }

    /// Returns the wire form: code [`ErrorCode::CheckpointInvalid`], a message, and the reason, index and
    /// (truncated) path in the details.
    pub fn to_wire(&self) -> WireError {
        let details = serde_json::json!({
            "reason": self.violation.reason(),
            "index": self.index,
            "path": self.path,
        });
        WireError::new(ErrorCode::CheckpointInvalid, self.to_string()).with_details(details)
    }
}

impl std::fmt::Display for ManifestError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let description = self.violation.describe();
        match (&self.index, &self.path) {
            (Some(index), Some(path)) => write!(
                formatter,
                "the checkpoint manifest is refused: entry {index} ({path:?}): {description}"
            ),
            _ => write!(
                formatter,
                "the checkpoint manifest is refused: {description}"
            ),
        }
    }
}

impl std::error::Error for ManifestError {}

/// The most links one resolution in [`validate_contained_links`] passes through; a longer
/// chain (or a cycle) counts as leaving the tree, as the kernel's `ELOOP` would end it.
const MAX_LINK_HOPS: usize = 40;

/// The most path bytes [`validate_contained_links`] looks up for one manifest; a manifest that
/// needs more is refused rather than judged slowly.
const MAX_LINK_WORK_BYTES: usize = 64 * 1024 * 1024;

/// Checks that every link of a manifest stays inside its tree, as a reader that follows links
/// would see it: each link's target is resolved from the link's directory, `..` leaving one
/// directory, and every component that is itself a link entry of the manifest replaced by that
/// link's own resolution (at most [`MAX_LINK_HOPS`] of them); an absolute target, or a
/// resolution that climbs above the root, leaves the tree. It also refuses two paths that are
/// the same but for letter case, which a case-insensitive file system would write as one.
///
/// A worktree the Gateway keeps (the `worktree` workspace source) is checked with this as well
/// as [`validate_manifest`], so no link in it leads people or tools that read it outside.
///
/// # Errors
/// [`ManifestViolation::LinkOutside`] for the first link that leaves the tree (or whose chain
/// is too long), [`ManifestViolation::CaseCollision`] for the first path that collides.
pub fn validate_contained_links<C: EntryContent>(
    entries: &[TreeEntry<C>],
) -> Result<(), ManifestError> {
    let mut folded = std::collections::HashSet::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        if !folded.insert(entry.path.to_lowercase()) {
            return Err(ManifestError::at(
                index,
                entry,
                ManifestViolation::CaseCollision,
            ));
        }
    }
    let links: std::collections::HashMap<&str, &str> = entries
        .iter()
        .filter(|entry| entry.kind == KIND_SYMLINK)
        .filter_map(|entry| Some((entry.path.as_str(), entry.target.as_deref()?)))
        .collect();
    let mut work = 0;
    for (index, entry) in entries.iter().enumerate() {
        let Some(target) = links.get(entry.path.as_str()) else {
            continue;
        };
        let mut directory: Vec<&str> = entry.path.split('/').collect();
        directory.pop();
        let mut hops = 0;
        if resolve(&links, directory, target, &mut hops, &mut work).is_none() {
            return Err(ManifestError::at(
                index,
                entry,
                ManifestViolation::LinkOutside,
            ));
        }
    }
    Ok(())
}

/// Resolves `target` from `directory` through the manifest's `links`; `None` when it leaves
/// the tree or passes a bound.
fn resolve<'a>(
    links: &std::collections::HashMap<&'a str, &'a str>,
    mut directory: Vec<&'a str>,
    target: &'a str,
    hops: &mut usize,
    work: &mut usize,
) -> Option<Vec<&'a str>> {
    if target.starts_with('/') {
        return None;
    }
    for segment in target.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                directory.pop()?;
            }
            name => {
                directory.push(name);
                let path = directory.join("/");
                *work += path.len();
                if *work > MAX_LINK_WORK_BYTES {
                    return None;
                }
                if let Some(next) = links.get(path.as_str()) {
                    *hops += 1;
                    if *hops > MAX_LINK_HOPS {
                        return None;
                    }
                    directory.pop();
                    directory = resolve(links, directory, next, hops, work)?;
                }
            }
        }
    }
    Some(directory)
}

/// Checks a checkpoint manifest against every rule of this module.
///
/// # Errors
/// The first violation found, in entry order after the whole-manifest bounds.
pub fn validate_manifest<C: EntryContent>(entries: &[TreeEntry<C>]) -> Result<(), ManifestError> {
    let whole = |violation| ManifestError {
        violation,
        index: None,
        path: None,
    };
    if entries.len() > MAX_CHECKPOINT_ENTRIES {
        return Err(whole(ManifestViolation::TooManyEntries));
    }
    let total = entries
        .iter()
        .fold(0_u64, |total, entry| total.saturating_add(entry.size));
    if total > MAX_CHECKPOINT_BYTES {
        return Err(whole(ManifestViolation::TooLarge));
    }
    validate_structure(entries)
}

/// Checks every rule of [`validate_manifest`] but its two bounds (entries and bytes): each entry
/// on its own, no path twice, no entry below another. For a tree whose size is judged
/// elsewhere (a worktree result, which the merge refuses whole when it is past the bounds).
///
/// # Errors
/// The first violation found, in entry order.
pub fn validate_structure<C: EntryContent>(entries: &[TreeEntry<C>]) -> Result<(), ManifestError> {
    let mut kinds = std::collections::HashMap::with_capacity(entries.len());
    for (index, entry) in entries.iter().enumerate() {
        let refuse = |violation| ManifestError::at(index, entry, violation);
        validate_entry(entry).map_err(refuse)?;
        let is_symlink = entry.kind == KIND_SYMLINK;
        if kinds.insert(entry.path.as_str(), is_symlink).is_some() {
            return Err(refuse(ManifestViolation::Duplicate));
        }
    }
    // Every ancestor of an entry is a directory: none may be an entry itself.
    for (index, entry) in entries.iter().enumerate() {
        let ancestors = entry
            .path
            .match_indices('/')
            .map(|(end, _)| &entry.path[..end]);
        for ancestor in ancestors {
            match kinds.get(ancestor) {
                None => {}
                Some(true) => {
                    return Err(ManifestError::at(
                        index,
                        entry,
                        ManifestViolation::BelowSymlink,
                    ));
                }
                Some(false) => {
                    return Err(ManifestError::at(
                        index,
                        entry,
                        ManifestViolation::BelowFile,
                    ));
                }
            }
        }
    }
    Ok(())
}

/// Checks a checkpoint's omitted list: at most [`MAX_CHECKPOINT_OMITTED`] paths and
/// [`MAX_CHECKPOINT_OMITTED_BYTES`] of them, each canonical and relative as an entry's path.
///
/// # Errors
/// [`ManifestViolation::TooManyEntries`] past the bound, [`ManifestViolation::InvalidPath`]
/// with the index of the first refused path.
pub fn validate_omitted(omitted: &OmittedPaths) -> Result<(), ManifestError> {
    let bytes: usize = omitted.paths.iter().map(String::len).sum();
    if omitted.paths.len() > MAX_CHECKPOINT_OMITTED || bytes > MAX_CHECKPOINT_OMITTED_BYTES {
        return Err(ManifestError {
            violation: ManifestViolation::TooManyEntries,
            index: None,
            path: None,
        });
    }
    for (index, path) in omitted.paths.iter().enumerate() {
        check_path(path).map_err(|violation| ManifestError {
            violation,
            index: Some(index),
            path: Some(truncated(path, MAX_REPORTED_PATH_BYTES).to_owned()),
        })?;
    }
    Ok(())
}

/// Decides which entries of an earlier tree (a repository session's pinned commit, a worktree's
/// base) stand for what a checkpoint left out, so a rebuild or a merge keeps them instead of
/// taking them for deleted. An earlier entry at `path` is kept when:
/// - the checkpoint names no entry at `path`, none above it and none below it (what the
///   checkpoint holds always wins, and the result stays a valid manifest); and
/// - an omitted path is `path` or one of its ancestors, or the omitted list is truncated (then
///   nothing absent from the checkpoint is known to have been deleted).
///
/// Each question costs one set lookup per segment of `path`.
#[derive(Debug)]
pub struct KeptFromEarlier<'a> {
    named: std::collections::HashSet<&'a str>,
    named_dirs: std::collections::HashSet<&'a str>,
    omitted: std::collections::HashSet<&'a str>,
    truncated: bool,
}

impl<'a> KeptFromEarlier<'a> {
    /// The rule for a checkpoint whose entries are at `named` and that left out `omitted`.
    pub fn new(named: impl IntoIterator<Item = &'a str>, omitted: &'a OmittedPaths) -> Self {
        let named: std::collections::HashSet<&str> = named.into_iter().collect();
        let named_dirs = named.iter().flat_map(|path| ancestors(path)).collect();
        KeptFromEarlier {
            named,
            named_dirs,
            omitted: omitted.paths.iter().map(String::as_str).collect(),
            truncated: omitted.truncated,
        }
    }

    /// Returns true when the earlier tree's entry at `path` is kept.
    pub fn keeps(&self, path: &str) -> bool {
        if self.named.contains(path)
            || self.named_dirs.contains(path)
            || ancestors(path).any(|ancestor| self.named.contains(ancestor))
        {
            return false;
        }
        self.truncated
            || self.omitted.contains(path)
            || ancestors(path).any(|ancestor| self.omitted.contains(ancestor))
    }
}

/// Returns the proper ancestors of `path` (`a`, `a/b` for `a/b/c`).
pub fn ancestors(path: &str) -> impl Iterator<Item = &str> {
    path.match_indices('/').map(|(end, _)| &path[..end])
}

/// Checks one entry on its own: its path, its kind and the consistency of its fields. The rules
/// between entries (duplicates, entries below others) and the bounds of the whole manifest are
/// left to [`validate_manifest`]; a node uses this to leave out an entry it cannot report.
///
/// # Errors
/// The first violation of the entry.
pub fn validate_entry<C: EntryContent>(entry: &TreeEntry<C>) -> Result<(), ManifestViolation> {
    check_path(&entry.path)?;
    match entry.kind.as_str() {
        KIND_FILE => check_file(entry),
        KIND_SYMLINK => check_symlink(entry),
        _ => Err(ManifestViolation::UnknownKind),
    }
}

/// Checks one entry path (or omitted path) on its own: not empty, relative, no empty, `.` or
/// `..` segment (with either slash), no NUL, at most [`MAX_CHECKPOINT_PATH_BYTES`] bytes and
/// 255 bytes per segment.
///
/// # Errors
/// [`ManifestViolation::InvalidPath`] saying what is wrong.
pub fn validate_path(path: &str) -> Result<(), ManifestViolation> {
    check_path(path)
}

fn check_path(path: &str) -> Result<(), ManifestViolation> {
    let invalid = |why| Err(ManifestViolation::InvalidPath(why));
    if path.is_empty() {
        return invalid("the path is empty");
    }
    if path.len() > MAX_CHECKPOINT_PATH_BYTES {
        return invalid("the path is too long");
    }
    if path.contains('\0') {
        return invalid("the path contains NUL");
    }
    if path.starts_with('/') {
        return invalid("the path is absolute");
    }
    for segment in path.split('/') {
        if segment.is_empty() {
            return invalid("the path has an empty segment");
        }
        if segment.len() > MAX_SEGMENT_BYTES {
            return invalid("a path segment is too long");
        }
        if segment.split('\\').any(|part| part == "." || part == "..") {
            return invalid("the path has a . or .. segment");
        }
    }
    Ok(())
}

fn check_file<C: EntryContent>(entry: &TreeEntry<C>) -> Result<(), ManifestViolation> {
    let inconsistent = |why| Err(ManifestViolation::Inconsistent(why));
    if entry.target.is_some() {
        return inconsistent("a file has a link target");
    }
    let Some(sha256) = &entry.sha256 else {
        return inconsistent("a file has no sha256");
    };
    let is_hex = sha256.len() == 64
        && sha256
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    if !is_hex {
        return inconsistent("a file's sha256 is not 64 lowercase hex digits");
    }
    if let Some(length) = entry.content.inline_len()
        && Some(length as u64) != base64_len(entry.size)
    {
        return inconsistent("a file's content does not have its size");
    }
    Ok(())
}

fn check_symlink<C: EntryContent>(entry: &TreeEntry<C>) -> Result<(), ManifestViolation> {
    if entry.sha256.is_some() || entry.content.inline_len().is_some() || entry.size != 0 {
        return Err(ManifestViolation::Inconsistent(
            "a symbolic link has file content, a hash or a size",
        ));
    }
    let invalid = |why| Err(ManifestViolation::InvalidTarget(why));
    match &entry.target {
        None => invalid("a symbolic link has no target"),
        Some(target) if target.is_empty() => invalid("a symbolic link target is empty"),
        Some(target) if target.len() > MAX_CHECKPOINT_LINK_TARGET_BYTES => {
            invalid("a symbolic link target is too long")
        }
        Some(target) if target.contains('\0') => invalid("a symbolic link target contains NUL"),
        Some(_) => Ok(()),
    }
}

/// Returns the length of the padded standard base64 of `size` bytes, or `None` past `u64`.
fn base64_len(size: u64) -> Option<u64> {
    size.div_ceil(3).checked_mul(4)
}

/// Returns the longest prefix of `text` of at most `max` bytes that ends at a character
/// boundary.
pub fn truncated(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// Returns `path` in git's C-style quotes (`"a\\nb"`): every byte that is not printable ASCII
/// as an octal escape, and `"`, `\\` and newline escaped, so a name reaches `git fast-import`
/// or a diff header intact and can never pass for another line.
pub fn c_quoted(path: &str) -> String {
    let mut out = String::from("\"");
    for byte in path.bytes() {
        match byte {
            b'"' => out.push_str("\\\""),
            b'\\' => out.push_str("\\\\"),
            b'\n' => out.push_str("\\n"),
            b'\t' => out.push_str("\\t"),
            0x20..=0x7e => out.push(char::from(byte)),
            other => out.push_str(&format!("\\{other:03o}")),
        }
    }
    out.push('"');
    out
}

/// Whether a path names something git keeps for itself: a segment `.git` (in any letter case,
/// or its short name `git~1`), which a worktree never holds, so a tool that reads the tree
/// never runs a repository configuration an agent wrote.
pub fn is_git_path(path: &str) -> bool {
    path.split('/').any(|segment| {
        segment.eq_ignore_ascii_case(".git") || segment.eq_ignore_ascii_case("git~1")
    })
}

#[cfg(test)]
#[path = "checkpoint_tests.rs"]
mod tests;
