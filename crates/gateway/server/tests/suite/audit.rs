//! Issue 33, "One API key cannot take the Gateway from the others": the audit trail pages
//! backwards past one answer's 1,000 events down to the oldest, and the running Gateway
//! deletes the rows older than its audit retention.

use std::time::Duration;
use std::time::Instant;

use axum::body::Body;
use axum::http::StatusCode;
use gatehouse_api::audit::AuditList;
use gatehouse_store::records::NewAuditEvent;
use pretty_assertions::assert_eq;

use crate::suite::support::FakeWorkspace;
use crate::suite::support::FetchAnswer;
use crate::suite::support::TestGateway;
use crate::suite::support::WriteAnswer;
use crate::suite::support::gateway_configured;
use crate::suite::support::operator_request;

fn workspace() -> FakeWorkspace {
    FakeWorkspace::new(FetchAnswer::NotFound, WriteAnswer::Confirmed)
}

fn event(action: &str, at_ms: i64) -> NewAuditEvent {
    NewAuditEvent {
        at_ms,
        actor: "operator".into(),
        action: action.into(),
        outcome: "succeeded".into(),
        reason_code: None,
        details: serde_json::json!({}),
    }
}

/// Returns the answer of `GET uri` (a `/v1/audit` query) with the operator token.
async fn audit_page(gateway: &TestGateway, uri: &str) -> AuditList {
    let (status, body) = gateway
        .send(operator_request("GET", uri, Body::empty()))
        .await;
    assert_eq!(status, StatusCode::OK, "{uri}: {body}");
    serde_json::from_value(body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_33_the_audit_pages_backwards_past_1000_events_to_the_oldest() {
    // The events are dated 1970: the retention's prune at start must not race the test.
    let gateway =
        gateway_configured(workspace(), None, |config| config.audit.retention = None).await;
    let mut written = Vec::new();
    for index in 0..2_345 {
        let seq = gateway
            .store()
            .append_audit(&event(&format!("test.{index}"), 1_000 + index))
            .await
            .unwrap();
        written.push(seq);
    }

    // Backwards from the newest, a full page at a time, down to the oldest event.
    let mut pages = Vec::new();
    let mut before = i64::MAX;
    loop {
        let page = audit_page(&gateway, &format!("/v1/audit?before={before}")).await;
        let seqs: Vec<i64> = page.events.iter().map(|event| event.seq).collect();
        let Some(&first) = seqs.first() else {
            break;
        };
        assert!(
            seqs.windows(2).all(|pair| pair[0] < pair[1]) && seqs.last() < Some(&before),
            "before={before}: {seqs:?}"
        );
        before = first;
        pages.push(seqs);
    }
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, vec![1000, 1000, 345]);
    let mut seen: Vec<i64> = pages.into_iter().rev().flatten().collect();
    seen.sort_unstable();
    assert_eq!(seen, written);

    // `limit=` shortens a page either way; `after=` reads forward exactly as before.
    let newest = audit_page(&gateway, "/v1/audit?before=9223372036854775807&limit=3").await;
    let newest: Vec<i64> = newest.events.iter().map(|event| event.seq).collect();
    assert_eq!(newest, written[2_342..].to_vec());
    let first = audit_page(&gateway, "/v1/audit").await;
    assert_eq!(first.events.len(), 1000);
    assert_eq!(first.events[0].seq, written[0]);
    let next = audit_page(
        &gateway,
        &format!("/v1/audit?after={}&limit=2", written[999]),
    )
    .await;
    let next: Vec<i64> = next.events.iter().map(|event| event.seq).collect();
    assert_eq!(next, written[1000..1002].to_vec());

    for uri in [
        "/v1/audit?after=1&before=5",
        "/v1/audit?limit=0",
        "/v1/audit?before=5&limit=1001",
    ] {
        let (status, body) = gateway
            .send(operator_request("GET", uri, Body::empty()))
            .await;
        assert_eq!(
            (status, &body["error"]["code"]),
            (
                StatusCode::BAD_REQUEST,
                &serde_json::json!("INVALID_REQUEST")
            ),
            "{uri}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_33_the_running_gateway_prunes_audit_rows_older_than_the_retention() {
    let retention = Duration::from_secs(20);
    let gateway = gateway_configured(workspace(), None, |config| {
        config.audit.retention = Some(retention);
    })
    .await;
    let now = gatehouse_protocol::time::now_ms();
    let store = gateway.store();
    store
        .append_audit(&event("test.a_day_old", now - 86_400_000))
        .await
        .unwrap();
    store
        .append_audit(&event("test.a_minute_old", now - 60_000))
        .await
        .unwrap();
    store
        .append_audit(&event("test.young", now - 1_000))
        .await
        .unwrap();
    let actions = |list: AuditList| -> Vec<String> {
        list.events.into_iter().map(|event| event.action).collect()
    };
    // The Gateway prunes every tenth of the retention: the old rows go within seconds.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let kept = actions(audit_page(&gateway, "/v1/audit").await);
        if kept == vec![String::from("test.young")] {
            break;
        }
        assert!(Instant::now() < deadline, "never pruned: {kept:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
