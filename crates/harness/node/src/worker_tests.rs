use std::os::unix::fs::PermissionsExt;

use gatehouse_fsops::Dir;
use gatehouse_fsops::test_support::tree;
use gatehouse_protocol::worker::CheckpointEntry;
use gatehouse_protocol::worker::Inline;
use pretty_assertions::assert_eq;

use crate::worker::restore_entries;

fn file(path: &str, content: &[u8], executable: bool) -> CheckpointEntry {
    use base64::Engine;
    let sha256 = gatehouse_fsops::commands::sha256_hex(content);
    let inline = Inline {
        base64: Some(base64::engine::general_purpose::STANDARD.encode(content)),
    };
    CheckpointEntry::file(path, &sha256, content.len() as u64, executable, inline)
}

fn link(path: &str, target: &str) -> CheckpointEntry {
    CheckpointEntry::symlink(path, target)
}

/// A Harness root with a node identity directory and one session directory.
struct Harness {
    _temp: tempfile::TempDir,
    root: std::path::PathBuf,
    session_dir: std::path::PathBuf,
}

fn harness() -> Harness {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("node")).unwrap();
    std::fs::write(root.join("node/device.json"), "identity").unwrap();
    std::fs::set_permissions(root.join("node"), std::fs::Permissions::from_mode(0o700)).unwrap();
    let session_dir = root.join("sessions/s1");
    std::fs::create_dir_all(&session_dir).unwrap();
    Harness {
        _temp: temp,
        root,
        session_dir,
    }
}

/// Issue 12, finding 3: the crafted manifest `a -> <harness>/node`, `a/planted` is refused
/// before anything is created, and nothing appears in the node's identity directory.
#[test]
fn finding_3_a_crafted_manifest_plants_nothing_through_a_restored_link() {
    let harness = harness();
    let node_dir = harness.root.join("node");
    let before = tree(&node_dir);
    let node_target = node_dir.to_str().unwrap();
    let session = Dir::open(&harness.session_dir).unwrap();
    for manifest in [
        vec![link("a", node_target), file("a/planted", b"owned", false)],
        vec![file("a/b/planted", b"owned", false), link("a", node_target)],
        vec![link("a", node_target), link("a/planted", "/etc/passwd")],
    ] {
        let error = restore_entries(&session, &manifest).unwrap_err();
        assert_eq!(error.code, "CHECKPOINT_INVALID", "{error:?}");
        assert_eq!(
            error.details.as_ref().unwrap()["reason"],
            "below_symlink",
            "{error:?}"
        );
        assert!(
            !harness.session_dir.join("workspace").exists(),
            "a refused manifest created the workspace"
        );
    }
    assert_eq!(tree(&node_dir), before, "the node directory changed");
}

/// Links the sandbox planted (to outside, absolute, escaping) come back as links, created with
/// `symlinkat` and never followed; files keep their content and exec bit.
#[test]
fn a_restore_recreates_planted_links_as_links_and_never_follows_them() {
    let harness = harness();
    let node_dir = harness.root.join("node");
    let before = tree(&node_dir);
    let session = Dir::open(&harness.session_dir).unwrap();
    let manifest = vec![
        file("dir/keep.txt", b"kept", false),
        file("run.sh", b"#!/bin/sh\necho ran\n", true),
        link("to-node", node_dir.to_str().unwrap()),
        link("up", "../../node/device.json"),
        link("dir/etc", "/etc"),
    ];
    assert_eq!(restore_entries(&session, &manifest).unwrap(), 5);
    let workspace = harness.session_dir.join("workspace");
    assert_eq!(
        std::fs::read(workspace.join("dir/keep.txt")).unwrap(),
        b"kept"
    );
    let mode = |path: &str| {
        std::fs::symlink_metadata(workspace.join(path))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!((mode("run.sh"), mode("dir/keep.txt")), (0o755, 0o644));
    for (path, target) in [
        ("to-node", node_dir.to_str().unwrap()),
        ("up", "../../node/device.json"),
        ("dir/etc", "/etc"),
    ] {
        assert_eq!(
            std::fs::read_link(workspace.join(path)).unwrap(),
            std::path::PathBuf::from(target)
        );
    }
    assert_eq!(tree(&node_dir), before, "the node directory changed");
    // A second restore over the existing workspace is refused, not merged.
    assert_eq!(
        restore_entries(&session, &manifest).unwrap_err().code,
        "EXISTS_NO_OVERWRITE"
    );
}

#[test]
fn a_restore_refuses_content_that_does_not_match_its_hash() {
    let harness = harness();
    let session = Dir::open(&harness.session_dir).unwrap();
    let mut forged = file("a.txt", b"original", false);
    forged.sha256 = Some(gatehouse_fsops::commands::sha256_hex(b"other"));
    forged.size = b"original".len() as u64;
    // The forged entry comes after a good one: the partly written workspace is removed.
    let manifest = [file("good.txt", b"good", false), forged];
    assert_eq!(
        restore_entries(&session, &manifest).unwrap_err().code,
        "INTEGRITY_FAILURE"
    );
    assert!(!harness.session_dir.join("workspace").exists());
}

/// Issue 12: a session moved away is deleted from its old node, through handles: a link the
/// sandbox planted in the workspace is removed, never followed.
#[test]
fn finding_4_a_moved_session_is_discarded_without_following_planted_links() {
    let harness = harness();
    let id = crate::worker::session_dir_name("moved");
    let workspace = harness.root.join("sessions").join(&id).join("workspace");
    std::fs::create_dir_all(workspace.join("deep")).unwrap();
    std::fs::write(workspace.join("deep/file"), "work").unwrap();
    std::os::unix::fs::symlink(harness.root.join("node"), workspace.join("escape")).unwrap();
    std::os::unix::fs::symlink(harness.root.join("node"), workspace.join("deep/escape")).unwrap();
    let before = tree(&harness.root.join("node"));
    assert!(crate::worker::discard_session_dir(&harness.root, "moved").unwrap());
    assert!(!harness.root.join("sessions").join(&id).exists());
    assert_eq!(tree(&harness.root.join("node")), before);
    assert!(harness.session_dir.exists(), "another session was touched");
    // Discarding what is not there is not an error.
    assert!(!crate::worker::discard_session_dir(&harness.root, "moved").unwrap());
}

fn turn(
    session_key: &str,
    workspace_required: bool,
) -> gatehouse_protocol::worker::AgentTurnParams {
    gatehouse_protocol::worker::AgentTurnParams {
        session_key: session_key.to_owned(),
        turn_id: String::from("t1"),
        history: Vec::new(),
        user_texts: vec![String::from("hello")],
        attachments: Vec::new(),
        checkpoint_id: None,
        workspace_required,
        gateway_tools: Vec::new(),
        denied_tools: Vec::new(),
        skills_prompt: None,
        skill_copies: Vec::new(),
        traceparent: None,
        max_turn_tokens: None,
    }
}

fn invoke_context() -> crate::invoke::InvokeContext {
    let outbound = crate::invoke::Outbound::new(tokio::sync::mpsc::channel(8).0, 1 << 20);
    crate::invoke::InvokeContext {
        params_json: None,
        progress: crate::invoke::ProgressSender::new(
            outbound,
            String::from("invoke"),
            String::from("node"),
        ),
        input: tokio::sync::mpsc::channel(1).1,
    }
}

/// A turn of a session whose workspace came from a source is refused on a node that lacks the
/// workspace, even without a checkpoint, and the workspace is not made empty in its place.
#[tokio::test]
async fn a_turn_that_requires_its_workspace_is_refused_when_it_is_missing() {
    let harness = harness();
    let settings = crate::worker::WorkerSettings {
        program: std::path::PathBuf::from("/nonexistent/gatehouse"),
        capacity: 1,
        retirement: crate::worker::WorkerRetirement::Never,
        model: String::from("mock"),
        model_key_env: String::from("WORKER_TEST_KEY"),
        allow_unsandboxed: false,
        scratch: None,
        hidden_paths: Vec::new(),
        denied_tools: Vec::new(),
        exec_timeout_seconds: 10,
        sandbox: gatehouse_protocol::worker::SandboxSettings::default(),
        telemetry_env: Vec::new(),
        source_allow: Default::default(),
    };
    let supervisor = crate::worker::WorkerSupervisor::new(settings, harness.root.clone());
    let workspace = harness
        .root
        .join("sessions")
        .join(crate::worker::session_dir_name("sourced"))
        .join("workspace");
    let error = supervisor
        .run_turn(turn("sourced", true), &mut invoke_context())
        .await
        .unwrap_err();
    assert_eq!(error.code, "WORKSPACE_MISSING", "{error:?}");
    assert!(!workspace.exists(), "the refused turn made a workspace");
    // Without the flag the turn goes on (and fails only because this worker cannot start).
    let error = supervisor
        .run_turn(turn("sourced", false), &mut invoke_context())
        .await
        .unwrap_err();
    assert_eq!(error.code, "INTERNAL", "{error:?}");
    assert!(workspace.is_dir());
    // Once the workspace exists, the flag lets the turn through.
    let error = supervisor
        .run_turn(turn("sourced", true), &mut invoke_context())
        .await
        .unwrap_err();
    assert_eq!(error.code, "INTERNAL", "{error:?}");
}

/// A stand-in for `gatehouse worker`: a shell script that reads its launch and its turn, writes
/// the launch to `launch.json` in its `HOME`, then runs `body`.
fn fake_worker(dir: &std::path::Path, body: &str) -> std::path::PathBuf {
    let program = dir.join("fake-worker");
    std::fs::write(
        &program,
        format!("#!/bin/sh\nread launch\nread turn\nprintf '%s\\n' \"$launch\" > \"$HOME/launch.json\"\n{body}\n"),
    )
    .unwrap();
    std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
    program
}

/// A model call for the mock as a worker writes it.
const MODEL_CALL: &str = r#"{"type":"modelCall","id":ID,"request":{"system":"","messages":[{"type":"user","text":"/say hi"}],"tools":[],"maxOutputTokens":null}}"#;

fn broker_settings(program: std::path::PathBuf) -> crate::worker::WorkerSettings {
    crate::worker::WorkerSettings {
        program,
        capacity: 1,
        retirement: crate::worker::WorkerRetirement::Never,
        model: String::from("mock"),
        model_key_env: String::from("WORKER_TEST_KEY"),
        allow_unsandboxed: false,
        scratch: None,
        hidden_paths: Vec::new(),
        denied_tools: Vec::new(),
        exec_timeout_seconds: 10,
        sandbox: gatehouse_protocol::worker::SandboxSettings::default(),
        telemetry_env: Vec::new(),
        source_allow: Default::default(),
    }
}

/// An invoke context whose progress lines can be read back.
fn recording_context() -> (
    crate::invoke::InvokeContext,
    tokio::sync::mpsc::Receiver<String>,
) {
    let (frames, received) = tokio::sync::mpsc::channel(64);
    let outbound = crate::invoke::Outbound::new(frames, 1 << 20);
    let context = crate::invoke::InvokeContext {
        params_json: None,
        progress: crate::invoke::ProgressSender::new(
            outbound,
            String::from("invoke"),
            String::from("node"),
        ),
        input: tokio::sync::mpsc::channel(1).1,
    };
    (context, received)
}

/// The worker events the Gateway got as progress, in order.
fn progress_events(
    received: &mut tokio::sync::mpsc::Receiver<String>,
) -> Vec<gatehouse_protocol::worker::WorkerEvent> {
    let mut text = String::new();
    while let Ok(frame) = received.try_recv() {
        let frame: serde_json::Value = serde_json::from_str(&frame).unwrap();
        text.push_str(frame["params"]["chunk"].as_str().unwrap());
    }
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The node host's broker answers a worker's model call with the key it alone holds, reports
/// the call's usage from its own count, drops the usage a worker claims, and ends the turn with
/// its own sum.
#[tokio::test]
async fn the_broker_answers_model_calls_and_the_turns_usage_is_its_own_count() {
    let harness = harness();
    let program = fake_worker(
        &harness.root,
        &format!(
            r#"echo '{{"type":"modelUsage","usage":{{"inputTokens":1,"outputTokens":1,"totalTokens":2,"modelCalls":5}}}}'
echo '{call}'
while read line; do case "$line" in *'"completed"'*) printf '%s\n' "$line" > "$HOME/answer.json"; break;; esac; done
echo '{{"type":"done","reply":"hi","usage":{{"inputTokens":0,"outputTokens":0,"totalTokens":7,"modelCalls":9}}}}'
cat > /dev/null"#,
            call = MODEL_CALL.replace("ID", "1"),
        ),
    );
    let supervisor =
        crate::worker::WorkerSupervisor::new(broker_settings(program), harness.root.clone());
    let (mut context, mut received) = recording_context();
    let result = supervisor
        .run_turn(turn("s", false), &mut context)
        .await
        .unwrap();
    let events = progress_events(&mut received);
    let usage = result.usage.unwrap();
    assert_eq!(
        events,
        vec![gatehouse_protocol::worker::WorkerEvent::ModelUsage {
            usage: usage.clone()
        }]
    );
    assert_eq!(
        (usage.model_calls, usage.model.as_deref()),
        (1, Some("mock"))
    );
    assert!(
        usage.total_tokens > 0 && usage.total_tokens != 7,
        "{usage:?}"
    );
    let session_dir = harness
        .root
        .join("sessions")
        .join(crate::worker::session_dir_name("s"));
    let answer = std::fs::read_to_string(session_dir.join("answer.json")).unwrap();
    assert!(answer.contains(r#""text":"hi""#), "{answer}");
    let launch: gatehouse_protocol::worker::WorkerLaunch =
        serde_json::from_str(&std::fs::read_to_string(session_dir.join("launch.json")).unwrap())
            .unwrap();
    assert_eq!(
        launch.broker,
        Some(gatehouse_protocol::worker::WorkerBroker {
            model: String::from("mock")
        })
    );
}

/// Past the turn's ceiling the broker refuses the next call with `TURN_BUDGET_EXCEEDED`, and a
/// worker that says `done` anyway gets the turn failed with that code.
#[tokio::test]
async fn past_the_ceiling_the_broker_refuses_calls_and_fails_the_turn() {
    let harness = harness();
    let program = fake_worker(
        &harness.root,
        &format!(
            r#"echo '{first}'
while read line; do case "$line" in *'"completed"'*) break;; esac; done
echo '{second}'
while read line; do case "$line" in *'"failed"'*) printf '%s\n' "$line" > "$HOME/refusal.json"; break;; esac; done
echo '{{"type":"done","reply":"ignored the ceiling"}}'
cat > /dev/null"#,
            first = MODEL_CALL.replace("ID", "1"),
            second = MODEL_CALL.replace("ID", "2"),
        ),
    );
    let supervisor =
        crate::worker::WorkerSupervisor::new(broker_settings(program), harness.root.clone());
    let (mut context, _received) = recording_context();
    let mut params = turn("s", false);
    params.max_turn_tokens = Some(1);
    let error = supervisor.run_turn(params, &mut context).await.unwrap_err();
    assert_eq!(error.code, "TURN_BUDGET_EXCEEDED", "{error:?}");
    let refusal = std::fs::read_to_string(
        harness
            .root
            .join("sessions")
            .join(crate::worker::session_dir_name("s"))
            .join("refusal.json"),
    )
    .unwrap();
    assert!(refusal.contains(r#""id":2"#), "{refusal}");
    assert!(refusal.contains("TURN_BUDGET_EXCEEDED"), "{refusal}");
}
