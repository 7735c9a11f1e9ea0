//! Listing a store and copying its blobs to another (`MediaStore::ids`, `contains`, `copy_to`).

use bytes::Bytes;
use gatehouse_media::MediaStore;
use gatehouse_media::transfer::CopyOutcome;
use pretty_assertions::assert_eq;

fn blob_path(root: &std::path::Path, id: &str) -> std::path::PathBuf {
    root.join("blobs").join(&id[..2]).join(id)
}

#[tokio::test]
async fn a_copy_keeps_the_record_skips_intact_blobs_and_replaces_damaged_ones() {
    let dir = tempfile::tempdir().unwrap();
    let source = MediaStore::open(&dir.path().join("from")).unwrap();
    let target_root = dir.path().join("to");
    let target = MediaStore::open(&target_root).unwrap();
    let first = source
        .put(Bytes::from_static(b"first"), "text/plain", Some("a.txt"))
        .await
        .unwrap();
    let second = source
        .put(Bytes::from_static(b"second"), "application/json", None)
        .await
        .unwrap();
    let mut ids = vec![first.id.clone(), second.id.clone()];
    ids.sort();
    assert_eq!(source.ids().await.unwrap(), ids);
    assert!(!target.contains(&first.id).await.unwrap());

    assert_eq!(
        source.copy_to(&first.id, &target).await.unwrap(),
        CopyOutcome::Copied { bytes: 5 }
    );
    // The record is the source's, time and file name included.
    assert_eq!(target.record(&first.id).await.unwrap(), first);
    assert!(target.contains(&first.id).await.unwrap());
    assert_eq!(
        source.copy_to(&first.id, &target).await.unwrap(),
        CopyOutcome::AlreadyPresent
    );
    // A damaged copy in the target is replaced.
    std::fs::write(blob_path(&target_root, &first.id), b"broken").unwrap();
    assert_eq!(
        source.copy_to(&first.id, &target).await.unwrap(),
        CopyOutcome::Copied { bytes: 5 }
    );
    assert_eq!(&target.get(&first.id).await.unwrap().1[..], b"first");
    // A damaged source blob is never copied.
    std::fs::write(blob_path(&dir.path().join("from"), &second.id), b"rotten").unwrap();
    let error = source.copy_to(&second.id, &target).await.unwrap_err();
    assert_eq!(error.code(), "MEDIA_CORRUPT");
    assert!(!target.contains(&second.id).await.unwrap());
}

/// A store whose root lies inside another store's `blobs/` (two installations sharing a bucket,
/// one prefix inside the other) is none of the outer store's business: its blobs are neither
/// listed, counted for the quota, nor copied by the outer one.
#[tokio::test]
async fn blobs_of_a_store_nested_under_this_one_are_not_this_stores() {
    let dir = tempfile::tempdir().unwrap();
    let outer = MediaStore::open(dir.path()).unwrap();
    let nested = MediaStore::open(&dir.path().join("blobs").join("ab")).unwrap();
    let own = outer
        .put(Bytes::from_static(b"outer"), "text/plain", None)
        .await
        .unwrap();
    nested
        .put(Bytes::from_static(b"nested"), "text/plain", None)
        .await
        .unwrap();
    assert_eq!(outer.ids().await.unwrap(), vec![own.id.clone()]);
    let usage = outer.usage().await.unwrap();
    assert_eq!((usage.n_blobs, usage.bytes), (1, 5));
}
