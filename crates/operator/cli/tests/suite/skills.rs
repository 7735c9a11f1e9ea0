//! Skills across the split, on real processes: the Gateway's managed and bundled roots, the
//! Harness workspace roots discovered by the node, precedence and gating, and the private
//! read-only copies a native turn gets.

use std::path::Path;

use pretty_assertions::assert_eq;

use crate::suite::support::MockModelSetup;
use crate::suite::support::dirs;
use crate::suite::support::files_under;
use crate::suite::support::mode;
use crate::suite::support::turn;

fn skill(root: &Path, dir: &str, name: &str, description: &str, extra: &str) {
    std::fs::create_dir_all(root.join(dir)).unwrap();
    std::fs::write(
        root.join(dir).join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n{extra}---\n# {name}\n\n{description} Body of {name}.\n"),
    )
    .unwrap();
}

/// Starts the mock model, a Gateway with empty managed and bundled skill roots, and a node.
async fn start() -> MockModelSetup {
    let dirs = dirs();
    let managed = dirs.base.join("managed");
    let bundled = dirs.base.join("bundled");
    std::fs::create_dir_all(&managed).unwrap();
    std::fs::create_dir_all(&bundled).unwrap();
    MockModelSetup::start(
        dirs,
        &[
            "--skills-dir",
            managed.to_str().unwrap(),
            "--bundled-skills-dir",
            bundled.to_str().unwrap(),
            "--memory-embedder",
            "none",
        ],
    )
    .await
}

#[tokio::test(flavor = "multi_thread")]
async fn the_catalog_merges_both_hosts_by_precedence_and_explains_gating() {
    let setup = start().await;
    let workspace = setup.path("harness/workspace");
    skill(
        &setup.path("bundled"),
        "deploy",
        "deploy",
        "Bundled deploy.",
        "",
    );
    skill(
        &setup.path("managed"),
        "deploy",
        "deploy",
        "Managed deploy.",
        "",
    );
    skill(
        &workspace.join("skills"),
        "deploy",
        "deploy",
        "Workspace deploy.",
        "",
    );
    skill(
        &workspace.join(".agents/skills"),
        "notes",
        "notes",
        "Takes notes.",
        "",
    );
    skill(
        &setup.path("bundled"),
        "gpu",
        "gpu",
        "Uses the GPU.",
        "metadata:\n  openclaw:\n    requires:\n      bins: [definitely-missing-gatehouse-bin]\n",
    );
    // A link in a workspace root is never followed.
    std::os::unix::fs::symlink(
        setup.path("managed/deploy"),
        workspace.join("skills/linked"),
    )
    .unwrap();

    let view = setup.gateway.get_json("/v1/skills").await;
    let rows: Vec<(String, String, String, String)> = view["skills"]
        .as_array()
        .unwrap()
        .iter()
        .map(|skill| {
            let state = match (
                skill["shadowedBy"].as_str(),
                skill["gatedOut"].as_array().unwrap().is_empty(),
            ) {
                (Some(winner), _) => format!("shadowed by {winner}"),
                (None, false) => format!("gated: {}", skill["gatedOut"][0].as_str().unwrap()),
                (None, true) => String::from("available"),
            };
            (
                skill["name"].as_str().unwrap().to_owned(),
                skill["host"].as_str().unwrap().to_owned(),
                skill["tier"].as_str().unwrap().to_owned(),
                state,
            )
        })
        .collect();
    let row = |name: &str, host: &str, tier: &str, state: &str| {
        (
            name.to_owned(),
            host.to_owned(),
            tier.to_owned(),
            state.to_owned(),
        )
    };
    assert_eq!(
        rows,
        vec![
            row("deploy", "harness", "workspace", "available"),
            row("deploy", "gateway", "managed", "shadowed by workspace"),
            row("deploy", "gateway", "bundled", "shadowed by workspace"),
            row(
                "gpu",
                "gateway",
                "bundled",
                "gated: missing binary definitely-missing-gatehouse-bin"
            ),
            row("notes", "harness", "workspace-agents", "available"),
        ]
    );
    let warnings = view["warnings"].to_string();
    assert!(
        warnings.contains("shadowed by the workspace one"),
        "{warnings}"
    );
    assert!(
        view["skipped"].to_string().contains("symbolic link"),
        "{}",
        view["skipped"]
    );

    let output = setup.gateway.operator_cli(&["skills", "list"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("gated")
            && stdout.contains("missing binary definitely-missing-gatehouse-bin"),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn skill_copies_are_read_only_kept_out_of_checkpoints_and_gone_before_the_next_turn() {
    let setup = start().await;
    skill(
        &setup.path("bundled"),
        "greeter",
        "greeter",
        "Greets people warmly.",
        "",
    );
    // A skill of the Harness workspace is copied by the node from the Agent workspace.
    skill(
        &setup.path("harness/workspace/.agents/skills"),
        "notes",
        "notes",
        "Takes notes.",
        "",
    );
    let first = turn(
        &setup.gateway,
        "s",
        "/tool write {\"path\":\"kept.txt\",\"content\":\"kept\"}\n/tool read {\"path\":\".gatehouse-skills/greeter/SKILL.md\"}\n/tool read {\"path\":\".gatehouse-skills/notes/SKILL.md\"}",
    )
    .await;
    assert_eq!(first["status"], "completed", "{first}");
    let reply = first["reply"].as_str().unwrap();
    assert!(
        reply.contains("Body of greeter.") && reply.contains("Body of notes."),
        "{first}"
    );
    // The system prompt listed the copy where the model can read it.
    let requests = crate::suite::support::mock_requests(&setup.mock_url).await;
    let system = requests.last().unwrap()["body"]["messages"][0]["content"].to_string();
    assert!(
        system.contains("<available_skills>")
            && system.contains(".gatehouse-skills/greeter/SKILL.md")
            && system.contains(".gatehouse-skills/notes/SKILL.md"),
        "{system}"
    );
    let sessions = setup.path("harness/sessions");
    let copy = files_under(&sessions)
        .into_iter()
        .find(|file| file.ends_with(".gatehouse-skills/greeter/SKILL.md"))
        .expect("the copy is in the session workspace");
    assert_eq!(mode(&copy), 0o400);
    assert_eq!(mode(copy.parent().unwrap()), 0o500);
    let session_workspace = copy.ancestors().nth(3).unwrap().to_path_buf();
    assert!(session_workspace.join("kept.txt").is_file());

    // Neither host provides a skill any more: the copies are gone before the next turn runs.
    std::fs::remove_dir_all(setup.path("bundled/greeter")).unwrap();
    std::fs::remove_dir_all(setup.path("harness/workspace/.agents/skills/notes")).unwrap();
    let second = turn(&setup.gateway, "s", "/tool ls {\"path\":\".\"}").await;
    assert_eq!(second["status"], "completed", "{second}");
    assert!(
        !second["reply"]
            .as_str()
            .unwrap()
            .contains(".gatehouse-skills"),
        "{second}"
    );
    assert!(!session_workspace.join(".gatehouse-skills").exists());

    // The workspace is lost and rebuilt from the checkpoint: the kept file comes back, and no
    // skill copy ever went into a checkpoint.
    std::fs::remove_dir_all(&session_workspace).unwrap();
    let third = turn(&setup.gateway, "s", "/tool read {\"path\":\"kept.txt\"}").await;
    assert_eq!(third["reply"], "tool read ->      1\tkept\n", "{third}");
    assert!(!session_workspace.join(".gatehouse-skills").exists());
}
