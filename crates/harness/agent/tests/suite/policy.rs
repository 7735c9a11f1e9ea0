//! The tool policy decides what the model is offered and what may run.

use gatehouse_agent::ToolSet;
use gatehouse_policy::tool::LayerSource;
use gatehouse_policy::tool::ToolLayer;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::Session;
use crate::suite::support::exists;
use crate::suite::support::run;
use crate::suite::support::tool_line;

#[tokio::test]
async fn a_denied_tool_is_not_offered_and_never_runs() {
    let session = Session::new();
    let ctx = session.files_only();
    let layers = vec![ToolLayer {
        source: LayerSource::Global,
        allow: None,
        deny: vec![String::from("exec")],
    }];
    let tools = ToolSet::native().filtered(&layers);
    assert_eq!(
        tools.names(),
        vec![
            "read",
            "write",
            "edit",
            "apply_patch",
            "ls",
            "grep",
            "process"
        ]
    );
    assert!(tools.specs().iter().all(|spec| spec.name != "exec"));
    let line = tool_line("exec", &json!({"command": "echo hi > pwned.txt"}));
    let turn = run(&tools, &ctx, Vec::new(), &line).await;
    assert_eq!(
        turn.reply(),
        "tool exec -> TOOL_NOT_ALLOWED: tool \"exec\" is not available in this session"
    );
    assert!(!exists(&session.path("pwned.txt")));
}

#[tokio::test]
async fn an_allowlist_keeps_only_its_tools() {
    let layers = vec![ToolLayer {
        source: LayerSource::Agent,
        allow: Some(vec![String::from("read"), String::from("write")]),
        deny: Vec::new(),
    }];
    // Allowing `write` also admits `apply_patch`.
    assert_eq!(
        ToolSet::native().filtered(&layers).names(),
        vec!["read", "write", "apply_patch"]
    );
    assert_eq!(ToolSet::native().filtered(&[]).names().len(), 8);
}
