//! The Gateway's explicit file policy end to end: a real Gateway on loopback, a real node host
//! enrolled with a setup code, and `GET /v1/agents/main/workspace/…` over HTTP.

use std::time::Duration;
use std::time::Instant;

use gatehouse_gateway::GatewayConfig;
use gatehouse_gateway::RunningGateway;
use gatehouse_harness::CancellationToken;
use gatehouse_harness::host::NodeHost;
use gatehouse_policy::path::FileTransferPolicy;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::fake_gateway::config;

const TOKEN: &str = "policy-test-token";
const WAIT: Duration = Duration::from_secs(20);

/// Sends `GET path` with the operator token and returns the status and the body.
async fn get(running: &RunningGateway, path: &str) -> (u16, String) {
    crate::suite::http::request(running.local_addr, TOKEN, "GET", path, None).await
}

/// Returns the error code of a JSON error body, or the body itself when it is not one.
fn error_code(body: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(value) => match value["error"]["code"].as_str() {
            Some(code) => code.to_owned(),
            None => body.to_owned(),
        },
        Err(_) => body.to_owned(),
    }
}

/// Issue 20: under `allowReadPaths: ["/**"]` and `denyPaths: ["**/.ssh/**"]`, the Gateway refuses
/// `.ssh` itself, `.ssh/` and `.ssh/id_rsa` with `POLICY_DENIED` before asking the node, while the
/// rest of the workspace stays readable.
#[tokio::test(flavor = "multi_thread")]
async fn an_explicit_deny_covers_the_denied_directory_itself() {
    let temp = tempfile::tempdir().unwrap();
    let base = temp.path().canonicalize().unwrap();
    let harness_root = base.join("harness");
    // The workspace stands in for the home directory, so `$HOME/.ssh` is inside it.
    let workspace = harness_root.join("workspace");
    std::fs::create_dir_all(workspace.join(".ssh")).unwrap();
    std::fs::write(workspace.join(".ssh/id_rsa"), "private key").unwrap();
    std::fs::write(workspace.join(".sshrc"), "rc").unwrap();
    std::fs::write(workspace.join("notes.md"), "notes").unwrap();

    let policy: FileTransferPolicy = serde_json::from_value(json!({
        "nodes": {"*": {"allowReadPaths": ["/**"], "denyPaths": ["**/.ssh/**"]}},
    }))
    .unwrap();
    let mut gateway_config =
        GatewayConfig::with_defaults(base.join("gateway"), "127.0.0.1:0".parse().unwrap());
    gateway_config.operator_token_override = Some(TOKEN.to_owned());
    gateway_config.file_policy = Some(policy);
    let running =
        gatehouse_gateway::start(gateway_config, gatehouse_gateway::Extensions::default())
            .await
            .unwrap();

    let url = format!("ws://{}/node", running.local_addr);
    let issued = running.issue_setup_code(&url, 600).await.unwrap();
    let code_file = base.join("setup-code");
    std::fs::write(&code_file, issued.code).unwrap();
    let mut node_config = config(&harness_root, Some(code_file));
    node_config.home = Some(workspace.to_str().unwrap().to_owned());
    let host = NodeHost::prepare(node_config).unwrap();
    let shutdown = CancellationToken::new();
    let node_shutdown = shutdown.clone();
    let node = tokio::spawn(async move { host.run(node_shutdown).await });

    // The node serves no turns here, so `/readyz` stays unready; a readable file shows that the
    // node is connected and serves the workspace.
    let deadline = Instant::now() + WAIT;
    while get(&running, "/v1/agents/main/workspace/notes.md").await.0 != 200 {
        assert!(Instant::now() < deadline, "the node did not connect");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let paths = [".ssh", ".ssh/", ".ssh/id_rsa", ".sshrc", "notes.md"];
    let mut actual = Vec::new();
    for path in paths {
        let (status, body) = get(&running, &format!("/v1/agents/main/workspace/{path}")).await;
        let outcome = match status {
            200 => body,
            _ => error_code(&body),
        };
        actual.push((path, status, outcome));
    }
    let denied = || String::from("POLICY_DENIED");
    let expected = vec![
        (".ssh", 403, denied()),
        (".ssh/", 403, denied()),
        (".ssh/id_rsa", 403, denied()),
        (".sshrc", 200, String::from("rc")),
        ("notes.md", 200, String::from("notes")),
    ];
    assert_eq!(expected, actual);

    shutdown.cancel();
    running.shutdown.cancel();
    tokio::time::timeout(WAIT, node)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
