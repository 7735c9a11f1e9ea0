//! The SQLite store against a real database file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::sync::Arc;

use gatehouse_store::Store;
use gatehouse_store::model::EnrollOutcome;
use gatehouse_store::model::Enrollment;
use gatehouse_store::model::NewAuditEvent;
use gatehouse_store::model::NewSetupCode;
use gatehouse_store::model::NodeRecord;
use gatehouse_store::model::NodeSeen;
use gatehouse_store::sqlite::SqliteStore;
use pretty_assertions::assert_eq;

fn node(device_id: &str) -> NodeRecord {
    NodeRecord {
        device_id: device_id.into(),
        public_key: "pk".into(),
        display_name: "harness".into(),
        runtime: "native".into(),
        commands: vec!["file.fetch".into()],
        workspace_root: Some("/srv/ws".into()),
        device_token_sha256: "tokenhash".into(),
        enrolled_at_ms: 10,
        last_seen_at_ms: 10,
    }
}

async fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("gateway.db"))
        .await
        .unwrap();
    (dir, store)
}

/// Inserts the setup code with hash `h`, created at 0 and expiring at `expires_at_ms`.
async fn insert_code(store: &SqliteStore, expires_at_ms: i64) {
    store
        .insert_setup_code(&NewSetupCode {
            token_sha256: "h".into(),
            created_at_ms: 0,
            expires_at_ms,
        })
        .await
        .unwrap();
}

#[tokio::test]
async fn a_setup_code_enrolls_exactly_once() {
    let (_dir, store) = open().await;
    insert_code(&store, 100).await;
    let enroll = |now_ms| Enrollment {
        token_sha256: "h".into(),
        now_ms,
        node: node("dev"),
    };
    assert_eq!(
        store.enroll_node(&enroll(50)).await.unwrap(),
        EnrollOutcome::Enrolled
    );
    assert_eq!(
        store.enroll_node(&enroll(51)).await.unwrap(),
        EnrollOutcome::UsedCode
    );
    let unknown = Enrollment {
        token_sha256: "other".into(),
        now_ms: 1,
        node: node("dev2"),
    };
    assert_eq!(
        store.enroll_node(&unknown).await.unwrap(),
        EnrollOutcome::UnknownCode
    );
    assert_eq!(store.node("dev").await.unwrap(), Some(node("dev")));
    assert_eq!(store.node("dev2").await.unwrap(), None);
}

#[tokio::test]
async fn an_expired_code_is_refused_and_stays_unused() {
    let (_dir, store) = open().await;
    insert_code(&store, 100).await;
    let late = Enrollment {
        token_sha256: "h".into(),
        now_ms: 100,
        node: node("dev"),
    };
    assert_eq!(
        store.enroll_node(&late).await.unwrap(),
        EnrollOutcome::ExpiredCode
    );
    assert!(store.nodes().await.unwrap().is_empty());
}

#[tokio::test]
async fn concurrent_enrollments_with_one_code_enroll_one_node() {
    let (_dir, store) = open().await;
    let store = Arc::new(store);
    insert_code(&store, i64::MAX).await;
    let mut tasks = Vec::new();
    for index in 0..16 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            store
                .enroll_node(&Enrollment {
                    token_sha256: "h".into(),
                    now_ms: 1,
                    node: node(&format!("dev{index}")),
                })
                .await
                .unwrap()
        }));
    }
    let mut enrolled = 0;
    for task in tasks {
        if task.await.unwrap() == EnrollOutcome::Enrolled {
            enrolled += 1;
        }
    }
    assert_eq!(enrolled, 1);
    assert_eq!(store.nodes().await.unwrap().len(), 1);
}

#[tokio::test]
async fn node_updates_and_audit_round_trip_and_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        insert_code(&store, 100).await;
        store
            .enroll_node(&Enrollment {
                token_sha256: "h".into(),
                now_ms: 1,
                node: node("dev"),
            })
            .await
            .unwrap();
        store
            .record_node_seen(&NodeSeen {
                device_id: "dev".into(),
                display_name: "renamed".into(),
                runtime: "codex".into(),
                commands: vec!["a".into(), "b".into()],
                workspace_root: None,
                at_ms: 77,
            })
            .await
            .unwrap();
        let seq = store
            .append_audit(&NewAuditEvent {
                at_ms: 5,
                actor: "operator".into(),
                action: "node.setup_code.issue".into(),
                outcome: "succeeded".into(),
                reason_code: None,
                details: serde_json::json!({"ttlSeconds": 600}),
            })
            .await
            .unwrap();
        assert_eq!(seq, 1);
        let missing = store
            .record_node_seen(&NodeSeen {
                device_id: "nope".into(),
                display_name: String::new(),
                runtime: String::new(),
                commands: vec![],
                workspace_root: None,
                at_ms: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(missing.code(), "NOT_FOUND");
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let stored = store.node("dev").await.unwrap().unwrap();
    assert_eq!(
        (
            stored.display_name.as_str(),
            stored.runtime.as_str(),
            stored.last_seen_at_ms
        ),
        ("renamed", "codex", 77)
    );
    assert_eq!(stored.commands, vec!["a".to_owned(), "b".to_owned()]);
    let events = store.audit_after(0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].details, serde_json::json!({"ttlSeconds": 600}));
    assert!(store.audit_after(1, 10).await.unwrap().is_empty());
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(journal, "wal");
}
