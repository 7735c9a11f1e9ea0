//! Rendering an [`Installation`] into Kubernetes objects.
//!
//! The objects are built as typed `k8s-openapi` values, converted to JSON with sorted keys and
//! written as YAML, so the same installation always gives byte-identical output. Before
//! [`render`] returns, the whole stream is parsed back through [`crate::manifest::parse_manifests`].
//!
//! Layout of the rendered objects, in apply order:
//!
//! | topology | objects |
//! |---|---|
//! | dedicated | ServiceAccounts `<agent>-gateway` and `<agent>-harness`; PVCs `gateway-state-<agent-hash>` (10Gi RWO; not rendered when `gateway.store` and `gateway.media` are both set) and `harness-state-<agent-hash>` (40Gi RWO); Service `<agent>-gateway`; NetworkPolicies `<agent>-default-deny`, `<agent>-gateway`, `<agent>-harness`; Deployments `<agent>-gateway` and `<agent>-harness` |
//! | dedicated, `harness.nodes` | as above, but no `harness-state-<agent-hash>` claim, and the PodDisruptionBudget `<agent>-harness` (at most one node host down at a time) and the StatefulSet `<agent>-harness` (one Pod and one claim `harness-state-<agent>-harness-<index>` per node) in place of the Harness Deployment |
//! | dedicated, `gateway.replicas` above 1 (with `gateway.store` and `gateway.media`, so no Gateway claim) | as above, and the PodDisruptionBudget `<agent>-gateway` (at most one replica down at a time) before the Gateway Deployment, which runs that many replicas with a rolling update and lets the replicas reach each other on [`GATEWAY_PORT`] |
//! | embedded | ServiceAccount `<agent>`; PVC `gateway-state-<agent-hash>` (10Gi RWO); Service `<agent>`; NetworkPolicies `<agent>-default-deny`, `<agent>-embedded`; Deployment `<agent>` |
//!
//! The Pods run the real commands, and nothing else:
//!
//! - the Gateway runs `gatehouse gateway`, configured through the variables the binary reads
//!   (`GATEHOUSE_STATE_DIR`, `GATEHOUSE_LISTEN`, `GATEHOUSE_PUBLIC_URL`, `GATEHOUSE_RUNTIME`,
//!   `GATEHOUSE_TOKEN`, and with `gateway.store` and `gateway.media` `GATEHOUSE_STORE`,
//!   `GATEHOUSE_MEDIA`, `GATEHOUSE_S3_*`, and the database password and S3 keys from Secrets
//!   only). Its one port, [`GATEWAY_PORT`], serves the operator API, `/healthz`,
//!   `/readyz`, `/metrics` and the node WebSocket `/node`. The memory embedder variables are read by the memory feature;
//!   `gateway.leaseSeconds` becomes `--lease-seconds`. With several replicas each Pod is a
//!   replica named after itself (`GATEHOUSE_REPLICA_ID`) and advertised at its Pod IP
//!   (`GATEHOUSE_ADVERTISE_URL`), where the other replicas call its `/internal/replica/...`
//!   routes; node hosts reach any replica through the Gateway Service;
//! - the Harness runs `gatehouse node` with every setting as a flag, and the model credential in
//!   the variable named by `--model-key-env` ([`MODEL_KEY_ENV`]). It listens on no port, so its
//!   probes run `gatehouse node health` in the container instead of calling HTTP;
//! - the embedded Pod runs `gatehouse up --data /var/lib/gatehouse` on [`GATEWAY_PORT`].

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::apps::v1::DeploymentSpec;
use k8s_openapi::api::apps::v1::DeploymentStrategy;
use k8s_openapi::api::apps::v1::RollingUpdateDeployment;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::apps::v1::StatefulSetPersistentVolumeClaimRetentionPolicy;
use k8s_openapi::api::apps::v1::StatefulSetSpec;
use k8s_openapi::api::apps::v1::StatefulSetUpdateStrategy;
use k8s_openapi::api::core::v1::Capabilities;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::api::core::v1::ContainerPort;
use k8s_openapi::api::core::v1::EmptyDirVolumeSource;
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::api::core::v1::EnvVarSource;
use k8s_openapi::api::core::v1::ExecAction;
use k8s_openapi::api::core::v1::HTTPGetAction;
use k8s_openapi::api::core::v1::KeyToPath;
use k8s_openapi::api::core::v1::ObjectFieldSelector;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
use k8s_openapi::api::core::v1::PersistentVolumeClaimVolumeSource;
use k8s_openapi::api::core::v1::PodSecurityContext;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::api::core::v1::Probe;
use k8s_openapi::api::core::v1::ProjectedVolumeSource;
use k8s_openapi::api::core::v1::SeccompProfile;
use k8s_openapi::api::core::v1::SecretKeySelector;
use k8s_openapi::api::core::v1::SecretProjection;
use k8s_openapi::api::core::v1::SecretVolumeSource;
use k8s_openapi::api::core::v1::SecurityContext;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::core::v1::ServicePort;
use k8s_openapi::api::core::v1::ServiceSpec;
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::api::core::v1::Volume;
use k8s_openapi::api::core::v1::VolumeMount;
use k8s_openapi::api::core::v1::VolumeProjection;
use k8s_openapi::api::core::v1::VolumeResourceRequirements;
use k8s_openapi::api::networking::v1::IPBlock;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::networking::v1::NetworkPolicyEgressRule;
use k8s_openapi::api::networking::v1::NetworkPolicyIngressRule;
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::api::networking::v1::NetworkPolicyPort;
use k8s_openapi::api::networking::v1::NetworkPolicySpec;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::canonical;
use crate::error::DeployError;
use crate::error::Result;
use crate::installation::Embedder;
use crate::installation::Installation;
use crate::installation::SecretKeyRef;
use crate::installation::Topology;
use crate::installation::url_port;
use crate::manifest;
use crate::manifest::Object;
use crate::resources;
use crate::resources::Group;
use crate::resources::Resolved;

/// The label naming the agent on every rendered object.
pub const LABEL_AGENT: &str = "gatehouse.dev/agent";
/// The label carrying the revision (see [`Installation::revision`]) on every rendered object.
pub const LABEL_REVISION: &str = "gatehouse.dev/revision";
/// The label naming the role (`gateway`, `harness`, `embedded` or `agent`) of every object.
pub const LABEL_ROLE: &str = "gatehouse.dev/role";
/// The annotation on the Harness Pod that records the scratch claim's `metadata.uid`.
pub const ANNOTATION_SCRATCH_CLAIM_UID: &str = "gatehouse.dev/scratch-claim-uid";
/// Where the Harness sees the operator-owned scratch claim.
pub const SCRATCH_MOUNT_PATH: &str = "/sandbox/scratch";
/// The uid and gid every container runs as.
pub const RUN_AS_ID: i64 = 10001;
/// The Gateway's only port. It serves the operator API (`/v1/...`), `/healthz`, `/readyz`,
/// `/metrics` and the node WebSocket `/node`; the Harness listens on no port at all.
pub const GATEWAY_PORT: i32 = 7420;
/// The variable that carries the model credential in the Harness (and the embedded Pod). The
/// node reads the key from the variable named by `--model-key-env`, never from argv.
pub const MODEL_KEY_ENV: &str = "OPENAI_API_KEY";

const GATEWAY_CLAIM_SIZE: &str = "10Gi";
const HARNESS_CLAIM_SIZE: &str = "40Gi";
/// The embedded Pod's `--data` directory; the Gateway and Harness roots are below it.
const DATA_ROOT: &str = "/var/lib/gatehouse";
const GATEWAY_ROOT: &str = "/var/lib/gatehouse/gateway";
/// The dedicated Gateway's `--state` directory. It is a child of the claim's mount, not the mount
/// itself, so the Gateway creates it and can set its mode to 0700.
const GATEWAY_STATE_DIR: &str = "/var/lib/gatehouse/gateway/state";
/// The node's `--root`.
const HARNESS_ROOT: &str = "/var/lib/gatehouse/harness";
/// The directories under the node root that live on the Harness claim, node identity first.
/// The node root itself is a per-Pod `emptyDir`, so the node can create `tmp/` there.
const HARNESS_SUBDIRS: [&str; 4] = ["node", "workspace", "codex-home", "sessions"];
const SETUP_CODE_DIR: &str = "/run/gatehouse/setup-code";
const SETUP_CODE_FILE: &str = "setup-code";
/// 0440: readable by the owner and the Pod's fsGroup, by nobody else.
const SETUP_CODE_MODE: i32 = 0o440;
const STORAGE_INIT_MOUNT: &str = "/storage";
/// The variable holding a StatefulSet Harness Pod's index, which picks its setup code.
const POD_INDEX_ENV: &str = "GATEHOUSE_POD_INDEX";
/// The variable holding a StatefulSet Harness Pod's name, the node's display name.
const POD_NAME_ENV: &str = "GATEHOUSE_POD_NAME";
/// The label Kubernetes (1.28 and later) sets on each StatefulSet Pod to its ordinal.
const POD_INDEX_FIELD: &str = "metadata.labels['apps.kubernetes.io/pod-index']";
/// The variable holding a Gateway replica's Pod IP, from which its advertise URL is built.
const POD_IP_ENV: &str = "GATEHOUSE_POD_IP";

/// The rendered objects of one installation.
#[derive(Debug, Clone)]
pub struct Rendered {
    revision: String,
    agent_hash: String,
    manifests: Vec<Manifest>,
}

impl Rendered {
    /// Returns the objects in apply order.
    pub fn manifests(&self) -> &[Manifest] {
        &self.manifests
    }

    /// Returns the revision stamped on every object.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// Returns the agent hash used in claim names.
    pub fn agent_hash(&self) -> &str {
        &self.agent_hash
    }

    /// Returns every object as one multi-document YAML stream, each document opened by `---`.
    pub fn to_yaml(&self) -> String {
        let mut text = String::new();
        for manifest in &self.manifests {
            text.push_str("---\n");
            text.push_str(&manifest.yaml);
        }
        text
    }
}

/// One rendered Kubernetes object.
#[derive(Debug, Clone)]
pub struct Manifest {
    kind: &'static str,
    name: String,
    yaml: String,
}

impl Manifest {
    /// Returns the object's kind, e.g. `Deployment`.
    pub fn kind(&self) -> &str {
        self.kind
    }

    /// Returns the object's `metadata.name`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Returns the object as one YAML document, without a `---` line.
    pub fn yaml(&self) -> &str {
        &self.yaml
    }

    /// Returns the file name for this object when written one per file: the two-digit apply
    /// order, the lowercase kind and the name, e.g. `07-deployment-main-gateway.yaml`.
    pub fn file_name(&self, index: usize) -> String {
        format!(
            "{index:02}-{}-{}.yaml",
            self.kind.to_ascii_lowercase(),
            self.name
        )
    }
}

/// Renders the Kubernetes objects of `installation`.
///
/// # Errors
///
/// Returns [`DeployError::InvalidManifest`] when an object fails to serialize or does not parse
/// back into its typed form without unknown fields. That is a defect of the renderer.
pub fn render(installation: &Installation) -> Result<Rendered> {
    let context = Context::new(installation)?;
    let objects = match installation.topology() {
        Topology::Embedded => context.embedded_objects(),
        Topology::DedicatedNative | Topology::DedicatedCodex => context.dedicated_objects(),
    };
    let mut manifests = Vec::with_capacity(objects.len());
    for (index, object) in objects.into_iter().enumerate() {
        manifests.push(object.into_manifest(index)?);
    }
    let rendered = Rendered {
        revision: installation.revision().to_owned(),
        agent_hash: installation.agent_hash().to_owned(),
        manifests,
    };
    manifest::parse_manifests(&rendered.to_yaml())?;
    Ok(rendered)
}

/// A typed object on its way to YAML: the kinds [`crate::manifest::parse_manifests`] reads back.
impl Object {
    fn into_manifest(self, index: usize) -> Result<Manifest> {
        let (kind, name, value) = match self {
            Self::ServiceAccount(object) => parts(&object),
            Self::PersistentVolumeClaim(object) => parts(&object),
            Self::Service(object) => parts(&object),
            Self::NetworkPolicy(object) => parts(&object),
            Self::Deployment(object) => parts(&*object),
            Self::StatefulSet(object) => parts(&*object),
            Self::PodDisruptionBudget(object) => parts(&object),
        };
        let value = value.map_err(|err| DeployError::InvalidManifest {
            index,
            problem: format!("{kind} does not serialize: {err}"),
        })?;
        let yaml = serde_saphyr::to_string(&canonical::sorted(&value)).map_err(|err| {
            DeployError::InvalidManifest {
                index,
                problem: format!("{kind} does not serialize to yaml: {err}"),
            }
        })?;
        Ok(Manifest {
            kind,
            name: name.unwrap_or_default(),
            yaml,
        })
    }
}

/// Returns an object's kind, its name and its JSON form.
fn parts<T>(
    object: &T,
) -> (
    &'static str,
    Option<String>,
    serde_json::Result<serde_json::Value>,
)
where
    T: k8s_openapi::Resource + k8s_openapi::Metadata<Ty = ObjectMeta> + serde::Serialize,
{
    (
        T::KIND,
        object.metadata().name.clone(),
        serde_json::to_value(object),
    )
}

/// The role of a rendered object, written to [`LABEL_ROLE`].
#[derive(Debug, Clone, Copy)]
enum Role {
    Gateway,
    Harness,
    Embedded,
    /// Objects that cover every Pod of the agent, such as the default-deny policy.
    Agent,
}

impl Role {
    fn as_str(self) -> &'static str {
        match self {
            Self::Gateway => "gateway",
            Self::Harness => "harness",
            Self::Embedded => "embedded",
            Self::Agent => "agent",
        }
    }
}

/// Everything the builders share: the installation and the names derived from it.
struct Context<'a> {
    installation: &'a Installation,
    agent_id: &'a str,
    gateway_claim: String,
    harness_claim: String,
    /// The native worker slots (`--capacity`).
    worker_capacity: u32,
    /// The Gateway replicas (`gateway.replicas`).
    gateway_replicas: u32,
    /// The resources of each container group.
    gateway_resources: Resolved,
    harness_resources: Resolved,
    embedded_resources: Resolved,
    init_resources: Resolved,
}

impl<'a> Context<'a> {
    fn new(installation: &'a Installation) -> Result<Self> {
        let agent_hash = installation.agent_hash();
        let spec = &installation.spec;
        let settings = spec.runtime.resources.as_ref();
        let worker_capacity = spec
            .runtime
            .worker_capacity
            .unwrap_or(resources::DEFAULT_WORKER_CAPACITY);
        let resolve = |group| resources::resolve(settings, group, spec.topology, worker_capacity);
        Ok(Self {
            installation,
            agent_id: installation.agent_id(),
            gateway_claim: format!("gateway-state-{agent_hash}"),
            harness_claim: format!("harness-state-{agent_hash}"),
            worker_capacity,
            gateway_replicas: spec.gateway.replicas(),
            gateway_resources: resolve(Group::Gateway)?,
            harness_resources: resolve(Group::Harness)?,
            embedded_resources: resolve(Group::Embedded)?,
            init_resources: resolve(Group::StorageInit)?,
        })
    }

    /// Returns `--capacity N` for a topology with native workers, else nothing.
    fn capacity_args(&self) -> Vec<String> {
        match self.installation.topology() {
            Topology::Embedded | Topology::DedicatedNative => {
                vec![String::from("--capacity"), self.worker_capacity.to_string()]
            }
            Topology::DedicatedCodex => Vec::new(),
        }
    }

    fn gateway_name(&self) -> String {
        format!("{}-gateway", self.agent_id)
    }

    fn harness_name(&self) -> String {
        format!("{}-harness", self.agent_id)
    }

    /// Returns whether the Gateway runs as several replicas.
    fn several_gateways(&self) -> bool {
        self.gateway_replicas > 1
    }

    fn dedicated_objects(&self) -> Vec<Object> {
        let spec = &self.installation.spec;
        let gateway_name = self.gateway_name();
        let harness_name = self.harness_name();
        let harness_storage_class = spec
            .runtime
            .harness_storage_class_name
            .clone()
            .unwrap_or_default();
        let mut objects = vec![
            Object::ServiceAccount(self.service_account(&gateway_name, Role::Gateway)),
            Object::ServiceAccount(self.service_account(&harness_name, Role::Harness)),
        ];
        if spec.has_gateway_claim() {
            objects.push(Object::PersistentVolumeClaim(
                self.claim(
                    &self.gateway_claim,
                    Role::Gateway,
                    &spec
                        .runtime
                        .gateway_storage_class_name
                        .clone()
                        .unwrap_or_default(),
                    GATEWAY_CLAIM_SIZE,
                ),
            ));
        }
        let stateful_nodes = spec
            .harness
            .as_ref()
            .filter(|harness| harness.is_stateful_set())
            .map(|harness| harness.setup_code_secrets().len());
        if stateful_nodes.is_none() {
            objects.push(Object::PersistentVolumeClaim(self.claim(
                &self.harness_claim,
                Role::Harness,
                &harness_storage_class,
                HARNESS_CLAIM_SIZE,
            )));
        }
        objects.extend([
            Object::Service(self.service(&gateway_name, Role::Gateway)),
            Object::NetworkPolicy(self.default_deny_policy()),
            Object::NetworkPolicy(self.gateway_policy(Role::Gateway)),
            Object::NetworkPolicy(self.harness_policy()),
        ]);
        if self.several_gateways() {
            objects.push(Object::PodDisruptionBudget(
                self.disruption_budget(&gateway_name, Role::Gateway),
            ));
        }
        objects.push(Object::Deployment(Box::new(self.gateway_deployment())));
        match stateful_nodes {
            Some(nodes) => objects.extend([
                Object::PodDisruptionBudget(self.disruption_budget(&harness_name, Role::Harness)),
                Object::StatefulSet(Box::new(self.harness_stateful_set(nodes))),
            ]),
            None => objects.push(Object::Deployment(Box::new(self.harness_deployment()))),
        }
        objects
    }

    fn embedded_objects(&self) -> Vec<Object> {
        let spec = &self.installation.spec;
        let name = self.agent_id.to_owned();
        vec![
            Object::ServiceAccount(self.service_account(&name, Role::Embedded)),
            Object::PersistentVolumeClaim(
                self.claim(
                    &self.gateway_claim,
                    Role::Embedded,
                    &spec
                        .runtime
                        .gateway_storage_class_name
                        .clone()
                        .unwrap_or_default(),
                    GATEWAY_CLAIM_SIZE,
                ),
            ),
            Object::Service(self.service(&name, Role::Embedded)),
            Object::NetworkPolicy(self.default_deny_policy()),
            Object::NetworkPolicy(self.gateway_policy(Role::Embedded)),
            Object::Deployment(Box::new(self.embedded_deployment())),
        ]
    }

    fn labels(&self, role: Role) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                String::from("app.kubernetes.io/name"),
                String::from("gatehouse"),
            ),
            (String::from(LABEL_AGENT), self.agent_id.to_owned()),
            (
                String::from(LABEL_REVISION),
                self.installation.revision().to_owned(),
            ),
            (String::from(LABEL_ROLE), role.as_str().to_owned()),
        ])
    }

    /// Returns the labels that select the Pods of `role`; they never include the revision, so
    /// selectors stay valid across revisions.
    fn selector_labels(&self, role: Role) -> BTreeMap<String, String> {
        BTreeMap::from([
            (String::from(LABEL_AGENT), self.agent_id.to_owned()),
            (String::from(LABEL_ROLE), role.as_str().to_owned()),
        ])
    }

    fn selector(&self, role: Role) -> LabelSelector {
        LabelSelector {
            match_labels: Some(self.selector_labels(role)),
            ..LabelSelector::default()
        }
    }

    fn metadata(&self, name: &str, role: Role) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(self.installation.namespace().to_owned()),
            labels: Some(self.labels(role)),
            ..ObjectMeta::default()
        }
    }

    fn service_account(&self, name: &str, role: Role) -> ServiceAccount {
        ServiceAccount {
            metadata: self.metadata(name, role),
            automount_service_account_token: Some(false),
            ..ServiceAccount::default()
        }
    }

    fn claim(
        &self,
        name: &str,
        role: Role,
        storage_class: &str,
        size: &str,
    ) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: self.metadata(name, role),
            spec: Some(PersistentVolumeClaimSpec {
                access_modes: Some(vec![String::from("ReadWriteOnce")]),
                resources: Some(VolumeResourceRequirements {
                    requests: Some(BTreeMap::from([(
                        String::from("storage"),
                        Quantity(size.to_owned()),
                    )])),
                    ..VolumeResourceRequirements::default()
                }),
                storage_class_name: Some(storage_class.to_owned()),
                volume_mode: Some(String::from("Filesystem")),
                ..PersistentVolumeClaimSpec::default()
            }),
            ..PersistentVolumeClaim::default()
        }
    }

    fn service(&self, name: &str, role: Role) -> Service {
        Service {
            metadata: self.metadata(name, role),
            spec: Some(ServiceSpec {
                type_: Some(String::from("ClusterIP")),
                selector: Some(self.selector_labels(role)),
                ports: Some(vec![service_port("http", GATEWAY_PORT)]),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        }
    }

    /// Denies all ingress and egress for every Pod of the agent; the role policies add the
    /// only allowed paths.
    fn default_deny_policy(&self) -> NetworkPolicy {
        NetworkPolicy {
            metadata: self.metadata(&format!("{}-default-deny", self.agent_id), Role::Agent),
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(LabelSelector {
                    match_labels: Some(BTreeMap::from([(
                        String::from(LABEL_AGENT),
                        self.agent_id.to_owned(),
                    )])),
                    ..LabelSelector::default()
                }),
                policy_types: Some(vec![String::from("Ingress"), String::from("Egress")]),
                ..NetworkPolicySpec::default()
            }),
        }
    }

    /// The Gateway's (or the embedded Pod's) policy: ingress on [`GATEWAY_PORT`] only from the
    /// operator's namespaces and, for a dedicated Gateway, from the Harness, and egress only to
    /// DNS and the endpoints the Gateway itself calls. Several Gateway replicas also admit
    /// each other on [`GATEWAY_PORT`] and may call each other there (their
    /// `/internal/replica/...` routes), and nothing more.
    ///
    /// The Harness reaches the Gateway on the same port as the operator, because one port serves
    /// everything. A NetworkPolicy cannot filter by HTTP path; the Gateway accepts node handshakes
    /// only on `/node`, and the rest of its API needs the operator token, which the Harness never
    /// holds.
    fn gateway_policy(&self, role: Role) -> NetworkPolicy {
        let spec = &self.installation.spec;
        let mut ingress = vec![NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                namespace_selector: Some(LabelSelector {
                    match_labels: Some(spec.gateway.operator_namespace_labels.clone()),
                    ..LabelSelector::default()
                }),
                ..NetworkPolicyPeer::default()
            }]),
            ports: Some(vec![tcp_port(GATEWAY_PORT)]),
        }];
        let mut egress = vec![dns_egress_rule()];
        match role {
            Role::Gateway => {
                ingress.push(self.gateway_port_ingress_rule(Role::Harness));
                if self.several_gateways() {
                    ingress.push(self.gateway_port_ingress_rule(Role::Gateway));
                    egress.push(self.gateway_port_egress_rule());
                }
            }
            Role::Embedded => egress.push(self.model_egress_rule()),
            Role::Harness | Role::Agent => {}
        }
        if let (Embedder::OpenAi, Some(endpoint), Some(cidrs)) = (
            spec.memory.embedder,
            &spec.memory.endpoint,
            &spec.memory.egress_cidrs,
        ) {
            egress.push(cidr_egress_rule(cidrs, url_port(endpoint).unwrap_or(443)));
        }
        if let Some(cidrs) = spec
            .gateway
            .egress_cidrs
            .as_deref()
            .filter(|cidrs| !cidrs.is_empty())
        {
            egress.push(cidr_egress_rule(cidrs, 443));
        }
        if let Some(store) = &spec.gateway.store {
            egress.push(cidr_egress_rule(&store.egress_cidrs, store.port()));
        }
        if let Some(media) = &spec.gateway.media {
            egress.push(cidr_egress_rule(&media.egress_cidrs, media.port()));
        }
        let name = match role {
            Role::Embedded => format!("{}-embedded", self.agent_id),
            Role::Gateway | Role::Harness | Role::Agent => self.gateway_name(),
        };
        NetworkPolicy {
            metadata: self.metadata(&name, role),
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(self.selector(role)),
                policy_types: Some(vec![String::from("Ingress"), String::from("Egress")]),
                ingress: Some(ingress),
                egress: Some(egress),
            }),
        }
    }

    /// Ingress to [`GATEWAY_PORT`] from the Pods of `role` in the agent's namespace.
    fn gateway_port_ingress_rule(&self, role: Role) -> NetworkPolicyIngressRule {
        NetworkPolicyIngressRule {
            from: Some(vec![NetworkPolicyPeer {
                pod_selector: Some(self.selector(role)),
                ..NetworkPolicyPeer::default()
            }]),
            ports: Some(vec![tcp_port(GATEWAY_PORT)]),
        }
    }

    /// Egress to the Gateway Pods on [`GATEWAY_PORT`]: the node's `/node`, or another
    /// replica's `/internal/replica/...`.
    fn gateway_port_egress_rule(&self) -> NetworkPolicyEgressRule {
        NetworkPolicyEgressRule {
            to: Some(vec![NetworkPolicyPeer {
                pod_selector: Some(self.selector(Role::Gateway)),
                ..NetworkPolicyPeer::default()
            }]),
            ports: Some(vec![tcp_port(GATEWAY_PORT)]),
        }
    }

    /// The Harness policy: no ingress at all; egress only to the Gateway Pods on
    /// [`GATEWAY_PORT`] (where the node dials `/node`), DNS and the model endpoint.
    fn harness_policy(&self) -> NetworkPolicy {
        NetworkPolicy {
            metadata: self.metadata(&self.harness_name(), Role::Harness),
            spec: Some(NetworkPolicySpec {
                pod_selector: Some(self.selector(Role::Harness)),
                policy_types: Some(vec![String::from("Ingress"), String::from("Egress")]),
                ingress: Some(Vec::new()),
                egress: Some(vec![
                    self.gateway_port_egress_rule(),
                    dns_egress_rule(),
                    self.model_egress_rule(),
                ]),
            }),
        }
    }

    fn model_egress_rule(&self) -> NetworkPolicyEgressRule {
        let model = &self.installation.spec.model;
        cidr_egress_rule(
            &model.egress_cidrs,
            url_port(&model.endpoint).unwrap_or(443),
        )
    }

    /// Returns the URL the Harness dials and the Gateway writes into setup codes: the Gateway
    /// Service on [`GATEWAY_PORT`]. The node turns `http://host:port` into `ws://host:port/node`.
    fn gateway_url(&self) -> String {
        format!(
            "http://{}.{}.svc:{GATEWAY_PORT}",
            self.gateway_name(),
            self.installation.namespace()
        )
    }

    /// Environment of the dedicated Gateway: the variables `gatehouse gateway` reads in place of
    /// `--state`, `--listen` and `--public-url`, with several replicas those of
    /// [`replica_env`], then the Gateway-only Secrets.
    fn gateway_env(&self) -> Vec<EnvVar> {
        let mut env = vec![
            env_value("GATEHOUSE_STATE_DIR", GATEWAY_STATE_DIR),
            env_value("GATEHOUSE_LISTEN", &format!("0.0.0.0:{GATEWAY_PORT}")),
            env_value("GATEHOUSE_PUBLIC_URL", &self.gateway_url()),
            env_value("GATEHOUSE_RUNTIME", self.installation.topology().runtime()),
        ];
        if self.several_gateways() {
            env.extend(replica_env());
        }
        env.extend(self.gateway_secret_env());
        env
    }

    /// Environment that only the Gateway role may see: the operator token (`GATEHOUSE_TOKEN`
    /// overrides the token file in the state directory), the memory embedder settings, read by
    /// the memory feature, and the channel credentials.
    fn gateway_secret_env(&self) -> Vec<EnvVar> {
        let spec = &self.installation.spec;
        let mut env = vec![
            env_secret("GATEHOUSE_TOKEN", &spec.gateway.operator_token_secret),
            env_value("GATEHOUSE_MEMORY_EMBEDDER", spec.memory.embedder.as_str()),
        ];
        if let Some(endpoint) = &spec.memory.endpoint {
            env.push(env_value("GATEHOUSE_MEMORY_EMBEDDING_BASE_URL", endpoint));
        }
        if let Some(model) = &spec.memory.model {
            env.push(env_value("GATEHOUSE_MEMORY_EMBEDDING_MODEL", model));
        }
        if let Some(secret) = &spec.memory.credential_secret {
            env.push(env_secret("GATEHOUSE_MEMORY_EMBEDDING_API_KEY", secret));
        }
        env.extend(self.store_and_media_env());
        for channel in spec.gateway.channel_secrets.iter().flatten() {
            let secret = SecretKeyRef {
                name: channel.name.clone(),
                key: channel.key.clone(),
            };
            env.push(env_secret(&channel.env, &secret));
        }
        env
    }

    /// Returns the settings of `gateway.store` and `gateway.media`: the URLs (which hold no
    /// secret) and the S3 endpoint settings as values, the database password and the S3 keys as
    /// Secret references only. Without S3 keys the Gateway takes the Pod's workload identity.
    fn store_and_media_env(&self) -> Vec<EnvVar> {
        let gateway = &self.installation.spec.gateway;
        let mut env = Vec::new();
        if let Some(store) = &gateway.store {
            env.push(env_value("GATEHOUSE_STORE", &store.url));
            if let Some(secret) = &store.password_secret {
                env.push(env_secret(&store.password_env(), secret));
            }
        }
        if let Some(media) = &gateway.media {
            env.push(env_value("GATEHOUSE_MEDIA", &media.url));
            if let Some(endpoint) = &media.endpoint {
                env.push(env_value("GATEHOUSE_S3_ENDPOINT", endpoint));
                if endpoint.starts_with("http://") {
                    env.push(env_value("AWS_ALLOW_HTTP", "true"));
                }
            }
            if let Some(region) = &media.region {
                env.push(env_value("GATEHOUSE_S3_REGION", region));
            }
            if let Some(path_style) = media.path_style {
                env.push(env_value(
                    "GATEHOUSE_S3_PATH_STYLE",
                    if path_style { "true" } else { "false" },
                ));
            }
            if let (Some(id), Some(secret)) =
                (&media.access_key_id_secret, &media.secret_access_key_secret)
            {
                env.push(env_secret("AWS_ACCESS_KEY_ID", id));
                env.push(env_secret("AWS_SECRET_ACCESS_KEY", secret));
            }
        }
        env
    }

    /// Returns the flags that select the model: `--model API:URL:MODEL` and
    /// `--model-key-env` naming the variable that holds the key, so the key never enters argv.
    ///
    /// Kubernetes expands `$(NAME)` in a container's arguments from its environment, so a model
    /// name or URL holding `$(OPENAI_API_KEY)` would put the key into argv; every `$` of these
    /// values is written as `$$`, which Kubernetes turns back into one `$` without expanding.
    fn model_args(&self) -> [String; 4] {
        let model = &self.installation.spec.model;
        let spec = format!("{}:{}:{}", model.api().as_str(), model.endpoint, model.name);
        [
            String::from("--model"),
            spec.replace('$', "$$"),
            String::from("--model-key-env"),
            MODEL_KEY_ENV.to_owned(),
        ]
    }

    /// Returns the model credential as the variable [`MODEL_KEY_ENV`], for the Harness role only.
    fn model_key_env(&self) -> EnvVar {
        env_secret(
            MODEL_KEY_ENV,
            &self.installation.spec.model.credential_secret,
        )
    }

    /// The dedicated Gateway: `gatehouse gateway` with its claim mounted at
    /// `/var/lib/gatehouse/gateway` and its state directory (media included) below it. With
    /// the store and the media external, an `emptyDir` takes the claim's place: what remains in
    /// the state directory (the operator token file, which `GATEHOUSE_TOKEN` overrides, and the
    /// memory index, built from the Harness's memory files) need not outlive the Pod.
    ///
    /// With several replicas (which the installation allows only without a claim) the
    /// Deployment runs `gateway.replicas` Pods, spread softly over the machines like the node
    /// hosts, each Pod a replica of its own.
    fn gateway_deployment(&self) -> Deployment {
        let spec = &self.installation.spec;
        let mut args = vec![String::from("gateway")];
        if let Some(seconds) = spec.gateway.lease_seconds {
            args.push(String::from("--lease-seconds"));
            args.push(seconds.to_string());
        }
        let container = Container {
            name: String::from("gateway"),
            image: Some(spec.images.gateway.clone()),
            image_pull_policy: Some(pull_policy(&spec.images.gateway)),
            resources: Some(self.gateway_resources.requirements()),
            args: Some(args),
            env: Some(self.gateway_env()),
            ports: Some(vec![container_port("http", GATEWAY_PORT)]),
            liveness_probe: Some(http_probe("/healthz", 10)),
            readiness_probe: Some(http_probe("/readyz", 5)),
            security_context: Some(container_security_context()),
            volume_mounts: Some(vec![
                VolumeMount {
                    name: String::from("gateway-state"),
                    mount_path: GATEWAY_ROOT.to_owned(),
                    ..VolumeMount::default()
                },
                tmp_mount(),
            ]),
            ..Container::default()
        };
        let pod = PodSpec {
            containers: vec![container],
            node_selector: spec.runtime.gateway_node_selector.clone(),
            volumes: Some(vec![
                match spec.has_gateway_claim() {
                    true => claim_volume("gateway-state", &self.gateway_claim),
                    false => Volume {
                        name: String::from("gateway-state"),
                        empty_dir: Some(EmptyDirVolumeSource::default()),
                        ..Volume::default()
                    },
                },
                tmp_volume(),
            ]),
            topology_spread_constraints: self
                .several_gateways()
                .then(|| vec![self.spread_constraint(Role::Gateway)]),
            ..self.pod_spec_base(&self.gateway_name())
        };
        self.deployment(
            &self.gateway_name(),
            Role::Gateway,
            self.gateway_replicas,
            pod,
            BTreeMap::new(),
        )
    }

    /// The dedicated Harness of one node host: a Deployment whose Pod mounts the claim
    /// `harness-state-<agent-hash>`.
    fn harness_deployment(&self) -> Deployment {
        let (pod, annotations) =
            self.harness_pod(Some(claim_volume("harness-state", &self.harness_claim)));
        self.deployment(&self.harness_name(), Role::Harness, 1, pod, annotations)
    }

    /// The dedicated Harness of several node hosts: a StatefulSet with one Pod per entry of
    /// `harness.nodes`, each with a claim of its own from the `harness-state` template
    /// (`harness-state-<agent>-harness-<index>`), so each node keeps its own identity and
    /// session workspaces. Pods start and stop in parallel, since the nodes are independent, and
    /// the claims are kept when the set is scaled down or deleted: a node's workspaces outlive
    /// its Pod until the operator moves its sessions.
    fn harness_stateful_set(&self, nodes: usize) -> StatefulSet {
        let spec = &self.installation.spec;
        let (mut pod, annotations) = self.harness_pod(None);
        pod.topology_spread_constraints = Some(vec![self.spread_constraint(Role::Harness)]);
        let mut claim = self.claim(
            "harness-state",
            Role::Harness,
            &spec
                .runtime
                .harness_storage_class_name
                .clone()
                .unwrap_or_default(),
            HARNESS_CLAIM_SIZE,
        );
        // A StatefulSet's claim templates cannot change once it exists, so the template carries
        // no revision label: a new revision must still apply over the old set.
        let mut claim_labels = self.labels(Role::Harness);
        claim_labels.remove(LABEL_REVISION);
        claim.metadata = ObjectMeta {
            name: Some(String::from("harness-state")),
            labels: Some(claim_labels),
            ..ObjectMeta::default()
        };
        let annotations = self.workload_annotations(annotations);
        StatefulSet {
            metadata: ObjectMeta {
                annotations: Some(annotations.clone()),
                ..self.metadata(&self.harness_name(), Role::Harness)
            },
            spec: Some(StatefulSetSpec {
                replicas: Some(i32::try_from(nodes).unwrap_or(i32::MAX)),
                selector: self.selector(Role::Harness),
                pod_management_policy: Some(String::from("Parallel")),
                update_strategy: Some(StatefulSetUpdateStrategy {
                    type_: Some(String::from("RollingUpdate")),
                    ..StatefulSetUpdateStrategy::default()
                }),
                persistent_volume_claim_retention_policy: Some(
                    StatefulSetPersistentVolumeClaimRetentionPolicy {
                        when_deleted: Some(String::from("Retain")),
                        when_scaled: Some(String::from("Retain")),
                    },
                ),
                volume_claim_templates: Some(vec![claim]),
                template: self.pod_template(Role::Harness, pod, annotations),
                ..StatefulSetSpec::default()
            }),
            ..StatefulSet::default()
        }
    }

    /// Spreads the Pods of `role` over the machines where the scheduler can, so one machine's
    /// loss or drain does not take them all; never at the price of a Pod left unscheduled.
    fn spread_constraint(&self, role: Role) -> TopologySpreadConstraint {
        TopologySpreadConstraint {
            max_skew: 1,
            topology_key: String::from("kubernetes.io/hostname"),
            when_unsatisfiable: String::from("ScheduleAnyway"),
            label_selector: Some(self.selector(role)),
            ..TopologySpreadConstraint::default()
        }
    }

    /// The disruption budget `name` of the Pods of `role` (the node hosts of a StatefulSet
    /// Harness, or several Gateway replicas): a voluntary disruption (a drain, an eviction)
    /// takes at most one of them at a time, so the others keep serving. A Pod that is not ready
    /// yet may always be evicted, so one that never became ready cannot block a drain.
    fn disruption_budget(&self, name: &str, role: Role) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: self.metadata(name, role),
            spec: Some(PodDisruptionBudgetSpec {
                max_unavailable: Some(IntOrString::Int(1)),
                selector: Some(self.selector(role)),
                unhealthy_pod_eviction_policy: Some(String::from("AlwaysAllow")),
                ..PodDisruptionBudgetSpec::default()
            }),
            ..PodDisruptionBudget::default()
        }
    }

    /// The Pod of a dedicated Harness: `gatehouse node`, every setting a flag.
    ///
    /// The node listens on no port, so the Pod has no containerPort and no HTTP probe. Its
    /// liveness and readiness probes have the meaning of `/healthz` and `/readyz` but run
    /// `gatehouse node health --root DIR [--ready]` in the container, which reads the status the
    /// node host writes and exits 0 when healthy (or ready).
    ///
    /// `state` is the volume holding the node's state (a claim), or `None` in a StatefulSet,
    /// whose claim template provides it. There each Pod takes its setup code by its index
    /// (the `apps.kubernetes.io/pod-index` label) from a projected volume of every node's
    /// Secret, and names itself after its Pod.
    fn harness_pod(&self, state: Option<Volume>) -> (PodSpec, BTreeMap<String, String>) {
        let spec = &self.installation.spec;
        let stateful = state.is_none();
        let image = spec.images.harness.clone().unwrap_or_default();
        let scratch = spec.scratch_binding();
        let mut args = vec![
            String::from("node"),
            String::from("--gateway"),
            self.gateway_url(),
            String::from("--root"),
            HARNESS_ROOT.to_owned(),
            String::from("--runtime"),
            self.installation.topology().runtime().to_owned(),
            String::from("--setup-code-file"),
            match stateful {
                false => format!("{SETUP_CODE_DIR}/{SETUP_CODE_FILE}"),
                true => format!("{SETUP_CODE_DIR}/{SETUP_CODE_FILE}-$({POD_INDEX_ENV})"),
            },
        ];
        let mut env = vec![self.model_key_env()];
        if stateful {
            args.push(String::from("--display-name"));
            args.push(format!("$({POD_NAME_ENV})"));
            env.push(env_field(POD_INDEX_ENV, POD_INDEX_FIELD));
            env.push(env_field(POD_NAME_ENV, "metadata.name"));
        }
        args.extend(self.model_args());
        args.extend(self.capacity_args());
        let mut annotations = BTreeMap::new();
        let mut mounts = vec![VolumeMount {
            name: String::from("harness-root"),
            mount_path: HARNESS_ROOT.to_owned(),
            ..VolumeMount::default()
        }];
        mounts.extend(HARNESS_SUBDIRS.map(|subdir| {
            sub_path_mount("harness-state", subdir, &format!("{HARNESS_ROOT}/{subdir}"))
        }));
        mounts.push(VolumeMount {
            name: String::from("setup-code"),
            mount_path: SETUP_CODE_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        mounts.push(tmp_mount());
        let setup_codes = spec
            .harness
            .as_ref()
            .map(|harness| harness.setup_code_secrets())
            .unwrap_or_default();
        let mut volumes: Vec<Volume> = state.into_iter().collect();
        volumes.extend([
            Volume {
                name: String::from("harness-root"),
                empty_dir: Some(EmptyDirVolumeSource::default()),
                ..Volume::default()
            },
            match stateful {
                false => setup_code_volume(setup_codes.first().copied()),
                true => setup_codes_volume(&setup_codes),
            },
            tmp_volume(),
        ]);
        if let Some(binding) = scratch {
            args.push(String::from("--scratch"));
            args.push(SCRATCH_MOUNT_PATH.to_owned());
            annotations.insert(
                String::from(ANNOTATION_SCRATCH_CLAIM_UID),
                binding.claim_uid.clone(),
            );
            mounts.push(VolumeMount {
                name: String::from("scratch"),
                mount_path: SCRATCH_MOUNT_PATH.to_owned(),
                ..VolumeMount::default()
            });
            volumes.push(claim_volume("scratch", &binding.claim_name));
        }
        let health = vec![
            String::from("gatehouse"),
            String::from("node"),
            String::from("health"),
            String::from("--root"),
            HARNESS_ROOT.to_owned(),
        ];
        let mut ready = health.clone();
        ready.push(String::from("--ready"));
        let container = Container {
            name: String::from("harness"),
            image: Some(image.clone()),
            image_pull_policy: Some(pull_policy(&image)),
            resources: Some(self.harness_resources.requirements()),
            args: Some(args),
            env: Some(env),
            liveness_probe: Some(exec_probe(health, 10)),
            readiness_probe: Some(exec_probe(ready, 5)),
            security_context: Some(container_security_context()),
            volume_mounts: Some(mounts),
            ..Container::default()
        };
        let subdirs = HARNESS_SUBDIRS.map(String::from);
        let pod = PodSpec {
            init_containers: Some(vec![storage_init_container(
                &image,
                "harness-state",
                &subdirs,
                &[String::from("node")],
                &self.init_resources,
            )]),
            containers: vec![container],
            node_selector: spec.runtime.node_selector.clone(),
            volumes: Some(volumes),
            ..self.pod_spec_base(&self.harness_name())
        };
        (pod, annotations)
    }

    /// The embedded Pod: `gatehouse up --data /var/lib/gatehouse`, with the Gateway root
    /// (`<data>/gateway`) and the Harness root (`<data>/harness`) on separate subPaths of one
    /// claim.
    fn embedded_deployment(&self) -> Deployment {
        let spec = &self.installation.spec;
        let mut args = vec![
            String::from("up"),
            String::from("--data"),
            DATA_ROOT.to_owned(),
            String::from("--listen"),
            format!("0.0.0.0:{GATEWAY_PORT}"),
            String::from("--runtime"),
            self.installation.topology().runtime().to_owned(),
        ];
        args.extend(self.model_args());
        args.extend(self.capacity_args());
        let mut env = self.gateway_secret_env();
        env.push(self.model_key_env());
        let container = Container {
            name: String::from("gatehouse"),
            image: Some(spec.images.gateway.clone()),
            image_pull_policy: Some(pull_policy(&spec.images.gateway)),
            resources: Some(self.embedded_resources.requirements()),
            args: Some(args),
            env: Some(env),
            ports: Some(vec![container_port("http", GATEWAY_PORT)]),
            liveness_probe: Some(http_probe("/healthz", 10)),
            readiness_probe: Some(http_probe("/readyz", 5)),
            security_context: Some(container_security_context()),
            volume_mounts: Some(vec![
                sub_path_mount("state", "gateway", GATEWAY_ROOT),
                sub_path_mount("state", "harness", HARNESS_ROOT),
                tmp_mount(),
            ]),
            ..Container::default()
        };
        let roots = [String::from("gateway"), String::from("harness")];
        let pod = PodSpec {
            init_containers: Some(vec![storage_init_container(
                &spec.images.gateway,
                "state",
                &roots,
                &roots,
                &self.init_resources,
            )]),
            containers: vec![container],
            node_selector: spec.runtime.node_selector.clone(),
            volumes: Some(vec![
                claim_volume("state", &self.gateway_claim),
                tmp_volume(),
            ]),
            ..self.pod_spec_base(self.agent_id)
        };
        self.deployment(self.agent_id, Role::Embedded, 1, pod, BTreeMap::new())
    }

    /// The Pod settings every Deployment shares: its own ServiceAccount without a token, no
    /// service links, and the restricted Pod security context.
    fn pod_spec_base(&self, service_account: &str) -> PodSpec {
        PodSpec {
            service_account_name: Some(service_account.to_owned()),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            security_context: Some(PodSecurityContext {
                run_as_non_root: Some(true),
                run_as_user: Some(RUN_AS_ID),
                run_as_group: Some(RUN_AS_ID),
                fs_group: Some(RUN_AS_ID),
                fs_group_change_policy: Some(String::from("OnRootMismatch")),
                seccomp_profile: Some(SeccompProfile {
                    type_: String::from("RuntimeDefault"),
                    ..SeccompProfile::default()
                }),
                ..PodSecurityContext::default()
            }),
            termination_grace_period_seconds: Some(30),
            ..PodSpec::default()
        }
    }

    /// A Deployment of `replicas` Pods.
    ///
    /// One replica uses the `Recreate` strategy: the old Pod stops before the new one starts, so
    /// a ReadWriteOnce claim is never mounted twice. Several replicas (only Gateway replicas,
    /// which mount no claim and run side by side by design) roll one Pod at a time, a new one
    /// first (`maxSurge` 1, `maxUnavailable` 0), so the agent keeps serving through a rollout.
    fn deployment(
        &self,
        name: &str,
        role: Role,
        replicas: u32,
        pod: PodSpec,
        annotations: BTreeMap<String, String>,
    ) -> Deployment {
        let annotations = self.workload_annotations(annotations);
        let strategy = match replicas {
            0 | 1 => DeploymentStrategy {
                type_: Some(String::from("Recreate")),
                ..DeploymentStrategy::default()
            },
            _ => DeploymentStrategy {
                type_: Some(String::from("RollingUpdate")),
                rolling_update: Some(RollingUpdateDeployment {
                    max_surge: Some(IntOrString::Int(1)),
                    max_unavailable: Some(IntOrString::Int(0)),
                }),
            },
        };
        Deployment {
            metadata: ObjectMeta {
                annotations: Some(annotations.clone()),
                ..self.metadata(name, role)
            },
            spec: Some(DeploymentSpec {
                replicas: Some(i32::try_from(replicas).unwrap_or(i32::MAX)),
                selector: self.selector(role),
                strategy: Some(strategy),
                template: self.pod_template(role, pod, annotations),
                ..DeploymentSpec::default()
            }),
            ..Deployment::default()
        }
    }

    /// Returns `annotations` with the namespace id every workload and its Pods carry.
    fn workload_annotations(
        &self,
        mut annotations: BTreeMap<String, String>,
    ) -> BTreeMap<String, String> {
        annotations.insert(
            String::from("gatehouse.dev/namespace-id"),
            self.installation.spec.namespace_id.clone(),
        );
        annotations
    }

    /// The Pod template of a workload of `role`: its labels, `annotations` and `pod`.
    fn pod_template(
        &self,
        role: Role,
        pod: PodSpec,
        annotations: BTreeMap<String, String>,
    ) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(self.labels(role)),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            }),
            spec: Some(pod),
        }
    }
}

/// An init container that creates `dirs` (paths on the claim `volume`) as the same non-root
/// user as the main container, and sets each of `private_dirs` to mode 0700.
///
/// The directories must exist before the main container starts: the kubelet creates a
/// missing subPath directory as root, and a non-root process cannot then make it private.
fn storage_init_container(
    image: &str,
    volume: &str,
    dirs: &[String],
    private_dirs: &[String],
    resources: &Resolved,
) -> Container {
    let on_claim = |dirs: &[String]| -> String {
        dirs.iter()
            .map(|dir| format!("{STORAGE_INIT_MOUNT}/{dir}"))
            .collect::<Vec<String>>()
            .join(" ")
    };
    let script = format!(
        "set -eu; umask 077; mkdir -p {}; chmod 0700 {}",
        on_claim(dirs),
        on_claim(private_dirs)
    );
    Container {
        name: String::from("prepare-storage"),
        image: Some(image.to_owned()),
        image_pull_policy: Some(pull_policy(image)),
        resources: Some(resources.requirements()),
        command: Some(vec![String::from("/bin/sh"), String::from("-c"), script]),
        security_context: Some(container_security_context()),
        volume_mounts: Some(vec![VolumeMount {
            name: volume.to_owned(),
            mount_path: STORAGE_INIT_MOUNT.to_owned(),
            ..VolumeMount::default()
        }]),
        ..Container::default()
    }
}

/// Returns the pull policy of `image`: `IfNotPresent` for an image pinned by digest, which
/// cannot change, and `Always` for a tag, which can move to another image.
fn pull_policy(image: &str) -> String {
    match image.contains("@sha256:") {
        true => String::from("IfNotPresent"),
        false => String::from("Always"),
    }
}

fn container_security_context() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec![String::from("ALL")]),
            ..Capabilities::default()
        }),
        privileged: Some(false),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..SecurityContext::default()
    }
}

fn env_value(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..EnvVar::default()
    }
}

fn env_secret(name: &str, secret: &SecretKeyRef) -> EnvVar {
    env_from(
        name,
        EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.name.clone(),
                key: secret.key.clone(),
                ..SecretKeySelector::default()
            }),
            ..EnvVarSource::default()
        },
    )
}

/// A variable set from the Pod's own field at `path` (the downward API).
fn env_field(name: &str, path: &str) -> EnvVar {
    env_from(
        name,
        EnvVarSource {
            field_ref: Some(ObjectFieldSelector {
                field_path: path.to_owned(),
                ..ObjectFieldSelector::default()
            }),
            ..EnvVarSource::default()
        },
    )
}

/// A variable whose value Kubernetes takes from `source` when it starts the container.
fn env_from(name: &str, source: EnvVarSource) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value_from: Some(source),
        ..EnvVar::default()
    }
}

/// The variables that make a Gateway Pod one replica among several: its id, the Pod's name
/// (`GATEHOUSE_REPLICA_ID`), and its advertise URL, `http://<Pod IP>:7420`
/// (`GATEHOUSE_ADVERTISE_URL`), where the other replicas call it. Kubernetes expands
/// `$(GATEHOUSE_POD_IP)` from the variable defined before it, so no shell runs first.
fn replica_env() -> [EnvVar; 3] {
    [
        env_field("GATEHOUSE_REPLICA_ID", "metadata.name"),
        env_field(POD_IP_ENV, "status.podIP"),
        env_value(
            "GATEHOUSE_ADVERTISE_URL",
            &format!("http://$({POD_IP_ENV}):{GATEWAY_PORT}"),
        ),
    ]
}

fn container_port(name: &str, port: i32) -> ContainerPort {
    ContainerPort {
        name: Some(name.to_owned()),
        container_port: port,
        protocol: Some(String::from("TCP")),
        ..ContainerPort::default()
    }
}

fn service_port(name: &str, port: i32) -> ServicePort {
    ServicePort {
        name: Some(name.to_owned()),
        port,
        protocol: Some(String::from("TCP")),
        target_port: Some(IntOrString::String(name.to_owned())),
        ..ServicePort::default()
    }
}

/// A probe of `path` on the container port named `http`.
fn http_probe(path: &str, period_seconds: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.to_owned()),
            port: IntOrString::String(String::from("http")),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period_seconds),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}

/// A probe that runs `command` in the container, for a process that listens on no port.
fn exec_probe(command: Vec<String>, period_seconds: i32) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(command),
        }),
        period_seconds: Some(period_seconds),
        timeout_seconds: Some(2),
        failure_threshold: Some(3),
        ..Probe::default()
    }
}

fn sub_path_mount(volume: &str, sub_path: &str, mount_path: &str) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: mount_path.to_owned(),
        sub_path: Some(sub_path.to_owned()),
        ..VolumeMount::default()
    }
}

fn tmp_mount() -> VolumeMount {
    VolumeMount {
        name: String::from("tmp"),
        mount_path: String::from("/tmp"),
        ..VolumeMount::default()
    }
}

fn tmp_volume() -> Volume {
    Volume {
        name: String::from("tmp"),
        empty_dir: Some(EmptyDirVolumeSource::default()),
        ..Volume::default()
    }
}

fn claim_volume(name: &str, claim_name: &str) -> Volume {
    Volume {
        name: name.to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim_name.to_owned(),
            ..PersistentVolumeClaimVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The setup code as one file, mode 0440, in a directory mount without subPath, so a rotated
/// Secret reaches the running Pod.
fn setup_code_volume(secret: Option<&SecretKeyRef>) -> Volume {
    let (secret_name, key) = match secret {
        Some(secret) => (secret.name.clone(), secret.key.clone()),
        None => (String::new(), String::new()),
    };
    Volume {
        name: String::from("setup-code"),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret_name),
            default_mode: Some(SETUP_CODE_MODE),
            items: Some(vec![KeyToPath {
                key,
                path: SETUP_CODE_FILE.to_owned(),
                mode: Some(SETUP_CODE_MODE),
            }]),
            ..SecretVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The setup codes of a StatefulSet Harness: every node's Secret key projected into one
/// volume, node `i`'s code as `setup-code-<i>`. Each Pod reads the file of its own index.
fn setup_codes_volume(secrets: &[&SecretKeyRef]) -> Volume {
    let sources = secrets
        .iter()
        .enumerate()
        .map(|(index, secret)| VolumeProjection {
            // Optional: once a node is enrolled it never reads its code again, so an operator
            // may delete the Secret then, and a Pod that starts later must not wait for it.
            secret: Some(SecretProjection {
                name: secret.name.clone(),
                optional: Some(true),
                items: Some(vec![KeyToPath {
                    key: secret.key.clone(),
                    path: format!("{SETUP_CODE_FILE}-{index}"),
                    mode: Some(SETUP_CODE_MODE),
                }]),
            }),
            ..VolumeProjection::default()
        })
        .collect();
    Volume {
        name: String::from("setup-code"),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(SETUP_CODE_MODE),
            sources: Some(sources),
        }),
        ..Volume::default()
    }
}

fn tcp_port(port: i32) -> NetworkPolicyPort {
    NetworkPolicyPort {
        port: Some(IntOrString::Int(port)),
        protocol: Some(String::from("TCP")),
        ..NetworkPolicyPort::default()
    }
}

/// Egress to the cluster DNS (kube-dns in kube-system) on port 53, UDP and TCP.
fn dns_egress_rule() -> NetworkPolicyEgressRule {
    NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    String::from("kubernetes.io/metadata.name"),
                    String::from("kube-system"),
                )])),
                ..LabelSelector::default()
            }),
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    String::from("k8s-app"),
                    String::from("kube-dns"),
                )])),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        }]),
        ports: Some(vec![
            NetworkPolicyPort {
                port: Some(IntOrString::Int(53)),
                protocol: Some(String::from("UDP")),
                ..NetworkPolicyPort::default()
            },
            tcp_port(53),
        ]),
    }
}

/// Egress to `cidrs` on TCP `port`. The caller passes at least one CIDR: a rule without peers
/// would allow every destination.
fn cidr_egress_rule(cidrs: &[String], port: u16) -> NetworkPolicyEgressRule {
    debug_assert!(
        !cidrs.is_empty(),
        "an egress rule without peers allows everything"
    );
    NetworkPolicyEgressRule {
        to: Some(
            cidrs
                .iter()
                .map(|cidr| NetworkPolicyPeer {
                    ip_block: Some(IPBlock {
                        cidr: cidr.clone(),
                        ..IPBlock::default()
                    }),
                    ..NetworkPolicyPeer::default()
                })
                .collect(),
        ),
        ports: Some(vec![tcp_port(i32::from(port))]),
    }
}
