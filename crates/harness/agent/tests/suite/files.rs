//! The file tools: read, write, edit, ls and grep.

use gatehouse_agent::ToolOutcome;
use gatehouse_agent::ToolSet;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::Session;
use crate::suite::support::call;
use crate::suite::support::run;
use crate::suite::support::tool_line;

fn failure(output: &str) -> ToolOutcome {
    ToolOutcome {
        ok: false,
        output: output.to_owned(),
    }
}

fn success(output: &str) -> ToolOutcome {
    ToolOutcome {
        ok: true,
        output: output.to_owned(),
    }
}

#[tokio::test]
async fn edit_replaces_an_exact_unique_match_through_the_model() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("a.txt", "alpha beta\ngamma\n");
    let line = tool_line(
        "edit",
        &json!({"path": "a.txt", "old_string": "beta\ngam", "new_string": "B\nG"}),
    );
    let turn = run(&ToolSet::native(), &ctx, Vec::new(), &line).await;
    assert_eq!(
        turn.reply(),
        "tool edit -> replaced 1 occurrence(s) in a.txt"
    );
    assert_eq!(session.read("a.txt"), "alpha B\nGma\n");
}

#[tokio::test]
async fn edit_refuses_a_missing_or_ambiguous_match() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("a.txt", "x x x\n");
    let not_found = call(
        &ctx,
        "edit",
        &json!({"path": "a.txt", "old_string": "y", "new_string": "z"}),
    )
    .await;
    assert_eq!(
        not_found,
        failure("EDIT_NO_MATCH: old_string was not found in a.txt")
    );
    let ambiguous = call(
        &ctx,
        "edit",
        &json!({"path": "a.txt", "old_string": "x", "new_string": "z"}),
    )
    .await;
    assert_eq!(
        ambiguous,
        failure(
            "EDIT_AMBIGUOUS: old_string occurs 3 times in a.txt; add context to make it unique or \
             set replace_all"
        )
    );
    assert_eq!(session.read("a.txt"), "x x x\n");
    let all = call(
        &ctx,
        "edit",
        &json!({"path": "a.txt", "old_string": "x", "new_string": "z", "replace_all": true}),
    )
    .await;
    assert_eq!(all, success("replaced 3 occurrence(s) in a.txt"));
    assert_eq!(session.read("a.txt"), "z z z\n");
    let missing_file = call(
        &ctx,
        "edit",
        &json!({"path": "none.txt", "old_string": "x", "new_string": "z"}),
    )
    .await;
    assert!(
        missing_file.output.starts_with("NOT_FOUND: "),
        "{missing_file:?}"
    );
}

#[tokio::test]
async fn write_creates_parents_and_replaces() {
    let session = Session::new();
    let ctx = session.files_only();
    let first = call(
        &ctx,
        "write",
        &json!({"path": "d/e/f.txt", "content": "one"}),
    )
    .await;
    assert_eq!(first, success("wrote 3 bytes to d/e/f.txt"));
    let second = call(
        &ctx,
        "write",
        &json!({"path": "d/e/f.txt", "content": "two!"}),
    )
    .await;
    assert_eq!(second, success("wrote 4 bytes to d/e/f.txt"));
    assert_eq!(session.read("d/e/f.txt"), "two!");
}

#[tokio::test]
async fn read_numbers_lines_pages_and_replaces_invalid_utf8() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("lines.txt", "a\nb\nc\nd\n");
    let page = call(
        &ctx,
        "read",
        &json!({"path": "lines.txt", "offset": 2, "limit": 2}),
    )
    .await;
    assert_eq!(
        page,
        success("     2\tb\n     3\tc\n[…1 more lines; continue with offset=4]\n")
    );
    std::fs::write(session.path("bin.txt"), b"ok\xff\n").unwrap();
    let lossy = call(&ctx, "read", &json!({"path": "bin.txt"})).await;
    assert_eq!(lossy, success("     1\tok\u{fffd}\n"));
    let directory = call(&ctx, "read", &json!({"path": "."})).await;
    assert!(
        directory.output.starts_with("IS_DIRECTORY: "),
        "{directory:?}"
    );
    let bad_arguments = call(&ctx, "read", &json!({"file": "lines.txt"})).await;
    assert!(
        bad_arguments
            .output
            .starts_with("INVALID_PARAMS: invalid arguments: missing field `path`"),
        "{bad_arguments:?}"
    );
}

#[tokio::test]
async fn read_caps_its_output() {
    let session = Session::new();
    let ctx = session.files_only();
    let line = "y".repeat(999);
    session.write("big.txt", &format!("{line}\n").repeat(300));
    let read = call(&ctx, "read", &json!({"path": "big.txt"})).await;
    assert!(read.ok);
    assert!(
        read.output.len() <= 100 * 1024 + 64,
        "{} bytes",
        read.output.len()
    );
    assert!(
        read.output.ends_with(" more bytes]"),
        "{}",
        &read.output[read.output.len() - 80..]
    );
    assert!(read.output.contains("\n[…truncated: "));
}

#[tokio::test]
async fn ls_lists_one_directory() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("dir/a.txt", "abc");
    session.write("top.txt", "");
    let root = call(&ctx, "ls", &json!({})).await;
    assert_eq!(
        root,
        success("dir/\nlink@\nsecret-link@\ntop.txt (0 bytes)")
    );
    let dir = call(&ctx, "ls", &json!({"path": "dir"})).await;
    assert_eq!(dir, success("a.txt (3 bytes)"));
    let missing = call(&ctx, "ls", &json!({"path": "none"})).await;
    assert!(missing.output.starts_with("NOT_FOUND: "), "{missing:?}");
}

#[tokio::test]
async fn grep_finds_substrings_without_following_links() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("a.txt", "needle one\nhay\n");
    session.write("sub/b.txt", "hay\nmore needle\n");
    session.write(".git/c.txt", "needle in git\n");
    std::fs::write(session.path("bin.dat"), b"needle\0").unwrap();
    let found = call(&ctx, "grep", &json!({"pattern": "needle"})).await;
    assert_eq!(
        found,
        success("a.txt:1: needle one\nsub/b.txt:2: more needle")
    );
    let scoped = call(&ctx, "grep", &json!({"pattern": "needle", "path": "sub"})).await;
    assert_eq!(scoped, success("sub/b.txt:2: more needle"));
    let none = call(&ctx, "grep", &json!({"pattern": "absent"})).await;
    assert_eq!(none, success("no matches"));
    let regex = call(&ctx, "grep", &json!({"pattern": "n.*e", "regex": true})).await;
    assert_eq!(
        regex,
        failure(
            "INVALID_PARAMS: regular expressions are not supported; search for a plain substring"
        )
    );
}

#[tokio::test]
async fn grep_caps_its_matches() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("many.txt", &"hit\n".repeat(500));
    let found = call(&ctx, "grep", &json!({"pattern": "hit"})).await;
    assert!(found.ok);
    let lines: Vec<&str> = found.output.lines().collect();
    assert_eq!(lines.len(), 201);
    assert_eq!(lines[200], "[…stopped after 200 matches or 20000 files]");
}
