//! The copier's catalogue against the real schema, and copies between real stores: a SQLite
//! file and fresh databases on the PostgreSQL server `GATEHOUSE_TEST_POSTGRES_URL` names.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::collections::BTreeSet;
use std::sync::Arc;

use gatehouse_protocol::worker::OmittedPaths;
use gatehouse_state::db::Db;
use gatehouse_state::db::Statement;
use gatehouse_state::migrate::MigrateOptions;
use gatehouse_state::tables::NOT_STATE;
use gatehouse_state::tables::TABLES;
use gatehouse_store::Store;
use gatehouse_store::location::StoreLocation;
use gatehouse_store::records::Attachment;
use gatehouse_store::records::Blob;
use gatehouse_store::records::CheckpointManifest;
use gatehouse_store::records::NewAuditEvent;
use gatehouse_store::records::NewUserMessage;
use gatehouse_store::records::QueueMode;
use gatehouse_store::records::StoredEntry;
use pretty_assertions::assert_eq;

/// Creates an empty database on the test server and returns its location.
async fn fresh_postgres() -> StoreLocation {
    gatehouse_testkit::fresh_postgres_database("state")
        .await
        .as_str()
        .parse()
        .unwrap()
}

/// Returns the names of the tables the migration files of `backend` create.
fn migration_tables(backend: &str) -> BTreeSet<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../store/migrations")
        .join(backend);
    let mut tables = BTreeSet::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let words: Vec<&str> = text.split_whitespace().collect();
        for (index, pair) in words.windows(2).enumerate() {
            if pair[0].eq_ignore_ascii_case("CREATE") && pair[1].eq_ignore_ascii_case("TABLE") {
                // `CREATE TABLE [IF NOT EXISTS] name (`
                let mut name = index + 2;
                if words
                    .get(name)
                    .is_some_and(|word| word.eq_ignore_ascii_case("IF"))
                {
                    name += 3;
                }
                let table = words[name].trim_end_matches('(');
                if !NOT_STATE.contains(&table) {
                    tables.insert(table.to_owned());
                }
            }
        }
    }
    assert!(!tables.is_empty(), "no CREATE TABLE in {}", dir.display());
    tables
}

#[tokio::test(flavor = "multi_thread")]
async fn every_table_and_column_of_the_schema_is_in_the_catalogue() {
    let catalogue: BTreeSet<String> = TABLES.iter().map(|table| table.name.to_owned()).collect();
    for backend in ["sqlite", "postgres"] {
        assert_eq!(
            migration_tables(backend),
            catalogue,
            "the {backend} migrations create tables the copier does not know (or the reverse)"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let sqlite = StoreLocation::Local(dir.path().join("gateway.db"));
    for location in [sqlite, fresh_postgres().await] {
        let db = Db::open_writable(&location).await.unwrap();
        let live: BTreeSet<String> = db
            .table_names()
            .await
            .unwrap()
            .into_iter()
            .filter(|name| !NOT_STATE.contains(&name.as_str()))
            .collect();
        assert_eq!(live, catalogue, "{location}");
        for table in TABLES {
            let mut expected: Vec<&str> = table.columns.iter().map(|column| column.name).collect();
            if let (Db::Postgres(_), Some(generated)) = (&db, table.generated_order) {
                expected.push(generated);
            }
            expected.sort_unstable();
            let mut columns = db.column_names(table.name).await.unwrap();
            columns.sort_unstable();
            assert_eq!(columns, expected, "{location}: columns of {}", table.name);
        }
    }
}

/// Fills a store through the `Store` trait: two sessions with messages (one with NUL and
/// non-ASCII text), an attachment, two checkpoints saved in the same millisecond, a Codex
/// binding and audit events.
async fn populate(store: &Arc<dyn Store>) {
    for (index, (session, text)) in [("a", "hello\0 wörld"), ("b", "two"), ("a", "three")]
        .into_iter()
        .enumerate()
    {
        store
            .admit_user_message(&NewUserMessage {
                session_key: session.to_owned(),
                runtime: String::from("native"),
                turn_id: format!("turn-{index}"),
                text: text.to_owned(),
                attachments: vec![Attachment {
                    media_id: "a".repeat(64),
                    required: false,
                }],
                idempotency_key: Some(format!("key-{index}")),
                queue_mode: QueueMode::Followup,
                origin: None,
                api_key: None,
                now_ms: 1_000 + index as i64,
            })
            .await
            .unwrap();
    }
    for id in ["ck-2", "ck-1"] {
        store
            .save_checkpoint(
                "a",
                id,
                &CheckpointManifest::report(
                    vec![StoredEntry {
                        path: id.to_owned(),
                        kind: String::from("file"),
                        executable: false,
                        sha256: None,
                        size: 0,
                        target: None,
                        content: Blob {
                            media_id: Some("b".repeat(64)),
                        },
                    }],
                    OmittedPaths::default(),
                ),
                5_000,
                None,
            )
            .await
            .unwrap();
    }
    store
        .bind_codex_thread("b", "thread-1", 6_000)
        .await
        .unwrap();
    for action in ["one", "two"] {
        store
            .append_audit(&NewAuditEvent {
                at_ms: 7_000,
                actor: String::from("operator"),
                action: action.to_owned(),
                outcome: String::from("succeeded"),
                reason_code: None,
                details: serde_json::json!({"z": 1, "a": [true, null]}),
            })
            .await
            .unwrap();
    }
}

fn audit(action: &str) -> NewAuditEvent {
    NewAuditEvent {
        at_ms: 8_000,
        actor: String::from("operator"),
        action: action.to_owned(),
        outcome: String::from("succeeded"),
        reason_code: None,
        details: serde_json::json!({}),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_store_moves_sqlite_to_postgres_and_back_with_its_order_and_counters() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = StoreLocation::Local(dir.path().join("gateway.db"));
    populate(&gatehouse_store::open(&sqlite).await.unwrap()).await;
    let postgres = fresh_postgres().await;
    let options = MigrateOptions {
        batch_rows: 2,
        ..MigrateOptions::default()
    };
    let report = gatehouse_state::migrate::migrate(&sqlite, &postgres, &options, &mut |_| {})
        .await
        .unwrap();
    assert!(report.verified, "{report:?}");
    let back = StoreLocation::Local(dir.path().join("back.db"));
    let report = gatehouse_state::migrate::migrate(&postgres, &back, &options, &mut |_| {})
        .await
        .unwrap();
    assert!(report.verified, "{report:?}");

    for location in [&postgres, &back] {
        let store = gatehouse_store::open(location).await.unwrap();
        // The transcript is the same, NUL aside: PostgreSQL stores it as U+FFFD.
        let texts: Vec<String> = store
            .transcript("a")
            .await
            .unwrap()
            .into_iter()
            .map(|message| message.content)
            .collect();
        assert_eq!(texts, ["hello\u{fffd} wörld", "three"], "{location}");
        // Checkpoints saved in the same millisecond keep their order.
        let recent: Vec<String> = store
            .recent_checkpoints("a", "none", 10)
            .await
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        assert_eq!(recent, ["ck-1", "ck-2"], "{location}");
        assert_eq!(
            store.codex_thread("b").await.unwrap().as_deref(),
            Some("thread-1")
        );
        // Counters continue after the copied rows: audit numbers and transcript numbers.
        assert_eq!(
            store.append_audit(&audit("next")).await.unwrap(),
            3,
            "{location}"
        );
        let admitted = store
            .admit_user_message(&NewUserMessage {
                session_key: String::from("b"),
                runtime: String::from("native"),
                turn_id: String::from("turn-new"),
                text: String::from("after"),
                attachments: Vec::new(),
                idempotency_key: Some(String::from("key-1")),
                queue_mode: QueueMode::Followup,
                origin: None,
                api_key: None,
                now_ms: 9_000,
            })
            .await
            .unwrap();
        assert_eq!(
            admitted.turn.turn_id, "turn-1",
            "the idempotency key was not copied"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_copy_is_refused_into_a_store_with_state_one_holding_another_copy_or_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let source = StoreLocation::Local(dir.path().join("gateway.db"));
    populate(&gatehouse_store::open(&source).await.unwrap()).await;
    let other = StoreLocation::Local(dir.path().join("other.db"));
    gatehouse_store::open(&other)
        .await
        .unwrap()
        .append_audit(&audit("elsewhere"))
        .await
        .unwrap();
    let target = fresh_postgres().await;
    let options = MigrateOptions::default();
    let report = gatehouse_state::migrate::migrate(&other, &target, &options, &mut |_| {})
        .await
        .unwrap();
    assert!(report.verified);
    let refused = gatehouse_state::migrate::migrate(&source, &target, &options, &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(refused, gatehouse_state::StateError::OtherSource { .. }),
        "{refused}"
    );
    // The source under another spelling is the same store, never a target.
    let spelled = StoreLocation::Local(dir.path().join(".").join("gateway.db"));
    let same = gatehouse_state::migrate::migrate(&source, &spelled, &options, &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(same, gatehouse_state::StateError::SameStore { .. }),
        "{same}"
    );
    // So is a hard link to it, whose canonical path differs: replacing the target would
    // empty the source.
    let linked = dir.path().join("linked.db");
    std::fs::hard_link(dir.path().join("gateway.db"), &linked).unwrap();
    let replace = gatehouse_state::migrate::MigrateOptions {
        replace_target: true,
        ..options.clone()
    };
    let same = gatehouse_state::migrate::migrate(
        &source,
        &StoreLocation::Local(linked),
        &replace,
        &mut |_| {},
    )
    .await
    .unwrap_err();
    assert!(
        matches!(same, gatehouse_state::StateError::SameStore { .. }),
        "{same}"
    );
    let populated = gatehouse_state::migrate::migrate(&source, &other, &options, &mut |_| {})
        .await
        .unwrap_err();
    assert!(
        matches!(
            populated,
            gatehouse_state::StateError::TargetNotEmpty {
                table: "audit_events",
                rows: 1
            }
        ),
        "{populated}"
    );
}

/// Plants, with foreign keys off, every kind of damage the check looks for apart from blobs:
/// a turn of a missing session (with its message), a second running turn, a message of a
/// missing turn, a gap in an event log, a missing latest checkpoint, and bindings to a missing
/// session and a missing node.
const DAMAGE: &[&str] = &[
    "INSERT INTO turns (turn_id, session_key, turn_no, status, queue_mode, attachments_json, created_at_ms) \
     VALUES ('t-orphan', 'gone', 1, 'queued', 'followup', '[]', 1)",
    "UPDATE turns SET status = 'running' WHERE turn_id IN ('turn-0', 'turn-2')",
    "INSERT INTO messages (session_key, seq, turn_id, role, content, created_at_ms) \
     VALUES ('b', 2, 't-missing', 'assistant', 'x', 1)",
    "UPDATE sessions SET next_message_seq = 3 WHERE session_key = 'b'",
    "DELETE FROM session_events WHERE session_key = 'a' AND seq = 1",
    "UPDATE sessions SET latest_checkpoint_id = 'ck-gone', node_id = 'node-gone' WHERE session_key = 'a'",
    "INSERT INTO codex_threads (session_key, thread_id, bound_at_ms) VALUES ('ghost', 'th', 1)",
];

#[tokio::test(flavor = "multi_thread")]
async fn state_check_reports_each_kind_of_damage_on_both_backends() {
    use gatehouse_protocol::error::ErrorCode as FindingCode;

    let dir = tempfile::tempdir().unwrap();
    let sqlite = StoreLocation::Local(dir.path().join("gateway.db"));
    for location in [sqlite, fresh_postgres().await] {
        populate(&gatehouse_store::open(&location).await.unwrap()).await;
        let clean = gatehouse_state::check::check(&location, None)
            .await
            .unwrap();
        assert!(clean.ok, "{location}: {:?}", clean.findings);
        let db = Db::open_writable(&location).await.unwrap();
        match &db {
            Db::Sqlite(pool) => {
                let mut connection = pool.acquire().await.unwrap();
                sqlx::raw_sql("PRAGMA foreign_keys = OFF")
                    .execute(&mut *connection)
                    .await
                    .unwrap();
                for sql in DAMAGE {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(*sql))
                        .execute(&mut *connection)
                        .await
                        .unwrap();
                }
                sqlx::raw_sql("PRAGMA foreign_keys = ON")
                    .execute(&mut *connection)
                    .await
                    .unwrap();
            }
            Db::Postgres(_) => {
                // The test role owns the server: replica mode skips the foreign key triggers.
                let mut statements = vec![Statement::plain(
                    "SET LOCAL session_replication_role = replica",
                )];
                statements.extend(DAMAGE.iter().map(|sql| Statement::plain(*sql)));
                db.execute_in_transaction(&statements).await.unwrap();
            }
        }
        db.close().await;
        let report = gatehouse_state::check::check(&location, None)
            .await
            .unwrap();
        assert!(!report.ok);
        let mut found: Vec<(FindingCode, Option<String>)> = report
            .findings
            .iter()
            .map(|finding| (finding.code, finding.session_key.clone()))
            .collect();
        found.sort_by_key(|(code, session)| (format!("{code:?}"), session.clone()));
        let mut expected = vec![
            (FindingCode::CheckpointMissing, Some(String::from("a"))),
            (
                FindingCode::DanglingCodexBinding,
                Some(String::from("ghost")),
            ),
            (FindingCode::DanglingNodeBinding, Some(String::from("a"))),
            (FindingCode::EventSequenceBroken, Some(String::from("a"))),
            (FindingCode::SessionMissing, Some(String::from("gone"))),
            (FindingCode::SeveralRunningTurns, Some(String::from("a"))),
            (FindingCode::TurnMissing, Some(String::from("b"))),
        ];
        expected.sort_by_key(|(code, session)| (format!("{code:?}"), session.clone()));
        assert_eq!(found, expected, "{location}: {:?}", report.findings);
    }
}
