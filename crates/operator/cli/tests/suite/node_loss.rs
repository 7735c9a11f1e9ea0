//! A session whose node host is gone for good (issue 16): with `--move-sessions-after`, its
//! next turn runs on another node, with its session workspace restored from the last
//! checkpoint. Real Gateway, two real node hosts, the deterministic mock model.

use pretty_assertions::assert_eq;

use crate::suite::support::Gateway;
use crate::suite::support::dirs;
use crate::suite::support::mock_model;
use crate::suite::support::start_mock_model_node;
use crate::suite::support::turn;

/// Returns the node id `session` is bound to.
async fn node_of(gateway: &Gateway, session: &str) -> String {
    let sessions = gateway.get_json("/v1/sessions").await;
    sessions["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["sessionKey"] == session)
        .and_then(|entry| entry["nodeId"].as_str())
        .unwrap_or_else(|| panic!("{session} is bound to no node: {sessions}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_16_a_session_whose_node_is_gone_moves_to_another_node_with_its_workspace() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let gateway = Gateway::start_with(
        &dirs.base.join("gateway"),
        &logs,
        &["--move-sessions-after", "1"],
    );
    let start = |root: &str| {
        start_mock_model_node(
            &gateway,
            &dirs.base.join(root),
            Some(&gateway.setup_code(600)),
            &logs,
            &mock_url,
        )
    };
    let mut node_a = start("harness-a");
    gateway.wait_ready().await;
    let wrote = turn(
        &gateway,
        "s",
        r#"/tool write {"path":"notes.txt","content":"written on a"}"#,
    )
    .await;
    assert_eq!(wrote["status"], "completed", "{wrote}");
    let node_a_id = node_of(&gateway, "s").await;

    let _node_b = start("harness-b");
    let deadline = std::time::Instant::now() + crate::suite::support::WAIT;
    while gateway.get_json("/v1/nodes").await["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|node| node["connected"] == true)
        .count()
        < 2
    {
        assert!(
            std::time::Instant::now() < deadline,
            "node b never connected"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // While a is connected the session stays there.
    let again = turn(&gateway, "s", "/say still on a").await;
    assert_eq!(again["reply"], "still on a", "{again}");
    assert_eq!(node_of(&gateway, "s").await, node_a_id);

    // a is gone: the next turn waits for it, then moves the session to b, where the
    // workspace is rebuilt from the checkpoint.
    node_a.kill();
    let read = turn(&gateway, "s", r#"/tool read {"path":"notes.txt"}"#).await;
    assert_eq!(read["status"], "completed", "{read}");
    assert!(
        read["reply"]
            .as_str()
            .unwrap_or_default()
            .contains("written on a"),
        "{read}"
    );
    let node_b_id = node_of(&gateway, "s").await;
    assert_ne!(node_b_id, node_a_id);
    let audit: gatehouse_api::audit::AuditList = gateway.get_typed("/v1/audit").await;
    let moves: Vec<(String, String, serde_json::Value)> = audit
        .events
        .into_iter()
        .filter(|event| event.action == "session.moved")
        .map(|event| (event.actor, event.outcome, event.details["to"].clone()))
        .collect();
    assert_eq!(
        moves,
        vec![(
            String::from("gateway"),
            String::from("succeeded"),
            serde_json::json!(node_b_id)
        )]
    );
}
