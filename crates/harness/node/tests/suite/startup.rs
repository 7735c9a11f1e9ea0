//! Startup errors: what the operator must fix before the node connects.

use std::os::unix::fs::PermissionsExt;

use gatehouse_harness::NodeHostError;
use gatehouse_harness::host::NodeHost;
use pretty_assertions::assert_eq;

use crate::suite::fake_gateway::config;
use crate::suite::fake_gateway::setup_code_text;

fn prepare_err(config: gatehouse_harness::host::NodeHostConfig) -> NodeHostError {
    let err = NodeHost::prepare(config).unwrap_err();
    assert!(err.is_startup(), "{err:?}");
    err
}

#[test]
fn a_new_node_without_a_setup_code_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let err = prepare_err(config(&temp.path().join("harness"), None));
    assert!(matches!(err, NodeHostError::NoCredential), "{err:?}");
    assert!(err.to_string().contains("--setup-code-file"));
}

#[test]
fn a_malformed_setup_code_is_refused_without_echoing_it() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("setup-code");
    std::fs::write(&file, "c2VjcmV0LXRva2Vu-not-json").unwrap();
    let err = prepare_err(config(&temp.path().join("harness"), Some(file)));
    assert!(
        matches!(err, NodeHostError::SetupCodeInvalid { .. }),
        "{err:?}"
    );
    assert_eq!(err.code(), "SETUP_CODE_INVALID");
    let chain = anyhow_like(&err);
    assert!(!chain.contains("c2VjcmV0"), "{chain}");

    let err = prepare_err(config(
        &temp.path().join("harness"),
        Some(temp.path().join("missing")),
    ));
    assert!(
        matches!(err, NodeHostError::SetupCodeUnreadable { .. }),
        "{err:?}"
    );
}

#[test]
fn an_invalid_gateway_url_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("setup-code");
    std::fs::write(&file, setup_code_text("bt")).unwrap();
    let mut config = config(&temp.path().join("harness"), Some(file));
    config.gateway_urls = vec!["ftp://gateway".to_owned()];
    let err = prepare_err(config);
    assert!(
        matches!(err, NodeHostError::InvalidGatewayUrl { .. }),
        "{err:?}"
    );
}

#[test]
fn the_gateway_flag_wins_and_is_normalized() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("setup-code");
    std::fs::write(&file, setup_code_text("bt")).unwrap();
    let mut config = config(&temp.path().join("harness"), Some(file));
    config.gateway_urls = vec!["http://gateway:7420".to_owned()];
    let host = NodeHost::prepare(config).unwrap();
    assert_eq!(
        host.gateway_url().as_deref(),
        Some("ws://gateway:7420/node")
    );
}

#[test]
fn the_root_layout_is_created_private() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("setup-code");
    std::fs::write(&file, setup_code_text("bt")).unwrap();
    let root = temp.path().join("harness");
    let host = NodeHost::prepare(config(&root, Some(file))).unwrap();
    let mode = |name: &str| {
        std::fs::symlink_metadata(root.join(name))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("node"), 0o700);
    assert_eq!(mode("node/identity.json"), 0o600);
    assert_eq!(mode("workspace"), 0o700);
    assert_eq!(mode("tmp"), 0o700);
    assert!(!root.join("node/device-token.json").exists());
    let workspace = std::fs::canonicalize(root.join("workspace")).unwrap();
    assert_eq!(host.workspace_root(), workspace.to_str().unwrap());
}

#[test]
fn a_symlinked_identity_file_is_refused() {
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("setup-code");
    std::fs::write(&file, setup_code_text("bt")).unwrap();
    let first_root = temp.path().join("first");
    NodeHost::prepare(config(&first_root, Some(file.clone()))).unwrap();
    let root = temp.path().join("harness");
    std::fs::create_dir_all(root.join("node")).unwrap();
    std::os::unix::fs::symlink(
        first_root.join("node/identity.json"),
        root.join("node/identity.json"),
    )
    .unwrap();
    let err = prepare_err(config(&root, Some(file)));
    assert!(matches!(err, NodeHostError::StateSymlink { .. }), "{err:?}");
}

/// Formats an error with its source chain, as the CLI prints it.
fn anyhow_like(err: &NodeHostError) -> String {
    let mut text = err.to_string();
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
