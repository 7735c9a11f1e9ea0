//! `gatehouse bench` as a real process, with few iterations: the output's shape, never its
//! timing.

use sqlx::Connection;

use crate::suite::support::gatehouse;
use crate::suite::synapse::Synapse;

/// Runs `gatehouse bench NAME ARGS --json`, checks it succeeded and names itself, and returns
/// its report.
fn bench_report(name: &str, args: &[&str]) -> serde_json::Value {
    bench_report_of(name, gatehouse().args(["bench", name]).args(args))
}

/// Runs `command` (`gatehouse bench NAME ...`) with `--json`, checks it succeeded and names
/// itself, and returns its report.
fn bench_report_of(name: &str, command: &mut std::process::Command) -> serde_json::Value {
    let output = command.arg("--json").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(
        report["benchmark"]
            .as_str()
            .unwrap()
            .starts_with(&format!("gatehouse bench {name}:")),
        "{report}"
    );
    report
}

/// Asserts that a report row carries measured percentiles of both sides and a finite ratio.
fn assert_measured(row: &serde_json::Value) {
    for field in ["p50Ns", "p99Ns", "baselineP50Ns", "baselineP99Ns"] {
        assert!(
            row[field].as_u64().is_some_and(|ns| ns > 0),
            "{field}: {row}"
        );
    }
    assert!(row["ratio"].as_f64().is_some_and(f64::is_finite), "{row}");
}

#[test]
fn bench_sandbox_reports_the_hardened_and_the_bare_spawn_side_by_side() {
    let report = bench_report("sandbox", &["--iterations", "3"]);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{report}");
    assert_eq!(rows[1]["case"], "namespaces and mounts only", "{report}");
    assert_eq!(rows[1]["samples"], 3, "{report}");
    let row = &rows[0];
    assert_eq!(row["baseline"], "bwrap --ro-bind / / true", "{row}");
    assert_eq!(row["samples"], 3, "{row}");
    assert_eq!(row["target"], "ratio <= 1.50x", "{row}");
    assert_measured(row);
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

/// Returns the `--json` report of a successful bench run, and its rows as (case, baseline,
/// samples), checking that each has a finite ratio.
fn report_rows(output: &std::process::Output) -> (serde_json::Value, Vec<(String, String, u64)>) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            assert!(row["ratio"].as_f64().is_some_and(f64::is_finite), "{row}");
            (
                row["case"].as_str().unwrap().to_owned(),
                row["baseline"].as_str().unwrap().to_owned(),
                row["samples"].as_u64().unwrap(),
            )
        })
        .collect();
    (report, rows)
}

#[tokio::test(flavor = "multi_thread")]
async fn bench_gateway_reports_postgres_admission_beside_sqlite_against_bare_inserts() {
    let database = crate::suite::postgres::fresh_database().await;
    let output = gatehouse()
        .args([
            "bench",
            "gateway",
            "--json",
            "--sequential",
            "3",
            "--clients",
            "4",
        ])
        .args(["--per-client", "2", "--store", database.as_str()])
        .output()
        .unwrap();
    let (report, rows) = report_rows(&output);
    let expected: Vec<(String, String, u64)> = [
        (
            "sqlite: admit, 1 client (p50/p99)",
            "bare sqlite insert, 1 client",
            3,
        ),
        (
            "sqlite: admit, 4 clients (p50/p99)",
            "bare sqlite insert, 4 clients",
            8,
        ),
        (
            "postgres: admit, 1 client (p50/p99)",
            "bare postgres insert, 1 client",
            3,
        ),
        (
            "postgres: admit, 4 clients (p50/p99)",
            "bare postgres insert, 4 clients",
            8,
        ),
    ]
    .into_iter()
    .map(|(case, baseline, samples)| (case.to_owned(), baseline.to_owned(), samples))
    .collect();
    assert_eq!(rows, expected, "{report}");
    let notes = report["notes"].to_string();
    for backend in ["sqlite", "postgres"] {
        for clients in ["1 client x 3 messages", "4 clients x 2 messages"] {
            assert!(
                notes.contains(&format!("{backend}, {clients}: "))
                    && notes.contains("inserts/s bare"),
                "{notes}"
            );
        }
    }
    // The admissions went to PostgreSQL, and the bare table is gone.
    let mut db = sqlx::PgConnection::connect(database.as_str())
        .await
        .unwrap();
    let messages: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages")
        .fetch_one(&mut db)
        .await
        .unwrap();
    assert_eq!(messages, 3 + 8);
    let baseline: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('gatehouse_bench_baseline_messages')::text")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(baseline, None);
    // The store must be empty: a second run is refused, as is a SQLite URL.
    let again = gatehouse()
        .args(["bench", "gateway", "--sequential", "1", "--clients", "1"])
        .args(["--per-client", "1", "--store", database.as_str()])
        .output()
        .unwrap();
    assert_eq!(
        again.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let sqlite = gatehouse()
        .args(["bench", "gateway", "--store", "sqlite://gateway.db"])
        .output()
        .unwrap();
    assert_eq!(sqlite.status.code(), Some(2));
}

/// `gatehouse bench cluster` runs 1 and 3 replicas with 1 and 2 node hosts on one PostgreSQL
/// database, each against the single-replica figure, and every message it admits is stored.
#[tokio::test(flavor = "multi_thread")]
async fn bench_cluster_compares_three_replicas_and_two_nodes_with_one_replica() {
    let database = crate::suite::postgres::fresh_database().await;
    let output = gatehouse()
        .args(["bench", "cluster", "--json", "--clients", "2"])
        .args(["--messages-per-client", "2", "--turns-per-client", "1"])
        .args(["--store", database.as_str()])
        .output()
        .unwrap();
    let (report, rows) = report_rows(&output);
    let mut expected = Vec::new();
    for (shape, baseline) in [
        ("1 replica, 1 node", "1 replica, 1 node"),
        ("3 replicas, 1 node", "1 replica, 1 node"),
        ("1 replica, 2 nodes", "1 replica, 1 node"),
        ("3 replicas, 2 nodes", "1 replica, 2 nodes"),
    ] {
        expected.push((format!("admit, {shape}"), format!("admit, {baseline}"), 4));
        expected.push((
            format!("/say hi turn, {shape}"),
            format!("/say hi turn, {baseline}"),
            2,
        ));
    }
    assert_eq!(rows, expected, "{report}");
    // Every configuration's messages and turns went to the one database: 4 admitted and 2
    // turns' messages for each of the four.
    let mut db = sqlx::PgConnection::connect(database.as_str())
        .await
        .unwrap();
    let user_messages: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM messages WHERE role = 'user'")
            .fetch_one(&mut db)
            .await
            .unwrap();
    assert_eq!(user_messages, 4 * (4 + 2));
}

#[test]
fn bench_channel_reports_a_webhook_message_to_its_reply_against_an_api_turn() {
    let report = bench_report("channel", &["--iterations", "3"]);
    let row = &report["rows"][0];
    assert_eq!(row["case"], "webhook message to reply POSTed", "{report}");
    assert_eq!(row["baseline"], "API turn, POST to turn end", "{row}");
    assert_eq!(row["samples"], 3, "{row}");
    assert_eq!(row["target"], "ratio <= 1.50x", "{row}");
    assert_measured(row);
}

/// Given a homeserver (Synapse on loopback) and two accounts on it, `gatehouse bench channel`
/// also runs a Matrix channel: the sender's message to the bot's reply, the homeserver's own
/// round trip, and the first less two of the second, each against the same API turns.
#[tokio::test(flavor = "multi_thread")]
async fn bench_channel_adds_a_matrix_round_trip_and_the_homeservers_own_against_an_api_turn() {
    let dirs = crate::suite::support::dirs();
    let synapse = Synapse::start(&dirs.base.join("synapse"), &dirs.base.join("logs")).await;
    let bot = synapse.register("gatehouse-bot", "bot-password").await;
    let sender = synapse.register("alice", "alice-password").await;
    // One token by variable, the other by file: neither on argv.
    let sender_token = dirs.base.join("sender-token");
    std::fs::write(&sender_token, format!("{}\n", sender.access_token)).unwrap();
    let mut command = gatehouse();
    command
        .env("GATEHOUSE_BENCH_MATRIX_BOT_TOKEN", &bot.access_token)
        .args(["bench", "channel", "--iterations", "10"])
        .args(["--matrix-homeserver", synapse.url()])
        .args(["--matrix-bot-token-env", "GATEHOUSE_BENCH_MATRIX_BOT_TOKEN"])
        .arg("--matrix-sender-token-file")
        .arg(&sender_token);
    let report = bench_report_of("channel", &mut command);
    let rows = report["rows"].as_array().unwrap();
    let shape: Vec<(&str, &str)> = rows
        .iter()
        .map(|row| {
            (
                row["case"].as_str().unwrap(),
                row["target"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![
            ("webhook message to reply POSTed", "ratio <= 1.50x"),
            (
                "Matrix message to reply in /sync",
                "contains 2 homeserver trips"
            ),
            ("homeserver trip: send to /sync", "reported separately"),
            ("Matrix less 2 homeserver trips", "ratio <= 1.50x"),
        ],
        "{report}"
    );
    for row in rows {
        assert_eq!(row["baseline"], "API turn, POST to turn end", "{row}");
        assert_eq!(row["samples"], 10, "{row}");
        assert_measured(row);
    }
    let notes = report["notes"].to_string();
    assert!(notes.contains("the reply reaching the sender's"), "{notes}");
    assert!(!report.to_string().contains(&bot.access_token));
    assert!(!report.to_string().contains(&sender.access_token));
    // Both accounts left the rooms the bench opened.
    for user in [&bot, &sender] {
        assert_eq!(
            synapse.joined_rooms(user).await,
            Vec::<String>::new(),
            "{}",
            user.user_id
        );
    }

    // A homeserver without the tokens, or a token variable that is not set, is a usage error.
    for tokens in [
        vec![],
        vec![
            "--matrix-bot-token-env",
            "GATEHOUSE_BENCH_MATRIX_UNSET",
            "--matrix-sender-token-env",
            "GATEHOUSE_BENCH_MATRIX_UNSET",
        ],
    ] {
        let refused = gatehouse()
            .env_remove("GATEHOUSE_BENCH_MATRIX_UNSET")
            .args(["bench", "channel", "--iterations", "1"])
            .args(["--matrix-homeserver", synapse.url()])
            .args(&tokens)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--matrix-bot-token-env"), "{stderr}");
    }
}
