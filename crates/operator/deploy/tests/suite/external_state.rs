//! `gateway.store` and `gateway.media`: the Gateway state in PostgreSQL and its blobs on S3. The
//! settings reach the Gateway as the variables the binary reads, every credential as a Secret
//! reference, the network policy lets the Gateway reach both, and a dedicated Gateway with both
//! external gets no claim.

use std::collections::BTreeMap;

use gatehouse_deploy::installation::Installation;
use gatehouse_deploy::manifest::Object;
use k8s_openapi::api::core::v1::EnvVar;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use pretty_assertions::assert_eq;

use crate::suite::support;

/// Returns the environment of the first container of the Deployment `name`, by variable.
fn env_of(text: &str, name: &str) -> BTreeMap<String, EnvVar> {
    let rendered = support::render_text(text);
    let deployment = support::deployment(&rendered, name);
    let pod = deployment.spec.unwrap().template.spec.unwrap();
    pod.containers[0]
        .env
        .clone()
        .unwrap()
        .into_iter()
        .map(|env| (env.name.clone(), env))
        .collect()
}

fn value(env: &BTreeMap<String, EnvVar>, name: &str) -> Option<String> {
    env.get(name).and_then(|env| env.value.clone())
}

fn secret(env: &BTreeMap<String, EnvVar>, name: &str) -> Option<(String, String)> {
    let selector = env
        .get(name)?
        .value_from
        .as_ref()?
        .secret_key_ref
        .as_ref()?;
    Some((selector.name.clone(), selector.key.clone()))
}

fn claims(text: &str) -> Vec<String> {
    support::objects(&support::render_text(text))
        .into_iter()
        .filter_map(|object| match object {
            Object::PersistentVolumeClaim(claim) => claim.metadata.name,
            _ => None,
        })
        .collect()
}

/// Returns each egress rule of `policy` as (CIDRs, ports).
fn egress(policy: &NetworkPolicy) -> Vec<(Vec<String>, Vec<i32>)> {
    policy
        .spec
        .as_ref()
        .unwrap()
        .egress
        .iter()
        .flatten()
        .map(|rule| {
            let cidrs = rule
                .to
                .iter()
                .flatten()
                .filter_map(|peer| peer.ip_block.as_ref().map(|block| block.cidr.clone()))
                .collect();
            let ports = rule
                .ports
                .iter()
                .flatten()
                .filter_map(|port| match &port.port {
                    Some(k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(port)) => {
                        Some(*port)
                    }
                    _ => None,
                })
                .collect();
            (cidrs, ports)
        })
        .collect()
}

#[test]
fn dedicated_postgres_s3_golden() {
    insta::assert_snapshot!(
        "dedicated_postgres_s3",
        support::redacted(support::DEDICATED_POSTGRES_S3)
    );
}

#[test]
fn the_gateway_gets_the_store_and_media_settings_and_secrets_by_reference_only() {
    let env = env_of(support::DEDICATED_POSTGRES_S3, "main-gateway");
    let expected_values = [
        (
            "GATEHOUSE_STORE",
            "postgres://gatehouse@db.internal:5432/gatehouse?sslmode=verify-full",
        ),
        ("GATEHOUSE_MEDIA", "s3://gatehouse-media/main"),
        ("GATEHOUSE_S3_ENDPOINT", "https://minio.storage.svc:9000"),
        ("GATEHOUSE_S3_REGION", "eu-west-1"),
        ("GATEHOUSE_S3_PATH_STYLE", "true"),
    ];
    for (name, expected) in expected_values {
        assert_eq!(value(&env, name).as_deref(), Some(expected), "{name}");
    }
    // An https endpoint needs no AWS_ALLOW_HTTP.
    assert!(!env.contains_key("AWS_ALLOW_HTTP"));
    let expected_secrets = [
        ("PGPASSWORD", ("main-postgres", "password")),
        ("AWS_ACCESS_KEY_ID", ("main-s3", "accessKeyId")),
        ("AWS_SECRET_ACCESS_KEY", ("main-s3", "secretAccessKey")),
    ];
    for (name, (secret_name, key)) in expected_secrets {
        assert_eq!(
            secret(&env, name),
            Some((secret_name.to_owned(), key.to_owned())),
            "{name}"
        );
        assert_eq!(value(&env, name), None, "{name} has an inline value");
    }
    // The Harness sees none of it.
    let harness = env_of(support::DEDICATED_POSTGRES_S3, "main-harness");
    for name in [
        "GATEHOUSE_STORE",
        "GATEHOUSE_MEDIA",
        "PGPASSWORD",
        "AWS_ACCESS_KEY_ID",
    ] {
        assert!(!harness.contains_key(name), "the Harness holds {name}");
    }
}

#[test]
fn a_dedicated_gateway_with_external_store_and_media_has_no_claim() {
    let rendered = support::render_text(support::DEDICATED_POSTGRES_S3);
    assert_eq!(
        claims(support::DEDICATED_POSTGRES_S3),
        vec![format!("harness-state-{}", rendered.agent_hash())]
    );
    let gateway = support::deployment(&rendered, "main-gateway");
    let pod = gateway.spec.unwrap().template.spec.unwrap();
    let state = pod
        .volumes
        .unwrap()
        .into_iter()
        .find(|volume| volume.name == "gateway-state")
        .unwrap();
    assert!(state.persistent_volume_claim.is_none());
    assert!(state.empty_dir.is_some());
    // With only one of them external, the Gateway keeps its claim.
    let store_only = cut_media(support::DEDICATED_POSTGRES_S3).replacen(
        "runtime:\n",
        "runtime:\n  gatewayStorageClassName: fast-rwo\n",
        1,
    );
    assert_eq!(claims(&store_only).len(), 2);
    let env = env_of(&store_only, "main-gateway");
    assert!(env.contains_key("GATEHOUSE_STORE"));
    assert!(!env.contains_key("GATEHOUSE_MEDIA"));
    // The embedded Pod keeps its claim: it holds the Harness.
    let embedded = embedded_with_external_state();
    assert_eq!(claims(&embedded).len(), 1);
    let env = env_of(&embedded, "main");
    assert_eq!(
        value(&env, "GATEHOUSE_MEDIA").as_deref(),
        Some("s3://gatehouse-media/main")
    );
    // A plain-HTTP endpoint is allowed with AWS_ALLOW_HTTP.
    assert_eq!(value(&env, "AWS_ALLOW_HTTP").as_deref(), Some("true"));
}

/// Returns `text` without its `gateway.media` block.
fn cut_media(text: &str) -> String {
    let start = text.find("  media:\n").unwrap();
    let end = text.find("harness:\n").unwrap();
    format!("{}{}", &text[..start], &text[end..])
}

/// The embedded example with a store and S3 media on a plain-HTTP endpoint.
fn embedded_with_external_state() -> String {
    support::replace(
        support::EMBEDDED,
        "gateway:\n",
        "gateway:\n  store:\n    url: postgres://gatehouse@db.internal/gatehouse\n    egressCidrs: [10.20.0.0/16]\n  media:\n    url: s3://gatehouse-media/main\n    endpoint: http://minio.storage.svc:9000\n    egressCidrs: [10.30.0.0/16]\n",
    )
}

#[test]
fn the_gateway_may_reach_postgres_and_s3_on_their_ports_only() {
    let rules = egress(&support::network_policy(
        support::DEDICATED_POSTGRES_S3,
        "main-gateway",
    ));
    assert!(
        rules.contains(&(vec![String::from("10.20.0.0/16")], vec![5432])),
        "{rules:?}"
    );
    assert!(
        rules.contains(&(vec![String::from("10.30.0.0/16")], vec![9000])),
        "{rules:?}"
    );
    let harness = egress(&support::network_policy(
        support::DEDICATED_POSTGRES_S3,
        "main-harness",
    ));
    assert!(
        !harness
            .iter()
            .any(|(cidrs, _)| cidrs.contains(&String::from("10.20.0.0/16"))),
        "{harness:?}"
    );
}

#[test]
fn bad_store_and_media_settings_are_refused_naming_the_key() {
    let base = support::DEDICATED_POSTGRES_S3;
    let store_url = "postgres://gatehouse@db.internal:5432/gatehouse?sslmode=verify-full";
    let cases: Vec<(String, &str)> = vec![
        (
            support::replace(
                base,
                store_url,
                "postgres://gatehouse:hunter2@db.internal/gh",
            ),
            "gateway.store.url",
        ),
        (
            support::replace(base, store_url, "sqlite:///var/lib/gatehouse/gateway.db"),
            "gateway.store.url",
        ),
        (
            support::replace(
                base,
                store_url,
                "postgres://db.internal/gh?password-env=GATEHOUSE_TOKEN",
            ),
            "gateway.store.url",
        ),
        (
            support::replace(
                base,
                "s3://gatehouse-media/main",
                "s3://gatehouse-media/a/../b",
            ),
            "gateway.media.url: the media URL's prefix 'a/../b'",
        ),
        (
            support::replace(base, "s3://gatehouse-media/main", "file:///var/lib/media"),
            "gateway.media.url",
        ),
        (
            support::replace(
                base,
                "    accessKeyIdSecret:\n      name: main-s3\n      key: accessKeyId\n",
                "",
            ),
            "gateway.media.accessKeyIdSecret: missing required key",
        ),
        (
            support::replace(base, "https://minio.storage.svc:9000", "minio:9000"),
            "gateway.media.endpoint",
        ),
        (
            support::replace(base, "      - 10.20.0.0/16\n", "      - everywhere\n"),
            "gateway.store.egressCidrs[0]",
        ),
        (
            support::replace(
                base,
                "runtime:\n",
                "runtime:\n  gatewayStorageClassName: fast-rwo\n",
            ),
            "runtime.gatewayStorageClassName",
        ),
        (
            cut_media(base),
            "runtime.gatewayStorageClassName: missing required key",
        ),
        (
            support::replace(
                base,
                "    region: eu-west-1\n",
                "    region: eu-west-1\n    accessKey: AKIA\n",
            ),
            "gateway.media.accessKey: unknown key",
        ),
    ];
    for (text, expected) in cases {
        let error = Installation::from_yaml(&text).unwrap_err().to_string();
        assert!(error.contains(expected), "{expected}: {error}");
        assert!(!error.contains("hunter2"), "{error}");
    }
}
