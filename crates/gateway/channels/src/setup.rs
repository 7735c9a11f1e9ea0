//! From `[[channels]]` to what the Gateway runs: validation, then each enabled channel's
//! credential read once.

use crate::config::ChannelSpec;
use crate::config::ConfigError;
use crate::config::validate;
use crate::secret::CredentialError;
use crate::secret::Secret;

/// A channel ready to run, or a disabled one kept for `GET /v1/channels`.
#[derive(Debug, Clone)]
pub struct ChannelSetup {
    /// What the file says.
    pub spec: ChannelSpec,
    /// What it runs with; `None` when disabled.
    pub kind: Option<KindSetup>,
}

/// A kind's settings with its credential read.
#[derive(Debug, Clone)]
pub enum KindSetup {
    /// A signed webhook channel.
    Webhook {
        /// Where replies go.
        reply_url: url::Url,
        /// The signing secret of both directions.
        secret: Secret,
    },
}

/// Why the channels cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A key of `[[channels]]` is wrong (`CHANNEL_CONFIG_INVALID`).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An enabled channel's credential cannot be read (`CHANNEL_CREDENTIAL_MISSING`).
    #[error("channels[{index}]: {source}")]
    Credential {
        /// The table's index.
        index: usize,
        /// Why.
        #[source]
        source: CredentialError,
    },
}

/// Validates `specs` and reads the credential of each enabled channel.
///
/// # Errors
/// [`SetupError`], naming the table and key.
pub fn prepare(specs: &[ChannelSpec]) -> Result<Vec<ChannelSetup>, SetupError> {
    let settings = validate(specs)?;
    specs
        .iter()
        .zip(settings)
        .enumerate()
        .map(|(index, (spec, webhook))| {
            let kind = match webhook {
                Some(webhook) if spec.enabled => Some(KindSetup::Webhook {
                    secret: webhook
                        .secret
                        .resolve()
                        .map_err(|source| SetupError::Credential { index, source })?,
                    reply_url: webhook.reply_url,
                }),
                _ => None,
            };
            Ok(ChannelSetup {
                spec: spec.clone(),
                kind,
            })
        })
        .collect()
}
