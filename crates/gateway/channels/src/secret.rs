//! Channel credentials: named in the config file by reference (`*-env`, `*-file`), read once
//! at start, and held in a [`Secret`] whose `Debug` never shows it.

use std::fmt;
use std::path::Path;
use std::path::PathBuf;

/// Where a credential is: an environment variable or a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialRef {
    /// The environment variable of this name.
    Env(String),
    /// The file at this path (one line; a final newline is dropped).
    File(PathBuf),
}

/// A credential that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    /// The environment variable is not set, not UTF-8, or empty.
    #[error("the environment variable {0} is not set or empty")]
    EnvMissing(String),
    /// The file cannot be read.
    #[error("cannot read the credential file {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The file is empty or not one line of UTF-8.
    #[error("the credential file {0} is not one non-empty line of UTF-8")]
    FileInvalid(PathBuf),
    /// The value is not what the platform takes (its value is never shown).
    #[error("the credential is not valid: {0}")]
    Invalid(String),
}

impl CredentialRef {
    /// Returns the reference `env` or `file` names (exactly one of them).
    ///
    /// # Errors
    /// Neither or both given, or an invalid variable name, as a message for the config error.
    pub fn from_keys(env: Option<&str>, file: Option<&Path>) -> Result<Self, String> {
        match (env, file) {
            (Some(name), None) if valid_env_name(name) => Ok(CredentialRef::Env(name.to_owned())),
            (Some(name), None) => Err(format!("{name:?} is not an environment variable name")),
            (None, Some(path)) if path.is_absolute() => Ok(CredentialRef::File(path.to_owned())),
            (None, Some(path)) => Err(format!(
                "the credential file {} must be an absolute path",
                path.display()
            )),
            (None, None) => Err(String::from(
                "a credential is required: name an environment variable (…-env) or a file (…-file)",
            )),
            (Some(_), Some(_)) => Err(String::from(
                "give the credential's environment variable or its file, not both",
            )),
        }
    }

    /// Reads the credential.
    ///
    /// # Errors
    /// [`CredentialError`] when it is not set or cannot be read.
    pub fn resolve(&self) -> Result<Secret, CredentialError> {
        match self {
            CredentialRef::Env(name) => match std::env::var(name) {
                Ok(value) if !value.is_empty() => Ok(Secret(value)),
                _ => Err(CredentialError::EnvMissing(name.clone())),
            },
            CredentialRef::File(path) => {
                let bytes = std::fs::read(path).map_err(|source| CredentialError::File {
                    path: path.clone(),
                    source,
                })?;
                let text = String::from_utf8(bytes)
                    .map_err(|_| CredentialError::FileInvalid(path.clone()))?;
                let line = text.strip_suffix('\n').unwrap_or(&text);
                let line = line.strip_suffix('\r').unwrap_or(line);
                if line.is_empty() || line.contains('\n') {
                    return Err(CredentialError::FileInvalid(path.clone()));
                }
                Ok(Secret(line.to_owned()))
            }
        }
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// A credential's value. It is never printed: `Debug` shows `Secret(…)`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value (a test's, or one read by [`CredentialRef::resolve`]).
    #[must_use]
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    /// Returns the value, for the one call that sends or uses it.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(…)")
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    #[test]
    fn a_file_credential_is_one_line_and_never_printed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        std::fs::write(&path, "s3cr3t-value\n").unwrap();
        let secret = CredentialRef::File(path.clone()).resolve().unwrap();
        assert_eq!(secret.expose(), "s3cr3t-value");
        assert!(!format!("{secret:?}").contains("s3cr3t"));
        std::fs::write(&path, "two\nlines\n").unwrap();
        assert!(matches!(
            CredentialRef::File(path.clone()).resolve(),
            Err(CredentialError::FileInvalid(_))
        ));
        std::fs::write(&path, "").unwrap();
        assert!(CredentialRef::File(path).resolve().is_err());
    }

    #[test]
    fn a_reference_names_exactly_one_place() {
        assert!(CredentialRef::from_keys(None, None).is_err());
        assert!(CredentialRef::from_keys(Some("A"), Some(Path::new("/x"))).is_err());
        assert!(CredentialRef::from_keys(Some("NOT VALID"), None).is_err());
        assert!(CredentialRef::from_keys(None, Some(Path::new("relative"))).is_err());
        assert_eq!(
            CredentialRef::from_keys(Some("HOOK_SECRET"), None).unwrap(),
            CredentialRef::Env("HOOK_SECRET".into())
        );
        assert!(matches!(
            CredentialRef::Env("GATEHOUSE_TEST_UNSET_CREDENTIAL".into()).resolve(),
            Err(CredentialError::EnvMissing(_))
        ));
    }
}
