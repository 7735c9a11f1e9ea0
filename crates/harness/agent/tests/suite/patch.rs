//! `apply_patch`: add, update, delete and move, all or nothing.

use gatehouse_agent::ToolOutcome;
use gatehouse_agent::ToolSet;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::Session;
use crate::suite::support::exists;
use crate::suite::support::patch;
use crate::suite::support::run;
use crate::suite::support::tool_line;

#[tokio::test]
async fn add_file_through_the_model() {
    let session = Session::new();
    let ctx = session.files_only();
    let line = tool_line(
        "apply_patch",
        &json!({"input": "*** Begin Patch\n*** Add File: p.txt\n+hello\n*** End Patch\n"}),
    );
    let turn = run(&ToolSet::native(), &ctx, Vec::new(), &line).await;
    assert_eq!(turn.reply(), "tool apply_patch -> A p.txt");
    assert_eq!(session.read("p.txt"), "hello\n");
}

#[tokio::test]
async fn update_delete_and_move_in_one_patch() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("src/a.txt", "fn main() {\n    one();\n    two();\n}\n");
    session.write("old.txt", "gone\n");
    session.write("from.txt", "keep\nchange\n");
    let text = "*** Begin Patch\n\
                *** Update File: src/a.txt\n\
                @@ fn main() {\n     \
                one();\n\
                -    two();\n\
                +    three();\n\
                *** Delete File: old.txt\n\
                *** Update File: from.txt\n\
                *** Move to: moved/to.txt\n\
                @@\n \
                keep\n\
                -change\n\
                +changed\n\
                *** Add File: new/n.txt\n\
                +n\n\
                *** End Patch";
    let outcome = patch(&ctx, text).await;
    assert_eq!(
        outcome,
        ToolOutcome {
            ok: true,
            output: String::from("M src/a.txt\nD old.txt\nR from.txt -> moved/to.txt\nA new/n.txt"),
        }
    );
    assert_eq!(
        session.read("src/a.txt"),
        "fn main() {\n    one();\n    three();\n}\n"
    );
    assert!(!exists(&session.path("old.txt")));
    assert!(!exists(&session.path("from.txt")));
    assert_eq!(session.read("moved/to.txt"), "keep\nchanged\n");
    assert_eq!(session.read("new/n.txt"), "n\n");
}

#[tokio::test]
async fn a_malformed_or_misfitting_patch_changes_nothing() {
    let session = Session::new();
    let ctx = session.files_only();
    session.write("a.txt", "a\n");
    session.write("b.txt", "b\n");
    let cases = [
        (
            "*** Begin Patch\n*** Add File: new.txt\n+x\n*** Delete File: a.txt\n",
            "PATCH_INVALID: the last line must be \"*** End Patch\"",
        ),
        (
            "*** Begin Patch\n*** Add File: new.txt\n+x\n*** Update File: a.txt\n@@\n-zzz\n+y\n*** End Patch",
            "PATCH_CONFLICT: a.txt: hunk 1 does not match the file (expected [\"zzz\"])",
        ),
        (
            "*** Begin Patch\n*** Delete File: a.txt\n*** Update File: missing.txt\n@@\n-b\n+c\n*** End Patch",
            "NOT_FOUND: ",
        ),
        (
            "*** Begin Patch\n*** Add File: new.txt\n+x\n*** Delete File: b.txt\n*** Delete File: b.txt\n*** End Patch",
            "PATCH_CONFLICT: b.txt is deleted twice",
        ),
        (
            "*** Begin Patch\n*** Add File: new.txt\nno plus\n*** End Patch",
            "PATCH_INVALID: line 3",
        ),
    ];
    for (text, prefix) in cases {
        let outcome = patch(&ctx, text).await;
        assert!(!outcome.ok, "{text:?}");
        assert!(
            outcome.output.starts_with(prefix),
            "{text:?} gave {:?}",
            outcome.output
        );
        assert_eq!(session.read("a.txt"), "a\n");
        assert_eq!(session.read("b.txt"), "b\n");
        assert!(!exists(&session.path("new.txt")), "{text:?}");
    }
}

#[tokio::test]
async fn chat_style_function_input_is_accepted() {
    let session = Session::new();
    let ctx = session.files_only();
    let arguments = json!({"input": "*** Begin Patch\n*** Add File: c.txt\n+chat\n*** End Patch"});
    let outcome = crate::suite::support::call(&ctx, "apply_patch", &arguments).await;
    assert_eq!(outcome.output, "A c.txt");
    assert_eq!(session.read("c.txt"), "chat\n");
}
