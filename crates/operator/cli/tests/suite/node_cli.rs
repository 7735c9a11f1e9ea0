//! `gatehouse node` flags checked at start (`--scratch`, `--model`, `--model-key-env`) and the
//! `gatehouse node health` probe, run as real processes. The probe reads only the status file, so
//! most tests write that file themselves.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Child;
use std::process::Output;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use gatehouse_protocol::time::now_ms;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::WAIT;
use crate::suite::support::gatehouse;
use crate::suite::support::mode;

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

/// Runs `gatehouse node health` on `root`, checks that it exits 1 and returns its stderr.
fn health_fails(root: &Path, extra: &[&str]) -> String {
    let output = health(root, extra);
    assert_eq!(output.status.code(), Some(1), "{extra:?}");
    stderr(&output)
}

/// Writes `root/node/status.json` as the node host would.
fn write_status(root: &Path, connected: bool, updated_at_ms: i64) {
    let node_dir = root.join("node");
    std::fs::create_dir_all(&node_dir).unwrap();
    let status = json!({
        "connected": connected,
        "updatedAtMs": updated_at_ms,
        "gatewayConnId": if connected { json!("conn-1") } else { json!(null) },
        "lastErrorCode": if connected { json!(null) } else { json!("CONNECT_FAILED") },
        "pid": 4242,
    });
    std::fs::write(node_dir.join("status.json"), status.to_string()).unwrap();
}

/// Runs `gatehouse node health --root ROOT` with `extra` flags.
fn health(root: &Path, extra: &[&str]) -> Output {
    gatehouse()
        .args(["node", "health", "--root"])
        .arg(root)
        .args(extra)
        .output()
        .unwrap()
}

/// Runs `gatehouse node` with a Gateway nobody listens on and `extra` flags.
fn node(root: &Path, extra: &[&str]) -> std::process::Command {
    let mut command = gatehouse();
    command
        .args([
            "node",
            "--gateway",
            "ws://127.0.0.1:9/node",
            "--runtime",
            "native",
            "--root",
        ])
        .arg(root)
        .args(extra);
    command
}

/// Kills the child when dropped.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn health_without_a_status_file_exits_1_with_a_reason() {
    let root = tempfile::tempdir().unwrap();
    for extra in [&[][..], &["--ready"]] {
        let text = health_fails(root.path(), extra);
        assert!(text.contains("no node status at "), "{text}");
        assert_eq!(text.lines().count(), 1, "{text}");
    }
}

#[test]
fn health_on_a_fresh_connected_status_exits_0_with_and_without_ready() {
    let root = tempfile::tempdir().unwrap();
    write_status(root.path(), true, now_ms());
    for extra in [&[][..], &["--ready"]] {
        let output = health(root.path(), extra);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{extra:?}: {}",
            stderr(&output)
        );
        assert_eq!(stderr(&output), "");
    }
}

#[test]
fn health_on_a_disconnected_status_is_live_but_not_ready() {
    let root = tempfile::tempdir().unwrap();
    write_status(root.path(), false, now_ms());
    let output = health(root.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let text = health_fails(root.path(), &["--ready"]);
    assert!(text.contains("not connected"), "{text}");
    assert!(text.contains("CONNECT_FAILED"), "{text}");
}

#[test]
fn health_on_a_stale_status_exits_1() {
    let root = tempfile::tempdir().unwrap();
    // Too old to be ready, young enough to be live.
    write_status(root.path(), true, now_ms() - 45_000);
    assert_eq!(health(root.path(), &[]).status.code(), Some(0));
    let text = health_fails(root.path(), &["--ready"]);
    assert!(text.contains("stale"), "{text}");
    // Too old for either.
    write_status(root.path(), true, now_ms() - 120_000);
    for extra in [&[][..], &["--ready"]] {
        let text = health_fails(root.path(), extra);
        assert!(text.contains("stale"), "{text}");
    }
}

#[test]
fn health_json_prints_the_status_and_healthy() {
    let root = tempfile::tempdir().unwrap();
    let updated_at_ms = now_ms();
    write_status(root.path(), false, updated_at_ms);
    let output = health(root.path(), &["--json"]);
    assert_eq!(output.status.code(), Some(0));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        report,
        json!({
            "connected": false,
            "updatedAtMs": updated_at_ms,
            "gatewayConnId": null,
            "lastErrorCode": "CONNECT_FAILED",
            "pid": 4242,
            "healthy": true,
        })
    );
    let output = health(root.path(), &["--ready", "--json"]);
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["healthy"], false);
    assert!(report["reason"].as_str().unwrap().contains("not connected"));
}

#[test]
fn health_refuses_a_symlinked_status_file_or_node_directory() {
    let elsewhere = tempfile::tempdir().unwrap();
    write_status(elsewhere.path(), true, now_ms());

    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("node")).unwrap();
    std::os::unix::fs::symlink(
        elsewhere.path().join("node/status.json"),
        root.path().join("node/status.json"),
    )
    .unwrap();
    let text = health_fails(root.path(), &[]);
    assert!(text.contains("symbolic link"), "{text}");

    let root = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path().join("node"), root.path().join("node")).unwrap();
    let text = health_fails(root.path(), &[]);
    assert!(text.contains("symbolic link"), "{text}");
}

#[test]
fn health_on_an_unparseable_status_exits_1() {
    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join("node")).unwrap();
    std::fs::write(root.path().join("node/status.json"), "{\"connected\":").unwrap();
    let text = health_fails(root.path(), &[]);
    assert!(text.contains("not a node status"), "{text}");
}

#[test]
fn scratch_with_a_0755_private_directory_exits_1_with_scratch_unsafe_and_keeps_the_mode() {
    let temp = tempfile::tempdir().unwrap();
    let scratch = temp.path().join("scratch");
    let private_dir = scratch.join("gatehouse");
    std::fs::create_dir_all(&private_dir).unwrap();
    std::fs::set_permissions(&private_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root = temp.path().join("root");

    let output = node(&root, &["--scratch"]).arg(&scratch).output().unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stderr(&output);
    assert!(text.contains("SCRATCH_UNSAFE: "), "{text}");
    assert_eq!(mode(&private_dir), 0o755);
    // The check ran before the node host started: the root was never created.
    assert!(!root.exists());
}

#[test]
fn an_invalid_model_spec_exits_2_naming_the_expected_forms() {
    let temp = tempfile::tempdir().unwrap();
    let output = node(&temp.path().join("root"), &["--model", "nonsense"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let text = stderr(&output);
    assert!(
        text.contains(
            "mock, openai-responses:URL:MODEL, openai-chat:URL:MODEL or anthropic:URL:MODEL"
        ),
        "{text}"
    );
}

#[test]
fn a_remote_model_without_its_key_variable_exits_2_naming_the_variable() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("root");
    let spec = "openai-chat:http://127.0.0.1:9/v1:gpt";

    let output = node(&root, &["--model", spec])
        .env_remove("OPENAI_API_KEY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("OPENAI_API_KEY"),
        "{}",
        stderr(&output)
    );

    let output = node(
        &root,
        &["--model", spec, "--model-key-env", "GATEHOUSE_TEST_KEY"],
    )
    .env("GATEHOUSE_TEST_KEY", "")
    .output()
    .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("GATEHOUSE_TEST_KEY"),
        "{}",
        stderr(&output)
    );
    assert!(!root.exists());
}

/// The node host started exactly as the Kubernetes renderer starts it writes a status that the
/// renderer's probes read: live while it retries an unreachable Gateway, never ready.
#[test]
fn the_rendered_harness_command_runs_and_its_probes_read_the_status() {
    let temp = tempfile::tempdir().unwrap();
    let root = temp.path().join("root");
    let scratch = temp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let setup_code = json!({
        "v": 1,
        "url": "ws://127.0.0.1:9/node",
        "bootstrapToken": "bt-test",
        "expiresAtMs": 4_000_000_000_000_i64,
    });
    let setup_code_file = temp.path().join("setup-code");
    std::fs::write(
        &setup_code_file,
        base64::Engine::encode(
            &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            setup_code.to_string(),
        ),
    )
    .unwrap();
    let mut command = node(
        &root,
        &[
            "--model",
            "openai-responses:http://127.0.0.1:9/v1:gpt-test",
            "--model-key-env",
            "GATEHOUSE_TEST_KEY",
        ],
    );
    command
        .arg("--setup-code-file")
        .arg(&setup_code_file)
        .arg("--scratch")
        .arg(&scratch)
        .env("GATEHOUSE_TEST_KEY", "sk-test-not-logged")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = KillOnDrop(command.spawn().unwrap());

    let status_file = root.join("node/status.json");
    let deadline = Instant::now() + WAIT;
    while !status_file.exists() {
        assert!(Instant::now() < deadline, "no status file");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(mode(&status_file), 0o600);
    assert_eq!(mode(&scratch.join("gatehouse")), 0o700);
    let output = health(&root, &["--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["connected"], false);
    assert_eq!(report["pid"], child.0.id());
    assert_eq!(health(&root, &["--ready"]).status.code(), Some(1));

    child.0.kill().unwrap();
    child.0.wait().unwrap();
    let mut output = String::new();
    std::io::Read::read_to_string(child.0.stderr.as_mut().unwrap(), &mut output).unwrap();
    assert!(output.contains("model configured"), "{output}");
    assert!(output.contains("scratch volume ready"), "{output}");
    assert!(!output.contains("sk-test-not-logged"), "{output}");
    assert!(!output.contains("bt-test"), "{output}");
}
