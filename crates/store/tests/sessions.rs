//! Sessions, turns, transcripts and events in the SQLite store.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::sync::Arc;

use gatehouse_store::Store;
use gatehouse_store::model::NewTurnMessage;
use gatehouse_store::model::NewUserMessage;
use gatehouse_store::model::QueueMode;
use gatehouse_store::model::TurnEnd;
use gatehouse_store::model::TurnStatus;
use gatehouse_store::sqlite::SqliteStore;
use pretty_assertions::assert_eq;

async fn open() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(&dir.path().join("gateway.db"))
        .await
        .unwrap();
    (dir, store)
}

fn message(
    session: &str,
    turn_id: &str,
    text: &str,
    key: Option<&str>,
    mode: QueueMode,
) -> NewUserMessage {
    NewUserMessage {
        session_key: session.into(),
        runtime: "native".into(),
        turn_id: turn_id.into(),
        text: text.into(),
        attachments: Vec::new(),
        idempotency_key: key.map(str::to_owned),
        queue_mode: mode,
        now_ms: 1,
    }
}

#[tokio::test]
async fn turns_run_one_at_a_time_in_order_and_fence_stale_writers() {
    let (_dir, store) = open().await;
    store
        .admit_user_message(&message("s", "t1", "one", None, QueueMode::Followup))
        .await
        .unwrap();
    store
        .admit_user_message(&message("s", "t2", "two", None, QueueMode::Followup))
        .await
        .unwrap();
    let first = store.claim_next_turn("s", 2).await.unwrap().unwrap();
    assert_eq!(
        (first.turn_id.as_str(), first.status),
        ("t1", TurnStatus::Running)
    );
    assert_eq!(
        store.claim_next_turn("s", 3).await.unwrap(),
        None,
        "a second turn ran concurrently"
    );
    let seq = store
        .commit_turn_message(&NewTurnMessage {
            turn_id: "t1".into(),
            role: "assistant".into(),
            content: "reply one".into(),
            tool_name: None,
            now_ms: 4,
        })
        .await
        .unwrap();
    assert_eq!(seq, Some(3));
    let end = TurnEnd {
        status: TurnStatus::Completed,
        reply: Some("reply one".into()),
        error_code: None,
        error_message: None,
        now_ms: 5,
    };
    assert!(store.finish_turn("t1", &end).await.unwrap());
    assert!(
        !store.finish_turn("t1", &end).await.unwrap(),
        "a finished turn changed again"
    );
    // The turn is over: a late commit from its writer is refused.
    let stale = store
        .commit_turn_message(&NewTurnMessage {
            turn_id: "t1".into(),
            role: "assistant".into(),
            content: "late".into(),
            tool_name: None,
            now_ms: 6,
        })
        .await
        .unwrap();
    assert_eq!(stale, None);
    let second = store.claim_next_turn("s", 7).await.unwrap().unwrap();
    assert_eq!(second.turn_id, "t2");
    let transcript: Vec<(i64, String, String)> = store
        .transcript("s")
        .await
        .unwrap()
        .into_iter()
        .map(|m| (m.seq, m.role, m.content))
        .collect();
    assert_eq!(
        transcript,
        vec![
            (1, "user".into(), "one".into()),
            (2, "user".into(), "two".into()),
            (3, "assistant".into(), "reply one".into()),
        ]
    );
    let kinds: Vec<String> = store
        .events_after("s", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect();
    // The end event is written with the end, once, even though finish_turn ran twice.
    assert_eq!(
        kinds,
        vec![
            "turn.queued",
            "turn.queued",
            "turn.started",
            "turn.completed",
            "turn.started"
        ]
    );
    let completed = &store.events_after("s", 0, 100).await.unwrap()[3];
    assert_eq!(
        completed.payload,
        serde_json::json!({"turnId": "t1", "status": "completed", "reply": "reply one"})
    );
    let sessions = store.sessions().await.unwrap();
    assert_eq!(sessions[0].active_turn_id.as_deref(), Some("t2"));
}

#[tokio::test]
async fn an_idempotency_key_returns_the_same_turn_and_stores_nothing_new() {
    let (_dir, store) = open().await;
    let first = store
        .admit_user_message(&message("s", "t1", "hi", Some("k"), QueueMode::Followup))
        .await
        .unwrap();
    assert!(first.created);
    let again = store
        .admit_user_message(&message(
            "s",
            "t-other",
            "hi",
            Some("k"),
            QueueMode::Followup,
        ))
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.turn.turn_id, "t1");
    assert_eq!(store.transcript("s").await.unwrap().len(), 1);
    // The same key in another session is another message.
    let other = store
        .admit_user_message(&message("s2", "t3", "hi", Some("k"), QueueMode::Followup))
        .await
        .unwrap();
    assert!(other.created);
}

#[tokio::test]
async fn concurrent_duplicates_create_one_turn() {
    let (_dir, store) = open().await;
    let store = Arc::new(store);
    let mut tasks = Vec::new();
    for index in 0..12 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            store
                .admit_user_message(&message(
                    "s",
                    &format!("t{index}"),
                    "hi",
                    Some("same"),
                    QueueMode::Followup,
                ))
                .await
                .unwrap()
        }));
    }
    let mut turn_ids = std::collections::BTreeSet::new();
    let mut created = 0;
    for task in tasks {
        let admitted = task.await.unwrap();
        turn_ids.insert(admitted.turn.turn_id);
        created += usize::from(admitted.created);
    }
    assert_eq!(turn_ids.len(), 1);
    assert_eq!(created, 1);
    assert_eq!(store.transcript("s").await.unwrap().len(), 1);
}

#[tokio::test]
async fn collect_joins_the_queued_turn() {
    let (_dir, store) = open().await;
    store
        .admit_user_message(&message("s", "t1", "running", None, QueueMode::Followup))
        .await
        .unwrap();
    store.claim_next_turn("s", 2).await.unwrap().unwrap();
    let a = store
        .admit_user_message(&message("s", "t2", "a", None, QueueMode::Collect))
        .await
        .unwrap();
    let b = store
        .admit_user_message(&message("s", "t3", "b", None, QueueMode::Collect))
        .await
        .unwrap();
    assert_eq!(a.turn.turn_id, "t2");
    assert_eq!(b.turn.turn_id, "t2");
    let texts: Vec<String> = store
        .turn_user_messages("t2")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(texts, vec!["a", "b"]);
}

#[tokio::test]
async fn running_turns_become_interrupted_and_queued_ones_stay_queued() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .admit_user_message(&message("s", "t1", "one", None, QueueMode::Followup))
            .await
            .unwrap();
        store
            .admit_user_message(&message("s", "t2", "two", None, QueueMode::Followup))
            .await
            .unwrap();
        store.claim_next_turn("s", 2).await.unwrap().unwrap();
    }
    let store = SqliteStore::open(&path).await.unwrap();
    let interrupted = store.interrupt_running_turns(9).await.unwrap();
    assert_eq!(interrupted.len(), 1);
    assert_eq!(
        store.turn("t1").await.unwrap().unwrap().status,
        TurnStatus::Interrupted
    );
    assert_eq!(
        store.turn("t2").await.unwrap().unwrap().status,
        TurnStatus::Queued
    );
    assert_eq!(
        store.sessions_with_queued_turns().await.unwrap(),
        vec!["s".to_owned()]
    );
    assert_eq!(
        store
            .claim_next_turn("s", 10)
            .await
            .unwrap()
            .unwrap()
            .turn_id,
        "t2"
    );
}

#[tokio::test]
async fn a_codex_thread_binding_is_kept_and_replaced_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    {
        let store = SqliteStore::open(&path).await.unwrap();
        store
            .admit_user_message(&message("s", "t1", "one", None, QueueMode::Followup))
            .await
            .unwrap();
        assert_eq!(store.codex_thread("s").await.unwrap(), None);
        store.bind_codex_thread("s", "thread-a", 5).await.unwrap();
        store.bind_codex_thread("s", "thread-b", 6).await.unwrap();
        assert!(
            store
                .bind_codex_thread("nope", "thread-c", 7)
                .await
                .is_err(),
            "a binding needs an existing session"
        );
    }
    // The binding survives a restart of the Gateway.
    let store = SqliteStore::open(&path).await.unwrap();
    assert_eq!(
        store.codex_thread("s").await.unwrap().as_deref(),
        Some("thread-b")
    );
    assert_eq!(store.codex_thread("nope").await.unwrap(), None);
}

#[tokio::test]
async fn finding_4_a_session_is_bound_to_its_first_node_and_moves_only_when_idle() {
    use gatehouse_store::model::SessionMove;
    let (_dir, store) = open().await;
    store
        .admit_user_message(&message("s", "t1", "one", None, QueueMode::Followup))
        .await
        .unwrap();
    assert_eq!(store.session_node("s").await.unwrap(), None);
    // The first binding wins; a second dispatcher learns the owner instead of rebinding.
    assert_eq!(
        store.bind_session_node("s", "node-a", 1).await.unwrap(),
        "node-a"
    );
    assert_eq!(
        store.bind_session_node("s", "node-b", 2).await.unwrap(),
        "node-a"
    );
    assert!(store.bind_session_node("nope", "node-a", 3).await.is_err());
    assert_eq!(
        store.sessions().await.unwrap()[0].node_id.as_deref(),
        Some("node-a")
    );

    // A running turn blocks a move.
    let claimed = store.claim_next_turn("s", 4).await.unwrap().unwrap();
    assert_eq!(
        store
            .move_session_node("s", Some("node-b"), 5)
            .await
            .unwrap(),
        SessionMove::Busy {
            turn_id: claimed.turn_id.clone()
        }
    );
    store
        .finish_turn(
            &claimed.turn_id,
            &TurnEnd {
                status: TurnStatus::Completed,
                reply: Some("ok".into()),
                error_code: None,
                error_message: None,
                now_ms: 6,
            },
        )
        .await
        .unwrap();
    assert_eq!(
        store
            .move_session_node("s", Some("node-b"), 7)
            .await
            .unwrap(),
        SessionMove::Moved {
            from: Some("node-a".into())
        }
    );
    assert_eq!(
        store
            .move_session_node("s", Some("node-b"), 8)
            .await
            .unwrap(),
        SessionMove::Unchanged
    );
    assert_eq!(
        store.move_session_node("s", None, 9).await.unwrap(),
        SessionMove::Moved {
            from: Some("node-b".into())
        }
    );
    assert_eq!(store.session_node("s").await.unwrap(), None);
    assert_eq!(
        store.move_session_node("nope", None, 10).await.unwrap(),
        SessionMove::NotFound
    );
}

/// The turn events the store writes itself are their typed payloads: each decodes into the type
/// its kind names, and its text is the one the hand-built payloads had (keys sorted, explicit
/// `null`s), so events stored before and after read alike.
#[tokio::test]
async fn turn_events_are_their_typed_payloads() {
    use gatehouse_store::model::EventPayload;
    use gatehouse_store::model::TurnError;
    use gatehouse_store::model::TurnFailed;
    use gatehouse_store::model::TurnQueued;
    use gatehouse_store::model::TurnStarted;

    let (_dir, store) = open().await;
    store
        .admit_user_message(&message("s", "t1", "one", None, QueueMode::Steer))
        .await
        .unwrap();
    store.claim_next_turn("s", 2).await.unwrap().unwrap();
    let end = TurnEnd {
        status: TurnStatus::Failed,
        reply: None,
        error_code: None,
        error_message: Some("no code".into()),
        now_ms: 3,
    };
    assert!(store.finish_turn("t1", &end).await.unwrap());
    store
        .admit_user_message(&message("s", "t2", "two", None, QueueMode::Followup))
        .await
        .unwrap();
    store.claim_next_turn("s", 4).await.unwrap().unwrap();
    store.interrupt_running_turns(5).await.unwrap();

    let events = store.events_after("s", 0, 100).await.unwrap();
    let kinds: Vec<&str> = events.iter().map(|event| event.kind.as_str()).collect();
    assert_eq!(
        kinds,
        vec![
            TurnQueued::KIND,
            TurnStarted::KIND,
            TurnFailed::KIND,
            TurnQueued::KIND,
            TurnStarted::KIND,
            TurnFailed::KIND
        ]
    );
    let decode = |idx: usize| serde_json::from_value::<TurnFailed>(events[idx].payload.clone());
    assert_eq!(
        (decode(2).unwrap(), decode(5).unwrap()),
        (
            TurnFailed {
                turn_id: "t1".into(),
                status: TurnStatus::Failed,
                error: TurnError {
                    code: None,
                    message: Some("no code".into()),
                },
            },
            TurnFailed {
                turn_id: "t2".into(),
                status: TurnStatus::Interrupted,
                error: TurnError {
                    code: Some("INTERRUPTED".into()),
                    message: Some(
                        "the gateway stopped while this turn ran; it is not replayed".into()
                    ),
                },
            }
        )
    );
    let texts: Vec<String> = [0, 1, 2]
        .into_iter()
        .map(|idx| events[idx].payload.to_string())
        .collect();
    assert_eq!(
        texts,
        vec![
            r#"{"queueMode":"steer","turnId":"t1"}"#,
            r#"{"turnId":"t1"}"#,
            r#"{"error":{"code":null,"message":"no code"},"status":"failed","turnId":"t1"}"#,
        ]
    );
    assert_eq!(
        serde_json::from_value::<TurnQueued>(events[0].payload.clone()).unwrap(),
        TurnQueued {
            turn_id: "t1".into(),
            queue_mode: QueueMode::Steer,
        }
    );
}
