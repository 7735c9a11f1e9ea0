//! The three-way keep-local merge of a worker's result into a session's worktree.
//!
//! For every path of the base (the tree the execution workspace last held as the Gateway
//! knows it), the local side (the worktree now) and the remote side (the worker's result):
//! - unchanged by the worker (remote equals base): the worktree's version stays;
//! - changed only by the worker (local equals base): the worker's version is applied;
//! - changed the same way on both sides: nothing to do;
//! - changed differently on both sides: a conflict, and the worktree's version stays.
//!
//! Two entries are the same when their kind, exec bit, content hash and link target are.
//! A merge can combine what neither side holds alone (the worker's file `a` with the
//! worktree's `a/b`); every applied change that would put an entry below another is undone and
//! reported as a conflict, so the merged tree always passes the manifest rules whenever the
//! worktree did. When the merged tree would pass a whole-tree bound (entries, bytes), nothing
//! of the result is applied and every path it changed is a conflict.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use gatehouse_protocol::checkpoint::KeptFromEarlier;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_BYTES;
use gatehouse_protocol::checkpoint::MAX_CHECKPOINT_ENTRIES;
use gatehouse_protocol::checkpoint::ancestors;
use gatehouse_protocol::worker::OmittedPaths;
use gatehouse_store::records::StoredEntry;
use gatehouse_store::records::StoredManifest;

/// What a merge produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Merged {
    /// The new worktree tree, in path order.
    pub(crate) manifest: StoredManifest,
    /// The paths whose worker version was applied (added, changed or deleted), in order.
    pub(crate) applied: Vec<String>,
    /// The paths changed on both sides, which kept the worktree's version, in order.
    pub(crate) conflicts: Vec<String>,
}

/// Whether two (possibly absent) entries hold the same thing.
fn same(left: Option<&StoredEntry>, right: Option<&StoredEntry>) -> bool {
    match (left, right) {
        (None, None) => true,
        (Some(left), Some(right)) => {
            left.kind == right.kind
                && left.executable == right.executable
                && left.sha256 == right.sha256
                && left.target == right.target
        }
        _ => false,
    }
}

fn by_path(manifest: &StoredManifest) -> BTreeMap<&str, &StoredEntry> {
    manifest
        .entries
        .iter()
        .map(|entry| (entry.path.as_str(), entry))
        .collect()
}

/// Merges `remote` (the worker's result) into `local` (the worktree) over `base`.
pub(crate) fn merge(
    base: &StoredManifest,
    local: &StoredManifest,
    remote: &StoredManifest,
) -> Merged {
    let (base, local_map, remote) = (by_path(base), by_path(local), by_path(remote));
    let paths: BTreeSet<&str> = base
        .keys()
        .chain(local_map.keys())
        .chain(remote.keys())
        .copied()
        .collect();
    let mut merged: BTreeMap<&str, &StoredEntry> = local_map.clone();
    let mut applied: BTreeSet<&str> = BTreeSet::new();
    let mut conflicts: BTreeSet<&str> = BTreeSet::new();
    for path in paths {
        let (b, l, r) = (
            base.get(path).copied(),
            local_map.get(path).copied(),
            remote.get(path).copied(),
        );
        if same(r, b) || same(l, r) {
            continue;
        }
        if same(l, b) {
            match r {
                Some(entry) => merged.insert(path, entry),
                None => merged.remove(path),
            };
            applied.insert(path);
        } else {
            conflicts.insert(path);
        }
    }
    // Undo applied changes that put an entry below another, until none does.
    loop {
        let clashing: Vec<&str> = merged
            .keys()
            .flat_map(|path| {
                ancestors(path)
                    .filter(|ancestor| merged.contains_key(ancestor))
                    .flat_map(move |ancestor| [*path, ancestor])
            })
            .filter(|path| applied.contains(path))
            .collect();
        if clashing.is_empty() {
            break;
        }
        for path in clashing {
            applied.remove(path);
            conflicts.insert(path);
            match local_map.get(path) {
                Some(entry) => merged.insert(path, entry),
                None => merged.remove(path),
            };
        }
    }
    let bytes: u64 = merged.values().map(|entry| entry.size).sum();
    if merged.len() > MAX_CHECKPOINT_ENTRIES || bytes > MAX_CHECKPOINT_BYTES {
        conflicts.extend(applied.iter());
        return Merged {
            manifest: local.clone(),
            applied: Vec::new(),
            conflicts: conflicts.into_iter().map(str::to_owned).collect(),
        };
    }
    Merged {
        manifest: StoredManifest {
            entries: merged.into_values().cloned().collect(),
        },
        applied: applied.into_iter().map(str::to_owned).collect(),
        conflicts: conflicts.into_iter().map(str::to_owned).collect(),
    }
}

/// Adds to a turn's `result` the entries of `base` that stand for what the worker's scan left
/// out (see [`KeptFromEarlier`]), so the merge sees them unchanged by the agent rather than
/// deleted; the entries stay in path order.
pub(crate) fn keep_omitted(
    result: &mut StoredManifest,
    base: &StoredManifest,
    omitted: &OmittedPaths,
) {
    let kept: Vec<StoredEntry> = {
        let rule = KeptFromEarlier::new(
            result.entries.iter().map(|entry| entry.path.as_str()),
            omitted,
        );
        base.entries
            .iter()
            .filter(|entry| rule.keeps(&entry.path))
            .cloned()
            .collect()
    };
    result.entries.extend(kept);
    result
        .entries
        .sort_by(|left, right| left.path.cmp(&right.path));
}

#[cfg(test)]
#[path = "merge_tests.rs"]
mod tests;
