//! The shares of API keys in the store, written once for both backends: the creators of
//! sessions and the media charged to each owner ([`crate::Store::claim_session_owner`],
//! [`crate::Store::charge_media`], [`crate::Store::release_upload`] and their readers).
//!
//! Each function runs its statements on a connection or transaction the backend hands it; only
//! the [`Dialect`] differs (placeholders, and PostgreSQL's refusal of NUL in text). The backend
//! keeps what is its own: how a transaction that must not interleave with another is begun
//! (`BEGIN IMMEDIATE` on SQLite, an advisory lock on PostgreSQL) and how errors map to
//! [`crate::StoreError`].

use std::borrow::Cow;
use std::collections::HashSet;

use sqlx::AssertSqlSafe;
use sqlx::ColumnIndex;
use sqlx::Database;
use sqlx::Decode;
use sqlx::Encode;
use sqlx::Executor;
use sqlx::IntoArguments;
use sqlx::Type;

use crate::model::CheckpointBlob;
use crate::model::MediaCharge;
use crate::model::MediaChargeKind;
use crate::model::ReleasedUpload;

/// What differs between the backends' SQL here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// SQLite: `?` placeholders; text may hold NUL.
    Sqlite,
    /// PostgreSQL: `$1`, `$2`, … placeholders; NUL is replaced in text.
    Postgres,
}

impl Dialect {
    /// Returns `text`, written with `?` placeholders, in this dialect.
    fn sql(self, text: &'static str) -> AssertSqlSafe<Cow<'static, str>> {
        match self {
            Dialect::Sqlite => AssertSqlSafe(Cow::Borrowed(text)),
            Dialect::Postgres => {
                let mut numbered = String::with_capacity(text.len() + 8);
                let mut next = 0;
                for character in text.chars() {
                    match character {
                        '?' => {
                            next += 1;
                            numbered.push_str(&format!("${next}"));
                        }
                        other => numbered.push(other),
                    }
                }
                AssertSqlSafe(Cow::Owned(numbered))
            }
        }
    }

    /// Returns `value` as this dialect stores text.
    fn text(self, value: &str) -> Cow<'_, str> {
        match self {
            Dialect::Sqlite => Cow::Borrowed(value),
            Dialect::Postgres => crate::scrub_nul(value),
        }
    }
}

/// The bytes charged to `owner`, every kind.
const CHARGED_BYTES: &str =
    "SELECT CAST(coalesce(sum(size_bytes), 0) AS BIGINT) FROM media_charges WHERE owner = ?";

/// Whether `owner` is charged for a blob of a kind.
const IS_CHARGED: &str =
    "SELECT media_id FROM media_charges WHERE owner = ? AND media_id = ? AND kind = ?";

/// One charge; a charge that exists is kept.
const INSERT_CHARGE: &str = "INSERT INTO media_charges (owner, media_id, kind, size_bytes, charged_at_ms) \
     VALUES (?, ?, ?, ?, ?) ON CONFLICT (owner, media_id, kind) DO NOTHING";

/// One owner's charge of a kind for a blob.
const DELETE_CHARGE: &str =
    "DELETE FROM media_charges WHERE owner = ? AND media_id = ? AND kind = ? RETURNING media_id";

/// Every charge of a kind for a blob.
const DELETE_CHARGES: &str =
    "DELETE FROM media_charges WHERE media_id = ? AND kind = ? RETURNING media_id";

/// The session creator's row; a recorded creator is kept.
const CLAIM_OWNER: &str = "INSERT INTO session_owners (session_key, owner, created_at_ms) \
     VALUES (?, ?, ?) ON CONFLICT (session_key) DO NOTHING";

/// The session's creator.
const SESSION_OWNER: &str = "SELECT owner FROM session_owners WHERE session_key = ?";

/// Returns the creator of `session_key`.
pub(crate) async fn session_owner<'c, DB, E>(
    executor: E,
    dialect: Dialect,
    session_key: &str,
) -> Result<Option<String>, sqlx::Error>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Cow<'q, str>: Encode<'q, DB> + Type<DB>,
    String: for<'r> Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    sqlx::query_scalar(dialect.sql(SESSION_OWNER))
        .bind(dialect.text(session_key))
        .fetch_optional(executor)
        .await
}

/// Records `owner` as the creator of `session_key` unless one is recorded.
pub(crate) async fn claim_session_owner<'c, DB, E>(
    executor: E,
    dialect: Dialect,
    session_key: &str,
    owner: &str,
    now_ms: i64,
) -> Result<(), sqlx::Error>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Cow<'q, str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
{
    sqlx::query(dialect.sql(CLAIM_OWNER))
        .bind(dialect.text(session_key))
        .bind(dialect.text(owner))
        .bind(now_ms)
        .execute(executor)
        .await
        .map(|_| ())
}

/// Returns the bytes charged to `owner`.
pub(crate) async fn charged_bytes<'c, DB, E>(
    executor: E,
    dialect: Dialect,
    owner: &str,
) -> Result<u64, sqlx::Error>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Cow<'q, str>: Encode<'q, DB> + Type<DB>,
    i64: for<'r> Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let used: i64 = sqlx::query_scalar(dialect.sql(CHARGED_BYTES))
        .bind(dialect.text(owner))
        .fetch_one(executor)
        .await?;
    Ok(u64::try_from(used).unwrap_or(0))
}

/// Removes `owner`'s charge of `kind` for `media_id`, or, for `owner` `None`, every charge of
/// `kind` for it; returns how many went.
pub(crate) async fn uncharge<'c, DB, E>(
    executor: E,
    dialect: Dialect,
    owner: Option<&str>,
    kind: MediaChargeKind,
    media_id: &str,
) -> Result<u64, sqlx::Error>
where
    DB: Database,
    E: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Cow<'q, str>: Encode<'q, DB> + Type<DB>,
    String: for<'r> Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let kind = Cow::Borrowed(kind.as_str());
    let media_id = dialect.text(media_id);
    let removed: Vec<String> = match owner {
        Some(owner) => {
            sqlx::query_scalar(dialect.sql(DELETE_CHARGE))
                .bind(dialect.text(owner))
                .bind(media_id)
                .bind(kind)
                .fetch_all(executor)
                .await?
        }
        None => {
            sqlx::query_scalar(dialect.sql(DELETE_CHARGES))
                .bind(media_id)
                .bind(kind)
                .fetch_all(executor)
                .await?
        }
    };
    Ok(removed.len() as u64)
}

/// Charges `owner` for the `blobs` of `kind` it is not charged for yet, in `connection`'s open
/// transaction (which the backend began so that no other charge of `owner` interleaves):
/// nothing is charged when the owner's bytes would pass `quota_bytes`.
pub(crate) async fn charge<DB>(
    connection: &mut DB::Connection,
    dialect: Dialect,
    owner: &str,
    kind: MediaChargeKind,
    blobs: &[CheckpointBlob],
    quota_bytes: Option<u64>,
    now_ms: i64,
) -> Result<MediaCharge, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Cow<'q, str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    i64: for<'r> Decode<'r, DB>,
    String: for<'r> Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let used_bytes = charged_bytes(&mut *connection, dialect, owner).await?;
    let mut seen = HashSet::new();
    let mut fresh = Vec::new();
    for blob in blobs {
        if !seen.insert(blob.media_id.as_str()) {
            continue;
        }
        let charged: Option<String> = sqlx::query_scalar(dialect.sql(IS_CHARGED))
            .bind(dialect.text(owner))
            .bind(dialect.text(&blob.media_id))
            .bind(Cow::Borrowed(kind.as_str()))
            .fetch_optional(&mut *connection)
            .await?;
        if charged.is_none() {
            fresh.push(blob);
        }
    }
    let new_bytes: u64 = fresh.iter().map(|blob| blob.size_bytes).sum();
    if new_bytes > 0
        && quota_bytes.is_some_and(|quota| used_bytes.saturating_add(new_bytes) > quota)
    {
        return Ok(MediaCharge::OverQuota {
            used_bytes,
            new_bytes,
        });
    }
    for blob in fresh {
        sqlx::query(dialect.sql(INSERT_CHARGE))
            .bind(dialect.text(owner))
            .bind(dialect.text(&blob.media_id))
            .bind(Cow::Borrowed(kind.as_str()))
            .bind(i64::try_from(blob.size_bytes).unwrap_or(i64::MAX))
            .bind(now_ms)
            .execute(&mut *connection)
            .await?;
    }
    Ok(MediaCharge::Charged {
        new_bytes,
        used_bytes: used_bytes.saturating_add(new_bytes),
    })
}

/// Releases an upload of `media_id` in `connection`'s open transaction, as
/// [`crate::Store::release_upload`] says: `owner`'s upload charge and its grant (every upload
/// charge for `None`); once no upload charge is left, the pin goes and the blob is listed as
/// collectable.
pub(crate) async fn release_upload<DB>(
    connection: &mut DB::Connection,
    dialect: Dialect,
    owner: Option<&str>,
    media_id: &str,
    now_ms: i64,
) -> Result<ReleasedUpload, sqlx::Error>
where
    DB: Database,
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'q> Cow<'q, str>: Encode<'q, DB> + Type<DB>,
    for<'q> i64: Encode<'q, DB> + Type<DB>,
    i64: for<'r> Decode<'r, DB>,
    Option<i64>: for<'r> Decode<'r, DB> + Type<DB>,
    String: for<'r> Decode<'r, DB> + Type<DB>,
    usize: ColumnIndex<DB::Row>,
{
    let upload = Cow::Borrowed(MediaChargeKind::Upload.as_str());
    let size: Option<i64> = sqlx::query_scalar(
        dialect.sql("SELECT max(size_bytes) FROM media_charges WHERE media_id = ? AND kind = ?"),
    )
    .bind(dialect.text(media_id))
    .bind(upload.clone())
    .fetch_one(&mut *connection)
    .await?;
    if let Some(owner) = owner {
        sqlx::query(dialect.sql("DELETE FROM media_grants WHERE media_id = ? AND grantee = ?"))
            .bind(dialect.text(media_id))
            .bind(dialect.text(owner))
            .execute(&mut *connection)
            .await?;
    }
    let removed = uncharge(
        &mut *connection,
        dialect,
        owner,
        MediaChargeKind::Upload,
        media_id,
    )
    .await?;
    let left: i64 = sqlx::query_scalar(
        dialect.sql("SELECT count(*) FROM media_charges WHERE media_id = ? AND kind = ?"),
    )
    .bind(dialect.text(media_id))
    .bind(upload)
    .fetch_one(&mut *connection)
    .await?;
    let unpinned = removed > 0 && left == 0;
    if unpinned {
        sqlx::query(dialect.sql("DELETE FROM media_pins WHERE media_id = ?"))
            .bind(dialect.text(media_id))
            .execute(&mut *connection)
            .await?;
        sqlx::query(dialect.sql(
            "INSERT INTO checkpoint_blobs (media_id, size_bytes, registered_at_ms) \
             VALUES (?, ?, ?) ON CONFLICT (media_id) DO NOTHING",
        ))
        .bind(dialect.text(media_id))
        .bind(size.unwrap_or(0))
        .bind(now_ms)
        .execute(&mut *connection)
        .await?;
    }
    Ok(ReleasedUpload {
        released: removed > 0,
        unpinned,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn postgres_placeholders_are_numbered_in_order() {
        assert_eq!(
            Dialect::Postgres.sql(INSERT_CHARGE).0,
            "INSERT INTO media_charges (owner, media_id, kind, size_bytes, charged_at_ms) \
             VALUES ($1, $2, $3, $4, $5) ON CONFLICT (owner, media_id, kind) DO NOTHING"
        );
        assert_eq!(Dialect::Sqlite.sql(INSERT_CHARGE).0, INSERT_CHARGE);
    }
}
