//! The backends the index tests run against: a real SQLite file in a tempdir, or a fresh
//! database on the PostgreSQL server `GATEHOUSE_TEST_POSTGRES_URL` names.

use std::str::FromStr;

use gatehouse_memory::chunk::ChunkSettings;
use gatehouse_memory::embed::Embedder;
use gatehouse_memory::index::IndexIdentity;
use gatehouse_memory::index::IndexLocation;
use gatehouse_memory::index::MemoryIndex;

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

/// Creates an empty database with a name no other test uses and returns its URL.
pub(crate) async fn fresh_postgres_database() -> String {
    gatehouse_testkit::fresh_postgres_database("memory")
        .await
        .to_string()
}
