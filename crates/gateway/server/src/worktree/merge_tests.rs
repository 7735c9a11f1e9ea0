use gatehouse_store::records::Blob;
use gatehouse_store::records::StoredEntry;
use gatehouse_store::records::StoredManifest;
use pretty_assertions::assert_eq;

use super::merge;

fn file(path: &str, content: &str) -> StoredEntry {
    let blob = Blob {
        media_id: Some(format!("m-{content}")),
    };
    StoredEntry::file(
        path,
        &format!("{content:0>64}"),
        content.len() as u64,
        false,
        blob,
    )
}

fn exec(path: &str, content: &str) -> StoredEntry {
    StoredEntry {
        executable: true,
        ..file(path, content)
    }
}

fn link(path: &str, target: &str) -> StoredEntry {
    StoredEntry::symlink(path, target)
}

fn tree(entries: &[StoredEntry]) -> StoredManifest {
    let mut entries = entries.to_vec();
    entries.sort_by(|left, right| left.path.cmp(&right.path));
    StoredManifest { entries }
}

/// One case: base, local, remote, and the expected tree, applied paths and conflicts.
struct Case {
    name: &'static str,
    base: Vec<StoredEntry>,
    local: Vec<StoredEntry>,
    remote: Vec<StoredEntry>,
    merged: Vec<StoredEntry>,
    applied: &'static [&'static str],
    conflicts: &'static [&'static str],
}

#[test]
fn a_result_is_merged_keeping_the_worktrees_side_of_every_conflict() {
    let cases = [
        Case {
            name: "the worker's edits, additions, exec bits, links and deletions are applied",
            base: vec![file("a.txt", "1"), file("c.txt", "c")],
            local: vec![file("a.txt", "1"), file("c.txt", "c")],
            remote: vec![file("a.txt", "2"), exec("b.sh", "b"), link("l", "a.txt")],
            merged: vec![file("a.txt", "2"), exec("b.sh", "b"), link("l", "a.txt")],
            applied: &["a.txt", "b.sh", "c.txt", "l"],
            conflicts: &[],
        },
        Case {
            name: "a Gateway-side edit stays when the worker did not touch the path",
            base: vec![file("a.txt", "1"), file("d.txt", "d")],
            local: vec![file("a.txt", "local"), file("d.txt", "d")],
            remote: vec![file("a.txt", "1"), file("d.txt", "agent")],
            merged: vec![file("a.txt", "local"), file("d.txt", "agent")],
            applied: &["d.txt"],
            conflicts: &[],
        },
        Case {
            name: "both sides changed a path: the worktree's version stays, the rest applies",
            base: vec![file("a.txt", "1"), file("d.txt", "d")],
            local: vec![file("a.txt", "local")],
            remote: vec![file("a.txt", "agent"), file("d.txt", "agent")],
            merged: vec![file("a.txt", "local")],
            applied: &[],
            conflicts: &["a.txt", "d.txt"],
        },
        Case {
            name: "the same change on both sides is neither applied nor a conflict",
            base: vec![file("a.txt", "1")],
            local: vec![file("a.txt", "2")],
            remote: vec![file("a.txt", "2")],
            merged: vec![file("a.txt", "2")],
            applied: &[],
            conflicts: &[],
        },
        Case {
            name: "only the exec bit changed: it is a change",
            base: vec![file("run", "x")],
            local: vec![file("run", "x")],
            remote: vec![exec("run", "x")],
            merged: vec![exec("run", "x")],
            applied: &["run"],
            conflicts: &[],
        },
        Case {
            name: "the worker's file where the worktree added a directory is undone",
            base: vec![],
            local: vec![file("x/y", "local")],
            remote: vec![file("x", "agent")],
            merged: vec![file("x/y", "local")],
            applied: &[],
            conflicts: &["x"],
        },
        Case {
            name: "the worker's link over a directory the worktree still fills is undone",
            base: vec![file("dir/a", "1")],
            local: vec![file("dir/a", "1"), file("dir/b", "local")],
            remote: vec![link("dir", "elsewhere")],
            merged: vec![file("dir/b", "local")],
            applied: &["dir/a"],
            conflicts: &["dir"],
        },
    ];
    for case in cases {
        let merged = merge(&tree(&case.base), &tree(&case.local), &tree(&case.remote));
        assert_eq!(merged.manifest, tree(&case.merged), "{}", case.name);
        assert_eq!(merged.applied, case.applied, "{}", case.name);
        assert_eq!(merged.conflicts, case.conflicts, "{}", case.name);
    }
}

/// A file the worker's scan left out (past the checkpoint's size bound) is not a deletion: the
/// base's version joins the result, so the merge keeps it; a file the agent deleted goes.
#[test]
fn a_file_left_out_of_the_scan_is_kept_and_a_deleted_one_goes() {
    let base = tree(&[
        file("big.bin", "big"),
        file("a.txt", "a"),
        file("gone.txt", "gone"),
    ]);
    let mut result = tree(&[file("a.txt", "a2")]);
    let omitted = gatehouse_protocol::worker::OmittedPaths {
        paths: vec![String::from("big.bin")],
        truncated: false,
    };
    super::keep_omitted(&mut result, &base, &omitted);
    assert_eq!(result, tree(&[file("a.txt", "a2"), file("big.bin", "big")]));
    let merged = merge(&base, &base, &result);
    assert_eq!(
        merged.manifest,
        tree(&[file("a.txt", "a2"), file("big.bin", "big")])
    );
    assert_eq!(merged.applied, ["a.txt", "gone.txt"]);
}
