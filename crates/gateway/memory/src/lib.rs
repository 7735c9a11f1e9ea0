//! The Gateway's memory index of the Harness's memory files (`MEMORY.md`, `memory.md`,
//! `DREAMS.md` and `memory/**/*.md`): line-based chunks of about 400 tokens with 80 of overlap,
//! a keyword leg (FTS5 on SQLite, `tsvector` on PostgreSQL, ranked by the same BM25) and an
//! exact vector leg, merged `0.7 × vector + 0.3 × keyword`, a 30-day
//! recency half-life on dated notes, maximal marginal relevance against near-duplicates, and
//! snippets of at most 700 characters cited as `path#Lstart-Lend`.
//!
//! The source files stay on the Harness; this crate never reads a file itself. The Gateway feeds
//! it what the node's `workspace.memory` command returns.
//!
//! # Modules
//! - [`chunk`]: line-based chunking.
//! - [`rank`]: scores, recency, MMR, snippets.
//! - [`embed`]: the embedders and their degradation rules.
//! - [`index`]: [`index::MemoryIndex`] on its SQLite file (FTS5) or in the store's PostgreSQL
//!   database (`tsvector`, feature `postgres`), with the vectors.
//! - [`terms`]: the words and terms of the keyword leg, the same on both backends.
//! - [`search`]: the search pipeline.
//! - `local` (feature `local-embedder`): all-MiniLM-L6-v2 in process with candle.

#![deny(missing_docs)]

pub mod chunk;
pub mod embed;
pub mod index;
#[cfg(feature = "local-embedder")]
pub mod local;
pub mod rank;
pub mod search;
pub mod terms;

/// A failure of the memory index or its embedder.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The index failed.
    #[error(transparent)]
    Index(#[from] index::IndexError),
    /// The embedder failed.
    #[error(transparent)]
    Embed(#[from] embed::EmbedError),
}
