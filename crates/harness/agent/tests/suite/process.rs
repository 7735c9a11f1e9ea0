//! `process`: background commands, polled and killed by process group.

use std::time::Duration;
use std::time::Instant;

use gatehouse_agent::SandboxPolicy;
use gatehouse_agent::ToolOutcome;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::Session;
use crate::suite::support::WAIT_LIMIT;
use crate::suite::support::call;
use crate::suite::support::processes_with_argv;
use crate::suite::support::wait_until;

#[tokio::test]
async fn start_poll_and_kill() {
    let session = Session::new();
    let ctx = session.sandboxed();
    let started = call(
        &ctx,
        "process",
        &json!({"action": "start", "command": "echo started; sleep 4244"}),
    )
    .await;
    assert_eq!(
        started,
        ToolOutcome {
            ok: true,
            output: String::from("started process p1")
        }
    );
    wait_until("the sleep runs", || {
        processes_with_argv(&["sleep", "4244"]).len() == 1
    })
    .await;
    // The echo's output reaches the process table through a reader task, which may lag behind
    // the sleep starting: poll until it arrives, checking every answer on the way.
    let mut seen = String::new();
    let start = Instant::now();
    while seen != "started\n" {
        assert!(start.elapsed() < WAIT_LIMIT, "no output after {seen:?}");
        let poll = call(&ctx, "process", &json!({"action": "poll", "id": "p1"})).await;
        let new_output = poll
            .output
            .strip_prefix("process p1: running\n")
            .unwrap_or_else(|| panic!("unexpected poll answer {:?}", poll.output));
        if new_output != "(no new output)" {
            seen.push_str(new_output);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let again = call(&ctx, "process", &json!({"action": "poll", "id": "p1"})).await;
    assert_eq!(again.output, "process p1: running\n(no new output)");
    let list = call(&ctx, "process", &json!({"action": "list"})).await;
    assert_eq!(list.output, "p1 running: echo started; sleep 4244");
    let killed = call(&ctx, "process", &json!({"action": "kill", "id": "p1"})).await;
    assert_eq!(killed.output, "killed process p1");
    wait_until("the sleep is gone", || {
        processes_with_argv(&["sleep", "4244"]).is_empty()
    })
    .await;
    let gone = call(&ctx, "process", &json!({"action": "poll", "id": "p1"})).await;
    assert_eq!(gone.output, "PROCESS_NOT_FOUND: no process p1");
    let empty = call(&ctx, "process", &json!({"action": "list"})).await;
    assert_eq!(empty.output, "no background processes");
}

#[tokio::test]
async fn a_finished_process_reports_its_exit() {
    let session = Session::new();
    let ctx = session.sandboxed();
    call(
        &ctx,
        "process",
        &json!({"action": "start", "command": "echo done; exit 4"}),
    )
    .await;
    let start = Instant::now();
    let mut collected = String::new();
    let mut last_status = String::new();
    // The exit may be seen before the reader has drained the pipe: poll until both are in.
    while !(last_status.contains("exited") && collected.contains("done")) {
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "no exit: {last_status} {collected}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        let poll = call(&ctx, "process", &json!({"action": "poll", "id": "p1"})).await;
        let (status, output) = poll.output.split_once('\n').unwrap();
        last_status = status.to_owned();
        if output != "(no new output)" {
            collected.push_str(output);
        }
    }
    assert_eq!(last_status, "process p1: exited (exit code: 4)");
    assert_eq!(collected, "done\n");
}

#[tokio::test]
async fn dropping_the_context_kills_every_process() {
    let session = Session::new();
    let ctx = session.without_bwrap(SandboxPolicy::AllowUnsandboxed);
    for _ in 0..2 {
        let started = call(
            &ctx,
            "process",
            &json!({"action": "start", "command": "sleep 4245 & sleep 4245"}),
        )
        .await;
        assert!(started.ok, "{started:?}");
    }
    wait_until("the sleeps run", || {
        processes_with_argv(&["sleep", "4245"]).len() == 4
    })
    .await;
    drop(ctx);
    wait_until("the sleeps are gone", || {
        processes_with_argv(&["sleep", "4245"]).is_empty()
    })
    .await;
}

#[tokio::test]
async fn start_without_bubblewrap_under_require_is_refused() {
    let session = Session::new();
    let ctx = session.without_bwrap(SandboxPolicy::Require);
    let started = call(
        &ctx,
        "process",
        &json!({"action": "start", "command": "sleep 1"}),
    )
    .await;
    assert!(
        started.output.starts_with("SANDBOX_UNAVAILABLE: "),
        "{started:?}"
    );
}
