//! What only the SQLite backend has; the contract itself is in the conformance suite.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use gatehouse_store::sqlite::SqliteStore;
use pretty_assertions::assert_eq;

#[tokio::test]
async fn the_database_runs_in_wal_mode_with_full_synchronous_commits() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("gateway.db");
    drop(SqliteStore::open(&path).await.unwrap());
    // WAL mode is a property of the file: a reopened store finds it set.
    let store = SqliteStore::open(&path).await.unwrap();
    let journal: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(journal, "wal");
    // FULL is 2.
    let synchronous: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(store.pool())
        .await
        .unwrap();
    assert_eq!(synchronous, 2);
}
