//! Issue 33, "One API key cannot take the Gateway from the others", reproduction 4: a key
//! flooding a no-op audited action (`POST /v1/sessions/{key}/abort`) against a real
//! `gatehouse gateway` writes at most `LIMITED_ROWS_PER_WINDOW` rows per window and one
//! `audit.suppressed` row counting the rest, while another key's rows are still all written.
//! The hidden `GATEHOUSE_TEST_AUDIT_LIMIT_WINDOW_MS` shortens the rate limit's minute so the
//! summary comes within seconds.

use std::time::Duration;
use std::time::Instant;

use gatehouse_api::audit::AuditEntry;
use gatehouse_api::audit::AuditList;
use gatehouse_gateway::LIMITED_ROWS_PER_WINDOW;
use pretty_assertions::assert_eq;

use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;

/// The shortened window of the audit's rate limit.
const WINDOW: Duration = Duration::from_secs(4);

/// How many aborts the flooding key sends.
const FLOOD: u64 = 300;

/// Creates a `chat` key named `name` with the operator token and returns its secret.
async fn create_key(gateway: &Gateway, name: &str) -> String {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/keys", gateway.url))
        .bearer_auth(&gateway.token)
        .json(&serde_json::json!({"name": name, "scopes": ["chat"]}))
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let created: serde_json::Value = response.json().await.unwrap();
    created["key"].as_str().unwrap().to_owned()
}

/// Aborts `session` (which runs nothing: a no-op) with `key`.
async fn abort(client: &reqwest::Client, gateway: &Gateway, key: &str, session: &str) {
    let response = client
        .post(format!("{}/v1/sessions/{session}/abort", gateway.url))
        .bearer_auth(key)
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
}

/// Returns the whole audit trail, read forward with `after=`.
async fn audit_trail(gateway: &Gateway) -> Vec<AuditEntry> {
    let mut trail = Vec::new();
    loop {
        let after = trail.last().map_or(0, |event: &AuditEntry| event.seq);
        let page: AuditList = gateway.get_typed(&format!("/v1/audit?after={after}")).await;
        if page.events.is_empty() {
            return trail;
        }
        trail.extend(page.events);
    }
}

/// Returns how many rows of `trail` the flooding key's aborts wrote, and how many the
/// `audit.suppressed` rows about that key count.
fn flood_rows(trail: &[AuditEntry]) -> (u64, u64) {
    let written = trail
        .iter()
        .filter(|event| event.actor == "key:flood" && event.action == "session.abort")
        .count();
    let suppressed = trail
        .iter()
        .filter(|event| event.action == "audit.suppressed" && event.details["key"] == "key:flood")
        .map(|event| {
            assert_eq!(
                (event.actor.as_str(), event.outcome.as_str()),
                ("gateway", "summarised")
            );
            event.details["suppressed"].as_u64().unwrap()
        })
        .sum();
    (written as u64, suppressed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_33_a_key_flooding_aborts_is_summarised_and_another_keys_rows_are_kept() {
    let dirs = dirs();
    let window_ms = WINDOW.as_millis().to_string();
    let gateway = Gateway::start_with_env(
        &dirs.base.join("state"),
        &dirs.base.join("logs"),
        &[],
        &[("GATEHOUSE_TEST_AUDIT_LIMIT_WINDOW_MS", &window_ms)],
    );
    let flood = create_key(&gateway, "flood").await;
    let quiet = create_key(&gateway, "quiet").await;
    let client = reqwest::Client::new();

    let started = Instant::now();
    for index in 0..FLOOD {
        abort(&client, &gateway, &flood, &format!("flood-{index}")).await;
        if index % 100 == 0 {
            abort(&client, &gateway, &quiet, "quiet").await;
        }
    }
    let windows_spanned = (started.elapsed().as_millis() / WINDOW.as_millis()) as u64 + 1;

    // The windows end; the Gateway writes their summaries by itself.
    let deadline = Instant::now() + WAIT;
    let trail = loop {
        let trail = audit_trail(&gateway).await;
        let (written, suppressed) = flood_rows(&trail);
        if written + suppressed == FLOOD {
            break trail;
        }
        assert!(
            Instant::now() < deadline,
            "{written} rows and {suppressed} summarised of {FLOOD} aborts: {}",
            gateway.process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let (written, suppressed) = flood_rows(&trail);
    assert!(
        written <= u64::from(LIMITED_ROWS_PER_WINDOW) * windows_spanned,
        "{written} rows in {windows_spanned} windows"
    );
    assert!(suppressed >= FLOOD - u64::from(LIMITED_ROWS_PER_WINDOW) * windows_spanned);
    let quiet_rows: Vec<(&str, &str)> = trail
        .iter()
        .filter(|event| event.actor == "key:quiet")
        .map(|event| {
            (
                event.action.as_str(),
                event.details["sessionKey"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(quiet_rows, vec![("session.abort", "quiet"); 3]);
}
