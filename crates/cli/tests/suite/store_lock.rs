//! One Gateway at a time on a store: a second `gatehouse gateway` on the same SQLite state or
//! the same PostgreSQL database refuses to start with `STORE_IN_USE` and leaves the first one
//! serving; and a Gateway whose database was taken over while its connection was lost stops
//! instead of writing beside the new owner.

use std::process::Stdio;

use crate::suite::postgres::Outage;
use crate::suite::postgres::fresh_database;
use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::gatehouse;

/// Runs a second `gatehouse gateway` on `state` with `extra` arguments and returns its exit
/// code and stderr; it must exit by itself (after the lock wait), never start serving.
fn second_gateway(state: &std::path::Path, extra: &[&str]) -> (Option<i32>, String) {
    let output = gatehouse()
        .args(["gateway", "--listen", "127.0.0.1:0", "--state"])
        .arg(state)
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        !stdout.contains("listening on"),
        "the second gateway served: {stdout}"
    );
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_gateway_on_the_same_sqlite_state_refuses_to_start_and_the_first_serves_on() {
    let temp = tempfile::tempdir().unwrap();
    let state = temp.path().join("state");
    let first = Gateway::start_local(&state, temp.path());
    assert_eq!(first.get("/healthz").await.status(), 200);

    let (code, stderr) = second_gateway(&state, &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("STORE_IN_USE") && stderr.contains("gateway.db"),
        "{stderr}"
    );
    assert_eq!(first.get("/healthz").await.status(), 200);
    let sessions = first.get("/v1/sessions").await;
    assert_eq!(
        sessions.status(),
        200,
        "the first gateway still reads its store"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_second_gateway_on_the_same_postgres_database_refuses_to_start() {
    let temp = tempfile::tempdir().unwrap();
    let store = fresh_database().await;
    let first = Gateway::start_with(
        &temp.path().join("one"),
        temp.path(),
        &["--store", store.as_str()],
    );
    assert_eq!(first.get("/healthz").await.status(), 200);

    let (code, stderr) = second_gateway(&temp.path().join("two"), &["--store", store.as_str()]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("STORE_IN_USE"), "{stderr}");
    assert_eq!(first.get("/v1/sessions").await.status(), 200);
}

/// The first Gateway reaches PostgreSQL through a forwarder; while the forwarder is down (its
/// lock connection is gone, so the server released the lock) a second Gateway starts directly on
/// the database. When the forwarder is back, the first one finds the lock taken and stops with
/// `STORE_IN_USE`, while the second serves on.
#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_whose_database_was_taken_over_during_an_outage_stops() {
    let temp = tempfile::tempdir().unwrap();
    let direct = fresh_database().await;
    let mut outage = Outage::new(&direct).await;
    let mut through = direct.clone();
    through.set_port(Some(outage.port)).unwrap();
    let mut first = Gateway::start_with(
        &temp.path().join("one"),
        temp.path(),
        &["--store", through.as_str()],
    );
    assert_eq!(first.get("/healthz").await.status(), 200);

    outage.begin();
    let second = Gateway::start_with(
        &temp.path().join("two"),
        temp.path(),
        &["--store", direct.as_str()],
    );
    assert_eq!(second.get("/v1/sessions").await.status(), 200);
    outage.end().await;

    let status = first.process.wait_exit(WAIT);
    assert_eq!(status.code(), Some(1), "{}", first.process.stderr());
    let stderr = first.process.stderr();
    assert!(
        stderr.contains("STORE_IN_USE") && stderr.contains("another gateway took"),
        "{stderr}"
    );
    assert_eq!(second.get("/v1/sessions").await.status(), 200);
}
