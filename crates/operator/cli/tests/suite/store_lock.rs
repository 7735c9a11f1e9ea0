//! Who may use a store at once: a second `gatehouse gateway` on the same SQLite state refuses
//! to start with `STORE_IN_USE` and leaves the first one serving; Gateways on one PostgreSQL
//! database are replicas, one process per replica id, and a replica whose lease lapsed while
//! its database was out of reach takes a new one.

use std::process::Stdio;

use gatehouse_api::nodes::ReplicaList;

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

/// Gateways on one PostgreSQL database are replicas of one Gateway: a second process with
/// another replica id serves beside the first and shares its operator token; one with the same
/// id is refused with `REPLICA_ID_IN_USE` (exit 2) while the first lives; and a copy of the
/// database (`gatehouse state migrate`) is refused with `STORE_IN_USE` while replicas run.
#[tokio::test(flavor = "multi_thread")]
async fn gateways_on_one_postgres_database_are_replicas_and_one_id_runs_once() {
    let temp = tempfile::tempdir().unwrap();
    let store = fresh_database().await;
    let first = Gateway::start_with(
        &temp.path().join("one"),
        temp.path(),
        &["--store", store.as_str(), "--replica-id", "one"],
    );
    assert_eq!(first.get("/healthz").await.status(), 200);

    let (code, stderr) = second_gateway(
        &temp.path().join("same-id"),
        &["--store", store.as_str(), "--replica-id", "one"],
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("REPLICA_ID_IN_USE"), "{stderr}");

    let second = Gateway::start_with(
        &temp.path().join("two"),
        temp.path(),
        &["--store", store.as_str(), "--replica-id", "two"],
    );
    assert_eq!(
        second.token, first.token,
        "the replicas' operator tokens differ"
    );
    let replicas: ReplicaList = second.get_typed("/v1/replicas").await;
    let seen: Vec<(String, bool, bool)> = replicas
        .replicas
        .iter()
        .map(|replica| (replica.replica_id.clone(), replica.live, replica.current))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("one".to_owned(), true, false),
            ("two".to_owned(), true, true)
        ]
    );
    assert_eq!(first.get("/v1/sessions").await.status(), 200);

    let copy = gatehouse()
        .args(["state", "migrate", "--from", store.as_str(), "--to"])
        .arg(format!(
            "sqlite://{}",
            temp.path().join("copy.db").display()
        ))
        .args(["--media-from"])
        .arg(format!(
            "file://{}",
            temp.path().join("one/media").display()
        ))
        .args(["--media-to"])
        .arg(format!(
            "file://{}",
            temp.path().join("copy-media").display()
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&copy.stderr);
    assert_eq!(copy.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("STORE_IN_USE"), "{stderr}");
}

/// The first replica reaches PostgreSQL through a forwarder. While the forwarder is down its
/// lease lapses, and the other replica sees it go; when the forwarder is back, the first one
/// notices it lost its lease (`REPLICA_LEASE_LOST`), takes a new one under the next epoch and
/// serves on beside the other.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_whose_lease_lapsed_in_an_outage_takes_a_new_one_and_serves_on() {
    let temp = tempfile::tempdir().unwrap();
    let direct = fresh_database().await;
    let mut outage = Outage::new(&direct).await;
    let mut through = direct.clone();
    through.set_port(Some(outage.port)).unwrap();
    let first = Gateway::start_with(
        &temp.path().join("one"),
        temp.path(),
        &[
            "--store",
            through.as_str(),
            "--replica-id",
            "one",
            "--lease-seconds",
            "1",
        ],
    );
    let second = Gateway::start_with(
        &temp.path().join("two"),
        temp.path(),
        &["--store", direct.as_str(), "--replica-id", "two"],
    );
    let one = |replicas: &ReplicaList| {
        replicas
            .replicas
            .iter()
            .find(|replica| replica.replica_id == "one")
            .map(|replica| (replica.live, replica.epoch))
    };
    // Its epoch before the outage: a 1 s lease on a loaded machine may already have been
    // renewed under a new epoch once, which is not what this test is about.
    let replicas: ReplicaList = second.get_typed("/v1/replicas").await;
    let Some((true, before)) = one(&replicas) else {
        panic!("replica one is not live: {replicas:?}");
    };

    outage.begin();
    let deadline = std::time::Instant::now() + WAIT;
    let lapsed = loop {
        let replicas: ReplicaList = second.get_typed("/v1/replicas").await;
        if let Some((false, epoch)) = one(&replicas)
            && epoch >= before
        {
            break epoch;
        }
        assert!(std::time::Instant::now() < deadline, "{replicas:?}");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    outage.end().await;
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let replicas: ReplicaList = second.get_typed("/v1/replicas").await;
        if one(&replicas).is_some_and(|(live, epoch)| live && epoch > lapsed) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{replicas:?}: {}",
            first.process.stderr()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        first.process.stderr().contains("REPLICA_LEASE_LOST"),
        "{}",
        first.process.stderr()
    );
    assert_eq!(first.get("/v1/sessions").await.status(), 200);
    assert_eq!(second.get("/v1/sessions").await.status(), 200);
}
