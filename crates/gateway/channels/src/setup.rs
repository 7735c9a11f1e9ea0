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
    /// A Slack app's bot.
    Slack {
        /// The Web API's base URL.
        api_base: url::Url,
        /// Its bot token (`xoxb-…`).
        bot_token: Secret,
        /// Socket Mode: its app-level token (`xapp-…`).
        app_token: Option<Secret>,
        /// Events API: its signing secret.
        signing_secret: Option<Secret>,
    },
    /// A Telegram bot.
    Telegram {
        /// The Bot API's base URL.
        api_base: url::Url,
        /// Its bot token.
        bot_token: Secret,
        /// In webhook mode: the public URL updates are posted to, and the secret token they
        /// carry; `None` polls.
        webhook: Option<(url::Url, Secret)>,
    },
}

/// Why the channels cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A key of `[[channels]]` is wrong (`CHANNEL_CONFIG_INVALID`).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Two enabled channels share a credential: a request signed for one webhook channel
    /// would verify on the other, and two Matrix channels with one token would run two sync
    /// loops for one account (`CHANNEL_CONFIG_INVALID`).
    #[error(
        "channels[{index}]: its credential is also channels[{other}]'s; give each channel its own (one poller per account)"
    )]
    SharedSecret {
        /// The later table.
        index: usize,
        /// The earlier one.
        other: usize,
    },
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
    let setups: Vec<ChannelSetup> = specs
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
                Some(KindSettings::Slack {
                    api_base,
                    bot_token,
                    mode,
                }) => {
                    let (app_token, signing_secret) = match mode {
                        crate::config::SlackMode::Socket { app_token } => {
                            (Some(read(&app_token)?), None)
                        }
                        crate::config::SlackMode::Events { signing_secret } => {
                            (None, Some(read(&signing_secret)?))
                        }
                    };
                    Some(KindSetup::Slack {
                        api_base,
                        bot_token: read(&bot_token)?,
                        app_token,
                        signing_secret,
                    })
                }
                Some(KindSettings::Telegram {
                    api_base,
                    bot_token,
                    mode,
                }) => Some(KindSetup::Telegram {
                    bot_token: read(&bot_token)?,
                    webhook: match mode {
                        crate::config::TelegramMode::Poll => None,
                        crate::config::TelegramMode::Webhook { url, secret } => {
                            let secret = read(&secret)?;
                            if !crate::telegram::valid_secret_token(secret.expose()) {
                                return Err(SetupError::Credential {
                                    index,
                                    source: crate::secret::CredentialError::Invalid(String::from(
                                        "a Telegram secret token is 1 to 256 of A-Z, a-z, 0-9, '_' and '-'",
                                    )),
                                });
                            }
                            Some((url, secret))
                        }
                    },
                    api_base,
                }),
                None => None,
            };
            Ok(ChannelSetup {
                spec: spec.clone(),
                kind,
            })
        })
        .collect::<Result<_, SetupError>>()?;
    let secrets: Vec<(usize, &Secret)> = setups
        .iter()
        .enumerate()
        .flat_map(|(index, setup)| {
            let secrets: Vec<&Secret> = match &setup.kind {
                Some(KindSetup::Webhook { secret, .. }) => vec![secret],
                Some(KindSetup::Matrix { access_token, .. }) => vec![access_token],
                Some(KindSetup::Telegram {
                    bot_token, webhook, ..
                }) => std::iter::once(bot_token)
                    .chain(webhook.as_ref().map(|(_, secret)| secret))
                    .collect(),
                Some(KindSetup::Slack {
                    bot_token,
                    app_token,
                    signing_secret,
                    ..
                }) => std::iter::once(bot_token)
                    .chain(app_token.as_ref())
                    .chain(signing_secret.as_ref())
                    .collect(),
                None => Vec::new(),
            };
            secrets.into_iter().map(move |secret| (index, secret))
        })
        .collect();
    for (position, (index, secret)) in secrets.iter().enumerate() {
        if let Some((other, _)) = secrets[..position]
            .iter()
            .find(|(other, seen)| seen == secret && other != index)
        {
            return Err(SetupError::SharedSecret {
                index: *index,
                other: *other,
            });
        }
    }
    Ok(setups)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    #[test]
    fn two_channels_may_not_share_a_credential() {
        #[derive(serde::Deserialize)]
        struct File {
            channels: Vec<ChannelSpec>,
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "shared\n").unwrap();
        let table = |name: &str| {
            format!(
                "[[channels]]\nname = \"{name}\"\nkind = \"webhook\"\nsecret-file = {:?}\nreply-url = \"http://127.0.0.1:9/\"\n",
                secret.display().to_string()
            )
        };
        let text = format!("{}{}", table("one"), table("two"));
        let specs = toml::from_str::<File>(&text).unwrap().channels;
        let error = prepare(&specs).unwrap_err().to_string();
        assert!(
            error.starts_with("channels[1]: its credential is also channels[0]'s"),
            "{error}"
        );
        assert_eq!(prepare(&specs[..1]).unwrap().len(), 1);
    }
}
