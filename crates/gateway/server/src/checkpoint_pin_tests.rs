//! Pins the checkpoint id and the stored text of fixed manifests. A checkpoint's id is the
//! blake3 of its manifest's text, and the text is what the store keeps: any change to how a
//! manifest is written (field names, their order, absent fields written as `null` or left out)
//! would give an unchanged workspace a new id and store a new shape. The literals were computed
//! by the code that wrote manifests as untyped JSON, before they were typed.

use pretty_assertions::assert_eq;

use super::checkpoint_id;
use super::stored_entry;
use gatehouse_protocol::worker::CheckpointEntry;
use gatehouse_protocol::worker::Inline;
use gatehouse_protocol::worker::OmittedPaths;
use gatehouse_store::records::Blob;
use gatehouse_store::records::CheckpointManifest;
use gatehouse_store::records::StoredEntry;
use gatehouse_store::records::StoredManifest;

const SHA_A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const SHA_B: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const SHA_EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// A reported file, its content already stored as `media_id`.
fn file(path: &str, sha256: &str, size: u64, executable: bool, media_id: &str) -> Reported {
    let entry = CheckpointEntry::file(path, sha256, size, executable, Inline::default());
    (entry, Some(media_id.to_owned()), size)
}

/// A reported link.
fn link(path: &str, target: &str) -> Reported {
    (CheckpointEntry::symlink(path, target), None, 0)
}

/// A reported entry with the media id and size the Gateway recorded for it.
type Reported = (CheckpointEntry, Option<String>, u64);

/// Returns the id and the stored text of a reported checkpoint.
fn report(entries: Vec<Reported>, omitted: &OmittedPaths) -> (String, String) {
    let stored = entries
        .into_iter()
        .map(|(entry, media_id, size)| stored_entry(entry, media_id, size))
        .collect();
    let manifest = CheckpointManifest::report(stored, omitted.clone());
    (
        checkpoint_id(&manifest).unwrap(),
        manifest.to_json().unwrap(),
    )
}

/// Returns the id and the stored text of a worktree's first tree, committed as a checkpoint.
fn inventory(entries: Vec<StoredEntry>) -> (String, String) {
    let manifest = CheckpointManifest::tree(StoredManifest { entries });
    (
        checkpoint_id(&manifest).unwrap(),
        manifest.to_json().unwrap(),
    )
}

fn stored(path: &str, kind: &str, sha256: Option<&str>, size: u64) -> StoredEntry {
    StoredEntry {
        path: path.to_owned(),
        kind: kind.to_owned(),
        executable: false,
        sha256: sha256.map(str::to_owned),
        size,
        target: None,
        content: Blob {
            media_id: sha256.map(|sha256| format!("m-{}", &sha256[..4])),
        },
    }
}

#[test]
fn a_reported_checkpoint_keeps_its_id_and_text() {
    let entries = vec![
        file("README.md", SHA_A, 5, false, "m-readme"),
        file("bin/run.sh", SHA_B, 20, true, "m-run"),
        link("docs/latest", "../README.md"),
        file("données/naïve ☃.txt", SHA_A, 7, false, "m-unicode"),
        file("odd \"quoted\"\tname\\x", SHA_EMPTY, 0, false, "m-empty"),
        link("abs", "/etc/hosts"),
    ];
    let omitted = OmittedPaths {
        paths: vec![String::from("big.bin"), String::from("assets/video.mp4")],
        truncated: false,
    };
    assert_eq!(
        report(entries, &omitted),
        (
            String::from("f3c3ac4837ee92c0f3880b44757ca3a97f3c2bb7b02ddc9fb690cf30076d0ef3"),
            String::from(
                r#"{"entries":[{"executable":false,"kind":"file","mediaId":"m-readme","path":"README.md","sha256":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":5,"target":null},{"executable":true,"kind":"file","mediaId":"m-run","path":"bin/run.sh","sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":20,"target":null},{"executable":false,"kind":"symlink","mediaId":null,"path":"docs/latest","sha256":null,"size":0,"target":"../README.md"},{"executable":false,"kind":"file","mediaId":"m-unicode","path":"données/naïve ☃.txt","sha256":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":7,"target":null},{"executable":false,"kind":"file","mediaId":"m-empty","path":"odd \"quoted\"\tname\\x","sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":0,"target":null},{"executable":false,"kind":"symlink","mediaId":null,"path":"abs","sha256":null,"size":0,"target":"/etc/hosts"}],"omitted":{"paths":["big.bin","assets/video.mp4"]}}"#
            )
        )
    );
}

#[test]
fn a_truncated_and_an_empty_report_keep_their_ids_and_texts() {
    let truncated = OmittedPaths {
        paths: Vec::new(),
        truncated: true,
    };
    assert_eq!(
        report(vec![file("a", SHA_B, 1, false, "m-a")], &truncated),
        (
            String::from("8651c1005f5f7688c330a45a65f888fec7e0a9f6240fae72437fed7d303041aa"),
            String::from(
                r#"{"entries":[{"executable":false,"kind":"file","mediaId":"m-a","path":"a","sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":1,"target":null}],"omitted":{"truncated":true}}"#
            )
        )
    );
    assert_eq!(
        report(Vec::new(), &OmittedPaths::default()),
        (
            String::from("17e235e6291b29a843c8ac8962bec2b1923e9d4ea624888548725e13141e8439"),
            String::from(r#"{"entries":[]}"#)
        )
    );
}

#[test]
fn a_worktree_inventory_keeps_its_id_and_text() {
    let mut run = stored("bin/run.sh", "file", Some(SHA_B), 20);
    run.executable = true;
    let mut latest = stored("docs/latest", "symlink", None, 0);
    latest.target = Some(String::from("../README.md"));
    let entries = vec![
        stored("README.md", "file", Some(SHA_A), 5),
        run,
        latest,
        stored("données/naïve ☃.txt", "file", Some(SHA_EMPTY), 0),
    ];
    assert_eq!(
        inventory(entries),
        (
            String::from("e4c08e08066ec332768e14c2fd928702ef7cffb9e198595c7c36d5a649e2d5fe"),
            String::from(
                r#"{"entries":[{"executable":false,"kind":"file","mediaId":"m-aaaa","path":"README.md","sha256":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","size":5},{"executable":true,"kind":"file","mediaId":"m-0123","path":"bin/run.sh","sha256":"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef","size":20},{"executable":false,"kind":"symlink","path":"docs/latest","size":0,"target":"../README.md"},{"executable":false,"kind":"file","mediaId":"m-e3b0","path":"données/naïve ☃.txt","sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855","size":0}]}"#
            )
        )
    );
}
