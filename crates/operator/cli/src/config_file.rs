//! The `--config FILE` of `gatehouse gateway` and `gatehouse node`: a TOML file with the same
//! settings as the flags, in kebab-case. A flag given on the command line (or its `GATEHOUSE_*`
//! variable) wins over the file; the file wins over the built-in default. Unknown keys are an
//! error that names the key, so a typo never goes unnoticed.

use gatehouse_protocol::runtime::RuntimeKind;
use std::net::SocketAddr;
use std::path::Path;
use std::path::PathBuf;

use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::exit::UsageError;

/// `gatehouse gateway --config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct GatewayFile {
    pub(crate) state: Option<PathBuf>,
    pub(crate) listen: Option<SocketAddr>,
    pub(crate) public_url: Option<String>,
    pub(crate) max_concurrent_turns: Option<usize>,
    pub(crate) media_max_bytes: Option<u64>,
    pub(crate) media_quota_bytes: Option<u64>,
    pub(crate) checkpoint_quota_bytes: Option<u64>,
    pub(crate) checkpoints_kept: Option<u32>,
    pub(crate) audit_retention_days: Option<u32>,
    pub(crate) runtime: Option<RuntimeKind>,
    pub(crate) codex_command_approval: Option<String>,
    pub(crate) codex_file_approval: Option<String>,
    pub(crate) memory_embedder: Option<String>,
    pub(crate) memory_model_dir: Option<PathBuf>,
    pub(crate) skills_dir: Option<PathBuf>,
    pub(crate) bundled_skills_dir: Option<PathBuf>,
    pub(crate) store: Option<String>,
    pub(crate) media: Option<String>,
    pub(crate) move_sessions_after: Option<u64>,
    pub(crate) replica_id: Option<String>,
    pub(crate) advertise_url: Option<String>,
    pub(crate) lease_seconds: Option<u64>,
    pub(crate) key_max_streams: Option<u32>,
    pub(crate) max_streams: Option<u32>,
    pub(crate) key_concurrent_turns: Option<u32>,
    pub(crate) key_media_quota_bytes: Option<u64>,
    pub(crate) session_tokens_per_day: Option<u64>,
    pub(crate) turn_max_tokens: Option<u64>,
    /// `[[channels]]`: the chat platforms and signed webhooks the Gateway receives messages
    /// from.
    #[serde(default)]
    pub(crate) channels: Vec<gatehouse_channels::config::ChannelSpec>,
}

impl GatewayFile {
    /// Validates the file's channels and reads the credentials of the enabled ones.
    ///
    /// # Errors
    /// A usage error that starts with the stable code (`CHANNEL_CONFIG_INVALID`,
    /// `CHANNEL_CREDENTIAL_MISSING`) and names the key.
    pub(crate) fn channels(
        &self,
    ) -> Result<Vec<gatehouse_channels::setup::ChannelSetup>, UsageError> {
        use gatehouse_channels::setup::SetupError;
        use gatehouse_protocol::error::ErrorCode;
        gatehouse_channels::setup::prepare(&self.channels).map_err(|error| {
            let code = match &error {
                SetupError::Config(_) | SetupError::SharedSecret { .. } => {
                    ErrorCode::ChannelConfigInvalid
                }
                SetupError::Credential { .. } => ErrorCode::ChannelCredentialMissing,
            };
            UsageError::new(format!("{}: {error}", code.as_str()))
        })
    }

    /// Checks the file for `gatehouse up`: an enabled channel is refused with
    /// `CHANNELS_NEED_DEDICATED` (channel credentials need a dedicated Gateway, apart from the
    /// node host that runs model-directed work), and so is a key `up` takes only as a flag or
    /// not at all.
    ///
    /// # Errors
    /// A usage error naming the channel or the key.
    pub(crate) fn check_for_up(&self) -> Result<(), UsageError> {
        if let Some(channel) = self.channels.iter().find(|channel| channel.enabled) {
            return Err(UsageError::new(format!(
                "{}: the channel {:?} is enabled, and channel credentials need dedicated execution: \
                 run `gatehouse gateway` with its node hosts apart (or set enabled = false)",
                gatehouse_protocol::error::ErrorCode::ChannelsNeedDedicated.as_str(),
                channel.name
            )));
        }
        let flag_only = [
            ("state", self.state.is_some()),
            ("listen", self.listen.is_some()),
            ("public-url", self.public_url.is_some()),
            ("runtime", self.runtime.is_some()),
            (
                "codex-command-approval",
                self.codex_command_approval.is_some(),
            ),
            ("codex-file-approval", self.codex_file_approval.is_some()),
            ("move-sessions-after", self.move_sessions_after.is_some()),
            ("replica-id", self.replica_id.is_some()),
            ("advertise-url", self.advertise_url.is_some()),
            ("lease-seconds", self.lease_seconds.is_some()),
        ];
        match flag_only.iter().find(|(_, set)| *set) {
            Some((key, _)) => Err(UsageError::new(format!(
                "the config file sets `{key}`, which `gatehouse up` does not take from a file: \
                 use its flags"
            ))),
            None => Ok(()),
        }
    }
}

/// `gatehouse node --config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct NodeFile {
    pub(crate) gateway: Option<GatewayUrls>,
    pub(crate) root: Option<PathBuf>,
    pub(crate) runtime: Option<RuntimeKind>,
    pub(crate) setup_code_file: Option<PathBuf>,
    pub(crate) capacity: Option<u32>,
    pub(crate) worker_retirement: Option<crate::worker_args::RetirementMode>,
    pub(crate) worker_idle_seconds: Option<u64>,
    pub(crate) display_name: Option<String>,
    pub(crate) scratch: Option<PathBuf>,
    pub(crate) model: Option<String>,
    pub(crate) model_key_env: Option<String>,
    pub(crate) allow_unsandboxed_exec: Option<bool>,
    pub(crate) deny_tools: Option<Vec<String>>,
    pub(crate) source_allow_hosts: Option<Vec<String>>,
    pub(crate) exec_timeout_seconds: Option<u64>,
    pub(crate) codex_bin: Option<PathBuf>,
    pub(crate) sandbox_read_only: Option<Vec<PathBuf>>,
    pub(crate) sandbox_allow_missing: Option<Vec<crate::sandbox_setup::Layer>>,
}

/// The node's `gateway`: one URL, or a list of the replicas of one Gateway.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum GatewayUrls {
    /// One URL.
    One(String),
    /// Several, tried in turn.
    Many(Vec<String>),
}

impl GatewayUrls {
    /// Returns the URLs in order.
    pub(crate) fn into_vec(self) -> Vec<String> {
        match self {
            GatewayUrls::One(url) => vec![url],
            GatewayUrls::Many(urls) => urls,
        }
    }
}

/// Reads `path` as `T`; `None` reads nothing and gives the defaults.
///
/// # Errors
/// A usage error naming the file and the offending key or line.
pub(crate) fn load<T: DeserializeOwned + Default>(path: Option<&Path>) -> anyhow::Result<T> {
    let Some(path) = path else {
        return Ok(T::default());
    };
    let text = std::fs::read_to_string(path).map_err(|error| {
        UsageError::new(format!(
            "cannot read the config file {}: {error}",
            path.display()
        ))
    })?;
    toml::from_str(&text).map_err(|error| {
        UsageError::new(format!(
            "the config file {} is invalid: {}",
            path.display(),
            error.to_string().trim()
        ))
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::NodeFile;

    #[test]
    fn a_node_file_names_one_gateway_url_or_several() {
        let one: NodeFile = toml::from_str("gateway = \"ws://a:7420\"").unwrap();
        assert_eq!(one.gateway.unwrap().into_vec(), ["ws://a:7420"]);
        let many: NodeFile =
            toml::from_str("gateway = [\"ws://a:7420\", \"ws://b:7420\"]").unwrap();
        assert_eq!(
            many.gateway.unwrap().into_vec(),
            ["ws://a:7420", "ws://b:7420"]
        );
        assert!(toml::from_str::<NodeFile>("gateway = 7420").is_err());
    }

    #[test]
    fn a_node_file_lists_the_hosts_a_repository_may_be_fetched_from() {
        let file: NodeFile =
            toml::from_str("source-allow-hosts = [\"git.corp.example\", \"10.0.0.0/8\"]").unwrap();
        let entries = file.source_allow_hosts.unwrap();
        assert_eq!(entries, ["git.corp.example", "10.0.0.0/8"]);
        assert!(crate::worker_args::source_allow_list(&entries).is_ok());
        assert!(crate::worker_args::source_allow_list(&[String::from("10.0.0.0/33")]).is_err());
    }
}
