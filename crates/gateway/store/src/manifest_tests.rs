use gatehouse_protocol::worker::OmittedPaths;
use pretty_assertions::assert_eq;

use crate::manifest::Blob;
use crate::manifest::CheckpointManifest;
use crate::manifest::StoredEntry;
use crate::manifest::StoredManifest;
use crate::manifest::manifest_json;
use crate::manifest::parse_manifest;

const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn file(path: &str, media_id: &str) -> StoredEntry {
    let blob = Blob {
        media_id: Some(media_id.to_owned()),
    };
    StoredEntry::file(path, SHA, 3, true, blob)
}

fn link(path: &str, target: &str) -> StoredEntry {
    StoredEntry::symlink(path, target)
}

/// A worktree's tree is written with its keys in field order and absent fields left out, as
/// the rows of `worktree_versions`, `worktree_results` and the merge base hold it.
#[test]
fn a_stored_tree_keeps_its_text() {
    let tree = StoredManifest {
        entries: vec![file("bin/ünï.sh", "m1"), link("l", "bin/ünï.sh")],
    };
    let text = manifest_json(&tree).unwrap();
    assert_eq!(
        text,
        format!(
            r#"{{"entries":[{{"path":"bin/ünï.sh","kind":"file","executable":true,"sha256":"{SHA}","size":3,"mediaId":"m1"}},{{"path":"l","kind":"symlink","executable":false,"size":0,"target":"bin/ünï.sh"}}]}}"#
        )
    );
    assert_eq!(parse_manifest(&text).unwrap(), tree);
}

/// A checkpoint reads back whether it was written by a report (absent fields `null`), as a
/// tree (absent fields left out), or given back by PostgreSQL's `jsonb` (keys reordered, with
/// spaces).
#[test]
fn a_checkpoint_reads_back_in_every_stored_form() {
    let omitted = OmittedPaths {
        paths: vec![String::from("big.bin")],
        truncated: true,
    };
    let report = CheckpointManifest::report(vec![file("f", "m1"), link("l", "f")], omitted);
    let written = report.to_json().unwrap();
    assert_eq!(
        written,
        format!(
            r#"{{"entries":[{{"executable":true,"kind":"file","mediaId":"m1","path":"f","sha256":"{SHA}","size":3,"target":null}},{{"executable":false,"kind":"symlink","mediaId":null,"path":"l","sha256":null,"size":0,"target":"f"}}],"omitted":{{"paths":["big.bin"],"truncated":true}}}}"#
        )
    );
    assert_eq!(CheckpointManifest::parse(&written).unwrap(), report);
    let jsonb = format!(
        r#"{{"omitted": {{"paths": ["big.bin"], "truncated": true}}, "entries": [{{"kind": "file", "path": "f", "size": 3, "sha256": "{SHA}", "target": null, "mediaId": "m1", "executable": true}}, {{"kind": "symlink", "path": "l", "size": 0, "sha256": null, "target": "f", "mediaId": null, "executable": false}}]}}"#
    );
    assert_eq!(CheckpointManifest::parse(&jsonb).unwrap(), report);

    let tree = CheckpointManifest::tree(StoredManifest {
        entries: vec![link("l", "f")],
    });
    let written = tree.to_json().unwrap();
    assert_eq!(
        written,
        r#"{"entries":[{"executable":false,"kind":"symlink","path":"l","size":0,"target":"f"}]}"#
    );
    assert_eq!(CheckpointManifest::parse(&written).unwrap(), tree);
    assert_eq!(
        CheckpointManifest::parse("{}").unwrap(),
        CheckpointManifest::tree(StoredManifest::default())
    );
    assert!(CheckpointManifest::parse(r#"{"entries":[{"path":"f"}]}"#).is_err());
}
