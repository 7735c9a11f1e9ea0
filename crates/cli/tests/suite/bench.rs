//! `gatehouse bench` as a real process, with few iterations: the output's shape, never its
//! timing.

use crate::suite::support::gatehouse;

#[test]
fn bench_sandbox_reports_the_hardened_and_the_bare_spawn_side_by_side() {
    let output = gatehouse()
        .args(["bench", "sandbox", "--iterations", "3", "--json"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        report["benchmark"]
            .as_str()
            .unwrap()
            .starts_with("gatehouse bench sandbox:"),
        "{report}"
    );
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    assert_eq!(rows[1]["case"], "namespaces and mounts only", "{report}");
    assert_eq!(rows[1]["samples"], 3, "{report}");
    let row = &rows[0];
    assert_eq!(row["baseline"], "bwrap --ro-bind / / true", "{row}");
    assert_eq!(row["samples"], 3, "{row}");
    assert_eq!(row["target"], "ratio <= 1.50x", "{row}");
    for field in ["p50Ns", "p99Ns", "baselineP50Ns", "baselineP99Ns"] {
        assert!(
            row[field].as_u64().is_some_and(|ns| ns > 0),
            "{field}: {row}"
        );
    }
    assert!(row["ratio"].as_f64().is_some_and(f64::is_finite), "{row}");
    // The note names the layers that were measured.
    let notes = report["notes"].to_string();
    assert!(
        notes.contains("seccomp on") && notes.contains("Landlock ABI"),
        "{notes}"
    );

    let table = gatehouse()
        .args(["bench", "sandbox", "--iterations", "2"])
        .output()
        .unwrap();
    assert!(table.status.success());
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.lines().any(|line| line.starts_with("spawn true")),
        "{text}"
    );
}
