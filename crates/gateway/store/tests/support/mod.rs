//! The backends the store tests run against: a real SQLite file in a tempdir, or a fresh
//! database on the PostgreSQL server `GATEHOUSE_TEST_POSTGRES_URL` names.

use std::sync::Arc;

use gatehouse_store::Store;
use gatehouse_store::location::StoreLocation;

/// One store's location, opened (and reopened, as a restarted Gateway would) by [`Target::open`].
pub(crate) struct Target {
    location: StoreLocation,
    _dir: Option<tempfile::TempDir>,
}

impl Target {
    /// A new SQLite file in a fresh tempdir.
    pub(crate) fn sqlite() -> Self {
        let dir = tempfile::tempdir().expect("a tempdir");
        Self {
            location: StoreLocation::Local(dir.path().join("gateway.db")),
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
        Self {
            location: url.parse().expect("a postgres store URL"),
            _dir: None,
        }
    }

    /// Opens the store, applying migrations; each call is a new store on the same data.
    pub(crate) async fn open(&self) -> Arc<dyn Store> {
        gatehouse_store::open(&self.location)
            .await
            .unwrap_or_else(|error| panic!("cannot open {}: {error:?}", self.location))
    }

    /// The location, for tests that open it their own way.
    #[allow(
        dead_code,
        reason = "each test binary compiles this module, and not every one opens a store its own way"
    )]
    pub(crate) fn location(&self) -> &StoreLocation {
        &self.location
    }
}

/// Creates an empty database with a name no other test uses and returns its URL.
pub(crate) async fn fresh_postgres_database() -> String {
    gatehouse_testkit::fresh_postgres_database("store")
        .await
        .to_string()
}
