//! Every file tool refuses `..`, absolute paths and symbolic links, and never reads or writes
//! outside the workspace.

use gatehouse_agent::ToolSet;
use serde_json::Value;
use serde_json::json;

use crate::suite::support::OUTSIDE_MARKER;
use crate::suite::support::Session;
use crate::suite::support::call;
use crate::suite::support::exists;
use crate::suite::support::patch;
use crate::suite::support::run;
use crate::suite::support::tool_line;

/// Returns the escape paths and the code each is refused with.
fn escape_paths(session: &Session) -> Vec<(String, &'static str)> {
    let absolute = session
        .outside
        .join("secret.txt")
        .to_str()
        .unwrap()
        .to_owned();
    vec![
        (String::from("../outside/secret.txt"), "PATH_TRAVERSAL"),
        (
            String::from("sub/../../outside/secret.txt"),
            "PATH_TRAVERSAL",
        ),
        (absolute, "INVALID_PATH"),
        (String::from("link/secret.txt"), "SYMLINK_REDIRECT"),
        (String::from("secret-link"), "SYMLINK"),
    ]
}

fn assert_refused(what: &str, ok: bool, output: &str, code: &str) {
    assert!(!ok, "{what} was not refused: {output}");
    assert!(
        output.starts_with(code),
        "{what} gave {output:?}, expected {code}"
    );
    assert!(
        !output.contains(OUTSIDE_MARKER),
        "{what} leaked the marker: {output}"
    );
}

#[tokio::test]
async fn read_write_and_edit_refuse_every_escape() {
    let session = Session::new();
    let ctx = session.files_only();
    for (path, code) in escape_paths(&session) {
        let calls: [(&str, Value); 3] = [
            ("read", json!({"path": path})),
            ("write", json!({"path": path, "content": "pwned"})),
            (
                "edit",
                json!({"path": path, "old_string": OUTSIDE_MARKER, "new_string": "pwned"}),
            ),
        ];
        for (tool, arguments) in calls {
            let outcome = call(&ctx, tool, &arguments).await;
            assert_refused(&format!("{tool} {path}"), outcome.ok, &outcome.output, code);
        }
    }
    session.assert_outside_untouched();
    // The links themselves are still links.
    assert!(
        std::fs::symlink_metadata(session.path("secret-link"))
            .unwrap()
            .is_symlink()
    );
}

#[tokio::test]
async fn ls_and_grep_refuse_every_escape() {
    let session = Session::new();
    let ctx = session.files_only();
    let dirs = [
        (String::from(".."), "PATH_TRAVERSAL"),
        (session.outside.to_str().unwrap().to_owned(), "INVALID_PATH"),
        (String::from("link"), "SYMLINK"),
    ];
    for (path, code) in dirs {
        let ls = call(&ctx, "ls", &json!({"path": path})).await;
        assert_refused(&format!("ls {path}"), ls.ok, &ls.output, code);
        let grep = call(&ctx, "grep", &json!({"pattern": "SECRET", "path": path})).await;
        assert_refused(&format!("grep {path}"), grep.ok, &grep.output, code);
    }
    // A search of the whole workspace does not follow the links to the marker.
    let everything = call(&ctx, "grep", &json!({"pattern": "SECRET"})).await;
    assert_eq!(everything.output, "no matches");
}

#[tokio::test]
async fn apply_patch_refuses_every_escape() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("inside.txt", "inside\n");
    for (path, code) in escape_paths(&session) {
        let patches = [
            format!("*** Begin Patch\n*** Add File: {path}\n+pwned\n*** End Patch"),
            format!("*** Begin Patch\n*** Delete File: {path}\n*** End Patch"),
            format!(
                "*** Begin Patch\n*** Update File: {path}\n@@\n-{OUTSIDE_MARKER}\n+pwned\n*** End Patch"
            ),
            format!(
                "*** Begin Patch\n*** Update File: inside.txt\n*** Move to: {path}\n@@\n-inside\n+moved\n*** End Patch"
            ),
        ];
        for text in patches {
            let outcome = patch(&ctx, &text).await;
            assert_refused(&text, outcome.ok, &outcome.output, code);
        }
    }
    session.assert_outside_untouched();
    assert_eq!(session.read("inside.txt"), "inside\n");
    assert!(exists(&session.path("secret-link")));
}

#[tokio::test]
async fn escapes_through_the_model_leak_nothing() {
    let session = Session::new();
    let ctx = session.files_only();
    let text = [
        tool_line("read", &json!({"path": "link/secret.txt"})),
        tool_line("read", &json!({"path": "../outside/secret.txt"})),
        tool_line("read", &json!({"path": "secret-link"})),
        tool_line(
            "write",
            &json!({"path": "link/new.txt", "content": "pwned"}),
        ),
    ]
    .join("\n");
    let turn = run(&ToolSet::native(), &ctx, Vec::new(), &text).await;
    let reply = turn.reply();
    assert!(!reply.contains(OUTSIDE_MARKER), "{reply}");
    assert_eq!(reply.lines().count(), 4, "{reply}");
    session.assert_outside_untouched();
}
