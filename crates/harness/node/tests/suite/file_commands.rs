//! The five file commands through a real session, with the node's policy and fsops.

use base64::Engine;
use gatehouse_protocol::commands::FileFetchResult;
use gatehouse_protocol::commands::FileWriteResult;
use gatehouse_protocol::invoke::InvokeResult;
use pretty_assertions::assert_eq;
use serde_json::json;
use sha2::Digest;

use crate::suite::fake_gateway::GatewayConn;
use crate::suite::fake_gateway::TestNode;

fn error_code(result: &InvokeResult) -> &str {
    assert!(!result.ok, "expected an error, got {result:?}");
    &result.error.as_ref().unwrap().code
}

async fn connected() -> (TestNode, GatewayConn) {
    let mut node = TestNode::start();
    let mut gateway = node.accept().await;
    gateway.accept_handshake(Some("dt-1")).await;
    (node, gateway)
}

#[tokio::test]
async fn file_fetch_returns_content_and_sha256() {
    let (node, mut gateway) = connected().await;
    let workspace = node.workspace();
    let content = b"hello from the workspace\n".repeat(100);
    std::fs::write(workspace.join("notes.md"), &content).unwrap();
    let path = format!("{}/notes.md", workspace.display());
    let params = json!({"path": path}).to_string();
    let result = gateway
        .invoke(node.host.device_id(), "i1", "file.fetch", &params)
        .await;
    assert!(result.ok, "{result:?}");
    let fetched: FileFetchResult = serde_json::from_value(result.payload.unwrap()).unwrap();
    assert_eq!(
        fetched,
        FileFetchResult {
            ok: true,
            path,
            size: content.len() as u64,
            mime_type: fetched.mime_type.clone(),
            base64: Some(base64::engine::general_purpose::STANDARD.encode(&content)),
            sha256: Some(hex::encode(sha2::Sha256::digest(&content))),
        }
    );
    node.stop().await;
}

#[tokio::test]
async fn refusals_carry_their_stable_codes() {
    let (node, mut gateway) = connected().await;
    let node_id = node.host.device_id().to_owned();
    let workspace = node.workspace();
    let outside = node.temp.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "secret").unwrap();
    std::os::unix::fs::symlink(&outside, workspace.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), workspace.join("link.txt")).unwrap();
    let ws = workspace.display();

    let cases = [
        (
            "file.fetch",
            json!({"path": format!("{ws}/escape/secret.txt")}).to_string(),
            "SYMLINK_REDIRECT",
        ),
        (
            "file.fetch",
            json!({"path": format!("{ws}/link.txt")}).to_string(),
            "SYMLINK_REDIRECT",
        ),
        (
            "file.fetch",
            json!({"path": format!("{ws}/../outside/secret.txt")}).to_string(),
            "PATH_TRAVERSAL",
        ),
        (
            "file.stat",
            json!({"path": format!("{ws}/a/../../outside")}).to_string(),
            "PATH_TRAVERSAL",
        ),
        (
            "file.fetch",
            json!({"path": "/etc/passwd"}).to_string(),
            "POLICY_DENIED",
        ),
        (
            "dir.list",
            json!({"path": "/etc"}).to_string(),
            "POLICY_DENIED",
        ),
        (
            "file.fetch",
            json!({"path": "notes.md"}).to_string(),
            "INVALID_PATH",
        ),
        (
            "file.fetch",
            json!({"path": format!("{ws}/missing.md")}).to_string(),
            "NOT_FOUND",
        ),
        (
            "file.write",
            json!({"path": format!("{ws}/notes.txt"), "contentBase64": "aGk="}).to_string(),
            "POLICY_DENIED",
        ),
        ("file.fetch", "not json".to_owned(), "INVALID_PARAMS"),
        (
            "file.fetch",
            json!({"path": 5}).to_string(),
            "INVALID_PARAMS",
        ),
        (
            "file.write",
            json!({"path": format!("{ws}/AGENTS.md")}).to_string(),
            "INVALID_PARAMS",
        ),
        ("shell.exec", "{}".to_owned(), "UNKNOWN_COMMAND"),
        ("workspace.memory", "{}".to_owned(), "INVALID_PARAMS"),
        (
            "workspace.memory",
            json!({"op": "list", "workspaceDir": "/elsewhere"}).to_string(),
            "POLICY_DENIED",
        ),
        (
            "workspace.memory",
            json!({"op": "read", "workspaceDir": ws.to_string(), "relPath": "memory/../AGENTS.md"}).to_string(),
            "PATH_TRAVERSAL",
        ),
        (
            "workspace.memory",
            json!({"op": "read", "workspaceDir": ws.to_string(), "relPath": "AGENTS.md"}).to_string(),
            "POLICY_DENIED",
        ),
        (
            "workspace.memory",
            json!({"op": "readForIndexing", "workspaceDir": ws.to_string(), "relPath": "./MEMORY.md"}).to_string(),
            "INVALID_PATH",
        ),
        (
            "workspace.skills",
            json!({"op": "install", "workspaceDir": ws.to_string()}).to_string(),
            "INVALID_PARAMS",
        ),
        (
            "workspace.skills",
            json!({"op": "discover", "workspaceDir": "/elsewhere"}).to_string(),
            "POLICY_DENIED",
        ),
    ];
    for (idx, (command, params, expected)) in cases.iter().enumerate() {
        let id = format!("i{idx}");
        let result = gateway.invoke(&node_id, &id, command, params).await;
        assert_eq!(error_code(&result), *expected, "{command} {params}");
    }
    node.stop().await;
}

#[tokio::test]
async fn an_invoke_for_another_node_is_refused() {
    let (node, mut gateway) = connected().await;
    let result = gateway
        .invoke("someone-else", "i1", "file.stat", r#"{"path":"/"}"#)
        .await;
    assert_eq!(error_code(&result), "INVALID_REQUEST");
    assert_eq!(result.node_id, node.host.device_id());
    node.stop().await;
}

#[tokio::test]
async fn writes_lists_and_stats_inside_the_policy() {
    let (node, mut gateway) = connected().await;
    let node_id = node.host.device_id().to_owned();
    let workspace = node.workspace();
    let ws = workspace.display();
    let content = b"# agents\n";
    let content_base64 = base64::engine::general_purpose::STANDARD.encode(content);

    let params = json!({"path": format!("{ws}/AGENTS.md"), "contentBase64": content_base64, "overwrite": true});
    let result = gateway
        .invoke(&node_id, "w1", "file.write", &params.to_string())
        .await;
    assert!(result.ok, "{result:?}");
    let written: FileWriteResult = serde_json::from_value(result.payload.unwrap()).unwrap();
    assert_eq!(written.sha256, hex::encode(sha2::Sha256::digest(content)));
    assert_eq!(std::fs::read(workspace.join("AGENTS.md")).unwrap(), content);

    let params = json!({"path": format!("{ws}/memory/today.md"), "contentBase64": content_base64, "createParents": true});
    let result = gateway
        .invoke(&node_id, "c1", "file.create", &params.to_string())
        .await;
    assert!(result.ok, "{result:?}");
    let result = gateway
        .invoke(&node_id, "c2", "file.create", &params.to_string())
        .await;
    assert_eq!(error_code(&result), "EXISTS_NO_OVERWRITE");

    let params = json!({"path": format!("{ws}")});
    let result = gateway
        .invoke(&node_id, "l1", "dir.list", &params.to_string())
        .await;
    assert!(result.ok, "{result:?}");
    let listing: serde_json::Value = serde_json::from_value(result.payload.unwrap()).unwrap();
    let names: Vec<&str> = listing["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|entry| entry["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["AGENTS.md", "memory"]);

    let params = json!({"path": format!("{ws}/memory")});
    let result = gateway
        .invoke(&node_id, "s1", "file.stat", &params.to_string())
        .await;
    let stat: serde_json::Value = serde_json::from_value(result.payload.unwrap()).unwrap();
    assert_eq!(stat["kind"], "directory");
    node.stop().await;
}

#[tokio::test]
async fn a_result_over_max_payload_is_file_too_large() {
    let mut node = TestNode::start();
    let mut gateway = node.accept().await;
    gateway.challenge("n", 1).await;
    let (id, _params) = gateway.recv_connect().await;
    gateway.hello_ok(&id, Some("dt-1"), 4096, 0).await;
    let workspace = node.workspace();
    std::fs::write(workspace.join("big.md"), vec![b'x'; 8192]).unwrap();
    let params = json!({"path": format!("{}/big.md", workspace.display())}).to_string();
    let result = gateway
        .invoke(node.host.device_id(), "i1", "file.fetch", &params)
        .await;
    assert_eq!(error_code(&result), "FILE_TOO_LARGE");
    node.stop().await;
}
