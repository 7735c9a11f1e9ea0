//! The `--store URL` of `gatehouse gateway` and `gatehouse up`: where the Gateway state lives.

use gatehouse_gateway::GatewayConfig;
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
}

impl StoreArgs {
    /// Fills an unset `--store` from the config file's `store`.
    pub(crate) fn or_file(self, file: &crate::config_file::GatewayFile) -> Self {
        Self {
            store: self.store.or_else(|| file.store.clone()),
        }
    }

    /// Sets the store of `config`; unset keeps the default SQLite file.
    ///
    /// # Errors
    /// A usage error when the URL is not a store URL or carries a password (the message shows
    /// it redacted).
    pub(crate) fn apply(self, config: &mut GatewayConfig) -> anyhow::Result<()> {
        config.store = self
            .store
            .as_deref()
            .map(str::parse::<StoreLocation>)
            .transpose()
            .map_err(|error| UsageError::new(error.to_string()))?;
        Ok(())
    }
}
