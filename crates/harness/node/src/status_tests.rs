use std::os::unix::fs::PermissionsExt;

use pretty_assertions::assert_eq;

use crate::error::NodeHostError;
use crate::status::NodeStatus;
use crate::status::Probe;
use crate::status::StatusFile;
use crate::status::StatusUpdate;
use crate::status::Unhealthy;
use crate::status::code_for_status;
use crate::status::read_status;

const NOW: i64 = 1_700_000_000_000;

fn status(connected: bool, updated_at_ms: i64) -> NodeStatus {
    NodeStatus {
        connected,
        updated_at_ms,
        gateway_conn_id: None,
        last_error_code: Some("LINK_CLOSED".to_owned()),
        pid: 7,
    }
}

/// Returns a node root whose `node/` directory exists.
fn node_root() -> tempfile::TempDir {
    let temp = tempfile::tempdir().unwrap();
    std::fs::create_dir(temp.path().join("node")).unwrap();
    temp
}

#[test]
fn check_applies_the_probe_limits() {
    let stale = Unhealthy::Stale {
        age_ms: 90_001,
        max_age_ms: 90_000,
    };
    let not_connected = Unhealthy::NotConnected {
        last_error_code: Some("LINK_CLOSED".to_owned()),
    };
    let table = [
        (true, 0, Probe::Liveness, Ok(())),
        (true, 0, Probe::Readiness, Ok(())),
        (false, 0, Probe::Liveness, Ok(())),
        (false, 0, Probe::Readiness, Err(not_connected)),
        (true, 30_000, Probe::Readiness, Ok(())),
        (
            true,
            30_001,
            Probe::Readiness,
            Err(Unhealthy::Stale {
                age_ms: 30_001,
                max_age_ms: 30_000,
            }),
        ),
        (true, 30_001, Probe::Liveness, Ok(())),
        (false, 90_000, Probe::Liveness, Ok(())),
        (false, 90_001, Probe::Liveness, Err(stale)),
        (
            true,
            -90_001,
            Probe::Liveness,
            Err(Unhealthy::FromTheFuture { ahead_ms: 90_001 }),
        ),
    ];
    for (connected, age_ms, probe, expected) in table {
        assert_eq!(
            status(connected, NOW - age_ms).check(probe, NOW),
            expected,
            "connected {connected}, age {age_ms} ms, {probe:?}"
        );
    }
}

#[test]
fn record_writes_a_0600_file_that_read_status_returns() {
    let root = node_root();
    let file = StatusFile::new(root.path().join("node"));
    assert_eq!(read_status(root.path()).unwrap(), None);

    file.record(StatusUpdate::Connecting).unwrap();
    file.record(StatusUpdate::Failed {
        code: "CONNECT_FAILED".to_owned(),
    })
    .unwrap();
    let failed = read_status(root.path()).unwrap().unwrap();
    assert_eq!(
        (failed.connected, failed.last_error_code.as_deref()),
        (false, Some("CONNECT_FAILED"))
    );

    file.record(StatusUpdate::Connected {
        conn_id: "conn-9".to_owned(),
    })
    .unwrap();
    let path = root.path().join("node/status.json");
    let mode = std::fs::symlink_metadata(&path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777;
    assert_eq!(mode, 0o600);
    let connected = read_status(root.path()).unwrap().unwrap();
    assert_eq!(
        connected,
        NodeStatus {
            connected: true,
            updated_at_ms: connected.updated_at_ms,
            gateway_conn_id: Some("conn-9".to_owned()),
            last_error_code: None,
            pid: std::process::id(),
        }
    );
    assert!(
        connected
            .check(Probe::Readiness, gatehouse_protocol::time::now_ms())
            .is_ok()
    );

    file.record(StatusUpdate::Stopped).unwrap();
    let stopped = read_status(root.path()).unwrap().unwrap();
    assert_eq!((stopped.connected, stopped.gateway_conn_id), (false, None));
    // Only the status file is left: no temporary file.
    let names: Vec<_> = std::fs::read_dir(root.path().join("node"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names, ["status.json"]);
}

#[test]
fn the_json_form_uses_camel_case_and_explicit_nulls() {
    let value = serde_json::to_value(status(true, NOW)).unwrap();
    assert_eq!(
        value,
        serde_json::json!({
            "connected": true,
            "updatedAtMs": NOW,
            "gatewayConnId": null,
            "lastErrorCode": "LINK_CLOSED",
            "pid": 7,
        })
    );
}

#[test]
fn a_symlinked_status_file_is_refused_and_nothing_is_written_through_it() {
    let root = node_root();
    let target = root.path().join("target");
    std::fs::write(&target, "untouched").unwrap();
    let path = root.path().join("node/status.json");
    std::os::unix::fs::symlink(&target, &path).unwrap();

    let file = StatusFile::new(root.path().join("node"));
    let err = file
        .record(StatusUpdate::Connected {
            conn_id: "conn-1".to_owned(),
        })
        .unwrap_err();
    assert!(matches!(err, NodeHostError::StateSymlink { .. }), "{err:?}");
    let err = read_status(root.path()).unwrap_err();
    assert!(matches!(err, NodeHostError::StateSymlink { .. }), "{err:?}");

    assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
    assert!(
        std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read_dir(root.path().join("node")).unwrap().count(),
        1
    );
}

#[test]
fn a_symlinked_node_directory_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root.path().join("node")).unwrap();
    std::fs::write(
        elsewhere.path().join("status.json"),
        serde_json::to_vec(&status(true, NOW)).unwrap(),
    )
    .unwrap();

    let err = read_status(root.path()).unwrap_err();
    assert!(matches!(err, NodeHostError::StateSymlink { .. }), "{err:?}");
    let file = StatusFile::new(root.path().join("node"));
    let err = file.record(StatusUpdate::Connecting).unwrap_err();
    assert!(matches!(err, NodeHostError::StateSymlink { .. }), "{err:?}");
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 1);
}

#[test]
fn read_status_refuses_garbage_and_other_file_types() {
    let root = node_root();
    let path = root.path().join("node/status.json");
    std::fs::write(&path, "not json").unwrap();
    let err = read_status(root.path()).unwrap_err();
    assert!(
        matches!(err, NodeHostError::InvalidStateFile { .. }),
        "{err:?}"
    );

    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let err = read_status(root.path()).unwrap_err();
    assert!(
        matches!(err, NodeHostError::InvalidStateFile { .. }),
        "{err:?}"
    );
    let file = StatusFile::new(root.path().join("node"));
    let err = file.record(StatusUpdate::Connecting).unwrap_err();
    assert!(
        matches!(err, NodeHostError::InvalidStateFile { .. }),
        "{err:?}"
    );
}

#[test]
fn only_stable_codes_reach_the_file() {
    let table = [
        ("LINK_CLOSED", "LINK_CLOSED"),
        ("SETUP_CODE_INVALID", "SETUP_CODE_INVALID"),
        ("", "UNKNOWN_ERROR"),
        ("token abc", "UNKNOWN_ERROR"),
        ("lowercase", "UNKNOWN_ERROR"),
    ];
    for (code, expected) in table {
        assert_eq!(code_for_status(code), expected, "{code:?}");
    }
    assert_eq!(code_for_status(&"A".repeat(65)), "UNKNOWN_ERROR");
}
