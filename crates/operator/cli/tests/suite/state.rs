//! `gatehouse state migrate` and `gatehouse state check` on real installations: a SQLite
//! installation made by `gatehouse up` with real turns (a native turn with a checkpoint, an
//! uploaded attachment, audit records) moves to PostgreSQL (the server
//! `GATEHOUSE_TEST_POSTGRES_URL` names) with its media, and `gatehouse up` on the target serves
//! the same sessions and transcripts and restores the checkpoint; a target holding other state
//! is refused; a copy killed with SIGKILL mid-way finishes when run again; and `state check`
//! finds a planted sequence gap and a missing blob on both backends.

use std::io::BufRead;
use std::io::BufReader;
use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;

use pretty_assertions::assert_eq;
use sqlx::Connection;

use crate::suite::postgres::completed_turn;
use crate::suite::postgres::fresh_database;
use crate::suite::postgres::up_on;
use crate::suite::support::gatehouse;
use crate::suite::up::Up;

/// What a populated installation served before it was stopped.
struct Installation {
    _temp: tempfile::TempDir,
    /// The `--data` directory of the stopped `gatehouse up`.
    data: PathBuf,
    /// `GET /v1/sessions`.
    sessions: serde_json::Value,
    /// `GET /v1/sessions/{key}/transcript` of every session, by key.
    transcripts: Vec<(String, Vec<serde_json::Value>)>,
    /// `GET /v1/audit`'s events.
    audit: Vec<serde_json::Value>,
    /// The uploaded attachment.
    media_id: String,
}

impl Installation {
    fn store(&self) -> String {
        format!(
            "sqlite://{}",
            self.data.join("gateway/gateway.db").display()
        )
    }

    fn media(&self) -> String {
        format!("file://{}", self.data.join("gateway/media").display())
    }
}

fn token(data: &Path) -> String {
    std::fs::read_to_string(data.join("gateway/operator-token"))
        .unwrap()
        .trim()
        .to_owned()
}

async fn get(up: &Up, path: &str) -> serde_json::Value {
    let (status, body) = up.request(reqwest::Method::GET, path, None).await;
    assert_eq!(status, 200, "{path}: {body}");
    body
}

/// Runs `gatehouse up` on a new SQLite installation, does real turns in several sessions, and
/// stops it.
async fn populated_installation() -> Installation {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let mut up = Up::start_local(&data);
    up.wait_ready().await;
    // A native turn whose workspace change is kept as a checkpoint.
    completed_turn(
        &up,
        "ck",
        r#"/tool write {"path":"dir/keep.txt","content":"kept across the move"}"#,
    )
    .await;
    // An uploaded file (pinned, audited) attached to a turn.
    let media_id = crate::suite::support::media_id_of(
        crate::suite::support::media_upload(&up.url, &token(&data), "attached before the move")
            .header("x-filename", "notes.txt"),
    )
    .await;
    let (status, posted) = up
        .post(
            "att",
            serde_json::json!({"text": "what did I attach?", "attachments": [{"mediaId": media_id}]}),
        )
        .await;
    assert_eq!(status, 202, "{posted}");
    let done = up.turn_status(posted["turnId"].as_str().unwrap(), 20).await;
    assert_eq!(done["status"], "completed", "{done}");
    for session in ["s0", "s1", "s2"] {
        for text in ["/say one", "/say two"] {
            completed_turn(&up, session, text).await;
        }
    }
    let sessions = get(&up, "/v1/sessions").await;
    let mut transcripts = Vec::new();
    for session in sessions["sessions"].as_array().unwrap() {
        let key = session["sessionKey"].as_str().unwrap().to_owned();
        transcripts.push((key.clone(), up.transcript(&key).await));
    }
    assert_eq!(transcripts.len(), 5);
    let audit = get(&up, "/v1/audit").await["events"]
        .as_array()
        .unwrap()
        .clone();
    assert!(
        audit.iter().any(|event| event["action"] == "media.upload"),
        "{audit:?}"
    );
    up.process.terminate();
    Installation {
        _temp: temp,
        data,
        sessions,
        transcripts,
        audit,
        media_id,
    }
}

/// Runs `gatehouse state ARGS` and returns its exit code, stdout and stderr.
fn state(args: &[&str]) -> (i32, String, String) {
    state_with_env(args, &[])
}

/// Runs `gatehouse state ARGS` with `envs` in its environment (an S3 media store's settings).
fn state_with_env(args: &[&str], envs: &[(&str, &str)]) -> (i32, String, String) {
    let output = gatehouse()
        .arg("state")
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
        String::from_utf8(output.stderr).unwrap(),
    )
}

/// Runs `gatehouse state migrate --json ARGS` and returns its summary, after checking it
/// succeeded.
fn migrate(args: &[&str]) -> serde_json::Value {
    migrate_with_env(args, &[])
}

/// [`migrate`] with `envs` in the environment of `gatehouse state migrate`.
fn migrate_with_env(args: &[&str], envs: &[(&str, &str)]) -> serde_json::Value {
    let mut full = vec!["migrate", "--json"];
    full.extend_from_slice(args);
    let (code, stdout, stderr) = state_with_env(&full, envs);
    assert_eq!(code, 0, "{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["verified"], true, "{report}");
    report
}

/// Returns the summary's rows per table.
fn rows(report: &serde_json::Value, field: &str) -> Vec<(String, u64)> {
    report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .map(|table| {
            (
                table["table"].as_str().unwrap().to_owned(),
                table[field].as_u64().unwrap(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sqlite_installation_moved_to_postgres_serves_the_same_sessions_and_restores_a_checkpoint()
 {
    let before = populated_installation().await;
    let target = fresh_database().await;
    let moved = before.data.parent().unwrap().join("moved");
    // The Gateway's media goes where the new installation's Gateway keeps it by default.
    let media_to = format!("file://{}", moved.join("gateway/media").display());
    move_and_serve(&before, &moved, &target, &media_to, &[], &|data| {
        up_on(data, &target)
    })
    .await;
}

/// The same move with the media into an S3 bucket, and the moved installation served from
/// PostgreSQL and S3.
#[tokio::test(flavor = "multi_thread")]
async fn a_sqlite_installation_moved_to_postgres_and_s3_serves_the_same_sessions_and_restores_a_checkpoint()
 {
    let before = populated_installation().await;
    let external = crate::suite::s3::ExternalState::new().await;
    let target = url::Url::parse(&external.store).unwrap();
    let moved = before.data.parent().unwrap().join("moved");
    move_and_serve(
        &before,
        &moved,
        &target,
        &external.media,
        &external.envs(),
        &|data| external.up(data),
    )
    .await;
    let blobs = external.keys().await;
    assert!(
        blobs.iter().any(|key| key.starts_with("gateway/blobs/")),
        "{blobs:?}"
    );
    assert!(
        !moved.join("gateway/media").exists(),
        "the moved installation keeps media on its disk"
    );
}

/// Moves `before` into the database `target` with its media into `media_to` (`envs` configure
/// it), starts the moved installation in `moved` with `start`, and checks that it serves the
/// same sessions, transcripts, audit trail and media, restores a checkpoint and goes on.
async fn move_and_serve(
    before: &Installation,
    moved: &Path,
    target: &url::Url,
    media_to: &str,
    envs: &[(&str, &str)],
    start: &dyn Fn(&Path) -> Up,
) {
    // The Harness moves with the installation (its identity, not its session workspaces).
    copy_dir(
        &before.data.join("harness/node"),
        &moved.join("harness/node"),
    );
    let report = migrate_with_env(
        &[
            "--from",
            &before.store(),
            "--to",
            target.as_str(),
            "--media-from",
            &before.media(),
            "--media-to",
            media_to,
        ],
        envs,
    );
    assert_eq!(report["resumed"], false);
    let copied = rows(&report, "targetRows");
    assert_eq!(copied, rows(&report, "sourceRows"));
    for table in [
        "sessions",
        "turns",
        "messages",
        "checkpoints",
        "audit_events",
        "media_pins",
    ] {
        let count = copied.iter().find(|(name, _)| name == table).unwrap().1;
        assert!(count > 0, "{table} is empty: {report}");
    }
    let media = &report["media"];
    assert_eq!(media["verified"], true, "{report}");
    assert!(media["copied"].as_u64().unwrap() >= 2, "{report}");
    // Both stores pass the check, the target with its new media.
    let (code, stdout, _) = state_with_env(
        &["check", "--store", target.as_str(), "--media", media_to],
        envs,
    );
    assert_eq!(code, 0, "{stdout}");

    let up = start(moved);
    up.wait_ready().await;
    assert_eq!(get(&up, "/v1/sessions").await, before.sessions);
    for (key, transcript) in &before.transcripts {
        assert_eq!(&up.transcript(key).await, transcript, "session {key}");
    }
    // The audit trail is kept with its sequence numbers, and new events continue after them.
    let audit = get(&up, "/v1/audit").await["events"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(audit[..before.audit.len()], before.audit[..]);
    let bytes = reqwest::Client::new()
        .get(format!("{}/v1/media/{}", up.url, before.media_id))
        .bearer_auth(token(moved))
        .send()
        .await
        .unwrap();
    assert_eq!(bytes.status(), 200);
    assert_eq!(bytes.text().await.unwrap(), "attached before the move");
    // The new Harness has no session workspace: the next turn restores it from the checkpoint.
    let read = completed_turn(&up, "ck", r#"/tool read {"path":"dir/keep.txt"}"#).await;
    assert!(
        read["reply"]
            .as_str()
            .unwrap()
            .contains("kept across the move"),
        "{read}"
    );
    completed_turn(&up, "s0", "/say after the move").await;
    let audit_after = get(&up, "/v1/audit").await["events"]
        .as_array()
        .unwrap()
        .clone();
    let last_before = before.audit.last().unwrap()["seq"].as_i64().unwrap();
    assert!(
        audit_after[before.audit.len()..]
            .iter()
            .all(|event| event["seq"].as_i64().unwrap() > last_before),
        "{audit_after:?}"
    );
    assert_eq!(up.transcript("s0").await.len(), 6);
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        match entry.file_type().unwrap().is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => {
                std::fs::copy(entry.path(), &target).unwrap();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_target_holding_other_state_is_refused_unless_replacement_is_asked_for() {
    let before = populated_installation().await;
    // The target holds the state of another Gateway.
    let target = fresh_database().await;
    let other = before.data.parent().unwrap().join("other");
    {
        let mut up = up_on(&other, &target);
        up.wait_ready().await;
        completed_turn(&up, "elsewhere", "/say other state").await;
        up.process.terminate();
    }
    let (code, stdout, stderr) = state(&[
        "migrate",
        "--from",
        &before.store(),
        "--to",
        target.as_str(),
    ]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("already holds Gateway state") && stderr.contains("--replace-target"),
        "{stderr}"
    );
    let mut db = sqlx::PgConnection::connect(target.as_str()).await.unwrap();
    let keys: Vec<String> = sqlx::query_scalar("SELECT session_key FROM sessions")
        .fetch_all(&mut db)
        .await
        .unwrap();
    assert_eq!(keys, vec![String::from("elsewhere")], "the refusal wrote");

    let report = migrate(&[
        "--from",
        &before.store(),
        "--to",
        target.as_str(),
        "--replace-target",
    ]);
    assert_eq!(report["replaced"], true);
    let mut keys: Vec<String> = sqlx::query_scalar("SELECT session_key FROM sessions")
        .fetch_all(&mut db)
        .await
        .unwrap();
    keys.sort();
    assert_eq!(keys, ["att", "ck", "s0", "s1", "s2"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_migration_killed_mid_copy_finishes_verified_without_duplicates_when_run_again() {
    let before = populated_installation().await;
    let target = fresh_database().await;
    let media_to = before.data.parent().unwrap().join("media-to");
    let media_to = format!("file://{}", media_to.display());
    let mut child = gatehouse()
        .args([
            "state",
            "migrate",
            "--from",
            &before.store(),
            "--to",
            target.as_str(),
        ])
        .args(["--media-from", &before.media(), "--media-to", &media_to])
        // One row per transaction and a pause after each, so the copy is slow enough to stop
        // in the middle of the transcript.
        .env("GATEHOUSE_STATE_MIGRATE_BATCH_ROWS", "1")
        .env("GATEHOUSE_STATE_MIGRATE_PAUSE_MS", "150")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = Vec::new();
    for line in stderr.lines() {
        let line = line.unwrap();
        seen.push(line.clone());
        // "migrate: messages [###      ] 4/17 rows"
        let progress = line
            .strip_prefix("migrate: messages ")
            .and_then(|rest| rest.rsplit_once(' '))
            .and_then(|(rest, _)| rest.rsplit_once(' '))
            .and_then(|(_, counts)| counts.split_once('/'))
            .map(|(copied, total)| {
                (
                    copied.parse::<u64>().unwrap(),
                    total.parse::<u64>().unwrap(),
                )
            });
        if let Some((copied, total)) = progress
            && copied >= 3
            && copied < total
        {
            break;
        }
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the copy ended before it was killed: {seen:?}"
    );

    let mut db = sqlx::PgConnection::connect(target.as_str()).await.unwrap();
    let partial: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM messages")
        .fetch_one(&mut db)
        .await
        .unwrap();
    let total: usize = before
        .transcripts
        .iter()
        .map(|(_, messages)| messages.len())
        .sum();
    assert!(
        partial >= 3 && (partial as usize) < total,
        "{partial} of {total} messages after the kill: {seen:?}"
    );

    let report = migrate(&[
        "--from",
        &before.store(),
        "--to",
        target.as_str(),
        "--media-from",
        &before.media(),
        "--media-to",
        &media_to,
    ]);
    assert_eq!(report["resumed"], true);
    assert_eq!(rows(&report, "targetRows"), rows(&report, "sourceRows"));
    let messages = report["tables"]
        .as_array()
        .unwrap()
        .iter()
        .find(|table| table["table"] == "messages")
        .unwrap();
    assert_eq!(
        messages["copiedRows"].as_i64().unwrap() + partial,
        total as i64,
        "rows copied before the kill were copied again: {report}"
    );
    // A rerun of a finished copy copies nothing and verifies again.
    let again = migrate(&["--from", &before.store(), "--to", target.as_str()]);
    assert!(
        rows(&again, "copiedRows")
            .iter()
            .all(|(_, copied)| *copied == 0),
        "{again}"
    );
}

/// Runs `gatehouse state check --json` and returns its exit code and the codes it found.
fn check(store: &str, media: &str) -> (i32, serde_json::Value) {
    let (code, stdout, stderr) = state(&["check", "--store", store, "--media", media, "--json"]);
    let report: serde_json::Value =
        serde_json::from_str(&stdout).unwrap_or_else(|error| panic!("{error}: {stdout}\n{stderr}"));
    (code, report)
}

fn codes(report: &serde_json::Value) -> Vec<(String, String)> {
    let mut codes: Vec<(String, String)> = report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|finding| {
            (
                finding["code"].as_str().unwrap().to_owned(),
                finding["sessionKey"]
                    .as_str()
                    .or(finding["mediaId"].as_str())
                    .unwrap_or_default()
                    .to_owned(),
            )
        })
        .collect();
    codes.sort();
    codes.dedup();
    codes
}

fn remove_blob(media_dir: &Path, media_id: &str) {
    std::fs::remove_file(media_dir.join("blobs").join(&media_id[..2]).join(media_id)).unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn state_check_finds_a_sequence_gap_and_a_missing_blob_on_sqlite_and_postgres() {
    let before = populated_installation().await;
    let target = fresh_database().await;
    let pg_media = before.data.parent().unwrap().join("pg-media");
    let pg_media_url = format!("file://{}", pg_media.display());
    migrate(&[
        "--from",
        &before.store(),
        "--to",
        target.as_str(),
        "--media-from",
        &before.media(),
        "--media-to",
        &pg_media_url,
    ]);
    let expected = vec![
        (String::from("ATTACHMENT_BLOB_MISSING"), String::from("att")),
        (String::from("PINNED_BLOB_MISSING"), before.media_id.clone()),
        (
            String::from("TRANSCRIPT_SEQUENCE_BROKEN"),
            String::from("s1"),
        ),
    ];

    // SQLite: clean, then with the second message of s1 and the uploaded blob gone.
    let (code, report) = check(&before.store(), &before.media());
    assert_eq!(
        (code, &report["ok"]),
        (0, &serde_json::json!(true)),
        "{report}"
    );
    let path = before.data.join("gateway/gateway.db");
    let mut db = sqlx::SqliteConnection::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    sqlx::query("DELETE FROM messages WHERE session_key = 's1' AND seq = 2")
        .execute(&mut db)
        .await
        .unwrap();
    db.close().await.unwrap();
    remove_blob(&before.data.join("gateway/media"), &before.media_id);
    let (code, report) = check(&before.store(), &before.media());
    assert_eq!(code, 1, "{report}");
    assert_eq!(report["ok"], false);
    assert_eq!(codes(&report), expected, "{report}");
    let (code, stdout, _) = state(&["check", "--store", &before.store()]);
    assert_eq!(code, 1);
    assert!(
        stdout.contains("TRANSCRIPT_SEQUENCE_BROKEN: session s1"),
        "{stdout}"
    );

    // PostgreSQL: the same on the copy.
    let (code, report) = check(target.as_str(), &pg_media_url);
    assert_eq!(
        (code, &report["ok"]),
        (0, &serde_json::json!(true)),
        "{report}"
    );
    let mut db = sqlx::PgConnection::connect(target.as_str()).await.unwrap();
    sqlx::query("DELETE FROM messages WHERE session_key = 's1' AND seq = 2")
        .execute(&mut db)
        .await
        .unwrap();
    remove_blob(&pg_media, &before.media_id);
    let (code, report) = check(target.as_str(), &pg_media_url);
    assert_eq!(code, 1, "{report}");
    assert_eq!(codes(&report), expected, "{report}");
}

/// A store a Gateway serves is neither copied from nor into: `migrate` takes both stores'
/// locks as a Gateway does, refuses with `STORE_IN_USE`, and writes nothing to the target.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_a_gateway_serves_is_refused_as_source_and_as_target() {
    let temp = tempfile::tempdir().unwrap();
    let state_dir = temp.path().join("gateway");
    let serving = crate::suite::support::Gateway::start_local(&state_dir, temp.path());
    let source = format!("sqlite://{}", state_dir.join("gateway.db").display());
    let target = fresh_database().await;

    let (code, stdout, stderr) = state(&["migrate", "--from", &source, "--to", target.as_str()]);
    assert_eq!(code, 1, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("STORE_IN_USE") && stderr.contains("source"),
        "{stderr}"
    );
    let mut database = sqlx::PgConnection::connect(target.as_str()).await.unwrap();
    let tables: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'",
    )
    .fetch_one(&mut database)
    .await
    .unwrap();
    assert_eq!(tables, 0, "the refused copy wrote to its target");

    let other = temp.path().join("other.db");
    let other = format!("sqlite://{}", other.display());
    let (code, _, stderr) = state(&["migrate", "--from", &other, "--to", &source]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("STORE_IN_USE") && stderr.contains("target"),
        "{stderr}"
    );
    assert_eq!(serving.get("/v1/sessions").await.status(), 200);
}
