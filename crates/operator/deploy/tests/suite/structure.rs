//! Structural assertions on the rendered objects: storage separation, Secret placement,
//! Pod security, the scratch claim, probes and network policy.

use std::collections::BTreeSet;

use gatehouse_deploy::error::DeployError;
use gatehouse_deploy::installation::Installation;
use gatehouse_deploy::manifest::Object;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Container;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::api::core::v1::Probe;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use pretty_assertions::assert_eq;
use sha2::Digest;

use crate::suite::support;

fn pod(deployment: &Deployment) -> &PodSpec {
    deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
}

fn all_containers(deployment: &Deployment) -> Vec<&Container> {
    let pod = pod(deployment);
    pod.containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .collect()
}

/// Returns the shared storage a Deployment mounts: claims and Secrets, but not `emptyDir`
/// volumes, which are private to each Pod.
fn mounted_storage(deployment: &Deployment) -> BTreeSet<String> {
    let mounted_names: BTreeSet<&str> = all_containers(deployment)
        .into_iter()
        .flat_map(|container| container.volume_mounts.iter().flatten())
        .map(|mount| mount.name.as_str())
        .collect();
    let mut storage = BTreeSet::new();
    for volume in pod(deployment).volumes.iter().flatten() {
        if !mounted_names.contains(volume.name.as_str()) {
            continue;
        }
        if let Some(claim) = &volume.persistent_volume_claim {
            storage.insert(format!("claim/{}", claim.claim_name));
        }
        if let Some(secret) = &volume.secret {
            storage.insert(format!("secret/{}", secret.secret_name.clone().unwrap()));
        }
        if let Some(config_map) = &volume.config_map {
            storage.insert(format!("configmap/{}", config_map.name));
        }
        if let Some(host_path) = &volume.host_path {
            storage.insert(format!("hostpath/{}", host_path.path));
        }
    }
    storage
}

/// Returns the names of every Secret a Deployment references, through env or volumes.
fn referenced_secrets(deployment: &Deployment) -> BTreeSet<String> {
    let mut secrets = BTreeSet::new();
    for container in all_containers(deployment) {
        for env in container.env.iter().flatten() {
            if let Some(source) = &env.value_from
                && let Some(selector) = &source.secret_key_ref
            {
                secrets.insert(selector.name.clone());
            }
        }
        for env_from in container.env_from.iter().flatten() {
            if let Some(secret) = &env_from.secret_ref {
                secrets.insert(secret.name.clone());
            }
        }
    }
    for volume in pod(deployment).volumes.iter().flatten() {
        if let Some(secret) = &volume.secret {
            secrets.insert(secret.secret_name.clone().unwrap());
        }
    }
    secrets
}

#[test]
fn no_storage_is_mounted_by_both_dedicated_deployments() {
    for text in [support::DEDICATED_NATIVE, support::DEDICATED_CODEX] {
        let rendered = support::render_text(text);
        let gateway = mounted_storage(&support::deployment(&rendered, "main-gateway"));
        let harness = mounted_storage(&support::deployment(&rendered, "main-harness"));
        assert!(!gateway.is_empty() && !harness.is_empty());
        let shared: Vec<&String> = gateway.intersection(&harness).collect();
        assert_eq!(shared, Vec::<&String>::new());
    }
}

#[test]
fn the_model_secret_is_referenced_only_by_the_harness() {
    for text in [support::DEDICATED_NATIVE, support::DEDICATED_CODEX] {
        let rendered = support::render_text(text);
        let gateway = referenced_secrets(&support::deployment(&rendered, "main-gateway"));
        let harness = referenced_secrets(&support::deployment(&rendered, "main-harness"));
        assert!(harness.contains("main-model-credential"));
        assert!(!gateway.contains("main-model-credential"));
        for gateway_only in [
            "main-operator-token",
            "main-embedding-credential",
            "main-slack",
        ] {
            assert!(
                !harness.contains(gateway_only),
                "{gateway_only} reached the harness"
            );
        }
        assert!(gateway.contains("main-operator-token"));
    }
    let native = support::render_text(support::DEDICATED_NATIVE);
    let gateway = referenced_secrets(&support::deployment(&native, "main-gateway"));
    assert_eq!(
        gateway,
        BTreeSet::from([
            String::from("main-operator-token"),
            String::from("main-slack")
        ])
    );
    let codex = support::render_text(support::DEDICATED_CODEX);
    let gateway = referenced_secrets(&support::deployment(&codex, "main-gateway"));
    assert_eq!(
        gateway,
        BTreeSet::from([
            String::from("main-embedding-credential"),
            String::from("main-operator-token"),
        ])
    );
    let harness = referenced_secrets(&support::deployment(&codex, "main-harness"));
    assert_eq!(
        harness,
        BTreeSet::from([
            String::from("main-model-credential"),
            String::from("main-setup-code")
        ])
    );
}

#[test]
fn every_container_runs_restricted_as_non_root_with_a_read_only_root() {
    for (name, text) in support::ALL_EXAMPLES {
        let rendered = support::render_text(text);
        let deployments = support::deployments(&rendered);
        assert!(!deployments.is_empty(), "{name}");
        for deployment in &deployments {
            let pod = pod(deployment);
            let pod_security = pod.security_context.as_ref().unwrap();
            assert_eq!(pod_security.run_as_non_root, Some(true), "{name}");
            assert_ne!(pod_security.run_as_user, Some(0), "{name}");
            assert_eq!(pod.automount_service_account_token, Some(false), "{name}");
            assert_eq!(
                pod_security.seccomp_profile.as_ref().unwrap().type_,
                "RuntimeDefault"
            );
            for container in all_containers(deployment) {
                let security = container.security_context.as_ref().unwrap();
                assert_eq!(security.run_as_non_root, Some(true), "{}", container.name);
                assert_ne!(security.run_as_user, Some(0), "{}", container.name);
                assert_eq!(security.read_only_root_filesystem, Some(true));
                assert_eq!(security.allow_privilege_escalation, Some(false));
                assert_eq!(security.privileged, Some(false));
                let capabilities = security.capabilities.as_ref().unwrap();
                assert_eq!(capabilities.drop, Some(vec![String::from("ALL")]));
                assert_eq!(capabilities.add, None);
            }
            let main_container = &pod.containers[0];
            let tmp = main_container
                .volume_mounts
                .iter()
                .flatten()
                .find(|mount| mount.mount_path == "/tmp")
                .unwrap();
            let tmp_volume = pod
                .volumes
                .iter()
                .flatten()
                .find(|volume| volume.name == tmp.name)
                .unwrap();
            assert!(tmp_volume.empty_dir.is_some());
        }
        for object in support::objects(&rendered) {
            if let Object::ServiceAccount(account) = object {
                assert_eq!(account.automount_service_account_token, Some(false));
            }
        }
    }
}

/// Returns what a probe checks: the HTTP path and port, or the command it runs.
fn probe_target(probe: &Probe) -> String {
    match (&probe.http_get, &probe.exec) {
        (Some(http), None) => format!("http {} port {:?}", http.path.clone().unwrap(), http.port),
        (None, Some(exec)) => format!("exec {}", exec.command.clone().unwrap().join(" ")),
        (http, exec) => panic!("a probe of an unexpected kind: {http:?} {exec:?}"),
    }
}

/// Every Deployment probes liveness with the meaning of `/healthz` and readiness with the
/// meaning of `/readyz`. The Gateway and the embedded Pod serve them over HTTP on 7420; the
/// Harness listens on no port, so it runs `gatehouse node health` instead.
#[test]
fn every_deployment_recreates_and_probes_healthz_and_readyz() {
    let http_probes = (
        String::from("http /healthz port String(\"http\")"),
        String::from("http /readyz port String(\"http\")"),
    );
    let node_health = "exec gatehouse node health --root /var/lib/gatehouse/harness";
    let harness_probes = (node_health.to_owned(), format!("{node_health} --ready"));
    for (name, text) in support::EXAMPLES {
        for deployment in support::deployments(&support::render_text(text)) {
            let spec = deployment.spec.as_ref().unwrap();
            assert_eq!(spec.replicas, Some(1), "{name}");
            assert_eq!(
                spec.strategy.as_ref().unwrap().type_.as_deref(),
                Some("Recreate")
            );
            let container = &pod(&deployment).containers[0];
            let probes = (
                probe_target(container.liveness_probe.as_ref().unwrap()),
                probe_target(container.readiness_probe.as_ref().unwrap()),
            );
            let expected = match deployment.metadata.name.as_deref() {
                Some("main-harness") => &harness_probes,
                Some("main-gateway" | "main") => &http_probes,
                other => panic!("unexpected deployment {other:?}"),
            };
            assert_eq!(&probes, expected, "{name}");
        }
    }
}

#[test]
fn the_gateway_and_the_embedded_pod_listen_only_on_7420() {
    for (name, text) in support::ALL_EXAMPLES {
        let rendered = support::render_text(text);
        for deployment in support::deployments(&rendered) {
            if deployment.metadata.name.as_deref() == Some("main-harness") {
                continue;
            }
            let ports: Vec<(Option<String>, i32)> = pod(&deployment).containers[0]
                .ports
                .iter()
                .flatten()
                .map(|port| (port.name.clone(), port.container_port))
                .collect();
            assert_eq!(ports, vec![(Some(String::from("http")), 7420)], "{name}");
        }
        for object in support::objects(&rendered) {
            if let Object::Service(service) = object {
                let ports: Vec<(Option<String>, i32, Option<IntOrString>)> = service
                    .spec
                    .unwrap()
                    .ports
                    .unwrap()
                    .into_iter()
                    .map(|port| (port.name, port.port, port.target_port))
                    .collect();
                assert_eq!(
                    ports,
                    vec![(
                        Some(String::from("http")),
                        7420,
                        Some(IntOrString::String(String::from("http")))
                    )],
                    "{name}"
                );
            }
        }
    }
}

/// The Harness only dials out: it exposes no port, and its probes never call into it over the
/// network.
#[test]
fn the_harness_exposes_no_port_and_has_no_network_probe() {
    for text in [support::DEDICATED_NATIVE, support::DEDICATED_CODEX] {
        let harness = support::deployment(&support::render_text(text), "main-harness");
        for container in all_containers(&harness) {
            assert_eq!(container.ports, None, "{}", container.name);
            let probes = [
                &container.liveness_probe,
                &container.readiness_probe,
                &container.startup_probe,
            ];
            for probe in probes.into_iter().flatten() {
                assert_eq!(probe.http_get, None, "{}", container.name);
                assert_eq!(probe.tcp_socket, None, "{}", container.name);
                assert_eq!(probe.grpc, None, "{}", container.name);
                assert!(probe.exec.is_some(), "{}", container.name);
            }
        }
    }
}

/// The node reads the setup code from the Secret file; argv names the file and never carries
/// the code, the Secret or a variable reference that Kubernetes would expand into argv.
#[test]
fn the_node_args_name_the_setup_code_file_and_never_the_code() {
    for text in [support::DEDICATED_NATIVE, support::DEDICATED_CODEX] {
        let harness = support::deployment(&support::render_text(text), "main-harness");
        let args = pod(&harness).containers[0].args.clone().unwrap();
        let flag_idx = args
            .iter()
            .position(|arg| arg == "--setup-code-file")
            .unwrap();
        assert_eq!(args[flag_idx + 1], "/run/gatehouse/setup-code/setup-code");
        for arg in &args {
            assert_ne!(arg, "--setup-code", "{args:?}");
            assert!(!arg.contains("main-setup-code"), "{args:?}");
            assert!(!arg.contains("setupCode"), "{args:?}");
            assert!(!arg.contains("$("), "{args:?}");
        }
    }
}

/// The node takes every setting as a flag; its only variable is the model key, named by
/// `--model-key-env`, so the key never enters argv.
#[test]
fn the_node_runs_with_the_real_flags_and_only_the_model_key_in_its_environment() {
    let codex = support::render_text(support::DEDICATED_CODEX);
    let container = pod(&support::deployment(&codex, "main-harness")).containers[0].clone();
    assert_eq!(
        container.args.unwrap(),
        vec![
            "node",
            "--gateway",
            "http://main-gateway.gatehouse-acme.svc:7420",
            "--root",
            "/var/lib/gatehouse/harness",
            "--runtime",
            "codex",
            "--setup-code-file",
            "/run/gatehouse/setup-code/setup-code",
            "--model",
            "openai-responses:https://api.openai.com/v1:gpt-5",
            "--model-key-env",
            "OPENAI_API_KEY",
        ]
    );
    let env: Vec<(String, Option<String>, Option<String>)> = container
        .env
        .unwrap()
        .into_iter()
        .map(|env| {
            let secret = env
                .value_from
                .and_then(|source| source.secret_key_ref)
                .map(|selector| format!("{}/{}", selector.name, selector.key));
            (env.name, env.value, secret)
        })
        .collect();
    assert_eq!(
        env,
        vec![(
            String::from("OPENAI_API_KEY"),
            None,
            Some(String::from("main-model-credential/apiKey"))
        )]
    );
}

#[test]
fn the_gateway_reads_only_the_variables_of_the_real_binary() {
    let codex = support::render_text(support::DEDICATED_CODEX);
    let container = pod(&support::deployment(&codex, "main-gateway")).containers[0].clone();
    assert_eq!(container.args.unwrap(), vec!["gateway"]);
    let env: Vec<(String, Option<String>)> = container
        .env
        .unwrap()
        .into_iter()
        .map(|env| (env.name, env.value))
        .collect();
    let value = |value: &str| Some(value.to_owned());
    assert_eq!(
        env,
        vec![
            (
                String::from("GATEHOUSE_STATE_DIR"),
                value("/var/lib/gatehouse/gateway/state")
            ),
            (String::from("GATEHOUSE_LISTEN"), value("0.0.0.0:7420")),
            (
                String::from("GATEHOUSE_PUBLIC_URL"),
                value("http://main-gateway.gatehouse-acme.svc:7420")
            ),
            (String::from("GATEHOUSE_RUNTIME"), value("codex")),
            (String::from("GATEHOUSE_TOKEN"), None),
            (String::from("GATEHOUSE_MEMORY_EMBEDDER"), value("openai")),
            (
                String::from("GATEHOUSE_MEMORY_EMBEDDING_BASE_URL"),
                value("https://api.openai.com/v1")
            ),
            (
                String::from("GATEHOUSE_MEMORY_EMBEDDING_MODEL"),
                value("text-embedding-3-small")
            ),
            (String::from("GATEHOUSE_MEMORY_EMBEDDING_API_KEY"), None),
        ]
    );
}

#[test]
fn the_embedded_pod_runs_up_with_the_model_flags() {
    let embedded = support::render_text(support::EMBEDDED);
    let container = pod(&support::deployment(&embedded, "main")).containers[0].clone();
    assert_eq!(
        container.args.unwrap(),
        vec![
            "up",
            "--data",
            "/var/lib/gatehouse",
            "--listen",
            "0.0.0.0:7420",
            "--runtime",
            "native",
            "--model",
            "openai-responses:https://api.openai.com/v1:gpt-5",
            "--model-key-env",
            "OPENAI_API_KEY",
            "--capacity",
            "8",
        ]
    );
    let env_names: Vec<String> = container
        .env
        .unwrap()
        .into_iter()
        .map(|env| env.name)
        .collect();
    assert_eq!(
        env_names,
        vec![
            "GATEHOUSE_TOKEN",
            "GATEHOUSE_MEMORY_EMBEDDER",
            "OPENAI_API_KEY"
        ]
    );
    let mounts: Vec<(String, Option<String>)> = container
        .volume_mounts
        .unwrap()
        .into_iter()
        .map(|mount| (mount.mount_path, mount.sub_path))
        .collect();
    assert_eq!(
        mounts,
        vec![
            (
                String::from("/var/lib/gatehouse/gateway"),
                Some(String::from("gateway"))
            ),
            (
                String::from("/var/lib/gatehouse/harness"),
                Some(String::from("harness"))
            ),
            (String::from("/tmp"), None),
        ]
    );
}

#[test]
fn labels_carry_agent_revision_and_role_on_every_object() {
    for (name, text) in support::ALL_EXAMPLES {
        let rendered = support::render_text(text);
        for manifest in rendered.manifests() {
            let value: serde_json::Value = serde_saphyr::from_str(manifest.yaml()).unwrap();
            let labels = &value["metadata"]["labels"];
            assert_eq!(labels["gatehouse.dev/agent"], "main", "{name}");
            assert_eq!(
                labels["gatehouse.dev/revision"],
                rendered.revision(),
                "{name}"
            );
            assert!(labels["gatehouse.dev/role"].is_string(), "{name}");
        }
        for deployment in support::deployments(&rendered) {
            let template_labels = deployment
                .spec
                .as_ref()
                .unwrap()
                .template
                .metadata
                .as_ref()
                .unwrap()
                .labels
                .clone()
                .unwrap();
            assert_eq!(
                template_labels
                    .get("gatehouse.dev/revision")
                    .map(String::as_str),
                Some(rendered.revision())
            );
            let selector = deployment
                .spec
                .as_ref()
                .unwrap()
                .selector
                .match_labels
                .clone();
            assert!(!selector.unwrap().contains_key("gatehouse.dev/revision"));
        }
    }
}

#[test]
fn claims_have_the_documented_names_sizes_and_access_modes() {
    let agent_hash = &hex::encode(sha2::Sha256::digest(b"main"))[..12];
    let expected_claims = |text: &str| -> Vec<(String, String, String)> {
        support::objects(&support::render_text(text))
            .into_iter()
            .filter_map(|object| match object {
                Object::PersistentVolumeClaim(claim) => Some(claim),
                _ => None,
            })
            .map(|claim| {
                let spec = claim.spec.unwrap();
                assert_eq!(spec.access_modes, Some(vec![String::from("ReadWriteOnce")]));
                let size = spec.resources.unwrap().requests.unwrap()["storage"]
                    .0
                    .clone();
                (
                    claim.metadata.name.unwrap(),
                    size,
                    spec.storage_class_name.unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(
        expected_claims(support::DEDICATED_NATIVE),
        vec![
            (
                format!("gateway-state-{agent_hash}"),
                String::from("10Gi"),
                String::from("fast-rwo")
            ),
            (
                format!("harness-state-{agent_hash}"),
                String::from("40Gi"),
                String::from("local-nvme")
            ),
        ]
    );
    assert_eq!(
        expected_claims(support::EMBEDDED),
        vec![(
            format!("gateway-state-{agent_hash}"),
            String::from("10Gi"),
            String::from("fast-rwo")
        )]
    );
}

#[test]
fn embedded_renders_one_deployment_and_one_claim() {
    let kinds: Vec<String> = support::render_text(support::EMBEDDED)
        .manifests()
        .iter()
        .map(|manifest| format!("{}/{}", manifest.kind(), manifest.name()))
        .collect();
    let agent_hash = &hex::encode(sha2::Sha256::digest(b"main"))[..12];
    assert_eq!(
        kinds,
        vec![
            String::from("ServiceAccount/main"),
            format!("PersistentVolumeClaim/gateway-state-{agent_hash}"),
            String::from("Service/main"),
            String::from("NetworkPolicy/main-default-deny"),
            String::from("NetworkPolicy/main-embedded"),
            String::from("Deployment/main"),
        ]
    );
}

/// The Gateway mounts its claim above its state directory, so it creates the state directory
/// (media included) itself with mode 0700; the Harness mounts its claim through one subPath per
/// node-root directory, on top of a per-Pod node root.
#[test]
fn storage_is_mounted_at_the_roots_the_commands_use() {
    for text in [support::DEDICATED_NATIVE, support::DEDICATED_CODEX] {
        let rendered = support::render_text(text);
        let mounts = |name: &str| -> Vec<(String, String, Option<String>)> {
            let deployment = support::deployment(&rendered, name);
            pod(&deployment).containers[0]
                .volume_mounts
                .iter()
                .flatten()
                .filter(|mount| !["tmp", "setup-code", "scratch"].contains(&mount.name.as_str()))
                .map(|mount| {
                    (
                        mount.name.clone(),
                        mount.mount_path.clone(),
                        mount.sub_path.clone(),
                    )
                })
                .collect()
        };
        let mount = |name: &str, path: &str, sub_path: Option<&str>| {
            (
                name.to_owned(),
                path.to_owned(),
                sub_path.map(str::to_owned),
            )
        };
        assert_eq!(
            mounts("main-gateway"),
            vec![mount("gateway-state", "/var/lib/gatehouse/gateway", None)]
        );
        assert_eq!(
            mounts("main-harness"),
            vec![
                mount("harness-root", "/var/lib/gatehouse/harness", None),
                mount(
                    "harness-state",
                    "/var/lib/gatehouse/harness/node",
                    Some("node")
                ),
                mount(
                    "harness-state",
                    "/var/lib/gatehouse/harness/workspace",
                    Some("workspace")
                ),
                mount(
                    "harness-state",
                    "/var/lib/gatehouse/harness/codex-home",
                    Some("codex-home")
                ),
                mount(
                    "harness-state",
                    "/var/lib/gatehouse/harness/sessions",
                    Some("sessions")
                ),
            ]
        );
        let harness = support::deployment(&rendered, "main-harness");
        let root = pod(&harness)
            .volumes
            .iter()
            .flatten()
            .find(|volume| volume.name == "harness-root")
            .unwrap();
        assert!(root.empty_dir.is_some());
        let init = &pod(&harness).init_containers.as_ref().unwrap()[0];
        let script = init.command.as_ref().unwrap().join(" ");
        assert!(script.contains("chmod 0700 /storage/node"), "{script}");
    }
}

#[test]
fn the_setup_code_reaches_the_harness_only_as_a_0440_file_without_sub_path() {
    let rendered = support::render_text(support::DEDICATED_NATIVE);
    let harness = support::deployment(&rendered, "main-harness");
    let pod = pod(&harness);
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|volume| volume.name == "setup-code")
        .unwrap();
    let secret = volume.secret.as_ref().unwrap();
    assert_eq!(secret.secret_name.as_deref(), Some("main-setup-code"));
    assert_eq!(secret.default_mode, Some(0o440));
    assert_eq!(secret.items.as_ref().unwrap()[0].mode, Some(0o440));
    let container = &pod.containers[0];
    let mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|mount| mount.name == "setup-code")
        .unwrap();
    assert_eq!(mount.sub_path, None);
    assert_eq!(mount.read_only, Some(true));
    for env in container.env.iter().flatten() {
        let from_secret = env
            .value_from
            .as_ref()
            .and_then(|source| source.secret_key_ref.as_ref())
            .map(|selector| selector.name.as_str());
        assert_ne!(from_secret, Some("main-setup-code"), "{}", env.name);
    }
    let args = container.args.clone().unwrap();
    let setup_args: Vec<&String> = args.iter().filter(|arg| arg.contains("setup")).collect();
    assert_eq!(
        setup_args,
        vec!["--setup-code-file", "/run/gatehouse/setup-code/setup-code"]
    );
    let gateway = support::deployment(&rendered, "main-gateway");
    assert!(!referenced_secrets(&gateway).contains("main-setup-code"));
}

#[test]
fn the_scratch_claim_is_mounted_only_in_the_harness_with_a_matching_binding() {
    let rendered = support::render_text(support::DEDICATED_NATIVE);
    let harness = support::deployment(&rendered, "main-harness");
    let gateway = support::deployment(&rendered, "main-gateway");
    assert!(mounted_storage(&harness).contains("claim/main-scratch"));
    assert!(!mounted_storage(&gateway).contains("claim/main-scratch"));
    let container = &pod(&harness).containers[0];
    let scratch_mount = container
        .volume_mounts
        .iter()
        .flatten()
        .find(|mount| mount.mount_path == "/sandbox/scratch")
        .unwrap();
    assert_eq!(scratch_mount.sub_path, None);
    assert_eq!(scratch_mount.read_only, None);
    let args = container.args.clone().unwrap();
    assert_eq!(
        args[args.len() - 2..].to_vec(),
        vec!["--scratch", "/sandbox/scratch"]
    );
    assert_eq!(args.iter().filter(|arg| *arg == "--scratch").count(), 1);
    let annotations = harness
        .spec
        .as_ref()
        .unwrap()
        .template
        .metadata
        .as_ref()
        .unwrap()
        .annotations
        .clone()
        .unwrap();
    assert_eq!(
        annotations["gatehouse.dev/scratch-claim-uid"],
        "3f0c9a4e-8d3b-4c39-9a51-2d0c6f1f7b11"
    );

    // Without a binding, no Deployment mounts anything at /sandbox/scratch.
    let codex = support::render_text(support::DEDICATED_CODEX);
    for deployment in support::deployments(&codex) {
        for container in all_containers(&deployment) {
            for mount in container.volume_mounts.iter().flatten() {
                assert_ne!(mount.mount_path, "/sandbox/scratch");
            }
            assert!(
                !container
                    .args
                    .clone()
                    .unwrap_or_default()
                    .contains(&String::from("--scratch"))
            );
        }
    }
    assert!(!codex.to_yaml().contains("scratch"));

    // A binding for another agent renders nothing.
    let foreign = support::replace(
        support::DEDICATED_NATIVE,
        "      agentId: main\n",
        "      agentId: other\n",
    );
    let err = Installation::from_yaml(&foreign).unwrap_err();
    assert!(
        matches!(err, DeployError::ScratchBindingMismatch { .. }),
        "{err}"
    );
}

#[test]
fn harness_network_policy_allows_only_the_gateway_port_dns_and_the_model() {
    let rendered = support::render_text(support::DEDICATED_NATIVE);
    let policy = support::objects(&rendered)
        .into_iter()
        .find_map(|object| match object {
            Object::NetworkPolicy(policy)
                if policy.metadata.name.as_deref() == Some("main-harness") =>
            {
                Some(policy)
            }
            _ => None,
        })
        .unwrap();
    let spec = policy.spec.unwrap();
    assert_eq!(spec.ingress, Some(Vec::new()));
    let egress = spec.egress.unwrap();
    let ports: Vec<Vec<(Option<String>, Option<IntOrString>)>> = egress
        .iter()
        .map(|rule| {
            rule.ports
                .iter()
                .flatten()
                .map(|port| (port.protocol.clone(), port.port.clone()))
                .collect()
        })
        .collect();
    assert_eq!(
        ports,
        vec![
            vec![(Some(String::from("TCP")), Some(IntOrString::Int(7420)))],
            vec![
                (Some(String::from("UDP")), Some(IntOrString::Int(53))),
                (Some(String::from("TCP")), Some(IntOrString::Int(53))),
            ],
            vec![(Some(String::from("TCP")), Some(IntOrString::Int(8000)))],
        ]
    );
    let model_peer = &egress[2].to.as_ref().unwrap()[0];
    assert_eq!(model_peer.ip_block.as_ref().unwrap().cidr, "10.96.0.0/12");
    let gateway_peer = &egress[0].to.as_ref().unwrap()[0];
    let selector = gateway_peer
        .pod_selector
        .clone()
        .unwrap()
        .match_labels
        .unwrap();
    assert_eq!(selector["gatehouse.dev/role"], "gateway");
}

#[test]
fn gateway_ingress_comes_only_from_operator_namespaces_and_the_harness() {
    let rendered = support::render_text(support::DEDICATED_CODEX);
    let policy = support::objects(&rendered)
        .into_iter()
        .find_map(|object| match object {
            Object::NetworkPolicy(policy)
                if policy.metadata.name.as_deref() == Some("main-gateway") =>
            {
                Some(policy)
            }
            _ => None,
        })
        .unwrap();
    let ingress = policy.spec.unwrap().ingress.unwrap();
    assert_eq!(ingress.len(), 2);
    let operator = ingress[0].from.as_ref().unwrap()[0]
        .namespace_selector
        .clone()
        .unwrap()
        .match_labels
        .unwrap();
    assert_eq!(
        operator["kubernetes.io/metadata.name"],
        "gatehouse-operators"
    );
    assert_eq!(
        ingress[0].ports.as_ref().unwrap()[0].port,
        Some(IntOrString::Int(7420))
    );
    let harness = ingress[1].from.as_ref().unwrap()[0]
        .pod_selector
        .clone()
        .unwrap()
        .match_labels
        .unwrap();
    assert_eq!(harness["gatehouse.dev/role"], "harness");
    // The Harness dials `/node` on the one Gateway port; a NetworkPolicy cannot narrow that to
    // a path, so the Gateway accepts node handshakes only on `/node`.
    assert_eq!(
        ingress[1].ports.as_ref().unwrap()[0].port,
        Some(IntOrString::Int(7420))
    );
}

#[test]
fn no_network_rule_allows_every_peer_or_every_port() {
    let empty_gateway_egress = support::replace(
        support::DEDICATED_NATIVE,
        "  egressCidrs:\n    - 0.0.0.0/0\nharness:",
        "  egressCidrs: []\nharness:",
    );
    let texts = support::ALL_EXAMPLES
        .map(|(_, text)| text)
        .into_iter()
        .chain([empty_gateway_egress.as_str()]);
    for text in texts {
        for object in support::objects(&support::render_text(text)) {
            let Object::NetworkPolicy(policy) = object else {
                continue;
            };
            let spec = policy.spec.unwrap();
            assert_eq!(
                spec.policy_types,
                Some(vec![String::from("Ingress"), String::from("Egress")])
            );
            for rule in spec.egress.iter().flatten() {
                assert!(!rule.to.as_ref().unwrap().is_empty(), "{rule:?}");
                assert!(!rule.ports.as_ref().unwrap().is_empty(), "{rule:?}");
            }
            for rule in spec.ingress.iter().flatten() {
                assert!(!rule.from.as_ref().unwrap().is_empty(), "{rule:?}");
                assert!(!rule.ports.as_ref().unwrap().is_empty(), "{rule:?}");
            }
        }
    }
}

/// Returns `(requests, limits)` of `container` as `[cpu, memory]` text, or panics naming what
/// is missing.
fn resources_of(container: &Container) -> ([String; 2], [String; 2]) {
    let resources = container
        .resources
        .as_ref()
        .unwrap_or_else(|| panic!("{} has no resources", container.name));
    let pick = |amounts: &Option<
        std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                side: &str| {
        let amounts = amounts
            .as_ref()
            .unwrap_or_else(|| panic!("{} has no {side}", container.name));
        ["cpu", "memory"].map(|kind| {
            amounts
                .get(kind)
                .unwrap_or_else(|| panic!("{} has no {side}.{kind}", container.name))
                .0
                .clone()
        })
    };
    (
        pick(&resources.requests, "requests"),
        pick(&resources.limits, "limits"),
    )
}

#[test]
fn every_container_has_cpu_and_memory_requests_and_limits() {
    let mut stateful_sets = 0;
    for (name, text) in support::ALL_EXAMPLES {
        let rendered = support::render_text(text);
        stateful_sets += support::objects(&rendered)
            .iter()
            .filter(|object| matches!(object, gatehouse_deploy::manifest::Object::StatefulSet(_)))
            .count();
        for (workload, pod) in support::pod_templates(&rendered) {
            for container in pod
                .containers
                .iter()
                .chain(pod.init_containers.iter().flatten())
            {
                let (requests, limits) = resources_of(container);
                assert!(
                    requests
                        .iter()
                        .chain(&limits)
                        .all(|value| !value.is_empty()),
                    "{name}: {workload}: {}",
                    container.name
                );
            }
        }
    }
    // The node hosts' StatefulSets were among them.
    assert!(stateful_sets > 0);
    // The documented defaults: the Harness's memory grows with its worker slots.
    let native = support::render_text(support::DEDICATED_NATIVE);
    let harness = pod(&support::deployment(&native, "main-harness")).containers[0].clone();
    assert_eq!(
        resources_of(&harness),
        (
            [String::from("500m"), String::from("768Mi")],
            [String::from("4"), String::from("5120Mi")]
        )
    );
}

#[test]
fn worker_capacity_and_resources_come_from_the_installation_file() {
    let text = support::replace(
        support::DEDICATED_NATIVE,
        "  gatewayStorageClassName: fast-rwo\n",
        "  gatewayStorageClassName: fast-rwo\n  workerCapacity: 2\n  resources:\n    \
         gateway: {requests: {cpu: 100m}, limits: {memory: 3Gi}}\n",
    );
    let rendered = support::render_text(&text);
    let harness = pod(&support::deployment(&rendered, "main-harness")).containers[0].clone();
    let args = harness.args.clone().unwrap();
    let at = args.iter().position(|arg| arg == "--capacity").unwrap();
    assert_eq!(args[at + 1], "2");
    assert_eq!(
        resources_of(&harness),
        (
            [String::from("500m"), String::from("384Mi")],
            [String::from("4"), String::from("2048Mi")]
        )
    );
    let gateway = pod(&support::deployment(&rendered, "main-gateway")).containers[0].clone();
    assert_eq!(
        resources_of(&gateway),
        (
            [String::from("100m"), String::from("512Mi")],
            [String::from("2"), String::from("3Gi")]
        )
    );
    // A request past its limit is refused, naming the key.
    let too_much = support::replace(
        support::DEDICATED_NATIVE,
        "  gatewayStorageClassName: fast-rwo\n",
        "  gatewayStorageClassName: fast-rwo\n  resources:\n    \
         harness: {requests: {memory: 64Gi}}\n",
    );
    match Installation::from_yaml(&too_much) {
        Err(DeployError::InvalidValue { path, .. }) => {
            assert_eq!(path, "runtime.resources.harness.requests.memory");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_image_pinned_by_digest_is_pulled_if_not_present_and_a_tag_always() {
    let native = support::render_text(support::DEDICATED_NATIVE);
    for deployment in support::deployments(&native) {
        for container in all_containers(&deployment) {
            assert!(container.image.as_deref().unwrap().contains("@sha256:"));
            assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
        }
    }
    let tagged = support::DEDICATED_NATIVE.replace(
        &format!(
            "@sha256:{}",
            hex::encode(sha2::Sha256::digest(b"gatehouse:0.1.0"))
        ),
        "",
    );
    assert!(!tagged.contains("@sha256:"));
    for deployment in support::deployments(&support::render_text(&tagged)) {
        for container in all_containers(&deployment) {
            assert_eq!(
                container.image_pull_policy.as_deref(),
                Some("Always"),
                "a tag can move to another image"
            );
        }
    }
}
