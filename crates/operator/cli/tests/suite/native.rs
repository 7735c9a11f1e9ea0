//! The native runtime end to end, on real processes: `gatehouse up` and dedicated `gateway` +
//! `node` + `mock-model`, with the deterministic mock model as the only stand-in.

use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;

use crate::suite::support::Dirs;
use crate::suite::support::Gateway;
use crate::suite::support::Process;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::files_under;
use crate::suite::support::mock_model;
use crate::suite::support::post_message;
use crate::suite::support::processes;
use crate::suite::support::start_node_with;
use crate::suite::support::turn;
use crate::suite::support::wait_turn;

const MODEL_KEY: &str = "model-key-only-on-the-harness-4b1d";

/// A worker process: its pid, argv and environment.
type WorkerProcess = crate::suite::support::ProcessInfo;

fn workers() -> Vec<WorkerProcess> {
    processes()
        .into_iter()
        .filter(|(_, argv, _)| {
            argv.len() == 2 && argv[0].ends_with("gatehouse") && argv[1] == "worker"
        })
        .collect()
}

/// Asserts that `turn` failed with the stable code `code`.
pub(crate) fn assert_failed_with(turn: &serde_json::Value, code: &str) {
    assert_eq!(
        (turn["status"].as_str(), turn["error"]["code"].as_str()),
        (Some("failed"), Some(code)),
        "{turn}"
    );
}

pub(crate) struct Dedicated {
    _dirs: Dirs,
    pub(crate) gateway: Gateway,
    node: Process,
    mock: Process,
    mock_url: String,
    pub(crate) harness: std::path::PathBuf,
}

async fn dedicated(capacity: &str) -> Dedicated {
    dedicated_with(capacity, &[]).await
}

pub(crate) async fn dedicated_with(capacity: &str, extra: &[&str]) -> Dedicated {
    dedicated_on(capacity, extra, &[], &[]).await
}

/// A dedicated setup whose Gateway takes `gateway_args` and `gateway_env` (for example its
/// store and media store elsewhere) and whose node takes `extra`.
async fn dedicated_on(
    capacity: &str,
    extra: &[&str],
    gateway_args: &[&str],
    gateway_env: &[(&str, &str)],
) -> Dedicated {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (mock, mock_url) = mock_model(&logs);
    let gateway =
        Gateway::start_with_env(&dirs.base.join("gateway"), &logs, gateway_args, gateway_env);
    let code = gateway.setup_code(600);
    let harness = dirs.base.join("harness");
    let model = format!("openai-chat:{mock_url}/v1:mock-model");
    let node = start_node_with(
        &gateway,
        &harness,
        Some(&code),
        &logs,
        &[
            &[
                "--model",
                &model,
                "--model-key-env",
                "MOCK_MODEL_KEY",
                "--capacity",
                capacity,
            ],
            extra,
        ]
        .concat(),
        &[("MOCK_MODEL_KEY", MODEL_KEY)],
    );
    gateway.wait_ready().await;
    Dedicated {
        _dirs: dirs,
        gateway,
        node,
        mock,
        mock_url,
        harness,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dedicated_turns_run_on_the_harness_with_the_key_only_there() {
    let setup = dedicated("8").await;
    let gateway = &setup.gateway;
    let said = turn(gateway, "s1", "/say hello").await;
    assert_eq!(
        (said["status"].as_str(), said["reply"].as_str()),
        (Some("completed"), Some("hello")),
        "{said}"
    );
    let wrote = turn(
        gateway,
        "s1",
        r#"/tool write {"path":"a.txt","content":"x"}"#,
    )
    .await;
    assert_eq!(wrote["status"], "completed", "{wrote}");
    assert!(
        wrote["reply"]
            .as_str()
            .unwrap()
            .starts_with("tool write ->"),
        "{wrote}"
    );
    let read = turn(gateway, "s1", r#"/tool read {"path":"a.txt"}"#).await;
    assert!(read["reply"].as_str().unwrap().contains('x'), "{read}");
    let transcript = gateway.get_json("/v1/sessions/s1/transcript").await;
    let roles: Vec<&str> = transcript["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles.iter().filter(|role| **role == "user").count(), 3);
    assert!(
        roles.contains(&"tool") && roles.iter().filter(|role| **role == "assistant").count() >= 3,
        "{roles:?}"
    );

    // The file is in the session's execution workspace, not in the Agent workspace.
    assert!(!setup.harness.join("workspace/a.txt").exists());
    let in_sessions = files_under(&setup.harness.join("sessions"))
        .into_iter()
        .filter(|file| file.ends_with("a.txt"))
        .count();
    assert_eq!(in_sessions, 1);

    // The mock saw the key the Harness holds.
    let requests: serde_json::Value = reqwest::get(format!("{}/_mock/requests", setup.mock_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let auth = requests.as_array().unwrap().last().unwrap()["headers"]["authorization"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(auth, format!("Bearer {MODEL_KEY}"));
    // The Gateway's environment and state never hold it.
    let environ = std::fs::read(format!("/proc/{}/environ", gateway.process.pid())).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains(MODEL_KEY));
    for file in files_under(&gateway.state_dir) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(MODEL_KEY),
            "{}",
            file.display()
        );
    }
    // Workers: argv holds no secret, and the environment is scrubbed (no Gateway token and no
    // model key: HOME, PATH, LANG and TMPDIR only), with a private TMPDIR.
    // Only this test's workers (their TMPDIR is under its Harness root): other tests' workers
    // come and go, and their directories with them.
    let workers: Vec<WorkerProcess> = workers()
        .into_iter()
        .filter(|(_, _, env)| {
            env.iter().any(|(name, value)| {
                name == "TMPDIR" && std::path::Path::new(value).starts_with(&setup.harness)
            })
        })
        .collect();
    assert!(!workers.is_empty());
    for (_, argv, env) in &workers {
        assert_eq!(argv.len(), 2);
        let mut names: Vec<&str> = env.iter().map(|(name, _)| name.as_str()).collect();
        names.sort_unstable();
        assert_eq!(names, vec!["HOME", "LANG", "PATH", "TMPDIR"]);
        let tmpdir = &env.iter().find(|(name, _)| name == "TMPDIR").unwrap().1;
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(tmpdir).unwrap().permissions().mode() & 0o777,
            0o700
        );
    }
    drop(setup.mock);
    drop(setup.node);
}

/// With `--worker-retirement never` (the original system's behaviour) idle workers keep their
/// slots, so a third session on two slots is refused until an operator stops one.
#[tokio::test(flavor = "multi_thread")]
async fn with_retirement_never_capacity_refuses_a_new_session_until_one_stops() {
    let setup = dedicated_with("2", &["--worker-retirement", "never"]).await;
    let gateway = &setup.gateway;
    assert_eq!(turn(gateway, "a", "/say one").await["status"], "completed");
    assert_eq!(turn(gateway, "b", "/say two").await["status"], "completed");
    let refused = turn(gateway, "c", "/say three").await;
    assert_failed_with(&refused, "WORKER_CAPACITY_EXHAUSTED");
    // Existing sessions keep their workers.
    assert_eq!(turn(gateway, "a", "/say again").await["reply"], "again");
    let stopped = reqwest::Client::new()
        .post(format!("{}/v1/sessions/a/stop", gateway.url))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap();
    assert_eq!(
        stopped.json::<serde_json::Value>().await.unwrap()["stopped"],
        true
    );
    assert_eq!(turn(gateway, "c", "/say now").await["reply"], "now");
}

#[tokio::test(flavor = "multi_thread")]
async fn model_errors_dead_workers_and_dead_nodes_fail_the_turn_and_the_next_one_works() {
    let mut setup = dedicated("8").await;
    let failed = turn(&setup.gateway, "s", "/fail 500").await;
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("MODEL_UNAVAILABLE")),
        "{failed}"
    );
    assert_eq!(
        turn(&setup.gateway, "s", "/say fine").await["reply"],
        "fine"
    );

    // Kill the worker in the middle of a hanging turn.
    let hanging = post_message(&setup.gateway, "s", "/hang").await;
    let deadline = Instant::now() + WAIT;
    let pid = loop {
        let status = setup
            .gateway
            .get_json(&format!("/v1/turns/{hanging}"))
            .await;
        let worker = workers().into_iter().find(|(_, _, env)| {
            env.iter().any(|(name, value)| {
                name == "TMPDIR" && std::path::Path::new(value).starts_with(&setup.harness)
            })
        });
        if let (Some("running"), Some((pid, _, _))) = (status["status"].as_str(), worker) {
            break pid;
        }
        assert!(Instant::now() < deadline, "the hanging turn never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let crashed = wait_turn(&setup.gateway, &hanging).await;
    assert_eq!(crashed["error"]["code"], "WORKER_CRASHED", "{crashed}");
    assert_eq!(
        turn(&setup.gateway, "s", "/say back").await["reply"],
        "back"
    );

    // Kill the node in the middle of a hanging turn.
    let hanging = post_message(&setup.gateway, "s", "/hang").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    setup.node.kill();
    let lost = wait_turn(&setup.gateway, &hanging).await;
    assert_eq!(lost["error"]["code"], "DEPENDENCY_UNAVAILABLE", "{lost}");
    // No node: the next turn fails, because the session's own node is gone (it is bound to
    // it), and the Gateway does not run it itself.
    let before = crate::suite::support::mock_requests(&setup.mock_url)
        .await
        .len();
    let offline = turn(&setup.gateway, "s", "/say offline").await;
    assert_eq!(offline["error"]["code"], "DEPENDENCY_UNAVAILABLE");
    let after = crate::suite::support::mock_requests(&setup.mock_url)
        .await
        .len();
    assert_eq!(before, after, "a model call happened without a node");
    // The node comes back and the session works again.
    let _node = start_node_with(
        &setup.gateway,
        &setup.harness,
        None,
        &setup.harness.with_file_name("logs"),
        &[
            "--model",
            &format!("openai-chat:{}/v1:mock-model", setup.mock_url),
            "--model-key-env",
            "MOCK_MODEL_KEY",
        ],
        &[("MOCK_MODEL_KEY", MODEL_KEY)],
    );
    setup.gateway.wait_ready().await;
    assert_eq!(
        turn(&setup.gateway, "s", "/say again").await["reply"],
        "again"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn file_tools_cannot_escape_the_session_workspace() {
    let setup = dedicated("8").await;
    let gateway = &setup.gateway;
    let identity = std::fs::read_to_string(setup.harness.join("node/identity.json")).unwrap();
    let secret: serde_json::Value = serde_json::from_str(&identity).unwrap();
    let secret_key = secret["secretKey"].as_str().unwrap().to_owned();
    std::fs::write(
        setup.harness.join("outside-marker.txt"),
        "OUTSIDE-MARKER-91c2",
    )
    .unwrap();
    for text in [
        r#"/tool read {"path":"../../../node/identity.json"}"#,
        r#"/tool read {"path":"/etc/passwd"}"#,
        r#"/tool write {"path":"../../../escape.txt","content":"x"}"#,
        r#"/tool edit {"path":"../../../outside-marker.txt","old_string":"OUTSIDE","new_string":"INSIDE"}"#,
        r#"/tool ls {"path":"../../.."}"#,
        r#"/tool grep {"pattern":"OUTSIDE-MARKER","path":"../../.."}"#,
        r#"/tool apply_patch {"input":"*** Begin Patch\n*** Add File: ../../../patched.txt\n+x\n*** End Patch\n"}"#,
    ] {
        let result = turn(gateway, "esc", text).await;
        let reply = result["reply"].as_str().unwrap_or_default();
        assert!(
            !reply.contains(&secret_key)
                && !reply.contains("OUTSIDE-MARKER-91c2")
                && !reply.contains("root:x:0"),
            "{text}: {reply}"
        );
    }
    // A link planted in the session workspace is not followed either.
    let session_workspace = files_under(&setup.harness.join("sessions"))
        .into_iter()
        .next()
        .map(|file| file.parent().unwrap().to_path_buf());
    if let Some(workspace) = session_workspace {
        std::os::unix::fs::symlink(setup.harness.join("node"), workspace.join("node-link"))
            .unwrap();
        let result = turn(
            gateway,
            "esc",
            r#"/tool read {"path":"node-link/identity.json"}"#,
        )
        .await;
        assert!(
            !result["reply"]
                .as_str()
                .unwrap_or_default()
                .contains(&secret_key)
        );
    }
    assert!(!setup.harness.join("escape.txt").exists());
    assert!(!setup.harness.join("patched.txt").exists());
    assert_eq!(
        std::fs::read_to_string(setup.harness.join("outside-marker.txt")).unwrap(),
        "OUTSIDE-MARKER-91c2"
    );
    // exec under bubblewrap cannot write outside the workspace and has no network.
    let exec = turn(
        gateway,
        "esc",
        &format!(
            r#"/tool exec {{"command":"echo x > {}/exec-escape.txt; echo exit=$?"}}"#,
            setup.harness.display()
        ),
    )
    .await;
    assert!(!setup.harness.join("exec-escape.txt").exists(), "{exec}");
    // exec cannot read the node's identity: the Harness root is hidden in its sandbox.
    let identity_path = setup.harness.join("node/identity.json");
    let cat = turn(
        gateway,
        "esc",
        &format!(
            r#"/tool exec {{"command":"cat {}; ls {}"}}"#,
            identity_path.display(),
            setup.harness.display()
        ),
    )
    .await;
    let reply = cat["reply"].as_str().unwrap_or_default();
    assert!(!reply.contains(&secret_key), "{reply}");
    assert!(reply.contains("No such file"), "{reply}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lost_session_workspace_is_rebuilt_from_its_checkpoint() {
    let setup = dedicated("8").await;
    lost_workspace_is_rebuilt_from_its_checkpoint(&setup).await;
    // The checkpoint lives in the Gateway's store and media, not on the Harness.
    match crate::suite::backend::external(&setup.gateway.state_dir) {
        None => {
            let in_gateway_state = files_under(&setup.gateway.state_dir).iter().any(|file| {
                String::from_utf8_lossy(&std::fs::read(file).unwrap()).contains("dir/keep.txt")
            });
            assert!(
                in_gateway_state,
                "the checkpoint manifest is not in the Gateway state"
            );
        }
        Some(external) => {
            let blobs = external.keys().await;
            assert!(
                blobs.iter().any(|key| key.starts_with("gateway/blobs/")),
                "no checkpoint blob in the bucket: {blobs:?}"
            );
        }
    }
}

/// The same dedicated checkpoint round trip with the Gateway's state in PostgreSQL and its
/// blobs on S3: the checkpoint is in the bucket and the database, nothing of it in the
/// Gateway's state directory, and the lost workspace comes back from there.
#[tokio::test(flavor = "multi_thread")]
async fn a_lost_session_workspace_is_rebuilt_from_a_checkpoint_on_postgres_and_s3() {
    let external = crate::suite::s3::ExternalState::new().await;
    let setup = dedicated_on("8", &[], &external.args(), &external.envs()).await;
    lost_workspace_is_rebuilt_from_its_checkpoint(&setup).await;
    let blobs = external.keys().await;
    assert!(
        blobs.iter().any(|key| key.starts_with("gateway/blobs/")),
        "no checkpoint blob in the bucket: {blobs:?}"
    );
    let in_gateway_state = files_under(&setup.gateway.state_dir).iter().any(|file| {
        String::from_utf8_lossy(&std::fs::read(file).unwrap()).contains("dir/keep.txt")
    });
    assert!(
        !in_gateway_state,
        "the checkpoint was written to the Gateway's state directory"
    );
}

/// Writes files, an executable, a link and a `.git/` directory in a session, deletes the
/// session workspace on the Harness, and checks that the next turn finds everything but `.git/`.
async fn lost_workspace_is_rebuilt_from_its_checkpoint(setup: &Dedicated) {
    let gateway = &setup.gateway;
    let wrote = turn(
        gateway,
        "ck",
        r#"/tool write {"path":"dir/keep.txt","content":"kept across a lost disk"}"#,
    )
    .await;
    assert_eq!(wrote["status"], "completed", "{wrote}");
    let exec = turn(gateway, "ck", r#"/tool exec {"command":"printf '#!/bin/sh\necho ran' > run.sh && chmod +x run.sh && ln -s dir/keep.txt link && mkdir -p .git && echo x > .git/HEAD"}"#).await;
    assert_eq!(exec["status"], "completed", "{exec}");
    let workspace = files_under(&setup.harness.join("sessions"))
        .into_iter()
        .find(|file| file.ends_with("dir/keep.txt"))
        .map(|file| file.parent().unwrap().parent().unwrap().to_path_buf())
        .expect("the session workspace holds the file");
    // The disk of the session is lost between turns.
    std::fs::remove_dir_all(&workspace).unwrap();
    let read = turn(gateway, "ck", r#"/tool read {"path":"dir/keep.txt"}"#).await;
    assert!(
        read["reply"]
            .as_str()
            .unwrap()
            .contains("kept across a lost disk"),
        "{read}"
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(workspace.join("run.sh"))
            .unwrap()
            .permissions()
            .mode()
            & 0o111,
        0o111
    );
    assert_eq!(
        std::fs::read_link(workspace.join("link")).unwrap(),
        std::path::PathBuf::from("dir/keep.txt")
    );
    // `.git/` is not part of a checkpoint.
    assert!(!workspace.join(".git").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_tool_called_by_the_model_runs_on_the_gateway() {
    let setup = dedicated("8").await;
    let gateway = &setup.gateway;
    turn(gateway, "gt", "/say first").await;
    let called = turn(gateway, "gt", "/tool session_status {}").await;
    assert_eq!(called["status"], "completed", "{called}");
    let reply = called["reply"].as_str().unwrap();
    assert!(reply.starts_with("tool session_status -> "), "{reply}");
    let status: serde_json::Value =
        serde_json::from_str(reply.trim_start_matches("tool session_status -> ")).unwrap();
    assert_eq!(status["sessionKey"], "gt");
    assert_eq!(status["activeTurnId"], called["turnId"]);
    // The model saw the tool offered, and its result came back in the next request.
    let requests: serde_json::Value = reqwest::get(format!("{}/_mock/requests", setup.mock_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let last = requests.as_array().unwrap().last().unwrap().to_string();
    assert!(
        last.contains("session_status") && last.contains("\\\"sessionKey\\\""),
        "{last}"
    );
    let audit = gateway.get_json("/v1/audit").await;
    let calls: Vec<&serde_json::Value> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["action"] == "gateway.tool.call")
        .collect();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0]["outcome"], "succeeded");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_operator_denies_tools_and_bounds_exec_time() {
    let setup = dedicated_with(
        "8",
        &[
            "--deny-tools",
            "process,write",
            "--exec-timeout-seconds",
            "1",
        ],
    )
    .await;
    let gateway = &setup.gateway;
    let denied = turn(
        gateway,
        "pol",
        r#"/tool write {"path":"w.txt","content":"x"}"#,
    )
    .await;
    assert!(
        denied["reply"]
            .as_str()
            .unwrap()
            .contains("TOOL_NOT_ALLOWED"),
        "{denied}"
    );
    let slow = turn(
        gateway,
        "pol",
        r#"/tool exec {"command":"sleep 30; echo finished"}"#,
    )
    .await;
    let reply = slow["reply"].as_str().unwrap();
    assert!(!reply.contains("finished"), "{reply}");
    assert_eq!(slow["status"], "completed", "{slow}");
    // The model was not offered the denied tools.
    let requests: serde_json::Value = reqwest::get(format!("{}/_mock/requests", setup.mock_url))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tools = requests.as_array().unwrap().last().unwrap()["body"]["tools"].to_string();
    assert!(
        tools.contains("\"read\"")
            && !tools.contains("\"process\"")
            && !tools.contains("\"write\""),
        "{tools}"
    );
}
