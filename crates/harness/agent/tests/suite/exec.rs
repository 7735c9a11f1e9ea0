//! `exec` under bubblewrap: workspace writes, a read-only and private rest of the system, no
//! network, timeouts that kill the whole process group, output caps, and the sandbox policy.

use gatehouse_agent::SandboxPolicy;
use gatehouse_agent::ToolConfig;
use gatehouse_agent::ToolSet;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::Session;
use crate::suite::support::call;
use crate::suite::support::exists;
use crate::suite::support::processes_with_argv;
use crate::suite::support::run;
use crate::suite::support::tool_line;
use crate::suite::support::wait_until;

#[tokio::test]
async fn a_command_writes_in_the_workspace() {
    let session = Session::new();
    let ctx = session.sandboxed();
    let line = tool_line(
        "exec",
        &json!({"command": "echo hi > f.txt && pwd && echo \"$HOME $TMPDIR\""}),
    );
    let turn = run(&ToolSet::native(), &ctx, Vec::new(), &line).await;
    let workspace = session.workspace.to_str().unwrap();
    assert_eq!(
        turn.reply(),
        format!("tool exec -> exit code: 0\n{workspace}\n{workspace} /tmp\n")
    );
    assert_eq!(session.read("f.txt"), "hi\n");
}

#[tokio::test]
async fn the_exit_code_and_stderr_are_reported() {
    let session = Session::new();
    let ctx = session.sandboxed();
    let outcome = call(
        &ctx,
        "exec",
        &json!({"command": "echo out; echo err >&2; exit 3"}),
    )
    .await;
    assert!(!outcome.ok);
    assert_eq!(outcome.output, "exit code: 3\nout\nerr\n");
}

#[tokio::test]
async fn outside_the_workspace_is_read_only_and_tmp_is_private() {
    let session = Session::new();
    let ctx = session.sandboxed();
    let host_tmp_file = tempfile::Builder::new()
        .prefix("gatehouse-agent-host-")
        .tempfile_in("/tmp")
        .unwrap();
    std::fs::write(host_tmp_file.path(), "HOST-TMP-MARKER").unwrap();
    let inner_name = format!("/tmp/gatehouse-agent-inner-{}", std::process::id());
    let outside_target = session.outside.join("pwned.txt");
    let command = format!(
        "echo pwned > {outside}; echo \"outside rc=$?\"; \
         echo pwned > /usr/gatehouse-agent-probe; echo \"usr rc=$?\"; \
         cat {host_tmp} 2>/dev/null; echo \"cat rc=$?\"; \
         echo inner > {inner_name}; echo \"inner rc=$?\"",
        outside = outside_target.display(),
        host_tmp = host_tmp_file.path().display(),
    );
    let outcome = call(&ctx, "exec", &json!({"command": command})).await;
    let output = &outcome.output;
    assert!(!output.contains("outside rc=0"), "{output}");
    assert!(!output.contains("usr rc=0"), "{output}");
    assert!(!output.contains("HOST-TMP-MARKER"), "{output}");
    assert!(output.contains("inner rc=0"), "{output}");
    assert!(!exists(&outside_target));
    assert!(!exists(std::path::Path::new("/usr/gatehouse-agent-probe")));
    assert!(
        !exists(std::path::Path::new(&inner_name)),
        "the sandbox /tmp is not private"
    );
    session.assert_outside_untouched();
}

#[tokio::test]
async fn there_is_no_network() {
    let session = Session::new();
    let ctx = session.sandboxed();
    let outcome = call(
        &ctx,
        "exec",
        &json!({"command": "tail -n +3 /proc/net/dev"}),
    )
    .await;
    assert!(outcome.ok, "{outcome:?}");
    let interfaces: Vec<&str> = outcome
        .output
        .lines()
        .skip(1)
        .filter_map(|line| line.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(interfaces, vec!["lo"], "{}", outcome.output);
}

#[tokio::test]
async fn a_timeout_kills_the_whole_process_group() {
    let session = Session::new();
    let ctx = session.sandboxed();
    let outcome = call(
        &ctx,
        "exec",
        &json!({"command": "echo started; sleep 4242 & sleep 4242", "timeout_ms": 300}),
    )
    .await;
    assert!(!outcome.ok);
    assert_eq!(
        outcome.output,
        "timed out after 300 ms; the process group was killed\nstarted\n"
    );
    wait_until("no sleep of the group is left", || {
        processes_with_argv(&["sleep", "4242"]).is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_timeout_kills_the_group_unsandboxed_too() {
    let session = Session::new();
    let ctx = session.without_bwrap(SandboxPolicy::AllowUnsandboxed);
    let outcome = call(
        &ctx,
        "exec",
        &json!({"command": "sleep 4243 & sleep 4243", "timeout_ms": 300}),
    )
    .await;
    assert!(!outcome.ok);
    assert!(
        outcome.output.starts_with("timed out after 300 ms"),
        "{outcome:?}"
    );
    wait_until("no sleep of the group is left", || {
        processes_with_argv(&["sleep", "4243"]).is_empty()
    })
    .await;
}

#[tokio::test]
async fn background_children_do_not_outlive_the_call() {
    let session = Session::new();
    let ctx = session.sandboxed();
    let outcome = call(&ctx, "exec", &json!({"command": "sleep 4247 & echo done"})).await;
    assert_eq!(outcome.output, "exit code: 0\ndone\n");
    wait_until("the background sleep is gone", || {
        processes_with_argv(&["sleep", "4247"]).is_empty()
    })
    .await;
}

#[tokio::test]
async fn the_output_is_capped_keeping_head_and_tail() {
    let session = Session::new();
    let config = ToolConfig {
        output_cap_bytes: 1024,
        ..ToolConfig::new(SandboxPolicy::Require)
    };
    crate::suite::support::require_bwrap();
    let ctx = session.context(config);
    let outcome = call(&ctx, "exec", &json!({"command": "seq 1 100000"})).await;
    assert!(outcome.ok);
    let output = &outcome.output;
    assert!(output.starts_with("exit code: 0\n1\n2\n3\n"), "{output}");
    assert!(output.ends_with("99999\n100000\n"), "{output}");
    assert!(output.contains("\n[…truncated: "), "{output}");
    assert!(output.len() < 1024 + 100, "{} bytes", output.len());
}

#[tokio::test]
async fn the_call_timeout_may_only_lower_the_configured_one() {
    let session = Session::new();
    let config = ToolConfig {
        exec_timeout: std::time::Duration::from_millis(200),
        ..ToolConfig::new(SandboxPolicy::Require)
    };
    crate::suite::support::require_bwrap();
    let ctx = session.context(config);
    let outcome = call(
        &ctx,
        "exec",
        &json!({"command": "sleep 4248", "timeout_ms": 600_000}),
    )
    .await;
    assert!(
        outcome.output.starts_with("timed out after 200 ms"),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn require_without_bubblewrap_refuses_to_run() {
    let session = Session::new();
    let ctx = session.without_bwrap(SandboxPolicy::Require);
    let outcome = call(&ctx, "exec", &json!({"command": "echo hi > f.txt"})).await;
    assert!(!outcome.ok);
    assert!(
        outcome.output.starts_with("SANDBOX_UNAVAILABLE: "),
        "{outcome:?}"
    );
    assert!(!exists(&session.path("f.txt")));
}

#[tokio::test]
async fn allow_unsandboxed_runs_and_says_so() {
    let session = Session::new();
    let ctx = session.without_bwrap(SandboxPolicy::AllowUnsandboxed);
    let outcome = call(
        &ctx,
        "exec",
        &json!({"command": "echo hi > f.txt; echo \"$HOME\""}),
    )
    .await;
    assert!(outcome.ok);
    assert_eq!(
        outcome.output,
        format!(
            "exit code: 0\nnote: ran unsandboxed (bubblewrap not found; the sandbox policy allows it)\n{}\n",
            session.workspace.display()
        )
    );
    assert_eq!(session.read("f.txt"), "hi\n");
}

#[tokio::test]
async fn the_environment_is_minimal() {
    let session = Session::new();
    let ctx = session.sandboxed();
    let outcome = call(&ctx, "exec", &json!({"command": "env | sort"})).await;
    let workspace = session.workspace.display();
    assert_eq!(
        outcome.output,
        format!(
            "exit code: 0\nHOME={workspace}\nLANG=C.UTF-8\nPATH={}\nPWD={workspace}\nTMPDIR=/tmp\n",
            gatehouse_agent::context::DEFAULT_COMMAND_PATH
        )
    );
}
