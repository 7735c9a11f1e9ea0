//! Enrollment, the handshake as the Gateway sees it, and the reconnect loop.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;
use std::time::Instant;

use base64::Engine;
use ed25519_dalek::Signature;
use ed25519_dalek::VerifyingKey;
use gatehouse_harness::host::NodeHost;
use gatehouse_protocol::commands::FILE_COMMANDS;
use gatehouse_protocol::handshake::ClientInfo;
use gatehouse_protocol::handshake::ConnectAuth;
use gatehouse_protocol::handshake::SignatureFields;
use gatehouse_protocol::handshake::device_signature_payload_v3;
use pretty_assertions::assert_eq;
use sha2::Digest;

use crate::suite::fake_gateway::BOOTSTRAP_TOKEN;
use crate::suite::fake_gateway::TestNode;
use crate::suite::fake_gateway::config;
use crate::suite::fake_gateway::fast_reconnect;
use crate::suite::fake_gateway::setup_code_text;

fn decode(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(text)
        .unwrap()
}

#[tokio::test]
async fn enrollment_saves_the_device_token_and_later_sessions_use_it() {
    let mut node = TestNode::start();
    let mut gateway = node.accept().await;
    gateway.challenge("nonce-1", 1_700_000_000_123).await;
    let (connect_id, params) = gateway.recv_connect().await;

    // Who the node says it is.
    let device = params.device.clone().unwrap();
    let public_key = decode(&device.public_key);
    assert_eq!(device.id, hex::encode(sha2::Sha256::digest(&public_key)));
    assert_eq!(device.id, node.host.device_id());
    assert_eq!(device.signed_at, 1_700_000_000_123);
    assert_eq!(device.nonce, "nonce-1");
    let mut commands: Vec<&str> = FILE_COMMANDS.to_vec();
    commands.push(gatehouse_protocol::memory::WORKSPACE_MEMORY);
    commands.push(gatehouse_protocol::skills::WORKSPACE_SKILLS);
    commands.sort_unstable();
    assert_eq!(params.commands, commands);
    assert_eq!((params.min_protocol, params.max_protocol), (3, 5));
    assert_eq!(params.role, "node");
    assert_eq!(params.scopes, Vec::<String>::new());
    assert_eq!(
        params.client,
        ClientInfo {
            id: "node-host".to_owned(),
            display_name: Some("test node".to_owned()),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            platform: "linux".to_owned(),
            device_family: Some("server".to_owned()),
            mode: "node".to_owned(),
        }
    );
    assert_eq!(
        params
            .runtime
            .map(gatehouse_protocol::runtime::RuntimeKind::as_str),
        Some("native")
    );
    let workspace = std::fs::canonicalize(node.root.join("workspace")).unwrap();
    assert_eq!(params.workspace_root.as_deref(), workspace.to_str());
    let auth = params.auth.clone().unwrap();
    assert_eq!(
        auth,
        ConnectAuth {
            bootstrap_token: Some(BOOTSTRAP_TOKEN.to_owned()),
            device_token: None,
        }
    );

    // The signature covers the v3 payload.
    let key = VerifyingKey::from_bytes(&public_key.try_into().unwrap()).unwrap();
    let payload = device_signature_payload_v3(&SignatureFields {
        device_id: &device.id,
        client_id: "node-host",
        client_mode: "node",
        role: "node",
        scopes: &[],
        signed_at_ms: device.signed_at,
        token: auth.signed_token(),
        nonce: &device.nonce,
        platform: "linux",
        device_family: "server",
    });
    let signature = Signature::from_slice(&decode(&device.signature)).unwrap();
    key.verify_strict(payload.as_bytes(), &signature).unwrap();

    // Enrollment: the token is saved before the node serves anything.
    gateway
        .hello_ok(&connect_id, Some("dt-issued"), 25 * 1024 * 1024, 0)
        .await;
    let node_id = node.host.device_id().to_owned();
    let result = gateway
        .invoke(
            &node_id,
            "i1",
            "file.stat",
            &format!(r#"{{"path":"{}"}}"#, workspace.display()),
        )
        .await;
    assert!(result.ok, "{result:?}");
    let token_path = node.root.join("node/device-token.json");
    let mode = std::fs::metadata(&token_path).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o600);
    let saved: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&token_path).unwrap()).unwrap();
    assert_eq!(
        saved,
        serde_json::json!({
            "gatewayUrl": "ws://127.0.0.1:9/node",
            "deviceId": node_id,
            "deviceToken": "dt-issued",
            "issuedAtMs": 1_700_000_000_000_i64,
        })
    );

    // The link drops; the node reconnects with its device token.
    drop(gateway);
    let mut gateway = node.accept().await;
    let params = gateway.accept_handshake(None).await;
    assert_eq!(
        params.auth.unwrap(),
        ConnectAuth {
            bootstrap_token: None,
            device_token: Some("dt-issued".to_owned()),
        }
    );
    drop(gateway);

    // A restarted node loads the same identity and token, without a setup code.
    let temp = node.stop().await;
    let root = temp.path().join("harness");
    std::fs::remove_file(temp.path().join("setup-code")).unwrap();
    let host = NodeHost::prepare(config(&root, None)).unwrap();
    assert_eq!(host.device_id(), node_id);
    assert_eq!(host.gateway_url().as_deref(), Some("ws://127.0.0.1:9/node"));
    let mut node = TestNode::start_in(temp, fast_reconnect());
    let mut gateway = node.accept().await;
    let params = gateway.accept_handshake(None).await;
    assert_eq!(params.device.unwrap().id, node_id);
    assert_eq!(
        params.auth.unwrap().device_token.as_deref(),
        Some("dt-issued")
    );
    node.stop().await;
}

#[tokio::test]
async fn a_refused_connect_is_retried_with_backoff_and_a_fresh_setup_code() {
    let mut node = TestNode::start();
    let mut attempts = Vec::new();
    for attempt_idx in 0..4 {
        let mut gateway = node.accept().await;
        attempts.push(Instant::now());
        gateway.challenge("n", 1).await;
        let (id, params) = gateway.recv_connect().await;
        let expected_token = match attempt_idx {
            0 | 1 => BOOTSTRAP_TOKEN.to_owned(),
            _ => "bt-second".to_owned(),
        };
        assert_eq!(
            params.auth.unwrap().bootstrap_token,
            Some(expected_token),
            "attempt {attempt_idx}"
        );
        if attempt_idx == 1 {
            // The operator puts a new code in the file; the next attempt reads it.
            std::fs::write(&node.setup_code_file, setup_code_text("bt-second")).unwrap();
        }
        if attempt_idx == 2 {
            // A broken file keeps the code read before.
            std::fs::write(&node.setup_code_file, "garbage").unwrap();
        }
        gateway.refuse(&id, "SETUP_CODE_INVALID").await;
    }
    // Backoff 50 ms, then 100 ms, then 200 ms (the cap).
    let gaps: Vec<Duration> = attempts.windows(2).map(|pair| pair[1] - pair[0]).collect();
    for (gap, minimum_ms) in gaps.iter().zip([50, 100, 200]) {
        assert!(*gap >= Duration::from_millis(minimum_ms), "{gaps:?}");
    }
    node.stop().await;
}

#[tokio::test]
async fn a_missing_challenge_times_out_and_the_node_retries() {
    let mut reconnect = fast_reconnect();
    reconnect.handshake_timeout = Duration::from_millis(100);
    let mut node = TestNode::start_in(tempfile::tempdir().unwrap(), reconnect);
    let mut silent = node.accept().await;
    let started = Instant::now();
    // The node gives up on the silent connection and opens a new one.
    let mut gateway = node.accept().await;
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(silent.try_recv().await.is_none());
    gateway.accept_handshake(Some("dt-1")).await;
    node.stop().await;
}

#[tokio::test]
async fn a_silent_link_after_hello_is_dropped_and_reconnected() {
    let mut node = TestNode::start();
    let mut gateway = node.accept().await;
    gateway.challenge("n", 1).await;
    let (id, _params) = gateway.recv_connect().await;
    gateway.hello_ok(&id, Some("dt-1"), 1 << 20, 50).await;
    let started = Instant::now();
    let mut next = node.accept().await;
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(gateway.try_recv().await.is_none());
    let params = next.accept_handshake(None).await;
    assert_eq!(params.auth.unwrap().device_token.as_deref(), Some("dt-1"));
    node.stop().await;
}

#[tokio::test]
async fn a_gateway_that_closes_before_the_challenge_is_retried() {
    let mut node = TestNode::start();
    let gateway = node.accept().await;
    drop(gateway);
    let mut gateway = node.accept().await;
    gateway.accept_handshake(Some("dt-1")).await;
    node.stop().await;
}
