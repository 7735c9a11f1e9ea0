//! The `ClusterStore` contract (leases, fencing, node links, placement, shared secrets), run
//! against both backends like the `Store` contract; the announcement channel exists on
//! PostgreSQL only.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use std::sync::Arc;
use std::time::Duration;

use gatehouse_store::Store;
use gatehouse_store::cluster::Acquired;
use gatehouse_store::cluster::ClaimOutcome;
use gatehouse_store::cluster::Fence;
use gatehouse_store::cluster::NewNodeLink;
use gatehouse_store::cluster::NodeLink;
use gatehouse_store::cluster::PlacementCandidate;
use gatehouse_store::cluster::SessionPlacement;
use gatehouse_store::cluster::TurnWriter;
use gatehouse_store::records::CheckpointManifest;
use gatehouse_store::records::NewTurnMessage;
use gatehouse_store::records::NewUserMessage;
use gatehouse_store::records::QueueMode;
use gatehouse_store::records::StoredManifest;
use gatehouse_store::records::TurnEnd;
use gatehouse_store::records::TurnStatus;
use pretty_assertions::assert_eq;
use support::Target;

gatehouse_testkit::on_both_backends!(
    threads = 4;
    a_lease_is_held_by_one_process_and_never_renewed_after_it_expired,
    a_turn_writes_only_under_its_live_lease_and_survivors_take_it_over,
    a_replica_claims_only_the_sessions_whose_node_it_holds,
    a_node_link_names_its_holder_until_it_ends_or_the_holder_dies,
    placement_binds_an_unbound_session_once_to_the_least_loaded_node,
    a_shared_secret_is_the_first_value_stored,
    a_collection_never_runs_while_a_replica_stores_media,
);

/// A lease that expires within the test, long enough for what the test does under it on a
/// busy machine.
const SHORT_LEASE_MS: i64 = 1_500;

/// A lease that outlives the test.
const LONG_LEASE_MS: i64 = 3_600_000;

async fn take(store: &Arc<dyn Store>, replica: &str, lease_ms: i64) -> Fence {
    match store
        .acquire_replica(replica, Some("http://replica"), lease_ms)
        .await
        .unwrap()
    {
        Acquired::Taken(lease) => lease.fence,
        held @ Acquired::Held { .. } => panic!("the lease of {replica} is held: {held:?}"),
    }
}

/// Waits until a lease of [`SHORT_LEASE_MS`] taken before the call has expired.
async fn outlive_short_lease() {
    tokio::time::sleep(Duration::from_millis(
        u64::try_from(SHORT_LEASE_MS).unwrap() + 200,
    ))
    .await;
}

async fn admit(store: &Arc<dyn Store>, session: &str, turn_id: &str) {
    store
        .admit_user_message(&NewUserMessage {
            session_key: session.into(),
            runtime: "native".into(),
            turn_id: turn_id.into(),
            text: "hello".into(),
            attachments: Vec::new(),
            idempotency_key: None,
            queue_mode: QueueMode::Followup,
            origin: None,
            api_key: None,
            now_ms: 1,
        })
        .await
        .unwrap();
}

fn reply(turn_id: &str) -> NewTurnMessage {
    NewTurnMessage {
        turn_id: turn_id.into(),
        role: "assistant".into(),
        content: "reply".into(),
        tool_name: None,
        now_ms: 2,
    }
}

fn completed() -> TurnEnd {
    TurnEnd {
        status: TurnStatus::Completed,
        reply: Some("reply".into()),
        error_code: None,
        error_message: None,
        usage: None,
        now_ms: 3,
    }
}

fn link(device: &str, conn_id: u64) -> NewNodeLink {
    NewNodeLink {
        device_id: device.into(),
        conn_id,
        runtime: "native".into(),
        commands: vec!["agent.turn".into(), "file.fetch".into()],
    }
}

async fn link_of(store: &Arc<dyn Store>, device: &str) -> NodeLink {
    store
        .node_links()
        .await
        .unwrap()
        .links
        .into_iter()
        .find(|link| link.device_id == device)
        .unwrap_or_else(|| panic!("no link of {device}"))
}

async fn a_lease_is_held_by_one_process_and_never_renewed_after_it_expired(target: Target) {
    let store = target.open().await;
    let first = take(&store, "r1", LONG_LEASE_MS).await;
    assert_eq!(first.epoch, 1);
    // A second process with the same id is refused while the lease lives.
    let other = target.open().await;
    assert!(matches!(
        other
            .acquire_replica("r1", None, LONG_LEASE_MS)
            .await
            .unwrap(),
        Acquired::Held { .. }
    ));
    assert!(
        store
            .renew_replica(&first, LONG_LEASE_MS)
            .await
            .unwrap()
            .is_some()
    );
    // A short lease lapses; once lapsed it cannot be renewed, only taken again under a new
    // epoch.
    let short = take(&store, "r2", SHORT_LEASE_MS).await;
    outlive_short_lease().await;
    assert_eq!(
        store.renew_replica(&short, LONG_LEASE_MS).await.unwrap(),
        None
    );
    let again = take(&other, "r2", LONG_LEASE_MS).await;
    assert_eq!(again.epoch, 2);
    assert_eq!(
        store.renew_replica(&short, LONG_LEASE_MS).await.unwrap(),
        None
    );
    let replicas: Vec<(String, i64, bool)> = store
        .replicas()
        .await
        .unwrap()
        .into_iter()
        .map(|replica| (replica.replica_id, replica.epoch, replica.live))
        .collect();
    assert_eq!(
        replicas,
        vec![("r1".into(), 1, true), ("r2".into(), 2, true)]
    );
    // A released lease is over at once.
    store.release_replica(&first).await.unwrap();
    assert_eq!(
        store.renew_replica(&first, LONG_LEASE_MS).await.unwrap(),
        None
    );
    assert_eq!(take(&other, "r1", LONG_LEASE_MS).await.epoch, 2);
}

async fn a_turn_writes_only_under_its_live_lease_and_survivors_take_it_over(target: Target) {
    let store = target.open().await;
    let stalled = take(&store, "stalled", SHORT_LEASE_MS).await;
    let survivor = take(&store, "survivor", LONG_LEASE_MS).await;
    admit(&store, "s", "t1").await;
    admit(&store, "s", "t2").await;
    let ClaimOutcome::Claimed(turn) = store.claim_next_turn(&stalled, "s", 1).await.unwrap() else {
        panic!("the live lease claimed nothing");
    };
    assert_eq!(turn.turn_id, "t1");
    assert!(
        store
            .commit_turn_message(&stalled, &reply("t1"))
            .await
            .unwrap()
            .is_some()
    );
    // Another replica's fence writes nothing for this turn.
    assert_eq!(
        store
            .commit_turn_message(&survivor, &reply("t1"))
            .await
            .unwrap(),
        None
    );
    assert!(
        !store
            .finish_turn(&survivor, "t1", &completed())
            .await
            .unwrap()
    );
    // The survivor leaves a live lease's turn alone.
    assert!(store.interrupt_orphaned_turns().await.unwrap().is_empty());
    outlive_short_lease().await;
    // Past its lease the stalled replica writes nothing, before anyone took its turn over.
    assert_eq!(
        store
            .commit_turn_message(&stalled, &reply("t1"))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .append_turn_event(&stalled, "t1", "tool.started", &serde_json::json!({}), 2)
            .await
            .unwrap(),
        None
    );
    assert!(
        !store
            .finish_turn(&stalled, "t1", &completed())
            .await
            .unwrap()
    );
    // Nor its checkpoint or worktree result: the session's latest checkpoint stays.
    let writer = TurnWriter {
        fence: &stalled,
        turn_id: "t1",
    };
    assert!(
        !store
            .save_checkpoint(
                "s",
                "late",
                &CheckpointManifest::tree(StoredManifest::default()),
                3,
                Some(writer)
            )
            .await
            .unwrap()
    );
    assert_eq!(store.latest_checkpoint("s").await.unwrap(), None);
    let result = StoredManifest::default();
    assert!(
        !store
            .stage_worktree_result("t1", "s", "refs/x/t1", &result, 3, Some(&stalled))
            .await
            .unwrap()
    );
    assert_eq!(store.worktree_result("t1").await.unwrap(), None);
    assert_eq!(
        store.claim_next_turn(&stalled, "s", 4).await.unwrap(),
        ClaimOutcome::Fenced
    );
    let interrupted = store.interrupt_orphaned_turns().await.unwrap();
    assert_eq!(
        interrupted
            .iter()
            .map(|turn| (turn.turn_id.as_str(), turn.status))
            .collect::<Vec<_>>(),
        vec![("t1", TurnStatus::Interrupted)]
    );
    // Taken again, the replica's old fence still writes nothing; the queued turn runs anew.
    let renewed = take(&store, "stalled", LONG_LEASE_MS).await;
    assert_eq!(renewed.epoch, 2);
    assert!(
        !store
            .finish_turn(&stalled, "t1", &completed())
            .await
            .unwrap()
    );
    let ClaimOutcome::Claimed(next) = store.claim_next_turn(&renewed, "s", 5).await.unwrap() else {
        panic!("the new lease claimed nothing");
    };
    assert_eq!(next.turn_id, "t2");
    assert_eq!(
        store
            .commit_turn_message(&stalled, &reply("t2"))
            .await
            .unwrap(),
        None
    );
    assert!(
        store
            .append_turn_event(&renewed, "t2", "tool.started", &serde_json::json!({}), 6)
            .await
            .unwrap()
            .is_some()
    );
    let writer = TurnWriter {
        fence: &renewed,
        turn_id: "t2",
    };
    assert!(
        store
            .save_checkpoint(
                "s",
                "c2",
                &CheckpointManifest::tree(StoredManifest::default()),
                6,
                Some(writer)
            )
            .await
            .unwrap()
    );
    assert_eq!(
        store
            .latest_checkpoint("s")
            .await
            .unwrap()
            .map(|(id, _)| id)
            .as_deref(),
        Some("c2")
    );
    assert!(
        store
            .finish_turn(&renewed, "t2", &completed())
            .await
            .unwrap()
    );
    let transcript: Vec<(i64, String)> = store
        .transcript("s")
        .await
        .unwrap()
        .into_iter()
        .map(|message| (message.seq, message.role))
        .collect();
    assert_eq!(
        transcript,
        vec![
            (1, "user".into()),
            (2, "user".into()),
            (3, "assistant".into())
        ]
    );
    let kinds: Vec<String> = store
        .events_after("s", 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|event| event.kind)
        .collect();
    assert_eq!(
        kinds,
        vec![
            "turn.queued",
            "turn.queued",
            "turn.started",
            "turn.failed",
            "turn.started",
            "tool.started",
            "turn.completed"
        ]
    );
}

async fn a_replica_claims_only_the_sessions_whose_node_it_holds(target: Target) {
    let store = target.open().await;
    let one = take(&store, "one", LONG_LEASE_MS).await;
    let two = take(&store, "two", LONG_LEASE_MS).await;
    assert!(store.link_node(&one, &link("n1", 7)).await.unwrap());
    admit(&store, "s", "t1").await;
    admit(&store, "s", "t2").await;
    admit(&store, "unbound", "u1").await;
    let candidate = PlacementCandidate {
        device_id: "n1".into(),
        slots_in_use: 0,
        capacity: 8,
        linked_at_ms: 1,
    };
    assert_eq!(
        store.place_session("s", &[candidate], 1).await.unwrap(),
        Some(SessionPlacement {
            device_id: "n1".into(),
            placed_now: true
        })
    );
    assert_eq!(
        store.dispatchable_sessions(&one).await.unwrap(),
        vec!["s", "unbound"]
    );
    assert_eq!(
        store.dispatchable_sessions(&two).await.unwrap(),
        vec!["unbound"]
    );
    assert_eq!(
        store.claim_next_turn(&two, "s", 2).await.unwrap(),
        ClaimOutcome::NotHolder
    );
    let ClaimOutcome::Claimed(turn) = store.claim_next_turn(&one, "s", 2).await.unwrap() else {
        panic!("the holder claimed nothing");
    };
    assert_eq!(
        store.running_turn("s").await.unwrap(),
        Some((turn.turn_id.clone(), Some(one.clone())))
    );
    // A session with a running turn is nobody's to dispatch.
    assert_eq!(
        store.dispatchable_sessions(&one).await.unwrap(),
        vec!["unbound"]
    );
    assert!(store.finish_turn(&one, "t1", &completed()).await.unwrap());
    // The node moves to the other replica: so do the session's turns.
    assert!(store.link_node(&two, &link("n1", 3)).await.unwrap());
    assert_eq!(
        store.claim_next_turn(&one, "s", 3).await.unwrap(),
        ClaimOutcome::NotHolder
    );
    assert_eq!(
        store.dispatchable_sessions(&one).await.unwrap(),
        vec!["unbound"]
    );
    // The node's link ends: every replica may dispatch the session (to fail or move it).
    store.unlink_node(&two, "n1", 3).await.unwrap();
    assert_eq!(
        store.dispatchable_sessions(&one).await.unwrap(),
        vec!["s", "unbound"]
    );
    // An unbound session is anyone's.
    assert!(matches!(
        store.claim_next_turn(&two, "unbound", 4).await.unwrap(),
        ClaimOutcome::Claimed(_)
    ));
}

async fn a_node_link_names_its_holder_until_it_ends_or_the_holder_dies(target: Target) {
    let store = target.open().await;
    let one = take(&store, "one", SHORT_LEASE_MS).await;
    let two = take(&store, "two", LONG_LEASE_MS).await;
    assert!(store.link_node(&one, &link("n1", 1)).await.unwrap());
    store.report_node_load(&one, "n1", 1, 3, 8).await.unwrap();
    // A report of an older connection, or of another holder, changes nothing.
    store.report_node_load(&one, "n1", 0, 7, 8).await.unwrap();
    store.report_node_load(&two, "n1", 1, 7, 8).await.unwrap();
    let held = link_of(&store, "n1").await;
    assert_eq!(
        (
            held.replica_id.as_deref(),
            held.live,
            held.replica_url.as_deref(),
            held.slots_in_use,
            held.capacity,
            held.absent_since_ms
        ),
        (Some("one"), true, Some("http://replica"), 3, 8, None)
    );
    assert!(held.serves_all(&["agent.turn"]));
    assert!(!held.serves_all(&["codex.appserver"]));
    // The holder dies: the link is no longer live, and absent since the lease expired.
    outlive_short_lease().await;
    let dead = link_of(&store, "n1").await;
    assert!(!dead.live);
    assert!(dead.absent_since_ms.is_some());
    assert!(
        !store.link_node(&one, &link("n1", 2)).await.unwrap(),
        "a dead lease linked a node"
    );
    // The node reconnects to the survivor; the dead holder's late unlink changes nothing.
    assert!(store.link_node(&two, &link("n1", 9)).await.unwrap());
    store.unlink_node(&one, "n1", 1).await.unwrap();
    store.unlink_node(&two, "n1", 8).await.unwrap();
    let moved = link_of(&store, "n1").await;
    assert_eq!(
        (moved.replica_id.as_deref(), moved.live, moved.slots_in_use),
        (Some("two"), true, 0)
    );
    store.unlink_node(&two, "n1", 9).await.unwrap();
    let gone = link_of(&store, "n1").await;
    assert_eq!((gone.replica_id, gone.live), (None, false));
    assert!(gone.absent_since_ms.is_some());
    // A released lease unlinks every node it held.
    assert!(store.link_node(&two, &link("n2", 1)).await.unwrap());
    store.release_replica(&two).await.unwrap();
    assert!(!link_of(&store, "n2").await.live);
}

async fn placement_binds_an_unbound_session_once_to_the_least_loaded_node(target: Target) {
    let store = target.open().await;
    let candidates = [
        PlacementCandidate {
            device_id: "a".into(),
            slots_in_use: 0,
            capacity: 2,
            linked_at_ms: 1,
        },
        PlacementCandidate {
            device_id: "b".into(),
            slots_in_use: 0,
            capacity: 2,
            linked_at_ms: 2,
        },
    ];
    assert_eq!(
        store.place_session("none", &candidates, 1).await.unwrap(),
        None
    );
    // Sessions placed one after another, each with a queued turn, alternate: a busy session
    // counts even before the node reports it.
    let mut placed = Vec::new();
    for index in 0..4 {
        let session = format!("s{index}");
        admit(&store, &session, &format!("t{index}")).await;
        let placement = store
            .place_session(&session, &candidates, 1)
            .await
            .unwrap()
            .unwrap();
        assert!(placement.placed_now);
        placed.push(placement.device_id);
    }
    assert_eq!(placed, vec!["b", "a", "b", "a"]);
    // A bound session keeps its node, whatever the candidates.
    assert_eq!(
        store
            .place_session("s0", &candidates[..1], 1)
            .await
            .unwrap(),
        Some(SessionPlacement {
            device_id: "b".into(),
            placed_now: false
        })
    );
    assert_eq!(
        store.session_node("s0").await.unwrap().as_deref(),
        Some("b")
    );
    admit(&store, "late", "t9").await;
    assert_eq!(store.place_session("late", &[], 1).await.unwrap(), None);
    assert_eq!(store.session_node("late").await.unwrap(), None);
}

async fn a_shared_secret_is_the_first_value_stored(target: Target) {
    let store = target.open().await;
    assert_eq!(
        store
            .shared_secret("operator-token", "first", 1)
            .await
            .unwrap(),
        "first"
    );
    let other = target.open().await;
    assert_eq!(
        other
            .shared_secret("operator-token", "second", 2)
            .await
            .unwrap(),
        "first"
    );
    assert_eq!(
        other
            .shared_secret("replica-key", "another", 2)
            .await
            .unwrap(),
        "another"
    );
}

/// The announcement channel: every durable event is announced by the store itself, and a
/// replica's deltas reach every listener in the order sent, equal ones included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_announcements_reach_every_listener_in_order() {
    use gatehouse_store::cluster::Announcement;
    use gatehouse_store::cluster::Heard;

    let target = Target::postgres().await;
    let store = target.open().await;
    let mut first = store.listen().await.unwrap().expect("a listener");
    let mut second = target
        .open()
        .await
        .listen()
        .await
        .unwrap()
        .expect("a listener");
    admit(&store, "s", "t1").await;
    let delta = |number| Announcement::Delta {
        origin: "r1".into(),
        number,
        session_key: "s".into(),
        kind: "message.delta".into(),
        payload: serde_json::json!({"turnId": "t1", "text": "same"}),
    };
    store.announce(&[delta(1), delta(2)]).await.unwrap();
    // Longer than a notification carries: not sent, and nothing else is lost.
    let long = Announcement::Delta {
        origin: "r1".into(),
        number: 3,
        session_key: "s".into(),
        kind: "message.delta".into(),
        payload: serde_json::json!({"text": "x".repeat(9_000)}),
    };
    store.announce(&[long, delta(4)]).await.unwrap();
    let expected = vec![
        Heard::Announcement(Announcement::Event {
            session_key: "s".into(),
            seq: 1,
            kind: "turn.queued".into(),
        }),
        Heard::Announcement(delta(1)),
        Heard::Announcement(delta(2)),
        Heard::Announcement(delta(4)),
    ];
    for listener in [&mut first, &mut second] {
        let mut heard = Vec::new();
        for _ in 0..expected.len() {
            heard.push(
                tokio::time::timeout(Duration::from_secs(10), listener.next())
                    .await
                    .expect("an announcement within 10 s")
                    .unwrap(),
            );
        }
        assert_eq!(heard, expected);
    }
    // SQLite has one replica and no channel.
    let sqlite = Target::sqlite().open().await;
    assert!(sqlite.listen().await.unwrap().is_none());
    sqlite.announce(&[delta(5)]).await.unwrap();
}

/// The media lock: held shared by any replica storing media, it keeps every collection out; a
/// collection never waits for it, and holds it alone.
async fn a_collection_never_runs_while_a_replica_stores_media(target: Target) {
    let store = target.open().await;
    let other = target.open().await;
    let writing = store.hold_media_writes().await.unwrap();
    let also_writing = other.hold_media_writes().await.unwrap();
    let collecting = other.try_hold_media_collection().await.unwrap();
    let exclusive = !matches!(
        target.location(),
        gatehouse_store::location::StoreLocation::Local(_)
    );
    // SQLite has one process, whose own lock keeps its collection out.
    assert_eq!(collecting.is_none(), exclusive);
    if let Some(collecting) = collecting {
        collecting.release().await;
    }
    writing.release().await;
    also_writing.release().await;
    let mut collecting = other
        .try_hold_media_collection()
        .await
        .unwrap()
        .expect("nobody stores media");
    assert!(collecting.still_held().await);
    if exclusive {
        assert!(store.try_hold_media_collection().await.unwrap().is_none());
        // A writer waits for the collection and goes on once it ends.
        let waiting = tokio::spawn({
            let store = Arc::clone(&store);
            async move { store.hold_media_writes().await.unwrap() }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiting.is_finished(), "a writer ran beside a collection");
        collecting.release().await;
        let writing = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the writer went on")
            .unwrap();
        writing.release().await;
    } else {
        collecting.release().await;
    }
    // A hold dropped without release lets go too (its session closes).
    drop(store.try_hold_media_collection().await.unwrap());
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(again) = other.try_hold_media_collection().await.unwrap() {
            again.release().await;
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "a dropped hold kept the lock"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
