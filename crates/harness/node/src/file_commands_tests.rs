use std::sync::Arc;

use gatehouse_fsops::Root;
use gatehouse_policy::path::FileTransferPolicy;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio::sync::mpsc;

use crate::file_commands::Workspace;
use crate::file_commands::register;
use crate::invoke::CommandSet;
use crate::invoke::InvokeContext;
use crate::invoke::Outbound;
use crate::invoke::ProgressSender;

/// Runs the file command `command` on `workspace` through the node's dispatcher and returns
/// its error code, or `"ok"`.
async fn outcome(
    workspace: &Arc<Workspace>,
    command: &'static str,
    params: serde_json::Value,
) -> String {
    let (tx, _rx) = mpsc::channel(8);
    let progress = ProgressSender::new(
        Outbound::new(tx, 1024 * 1024),
        "i1".to_owned(),
        "n1".to_owned(),
    );
    let (_input_tx, input) = mpsc::channel(1);
    let context = InvokeContext {
        params_json: Some(params.to_string()),
        progress,
        input,
    };
    let mut commands = CommandSet::default();
    register(&mut commands, workspace);
    let Some(handler) = commands.get(command) else {
        return format!("{command} is not registered");
    };
    match handler.invoke(context).await {
        Ok(_) => "ok".to_owned(),
        Err(error) => error.code,
    }
}

/// Issue 20 on the node: with an explicit policy that allows everything but `**/.ssh/**`, the
/// node refuses `file.fetch`, `file.write` and `dir.list` of `~/.ssh`, `~/.ssh/` and
/// `~/.ssh/id_rsa` with `POLICY_DENIED` before touching the disk.
#[tokio::test]
async fn issue_20_the_node_denies_a_denied_directory_itself() {
    let temp = tempfile::tempdir().unwrap();
    let home = temp.path().canonicalize().unwrap();
    std::fs::create_dir(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_rsa"), "private key").unwrap();
    std::fs::write(home.join("notes.md"), "notes").unwrap();
    let home_text = home.to_str().unwrap().to_owned();
    let policy: FileTransferPolicy = serde_json::from_value(json!({
        "nodes": {"n1": {
            "allowReadPaths": ["/**"],
            "allowWritePaths": ["/**"],
            "denyPaths": ["**/.ssh/**"],
        }},
    }))
    .unwrap();
    let workspace = Arc::new(Workspace {
        root: Root::open(&home).unwrap(),
        policy,
        node_id: "n1".to_owned(),
        display_name: None,
        home: home_text.clone(),
    });

    let mut expected = Vec::new();
    let mut actual = Vec::new();
    let denied = [".ssh", ".ssh/", ".ssh/id_rsa"];
    for relative in denied {
        let path = format!("{home_text}/{relative}");
        let requests = [
            ("file.fetch", json!({"path": path})),
            (
                "file.write",
                json!({"path": path, "contentBase64": "eA==", "overwrite": true}),
            ),
            ("dir.list", json!({"path": path})),
        ];
        for (kind, params) in requests {
            expected.push((relative, kind, "POLICY_DENIED".to_owned()));
            actual.push((relative, kind, outcome(&workspace, kind, params).await));
        }
    }
    // The rest of the home directory stays reachable.
    let notes = format!("{home_text}/notes.md");
    expected.push(("notes.md", "file.fetch", "ok".to_owned()));
    let fetched = outcome(&workspace, "file.fetch", json!({"path": notes})).await;
    actual.push(("notes.md", "file.fetch", fetched));
    expected.push(("", "dir.list", "ok".to_owned()));
    let listed = outcome(&workspace, "dir.list", json!({"path": home_text})).await;
    actual.push(("", "dir.list", listed));
    assert_eq!(expected, actual);

    assert_eq!(
        "private key",
        std::fs::read_to_string(home.join(".ssh/id_rsa")).unwrap()
    );
}
