//! [`StoreLocation`]: where the Gateway keeps its state, as the operator names it with a URL.
//!
//! - `sqlite://PATH`: one SQLite file (`sqlite:///abs/path` or `sqlite://relative/path`).
//! - `postgres://[USER@]HOST[:PORT]/DATABASE[?PARAMS]` (or `postgresql://`): a PostgreSQL
//!   database. The parameters are libpq's as sqlx reads them (`sslmode`, `application_name`, ...),
//!   plus `password-env=NAME`, which names the environment variable holding the password.
//!
//! A PostgreSQL URL never carries a password itself: URLs end up in argv, manifests and logs.
//! The password comes from `password-env=NAME`, else from `PGPASSWORD`, else from the password
//! file (`PGPASSFILE`, default `~/.pgpass`), as libpq does. A URL with a literal password is
//! refused, and the refusal shows the URL with the password redacted.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// The query parameter naming the environment variable that holds the password.
pub const PASSWORD_ENV_PARAM: &str = "password-env";

/// Where the Gateway store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// One SQLite file.
    Sqlite(PathBuf),
    /// A PostgreSQL database.
    Postgres(PostgresLocation),
}

/// A PostgreSQL database, named by a URL without a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresLocation {
    /// The URL without [`PASSWORD_ENV_PARAM`]; it holds no password.
    url: url::Url,
    /// The variable holding the password, from [`PASSWORD_ENV_PARAM`].
    password_env: Option<String>,
}

/// A store URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LocationError(String);

impl FromStr for StoreLocation {
    type Err = LocationError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        if let Some(path) = text.strip_prefix("sqlite://") {
            if path.is_empty() {
                return Err(LocationError(
                    "a sqlite:// store URL needs a file path, for example sqlite:///var/lib/gatehouse/gateway.db".into(),
                ));
            }
            return Ok(StoreLocation::Sqlite(PathBuf::from(path)));
        }
        if text.starts_with("postgres://") || text.starts_with("postgresql://") {
            return PostgresLocation::parse(text).map(StoreLocation::Postgres);
        }
        Err(LocationError(format!(
            "the store URL '{}' is neither sqlite://PATH nor postgres://HOST/DATABASE",
            redact(text)
        )))
    }
}

impl fmt::Display for StoreLocation {
    /// Shows the URL; it never holds a password, so it is safe to log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreLocation::Sqlite(path) => write!(f, "sqlite://{}", path.display()),
            StoreLocation::Postgres(location) => location.fmt(f),
        }
    }
}

/// The query parameters of a PostgreSQL store URL that are passed on to the driver; any other
/// key is refused, so a mistyped one (which the driver would log with its value) never passes.
const URL_PARAMS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "application_name",
    "options",
    "host",
    "port",
    "dbname",
    "user",
];

impl PostgresLocation {
    fn parse(text: &str) -> Result<Self, LocationError> {
        let url = url::Url::parse(text).map_err(|error| {
            LocationError(format!(
                "the store URL '{}' is not a valid URL: {error}",
                redact(text)
            ))
        })?;
        let literal_password =
            url.password().is_some() || url.query_pairs().any(|(key, _)| key == "password");
        if literal_password {
            return Err(LocationError(format!(
                "the store URL '{}' carries a password; put it in an environment variable named \
                 by ?{PASSWORD_ENV_PARAM}=NAME, in PGPASSWORD or in a password file (PGPASSFILE)",
                redact(text)
            )));
        }
        let mut password_env = None;
        let mut kept = Vec::new();
        for (key, value) in url.query_pairs() {
            if key == PASSWORD_ENV_PARAM {
                let valid = !value.is_empty()
                    && value.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    && !value.starts_with(|c: char| c.is_ascii_digit());
                if !valid {
                    return Err(LocationError(format!(
                        "{PASSWORD_ENV_PARAM}='{value}' is not an environment variable name"
                    )));
                }
                password_env = Some(value.into_owned());
            } else if URL_PARAMS.contains(&key.as_ref()) {
                kept.push((key.into_owned(), value.into_owned()));
            } else {
                // Neither the URL nor the key is echoed: a mistyped key (`Password=`,
                // `passwd=`) may hold a password.
                return Err(LocationError(format!(
                    "the store URL has a parameter this store does not take; it takes {} and \
                     {PASSWORD_ENV_PARAM}",
                    URL_PARAMS.join(", ")
                )));
            }
        }
        if url.fragment().is_some() {
            // `postgres://user:pa#ss@host/db` parses with `#ss@host/db` as a fragment, hiding a
            // password from the checks above.
            return Err(LocationError(String::from(
                "the store URL has a '#' fragment, which a PostgreSQL URL never has; if a \
                 password is in it, move it to an environment variable named by \
                 ?password-env=NAME",
            )));
        }
        let mut url = url;
        if kept.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(kept);
        }
        Ok(Self { url, password_env })
    }

    /// Returns the URL without the password reference, as sqlx parses it.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Returns the environment variable named by `password-env`, if any.
    pub fn password_env(&self) -> Option<&str> {
        self.password_env.as_deref()
    }

    /// Returns sqlx's connect options: the URL's, with the password read from the variable
    /// `password-env` names (sqlx itself falls back to `PGPASSWORD` and the password file).
    ///
    /// # Errors
    /// [`crate::StoreError::Unavailable`] when the URL is not one sqlx accepts, or the variable
    /// `password-env` names is not set.
    #[cfg(feature = "postgres")]
    pub fn connect_options(&self) -> crate::Result<sqlx::postgres::PgConnectOptions> {
        let unavailable = |message: String| crate::StoreError::Unavailable {
            source: Box::new(LocationError(message)),
        };
        let options = sqlx::postgres::PgConnectOptions::from_str(self.url.as_str())
            .map_err(|error| unavailable(format!("the store URL {self} is not usable: {error}")))?;
        let Some(name) = &self.password_env else {
            return Ok(options);
        };
        let password = std::env::var(name).map_err(|_| {
            unavailable(format!(
                "the store URL {self} names the password variable {name}, which is not set"
            ))
        })?;
        Ok(options.password(&password))
    }
}

impl fmt::Display for PostgresLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.url.as_str())?;
        if let Some(name) = &self.password_env {
            let separator = if self.url.query().is_some() { '&' } else { '?' };
            write!(f, "{separator}{PASSWORD_ENV_PARAM}={name}")?;
        }
        Ok(())
    }
}

/// Returns `text` with the password of a URL (in its user info or a `password` parameter)
/// replaced by `***`, for messages about a URL that is refused.
pub fn redact(text: &str) -> String {
    let Ok(mut url) = url::Url::parse(text) else {
        // Not a URL: keep what precedes a possible user info separator only.
        return match text.rsplit_once('@') {
            Some((_, host)) => format!("***@{host}"),
            None => text.to_owned(),
        };
    };
    if url.password().is_some() {
        // Cannot fail: a URL with a password has a host.
        let _ = url.set_password(Some("***"));
    }
    if url.query_pairs().any(|(key, _)| key == "password") {
        let pairs: Vec<(String, String)> = url
            .query_pairs()
            .map(|(key, value)| {
                let value = if key == "password" {
                    "***".to_owned()
                } else {
                    value.into_owned()
                };
                (key.into_owned(), value)
            })
            .collect();
        url.query_pairs_mut().clear().extend_pairs(pairs);
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test fails loudly on any unexpected error"
    )]

    use super::*;

    #[test]
    fn sqlite_urls_name_a_file() {
        assert_eq!(
            "sqlite:///srv/state/gateway.db".parse::<StoreLocation>(),
            Ok(StoreLocation::Sqlite(PathBuf::from(
                "/srv/state/gateway.db"
            )))
        );
        assert_eq!(
            "sqlite://state/gateway.db".parse::<StoreLocation>(),
            Ok(StoreLocation::Sqlite(PathBuf::from("state/gateway.db")))
        );
        assert!("sqlite://".parse::<StoreLocation>().is_err());
        assert!("mysql://db/x".parse::<StoreLocation>().is_err());
    }

    #[test]
    fn a_postgres_url_keeps_its_parameters_and_takes_the_password_reference_out() {
        let location: StoreLocation =
            "postgres://gatehouse@db.internal:5433/gh?sslmode=require&password-env=GH_PG_PASSWORD"
                .parse()
                .unwrap();
        let StoreLocation::Postgres(postgres) = &location else {
            panic!("not postgres: {location:?}");
        };
        assert_eq!(
            postgres.url(),
            "postgres://gatehouse@db.internal:5433/gh?sslmode=require"
        );
        assert_eq!(postgres.password_env(), Some("GH_PG_PASSWORD"));
        assert_eq!(
            location.to_string(),
            "postgres://gatehouse@db.internal:5433/gh?sslmode=require&password-env=GH_PG_PASSWORD"
        );
        let plain: StoreLocation = "postgresql://db/gh?password-env=PW".parse().unwrap();
        assert_eq!(plain.to_string(), "postgresql://db/gh?password-env=PW");
    }

    #[test]
    fn a_literal_password_is_refused_and_never_echoed() {
        for url in [
            "postgres://gatehouse:s3cret@db/gh",
            "postgres://gatehouse@db/gh?password=s3cret",
        ] {
            let error = url.parse::<StoreLocation>().unwrap_err().to_string();
            assert!(!error.contains("s3cret"), "{error}");
            assert!(error.contains("***"), "{error}");
            assert!(error.contains("PGPASSWORD"), "{error}");
        }
        let error = "postgres://db/gh?password-env=1BAD"
            .parse::<StoreLocation>()
            .unwrap_err();
        assert!(error.to_string().contains("1BAD"), "{error}");
        for url in [
            "postgres://gatehouse@db/gh?Password=s3cret",
            "postgres://gatehouse@db/gh?passwd=s3cret",
            "postgres://gatehouse:pa#s3cret@db/gh",
        ] {
            let error = url.parse::<StoreLocation>().unwrap_err().to_string();
            assert!(!error.contains("s3cret"), "{error}");
        }
        assert_eq!(
            redact("sqlite://u:s3cret@x"),
            "sqlite://u:***@x",
            "any URL's password is redacted"
        );
    }
}
