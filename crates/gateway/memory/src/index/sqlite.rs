//! The SQLite backend: the index in its own file, with FTS5 for the keyword leg.

use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::str::FromStr;

use sqlx::Row;
use sqlx::SqlitePool;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::sqlite::SqliteJournalMode;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::sqlite::SqliteSynchronous;

use super::IndexError;
use super::IndexStats;
use super::NewChunk;
use super::StoredChunk;
use super::StoredVector;
use super::decode_vector;
use super::fts_query;
use crate::rank::Candidate;

const SCHEMA: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS files (path TEXT PRIMARY KEY NOT NULL, hash TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS chunks (id INTEGER PRIMARY KEY, path TEXT NOT NULL, \
     start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, text TEXT NOT NULL, embedding BLOB)",
    "CREATE INDEX IF NOT EXISTS chunks_by_path ON chunks (path)",
    "CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5(text, tokenize = 'unicode61')",
];

/// The index in one SQLite file.
pub(super) struct SqliteBackend {
    pool: SqlitePool,
    path: PathBuf,
}

impl SqliteBackend {
    /// Opens (creating if needed) the file at `path`; returns it and the identity it was built
    /// with, recording `identity` in a new file.
    pub(super) async fn open(path: &Path, identity: &str) -> Result<(Self, String), IndexError> {
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
        let stored = match stored {
            Some(stored) => stored,
            None => {
                sqlx::query("INSERT INTO meta (key, value) VALUES ('identity', ?)")
                    .bind(identity)
                    .execute(&pool)
                    .await?;
                identity.to_owned()
            }
        };
        let backend = Self {
            pool,
            path: path.to_path_buf(),
        };
        Ok((backend, stored))
    }

    /// Opens a fresh file beside this one (`memory.db.rebuild`), for a rebuild.
    pub(super) async fn rebuild(&self, identity: &str) -> Result<Self, IndexError> {
        let path = self.path.with_extension("db.rebuild");
        let _ = std::fs::remove_file(&path);
        Ok(Self::open(&path, identity).await?.0)
    }

    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    pub(super) async fn close(&self) {
        self.pool.close().await;
    }

    pub(super) async fn vectors(&self) -> Result<Vec<StoredVector>, IndexError> {
        let rows =
            sqlx::query("SELECT id, path, embedding FROM chunks WHERE embedding IS NOT NULL")
                .fetch_all(&self.pool)
                .await?;
        Ok(rows
            .iter()
            .map(|row| StoredVector {
                id: row.get("id"),
                path: row.get("path"),
                embedding: row.get("embedding"),
            })
            .collect())
    }

    pub(super) async fn file_hashes(&self) -> Result<HashMap<String, String>, IndexError> {
        let rows = sqlx::query("SELECT path, hash FROM files")
            .fetch_all(&self.pool)
            .await?;
        Ok(rows
            .iter()
            .map(|row| (row.get("path"), row.get("hash")))
            .collect())
    }

    /// Replaces the chunks of `path` with `chunks` in one transaction; returns their ids.
    pub(super) async fn replace_file(
        &self,
        path: &str,
        hash: &str,
        chunks: &[NewChunk<'_>],
    ) -> Result<Vec<i64>, IndexError> {
        let mut tx = self.pool.begin().await?;
        remove_chunks(&mut tx, path).await?;
        let mut ids = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO chunks (path, start_line, end_line, text, embedding) VALUES (?, ?, ?, ?, ?) RETURNING id",
            )
            .bind(path)
            .bind(chunk.start_line)
            .bind(chunk.end_line)
            .bind(chunk.text)
            .bind(chunk.embedding.as_deref())
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query("INSERT INTO chunks_fts (rowid, text) VALUES (?, ?)")
                .bind(id)
                .bind(chunk.text)
                .execute(&mut *tx)
                .await?;
            ids.push(id);
        }
        sqlx::query("INSERT INTO files (path, hash) VALUES (?, ?) ON CONFLICT (path) DO UPDATE SET hash = excluded.hash")
            .bind(path)
            .bind(hash)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(ids)
    }

    pub(super) async fn remove_file(&self, path: &str) -> Result<(), IndexError> {
        let mut tx = self.pool.begin().await?;
        remove_chunks(&mut tx, path).await?;
        sqlx::query("DELETE FROM files WHERE path = ?")
            .bind(path)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    /// FTS5 matches every word and ranks with its own `bm25()`.
    pub(super) async fn keyword_search(
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

    pub(super) async fn chunks(&self, ids: &[i64]) -> Result<Vec<Candidate>, IndexError> {
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

    pub(super) async fn stored_chunks(&self) -> Result<Vec<(String, StoredChunk)>, IndexError> {
        let rows = sqlx::query(
            "SELECT path, start_line, end_line, text, embedding FROM chunks ORDER BY id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .iter()
            .map(|row| {
                let embedding: Option<Vec<u8>> = row.get("embedding");
                let chunk = StoredChunk {
                    start_line: row.get("start_line"),
                    end_line: row.get("end_line"),
                    text: row.get("text"),
                    embedding: embedding.as_deref().map(decode_vector),
                };
                (row.get("path"), chunk)
            })
            .collect())
    }

    pub(super) async fn stats(&self) -> Result<IndexStats, IndexError> {
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
