//! The `Store` contract, run against every backend: SQLite in a real file in a tempdir, and
//! PostgreSQL in a fresh database per test on the server `GATEHOUSE_TEST_POSTGRES_URL` names
//! (scripts/test starts a throwaway one). Each contract test is one generic function;
//! `gatehouse_testkit::on_both_backends!` instantiates it once per backend, so both run the same assertions.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::worker::OmittedPaths;
use gatehouse_protocol::worker::TokenUsage;
use gatehouse_store::Store;
use gatehouse_store::cluster::Acquired;
use gatehouse_store::cluster::ClaimOutcome;
use gatehouse_store::cluster::Fence;
use gatehouse_store::location::StoreLocation;
use gatehouse_store::records::API_KEY_LAST_USED_RESOLUTION_MS;
use gatehouse_store::records::ApiKeyRecord;
use gatehouse_store::records::Attachment;
use gatehouse_store::records::Blob;
use gatehouse_store::records::CheckpointBlob;
use gatehouse_store::records::CheckpointManifest;
use gatehouse_store::records::EnrollOutcome;
use gatehouse_store::records::Enrollment;
use gatehouse_store::records::MediaCharge;
use gatehouse_store::records::MediaChargeKind;
use gatehouse_store::records::NewApiKey;
use gatehouse_store::records::NewAuditEvent;
use gatehouse_store::records::NewSetupCode;
use gatehouse_store::records::NewTurnMessage;
use gatehouse_store::records::NewUserMessage;
use gatehouse_store::records::NewWorktreeVersion;
use gatehouse_store::records::NodeRecord;
use gatehouse_store::records::NodeSeen;
use gatehouse_store::records::QueueMode;
use gatehouse_store::records::ReleasedUpload;
use gatehouse_store::records::ResultApply;
use gatehouse_store::records::ResultState;
use gatehouse_store::records::Scope;
use gatehouse_store::records::SessionMove;
use gatehouse_store::records::StoredEntry;
use gatehouse_store::records::StoredManifest;
use gatehouse_store::records::TurnEnd;
use gatehouse_store::records::TurnRecord;
use gatehouse_store::records::TurnStatus;
use gatehouse_store::records::UsageGroup;
use gatehouse_store::records::UsageGrouping;
use gatehouse_store::records::UsageQuery;
use gatehouse_store::records::UsageScope;
use gatehouse_store::records::WorkspaceSet;
use gatehouse_store::records::WorkspaceSource;
use gatehouse_store::records::WorktreeOrigin;
use pretty_assertions::assert_eq;
use support::Target;

gatehouse_testkit::on_both_backends!(
    threads = 4;
    a_setup_code_enrolls_exactly_once,
    an_expired_code_is_refused_and_stays_unused,
    concurrent_enrollments_with_one_code_enroll_one_node,
    node_updates_and_audit_round_trip_and_survive_reopen,
    audit_readers_paging_during_concurrent_appends_miss_nothing,
    issue_33_audit_pages_backwards_and_prunes_rows_older_than_the_cutoff,
    an_acknowledged_admission_is_durable_in_a_new_store,
    turns_run_one_at_a_time_in_order_and_fence_stale_writers,
    concurrent_claims_run_one_turn_per_session,
    an_idempotency_key_returns_the_same_turn_and_stores_nothing_new,
    concurrent_duplicates_create_one_turn,
    concurrent_appends_get_contiguous_sequence_numbers,
    collect_joins_the_queued_turn,
    running_turns_become_interrupted_and_queued_ones_stay_queued,
    checkpoints_keep_the_latest_order_by_save_and_prune_the_rest,
    checkpoint_blob_garbage_is_what_nothing_refers_to,
    a_codex_thread_binding_is_kept_and_replaced_per_session,
    turn_events_are_their_typed_payloads,
    finding_4_a_session_is_bound_to_its_first_node_and_moves_only_when_idle,
    api_keys_are_created_once_per_name_listed_and_revoked,
    media_grants_name_a_key_or_the_sessions_under_a_prefix,
    media_charges_count_once_per_owner_and_refuse_past_the_quota,
    a_released_upload_is_collectable_only_when_no_other_upload_holds_it,
    a_session_keeps_its_first_owner,
    an_api_key_is_found_by_its_hash_until_it_expires_and_records_its_use,
    a_completed_turns_usage_is_stored_with_it,
    usage_counted_per_call_is_summed_by_key_session_and_day,
    a_session_is_rebound_only_from_the_node_it_is_bound_to,
    a_worktree_keeps_versions_applies_a_result_once_and_prunes_old_versions,
    a_checkpoint_stored_as_untyped_json_reads_back_typed,
);

/// Takes a lease for the replica `r1` that outlives the test and returns its fence.
async fn lease(store: &Arc<dyn Store>) -> Fence {
    lease_for(store, "r1", 3_600_000).await
}

/// Takes the lease of `replica` for `lease_ms` and returns its fence.
async fn lease_for(store: &Arc<dyn Store>, replica: &str, lease_ms: i64) -> Fence {
    match store
        .acquire_replica(replica, None, lease_ms)
        .await
        .unwrap()
    {
        Acquired::Taken(lease) => lease.fence,
        held @ Acquired::Held { .. } => panic!("the lease of {replica} is held: {held:?}"),
    }
}

/// Records that the replica of `fence` holds the link of `device_id`: a replica claims only the
/// turns of sessions whose node it holds.
async fn link_here(store: &Arc<dyn Store>, fence: &Fence, device_id: &str) {
    let link = gatehouse_store::cluster::NewNodeLink {
        device_id: device_id.into(),
        conn_id: 1,
        runtime: "native".into(),
        commands: vec!["agent.turn".into()],
    };
    assert!(store.link_node(fence, &link).await.unwrap());
}

/// Returns the turn a claim took, failing the test otherwise.
fn claimed(outcome: ClaimOutcome) -> TurnRecord {
    match outcome {
        ClaimOutcome::Claimed(turn) => *turn,
        other => panic!("nothing was claimed: {other:?}"),
    }
}

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

/// Inserts the setup code with hash `h`, created at 0 and expiring at `expires_at_ms`.
async fn insert_code(store: &Arc<dyn Store>, expires_at_ms: i64) {
    store
        .insert_setup_code(&NewSetupCode {
            token_sha256: "h".into(),
            created_at_ms: 0,
            expires_at_ms,
        })
        .await
        .unwrap();
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
        origin: None,
        api_key: None,
        now_ms: 1,
    }
}

fn attachment(media_id: &str) -> Attachment {
    Attachment {
        media_id: media_id.into(),
        required: true,
    }
}

fn assistant(turn_id: &str, content: &str, now_ms: i64) -> NewTurnMessage {
    NewTurnMessage {
        turn_id: turn_id.into(),
        role: "assistant".into(),
        content: content.into(),
        tool_name: None,
        now_ms,
    }
}

fn completed(reply: &str, now_ms: i64) -> TurnEnd {
    TurnEnd {
        status: TurnStatus::Completed,
        reply: Some(reply.into()),
        error_code: None,
        error_message: None,
        usage: None,
        now_ms,
    }
}

fn failed_end(now_ms: i64) -> TurnEnd {
    TurnEnd {
        status: TurnStatus::Failed,
        reply: None,
        error_code: Some("TURN_BUDGET_EXCEEDED".into()),
        error_message: Some("over".into()),
        usage: None,
        now_ms,
    }
}

fn audit_event(action: &str, at_ms: i64) -> NewAuditEvent {
    NewAuditEvent {
        at_ms,
        actor: "operator".into(),
        action: action.into(),
        outcome: "succeeded".into(),
        reason_code: None,
        details: serde_json::json!({"ttlSeconds": 600}),
    }
}

async fn a_setup_code_enrolls_exactly_once(target: Target) {
    let store = target.open().await;
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
    let duplicate = store
        .insert_setup_code(&NewSetupCode {
            token_sha256: "h".into(),
            created_at_ms: 0,
            expires_at_ms: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(duplicate.code(), ErrorCode::AlreadyExists);
}

async fn an_expired_code_is_refused_and_stays_unused(target: Target) {
    let store = target.open().await;
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

async fn concurrent_enrollments_with_one_code_enroll_one_node(target: Target) {
    let store = target.open().await;
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
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    let enrolled = outcomes
        .iter()
        .filter(|outcome| **outcome == EnrollOutcome::Enrolled)
        .count();
    assert_eq!(enrolled, 1, "{outcomes:?}");
    assert!(
        outcomes
            .iter()
            .all(|outcome| matches!(outcome, EnrollOutcome::Enrolled | EnrollOutcome::UsedCode)),
        "{outcomes:?}"
    );
    assert_eq!(store.nodes().await.unwrap().len(), 1);
}

async fn node_updates_and_audit_round_trip_and_survive_reopen(target: Target) {
    {
        let store = target.open().await;
        insert_code(&store, 100).await;
        for id in ["dev", "another"] {
            let outcome = store
                .enroll_node(&Enrollment {
                    token_sha256: if id == "dev" { "h".into() } else { "x".into() },
                    now_ms: 1,
                    node: node(id),
                })
                .await
                .unwrap();
            assert_eq!(outcome == EnrollOutcome::Enrolled, id == "dev");
        }
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
            .append_audit(&audit_event("node.setup_code.issue", 5))
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
    let store = target.open().await;
    let stored = store.node("dev").await.unwrap().unwrap();
    assert_eq!(
        (
            stored.display_name.as_str(),
            stored.runtime.as_str(),
            stored.last_seen_at_ms,
            stored.workspace_root.as_deref()
        ),
        ("renamed", "codex", 77, None)
    );
    assert_eq!(stored.commands, vec!["a".to_owned(), "b".to_owned()]);
    assert_eq!(store.nodes().await.unwrap().len(), 1);
    let events = store.audit_after(0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].details, serde_json::json!({"ttlSeconds": 600}));
    assert_eq!((events[0].actor.as_str(), events[0].at_ms), ("operator", 5));
    assert!(store.audit_after(1, 10).await.unwrap().is_empty());
}

/// A reader that pages with `audit_after(last seen)` while writers append concurrently must
/// still see every event: sequence numbers become visible in increasing order.
async fn audit_readers_paging_during_concurrent_appends_miss_nothing(target: Target) {
    const WRITERS: usize = 8;
    const PER_WRITER: usize = 25;
    let store = target.open().await;
    let mut writers = Vec::new();
    for writer in 0..WRITERS {
        let store = Arc::clone(&store);
        writers.push(tokio::spawn(async move {
            let mut seqs = Vec::new();
            for index in 0..PER_WRITER {
                let action = format!("w{writer}.{index}");
                seqs.push(store.append_audit(&audit_event(&action, 1)).await.unwrap());
            }
            seqs
        }));
    }
    let writing = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let reader = {
        let store = Arc::clone(&store);
        let writing = Arc::clone(&writing);
        tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut after = 0;
            loop {
                // Read the flag before the page: a page read after the writers finished sees
                // everything, so the loop ends with nothing left behind `after`.
                let done = !writing.load(std::sync::atomic::Ordering::SeqCst);
                let page = store.audit_after(after, 7).await.unwrap();
                let drained = page.is_empty();
                for event in page {
                    after = event.seq;
                    seen.push(event.seq);
                }
                if done && drained {
                    return seen;
                }
                tokio::task::yield_now().await;
            }
        })
    };
    let mut written = BTreeSet::new();
    for writer in writers {
        let seqs = writer.await.unwrap();
        assert!(seqs.windows(2).all(|pair| pair[0] < pair[1]), "{seqs:?}");
        written.extend(seqs);
    }
    writing.store(false, std::sync::atomic::Ordering::SeqCst);
    let seen = reader.await.unwrap();
    assert_eq!(written.len(), WRITERS * PER_WRITER);
    assert_eq!(
        seen,
        written.iter().copied().collect::<Vec<_>>(),
        "the paging reader skipped or reordered events"
    );
    let all = store.audit_after(0, 1000).await.unwrap();
    let actions: BTreeSet<String> = all.into_iter().map(|event| event.action).collect();
    assert_eq!(actions.len(), WRITERS * PER_WRITER);
}

/// Issue 33: `audit_before` pages backwards from the newest event down to the oldest, and
/// `prune_audit` deletes exactly the events recorded before its cutoff, however many replicas
/// prune at once.
async fn issue_33_audit_pages_backwards_and_prunes_rows_older_than_the_cutoff(target: Target) {
    let store = target.open().await;
    let mut seqs = Vec::new();
    for at_ms in 1..=10 {
        let event = audit_event(&format!("a{at_ms}"), at_ms * 100);
        seqs.push(store.append_audit(&event).await.unwrap());
    }
    let mut pages = Vec::new();
    let mut before = i64::MAX;
    loop {
        let page = store.audit_before(before, 4).await.unwrap();
        let Some(first) = page.first() else { break };
        before = first.seq;
        pages.push(page.iter().map(|event| event.seq).collect::<Vec<_>>());
    }
    assert_eq!(
        pages,
        vec![
            seqs[6..10].to_vec(),
            seqs[2..6].to_vec(),
            seqs[0..2].to_vec()
        ]
    );

    // Five pruners at once, as five replicas would: the rows before 500 go, once.
    let pruners: Vec<_> = (0..5)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.prune_audit(500).await.unwrap() })
        })
        .collect();
    let mut pruned = 0;
    for pruner in pruners {
        pruned += pruner.await.unwrap();
    }
    assert_eq!(pruned, 4);
    let kept: Vec<i64> = store
        .audit_after(0, 100)
        .await
        .unwrap()
        .iter()
        .map(|event| event.at_ms)
        .collect();
    assert_eq!(kept, vec![500, 600, 700, 800, 900, 1000]);
    assert_eq!(store.prune_audit(500).await.unwrap(), 0);
    let newest = store.audit_before(i64::MAX, 2).await.unwrap();
    assert_eq!(
        newest.iter().map(|event| event.seq).collect::<Vec<_>>(),
        seqs[8..10].to_vec()
    );
}

/// Everything `admit_user_message` acknowledged is there for a store opened afresh.
async fn an_acknowledged_admission_is_durable_in_a_new_store(target: Target) {
    let admitted = {
        let store = target.open().await;
        let attachments = vec![attachment("m1")];
        let mut new = message("s", "t1", "keep me", Some("k1"), QueueMode::Followup);
        new.attachments = attachments;
        store.admit_user_message(&new).await.unwrap()
    };
    assert!(admitted.created);
    let store = target.open().await;
    assert_eq!(store.turn("t1").await.unwrap(), Some(admitted.turn.clone()));
    assert_eq!(admitted.turn.attachments, vec![attachment("m1")]);
    let transcript = store.transcript("s").await.unwrap();
    assert_eq!(
        transcript
            .iter()
            .map(|m| (m.seq, m.role.as_str(), m.content.as_str()))
            .collect::<Vec<_>>(),
        vec![(1, "user", "keep me")]
    );
    let events = store.events_after("s", 0, 10).await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].payload,
        serde_json::json!({"turnId": "t1", "queueMode": "followup"})
    );
    // The idempotency key is durable too: a retry after the restart stores nothing.
    let retry = store
        .admit_user_message(&message(
            "s",
            "t2",
            "keep me",
            Some("k1"),
            QueueMode::Followup,
        ))
        .await
        .unwrap();
    assert_eq!((retry.created, retry.turn.turn_id.as_str()), (false, "t1"));
    assert_eq!(store.transcript("s").await.unwrap().len(), 1);
    assert_eq!(store.figures().await.unwrap().n_queued_turns, 1);
}

async fn turns_run_one_at_a_time_in_order_and_fence_stale_writers(target: Target) {
    let store = target.open().await;
    let fence = lease(&store).await;
    store
        .admit_user_message(&message("s", "t1", "one", None, QueueMode::Followup))
        .await
        .unwrap();
    store
        .admit_user_message(&message("s", "t2", "two", None, QueueMode::Followup))
        .await
        .unwrap();
    let first = claimed(store.claim_next_turn(&fence, "s", 2).await.unwrap());
    assert_eq!(
        (first.turn_id.as_str(), first.status, first.started_at_ms),
        ("t1", TurnStatus::Running, Some(2))
    );
    assert_eq!(
        store.claim_next_turn(&fence, "s", 3).await.unwrap(),
        ClaimOutcome::Idle,
        "a second turn ran concurrently"
    );
    assert_eq!(
        store.claim_next_turn(&fence, "nope", 3).await.unwrap(),
        ClaimOutcome::Idle
    );
    let seq = store
        .commit_turn_message(&fence, &assistant("t1", "reply one", 4))
        .await
        .unwrap();
    assert_eq!(seq, Some(3));
    let end = completed("reply one", 5);
    assert!(store.finish_turn(&fence, "t1", &end).await.unwrap());
    assert!(
        !store.finish_turn(&fence, "t1", &end).await.unwrap(),
        "a finished turn changed again"
    );
    // The turn is over: a late commit from its writer is refused.
    let stale = store
        .commit_turn_message(&fence, &assistant("t1", "late", 6))
        .await
        .unwrap();
    assert_eq!(stale, None);
    let ended = store.turn("t1").await.unwrap().unwrap();
    assert_eq!(
        (ended.status, ended.reply.as_deref(), ended.ended_at_ms),
        (TurnStatus::Completed, Some("reply one"), Some(5))
    );
    let second = claimed(store.claim_next_turn(&fence, "s", 7).await.unwrap());
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
    let completed_event = &store.events_after("s", 0, 100).await.unwrap()[3];
    assert_eq!(
        completed_event.payload,
        serde_json::json!({"turnId": "t1", "status": "completed", "reply": "reply one"})
    );
    assert_eq!(store.events_after("s", 3, 1).await.unwrap()[0].seq, 4);
    let sessions = store.sessions().await.unwrap();
    assert_eq!(sessions[0].active_turn_id.as_deref(), Some("t2"));
    // A failure is recorded with its code, and its event carries it.
    let failed = TurnEnd {
        status: TurnStatus::Failed,
        reply: None,
        error_code: Some("MODEL_FAILURE".into()),
        error_message: Some("boom".into()),
        usage: None,
        now_ms: 8,
    };
    assert!(store.finish_turn(&fence, "t2", &failed).await.unwrap());
    let last = store.events_after("s", 5, 10).await.unwrap();
    assert_eq!(
        (last[0].kind.as_str(), &last[0].payload),
        (
            "turn.failed",
            &serde_json::json!({"turnId": "t2", "status": "failed",
                "error": {"code": "MODEL_FAILURE", "message": "boom"}})
        )
    );
}

/// Many dispatchers claiming one session at once start exactly one turn: the running-turn fence.
async fn concurrent_claims_run_one_turn_per_session(target: Target) {
    let store = target.open().await;
    let fence = lease(&store).await;
    for index in 0..4 {
        store
            .admit_user_message(&message(
                "s",
                &format!("t{index}"),
                "go",
                None,
                QueueMode::Followup,
            ))
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for now_ms in 0..16 {
        let store = Arc::clone(&store);
        let fence = fence.clone();
        tasks.push(tokio::spawn(async move {
            match store.claim_next_turn(&fence, "s", now_ms).await.unwrap() {
                ClaimOutcome::Claimed(turn) => Some(*turn),
                _ => None,
            }
        }));
    }
    let mut claimed = Vec::new();
    for task in tasks {
        claimed.extend(task.await.unwrap());
    }
    assert_eq!(
        claimed
            .iter()
            .map(|turn| turn.turn_id.as_str())
            .collect::<Vec<_>>(),
        vec!["t0"]
    );
    let started = store
        .events_after("s", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .filter(|event| event.kind == "turn.started")
        .count();
    assert_eq!(started, 1);
    assert_eq!(store.figures().await.unwrap().n_queued_turns, 3);
}

async fn an_idempotency_key_returns_the_same_turn_and_stores_nothing_new(target: Target) {
    let store = target.open().await;
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
    assert_eq!(store.turn("t-other").await.unwrap(), None);
    // The same key in another session is another message.
    let other = store
        .admit_user_message(&message("s2", "t3", "hi", Some("k"), QueueMode::Followup))
        .await
        .unwrap();
    assert!(other.created);
}

async fn concurrent_duplicates_create_one_turn(target: Target) {
    let store = target.open().await;
    let mut tasks = Vec::new();
    for index in 0..16 {
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
    let mut turn_ids = BTreeSet::new();
    let mut created = 0;
    for task in tasks {
        let admitted = task.await.unwrap();
        turn_ids.insert(admitted.turn.turn_id);
        created += usize::from(admitted.created);
    }
    assert_eq!(turn_ids.len(), 1);
    assert_eq!(created, 1);
    assert_eq!(store.transcript("s").await.unwrap().len(), 1);
    assert_eq!(store.events_after("s", 0, 100).await.unwrap().len(), 1);
}

/// Admissions, turn commits and events racing on one session get contiguous sequence numbers,
/// and every acknowledged message is stored exactly once.
async fn concurrent_appends_get_contiguous_sequence_numbers(target: Target) {
    const EACH: usize = 24;
    let store = target.open().await;
    let fence = lease(&store).await;
    store
        .admit_user_message(&message("s", "running", "start", None, QueueMode::Followup))
        .await
        .unwrap();
    claimed(store.claim_next_turn(&fence, "s", 2).await.unwrap());
    let mut tasks = Vec::new();
    for index in 0..EACH {
        let writer = Arc::clone(&store);
        let fence = fence.clone();
        tasks.push(tokio::spawn(async move {
            let seq = writer
                .commit_turn_message(&fence, &assistant("running", &format!("a{index}"), 3))
                .await
                .unwrap();
            assert!(seq.is_some());
        }));
        let writer = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            writer
                .admit_user_message(&message(
                    "s",
                    &format!("q{index}"),
                    &format!("u{index}"),
                    None,
                    QueueMode::Followup,
                ))
                .await
                .unwrap();
        }));
        let writer = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            writer
                .append_event("s", "note", &serde_json::json!({"n": index}), 3)
                .await
                .unwrap();
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let transcript = store.transcript("s").await.unwrap();
    let seqs: Vec<i64> = transcript.iter().map(|m| m.seq).collect();
    let expected: Vec<i64> = (1..=i64::try_from(1 + 2 * EACH).unwrap()).collect();
    assert_eq!(seqs, expected, "transcript seqs have gaps or repeats");
    let contents: BTreeSet<&str> = transcript.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(contents.len(), 1 + 2 * EACH, "a message was stored twice");
    let events = store.events_after("s", 0, 1000).await.unwrap();
    let event_seqs: Vec<i64> = events.iter().map(|e| e.seq).collect();
    // turn.queued for the first turn, turn.started, then a note and a turn.queued per index.
    let expected: Vec<i64> = (1..=i64::try_from(2 + 2 * EACH).unwrap()).collect();
    assert_eq!(event_seqs, expected, "event seqs have gaps or repeats");
    let turn_numbers: BTreeSet<i64> = {
        let mut numbers = BTreeSet::new();
        for index in 0..EACH {
            let turn = store.turn(&format!("q{index}")).await.unwrap().unwrap();
            numbers.insert(turn.turn_no);
        }
        numbers
    };
    let expected: BTreeSet<i64> = (2..=i64::try_from(1 + EACH).unwrap()).collect();
    assert_eq!(turn_numbers, expected);
}

async fn collect_joins_the_queued_turn(target: Target) {
    let store = target.open().await;
    let fence = lease(&store).await;
    store
        .admit_user_message(&message("s", "t1", "running", None, QueueMode::Followup))
        .await
        .unwrap();
    claimed(store.claim_next_turn(&fence, "s", 2).await.unwrap());
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
    assert!(b.created, "the joined message is stored");
    let texts: Vec<String> = store
        .turn_user_messages("t2")
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.content)
        .collect();
    assert_eq!(texts, vec!["a", "b"]);
    assert_eq!(store.turn("t3").await.unwrap(), None);
}

/// A Gateway that stopped (its lease expired) leaves its running turns to be interrupted by
/// the next lease of its replica id, never replayed; queued turns stay queued.
async fn running_turns_become_interrupted_and_queued_ones_stay_queued(target: Target) {
    {
        let store = target.open().await;
        // Long enough for the turns to be claimed and checked on a busy machine.
        let fence = lease_for(&store, "r1", 4_000).await;
        for session in ["s", "r"] {
            store
                .admit_user_message(&message(
                    session,
                    &format!("{session}1"),
                    "one",
                    None,
                    QueueMode::Followup,
                ))
                .await
                .unwrap();
            store
                .admit_user_message(&message(
                    session,
                    &format!("{session}2"),
                    "two",
                    None,
                    QueueMode::Followup,
                ))
                .await
                .unwrap();
            claimed(store.claim_next_turn(&fence, session, 2).await.unwrap());
        }
    }
    let store = target.open().await;
    // While the earlier lease lives, its turns are its own.
    assert!(store.interrupt_orphaned_turns().await.unwrap().is_empty());
    tokio::time::sleep(std::time::Duration::from_millis(4_200)).await;
    let fence = lease(&store).await;
    assert_eq!(fence.epoch, 2);
    let interrupted = store.interrupt_orphaned_turns().await.unwrap();
    assert_eq!(
        interrupted
            .iter()
            .map(|turn| (turn.turn_id.as_str(), turn.status))
            .collect::<Vec<_>>(),
        vec![
            ("r1", TurnStatus::Interrupted),
            ("s1", TurnStatus::Interrupted)
        ]
    );
    let stored = store.turn("s1").await.unwrap().unwrap();
    assert_eq!(
        (stored.status, stored.error_code.as_deref()),
        (TurnStatus::Interrupted, Some("INTERRUPTED"))
    );
    assert!(stored.ended_at_ms.is_some());
    let failed = store.events_after("s", 3, 10).await.unwrap();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].kind, "turn.failed");
    assert_eq!(failed[0].payload["status"], "interrupted");
    assert_eq!(failed[0].payload["error"]["code"], "INTERRUPTED");
    assert_eq!(
        store.turn("s2").await.unwrap().unwrap().status,
        TurnStatus::Queued
    );
    assert!(
        store.interrupt_orphaned_turns().await.unwrap().is_empty(),
        "an interrupted turn was interrupted again"
    );
    assert!(
        !store
            .finish_turn(&fence, "s1", &completed("late", 11))
            .await
            .unwrap(),
        "an interrupted turn was finished by its stale runtime"
    );
    assert_eq!(
        store.sessions_with_queued_turns().await.unwrap(),
        vec!["r".to_owned(), "s".to_owned()]
    );
    assert_eq!(
        store
            .claim_next_turn(&fence, "s", 10)
            .await
            .map(claimed)
            .unwrap()
            .turn_id,
        "s2"
    );
}

async fn checkpoints_keep_the_latest_order_by_save_and_prune_the_rest(target: Target) {
    let store = target.open().await;
    store
        .admit_user_message(&message("s", "t1", "one", None, QueueMode::Followup))
        .await
        .unwrap();
    assert_eq!(store.latest_checkpoint("s").await.unwrap(), None);
    let manifest = |n: u64| {
        let mut entry = one_file(&format!("m{n}")).entries.remove(0);
        entry.size = n;
        CheckpointManifest::report(vec![entry], OmittedPaths::default())
    };
    for (n, now_ms) in [(1, 10), (2, 20), (3, 20), (4, 30)] {
        store
            .save_checkpoint("s", &format!("c{n}"), &manifest(n), now_ms, None)
            .await
            .unwrap();
    }
    assert_eq!(
        store.latest_checkpoint("s").await.unwrap(),
        Some(("c4".to_owned(), manifest(4)))
    );
    // Saving an existing checkpoint again makes it the latest and moves it forward.
    store
        .save_checkpoint("s", "c1", &manifest(1), 40, None)
        .await
        .unwrap();
    assert_eq!(store.latest_checkpoint("s").await.unwrap().unwrap().0, "c1");
    let ids = |list: Vec<(String, CheckpointManifest)>| -> Vec<String> {
        list.into_iter().map(|(id, _)| id).collect()
    };
    // Newest first; c3 was saved after c2 in the same millisecond.
    assert_eq!(
        ids(store.recent_checkpoints("s", "c1", 10).await.unwrap()),
        vec!["c4", "c3", "c2"]
    );
    assert_eq!(
        ids(store.recent_checkpoints("s", "c4", 2).await.unwrap()),
        vec!["c1", "c3"]
    );
    assert_eq!(store.prune_checkpoints("s", 2).await.unwrap(), 2);
    assert_eq!(
        ids(store.recent_checkpoints("s", "", 10).await.unwrap()),
        vec!["c1", "c4"]
    );
    // The session's latest accepted checkpoint is kept even when it is not among the newest.
    store
        .save_checkpoint("s", "c5", &manifest(5), 50, None)
        .await
        .unwrap();
    store
        .save_checkpoint("s", "c1", &manifest(1), 45, None)
        .await
        .unwrap();
    assert_eq!(
        store.prune_checkpoints("s", 1).await.unwrap(),
        1,
        "c4 goes; c5 is newest and c1 is the latest accepted"
    );
    assert_eq!(
        ids(store.recent_checkpoints("s", "", 10).await.unwrap()),
        vec!["c5", "c1"]
    );
}

async fn checkpoint_blob_garbage_is_what_nothing_refers_to(target: Target) {
    let store = target.open().await;
    let mut new = message("s", "t1", "see attached", None, QueueMode::Followup);
    new.attachments = vec![attachment("attached")];
    store.admit_user_message(&new).await.unwrap();
    let blob = |id: &str, size_bytes| CheckpointBlob {
        media_id: id.into(),
        size_bytes,
    };
    let listed = vec![
        blob("attached", 1),
        blob("artifact", 2),
        blob("in-checkpoint", 4),
        blob("pinned", 8),
        blob("orphan-b", 16),
        blob("orphan-a", 32),
    ];
    store.register_checkpoint_blobs(&listed, 1).await.unwrap();
    // Listing again keeps the first registration (and its size).
    store
        .register_checkpoint_blobs(&[blob("orphan-a", 999)], 2)
        .await
        .unwrap();
    store.register_checkpoint_blobs(&[], 2).await.unwrap();
    store
        .append_event(
            "s",
            "artifact.stored",
            &serde_json::json!({"mediaId": "artifact"}),
            3,
        )
        .await
        .unwrap();
    store.pin_media("pinned", "upload", 3).await.unwrap();
    store.pin_media("pinned", "upload", 4).await.unwrap();
    store
        .save_checkpoint(
            "s",
            "c1",
            &CheckpointManifest::report(
                vec![one_file("in-checkpoint").entries.remove(0), link("d", "f")],
                OmittedPaths::default(),
            ),
            5,
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        store.checkpoint_blob_garbage().await.unwrap(),
        vec![blob("orphan-a", 32), blob("orphan-b", 16)]
    );
    assert_eq!(store.figures().await.unwrap().checkpoint_bytes, 63);
    store.forget_checkpoint_blob("orphan-a").await.unwrap();
    store.forget_checkpoint_blob("never-listed").await.unwrap();
    assert_eq!(
        store.checkpoint_blob_garbage().await.unwrap(),
        vec![blob("orphan-b", 16)]
    );
    assert_eq!(store.figures().await.unwrap().checkpoint_bytes, 31);
}

async fn a_codex_thread_binding_is_kept_and_replaced_per_session(target: Target) {
    {
        let store = target.open().await;
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
    let store = target.open().await;
    assert_eq!(
        store.codex_thread("s").await.unwrap().as_deref(),
        Some("thread-b")
    );
    assert_eq!(store.codex_thread("nope").await.unwrap(), None);
}

async fn finding_4_a_session_is_bound_to_its_first_node_and_moves_only_when_idle(target: Target) {
    let store = target.open().await;
    let fence = lease(&store).await;
    store
        .admit_user_message(&message("s", "t1", "one", None, QueueMode::Followup))
        .await
        .unwrap();
    assert_eq!(store.session_node("s").await.unwrap(), None);
    // Racing dispatchers: the first binding wins and every one learns the same owner.
    let mut tasks = Vec::new();
    for index in 0..8 {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            store
                .bind_session_node("s", &format!("node-{index}"), 1)
                .await
                .unwrap()
        }));
    }
    let mut owners = BTreeSet::new();
    for task in tasks {
        owners.insert(task.await.unwrap());
    }
    assert_eq!(owners.len(), 1, "{owners:?}");
    let owner = owners.into_iter().next().unwrap();
    assert_eq!(
        store.bind_session_node("s", "node-b", 2).await.unwrap(),
        owner
    );
    assert!(store.bind_session_node("nope", "node-a", 3).await.is_err());
    assert_eq!(
        store.sessions().await.unwrap()[0].node_id.as_deref(),
        Some(owner.as_str())
    );

    // A running turn blocks a move.
    link_here(&store, &fence, &owner).await;
    let claimed = claimed(store.claim_next_turn(&fence, "s", 4).await.unwrap());
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
        .finish_turn(&fence, &claimed.turn_id, &completed("ok", 6))
        .await
        .unwrap();
    assert_eq!(
        store
            .move_session_node("s", Some("node-b"), 7)
            .await
            .unwrap(),
        SessionMove::Moved {
            from: Some(owner.clone())
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

/// What only the PostgreSQL backend has: a server shared by Gateways, and a network between.
mod postgres_only {
    use gatehouse_protocol::error::ErrorCode;
    use gatehouse_store::location::StoreLocation;
    use gatehouse_store::records::QueueMode;
    use pretty_assertions::assert_eq;
    use sqlx::Connection;

    use super::claimed;
    use super::lease;
    use super::message;
    use super::support::Target;

    /// Connects to the target's database directly, as an operator would with psql.
    async fn connect(target: &Target) -> sqlx::PgConnection {
        let StoreLocation::Remote(database) = target.location() else {
            panic!("not a PostgreSQL target");
        };
        sqlx::PgConnection::connect(database.url()).await.unwrap()
    }

    /// Without the migration lock, concurrent `CREATE TABLE`s of one migration fail all but one
    /// starting Gateway.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn gateways_starting_at_once_migrate_one_after_the_other() {
        let target = std::sync::Arc::new(Target::postgres().await);
        let mut starts = Vec::new();
        for _ in 0..6 {
            let target = std::sync::Arc::clone(&target);
            starts.push(tokio::spawn(async move {
                let store = target.open().await;
                store.ping().await.unwrap();
            }));
        }
        for start in starts {
            start.await.unwrap();
        }
        let mut connection = connect(&target).await;
        let applied: Vec<i64> =
            sqlx::query_scalar("SELECT version FROM _sqlx_migrations ORDER BY version")
                .fetch_all(&mut connection)
                .await
                .unwrap();
        // Every migration file once, in order.
        let n_files = std::fs::read_dir(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations/postgres"),
        )
        .unwrap()
        .filter(|entry| {
            entry
                .as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".sql")
        })
        .count();
        let expected: Vec<i64> = (1..=i64::try_from(n_files).unwrap()).collect();
        assert!(expected.len() >= 9, "{expected:?}");
        assert_eq!(applied, expected);
    }

    /// The server drops the connection in the middle of an admission's transaction (a trigger
    /// terminates the backend when the admission's `turn.queued` event is written, after its
    /// session and turn rows): the admission fails with STORE_UNAVAILABLE, none of it is stored,
    /// and the next call runs on a fresh connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_connection_lost_mid_admission_stores_nothing_and_the_pool_reconnects() {
        let target = Target::postgres().await;
        let store = target.open().await;
        store
            .admit_user_message(&message("s", "t1", "before", None, QueueMode::Followup))
            .await
            .unwrap();
        let mut admin = connect(&target).await;
        sqlx::raw_sql(
            "CREATE FUNCTION lose_connection() RETURNS trigger LANGUAGE plpgsql AS $$ \
             BEGIN \
                 IF NEW.payload_json ->> 'turnId' LIKE 'doomed%' THEN \
                     PERFORM pg_terminate_backend(pg_backend_pid()); \
                 END IF; \
                 RETURN NEW; \
             END $$; \
             CREATE TRIGGER lose_connection BEFORE INSERT ON session_events \
                 FOR EACH ROW EXECUTE FUNCTION lose_connection();",
        )
        .execute(&mut admin)
        .await
        .unwrap();
        for (session, turn_id) in [("s", "doomed-1"), ("new-session", "doomed-2")] {
            let error = store
                .admit_user_message(&message(
                    session,
                    turn_id,
                    "lost",
                    None,
                    QueueMode::Followup,
                ))
                .await
                .unwrap_err();
            assert_eq!(error.code(), ErrorCode::StoreUnavailable, "{error:?}");
            assert_eq!(store.turn(turn_id).await.unwrap(), None);
        }
        let sessions: Vec<String> = store
            .sessions()
            .await
            .unwrap()
            .into_iter()
            .map(|session| session.session_key)
            .collect();
        assert_eq!(
            sessions,
            vec!["s".to_owned()],
            "a half-admitted session stayed"
        );
        assert_eq!(store.transcript("s").await.unwrap().len(), 1);
        assert_eq!(store.events_after("s", 0, 10).await.unwrap().len(), 1);
        store.ping().await.unwrap();
        let after = store
            .admit_user_message(&message("s", "t2", "after", None, QueueMode::Followup))
            .await
            .unwrap();
        assert_eq!(
            after.turn.turn_no, 2,
            "the lost admission used a turn number"
        );
        let seqs: Vec<i64> = store
            .transcript("s")
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs, vec![1, 2], "the lost admission left a sequence gap");
    }

    /// A server nobody listens for answers STORE_UNAVAILABLE, promptly, rather than hanging.
    #[tokio::test]
    async fn an_unreachable_server_is_store_unavailable() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            listener.local_addr().unwrap().port()
        };
        let location: StoreLocation = format!("postgres://gatehouse@127.0.0.1:{port}/gatehouse")
            .parse()
            .unwrap();
        let Err(error) = gatehouse_store::open(&location).await else {
            panic!("a store opened with no server");
        };
        assert_eq!(error.code(), ErrorCode::StoreUnavailable, "{error:?}");
        let chain = format!("{error:?}");
        assert!(
            chain.contains("refused"),
            "the engine's reason is lost: {chain}"
        );
    }

    /// PostgreSQL refuses NUL in `text` and `jsonb`; text from a node or a model that carries
    /// one is stored with U+FFFD instead, so a turn still ends and an audit row is still kept.
    #[tokio::test]
    async fn text_with_nul_is_stored_with_a_replacement_and_the_turn_still_ends() {
        use gatehouse_store::records::NewTurnMessage;
        use gatehouse_store::records::TurnEnd;
        use gatehouse_store::records::TurnStatus;

        let store = Target::postgres().await.open().await;
        let fence = lease(&store).await;
        store
            .admit_user_message(&message("s", "t1", "user\0text", None, QueueMode::Followup))
            .await
            .unwrap();
        claimed(store.claim_next_turn(&fence, "s", 2).await.unwrap());
        let tool = NewTurnMessage {
            turn_id: "t1".into(),
            role: "tool".into(),
            content: "out\0put".into(),
            tool_name: Some("ex\0ec".into()),
            now_ms: 3,
        };
        store
            .commit_turn_message(&fence, &tool)
            .await
            .unwrap()
            .unwrap();
        let end = TurnEnd {
            status: TurnStatus::Completed,
            reply: Some("re\0ply".into()),
            error_code: None,
            error_message: None,
            usage: None,
            now_ms: 4,
        };
        assert!(
            store.finish_turn(&fence, "t1", &end).await.unwrap(),
            "the turn ended"
        );
        let mut audit = super::audit_event("tool.\0denied", 5);
        audit.details = serde_json::json!({"turn\0Id": ["a\0b"]});
        store.append_audit(&audit).await.unwrap();

        let turn = store.turn("t1").await.unwrap().unwrap();
        assert_eq!(
            (turn.status, turn.reply.as_deref()),
            (TurnStatus::Completed, Some("re\u{fffd}ply"))
        );
        let contents: Vec<(String, Option<String>)> = store
            .transcript("s")
            .await
            .unwrap()
            .into_iter()
            .map(|message| (message.content, message.tool_name))
            .collect();
        assert_eq!(
            contents,
            vec![
                ("user\u{fffd}text".to_owned(), None),
                ("out\u{fffd}put".to_owned(), Some("ex\u{fffd}ec".to_owned())),
            ]
        );
        let events = store.events_after("s", 0, 100).await.unwrap();
        let completed = events.last().unwrap();
        assert_eq!(completed.payload["reply"], "re\u{fffd}ply");
        let rows = store.audit_after(0, 10).await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].action, "tool.\u{fffd}denied");
        assert_eq!(
            rows[0].details,
            serde_json::json!({"turn\u{fffd}Id": ["a\u{fffd}b"]})
        );
    }

    /// The password comes from the variable the URL names, never from the URL.
    #[tokio::test]
    async fn a_password_variable_that_is_not_set_is_store_unavailable_with_its_name() {
        let url = super::support::fresh_postgres_database().await;
        let location: StoreLocation = format!("{url}?password-env=GATEHOUSE_TEST_UNSET_PASSWORD")
            .parse()
            .unwrap();
        let Err(error) = gatehouse_store::open(&location).await else {
            panic!("a store opened without its password");
        };
        assert_eq!(error.code(), ErrorCode::StoreUnavailable);
        let chain = format!("{error:?}");
        assert!(chain.contains("GATEHOUSE_TEST_UNSET_PASSWORD"), "{chain}");
    }

    /// The password in the file `passfile=` names reaches the server. The test server asks
    /// members of `gatehouse_password_users` for a password (scripts/test writes that line into
    /// its `pg_hba.conf`), so the right line logs in and a wrong one is refused: the test would
    /// fail if the file were not read, or if the server let the role in without a password.
    #[tokio::test]
    async fn a_passfile_password_logs_in_and_a_wrong_one_is_refused() {
        use std::os::unix::fs::PermissionsExt;

        let url = url::Url::parse(&super::support::fresh_postgres_database().await).unwrap();
        let database = url.path().trim_start_matches('/').to_owned();
        let role = format!("{database}_pw");
        member_role(
            &url,
            "gatehouse_password_users",
            &role,
            &database,
            "PASSWORD 'right-pass'",
        )
        .await;
        let (host, port) = (url.host_str().unwrap(), url.port().unwrap_or(5432));
        let dir = tempfile::tempdir().unwrap();
        let login = |password: &str| {
            let path = dir.path().join(format!("pgpass-{password}"));
            std::fs::write(
                &path,
                format!("{host}:{port}:{database}:{role}:{password}\n"),
            )
            .unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            let location: StoreLocation = format!(
                "postgres://{role}@{host}:{port}/{database}?passfile={}",
                path.display()
            )
            .parse()
            .unwrap();
            let StoreLocation::Remote(location) = location else {
                panic!("not postgres");
            };
            let options = location.connect_options().unwrap();
            async move { sqlx::PgConnection::connect_with(&options).await }
        };

        let mut connection = login("right-pass").await.unwrap();
        let user: String = sqlx::query_scalar("SELECT current_user::text")
            .fetch_one(&mut connection)
            .await
            .unwrap();
        assert_eq!(user, role);
        let Err(refused) = login("wrong-pass").await else {
            panic!("the server let the role in with a wrong password");
        };
        let code = refused
            .as_database_error()
            .and_then(|error| error.code().map(std::borrow::Cow::into_owned));
        assert_eq!(code.as_deref(), Some("28P01"), "{refused}");
    }

    /// Creates `role` as a login member of `group` (made when missing, by whichever concurrent
    /// test gets there first) that owns `database`, so it may migrate it.
    async fn member_role(url: &url::Url, group: &str, role: &str, database: &str, extra: &str) {
        let mut admin = sqlx::PgConnection::connect(url.as_str()).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DO $$ BEGIN CREATE ROLE {group} NOLOGIN; \
             EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL; END $$; \
             CREATE ROLE {role} LOGIN {extra} IN ROLE {group}; \
             ALTER DATABASE {database} OWNER TO {role}"
        )))
        .execute(&mut admin)
        .await
        .unwrap();
    }

    /// The store reaches its server over TLS and verifies it. The test server admits members of
    /// `gatehouse_tls_users` over TLS only (scripts/test's `pg_hba.conf`), with a certificate
    /// signed by the test CA `GATEHOUSE_TEST_POSTGRES_CA` names: such a role opens the store
    /// with `sslmode=verify-full` and that CA, and its session is encrypted; in clear the
    /// server refuses it; without the CA the server's certificate is not trusted.
    #[tokio::test]
    async fn a_tls_only_role_opens_the_store_over_verified_tls_and_never_in_clear() {
        const CA_ENV: &str = "GATEHOUSE_TEST_POSTGRES_CA";
        let ca = std::env::var(CA_ENV).unwrap_or_else(|_| {
            panic!("{CA_ENV} is not set: run scripts/test, which starts the test server with TLS")
        });
        let url = url::Url::parse(&super::support::fresh_postgres_database().await).unwrap();
        let database = url.path().trim_start_matches('/').to_owned();
        let role = format!("{database}_tls");
        member_role(&url, "gatehouse_tls_users", &role, &database, "").await;
        let at = |params: &[(&str, &str)]| {
            let mut target = url.clone();
            target.set_username(&role).unwrap();
            target.query_pairs_mut().clear().extend_pairs(params);
            let StoreLocation::Remote(location) = target.as_str().parse().unwrap() else {
                panic!("not postgres");
            };
            location
        };

        let verified = at(&[("sslmode", "verify-full"), ("sslrootcert", &ca)]);
        let store = gatehouse_store::open(&StoreLocation::Remote(verified.clone()))
            .await
            .unwrap();
        store.ping().await.unwrap();
        let options = verified.connect_options().unwrap();
        let mut connection = sqlx::PgConnection::connect_with(&options).await.unwrap();
        let encrypted: bool =
            sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
                .fetch_one(&mut connection)
                .await
                .unwrap();
        assert!(encrypted, "the session is not encrypted");

        let clear = at(&[("sslmode", "disable")]).connect_options().unwrap();
        let refused = sqlx::PgConnection::connect_with(&clear).await.unwrap_err();
        let code = refused
            .as_database_error()
            .and_then(|error| error.code().map(std::borrow::Cow::into_owned));
        assert_eq!(code.as_deref(), Some("28000"), "{refused}");
        let Err(error) =
            gatehouse_store::open(&StoreLocation::Remote(at(&[("sslmode", "disable")]))).await
        else {
            panic!("the store opened in clear");
        };
        assert_eq!(error.code(), ErrorCode::StoreUnavailable);

        let unknown_ca = at(&[("sslmode", "verify-full")]).connect_options().unwrap();
        let untrusted = sqlx::PgConnection::connect_with(&unknown_ca)
            .await
            .unwrap_err();
        // rustls's refusal, carried as an I/O error of the handshake.
        let refusal = format!("{untrusted:?}");
        assert!(refusal.contains("UnknownIssuer"), "{refusal}");
    }

    /// The pid of the session holding the Gateway's store lock in `database`, if any.
    async fn lock_holder(database: &str) -> Option<i32> {
        let mut admin = sqlx::PgConnection::connect(database).await.unwrap();
        sqlx::query_scalar(
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
             AND classid = ($1 >> 32)::oid AND objid = ($1 & 4294967295)::oid \
             AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
        )
        .bind(gatehouse_store::exclusive::GATEWAY_LOCK_KEY)
        .fetch_optional(&mut admin)
        .await
        .unwrap()
    }

    /// One direction of a forwarded connection: copies `from` to `to` until either ends, or
    /// stops carrying anything (holding both open) once `frozen` is set.
    async fn carry(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        frozen: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) {
        use tokio::io::AsyncReadExt;
        use tokio::io::AsyncWriteExt;

        let mut buffer = vec![0_u8; 8192];
        loop {
            let read = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(read) => read,
            };
            if frozen.load(std::sync::atomic::Ordering::SeqCst) {
                // A stalled path: the bytes are lost and the sockets stay open.
                std::future::pending::<()>().await;
            }
            if to.write_all(&buffer[..read]).await.is_err() {
                return;
            }
        }
    }

    /// The freeze switches of a [`freezable_forwarder`]'s connections, in the order they opened.
    type Switches =
        std::sync::Arc<std::sync::Mutex<Vec<std::sync::Arc<std::sync::atomic::AtomicBool>>>>;

    /// A TCP forwarder to the test server whose open connections can be frozen: they stay
    /// open but carry nothing more, as on a stalled network path, while new connections pass.
    async fn freezable_forwarder(upstream: std::net::SocketAddr) -> (u16, Switches) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let switches = Switches::default();
        let registry = std::sync::Arc::clone(&switches);
        tokio::spawn(async move {
            while let Ok((inbound, _)) = listener.accept().await {
                let Ok(outbound) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let frozen = std::sync::Arc::default();
                registry
                    .lock()
                    .unwrap()
                    .push(std::sync::Arc::clone(&frozen));
                let (client_read, client_write) = inbound.into_split();
                let (server_read, server_write) = outbound.into_split();
                tokio::spawn(carry(
                    client_read,
                    server_write,
                    std::sync::Arc::clone(&frozen),
                ));
                tokio::spawn(carry(server_read, client_write, frozen));
            }
        });
        (port, switches)
    }

    /// A stalled path to the server is not another Gateway: the lock's connection stops
    /// answering while its session still holds the lock on the server; the keeper ends that
    /// session of its own, takes the lock again on a new connection, and `lost` never fires.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stalled_lock_connection_is_taken_over_by_the_same_gateway_not_lost() {
        use gatehouse_store::exclusive::StoreLock;

        let direct = url::Url::parse(&super::support::fresh_postgres_database().await).unwrap();
        let upstream = direct.socket_addrs(|| Some(5432)).unwrap()[0];
        let (port, switches) = freezable_forwarder(upstream).await;
        let mut through = direct.clone();
        through.set_port(Some(port)).unwrap();
        let location: StoreLocation = through.as_str().parse().unwrap();
        let lock = StoreLock::acquire(&location, std::time::Duration::ZERO)
            .await
            .unwrap();
        let first = lock_holder(direct.as_str())
            .await
            .expect("the lock is held");

        for switch in switches.lock().unwrap().iter() {
            switch.store(true, std::sync::atomic::Ordering::SeqCst);
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let second = loop {
            match lock_holder(direct.as_str()).await {
                Some(pid) if pid != first => break pid,
                _ => {}
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the lock was not taken again"
            );
            let lost = tokio::time::timeout(std::time::Duration::from_millis(200), lock.lost());
            assert!(
                lost.await.is_err(),
                "the stall was taken for another gateway"
            );
        };
        assert_ne!(second, first);
        let lost = tokio::time::timeout(std::time::Duration::from_secs(3), lock.lost());
        assert!(
            lost.await.is_err(),
            "the lock was given up after it was taken again"
        );
        // Still exclusive: nobody else gets it.
        let Err(error) =
            StoreLock::acquire(&direct.as_str().parse().unwrap(), std::time::Duration::ZERO).await
        else {
            panic!("a second lock was taken");
        };
        assert_eq!(error.code(), ErrorCode::StoreInUse);
    }
}

/// The turn events the store writes itself are their typed payloads: each decodes into the type
/// its kind names, and its text is the one the hand-built payloads had (keys sorted, explicit
/// `null`s), so events stored before and after read alike.
async fn turn_events_are_their_typed_payloads(target: Target) {
    use gatehouse_store::records::EventPayload;
    use gatehouse_store::records::TurnError;
    use gatehouse_store::records::TurnFailed;
    use gatehouse_store::records::TurnQueued;
    use gatehouse_store::records::TurnStarted;

    let store = target.open().await;
    let fence = lease(&store).await;
    store
        .admit_user_message(&message("s", "t1", "one", None, QueueMode::Steer))
        .await
        .unwrap();
    claimed(store.claim_next_turn(&fence, "s", 2).await.unwrap());
    let end = TurnEnd {
        status: TurnStatus::Failed,
        reply: None,
        error_code: None,
        error_message: Some("no code".into()),
        usage: None,
        now_ms: 3,
    };
    assert!(store.finish_turn(&fence, "t1", &end).await.unwrap());
    store
        .admit_user_message(&message("s", "t2", "two", None, QueueMode::Followup))
        .await
        .unwrap();
    claimed(store.claim_next_turn(&fence, "s", 4).await.unwrap());
    store.release_replica(&fence).await.unwrap();
    store.interrupt_orphaned_turns().await.unwrap();

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

fn new_key(name: &str, hash: &str, expires_at_ms: Option<i64>) -> NewApiKey {
    NewApiKey {
        name: name.into(),
        secret_sha256: hash.into(),
        scopes: vec![Scope::Chat, Scope::Read],
        session_prefix: Some("app1-".into()),
        created_at_ms: 5,
        expires_at_ms,
        last_used_at_ms: None,
        requests_per_minute: Some(60),
        concurrent_turns: None,
        max_streams: Some(3),
        media_quota_bytes: Some(5_000_000_000),
        tokens_per_day: Some(6_000_000_000),
    }
}

/// Returns the record [`new_key`] stores, as it is read back.
fn stored_key(key: &NewApiKey, last_used_at_ms: Option<i64>) -> ApiKeyRecord {
    ApiKeyRecord {
        name: key.name.clone(),
        secret_sha256: key.secret_sha256.clone(),
        scopes: key.scopes.clone(),
        session_prefix: key.session_prefix.clone(),
        created_at_ms: key.created_at_ms,
        expires_at_ms: key.expires_at_ms,
        last_used_at_ms,
        requests_per_minute: key.requests_per_minute,
        concurrent_turns: key.concurrent_turns,
        max_streams: key.max_streams,
        media_quota_bytes: key.media_quota_bytes,
        tokens_per_day: key.tokens_per_day,
    }
}

async fn api_keys_are_created_once_per_name_listed_and_revoked(target: Target) {
    let store = target.open().await;
    let dashboard = NewApiKey {
        scopes: vec![Scope::Read],
        session_prefix: None,
        requests_per_minute: None,
        ..new_key("dashboard", "h-dashboard", None)
    };
    let app = new_key("app", "h-app", Some(1_000));
    store.insert_api_key(&dashboard).await.unwrap();
    store.insert_api_key(&app).await.unwrap();
    let duplicate = store
        .insert_api_key(&new_key("app", "h-other", None))
        .await
        .unwrap_err();
    assert_eq!(duplicate.code(), ErrorCode::AlreadyExists);
    let same_hash = store
        .insert_api_key(&new_key("other", "h-app", None))
        .await
        .unwrap_err();
    assert_eq!(same_hash.code(), ErrorCode::AlreadyExists);
    // Listed by name, and kept across a reopen.
    let store = target.open().await;
    assert_eq!(
        store.api_keys().await.unwrap(),
        vec![stored_key(&app, None), stored_key(&dashboard, None)]
    );
    assert!(store.revoke_api_key("app").await.unwrap());
    assert!(!store.revoke_api_key("app").await.unwrap());
    assert_eq!(store.use_api_key("h-app", 10).await.unwrap(), None);
    assert_eq!(
        store.api_keys().await.unwrap(),
        vec![stored_key(&dashboard, None)]
    );
    // A revoked key's name may be given to a new key.
    let again = new_key("app", "h-app-2", None);
    store.insert_api_key(&again).await.unwrap();
    assert_eq!(
        store.use_api_key("h-app-2", 10).await.unwrap(),
        Some(stored_key(&again, Some(10)))
    );
}

async fn an_api_key_is_found_by_its_hash_until_it_expires_and_records_its_use(target: Target) {
    let store = target.open().await;
    let key = new_key("app", "h-app", Some(1_000_000));
    store.insert_api_key(&key).await.unwrap();
    assert_eq!(store.use_api_key("h-unknown", 10).await.unwrap(), None);
    // The first use is recorded; a use within the resolution is not written again.
    assert_eq!(
        store.use_api_key("h-app", 100).await.unwrap(),
        Some(stored_key(&key, Some(100)))
    );
    assert_eq!(
        store.use_api_key("h-app", 200).await.unwrap(),
        Some(stored_key(&key, Some(100)))
    );
    let later = 100 + API_KEY_LAST_USED_RESOLUTION_MS;
    assert_eq!(
        store.use_api_key("h-app", later).await.unwrap(),
        Some(stored_key(&key, Some(later)))
    );
    assert_eq!(
        store.api_keys().await.unwrap(),
        vec![stored_key(&key, Some(later))]
    );
    // At its expiry it is refused, and the refusal records no use.
    assert_eq!(store.use_api_key("h-app", 1_000_000).await.unwrap(), None);
    assert_eq!(
        store.api_keys().await.unwrap(),
        vec![stored_key(&key, Some(later))]
    );
}

/// A grant names the key that uploaded a blob or a session that holds it; a prefix matches
/// session grants literally (its `_` is no wildcard), granting twice keeps one grant, and grants
/// survive a reopen.
fn blob(media_id: &str, size_bytes: u64) -> CheckpointBlob {
    CheckpointBlob {
        media_id: media_id.into(),
        size_bytes,
    }
}

async fn media_charges_count_once_per_owner_and_refuse_past_the_quota(target: Target) {
    let store = target.open().await;
    let upload = MediaChargeKind::Upload;
    let session = MediaChargeKind::Session;
    // Past 32 bits, so a narrower column would lose it.
    let big = 5_000_000_000;
    assert_eq!(
        store
            .charge_media("key:a", upload, &[blob("m1", big)], Some(big), 1)
            .await
            .unwrap(),
        MediaCharge::Charged {
            new_bytes: big,
            used_bytes: big
        }
    );
    // The same blob again, even twice in one call, costs nothing more.
    assert_eq!(
        store
            .charge_media(
                "key:a",
                upload,
                &[blob("m1", big), blob("m1", big)],
                Some(big),
                2
            )
            .await
            .unwrap(),
        MediaCharge::Charged {
            new_bytes: 0,
            used_bytes: big
        }
    );
    // One byte more is refused, and nothing of the call is charged.
    assert_eq!(
        store
            .charge_media(
                "key:a",
                session,
                &[blob("m2", 1), blob("m1", big)],
                Some(big),
                3
            )
            .await
            .unwrap(),
        MediaCharge::OverQuota {
            used_bytes: big,
            new_bytes: big + 1
        }
    );
    assert_eq!(store.media_charged_bytes("key:a").await.unwrap(), big);
    // Another owner has a share of its own.
    assert!(matches!(
        store
            .charge_media("key:b", session, &[blob("m2", 7)], Some(10), 4)
            .await
            .unwrap(),
        MediaCharge::Charged { new_bytes: 7, .. }
    ));
    let store = target.open().await;
    assert_eq!(store.media_charged_bytes("key:b").await.unwrap(), 7);
    // A session charge goes when its blob is collected; an upload charge when it is released.
    store.forget_checkpoint_blob("m2").await.unwrap();
    assert_eq!(store.media_charged_bytes("key:b").await.unwrap(), 0);
    store.uncharge_media("key:a", upload, "m1").await.unwrap();
    assert_eq!(store.media_charged_bytes("key:a").await.unwrap(), 0);
}

async fn a_released_upload_is_collectable_only_when_no_other_upload_holds_it(target: Target) {
    let store = target.open().await;
    let upload = MediaChargeKind::Upload;
    for owner in ["key:a", "key:b"] {
        store
            .charge_media(owner, upload, &[blob("m1", 10)], None, 1)
            .await
            .unwrap();
        store.grant_media("m1", owner, 1).await.unwrap();
    }
    store.pin_media("m1", "upload", 1).await.unwrap();
    // A key that never uploaded it releases nothing.
    assert_eq!(
        store.release_upload(Some("key:c"), "m1", 2).await.unwrap(),
        ReleasedUpload {
            released: false,
            unpinned: false
        }
    );
    // The first uploader's release leaves the blob pinned for the second.
    assert_eq!(
        store.release_upload(Some("key:a"), "m1", 2).await.unwrap(),
        ReleasedUpload {
            released: true,
            unpinned: false
        }
    );
    assert!(!store.media_granted("m1", "key:a", "x-").await.unwrap());
    assert!(store.media_granted("m1", "key:b", "x-").await.unwrap());
    assert!(store.checkpoint_blob_garbage().await.unwrap().is_empty());
    assert_eq!(
        store.release_upload(Some("key:b"), "m1", 3).await.unwrap(),
        ReleasedUpload {
            released: true,
            unpinned: true
        }
    );
    let store = target.open().await;
    let garbage = store.checkpoint_blob_garbage().await.unwrap();
    assert_eq!(
        garbage
            .iter()
            .map(|blob| blob.media_id.as_str())
            .collect::<Vec<_>>(),
        ["m1"]
    );
    // An upload made before shares existed (pinned, charged to no key) is never unpinned.
    store.pin_media("m9", "upload", 1).await.unwrap();
    store
        .charge_media("legacy", upload, &[blob("m9", 0)], None, 1)
        .await
        .unwrap();
    store
        .charge_media("key:a", upload, &[blob("m9", 4)], None, 1)
        .await
        .unwrap();
    assert_eq!(
        store.release_upload(Some("key:a"), "m9", 2).await.unwrap(),
        ReleasedUpload {
            released: true,
            unpinned: false
        }
    );
    // An admin's release takes every upload charge.
    assert!(store.release_upload(None, "m9", 3).await.unwrap().unpinned);
}

async fn a_session_keeps_its_first_owner(target: Target) {
    let store = target.open().await;
    assert_eq!(store.session_owner("s").await.unwrap(), None);
    assert_eq!(
        store.claim_session_owner("s", "key:a", 1).await.unwrap(),
        "key:a"
    );
    assert_eq!(
        store.claim_session_owner("s", "operator", 2).await.unwrap(),
        "key:a"
    );
    let store = target.open().await;
    assert_eq!(
        store.session_owner("s").await.unwrap().as_deref(),
        Some("key:a")
    );
    // A key is found by its hash without recording a use.
    let key = new_key("app", "h-app", Some(1));
    store.insert_api_key(&key).await.unwrap();
    assert_eq!(
        store.api_key_by_hash("h-app").await.unwrap(),
        Some(stored_key(&key, None))
    );
    assert_eq!(store.api_key_by_hash("h-none").await.unwrap(), None);
}

async fn media_grants_name_a_key_or_the_sessions_under_a_prefix(target: Target) {
    let store = target.open().await;
    store.grant_media("m1", "key:aaa", 1).await.unwrap();
    store.grant_media("m1", "key:aaa", 2).await.unwrap();
    store.grant_media("m2", "session:app_1-x", 1).await.unwrap();
    let store = target.open().await;
    assert!(store.media_granted("m1", "key:aaa", "app1-").await.unwrap());
    assert!(!store.media_granted("m1", "key:bbb", "app1-").await.unwrap());
    assert!(!store.media_granted("m2", "key:aaa", "app1-").await.unwrap());
    assert!(
        store
            .media_granted("m2", "key:bbb", "app_1-")
            .await
            .unwrap()
    );
    assert!(store.media_granted("m2", "key:bbb", "app_").await.unwrap());
    // `_` in a prefix is a character, not a wildcard: `appX1-` would match `app_1-` in LIKE.
    assert!(
        !store
            .media_granted("m2", "key:bbb", "appX1-")
            .await
            .unwrap()
    );
    assert!(
        !store
            .media_granted("m2", "key:bbb", "app_1-xy")
            .await
            .unwrap()
    );
    assert!(!store.media_granted("m3", "key:aaa", "").await.unwrap());
}

async fn a_completed_turns_usage_is_stored_with_it(target: Target) {
    // Past 32 bits, so a column narrower than 64 bits would lose it.
    let usage = TokenUsage {
        input_tokens: 5_000_000_000,
        output_tokens: 7,
        total_tokens: 5_000_000_007,
        ..TokenUsage::default()
    };
    {
        let store = target.open().await;
        let fence = lease(&store).await;
        for (turn_id, now_ms) in [("t1", 1), ("t2", 3)] {
            store
                .admit_user_message(&message("s", turn_id, "hi", None, QueueMode::Followup))
                .await
                .unwrap();
            claimed(store.claim_next_turn(&fence, "s", now_ms).await.unwrap());
            let mut end = completed("ok", now_ms + 1);
            if turn_id == "t1" {
                end.usage = Some(usage.clone());
            }
            assert!(store.finish_turn(&fence, turn_id, &end).await.unwrap());
        }
    }
    let store = target.open().await;
    let first = store.turn("t1").await.unwrap().unwrap();
    assert_eq!(
        (first.status, first.usage),
        (TurnStatus::Completed, Some(usage))
    );
    let second = store.turn("t2").await.unwrap().unwrap();
    assert_eq!(
        second.usage, None,
        "a turn whose model reported nothing has no usage"
    );
}

async fn usage_counted_per_call_is_summed_by_key_session_and_day(target: Target) {
    let call = |input_tokens, cached_input_tokens, output_tokens, retries| TokenUsage {
        input_tokens,
        cached_input_tokens,
        output_tokens,
        total_tokens: input_tokens + cached_input_tokens + output_tokens,
        model_calls: 1,
        retries,
        model: Some(String::from("m1")),
    };
    let day = gatehouse_store::records::DAY_MS;
    {
        let store = target.open().await;
        let fence = lease(&store).await;
        // t1 (key k1, session a, day 0): two calls, then a failure: both calls stay counted,
        // and the end's own report does not replace them. t2 (k1, b, day 1): one call and a
        // completion. t3 (no key, a, day 1): reported only at its end. t4 (k2, b, day 1): none.
        let turns = [
            ("t1", "a", Some("k1"), 10),
            ("t2", "b", Some("k1"), day + 10),
            ("t3", "a", None, day + 20),
            ("t4", "b", Some("k2"), day + 30),
        ];
        for (turn_id, session, key, now_ms) in turns {
            let mut admitted = message(session, turn_id, "hi", None, QueueMode::Followup);
            admitted.api_key = key.map(str::to_owned);
            admitted.now_ms = now_ms;
            store.admit_user_message(&admitted).await.unwrap();
        }
        claimed(store.claim_next_turn(&fence, "a", day + 40).await.unwrap());
        assert!(
            store
                .add_turn_usage(&fence, "t1", &call(100, 20, 5, 2))
                .await
                .unwrap()
        );
        assert!(
            store
                .add_turn_usage(&fence, "t1", &call(50, 0, 7, 0))
                .await
                .unwrap()
        );
        let mut end = failed_end(day + 41);
        end.usage = Some(call(1, 1, 1, 1));
        assert!(store.finish_turn(&fence, "t1", &end).await.unwrap());
        assert!(
            !store
                .add_turn_usage(&fence, "t1", &call(1, 0, 0, 0))
                .await
                .unwrap(),
            "an ended turn takes no more usage"
        );
        claimed(store.claim_next_turn(&fence, "b", day + 42).await.unwrap());
        assert!(
            store
                .add_turn_usage(&fence, "t2", &call(30, 0, 3, 0))
                .await
                .unwrap()
        );
        assert!(
            store
                .finish_turn(&fence, "t2", &completed("ok", day + 43))
                .await
                .unwrap()
        );
        claimed(store.claim_next_turn(&fence, "a", day + 44).await.unwrap());
        let mut end = completed("ok", day + 45);
        end.usage = Some(call(4, 0, 4, 0));
        assert!(store.finish_turn(&fence, "t3", &end).await.unwrap());
    }
    let store = target.open().await;
    assert_eq!(
        store.turn("t1").await.unwrap().unwrap().usage,
        Some(TokenUsage {
            input_tokens: 150,
            cached_input_tokens: 20,
            output_tokens: 12,
            total_tokens: 182,
            model_calls: 2,
            retries: 2,
            model: Some(String::from("m1")),
        })
    );
    assert_eq!(store.turn("t4").await.unwrap().unwrap().usage, None);
    assert_eq!(
        store
            .tokens_used(UsageScope::ApiKey("k1"), 0)
            .await
            .unwrap(),
        182 + 33
    );
    assert_eq!(
        store
            .tokens_used(UsageScope::ApiKey("k1"), day)
            .await
            .unwrap(),
        33
    );
    assert_eq!(
        store
            .tokens_used(UsageScope::ApiKey("k2"), 0)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        store
            .tokens_used(UsageScope::Session("a"), day)
            .await
            .unwrap(),
        8
    );
    assert_eq!(
        store
            .tokens_used(UsageScope::Session("a"), 0)
            .await
            .unwrap(),
        190
    );
    let rows = |group_by, from_ms, to_ms| {
        let store = Arc::clone(&store);
        async move {
            store
                .usage(&UsageQuery {
                    session_key: None,
                    group_by,
                    from_ms,
                    to_ms,
                })
                .await
                .unwrap()
                .into_iter()
                .map(|row| (row.group, row.turns, row.model_calls, row.total_tokens))
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        rows(UsageGrouping::ApiKey, None, None).await,
        vec![
            (UsageGroup::Name("k1".into()), 2, 3, 215),
            (UsageGroup::Name("k2".into()), 1, 0, 0),
            (UsageGroup::NoKey, 1, 1, 8),
        ]
    );
    assert_eq!(
        rows(UsageGrouping::Day, None, None).await,
        vec![
            (UsageGroup::Day(0), 1, 2, 182),
            (UsageGroup::Day(1), 3, 2, 41)
        ]
    );
    assert_eq!(
        rows(UsageGrouping::Session, Some(day), Some(day + 25)).await,
        vec![
            (UsageGroup::Name("a".into()), 1, 1, 8),
            (UsageGroup::Name("b".into()), 1, 1, 33),
        ]
    );
    let one_session = store
        .usage(&UsageQuery {
            session_key: Some("a".into()),
            group_by: UsageGrouping::Session,
            from_ms: None,
            to_ms: None,
        })
        .await
        .unwrap();
    assert_eq!(one_session.len(), 1, "{one_session:?}");
    assert_eq!(
        (
            &one_session[0].group,
            one_session[0].turns,
            one_session[0].cached_input_tokens,
            one_session[0].total_tokens
        ),
        (&UsageGroup::Name("a".into()), 2, 20, 190)
    );
}

async fn a_session_is_rebound_only_from_the_node_it_is_bound_to(target: Target) {
    let store = target.open().await;
    let fence = lease(&store).await;
    store
        .admit_user_message(&message("s", "t1", "hi", None, QueueMode::Followup))
        .await
        .unwrap();
    assert_eq!(
        store.bind_session_node("s", "node-a", 1).await.unwrap(),
        "node-a"
    );
    // Never while a turn runs: the turn runs on the node it was claimed for.
    link_here(&store, &fence, "node-a").await;
    let running = claimed(store.claim_next_turn(&fence, "s", 2).await.unwrap());
    assert!(
        !store
            .rebind_session_node("s", "node-a", "node-b", 3)
            .await
            .unwrap(),
        "a session moved while its turn ran"
    );
    assert!(
        store
            .finish_turn(&fence, &running.turn_id, &completed("done", 3))
            .await
            .unwrap()
    );
    assert!(
        !store
            .rebind_session_node("s", "node-b", "node-c", 3)
            .await
            .unwrap()
    );
    assert!(
        store
            .rebind_session_node("s", "node-a", "node-b", 3)
            .await
            .unwrap()
    );
    assert!(
        !store
            .rebind_session_node("s", "node-a", "node-c", 4)
            .await
            .unwrap(),
        "a second rebind from the old node moved it again"
    );
    assert!(
        !store
            .rebind_session_node("nope", "node-a", "node-b", 4)
            .await
            .unwrap()
    );
    assert_eq!(
        store.session_node("s").await.unwrap().as_deref(),
        Some("node-b")
    );
}

/// A tree of one file whose content is the blob `media_id`.
fn one_file(media_id: &str) -> StoredManifest {
    StoredManifest {
        entries: vec![StoredEntry::file(
            "a.txt",
            &format!("{media_id:0>64}"),
            1,
            false,
            Blob {
                media_id: Some(media_id.to_owned()),
            },
        )],
    }
}

/// A link entry.
fn link(path: &str, target: &str) -> StoredEntry {
    StoredEntry::symlink(path, target)
}

/// Runs `sql` on the store's database directly, as an older Gateway wrote its rows.
async fn execute_raw(target: &Target, sql: String) {
    use sqlx::Connection;
    match target.location() {
        StoreLocation::Local(path) => {
            let options = sqlx::sqlite::SqliteConnectOptions::new().filename(path);
            let mut connection = sqlx::SqliteConnection::connect_with(&options)
                .await
                .unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut connection)
                .await
                .unwrap();
        }
        StoreLocation::Remote(database) => {
            let mut connection = sqlx::PgConnection::connect(database.url()).await.unwrap();
            sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                .execute(&mut connection)
                .await
                .unwrap();
        }
    }
}

/// A node's report as the Gateway stored it before manifests were typed: keys in lexical
/// order, every field of an entry named (an absent one `null`), and the omitted list.
const UNTYPED_REPORT: &str = r#"{"entries":[{"executable":true,"kind":"file","mediaId":"m-run","path":"bin/rün.sh","sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":20,"target":null},{"executable":false,"kind":"symlink","mediaId":null,"path":"docs/latest","sha256":null,"size":0,"target":"../bin/rün.sh"}],"omitted":{"paths":["big.bin"],"truncated":true}}"#;

/// A worktree's first tree as the Gateway stored it as a checkpoint before manifests were
/// typed: keys in lexical order, absent fields left out.
const UNTYPED_TREE: &str = r#"{"entries":[{"executable":false,"kind":"file","mediaId":"m-a","path":"a.txt","sha256":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":1},{"executable":false,"kind":"symlink","path":"l","size":0,"target":"a.txt"}]}"#;

async fn a_checkpoint_stored_as_untyped_json_reads_back_typed(target: Target) {
    let store = target.open().await;
    store
        .admit_user_message(&message("s", "t1", "one", None, QueueMode::Followup))
        .await
        .unwrap();
    execute_raw(
        &target,
        format!(
            "INSERT INTO checkpoints (checkpoint_id, session_key, manifest_json, created_at_ms) \
             VALUES ('c-tree', 's', '{UNTYPED_TREE}', 10), ('c-report', 's', '{UNTYPED_REPORT}', 20); \
             UPDATE sessions SET latest_checkpoint_id = 'c-report' WHERE session_key = 's';"
        ),
    )
    .await;
    let mut run = one_file("m-run").entries.remove(0);
    run.path = String::from("bin/rün.sh");
    run.executable = true;
    run.sha256 = Some(String::from(
        "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
    ));
    run.size = 20;
    let report = CheckpointManifest::report(
        vec![run, link("docs/latest", "../bin/rün.sh")],
        OmittedPaths {
            paths: vec![String::from("big.bin")],
            truncated: true,
        },
    );
    let mut a = one_file("m-a").entries.remove(0);
    a.sha256 = Some("a".repeat(64));
    let tree = CheckpointManifest::tree(StoredManifest {
        entries: vec![a, link("l", "a.txt")],
    });
    assert_eq!(
        store.latest_checkpoint("s").await.unwrap(),
        Some((String::from("c-report"), report.clone()))
    );
    assert_eq!(
        store.recent_checkpoints("s", "", 10).await.unwrap(),
        vec![
            (String::from("c-report"), report),
            (String::from("c-tree"), tree)
        ]
    );
}

async fn a_worktree_keeps_versions_applies_a_result_once_and_prunes_old_versions(target: Target) {
    let store = target.open().await;
    let worktree = WorkspaceSource::Worktree { from: None };
    let set = |source: WorkspaceSource| {
        let store = Arc::clone(&store);
        async move {
            store
                .set_session_workspace("w", "native", &source, 1)
                .await
                .unwrap()
        }
    };
    assert_eq!(set(worktree.clone()).await, WorkspaceSet::Created);
    assert_eq!(set(worktree.clone()).await, WorkspaceSet::Unchanged);
    assert_eq!(set(WorkspaceSource::Empty).await, WorkspaceSet::Replaced);
    assert_eq!(store.worktree_version("w", None).await.unwrap(), None);
    assert_eq!(set(worktree.clone()).await, WorkspaceSet::Replaced);
    assert_eq!(
        store
            .worktree_version("w", None)
            .await
            .unwrap()
            .unwrap()
            .version,
        1
    );
    // An edit is written only over the head it was made against.
    let edit = |expected_head: i64, media_id: &str| NewWorktreeVersion {
        session_key: String::from("w"),
        expected_head,
        origin: WorktreeOrigin::Edit,
        actor: String::from("operator"),
        manifest: one_file(media_id),
    };
    assert!(
        store
            .save_worktree_version(&edit(1, "m1"), 2)
            .await
            .unwrap()
    );
    assert!(
        !store
            .save_worktree_version(&edit(1, "m2"), 3)
            .await
            .unwrap()
    );
    // Once the session has a message its source is locked.
    store
        .admit_user_message(&message("w", "t1", "one", None, QueueMode::Followup))
        .await
        .unwrap();
    assert!(matches!(
        set(WorkspaceSource::Empty).await,
        WorkspaceSet::Locked(_)
    ));
    // A staged result is applied once, in one transaction with the new base.
    store
        .stage_worktree_result("t1", "w", "refs/x/t1", &one_file("m3"), 4, None)
        .await
        .unwrap();
    assert_eq!(
        store
            .staged_worktree_results(Some("w"))
            .await
            .unwrap()
            .len(),
        1
    );
    let apply = |expected_head: i64| ResultApply {
        turn_id: String::from("t1"),
        session_key: String::from("w"),
        expected_head,
        merged: one_file("m3"),
        applied: vec![String::from("a.txt")],
        conflicts: Vec::new(),
    };
    assert!(
        !store.apply_worktree_result(&apply(1), 5).await.unwrap(),
        "the head moved"
    );
    assert!(store.apply_worktree_result(&apply(2), 5).await.unwrap());
    assert!(
        !store.apply_worktree_result(&apply(3), 6).await.unwrap(),
        "applied twice"
    );
    let result = store.worktree_result("t1").await.unwrap().unwrap();
    assert_eq!(
        (result.state, result.version),
        (ResultState::Applied, Some(3))
    );
    assert_eq!(
        store.worktree_base("w").await.unwrap(),
        Some(one_file("m3"))
    );
    assert!(
        store
            .staged_worktree_results(None)
            .await
            .unwrap()
            .is_empty()
    );
    // A blob a version refers to is not garbage.
    store
        .register_checkpoint_blobs(
            &[CheckpointBlob {
                media_id: String::from("m1"),
                size_bytes: 1,
            }],
            7,
        )
        .await
        .unwrap();
    let garbage = store.checkpoint_blob_garbage().await.unwrap();
    assert!(
        !garbage.iter().any(|blob| blob.media_id == "m1"),
        "{garbage:?}"
    );
    // Pruning keeps the first version and the newest ones, and forgets the results of the rest.
    for head in 3..8 {
        assert!(
            store
                .save_worktree_version(&edit(head, "m4"), 8)
                .await
                .unwrap()
        );
    }
    assert_eq!(store.prune_worktree_versions("w", 3).await.unwrap(), 4);
    let kept: Vec<i64> = {
        let mut kept = Vec::new();
        for version in 1..=8 {
            if store
                .worktree_version("w", Some(version))
                .await
                .unwrap()
                .is_some()
            {
                kept.push(version);
            }
        }
        kept
    };
    assert_eq!(kept, vec![1, 6, 7, 8]);
    assert_eq!(store.worktree_result("t1").await.unwrap(), None);
    let garbage = store.checkpoint_blob_garbage().await.unwrap();
    assert!(
        garbage.iter().any(|blob| blob.media_id == "m1"),
        "{garbage:?}"
    );
}
