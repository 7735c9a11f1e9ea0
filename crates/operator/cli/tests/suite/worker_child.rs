//! `gatehouse worker` reads bounded lines: a request line longer than
//! `MAX_WORKER_REQUEST_LINE_BYTES` is answered with a `failed` event of code
//! `WORKER_LINE_TOO_LONG` and skipped without being held in memory, and the next request is
//! served as usual. A real worker process, with the mock model built in.

use std::io::BufRead;
use std::io::Write;
use std::process::Stdio;

use gatehouse_protocol::worker::AgentTurnParams;
use gatehouse_protocol::worker::MAX_WORKER_REQUEST_LINE_BYTES;
use gatehouse_protocol::worker::SandboxSettings;
use gatehouse_protocol::worker::WorkerEvent;
use gatehouse_protocol::worker::WorkerLaunch;
use gatehouse_protocol::worker::WorkerRequest;
use pretty_assertions::assert_eq;

use crate::suite::support::dirs;
use crate::suite::support::gatehouse;

/// How many bounds of junk the over-long line holds: a reader without a bound would hold it all.
const JUNK_BOUNDS: usize = 8;

/// Returns the peak resident size of process `pid`, in bytes.
fn peak_rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .unwrap()
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap();
    kib * 1024
}

#[test]
fn an_over_long_request_line_is_refused_with_a_code_and_the_next_request_is_served() {
    let dirs = dirs();
    let workspace = dirs.base.join("workspace");
    let agent_workspace = dirs.base.join("agent");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::create_dir_all(&agent_workspace).unwrap();
    let launch = WorkerLaunch {
        session_key: String::from("s"),
        workspace: workspace.display().to_string(),
        agent_workspace: agent_workspace.display().to_string(),
        model: String::from("mock"),
        broker: None,
        allow_unsandboxed: true,
        hidden_paths: Vec::new(),
        denied_tools: Vec::new(),
        exec_timeout_seconds: 10,
        scratch: None,
        sandbox: SandboxSettings::default(),
    };
    let turn = WorkerRequest::Turn(Box::new(AgentTurnParams {
        session_key: String::from("s"),
        turn_id: String::from("t1"),
        history: Vec::new(),
        user_texts: vec![String::from("hello")],
        attachments: Vec::new(),
        checkpoint_id: None,
        workspace_required: false,
        gateway_tools: Vec::new(),
        denied_tools: Vec::new(),
        skills_prompt: None,
        skill_copies: Vec::new(),
        traceparent: None,
        max_turn_tokens: None,
    }));
    let mut child = gatehouse()
        .arg("worker")
        .env("HOME", &dirs.base)
        .env("TMPDIR", &dirs.base)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    writeln!(stdin, "{}", serde_json::to_string(&launch).unwrap()).unwrap();
    let turn_line = serde_json::to_string(&turn).unwrap();
    // Written from another thread while this one reads the answers.
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'x'; 1024 * 1024];
        for _ in 0..(JUNK_BOUNDS * MAX_WORKER_REQUEST_LINE_BYTES).div_ceil(chunk.len()) {
            stdin.write_all(&chunk).unwrap();
        }
        writeln!(stdin).unwrap();
        writeln!(stdin, "{turn_line}").unwrap();
        stdin
    });

    let mut events = Vec::new();
    for line in stdout.lines() {
        let event: WorkerEvent = serde_json::from_str(&line.unwrap()).unwrap();
        let ended = matches!(event, WorkerEvent::Done { .. })
            || matches!(&event, WorkerEvent::Failed { code, .. } if code != "WORKER_LINE_TOO_LONG");
        events.push(event);
        if ended {
            break;
        }
    }
    let peak = peak_rss_bytes(pid);
    drop(writer.join().unwrap());
    assert!(child.wait().unwrap().success());

    let Some(WorkerEvent::Failed { code, .. }) = events.first() else {
        panic!("the first event is not a failure: {events:?}");
    };
    assert_eq!(code, "WORKER_LINE_TOO_LONG");
    assert!(
        matches!(events.last(), Some(WorkerEvent::Done { .. })),
        "the next turn was not served: {events:?}"
    );
    // The decoder holds at most one bound of the skipped line in a buffer that grows by
    // doubling, so under two bounds, and the process itself a few MiB more.
    let junk_bytes = (JUNK_BOUNDS * MAX_WORKER_REQUEST_LINE_BYTES) as u64;
    let ceiling = 4 * MAX_WORKER_REQUEST_LINE_BYTES as u64;
    assert!(
        peak < ceiling,
        "the worker peaked at {peak} bytes (ceiling {ceiling}) while skipping {junk_bytes} bytes"
    );
}
