//! [`StateError`]: why moving or checking a store failed.

/// The result of this crate's operations.
pub type Result<T, E = StateError> = std::result::Result<T, E>;

/// Why moving or checking a store failed.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// A store could not be opened (or, for a target, migrated).
    #[error("cannot open the store {store}: {reason}")]
    Open {
        /// The store URL (it never holds a password).
        store: String,
        /// What went wrong.
        reason: String,
    },
    /// A statement failed.
    #[error("the {backend} store refused a statement: {source}")]
    Sql {
        /// `sqlite` or `postgres`.
        backend: &'static str,
        /// The driver's error.
        source: sqlx::Error,
    },
    /// The source and the target are the same store.
    #[error("the source and the target are the same store ({store})")]
    SameStore {
        /// The store URL.
        store: String,
    },
    /// The source is not a Gateway store: it has no applied migrations.
    #[error("the source {store} is not a Gateway store (it has no migrations applied)")]
    NotAStore {
        /// The source URL.
        store: String,
    },
    /// The source and the target are at different schema versions.
    #[error(
        "the source is at schema version {source_version} and the target at {target_version}; \
         start a Gateway of this version once on the source (it migrates the schema at start), \
         stop it, then migrate"
    )]
    SchemaMismatch {
        /// The source's newest migration.
        source_version: i64,
        /// The target's newest migration.
        target_version: i64,
    },
    /// The target holds Gateway state that no earlier run of this copy wrote.
    #[error(
        "the target store already holds Gateway state ({table} has {rows} rows); pass \
         --replace-target to delete it and copy the source in its place"
    )]
    TargetNotEmpty {
        /// The first non-empty table.
        table: &'static str,
        /// Its row count.
        rows: u64,
    },
    /// The target holds an unfinished copy of another source.
    #[error(
        "the target store holds a copy from {previous}, not from {requested}; pass \
         --replace-target to delete it and start over"
    )]
    OtherSource {
        /// The source of the copy the target holds.
        previous: String,
        /// The source of this run.
        requested: String,
    },
    /// A stored JSON value cannot be read.
    #[error("{table}.{column} holds a value that is not JSON: {reason}")]
    Corrupt {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// The parser's message.
        reason: String,
    },
    /// The media store failed.
    #[error("media store: {0}")]
    Media(#[from] gatehouse_media::MediaError),
}
