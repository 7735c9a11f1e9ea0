//! Idle native workers give their slot back (issue 16): a new session past capacity takes the
//! slot of the least recently used idle worker, an idle worker stops after
//! `--worker-idle-seconds`, and a running worker is never displaced. Real node hosts, real
//! worker processes, the deterministic mock model.

use std::path::Path;

use pretty_assertions::assert_eq;
use sha2::Digest;

use crate::suite::native::assert_failed_with;
use crate::suite::native::dedicated_with;
use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::post_message;
use crate::suite::support::processes;
use crate::suite::support::turn;
use crate::suite::support::wait_turn;
use crate::suite::up::Up;

/// Returns the pid of the worker process of `session` under the node root `harness`: the one
/// whose `TMPDIR` is that session's private directory there.
fn worker_of(harness: &Path, session: &str) -> Option<u32> {
    let id = hex::encode(&sha2::Sha256::digest(session.as_bytes())[..16]);
    let tmpdir = harness.join("tmp").join(format!("worker-{id}"));
    let tmpdir = tmpdir.to_string_lossy();
    processes()
        .into_iter()
        .find(|(_, argv, env)| {
            argv.get(1).is_some_and(|arg| arg == "worker")
                && env
                    .iter()
                    .any(|(name, value)| name == "TMPDIR" && *value == *tmpdir)
        })
        .map(|(pid, _, _)| pid)
}

/// Waits until `session` has a worker under `harness` (`running`) or has none.
async fn wait_worker(harness: &Path, session: &str, running: bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while worker_of(harness, session).is_some() != running {
        assert!(
            std::time::Instant::now() < deadline,
            "the worker of {session} never {}",
            if running { "started" } else { "stopped" }
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// Asserts that `turn` completed with `reply`.
fn assert_reply(turn: &serde_json::Value, reply: &str) {
    assert_eq!(
        (turn["status"].as_str(), turn["reply"].as_str()),
        (Some("completed"), Some(reply)),
        "{turn}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_16_a_new_session_takes_the_slot_of_the_least_recently_used_idle_worker() {
    let setup = dedicated_with("2", &[]).await;
    let (gateway, harness) = (&setup.gateway, setup.harness.as_path());
    let wrote = turn(
        gateway,
        "b",
        r#"/tool write {"path":"kept.txt","content":"b's file"}"#,
    )
    .await;
    assert_eq!(wrote["status"], "completed", "{wrote}");
    assert_reply(&turn(gateway, "a", "/say one").await, "one");
    // `a` is used again, so `b` is now the least recently used.
    assert_reply(&turn(gateway, "a", "/say again").await, "again");
    let a_worker = worker_of(harness, "a").expect("a has a worker");
    assert!(worker_of(harness, "b").is_some(), "b has a worker");

    // Both slots are taken by idle workers: a third session gets b's.
    assert_reply(&turn(gateway, "c", "/say three").await, "three");
    wait_worker(harness, "b", false).await;
    assert_eq!(
        worker_of(harness, "a"),
        Some(a_worker),
        "the more recently used worker kept its slot"
    );
    assert!(worker_of(harness, "c").is_some());

    // b's session workspace stayed on disk: its next turn (on a new worker, which takes the
    // slot of a, now the least recently used) reads its file.
    let read = turn(gateway, "b", r#"/tool read {"path":"kept.txt"}"#).await;
    assert!(
        read["reply"]
            .as_str()
            .unwrap_or_default()
            .contains("b's file"),
        "{read}"
    );
    wait_worker(harness, "a", false).await;
    assert!(worker_of(harness, "c").is_some());
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_16_with_every_slot_running_a_turn_a_new_session_is_refused_and_nothing_is_disturbed()
{
    let setup = dedicated_with("2", &[]).await;
    let (gateway, harness) = (&setup.gateway, setup.harness.as_path());
    let hanging = [
        post_message(gateway, "a", "/hang").await,
        post_message(gateway, "b", "/hang").await,
    ];
    for (turn_id, session) in hanging.iter().zip(["a", "b"]) {
        wait_running(gateway, turn_id).await;
        // The turn runs once the Gateway dispatched it; its worker starts a moment later.
        wait_worker(harness, session, true).await;
    }
    let workers = [worker_of(harness, "a"), worker_of(harness, "b")];
    let refused = turn(gateway, "c", "/say three").await;
    assert_failed_with(&refused, "WORKER_CAPACITY_EXHAUSTED");
    // The running turns go on, on the same workers.
    for turn_id in &hanging {
        let status = gateway.get_json(&format!("/v1/turns/{turn_id}")).await;
        assert_eq!(status["status"], "running", "{status}");
    }
    assert_eq!([worker_of(harness, "a"), worker_of(harness, "b")], workers);
    // Once one ends, its slot is idle and the new session gets it.
    let aborted = reqwest::Client::new()
        .post(format!("{}/v1/sessions/a/abort", gateway.url))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap();
    assert_eq!(aborted.status().as_u16(), 200);
    assert_eq!(wait_turn(gateway, &hanging[0]).await["status"], "aborted");
    assert_reply(&turn(gateway, "c", "/say now").await, "now");
    let status = gateway.get_json(&format!("/v1/turns/{}", hanging[1])).await;
    assert_eq!(status["status"], "running", "{status}");
    assert_eq!(worker_of(harness, "b"), workers[1]);
}

/// Waits until the turn `turn_id` runs.
async fn wait_running(gateway: &Gateway, turn_id: &str) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let status = gateway.get_json(&format!("/v1/turns/{turn_id}")).await;
        if status["status"] == "running" {
            return;
        }
        assert_eq!(status["status"], "queued", "{status}");
        assert!(std::time::Instant::now() < deadline, "{turn_id} never ran");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_16_an_idle_worker_stops_after_worker_idle_seconds_and_its_session_goes_on() {
    let setup = dedicated_with("8", &["--worker-idle-seconds", "1"]).await;
    let (gateway, harness) = (&setup.gateway, setup.harness.as_path());
    let wrote = turn(
        gateway,
        "s",
        r#"/tool write {"path":"kept.txt","content":"still here"}"#,
    )
    .await;
    assert_eq!(wrote["status"], "completed", "{wrote}");
    wait_worker(harness, "s", false).await;
    let read = turn(gateway, "s", r#"/tool read {"path":"kept.txt"}"#).await;
    assert!(
        read["reply"]
            .as_str()
            .unwrap_or_default()
            .contains("still here"),
        "{read}"
    );
}

/// Starts `gatehouse up` with its defaults (8 worker slots, idle workers retired) on a new
/// data directory, and waits until it is ready.
async fn default_up() -> (tempfile::TempDir, std::path::PathBuf, Up) {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let up = Up::start(&data);
    up.wait_ready().await;
    (temp, data, up)
}

/// Posts `text` to `session` on `up` and returns the turn id.
async fn post_to(up: &Up, session: &str, text: &str) -> String {
    let (status, body) = up.post(session, serde_json::json!({"text": text})).await;
    assert_eq!(status, 202, "{body}");
    body["turnId"].as_str().unwrap().to_owned()
}

/// Sends `text` to `session` on `up` and returns the turn once it has ended.
async fn up_turn(up: &Up, session: &str, text: &str) -> serde_json::Value {
    let turn_id = post_to(up, session, text).await;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let turn = up.turn_status(&turn_id, 5).await;
        if !matches!(turn["status"].as_str(), Some("queued" | "running")) {
            return turn;
        }
        assert!(std::time::Instant::now() < deadline, "{turn}");
    }
}

/// The first-time user's case: on a default `gatehouse up`, 100 conversations one after
/// another all complete, each past the eighth taking an idle worker's slot.
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_on_a_default_up_a_hundred_sessions_one_after_another_all_complete() {
    let (_temp, _data, up) = default_up().await;
    for n in 0..100 {
        let reply = format!("n{n}");
        assert_reply(
            &up_turn(&up, &format!("s{n}"), &format!("/say {reply}")).await,
            &reply,
        );
    }
}

/// On a default `gatehouse up`, 8 sessions holding `/hang` turns take every slot: a ninth
/// session is refused with `WORKER_CAPACITY_EXHAUSTED`, and no running turn or its worker is
/// disturbed.
#[tokio::test(flavor = "multi_thread")]
async fn issue_16_on_a_default_up_eight_hanging_sessions_refuse_a_ninth_and_keep_running() {
    let (_temp, data, up) = default_up().await;
    let harness = data.join("harness");
    let sessions: Vec<String> = (0..8).map(|n| format!("hang-{n}")).collect();
    let mut hanging = Vec::new();
    for session in &sessions {
        hanging.push(post_to(&up, session, "/hang").await);
    }
    for (turn_id, session) in hanging.iter().zip(&sessions) {
        let deadline = std::time::Instant::now() + WAIT;
        while up.turn_status(turn_id, 0).await["status"] != "running" {
            assert!(std::time::Instant::now() < deadline, "{turn_id} never ran");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        wait_worker(&harness, session, true).await;
    }
    let workers: Vec<Option<u32>> = sessions
        .iter()
        .map(|session| worker_of(&harness, session))
        .collect();
    let refused = up_turn(&up, "ninth", "/say nine").await;
    assert_failed_with(&refused, "WORKER_CAPACITY_EXHAUSTED");
    for turn_id in &hanging {
        let status = up.turn_status(turn_id, 0).await;
        assert_eq!(status["status"], "running", "{status}");
    }
    assert_eq!(
        sessions
            .iter()
            .map(|session| worker_of(&harness, session))
            .collect::<Vec<_>>(),
        workers
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_16_worker_retirement_flags_are_checked() {
    for (args, message) in [
        (
            &["--worker-retirement", "never", "--worker-idle-seconds", "5"][..],
            "--worker-idle-seconds applies only with --worker-retirement idle",
        ),
        (
            &["--worker-idle-seconds", "0"][..],
            "--worker-idle-seconds must be between 1 and 604800",
        ),
    ] {
        let output = crate::suite::support::gatehouse()
            .args(["node", "--root", "unused", "--runtime", "native"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
    // The node's config file takes the same settings, and the same check.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("node.toml");
    std::fs::write(
        &config,
        "root = \"unused\"\nruntime = \"native\"\nworker-retirement = \"never\"\nworker-idle-seconds = 5\n",
    )
    .unwrap();
    let output = crate::suite::support::gatehouse()
        .args(["node", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--worker-idle-seconds applies only with --worker-retirement idle"),
        "{stderr}"
    );
}
