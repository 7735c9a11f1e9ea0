//! The AWS shared files: credentials and settings of a named profile, read the way the AWS
//! CLI and SDKs read them, for an S3 media store whose environment names no keys.
//!
//! - The profile is `AWS_PROFILE`, else `default`.
//! - The credentials file is `AWS_SHARED_CREDENTIALS_FILE`, else `$HOME/.aws/credentials`; its
//!   sections are profile names (`[default]`, `[media]`) holding `aws_access_key_id`,
//!   `aws_secret_access_key` and `aws_session_token`.
//! - The config file is `AWS_CONFIG_FILE`, else `$HOME/.aws/config`; its sections are
//!   `[default]` and `[profile NAME]`, holding `region`, `endpoint_url` and, with lower
//!   precedence than the credentials file, the same three key names.
//!
//! The environment always wins: keys in the environment are used whole and no file is read for
//! them, and `AWS_REGION`/`AWS_ENDPOINT_URL` win over the config file; an environment that names
//! keys, region and endpoint (and no `AWS_PROFILE`) has no file read at all, so a Gateway that
//! runs with a `HOME` it may not read needs nothing of it. A file named by its
//! variable must exist; the default files may be absent. A profile named by `AWS_PROFILE` must
//! be found in one of the files, and a key id without its secret (or the reverse) is refused:
//! a misconfigured profile fails when the store is opened rather than falling back to another
//! identity. Errors name the files and the profile, never a key.

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;

/// The variable naming the profile.
pub const PROFILE_ENV: &str = "AWS_PROFILE";

/// The variable naming the credentials file.
pub const CREDENTIALS_FILE_ENV: &str = "AWS_SHARED_CREDENTIALS_FILE";

/// The variable naming the config file.
pub const CONFIG_FILE_ENV: &str = "AWS_CONFIG_FILE";

/// What a profile contributes to the S3 client's settings.
#[derive(Default, PartialEq, Eq)]
pub struct Profile {
    /// The access key id and the secret key, when the environment names none.
    pub keys: Option<(String, String)>,
    /// The session token that goes with [`Profile::keys`].
    pub session_token: Option<String>,
    /// The region, when the environment names none.
    pub region: Option<String>,
    /// The endpoint URL, when the environment names none.
    pub endpoint: Option<String>,
}

impl std::fmt::Debug for Profile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The keys are secrets: only whether they were found is shown.
        f.debug_struct("Profile")
            .field("keys", &self.keys.as_ref().map(|_| "***"))
            .field("session_token", &self.session_token.as_ref().map(|_| "***"))
            .field("region", &self.region)
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

/// One of the two shared files: where it is and whether the operator named it.
struct SharedFile {
    path: Option<PathBuf>,
    named: bool,
}

impl SharedFile {
    fn locate(env: &BTreeMap<String, String>, variable: &str, default_name: &str) -> SharedFile {
        match env.get(variable).filter(|value| !value.is_empty()) {
            Some(path) => SharedFile {
                path: Some(PathBuf::from(path)),
                named: true,
            },
            None => SharedFile {
                path: env
                    .get("HOME")
                    .filter(|home| !home.is_empty())
                    .map(|home| Path::new(home).join(".aws").join(default_name)),
                named: false,
            },
        }
    }

    /// Returns the key/value pairs of `section`, or `None` when the file or the section is
    /// absent.
    fn section(&self, section: &str) -> Result<Option<BTreeMap<String, String>>, String> {
        let Some(path) = &self.path else {
            return Ok(None);
        };
        let text = match std::fs::read_to_string(path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && !self.named => {
                return Ok(None);
            }
            Err(error) => {
                return Err(format!(
                    "cannot read the AWS file {}: {error}",
                    path.display()
                ));
            }
        };
        let ini = ini::Ini::load_from_str(&text).map_err(|error| {
            // The parser's message quotes no values beyond a line and column.
            format!(
                "the AWS file {} is not valid: line {}, column {}",
                path.display(),
                error.line,
                error.col
            )
        })?;
        Ok(ini.section(Some(section)).map(|properties| {
            properties
                .iter()
                .map(|(key, value)| (key.trim().to_ascii_lowercase(), value.trim().to_owned()))
                .filter(|(_, value)| !value.is_empty())
                .collect()
        }))
    }

    fn describe(&self) -> String {
        self.path
            .as_ref()
            .map_or_else(|| "(no HOME)".to_owned(), |path| path.display().to_string())
    }
}

/// Reads what the shared files say for the profile `env` selects.
///
/// # Errors
/// A message naming the file or the profile: a file named by its variable that cannot be read,
/// a file that does not parse, a profile named by `AWS_PROFILE` in neither file, or half a key
/// pair.
pub fn read(env: &BTreeMap<String, String>) -> Result<Profile, String> {
    let set = |name: &str| env.get(name).is_some_and(|value| !value.is_empty());
    let keys_set = set("AWS_ACCESS_KEY_ID") || set("AWS_SECRET_ACCESS_KEY");
    let region_set = set("AWS_REGION") || set("AWS_DEFAULT_REGION");
    let endpoint_set = set("AWS_ENDPOINT_URL") || set("AWS_ENDPOINT");
    if keys_set && region_set && endpoint_set && !set(PROFILE_ENV) {
        // The environment says everything a profile could: no file is read.
        return Ok(Profile::default());
    }
    let named_profile = env.get(PROFILE_ENV).filter(|value| !value.is_empty());
    let profile = named_profile.map_or("default", String::as_str);
    let credentials_file = SharedFile::locate(env, CREDENTIALS_FILE_ENV, "credentials");
    let config_file = SharedFile::locate(env, CONFIG_FILE_ENV, "config");
    let config_section = match profile {
        "default" => "default".to_owned(),
        name => format!("profile {name}"),
    };
    let credentials = credentials_file.section(profile)?;
    let config = config_file.section(&config_section)?;
    if named_profile.is_some() && credentials.is_none() && config.is_none() {
        return Err(format!(
            "the AWS profile '{profile}' ({PROFILE_ENV}) is in neither {} nor {}",
            credentials_file.describe(),
            config_file.describe()
        ));
    }
    // The credentials file wins over the config file, key by key, as the AWS tools read them.
    let lookup = |key: &str| {
        credentials
            .as_ref()
            .and_then(|section| section.get(key))
            .or_else(|| config.as_ref().and_then(|section| section.get(key)))
            .cloned()
    };
    let mut found = Profile::default();
    if !keys_set {
        match (lookup("aws_access_key_id"), lookup("aws_secret_access_key")) {
            (Some(id), Some(secret)) => {
                found.keys = Some((id, secret));
                found.session_token = lookup("aws_session_token");
            }
            (None, None) => {}
            _ => {
                return Err(format!(
                    "the AWS profile '{profile}' has only one of aws_access_key_id and \
                     aws_secret_access_key (in {} or {})",
                    credentials_file.describe(),
                    config_file.describe()
                ));
            }
        }
    }
    let config_value = |key: &str| {
        config
            .as_ref()
            .and_then(|section| section.get(key))
            .cloned()
    };
    if !region_set {
        found.region = config_value("region");
    }
    if !endpoint_set {
        found.endpoint = config_value("endpoint_url");
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A temporary HOME with the given shared files, and the environment that points at it.
    fn home(credentials: Option<&str>, config: Option<&str>) -> (tempfile::TempDir, Env) {
        let home = tempfile::tempdir().unwrap();
        std::fs::create_dir(home.path().join(".aws")).unwrap();
        if let Some(text) = credentials {
            std::fs::write(home.path().join(".aws/credentials"), text).unwrap();
        }
        if let Some(text) = config {
            std::fs::write(home.path().join(".aws/config"), text).unwrap();
        }
        let env = Env(BTreeMap::from([(
            "HOME".to_owned(),
            home.path().display().to_string(),
        )]));
        (home, env)
    }

    struct Env(BTreeMap<String, String>);

    impl Env {
        fn with(mut self, name: &str, value: &str) -> Env {
            self.0.insert(name.to_owned(), value.to_owned());
            self
        }
    }

    const CREDENTIALS: &str = "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = default-secret\n\n[media]\naws_access_key_id=AKIDMEDIA\naws_secret_access_key=media-secret\naws_session_token=media-token\n";
    const CONFIG: &str = "[default]\nregion = eu-west-3\n\n[profile media]\nregion = eu-north-1\nendpoint_url = https://objects.internal:9000\n\n[profile config-only]\naws_access_key_id = AKIDCONFIG\naws_secret_access_key = config-secret\n";

    #[test]
    fn the_default_profile_gives_keys_and_region() {
        let (_home, env) = home(Some(CREDENTIALS), Some(CONFIG));
        let profile = read(&env.0).unwrap();
        assert_eq!(
            profile.keys,
            Some(("AKIDDEFAULT".to_owned(), "default-secret".to_owned()))
        );
        assert_eq!(profile.session_token, None);
        assert_eq!(profile.region.as_deref(), Some("eu-west-3"));
        assert_eq!(profile.endpoint, None);
    }

    #[test]
    fn a_named_profile_reads_its_own_sections_of_both_files() {
        let (_home, env) = home(Some(CREDENTIALS), Some(CONFIG));
        let profile = read(&env.with(PROFILE_ENV, "media").0).unwrap();
        assert_eq!(
            profile.keys,
            Some(("AKIDMEDIA".to_owned(), "media-secret".to_owned()))
        );
        assert_eq!(profile.session_token.as_deref(), Some("media-token"));
        assert_eq!(profile.region.as_deref(), Some("eu-north-1"));
        assert_eq!(
            profile.endpoint.as_deref(),
            Some("https://objects.internal:9000")
        );
    }

    #[test]
    fn keys_in_the_config_file_count_when_the_credentials_file_has_none() {
        let (_home, env) = home(Some(CREDENTIALS), Some(CONFIG));
        let profile = read(&env.with(PROFILE_ENV, "config-only").0).unwrap();
        assert_eq!(
            profile.keys,
            Some(("AKIDCONFIG".to_owned(), "config-secret".to_owned()))
        );
    }

    #[test]
    fn the_environment_wins_over_the_files() {
        let (_home, env) = home(Some(CREDENTIALS), Some(CONFIG));
        let env = env
            .with(PROFILE_ENV, "media")
            .with("AWS_ACCESS_KEY_ID", "AKIDENV")
            .with("AWS_REGION", "us-east-2")
            .with("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
        assert_eq!(read(&env.0).unwrap(), Profile::default());
    }

    #[test]
    fn a_complete_environment_reads_no_file() {
        // The named credentials file does not exist; it is not even opened.
        let env = Env(BTreeMap::new())
            .with(CREDENTIALS_FILE_ENV, "/nonexistent/credentials")
            .with("AWS_ACCESS_KEY_ID", "AKIDENV")
            .with("AWS_SECRET_ACCESS_KEY", "env-secret")
            .with("AWS_REGION", "us-east-1")
            .with("AWS_ENDPOINT_URL", "http://127.0.0.1:1");
        assert_eq!(read(&env.0).unwrap(), Profile::default());
    }

    #[test]
    fn absent_default_files_give_nothing_and_no_error() {
        let (_home, env) = home(None, None);
        assert_eq!(read(&env.0).unwrap(), Profile::default());
        assert_eq!(read(&BTreeMap::new()).unwrap(), Profile::default());
    }

    #[test]
    fn a_misconfigured_profile_is_refused_without_echoing_a_key() {
        let (home, env) = home(Some(CREDENTIALS), Some(CONFIG));
        let missing = read(&env.with(PROFILE_ENV, "nope").0).unwrap_err();
        assert!(missing.contains("'nope'"), "{missing}");

        let (_half, env) = self::home(Some("[default]\naws_access_key_id = AKIDHALF\n"), None);
        let half = read(&env.0).unwrap_err();
        assert!(half.contains("only one of"), "{half}");
        assert!(!half.contains("AKIDHALF"), "{half}");

        let named = Env(BTreeMap::new()).with(
            CREDENTIALS_FILE_ENV,
            &home.path().join("absent").display().to_string(),
        );
        let unreadable = read(&named.0).unwrap_err();
        assert!(
            unreadable.contains("cannot read the AWS file"),
            "{unreadable}"
        );

        let (_bad, env) = self::home(Some("[default\naws_secret_access_key = bad-secret\n"), None);
        let invalid = read(&env.0).unwrap_err();
        assert!(invalid.contains("is not valid"), "{invalid}");
        assert!(!invalid.contains("bad-secret"), "{invalid}");
    }

    #[test]
    fn debug_output_hides_the_keys() {
        let (_home, env) = home(Some(CREDENTIALS), None);
        let shown = format!("{:?}", read(&env.with(PROFILE_ENV, "media").0).unwrap());
        assert!(
            !shown.contains("media-secret") && !shown.contains("media-token"),
            "{shown}"
        );
    }
}
