//! [`StoreLock`]: who may use a store at the same time.
//!
//! A SQLite store is one Gateway process's: a second `gatehouse gateway` on one state directory
//! would race the first for its file. Several Gateway processes on one PostgreSQL database are
//! replicas of one Gateway, kept apart by their leases ([`crate::cluster`]): each holds the
//! store's lock *shared* ([`StoreLock::acquire_shared`]). `gatehouse state migrate` holds it
//! exclusively ([`StoreLock::acquire`]), so it never copies a store a Gateway is writing, and no
//! Gateway starts on a store it is copying. One that finds the lock held waits a little (a
//! process that is stopping lets go within moments) and then refuses with `STORE_IN_USE`.
//!
//! - SQLite: an exclusive `flock` on `<database>.lock` beside the database file. The kernel
//!   releases it when the process ends, however it ends.
//! - PostgreSQL: a session-level advisory lock ([`GATEWAY_LOCK_KEY`]) held on a connection of
//!   its own, which the server releases when that connection closes, so also when the process
//!   dies; its session asks for TCP keepalives after 5 s and ends itself after 30 s idle, so a
//!   dead or cut-off host lets go within about half a minute rather than the system's two
//!   hours. Every [`CHECK_INTERVAL`] the session is asked whether it still holds the lock; when
//!   it does not answer or no longer holds it (the server restarted, the network failed or
//!   stalled), the lock is taken again as soon as the server answers, ending this Gateway's
//!   own earlier session first if that one still holds it. If another Gateway took it
//!   meanwhile, this one no longer owns the store: [`StoreLock::lost`] resolves, and the
//!   Gateway stops rather than write beside the other. A shared holder (a replica) loses it
//!   only to an exclusive one (a copy of the store), never to another replica.

use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;

use crate::StoreError;
use crate::location::StoreLocation;

/// The key of the advisory lock a Gateway holds on its database ("gh-gatew" in ASCII).
pub const GATEWAY_LOCK_KEY: i64 = 0x6768_2d67_6174_6577;

/// How often the PostgreSQL lock's connection is checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(2);

/// How long taking a held lock is retried before [`StoreError::InUse`].
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// How long one attempt to reach the server may take while the lock is re-taken.
#[cfg(feature = "postgres")]
const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(3);

/// The exclusive use of one store, held until dropped.
#[derive(Debug)]
pub struct StoreLock {
    held: Held,
}

#[derive(Debug)]
enum Held {
    /// The open lock file; closing it (on drop) releases the `flock`.
    Sqlite(#[expect(dead_code, reason = "held only to be closed on drop")] std::fs::File),
    /// The task that holds the advisory lock's connection (aborted on drop) and the signal it
    /// raises when the lock went to someone else.
    #[cfg(feature = "postgres")]
    Postgres {
        task: tokio::task::JoinHandle<()>,
        lost: tokio::sync::watch::Receiver<bool>,
    },
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        #[cfg(feature = "postgres")]
        if let Held::Postgres { task, .. } = &self.held {
            task.abort();
        }
    }
}

impl StoreLock {
    /// Takes the exclusive use of the store at `location`, retrying for `wait` while another
    /// process holds it.
    ///
    /// # Errors
    /// [`StoreError::InUse`] when it is still held after `wait`; [`StoreError::Unavailable`]
    /// when the lock file cannot be opened or the server cannot be reached.
    pub async fn acquire(location: &StoreLocation, wait: Duration) -> crate::Result<Self> {
        Self::take(location, wait, false).await
    }

    /// Takes the store at `location` as one of its Gateway replicas: shared with the other
    /// replicas on a PostgreSQL database, exclusive on a SQLite file (which has one process);
    /// retries for `wait` while an exclusive holder has it.
    ///
    /// # Errors
    /// As [`StoreLock::acquire`].
    pub async fn acquire_shared(location: &StoreLocation, wait: Duration) -> crate::Result<Self> {
        Self::take(location, wait, true).await
    }

    async fn take(location: &StoreLocation, wait: Duration, shared: bool) -> crate::Result<Self> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut logged = false;
        loop {
            let taken = match location {
                StoreLocation::Local(path) => try_lock_file(path)?.map(Held::Sqlite),
                #[cfg(feature = "postgres")]
                StoreLocation::Remote(database) => postgres::try_take(database, shared).await?,
                #[cfg(not(feature = "postgres"))]
                StoreLocation::Remote(_) => {
                    let _ = shared;
                    return Err(StoreError::Unavailable {
                        source: "this gatehouse was built without the postgres feature".into(),
                    });
                }
            };
            if let Some(held) = taken {
                return Ok(Self { held });
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(StoreError::InUse {
                    store: location.to_string(),
                });
            }
            if !logged {
                tracing::warn!(
                    store = %location,
                    wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    "another gateway holds this store; waiting for it to stop"
                );
                logged = true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Resolves when this Gateway lost the store to another one (PostgreSQL only: its lock
    /// connection broke and, once the server answered again, another Gateway held the lock).
    /// Never resolves for SQLite, whose lock cannot be lost while the process lives.
    pub async fn lost(&self) {
        match &self.held {
            Held::Sqlite(_) => std::future::pending().await,
            #[cfg(feature = "postgres")]
            Held::Postgres { lost, .. } => {
                let mut lost = lost.clone();
                // An error means the task ended without raising it (aborted): wait forever.
                if lost.wait_for(|lost| *lost).await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

/// Returns the lock file of the SQLite database at `path`.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    path.with_file_name(name)
}

/// Opens (creating, mode 0600) the lock file of the database at `path` and tries to lock it.
fn try_lock_file(path: &Path) -> crate::Result<Option<std::fs::File>> {
    use std::os::unix::fs::OpenOptionsExt;

    let lock = lock_path(path);
    let unavailable = |error: std::io::Error| StoreError::Unavailable {
        source: format!(
            "cannot open the store's lock file {}: {error}",
            lock.display()
        )
        .into(),
    };
    if let Some(dir) = lock.parent().filter(|dir| !dir.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(unavailable)?;
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&lock)
        .map_err(unavailable)?;
    match file.try_lock() {
        Ok(()) => Ok(Some(file)),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(error)) => Err(unavailable(error)),
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use sqlx::Connection;
    use sqlx::PgConnection;
    use sqlx::postgres::PgConnectOptions;

    use super::ATTEMPT_TIMEOUT;
    use super::CHECK_INTERVAL;
    use super::GATEWAY_LOCK_KEY;
    use super::Held;
    use crate::StoreError;
    use crate::location::PostgresLocation;

    /// The lock, held by the session of `connection` (server process `backend_pid`).
    struct Holding {
        connection: PgConnection,
        backend_pid: i32,
    }

    /// What one attempt to take the lock found.
    enum Attempt {
        /// The lock is ours, on this connection.
        Taken(Holding),
        /// Another session holds it: the server process `holder`, when it could be seen.
        Held { holder: Option<i32> },
    }

    /// Settings of the lock's session, so that the server ends it (and releases the lock) soon
    /// after its Gateway host died or was cut off, instead of after the system's TCP keepalive
    /// time (two hours by default): keepalive probes after 5 s of silence, and (PostgreSQL 14
    /// and later) an idle session ended after 30 s, while [`keep`] speaks every 2 s. A setting
    /// the server does not know is skipped.
    const SESSION_SETTINGS: [&str; 4] = [
        "SET tcp_keepalives_idle = 5",
        "SET tcp_keepalives_interval = 2",
        "SET tcp_keepalives_count = 3",
        "SET idle_session_timeout = '30s'",
    ];

    /// The condition on `pg_locks` that selects the Gateway's advisory lock in this database
    /// (a `bigint` key shows as its high and low 32 bits, `objsubid` 1).
    const THE_LOCK: &str = "locktype = 'advisory' AND granted AND objsubid = 1 \
         AND classid = ($1 >> 32)::oid AND objid = ($1 & 4294967295)::oid \
         AND database = (SELECT oid FROM pg_database WHERE datname = current_database())";

    /// Connects and tries the lock once, `shared` or exclusive.
    async fn attempt(options: &PgConnectOptions, shared: bool) -> Result<Attempt, sqlx::Error> {
        let mut connection = PgConnection::connect_with(options).await?;
        for setting in SESSION_SETTINGS {
            if let Err(error) = sqlx::raw_sql(setting).execute(&mut connection).await {
                tracing::debug!(setting, error = %error, "the server refused a lock session setting");
            }
        }
        let take = match shared {
            true => "SELECT pg_try_advisory_lock_shared($1)",
            false => "SELECT pg_try_advisory_lock($1)",
        };
        let taken: bool = sqlx::query_scalar(take)
            .bind(GATEWAY_LOCK_KEY)
            .fetch_one(&mut connection)
            .await?;
        if taken {
            let backend_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut connection)
                .await?;
            return Ok(Attempt::Taken(Holding {
                connection,
                backend_pid,
            }));
        }
        let holder: Option<i32> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT pid FROM pg_locks WHERE {THE_LOCK} LIMIT 1"
        )))
        .bind(GATEWAY_LOCK_KEY)
        .fetch_optional(&mut connection)
        .await?;
        let _ = connection.close().await;
        Ok(Attempt::Held { holder })
    }

    /// Returns whether the session of `connection` still holds the lock (a pooler between the
    /// Gateway and the server could have handed it another session).
    async fn still_held(connection: &mut PgConnection) -> Result<bool, sqlx::Error> {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE {THE_LOCK} AND pid = pg_backend_pid())"
        )))
        .bind(GATEWAY_LOCK_KEY)
        .fetch_one(connection)
        .await
    }

    /// Ends the server process `pid`, the Gateway's own earlier lock session that a stall cut
    /// off from it, so that its lock is released (a role may end its own sessions).
    async fn end_own_session(options: &PgConnectOptions, pid: i32) -> Result<(), sqlx::Error> {
        let mut connection = PgConnection::connect_with(options).await?;
        sqlx::query("SELECT pg_terminate_backend($1)")
            .bind(pid)
            .execute(&mut connection)
            .await?;
        let _ = connection.close().await;
        Ok(())
    }

    /// Tries once to take the lock of `database`, `shared` or exclusive; `None` while another
    /// process holds it in a conflicting mode.
    pub(super) async fn try_take(
        database: &PostgresLocation,
        shared: bool,
    ) -> crate::Result<Option<Held>> {
        let options = database.connect_options()?;
        let holding = match attempt(&options, shared).await {
            Ok(Attempt::Taken(holding)) => holding,
            Ok(Attempt::Held { .. }) => return Ok(None),
            Err(error) => {
                return Err(StoreError::Unavailable {
                    source: Box::new(error),
                });
            }
        };
        let (raise, lost) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(keep(holding, options, shared, raise));
        Ok(Some(Held::Postgres { task, lost }))
    }

    /// Holds the lock, checking every [`CHECK_INTERVAL`] that its session still holds it; when
    /// the check fails (the connection broke or stalled, or the session lost the lock), takes
    /// it again on a new connection. The Gateway's own earlier session still holding it is a
    /// stall, not another Gateway: that session is ended and the lock taken again. Raises
    /// `lost` (then ends) only when, once the server answers, another session holds it.
    async fn keep(
        mut holding: Holding,
        options: PgConnectOptions,
        shared: bool,
        lost: tokio::sync::watch::Sender<bool>,
    ) {
        loop {
            tokio::time::sleep(CHECK_INTERVAL).await;
            let check = tokio::time::timeout(ATTEMPT_TIMEOUT, still_held(&mut holding.connection));
            if matches!(check.await, Ok(Ok(true))) {
                continue;
            }
            tracing::warn!(
                "lost the connection that holds the gateway's store lock; taking it again"
            );
            let own_pid = holding.backend_pid;
            // Closes this side of the old session; the server may keep it a little longer.
            drop(holding);
            holding = loop {
                match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt(&options, shared)).await {
                    Ok(Ok(Attempt::Taken(holding))) => {
                        tracing::info!("took the gateway's store lock again");
                        break holding;
                    }
                    Ok(Ok(Attempt::Held { holder: Some(pid) })) if pid == own_pid => {
                        if let Err(error) = end_own_session(&options, pid).await {
                            tracing::warn!(error = %error, "cannot end the earlier lock session");
                        }
                        tokio::time::sleep(CHECK_INTERVAL / 4).await;
                    }
                    // Released between the two queries: try again.
                    Ok(Ok(Attempt::Held { holder: None })) => {}
                    Ok(Ok(Attempt::Held { holder: Some(_) })) => {
                        tracing::error!(
                            code = gatehouse_protocol::error::ErrorCode::StoreInUse.as_str(),
                            "another gateway took this store while the connection was lost"
                        );
                        let _ = lost.send(true);
                        return;
                    }
                    // The server does not answer yet: the Gateway's requests fail with
                    // STORE_UNAVAILABLE meanwhile, and no other Gateway can have the lock
                    // without this loop seeing it once the server answers.
                    Ok(Err(_)) | Err(_) => tokio::time::sleep(CHECK_INTERVAL / 4).await,
                }
            };
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test fails loudly on any unexpected error"
    )]

    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use super::StoreLock;
    use super::lock_path;
    use crate::StoreError;
    use crate::location::StoreLocation;

    #[tokio::test]
    async fn a_sqlite_store_is_held_by_one_lock_at_a_time_until_it_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let location = StoreLocation::Local(dir.path().join("gateway.db"));
        let first = StoreLock::acquire(&location, Duration::ZERO).await.unwrap();
        let lock_file = lock_path(&dir.path().join("gateway.db"));
        let mode = std::fs::metadata(&lock_file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", lock_file.display());

        let Err(error) = StoreLock::acquire(&location, Duration::from_millis(300)).await else {
            panic!("a second lock was taken while the first is held");
        };
        assert!(matches!(error, StoreError::InUse { .. }), "{error:?}");
        assert_eq!(error.code().as_str(), "STORE_IN_USE");
        assert!(error.to_string().contains("gateway.db"), "{error}");

        drop(first);
        let _second = StoreLock::acquire(&location, Duration::ZERO).await.unwrap();
    }

    #[tokio::test]
    async fn a_held_lock_is_waited_for_while_its_holder_stops() {
        let dir = tempfile::tempdir().unwrap();
        let location = StoreLocation::Local(dir.path().join("gateway.db"));
        let first = StoreLock::acquire(&location, Duration::ZERO).await.unwrap();
        let release = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(first);
        });
        StoreLock::acquire(&location, Duration::from_secs(30))
            .await
            .unwrap();
        release.await.unwrap();
    }
}
