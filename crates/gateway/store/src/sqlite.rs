//! [`SqliteStore`]: the Gateway store in one SQLite file, in WAL mode, with versioned
//! migrations. The store's body is [`crate::sql`]; this is its SQLite backend.
//!
//! One Gateway owns the file (see [`crate::exclusive`]); every write transaction begins with
//! `BEGIN IMMEDIATE`, which takes the file's write lock, so writers run one at a time and a row
//! lock is never needed.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::sqlite::SqliteJournalMode;
use sqlx::sqlite::SqlitePool;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::sqlite::SqliteRow;
use sqlx::sqlite::SqliteSynchronous;

use crate::error::Result;
use crate::error::StoreError;
use crate::sql::Backend;
use crate::sql::Dialect;
use crate::sql::On;
use crate::sql::Ran;
use crate::sql::SqlResult;
use crate::sql::SqlStore;
use crate::sql::Statement;
use crate::sql::run_on;

/// The number of pooled connections; SQLite serializes writers anyway.
const POOL_CONNECTIONS: u32 = 8;

/// How long a writer waits for the lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// The SQLite backend: a pool of connections to one file.
#[derive(Debug, Clone)]
pub struct Sqlite {
    pool: SqlitePool,
}

/// The Gateway store in one SQLite file.
pub type SqliteStore = SqlStore<Sqlite>;

impl SqlStore<Sqlite> {
    /// Opens (creating if missing) the database at `path`, switches it to WAL mode with full
    /// synchronous commits, and applies pending migrations.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the file cannot be opened or migrated.
    pub async fn open(path: &Path) -> Result<Self> {
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Full)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .after_release(|connection, _meta| Box::pin(still_usable(connection)))
            .connect_with(options)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        sqlx::migrate!("./migrations/sqlite")
            .run(&pool)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        Ok(Self {
            db: Sqlite { pool },
        })
    }

    /// Returns the connection pool, for callers that add their own tables in this crate.
    pub fn pool(&self) -> &SqlitePool {
        &self.db.pool
    }
}

/// Returns whether a connection given back to the pool may be used again: not when it is still
/// inside a transaction by sqlx's count.
///
/// When SQLite rolls a transaction back on its own (a `COMMIT` or a statement that fails with
/// `SQLITE_FULL` or an I/O error, for example on a full disk), sqlx's `COMMIT` fails, the
/// `ROLLBACK` it sends when the transaction is dropped fails too ("no transaction is active"),
/// and its count stays at one. Every later `BEGIN IMMEDIATE` on that connection would then fail
/// with `InvalidSavePointStatement`, a `STORE_FAILURE`, long after space was freed, and an
/// admission that happened to get it would answer that instead of `STORAGE_FULL`. The ping runs
/// after the rollback the drop queued, so a transaction that was rolled back normally counts
/// as ended.
async fn still_usable(
    connection: &mut sqlx::SqliteConnection,
) -> std::result::Result<bool, sqlx::Error> {
    use sqlx::Connection;
    connection.ping().await?;
    Ok(!connection.is_in_transaction())
}

#[async_trait]
impl Backend for Sqlite {
    const DIALECT: Dialect = Dialect::Sqlite;
    type Db = sqlx::Sqlite;

    fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    async fn begin(&self) -> SqlResult<sqlx::Transaction<'static, sqlx::Sqlite>> {
        self.pool.begin_with("BEGIN IMMEDIATE").await
    }

    async fn run(on: On<'_, Self>, statement: Statement) -> SqlResult<Ran<SqliteRow>> {
        run_on(
            on,
            statement,
            sqlx::sqlite::SqliteQueryResult::rows_affected,
        )
        .await
    }

    fn map_error(error: sqlx::Error, what: &'static str) -> StoreError {
        map_error(error, what)
    }
}

fn map_error(error: sqlx::Error, what: &'static str) -> StoreError {
    if let sqlx::Error::Database(database) = &error {
        let code = database.code();
        match code.as_deref() {
            // SQLITE_CONSTRAINT_UNIQUE, SQLITE_CONSTRAINT_PRIMARYKEY
            Some("2067" | "1555") => return StoreError::AlreadyExists { what },
            // SQLITE_FULL, and SQLITE_IOERR_SHMSIZE: SQLite grows the WAL index (`-shm`) by
            // writing to each new page, and reports a full disk there as this I/O error.
            Some("13" | "4874") => return StoreError::DiskFull,
            // SQLITE_BUSY (with its _RECOVERY and _SNAPSHOT forms) and SQLITE_LOCKED: another
            // connection held the file past the busy timeout. Nothing was written; a retry later
            // may succeed.
            Some("5" | "261" | "517" | "6" | "262") => {
                return StoreError::Unavailable {
                    source: Box::new(error),
                };
            }
            _ => {}
        }
        if database.message().contains("disk is full") {
            return StoreError::DiskFull;
        }
    }
    if let sqlx::Error::Io(io) = &error
        && (io.raw_os_error() == Some(28) || io.kind() == std::io::ErrorKind::StorageFull)
    {
        return StoreError::DiskFull;
    }
    // Every pooled connection stayed busy past the pool's acquire timeout.
    if matches!(error, sqlx::Error::PoolTimedOut) {
        return StoreError::Unavailable {
            source: Box::new(error),
        };
    }
    StoreError::Internal {
        source: Box::new(error),
    }
}

#[cfg(test)]
mod tests {
    use crate::Store;
    use crate::records::NewUserMessage;
    use crate::records::QueueMode;
    use crate::sqlite::POOL_CONNECTIONS;
    use crate::sqlite::SqliteStore;

    fn message(turn_id: &str) -> NewUserMessage {
        NewUserMessage {
            session_key: String::from("s"),
            runtime: String::from("native"),
            turn_id: turn_id.to_owned(),
            text: String::from("hello"),
            attachments: Vec::new(),
            idempotency_key: None,
            queue_mode: QueueMode::Followup,
            origin: None,
            api_key: None,
            now_ms: 1,
        }
    }

    /// A file another process holds locked past the busy timeout is "busy, retry later"
    /// (`STORE_UNAVAILABLE`, 503), not a store failure; nothing of the refused admission is
    /// written, and the next one after the lock is gone succeeds.
    #[tokio::test]
    async fn a_file_locked_past_the_busy_timeout_is_unavailable_not_a_failure() {
        use sqlx::Connection;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gateway.db");
        let store = SqliteStore::open(&path).await.unwrap();
        let mut holder = sqlx::SqliteConnection::connect_with(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(&path),
        )
        .await
        .unwrap();
        sqlx::raw_sql("BEGIN EXCLUSIVE")
            .execute(&mut holder)
            .await
            .unwrap();
        let refused = store.admit_user_message(&message("turn-1")).await;
        let error = refused.expect_err("the file is locked");
        assert_eq!(
            error.code(),
            gatehouse_protocol::error::ErrorCode::StoreUnavailable,
            "{error:?}"
        );
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut holder)
            .await
            .unwrap();
        let admitted = store.admit_user_message(&message("turn-2")).await.unwrap();
        assert!(admitted.created);
        assert_eq!(admitted.turn.turn_id, "turn-2");
        assert!(store.turn("turn-1").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_transaction_sqlite_ended_on_its_own_leaves_no_spoiled_connection_in_the_pool() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("gateway.db"))
            .await
            .unwrap();
        sqlx::query("CREATE TABLE probe (k INTEGER PRIMARY KEY)")
            .execute(store.pool())
            .await
            .unwrap();
        sqlx::query("INSERT INTO probe (k) VALUES (1)")
            .execute(store.pool())
            .await
            .unwrap();
        // A conflicting `INSERT OR ROLLBACK` makes SQLite end the transaction itself, as a
        // commit that fails on a full disk does; then the transaction is dropped.
        for _ in 0..2 * POOL_CONNECTIONS {
            let Ok(mut transaction) = crate::sql::Backend::begin(&store.db).await else {
                continue;
            };
            let conflict = sqlx::query("INSERT OR ROLLBACK INTO probe (k) VALUES (1)")
                .execute(&mut *transaction)
                .await;
            assert!(conflict.is_err());
        }
        // Every later write transaction starts, whichever connection it gets.
        for index in 0..2 * POOL_CONNECTIONS {
            let admitted = store
                .admit_user_message(&NewUserMessage {
                    session_key: String::from("s"),
                    runtime: String::from("native"),
                    turn_id: format!("turn-{index}"),
                    text: String::from("hello"),
                    attachments: Vec::new(),
                    idempotency_key: None,
                    queue_mode: QueueMode::Followup,
                    origin: None,
                    api_key: None,
                    now_ms: 1,
                })
                .await;
            assert!(admitted.is_ok(), "admission {index}: {admitted:?}");
        }
    }
}
