//! Issue 12, finding 3, from the Gateway's side: a hostile node reports a crafted checkpoint
//! manifest, and a stored crafted manifest is about to be sent for a restore. A real Gateway
//! runs in process and a real node host enrolls with a setup code; the node's worker is a shell
//! script that speaks the worker protocol and reports whatever manifest it likes, which is all a
//! compromised Harness can do.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use gatehouse_gateway::GatewayConfig;
use gatehouse_gateway::RunningGateway;
use gatehouse_harness::CancellationToken;
use gatehouse_harness::host::NodeHost;
use gatehouse_harness::host::RuntimeConfig;
use gatehouse_harness::worker::WorkerSettings;
use gatehouse_store::records::CheckpointManifest;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::fake_gateway::config;
use crate::suite::http::request;

const TOKEN: &str = "hostile-checkpoint-token";
const WAIT: Duration = Duration::from_secs(30);

/// A real Gateway and a real node host whose worker is a hostile script.
pub(crate) struct Hostile {
    _temp: tempfile::TempDir,
    harness_root: PathBuf,
    running: RunningGateway,
    shutdown: CancellationToken,
    node: tokio::task::JoinHandle<Result<(), gatehouse_harness::NodeHostError>>,
}

/// Writes the hostile worker: it reads its launch line, answers stop requests, and answers each
/// turn with the checkpoint line `checkpoint` and a reply.
fn hostile_worker(dir: &Path, checkpoint: &serde_json::Value) -> PathBuf {
    let checkpoint = json!({"type": "checkpoint", "entries": checkpoint}).to_string();
    let script = format!(
        "#!/bin/sh\nread -r launch\nwhile read -r line; do\n  case \"$line\" in\n    *'\"type\":\"stopBackground\"'*) echo '{{\"type\":\"backgroundStopped\",\"stopped\":0}}' ;;\n    *'\"type\":\"turn\"'*) echo '{checkpoint}'; echo '{{\"type\":\"done\",\"reply\":\"planted\"}}' ;;\n  esac\ndone\n"
    );
    let path = dir.join("hostile-worker");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

async fn start(checkpoint: &serde_json::Value) -> Hostile {
    start_with_worker(|base| hostile_worker(base, checkpoint)).await
}

/// Starts a real Gateway and a real node host whose worker is the script `write_worker` writes
/// into the test's base directory (the directory is its argument; it returns the script).
pub(crate) async fn start_with_worker(write_worker: impl FnOnce(&Path) -> PathBuf) -> Hostile {
    let temp = tempfile::tempdir().unwrap();
    let base = temp.path().canonicalize().unwrap();
    let harness_root = base.join("harness");
    let mut gateway_config =
        GatewayConfig::with_defaults(base.join("gateway"), "127.0.0.1:0".parse().unwrap());
    gateway_config.operator_token_override = Some(TOKEN.to_owned());
    let running =
        gatehouse_gateway::start(gateway_config, gatehouse_gateway::Extensions::default())
            .await
            .unwrap();
    let url = format!("ws://{}/node", running.local_addr);
    let issued = running.issue_setup_code(&url, 600).await.unwrap();
    let code_file = base.join("setup-code");
    std::fs::write(&code_file, issued.code).unwrap();
    let workers = WorkerSettings {
        program: write_worker(&base),
        capacity: 4,
        retirement: gatehouse_harness::worker::WorkerRetirement::default(),
        model: String::from("mock"),
        model_key_env: String::from("HOSTILE_TEST_KEY"),
        allow_unsandboxed: true,
        scratch: None,
        hidden_paths: Vec::new(),
        denied_tools: Vec::new(),
        exec_timeout_seconds: 10,
        // The hostile worker is a script that runs no command.
        sandbox: gatehouse_protocol::worker::SandboxSettings::default(),
        telemetry_env: Vec::new(),
        source_allow: Default::default(),
    };
    let runtime = RuntimeConfig {
        workers: Some(workers),
        ..RuntimeConfig::default()
    };
    let host = NodeHost::prepare_with(config(&harness_root, Some(code_file)), runtime).unwrap();
    let shutdown = CancellationToken::new();
    let node_shutdown = shutdown.clone();
    let node = tokio::spawn(async move { host.run(node_shutdown).await });
    let deadline = Instant::now() + WAIT;
    while request(running.local_addr, TOKEN, "GET", "/readyz", None)
        .await
        .0
        != 200
    {
        assert!(Instant::now() < deadline, "the node did not connect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Hostile {
        _temp: temp,
        harness_root,
        running,
        shutdown,
        node,
    }
}

impl Hostile {
    /// Posts a message to `session` and returns the ended turn.
    pub(crate) async fn turn(&self, session: &str) -> serde_json::Value {
        let addr = self.running.local_addr;
        let path = format!("/v1/sessions/{session}/messages");
        let (status, body) =
            request(addr, TOKEN, "POST", &path, Some(&json!({"text": "hi"}))).await;
        assert_eq!(status, 202, "{body}");
        let turn_id = serde_json::from_str::<serde_json::Value>(&body).unwrap()["turnId"]
            .as_str()
            .unwrap()
            .to_owned();
        let deadline = Instant::now() + WAIT;
        loop {
            let (_, body) = request(
                addr,
                TOKEN,
                "GET",
                &format!("/v1/turns/{turn_id}?wait=20"),
                None,
            )
            .await;
            let turn: serde_json::Value = serde_json::from_str(&body).unwrap();
            if !matches!(turn["status"].as_str(), Some("queued" | "running")) {
                return turn;
            }
            assert!(Instant::now() < deadline, "the turn did not end");
        }
    }

    /// Returns `(stage, reason, reasonCode)` of every `checkpoint.refused` audit row.
    async fn refusals(&self) -> Vec<(String, String, Option<String>)> {
        let events = self.running.store().audit_after(0, 1000).await.unwrap();
        events
            .into_iter()
            .filter(|event| event.action == "checkpoint.refused")
            .map(|event| {
                (
                    event.details["stage"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    event.details["reason"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    event.reason_code,
                )
            })
            .collect()
    }

    /// Returns every path under the Harness root named `planted`.
    fn planted(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut pending = vec![self.harness_root.clone()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).unwrap().flatten() {
                let path = entry.path();
                if entry.file_name() == "planted" {
                    found.push(path.clone());
                }
                if entry.file_type().unwrap().is_dir() {
                    pending.push(path);
                }
            }
        }
        found
    }

    pub(crate) async fn stop(self) {
        self.shutdown.cancel();
        self.running.shutdown.cancel();
        tokio::time::timeout(WAIT, self.node)
            .await
            .unwrap()
            .unwrap()
            .unwrap();
    }
}

/// The manifest of the finding: a link to the node's identity directory, then a file below it.
fn crafted(harness_root: &Path) -> serde_json::Value {
    json!([
        {"path": "a", "kind": "symlink", "target": harness_root.join("node")},
        {
            "path": "a/planted",
            "kind": "file",
            "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "size": 3,
            "contentBase64": "YWJj",
        },
    ])
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_3_a_hostile_node_cannot_plant_a_file_through_a_crafted_checkpoint() {
    // The reported link reaches the node's identity directory from the session workspace
    // (`<root>/sessions/<id>/workspace`), the stored one names it absolutely.
    let hostile = start(&json!([
        {"path": "a", "kind": "symlink", "target": "../../../node"},
        {
            "path": "a/planted",
            "kind": "file",
            "sha256": "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
            "size": 3,
            "contentBase64": "YWJj",
        },
    ]))
    .await;

    // Reported after a turn: refused whole, with the code, audited, and nothing stored.
    let reported = hostile.turn("reported").await;
    assert_eq!(
        (
            reported["status"].as_str(),
            reported["error"]["code"].as_str()
        ),
        (Some("failed"), Some("CHECKPOINT_INVALID")),
        "{reported}"
    );
    let stored = hostile
        .running
        .store()
        .latest_checkpoint("reported")
        .await
        .unwrap();
    assert_eq!(stored, None, "a refused manifest was stored");

    // Stored by an older Gateway and about to be restored after the session's disk was lost:
    // refused before anything of it is sent.
    let manifest = json!({"entries": crafted(&hostile.harness_root)}).to_string();
    let manifest = CheckpointManifest::parse(&manifest).unwrap();
    hostile
        .running
        .store()
        .save_checkpoint(
            "reported",
            "crafted",
            &manifest,
            gatehouse_protocol::time::now_ms(),
            None,
        )
        .await
        .unwrap();
    for session in std::fs::read_dir(hostile.harness_root.join("sessions")).unwrap() {
        std::fs::remove_dir_all(session.unwrap().path().join("workspace")).unwrap();
    }
    let restored = hostile.turn("reported").await;
    assert_eq!(
        (
            restored["status"].as_str(),
            restored["error"]["code"].as_str()
        ),
        (Some("failed"), Some("CHECKPOINT_INVALID")),
        "{restored}"
    );

    let code = Some(String::from("CHECKPOINT_INVALID"));
    assert_eq!(
        hostile.refusals().await,
        vec![
            (
                String::from("report"),
                String::from("below_symlink"),
                code.clone()
            ),
            (String::from("restore"), String::from("below_symlink"), code),
        ]
    );
    assert_eq!(hostile.planted(), Vec::<PathBuf>::new());
    hostile.stop().await;
}
