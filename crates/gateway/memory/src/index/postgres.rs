//! The PostgreSQL backend: the index in the schema `gatehouse_memory` of the Gateway store's
//! database.
//!
//! - Migrations: the memory crate's own (`migrations/postgres`), recorded in
//!   `gatehouse_memory._sqlx_migrations` and applied at open under sqlx's advisory lock, the
//!   same lock as the store's migrations, so Gateways starting at once migrate one after the
//!   other. They live here rather than among the store's because the index's schema changes
//!   with this crate, and the store knows nothing of memory.
//! - A generation is one complete build with one identity; `live` names the generation this
//!   backend reads and writes. A rebuild fills a new generation; switching `live` and deleting
//!   the old generation is one transaction.
//! - The keyword leg: `chunks.terms` holds the distinct [terms](crate::terms) of the chunk and a
//!   generated `tsvector` column (`array_to_tsvector(terms)`, GIN-indexed) matches a `tsquery`
//!   built from the query's terms, each quoted as a lexeme. No text search configuration is
//!   involved: the lexemes are the crate's own terms, so PostgreSQL's parser (which would keep
//!   `user@example.com` or `rotates-weekly` as one token) and the database's locale do not
//!   change what matches. The query is never parsed as `tsquery` syntax from the user's text.
//! - Scores: the matching chunks, the number of chunks and terms of the generation, and how
//!   many chunks hold each query term are read in one snapshot, and
//!   [`crate::rank::fts5_bm25`] ranks them as FTS5 does. Every chunk holding all the query's
//!   terms is read and scored here (FTS5 ranks inside the engine), so a query of only common
//!   words costs more than on SQLite.
//! - Text: PostgreSQL `text` cannot hold NUL, so NUL in a path or a chunk is stored as U+FFFD
//!   (both separate words, so the terms are the same).
//! - Words longer than 2,047 bytes (PostgreSQL's longest lexeme) are counted in the length but
//!   not indexed, and a query with one finds nothing.
//! - Errors: a lost connection, a refused one or a pool timeout is
//!   [`IndexError::Unavailable`]; the pool opens fresh connections on the next call.
//! - pgvector would slot in here: a `vector(N)` column and an HNSW index, with
//!   [`super::MemoryIndex::vector_hits`] asking this backend instead of scanning in memory.

use std::collections::HashMap;
use std::time::Duration;

use sqlx::Row;
use sqlx::postgres::PgConnectOptions;
use sqlx::postgres::PgPool;
use sqlx::postgres::PgPoolOptions;
use sqlx::postgres::PgRow;

use super::IndexError;
use super::IndexStats;
use super::NewChunk;
use super::StoredChunk;
use super::StoredVector;
use super::decode_vector;
use crate::rank::Bm25Corpus;
use crate::rank::Bm25Phrase;
use crate::rank::Candidate;

/// The bound on each statement of a keyword search, which runs one count per distinct word of
/// a query the model wrote and reads every chunk holding all of them.
const SEARCH_STATEMENT_TIMEOUT: &str = "SET LOCAL statement_timeout = '10s'";

/// The index's own pooled connections: a sync or a reindex never takes the store's.
const POOL_CONNECTIONS: u32 = 4;

/// How long a call waits for a connection before it fails with [`IndexError::Unavailable`].
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);

/// The longest lexeme PostgreSQL keeps, in bytes.
const MAX_LEXEME_BYTES: usize = 2047;

/// The key of the advisory lock that orders creating the first generation ("gh-memix").
const GENERATION_LOCK_KEY: i64 = 0x6768_2d6d_656d_6978;

/// The index in a PostgreSQL database, reading and writing one generation.
pub(super) struct PgBackend {
    pool: PgPool,
    generation: i64,
}

impl PgBackend {
    /// Connects, migrates and finds the live generation (creating it with `identity` in a new
    /// database); returns the backend and the identity the live generation was built with.
    /// Generations a crashed rebuild left behind are deleted.
    pub(super) async fn open(
        options: &PgConnectOptions,
        identity: &str,
    ) -> Result<(Self, String), IndexError> {
        let pool = PgPoolOptions::new()
            .max_connections(POOL_CONNECTIONS)
            .acquire_timeout(ACQUIRE_TIMEOUT)
            .test_before_acquire(true)
            .connect_with(options.clone())
            .await
            .map_err(pg_error)?;
        let mut migrator = sqlx::migrate!("./migrations/postgres");
        migrator.dangerous_set_table_name("gatehouse_memory._sqlx_migrations");
        migrator.create_schema("gatehouse_memory");
        migrator.set_locking(true);
        migrator.run(&pool).await.map_err(|error| match error {
            sqlx::migrate::MigrateError::Execute(error) => pg_error(error),
            other => IndexError::Storage(other.to_string()),
        })?;
        let mut tx = pool.begin().await.map_err(pg_error)?;
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(GENERATION_LOCK_KEY)
            .execute(&mut *tx)
            .await
            .map_err(pg_error)?;
        let live = sqlx::query(
            "SELECT l.generation, g.identity FROM gatehouse_memory.live l \
             JOIN gatehouse_memory.generations g USING (generation)",
        )
        .fetch_optional(&mut *tx)
        .await
        .map_err(pg_error)?;
        let (generation, stored) = match live {
            Some(row) => (get::<i64>(&row, "generation")?, get(&row, "identity")?),
            None => {
                let generation: i64 = sqlx::query_scalar(
                    "INSERT INTO gatehouse_memory.generations (identity) VALUES ($1) RETURNING generation",
                )
                .bind(identity)
                .fetch_one(&mut *tx)
                .await
                .map_err(pg_error)?;
                sqlx::query("INSERT INTO gatehouse_memory.live (generation) VALUES ($1)")
                    .bind(generation)
                    .execute(&mut *tx)
                    .await
                    .map_err(pg_error)?;
                (generation, identity.to_owned())
            }
        };
        sqlx::query("DELETE FROM gatehouse_memory.generations WHERE generation <> $1")
            .bind(generation)
            .execute(&mut *tx)
            .await
            .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        Ok((Self { pool, generation }, stored))
    }

    /// Starts a new generation with `identity`, not yet live, on the same pool.
    pub(super) async fn rebuild(&self, identity: &str) -> Result<Self, IndexError> {
        let generation: i64 = sqlx::query_scalar(
            "INSERT INTO gatehouse_memory.generations (identity) VALUES ($1) RETURNING generation",
        )
        .bind(identity)
        .fetch_one(&self.pool)
        .await
        .map_err(pg_error)?;
        Ok(Self {
            pool: self.pool.clone(),
            generation,
        })
    }

    /// Makes this generation the live one and deletes every other, in one transaction.
    pub(super) async fn make_live(&self) -> Result<(), IndexError> {
        let mut tx = self.pool.begin().await.map_err(pg_error)?;
        sqlx::query("UPDATE gatehouse_memory.live SET generation = $1")
            .bind(self.generation)
            .execute(&mut *tx)
            .await
            .map_err(pg_error)?;
        sqlx::query("DELETE FROM gatehouse_memory.generations WHERE generation <> $1")
            .bind(self.generation)
            .execute(&mut *tx)
            .await
            .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)
    }

    /// Deletes this generation unless it is the live one.
    pub(super) async fn drop_generation(&self) -> Result<(), IndexError> {
        sqlx::query(
            "DELETE FROM gatehouse_memory.generations WHERE generation = $1 \
             AND generation <> (SELECT generation FROM gatehouse_memory.live)",
        )
        .bind(self.generation)
        .execute(&self.pool)
        .await
        .map_err(pg_error)?;
        Ok(())
    }

    /// The generation this backend reads and writes.
    pub(super) fn generation(&self) -> i64 {
        self.generation
    }

    /// Closes the pool, which a rebuild shares: only when the Gateway stops.
    pub(super) async fn close(&self) {
        self.pool.close().await;
    }

    pub(super) async fn vectors(&self) -> Result<Vec<StoredVector>, IndexError> {
        let rows = sqlx::query(
            "SELECT id, path, embedding FROM gatehouse_memory.chunks \
             WHERE generation = $1 AND embedding IS NOT NULL",
        )
        .bind(self.generation)
        .fetch_all(&self.pool)
        .await
        .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                Ok(StoredVector {
                    id: get(row, "id")?,
                    path: get(row, "path")?,
                    embedding: get(row, "embedding")?,
                })
            })
            .collect()
    }

    pub(super) async fn file_hashes(&self) -> Result<HashMap<String, String>, IndexError> {
        let rows =
            sqlx::query("SELECT path, hash FROM gatehouse_memory.files WHERE generation = $1")
                .bind(self.generation)
                .fetch_all(&self.pool)
                .await
                .map_err(pg_error)?;
        rows.iter()
            .map(|row| Ok((get(row, "path")?, get(row, "hash")?)))
            .collect()
    }

    /// Replaces the chunks of `path` with `chunks` in one transaction; returns their ids.
    pub(super) async fn replace_file(
        &self,
        path: &str,
        hash: &str,
        chunks: &[NewChunk<'_>],
    ) -> Result<Vec<i64>, IndexError> {
        let path = text(path);
        let mut tx = self.pool.begin().await.map_err(pg_error)?;
        sqlx::query("DELETE FROM gatehouse_memory.chunks WHERE generation = $1 AND path = $2")
            .bind(self.generation)
            .bind(&*path)
            .execute(&mut *tx)
            .await
            .map_err(pg_error)?;
        let mut ids = Vec::with_capacity(chunks.len());
        for chunk in chunks {
            let terms = crate::terms::terms(chunk.text);
            let length = i64::try_from(terms.len()).unwrap_or(i64::MAX);
            let mut lexemes: Vec<String> = terms
                .into_iter()
                .filter(|term| term.len() <= MAX_LEXEME_BYTES)
                .collect();
            lexemes.sort_unstable();
            lexemes.dedup();
            let id: i64 = sqlx::query_scalar(
                "INSERT INTO gatehouse_memory.chunks \
                 (generation, path, start_line, end_line, text, terms, length, embedding) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
            )
            .bind(self.generation)
            .bind(&*path)
            .bind(i64::from(chunk.start_line))
            .bind(i64::from(chunk.end_line))
            .bind(&*text(chunk.text))
            .bind(&lexemes)
            .bind(length)
            .bind(chunk.embedding.as_deref())
            .fetch_one(&mut *tx)
            .await
            .map_err(pg_error)?;
            ids.push(id);
        }
        sqlx::query(
            "INSERT INTO gatehouse_memory.files (generation, path, hash) VALUES ($1, $2, $3) \
             ON CONFLICT (generation, path) DO UPDATE SET hash = excluded.hash",
        )
        .bind(self.generation)
        .bind(&*path)
        .bind(&*text(hash))
        .execute(&mut *tx)
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(ids)
    }

    pub(super) async fn remove_file(&self, path: &str) -> Result<(), IndexError> {
        let path = text(path);
        let mut tx = self.pool.begin().await.map_err(pg_error)?;
        for statement in [
            "DELETE FROM gatehouse_memory.chunks WHERE generation = $1 AND path = $2",
            "DELETE FROM gatehouse_memory.files WHERE generation = $1 AND path = $2",
        ] {
            sqlx::query(statement)
                .bind(self.generation)
                .bind(&*path)
                .execute(&mut *tx)
                .await
                .map_err(pg_error)?;
        }
        tx.commit().await.map_err(pg_error)
    }

    /// The chunks holding every term of `query`, ranked by FTS5's `bm25()` computed here.
    pub(super) async fn keyword_search(
        &self,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Candidate>, IndexError> {
        let terms = crate::terms::terms(query);
        if terms.is_empty() || terms.iter().any(|term| term.len() > MAX_LEXEME_BYTES) {
            return Ok(Vec::new());
        }
        let mut distinct: Vec<&str> = terms.iter().map(String::as_str).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let lexemes: Vec<String> = distinct.iter().map(|term| lexeme(term)).collect();
        let every = lexemes.join(" & ");
        // One snapshot: the counts and the matches agree even while a sync writes.
        let mut tx = self.pool.begin().await.map_err(pg_error)?;
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(pg_error)?;
        // The query comes from the model: however many common words it holds, it may not keep
        // the server busy for longer than this.
        sqlx::query(SEARCH_STATEMENT_TIMEOUT)
            .execute(&mut *tx)
            .await
            .map_err(pg_error)?;
        let totals = sqlx::query(
            "SELECT count(*) AS rows, coalesce(sum(length), 0)::BIGINT AS tokens \
             FROM gatehouse_memory.chunks WHERE generation = $1",
        )
        .bind(self.generation)
        .fetch_one(&mut *tx)
        .await
        .map_err(pg_error)?;
        let corpus = Bm25Corpus {
            rows: get::<i64>(&totals, "rows")?.unsigned_abs(),
            tokens: get::<i64>(&totals, "tokens")?.unsigned_abs(),
        };
        let counts = sqlx::query(
            "SELECT t.position, (SELECT count(*) FROM gatehouse_memory.chunks c \
             WHERE c.generation = $1 AND c.tsv @@ t.lexeme::tsquery) AS rows \
             FROM unnest($2::TEXT[]) WITH ORDINALITY AS t(lexeme, position)",
        )
        .bind(self.generation)
        .bind(&lexemes)
        .fetch_all(&mut *tx)
        .await
        .map_err(pg_error)?;
        let mut containing: HashMap<&str, u64> = HashMap::with_capacity(distinct.len());
        for row in &counts {
            let position = usize::try_from(get::<i64>(row, "position")?).unwrap_or(0);
            if let Some(term) = position
                .checked_sub(1)
                .and_then(|index| distinct.get(index))
            {
                containing.insert(term, get::<i64>(row, "rows")?.unsigned_abs());
            }
        }
        let rows = sqlx::query(
            "SELECT id, path, start_line, end_line, text FROM gatehouse_memory.chunks \
             WHERE generation = $1 AND tsv @@ $2::tsquery",
        )
        .bind(self.generation)
        .bind(&every)
        .fetch_all(&mut *tx)
        .await
        .map_err(pg_error)?;
        tx.commit().await.map_err(pg_error)?;
        let mut ranked = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut candidate = candidate_from_row(row)?;
            let chunk_terms = crate::terms::terms(&candidate.text);
            let mut frequency: HashMap<&str, u64> = HashMap::new();
            for term in &chunk_terms {
                *frequency.entry(term.as_str()).or_default() += 1;
            }
            let phrases: Vec<Bm25Phrase> = terms
                .iter()
                .map(|term| Bm25Phrase {
                    rows: containing.get(term.as_str()).copied().unwrap_or(0),
                    hits: frequency.get(term.as_str()).copied().unwrap_or(0),
                })
                .collect();
            let length = u64::try_from(chunk_terms.len()).unwrap_or(u64::MAX);
            let rank = crate::rank::fts5_bm25(corpus, length, &phrases);
            candidate.keyword = Some(crate::rank::bm25_score(rank));
            ranked.push((rank, candidate));
        }
        ranked.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.id.cmp(&b.1.id)));
        ranked.truncate(limit);
        Ok(ranked.into_iter().map(|(_, candidate)| candidate).collect())
    }

    pub(super) async fn chunks(&self, ids: &[i64]) -> Result<Vec<Candidate>, IndexError> {
        let rows = sqlx::query(
            "SELECT id, path, start_line, end_line, text FROM gatehouse_memory.chunks \
             WHERE generation = $1 AND id = ANY($2)",
        )
        .bind(self.generation)
        .bind(ids)
        .fetch_all(&self.pool)
        .await
        .map_err(pg_error)?;
        rows.iter().map(candidate_from_row).collect()
    }

    pub(super) async fn stored_chunks(&self) -> Result<Vec<(String, StoredChunk)>, IndexError> {
        let rows = sqlx::query(
            "SELECT path, start_line, end_line, text, embedding FROM gatehouse_memory.chunks \
             WHERE generation = $1 ORDER BY id",
        )
        .bind(self.generation)
        .fetch_all(&self.pool)
        .await
        .map_err(pg_error)?;
        rows.iter()
            .map(|row| {
                let embedding: Option<Vec<u8>> = get(row, "embedding")?;
                let chunk = StoredChunk {
                    start_line: line(row, "start_line")?,
                    end_line: line(row, "end_line")?,
                    text: get(row, "text")?,
                    embedding: embedding.as_deref().map(decode_vector),
                };
                Ok((get(row, "path")?, chunk))
            })
            .collect()
    }

    pub(super) async fn stats(&self) -> Result<IndexStats, IndexError> {
        let row = sqlx::query(
            "SELECT \
             (SELECT count(*) FROM gatehouse_memory.files WHERE generation = $1) AS files, \
             (SELECT count(*) FROM gatehouse_memory.chunks WHERE generation = $1) AS chunks, \
             (SELECT count(*) FROM gatehouse_memory.chunks WHERE generation = $1 \
              AND embedding IS NOT NULL) AS vectors, \
             (SELECT identity FROM gatehouse_memory.generations WHERE generation = $1) AS identity",
        )
        .bind(self.generation)
        .fetch_one(&self.pool)
        .await
        .map_err(pg_error)?;
        Ok(IndexStats {
            files: get::<i64>(&row, "files")?.unsigned_abs(),
            chunks: get::<i64>(&row, "chunks")?.unsigned_abs(),
            vectors: get::<i64>(&row, "vectors")?.unsigned_abs(),
            identity: get::<Option<String>>(&row, "identity")?.unwrap_or_default(),
        })
    }
}

/// `term` as a quoted `tsquery` lexeme. Terms hold only letters and numbers; quotes and
/// backslashes are escaped anyway, so no text can become `tsquery` syntax.
fn lexeme(term: &str) -> String {
    let mut quoted = String::with_capacity(term.len() + 2);
    quoted.push('\'');
    for c in term.chars() {
        match c {
            '\'' => quoted.push_str("''"),
            '\\' => quoted.push_str("\\\\"),
            other => quoted.push(other),
        }
    }
    quoted.push('\'');
    quoted
}

/// The text PostgreSQL stores for `value`: NUL, which `text` refuses, becomes U+FFFD.
fn text(value: &str) -> std::borrow::Cow<'_, str> {
    if value.contains('\0') {
        std::borrow::Cow::Owned(value.replace('\0', "\u{fffd}"))
    } else {
        std::borrow::Cow::Borrowed(value)
    }
}

fn candidate_from_row(row: &PgRow) -> Result<Candidate, IndexError> {
    Ok(Candidate {
        id: get(row, "id")?,
        path: get(row, "path")?,
        start_line: line(row, "start_line")?,
        end_line: line(row, "end_line")?,
        text: get(row, "text")?,
        keyword: None,
        vector: None,
    })
}

fn get<'r, T>(row: &'r PgRow, column: &str) -> Result<T, IndexError>
where
    T: sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres>,
{
    row.try_get(column).map_err(pg_error)
}

fn line(row: &PgRow, column: &str) -> Result<u32, IndexError> {
    u32::try_from(get::<i64>(row, column)?)
        .map_err(|_| IndexError::Storage(format!("the stored {column} is out of range")))
}

/// Translates a driver error: a connection that cannot be had or was lost is
/// [`IndexError::Unavailable`], as the store treats it.
fn pg_error(error: sqlx::Error) -> IndexError {
    match &error {
        sqlx::Error::Database(database) => match database.code().as_deref() {
            // disk_full
            Some("53100") => IndexError::DiskFull,
            // Class 08 (connection exception), too_many_connections, and the server shutting
            // down or starting up.
            Some(code)
                if code.starts_with("08")
                    || matches!(code, "53300" | "57P01" | "57P02" | "57P03") =>
            {
                IndexError::Unavailable(error.to_string())
            }
            _ => IndexError::Storage(error.to_string()),
        },
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => IndexError::Unavailable(error.to_string()),
        _ => IndexError::Storage(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexemes_are_quoted_and_escaped() {
        assert_eq!(lexeme("deploy"), "'deploy'");
        assert_eq!(lexeme("a'b\\c"), "'a''b\\\\c'");
    }
}
