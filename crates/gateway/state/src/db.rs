//! [`Db`]: one connection pool to a Gateway store on either backend, with the few generic
//! operations the copier and the checks need (pages of rows in a stable order, inserts, counts).
//!
//! Table and column names in the SQL built here come only from [`crate::tables::TABLES`], never
//! from input.

use std::path::Path;

use gatehouse_store::location::StoreLocation;
use sqlx::AssertSqlSafe;
use sqlx::Row;
use sqlx::postgres::PgPool;
use sqlx::postgres::PgPoolOptions;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::sqlite::SqlitePool;
use sqlx::sqlite::SqlitePoolOptions;

use crate::error::Result;
use crate::error::StateError;
use crate::tables::Kind;
use crate::tables::Table;

/// One value of a row.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
pub enum Cell {
    /// SQL `NULL`.
    Null,
    /// An integer.
    Int(i64),
    /// Text (and JSON text).
    Text(String),
}

/// A row read from a table: the values of its order columns (the paging cursor) and of its
/// catalogued columns.
#[derive(Debug, Clone)]
pub struct Page {
    /// The rows, in the source's order.
    pub rows: Vec<Vec<Cell>>,
    /// The order columns' values of the last row, to read the next page after.
    pub last: Option<Vec<Cell>>,
}

/// One SQL statement with its parameters and their kinds, for
/// [`Db::execute_in_transaction`].
#[derive(Debug, Clone)]
pub struct Statement {
    /// The SQL text.
    pub sql: String,
    /// The parameters, in order.
    pub params: Vec<(Cell, Kind)>,
}

impl Statement {
    /// A statement without parameters.
    pub fn plain(sql: impl Into<String>) -> Self {
        Self {
            sql: sql.into(),
            params: Vec::new(),
        }
    }
}

/// A pool to a Gateway store.
#[derive(Debug, Clone)]
pub enum Db {
    /// A SQLite file.
    Sqlite(SqlitePool),
    /// A PostgreSQL database.
    Postgres(PgPool),
}

/// Binds one [`Cell`] to a query of either backend.
macro_rules! bind_cell {
    ($query:expr, $cell:expr, $kind:expr) => {
        match ($cell, $kind) {
            (Cell::Null, Kind::Int) => $query.bind(None::<i64>),
            (Cell::Null, Kind::Text | Kind::Json) => $query.bind(None::<String>),
            (Cell::Int(value), _) => $query.bind(*value),
            (Cell::Text(value), _) => $query.bind(value.clone()),
        }
    };
}

/// Reads a row of either backend as [`Cell`]s of `kinds`.
macro_rules! read_row {
    ($row:expr, $kinds:expr) => {
        $kinds
            .iter()
            .enumerate()
            .map(|(index, kind)| match kind {
                Kind::Int => $row
                    .try_get::<Option<i64>, _>(index)
                    .map(|value| value.map_or(Cell::Null, Cell::Int)),
                Kind::Text | Kind::Json => $row
                    .try_get::<Option<String>, _>(index)
                    .map(|value| value.map_or(Cell::Null, Cell::Text)),
            })
            .collect::<std::result::Result<Vec<Cell>, sqlx::Error>>()
    };
}

/// The migrations table both backends keep (sqlx's).
const MIGRATIONS_TABLE: &str = "_sqlx_migrations";

impl Db {
    /// Opens `location` for reading only: a SQLite file is opened read-only (it must exist), a
    /// PostgreSQL session has `default_transaction_read_only` on, so nothing here can write to
    /// it. Nothing is migrated.
    ///
    /// # Errors
    /// [`StateError::Open`] when it cannot be opened.
    pub async fn open_read_only(location: &StoreLocation) -> Result<Self> {
        let open = |error: String| StateError::Open {
            store: location.to_string(),
            reason: error,
        };
        match location {
            StoreLocation::Local(path) => {
                if !path.is_file() {
                    return Err(open(String::from("there is no such file")));
                }
                let options = SqliteConnectOptions::new()
                    .filename(path)
                    .read_only(true)
                    .create_if_missing(false);
                let pool = SqlitePoolOptions::new()
                    .max_connections(2)
                    .connect_with(options)
                    .await
                    .map_err(|error| open(error.to_string()))?;
                Ok(Db::Sqlite(pool))
            }
            StoreLocation::Remote(database) => {
                let options = database
                    .connect_options()
                    .map_err(|error| open(error.to_string()))?
                    .options([("default_transaction_read_only", "on")]);
                let pool = PgPoolOptions::new()
                    .max_connections(2)
                    .connect_with(options)
                    .await
                    .map_err(|error| open(error.to_string()))?;
                Ok(Db::Postgres(pool))
            }
        }
    }

    /// Opens `location` for writing, creating it (SQLite) and applying the store's migrations
    /// as the Gateway does at start.
    ///
    /// # Errors
    /// [`StateError::Open`] when it cannot be opened or migrated.
    pub async fn open_writable(location: &StoreLocation) -> Result<Self> {
        let open = |error: String| StateError::Open {
            store: location.to_string(),
            reason: error,
        };
        match location {
            StoreLocation::Local(path) => {
                create_parent(path).map_err(|error| open(error.to_string()))?;
                let store = gatehouse_store::sqlite::SqliteStore::open(path)
                    .await
                    .map_err(|error| open(error.to_string()))?;
                Ok(Db::Sqlite(store.pool().clone()))
            }
            StoreLocation::Remote(database) => {
                let store = gatehouse_store::postgres::PgStore::open(database)
                    .await
                    .map_err(|error| open(error.to_string()))?;
                Ok(Db::Postgres(store.pool().clone()))
            }
        }
    }

    /// Returns the backend's name, for messages.
    pub fn backend(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    /// Returns the versions of the store's applied migrations, in order (empty for a file that
    /// is not a Gateway store).
    ///
    /// # Errors
    /// [`StateError::Sql`] when they cannot be read.
    pub async fn schema_versions(&self) -> Result<Vec<i64>> {
        if !self.has_table(MIGRATIONS_TABLE).await? {
            return Ok(Vec::new());
        }
        let sql = format!("SELECT version FROM {MIGRATIONS_TABLE} WHERE success ORDER BY version");
        let rows = self.fetch_cells(&sql, &[Kind::Int]).await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| match row.first() {
                Some(Cell::Int(version)) => Some(*version),
                _ => None,
            })
            .collect())
    }

    /// Returns whether the store has a table called `name`.
    ///
    /// # Errors
    /// [`StateError::Sql`] when the catalogue cannot be read.
    pub async fn has_table(&self, name: &str) -> Result<bool> {
        Ok(self.table_names().await?.iter().any(|table| table == name))
    }

    /// Returns the names of the store's tables.
    ///
    /// # Errors
    /// [`StateError::Sql`] when the catalogue cannot be read.
    pub async fn table_names(&self) -> Result<Vec<String>> {
        let sql = match self {
            Db::Sqlite(_) => "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name",
            Db::Postgres(_) => {
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = current_schema() ORDER BY table_name"
            }
        };
        let rows = self.fetch_cells(sql, &[Kind::Text]).await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| match row.into_iter().next() {
                Some(Cell::Text(name)) => Some(name),
                _ => None,
            })
            .collect())
    }

    /// Returns the names of the columns of `table`, in their order.
    ///
    /// # Errors
    /// [`StateError::Sql`] when the catalogue cannot be read.
    pub async fn column_names(&self, table: &str) -> Result<Vec<String>> {
        // Only catalogue names reach this (tests and checks); quoting keeps it literal anyway.
        let quoted = table.replace('\'', "''");
        let sql = match self {
            Db::Sqlite(_) => format!("SELECT name FROM pragma_table_info('{quoted}') ORDER BY cid"),
            Db::Postgres(_) => format!(
                "SELECT column_name::text FROM information_schema.columns \
                 WHERE table_schema = current_schema() AND table_name = '{quoted}' \
                 ORDER BY ordinal_position"
            ),
        };
        let rows = self.fetch_cells(&sql, &[Kind::Text]).await?;
        Ok(rows
            .into_iter()
            .filter_map(|row| match row.into_iter().next() {
                Some(Cell::Text(name)) => Some(name),
                _ => None,
            })
            .collect())
    }

    /// Returns the number of rows of `table`.
    ///
    /// # Errors
    /// [`StateError::Sql`] when it cannot be counted.
    pub async fn count(&self, table: &str) -> Result<u64> {
        let sql = format!("SELECT COUNT(*) FROM {table}");
        let rows = self.fetch_cells(&sql, &[Kind::Int]).await?;
        match rows.first().and_then(|row| row.first()) {
            Some(Cell::Int(count)) => Ok(u64::try_from(*count).unwrap_or_default()),
            _ => Ok(0),
        }
    }

    /// Returns up to `limit` rows of `table` after the row whose order columns hold `after`
    /// (from the start when `None`), in the backend's stable order: `rowid` on SQLite, the
    /// table's [`Table::postgres_order`] columns on PostgreSQL.
    ///
    /// # Errors
    /// [`StateError::Sql`] when they cannot be read.
    pub async fn page(&self, table: &Table, after: Option<&[Cell]>, limit: u32) -> Result<Page> {
        let order = self.order_columns(table);
        let mut kinds: Vec<Kind> = order.iter().map(|(_, kind)| *kind).collect();
        kinds.extend(table.columns.iter().map(|column| column.kind));
        let mut selected: Vec<String> = order.iter().map(|(name, _)| (*name).to_owned()).collect();
        selected.extend(
            table
                .columns
                .iter()
                .map(|column| self.read_expr(column.name, column.kind)),
        );
        let order_list = order
            .iter()
            .map(|(name, _)| *name)
            .collect::<Vec<_>>()
            .join(", ");
        let filter = match after {
            None => String::new(),
            Some(_) => {
                let marks = (1..=order.len())
                    .map(|index| self.placeholder(index))
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("WHERE ({order_list}) > ({marks})")
            }
        };
        let sql = format!(
            "SELECT {} FROM {} {filter} ORDER BY {order_list} LIMIT {limit}",
            selected.join(", "),
            table.name
        );
        let params: Vec<(Cell, Kind)> = after
            .unwrap_or_default()
            .iter()
            .cloned()
            .zip(order.iter().map(|(_, kind)| *kind))
            .collect();
        let mut rows = self.fetch_bound(&sql, &params, &kinds).await?;
        let last = rows.last().map(|row| row[..order.len()].to_vec());
        for row in &mut rows {
            row.drain(..order.len());
        }
        Ok(Page { rows, last })
    }

    /// The columns this backend reads `table` in order of, with their kinds.
    fn order_columns(&self, table: &Table) -> Vec<(&'static str, Kind)> {
        match self {
            Db::Sqlite(_) => vec![("rowid", Kind::Int)],
            Db::Postgres(_) => table
                .postgres_order
                .iter()
                .map(|name| {
                    let kind = table
                        .columns
                        .iter()
                        .find(|column| column.name == *name)
                        .map_or(Kind::Int, |column| column.kind);
                    (*name, kind)
                })
                .collect(),
        }
    }

    /// The expression that reads `column` as this module's [`Cell`]s expect it: JSON as text.
    pub(crate) fn read_expr(&self, column: &str, kind: Kind) -> String {
        match (self, kind) {
            (Db::Postgres(_), Kind::Json) => format!("{column}::text"),
            _ => column.to_owned(),
        }
    }

    /// The `index`th (1-based) bind placeholder.
    fn placeholder(&self, index: usize) -> String {
        match self {
            Db::Sqlite(_) => String::from("?"),
            Db::Postgres(_) => format!("${index}"),
        }
    }

    /// The statement that inserts one row of `table`, leaving an existing row with the same key
    /// as it is.
    pub(crate) fn insert_sql(&self, table: &Table) -> String {
        let names = table
            .columns
            .iter()
            .map(|column| column.name)
            .collect::<Vec<_>>()
            .join(", ");
        let values = table
            .columns
            .iter()
            .enumerate()
            .map(|(index, column)| match (self, column.kind) {
                (Db::Postgres(_), Kind::Json) => format!("${}::jsonb", index + 1),
                _ => self.placeholder(index + 1),
            })
            .collect::<Vec<_>>()
            .join(", ");
        let overriding = match (self, table.identity) {
            (Db::Postgres(_), Some(_)) => " OVERRIDING SYSTEM VALUE",
            _ => "",
        };
        format!(
            "INSERT INTO {} ({names}){overriding} VALUES ({values}) ON CONFLICT DO NOTHING",
            table.name
        )
    }

    /// Runs `sql` (no parameters) and returns its rows read as `kinds`.
    ///
    /// # Errors
    /// [`StateError::Sql`] when it fails.
    pub async fn fetch_cells(&self, sql: &str, kinds: &[Kind]) -> Result<Vec<Vec<Cell>>> {
        self.fetch_bound(sql, &[], kinds).await
    }

    async fn fetch_bound(
        &self,
        sql: &str,
        params: &[(Cell, Kind)],
        kinds: &[Kind],
    ) -> Result<Vec<Vec<Cell>>> {
        let failed = |error: sqlx::Error| StateError::Sql {
            backend: self.backend(),
            source: error,
        };
        match self {
            Db::Sqlite(pool) => {
                let mut query = sqlx::query(AssertSqlSafe(sql.to_owned()));
                for (param, kind) in params {
                    query = bind_cell!(query, param, kind);
                }
                let rows = query.fetch_all(pool).await.map_err(failed)?;
                rows.iter()
                    .map(|row| read_row!(row, kinds))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(failed)
            }
            Db::Postgres(pool) => {
                let mut query = sqlx::query(AssertSqlSafe(sql.to_owned()));
                for (param, kind) in params {
                    query = bind_cell!(query, param, kind);
                }
                let rows = query.fetch_all(pool).await.map_err(failed)?;
                rows.iter()
                    .map(|row| read_row!(row, kinds))
                    .collect::<std::result::Result<_, _>>()
                    .map_err(failed)
            }
        }
    }

    /// Runs `statements` (each a SQL text and its parameters) in one transaction.
    ///
    /// # Errors
    /// [`StateError::Sql`] when one fails; nothing of the transaction is kept then.
    pub async fn execute_in_transaction(&self, statements: &[Statement]) -> Result<()> {
        let failed = |error: sqlx::Error| StateError::Sql {
            backend: self.backend(),
            source: error,
        };
        match self {
            Db::Sqlite(pool) => {
                let mut tx = pool.begin_with("BEGIN IMMEDIATE").await.map_err(failed)?;
                for statement in statements {
                    let mut query = sqlx::query(AssertSqlSafe(statement.sql.clone()));
                    for (param, kind) in &statement.params {
                        query = bind_cell!(query, param, kind);
                    }
                    query.execute(&mut *tx).await.map_err(failed)?;
                }
                tx.commit().await.map_err(failed)
            }
            Db::Postgres(pool) => {
                let mut tx = pool.begin().await.map_err(failed)?;
                for statement in statements {
                    let mut query = sqlx::query(AssertSqlSafe(statement.sql.clone()));
                    for (param, kind) in &statement.params {
                        query = bind_cell!(query, param, kind);
                    }
                    query.execute(&mut *tx).await.map_err(failed)?;
                }
                tx.commit().await.map_err(failed)
            }
        }
    }

    /// Closes the pool, waiting for its connections to close.
    pub async fn close(&self) {
        match self {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pool) => pool.close().await,
        }
    }
}

/// Creates the directory a new SQLite file goes in.
fn create_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => std::fs::create_dir_all(parent),
        _ => Ok(()),
    }
}
