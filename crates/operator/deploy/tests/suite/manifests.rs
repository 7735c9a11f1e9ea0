//! Every emitted object parses back into its typed form, and unknown fields are refused.

use gatehouse_deploy::error::DeployError;
use gatehouse_deploy::manifest::Object;

use crate::suite::support;

#[test]
fn every_emitted_object_parses_back_into_its_typed_form() {
    for (name, text) in support::ALL_EXAMPLES {
        let rendered = support::render_text(text);
        let objects = support::objects(&rendered);
        assert_eq!(objects.len(), rendered.manifests().len(), "{name}");
        for (object, manifest) in objects.iter().zip(rendered.manifests()) {
            let kind = match object {
                Object::ServiceAccount(_) => "ServiceAccount",
                Object::PersistentVolumeClaim(_) => "PersistentVolumeClaim",
                Object::Service(_) => "Service",
                Object::NetworkPolicy(_) => "NetworkPolicy",
                Object::Deployment(_) => "Deployment",
                Object::StatefulSet(_) => "StatefulSet",
                Object::PodDisruptionBudget(_) => "PodDisruptionBudget",
                _ => "unexpected",
            };
            assert_eq!(kind, manifest.kind(), "{name}");
        }
    }
}

#[test]
fn an_unknown_field_fails_validation_with_its_path() {
    let rendered = support::render_text(support::DEDICATED_CODEX);
    let yaml = rendered
        .to_yaml()
        .replacen("  replicas: 1\n", "  replicas: 1\n  replica: 2\n", 1);
    let err = gatehouse_deploy::manifest::parse_manifests(&yaml).unwrap_err();
    match &err {
        DeployError::InvalidManifest { index, problem } => {
            assert_eq!(*index, 8);
            assert_eq!(problem, "unknown fields: spec.replica");
        }
        other => panic!("unexpected error {other}"),
    }
    assert!(!err.is_config_error());

    let yaml = rendered.to_yaml().replacen(
        "          readOnlyRootFilesystem: true\n",
        "          readOnlyRootFilesystem: true\n          readOnlyRootFileSystem: true\n",
        1,
    );
    let err = gatehouse_deploy::manifest::parse_manifests(&yaml).unwrap_err();
    assert!(
        err.to_string()
            .ends_with("unknown fields: spec.template.spec.containers[0].securityContext.readOnlyRootFileSystem"),
        "{err}"
    );
}

#[test]
fn a_field_of_the_wrong_type_fails_validation() {
    let rendered = support::render_text(support::EMBEDDED);
    let yaml = rendered
        .to_yaml()
        .replacen("  replicas: 1\n", "  replicas: one\n", 1);
    let err = gatehouse_deploy::manifest::parse_manifests(&yaml).unwrap_err();
    assert_eq!(err.code(), "MANIFEST_INVALID");
}

#[test]
fn an_unsupported_kind_fails_validation() {
    let yaml = "apiVersion: v1\nkind: Secret\nmetadata:\n  name: x\n";
    let err = gatehouse_deploy::manifest::parse_manifests(yaml).unwrap_err();
    assert!(err.to_string().contains("unsupported apiVersion"), "{err}");
}

#[test]
fn file_names_follow_apply_order() {
    let rendered = support::render_text(support::DEDICATED_CODEX);
    let names: Vec<String> = rendered
        .manifests()
        .iter()
        .enumerate()
        .map(|(index, manifest)| manifest.file_name(index))
        .collect();
    assert_eq!(names[0], "00-serviceaccount-main-gateway.yaml");
    assert_eq!(names[9], "09-deployment-main-harness.yaml");
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(sorted, names);
}
