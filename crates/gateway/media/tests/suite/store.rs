use std::os::unix::fs::PermissionsExt;

use bytes::Bytes;
use gatehouse_media::MediaError;
use gatehouse_media::MediaRecord;
use gatehouse_media::MediaStore;
use pretty_assertions::assert_eq;
use sha2::Digest;

fn open(dir: &tempfile::TempDir) -> MediaStore {
    MediaStore::open(&dir.path().join("media")).unwrap()
}

#[tokio::test]
async fn put_get_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let bytes = Bytes::from_static(b"hello media\n");
    let record = store
        .put(bytes.clone(), "text/plain", Some("notes/hello.txt"))
        .await
        .unwrap();
    let expected = MediaRecord {
        id: blake3::hash(&bytes).to_hex().to_string(),
        sha256: hex::encode(sha2::Sha256::digest(&bytes)),
        size: 12,
        mime_type: "text/plain".to_owned(),
        filename: Some("hello.txt".to_owned()),
        created_at: record.created_at,
    };
    assert_eq!(record, expected);
    let (read_record, read_bytes) = store.get(&record.id).await.unwrap();
    assert_eq!(read_record, expected);
    assert_eq!(read_bytes, bytes);
    assert_eq!(store.record(&record.id).await.unwrap(), expected);
}

#[tokio::test]
async fn id_is_the_blake3_of_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    // The BLAKE3 of the empty input, from the BLAKE3 test vectors.
    let empty = store
        .put(Bytes::new(), "application/octet-stream", None)
        .await
        .unwrap();
    assert_eq!(
        empty.id,
        "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"
    );
    assert_eq!(
        empty.sha256,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!(empty.size, 0);
    assert_eq!(empty.filename, None);
    let (_, bytes) = store.get(&empty.id).await.unwrap();
    assert!(bytes.is_empty());
}

#[tokio::test]
async fn duplicate_put_is_idempotent() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let bytes = Bytes::from(vec![7_u8; 4096]);
    let first = store
        .put(bytes.clone(), "image/png", Some("a.png"))
        .await
        .unwrap();
    let second = store
        .put(bytes.clone(), "application/octet-stream", Some("b.bin"))
        .await
        .unwrap();
    // The first upload's record wins.
    assert_eq!(second, first);
    let other = store
        .put(Bytes::from_static(b"other"), "text/plain", None)
        .await
        .unwrap();
    assert_ne!(other.id, first.id);
}

#[tokio::test]
async fn concurrent_duplicate_puts_agree() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let bytes = Bytes::from(vec![3_u8; 100_000]);
    let puts = (0..8).map(|_| store.put(bytes.clone(), "application/octet-stream", None));
    let records = futures_util::future::join_all(puts).await;
    let first = records[0].as_ref().unwrap().clone();
    for record in records {
        assert_eq!(record.unwrap(), first);
    }
}

#[tokio::test]
async fn objects_are_content_addressed_on_disk() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let record = store
        .put(Bytes::from_static(b"layout"), "text/plain", None)
        .await
        .unwrap();
    let root = dir.path().join("media");
    let blob = root.join("blobs").join(&record.id[..2]).join(&record.id);
    assert_eq!(std::fs::read(&blob).unwrap(), b"layout");
    let meta: serde_json::Value = serde_json::from_slice(
        &std::fs::read(root.join("meta").join(format!("{}.json", record.id))).unwrap(),
    )
    .unwrap();
    assert_eq!(meta["id"], record.id.as_str());
    assert_eq!(meta["mimeType"], "text/plain");
    assert_eq!(
        std::fs::metadata(&root).unwrap().permissions().mode() & 0o777,
        0o700
    );
}

#[tokio::test]
async fn invalid_ids_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let valid = store
        .put(Bytes::from_static(b"x"), "text/plain", None)
        .await
        .unwrap();
    let cases = [
        String::new(),
        "../x".to_owned(),
        "a".repeat(63),
        "a".repeat(65),
        valid.id.to_uppercase(),
        format!("{}g", &valid.id[..63]),
        format!("../{}", &valid.id[3..]),
        format!("{}/..", &valid.id[..61]),
        format!("{}\0", &valid.id[..63]),
        format!("{}.json", &valid.id[..59]),
        format!("blobs/{}", &valid.id[..58]),
    ];
    for id in cases {
        assert!(
            matches!(store.get(&id).await, Err(MediaError::InvalidId)),
            "get {id:?}"
        );
        let error = store.record(&id).await.unwrap_err();
        assert_eq!(error.code(), "INVALID_MEDIA_ID", "record {id:?}");
        assert!(error.is_client_error());
    }
}

#[tokio::test]
async fn missing_media_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let missing = "0".repeat(64);
    let error = store.get(&missing).await.unwrap_err();
    assert!(
        matches!(&error, MediaError::NotFound { id } if *id == missing),
        "{error:?}"
    );
    assert_eq!(error.code(), "MEDIA_NOT_FOUND");
    assert_eq!(
        store.record(&missing).await.unwrap_err().code(),
        "MEDIA_NOT_FOUND"
    );
}

#[tokio::test]
async fn reopened_store_finds_old_blobs() {
    let dir = tempfile::tempdir().unwrap();
    let record = open(&dir)
        .put(
            Bytes::from_static(b"durable"),
            "text/markdown",
            Some("n.md"),
        )
        .await
        .unwrap();
    let reopened = open(&dir);
    let (read_record, bytes) = reopened.get(&record.id).await.unwrap();
    assert_eq!(read_record, record);
    assert_eq!(&bytes[..], b"durable");
    // A repeat upload after reopening keeps the original record.
    let again = reopened
        .put(Bytes::from_static(b"durable"), "text/plain", None)
        .await
        .unwrap();
    assert_eq!(again, record);
}

#[tokio::test]
async fn damaged_blob_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let record = store
        .put(Bytes::from_static(b"intact"), "text/plain", None)
        .await
        .unwrap();
    let blob = dir
        .path()
        .join("media/blobs")
        .join(&record.id[..2])
        .join(&record.id);
    std::fs::write(&blob, b"broken").unwrap();
    let error = store.get(&record.id).await.unwrap_err();
    assert_eq!(error.code(), "MEDIA_CORRUPT");
}

#[tokio::test]
async fn invalid_mime_type_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&dir);
    let bytes = Bytes::from_static(b"never stored");
    let error = store
        .put(bytes.clone(), "bad\ntype/x", None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "INVALID_MIME_TYPE");
    let id = blake3::hash(&bytes).to_hex().to_string();
    assert_eq!(
        store.record(&id).await.unwrap_err().code(),
        "MEDIA_NOT_FOUND"
    );
}

#[tokio::test]
async fn works_over_any_object_store() {
    let memory = std::sync::Arc::new(object_store::memory::InMemory::new());
    let store = MediaStore::with_object_store(memory);
    let record = store
        .put(Bytes::from_static(b"in memory"), "text/plain", None)
        .await
        .unwrap();
    let again = store
        .put(Bytes::from_static(b"in memory"), "text/plain", None)
        .await
        .unwrap();
    assert_eq!(again, record);
    assert_eq!(&store.get(&record.id).await.unwrap().1[..], b"in memory");
}

#[tokio::test]
async fn finding_6_the_quota_refuses_new_bytes_before_writing_and_counts_deletes() {
    let dir = tempfile::tempdir().unwrap();
    let media_dir = dir.path().join("media");
    // Bytes stored before the quota applies are counted when the store is first used.
    let first = MediaStore::open(&media_dir)
        .unwrap()
        .put(
            Bytes::from(vec![1u8; 600]),
            "application/octet-stream",
            None,
        )
        .await
        .unwrap();
    let store = MediaStore::open(&media_dir).unwrap().with_quota(1000);
    let second = Bytes::from(vec![2u8; 600]);
    let refused = store
        .put(second.clone(), "application/octet-stream", None)
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "MEDIA_QUOTA_EXCEEDED");
    assert!(
        matches!(
            refused,
            MediaError::QuotaExceeded {
                quota_bytes: 1000,
                used_bytes: 600,
                size: 600
            }
        ),
        "{refused:?}"
    );
    // Nothing of the refused put was written.
    assert_eq!(
        store.usage().await.unwrap(),
        gatehouse_media::MediaUsage {
            n_blobs: 1,
            bytes: 600
        }
    );
    // Bytes already stored need no room.
    let again = store
        .put(
            Bytes::from(vec![1u8; 600]),
            "application/octet-stream",
            None,
        )
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    // A delete gives the room back, and deleting twice is not an error.
    assert_eq!(store.delete(&first.id).await.unwrap(), Some(600));
    assert_eq!(store.delete(&first.id).await.unwrap(), None);
    assert!(matches!(
        store.get(&first.id).await,
        Err(MediaError::NotFound { .. })
    ));
    let stored = store
        .put(second, "application/octet-stream", None)
        .await
        .unwrap();
    assert_eq!(stored.size, 600);
    assert_eq!(store.usage().await.unwrap().bytes, 600);
    assert!(matches!(
        store.delete("../x").await,
        Err(MediaError::InvalidId)
    ));
}
