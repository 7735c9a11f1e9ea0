//! [`PgStore`]: the Gateway store in a PostgreSQL database, with versioned migrations applied at
//! start under an advisory lock.
//!
//! # Semantics
//! The store keeps the contract of [`crate::sqlite::SqliteStore`] on a server that runs many
//! writers at once, at PostgreSQL's default isolation (read committed):
//! - Every method that writes more than one row runs in one transaction; a lost connection rolls
//!   it back on the server, so an admission is stored whole or not at all.
//! - A session's row is its lock: admissions, claims, moves and every transcript or event append
//!   lock it first, so sequence numbers within a session are contiguous and a session never runs
//!   two turns.
//! - A turn's row fences its writers: a commit locks the running turn, so a message is never
//!   stored after the turn ended.
//! - Audit appends take a transaction-level advisory lock, so a reader that pages with
//!   [`Store::audit_after`] never skips an event whose sequence number committed late.
//! - A connection error (refused, reset, server shutdown, pool timeout) is
//!   [`StoreError::Unavailable`]; the pool opens fresh connections on the next call, so the
//!   Gateway recovers without a restart once the server is back.

//!
//! The store's body is [`crate::sql`]; this is its PostgreSQL backend, with what only
//! PostgreSQL has: the lease pool, the media lock's advisory locks, and `LISTEN`/`NOTIFY`.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Connection;
use sqlx::postgres::PgConnectOptions;
use sqlx::postgres::PgConnection;
use sqlx::postgres::PgListener;
use sqlx::postgres::PgPool;
use sqlx::postgres::PgPoolOptions;
use sqlx::postgres::PgRow;

use crate::cluster::Announcement;
use crate::cluster::CHANNEL;
use crate::cluster::ClusterListener;
use crate::cluster::Heard;
use crate::cluster::MEDIA_LOCK_KEY;
use crate::cluster::MediaHold;
use crate::error::Result;
use crate::error::StoreError;
use crate::location::PostgresLocation;
use crate::sql::Backend;
use crate::sql::Dialect;
use crate::sql::On;
use crate::sql::Ran;
use crate::sql::SqlResult;
use crate::sql::SqlStore;
use crate::sql::Statement;
use crate::sql::run_on;

/// The most pooled connections of one Gateway.
pub const POOL_CONNECTIONS: u32 = 16;

/// How long a call waits for a connection (including connecting) before it fails with
/// [`StoreError::Unavailable`]: requests fail fast while the server is down instead of hanging.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// How long the server lets a transaction of this store sit idle before it ends it: the longest
/// a frozen replica can hold a turn's row (see [`crate::cluster`]).
pub const STALLED_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(5);

/// The PostgreSQL backend: the pools of one Gateway on one database.
#[derive(Debug, Clone)]
pub struct Postgres {
    pool: PgPool,
    /// One connection of its own for renewing replica leases, so a busy main pool never makes
    /// a replica miss its renewal.
    lease_pool: PgPool,
    /// The connections that hold the media lock ([`crate::ClusterStore::hold_media_writes`]):
    /// a holder does its work on the main pool, so holders never starve it, and at most
    /// [`MEDIA_LOCK_CONNECTIONS`] hold at once (the rest wait their turn).
    media_lock_pool: PgPool,
}

/// How many media-lock holds one Gateway keeps at once; more wait for one, for up to
/// [`MEDIA_LOCK_WAIT`].
pub const MEDIA_LOCK_CONNECTIONS: u32 = 4;

/// How long a writer waits for a media-lock connection before its write fails.
const MEDIA_LOCK_WAIT: Duration = Duration::from_secs(60);

/// The Gateway store in a PostgreSQL database.
pub type PgStore = SqlStore<Postgres>;

impl SqlStore<Postgres> {
    /// Connects to the database at `location` and applies pending migrations under sqlx's
    /// PostgreSQL advisory lock, so Gateways starting at once against one database migrate one
    /// after the other.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the password reference cannot be resolved, or the server
    /// cannot be reached or migrated.
    pub async fn open(location: &PostgresLocation) -> Result<Self> {
        let options = location.connect_options()?;
        Self::open_with(options).await
    }

    /// Connects with `options` and applies pending migrations, as [`PgStore::open`].
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when the server cannot be reached or migrated.
    pub async fn open_with(options: PgConnectOptions) -> Result<Self> {
        // A transaction left open by a stalled process (a replica frozen mid-write) is ended by
        // the server, so it holds no turn's row past this: the survivors can take its turns
        // over. The store's transactions never wait on anything but the server between
        // statements.
        let options = options.options([(
            "idle_in_transaction_session_timeout",
            format!("{}", STALLED_TRANSACTION_TIMEOUT.as_millis()),
        )]);
        // One direct connection first: the pool would report an unreachable server only as a
        // timeout, and the operator needs the reason (refused, authentication, no database).
        let probe = PgConnection::connect_with(&options)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        // Closing is a courtesy to the server; the connection is gone either way.
        let _ = probe.close().await;
        let lease_pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(true)
            .connect_lazy_with(options.clone());
        let media_lock_pool = PgPoolOptions::new()
            .max_connections(MEDIA_LOCK_CONNECTIONS)
            .acquire_timeout(MEDIA_LOCK_WAIT)
            .test_before_acquire(true)
            .connect_lazy_with(options.clone());
        let pool = PgPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            // A connection the server dropped is noticed here and replaced.
            .test_before_acquire(true)
            .connect_with(options)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        let mut migrator = sqlx::migrate!("./migrations/postgres");
        migrator.set_locking(true);
        migrator
            .run(&pool)
            .await
            .map_err(|error| StoreError::Unavailable {
                source: Box::new(error),
            })?;
        Ok(Self {
            db: Postgres {
                pool,
                lease_pool,
                media_lock_pool,
            },
        })
    }

    /// Returns the connection pool, for callers that add their own tables in this crate.
    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }
}

#[async_trait]
impl Backend for Postgres {
    const DIALECT: Dialect = Dialect::Postgres;
    type Db = sqlx::Postgres;

    fn pool(&self) -> &PgPool {
        &self.pool
    }

    async fn begin(&self) -> SqlResult<sqlx::Transaction<'static, sqlx::Postgres>> {
        self.pool.begin().await
    }

    async fn run(on: On<'_, Self>, statement: Statement) -> SqlResult<Ran<PgRow>> {
        run_on(on, statement, sqlx::postgres::PgQueryResult::rows_affected).await
    }

    fn map_error(error: sqlx::Error, what: &'static str) -> StoreError {
        map_error(error, what)
    }

    fn for_leases(&self) -> Self {
        Self {
            pool: self.lease_pool.clone(),
            ..self.clone()
        }
    }

    async fn announce(&self, announcements: &[Announcement]) -> Result<()> {
        let mut payloads = Vec::with_capacity(announcements.len());
        for announcement in announcements {
            let payload = serde_json::to_string(announcement).map_err(|_| StoreError::Corrupt {
                what: "announcement",
            })?;
            match payload.len() <= crate::cluster::MAX_ANNOUNCEMENT_BYTES {
                true => payloads.push(payload),
                false => tracing::warn!(
                    bytes = payload.len(),
                    "an announcement is longer than a notification carries; not sent"
                ),
            }
        }
        if payloads.is_empty() {
            return Ok(());
        }
        // One statement, so the notifications leave in order and as one transaction.
        sqlx::query("SELECT pg_notify($1, payload) FROM unnest($2::text[]) AS payload")
            .bind(CHANNEL)
            .bind(&payloads)
            .execute(&self.pool)
            .await
            .map_err(|e| map_error(e, "announcement"))?;
        Ok(())
    }

    async fn hold_media_writes(&self) -> Result<Box<dyn MediaHold>> {
        let mut hold = PgMediaHold::open(&self.media_lock_pool, "60s").await?;
        if let Some(connection) = hold.connection.as_mut() {
            sqlx::query("SELECT pg_advisory_lock_shared($1)")
                .bind(MEDIA_LOCK_KEY)
                .execute(&mut **connection)
                .await
                .map_err(|e| map_error(e, "media lock"))?;
        }
        hold.shared = true;
        hold.held = true;
        Ok(Box::new(hold))
    }

    async fn try_hold_media_collection(&self) -> Result<Option<Box<dyn MediaHold>>> {
        let mut hold = PgMediaHold::open(&self.media_lock_pool, "10s").await?;
        let Some(connection) = hold.connection.as_mut() else {
            return Ok(None);
        };
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(MEDIA_LOCK_KEY)
            .fetch_one(&mut **connection)
            .await
            .map_err(|e| map_error(e, "media lock"))?;
        hold.held = taken;
        match taken {
            true => Ok(Some(Box::new(hold))),
            false => {
                Box::new(hold).release().await;
                Ok(None)
            }
        }
    }

    async fn listen(&self) -> Result<Option<Box<dyn ClusterListener>>> {
        let mut listener = PgListener::connect_with(&self.pool)
            .await
            .map_err(|e| map_error(e, "listener"))?;
        listener
            .listen(CHANNEL)
            .await
            .map_err(|e| map_error(e, "listener"))?;
        Ok(Some(Box::new(PgClusterListener { listener })))
    }
}

/// Translates an engine error into the backend-neutral error.
fn map_error(error: sqlx::Error, what: &'static str) -> StoreError {
    match &error {
        sqlx::Error::Database(database) => {
            let code = database.code();
            match code.as_deref() {
                // unique_violation
                Some("23505") => return StoreError::AlreadyExists { what },
                // foreign_key_violation: the session (or turn) a row refers to does not exist.
                Some("23503") => return StoreError::NotFound { what },
                // disk_full
                Some("53100") => return StoreError::DiskFull,
                // Class 08 (connection exception), too_many_connections, and the server
                // shutting down or starting up (admin_shutdown, crash_shutdown,
                // cannot_connect_now).
                Some(code)
                    if code.starts_with("08")
                        || matches!(code, "53300" | "57P01" | "57P02" | "57P03") =>
                {
                    return StoreError::Unavailable {
                        source: Box::new(error),
                    };
                }
                _ => {}
            }
        }
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => {
            return StoreError::Unavailable {
                source: Box::new(error),
            };
        }
        _ => {}
    }
    StoreError::Internal {
        source: Box::new(error),
    }
}

/// A hold on [`MEDIA_LOCK_KEY`]: a pooled connection of its own, whose session holds the
/// advisory lock, shared or exclusive.
struct PgMediaHold {
    connection: Option<sqlx::pool::PoolConnection<sqlx::Postgres>>,
    shared: bool,
    /// Whether the session took the lock (a collection's try may not have).
    held: bool,
}

impl PgMediaHold {
    /// Takes a connection of `pool` whose session the server ends after `idle` without a
    /// statement (so a frozen process cannot keep the lock).
    async fn open(pool: &sqlx::PgPool, idle: &str) -> Result<Self> {
        let mut connection = pool
            .acquire()
            .await
            .map_err(|e| map_error(e, "media lock"))?;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SET idle_session_timeout = '{idle}'"
        )))
        .execute(&mut *connection)
        .await
        .map_err(|e| map_error(e, "media lock"))?;
        Ok(Self {
            connection: Some(connection),
            shared: false,
            held: false,
        })
    }
}

#[async_trait]
impl MediaHold for PgMediaHold {
    async fn release(mut self: Box<Self>) {
        let Some(mut connection) = self.connection.take() else {
            return;
        };
        let unlocked = match (self.held, self.shared) {
            (false, _) => Ok(()),
            (true, shared) => {
                let unlock = match shared {
                    true => "SELECT pg_advisory_unlock_shared($1)",
                    false => "SELECT pg_advisory_unlock($1)",
                };
                sqlx::query(unlock)
                    .bind(MEDIA_LOCK_KEY)
                    .execute(&mut *connection)
                    .await
                    .map(|_| ())
            }
        };
        let released = unlocked.and(
            sqlx::query("RESET idle_session_timeout")
                .execute(&mut *connection)
                .await
                .map(|_| ()),
        );
        if released.is_err() {
            // Closing the session releases whatever it held.
            drop(connection.detach());
        }
    }

    async fn still_held(&mut self) -> bool {
        let Some(connection) = self.connection.as_mut() else {
            return false;
        };
        sqlx::query("SELECT 1")
            .execute(&mut **connection)
            .await
            .is_ok()
    }
}

impl Drop for PgMediaHold {
    fn drop(&mut self) {
        if let Some(connection) = self.connection.take() {
            // Not released: close the session, so the server releases the lock.
            drop(connection.detach());
        }
    }
}

/// A connection listening on [`CHANNEL`].
struct PgClusterListener {
    listener: PgListener,
}

#[async_trait]
impl ClusterListener for PgClusterListener {
    async fn next(&mut self) -> Result<Heard> {
        loop {
            let notification =
                self.listener
                    .try_recv()
                    .await
                    .map_err(|error| StoreError::Unavailable {
                        source: Box::new(error),
                    })?;
            let Some(notification) = notification else {
                // The connection was lost; the next call opens it again and listens anew.
                return Ok(Heard::Resumed);
            };
            match serde_json::from_str::<Announcement>(notification.payload()) {
                Ok(announcement) => return Ok(Heard::Announcement(announcement)),
                Err(error) => {
                    tracing::warn!(error = %error, "an announcement on the cluster channel does not decode; skipping it");
                }
            }
        }
    }
}
