//! Issue 12, finding 2, end to end on real processes (a `gatehouse gateway` with a managed
//! skill, a `gatehouse node`, the mock model): background `process` jobs of a session are gone
//! before the node host prepares the session's next turn, and a job that keeps swapping
//! `.gatehouse-skills` for links to another session's workspace, to a sentinel directory and to
//! the Gateway state never gets the node host to create, chmod or remove anything there.

use std::path::Path;
use std::path::PathBuf;
use std::time::Instant;

use gatehouse_fsops::test_support::tree;
use pretty_assertions::assert_eq;

use crate::suite::support::MockModelSetup;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::files_under;
use crate::suite::support::mode;
use crate::suite::support::processes;
use crate::suite::support::turn;

async fn start() -> MockModelSetup {
    let dirs = dirs();
    let managed = dirs.base.join("managed");
    std::fs::create_dir_all(managed.join("greeter")).unwrap();
    std::fs::write(
        managed.join("greeter/SKILL.md"),
        "---\nname: greeter\ndescription: Greets.\n---\n# greeter\n",
    )
    .unwrap();
    MockModelSetup::start(
        dirs,
        &[
            "--skills-dir",
            managed.to_str().unwrap(),
            "--memory-embedder",
            "none",
        ],
    )
    .await
}

/// The mock model's instruction to call `process` with `arguments`.
fn process_call(arguments: &serde_json::Value) -> String {
    format!("/tool process {arguments}")
}

/// Returns the pids of the processes whose argv contains `marker`.
fn running_with(marker: &str) -> Vec<u32> {
    processes()
        .into_iter()
        .filter(|(_, argv, _)| argv.iter().any(|arg| arg.contains(marker)))
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Returns the session workspace holding a file named `name`.
fn workspace_with(harness: &Path, name: &str) -> PathBuf {
    files_under(&harness.join("sessions"))
        .into_iter()
        .find(|file| file.file_name().is_some_and(|file_name| file_name == name))
        .and_then(|file| file.parent().map(Path::to_path_buf))
        .expect("a session workspace holds the file")
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_2_background_processes_are_stopped_before_the_next_turn_is_prepared() {
    let setup = start().await;
    let gateway = &setup.gateway;
    let started = turn(
        gateway,
        "bg",
        &process_call(&serde_json::json!({"action": "start", "command": "exec sleep 4242.125"})),
    )
    .await;
    assert_eq!(started["status"], "completed", "{started}");
    let deadline = Instant::now() + WAIT;
    while running_with("4242.125").is_empty() {
        assert!(Instant::now() < deadline, "the background job never ran");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The next turn's tools see no background process: it was stopped before the turn was
    // prepared, and so before the node host touched the session workspace.
    let listed = turn(
        gateway,
        "bg",
        &process_call(&serde_json::json!({"action": "list"})),
    )
    .await;
    assert_eq!(listed["status"], "completed", "{listed}");
    assert!(
        listed["reply"]
            .as_str()
            .unwrap_or_default()
            .contains("no background processes"),
        "{listed}"
    );
    assert_eq!(running_with("4242.125"), Vec::<u32>::new());
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_2_a_racing_background_job_never_escapes_through_a_real_node() {
    let setup = start().await;
    let gateway = &setup.gateway;
    let harness = setup.dirs.base.join("harness");
    let wrote = turn(
        gateway,
        "other",
        r#"/tool write {"path":"notes.md","content":"the other session"}"#,
    )
    .await;
    assert_eq!(wrote["status"], "completed", "{wrote}");
    let other = workspace_with(&harness, "notes.md");
    let sentinel = setup.dirs.base.join("sentinel");
    std::fs::create_dir_all(sentinel.join("greeter")).unwrap();
    std::fs::write(sentinel.join("keep"), "sentinel").unwrap();
    let state = gateway.state_dir.clone();
    let before = (tree(&other), tree(&sentinel), mode(&state));

    // The racer plants links by name; inside the sandbox they lead nowhere, outside it they
    // name the other session's workspace, its copies, the sentinel and the Gateway state.
    let targets = [
        other.clone(),
        other.join(".gatehouse-skills"),
        sentinel.clone(),
        state.clone(),
    ]
    .iter()
    .map(|target| format!("'{}'", target.display()))
    .collect::<Vec<_>>()
    .join(" ");
    let racer = format!(
        "# racer-5e1f\nwhile :; do for t in {targets}; do rm -rf .gatehouse-skills; ln -sfn \"$t\" .gatehouse-skills; sleep 0.01; rm -f .gatehouse-skills; mkdir -p .gatehouse-skills; ln -sfn \"$t\" .gatehouse-skills/greeter; ln -sfn \"$t\" .gatehouse-skills/planted; sleep 0.01; done; done"
    );
    let start_racer = process_call(&serde_json::json!({"action": "start", "command": racer}));
    let mut statuses = Vec::new();
    for _ in 0..8 {
        // Each turn starts a racer that runs through the rest of the turn, its checkpoint and
        // the gap before the next turn.
        let raced = turn(gateway, "racer", &start_racer).await;
        statuses.push(raced["status"].as_str().unwrap_or_default().to_owned());
    }
    let last = turn(gateway, "racer", "/say done").await;
    statuses.push(last["status"].as_str().unwrap_or_default().to_owned());
    assert_eq!(statuses, vec![String::from("completed"); 9], "{last}");
    assert_eq!(
        running_with("racer-5e1f"),
        Vec::<u32>::new(),
        "a racer outlived its turn"
    );
    assert_eq!(
        (tree(&other), tree(&sentinel), mode(&state)),
        before,
        "something outside the racing session's workspace changed"
    );
    // The last turn got real copies, in a real directory, despite what the racer left.
    let ours = std::fs::read_dir(harness.join("sessions"))
        .unwrap()
        .map(|entry| entry.unwrap().path().join("workspace"))
        .find(|workspace| *workspace != other)
        .expect("the racing session has a workspace");
    let skills = ours.join(".gatehouse-skills");
    assert!(
        std::fs::symlink_metadata(&skills).unwrap().is_dir(),
        "the copies are not a directory"
    );
    assert_eq!(
        std::fs::read_to_string(skills.join("greeter/SKILL.md")).unwrap(),
        "---\nname: greeter\ndescription: Greets.\n---\n# greeter\n"
    );
}
