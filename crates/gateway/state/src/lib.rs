//! Moving a Gateway installation from one store to another, and checking a store.
//!
//! - [`migrate::migrate`] copies every table of a Gateway store (SQLite or PostgreSQL) into
//!   another, in batches inside transactions, resumable after an interruption, and verifies
//!   row counts and content hashes per table; [`media::copy_media`] copies every blob of a
//!   media store to another, checking each against its id.
//! - [`check::check`] reports a store's integrity problems as typed findings.
//!
//! The memory index is not copied: it is derived from the Harness's memory files, and the
//! Gateway rebuilds it at its first sync with the node.
//!
//! # Modules
//! - [`tables`]: the catalogue of the store's tables and columns.
//! - [`db`]: one pool to either backend, with the generic reads and writes used here.
//! - [`rowhash`]: content hashes of tables that are equal across backends.
//! - [`migrate`], [`media`], [`check`]: the operations.
//! - [`error`]: the error type, [`StateError`].

#![deny(missing_docs)]

pub mod check;
pub mod db;
pub mod error;
pub mod media;
pub mod migrate;
pub mod rowhash;
pub mod tables;

pub use crate::error::Result;
pub use crate::error::StateError;
