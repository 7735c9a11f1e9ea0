//! Helpers the test suites of several crates share, and nothing else uses: a fresh database
//! on the test PostgreSQL server and a fresh bucket on the test S3 API server, the two
//! services `scripts/test` starts on loopback for a run.
//!
//! Every helper panics when its server is not configured, naming the variable and what to do:
//! a test that needs a server fails loudly rather than passing by being skipped.

#![forbid(unsafe_code)]
// A helper of the test kit fails the test that called it, with a message, as a test would.
#![allow(clippy::expect_used, clippy::panic)]

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use sqlx::Connection;

/// The variable naming the PostgreSQL server of the tests, as a URL whose role may create
/// databases.
pub const POSTGRES_URL_ENV: &str = "GATEHOUSE_TEST_POSTGRES_URL";

/// The variable naming the S3 API server of the tests (`http://127.0.0.1:PORT`).
pub const S3_ENDPOINT_ENV: &str = "GATEHOUSE_TEST_S3_ENDPOINT";

/// Returns the test PostgreSQL server's URL.
///
/// # Panics
/// When [`POSTGRES_URL_ENV`] is not set, with what to do about it.
pub fn postgres_server_url() -> String {
    std::env::var(POSTGRES_URL_ENV).unwrap_or_else(|_| {
        panic!(
            "{POSTGRES_URL_ENV} is not set: this test needs a PostgreSQL server. Run \
             scripts/test, which starts a throwaway one, or set {POSTGRES_URL_ENV} to \
             postgres://USER@127.0.0.1:PORT/postgres for a server where USER may create databases"
        )
    })
}

/// Returns the test S3 API server's endpoint.
///
/// # Panics
/// When [`S3_ENDPOINT_ENV`] is not set, with what to do about it.
pub fn s3_endpoint() -> url::Url {
    let endpoint = std::env::var(S3_ENDPOINT_ENV).unwrap_or_else(|_| {
        panic!(
            "{S3_ENDPOINT_ENV} is not set: this test needs an S3 API server. Run scripts/test, \
             which starts moto_server, or start one and set {S3_ENDPOINT_ENV}=http://127.0.0.1:PORT"
        )
    });
    url::Url::parse(&endpoint)
        .unwrap_or_else(|error| panic!("{S3_ENDPOINT_ENV}='{endpoint}' is not a URL: {error}"))
}

/// Returns a name no other test of this run uses: `PREFIX_PID_N_NANOS`, with `separator`
/// between the parts (`_` for a database, `-` for a bucket).
pub fn unique_name(prefix: &str, separator: char) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.subsec_nanos())
        .unwrap_or(0);
    format!(
        "{prefix}{separator}{}{separator}{}{separator}{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates an empty database named after `tag` (lower-case letters, digits and `_`) on the
/// test server and returns its URL.
///
/// # Panics
/// When the server is not configured, cannot be reached or refuses.
pub async fn fresh_postgres_database(tag: &str) -> url::Url {
    assert!(
        tag.bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_'),
        "a database tag is lower-case letters, digits and _: {tag:?}"
    );
    let server = postgres_server_url();
    let name = unique_name(&format!("gh_{tag}"), '_');
    let mut admin = sqlx::PgConnection::connect(&server)
        .await
        .unwrap_or_else(|error| panic!("cannot reach the test PostgreSQL at {server}: {error}"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .unwrap_or_else(|error| panic!("cannot create the test database {name}: {error}"));
    let _ = admin.close().await;
    let mut url = url::Url::parse(&server)
        .unwrap_or_else(|error| panic!("{POSTGRES_URL_ENV} is not a URL: {error}"));
    url.set_path(&name);
    url
}

/// Creates an empty bucket named after `tag` (lower-case letters, digits and `-`) on the test
/// S3 API server and returns its name.
///
/// # Panics
/// When the server is not configured, cannot be reached or refuses.
pub async fn fresh_bucket(tag: &str) -> String {
    assert!(
        tag.bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-'),
        "a bucket tag is lower-case letters, digits and -: {tag:?}"
    );
    let bucket = unique_name(&format!("gh-{tag}"), '-');
    create_bucket(&s3_endpoint(), &bucket).await;
    bucket
}

/// Creates `bucket` on the S3 API server at `endpoint` (the test server, or a test's own).
///
/// # Panics
/// When the server cannot be reached or refuses.
pub async fn create_bucket(endpoint: &url::Url, bucket: &str) {
    let response = reqwest::Client::new()
        .put(endpoint.join(bucket).expect("a bucket URL"))
        .send()
        .await
        .unwrap_or_else(|error| panic!("cannot reach the S3 API server at {endpoint}: {error}"));
    assert!(
        response.status().is_success(),
        "creating the bucket {bucket}: {}",
        response.status()
    );
}

/// Instantiates each named contract test once per store backend: a module `sqlite` whose tests
/// call `super::NAME(super::support::Target::sqlite())`, and a module `postgres` whose tests
/// call it with `super::support::Target::postgres().await`. The calling test crate has a
/// `support` module with that `Target`, and tokio; `threads` is the runtime's worker count.
#[macro_export]
macro_rules! on_both_backends {
    (threads = $threads:literal; $($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $name() {
                    super::$name(super::support::Target::sqlite()).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $name() {
                    super::$name(super::support::Target::postgres().await).await;
                }
            )*
        }
    };
}
