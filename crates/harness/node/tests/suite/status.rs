//! The status file a running node host keeps in `node/status.json`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use gatehouse_harness::NodeHostError;
use gatehouse_harness::status::NodeStatus;
use gatehouse_harness::status::read_status;
use pretty_assertions::assert_eq;

use crate::suite::fake_gateway::TestNode;
use crate::suite::fake_gateway::WAIT;
use crate::suite::fake_gateway::fast_reconnect;

/// Polls the status file of `root` until `accept` returns true for it.
async fn wait_for_status(root: &Path, accept: impl Fn(&NodeStatus) -> bool) -> NodeStatus {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if let Ok(Some(status)) = read_status(root)
            && accept(&status)
        {
            return status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the status never matched; last: {:?}",
            read_status(root)
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn the_status_file_is_0600_and_connected_after_hello_ok_then_false_after_the_session() {
    let mut node = TestNode::start();
    let mut gateway = node.accept().await;
    gateway.accept_handshake(Some("device-token-1")).await;

    let connected = wait_for_status(&node.root, |status| status.connected).await;
    assert_eq!(
        connected,
        NodeStatus {
            connected: true,
            updated_at_ms: connected.updated_at_ms,
            gateway_conn_id: Some("conn-1".to_owned()),
            last_error_code: None,
            pid: std::process::id(),
        }
    );
    let path = node.root.join("node/status.json");
    let metadata = std::fs::symlink_metadata(&path).unwrap();
    assert!(metadata.file_type().is_file());
    assert_eq!(metadata.permissions().mode() & 0o7777, 0o600);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(!text.contains("device-token-1"), "{text}");

    // The Gateway drops the link: the session ends and says why.
    drop(gateway);
    let ended = wait_for_status(&node.root, |status| !status.connected).await;
    assert_eq!(
        (ended.gateway_conn_id, ended.last_error_code.as_deref()),
        (None, Some("LINK_CLOSED"))
    );
    node.stop().await;
}

#[tokio::test]
async fn the_heartbeat_rewrites_the_status_while_connected_and_stops_with_the_host() {
    let mut node = TestNode::start();
    let mut gateway = node.accept().await;
    gateway.accept_handshake(None).await;
    let first = wait_for_status(&node.root, |status| status.connected).await;

    // The test heartbeat is 50 ms; two newer writes show that it repeats.
    let second = wait_for_status(&node.root, |status| {
        status.updated_at_ms > first.updated_at_ms
    })
    .await;
    let third = wait_for_status(&node.root, |status| {
        status.updated_at_ms > second.updated_at_ms
    })
    .await;
    assert!(second.connected && third.connected);
    assert_eq!(third.gateway_conn_id.as_deref(), Some("conn-1"));

    let root = node.root.clone();
    let _temp = node.stop().await;
    let stopped = read_status(&root).unwrap().unwrap();
    assert!(!stopped.connected, "{stopped:?}");
    // The heartbeat stopped with the session: nothing rewrites the file any more.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(read_status(&root).unwrap().unwrap(), stopped);
}

#[tokio::test]
async fn a_symlinked_status_file_is_refused_and_nothing_is_written_through_it() {
    let temp = tempfile::tempdir().unwrap();
    let node_dir = temp.path().join("harness/node");
    std::fs::create_dir_all(&node_dir).unwrap();
    std::fs::set_permissions(&node_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let target = temp.path().join("target");
    std::fs::write(&target, "untouched").unwrap();
    let link = node_dir.join("status.json");
    std::os::unix::fs::symlink(&target, &link).unwrap();

    let mut node = TestNode::start_in(temp, fast_reconnect());
    let mut gateway = node.accept().await;
    gateway.accept_handshake(Some("device-token-1")).await;
    // Several heartbeats and the handshake's writes have been attempted by now.
    let device_token = node.root.join("node/device-token.json");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !device_token.exists() {
        assert!(tokio::time::Instant::now() < deadline, "no device token");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;

    let err = read_status(&node.root).unwrap_err();
    assert!(matches!(err, NodeHostError::StateSymlink { .. }), "{err:?}");
    let temp = node.stop().await;
    assert_eq!(
        std::fs::read_to_string(temp.path().join("target")).unwrap(),
        "untouched"
    );
    let link = temp.path().join("harness/node/status.json");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let leftovers: Vec<_> = std::fs::read_dir(temp.path().join("harness/node"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert_eq!(leftovers, Vec::<String>::new());
}
