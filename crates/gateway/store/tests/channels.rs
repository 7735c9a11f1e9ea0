//! The `ChannelStore` contract (inbound messages judged once, pairing, the reply outbox), run
//! against both backends.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod support;

use std::sync::Arc;

use gatehouse_store::StoreError;
use gatehouse_store::cluster::Acquired;
use gatehouse_store::cluster::ClaimOutcome;
use gatehouse_store::records::ChannelOrigin;
use gatehouse_store::records::DeliveryEnd;
use gatehouse_store::records::InboundOutcome;
use gatehouse_store::records::NewDelivery;
use gatehouse_store::records::NewUserMessage;
use gatehouse_store::records::PairingOutcome;
use gatehouse_store::records::PairingRequest;
use gatehouse_store::records::QueueMode;
use gatehouse_store::records::TurnEnd;
use gatehouse_store::records::TurnStatus;
use pretty_assertions::assert_eq;
use support::Target;

gatehouse_testkit::on_both_backends!(
    threads = 4;
    a_channel_message_is_judged_once_across_reopens,
    a_channel_turn_queues_its_reply_as_it_ends_and_one_deliverer_sends_it,
    pairing_keeps_one_code_per_sender_and_a_bounded_number_per_channel,
    one_holder_polls_a_channel_and_only_it_moves_the_cursor,
    a_reply_keeps_its_thread_its_streamed_message_and_its_artifacts,
);

fn origin(message_id: &str, sender: &str) -> ChannelOrigin {
    ChannelOrigin {
        channel: "hooks".into(),
        message_id: message_id.into(),
        conversation: format!("room-of-{sender}"),
        sender: sender.into(),
        room: None,
        thread: None,
    }
}

fn message(turn_id: &str, origin: ChannelOrigin) -> NewUserMessage {
    NewUserMessage {
        session_key: "agent:main:hooks:direct:alice".into(),
        runtime: "native".into(),
        turn_id: turn_id.into(),
        text: "hello".into(),
        attachments: Vec::new(),
        idempotency_key: None,
        queue_mode: QueueMode::Followup,
        origin: Some(origin),
        api_key: None,
        now_ms: 10,
    }
}

async fn a_channel_message_is_judged_once_across_reopens(target: Target) {
    let store = target.open().await;
    let first = store
        .admit_user_message(&message("t1", origin("m1", "alice")))
        .await
        .unwrap();
    assert!(first.created);
    let sessions = store.sessions().await.unwrap();
    assert_eq!(
        (
            sessions[0].channel.as_deref(),
            sessions[0].peer.as_deref(),
            sessions[0].room.as_deref()
        ),
        (Some("hooks"), Some("alice"), None)
    );
    // Redelivered after a restart: the same turn, nothing new.
    let store = target.open().await;
    let again = store
        .admit_user_message(&message("t2", origin("m1", "alice")))
        .await
        .unwrap();
    assert!(!again.created);
    assert_eq!(again.turn.turn_id, "t1");
    assert!(
        !store
            .record_channel_inbound(&origin("m1", "alice"), InboundOutcome::Denied, 11)
            .await
            .unwrap()
    );
    // A message judged without admission never admits later.
    assert!(
        store
            .record_channel_inbound(&origin("m2", "alice"), InboundOutcome::Ignored, 12)
            .await
            .unwrap()
    );
    let refused = store
        .admit_user_message(&message("t3", origin("m2", "alice")))
        .await
        .unwrap_err();
    assert!(
        matches!(refused, StoreError::AlreadyExists { .. }),
        "{refused:?}"
    );
    assert_eq!(
        store
            .channel_figures("hooks")
            .await
            .unwrap()
            .last_inbound_at_ms,
        Some(12)
    );
}

async fn a_channel_turn_queues_its_reply_as_it_ends_and_one_deliverer_sends_it(target: Target) {
    let store = target.open().await;
    store
        .admit_user_message(&message("t1", origin("m1", "alice")))
        .await
        .unwrap();
    let channels = vec!["hooks".to_owned()];
    // Nothing is queued before the turn ends.
    assert_eq!(
        store
            .claim_channel_delivery(&channels, "r1", 1_000, 20)
            .await
            .unwrap(),
        None
    );
    let Acquired::Taken(lease) = store.acquire_replica("r1", None, 3_600_000).await.unwrap() else {
        panic!("the lease is held");
    };
    let fence = lease.fence;
    let ClaimOutcome::Claimed(turn) = store
        .claim_next_turn(&fence, "agent:main:hooks:direct:alice", 20)
        .await
        .unwrap()
    else {
        panic!("no turn to claim");
    };
    assert_eq!(turn.turn_id, "t1");
    let end = TurnEnd {
        status: TurnStatus::Completed,
        reply: Some("the reply".into()),
        error_code: None,
        error_message: None,
        usage: None,
        now_ms: 30,
    };
    assert!(store.finish_turn(&fence, "t1", &end).await.unwrap());
    assert_eq!(
        store
            .channel_figures("hooks")
            .await
            .unwrap()
            .pending_deliveries,
        1
    );
    // Another channel's deliverer sees nothing; this one claims the reply.
    assert_eq!(
        store
            .claim_channel_delivery(&["other".to_owned()], "r1", 1_000, 40)
            .await
            .unwrap(),
        None
    );
    let entry = store
        .claim_channel_delivery(&channels, "r1", 1_000, 40)
        .await
        .unwrap()
        .expect("the reply is due");
    assert_eq!(entry.delivery_id, "reply-t1");
    assert_eq!(entry.turn_id.as_deref(), Some("t1"));
    assert_eq!(entry.in_reply_to.as_deref(), Some("m1"));
    assert_eq!(entry.conversation, "room-of-alice");
    assert_eq!(entry.recipient, "alice");
    assert_eq!(entry.text, None);
    assert_eq!(entry.attempts, 0);
    // While the claim lives nobody else takes it.
    assert_eq!(
        store
            .claim_channel_delivery(&channels, "r2", 1_000, 41)
            .await
            .unwrap(),
        None
    );
    let retry = DeliveryEnd::Retry {
        next_attempt_at_ms: 5_000,
        error: "HTTP 503".into(),
    };
    assert!(
        !store
            .end_channel_delivery("reply-t1", "r2", &retry, 42)
            .await
            .unwrap(),
        "a deliverer ended an attempt it did not claim"
    );
    assert!(
        store
            .end_channel_delivery("reply-t1", "r1", &retry, 42)
            .await
            .unwrap()
    );
    let figures = store.channel_figures("hooks").await.unwrap();
    assert_eq!(figures.last_error.as_deref(), Some("HTTP 503"));
    assert_eq!(figures.pending_deliveries, 1);
    // Not due before its next attempt; then a lapsed claim passes to another deliverer.
    assert_eq!(
        store
            .claim_channel_delivery(&channels, "r2", 1_000, 4_999)
            .await
            .unwrap(),
        None
    );
    let again = store
        .claim_channel_delivery(&channels, "r2", 1_000, 5_000)
        .await
        .unwrap()
        .expect("due again");
    assert_eq!(again.attempts, 1);
    let taken = store
        .claim_channel_delivery(&channels, "r1", 1_000, 6_000)
        .await
        .unwrap()
        .expect("the lapsed claim passes on");
    assert_eq!(taken.delivery_id, "reply-t1");
    assert!(
        !store
            .end_channel_delivery("reply-t1", "r2", &DeliveryEnd::Delivered, 6_001)
            .await
            .unwrap(),
        "a lapsed claim still ended the attempt"
    );
    assert!(
        store
            .end_channel_delivery("reply-t1", "r1", &DeliveryEnd::Delivered, 6_002)
            .await
            .unwrap()
    );
    let figures = store.channel_figures("hooks").await.unwrap();
    assert_eq!(figures.pending_deliveries, 0);
    assert_eq!(figures.last_delivery_at_ms, Some(6_002));
    assert_eq!(figures.last_error, None);
    // Pruning keeps what is newer; the message's record, the delivery and the turn's route go
    // once they are older than the bound.
    assert_eq!(store.prune_channel_records(10).await.unwrap(), 0);
    assert_eq!(store.prune_channel_records(10_000).await.unwrap(), 3);
    assert_eq!(
        store
            .channel_figures("hooks")
            .await
            .unwrap()
            .last_inbound_at_ms,
        None
    );
    assert_eq!(
        store
            .claim_channel_delivery(&channels, "r1", 1_000, 99_000)
            .await
            .unwrap(),
        None,
        "a delivered reply was offered again"
    );
}

fn pairing(message_id: &str, sender: &str, code: &str, now_ms: i64) -> PairingRequest {
    PairingRequest {
        origin: origin(message_id, sender),
        code: code.into(),
        reply: NewDelivery {
            delivery_id: format!("pairing-{message_id}"),
            text: format!("your code is {code}"),
        },
        expires_at_ms: now_ms + 1_000,
        max_pending: 2,
        now_ms,
    }
}

async fn pairing_keeps_one_code_per_sender_and_a_bounded_number_per_channel(target: Target) {
    let store = target.open().await;
    let request = |id: &str, sender: &str, code: &str, now_ms: i64| {
        let store = Arc::clone(&store);
        let request = pairing(id, sender, code, now_ms);
        async move { store.request_channel_pairing(&request).await.unwrap() }
    };
    assert_eq!(
        request("m1", "alice", "AAAA2222", 10).await,
        PairingOutcome::Created
    );
    assert_eq!(
        request("m1", "alice", "BBBB2222", 11).await,
        PairingOutcome::Duplicate
    );
    assert_eq!(
        request("m2", "alice", "CCCC2222", 12).await,
        PairingOutcome::Pending
    );
    assert_eq!(
        request("m3", "bob", "DDDD2222", 13).await,
        PairingOutcome::Created
    );
    assert_eq!(
        request("m4", "carol", "EEEE2222", 14).await,
        PairingOutcome::Full
    );
    let pending = store.channel_pairings("hooks", 15).await.unwrap();
    assert_eq!(
        pending
            .iter()
            .map(|p| (p.code.as_str(), p.sender.as_str()))
            .collect::<Vec<_>>(),
        vec![("AAAA2222", "alice"), ("DDDD2222", "bob")]
    );
    // One reply per created pairing, carrying its own text.
    let channels = vec!["hooks".to_owned()];
    let mut texts = Vec::new();
    while let Some(entry) = store
        .claim_channel_delivery(&channels, "r1", 1_000, 16)
        .await
        .unwrap()
    {
        assert!(
            store
                .end_channel_delivery(&entry.delivery_id, "r1", &DeliveryEnd::Delivered, 16)
                .await
                .unwrap()
        );
        texts.push((entry.recipient, entry.text.unwrap()));
    }
    texts.sort();
    assert_eq!(
        texts,
        vec![
            ("alice".to_owned(), "your code is AAAA2222".to_owned()),
            ("bob".to_owned(), "your code is DDDD2222".to_owned()),
        ]
    );
    assert!(
        !store
            .channel_sender_approved("hooks", "alice")
            .await
            .unwrap()
    );
    let notice = NewDelivery {
        delivery_id: "approved-AAAA2222".into(),
        text: "approved".into(),
    };
    assert_eq!(
        store
            .approve_channel_pairing("hooks", "AAAA2222", &notice, 17)
            .await
            .unwrap()
            .as_deref(),
        Some("alice")
    );
    assert!(
        store
            .channel_sender_approved("hooks", "alice")
            .await
            .unwrap()
    );
    assert!(
        !store
            .channel_sender_approved("other", "alice")
            .await
            .unwrap()
    );
    let sent = store
        .claim_channel_delivery(&channels, "r1", 1_000, 18)
        .await
        .unwrap()
        .expect("the approval notice is queued");
    assert_eq!(
        (sent.recipient.as_str(), sent.text.as_deref()),
        ("alice", Some("approved"))
    );
    // A code approves once; a denied one is gone; an expired one is neither approved nor listed.
    assert_eq!(
        store
            .approve_channel_pairing("hooks", "AAAA2222", &notice, 19)
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store
            .deny_channel_pairing("hooks", "DDDD2222", 19)
            .await
            .unwrap()
            .as_deref(),
        Some("bob")
    );
    assert!(!store.channel_sender_approved("hooks", "bob").await.unwrap());
    assert_eq!(
        request("m5", "carol", "FFFF2222", 20).await,
        PairingOutcome::Created
    );
    assert_eq!(
        store.channel_pairings("hooks", 2_000).await.unwrap(),
        Vec::new()
    );
    let expired = NewDelivery {
        delivery_id: "approved-FFFF2222".into(),
        text: "approved".into(),
    };
    assert_eq!(
        store
            .approve_channel_pairing("hooks", "FFFF2222", &expired, 2_000)
            .await
            .unwrap(),
        None
    );
    // Once expired, the sender may ask again.
    assert_eq!(
        request("m6", "carol", "GGGG2222", 2_001).await,
        PairingOutcome::Created
    );
}

async fn one_holder_polls_a_channel_and_only_it_moves_the_cursor(target: Target) {
    let store = target.open().await;
    assert_eq!(store.channel_cursor("team").await.unwrap(), None);
    assert!(store.hold_channel("team", "r1", 1_000, 10).await.unwrap());
    assert!(!store.hold_channel("team", "r2", 1_000, 20).await.unwrap());
    assert!(
        store.hold_channel("team", "r1", 1_000, 500).await.unwrap(),
        "a renewal"
    );
    assert!(
        store
            .set_channel_cursor("team", "r1", "s1", 600)
            .await
            .unwrap()
    );
    assert!(
        !store
            .set_channel_cursor("team", "r2", "s0", 600)
            .await
            .unwrap()
    );
    assert_eq!(
        store.channel_cursor("team").await.unwrap().as_deref(),
        Some("s1")
    );
    // The holder stalls: its lease lapses, another replica takes the channel and its cursor.
    assert!(
        !store
            .set_channel_cursor("team", "r1", "s2", 1_500)
            .await
            .unwrap()
    );
    assert!(
        store
            .hold_channel("team", "r2", 1_000, 1_500)
            .await
            .unwrap()
    );
    assert!(
        !store
            .hold_channel("team", "r1", 1_000, 1_600)
            .await
            .unwrap()
    );
    assert!(
        !store
            .set_channel_cursor("team", "r1", "s2", 1_600)
            .await
            .unwrap()
    );
    let reopened = target.open().await;
    assert_eq!(
        reopened.channel_cursor("team").await.unwrap().as_deref(),
        Some("s1")
    );
    assert!(
        reopened
            .set_channel_cursor("team", "r2", "s3", 1_700)
            .await
            .unwrap()
    );
    assert_eq!(
        store.channel_cursor("team").await.unwrap().as_deref(),
        Some("s3")
    );
    // Another channel is held apart.
    assert!(
        store
            .hold_channel("other", "r1", 1_000, 1_700)
            .await
            .unwrap()
    );

    // A message answered with a notice is judged once and its notice queued once.
    let notice = NewDelivery {
        delivery_id: "note-1".into(),
        text: "not supported".into(),
    };
    let origin = origin("e1", "alice");
    assert!(
        store
            .answer_channel_inbound(&origin, InboundOutcome::Denied, &notice, 1_800)
            .await
            .unwrap()
    );
    let again = NewDelivery {
        delivery_id: "note-2".into(),
        text: "not supported".into(),
    };
    assert!(
        !store
            .answer_channel_inbound(&origin, InboundOutcome::Denied, &again, 1_801)
            .await
            .unwrap()
    );
    let entry = store
        .claim_channel_delivery(&["hooks".to_owned()], "r1", 1_000, 1_900)
        .await
        .unwrap()
        .expect("the notice is queued");
    assert_eq!(
        (
            entry.delivery_id.as_str(),
            entry.text.as_deref(),
            entry.in_reply_to.as_deref()
        ),
        ("note-1", Some("not supported"), Some("e1"))
    );
    assert_eq!(
        store
            .claim_channel_delivery(&["hooks".to_owned()], "r2", 1_000, 1_900)
            .await
            .unwrap(),
        None
    );
}

async fn a_reply_keeps_its_thread_its_streamed_message_and_its_artifacts(target: Target) {
    let store = target.open().await;
    let mut threaded = origin("m1", "alice");
    threaded.thread = Some("$root".into());
    store
        .admit_user_message(&message("t1", threaded))
        .await
        .unwrap();
    // The streamed message: the first one recorded stays.
    assert_eq!(store.channel_stream_message("t1").await.unwrap(), None);
    store
        .set_channel_stream_message("t1", "$stream")
        .await
        .unwrap();
    store
        .set_channel_stream_message("t1", "$other")
        .await
        .unwrap();
    assert_eq!(
        store.channel_stream_message("t1").await.unwrap().as_deref(),
        Some("$stream")
    );
    // Artifacts, once per path, in the order stored.
    for (path, at) in [("out/b.txt", 10), ("out/a.txt", 11), ("out/b.txt", 12)] {
        let artifact = gatehouse_store::records::TurnArtifact {
            path: path.into(),
            media_id: format!("{path}-blob"),
            size_bytes: 5,
        };
        store
            .record_turn_artifact("t1", &artifact, at)
            .await
            .unwrap();
    }
    let paths: Vec<String> = store
        .turn_artifacts("t1")
        .await
        .unwrap()
        .into_iter()
        .map(|artifact| artifact.path)
        .collect();
    assert_eq!(paths, vec!["out/b.txt".to_owned(), "out/a.txt".to_owned()]);
    // The reply goes into the thread.
    let Acquired::Taken(lease) = store.acquire_replica("r1", None, 3_600_000).await.unwrap() else {
        panic!("the lease is held");
    };
    let ClaimOutcome::Claimed(_) = store
        .claim_next_turn(&lease.fence, "agent:main:hooks:direct:alice", 20)
        .await
        .unwrap()
    else {
        panic!("no turn to claim");
    };
    let end = TurnEnd {
        status: TurnStatus::Completed,
        reply: Some("ok".into()),
        error_code: None,
        error_message: None,
        usage: None,
        now_ms: 30,
    };
    assert!(store.finish_turn(&lease.fence, "t1", &end).await.unwrap());
    let entry = store
        .claim_channel_delivery(&["hooks".to_owned()], "r1", 1_000, 40)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(entry.thread.as_deref(), Some("$root"));
    // The store's clock is a wall clock (within a minute of this one).
    let clock = store.channel_clock_ms().await.unwrap();
    let here = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    assert!((clock - here).abs() < 60_000, "{clock} against {here}");
}
