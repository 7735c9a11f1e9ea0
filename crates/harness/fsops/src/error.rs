//! The typed error of every fsops operation, and its mapping to the stable wire codes.

use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;

/// A refused or failed file operation.
///
/// Every variant names the path it is about (as the caller gave it, or canonical where known) and
/// maps to exactly one stable code through [`FsError::code`]. None of them is worth retrying
/// unchanged, except [`FsError::Read`] and [`FsError::Write`], which wrap an operating-system
/// failure that may be transient (for example a full disk).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    /// The path is empty, relative, or contains NUL or another forbidden byte.
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// Why it is invalid.
        reason: &'static str,
    },
    /// The path has a `..` segment, or lies outside the root.
    #[error("path {path:?} leaves the workspace root")]
    PathTraversal {
        /// The path as given.
        path: String,
    },
    /// A component of the path is a symbolic link; links are never followed.
    #[error("path {path:?} crosses a symbolic link, which is never followed")]
    SymlinkRedirect {
        /// The canonical path as far as it was resolved.
        path: String,
    },
    /// The target of a write is a symbolic link.
    #[error("{path:?} is a symbolic link; writes never go through one")]
    SymlinkTargetDenied {
        /// The canonical path of the link.
        path: String,
    },
    /// Nothing exists at the path.
    #[error("{path:?} does not exist")]
    NotFound {
        /// The canonical path.
        path: String,
    },
    /// The operating system refused access.
    #[error("permission denied for {path:?}")]
    PermissionDenied {
        /// The canonical path.
        path: String,
    },
    /// The path is a directory where a file was expected.
    #[error("{path:?} is a directory")]
    IsDirectory {
        /// The canonical path.
        path: String,
    },
    /// A component that must be a directory is not one.
    #[error("{path:?} is not a directory")]
    NotDirectory {
        /// The canonical path.
        path: String,
    },
    /// The content is larger than the limit.
    #[error("{path:?} is {size} bytes, over the limit of {limit} bytes")]
    FileTooLarge {
        /// The canonical path.
        path: String,
        /// The size found (at least `limit + 1` when reading stopped early).
        size: u64,
        /// The limit that applied.
        limit: u64,
    },
    /// The file has more than one hard link and may alias a file outside the root.
    #[error("{path:?} has {links} hard links; hard-linked files are not served")]
    HardlinkDenied {
        /// The canonical path.
        path: String,
        /// The link count found.
        links: u64,
    },
    /// The path is not a regular file (a FIFO, socket or device).
    #[error("{path:?} is not a regular file")]
    NotRegularFile {
        /// The canonical path.
        path: String,
    },
    /// The file exists and overwriting was not allowed.
    #[error("{path:?} exists and overwrite is false")]
    ExistsNoOverwrite {
        /// The canonical path.
        path: String,
    },
    /// The parent directory is missing and `createParents` is false.
    #[error("the parent directory of {path:?} does not exist")]
    ParentNotFound {
        /// The canonical path of the target.
        path: String,
    },
    /// The content is not canonical standard base64.
    #[error("content is not canonical base64")]
    InvalidBase64,
    /// The content's SHA-256 is not the expected one.
    #[error("content sha256 {actual} does not match the expected {expected}")]
    IntegrityFailure {
        /// The expected hash, as given.
        expected: String,
        /// The hash of the content.
        actual: String,
    },
    /// Reading failed.
    #[error("cannot read {path:?}")]
    Read {
        /// The canonical path.
        path: String,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
    /// Writing failed.
    #[error("cannot write {path:?}")]
    Write {
        /// The canonical path.
        path: String,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },
}

/// The result type of fsops.
pub type Result<T> = std::result::Result<T, FsError>;

impl FsError {
    /// Returns the stable wire code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            FsError::InvalidPath { .. } => ErrorCode::InvalidPath,
            FsError::PathTraversal { .. } => ErrorCode::PathTraversal,
            FsError::SymlinkRedirect { .. } => ErrorCode::SymlinkRedirect,
            FsError::SymlinkTargetDenied { .. } => ErrorCode::SymlinkTargetDenied,
            FsError::NotFound { .. } => ErrorCode::NotFound,
            FsError::PermissionDenied { .. } => ErrorCode::PermissionDenied,
            FsError::IsDirectory { .. } => ErrorCode::IsDirectory,
            FsError::NotDirectory { .. } => ErrorCode::NotDirectory,
            FsError::FileTooLarge { .. } => ErrorCode::FileTooLarge,
            FsError::HardlinkDenied { .. } => ErrorCode::HardlinkDenied,
            FsError::NotRegularFile { .. } | FsError::Read { .. } => ErrorCode::ReadError,
            FsError::ExistsNoOverwrite { .. } => ErrorCode::ExistsNoOverwrite,
            FsError::ParentNotFound { .. } => ErrorCode::ParentNotFound,
            FsError::InvalidBase64 => ErrorCode::InvalidBase64,
            FsError::IntegrityFailure { .. } => ErrorCode::IntegrityFailure,
            FsError::Write { .. } => ErrorCode::WriteError,
        }
    }

    /// Returns the canonical path the error is about, when it has one.
    pub fn canonical_path(&self) -> Option<&str> {
        match self {
            FsError::SymlinkRedirect { path }
            | FsError::SymlinkTargetDenied { path }
            | FsError::NotFound { path }
            | FsError::PermissionDenied { path }
            | FsError::IsDirectory { path }
            | FsError::NotDirectory { path }
            | FsError::FileTooLarge { path, .. }
            | FsError::HardlinkDenied { path, .. }
            | FsError::NotRegularFile { path }
            | FsError::ExistsNoOverwrite { path }
            | FsError::ParentNotFound { path }
            | FsError::Read { path, .. }
            | FsError::Write { path, .. } => Some(path),
            FsError::InvalidPath { .. }
            | FsError::PathTraversal { .. }
            | FsError::InvalidBase64
            | FsError::IntegrityFailure { .. } => None,
        }
    }

    /// Returns the wire form: code, message (with the OS cause, if any) and `canonicalPath` in the
    /// details where known.
    pub fn to_wire(&self) -> WireError {
        let message = match std::error::Error::source(self) {
            Some(cause) => format!("{self}: {cause}"),
            None => self.to_string(),
        };
        let error = WireError::new(self.code(), message);
        let mut details = serde_json::Map::new();
        if let Some(path) = self.canonical_path() {
            details.insert("canonicalPath".into(), path.into());
        }
        if let FsError::FileTooLarge { size, limit, .. } = self {
            details.insert("size".into(), (*size).into());
            details.insert("limit".into(), (*limit).into());
        }
        match details.is_empty() {
            true => error,
            false => error.with_details(serde_json::Value::Object(details)),
        }
    }
}
