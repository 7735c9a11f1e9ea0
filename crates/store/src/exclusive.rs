//! [`StoreLock`]: one Gateway at a time on a store.
//!
//! A Gateway that starts marks the turns its store shows running as `interrupted` (no turn can
//! still run after a restart), and it claims queued turns. A second Gateway started on the same
//! store by mistake (a second `gatehouse gateway` on one state directory, two Deployments on one
//! database) would mark the first one's live turns and race it for the queue. So a Gateway
//! holds its store exclusively for as long as it runs, and one that finds it held waits a
//! little (a Gateway that is stopping lets go within moments) and then refuses to start with
//! `STORE_IN_USE`.
//!
//! - SQLite: an exclusive `flock` on `<database>.lock` beside the database file. The kernel
//!   releases it when the process ends, however it ends.
//! - PostgreSQL: a session-level advisory lock ([`GATEWAY_LOCK_KEY`]) held on a connection of
//!   its own, which the server releases when that connection closes, so also when the process
//!   dies. The connection is checked every [`CHECK_INTERVAL`]; when it is lost (the server
//!   restarted, the network failed) the lock is taken again as soon as the server answers. If
//!   another Gateway took it meanwhile, this one no longer owns the store:
//!   [`StoreLock::lost`] resolves, and the Gateway stops rather than write beside the other.
//!   (Several Gateway replicas on one database are a later, lease-based design; until then one
//!   Gateway owns a database.)

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
    /// Gateway holds it.
    ///
    /// # Errors
    /// [`StoreError::InUse`] when it is still held after `wait`; [`StoreError::Unavailable`]
    /// when the lock file cannot be opened or the server cannot be reached.
    pub async fn acquire(location: &StoreLocation, wait: Duration) -> crate::Result<Self> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut logged = false;
        loop {
            let taken = match location {
                StoreLocation::Sqlite(path) => try_lock_file(path)?.map(Held::Sqlite),
                #[cfg(feature = "postgres")]
                StoreLocation::Postgres(database) => postgres::try_take(database).await?,
                #[cfg(not(feature = "postgres"))]
                StoreLocation::Postgres(_) => {
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

    /// What one attempt to take the lock found.
    enum Attempt {
        /// The lock is ours, on this connection.
        Taken(PgConnection),
        /// Another session holds it.
        Held,
    }

    /// Connects and tries the lock once.
    async fn attempt(options: &PgConnectOptions) -> Result<Attempt, sqlx::Error> {
        let mut connection = PgConnection::connect_with(options).await?;
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(GATEWAY_LOCK_KEY)
            .fetch_one(&mut connection)
            .await?;
        if taken {
            return Ok(Attempt::Taken(connection));
        }
        let _ = connection.close().await;
        Ok(Attempt::Held)
    }

    /// Tries once to take the lock of `database`; `None` while another Gateway holds it.
    pub(super) async fn try_take(database: &PostgresLocation) -> crate::Result<Option<Held>> {
        let options = database.connect_options()?;
        let connection = match attempt(&options).await {
            Ok(Attempt::Taken(connection)) => connection,
            Ok(Attempt::Held) => return Ok(None),
            Err(error) => {
                return Err(StoreError::Unavailable {
                    source: Box::new(error),
                });
            }
        };
        let (raise, lost) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(keep(connection, options, raise));
        Ok(Some(Held::Postgres { task, lost }))
    }

    /// Holds the lock on `connection`, checking it every [`CHECK_INTERVAL`]; re-takes it on a
    /// new connection when that one breaks, and raises `lost` (then ends) when, once the server
    /// answers, another session holds it.
    async fn keep(
        mut connection: PgConnection,
        options: PgConnectOptions,
        lost: tokio::sync::watch::Sender<bool>,
    ) {
        loop {
            tokio::time::sleep(CHECK_INTERVAL).await;
            let check = tokio::time::timeout(ATTEMPT_TIMEOUT, connection.ping()).await;
            if matches!(check, Ok(Ok(()))) {
                continue;
            }
            tracing::warn!(
                "lost the connection that holds the gateway's store lock; taking it again"
            );
            connection = loop {
                match tokio::time::timeout(ATTEMPT_TIMEOUT, attempt(&options)).await {
                    Ok(Ok(Attempt::Taken(connection))) => {
                        tracing::info!("took the gateway's store lock again");
                        break connection;
                    }
                    Ok(Ok(Attempt::Held)) => {
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
        let location = StoreLocation::Sqlite(dir.path().join("gateway.db"));
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
        let location = StoreLocation::Sqlite(dir.path().join("gateway.db"));
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
