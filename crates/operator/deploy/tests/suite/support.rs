//! Helpers shared by the test modules: the example installation files and typed accessors.

use gatehouse_deploy::installation::Installation;
use gatehouse_deploy::manifest::Object;
use gatehouse_deploy::render::Rendered;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::NetworkPolicy;

pub(crate) const EMBEDDED: &str = include_str!("../../../../../deploy/examples/embedded.yaml");
pub(crate) const DEDICATED_NATIVE: &str =
    include_str!("../../../../../deploy/examples/dedicated-native.yaml");
pub(crate) const DEDICATED_CODEX: &str =
    include_str!("../../../../../deploy/examples/dedicated-codex.yaml");
/// A dedicated native agent with its Gateway state in PostgreSQL and its media on S3; not in
/// [`EXAMPLES`], whose names are the topologies.
pub(crate) const DEDICATED_POSTGRES_S3: &str =
    include_str!("../../../../../deploy/examples/dedicated-postgres-s3.yaml");
/// A dedicated native agent served by three node hosts (a StatefulSet Harness); not in
/// [`EXAMPLES`] either.
pub(crate) const DEDICATED_NODES: &str =
    include_str!("../../../../../deploy/examples/dedicated-nodes.yaml");
/// A dedicated native agent with three Gateway replicas on PostgreSQL and S3 and two node
/// hosts; not in [`EXAMPLES`] either.
pub(crate) const DEDICATED_REPLICAS: &str =
    include_str!("../../../../../deploy/examples/dedicated-replicas.yaml");

/// Every example, by name.
pub(crate) const EXAMPLES: [(&str, &str); 3] = [
    ("embedded", EMBEDDED),
    ("dedicated-native", DEDICATED_NATIVE),
    ("dedicated-codex", DEDICATED_CODEX),
];

/// Every example file in `deploy/examples`, by file name: [`EXAMPLES`] and the variants.
pub(crate) const ALL_EXAMPLES: [(&str, &str); 6] = [
    ("embedded", EMBEDDED),
    ("dedicated-native", DEDICATED_NATIVE),
    ("dedicated-codex", DEDICATED_CODEX),
    ("dedicated-postgres-s3", DEDICATED_POSTGRES_S3),
    ("dedicated-nodes", DEDICATED_NODES),
    ("dedicated-replicas", DEDICATED_REPLICAS),
];

pub(crate) fn render_text(text: &str) -> Rendered {
    let installation = Installation::from_yaml(text).unwrap();
    gatehouse_deploy::render::render(&installation).unwrap()
}

/// Returns the YAML rendered from `text`, with the revision and the agent hash, which change
/// with the crate, redacted.
pub(crate) fn redacted(text: &str) -> String {
    let rendered = render_text(text);
    rendered
        .to_yaml()
        .replace(rendered.revision(), "[revision]")
        .replace(rendered.agent_hash(), "[agent-hash]")
}

/// Returns the NetworkPolicy `name` rendered from `text`.
pub(crate) fn network_policy(text: &str, name: &str) -> NetworkPolicy {
    objects(&render_text(text))
        .into_iter()
        .find_map(|object| match object {
            Object::NetworkPolicy(policy) if policy.metadata.name.as_deref() == Some(name) => {
                Some(policy)
            }
            _ => None,
        })
        .unwrap()
}

pub(crate) fn objects(rendered: &Rendered) -> Vec<Object> {
    gatehouse_deploy::manifest::parse_manifests(&rendered.to_yaml()).unwrap()
}

pub(crate) fn deployments(rendered: &Rendered) -> Vec<Deployment> {
    objects(rendered)
        .into_iter()
        .filter_map(|object| match object {
            Object::Deployment(deployment) => Some(*deployment),
            _ => None,
        })
        .collect()
}

/// Returns the Pod template of every workload (Deployments and StatefulSets), with its name.
pub(crate) fn pod_templates(
    rendered: &Rendered,
) -> Vec<(String, k8s_openapi::api::core::v1::PodSpec)> {
    objects(rendered)
        .into_iter()
        .filter_map(|object| match object {
            Object::Deployment(deployment) => {
                Some((deployment.metadata.name, deployment.spec?.template.spec?))
            }
            Object::StatefulSet(set) => Some((set.metadata.name, set.spec?.template.spec?)),
            _ => None,
        })
        .map(|(name, pod)| (name.unwrap_or_default(), pod))
        .collect()
}

pub(crate) fn deployment(rendered: &Rendered, name: &str) -> Deployment {
    deployments(rendered)
        .into_iter()
        .find(|deployment| deployment.metadata.name.as_deref() == Some(name))
        .unwrap_or_else(|| panic!("no deployment {name}"))
}

/// Returns `text` with one line replaced, for variants of an example.
pub(crate) fn replace(text: &str, from: &str, to: &str) -> String {
    assert!(text.contains(from), "example lacks {from:?}");
    text.replacen(from, to, 1)
}

/// Returns the node-list example with `count` nodes, node `i` on the Secret `main-node-<i>`.
pub(crate) fn with_nodes(count: usize) -> String {
    let head = &DEDICATED_NODES[..DEDICATED_NODES.find("  nodes:\n").unwrap()];
    let mut text = format!("{head}  nodes:");
    match count {
        0 => text.push_str(" []\n"),
        _ => {
            text.push('\n');
            for index in 0..count {
                text.push_str(&format!(
                    "    - setupCodeSecret: {{name: main-node-{index}, key: setupCode}}\n"
                ));
            }
        }
    }
    text
}
