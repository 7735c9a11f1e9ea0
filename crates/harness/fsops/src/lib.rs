//! Symlink-safe file operations rooted at a directory handle.
//!
//! Every Harness workspace access goes through a [`Root`]: a directory handle under which paths
//! are resolved with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, or,
//! where the kernel lacks `openat2`, with a walk that opens one component at a time with
//! `O_NOFOLLOW`. No symbolic link is ever followed, and nothing outside the root is touched, even
//! when the tree changes while an operation runs.
//!
//! ```no_run
//! use gatehouse_fsops::Root;
//! use gatehouse_fsops::commands::file_fetch;
//! use gatehouse_protocol::commands::FileFetchParams;
//!
//! let root = Root::open(std::path::Path::new("/srv/harness/workspace"))?;
//! let params = FileFetchParams { path: "/srv/harness/workspace/AGENTS.md".into(), ..Default::default() };
//! let result = file_fetch(&root, &params)?;
//! # Ok::<(), gatehouse_fsops::FsError>(())
//! ```
//!
//! # Modules
//! - [`root`]: [`Root`] and its operations on checked relative paths (bytes in, bytes out).
//! - [`dir`]: [`Dir`], an open directory handle whose operations name one entry each (create,
//!   open, `fchmod`, write, link, read a link, remove a tree), for the node host's own work in
//!   session workspaces.
//! - [`commands`]: the five wire commands (`file.fetch`, `file.stat`, `file.write`,
//!   `file.create`, `dir.list`) from protocol parameters to protocol results.
//! - [`path`]: mapping absolute wire paths to checked relative paths.
//! - [`error`]: [`FsError`] and its stable codes.
//! - [`mime`]: MIME types from file names.
//! - `test_support`: snapshots of trees, for tests that prove nothing outside was touched.

#![deny(missing_docs)]

pub mod commands;
pub mod dir;
pub mod error;
pub mod mime;
pub mod path;
pub mod root;
#[doc(hidden)]
pub mod test_support;

pub use crate::dir::Dir;
pub use crate::error::FsError;
pub use crate::error::Result;
pub use crate::path::RelPath;
pub use crate::root::Root;
