//! [`MediaError`]: every failure of the media store, with a stable [`MediaError::code`].

use gatehouse_protocol::error::ErrorCode;
use std::error::Error as StdError;

/// The result of a media store call.
pub type Result<T, E = MediaError> = std::result::Result<T, E>;

/// A media store failure.
///
/// Client mistakes ([`MediaError::InvalidId`], [`MediaError::InvalidMimeType`],
/// [`MediaError::NotFound`]) are permanent; [`MediaError::StorageFull`] clears when space is
/// freed; the rest are server faults whose cause is in the `source` chain.
#[derive(Debug, thiserror::Error)]
pub enum MediaError {
    /// The id is not exactly 64 lowercase hex characters. Returned before any storage access,
    /// so no id can address another key. Not retryable.
    #[error("invalid media id: expected 64 lowercase hex characters")]
    InvalidId,
    /// The MIME type is empty, longer than 255 bytes, has no `/`, or holds characters other than
    /// printable ASCII. Returned by [`crate::MediaStore::put`] before anything is written.
    #[error("invalid mime type: expected a printable ascii type/subtype of at most 255 bytes")]
    InvalidMimeType,
    /// No media with this id is stored. Not retryable.
    #[error("no media {id}")]
    NotFound {
        /// The requested id (validated, so safe to show).
        id: String,
    },
    /// The stored bytes or metadata do not match the id (damaged storage). Not retryable; an
    /// operator has to remove the damaged objects.
    #[error("the stored media {id} is damaged")]
    Corrupt {
        /// The id whose objects are damaged.
        id: String,
    },
    /// Storing new bytes would take the store past its configured quota. Returned by
    /// [`crate::MediaStore::put`] before anything is written; retryable once media is removed
    /// or the quota raised.
    #[error(
        "the media store quota of {quota_bytes} bytes is used up ({used_bytes} bytes stored, {size} more needed)"
    )]
    QuotaExceeded {
        /// The configured quota.
        quota_bytes: u64,
        /// The bytes stored when the put was refused.
        used_bytes: u64,
        /// The size of the refused blob.
        size: u64,
    },
    /// The disk (or quota) is full. Retryable once space is freed; nothing partial is left.
    #[error("the media store is out of space")]
    StorageFull {
        /// The storage error that reported the full disk.
        #[source]
        source: object_store::Error,
    },
    /// The store directory cannot be created or opened.
    #[error("cannot open the media store")]
    Open(#[source] std::io::Error),
    /// The object store failed for another reason.
    #[error("the media store failed")]
    Store {
        /// The object store error.
        #[source]
        source: object_store::Error,
    },
    /// The metadata could not be encoded.
    #[error("cannot encode media metadata")]
    Encode(#[from] serde_json::Error),
    /// A hashing task failed to complete.
    #[error("a media store task failed")]
    Join(#[from] tokio::task::JoinError),
}

impl MediaError {
    /// Returns the stable wire code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            MediaError::InvalidId => ErrorCode::InvalidMediaId,
            MediaError::InvalidMimeType => ErrorCode::InvalidMimeType,
            MediaError::NotFound { .. } => ErrorCode::MediaNotFound,
            MediaError::Corrupt { .. } => ErrorCode::MediaCorrupt,
            MediaError::QuotaExceeded { .. } => ErrorCode::MediaQuotaExceeded,
            MediaError::StorageFull { .. } => ErrorCode::StorageFull,
            MediaError::Open(_)
            | MediaError::Store { .. }
            | MediaError::Encode(_)
            | MediaError::Join(_) => ErrorCode::MediaStoreFailure,
        }
    }

    /// Returns true when the caller sent something wrong (bad id, bad MIME type, unknown id),
    /// as opposed to a failure of the store.
    pub fn is_client_error(&self) -> bool {
        match self {
            MediaError::InvalidId | MediaError::InvalidMimeType | MediaError::NotFound { .. } => {
                true
            }
            MediaError::Corrupt { .. }
            | MediaError::QuotaExceeded { .. }
            | MediaError::StorageFull { .. }
            | MediaError::Open(_)
            | MediaError::Store { .. }
            | MediaError::Encode(_)
            | MediaError::Join(_) => false,
        }
    }

    /// Translates an object store error of a write: a full disk (ENOSPC, or a quota) anywhere in
    /// the cause chain becomes [`MediaError::StorageFull`], the rest [`MediaError::Store`].
    pub(crate) fn from_write(source: object_store::Error) -> Self {
        if is_storage_full(&source) {
            return MediaError::StorageFull { source };
        }
        MediaError::Store { source }
    }
}

/// Returns true when an `io::Error` in the cause chain of `error` says the disk or quota is full.
fn is_storage_full(error: &object_store::Error) -> bool {
    let mut current: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(error) = current {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded => {
                    return true;
                }
                _ => {}
            }
        }
        current = error.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use crate::MediaError;

    /// An error with a source, like the local store's own error wrapping an `io::Error`.
    #[derive(Debug, thiserror::Error)]
    #[error("unable to copy data to file")]
    struct Wrapped {
        #[source]
        source: std::io::Error,
    }

    fn generic(source: std::io::Error) -> object_store::Error {
        object_store::Error::Generic {
            store: "LocalFileSystem",
            source: Box::new(Wrapped { source }),
        }
    }

    #[test]
    fn enospc_maps_to_storage_full() {
        let enospc = std::io::Error::from_raw_os_error(28);
        let error = MediaError::from_write(generic(enospc));
        assert_eq!(error.code(), "STORAGE_FULL");
        assert!(matches!(error, MediaError::StorageFull { .. }));
    }

    #[test]
    fn quota_maps_to_storage_full() {
        let edquot = std::io::Error::from(std::io::ErrorKind::QuotaExceeded);
        assert_eq!(
            MediaError::from_write(generic(edquot)).code(),
            "STORAGE_FULL"
        );
    }

    #[test]
    fn other_io_errors_are_store_failures() {
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        let error = MediaError::from_write(generic(denied));
        assert_eq!(error.code(), "MEDIA_STORE_FAILURE");
        assert!(!error.is_client_error());
    }
}
