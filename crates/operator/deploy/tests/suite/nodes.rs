//! A Harness of several node hosts: a StatefulSet with one claim and one setup code per node.

use gatehouse_deploy::manifest::Object;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::Container;
use pretty_assertions::assert_eq;

use crate::suite::support;

fn stateful_sets(text: &str) -> Vec<StatefulSet> {
    support::objects(&support::render_text(text))
        .into_iter()
        .filter_map(|object| match object {
            Object::StatefulSet(set) => Some(*set),
            _ => None,
        })
        .collect()
}

fn harness_container(set: &StatefulSet) -> &Container {
    let pod = set.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
    pod.containers
        .iter()
        .find(|container| container.name == "harness")
        .unwrap()
}

/// Returns the value of `flag` in `args`.
fn flag<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    let at = args.iter().position(|arg| arg == flag)?;
    args.get(at + 1).map(String::as_str)
}

#[test]
fn several_nodes_render_a_stateful_set_with_a_claim_and_a_setup_code_each() {
    let rendered = support::render_text(support::DEDICATED_NODES);
    let kinds: Vec<(&str, &str)> = rendered
        .manifests()
        .iter()
        .map(|manifest| (manifest.kind(), manifest.name()))
        .collect();
    // No shared Harness claim: each node gets its own from the claim template.
    assert!(
        !kinds
            .iter()
            .any(|(kind, name)| *kind == "PersistentVolumeClaim" && name.starts_with("harness-")),
        "{kinds:?}"
    );
    assert_eq!(
        kinds[kinds.len() - 2..],
        [
            ("PodDisruptionBudget", "main-harness"),
            ("StatefulSet", "main-harness")
        ]
    );
    let budget = support::objects(&rendered)
        .into_iter()
        .find_map(|object| match object {
            Object::PodDisruptionBudget(budget) => Some(budget),
            _ => None,
        })
        .unwrap()
        .spec
        .unwrap();
    assert_eq!(
        budget.max_unavailable,
        Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(1))
    );
    // It selects exactly the Harness Pods.
    let selected = budget.selector.unwrap().match_labels.unwrap();
    assert_eq!(
        selected
            .get(gatehouse_deploy::render::LABEL_ROLE)
            .map(String::as_str),
        Some("harness")
    );
    assert!(kinds.contains(&("Deployment", "main-gateway")), "{kinds:?}");
    assert!(
        !kinds.contains(&("Deployment", "main-harness")),
        "{kinds:?}"
    );

    let [set] = <[StatefulSet; 1]>::try_from(stateful_sets(support::DEDICATED_NODES)).unwrap();
    let spec = set.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(3));
    assert_eq!(spec.pod_management_policy.as_deref(), Some("Parallel"));
    let retention = spec
        .persistent_volume_claim_retention_policy
        .as_ref()
        .unwrap();
    assert_eq!(
        (
            retention.when_deleted.as_deref(),
            retention.when_scaled.as_deref()
        ),
        (Some("Retain"), Some("Retain"))
    );
    let [claim] = <[_; 1]>::try_from(spec.volume_claim_templates.clone().unwrap()).unwrap();
    assert_eq!(claim.metadata.name.as_deref(), Some("harness-state"));
    // Claim templates are immutable: a revision label there would make every new revision fail
    // to apply over the set.
    let claim_labels = claim.metadata.labels.clone().unwrap();
    assert!(
        !claim_labels.contains_key(gatehouse_deploy::render::LABEL_REVISION),
        "{claim_labels:?}"
    );
    assert_eq!(
        claim_labels
            .get(gatehouse_deploy::render::LABEL_ROLE)
            .map(String::as_str),
        Some("harness")
    );
    let claim_spec = claim.spec.unwrap();
    assert_eq!(claim_spec.storage_class_name.as_deref(), Some("local-nvme"));
    assert_eq!(
        claim_spec.access_modes.as_deref(),
        Some(&[String::from("ReadWriteOnce")][..])
    );

    let pod = spec.template.spec.as_ref().unwrap();
    let volumes = pod.volumes.as_deref().unwrap();
    // The template's claim is the only state volume: the Pod lists no claim of its own.
    assert!(
        volumes
            .iter()
            .all(|volume| volume.persistent_volume_claim.is_none()),
        "{volumes:?}"
    );
    let setup = volumes
        .iter()
        .find(|volume| volume.name == "setup-code")
        .unwrap();
    assert!(setup.secret.is_none());
    let projected = setup.projected.as_ref().unwrap();
    assert_eq!(projected.default_mode, Some(0o440));
    let files: Vec<(String, String, String)> = projected
        .sources
        .iter()
        .flatten()
        .map(|source| {
            let secret = source.secret.as_ref().unwrap();
            // A deleted Secret (a node enrolled long ago) must not keep a Pod from starting.
            assert_eq!(secret.optional, Some(true));
            let [item] = <[_; 1]>::try_from(secret.items.clone().unwrap()).unwrap();
            (secret.name.clone(), item.key, item.path)
        })
        .collect();
    assert_eq!(
        files,
        (0..3)
            .map(|index| (
                format!("main-node-{index}"),
                String::from("setupCode"),
                format!("setup-code-{index}")
            ))
            .collect::<Vec<_>>()
    );

    // Each Pod reads the setup code of its own index and names itself after its Pod.
    let container = harness_container(&set);
    let args = container.args.as_deref().unwrap();
    assert_eq!(
        flag(args, "--setup-code-file"),
        Some("/run/gatehouse/setup-code/setup-code-$(GATEHOUSE_POD_INDEX)")
    );
    assert_eq!(flag(args, "--display-name"), Some("$(GATEHOUSE_POD_NAME)"));
    assert_eq!(flag(args, "--capacity"), Some("16"));
    let env = container.env.as_deref().unwrap();
    let field = |name: &str| {
        env.iter()
            .find(|var| var.name == name)
            .and_then(|var| var.value_from.as_ref()?.field_ref.as_ref())
            .map(|field| field.field_path.clone())
    };
    assert_eq!(
        field("GATEHOUSE_POD_INDEX").as_deref(),
        Some("metadata.labels['apps.kubernetes.io/pod-index']")
    );
    assert_eq!(
        field("GATEHOUSE_POD_NAME").as_deref(),
        Some("metadata.name")
    );
    // The state subdirectories still come from the claim, under the node root.
    let mounts = container.volume_mounts.as_deref().unwrap();
    for subdir in ["node", "workspace", "codex-home", "sessions"] {
        assert!(
            mounts
                .iter()
                .any(|mount| mount.name == "harness-state"
                    && mount.sub_path.as_deref() == Some(subdir)),
            "{subdir}: {mounts:?}"
        );
    }
}

#[test]
fn a_stateful_set_pod_is_the_single_node_pod_but_for_its_state_and_setup_code() {
    // The same agent with one node: the Deployment's Pod, which the set's must match in
    // everything but what makes each node its own.
    let head = &support::DEDICATED_NODES[..support::DEDICATED_NODES.find("  nodes:\n").unwrap()];
    let single = format!("{head}  setupCodeSecret: {{name: main-node-0, key: setupCode}}\n");
    let deployment = support::deployment(&support::render_text(&single), "main-harness");
    let mut single_pod = deployment.spec.unwrap().template.spec.unwrap();
    let [set] = <[StatefulSet; 1]>::try_from(stateful_sets(support::DEDICATED_NODES)).unwrap();
    let mut set_pod = set.spec.unwrap().template.spec.unwrap();
    // The set spreads its Pods over the machines, softly.
    let [spread] = <[_; 1]>::try_from(set_pod.topology_spread_constraints.take().unwrap()).unwrap();
    assert_eq!(
        (
            spread.topology_key.as_str(),
            spread.when_unsatisfiable.as_str(),
            spread.max_skew
        ),
        ("kubernetes.io/hostname", "ScheduleAnyway", 1)
    );
    for pod in [&mut single_pod, &mut set_pod] {
        pod.volumes
            .as_mut()
            .unwrap()
            .retain(|volume| volume.name != "harness-state" && volume.name != "setup-code");
        let container = &mut pod.containers[0];
        container
            .env
            .as_mut()
            .unwrap()
            .retain(|var| var.name != "GATEHOUSE_POD_INDEX" && var.name != "GATEHOUSE_POD_NAME");
        let args = container.args.as_mut().unwrap();
        if let Some(at) = args.iter().position(|arg| arg == "--display-name") {
            args.drain(at..at + 2);
        }
        let at = args
            .iter()
            .position(|arg| arg == "--setup-code-file")
            .unwrap();
        args.drain(at..at + 2);
    }
    assert_eq!(set_pod, single_pod);
}

/// A StatefulSet's selector, claim templates, Pod management policy and service name cannot
/// change once it exists, so a new revision (another image, capacity, node count) must render
/// them unchanged or `kubectl apply` refuses it.
#[test]
fn a_new_revision_keeps_what_a_stateful_set_cannot_change() {
    let base = support::with_nodes(3);
    let variants = [
        support::replace(&base, "0.1.0@sha256:8e63", "0.1.1@sha256:9e63"),
        support::replace(&base, "  workerCapacity: 16\n", "  workerCapacity: 32\n"),
        support::with_nodes(4),
        support::with_nodes(1),
    ];
    let fixed = |text: &str| {
        let [set] = <[StatefulSet; 1]>::try_from(stateful_sets(text)).unwrap();
        let spec = set.spec.unwrap();
        (
            spec.selector,
            spec.volume_claim_templates,
            spec.pod_management_policy,
            spec.service_name,
        )
    };
    let expected = fixed(&base);
    for variant in variants {
        let rendered = support::render_text(&variant);
        assert_ne!(rendered.revision(), support::render_text(&base).revision());
        assert_eq!(fixed(&variant), expected);
    }
}

/// The Pods the set makes carry the labels every selector that must find them uses: the
/// set's own, the disruption budget's, and the network policies' for the Harness.
#[test]
fn every_selector_of_the_harness_matches_the_set_pods() {
    let objects = support::objects(&support::render_text(support::DEDICATED_NODES));
    let [set] = <[StatefulSet; 1]>::try_from(stateful_sets(support::DEDICATED_NODES)).unwrap();
    let spec = set.spec.unwrap();
    let pod_labels = spec.template.metadata.unwrap().labels.unwrap();
    let matches = |selector: &k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector| {
        selector.match_expressions.is_none()
            && selector
                .match_labels
                .iter()
                .flatten()
                .all(|(key, value)| pod_labels.get(key) == Some(value))
    };
    assert!(matches(&spec.selector));
    let mut checked = Vec::new();
    for object in &objects {
        match object {
            Object::PodDisruptionBudget(budget) => {
                assert!(matches(
                    budget.spec.as_ref().unwrap().selector.as_ref().unwrap()
                ));
                checked.push("budget");
            }
            Object::NetworkPolicy(policy)
                if policy.metadata.name.as_deref() == Some("main-harness")
                    || policy.metadata.name.as_deref() == Some("main-default-deny") =>
            {
                let selector = policy.spec.as_ref().unwrap().pod_selector.as_ref().unwrap();
                assert!(matches(selector), "{:?}", policy.metadata.name);
                checked.push("policy");
            }
            _ => {}
        }
    }
    assert_eq!(checked.len(), 3, "{checked:?}");
}

/// A model value cannot reach the key: Kubernetes expands `$(NAME)` in arguments, so the
/// renderer writes a model name's `$` as `$$`, which Kubernetes reads back as one `$`.
#[test]
fn a_model_name_cannot_expand_the_key_into_argv() {
    let text = support::replace(
        support::DEDICATED_NODES,
        "  name: gpt-5\n",
        "  name: \"$(OPENAI_API_KEY)\"\n",
    );
    let [set] = <[StatefulSet; 1]>::try_from(stateful_sets(&text)).unwrap();
    let args = harness_container(&set).args.clone().unwrap();
    assert_eq!(
        flag(&args, "--model"),
        Some("openai-responses:https://api.openai.com/v1:$$(OPENAI_API_KEY)")
    );
    // The renderer's own references stay live.
    assert_eq!(flag(&args, "--display-name"), Some("$(GATEHOUSE_POD_NAME)"));
}
