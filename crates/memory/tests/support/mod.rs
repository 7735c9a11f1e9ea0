//! The backends the index tests run against: a real SQLite file in a tempdir, or a fresh
//! database on the PostgreSQL server `GATEHOUSE_TEST_POSTGRES_URL` names.

use std::str::FromStr;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use gatehouse_memory::chunk::ChunkSettings;
use gatehouse_memory::embed::Embedder;
use gatehouse_memory::index::IndexIdentity;
use gatehouse_memory::index::IndexLocation;
use gatehouse_memory::index::MemoryIndex;
use sqlx::Connection;

/// The variable naming the PostgreSQL server of the tests, as a URL whose role may create
/// databases (scripts/test starts a throwaway server and sets it).
pub(crate) const POSTGRES_URL_ENV: &str = "GATEHOUSE_TEST_POSTGRES_URL";

/// One index's location, opened (and reopened, as a restarted Gateway would) by
/// [`Target::open`].
pub(crate) struct Target {
    location: IndexLocation,
    /// The database URL, for PostgreSQL targets.
    url: Option<String>,
    _dir: Option<tempfile::TempDir>,
}

impl Target {
    /// A new SQLite file in a fresh tempdir.
    pub(crate) fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a tempdir");
        Self {
            location: IndexLocation::File(dir.path().join("memory.db")),
            url: None,
            _dir: Some(dir),
        }
    }

    /// A new, empty database on the test server, so tests run in parallel.
    ///
    /// # Panics
    /// When `GATEHOUSE_TEST_POSTGRES_URL` is not set or the server refuses: the PostgreSQL
    /// half of the suite never passes by being skipped.
    pub(crate) async fn postgres() -> Self {
        let url = fresh_postgres_database().await;
        let options = sqlx::postgres::PgConnectOptions::from_str(&url).expect("a database URL");
        Self {
            location: IndexLocation::Postgres(Box::new(options)),
            url: Some(url),
            _dir: None,
        }
    }

    /// Another empty target of the same backend.
    pub(crate) async fn another(&self) -> Self {
        match self.url {
            Some(_) => Self::postgres().await,
            None => Self::sqlite(),
        }
    }

    /// Opens the index for `embedder` (or none) with the default chunking.
    pub(crate) async fn open(&self, embedder: Option<&dyn Embedder>) -> MemoryIndex {
        let chunking = ChunkSettings::default();
        MemoryIndex::open(
            &self.location,
            IndexIdentity::of(embedder, chunking),
            chunking,
        )
        .await
        .unwrap_or_else(|error| panic!("cannot open the index: {error:?}"))
    }

    /// The database URL of a PostgreSQL target, to reach it as an operator would.
    pub(crate) fn postgres_url(&self) -> &str {
        self.url.as_deref().expect("a PostgreSQL target")
    }
}

/// Returns the test server's URL.
///
/// # Panics
/// When the variable is not set, with what to do about it.
pub(crate) fn postgres_server_url() -> String {
    std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| {
        panic!(
            "{POSTGRES_URL_ENV} is not set: the memory index tests need a PostgreSQL server. \
             Run scripts/test, which starts a throwaway one, or set {POSTGRES_URL_ENV} to \
             postgres://USER@127.0.0.1:PORT/postgres for a server where USER may create databases"
        )
    })
}

/// Creates an empty database with a name no other test uses and returns its URL.
pub(crate) async fn fresh_postgres_database() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let server = postgres_server_url();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        "gh_memory_{}_{}_{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let mut admin = sqlx::PgConnection::connect(&server)
        .await
        .unwrap_or_else(|error| panic!("cannot reach the test PostgreSQL at {server}: {error}"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|error| panic!("cannot create the test database {name}: {error}"));
    let _ = admin.close().await;
    let mut url = url::Url::parse(&server).expect("the test server URL is a URL");
    url.set_path(&name);
    url.to_string()
}
