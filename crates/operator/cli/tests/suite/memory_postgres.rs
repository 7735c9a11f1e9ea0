//! The memory index on PostgreSQL, on real processes: `gatehouse up --store postgres://...`
//! indexes the Harness's memory files into the store's database (no `memory.db` beside it),
//! `gatehouse memory search`, `status` and `reindex` work as on SQLite, and while the server
//! cannot be reached memory search answers STORE_UNAVAILABLE, recovering without a restart.

use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;
use sqlx::Connection;

use crate::suite::postgres::fresh_database;
use crate::suite::postgres::up_behind_outage;
use crate::suite::postgres::up_on;
use crate::suite::support::WAIT;
use crate::suite::support::gatehouse;
use crate::suite::up::Up;

/// Runs `gatehouse memory ARGS` against `up` as an operator would.
fn memory_cli(up: &Up, data: &std::path::Path, args: &[&str]) -> (String, String) {
    let output = gatehouse()
        .arg("memory")
        .args(args)
        .args(["--url", &up.url, "--token-file"])
        .arg(data.join("gateway/operator-token"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "memory {args:?}: {stderr}");
    (stdout, stderr)
}

async fn search(up: &Up, query: &str) -> (u16, serde_json::Value) {
    let path =
        reqwest::Url::parse_with_params("http://x/v1/memory/search", &[("q", query)]).unwrap();
    let path = format!("{}?{}", path.path(), path.query().unwrap());
    up.request(reqwest::Method::GET, &path, None).await
}

/// Waits until a search for `query` cites `citation`.
async fn wait_found(up: &Up, query: &str, citation: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, answer) = search(up, query).await;
        let found = status == 200
            && answer["results"]
                .as_array()
                .is_some_and(|hits| hits.iter().any(|hit| hit["citation"] == citation));
        if found {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{query} never found: {status} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn write_notes(data: &std::path::Path) {
    let workspace = data.join("harness/workspace");
    std::fs::create_dir_all(workspace.join("memory")).unwrap();
    std::fs::write(
        workspace.join("MEMORY.md"),
        "# Memory\n\nThe deploy key rotates every Monday at nine.\n",
    )
    .unwrap();
    std::fs::write(
        workspace.join("memory/2026-11-20.md"),
        "Standup: the atlas backup moved to Łódź.\n",
    )
    .unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn up_on_postgres_indexes_the_memory_files_and_memory_search_cites_them() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let store = fresh_database().await;
    let mut up = up_on(&data, &store);
    up.wait_ready().await;
    write_notes(&data);
    wait_found(&up, "deploy key", "MEMORY.md#L1-L3").await;
    wait_found(&up, "ŁÓDŹ atlas", "memory/2026-11-20.md#L1-L1").await;

    // `gatehouse memory search` prints the citations.
    let (stdout, _) = memory_cli(&up, &data, &["search", "deploy key"]);
    assert!(stdout.contains("MEMORY.md#L1-L3"), "{stdout}");
    let (stdout, _) = memory_cli(&up, &data, &["search", "atlas backup", "--json"]);
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(
        answer["results"][0]["citation"], "memory/2026-11-20.md#L1-L1",
        "{answer}"
    );

    // The index is in the store's database, not in a file beside the Gateway state.
    assert!(
        !data.join("gateway/memory.db").exists(),
        "the memory index went to SQLite"
    );
    let mut database = sqlx::PgConnection::connect(store.as_str()).await.unwrap();
    let files: Vec<String> = sqlx::query_scalar(
        "SELECT f.path FROM gatehouse_memory.files f \
         JOIN gatehouse_memory.live l USING (generation) ORDER BY f.path",
    )
    .fetch_all(&mut database)
    .await
    .unwrap();
    assert!(
        files.contains(&"MEMORY.md".to_owned())
            && files.contains(&"memory/2026-11-20.md".to_owned()),
        "{files:?}"
    );

    // Status and reindex work as on SQLite; the rebuilt index answers at once.
    let (status, body) = up
        .request(reqwest::Method::GET, "/v1/memory/status", None)
        .await;
    assert_eq!(status, 200, "{body}");
    let indexed = body["files"].as_u64().unwrap();
    assert_eq!(indexed, u64::try_from(files.len()).unwrap(), "{body}");
    let (stdout, stderr) = memory_cli(&up, &data, &["reindex"]);
    assert!(
        stdout.contains(&format!("reindexed: {indexed} files")),
        "{stdout} {stderr}"
    );
    let generations: i64 = sqlx::query_scalar("SELECT count(*) FROM gatehouse_memory.generations")
        .fetch_one(&mut database)
        .await
        .unwrap();
    assert_eq!(generations, 1, "the old generation was not deleted");
    let (stdout, _) = memory_cli(&up, &data, &["search", "deploy key"]);
    assert!(stdout.contains("MEMORY.md#L1-L3"), "{stdout}");

    // After a restart the retained index answers from PostgreSQL.
    up.process.terminate();
    let up = up_on(&data, &store);
    up.wait_ready().await;
    wait_found(&up, "monday", "MEMORY.md#L1-L3").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn memory_search_says_store_unavailable_while_postgres_is_unreachable_and_recovers() {
    let (temp, mut outage, mut up) = up_behind_outage().await;
    let data = temp.path().canonicalize().unwrap().join("data");
    write_notes(&data);
    wait_found(&up, "deploy key", "MEMORY.md#L1-L3").await;

    outage.begin();
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = search(&up, "deploy key").await;
        if status == 503 {
            assert_eq!(body["error"]["code"], "STORE_UNAVAILABLE", "{body}");
            break;
        }
        assert_eq!(status, 200, "{body}");
        assert!(Instant::now() < deadline, "search kept answering: {body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, body) = up
        .request(reqwest::Method::GET, "/v1/memory/status", None)
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("STORE_UNAVAILABLE")),
        "{body}"
    );
    // A change made during the outage is indexed once the server is back, without a restart.
    std::fs::write(
        data.join("harness/workspace/memory/outage.md"),
        "Written while the database was away: the pager rota.\n",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;

    outage.end().await;
    wait_found(&up, "deploy key", "MEMORY.md#L1-L3").await;
    wait_found(&up, "pager rota", "memory/outage.md#L1-L1").await;
    up.process.terminate();
}
