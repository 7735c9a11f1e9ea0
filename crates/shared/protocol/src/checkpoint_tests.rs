use pretty_assertions::assert_eq;

use crate::checkpoint::MAX_CHECKPOINT_BYTES;
use crate::checkpoint::MAX_CHECKPOINT_ENTRIES;
use crate::checkpoint::MAX_CHECKPOINT_LINK_TARGET_BYTES;
use crate::checkpoint::MAX_REPORTED_PATH_BYTES;
use crate::checkpoint::ManifestViolation;
use crate::checkpoint::truncated;
use crate::checkpoint::validate_manifest;
use crate::worker::CheckpointEntry;
use crate::worker::Inline;

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn file(path: &str) -> CheckpointEntry {
    let inline = Inline {
        base64: Some(String::from("YWJj")),
    };
    CheckpointEntry::file(path, SHA, 3, false, inline)
}

fn link(path: &str, target: &str) -> CheckpointEntry {
    CheckpointEntry::symlink(path, target)
}

fn reason(entries: &[CheckpointEntry]) -> Option<&'static str> {
    validate_manifest(entries)
        .err()
        .map(|error| error.violation.reason())
}

/// Issue 12, finding 3: `a -> <harness>/node` followed by `a/planted` would write into the node's
/// identity directory if a restore created the link and then wrote below it.
#[test]
fn finding_3_an_entry_below_a_symlink_entry_is_refused() {
    let manifest = [link("a", "/srv/harness/node"), file("a/planted")];
    let error = validate_manifest(&manifest).unwrap_err();
    assert_eq!(error.violation, ManifestViolation::BelowSymlink);
    assert_eq!(
        (error.index, error.path.as_deref()),
        (Some(1), Some("a/planted"))
    );
    // The order does not matter: the child first is refused too.
    let reversed = [file("a/b/planted"), link("a", "/srv/harness/node")];
    assert_eq!(reason(&reversed), Some("below_symlink"));
    let wire = error.to_wire();
    assert_eq!(wire.code, "CHECKPOINT_INVALID");
    assert_eq!(
        wire.details.unwrap(),
        serde_json::json!({"reason": "below_symlink", "index": 1, "path": "a/planted"})
    );
}

#[test]
fn manifests_are_judged_by_the_table() {
    let mut no_sha = file("f");
    no_sha.sha256 = None;
    let mut upper_sha = file("f");
    upper_sha.sha256 = Some(SHA.to_uppercase());
    let mut wrong_size = file("f");
    wrong_size.size = 4;
    let mut unchanged = file("f");
    unchanged.content.base64 = None;
    let mut file_with_target = file("f");
    file_with_target.target = Some(String::from("x"));
    let mut link_with_content = link("l", "x");
    link_with_content.content.base64 = Some(String::from("YWJj"));
    let mut no_target = link("l", "x");
    no_target.target = None;
    let mut directory = file("d");
    directory.kind = String::from("directory");
    let long_segment = "x".repeat(256);
    let long_target = "t".repeat(MAX_CHECKPOINT_LINK_TARGET_BYTES + 1);
    let table: Vec<(&str, Vec<CheckpointEntry>, Option<&str>)> = vec![
        ("empty manifest", vec![], None),
        (
            "files and links",
            vec![file("a/b.txt"), file("a/c.txt"), link("l", "a/b.txt")],
            None,
        ),
        ("absolute target", vec![link("etc", "/etc")], None),
        ("escaping target", vec![link("up", "../../x")], None),
        ("unchanged file", vec![unchanged], None),
        ("dotfile", vec![file(".env"), file("a/.b")], None),
        ("empty path", vec![file("")], Some("invalid_path")),
        (
            "absolute path",
            vec![file("/etc/passwd")],
            Some("invalid_path"),
        ),
        ("dot dot", vec![file("a/../b")], Some("invalid_path")),
        (
            "backslash dot dot",
            vec![file("a\\..\\b")],
            Some("invalid_path"),
        ),
        ("dot", vec![file("./a")], Some("invalid_path")),
        ("empty segment", vec![file("a//b")], Some("invalid_path")),
        ("trailing slash", vec![file("a/")], Some("invalid_path")),
        ("nul", vec![file("a\0b")], Some("invalid_path")),
        (
            "long segment",
            vec![file(&long_segment)],
            Some("invalid_path"),
        ),
        (
            "long path",
            vec![file("a/".repeat(2100).trim_end_matches('/'))],
            Some("invalid_path"),
        ),
        ("duplicate", vec![file("a"), file("a")], Some("duplicate")),
        (
            "file and link at one path",
            vec![file("a"), link("a", "x")],
            Some("duplicate"),
        ),
        (
            "below a file",
            vec![file("a"), file("a/b")],
            Some("below_file"),
        ),
        (
            "deep below a link",
            vec![link("a", "/"), file("a/b/c/d")],
            Some("below_symlink"),
        ),
        (
            "link below a link",
            vec![link("a", "/"), link("a/b", "/")],
            Some("below_symlink"),
        ),
        ("unknown kind", vec![directory], Some("unknown_kind")),
        ("no sha", vec![no_sha], Some("inconsistent")),
        ("uppercase sha", vec![upper_sha], Some("inconsistent")),
        ("size mismatch", vec![wrong_size], Some("inconsistent")),
        (
            "file with target",
            vec![file_with_target],
            Some("inconsistent"),
        ),
        (
            "link with content",
            vec![link_with_content],
            Some("inconsistent"),
        ),
        ("no target", vec![no_target], Some("invalid_target")),
        ("empty target", vec![link("l", "")], Some("invalid_target")),
        (
            "nul target",
            vec![link("l", "a\0b")],
            Some("invalid_target"),
        ),
        (
            "long target",
            vec![link("l", &long_target)],
            Some("invalid_target"),
        ),
    ];
    for (name, entries, expected) in table {
        assert_eq!(reason(&entries), expected, "{name}");
    }
}

#[test]
fn bounds_on_entries_and_total_size_hold() {
    let many: Vec<CheckpointEntry> = (0..=MAX_CHECKPOINT_ENTRIES)
        .map(|index| {
            let mut entry = file(&format!("f{index}"));
            entry.content.base64 = None;
            entry
        })
        .collect();
    assert_eq!(reason(&many[..MAX_CHECKPOINT_ENTRIES]), None);
    assert_eq!(reason(&many), Some("too_many_entries"));
    let mut big = file("big");
    big.content.base64 = None;
    big.size = MAX_CHECKPOINT_BYTES;
    assert_eq!(reason(std::slice::from_ref(&big)), None);
    let mut one_more = file("one");
    one_more.content.base64 = None;
    one_more.size = 1;
    assert_eq!(reason(&[big, one_more]), Some("too_large"));
    let mut huge = file("huge");
    huge.content.base64 = None;
    huge.size = u64::MAX;
    assert_eq!(reason(&[huge]), Some("too_large"));
}

#[test]
fn reported_paths_are_truncated_at_a_character_boundary() {
    let hostile = format!("{}/../x", "é".repeat(10_000));
    let error = validate_manifest(&[file(&hostile)]).unwrap_err();
    let path = error.path.unwrap();
    assert!(path.len() <= MAX_REPORTED_PATH_BYTES, "{}", path.len());
    assert!(hostile.starts_with(&path));
    assert!(error.violation == ManifestViolation::InvalidPath("the path is too long"));
    assert_eq!(truncated("abc", 2), "ab");
    assert_eq!(truncated("éé", 3), "é");
}

/// Links judged as a reader that follows them would see them: through other links, with `..`
/// and `.`, with cycles, and paths that collide but for case.
#[test]
fn a_worktree_link_stays_inside_even_through_other_links() {
    use crate::checkpoint::validate_contained_links;
    let contained = |entries: &[CheckpointEntry]| {
        validate_contained_links(entries).map_err(|error| (error.violation.reason(), error.path))
    };
    type Outcome = Result<(), (&'static str, Option<String>)>;
    let cases: Vec<(&str, Vec<CheckpointEntry>, Outcome)> = vec![
        ("a sibling", vec![file("a.txt"), link("l", "a.txt")], Ok(())),
        ("up and down", vec![link("d/l", "../a.txt")], Ok(())),
        ("the root itself", vec![link("d/l", "..//")], Ok(())),
        ("dots", vec![link("l", "./././a")], Ok(())),
        (
            "absolute",
            vec![link("l", "/etc/passwd")],
            Err(("link_outside", Some(String::from("l")))),
        ),
        (
            "one level too far",
            vec![link("d/l", "../../x")],
            Err(("link_outside", Some(String::from("d/l")))),
        ),
        (
            "down then too far",
            vec![link("l", "x/../..")],
            Err(("link_outside", Some(String::from("l")))),
        ),
        (
            "a chain: each contained alone, together outside",
            vec![
                link("a/b/c/d/l", "../../../.."),
                link("y", "a/b/c/d/l/../etc/passwd"),
            ],
            Err(("link_outside", Some(String::from("y")))),
        ),
        (
            "through a link to a deeper directory is fine",
            vec![link("deep", "a/b/c"), link("z", "deep/../../x")],
            Ok(()),
        ),
        (
            "a cycle",
            vec![link("p", "q/x"), link("q", "p/x")],
            Err(("link_outside", Some(String::from("p")))),
        ),
        (
            "case",
            vec![file("Readme"), file("README")],
            Err(("case_collision", Some(String::from("README")))),
        ),
    ];
    for (name, entries, expected) in cases {
        assert_eq!(contained(&entries), expected, "{name}");
    }
}

#[test]
fn an_earlier_entry_is_kept_only_where_the_checkpoint_left_something_out() {
    use crate::checkpoint::KeptFromEarlier;
    use crate::worker::OmittedPaths;
    let omitted = OmittedPaths {
        paths: vec![String::from("big.bin"), String::from("vendor")],
        truncated: false,
    };
    let named = ["a.txt", "src/lib.rs", "vendor/patched.rs", "d"];
    let kept = KeptFromEarlier::new(named, &omitted);
    // Left out: the earlier version stands for it, also below an omitted directory.
    assert!(kept.keeps("big.bin"));
    assert!(kept.keeps("vendor/x/y.rs"));
    // Named by the checkpoint, or in the way of a named entry: the checkpoint wins.
    assert!(!kept.keeps("a.txt"));
    assert!(!kept.keeps("vendor/patched.rs"));
    assert!(!kept.keeps("src"));
    assert!(!kept.keeps("d/below"));
    // Absent and not omitted: deleted.
    assert!(!kept.keeps("gone.txt"));
    assert!(!kept.keeps("big.bin2"));
    // A truncated list keeps everything absent that is not in the way.
    let truncated = OmittedPaths {
        paths: Vec::new(),
        truncated: true,
    };
    let kept = KeptFromEarlier::new(named, &truncated);
    assert!(kept.keeps("gone.txt"));
    assert!(!kept.keeps("d/below"));
    assert!(!kept.keeps("a.txt"));
}

#[test]
fn an_omitted_list_is_bounded_and_its_paths_checked() {
    use crate::checkpoint::MAX_CHECKPOINT_OMITTED;
    use crate::checkpoint::validate_omitted;
    use crate::worker::OmittedPaths;
    let fine = OmittedPaths {
        paths: vec![String::from("a/b.bin")],
        truncated: true,
    };
    assert_eq!(validate_omitted(&fine), Ok(()));
    let escaping = OmittedPaths {
        paths: vec![String::from("ok"), String::from("../out")],
        truncated: false,
    };
    let error = validate_omitted(&escaping).unwrap_err();
    assert_eq!(
        (error.violation.reason(), error.index),
        ("invalid_path", Some(1))
    );
    let long = OmittedPaths {
        paths: vec![String::from("x"); MAX_CHECKPOINT_OMITTED + 1],
        truncated: false,
    };
    assert_eq!(
        validate_omitted(&long).unwrap_err().violation,
        ManifestViolation::TooManyEntries
    );
    let heavy = OmittedPaths {
        paths: vec!["x".repeat(4000); 100],
        truncated: false,
    };
    assert_eq!(
        validate_omitted(&heavy).unwrap_err().violation,
        ManifestViolation::TooManyEntries
    );
}

#[test]
fn the_structure_is_judged_without_the_bounds() {
    use crate::checkpoint::validate_structure;
    let mut big = file("big.bin");
    big.size = MAX_CHECKPOINT_BYTES + 1;
    big.content.base64 = None;
    let entries = vec![big, file("a.txt")];
    assert_eq!(
        validate_manifest(&entries).unwrap_err().violation,
        ManifestViolation::TooLarge
    );
    assert_eq!(validate_structure(&entries), Ok(()));
    let below = vec![link("l", "a.txt"), file("l/x")];
    assert_eq!(
        validate_structure(&below).unwrap_err().violation,
        ManifestViolation::BelowSymlink
    );
}
