//! From `[[channels]]` to what the Gateway runs: validation, then each enabled channel's
//! credential read once.

use crate::config::ChannelSpec;
use crate::config::ConfigError;
use crate::config::KindSettings;
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
    /// A Matrix bot account.
    Matrix {
        /// The homeserver's base URL.
        homeserver: url::Url,
        /// The bot's user id.
        user_id: String,
        /// Its access token.
        access_token: Secret,
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
        .map(|(index, (spec, settings))| {
            let read = |credential: &crate::secret::CredentialRef| {
                credential
                    .resolve()
                    .map_err(|source| SetupError::Credential { index, source })
            };
            let kind = match settings {
                Some(_) if !spec.enabled => None,
                Some(KindSettings::Webhook { secret, reply_url }) => Some(KindSetup::Webhook {
                    secret: read(&secret)?,
                    reply_url,
                }),
                Some(KindSettings::Matrix {
                    homeserver,
                    user_id,
                    access_token,
                }) => Some(KindSetup::Matrix {
                    access_token: read(&access_token)?,
                    homeserver,
                    user_id,
                }),
                None => None,
            };
            Ok(ChannelSetup {
                spec: spec.clone(),
                kind,
            })
        })
        .collect()
}
