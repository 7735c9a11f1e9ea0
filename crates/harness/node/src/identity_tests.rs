use std::os::unix::fs::PermissionsExt;

use base64::Engine;
use ed25519_dalek::Signature;
use pretty_assertions::assert_eq;
use sha2::Digest;

use crate::error::NodeHostError;
use crate::identity::IDENTITY_FILE;
use crate::identity::Identity;

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o7777
}

#[test]
fn creates_private_files_and_reloads_the_same_identity() {
    let temp = tempfile::tempdir().unwrap();
    let node_dir = temp.path().join("node");
    let created = Identity::load_or_create(&node_dir).unwrap();
    assert_eq!(mode(&node_dir), 0o700);
    assert_eq!(mode(&node_dir.join(IDENTITY_FILE)), 0o600);

    let loaded = Identity::load_or_create(&node_dir).unwrap();
    assert_eq!(loaded.device_id(), created.device_id());
    assert_eq!(loaded.public_key_base64(), created.public_key_base64());

    let file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(node_dir.join(IDENTITY_FILE)).unwrap()).unwrap();
    let public_key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(file["publicKey"].as_str().unwrap())
        .unwrap();
    assert_eq!(public_key.len(), 32);
    assert_eq!(
        file["deviceId"],
        hex::encode(sha2::Sha256::digest(&public_key))
    );
    assert_eq!(file["deviceId"], created.device_id());
    let secret_key = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(file["secretKey"].as_str().unwrap())
        .unwrap();
    assert_eq!(secret_key.len(), 32);
}

#[test]
fn tightens_an_existing_node_dir() {
    let temp = tempfile::tempdir().unwrap();
    let node_dir = temp.path().join("node");
    std::fs::create_dir(&node_dir).unwrap();
    std::fs::set_permissions(&node_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    Identity::load_or_create(&node_dir).unwrap();
    assert_eq!(mode(&node_dir), 0o700);
}

#[test]
fn refuses_a_symlinked_identity_file() {
    let temp = tempfile::tempdir().unwrap();
    let elsewhere = temp.path().join("elsewhere");
    let first = Identity::load_or_create(&elsewhere).unwrap();
    let node_dir = temp.path().join("node");
    std::fs::create_dir(&node_dir).unwrap();
    std::os::unix::fs::symlink(elsewhere.join(IDENTITY_FILE), node_dir.join(IDENTITY_FILE))
        .unwrap();
    let err = Identity::load_or_create(&node_dir).unwrap_err();
    assert!(matches!(err, NodeHostError::StateSymlink { .. }), "{err:?}");
    assert!(err.is_startup());
    assert!(!format!("{first:?}").contains("secret"));
}

#[test]
fn refuses_a_symlinked_node_dir() {
    let temp = tempfile::tempdir().unwrap();
    let real = temp.path().join("real");
    std::fs::create_dir(&real).unwrap();
    let node_dir = temp.path().join("node");
    std::os::unix::fs::symlink(&real, &node_dir).unwrap();
    let err = Identity::load_or_create(&node_dir).unwrap_err();
    assert!(matches!(err, NodeHostError::StateSymlink { .. }), "{err:?}");
}

#[test]
fn refuses_an_inconsistent_identity_file() {
    let temp = tempfile::tempdir().unwrap();
    let node_dir = temp.path().join("node");
    Identity::load_or_create(&node_dir).unwrap();
    let path = node_dir.join(IDENTITY_FILE);
    let mut file: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    file["deviceId"] = serde_json::json!("00");
    std::fs::write(&path, file.to_string()).unwrap();
    let err = Identity::load_or_create(&node_dir).unwrap_err();
    assert!(
        matches!(err, NodeHostError::InvalidStateFile { .. }),
        "{err:?}"
    );
}

#[test]
fn signatures_verify_strictly() {
    let temp = tempfile::tempdir().unwrap();
    let identity = Identity::load_or_create(&temp.path().join("node")).unwrap();
    let signature = identity.sign_base64(b"v3|payload");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(signature)
        .unwrap();
    let signature = Signature::from_slice(&bytes).unwrap();
    identity
        .verifying_key()
        .verify_strict(b"v3|payload", &signature)
        .unwrap();
    assert!(
        identity
            .verifying_key()
            .verify_strict(b"v3|other", &signature)
            .is_err()
    );
}
