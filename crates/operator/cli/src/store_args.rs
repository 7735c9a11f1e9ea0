//! The `--store URL` and `--media URL` of `gatehouse gateway` and `gatehouse up`: where the
//! Gateway state and its blobs live.

use gatehouse_gateway::GatewayConfig;
use gatehouse_media::MediaLocation;
use gatehouse_store::location::StoreLocation;

use crate::exit::UsageError;

/// Where the Gateway keeps its state.
#[derive(Debug, clap::Args)]
pub(crate) struct StoreArgs {
    /// The Gateway store: `sqlite://PATH` or `postgres://[USER@]HOST[:PORT]/DATABASE` (default:
    /// the SQLite file gateway.db in the state directory). A PostgreSQL URL carries no
    /// password: add `?password-env=NAME` to read it from the variable NAME, or set PGPASSWORD
    /// or a password file (PGPASSFILE).
    // Parsed here rather than by clap: clap's error would echo the refused URL, password and all.
    #[arg(
        long,
        env = "GATEHOUSE_STORE",
        hide_env_values = true,
        value_name = "URL"
    )]
    store: Option<String>,
    /// The media store (uploads, artifacts, checkpoint contents): `file://DIR` or
    /// `s3://BUCKET/PREFIX` (default: the directory media in the state directory). S3 is
    /// configured by AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY
    /// (AWS_ALLOW_HTTP=true for a plain-HTTP endpoint); GATEHOUSE_S3_ENDPOINT,
    /// GATEHOUSE_S3_REGION and GATEHOUSE_S3_PATH_STYLE override them.
    #[arg(long, env = "GATEHOUSE_MEDIA", value_name = "URL")]
    media: Option<String>,
}

impl StoreArgs {
    /// Fills an unset `--store` and `--media` from the config file's `store` and `media`.
    pub(crate) fn or_file(self, file: &crate::config_file::GatewayFile) -> Self {
        Self {
            store: self.store.or_else(|| file.store.clone()),
            media: self.media.or_else(|| file.media.clone()),
        }
    }

    /// Sets the store and the media store of `config`; unset keeps the default SQLite file and
    /// media directory.
    ///
    /// # Errors
    /// A usage error when the URL is not a store URL or carries a password (the message shows
    /// it redacted), or when the media URL is not one the media store takes.
    pub(crate) fn apply(self, config: &mut GatewayConfig) -> anyhow::Result<()> {
        config.media = self
            .media
            .as_deref()
            .map(str::parse::<MediaLocation>)
            .transpose()
            .map_err(|error| UsageError::new(format!("--media: {error} [{}]", error.code())))?;
        config.store = self
            .store
            .as_deref()
            .map(str::parse::<StoreLocation>)
            .transpose()
            .map_err(|error| UsageError::new(error.to_string()))?;
        Ok(())
    }
}
