//! The installation file: schema, strict parsing and validation.
//!
//! One installation file describes one agent. A complete dedicated example:
//!
//! ```yaml
//! agentId: main
//! namespaceId: acme
//! namespace: gatehouse-acme
//! topology: dedicated-codex            # embedded | dedicated-native | dedicated-codex
//! images:
//!   gateway: registry.example.com/gatehouse:0.1.0
//!   harness: registry.example.com/gatehouse-codex:0.1.0   # dedicated only
//! runtime:
//!   gatewayStorageClassName: fast-rwo                    # not with gateway.store and .media, dedicated
//!   harnessStorageClassName: standard-rwo                 # dedicated only
//!   gatewayNodeSelector: {pool: control}                  # optional
//!   nodeSelector: {pool: sandbox}                         # optional; Harness and embedded Pods
//!   scratchVolumes:                                       # optional; dedicated only
//!     - namespaceId: acme
//!       agentId: main
//!       namespace: gatehouse-acme
//!       claimName: main-scratch
//!       claimUid: 3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11
//!   workerCapacity: 8                                     # optional; native topologies, 1..1024
//!   resources:                                            # optional; see crate::resources
//!     gateway: {requests: {cpu: 250m, memory: 512Mi}, limits: {cpu: "2", memory: 2Gi}}
//!     harness: {limits: {memory: 8Gi}}                    # `embedded: {...}` for embedded
//! model:                                                  # the Harness only
//!   api: openai-responses                                 # optional: openai-responses | openai-chat
//!   endpoint: https://api.openai.com/v1
//!   name: gpt-5                                           # no ':'
//!   credentialSecret: {name: model-credential, key: apiKey}
//!   egressCidrs: ["0.0.0.0/0"]
//! memory:                                                 # the Gateway only
//!   embedder: local                                       # local | openai | none
//! gateway:
//!   operatorTokenSecret: {name: gatehouse-operator, key: token}
//!   operatorNamespaceLabels: {kubernetes.io/metadata.name: operators}
//!   channelSecrets: []                                    # optional: [{env, name, key}]
//!   egressCidrs: []                                       # optional, port 443
//!   replicas: 1                                           # optional, 1..16, default 1; more
//!                                                         # than 1: dedicated, store and media
//!   leaseSeconds: 5                                       # optional, 1..300; dedicated only
//!   store:                                                # optional; default SQLite on the claim
//!     url: postgres://gatehouse@db.internal:5432/gatehouse?sslmode=verify-full   # no password
//!     passwordSecret: {name: main-postgres, key: password}  # optional; PGPASSWORD
//!     egressCidrs: [10.20.0.0/16]                         # the URL's port (default 5432)
//!   media:                                                # optional; default the claim
//!     url: s3://gatehouse-media/main
//!     endpoint: https://minio.storage.svc:9000            # optional; GATEHOUSE_S3_ENDPOINT
//!     region: eu-west-1                                   # optional; GATEHOUSE_S3_REGION
//!     pathStyle: true                                     # optional; GATEHOUSE_S3_PATH_STYLE
//!     accessKeyIdSecret: {name: main-s3, key: accessKeyId}          # optional, with the next
//!     secretAccessKeySecret: {name: main-s3, key: secretAccessKey}
//!     egressCidrs: [0.0.0.0/0]                            # the endpoint's port (default 443)
//! harness:                                                # dedicated only
//!   setupCodeSecret: {name: main-setup-code, key: setupCode}   # one node host (a Deployment)
//!   # or several node hosts (a StatefulSet, one claim each), each with its own setup code:
//!   # nodes:
//!   #   - setupCodeSecret: {name: main-node-0, key: setupCode}
//!   #   - setupCodeSecret: {name: main-node-1, key: setupCode}
//! ```
//!
//! A dedicated Gateway with both `gateway.store` and `gateway.media` keeps nothing that must
//! survive its Pod, so it gets no claim (and takes no `runtime.gatewayStorageClassName`); the
//! embedded Pod keeps its claim for the Harness. Credentials are only ever Secret references.
//!
//! `gateway.replicas` (default [`DEFAULT_GATEWAY_REPLICAS`], at most [`MAX_GATEWAY_REPLICAS`])
//! runs that many Gateway replicas. More than one needs a dedicated topology with both
//! `gateway.store` and `gateway.media`: replicas share state only through PostgreSQL and S3,
//! and a Gateway claim is ReadWriteOnce. `gateway.leaseSeconds` becomes the Gateway's
//! `--lease-seconds` (1 to [`MAX_LEASE_SECONDS`]; the Gateway's default when left out).
//!
//! Parsing is strict: an unknown key, a value of the wrong type, a missing required key or a value
//! the topology refuses is an error that names the dotted key path.

use gatehouse_protocol::runtime::RuntimeKind;
use std::collections::BTreeMap;
use std::net::IpAddr;

use serde::Deserialize;
use sha2::Digest;
use sha2::Sha256;

use crate::canonical;
use crate::error::DeployError;
use crate::error::Result;
use crate::strict;

/// How the agent's Gateway and Harness are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum Topology {
    /// One Pod runs both roles over an in-process link.
    #[serde(rename = "embedded")]
    Embedded,
    /// Separate Gateway and Harness Pods; the Harness runs native workers.
    #[serde(rename = "dedicated-native")]
    DedicatedNative,
    /// Separate Gateway and Harness Pods; the Harness runs the Codex app-server.
    #[serde(rename = "dedicated-codex")]
    DedicatedCodex,
}

impl Topology {
    /// Returns the name used in installation files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Embedded => "embedded",
            Self::DedicatedNative => "dedicated-native",
            Self::DedicatedCodex => "dedicated-codex",
        }
    }

    /// Returns whether the Gateway and the Harness run as separate Deployments.
    pub fn is_dedicated(self) -> bool {
        match self {
            Self::Embedded => false,
            Self::DedicatedNative | Self::DedicatedCodex => true,
        }
    }

    /// Returns the Harness runtime name passed to the processes (`native` or `codex`).
    pub fn runtime(self) -> &'static str {
        match self {
            Self::Embedded | Self::DedicatedNative => RuntimeKind::Native.as_str(),
            Self::DedicatedCodex => RuntimeKind::Codex.as_str(),
        }
    }
}

/// A validated installation file.
///
/// The only constructor is [`Installation::from_yaml`], so every value of this type passed the
/// schema and the topology rules, including the exact scratch-binding match.
#[derive(Debug, Clone)]
pub struct Installation {
    pub(crate) spec: InstallationSpec,
    revision: String,
    agent_hash: String,
}

impl Installation {
    /// Parses and validates an installation file.
    ///
    /// # Errors
    ///
    /// - [`DeployError::Yaml`] when the text is not one YAML document;
    /// - [`DeployError::Schema`] for a missing key or a wrong type;
    /// - [`DeployError::UnknownKey`] for a key the schema does not define;
    /// - [`DeployError::InvalidValue`] for a value the topology or Kubernetes refuses;
    /// - [`DeployError::ScratchBindingMismatch`] for a scratch binding of another agent.
    pub fn from_yaml(text: &str) -> Result<Self> {
        let documents: Vec<serde_json::Value> =
            serde_saphyr::from_multiple(text).map_err(|err| DeployError::Yaml {
                message: err.to_string(),
            })?;
        let value = match <[serde_json::Value; 1]>::try_from(documents) {
            Ok([value]) => value,
            Err(documents) => {
                return Err(DeployError::Yaml {
                    message: format!("expected one document, found {}", documents.len()),
                });
            }
        };
        if !value.is_object() {
            return Err(DeployError::Schema {
                path: String::new(),
                message: String::from("expected a mapping"),
            });
        }
        let decoded = strict::decode::<InstallationSpec>(&value);
        let spec = match decoded.result {
            Ok(spec) => spec,
            Err(err) => {
                return Err(DeployError::Schema {
                    path: err.path().to_owned(),
                    message: err.message().to_owned(),
                });
            }
        };
        if let Some(path) = decoded.unknown_keys.into_iter().next() {
            return Err(DeployError::UnknownKey { path });
        }
        spec.validate()?;
        let canonical_json = canonical::to_json_string(&value);
        let revision = short_sha256(canonical_json.as_bytes());
        let agent_hash = short_sha256(spec.agent_id.as_bytes());
        Ok(Self {
            spec,
            revision,
            agent_hash,
        })
    }

    /// Returns the agent id.
    pub fn agent_id(&self) -> &str {
        &self.spec.agent_id
    }

    /// Returns the Kubernetes namespace the objects are rendered into.
    pub fn namespace(&self) -> &str {
        &self.spec.namespace
    }

    /// Returns the topology.
    pub fn topology(&self) -> Topology {
        self.spec.topology
    }

    /// Returns the revision: the first 12 hex digits of the SHA-256 of the installation in
    /// canonical JSON (sorted keys), so formatting and comments do not change it.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// Returns the agent hash: the first 12 hex digits of the SHA-256 of the agent id.
    pub fn agent_hash(&self) -> &str {
        &self.agent_hash
    }
}

/// Returns the first 12 hex digits of the SHA-256 of `bytes`.
fn short_sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut text = hex::encode(digest);
    text.truncate(12);
    text
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct InstallationSpec {
    pub(crate) agent_id: String,
    pub(crate) namespace_id: String,
    pub(crate) namespace: String,
    pub(crate) topology: Topology,
    pub(crate) images: Images,
    pub(crate) runtime: RuntimeSettings,
    pub(crate) model: ModelSettings,
    pub(crate) memory: MemorySettings,
    pub(crate) gateway: GatewaySettings,
    #[serde(default)]
    pub(crate) harness: Option<HarnessSettings>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Images {
    pub(crate) gateway: String,
    #[serde(default)]
    pub(crate) harness: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuntimeSettings {
    #[serde(default)]
    pub(crate) gateway_storage_class_name: Option<String>,
    #[serde(default)]
    pub(crate) harness_storage_class_name: Option<String>,
    #[serde(default)]
    pub(crate) node_selector: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub(crate) gateway_node_selector: Option<BTreeMap<String, String>>,
    #[serde(default)]
    pub(crate) scratch_volumes: Option<Vec<ScratchVolumeBinding>>,
    /// The native worker slots of the Harness (`--capacity`).
    #[serde(default)]
    pub(crate) worker_capacity: Option<u32>,
    /// Requests and limits over the defaults of [`crate::resources`].
    #[serde(default)]
    pub(crate) resources: Option<crate::resources::ResourceSettings>,
}

/// An operator-owned scratch claim bound to exactly one agent.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ScratchVolumeBinding {
    pub(crate) namespace_id: String,
    pub(crate) agent_id: String,
    pub(crate) namespace: String,
    pub(crate) claim_name: String,
    pub(crate) claim_uid: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ModelSettings {
    #[serde(default)]
    pub(crate) api: Option<ModelApi>,
    pub(crate) endpoint: String,
    pub(crate) name: String,
    pub(crate) credential_secret: SecretKeyRef,
    pub(crate) egress_cidrs: Vec<String>,
}

impl ModelSettings {
    /// Returns the model API, `openai-responses` when the file names none.
    pub(crate) fn api(&self) -> ModelApi {
        self.api.unwrap_or(ModelApi::OpenAiResponses)
    }
}

/// The wire API of the model endpoint: the first part of the node's `--model API:URL:MODEL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum ModelApi {
    /// The OpenAI Responses API.
    #[serde(rename = "openai-responses")]
    OpenAiResponses,
    /// The OpenAI Chat Completions API.
    #[serde(rename = "openai-chat")]
    OpenAiChat,
}

impl ModelApi {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::OpenAiResponses => "openai-responses",
            Self::OpenAiChat => "openai-chat",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum Embedder {
    #[serde(rename = "local")]
    Local,
    #[serde(rename = "openai")]
    OpenAi,
    #[serde(rename = "none")]
    None,
}

impl Embedder {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::OpenAi => "openai",
            Self::None => "none",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MemorySettings {
    pub(crate) embedder: Embedder,
    #[serde(default)]
    pub(crate) endpoint: Option<String>,
    #[serde(default)]
    pub(crate) model: Option<String>,
    #[serde(default)]
    pub(crate) credential_secret: Option<SecretKeyRef>,
    #[serde(default)]
    pub(crate) egress_cidrs: Option<Vec<String>>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct GatewaySettings {
    pub(crate) operator_token_secret: SecretKeyRef,
    pub(crate) operator_namespace_labels: BTreeMap<String, String>,
    #[serde(default)]
    pub(crate) channel_secrets: Option<Vec<ChannelSecret>>,
    #[serde(default)]
    pub(crate) egress_cidrs: Option<Vec<String>>,
    #[serde(default)]
    pub(crate) store: Option<StoreSettings>,
    #[serde(default)]
    pub(crate) media: Option<MediaSettings>,
    /// The number of Gateway replicas; [`DEFAULT_GATEWAY_REPLICAS`] when left out.
    #[serde(default)]
    pub(crate) replicas: Option<u32>,
    /// The Gateway's `--lease-seconds`; the Gateway's own default when left out.
    #[serde(default)]
    pub(crate) lease_seconds: Option<u32>,
}

/// The number of Gateway replicas when `gateway.replicas` is left out.
pub const DEFAULT_GATEWAY_REPLICAS: u32 = 1;

/// The largest `gateway.replicas`.
pub const MAX_GATEWAY_REPLICAS: u32 = 16;

/// The largest `gateway.leaseSeconds`, as `gatehouse gateway --lease-seconds`.
pub const MAX_LEASE_SECONDS: u32 = 300;

impl GatewaySettings {
    /// Returns the number of Gateway replicas: `gateway.replicas`, else the default.
    pub(crate) fn replicas(&self) -> u32 {
        self.replicas.unwrap_or(DEFAULT_GATEWAY_REPLICAS)
    }
}

/// `gateway.store`: the Gateway state in PostgreSQL.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoreSettings {
    pub(crate) url: String,
    #[serde(default)]
    pub(crate) password_secret: Option<SecretKeyRef>,
    pub(crate) egress_cidrs: Vec<String>,
}

impl StoreSettings {
    /// Returns the parsed URL; [`InstallationSpec::validate`] checked that it is PostgreSQL.
    pub(crate) fn location(&self) -> Option<gatehouse_store::location::PostgresLocation> {
        match self.url.parse() {
            Ok(gatehouse_store::location::StoreLocation::Remote(location)) => Some(location),
            Ok(gatehouse_store::location::StoreLocation::Local(_)) | Err(_) => None,
        }
    }

    /// Returns the port the Gateway dials: the URL's, else PostgreSQL's 5432.
    pub(crate) fn port(&self) -> u16 {
        self.location()
            .and_then(|location| url::Url::parse(location.url()).ok()?.port())
            .unwrap_or(5432)
    }

    /// Returns the variable the password goes into: the one the URL's `password-env` names,
    /// else `PGPASSWORD`.
    pub(crate) fn password_env(&self) -> String {
        self.location()
            .and_then(|location| location.password_env().map(str::to_owned))
            .unwrap_or_else(|| String::from("PGPASSWORD"))
    }
}

/// `gateway.media`: the media store on S3.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MediaSettings {
    pub(crate) url: String,
    #[serde(default)]
    pub(crate) endpoint: Option<String>,
    #[serde(default)]
    pub(crate) region: Option<String>,
    #[serde(default)]
    pub(crate) path_style: Option<bool>,
    #[serde(default)]
    pub(crate) access_key_id_secret: Option<SecretKeyRef>,
    #[serde(default)]
    pub(crate) secret_access_key_secret: Option<SecretKeyRef>,
    pub(crate) egress_cidrs: Vec<String>,
}

impl MediaSettings {
    /// Returns the port the Gateway dials: the endpoint's, else HTTPS's 443.
    pub(crate) fn port(&self) -> u16 {
        self.endpoint.as_deref().and_then(url_port).unwrap_or(443)
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ChannelSecret {
    pub(crate) env: String,
    pub(crate) name: String,
    pub(crate) key: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct HarnessSettings {
    /// One node host (a Deployment): the Secret holding its setup code.
    #[serde(default)]
    pub(crate) setup_code_secret: Option<SecretKeyRef>,
    /// Several node hosts (a StatefulSet, one claim each): one entry per node, in Pod order.
    #[serde(default)]
    pub(crate) nodes: Option<Vec<NodeSettings>>,
}

/// One node host of a StatefulSet Harness.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct NodeSettings {
    /// The Secret holding this node's setup code; each node enrolls with its own.
    pub(crate) setup_code_secret: SecretKeyRef,
}

/// The most node hosts one installation renders.
pub const MAX_HARNESS_NODES: usize = 64;

impl HarnessSettings {
    /// Returns each node's setup-code Secret, in Pod order: one for `setupCodeSecret`, one per
    /// entry of `nodes`.
    pub(crate) fn setup_code_secrets(&self) -> Vec<&SecretKeyRef> {
        match &self.nodes {
            Some(nodes) => nodes.iter().map(|node| &node.setup_code_secret).collect(),
            None => self.setup_code_secret.iter().collect(),
        }
    }

    /// Checks that exactly one of `setupCodeSecret` and `nodes` is set, that `nodes` holds 1 to
    /// [`MAX_HARNESS_NODES`] entries, and that no two nodes share a setup code (a code enrolls
    /// one node only, so a second node on it could never enroll).
    fn check(&self) -> Result<()> {
        match (&self.setup_code_secret, &self.nodes) {
            (Some(secret), None) => check_secret_ref("harness.setupCodeSecret", secret),
            (None, None) => Err(DeployError::Schema {
                path: String::from("harness.setupCodeSecret"),
                message: String::from(
                    "missing required key: give harness.setupCodeSecret (one node) or harness.nodes (one entry per node)",
                ),
            }),
            (Some(_), Some(_)) => Err(invalid(
                "harness.nodes",
                "give either harness.setupCodeSecret (one node) or harness.nodes (one entry per node), not both",
            )),
            (None, Some(nodes)) => {
                if nodes.is_empty() || nodes.len() > MAX_HARNESS_NODES {
                    return Err(invalid(
                        "harness.nodes",
                        format!(
                            "must list 1 to {MAX_HARNESS_NODES} nodes, found {}",
                            nodes.len()
                        ),
                    ));
                }
                for (index, node) in nodes.iter().enumerate() {
                    let base = strict::child_index("harness.nodes", index);
                    let path = strict::child_key(&base, "setupCodeSecret");
                    check_secret_ref(&path, &node.setup_code_secret)?;
                    let secret = &node.setup_code_secret;
                    if nodes[..index].iter().any(|earlier| {
                        earlier.setup_code_secret.name == secret.name
                            && earlier.setup_code_secret.key == secret.key
                    }) {
                        return Err(invalid(
                            &path,
                            "another node already uses this Secret key; a setup code enrolls one node only",
                        ));
                    }
                }
                Ok(())
            }
        }
    }

    /// Returns whether the Harness renders as a StatefulSet (`nodes` was given).
    pub(crate) fn is_stateful_set(&self) -> bool {
        self.nodes.is_some()
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SecretKeyRef {
    pub(crate) name: String,
    pub(crate) key: String,
}

/// The longest agent id: object names append suffixes such as `-gateway` to it.
const MAX_AGENT_ID_LEN: usize = 40;

impl InstallationSpec {
    /// Checks the rules that the schema alone cannot express.
    fn validate(&self) -> Result<()> {
        let dedicated = self.topology.is_dedicated();
        check_dns_label("agentId", &self.agent_id, MAX_AGENT_ID_LEN)?;
        check_non_empty("namespaceId", &self.namespace_id)?;
        check_dns_label("namespace", &self.namespace, 63)?;

        check_image("images.gateway", &self.images.gateway)?;
        match (dedicated, &self.images.harness) {
            (true, Some(image)) => check_image("images.harness", image)?,
            (true, None) => return Err(missing("images.harness")),
            (false, Some(_)) => return Err(embedded_refuses("images.harness")),
            (false, None) => {}
        }

        self.check_store_and_media()?;
        // Before the storage class: several replicas without both external stores are refused
        // for what they lack, not for the claim such a Gateway would need.
        self.check_gateway_replicas()?;
        match (
            self.has_gateway_claim(),
            &self.runtime.gateway_storage_class_name,
        ) {
            (true, Some(class)) => check_dns_subdomain("runtime.gatewayStorageClassName", class)?,
            (true, None) => return Err(missing("runtime.gatewayStorageClassName")),
            (false, Some(_)) => {
                return Err(invalid(
                    "runtime.gatewayStorageClassName",
                    "a dedicated Gateway with gateway.store and gateway.media has no claim; \
                     remove this key",
                ));
            }
            (false, None) => {}
        }
        match (dedicated, &self.runtime.harness_storage_class_name) {
            (true, Some(class)) => check_dns_subdomain("runtime.harnessStorageClassName", class)?,
            (true, None) => return Err(missing("runtime.harnessStorageClassName")),
            (false, Some(_)) => return Err(embedded_refuses("runtime.harnessStorageClassName")),
            (false, None) => {}
        }
        if let Some(selector) = &self.runtime.node_selector {
            check_labels("runtime.nodeSelector", selector)?;
        }
        if let Some(selector) = &self.runtime.gateway_node_selector {
            if !dedicated {
                return Err(embedded_refuses("runtime.gatewayNodeSelector"));
            }
            check_labels("runtime.gatewayNodeSelector", selector)?;
        }
        if let Some(bindings) = &self.runtime.scratch_volumes {
            if !dedicated && !bindings.is_empty() {
                return Err(embedded_refuses("runtime.scratchVolumes"));
            }
            self.check_scratch_bindings(bindings)?;
        }

        crate::resources::check(
            self.runtime.resources.as_ref(),
            self.runtime.worker_capacity,
            self.topology,
        )?;

        check_url("model.endpoint", &self.model.endpoint)?;
        check_non_empty("model.name", &self.model.name)?;
        // The node's `--model API:URL:MODEL` ends at the last ':', because the URL has colons of
        // its own; a model name with a colon would be split in the wrong place.
        if self.model.name.contains(':') {
            return Err(invalid(
                "model.name",
                format!(
                    "{:?} contains ':', which the node's --model API:URL:MODEL cannot carry",
                    self.model.name
                ),
            ));
        }
        check_secret_ref("model.credentialSecret", &self.model.credential_secret)?;
        check_cidrs("model.egressCidrs", &self.model.egress_cidrs)?;

        self.check_memory()?;

        check_secret_ref(
            "gateway.operatorTokenSecret",
            &self.gateway.operator_token_secret,
        )?;
        if self.gateway.operator_namespace_labels.is_empty() {
            return Err(invalid(
                "gateway.operatorNamespaceLabels",
                "must name at least one label, or the Gateway accepts no traffic",
            ));
        }
        check_labels(
            "gateway.operatorNamespaceLabels",
            &self.gateway.operator_namespace_labels,
        )?;
        if let Some(channels) = &self.gateway.channel_secrets {
            check_channel_secrets(channels)?;
        }
        // An empty list is allowed here and means no extra egress; the renderer never emits a
        // rule without peers, which Kubernetes would read as "every destination".
        if let Some(cidrs) = self
            .gateway
            .egress_cidrs
            .as_deref()
            .filter(|cidrs| !cidrs.is_empty())
        {
            check_cidrs("gateway.egressCidrs", cidrs)?;
        }

        match (dedicated, &self.harness) {
            (true, Some(harness)) => {
                harness.check()?;
                let several = harness.setup_code_secrets().len() > 1;
                if several && self.topology == Topology::DedicatedCodex {
                    return Err(invalid(
                        "harness.nodes",
                        "the codex runtime runs on one node host, whose Codex home holds its threads; list one node, or use dedicated-native",
                    ));
                }
                if several && self.scratch_binding().is_some() {
                    return Err(invalid(
                        "runtime.scratchVolumes",
                        "a scratch claim is mounted by one node host; with several harness.nodes leave it out",
                    ));
                }
            }
            (true, None) => return Err(missing("harness")),
            (false, Some(_)) => return Err(embedded_refuses("harness")),
            (false, None) => {}
        }
        Ok(())
    }

    /// Returns whether the Gateway's state needs a claim: always for the embedded Pod (it holds
    /// the Harness too), and for a dedicated Gateway unless both its store and its media are
    /// external.
    pub(crate) fn has_gateway_claim(&self) -> bool {
        !self.topology.is_dedicated()
            || self.gateway.store.is_none()
            || self.gateway.media.is_none()
    }

    /// Checks `gateway.replicas` and `gateway.leaseSeconds`: both in range, several replicas
    /// only for a dedicated Gateway with both its store and its media external (replicas share
    /// state only through PostgreSQL and S3, and a Gateway claim is ReadWriteOnce), and a lease
    /// only for a dedicated Gateway (the embedded Pod's `gatehouse up` takes none).
    fn check_gateway_replicas(&self) -> Result<()> {
        let gateway = &self.gateway;
        if let Some(seconds) = gateway.lease_seconds {
            if !self.topology.is_dedicated() {
                return Err(invalid(
                    "gateway.leaseSeconds",
                    "the embedded Pod runs one Gateway, which takes no lease setting; remove this key",
                ));
            }
            if !(1..=MAX_LEASE_SECONDS).contains(&seconds) {
                return Err(invalid(
                    "gateway.leaseSeconds",
                    format!("{seconds} is not between 1 and {MAX_LEASE_SECONDS}"),
                ));
            }
        }
        let replicas = gateway.replicas();
        if !(1..=MAX_GATEWAY_REPLICAS).contains(&replicas) {
            return Err(invalid(
                "gateway.replicas",
                format!("{replicas} is not between 1 and {MAX_GATEWAY_REPLICAS}"),
            ));
        }
        if replicas == 1 {
            return Ok(());
        }
        if !self.topology.is_dedicated() {
            return Err(invalid(
                "gateway.replicas",
                "the embedded topology runs one Pod, which holds the Harness too; use \
                 dedicated-native or dedicated-codex for several Gateway replicas, or set 1",
            ));
        }
        let lacking = match (&gateway.store, &gateway.media) {
            (Some(_), Some(_)) => return Ok(()),
            (None, Some(_)) => "gateway.store",
            (Some(_), None) => "gateway.media",
            (None, None) => "gateway.store and gateway.media",
        };
        Err(invalid(
            "gateway.replicas",
            format!(
                "several Gateway replicas share state only through PostgreSQL and S3, and a \
                 Gateway claim is ReadWriteOnce; set {lacking}, or set 1"
            ),
        ))
    }

    /// Checks `gateway.store` and `gateway.media`: a PostgreSQL URL without a password, an S3
    /// URL the media store takes, and credentials only as Secret references.
    fn check_store_and_media(&self) -> Result<()> {
        if let Some(store) = &self.gateway.store {
            match store
                .url
                .parse::<gatehouse_store::location::StoreLocation>()
            {
                Ok(gatehouse_store::location::StoreLocation::Remote(_)) => {}
                Ok(gatehouse_store::location::StoreLocation::Local(_)) => {
                    return Err(invalid(
                        "gateway.store.url",
                        "SQLite lives on the Gateway claim; remove gateway.store to use it",
                    ));
                }
                // The store's own refusal: it shows a literal password redacted.
                Err(error) => return Err(invalid("gateway.store.url", error.to_string())),
            }
            if let Some(secret) = &store.password_secret {
                check_secret_ref("gateway.store.passwordSecret", secret)?;
                let password_env = store.password_env();
                let taken = password_env != "PGPASSWORD"
                    && RESERVED_ENV_PREFIXES
                        .iter()
                        .any(|prefix| password_env.starts_with(prefix))
                    || self
                        .gateway
                        .channel_secrets
                        .iter()
                        .flatten()
                        .any(|channel| channel.env == password_env);
                if taken {
                    return Err(invalid(
                        "gateway.store.url",
                        format!(
                            "password-env={password_env} names a variable the renderer or a \
                             channel secret sets; name another one"
                        ),
                    ));
                }
            }
            check_cidrs("gateway.store.egressCidrs", &store.egress_cidrs)?;
        }
        if let Some(media) = &self.gateway.media {
            match media.url.parse::<gatehouse_media::MediaLocation>() {
                Ok(gatehouse_media::MediaLocation::Remote(_)) => {}
                Ok(gatehouse_media::MediaLocation::Local(_)) => {
                    return Err(invalid(
                        "gateway.media.url",
                        "local media lives on the Gateway claim; remove gateway.media to use it",
                    ));
                }
                Err(error) => {
                    return Err(invalid(
                        "gateway.media.url",
                        format!("{error} [{}]", error.code()),
                    ));
                }
            }
            if let Some(endpoint) = &media.endpoint {
                check_url("gateway.media.endpoint", endpoint)?;
            }
            if let Some(region) = &media.region {
                check_non_empty("gateway.media.region", region)?;
            }
            match (&media.access_key_id_secret, &media.secret_access_key_secret) {
                (Some(id), Some(secret)) => {
                    check_secret_ref("gateway.media.accessKeyIdSecret", id)?;
                    check_secret_ref("gateway.media.secretAccessKeySecret", secret)?;
                }
                (None, None) => {}
                (Some(_), None) => return Err(missing("gateway.media.secretAccessKeySecret")),
                (None, Some(_)) => return Err(missing("gateway.media.accessKeyIdSecret")),
            }
            check_cidrs("gateway.media.egressCidrs", &media.egress_cidrs)?;
        }
        Ok(())
    }

    fn check_memory(&self) -> Result<()> {
        let memory = &self.memory;
        match memory.embedder {
            Embedder::OpenAi => {
                let Some(endpoint) = &memory.endpoint else {
                    return Err(missing("memory.endpoint"));
                };
                check_url("memory.endpoint", endpoint)?;
                let Some(model) = &memory.model else {
                    return Err(missing("memory.model"));
                };
                check_non_empty("memory.model", model)?;
                let Some(secret) = &memory.credential_secret else {
                    return Err(missing("memory.credentialSecret"));
                };
                check_secret_ref("memory.credentialSecret", secret)?;
                let Some(cidrs) = &memory.egress_cidrs else {
                    return Err(missing("memory.egressCidrs"));
                };
                check_cidrs("memory.egressCidrs", cidrs)?;
            }
            Embedder::Local | Embedder::None => {
                let remote_only = [
                    ("memory.endpoint", memory.endpoint.is_some()),
                    ("memory.model", memory.model.is_some()),
                    (
                        "memory.credentialSecret",
                        memory.credential_secret.is_some(),
                    ),
                    ("memory.egressCidrs", memory.egress_cidrs.is_some()),
                ];
                for (path, present) in remote_only {
                    if present {
                        return Err(invalid(
                            path,
                            format!(
                                "only the openai embedder takes this key, not {:?}",
                                memory.embedder.as_str()
                            ),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Checks that every binding names exactly this agent, in this namespace.
    fn check_scratch_bindings(&self, bindings: &[ScratchVolumeBinding]) -> Result<()> {
        for (binding_idx, binding) in bindings.iter().enumerate() {
            let base = strict::child_index("runtime.scratchVolumes", binding_idx);
            let exact_fields = [
                ("namespaceId", &self.namespace_id, &binding.namespace_id),
                ("agentId", &self.agent_id, &binding.agent_id),
                ("namespace", &self.namespace, &binding.namespace),
            ];
            for (field, expected, actual) in exact_fields {
                if expected != actual {
                    return Err(DeployError::ScratchBindingMismatch {
                        path: strict::child_key(&base, field),
                        expected: expected.clone(),
                        actual: actual.clone(),
                    });
                }
            }
            check_dns_subdomain(&strict::child_key(&base, "claimName"), &binding.claim_name)?;
            check_uuid(&strict::child_key(&base, "claimUid"), &binding.claim_uid)?;
            if binding_idx > 0 {
                return Err(invalid(
                    &base,
                    "a second scratch binding for the same agent; an agent mounts at most one scratch claim",
                ));
            }
        }
        Ok(())
    }

    /// Returns the scratch binding of this agent, if there is one.
    pub(crate) fn scratch_binding(&self) -> Option<&ScratchVolumeBinding> {
        self.runtime.scratch_volumes.as_deref()?.first()
    }
}

/// Returns the port of an `http` or `https` URL: the explicit one, or the scheme's default.
///
/// Returns `None` when `url` is not an `http` or `https` URL with a host.
pub(crate) fn url_port(url: &str) -> Option<u16> {
    let (default_port, rest) = match url.split_once("://") {
        Some(("https", rest)) => (443, rest),
        Some(("http", rest)) => (80, rest),
        Some(_) | None => return None,
    };
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit('@').next()?;
    let (host, port) = match host_port.strip_prefix('[') {
        Some(bracketed) => {
            let (host, after) = bracketed.split_once(']')?;
            match after {
                "" => (host, None),
                after => (host, Some(after.strip_prefix(':')?)),
            }
        }
        None => match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        },
    };
    if host.is_empty() {
        return None;
    }
    match port {
        None => Some(default_port),
        Some(port) => port.parse::<u16>().ok().filter(|port| *port != 0),
    }
}

fn missing(path: &str) -> DeployError {
    DeployError::Schema {
        path: path.to_owned(),
        message: String::from("missing required key"),
    }
}

fn embedded_refuses(path: &str) -> DeployError {
    invalid(
        path,
        "the embedded topology has no separate Harness; remove this key",
    )
}

fn invalid(path: &str, reason: impl Into<String>) -> DeployError {
    DeployError::InvalidValue {
        path: path.to_owned(),
        reason: reason.into(),
    }
}

fn check_non_empty(path: &str, value: &str) -> Result<()> {
    match value.trim().is_empty() {
        true => Err(invalid(path, "must not be empty")),
        false => Ok(()),
    }
}

/// Checks an RFC 1123 label: lowercase alphanumerics and `-`, alphanumeric at both ends.
fn check_dns_label(path: &str, value: &str, max_len: usize) -> Result<()> {
    let valid_chars = value
        .bytes()
        .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-');
    let valid_ends = !value.starts_with('-') && !value.ends_with('-');
    match !value.is_empty() && value.len() <= max_len && valid_chars && valid_ends {
        true => Ok(()),
        false => Err(invalid(
            path,
            format!(
                "{value:?} is not a DNS label (1 to {max_len} lowercase letters, digits or '-', starting and ending with a letter or digit)"
            ),
        )),
    }
}

/// Checks an RFC 1123 subdomain: dot-separated labels, at most 253 characters.
fn check_dns_subdomain(path: &str, value: &str) -> Result<()> {
    let valid = !value.is_empty()
        && value.len() <= 253
        && value.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'-')
        });
    match valid {
        true => Ok(()),
        false => Err(invalid(
            path,
            format!("{value:?} is not a DNS subdomain name"),
        )),
    }
}

fn check_image(path: &str, value: &str) -> Result<()> {
    match !value.is_empty() && !value.chars().any(char::is_whitespace) {
        true => Ok(()),
        false => Err(invalid(
            path,
            format!("{value:?} is not an image reference"),
        )),
    }
}

fn check_url(path: &str, value: &str) -> Result<()> {
    match url_port(value) {
        Some(_) => Ok(()),
        None => Err(invalid(
            path,
            format!("{value:?} is not an http or https URL"),
        )),
    }
}

fn check_secret_ref(path: &str, secret: &SecretKeyRef) -> Result<()> {
    check_dns_subdomain(&strict::child_key(path, "name"), &secret.name)?;
    let valid_key = !secret.key.is_empty()
        && secret.key.len() <= 253
        && secret
            .key
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
    match valid_key {
        true => Ok(()),
        false => Err(invalid(
            &strict::child_key(path, "key"),
            format!("{:?} is not a Secret key", secret.key),
        )),
    }
}

fn check_cidrs(path: &str, cidrs: &[String]) -> Result<()> {
    if cidrs.is_empty() {
        return Err(invalid(path, "must list at least one CIDR"));
    }
    for (cidr_idx, cidr) in cidrs.iter().enumerate() {
        let valid = match cidr.split_once('/') {
            Some((address, prefix)) => match (address.parse::<IpAddr>(), prefix.parse::<u8>()) {
                (Ok(IpAddr::V4(_)), Ok(prefix)) => prefix <= 32,
                (Ok(IpAddr::V6(_)), Ok(prefix)) => prefix <= 128,
                (Ok(_), Err(_)) | (Err(_), _) => false,
            },
            None => false,
        };
        if !valid {
            return Err(invalid(
                &strict::child_index(path, cidr_idx),
                format!("{cidr:?} is not a CIDR such as 10.0.0.0/8"),
            ));
        }
    }
    Ok(())
}

/// Checks label keys and values loosely: non-empty keys, no whitespace, values of at most 63
/// characters.
fn check_labels(path: &str, labels: &BTreeMap<String, String>) -> Result<()> {
    for (key, value) in labels {
        let key_ok = !key.is_empty() && key.len() <= 316 && !key.chars().any(char::is_whitespace);
        let value_ok = value.len() <= 63
            && value
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.'));
        if !key_ok || !value_ok {
            return Err(invalid(
                &strict::child_key(path, key),
                format!("{key:?}: {value:?} is not a valid Kubernetes label"),
            ));
        }
    }
    Ok(())
}

/// Environment names the renderer sets itself, which a channel secret must not override. The
/// model key variable is among them: the embedded Pod carries both, and a Gateway must never
/// hold a variable of that name.
const RESERVED_ENV_PREFIXES: [&str; 6] = [
    "GATEHOUSE_",
    "CODEX_",
    "TMPDIR",
    crate::render::MODEL_KEY_ENV,
    "AWS_",
    "PGPASSWORD",
];

fn check_channel_secrets(channels: &[ChannelSecret]) -> Result<()> {
    let mut seen = Vec::with_capacity(channels.len());
    for (channel_idx, channel) in channels.iter().enumerate() {
        let base = strict::child_index("gateway.channelSecrets", channel_idx);
        let env_path = strict::child_key(&base, "env");
        let valid_env = channel
            .env
            .bytes()
            .next()
            .is_some_and(|first| first.is_ascii_uppercase() || first == b'_')
            && channel
                .env
                .bytes()
                .all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit() || byte == b'_');
        if !valid_env {
            return Err(invalid(
                &env_path,
                format!("{:?} is not an environment variable name", channel.env),
            ));
        }
        if RESERVED_ENV_PREFIXES
            .iter()
            .any(|prefix| channel.env.starts_with(prefix))
        {
            return Err(invalid(
                &env_path,
                format!(
                    "{:?} is reserved for settings the renderer sets",
                    channel.env
                ),
            ));
        }
        if seen.contains(&channel.env.as_str()) {
            return Err(invalid(
                &env_path,
                format!("{:?} is listed twice", channel.env),
            ));
        }
        seen.push(channel.env.as_str());
        check_secret_ref(
            &base,
            &SecretKeyRef {
                name: channel.name.clone(),
                key: channel.key.clone(),
            },
        )?;
    }
    Ok(())
}

/// Checks the canonical 8-4-4-4-12 form that Kubernetes uses for `metadata.uid`.
fn check_uuid(path: &str, value: &str) -> Result<()> {
    let groups: Vec<&str> = value.split('-').collect();
    let valid = groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(group, len)| {
            group.len() == len
                && group
                    .bytes()
                    .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
        });
    match valid {
        true => Ok(()),
        false => Err(invalid(
            path,
            format!("{value:?} is not a PersistentVolumeClaim metadata.uid (a lowercase UUID)"),
        )),
    }
}

#[cfg(test)]
#[path = "installation_tests.rs"]
mod tests;
