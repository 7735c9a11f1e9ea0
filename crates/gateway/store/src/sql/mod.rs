//! One store body for both SQL backends.
//!
//! [`SqlStore`] implements [`crate::Store`] and [`crate::ClusterStore`] once, for any
//! [`Backend`]; [`crate::sqlite`] and [`crate::postgres`] each supply a backend: how to connect
//! and migrate, how a write transaction begins, how a statement runs and a row is read, and how
//! an engine error maps to a [`StoreError`]. Statements are written once, in PostgreSQL's
//! spelling with `?` placeholders, and [`Dialect::translate`] adapts them (see there). Where the
//! engines truly differ in what a method must do (PostgreSQL's advisory locks and row locks for
//! many writers at once, its `LISTEN`/`NOTIFY`), the body asks [`Backend::DIALECT`] or a
//! backend method, in one place each.
//!
//! Why not generics over `sqlx::Database`: every statement would carry a dozen `Encode`/`Decode`
//! bounds per backend, which Rust does not imply from a trait. Why not `sqlx::Any`: it connects
//! only from URLs (losing PostgreSQL's TLS and password-file options and SQLite's pool hooks)
//! and has no `LISTEN`. Values cross this layer as [`Arg`] and are read back through
//! [`SqlRow`], a handful of types the schema uses (64-bit integers, text, booleans).

use std::borrow::Cow;
use std::fmt::Debug;

use async_trait::async_trait;

use crate::cluster::Announcement;
use crate::cluster::ClusterListener;
use crate::cluster::MediaHold;
use crate::cluster::NoHold;
use crate::error::Result;
use crate::error::StoreError;

mod body;
mod channels;
mod cluster;

/// What differs between the backends' SQL text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// SQLite: `?` placeholders, no casts, no row locks (a write transaction locks the file).
    Sqlite,
    /// PostgreSQL: `$1`, `$2`, … placeholders; NUL is replaced in text.
    Postgres,
}

/// The server clock in Unix milliseconds, as a statement writes it: [`Dialect::translate`]
/// expands it for each engine (PostgreSQL's `clock_timestamp()`, SQLite's `unixepoch`).
pub const NOW_MS: &str = "now_ms()";

/// What [`Dialect::translate`] removes for SQLite: PostgreSQL's casts, row locks and collation,
/// which SQLite either lacks or does not need (its one writer holds the whole file, and its
/// default collation already compares bytes).
const POSTGRES_ONLY: [&str; 8] = [
    "::jsonb",
    "::text",
    "::bigint",
    " FOR UPDATE SKIP LOCKED",
    " FOR UPDATE",
    " FOR SHARE",
    " FOR KEY SHARE",
    " COLLATE \"C\"",
];

impl Dialect {
    /// Returns `text`, written for PostgreSQL but with `?` placeholders, in this dialect:
    /// numbered placeholders for PostgreSQL; for SQLite, without [`POSTGRES_ONLY`] and with
    /// `GREATEST(` and `LEAST(` as `MAX(` and `MIN(`. [`NOW_MS`] becomes each engine's clock. A `?` inside a quoted
    /// literal is left alone.
    pub fn translate(self, text: &str) -> String {
        let text = match self {
            Dialect::Postgres => Cow::<str>::Owned(text.replace(
                NOW_MS,
                "(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            )),
            Dialect::Sqlite => {
                let mut owned = text.replace(NOW_MS, "CAST(unixepoch('subsec') * 1000 AS INTEGER)");
                for token in POSTGRES_ONLY {
                    owned = owned.replace(token, "");
                }
                Cow::Owned(owned.replace("GREATEST(", "MAX(").replace("LEAST(", "MIN("))
            }
        };
        match self {
            Dialect::Sqlite => text.into_owned(),
            Dialect::Postgres => {
                let mut numbered = String::with_capacity(text.len() + 16);
                let mut next = 0;
                let mut quoted = false;
                for character in text.chars() {
                    match character {
                        '\'' => {
                            quoted = !quoted;
                            numbered.push(character);
                        }
                        '?' if !quoted => {
                            next += 1;
                            numbered.push('$');
                            numbered.push_str(&next.to_string());
                        }
                        other => numbered.push(other),
                    }
                }
                numbered
            }
        }
    }

    /// Returns the statement of this dialect among two that cannot be written as one.
    pub fn pick(self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self {
            Dialect::Sqlite => sqlite,
            Dialect::Postgres => postgres,
        }
    }
}

/// A value bound to a statement.
#[derive(Debug, Clone)]
pub enum Arg {
    /// A 64-bit integer, or NULL.
    Int(Option<i64>),
    /// Text as given, or NULL (keys and ids, which the Gateway validates before they get here).
    Text(Option<String>),
    /// Text a client wrote, or NULL: PostgreSQL refuses NUL in text, so there NUL becomes
    /// U+FFFD ([`crate::scrub_nul`]).
    Scrubbed(Option<String>),
    /// JSON text for a JSON column; on PostgreSQL NUL in any string or key becomes U+FFFD.
    Json(String),
    /// A boolean.
    Bool(bool),
}

impl From<i64> for Arg {
    fn from(value: i64) -> Self {
        Arg::Int(Some(value))
    }
}

impl From<Option<i64>> for Arg {
    fn from(value: Option<i64>) -> Self {
        Arg::Int(value)
    }
}

impl From<&str> for Arg {
    fn from(value: &str) -> Self {
        Arg::Text(Some(value.to_owned()))
    }
}

impl From<&String> for Arg {
    fn from(value: &String) -> Self {
        Arg::Text(Some(value.clone()))
    }
}

impl From<String> for Arg {
    fn from(value: String) -> Self {
        Arg::Text(Some(value))
    }
}

impl From<Option<&str>> for Arg {
    fn from(value: Option<&str>) -> Self {
        Arg::Text(value.map(str::to_owned))
    }
}

impl From<&Option<String>> for Arg {
    fn from(value: &Option<String>) -> Self {
        Arg::Text(value.clone())
    }
}

impl From<bool> for Arg {
    fn from(value: bool) -> Self {
        Arg::Bool(value)
    }
}

impl Arg {
    /// Returns this value as PostgreSQL stores it: [`Arg::Scrubbed`] and [`Arg::Json`] without
    /// NUL.
    fn scrubbed(self) -> Self {
        match self {
            Arg::Scrubbed(value) => {
                Arg::Text(value.map(|text| crate::scrub_nul(&text).into_owned()))
            }
            Arg::Json(value) => Arg::Json(scrubbed_json(value)),
            other => other,
        }
    }
}

/// Returns `value` as stored in a PostgreSQL `jsonb` column, which refuses `\u0000` in
/// strings: NUL in any string or key becomes U+FFFD, as in [`crate::scrub_nul`].
fn scrubbed_json(encoded: String) -> String {
    fn clean(value: &serde_json::Value) -> serde_json::Value {
        match value {
            serde_json::Value::String(string) => {
                serde_json::Value::String(crate::scrub_nul(string).into_owned())
            }
            serde_json::Value::Array(items) => {
                serde_json::Value::Array(items.iter().map(clean).collect())
            }
            serde_json::Value::Object(map) => serde_json::Value::Object(
                map.iter()
                    .map(|(key, item)| (crate::scrub_nul(key).into_owned(), clean(item)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    if !encoded.contains("\\u0000") {
        return encoded;
    }
    match serde_json::from_str::<serde_json::Value>(&encoded) {
        Ok(value) => clean(&value).to_string(),
        Err(_) => encoded,
    }
}

/// A column of a row: by name, or by position (0 for a scalar query).
#[derive(Debug, Clone, Copy)]
pub enum Col<'a> {
    /// The column with this name.
    Name(&'a str),
    /// The column at this position.
    Index(usize),
}

/// A row a backend returned, read by type; a value of another type is an error.
pub trait SqlRow: Send + Sync + 'static {
    /// A 64-bit integer column, or NULL.
    fn int(&self, column: Col<'_>) -> std::result::Result<Option<i64>, sqlx::Error>;
    /// A text column, or NULL.
    fn text(&self, column: Col<'_>) -> std::result::Result<Option<String>, sqlx::Error>;
    /// A boolean column (an integer on SQLite), or NULL.
    fn boolean(&self, column: Col<'_>) -> std::result::Result<Option<bool>, sqlx::Error>;
}

impl<R> SqlRow for R
where
    R: sqlx::Row + 'static,
    usize: sqlx::ColumnIndex<R>,
    for<'c> &'c str: sqlx::ColumnIndex<R>,
    Option<i64>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<bool>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn int(&self, column: Col<'_>) -> std::result::Result<Option<i64>, sqlx::Error> {
        match column {
            Col::Name(name) => self.try_get(name),
            Col::Index(index) => self.try_get(index),
        }
    }

    fn text(&self, column: Col<'_>) -> std::result::Result<Option<String>, sqlx::Error> {
        match column {
            Col::Name(name) => self.try_get(name),
            Col::Index(index) => self.try_get(index),
        }
    }

    fn boolean(&self, column: Col<'_>) -> std::result::Result<Option<bool>, sqlx::Error> {
        match column {
            Col::Name(name) => self.try_get(name),
            Col::Index(index) => self.try_get(index),
        }
    }
}

/// The result of a statement on an engine.
pub type SqlResult<T> = std::result::Result<T, sqlx::Error>;

/// The row type of backend `B`.
pub type RowOf<B> = <<B as Backend>::Db as sqlx::Database>::Row;

/// A statement ready for an engine: its text in the engine's dialect, its arguments as the
/// engine stores them, and what it returns.
#[derive(Debug)]
pub struct Statement {
    /// The text.
    pub sql: String,
    /// The arguments, in placeholder order.
    pub args: Vec<Arg>,
    /// What it returns.
    pub fetch: Fetch,
}

/// Runs `statement` on `on`: the body of each backend's [`Backend::run`], written once over
/// sqlx's traits; `affected` reads the rows a statement changed from the engine's result (sqlx
/// has no trait for it).
///
/// # Errors
/// What the engine reports.
pub async fn run_on<B>(
    on: On<'_, B>,
    statement: Statement,
    affected: fn(&<B::Db as sqlx::Database>::QueryResult) -> u64,
) -> SqlResult<Ran<RowOf<B>>>
where
    B: Backend,
    <B::Db as sqlx::Database>::Arguments: sqlx::IntoArguments<B::Db>,
    for<'c> &'c mut <B::Db as sqlx::Database>::Connection: sqlx::Executor<'c, Database = B::Db>,
    Option<i64>: for<'q> sqlx::Encode<'q, B::Db> + sqlx::Type<B::Db>,
    Option<String>: for<'q> sqlx::Encode<'q, B::Db> + sqlx::Type<B::Db>,
    bool: for<'q> sqlx::Encode<'q, B::Db> + sqlx::Type<B::Db>,
{
    match on {
        On::Pool(db) => execute(db.pool(), statement, affected).await,
        On::Tx(tx) => execute(&mut *tx.inner, statement, affected).await,
    }
}

/// Binds the arguments of `statement` and runs it on `executor`.
async fn execute<'e, DB, E>(
    executor: E,
    statement: Statement,
    affected: fn(&DB::QueryResult) -> u64,
) -> SqlResult<Ran<DB::Row>>
where
    DB: sqlx::Database,
    E: sqlx::Executor<'e, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    Option<i64>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Option<String>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    bool: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    use sqlx::Arguments;
    let mut arguments = DB::Arguments::default();
    for arg in statement.args {
        match arg {
            Arg::Int(value) => arguments.add(value),
            Arg::Text(value) | Arg::Scrubbed(value) => arguments.add(value),
            Arg::Json(value) => arguments.add(Some(value)),
            Arg::Bool(value) => arguments.add(value),
        }
        .map_err(sqlx::Error::Encode)?;
    }
    let query = sqlx::query_with(sqlx::AssertSqlSafe(statement.sql), arguments);
    let (rows, changed) = match statement.fetch {
        Fetch::Affected => (Vec::new(), affected(&query.execute(executor).await?)),
        Fetch::Optional => (
            query.fetch_optional(executor).await?.into_iter().collect(),
            0,
        ),
        Fetch::One => (vec![query.fetch_one(executor).await?], 0),
        Fetch::All => (query.fetch_all(executor).await?, 0),
    };
    Ok(Ran {
        rows,
        affected: changed,
    })
}

/// A type a column is read as.
pub trait FromColumn: Sized {
    /// Reads `column` of `row`.
    fn read(row: &impl SqlRow, column: Col<'_>) -> std::result::Result<Self, sqlx::Error>;
}

/// The error of a NULL where the schema has none.
fn unexpected_null(column: Col<'_>) -> sqlx::Error {
    sqlx::Error::Decode(format!("unexpected NULL in column {column:?}").into())
}

macro_rules! from_column {
    ($type:ty, $method:ident) => {
        impl FromColumn for Option<$type> {
            fn read(row: &impl SqlRow, column: Col<'_>) -> std::result::Result<Self, sqlx::Error> {
                row.$method(column)
            }
        }

        impl FromColumn for $type {
            fn read(row: &impl SqlRow, column: Col<'_>) -> std::result::Result<Self, sqlx::Error> {
                row.$method(column)?.ok_or_else(|| unexpected_null(column))
            }
        }
    };
}

from_column!(i64, int);
from_column!(String, text);
from_column!(bool, boolean);

/// Reads `column` of `row` as `T`; a value of another type is [`StoreError::Internal`].
pub fn get<T: FromColumn>(row: &impl SqlRow, column: &'static str) -> Result<T> {
    T::read(row, Col::Name(column)).map_err(|error| StoreError::Internal {
        source: Box::new(error),
    })
}

/// Reads JSON text from `column` of `row` as `T`; text that does not parse is
/// [`StoreError::Corrupt`] of `what`.
pub fn get_json<T: serde::de::DeserializeOwned>(
    row: &impl SqlRow,
    column: &'static str,
    what: &'static str,
) -> Result<T> {
    let text: String = get(row, column)?;
    serde_json::from_str(&text).map_err(|_| StoreError::Corrupt { what })
}

/// What a statement returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    /// The number of rows it changed.
    Affected,
    /// Its first row, if any.
    Optional,
    /// Its first row; none is an error.
    One,
    /// Every row.
    All,
}

/// What a backend returns for a statement: the rows (none for [`Fetch::Affected`]) and the
/// number of rows changed.
#[derive(Debug)]
pub struct Ran<R> {
    /// The rows fetched.
    pub rows: Vec<R>,
    /// The rows changed, for [`Fetch::Affected`].
    pub affected: u64,
}

/// Where a statement runs: on the pool (its own implicit transaction), or inside one.
pub enum On<'a, B: Backend> {
    /// Any pooled connection.
    Pool(&'a B),
    /// The open transaction.
    Tx(&'a mut Tx<B>),
}

/// A backend: one SQL engine and its connections.
#[async_trait]
pub trait Backend: Clone + Debug + Send + Sync + 'static {
    /// The SQL text this engine reads.
    const DIALECT: Dialect;
    /// The sqlx engine; its rows are read as [`SqlRow`].
    type Db: sqlx::Database<Row: SqlRow>;

    /// The connection pool.
    fn pool(&self) -> &sqlx::Pool<Self::Db>;

    /// Begins a transaction that will write: on SQLite it takes the write lock at once
    /// (`BEGIN IMMEDIATE`), so it never fails halfway for a writer that committed meanwhile.
    async fn begin(&self) -> SqlResult<sqlx::Transaction<'static, Self::Db>>;

    /// Runs `statement` (already in this dialect, its arguments already as the engine stores
    /// them) on `on`; [`run_on`] is the body.
    async fn run(on: On<'_, Self>, statement: Statement) -> SqlResult<Ran<RowOf<Self>>>;

    /// Translates an engine error into the backend-neutral error; `what` names the record.
    fn map_error(error: sqlx::Error, what: &'static str) -> StoreError;

    /// The backend to renew leases on: PostgreSQL keeps a connection of its own for them, so a
    /// busy pool never makes a replica miss its renewal.
    fn for_leases(&self) -> Self {
        self.clone()
    }

    /// Sends `announcements` to the other replicas ([`crate::ClusterStore::announce`]); SQLite has one
    /// replica and no channel.
    async fn announce(&self, _announcements: &[Announcement]) -> Result<()> {
        Ok(())
    }

    /// [`crate::ClusterStore::hold_media_writes`]; where one process owns the store, its own lock
    /// suffices.
    async fn hold_media_writes(&self) -> Result<Box<dyn MediaHold>> {
        Ok(Box::new(NoHold))
    }

    /// [`crate::ClusterStore::try_hold_media_collection`].
    async fn try_hold_media_collection(&self) -> Result<Option<Box<dyn MediaHold>>> {
        Ok(Some(Box::new(NoHold)))
    }

    /// [`crate::ClusterStore::listen`]; `None` where there is no channel.
    async fn listen(&self) -> Result<Option<Box<dyn ClusterListener>>> {
        Ok(None)
    }
}

/// An open transaction of backend `B`; dropping it rolls back.
pub struct Tx<B: Backend> {
    inner: sqlx::Transaction<'static, B::Db>,
}

impl<B: Backend> Tx<B> {
    /// Commits; `what` names the record in an error.
    pub async fn commit(self, what: &'static str) -> Result<()> {
        self.inner
            .commit()
            .await
            .map_err(|error| B::map_error(error, what))
    }

    /// The engine's transaction.
    pub fn inner(&mut self) -> &mut sqlx::Transaction<'static, B::Db> {
        &mut self.inner
    }
}

/// Something a [`Query`] runs on: a backend (its pool) or an open transaction.
pub trait Exec: Send {
    /// The backend.
    type B: Backend;
    /// Where the statement runs.
    fn on(&mut self) -> On<'_, Self::B>;
}

impl<B: Backend> Exec for &B {
    type B = B;
    fn on(&mut self) -> On<'_, B> {
        On::Pool(self)
    }
}

impl<B: Backend> Exec for &mut Tx<B> {
    type B = B;
    fn on(&mut self) -> On<'_, B> {
        On::Tx(self)
    }
}

/// A statement and its arguments, in PostgreSQL's spelling with `?` placeholders.
#[must_use]
#[derive(Debug)]
pub struct Query {
    sql: Cow<'static, str>,
    args: Vec<Arg>,
}

/// Starts a statement.
pub fn query(sql: impl Into<Cow<'static, str>>) -> Query {
    Query {
        sql: sql.into(),
        args: Vec::new(),
    }
}

impl Query {
    /// Binds the next `?`.
    pub fn bind(mut self, value: impl Into<Arg>) -> Self {
        self.args.push(value.into());
        self
    }

    /// Binds text a client wrote ([`Arg::Scrubbed`]).
    pub fn text(mut self, value: &str) -> Self {
        self.args.push(Arg::Scrubbed(Some(value.to_owned())));
        self
    }

    /// Binds optional text a client wrote ([`Arg::Scrubbed`]).
    pub fn opt_text(mut self, value: Option<&str>) -> Self {
        self.args.push(Arg::Scrubbed(value.map(str::to_owned)));
        self
    }

    /// Binds JSON text for a JSON column ([`Arg::Json`]).
    pub fn json(mut self, encoded: String) -> Self {
        self.args.push(Arg::Json(encoded));
        self
    }

    async fn run<E: Exec>(
        self,
        mut on: E,
        fetch: Fetch,
        what: &'static str,
    ) -> Result<Ran<RowOf<E::B>>> {
        let dialect = <E::B as Backend>::DIALECT;
        let statement = Statement {
            sql: dialect.translate(&self.sql),
            args: match dialect {
                Dialect::Sqlite => self.args,
                Dialect::Postgres => self.args.into_iter().map(Arg::scrubbed).collect(),
            },
            fetch,
        };
        <E::B as Backend>::run(on.on(), statement)
            .await
            .map_err(|error| <E::B as Backend>::map_error(error, what))
    }

    /// Runs the statement and returns the number of rows it changed.
    pub async fn execute<E: Exec>(self, on: E, what: &'static str) -> Result<u64> {
        Ok(self.run(on, Fetch::Affected, what).await?.affected)
    }

    /// Runs the statement and returns its first row, if any.
    pub async fn optional<E: Exec>(self, on: E, what: &'static str) -> Result<Option<RowOf<E::B>>> {
        Ok(self.run(on, Fetch::Optional, what).await?.rows.pop())
    }

    /// Runs the statement and returns its first row; none is an error.
    pub async fn one<E: Exec>(self, on: E, what: &'static str) -> Result<RowOf<E::B>> {
        self.run(on, Fetch::One, what)
            .await?
            .rows
            .pop()
            .ok_or(StoreError::NotFound { what })
    }

    /// Runs the statement and returns every row.
    pub async fn all<E: Exec>(self, on: E, what: &'static str) -> Result<Vec<RowOf<E::B>>> {
        Ok(self.run(on, Fetch::All, what).await?.rows)
    }

    /// Runs the statement and returns the first column of its one row.
    pub async fn scalar<T: FromColumn, E: Exec>(self, on: E, what: &'static str) -> Result<T> {
        let row = self.one(on, what).await?;
        T::read(&row, Col::Index(0)).map_err(|error| <E::B as Backend>::map_error(error, what))
    }

    /// Runs the statement and returns the first column of its first row, if there is a row.
    pub async fn opt_scalar<T: FromColumn, E: Exec>(
        self,
        on: E,
        what: &'static str,
    ) -> Result<Option<T>> {
        match self.optional(on, what).await? {
            Some(row) => T::read(&row, Col::Index(0))
                .map(Some)
                .map_err(|error| <E::B as Backend>::map_error(error, what)),
            None => Ok(None),
        }
    }

    /// Runs the statement and returns the first column of every row.
    pub async fn column<T: FromColumn, E: Exec>(self, on: E, what: &'static str) -> Result<Vec<T>> {
        self.all(on, what)
            .await?
            .iter()
            .map(|row| {
                T::read(row, Col::Index(0))
                    .map_err(|error| <E::B as Backend>::map_error(error, what))
            })
            .collect()
    }
}

/// The Gateway store on a SQL backend.
#[derive(Debug, Clone)]
pub struct SqlStore<B: Backend> {
    pub(crate) db: B,
}

impl<B: Backend> SqlStore<B> {
    /// Begins a write transaction ([`Backend::begin`]).
    pub async fn begin(&self, what: &'static str) -> Result<Tx<B>> {
        let inner = self
            .db
            .begin()
            .await
            .map_err(|error| B::map_error(error, what))?;
        Ok(Tx { inner })
    }
}

#[cfg(test)]
mod tests {
    use super::Dialect;

    #[test]
    fn postgres_numbers_placeholders_outside_literals() {
        assert_eq!(
            Dialect::Postgres.translate("SELECT '?' , a FROM t WHERE b = ? AND c = ?::jsonb"),
            "SELECT '?' , a FROM t WHERE b = $1 AND c = $2::jsonb"
        );
    }

    #[test]
    fn sqlite_drops_what_only_postgres_reads() {
        assert_eq!(
            Dialect::Sqlite.translate(
                "SELECT x::text AS x FROM t WHERE k = ?::bigint ORDER BY k COLLATE \"C\" FOR UPDATE"
            ),
            "SELECT x AS x FROM t WHERE k = ? ORDER BY k"
        );
        assert_eq!(
            Dialect::Sqlite.translate("SELECT GREATEST(a, ?) WHERE e > now_ms()"),
            "SELECT MAX(a, ?) WHERE e > CAST(unixepoch('subsec') * 1000 AS INTEGER)"
        );
    }
}
