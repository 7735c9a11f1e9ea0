use pretty_assertions::assert_eq;

use crate::tools::patch::Chunk;
use crate::tools::patch::PatchOp;
use crate::tools::patch::apply_chunks;
use crate::tools::patch::parse_patch;

fn lines(items: &[&str]) -> Vec<String> {
    items.iter().map(|item| (*item).to_owned()).collect()
}

#[test]
fn parses_every_section() {
    let patch = "*** Begin Patch\n\
                 *** Add File: a.txt\n\
                 +one\n\
                 +two\n\
                 *** Delete File: b.txt\n\
                 *** Update File: c.txt\n\
                 *** Move to: d.txt\n\
                 @@ fn main\n \
                 keep\n\
                 -old\n\
                 +new\n\
                 *** End of File\n\
                 *** End Patch\n";
    let ops = parse_patch(patch).unwrap();
    assert_eq!(
        ops,
        vec![
            PatchOp::Add {
                path: String::from("a.txt"),
                content: String::from("one\ntwo\n"),
            },
            PatchOp::Delete {
                path: String::from("b.txt"),
            },
            PatchOp::Update {
                path: String::from("c.txt"),
                move_to: Some(String::from("d.txt")),
                chunks: vec![Chunk {
                    context: Some(String::from("fn main")),
                    old_lines: lines(&["keep", "old"]),
                    new_lines: lines(&["keep", "new"]),
                    end_of_file: true,
                }],
            },
        ]
    );
}

#[test]
fn refuses_malformed_patches() {
    let cases = [
        ("", "PATCH_INVALID: the patch is empty"),
        (
            "*** Add File: a\n+x\n*** End Patch",
            "PATCH_INVALID: the first line",
        ),
        (
            "*** Begin Patch\n*** Add File: a\n+x",
            "PATCH_INVALID: the last line",
        ),
        (
            "*** Begin Patch\n*** End Patch",
            "PATCH_INVALID: the patch has no operations",
        ),
        (
            "*** Begin Patch\n*** Add File: a\nx\n*** End Patch",
            "PATCH_INVALID: line 3",
        ),
        (
            "*** Begin Patch\n*** Frobnicate: a\n*** End Patch",
            "PATCH_INVALID: line 2",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n*** End Patch",
            "PATCH_INVALID: line 2",
        ),
        (
            "*** Begin Patch\n*** Update File: a\n@@\n?x\n*** End Patch",
            "PATCH_INVALID: line 4",
        ),
    ];
    for (patch, prefix) in cases {
        let error = parse_patch(patch).unwrap_err().into_outcome();
        assert!(
            error.output.starts_with(prefix),
            "{patch:?} gave {:?}",
            error.output
        );
    }
}

#[test]
fn applies_hunks_in_order() {
    let chunks = vec![
        Chunk {
            context: None,
            old_lines: lines(&["a", "b"]),
            new_lines: lines(&["a", "B"]),
            end_of_file: false,
        },
        Chunk {
            context: Some(String::from("d")),
            old_lines: lines(&["e"]),
            new_lines: lines(&["E", "E2"]),
            end_of_file: false,
        },
    ];
    assert_eq!(
        apply_chunks("a\nb\nc\nd\ne\nf\n", &chunks).unwrap(),
        "a\nB\nc\nd\nE\nE2\nf\n"
    );
}

#[test]
fn matches_ignoring_whitespace_and_appends() {
    let trailing = Chunk {
        old_lines: lines(&["x"]),
        new_lines: lines(&["y"]),
        ..Chunk::default()
    };
    assert_eq!(apply_chunks("x  \n", &[trailing]).unwrap(), "y\n");
    let append = Chunk {
        new_lines: lines(&["z"]),
        ..Chunk::default()
    };
    assert_eq!(apply_chunks("a\n", &[append]).unwrap(), "a\nz\n");
    let at_end = Chunk {
        old_lines: lines(&["x"]),
        new_lines: lines(&["w"]),
        end_of_file: true,
        ..Chunk::default()
    };
    assert_eq!(apply_chunks("x\nx\n", &[at_end]).unwrap(), "x\nw\n");
}

#[test]
fn reports_a_hunk_that_does_not_fit() {
    let chunk = Chunk {
        old_lines: lines(&["missing"]),
        new_lines: lines(&["x"]),
        ..Chunk::default()
    };
    assert_eq!(
        apply_chunks("a\n", &[chunk]).unwrap_err(),
        "hunk 1 does not match the file (expected [\"missing\"])"
    );
    let context = Chunk {
        context: Some(String::from("nowhere")),
        old_lines: lines(&["a"]),
        new_lines: lines(&["b"]),
        ..Chunk::default()
    };
    assert_eq!(
        apply_chunks("a\n", &[context]).unwrap_err(),
        "hunk 1: cannot find the line \"nowhere\""
    );
}
