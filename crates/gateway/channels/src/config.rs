//! `[[channels]]` of the Gateway's config file: what each table may say, and its validation.
//!
//! A table is read as a [`ChannelSpec`] (unknown keys are refused by name), then
//! [`validate`] checks what serde cannot: names, the keys each kind needs and the ones it does
//! not take, credential references, URLs. Every error names its key as `channels[i].key`.

use std::collections::HashSet;
use std::path::PathBuf;

use gatehouse_api::channels::ChannelKind;
use gatehouse_api::sessions::QueueMode;
use serde::Deserialize;

use crate::secret::CredentialRef;

/// One `[[channels]]` table, as written.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct ChannelSpec {
    /// Its name: 1 to 64 of `a-z`, `0-9`, `-`, unique in the file.
    pub name: String,
    /// Its kind.
    pub kind: ChannelKind,
    /// Whether it runs (default true); a disabled channel is validated and listed as
    /// `stopped`.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// The agent its sessions belong to (default `main`).
    #[serde(default = "main_agent")]
    pub agent: String,
    /// Who may write to it directly.
    #[serde(default)]
    pub dm_policy: DmPolicy,
    /// Senders allowed without pairing.
    #[serde(default)]
    pub allow_from: Vec<String>,
    /// Which groups it answers in.
    #[serde(default)]
    pub group_policy: GroupPolicy,
    /// Groups allowed under [`GroupPolicy::Allowlist`].
    #[serde(default)]
    pub groups: Vec<String>,
    /// When not empty, the only group members who may address it.
    #[serde(default)]
    pub group_allow_from: Vec<String>,
    /// Whether a group message must mention it (default true).
    #[serde(default = "yes")]
    pub require_mention: bool,
    /// How direct messages map to sessions.
    #[serde(default)]
    pub dm_scope: DmScope,
    /// How replies are sent.
    #[serde(default)]
    pub streaming: Streaming,
    /// Tools its sessions may not run, on top of every other denial (deny wins): tool names
    /// or `group:` names of the tool policy.
    #[serde(default)]
    pub deny_tools: Vec<String>,
    /// How its messages are queued behind a running turn (default `followup`).
    #[serde(default)]
    pub queue_mode: Option<QueueMode>,
    /// Matrix: the homeserver's base URL.
    pub homeserver: Option<String>,
    /// Matrix: the bot's user id.
    pub user_id: Option<String>,
    /// Matrix: the environment variable holding the access token.
    pub access_token_env: Option<String>,
    /// Matrix: the file holding the access token.
    pub access_token_file: Option<PathBuf>,
    /// Webhook: the environment variable holding the signing secret.
    pub secret_env: Option<String>,
    /// Webhook: the file holding the signing secret.
    pub secret_file: Option<PathBuf>,
    /// Webhook: where replies are POSTed.
    pub reply_url: Option<String>,
    /// Slack, Telegram: the environment variable holding the bot token.
    pub bot_token_env: Option<String>,
    /// Slack, Telegram: the file holding the bot token.
    pub bot_token_file: Option<PathBuf>,
    /// Slack (Socket Mode): the environment variable holding the app-level token.
    pub app_token_env: Option<String>,
    /// Slack (Socket Mode): the file holding the app-level token.
    pub app_token_file: Option<PathBuf>,
    /// Slack (Events API): the environment variable holding the signing secret.
    pub signing_secret_env: Option<String>,
    /// Slack (Events API): the file holding the signing secret.
    pub signing_secret_file: Option<PathBuf>,
    /// Slack, Telegram: the API's base URL.
    pub api_base: Option<String>,
    /// Telegram: `poll` or `webhook`.
    pub mode: Option<String>,
    /// Telegram (webhook mode): the environment variable holding the secret token.
    pub webhook_secret_env: Option<String>,
    /// Telegram (webhook mode): the file holding the secret token.
    pub webhook_secret_file: Option<PathBuf>,
    /// Telegram (webhook mode): the public URL the Bot API posts updates to, which reaches
    /// this channel's `POST /channels/{name}/inbound`.
    pub webhook_url: Option<String>,
}

fn yes() -> bool {
    true
}

fn main_agent() -> String {
    String::from("main")
}

/// Who may send a channel direct messages.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DmPolicy {
    /// Senders in `allow-from` or approved by pairing; others are sent a pairing code.
    #[default]
    Pairing,
    /// Senders in `allow-from` or approved before; others are refused without a reply.
    Allowlist,
    /// Anyone.
    Open,
    /// Nobody.
    Disabled,
}

/// Which groups a channel answers in.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GroupPolicy {
    /// The groups in `groups`.
    #[default]
    Allowlist,
    /// Any group it is in.
    Open,
    /// None.
    Disabled,
}

/// How a channel's direct messages map to sessions (OpenClaw's `dmScope`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DmScope {
    /// Every direct sender shares the agent's main session.
    Main,
    /// One session per sender, across channels.
    PerPeer,
    /// One session per sender on each channel.
    #[default]
    PerChannelPeer,
    /// One session per sender on each channel and account.
    PerAccountChannelPeer,
}

impl ChannelSpec {
    /// The tools its sessions' turns may not run: `deny-tools` with every tool that can do what
    /// a listed one does ([`gatehouse_policy::tool::with_equivalents`]: denying `exec` denies
    /// `process`, denying `write` denies `edit` and `apply_patch`).
    #[must_use]
    pub fn denied_tools(&self) -> Vec<String> {
        gatehouse_policy::tool::with_equivalents(&self.deny_tools)
    }
}

/// How a channel sends a reply.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Streaming {
    /// Once, when the turn ends.
    #[default]
    Off,
    /// One message edited as the reply grows.
    Edits,
}

/// A key of `[[channels]]` that is wrong, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("channels[{index}].{key}: {message}")]
pub struct ConfigError {
    /// The table's index in the file.
    pub index: usize,
    /// The key.
    pub key: &'static str,
    /// What is wrong with it.
    pub message: String,
}

/// A validated channel's kind-specific settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KindSettings {
    /// A signed webhook channel.
    Webhook {
        /// Where its signing secret is.
        secret: CredentialRef,
        /// Where replies go.
        reply_url: url::Url,
    },
    /// A Matrix bot account.
    Matrix {
        /// The homeserver's base URL.
        homeserver: url::Url,
        /// The bot's user id.
        user_id: String,
        /// Where its access token is.
        access_token: CredentialRef,
    },
    /// A Slack app's bot.
    Slack {
        /// The Web API's base URL (default [`SLACK_API_BASE`]).
        api_base: url::Url,
        /// Where its bot token is.
        bot_token: CredentialRef,
        /// How events arrive.
        mode: SlackMode,
    },
    /// A Telegram bot.
    Telegram {
        /// The Bot API's base URL (default [`TELEGRAM_API_BASE`]).
        api_base: url::Url,
        /// Where its bot token is.
        bot_token: CredentialRef,
        /// How updates arrive.
        mode: TelegramMode,
    },
}

/// Slack's Web API base URL.
pub const SLACK_API_BASE: &str = "https://slack.com/api";

/// How a Slack channel receives events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlackMode {
    /// Socket Mode: a WebSocket the Gateway opens with the app-level token (no public URL).
    Socket {
        /// Where the app-level token is.
        app_token: CredentialRef,
    },
    /// The Events API: Slack posts to the channel's inbound route, signed with the signing
    /// secret.
    Events {
        /// Where the signing secret is.
        signing_secret: CredentialRef,
    },
}

/// The Telegram Bot API's base URL.
pub const TELEGRAM_API_BASE: &str = "https://api.telegram.org";

/// How a Telegram channel receives updates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TelegramMode {
    /// `getUpdates` long polling, by one replica at a time (the default).
    Poll,
    /// The Bot API posts updates to `url` with the secret token in a header.
    Webhook {
        /// The public URL of the channel's inbound route.
        url: url::Url,
        /// Where the secret token is.
        secret: CredentialRef,
    },
}

/// Checks every table of `specs`; returns the settings of each, in order (`None` for a
/// disabled channel of a kind this build does not run).
///
/// # Errors
/// The first wrong key, named `channels[i].key`.
pub fn validate(specs: &[ChannelSpec]) -> Result<Vec<Option<KindSettings>>, ConfigError> {
    let mut names = HashSet::new();
    specs
        .iter()
        .enumerate()
        .map(|(index, spec)| {
            let error = |key: &'static str, message: String| ConfigError {
                index,
                key,
                message,
            };
            if !valid_name(&spec.name) {
                return Err(error(
                    "name",
                    format!(
                        "{:?} is not 1 to 64 of a-z, 0-9 and '-', starting with a letter or digit",
                        spec.name
                    ),
                ));
            }
            if !names.insert(spec.name.as_str()) {
                return Err(error(
                    "name",
                    format!("{:?} names another channel too", spec.name),
                ));
            }
            if !valid_agent(&spec.agent) {
                return Err(error(
                    "agent",
                    format!("{:?} is not an agent name", spec.agent),
                ));
            }
            if spec.queue_mode == Some(QueueMode::Steer) {
                return Err(error(
                    "queue-mode",
                    String::from(
                        "steer is not available for channels (a steered message joins no turn of its own); use followup, collect or interrupt",
                    ),
                ));
            }
            if let Some(entry) = spec
                .deny_tools
                .iter()
                .find(|entry| !gatehouse_policy::tool::known_tool_entry(entry))
            {
                return Err(error(
                    "deny-tools",
                    format!("{entry:?} names no tool: use a tool name (\"exec\"), a group (\"group:runtime\") or a * glob"),
                ));
            }
            if spec.streaming == Streaming::Edits && spec.kind == ChannelKind::Webhook {
                return Err(error(
                    "streaming",
                    format!(
                        "\"edits\" needs a platform that edits messages: the {} kind cannot; use \"off\"",
                        spec.kind.as_str()
                    ),
                ));
            }
            for (key, ids) in [
                ("allow-from", &spec.allow_from),
                ("groups", &spec.groups),
                ("group-allow-from", &spec.group_allow_from),
            ] {
                if let Some(id) = ids.iter().find(|id| id.is_empty() || id.len() > 255) {
                    return Err(error(key, format!("{id:?} is not a platform id (1 to 255 bytes)")));
                }
            }
            let settings = match spec.kind {
                ChannelKind::Webhook => Some(webhook_settings(spec).map_err(|(key, message)| error(key, message))?),
                ChannelKind::Matrix => Some(matrix_settings(spec).map_err(|(key, message)| error(key, message))?),
                ChannelKind::Telegram => Some(telegram_settings(spec).map_err(|(key, message)| error(key, message))?),
                ChannelKind::Slack => Some(slack_settings(spec).map_err(|(key, message)| error(key, message))?),
            };
            Ok(settings)
        })
        .collect()
}

/// Refuses the first kind-specific key set in `spec` that is not one of `own`.
fn only_keys(spec: &ChannelSpec, own: &[&str]) -> Result<(), (&'static str, String)> {
    let set = [
        ("homeserver", spec.homeserver.is_some()),
        ("user-id", spec.user_id.is_some()),
        ("access-token-env", spec.access_token_env.is_some()),
        ("access-token-file", spec.access_token_file.is_some()),
        ("secret-env", spec.secret_env.is_some()),
        ("secret-file", spec.secret_file.is_some()),
        ("reply-url", spec.reply_url.is_some()),
        ("bot-token-env", spec.bot_token_env.is_some()),
        ("bot-token-file", spec.bot_token_file.is_some()),
        ("app-token-env", spec.app_token_env.is_some()),
        ("app-token-file", spec.app_token_file.is_some()),
        ("signing-secret-env", spec.signing_secret_env.is_some()),
        ("signing-secret-file", spec.signing_secret_file.is_some()),
        ("api-base", spec.api_base.is_some()),
        ("mode", spec.mode.is_some()),
        ("webhook-secret-env", spec.webhook_secret_env.is_some()),
        ("webhook-secret-file", spec.webhook_secret_file.is_some()),
        ("webhook-url", spec.webhook_url.is_some()),
    ];
    match set.iter().find(|(key, set)| *set && !own.contains(key)) {
        Some((key, _)) => Err((
            key,
            format!("is not a key of a {} channel", spec.kind.as_str()),
        )),
        None => Ok(()),
    }
}

/// Parses an `http` or `https` URL with a host and no credentials.
fn http_url(key: &'static str, text: &str) -> Result<url::Url, (&'static str, String)> {
    let url = url::Url::parse(text).map_err(|error| (key, format!("is not a URL: {error}")))?;
    if !matches!(url.scheme(), "http" | "https") || url.host().is_none() {
        return Err((
            key,
            String::from("must be an http or https URL with a host"),
        ));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err((
            key,
            String::from("must not carry credentials; name them with a *-env or *-file key"),
        ));
    }
    Ok(url)
}

/// Checks a webhook table: its secret, its reply URL, and no key of another kind.
fn webhook_settings(spec: &ChannelSpec) -> Result<KindSettings, (&'static str, String)> {
    only_keys(spec, &["secret-env", "secret-file", "reply-url"])?;
    let secret = CredentialRef::from_keys(spec.secret_env.as_deref(), spec.secret_file.as_deref())
        .map_err(|message| ("secret-env", message))?;
    let Some(reply_url) = &spec.reply_url else {
        return Err((
            "reply-url",
            String::from("is required for a webhook channel"),
        ));
    };
    Ok(KindSettings::Webhook {
        secret,
        reply_url: http_url("reply-url", reply_url)?,
    })
}

/// Checks a Matrix table: the homeserver, the bot's user id and its access token.
fn matrix_settings(spec: &ChannelSpec) -> Result<KindSettings, (&'static str, String)> {
    only_keys(
        spec,
        &[
            "homeserver",
            "user-id",
            "access-token-env",
            "access-token-file",
        ],
    )?;
    let Some(homeserver) = &spec.homeserver else {
        return Err((
            "homeserver",
            String::from("is required for a matrix channel"),
        ));
    };
    let user_id = match &spec.user_id {
        Some(id) if !id.is_empty() && id.len() <= 255 => id.clone(),
        Some(_) => return Err(("user-id", String::from("must be 1 to 255 bytes"))),
        None => return Err(("user-id", String::from("is required for a matrix channel"))),
    };
    let access_token = CredentialRef::from_keys(
        spec.access_token_env.as_deref(),
        spec.access_token_file.as_deref(),
    )
    .map_err(|message| ("access-token-env", message))?;
    Ok(KindSettings::Matrix {
        homeserver: http_url("homeserver", homeserver)?,
        user_id,
        access_token,
    })
}

/// The bot token and the API's base URL of a Slack or Telegram table (`default_api` when
/// `api-base` is not set).
fn bot_and_api(
    spec: &ChannelSpec,
    default_api: &str,
) -> Result<(CredentialRef, url::Url), (&'static str, String)> {
    let bot_token = CredentialRef::from_keys(
        spec.bot_token_env.as_deref(),
        spec.bot_token_file.as_deref(),
    )
    .map_err(|message| ("bot-token-env", message))?;
    let api_base = http_url("api-base", spec.api_base.as_deref().unwrap_or(default_api))?;
    // The token travels with every call (in the URL, for Telegram): never in clear text off
    // this machine.
    let loopback = match api_base.host() {
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
        Some(url::Host::Domain(domain)) => domain == "localhost",
        None => false,
    };
    if api_base.scheme() != "https" && !loopback {
        return Err((
            "api-base",
            String::from(
                "must be an https URL (http only on loopback): the bot token travels with every call",
            ),
        ));
    }
    Ok((bot_token, api_base))
}

/// Checks a Slack table: the bot token, the API's base URL, and either the app-level token
/// (Socket Mode) or the signing secret (Events API).
fn slack_settings(spec: &ChannelSpec) -> Result<KindSettings, (&'static str, String)> {
    only_keys(
        spec,
        &[
            "bot-token-env",
            "bot-token-file",
            "app-token-env",
            "app-token-file",
            "signing-secret-env",
            "signing-secret-file",
            "api-base",
        ],
    )?;
    let (bot_token, api_base) = bot_and_api(spec, SLACK_API_BASE)?;
    let socket = spec.app_token_env.is_some() || spec.app_token_file.is_some();
    let events = spec.signing_secret_env.is_some() || spec.signing_secret_file.is_some();
    let mode = match (socket, events) {
        (true, false) => SlackMode::Socket {
            app_token: CredentialRef::from_keys(
                spec.app_token_env.as_deref(),
                spec.app_token_file.as_deref(),
            )
            .map_err(|message| ("app-token-env", message))?,
        },
        (false, true) => SlackMode::Events {
            signing_secret: CredentialRef::from_keys(
                spec.signing_secret_env.as_deref(),
                spec.signing_secret_file.as_deref(),
            )
            .map_err(|message| ("signing-secret-env", message))?,
        },
        (true, true) => {
            return Err((
                "signing-secret-env",
                String::from(
                    "give the app-level token (Socket Mode) or the signing secret (Events API), not both",
                ),
            ));
        }
        (false, false) => {
            return Err((
                "app-token-env",
                String::from(
                    "a Slack channel needs the app-level token (app-token-env or -file, Socket Mode, the default) or the signing secret (signing-secret-env or -file, Events API)",
                ),
            ));
        }
    };
    Ok(KindSettings::Slack {
        api_base,
        bot_token,
        mode,
    })
}

/// Checks a Telegram table: the bot token, the API's base URL and the mode (a webhook needs its
/// public URL and a secret token).
fn telegram_settings(spec: &ChannelSpec) -> Result<KindSettings, (&'static str, String)> {
    only_keys(
        spec,
        &[
            "bot-token-env",
            "bot-token-file",
            "api-base",
            "mode",
            "webhook-secret-env",
            "webhook-secret-file",
            "webhook-url",
        ],
    )?;
    let (bot_token, api_base) = bot_and_api(spec, TELEGRAM_API_BASE)?;
    let mode = match spec.mode.as_deref() {
        None | Some("poll") => {
            for (key, set) in [
                ("webhook-secret-env", spec.webhook_secret_env.is_some()),
                ("webhook-secret-file", spec.webhook_secret_file.is_some()),
                ("webhook-url", spec.webhook_url.is_some()),
            ] {
                if set {
                    return Err((key, String::from("is only for mode = \"webhook\"")));
                }
            }
            TelegramMode::Poll
        }
        Some("webhook") => {
            let Some(url) = &spec.webhook_url else {
                return Err((
                    "webhook-url",
                    String::from(
                        "is required in webhook mode: the public https URL of this channel's /channels/{name}/inbound",
                    ),
                ));
            };
            let url = http_url("webhook-url", url)?;
            let secret = CredentialRef::from_keys(
                spec.webhook_secret_env.as_deref(),
                spec.webhook_secret_file.as_deref(),
            )
            .map_err(|message| {
                (
                    "webhook-secret-env",
                    format!(
                        "{message} (in webhook mode, every update must carry the secret token)"
                    ),
                )
            })?;
            TelegramMode::Webhook { url, secret }
        }
        Some(other) => {
            return Err((
                "mode",
                format!("{other:?} is not a mode: use \"poll\" or \"webhook\""),
            ));
        }
    };
    Ok(KindSettings::Telegram {
        api_base,
        bot_token,
        mode,
    })
}

/// Whether `name` is a channel name: 1 to 64 of `a-z`, `0-9`, `-`, starting with a letter or
/// digit.
#[must_use]
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .next()
            .is_some_and(|first| first.is_ascii_lowercase() || first.is_ascii_digit())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Whether `agent` may stand in a session key: 1 to 64 letters, digits, `.`, `_` or `-`.
fn valid_agent(agent: &str) -> bool {
    (1..=64).contains(&agent.len())
        && agent
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    #[derive(Deserialize)]
    struct File {
        channels: Vec<ChannelSpec>,
    }

    fn parse(text: &str) -> Vec<ChannelSpec> {
        toml::from_str::<File>(text).unwrap().channels
    }

    const WEBHOOK: &str = "[[channels]]\nname = \"hooks\"\nkind = \"webhook\"\nsecret-env = \"HOOK_SECRET\"\nreply-url = \"http://127.0.0.1:9/replies\"\n";

    #[test]
    fn a_webhook_table_takes_the_documented_defaults() {
        let specs = parse(WEBHOOK);
        let spec = &specs[0];
        assert!(spec.enabled && spec.require_mention);
        assert_eq!(spec.agent, "main");
        assert_eq!(spec.dm_policy, DmPolicy::Pairing);
        assert_eq!(spec.group_policy, GroupPolicy::Allowlist);
        assert_eq!(spec.dm_scope, DmScope::PerChannelPeer);
        let settings = validate(&specs).unwrap();
        let Some(KindSettings::Webhook { secret, reply_url }) = &settings[0] else {
            panic!("{settings:?}");
        };
        assert_eq!(*secret, CredentialRef::Env("HOOK_SECRET".into()));
        assert_eq!(reply_url.as_str(), "http://127.0.0.1:9/replies");
    }

    #[test]
    fn unknown_keys_are_refused_by_name() {
        let error = toml::from_str::<File>(&format!("{WEBHOOK}secret = \"inline\"\n"))
            .err()
            .unwrap()
            .to_string();
        assert!(error.contains("unknown field `secret`"), "{error}");
    }

    #[test]
    fn every_error_names_its_key() {
        let cases = [
            ("name = \"hooks\"", "name = \"Hooks\"", "channels[0].name"),
            (
                "secret-env = \"HOOK_SECRET\"\n",
                "",
                "channels[0].secret-env",
            ),
            (
                "secret-env = \"HOOK_SECRET\"\n",
                "secret-env = \"A\"\nsecret-file = \"/x\"\n",
                "channels[0].secret-env",
            ),
            (
                "reply-url = \"http://127.0.0.1:9/replies\"\n",
                "",
                "channels[0].reply-url",
            ),
            (
                "reply-url = \"http://127.0.0.1:9/replies\"",
                "reply-url = \"file:///etc/passwd\"",
                "channels[0].reply-url",
            ),
            (
                "reply-url = \"http://127.0.0.1:9/replies\"",
                "reply-url = \"http://u:p@127.0.0.1:9/\"",
                "channels[0].reply-url",
            ),
            (
                "kind = \"webhook\"",
                "kind = \"slack\"",
                "channels[0].secret-env",
            ),
            (
                "kind = \"webhook\"",
                "kind = \"matrix\"",
                "channels[0].secret-env",
            ),
            (
                "kind = \"webhook\"\n",
                "kind = \"webhook\"\nhomeserver = \"http://x\"\n",
                "channels[0].homeserver",
            ),
            (
                "kind = \"webhook\"\n",
                "kind = \"webhook\"\nqueue-mode = \"steer\"\n",
                "channels[0].queue-mode",
            ),
            (
                "kind = \"webhook\"\n",
                "kind = \"webhook\"\nstreaming = \"edits\"\n",
                "channels[0].streaming",
            ),
            (
                "kind = \"webhook\"\n",
                "kind = \"webhook\"\ndeny-tools = [\"exec\", \"group:nope\"]\n",
                "channels[0].deny-tools",
            ),
            (
                "kind = \"webhook\"\n",
                "kind = \"webhook\"\nallow-from = [\"\"]\n",
                "channels[0].allow-from",
            ),
        ];
        for (from, to, key) in cases {
            let text = WEBHOOK.replace(from, to);
            let error = validate(&parse(&text)).unwrap_err().to_string();
            assert!(error.starts_with(key), "{text}\n→ {error}");
        }
        let twice = format!("{WEBHOOK}{WEBHOOK}");
        assert_eq!(
            validate(&parse(&twice)).unwrap_err().to_string(),
            "channels[1].name: \"hooks\" names another channel too"
        );
    }

    #[test]
    fn deny_tools_takes_tool_names_globs_and_known_groups() {
        for entries in [
            "\"exec\"",
            "\"Apply_Patch\", \"group:runtime\"",
            "\"memory_*\"",
        ] {
            let text = format!(
                "[[channels]]\nname = \"hooks\"\nkind = \"webhook\"\nsecret-env = \"S\"\nreply-url = \"http://127.0.0.1:9/\"\ndeny-tools = [{entries}]\n"
            );
            assert!(validate(&parse(&text)).is_ok(), "{entries}");
        }
        for entry in ["\"\"", "\"group:everything\"", "\"rm -rf\""] {
            let text = format!(
                "[[channels]]\nname = \"hooks\"\nkind = \"webhook\"\nsecret-env = \"S\"\nreply-url = \"http://127.0.0.1:9/\"\ndeny-tools = [{entry}]\n"
            );
            let error = validate(&parse(&text)).unwrap_err().to_string();
            assert!(error.starts_with("channels[0].deny-tools: "), "{error}");
        }
    }

    #[test]
    fn a_slack_table_takes_socket_mode_or_the_events_api() {
        let base =
            "[[channels]]\nname = \"team\"\nkind = \"slack\"\nbot-token-env = \"SLACK_BOT\"\n";
        let socket = format!("{base}app-token-file = \"/run/slack-app\"\n");
        let settings = validate(&parse(&socket)).unwrap();
        let Some(KindSettings::Slack { api_base, mode, .. }) = &settings[0] else {
            panic!("{settings:?}");
        };
        assert_eq!(api_base.as_str(), "https://slack.com/api");
        assert_eq!(
            *mode,
            SlackMode::Socket {
                app_token: CredentialRef::File("/run/slack-app".into())
            }
        );
        let events = format!("{base}signing-secret-env = \"SLACK_SIGNING\"\n");
        assert!(matches!(
            validate(&parse(&events)).unwrap()[0],
            Some(KindSettings::Slack {
                mode: SlackMode::Events { .. },
                ..
            })
        ));
        for (text, key) in [
            (base.to_owned(), "channels[0].app-token-env"),
            (
                format!("{socket}signing-secret-env = \"S\"\n"),
                "channels[0].signing-secret-env",
            ),
            (format!("{socket}mode = \"poll\"\n"), "channels[0].mode"),
        ] {
            let error = validate(&parse(&text)).unwrap_err().to_string();
            assert!(error.starts_with(key), "{text} → {error}");
        }
    }

    #[test]
    fn a_telegram_table_polls_by_default_and_a_webhook_needs_its_url_and_secret() {
        let text =
            "[[channels]]\nname = \"tg\"\nkind = \"telegram\"\nbot-token-env = \"TG_TOKEN\"\n";
        let settings = validate(&parse(text)).unwrap();
        let Some(KindSettings::Telegram {
            api_base,
            bot_token,
            mode,
        }) = &settings[0]
        else {
            panic!("{settings:?}");
        };
        assert_eq!(api_base.as_str(), "https://api.telegram.org/");
        assert_eq!(*bot_token, CredentialRef::Env("TG_TOKEN".into()));
        assert_eq!(*mode, TelegramMode::Poll);
        let webhook = format!(
            "{text}mode = \"webhook\"\nwebhook-url = \"https://gw.example/channels/tg/inbound\"\nwebhook-secret-env = \"TG_SECRET\"\n"
        );
        let settings = validate(&parse(&webhook)).unwrap();
        let Some(KindSettings::Telegram {
            mode: TelegramMode::Webhook { url, secret },
            ..
        }) = &settings[0]
        else {
            panic!("{settings:?}");
        };
        assert_eq!(url.as_str(), "https://gw.example/channels/tg/inbound");
        assert_eq!(*secret, CredentialRef::Env("TG_SECRET".into()));
        for (from, to, key) in [
            (
                "bot-token-env = \"TG_TOKEN\"\n",
                "",
                "channels[0].bot-token-env",
            ),
            ("mode = \"webhook\"", "mode = \"push\"", "channels[0].mode"),
            (
                "webhook-url = \"https://gw.example/channels/tg/inbound\"\n",
                "",
                "channels[0].webhook-url",
            ),
            (
                "webhook-secret-env = \"TG_SECRET\"\n",
                "",
                "channels[0].webhook-secret-env",
            ),
            (
                "mode = \"webhook\"",
                "mode = \"poll\"",
                "channels[0].webhook-secret-env",
            ),
            (
                "mode = \"webhook\"",
                "mode = \"webhook\"\nhomeserver = \"http://x\"",
                "channels[0].homeserver",
            ),
            (
                "mode = \"webhook\"",
                "mode = \"webhook\"\napi-base = \"ftp://x\"",
                "channels[0].api-base",
            ),
            (
                "mode = \"webhook\"",
                "mode = \"webhook\"\napi-base = \"http://api.example\"",
                "channels[0].api-base",
            ),
        ] {
            let error = validate(&parse(&webhook.replace(from, to)))
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(key), "{from} → {error}");
        }
    }

    #[test]
    fn a_matrix_table_names_its_homeserver_bot_and_token() {
        let text = "[[channels]]\nname = \"team\"\nkind = \"matrix\"\nhomeserver = \"http://127.0.0.1:8008\"\nuser-id = \"@bot:hs.test\"\naccess-token-file = \"/run/bot-token\"\n";
        let settings = validate(&parse(text)).unwrap();
        let Some(KindSettings::Matrix {
            user_id,
            access_token,
            ..
        }) = &settings[0]
        else {
            panic!("{settings:?}");
        };
        assert_eq!(user_id, "@bot:hs.test");
        assert_eq!(*access_token, CredentialRef::File("/run/bot-token".into()));
        for (from, to, key) in [
            ("user-id = \"@bot:hs.test\"\n", "", "channels[0].user-id"),
            (
                "access-token-file = \"/run/bot-token\"\n",
                "",
                "channels[0].access-token-env",
            ),
            (
                "homeserver = \"http://127.0.0.1:8008\"",
                "homeserver = \"127.0.0.1:8008\"",
                "channels[0].homeserver",
            ),
            (
                "user-id",
                "reply-url = \"http://x/\"\nuser-id",
                "channels[0].reply-url",
            ),
        ] {
            let error = validate(&parse(&text.replace(from, to)))
                .unwrap_err()
                .to_string();
            assert!(error.starts_with(key), "{from} → {error}");
        }
    }
}
