//! [`MemoryIndex`]: the Gateway's index of the Harness's memory files, on one of two backends.
//!
//! - [`IndexLocation::File`]: its own SQLite file. `files` (path, content hash), `chunks` (line
//!   range, text, embedding as little-endian f32), and `chunks_fts`, an FTS5 table over the
//!   chunk texts (`unicode61`), keyed by chunk id; `meta` keeps the identity. The file uses a
//!   rollback journal, not WAL, so a rebuilt file can be renamed over it.
//! - `IndexLocation::Postgres` (feature `postgres`): tables of the schema `gatehouse_memory`
//!   in the Gateway store's PostgreSQL database (see `index/postgres.rs`), with a GIN-indexed
//!   `tsvector` for the keyword leg and the vectors in the same table (`bytea`, the same
//!   little-endian f32).
//!
//! Both backends keep the rest identical, because it lives here once:
//! - Vectors are held in memory and searched by an exact dot-product scan (they are
//!   L2-normalised, so that is the cosine similarity); 20,000 chunks of 384 dimensions take a few
//!   milliseconds. pgvector would slot in behind [`MemoryIndex::vector_hits`]: a `vector(N)`
//!   column beside `embedding` with an HNSW index, queried with `ORDER BY embedding <=> $1`,
//!   instead of the scan. It is not used because Debian 12's archive does not carry it.
//! - Keyword scores are FTS5's `bm25()`: SQLite computes it natively; PostgreSQL returns the
//!   matching chunks and the term statistics and [`crate::rank::fts5_bm25`] computes the same
//!   formula over the same [`crate::terms`], so both backends rank a corpus in the same order
//!   with the same scores.
//! - The identity: embedder, model, dimensions and chunking. When the running configuration
//!   differs, vector search is paused (keyword search goes on) until a reindex.
//! - A reindex builds a fresh index beside the live one ([`MemoryIndex::rebuild`]) and puts it in
//!   place at once ([`MemoryIndex::replace`]): a renamed file on SQLite, a generation number
//!   switched in one transaction on PostgreSQL. Searches never see a half-built index or two
//!   identities mixed.
//!
//! The backends are an enum, not a trait object: the set is closed and known at compile time,
//! every operation differs only in its SQL, and the shared parts above (chunking, embedding,
//! the vectors in memory, the identity rules) then exist once in [`MemoryIndex`] instead of in
//! every implementation.

mod sqlite;

#[cfg(feature = "postgres")]
mod postgres;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use parking_lot::RwLock;

use crate::chunk::ChunkSettings;
use crate::chunk::chunk_lines;
use crate::embed::Embedder;
use crate::rank::Candidate;

/// Why an index operation failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The index cannot be opened or used.
    #[error("the memory index failed: {0}")]
    Storage(String),
    /// The disk under the index is full (`SQLITE_FULL`, PostgreSQL's `disk_full`).
    #[error("the disk under the memory index is full")]
    DiskFull,
    /// The PostgreSQL server holding the index cannot be reached; the next call reconnects.
    #[error("the database of the memory index is unavailable: {0}")]
    Unavailable(String),
}

impl From<sqlx::Error> for IndexError {
    fn from(error: sqlx::Error) -> Self {
        if let sqlx::Error::Database(database) = &error
            && database.code().as_deref() == Some("13")
        {
            return IndexError::DiskFull;
        }
        IndexError::Storage(error.to_string())
    }
}

/// Where the index lives.
#[derive(Debug, Clone)]
pub enum IndexLocation {
    /// Its own SQLite file, created if missing.
    File(PathBuf),
    /// The schema `gatehouse_memory` of a PostgreSQL database, created by the index's own
    /// migrations; the index keeps a small pool of its own.
    #[cfg(feature = "postgres")]
    Postgres(Box<sqlx::postgres::PgConnectOptions>),
}

/// What the index was built with. Two identities with different `vector_key`s cannot share
/// vectors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexIdentity {
    /// `none`, `local` or `openai-compatible`.
    pub embedder: String,
    /// The embedding model (empty for `none`).
    pub model: String,
    /// The vector length (0 for `none`).
    pub dimensions: usize,
    /// The chunking settings.
    pub chunking: String,
}

impl IndexIdentity {
    /// Returns the identity of an index using `embedder` (or none) and `chunking`.
    pub fn of(embedder: Option<&dyn Embedder>, chunking: ChunkSettings) -> Self {
        match embedder {
            Some(embedder) => Self {
                embedder: embedder.kind().as_str().to_owned(),
                model: embedder.model().to_owned(),
                dimensions: embedder.dimensions(),
                chunking: chunking.identity(),
            },
            None => Self {
                embedder: String::from("none"),
                model: String::new(),
                dimensions: 0,
                chunking: chunking.identity(),
            },
        }
    }

    /// The text stored as the index's identity.
    pub fn key(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.embedder, self.model, self.dimensions, self.chunking
        )
    }

    /// Reads an identity back from its [`IndexIdentity::key`] (as [`IndexStats::identity`]
    /// reports it), for opening a copy of an index with the identity it was built with. A model
    /// name may itself hold `|`.
    pub fn parse(key: &str) -> Option<Self> {
        let (embedder, rest) = key.split_once('|')?;
        let (rest, chunking) = rest.rsplit_once('|')?;
        let (model, dimensions) = rest.rsplit_once('|')?;
        Some(Self {
            embedder: embedder.to_owned(),
            model: model.to_owned(),
            dimensions: dimensions.parse().ok()?,
            chunking: chunking.to_owned(),
        })
    }
}

/// The state of the vector leg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VectorState {
    /// No embedder is configured: keyword search only.
    Off,
    /// Vectors are searched.
    Active,
    /// The index was built with another embedder or chunking: vector search is paused until
    /// `gatehouse memory reindex`.
    Paused {
        /// The identity the index was built with.
        built_with: String,
        /// The identity of the running configuration.
        configured: String,
    },
}

/// Counts and state, for `gatehouse memory status` (an API type: `GET /v1/memory/status`).
pub use gatehouse_api::memory::IndexStats;

/// One indexed file with its chunks as stored, for copying an index to another backend.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredFile {
    /// The workspace-relative path.
    pub path: String,
    /// The content hash the file was indexed at.
    pub hash: String,
    /// The chunks, in line order.
    pub chunks: Vec<StoredChunk>,
}

/// One chunk as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredChunk {
    /// The first line, 1-based.
    pub start_line: u32,
    /// The last line, 1-based.
    pub end_line: u32,
    /// The chunk text.
    pub text: String,
    /// The embedding, when the chunk has one.
    pub embedding: Option<Vec<f32>>,
}

/// A chunk as a backend writes it.
struct NewChunk<'a> {
    start_line: u32,
    end_line: u32,
    text: &'a str,
    embedding: Option<Vec<u8>>,
}

/// A stored vector as a backend reads it.
struct StoredVector {
    id: i64,
    path: String,
    embedding: Vec<u8>,
}

struct VectorRow {
    id: i64,
    path: Arc<str>,
    vector: Box<[f32]>,
}

/// The storage under a [`MemoryIndex`].
enum Backend {
    Sqlite(sqlite::SqliteBackend),
    #[cfg(feature = "postgres")]
    Postgres(postgres::PgBackend),
}

/// Runs `$body` with `$backend` bound to whichever backend `$index` uses.
macro_rules! on_backend {
    ($index:expr, $backend:ident => $body:expr) => {
        match &$index.backend {
            Backend::Sqlite($backend) => $body,
            #[cfg(feature = "postgres")]
            Backend::Postgres($backend) => $body,
        }
    };
}

/// The memory index.
pub struct MemoryIndex {
    backend: Backend,
    chunking: ChunkSettings,
    identity: IndexIdentity,
    state: VectorState,
    vectors: RwLock<Vec<VectorRow>>,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let backend = match &self.backend {
            Backend::Sqlite(backend) => backend.path().display().to_string(),
            #[cfg(feature = "postgres")]
            Backend::Postgres(backend) => format!("postgres generation {}", backend.generation()),
        };
        f.debug_struct("MemoryIndex")
            .field("backend", &backend)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl MemoryIndex {
    /// Opens (creating if needed) the index at `location` for `identity`. A new index records
    /// the identity; an index built with another one keeps working for keyword search, with
    /// vector search [`VectorState::Paused`].
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn open(
        location: &IndexLocation,
        identity: IndexIdentity,
        chunking: ChunkSettings,
    ) -> Result<Self, IndexError> {
        let current = identity.key();
        let (backend, stored) = match location {
            IndexLocation::File(path) => {
                let (backend, stored) = sqlite::SqliteBackend::open(path, &current).await?;
                (Backend::Sqlite(backend), stored)
            }
            #[cfg(feature = "postgres")]
            IndexLocation::Postgres(options) => {
                let (backend, stored) = postgres::PgBackend::open(options, &current).await?;
                (Backend::Postgres(backend), stored)
            }
        };
        Self::with_backend(backend, stored, identity, chunking).await
    }

    async fn with_backend(
        backend: Backend,
        stored: String,
        identity: IndexIdentity,
        chunking: ChunkSettings,
    ) -> Result<Self, IndexError> {
        let current = identity.key();
        let state = if stored == current {
            active_or_off(&identity)
        } else {
            tracing::warn!(built_with = %stored, configured = %current, "the memory index was built with another embedder or chunking; vector search is paused until `gatehouse memory reindex`");
            VectorState::Paused {
                built_with: stored,
                configured: current,
            }
        };
        let index = Self {
            backend,
            chunking,
            identity,
            state,
            vectors: RwLock::new(Vec::new()),
        };
        if index.state == VectorState::Active {
            index.load_vectors().await?;
        }
        Ok(index)
    }

    /// Closes the index's connections (before a rebuilt one replaces it).
    pub async fn close(&self) {
        on_backend!(self, backend => backend.close().await);
    }

    /// Returns the state of the vector leg.
    pub fn vector_state(&self) -> &VectorState {
        &self.state
    }

    /// Returns the identity of the running configuration.
    pub fn identity(&self) -> &IndexIdentity {
        &self.identity
    }

    /// Returns the index file, when the index is a SQLite file.
    pub fn path(&self) -> Option<&std::path::Path> {
        match &self.backend {
            Backend::Sqlite(backend) => Some(backend.path()),
            #[cfg(feature = "postgres")]
            Backend::Postgres(_) => None,
        }
    }

    async fn load_vectors(&self) -> Result<(), IndexError> {
        let stored = on_backend!(self, backend => backend.vectors().await)?;
        let mut paths: HashMap<String, Arc<str>> = HashMap::new();
        let loaded: Vec<VectorRow> = stored
            .into_iter()
            .map(|row| {
                let path = Arc::clone(
                    paths
                        .entry(row.path.clone())
                        .or_insert_with(|| Arc::from(row.path.as_str())),
                );
                VectorRow {
                    id: row.id,
                    path,
                    vector: decode_vector(&row.embedding).into(),
                }
            })
            .collect();
        *self.vectors.write() = loaded;
        Ok(())
    }

    /// Returns the indexed files and their content hashes.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn file_hashes(&self) -> Result<HashMap<String, String>, IndexError> {
        on_backend!(self, backend => backend.file_hashes().await)
    }

    /// Replaces the chunks of `path` with those of `text` (content hash `hash`), embedding them
    /// with `embedder` when vector search is active. Returns the number of chunks.
    ///
    /// # Errors
    /// [`IndexError`]; an embedding failure is reported by the embedder's caller, not here:
    /// `vectors` is then `None` and the chunks are stored without vectors.
    pub async fn upsert_file(
        &self,
        path: &str,
        text: &str,
        hash: &str,
        embedder: Option<&dyn Embedder>,
    ) -> Result<usize, crate::MemoryError> {
        let chunks = chunk_lines(text, self.chunking);
        let vectors = match (embedder, &self.state) {
            (Some(embedder), VectorState::Active) if !chunks.is_empty() => {
                let texts: Vec<String> = chunks.iter().map(|chunk| chunk.text.clone()).collect();
                Some(embedder.embed(&texts).await?)
            }
            _ => None,
        };
        let rows: Vec<(NewChunk<'_>, Option<&Vec<f32>>)> = chunks
            .iter()
            .enumerate()
            .map(|(position, chunk)| {
                let vector = vectors.as_ref().and_then(|vectors| vectors.get(position));
                (
                    NewChunk {
                        start_line: chunk.start_line,
                        end_line: chunk.end_line,
                        text: &chunk.text,
                        embedding: vector.map(|vector| encode_vector(vector)),
                    },
                    vector,
                )
            })
            .collect();
        let written: Vec<Option<&Vec<f32>>> = rows.iter().map(|(_, vector)| *vector).collect();
        let rows: Vec<NewChunk<'_>> = rows.into_iter().map(|(row, _)| row).collect();
        let ids = self.write_file(path, hash, &rows).await?;
        self.remember_vectors(
            path,
            ids.into_iter()
                .zip(written)
                .filter_map(|(id, vector)| vector.map(|vector| (id, vector.as_slice()))),
        );
        Ok(chunks.len())
    }

    async fn write_file(
        &self,
        path: &str,
        hash: &str,
        rows: &[NewChunk<'_>],
    ) -> Result<Vec<i64>, IndexError> {
        on_backend!(self, backend => backend.replace_file(path, hash, rows).await)
    }

    /// Replaces the vectors of `path` held in memory with `vectors` (chunk id, vector).
    fn remember_vectors<'v>(&self, path: &str, vectors: impl Iterator<Item = (i64, &'v [f32])>) {
        let path_key: Arc<str> = Arc::from(path);
        let inserted: Vec<VectorRow> = vectors
            .map(|(id, vector)| VectorRow {
                id,
                path: Arc::clone(&path_key),
                vector: vector.into(),
            })
            .collect();
        let mut vectors_in_memory = self.vectors.write();
        vectors_in_memory.retain(|row| &*row.path != path);
        if self.state == VectorState::Active {
            vectors_in_memory.extend(inserted);
        }
    }

    /// Forgets `path`.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn remove_file(&self, path: &str) -> Result<(), IndexError> {
        on_backend!(self, backend => backend.remove_file(path).await)?;
        self.vectors.write().retain(|row| &*row.path != path);
        Ok(())
    }

    /// The keyword leg: chunks matching every word of `query`, best first, at most `limit`.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn keyword_search(
        &self,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        on_backend!(self, backend => backend.keyword_search(query, limit).await)
    }

    /// The vector leg: the `limit` chunks most similar to `query` (normalised), best first, with
    /// their cosine similarity. Empty unless vector search is active.
    pub fn vector_search(&self, query: &[f32], limit: usize) -> Vec<(i64, f64)> {
        self.vector_hits(query, limit)
            .into_iter()
            .map(|(id, score, _)| (id, score))
            .collect()
    }

    /// Like [`MemoryIndex::vector_search`], with each chunk's path. This exact scan is where
    /// pgvector's index would answer instead on PostgreSQL.
    pub fn vector_hits(&self, query: &[f32], limit: usize) -> Vec<(i64, f64, Arc<str>)> {
        let vectors = self.vectors.read();
        let mut scored: Vec<(usize, f32)> = vectors
            .iter()
            .enumerate()
            .map(|(position, row)| (position, crate::rank::dot(&row.vector, query)))
            .collect();
        let limit = limit.min(scored.len());
        if limit == 0 {
            return Vec::new();
        }
        scored.select_nth_unstable_by(limit - 1, |a, b| b.1.total_cmp(&a.1));
        scored.truncate(limit);
        scored.sort_by(|a, b| b.1.total_cmp(&a.1));
        scored
            .into_iter()
            .map(|(position, score)| {
                let row = &vectors[position];
                (row.id, f64::from(score), Arc::clone(&row.path))
            })
            .collect()
    }

    /// Loads the chunks `ids`.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn chunks(&self, ids: &[i64]) -> Result<Vec<Candidate>, IndexError> {
        on_backend!(self, backend => backend.chunks(ids).await)
    }

    /// Returns the counts for `gatehouse memory status`.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn stats(&self) -> Result<IndexStats, IndexError> {
        on_backend!(self, backend => backend.stats().await)
    }

    /// Returns every indexed file with its chunks and vectors as stored, for copying the index
    /// to another backend with [`MemoryIndex::restore_file`]. Files come in the order their
    /// chunks were written (files without chunks last, by path), so a copy restored in this
    /// order breaks score ties as the original does.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn stored_files(&self) -> Result<Vec<StoredFile>, IndexError> {
        let mut hashes = self.file_hashes().await?;
        let mut files: Vec<StoredFile> = Vec::with_capacity(hashes.len());
        let mut positions: HashMap<String, usize> = HashMap::with_capacity(hashes.len());
        for (path, chunk) in on_backend!(self, backend => backend.stored_chunks().await)? {
            let position = match positions.get(&path) {
                Some(position) => *position,
                None => {
                    let Some(hash) = hashes.remove(&path) else {
                        continue;
                    };
                    positions.insert(path.clone(), files.len());
                    files.push(StoredFile {
                        path,
                        hash,
                        chunks: Vec::new(),
                    });
                    files.len() - 1
                }
            };
            files[position].chunks.push(chunk);
        }
        let mut empty: Vec<StoredFile> = hashes
            .into_iter()
            .map(|(path, hash)| StoredFile {
                path,
                hash,
                chunks: Vec::new(),
            })
            .collect();
        empty.sort_by(|a, b| a.path.cmp(&b.path));
        files.extend(empty);
        Ok(files)
    }

    /// Writes `file` as stored elsewhere (chunks and vectors as they are, nothing re-chunked or
    /// re-embedded), replacing what the index holds for its path. The index should have been
    /// opened with the identity the copied index reports in [`IndexStats::identity`].
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn restore_file(&self, file: &StoredFile) -> Result<(), IndexError> {
        let rows: Vec<NewChunk<'_>> = file
            .chunks
            .iter()
            .map(|chunk| NewChunk {
                start_line: chunk.start_line,
                end_line: chunk.end_line,
                text: &chunk.text,
                embedding: chunk.embedding.as_deref().map(encode_vector),
            })
            .collect();
        let ids = self.write_file(&file.path, &file.hash, &rows).await?;
        self.remember_vectors(
            &file.path,
            ids.into_iter()
                .zip(&file.chunks)
                .filter_map(|(id, chunk)| chunk.embedding.as_deref().map(|vector| (id, vector))),
        );
        Ok(())
    }

    /// Starts a rebuild with `identity`: a fresh, empty index beside this one (a second file,
    /// or a new generation), which no search of this index sees. Fill it with
    /// [`MemoryIndex::upsert_file`], then [`MemoryIndex::replace`] this index with it, or
    /// [`MemoryIndex::discard`] it.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn rebuild(&self, identity: IndexIdentity) -> Result<MemoryIndex, IndexError> {
        let key = identity.key();
        let backend = match &self.backend {
            Backend::Sqlite(backend) => Backend::Sqlite(backend.rebuild(&key).await?),
            #[cfg(feature = "postgres")]
            Backend::Postgres(backend) => Backend::Postgres(backend.rebuild(&key).await?),
        };
        Self::with_backend(backend, key, identity, self.chunking).await
    }

    /// Puts this rebuilt index in place of `live` at once and returns the index to use from now
    /// on; `live` is closed. SQLite renames the rebuilt file over the live one; PostgreSQL
    /// switches the live generation and deletes the old one in one transaction.
    ///
    /// # Errors
    /// [`IndexError`]; on failure `live`'s data stays in place (on SQLite it must be reopened).
    pub async fn replace(self, live: &MemoryIndex) -> Result<MemoryIndex, IndexError> {
        let Self {
            backend,
            chunking,
            identity,
            state,
            vectors,
        } = self;
        match (backend, &live.backend) {
            (Backend::Sqlite(fresh), Backend::Sqlite(old)) => {
                drop((state, vectors));
                let target = old.path().to_path_buf();
                old.close().await;
                fresh.close().await;
                std::fs::rename(fresh.path(), &target)
                    .map_err(|error| IndexError::Storage(error.to_string()))?;
                Self::open(&IndexLocation::File(target), identity, chunking).await
            }
            #[cfg(feature = "postgres")]
            (Backend::Postgres(fresh), Backend::Postgres(_)) => {
                fresh.make_live().await?;
                Ok(Self {
                    backend: Backend::Postgres(fresh),
                    chunking,
                    identity,
                    state,
                    vectors,
                })
            }
            #[cfg(feature = "postgres")]
            _ => {
                drop((state, vectors));
                Err(IndexError::Storage(String::from(
                    "a rebuilt index can only replace an index on its own backend",
                )))
            }
        }
    }

    /// Drops a rebuild that will not be used; the live index is untouched.
    pub async fn discard(self) {
        match &self.backend {
            Backend::Sqlite(backend) => {
                backend.close().await;
                let _ = std::fs::remove_file(backend.path());
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres(backend) => {
                if let Err(error) = backend.drop_generation().await {
                    tracing::warn!(error = %error, "cannot delete the abandoned memory index rebuild; the next start deletes it");
                }
            }
        }
    }
}

fn active_or_off(identity: &IndexIdentity) -> VectorState {
    if identity.dimensions == 0 {
        VectorState::Off
    } else {
        VectorState::Active
    }
}

/// The FTS5 query for `query`: every [word](crate::terms::words) quoted, joined with AND. Each
/// quoted word is one `unicode61` token, so the query means what the PostgreSQL backend's
/// `tsquery` of the same words means.
pub fn fts_query(query: &str) -> Option<String> {
    let words: Vec<String> = crate::terms::words(query)
        .map(|word| format!("\"{word}\""))
        .collect();
    (!words.is_empty()).then(|| words.join(" AND "))
}

fn encode_vector(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode_vector(bytes: &[u8]) -> Vec<f32> {
    bytes
        .chunks_exact(4)
        .map(|quad| f32::from_le_bytes([quad[0], quad[1], quad[2], quad[3]]))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fts_queries_quote_every_word() {
        assert_eq!(
            fts_query("deploy key? rotates-weekly").as_deref(),
            Some("\"deploy\" AND \"key\" AND \"rotates\" AND \"weekly\"")
        );
        assert_eq!(fts_query(" ?! "), None);
        assert_eq!(fts_query("\" OR 1"), Some(String::from("\"OR\" AND \"1\"")));
    }

    #[test]
    fn identities_parse_back_from_their_keys() {
        let identity = IndexIdentity {
            embedder: String::from("openai-compatible"),
            model: String::from("org|embed-3"),
            dimensions: 1536,
            chunking: ChunkSettings::default().identity(),
        };
        assert_eq!(IndexIdentity::parse(&identity.key()), Some(identity));
        let none = IndexIdentity::of(None, ChunkSettings::default());
        assert_eq!(IndexIdentity::parse(&none.key()), Some(none));
        assert_eq!(
            IndexIdentity::parse("local|model|many|lines-v1:400:80"),
            None
        );
        assert_eq!(IndexIdentity::parse("garbage"), None);
    }

    #[test]
    fn vectors_round_trip_as_little_endian_f32() {
        let vector = vec![0.25, -1.5, 3.0];
        assert_eq!(decode_vector(&encode_vector(&vector)), vector);
    }
}
