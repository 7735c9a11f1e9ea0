//! [`StoreError`]: backend-neutral storage errors.

use gatehouse_protocol::error::ErrorCode;

/// A storage failure, the same for every backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The record to update does not exist.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: &'static str,
    },
    /// A record with the same key exists.
    #[error("{what} already exists")]
    AlreadyExists {
        /// What was inserted.
        what: &'static str,
    },
    /// The disk is full; nothing was written. Retrying after space is freed succeeds.
    #[error("the gateway state disk is full")]
    DiskFull,
    /// The store cannot be opened or does not answer.
    #[error("the gateway store is unavailable")]
    Unavailable {
        /// The engine's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Another Gateway holds the store ([`crate::exclusive::StoreLock`]).
    #[error(
        "another gateway holds the store {store} (STORE_IN_USE); stop it first, or give this \
         gateway a store of its own"
    )]
    InUse {
        /// The store's location (never with a password).
        store: String,
    },
    /// A stored value could not be decoded (for example malformed JSON written by hand).
    #[error("stored {what} is corrupt")]
    Corrupt {
        /// What was being read.
        what: &'static str,
    },
    /// Any other engine failure.
    #[error("storage failure")]
    Internal {
        /// The engine's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The result type of the store.
pub type Result<T> = std::result::Result<T, StoreError>;

impl StoreError {
    /// Returns the stable code of this error for the HTTP API.
    pub fn code(&self) -> ErrorCode {
        match self {
            StoreError::NotFound { .. } => ErrorCode::NotFound,
            StoreError::AlreadyExists { .. } => ErrorCode::AlreadyExists,
            StoreError::DiskFull => ErrorCode::StorageFull,
            StoreError::Unavailable { .. } => ErrorCode::StoreUnavailable,
            StoreError::InUse { .. } => ErrorCode::StoreInUse,
            StoreError::Corrupt { .. } | StoreError::Internal { .. } => ErrorCode::StoreFailure,
        }
    }
}
