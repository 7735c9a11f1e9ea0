//! [`MemoryIndex`]: the Gateway's index of the Harness's memory files, in its own SQLite file.
//!
//! - `files` (path, content hash), `chunks` (line range, text, embedding as little-endian f32),
//!   and `chunks_fts`, an FTS5 table over the chunk texts (`unicode61`), keyed by chunk id.
//! - Vectors are also held in memory and searched by an exact dot-product scan (they are
//!   L2-normalised, so that is the cosine similarity); 20,000 chunks of 384 dimensions take a few
//!   milliseconds.
//! - `meta` keeps the index identity: embedder, model, dimensions and chunking. When the running
//!   configuration differs, vector search is paused (keyword search goes on) until a reindex.
//! - The file uses a rollback journal, not WAL, so a rebuilt file can be renamed over it.

use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use parking_lot::RwLock;
use sqlx::Row;
use sqlx::SqlitePool;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::sqlite::SqliteJournalMode;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::sqlite::SqliteSynchronous;

use crate::chunk::ChunkSettings;
use crate::chunk::chunk_lines;
use crate::embed::Embedder;
use crate::rank::Candidate;

/// Why an index operation failed.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    /// The index file cannot be opened or used.
    #[error("the memory index failed: {0}")]
    Storage(String),
    /// The index file is full (`SQLITE_FULL`).
    #[error("the disk under the memory index is full")]
    DiskFull,
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

    /// The text stored in `meta`.
    pub fn key(&self) -> String {
        format!(
            "{}|{}|{}|{}",
            self.embedder, self.model, self.dimensions, self.chunking
        )
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

/// Counts and state, for `gatehouse memory status`.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct IndexStats {
    /// Indexed files.
    pub files: u64,
    /// Indexed chunks.
    pub chunks: u64,
    /// Chunks with a vector.
    pub vectors: u64,
    /// The identity the index was built with.
    pub identity: String,
}

struct VectorRow {
    id: i64,
    path: Arc<str>,
    vector: Box<[f32]>,
}

/// The memory index.
pub struct MemoryIndex {
    pool: SqlitePool,
    path: PathBuf,
    chunking: ChunkSettings,
    identity: IndexIdentity,
    state: VectorState,
    vectors: RwLock<Vec<VectorRow>>,
}

impl std::fmt::Debug for MemoryIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryIndex")
            .field("path", &self.path)
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY NOT NULL, hash TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chunks (id INTEGER PRIMARY KEY, path TEXT NOT NULL, \
     start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, text TEXT NOT NULL, embedding BLOB)",
    "CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (path)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(text, tokenize = 'unicode61')",
];

impl MemoryIndex {
    /// Opens (creating if needed) the index at `path` for `identity`. A new index records the
    /// identity; an index built with another one keeps working for keyword search, with vector
    /// search [`VectorState::Paused`].
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn open(
        path: &Path,
        identity: IndexIdentity,
        chunking: ChunkSettings,
    ) -> Result<Self, IndexError> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Delete)
            .synchronous(SqliteSynchronous::Normal);
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        for statement in SCHEMA {
            sqlx::query(*statement).execute(&pool).await?;
        }
        let stored: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'identity'")
                .fetch_optional(&pool)
                .await?;
        let current = identity.key();
        let state = match stored {
            None => {
                sqlx::query("INSERT INTO meta (key, value) VALUES ('identity', ?)")
                    .bind(&current)
                    .execute(&pool)
                    .await?;
                active_or_off(&identity)
            }
            Some(stored) if stored == current => active_or_off(&identity),
            Some(stored) => {
                tracing::warn!(built_with = %stored, configured = %current, "the memory index was built with another embedder or chunking; vector search is paused until `gatehouse memory reindex`");
                VectorState::Paused {
                    built_with: stored,
                    configured: current,
                }
            }
        };
        let index = Self {
            pool,
            path: path.to_path_buf(),
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

    /// Closes the file (before it is replaced by a rebuilt one).
    pub async fn close(&self) {
        self.pool.close().await;
    }

    /// Returns the state of the vector leg.
    pub fn vector_state(&self) -> &VectorState {
        &self.state
    }

    /// Returns the identity of the running configuration.
    pub fn identity(&self) -> &IndexIdentity {
        &self.identity
    }

    /// Returns the index file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn load_vectors(&self) -> Result<(), IndexError> {
        let rows =
            sqlx::query("SELECT id, path, embedding FROM chunks WHERE embedding IS NOT NULL")
                .fetch_all(&self.pool)
                .await?;
        let mut paths: HashMap<String, Arc<str>> = HashMap::new();
        let loaded: Vec<VectorRow> = rows
            .iter()
            .map(|row| {
                let path: String = row.get("path");
                let path = Arc::clone(
                    paths
                        .entry(path.clone())
                        .or_insert_with(|| Arc::from(path.as_str())),
                );
                VectorRow {
                    id: row.get("id"),
                    path,
                    vector: decode_vector(&row.get::<Vec<u8>, _>("embedding")).into(),
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
        let rows = sqlx::query("SELECT path, hash FROM files")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|row| (row.get("path"), row.get("hash")))
            .collect())
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
        let mut tx = self.pool.begin().await.map_err(IndexError::from)?;
        remove_chunks(&mut tx, path).await?;
        let mut inserted = Vec::with_capacity(chunks.len());
        for (position, chunk) in chunks.iter().enumerate() {
            let vector = vectors.as_ref().and_then(|vectors| vectors.get(position));
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO chunks (path, start_line, end_line, text, embedding) VALUES (?, ?, ?, ?, ?) RETURNING id",
            )
            .bind(path)
            .bind(chunk.start_line)
            .bind(chunk.end_line)
            .bind(&chunk.text)
            .bind(vector.map(|vector| encode_vector(vector)))
            .fetch_one(&mut *tx)
            .await
            .map_err(IndexError::from)?;
            sqlx::query("INSERT INTO chunks_fts (rowid, text) VALUES (?, ?)")
                .bind(id)
                .bind(&chunk.text)
                .execute(&mut *tx)
                .await
                .map_err(IndexError::from)?;
            if let Some(vector) = vector {
                inserted.push(VectorRow {
                    id,
                    path: Arc::from(path),
                    vector: vector.clone().into(),
                });
            }
        }
        sqlx::query("INSERT INTO files (path, hash) VALUES (?, ?) ON CONFLICT (path) DO UPDATE SET hash = excluded.hash")
            .bind(path)
            .bind(hash)
            .execute(&mut *tx)
            .await
            .map_err(IndexError::from)?;
        tx.commit().await.map_err(IndexError::from)?;
        let mut vectors_in_memory = self.vectors.write();
        vectors_in_memory.retain(|row| &*row.path != path);
        vectors_in_memory.extend(inserted);
        Ok(chunks.len())
    }

    /// Forgets `path`.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn remove_file(&self, path: &str) -> Result<(), IndexError> {
        let mut tx = self.pool.begin().await?;
        remove_chunks(&mut tx, path).await?;
        sqlx::query("DELETE FROM files WHERE path = ?")
            .bind(path)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
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
        let Some(expression) = fts_query(query) else {
            return Ok(Vec::new());
        };
        let rows = sqlx::query(
            "SELECT c.id, c.path, c.start_line, c.end_line, c.text, bm25(chunks_fts) AS rank \
             FROM chunks_fts JOIN chunks c ON c.id = chunks_fts.rowid \
             WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?",
        )
        .bind(expression)
        .bind(i64::try_from(limit).unwrap_or(i64::MAX))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|row| {
                let mut candidate = candidate_from_row(row);
                candidate.keyword = Some(crate::rank::bm25_score(row.get("rank")));
                candidate
            })
            .collect())
    }

    /// The vector leg: the `limit` chunks most similar to `query` (a normalised vector), as
    /// (chunk id, cosine similarity).
    pub fn vector_search(&self, query: &[f32], limit: usize) -> Vec<(i64, f64)> {
        self.vector_hits(query, limit)
            .into_iter()
            .map(|(id, score, _)| (id, score))
            .collect()
    }

    /// Like [`MemoryIndex::vector_search`], with each chunk's path.
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
        let mut found = Vec::with_capacity(ids.len());
        for group in ids.chunks(500) {
            let placeholders = vec!["?"; group.len()].join(",");
            let sql = format!(
                "SELECT id, path, start_line, end_line, text FROM chunks WHERE id IN ({placeholders})"
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for id in group {
                query = query.bind(id);
            }
            let rows = query.fetch_all(&self.pool).await?;
            found.extend(rows.iter().map(candidate_from_row));
        }
        Ok(found)
    }

    /// Returns the counts for `gatehouse memory status`.
    ///
    /// # Errors
    /// [`IndexError`].
    pub async fn stats(&self) -> Result<IndexStats, IndexError> {
        let files: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM files")
            .fetch_one(&self.pool)
            .await?;
        let chunks: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM chunks")
            .fetch_one(&self.pool)
            .await?;
        let vectors: i64 =
            sqlx::query_scalar("SELECT COUNT(*) FROM chunks WHERE embedding IS NOT NULL")
                .fetch_one(&self.pool)
                .await?;
        let identity: Option<String> =
            sqlx::query_scalar("SELECT value FROM meta WHERE key = 'identity'")
                .fetch_optional(&self.pool)
                .await?;
        Ok(IndexStats {
            files: files.unsigned_abs(),
            chunks: chunks.unsigned_abs(),
            vectors: vectors.unsigned_abs(),
            identity: identity.unwrap_or_default(),
        })
    }
}

fn active_or_off(identity: &IndexIdentity) -> VectorState {
    if identity.dimensions == 0 {
        VectorState::Off
    } else {
        VectorState::Active
    }
}

async fn remove_chunks(
    tx: &mut sqlx::Transaction<'_, sqlx::Sqlite>,
    path: &str,
) -> Result<(), IndexError> {
    sqlx::query("DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE path = ?)")
        .bind(path)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM chunks WHERE path = ?")
        .bind(path)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

fn candidate_from_row(row: &sqlx::sqlite::SqliteRow) -> Candidate {
    Candidate {
        id: row.get("id"),
        path: row.get("path"),
        start_line: row.get("start_line"),
        end_line: row.get("end_line"),
        text: row.get("text"),
        keyword: None,
        vector: None,
    }
}

/// The FTS5 query for `query`: every word (letters, digits, `_`) quoted, joined with AND.
pub fn fts_query(query: &str) -> Option<String> {
    let words: Vec<String> = query
        .split(|c: char| !c.is_alphanumeric() && c != '_')
        .filter(|word| !word.is_empty())
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
    fn vectors_round_trip_as_little_endian_f32() {
        let vector = vec![0.25, -1.5, 3.0];
        assert_eq!(decode_vector(&encode_vector(&vector)), vector);
    }
}
