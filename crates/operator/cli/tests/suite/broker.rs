//! The inference broker end to end: a dedicated Gateway, a native node host whose model is the
//! HTTP mock behind `openai-responses:`, and real workers running a sandboxed command. The model
//! key is only in the node host's environment: no process below it (workers, the sandbox, the
//! command) has it in its environment or argv, yet the provider receives it; each turn's usage
//! is the broker's count of the provider's answers.

use std::collections::HashMap;
use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;

use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::mock_model;
use crate::suite::support::mock_requests;
use crate::suite::support::post_message;
use crate::suite::support::start_node_with;
use crate::suite::support::turn;
use crate::suite::support::wait_turn;

const MODEL_KEY: &str = "broker-held-model-key-7c2e91";

/// Returns every process below `root` (not `root` itself), by walking the parent of each
/// process in `/proc/*/stat`.
fn descendants(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; the name may hold spaces and parentheses.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let Some(ppid) = rest
            .split_whitespace()
            .nth(1)
            .and_then(|ppid| ppid.parse().ok())
        else {
            continue;
        };
        children.entry(ppid).or_default().push(pid);
    }
    let mut found = Vec::new();
    let mut pending = vec![root];
    while let Some(pid) = pending.pop() {
        for child in children.get(&pid).into_iter().flatten() {
            found.push(*child);
            pending.push(*child);
        }
    }
    found
}

/// Returns a process's argv and environment as raw text, or `None` once it is gone.
fn cmdline_and_environ(pid: u32) -> Option<(String, String)> {
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some((
        String::from_utf8_lossy(&cmdline).replace('\0', " "),
        String::from_utf8_lossy(&environ).replace('\0', "\n"),
    ))
}

/// The counts the node host's broker logged for `turn_id`, one entry per answered model call:
/// input, cached input, output and total tokens.
fn broker_counts(node_log: &str, turn_id: &str) -> Vec<[u64; 4]> {
    let field = |line: &str, name: &str| -> u64 {
        let at = line
            .find(&format!("{name}="))
            .map(|at| at + name.len() + 1)
            .or_else(|| {
                line.find(&format!("\"{name}\":"))
                    .map(|at| at + name.len() + 3)
            })
            .unwrap_or_else(|| panic!("no {name} in {line}"));
        line[at..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect::<String>()
            .parse()
            .unwrap()
    };
    node_log
        .lines()
        .filter(|line| line.contains("model call counted") && line.contains(turn_id))
        .map(|line| {
            [
                field(line, "input_tokens"),
                field(line, "cached_input_tokens"),
                field(line, "output_tokens"),
                field(line, "total_tokens"),
            ]
        })
        .collect()
}

/// Asserts that the turn's usage is the sum of what the broker counted for it, in `n_calls`
/// model calls.
fn assert_usage_is_the_brokers(node_log: &str, turn: &serde_json::Value, n_calls: usize) {
    let turn_id = turn["turnId"].as_str().unwrap();
    let counts = broker_counts(node_log, turn_id);
    assert_eq!(counts.len(), n_calls, "{turn}\n{node_log}");
    let sum = counts.iter().fold([0; 4], |sum, call| {
        [
            sum[0] + call[0],
            sum[1] + call[1],
            sum[2] + call[2],
            sum[3] + call[3],
        ]
    });
    assert!(sum[3] > 0, "{turn}");
    assert_eq!(
        usage_count(turn, "modelCalls"),
        u64::try_from(n_calls).unwrap(),
        "{turn}"
    );
    assert_eq!(
        [
            usage_count(turn, "inputTokens"),
            usage_count(turn, "cachedInputTokens"),
            usage_count(turn, "outputTokens"),
            usage_count(turn, "totalTokens"),
        ],
        sum,
        "{turn}"
    );
}

fn usage_count(turn: &serde_json::Value, name: &str) -> u64 {
    turn["usage"][name]
        .as_u64()
        .unwrap_or_else(|| panic!("no usage.{name}: {turn}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn broker_keeps_the_key_out_of_every_process_below_the_node_host_and_counts_usage() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let gateway = Gateway::start(&dirs.base.join("gateway"), &logs);
    let code = gateway.setup_code(600);
    let model = format!("openai-responses:{mock_url}/v1:mock-model");
    let node = start_node_with(
        &gateway,
        &dirs.base.join("harness"),
        Some(&code),
        &logs,
        &["--model", &model, "--model-key-env", "BROKER_TEST_KEY"],
        &[("BROKER_TEST_KEY", MODEL_KEY)],
    );
    gateway.wait_ready().await;
    // The node host itself holds the key.
    let (_, node_environ) = cmdline_and_environ(node.pid()).unwrap();
    assert!(node_environ.contains(MODEL_KEY));

    // A text turn (as `GET /v1/turns/{id}` answers it): one model call, whose usage is the
    // broker's count of the provider's answer.
    let said = turn(&gateway, "s1", "/say hello").await;
    assert_eq!(
        (said["status"].as_str(), said["reply"].as_str()),
        (Some("completed"), Some("hello")),
        "{said}"
    );
    assert_usage_is_the_brokers(&node.stderr(), &said, 1);

    // A turn whose sandboxed command keeps running while every process below the node host
    // is read.
    let running = post_message(
        &gateway,
        "s1",
        r#"/tool exec {"command":"sleep 5; echo slept"}"#,
    )
    .await;
    let deadline = Instant::now() + WAIT;
    let below = loop {
        let below = descendants(node.pid());
        let sleeping = below.iter().any(|pid| {
            cmdline_and_environ(*pid).is_some_and(|(argv, _)| argv.starts_with("sleep 5"))
        });
        if sleeping {
            break below;
        }
        assert!(Instant::now() < deadline, "the command never ran");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut n_read = 0;
    let mut saw_worker = false;
    for pid in &below {
        let Some((argv, environ)) = cmdline_and_environ(*pid) else {
            continue;
        };
        n_read += 1;
        saw_worker |= argv.trim_end().ends_with("gatehouse worker");
        assert!(
            !argv.contains(MODEL_KEY),
            "the argv of {pid} holds the key: {argv}"
        );
        assert!(
            !environ.contains(MODEL_KEY),
            "the environment of {pid} ({argv}) holds the key"
        );
        assert!(
            !environ.contains("BROKER_TEST_KEY"),
            "the environment of {pid} ({argv}) names the key variable"
        );
    }
    // The worker, the sandbox's processes and the command itself were all read.
    assert!(saw_worker && n_read >= 3, "{below:?}");

    let ran = wait_turn(&gateway, &running).await;
    assert_eq!(ran["status"], "completed", "{ran}");
    assert!(ran["reply"].as_str().unwrap().contains("slept"), "{ran}");
    // Two model calls: the one asking for the tool and the one answering with its result.
    assert_usage_is_the_brokers(&node.stderr(), &ran, 2);

    // The provider got the key on every call, from the node host's broker.
    let requests = mock_requests(&mock_url).await;
    let calls: Vec<&serde_json::Value> = requests
        .iter()
        .filter(|request| request["path"] == "/v1/responses")
        .collect();
    assert_eq!(calls.len(), 3);
    for call in calls {
        assert_eq!(
            call["headers"]["authorization"].as_str(),
            Some(format!("Bearer {MODEL_KEY}").as_str())
        );
    }
    drop(node);
}
