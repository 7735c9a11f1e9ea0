//! Copying a Gateway store to another one, table by table, and verifying the copy.
//!
//! Rows are read from the source in a stable order (SQLite `rowid`, the PostgreSQL order
//! columns of the catalogue) in batches; each batch is inserted into the target in one
//! transaction that also records how far the copy of that table got, in the target's
//! [`PROGRESS_TABLE`]. A run that is killed therefore leaves every table copied up to the last
//! committed batch and its marker saying so, and the next run with the same source continues
//! after it: nothing is copied twice and nothing is skipped. Inserts leave an existing row with
//! the same key alone, so even a marker that lagged its rows would not duplicate one.
//!
//! A target that holds Gateway state no run of this copy wrote is refused unless the caller
//! asks to replace it ([`MigrateOptions::replace_target`]), which deletes it first. After the
//! copy every table is counted and hashed on both sides ([`crate::rowhash`]).
//!
//! The source is opened read-only. Nothing detects a Gateway still writing to it; one that does
//! makes the verification fail, since the source then no longer matches what was copied.

use std::time::Duration;

use gatehouse_store::location::StoreLocation;

use crate::db::Cell;
use crate::db::Db;
use crate::db::Statement;
use crate::error::Result;
use crate::error::StateError;
use crate::rowhash::TableHasher;
use crate::rowhash::canonical_json;
use crate::rowhash::scrub_nul;
use crate::tables::Kind;
use crate::tables::TABLES;
use crate::tables::Table;

/// The target's table of per-table copy markers: which source it copies, how far each table
/// got, and which are done.
pub const PROGRESS_TABLE: &str = "gatehouse_state_migration";

/// The rows copied per transaction unless told otherwise.
pub const DEFAULT_BATCH_ROWS: u32 = 500;

/// How a copy runs.
#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// Delete whatever Gateway state the target holds before copying, instead of refusing.
    pub replace_target: bool,
    /// Rows per batch (one target transaction each).
    pub batch_rows: u32,
    /// A pause after each batch (tests use it to interrupt a copy mid-way).
    pub pause_after_batch: Option<Duration>,
}

impl Default for MigrateOptions {
    fn default() -> Self {
        Self {
            replace_target: false,
            batch_rows: DEFAULT_BATCH_ROWS,
            pause_after_batch: None,
        }
    }
}

/// What the copy is doing, for a progress display.
#[derive(Debug, Clone, Copy)]
pub enum Progress<'a> {
    /// Rows of `table` copied so far (in this and earlier runs), of `total`.
    Rows {
        /// The table.
        table: &'a str,
        /// Rows in the target so far.
        copied: u64,
        /// Rows in the source.
        total: u64,
    },
    /// `table` is copied.
    TableDone {
        /// The table.
        table: &'a str,
        /// Rows in the source.
        total: u64,
    },
    /// The copy is being verified.
    Verifying,
    /// Blobs handled so far, of `total`.
    Blobs {
        /// Blobs copied or found present so far.
        done: u64,
        /// Blobs in the source.
        total: u64,
    },
}

/// The outcome of a copy, as `--json` prints it.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MigrationReport {
    /// The source URL.
    pub source: String,
    /// The target URL.
    pub target: String,
    /// Whether this run continued an interrupted one.
    pub resumed: bool,
    /// Whether the target's earlier state was deleted first.
    pub replaced: bool,
    /// Every table, in copy order.
    pub tables: Vec<TableReport>,
    /// The media copy, when one was asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub media: Option<crate::media::MediaReport>,
    /// Whether every table (and the media) matched after the copy.
    pub verified: bool,
}

/// One table of a [`MigrationReport`].
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TableReport {
    /// The table.
    pub table: String,
    /// Rows in the source.
    pub source_rows: u64,
    /// Rows in the target after the copy.
    pub target_rows: u64,
    /// Rows this run inserted.
    pub copied_rows: u64,
    /// The content hash of the source's rows.
    pub source_hash: String,
    /// The content hash of the target's rows.
    pub target_hash: String,
    /// Whether counts and hashes are equal.
    pub verified: bool,
}

/// One table's marker in [`PROGRESS_TABLE`].
#[derive(Debug, Clone)]
struct Marker {
    table: String,
    source: String,
    cursor: Option<Vec<Cell>>,
    done: bool,
}

/// Copies the Gateway store at `from` to `to` and verifies the copy (see the module docs).
/// `progress` is called as the copy advances.
///
/// # Errors
/// [`StateError::TargetNotEmpty`] or [`StateError::OtherSource`] before anything is written;
/// [`StateError::SchemaMismatch`] when the two stores are at different schema versions; the
/// stores' errors otherwise. A verification that fails is not an error: the report says which
/// tables differ.
pub async fn migrate(
    from: &StoreLocation,
    to: &StoreLocation,
    options: &MigrateOptions,
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> Result<MigrationReport> {
    let source_id = source_identity(from);
    if source_id == source_identity(to) || same_file(from, to) {
        return Err(StateError::SameStore {
            store: from.to_string(),
        });
    }
    let source = Db::open_read_only(from).await?;
    let source_versions = source.schema_versions().await?;
    let Some(&source_version) = source_versions.last() else {
        return Err(StateError::NotAStore {
            store: from.to_string(),
        });
    };
    let target = Db::open_writable(to).await?;
    let target_version = target.schema_versions().await?.last().copied().unwrap_or(0);
    if source_version != target_version {
        return Err(StateError::SchemaMismatch {
            source_version,
            target_version,
        });
    }
    if !target.has_table(PROGRESS_TABLE).await? {
        target
            .execute_in_transaction(&[Statement::plain(format!(
                "CREATE TABLE IF NOT EXISTS {PROGRESS_TABLE} (table_name TEXT PRIMARY KEY NOT NULL, \
                 source TEXT NOT NULL, cursor_json TEXT, done BIGINT NOT NULL)"
            ))])
            .await?;
    }
    let mut markers = read_markers(&target).await?;
    let mut replaced = false;
    if options.replace_target {
        empty(&target).await?;
        markers.clear();
        replaced = true;
    } else if let Some(other) = markers.iter().find(|marker| marker.source != source_id) {
        return Err(StateError::OtherSource {
            previous: other.source.clone(),
            requested: source_id,
        });
    } else if markers.is_empty() {
        for table in TABLES {
            let rows = target.count(table.name).await?;
            if rows > 0 {
                return Err(StateError::TargetNotEmpty {
                    table: table.name,
                    rows,
                });
            }
        }
    }
    let resumed = !markers.is_empty();

    let mut copied_rows = Vec::with_capacity(TABLES.len());
    for table in TABLES {
        let marker = markers.iter().find(|marker| marker.table == table.name);
        let copied = copy_table(
            &source, &target, table, marker, &source_id, options, progress,
        )
        .await?;
        copied_rows.push(copied);
    }
    advance_identities(&target).await?;

    progress(Progress::Verifying);
    let mut tables = Vec::with_capacity(TABLES.len());
    for (table, copied) in TABLES.iter().zip(copied_rows) {
        let (source_rows, source_hash) = table_hash(&source, table).await?;
        let (target_rows, target_hash) = table_hash(&target, table).await?;
        tables.push(TableReport {
            table: table.name.to_owned(),
            source_rows,
            target_rows,
            copied_rows: copied,
            verified: source_rows == target_rows && source_hash == target_hash,
            source_hash,
            target_hash,
        });
    }
    source.close().await;
    target.close().await;
    Ok(MigrationReport {
        source: from.to_string(),
        target: to.to_string(),
        resumed,
        replaced,
        verified: tables.iter().all(|table| table.verified),
        tables,
        media: None,
    })
}

/// A store as the markers name it: a SQLite file by its canonical path, so a rerun that spells
/// the path differently still continues and a target that is the source under another spelling
/// is refused.
fn source_identity(from: &StoreLocation) -> String {
    match from {
        StoreLocation::Local(path) => match std::fs::canonicalize(path) {
            Ok(path) => format!("sqlite://{}", path.display()),
            Err(_) => from.to_string(),
        },
        StoreLocation::Remote(_) => from.to_string(),
    }
}

/// Returns whether `from` and `to` are SQLite paths of one file (a hard link or a bind mount
/// of it has another canonical path): device and inode decide. `--replace-target` would
/// otherwise empty the very file it reads.
fn same_file(from: &StoreLocation, to: &StoreLocation) -> bool {
    use std::os::unix::fs::MetadataExt;

    let (StoreLocation::Local(from), StoreLocation::Local(to)) = (from, to) else {
        return false;
    };
    match (std::fs::metadata(from), std::fs::metadata(to)) {
        (Ok(from), Ok(to)) => (from.dev(), from.ino()) == (to.dev(), to.ino()),
        _ => false,
    }
}

/// Copies the rows of `table` the target lacks, after its marker's cursor, and returns how many
/// this run inserted.
async fn copy_table(
    source: &Db,
    target: &Db,
    table: &'static Table,
    marker: Option<&Marker>,
    source_id: &str,
    options: &MigrateOptions,
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> Result<u64> {
    let total = source.count(table.name).await?;
    if marker.is_some_and(|marker| marker.done) {
        progress(Progress::TableDone {
            table: table.name,
            total,
        });
        return Ok(0);
    }
    let mut cursor = marker.and_then(|marker| marker.cursor.clone());
    let mut inserted = 0;
    let mut copied = target.count(table.name).await?;
    progress(Progress::Rows {
        table: table.name,
        copied,
        total,
    });
    let insert = target.insert_sql(table);
    loop {
        let page = source
            .page(table, cursor.as_deref(), options.batch_rows.max(1))
            .await?;
        let last_page = page.rows.len() < options.batch_rows.max(1) as usize;
        let mut statements = Vec::with_capacity(page.rows.len() + 1);
        for row in &page.rows {
            statements.push(Statement {
                sql: insert.clone(),
                params: target_values(target, table, row)?,
            });
        }
        if page.last.is_some() {
            cursor = page.last;
        }
        statements.push(marker_statement(
            target,
            table,
            source_id,
            cursor.as_deref(),
            last_page,
        ));
        target.execute_in_transaction(&statements).await?;
        inserted += page.rows.len() as u64;
        copied += page.rows.len() as u64;
        if last_page {
            break;
        }
        progress(Progress::Rows {
            table: table.name,
            copied,
            total,
        });
        if let Some(pause) = options.pause_after_batch {
            tokio::time::sleep(pause).await;
        }
    }
    progress(Progress::TableDone {
        table: table.name,
        total,
    });
    Ok(inserted)
}

/// The parameters that insert `row` into `target`: PostgreSQL refuses NUL in text and `jsonb`,
/// so there text has it replaced by U+FFFD (as the PostgreSQL backend stores it) and JSON is
/// given in canonical form.
fn target_values(target: &Db, table: &'static Table, row: &[Cell]) -> Result<Vec<(Cell, Kind)>> {
    row.iter()
        .zip(table.columns)
        .map(|(cell, column)| {
            let value = match (target, cell, column.kind) {
                (Db::Postgres(_), Cell::Text(text), Kind::Json) => {
                    Cell::Text(canonical_json(text).map_err(|error| StateError::Corrupt {
                        table: table.name,
                        column: column.name,
                        reason: error.to_string(),
                    })?)
                }
                (Db::Postgres(_), Cell::Text(text), _) => Cell::Text(scrub_nul(text).into_owned()),
                _ => cell.clone(),
            };
            Ok((value, column.kind))
        })
        .collect()
}

/// The statement that records `table`'s progress.
fn marker_statement(
    target: &Db,
    table: &Table,
    source_id: &str,
    cursor: Option<&[Cell]>,
    done: bool,
) -> Statement {
    let marks = match target {
        Db::Sqlite(_) => "?, ?, ?, ?",
        Db::Postgres(_) => "$1, $2, $3, $4",
    };
    let cursor_json = cursor
        .and_then(|cursor| serde_json::to_string(cursor).ok())
        .map_or(Cell::Null, Cell::Text);
    Statement {
        sql: format!(
            "INSERT INTO {PROGRESS_TABLE} (table_name, source, cursor_json, done) VALUES ({marks}) \
             ON CONFLICT (table_name) DO UPDATE SET source = excluded.source, \
             cursor_json = excluded.cursor_json, done = excluded.done"
        ),
        params: vec![
            (Cell::Text(table.name.to_owned()), Kind::Text),
            (Cell::Text(source_id.to_owned()), Kind::Text),
            (cursor_json, Kind::Text),
            (Cell::Int(i64::from(done)), Kind::Int),
        ],
    }
}

async fn read_markers(target: &Db) -> Result<Vec<Marker>> {
    let rows = target
        .fetch_cells(
            &format!("SELECT table_name, source, cursor_json, done FROM {PROGRESS_TABLE}"),
            &[Kind::Text, Kind::Text, Kind::Text, Kind::Int],
        )
        .await?;
    Ok(rows
        .into_iter()
        .filter_map(|row| match row.as_slice() {
            [
                Cell::Text(table),
                Cell::Text(source),
                cursor,
                Cell::Int(done),
            ] => Some(Marker {
                table: table.clone(),
                source: source.clone(),
                cursor: match cursor {
                    Cell::Text(json) => serde_json::from_str(json).ok(),
                    _ => None,
                },
                done: *done != 0,
            }),
            _ => None,
        })
        .collect())
}

/// Deletes every Gateway table's rows and every marker, children first, in one transaction.
async fn empty(target: &Db) -> Result<()> {
    let mut statements: Vec<Statement> = TABLES
        .iter()
        .rev()
        .map(|table| Statement::plain(format!("DELETE FROM {}", table.name)))
        .collect();
    statements.push(Statement::plain(format!("DELETE FROM {PROGRESS_TABLE}")));
    target.execute_in_transaction(&statements).await
}

/// Moves each copied PostgreSQL identity past the largest copied value. SQLite's
/// `AUTOINCREMENT` counter follows explicit inserts by itself.
async fn advance_identities(target: &Db) -> Result<()> {
    let Db::Postgres(_) = target else {
        return Ok(());
    };
    let statements: Vec<Statement> = TABLES
        .iter()
        .filter_map(|table| {
            table.identity.map(|column| {
                Statement::plain(format!(
                    "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
                     COALESCE((SELECT MAX({column}) FROM {table}), 0) + 1, false)",
                    table = table.name
                ))
            })
        })
        .collect();
    target.execute_in_transaction(&statements).await
}

/// Returns the row count and content hash of `table` in `db`.
///
/// # Errors
/// The store's errors; [`StateError::Corrupt`] for a value that is not JSON.
pub async fn table_hash(db: &Db, table: &'static Table) -> Result<(u64, String)> {
    let mut hasher = TableHasher::new(table);
    let mut cursor: Option<Vec<Cell>> = None;
    loop {
        let page = db
            .page(table, cursor.as_deref(), DEFAULT_BATCH_ROWS * 4)
            .await?;
        for row in &page.rows {
            hasher.add(row)?;
        }
        match page.last {
            Some(last) => cursor = Some(last),
            None => break,
        }
    }
    Ok((hasher.rows(), hasher.finish()))
}
