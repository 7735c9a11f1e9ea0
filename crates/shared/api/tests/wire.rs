//! The api types read and write the contract's field names: each sample below is written the
//! way the public contract (and today's Gateway) writes it, and must decode into its type and
//! encode back to the same JSON.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use gatehouse_api::audit;
use gatehouse_api::documents;
use gatehouse_api::error;
use gatehouse_api::events::SessionEvent;
use gatehouse_api::health;
use gatehouse_api::media;
use gatehouse_api::memory;
use gatehouse_api::nodes;
use gatehouse_api::sessions;
use gatehouse_api::sessions::Attachment;
use gatehouse_api::sessions::MessageParams;
use gatehouse_api::skills;
use pretty_assertions::assert_eq;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

/// Decodes `sample` as `T`, encodes it again, and checks that nothing changed.
fn round_trip<T: Serialize + DeserializeOwned>(sample: serde_json::Value) {
    let decoded: T = serde_json::from_value(sample.clone()).unwrap();
    assert_eq!(serde_json::to_value(&decoded).unwrap(), sample);
}

#[test]
fn every_answer_keeps_the_contract_field_names() {
    round_trip::<health::HealthResponse>(json!({"status": "ok"}));
    round_trip::<health::HealthResponse>(json!({"status": "ready"}));
    round_trip::<error::ErrorResponse>(
        json!({"error": {"code": "NOT_FOUND", "message": "no such route"}}),
    );
    round_trip::<error::ErrorResponse>(
        json!({"error": {"code": "PAYLOAD_TOO_LARGE", "message": "big", "details": {"maxBytes": 5}}}),
    );
    round_trip::<nodes::NodeList>(json!({"nodes": [{"nodeId": "n", "displayName": "d",
        "connected": true, "runtime": "native", "commands": ["file.fetch"], "lastSeenAt": 7}]}));
    round_trip::<nodes::NodeList>(json!({"nodes": [{"nodeId": "n", "displayName": "d",
        "connected": true, "runtime": "native", "commands": [], "lastSeenAt": 7,
        "workerCapacity": 8, "workerSlotsInUse": 1}]}));
    round_trip::<nodes::SetupCode>(json!({"setupCode": "c", "expiresAtMs": 9}));
    round_trip::<sessions::MessageAccepted>(
        json!({"sessionKey": "s", "turnId": "t", "status": "queued"}),
    );
    round_trip::<sessions::Turn>(
        json!({"turnId": "t", "sessionKey": "s", "status": "completed", "reply": "hi"}),
    );
    round_trip::<sessions::Turn>(json!({"turnId": "t", "sessionKey": "s", "status": "failed",
        "error": {"code": "MODEL_AUTH_FAILED", "message": null}}));
    round_trip::<sessions::SessionList>(
        json!({"sessions": [{"sessionKey": "s", "runtime": "native",
        "createdAt": 1, "updatedAt": 2, "activeTurnId": "t", "nodeId": "n",
        "usage": {"turns": 2, "modelCalls": 3, "inputTokens": 10, "cachedInputTokens": 4,
        "outputTokens": 5, "totalTokens": 19}}]}),
    );
    round_trip::<gatehouse_api::usage::UsageView>(json!({"rows": [{"group": "2026-12-07",
        "turns": 2, "modelCalls": 3, "inputTokens": 10, "cachedInputTokens": 4,
        "outputTokens": 5, "totalTokens": 19}]}));
    round_trip::<sessions::Transcript>(
        json!({"messages": [{"seq": 1, "turnId": "t", "role": "tool",
        "content": "x", "createdAt": 3, "toolName": "read"}]}),
    );
    round_trip::<sessions::AbortResponse>(json!({"aborted": false}));
    round_trip::<sessions::StopResponse>(json!({"stopped": true, "aborted": false}));
    round_trip::<sessions::MoveResponse>(json!({"moved": true}));
    round_trip::<documents::Document>(json!({"name": "AGENTS.md", "content": "# A"}));
    round_trip::<documents::DocumentWritten>(json!({"name": "AGENTS.md", "size": 3}));
    round_trip::<media::MediaUploaded>(
        json!({"mediaId": "m", "sha256": "h", "size": 1, "mimeType": "text/plain"}),
    );
    round_trip::<audit::AuditList>(json!({"events": [{"seq": 1, "at": 2, "actor": "operator",
        "action": "session.abort", "outcome": "succeeded", "reasonCode": null, "details": {"aborted": true}}]}));
    round_trip::<skills::SkillsView>(json!({"skills": [{"name": "n", "description": "d",
        "tier": "workspace-agents", "host": "harness", "location": "/w/SKILL.md", "gatedOut": [],
        "shadowedBy": "managed"}], "skipped": [{"host": "gateway", "path": "p", "reason": "r"}],
        "warnings": []}));
    round_trip::<memory::MemorySearchAnswer>(
        json!({"results": [{"path": "MEMORY.md", "startLine": 1,
        "endLine": 2, "score": 0.5, "snippet": "s", "citation": "MEMORY.md#L1-L2"}],
        "stale": false, "mode": "hybrid", "warnings": []}),
    );
    round_trip::<memory::MemoryStatus>(
        json!({"files": 1, "chunks": 2, "vectors": 0, "identity": "i",
        "configured": "c", "vectorSearch": "paused", "stale": true, "warnings": ["w"]}),
    );
    round_trip::<memory::ReindexLine>(json!({"done": 1, "total": 2}));
    round_trip::<memory::ReindexLine>(
        json!({"error": {"code": "INTERNAL", "message": "the rebuild stopped"}}),
    );
}

#[test]
fn an_attachment_is_required_unless_it_says_otherwise_and_refuses_unknown_fields() {
    let read = |sample: serde_json::Value| serde_json::from_value::<Attachment>(sample);
    let required = |media_id: &str, required: bool| Attachment {
        media_id: media_id.to_owned(),
        required,
    };
    assert_eq!(read(json!({"mediaId": "a"})).unwrap(), required("a", true));
    assert_eq!(
        read(json!({"mediaId": "a", "required": null})).unwrap(),
        required("a", true)
    );
    assert_eq!(
        read(json!({"mediaId": "a", "required": false})).unwrap(),
        required("a", false)
    );
    assert!(read(json!({"mediaId": "a", "path": "/x"})).is_err());
    // The stored shape always writes `required`.
    assert_eq!(
        serde_json::to_value(required("a", true)).unwrap(),
        json!({"mediaId": "a", "required": true})
    );
}

#[test]
fn a_message_body_refuses_unknown_fields_and_unknown_queue_modes() {
    let read = |sample: serde_json::Value| serde_json::from_value::<MessageParams>(sample);
    let message = read(json!({"text": "hi", "queueMode": "steer", "idempotencyKey": "k"})).unwrap();
    assert_eq!(
        message.queue_mode,
        Some(gatehouse_api::sessions::QueueMode::Steer)
    );
    assert!(read(json!({"text": "hi", "extra": 1})).is_err());
    assert!(read(json!({"text": "hi", "queueMode": "later"})).is_err());
}

#[test]
fn events_decode_by_name_with_their_seq() {
    let (seq, event) =
        SessionEvent::parse("message.delta", r#"{"seq":4,"turnId":"t","text":"pa"}"#).unwrap();
    assert_eq!(seq, 4);
    assert_eq!(event.turn_id(), Some("t"));
    assert!(matches!(event, SessionEvent::MessageDelta(delta) if delta.text == "pa"));
    let (_, failed) = SessionEvent::parse(
        "turn.failed",
        r#"{"seq":5,"turnId":"t","status":"interrupted","error":{"code":null,"message":null}}"#,
    )
    .unwrap();
    assert!(matches!(failed, SessionEvent::TurnFailed(failed) if failed.error.code.is_none()));
    let (_, other) = SessionEvent::parse("session.renamed", r#"{"seq":6}"#).unwrap();
    assert_eq!(
        other,
        SessionEvent::Other {
            name: String::from("session.renamed")
        }
    );
    // A known event without its fields is an error, not an empty value.
    assert!(SessionEvent::parse("message.delta", r#"{"seq":7,"turnId":"t"}"#).is_err());
}
