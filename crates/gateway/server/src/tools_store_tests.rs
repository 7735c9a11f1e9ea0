//! Gateway-provided tools re-check their policy and the calling turn when a call arrives.

use std::sync::Arc;

use crate::audit::Audit;
use crate::tools::GatewayTools;
use gatehouse_policy::tool::LayerSource;
use gatehouse_policy::tool::ToolLayer;
use gatehouse_protocol::worker::GatewayToolParams;
use gatehouse_store::Store;
use gatehouse_store::records::NewUserMessage;
use gatehouse_store::records::QueueMode;
use gatehouse_store::sqlite::SqliteStore;
use pretty_assertions::assert_eq;

async fn setup(layers: Vec<ToolLayer>) -> (tempfile::TempDir, Arc<dyn Store>, GatewayTools) {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("gateway.db"))
            .await
            .unwrap(),
    );
    store
        .admit_user_message(&NewUserMessage {
            session_key: "s".into(),
            runtime: "native".into(),
            turn_id: "t1".into(),
            text: "hi".into(),
            attachments: Vec::new(),
            idempotency_key: None,
            queue_mode: QueueMode::Followup,
            origin: None,
            api_key: None,
            now_ms: 1,
        })
        .await
        .unwrap();
    let tools = GatewayTools::new(Arc::clone(&store), Audit::new(Arc::clone(&store)), layers);
    (dir, store, tools)
}

fn call(tool: &str, session: &str, turn: &str) -> GatewayToolParams {
    GatewayToolParams {
        session_key: session.into(),
        turn_id: turn.into(),
        tool: tool.into(),
        arguments: serde_json::json!({}),
    }
}

/// Calls `tool` as node `dev` (past the link's ownership check) for `session`/`turn` and returns the refusal's code; panics if
/// the call succeeds.
async fn refusal(tools: &GatewayTools, tool: &str, session: &str, turn: &str) -> String {
    tools
        .call_as("node:dev", &call(tool, session, turn))
        .await
        .unwrap_err()
        .code
}

/// Claims the session `s`'s queued turn under a lease of this test's own.
async fn claim(store: &Arc<dyn Store>) {
    let gatehouse_store::cluster::Acquired::Taken(lease) = store
        .acquire_replica("test", None, 3_600_000)
        .await
        .unwrap()
    else {
        panic!("the test's lease is held");
    };
    assert!(matches!(
        store.claim_next_turn(&lease.fence, "s", 2).await.unwrap(),
        gatehouse_store::cluster::ClaimOutcome::Claimed(_)
    ));
}

#[tokio::test]
async fn session_status_runs_for_a_running_turn_only() {
    let (_dir, store, tools) = setup(Vec::new()).await;
    let names: Vec<String> = tools.offered().into_iter().map(|spec| spec.name).collect();
    assert_eq!(names, vec!["session_status".to_owned()]);
    // Queued, not running yet: refused.
    assert_eq!(
        refusal(&tools, "session_status", "s", "t1").await,
        "INVALID_REQUEST"
    );
    claim(&store).await;
    let result = tools
        .call_as("node:dev", &call("session_status", "s", "t1"))
        .await
        .unwrap();
    let status: serde_json::Value = serde_json::from_str(&result.output).unwrap();
    assert_eq!(
        (
            status["sessionKey"].as_str(),
            status["activeTurnId"].as_str(),
            status["messages"].as_u64()
        ),
        (Some("s"), Some("t1"), Some(1))
    );
    // Another session's turn id, or an unknown tool, is refused.
    assert_eq!(
        refusal(&tools, "session_status", "other", "t1").await,
        "INVALID_REQUEST"
    );
    assert_eq!(refusal(&tools, "exec", "s", "t1").await, "POLICY_DENIED");
    let audit = store.audit_after(0, 100).await.unwrap();
    let outcomes: Vec<(&str, Option<&str>)> = audit
        .iter()
        .map(|event| (event.outcome.as_str(), event.reason_code.as_deref()))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            ("denied", Some("TURN_NOT_RUNNING")),
            ("succeeded", None),
            ("denied", Some("TURN_NOT_RUNNING")),
            ("denied", Some("POLICY_DENIED"))
        ]
    );
}

#[tokio::test]
async fn a_denied_tool_is_neither_offered_nor_run() {
    let deny = ToolLayer {
        source: LayerSource::Global,
        allow: None,
        deny: vec!["session_status".into()],
    };
    let (_dir, store, tools) = setup(vec![deny]).await;
    assert!(tools.offered().is_empty());
    claim(&store).await;
    assert_eq!(
        refusal(&tools, "session_status", "s", "t1").await,
        "POLICY_DENIED"
    );
}
