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

#[test]
fn bench_turn_prints_tracing_at_info_against_spans_disabled_and_the_otlp_cost() {
    let output = gatehouse()
        .args(["bench", "turn", "--json", "--say-iterations", "2"])
        .args(["--tool-iterations", "1", "--cold-iterations", "1"])
        .args(["--tracing-iterations", "2"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = report["rows"].as_array().unwrap();
    let cases: Vec<&str> = rows
        .iter()
        .map(|row| row["case"].as_str().unwrap())
        .collect();
    assert_eq!(
        cases,
        vec![
            "/say hi, warm worker",
            "one write tool call, warm worker",
            "/say hi, new session (starts a worker)",
            "/say hi, tracing at info",
            "/say hi, OTLP export on",
        ],
        "{report}"
    );
    let traced = &rows[3];
    assert_eq!(traced["baseline"], "/say hi, spans disabled", "{traced}");
    assert_eq!(traced["samples"], 2, "{traced}");
    assert_eq!(traced["target"], "difference < 5% of p50", "{traced}");
    let exported = &rows[4];
    assert_eq!(
        exported["baseline"], "/say hi, tracing at info",
        "{exported}"
    );
    assert_eq!(exported["samples"], 2, "{exported}");
    for row in [traced, exported] {
        for field in ["p50Ns", "baselineP50Ns"] {
            assert!(
                row[field].as_u64().is_some_and(|ns| ns > 0),
                "{field}: {row}"
            );
        }
    }
    // The notes give both p50s, the difference in percent, whether the target is met, and the
    // spans the bench's own receiver took from the exporting run.
    let notes: Vec<&str> = report["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|note| note.as_str().unwrap())
        .collect();
    let comparison = notes
        .iter()
        .find(|note| note.starts_with("tracing at info: p50 "))
        .unwrap_or_else(|| panic!("{notes:#?}"));
    assert!(
        comparison.contains("% of the text-turn p50 (target < 5%: met)")
            || comparison.contains("% of the text-turn p50 (target < 5%: not met)"),
        "{comparison}"
    );
    let export = notes
        .iter()
        .find(|note| note.starts_with("OTLP export on ("))
        .unwrap_or_else(|| panic!("{notes:#?}"));
    assert!(export.contains("% of the text-turn p50"), "{export}");
    // The bench refuses a run that exported nothing, so a count of spans is printed.
    assert!(
        export.contains(" spans in ") && !export.contains("loopback, 0 spans"),
        "{export}"
    );
}
