//! Finding 6 of issue 12: the checkpoint quota and the garbage collection of checkpoint blobs,
//! on a real SQLite store and a real media directory.

use std::collections::HashMap;
use std::sync::Arc;

use crate::audit::Audit;
use crate::retention::GcSummary;
use crate::retention::MediaRetention;
use crate::retention::NewBlob;
use crate::retention::RetentionConfig;
use bytes::Bytes;
use gatehouse_media::MediaError;
use gatehouse_media::MediaStore;
use gatehouse_protocol::worker::OmittedPaths;
use gatehouse_store::Store;
use gatehouse_store::records::Blob;
use gatehouse_store::records::CheckpointBlob;
use gatehouse_store::records::CheckpointManifest;
use gatehouse_store::records::NewUserMessage;
use gatehouse_store::records::QueueMode;
use gatehouse_store::records::StoredEntry;
use gatehouse_store::sqlite::SqliteStore;
use pretty_assertions::assert_eq;

struct Parts {
    _dir: tempfile::TempDir,
    store: Arc<dyn Store>,
    media: Arc<MediaStore>,
    retention: MediaRetention,
}

async fn parts(config: RetentionConfig, media_quota: Option<u64>) -> Parts {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> = Arc::new(
        SqliteStore::open(&dir.path().join("gateway.db"))
            .await
            .unwrap(),
    );
    let media = MediaStore::open(&dir.path().join("media")).unwrap();
    let media = Arc::new(match media_quota {
        Some(quota) => media.with_quota(quota),
        None => media,
    });
    let retention = MediaRetention::new(
        Arc::clone(&store),
        Arc::clone(&media),
        Audit::new(Arc::clone(&store)),
        config,
    );
    Parts {
        _dir: dir,
        store,
        media,
        retention,
    }
}

/// Creates session `key` with one message whose attachments are `attachments`.
async fn session(store: &Arc<dyn Store>, key: &str, attachments: serde_json::Value) {
    store
        .admit_user_message(&NewUserMessage {
            session_key: key.to_owned(),
            runtime: "native".to_owned(),
            turn_id: format!("turn-{key}"),
            text: "hi".to_owned(),
            attachments: serde_json::from_value(attachments).unwrap(),
            idempotency_key: None,
            queue_mode: QueueMode::Followup,
            origin: None,
            api_key: None,
            now_ms: 1,
        })
        .await
        .unwrap();
}

fn blob(fill: u8, size: usize) -> NewBlob {
    let bytes = Bytes::from(vec![fill; size]);
    NewBlob {
        media_id: gatehouse_media::media_id(&bytes),
        bytes,
    }
}

fn manifest(blobs: &[&NewBlob]) -> CheckpointManifest {
    let entries = blobs
        .iter()
        .enumerate()
        .map(|(idx, blob)| StoredEntry {
            path: format!("f{idx}"),
            kind: String::from("file"),
            executable: false,
            sha256: None,
            size: blob.bytes.len() as u64,
            target: None,
            content: Blob {
                media_id: Some(blob.media_id.clone()),
            },
        })
        .collect();
    CheckpointManifest::report(entries, OmittedPaths::default())
}

fn referenced(blobs: &[&NewBlob]) -> HashMap<String, u64> {
    blobs
        .iter()
        .map(|blob| (blob.media_id.clone(), blob.bytes.len() as u64))
        .collect()
}

async fn is_stored(media: &MediaStore, blob: &NewBlob) -> bool {
    match media.get(&blob.media_id).await {
        Ok(_) => true,
        Err(MediaError::NotFound { .. }) => false,
        Err(error) => panic!("{error:?}"),
    }
}

async fn audit_actions(store: &Arc<dyn Store>, action: &str) -> Vec<serde_json::Value> {
    store
        .audit_after(0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|event| event.action == action)
        .map(|event| {
            serde_json::json!({"outcome": event.outcome, "reasonCode": event.reason_code,
                "details": event.details})
        })
        .collect()
}

#[tokio::test]
async fn finding_6_collection_keeps_every_referenced_blob_and_takes_crash_leftovers() {
    let setup = parts(
        RetentionConfig {
            checkpoint_quota_bytes: 1 << 20,
            checkpoints_kept: 1,
        },
        None,
    )
    .await;
    let (store, media) = (&setup.store, &setup.media);
    let attached = blob(1, 10);
    let pinned = blob(2, 20);
    let in_checkpoint = blob(3, 30);
    let leftover = blob(4, 40);
    let never_written = blob(5, 50);
    session(
        store,
        "s",
        serde_json::json!([{"mediaId": attached.media_id, "required": true}]),
    )
    .await;
    // Every blob is listed as a checkpoint blob, as a checkpoint writer lists them first.
    let listed: Vec<CheckpointBlob> = [
        &attached,
        &pinned,
        &in_checkpoint,
        &leftover,
        &never_written,
    ]
    .iter()
    .map(|blob| CheckpointBlob {
        media_id: blob.media_id.clone(),
        size_bytes: blob.bytes.len() as u64,
    })
    .collect();
    store.register_checkpoint_blobs(&listed, 1).await.unwrap();
    for blob in [&attached, &pinned, &in_checkpoint, &leftover] {
        media
            .put(blob.bytes.clone(), "application/octet-stream", None)
            .await
            .unwrap();
    }
    store
        .pin_media(&pinned.media_id, "upload", 1)
        .await
        .unwrap();
    store
        .save_checkpoint("s", "c1", &manifest(&[&in_checkpoint]), 1, None)
        .await
        .unwrap();

    // `leftover` was written but its checkpoint never committed (a crash); `never_written` was
    // listed and the process died before writing it.
    let summary = setup.retention.collect_all().await.unwrap();
    assert_eq!(
        summary,
        GcSummary {
            pruned_checkpoints: 0,
            deleted_blobs: 1,
            deleted_bytes: 40,
            failed_blobs: 0
        }
    );
    for (blob, kept) in [
        (&attached, true),
        (&pinned, true),
        (&in_checkpoint, true),
        (&leftover, false),
    ] {
        assert_eq!(is_stored(media, blob).await, kept, "{}", blob.bytes[0]);
    }
    // Idempotent: a second run finds nothing and audits nothing.
    assert_eq!(
        setup.retention.collect_all().await.unwrap(),
        GcSummary::default()
    );
    assert!(store.checkpoint_blob_garbage().await.unwrap().is_empty());
    assert_eq!(
        audit_actions(store, "media.gc").await,
        vec![
            serde_json::json!({"outcome": "succeeded", "reasonCode": null, "details": {
            "trigger": "start", "prunedCheckpoints": 0, "deletedBlobs": 1, "deletedBytes": 40,
            "failedBlobs": 0}})
        ]
    );
}

#[tokio::test]
async fn finding_6_a_checkpoint_over_a_quota_is_refused_and_the_last_good_one_kept() {
    let setup = parts(
        RetentionConfig {
            checkpoint_quota_bytes: 100,
            checkpoints_kept: 1,
        },
        Some(150),
    )
    .await;
    let (store, media, retention) = (&setup.store, &setup.media, &setup.retention);
    session(store, "s", serde_json::json!([])).await;
    let first = blob(1, 60);
    retention
        .check_checkpoint_quota("s", "t1", "c1", &referenced(&[&first]))
        .await
        .unwrap();
    retention
        .commit_checkpoint(
            "s",
            "t1",
            "c1",
            &manifest(&[&first]),
            vec![first.clone()],
            None,
        )
        .await
        .unwrap();
    // The next checkpoint replaces the file: retention drops c1 and collects its blob.
    let second = blob(2, 60);
    retention
        .commit_checkpoint(
            "s",
            "t2",
            "c2",
            &manifest(&[&second]),
            vec![second.clone()],
            None,
        )
        .await
        .unwrap();
    assert!(!is_stored(media, &first).await);
    assert!(is_stored(media, &second).await);
    assert_eq!(store.latest_checkpoint("s").await.unwrap().unwrap().0, "c2");

    // Over the checkpoint quota: refused before anything is written, and audited.
    let big = blob(3, 120);
    let refused = retention
        .check_checkpoint_quota("s", "t3", "c3", &referenced(&[&big]))
        .await
        .unwrap_err();
    assert_eq!(refused.code, "CHECKPOINT_QUOTA_EXCEEDED");

    // Over the media quota part way: the blob already written is collected at once.
    let third = blob(4, 60);
    let fourth = blob(5, 60);
    let refused_media = retention
        .commit_checkpoint(
            "s",
            "t4",
            "c4",
            &manifest(&[&third, &fourth]),
            vec![third.clone(), fourth.clone()],
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(refused_media.code, "MEDIA_QUOTA_EXCEEDED");
    assert!(!is_stored(media, &third).await);
    assert!(!is_stored(media, &fourth).await);
    assert!(is_stored(media, &second).await);
    assert_eq!(store.latest_checkpoint("s").await.unwrap().unwrap().0, "c2");
    assert_eq!(
        media.usage().await.unwrap(),
        gatehouse_media::MediaUsage {
            n_blobs: 1,
            bytes: 60
        }
    );
    let refusals: Vec<Option<String>> = audit_actions(store, "checkpoint.store")
        .await
        .into_iter()
        .map(|event| event["reasonCode"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        refusals,
        vec![
            Some("CHECKPOINT_QUOTA_EXCEEDED".to_owned()),
            Some("MEDIA_QUOTA_EXCEEDED".to_owned())
        ]
    );
}

#[tokio::test]
async fn finding_6_retention_keeps_the_newest_checkpoints_and_their_blobs() {
    let setup = parts(
        RetentionConfig {
            checkpoint_quota_bytes: 150,
            checkpoints_kept: 2,
        },
        None,
    )
    .await;
    let (store, media, retention) = (&setup.store, &setup.media, &setup.retention);
    session(store, "s", serde_json::json!([])).await;
    let blobs: Vec<NewBlob> = (1..=3).map(|fill| blob(fill, 60)).collect();
    for (idx, blob) in blobs.iter().enumerate() {
        let id = format!("c{idx}");
        retention
            .commit_checkpoint("s", "t", &id, &manifest(&[blob]), vec![blob.clone()], None)
            .await
            .unwrap();
    }
    // Two checkpoints are kept: the blobs of c1 and c2 stay, c0's is gone.
    let stored: Vec<bool> =
        futures_util::future::join_all(blobs.iter().map(|blob| is_stored(media, blob))).await;
    assert_eq!(stored, vec![false, true, true]);
    // The quota counts the other kept checkpoint too: 60 + 100 is over 150.
    let refused = retention
        .check_checkpoint_quota("s", "t", "c9", &referenced(&[&blob(9, 100)]))
        .await
        .unwrap_err();
    assert_eq!(refused.code, "CHECKPOINT_QUOTA_EXCEEDED");
    retention
        .check_checkpoint_quota("s", "t", "c9", &referenced(&[&blob(9, 90)]))
        .await
        .unwrap();
}

/// Issue 33, review: a key that deletes an upload while the same upload is still being stored
/// must not leave a pinned blob charged to nobody. The release waits for the upload's hold, so
/// it sees the upload's charge and pin together, and the blob is collected.
#[tokio::test]
async fn a_release_waits_for_an_upload_in_flight_and_then_collects_its_blob() {
    use gatehouse_store::records::MediaChargeKind;
    let parts = parts(
        RetentionConfig {
            checkpoint_quota_bytes: 1 << 20,
            checkpoints_kept: 1,
        },
        None,
    )
    .await;
    let retention = Arc::new(parts.retention);
    let upload = blob(7, 100);
    let listed = [CheckpointBlob {
        media_id: upload.media_id.clone(),
        size_bytes: 100,
    }];
    // The upload in flight: charged, not yet stored or pinned.
    let writing = retention.hold().await.unwrap();
    parts
        .store
        .charge_media("key:a", MediaChargeKind::Upload, &listed, None, 1)
        .await
        .unwrap();
    let release = tokio::spawn({
        let retention = Arc::clone(&retention);
        let media_id = upload.media_id.clone();
        async move { retention.release_upload(Some("key:a"), &media_id).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    assert!(!release.is_finished(), "the release ran beside the upload");
    parts
        .media
        .put(upload.bytes.clone(), "application/octet-stream", None)
        .await
        .unwrap();
    parts
        .store
        .pin_media(&upload.media_id, "upload", 2)
        .await
        .unwrap();
    writing.release().await;
    let released = release.await.unwrap().unwrap();
    assert!(released.released && released.unpinned, "{released:?}");
    assert!(matches!(
        parts.media.get(&upload.media_id).await,
        Err(MediaError::NotFound { .. })
    ));
    assert_eq!(parts.store.media_charged_bytes("key:a").await.unwrap(), 0);
}
