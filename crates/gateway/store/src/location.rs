//! [`StoreLocation`]: where the Gateway keeps its state, as the operator names it with a URL.
//!
//! - `sqlite://PATH`: one SQLite file (`sqlite:///abs/path` or `sqlite://relative/path`).
//! - `postgres://[USER@]HOST[:PORT]/DATABASE[?PARAMS]` (or `postgresql://`): a PostgreSQL
//!   database. The parameters are libpq's as sqlx reads them (`sslmode`, `application_name`, ...),
//!   plus `password-env=NAME`, which names the environment variable holding the password, and
//!   `passfile=PATH`, libpq's parameter naming a password file.
//!
//! A PostgreSQL URL never carries a password itself: URLs end up in argv, manifests and logs.
//! The password comes from `password-env=NAME`, else from the file `passfile=PATH` names, else
//! from `PGPASSWORD`, else from the password file `PGPASSFILE` names (default `~/.pgpass`), as
//! libpq does. A URL with a literal password is refused, and the refusal shows the URL with the
//! password redacted.
//!
//! A password file has libpq's format: one `host:port:database:user:password` line per entry,
//! `*` matching anything, `\:` and `\\` escaping, `#` starting a comment; the first matching
//! line wins. Unlike libpq, which ignores a file that others may read, a `passfile=` file that
//! is not a regular file private to its owner (mode 0600 or stricter; 0640 when root owns it,
//! as libpq allows) is refused with an error saying so.

use std::fmt;
use std::path::PathBuf;
#[cfg(feature = "postgres")]
use std::str::FromStr;

use gatehouse_location::Location;
use gatehouse_location::Remote;

/// The query parameter naming the environment variable that holds the password.
pub const PASSWORD_ENV_PARAM: &str = "password-env";

/// The query parameter naming a password file (libpq's name).
pub const PASSFILE_PARAM: &str = "passfile";

/// Where the Gateway store lives: [`Location::Local`], one SQLite file (`sqlite://PATH`), or
/// [`Location::Remote`], a PostgreSQL database (`postgres://…`).
pub type StoreLocation = Location<PostgresLocation>;

/// A PostgreSQL database, named by a URL without a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresLocation {
    /// The URL without [`PASSWORD_ENV_PARAM`]; it holds no password.
    url: url::Url,
    /// The variable holding the password, from [`PASSWORD_ENV_PARAM`].
    password_env: Option<String>,
    /// The password file, from [`PASSFILE_PARAM`].
    passfile: Option<PathBuf>,
}

/// A store URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct LocationError(String);

impl Remote for PostgresLocation {
    const LOCAL_SCHEME: &'static str = "sqlite://";
    type Error = LocationError;

    fn empty_path() -> LocationError {
        LocationError(
            "a sqlite:// store URL needs a file path, for example sqlite:///var/lib/gatehouse/gateway.db".into(),
        )
    }

    fn parse_remote(text: &str) -> Option<Result<Self, LocationError>> {
        (text.starts_with("postgres://") || text.starts_with("postgresql://"))
            .then(|| PostgresLocation::parse(text))
    }

    fn unknown_scheme(text: &str) -> LocationError {
        LocationError(format!(
            "the store URL '{}' is neither sqlite://PATH nor postgres://HOST/DATABASE",
            redact(text)
        ))
    }
}

/// The query parameters of a PostgreSQL store URL that are passed on to the driver; any other
/// key is refused, so a mistyped one (which the driver would log with its value) never passes.
const URL_PARAMS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "sslcert",
    "sslkey",
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
        let mut passfile = None;
        let mut kept = Vec::new();
        for (key, value) in url.query_pairs() {
            if key == PASSFILE_PARAM {
                if value.is_empty() {
                    return Err(LocationError(format!(
                        "{PASSFILE_PARAM}= needs the path of a password file"
                    )));
                }
                passfile = Some(PathBuf::from(value.into_owned()));
            } else if key == PASSWORD_ENV_PARAM {
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
                    "the store URL has a parameter this store does not take; it takes {}, \
                     {PASSWORD_ENV_PARAM} and {PASSFILE_PARAM}",
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
        if password_env.is_some() && passfile.is_some() {
            return Err(LocationError(format!(
                "the store URL names both {PASSWORD_ENV_PARAM} and {PASSFILE_PARAM}; keep one"
            )));
        }
        let mut url = url;
        if kept.is_empty() {
            url.set_query(None);
        } else {
            url.query_pairs_mut().clear().extend_pairs(kept);
        }
        Ok(Self {
            url,
            password_env,
            passfile,
        })
    }

    /// Returns the URL without the password reference, as sqlx parses it.
    pub fn url(&self) -> &str {
        self.url.as_str()
    }

    /// Returns the environment variable named by `password-env`, if any.
    pub fn password_env(&self) -> Option<&str> {
        self.password_env.as_deref()
    }

    /// Returns the password file `passfile` names, if any.
    pub fn passfile(&self) -> Option<&std::path::Path> {
        self.passfile.as_deref()
    }

    /// Returns sqlx's connect options: the URL's, with the password read from the variable
    /// `password-env` names or from the file `passfile` names (sqlx itself falls back to
    /// `PGPASSWORD` and the `PGPASSFILE` file).
    ///
    /// # Errors
    /// [`crate::StoreError::Unavailable`] when the URL is not one sqlx accepts, the variable
    /// `password-env` names is not set, or the `passfile` cannot be read or is not private.
    #[cfg(feature = "postgres")]
    pub fn connect_options(&self) -> crate::Result<sqlx::postgres::PgConnectOptions> {
        let unavailable = |message: String| crate::StoreError::Unavailable {
            source: Box::new(LocationError(message)),
        };
        let options = sqlx::postgres::PgConnectOptions::from_str(self.url.as_str())
            .map_err(|error| unavailable(format!("the store URL {self} is not usable: {error}")))?;
        if let Some(name) = &self.password_env {
            let password = std::env::var(name).map_err(|_| {
                unavailable(format!(
                    "the store URL {self} names the password variable {name}, which is not set"
                ))
            })?;
            return Ok(options.password(&password));
        }
        let Some(path) = &self.passfile else {
            return Ok(options);
        };
        let text = read_private_file(path).map_err(|error| {
            unavailable(format!(
                "the password file {} of the store URL {self} cannot be used: {error}",
                path.display()
            ))
        })?;
        let entry = PassfileEntry {
            host: options.get_host(),
            port: options.get_port(),
            database: options.get_database().unwrap_or(options.get_username()),
            user: options.get_username(),
        };
        Ok(match entry.lookup(&text) {
            Some(password) => options.password(&password),
            None => options,
        })
    }
}

#[cfg(any(feature = "postgres", test))]
/// Reads `path`, which must be a regular file that only its owner may read, as libpq asks of a
/// password file: no group or other permission bits, except that a file owned by root may be
/// group-readable (how a mounted Kubernetes Secret with `fsGroup` looks). The path may be a
/// symbolic link: it is the operator's own configuration, and mounted Secrets are links.
fn read_private_file(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::MetadataExt;

    let mut file = std::fs::File::open(path)?;
    let metadata = file.metadata()?;
    if !metadata.is_file() {
        return Err(std::io::Error::other("it is not a regular file"));
    }
    let forbidden = if metadata.uid() == 0 { 0o037 } else { 0o077 };
    if metadata.mode() & forbidden != 0 {
        return Err(std::io::Error::other(format!(
            "its mode is {:o}; a password file must be private to its owner (chmod 600)",
            metadata.mode() & 0o777
        )));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// The connection a password file line is looked up for.
#[cfg(any(feature = "postgres", test))]
struct PassfileEntry<'a> {
    host: &'a str,
    port: u16,
    database: &'a str,
    user: &'a str,
}

#[cfg(any(feature = "postgres", test))]
impl PassfileEntry<'_> {
    /// Returns the password of the first line of `text` (libpq's password file format) that
    /// matches this connection.
    fn lookup(&self, text: &str) -> Option<String> {
        let port = self.port.to_string();
        let wanted = [self.host, port.as_str(), self.database, self.user];
        text.lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .filter_map(split_passfile_line)
            .find(|fields| {
                fields[..4]
                    .iter()
                    .zip(wanted)
                    .all(|(field, wanted)| field == "*" || field == wanted)
            })
            .map(|mut fields| fields.swap_remove(4))
    }
}

#[cfg(any(feature = "postgres", test))]
/// Splits one password file line into its five fields, undoing `\:` and `\\`; `None` for a
/// line with fewer fields. Colons after the fourth belong to the password.
fn split_passfile_line(line: &str) -> Option<Vec<String>> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(escaped) = chars.next() {
                    fields.last_mut()?.push(escaped);
                }
            }
            ':' if fields.len() < 5 => fields.push(String::new()),
            c => fields.last_mut()?.push(c),
        }
    }
    (fields.len() == 5).then_some(fields)
}

impl fmt::Display for PostgresLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.url.as_str())?;
        let mut separator = if self.url.query().is_some() { '&' } else { '?' };
        if let Some(name) = &self.password_env {
            write!(f, "{separator}{PASSWORD_ENV_PARAM}={name}")?;
            separator = '&';
        }
        if let Some(path) = &self.passfile {
            let path: String =
                url::form_urlencoded::byte_serialize(path.as_os_str().as_encoded_bytes()).collect();
            write!(f, "{separator}{PASSFILE_PARAM}={path}")?;
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

    /// The local form is `sqlite://FILE` (its parsing is `gatehouse_location`'s, tested there).
    #[test]
    fn sqlite_urls_name_a_file() {
        let location: StoreLocation = "sqlite:///srv/state/gateway.db".parse().unwrap();
        assert_eq!(
            location,
            StoreLocation::Local(PathBuf::from("/srv/state/gateway.db"))
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
        let StoreLocation::Remote(postgres) = &location else {
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

    #[test]
    fn a_passfile_is_named_kept_out_of_the_driver_url_and_shown() {
        let location: StoreLocation =
            "postgres://gh@db:5433/gh?sslmode=require&passfile=/etc/gh/pg%20pass"
                .parse()
                .unwrap();
        let StoreLocation::Remote(postgres) = &location else {
            panic!("not postgres: {location:?}");
        };
        assert_eq!(postgres.url(), "postgres://gh@db:5433/gh?sslmode=require");
        assert_eq!(
            postgres.passfile(),
            Some(std::path::Path::new("/etc/gh/pg pass"))
        );
        let shown = location.to_string();
        assert_eq!(
            shown.parse::<StoreLocation>().unwrap(),
            location,
            "{shown} reads back"
        );
        for url in [
            "postgres://db/gh?passfile=",
            "postgres://db/gh?passfile=/p&password-env=PW",
        ] {
            assert!(url.parse::<StoreLocation>().is_err(), "{url}");
        }
    }

    #[test]
    fn a_password_file_line_matches_by_host_port_database_and_user_with_wildcards_and_escapes() {
        let entry = PassfileEntry {
            host: "db.internal",
            port: 5433,
            database: "gh",
            user: "gatehouse",
        };
        let text = "# a comment:with:five:fields:no\n\
                    other:5433:gh:gatehouse:wrong-host\n\
                    db.internal:5432:gh:gatehouse:wrong-port\n\
                    too:few:fields\n\
                    db.internal:*:gh:gatehouse:pa\\:ss\\\\word:with:colons\n\
                    *:*:*:*:the-fallback\n";
        assert_eq!(
            entry.lookup(text).as_deref(),
            Some("pa:ss\\word:with:colons")
        );
        let other = PassfileEntry {
            user: "someone",
            ..entry
        };
        assert_eq!(other.lookup(text).as_deref(), Some("the-fallback"));
        assert_eq!(other.lookup("db.internal:*:gh:gatehouse:x\n"), None);
        assert_eq!(split_passfile_line("a\\:b:c:d:e:f").unwrap()[0], "a:b");
    }

    #[test]
    fn a_password_file_others_may_read_is_refused() {
        use std::os::unix::fs::MetadataExt;
        use std::os::unix::fs::PermissionsExt;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pgpass");
        std::fs::write(&path, "*:*:*:*:s3cret\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let root_owned = std::fs::metadata(&path).unwrap().uid() == 0;
        let error = read_private_file(&path).unwrap_err().to_string();
        assert!(
            error.contains("644") && error.contains("chmod 600"),
            "{error}"
        );
        assert!(!error.contains("s3cret"), "{error}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        assert_eq!(
            read_private_file(&path).is_ok(),
            root_owned,
            "0640 only for root"
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_private_file(&path).unwrap(), "*:*:*:*:s3cret\n");
        assert!(
            read_private_file(dir.path()).is_err(),
            "a directory is refused"
        );
    }
}
