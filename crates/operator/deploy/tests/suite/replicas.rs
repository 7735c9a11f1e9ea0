//! `gateway.replicas`: several Gateway replicas on one PostgreSQL store and one S3 media store.
//! The Gateway Deployment runs them side by side with a rolling update, a disruption budget and
//! a soft spread over the machines; each Pod is a replica named after itself and advertised at
//! its Pod IP; the network policy lets the replicas call each other; and one replica renders as
//! it always did.

use gatehouse_deploy::installation::Installation;
use gatehouse_deploy::manifest::Object;
use gatehouse_deploy::render::LABEL_ROLE;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::api::networking::v1::NetworkPolicyPort;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use pretty_assertions::assert_eq;

use crate::suite::support;

/// Returns the replicas example with `count` Gateway replicas.
fn with_replicas(count: u32) -> String {
    support::replace(
        support::DEDICATED_REPLICAS,
        "  replicas: 3\n",
        &format!("  replicas: {count}\n"),
    )
}

fn gateway(text: &str) -> Deployment {
    support::deployment(&support::render_text(text), "main-gateway")
}

fn gateway_pod(text: &str) -> PodSpec {
    gateway(text).spec.unwrap().template.spec.unwrap()
}

fn gateway_env(text: &str) -> Vec<EnvVar> {
    gateway_pod(text).containers[0].env.clone().unwrap()
}

/// Returns the downward-API field of the variable `name` in `env`.
fn field_of(env: &[EnvVar], name: &str) -> Option<String> {
    env.iter()
        .find(|var| var.name == name)?
        .value_from
        .as_ref()?
        .field_ref
        .as_ref()
        .map(|field| field.field_path.clone())
}

fn budgets(text: &str) -> Vec<PodDisruptionBudget> {
    support::objects(&support::render_text(text))
        .into_iter()
        .filter_map(|object| match object {
            Object::PodDisruptionBudget(budget) => Some(budget),
            _ => None,
        })
        .collect()
}

/// A peer of the agent's own namespace that selects the Pods of `role`, and nothing else.
fn pods_of(role: &str) -> NetworkPolicyPeer {
    NetworkPolicyPeer {
        pod_selector: Some(LabelSelector {
            match_labels: Some(
                [
                    (String::from("gatehouse.dev/agent"), String::from("main")),
                    (String::from(LABEL_ROLE), role.to_owned()),
                ]
                .into(),
            ),
            ..LabelSelector::default()
        }),
        ..NetworkPolicyPeer::default()
    }
}

fn port_7420() -> Vec<NetworkPolicyPort> {
    vec![NetworkPolicyPort {
        port: Some(IntOrString::Int(7420)),
        protocol: Some(String::from("TCP")),
        ..NetworkPolicyPort::default()
    }]
}

/// Returns the rendered YAML with the revision redacted, which differs whenever the file does.
fn without_revision(text: &str) -> String {
    let rendered = support::render_text(text);
    rendered
        .to_yaml()
        .replace(rendered.revision(), "[revision]")
}

#[test]
fn several_replicas_render_a_rolling_gateway_deployment_without_a_claim() {
    let rendered = support::render_text(support::DEDICATED_REPLICAS);
    let kinds: Vec<(&str, &str)> = rendered
        .manifests()
        .iter()
        .map(|manifest| (manifest.kind(), manifest.name()))
        .collect();
    // No claim at all: the replicas keep nothing on one, and each node host's comes from the
    // set's template.
    assert_eq!(
        kinds,
        vec![
            ("ServiceAccount", "main-gateway"),
            ("ServiceAccount", "main-harness"),
            ("Service", "main-gateway"),
            ("NetworkPolicy", "main-default-deny"),
            ("NetworkPolicy", "main-gateway"),
            ("NetworkPolicy", "main-harness"),
            ("PodDisruptionBudget", "main-gateway"),
            ("Deployment", "main-gateway"),
            ("PodDisruptionBudget", "main-harness"),
            ("StatefulSet", "main-harness"),
        ]
    );

    let spec = gateway(support::DEDICATED_REPLICAS).spec.unwrap();
    assert_eq!(spec.replicas, Some(3));
    let strategy = spec.strategy.unwrap();
    assert_eq!(strategy.type_.as_deref(), Some("RollingUpdate"));
    let rolling = strategy.rolling_update.unwrap();
    // A new replica starts before an old one stops, so the agent keeps serving.
    assert_eq!(
        (rolling.max_surge, rolling.max_unavailable),
        (Some(IntOrString::Int(1)), Some(IntOrString::Int(0)))
    );

    let mut pod = spec.template.spec.unwrap();
    let state = pod
        .volumes
        .iter()
        .flatten()
        .find(|volume| volume.name == "gateway-state")
        .unwrap();
    assert!(state.persistent_volume_claim.is_none(), "{state:?}");
    assert!(state.empty_dir.is_some(), "{state:?}");

    // The replicas spread over the machines softly, as the node hosts do.
    let [spread] = <[_; 1]>::try_from(pod.topology_spread_constraints.take().unwrap()).unwrap();
    assert_eq!(
        (
            spread.topology_key.as_str(),
            spread.when_unsatisfiable.as_str(),
            spread.max_skew
        ),
        ("kubernetes.io/hostname", "ScheduleAnyway", 1)
    );
    let selected = spread.label_selector.unwrap().match_labels.unwrap();
    assert_eq!(
        selected.get(LABEL_ROLE).map(String::as_str),
        Some("gateway")
    );
}

#[test]
fn each_gateway_pod_is_a_replica_named_after_itself_at_its_pod_ip() {
    let env = gateway_env(support::DEDICATED_REPLICAS);
    assert_eq!(
        field_of(&env, "GATEHOUSE_REPLICA_ID").as_deref(),
        Some("metadata.name")
    );
    assert_eq!(
        field_of(&env, "GATEHOUSE_POD_IP").as_deref(),
        Some("status.podIP")
    );
    let advertise = env
        .iter()
        .find(|var| var.name == "GATEHOUSE_ADVERTISE_URL")
        .unwrap();
    assert_eq!(
        advertise.value.as_deref(),
        Some("http://$(GATEHOUSE_POD_IP):7420")
    );
    // Kubernetes expands `$(VAR)` only from variables defined before it.
    let at = |name: &str| env.iter().position(|var| var.name == name).unwrap();
    assert!(
        at("GATEHOUSE_POD_IP") < at("GATEHOUSE_ADVERTISE_URL"),
        "{env:?}"
    );
    // Setup codes and the node hosts still name the Service, which reaches any replica.
    let public = env
        .iter()
        .find(|var| var.name == "GATEHOUSE_PUBLIC_URL")
        .unwrap();
    assert_eq!(
        public.value.as_deref(),
        Some("http://main-gateway.gatehouse-acme.svc:7420")
    );
    let set = support::objects(&support::render_text(support::DEDICATED_REPLICAS))
        .into_iter()
        .find_map(|object| match object {
            Object::StatefulSet(set) => Some(set),
            _ => None,
        })
        .unwrap();
    let node_args = set.spec.unwrap().template.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        node_args
            .windows(2)
            .any(|pair| pair == ["--gateway", "http://main-gateway.gatehouse-acme.svc:7420"]),
        "{node_args:?}"
    );

    // `gateway.leaseSeconds` is the Gateway's flag, and only when set.
    let args = |text: &str| gateway_pod(text).containers[0].args.clone().unwrap();
    assert_eq!(
        args(support::DEDICATED_REPLICAS),
        vec!["gateway", "--lease-seconds", "10"]
    );
    let default_lease = support::replace(support::DEDICATED_REPLICAS, "  leaseSeconds: 10\n", "");
    assert_eq!(args(&default_lease), vec!["gateway"]);
    // The lease is no replica setting alone: one Gateway on PostgreSQL holds one too.
    let one_with_lease = support::replace(
        &with_replicas(1),
        "  leaseSeconds: 10\n",
        "  leaseSeconds: 30\n",
    );
    assert_eq!(
        args(&one_with_lease),
        vec!["gateway", "--lease-seconds", "30"]
    );
}

#[test]
fn the_gateway_disruption_budget_selects_exactly_the_gateway_pods() {
    let budgets = budgets(support::DEDICATED_REPLICAS);
    let names: Vec<Option<&str>> = budgets
        .iter()
        .map(|budget| budget.metadata.name.as_deref())
        .collect();
    assert_eq!(names, vec![Some("main-gateway"), Some("main-harness")]);
    let pod_labels = |text: &str, role: &str| {
        let objects = support::objects(&support::render_text(text));
        objects
            .into_iter()
            .find_map(|object| match object {
                Object::Deployment(deployment)
                    if deployment.metadata.name.as_deref() == Some(&format!("main-{role}")) =>
                {
                    deployment.spec.unwrap().template.metadata.unwrap().labels
                }
                Object::StatefulSet(set)
                    if set.metadata.name.as_deref() == Some(&format!("main-{role}")) =>
                {
                    set.spec.unwrap().template.metadata.unwrap().labels
                }
                _ => None,
            })
            .unwrap()
    };
    let gateway_labels = pod_labels(support::DEDICATED_REPLICAS, "gateway");
    let harness_labels = pod_labels(support::DEDICATED_REPLICAS, "harness");
    let spec = budgets[0].spec.clone().unwrap();
    assert_eq!(spec.max_unavailable, Some(IntOrString::Int(1)));
    assert_eq!(spec.min_available, None);
    assert_eq!(
        spec.unhealthy_pod_eviction_policy.as_deref(),
        Some("AlwaysAllow")
    );
    let selector = spec.selector.unwrap();
    assert_eq!(selector.match_expressions, None);
    let selected = selector.match_labels.unwrap();
    let matches = |labels: &std::collections::BTreeMap<String, String>| {
        selected
            .iter()
            .all(|(key, value)| labels.get(key) == Some(value))
    };
    assert!(matches(&gateway_labels), "{selected:?} {gateway_labels:?}");
    assert!(!matches(&harness_labels), "{selected:?} {harness_labels:?}");
    // The Harness budget is built the same way, for the Harness Pods.
    let harness = budgets[1].spec.clone().unwrap();
    assert_eq!(
        (
            harness.max_unavailable,
            harness.unhealthy_pod_eviction_policy
        ),
        (spec.max_unavailable, spec.unhealthy_pod_eviction_policy)
    );
}

#[test]
fn the_replicas_may_reach_each_other_on_7420_and_nothing_more() {
    let spec = support::network_policy(support::DEDICATED_REPLICAS, "main-gateway")
        .spec
        .unwrap();
    assert_eq!(
        spec.policy_types,
        Some(vec![String::from("Ingress"), String::from("Egress")])
    );
    let ingress = spec.ingress.unwrap();
    let from_gateway: Vec<_> = ingress
        .iter()
        .filter(|rule| rule.from.as_deref() == Some(&[pods_of("gateway")][..]))
        .collect();
    assert_eq!(from_gateway.len(), 1, "{ingress:?}");
    assert_eq!(from_gateway[0].ports, Some(port_7420()));
    // Still from the operators' namespaces and the Harness, and from nowhere else.
    assert_eq!(ingress.len(), 3, "{ingress:?}");
    assert!(
        ingress
            .iter()
            .any(|rule| rule.from.as_deref() == Some(&[pods_of("harness")][..])),
        "{ingress:?}"
    );
    let egress = spec.egress.unwrap();
    let to_gateway: Vec<_> = egress
        .iter()
        .filter(|rule| rule.to.as_deref() == Some(&[pods_of("gateway")][..]))
        .collect();
    assert_eq!(to_gateway.len(), 1, "{egress:?}");
    assert_eq!(to_gateway[0].ports, Some(port_7420()));

    // One replica has no one to call, and is admitted by no other Gateway Pod.
    let single = support::network_policy(&with_replicas(1), "main-gateway")
        .spec
        .unwrap();
    for rule in single.ingress.iter().flatten() {
        assert_ne!(rule.from.as_deref(), Some(&[pods_of("gateway")][..]));
    }
    for rule in single.egress.iter().flatten() {
        assert_ne!(rule.to.as_deref(), Some(&[pods_of("gateway")][..]));
    }
    assert_eq!(single.ingress.unwrap().len(), 2);
    assert_eq!(single.egress.unwrap().len(), egress.len() - 1);

    // The Harness policy does not change with the replicas.
    assert_eq!(
        support::network_policy(support::DEDICATED_REPLICAS, "main-harness").spec,
        support::network_policy(&with_replicas(1), "main-harness").spec
    );
}

#[test]
fn one_replica_renders_exactly_as_without_the_key() {
    // `replicas: 1` changes the revision (the file changed) and nothing else.
    for text in [
        support::DEDICATED_NATIVE,
        support::DEDICATED_POSTGRES_S3,
        support::EMBEDDED,
    ] {
        let explicit = support::replace(
            text,
            "gateway:\n  operatorTokenSecret:\n",
            "gateway:\n  replicas: 1\n  operatorTokenSecret:\n",
        );
        assert_ne!(
            support::render_text(&explicit).revision(),
            support::render_text(text).revision()
        );
        assert_eq!(without_revision(&explicit), without_revision(text));
    }
    // The replicas example with one replica is the single Gateway of old: one Pod, recreated,
    // with no replica settings, no spread and no budget of its own.
    let single = with_replicas(1);
    let spec = gateway(&single).spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    let strategy = spec.strategy.unwrap();
    assert_eq!(
        (strategy.type_.as_deref(), strategy.rolling_update),
        (Some("Recreate"), None)
    );
    let pod = spec.template.spec.unwrap();
    assert_eq!(pod.topology_spread_constraints, None);
    let env = pod.containers[0].env.clone().unwrap();
    for name in [
        "GATEHOUSE_REPLICA_ID",
        "GATEHOUSE_POD_IP",
        "GATEHOUSE_ADVERTISE_URL",
    ] {
        assert!(env.iter().all(|var| var.name != name), "{name}: {env:?}");
    }
    let names: Vec<Option<String>> = budgets(&single)
        .into_iter()
        .map(|budget| budget.metadata.name)
        .collect();
    assert_eq!(names, vec![Some(String::from("main-harness"))]);
}

#[test]
fn several_replicas_need_a_dedicated_gateway_with_store_and_media() {
    let block = |text: &str, from: &str, to: &str| {
        let start = text.find(from).unwrap();
        let end = text.find(to).unwrap();
        format!("{}{}", &text[..start], &text[end..])
    };
    let with_claim = |text: String| {
        support::replace(
            &text,
            "runtime:\n",
            "runtime:\n  gatewayStorageClassName: fast-rwo\n",
        )
    };
    let store_only = with_claim(block(
        support::DEDICATED_REPLICAS,
        "  media:\n",
        "harness:\n",
    ));
    let media_only = with_claim(block(
        support::DEDICATED_REPLICAS,
        "  store:\n",
        "  media:\n",
    ));
    let neither = support::replace(
        support::DEDICATED_NODES,
        "gateway:\n  operatorTokenSecret:\n",
        "gateway:\n  replicas: 2\n  operatorTokenSecret:\n",
    );
    for (text, lacking) in [
        (store_only, "set gateway.media, or set 1"),
        (media_only, "set gateway.store, or set 1"),
        (neither, "set gateway.store and gateway.media, or set 1"),
    ] {
        let message = refusal(&text);
        assert!(
            message.starts_with("gateway.replicas: several Gateway replicas share state only")
                && message.contains(lacking),
            "{message}"
        );
    }
    let embedded = support::replace(
        support::EMBEDDED,
        "gateway:\n  operatorTokenSecret:\n",
        "gateway:\n  replicas: 2\n  operatorTokenSecret:\n",
    );
    let message = refusal(&embedded);
    assert!(
        message.contains("use dedicated-native or dedicated-codex"),
        "{message}"
    );
    for (count, expected) in [
        (0, "gateway.replicas: 0 is not between 1 and 16"),
        (17, "gateway.replicas: 17 is not between 1 and 16"),
    ] {
        assert_eq!(refusal(&with_replicas(count)), expected);
    }
    for count in [1, 2, gatehouse_deploy::installation::MAX_GATEWAY_REPLICAS] {
        let spec = gateway(&with_replicas(count)).spec.unwrap();
        assert_eq!(spec.replicas, Some(i32::try_from(count).unwrap()));
    }
}

/// Returns the message of the refusal of `text`, which must name `gateway.replicas`.
fn refusal(text: &str) -> String {
    let error = Installation::from_yaml(text).unwrap_err();
    assert_eq!(error.code(), "INSTALLATION_INVALID_VALUE", "{error}");
    assert_eq!(error.path(), Some("gateway.replicas"), "{error}");
    error.to_string()
}

/// A Codex agent's one node links to one replica, whose turns run there; the other replicas
/// serve the API and forward what needs the node.
#[test]
fn a_codex_agent_may_run_several_replicas() {
    let head =
        &support::DEDICATED_REPLICAS[..support::DEDICATED_REPLICAS.find("harness:\n").unwrap()];
    let codex = support::replace(
        &format!("{head}harness:\n  setupCodeSecret: {{name: main-setup-code, key: setupCode}}\n"),
        "topology: dedicated-native\n",
        "topology: dedicated-codex\n",
    );
    let rendered = support::render_text(&codex);
    let gateway = support::deployment(&rendered, "main-gateway");
    assert_eq!(gateway.spec.as_ref().unwrap().replicas, Some(3));
    let env = gateway.spec.unwrap().template.spec.unwrap().containers[0]
        .env
        .clone()
        .unwrap();
    assert!(
        env.iter()
            .any(|var| var.name == "GATEHOUSE_RUNTIME" && var.value.as_deref() == Some("codex")),
        "{env:?}"
    );
    assert_eq!(
        field_of(&env, "GATEHOUSE_REPLICA_ID").as_deref(),
        Some("metadata.name")
    );
    // Its one node host stays one Pod, recreated, on its own claim.
    let harness = support::deployment(&rendered, "main-harness").spec.unwrap();
    assert_eq!(harness.replicas, Some(1));
    assert_eq!(harness.strategy.unwrap().type_.as_deref(), Some("Recreate"));
}
