//! The media store on a real S3 API server: the one `scripts/test` starts and names in
//! `GATEHOUSE_TEST_S3_ENDPOINT`. Each test makes its own bucket, so tests never share objects.

use std::sync::Arc;

use bytes::Bytes;
use gatehouse_media::MediaError;
use gatehouse_media::MediaLocation;
use gatehouse_media::MediaStore;
use gatehouse_media::MediaUsage;
use object_store::ObjectStore;
use object_store::ObjectStoreExt;
use object_store::PutMode;
use object_store::PutOptions;
use object_store::PutPayload;
use object_store::path::Path as ObjectPath;
use pretty_assertions::assert_eq;

/// Returns the test S3 endpoint, as the Gateway's environment would name it.
fn endpoint() -> String {
    gatehouse_testkit::s3_endpoint()
        .as_str()
        .trim_end_matches('/')
        .to_owned()
}

/// The environment the Gateway would be given for `endpoint`.
fn s3_env(endpoint: &str) -> Vec<(String, String)> {
    [
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", "gatehouse-test"),
        ("AWS_SECRET_ACCESS_KEY", "gatehouse-test-secret"),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value.to_owned()))
    .collect()
}

/// Opens the media store `url` names on the test server.
fn open(url: &str) -> MediaStore {
    let location: MediaLocation = url.parse().unwrap();
    MediaStore::open_location_with_env(&location, s3_env(&endpoint())).unwrap()
}

/// Returns the raw object store of the whole `bucket`, to look at the keys the media store
/// wrote.
fn raw_bucket(bucket: &str) -> Arc<dyn ObjectStore> {
    let mut builder = object_store::aws::AmazonS3Builder::new().with_bucket_name(bucket);
    for (name, value) in s3_env(&endpoint()) {
        builder = builder.with_config(name.to_ascii_lowercase().parse().unwrap(), value);
    }
    Arc::new(builder.build().unwrap())
}

/// Lists every key of `bucket`, sorted.
async fn keys(bucket: &str) -> Vec<String> {
    use futures_util::TryStreamExt;
    let mut keys: Vec<String> = raw_bucket(bucket)
        .list(None)
        .map_ok(|meta| meta.location.to_string())
        .try_collect()
        .await
        .unwrap();
    keys.sort();
    keys
}

#[tokio::test]
async fn put_get_and_dedupe_over_s3() {
    let bucket = gatehouse_testkit::fresh_bucket("roundtrip").await;
    let store = open(&format!("s3://{bucket}/gateway"));
    let bytes = Bytes::from_static(b"hello from s3\n");
    let record = store
        .put(bytes.clone(), "text/plain", Some("dir/hello.txt"))
        .await
        .unwrap();
    assert_eq!(record.id, blake3::hash(&bytes).to_hex().to_string());
    assert_eq!(record.filename.as_deref(), Some("hello.txt"));
    let (read, read_bytes) = store.get(&record.id).await.unwrap();
    assert_eq!((read, read_bytes), (record.clone(), bytes.clone()));
    // The same bytes again, with another type and name: a no-op that returns the first record.
    let again = store
        .put(bytes.clone(), "application/octet-stream", Some("other.bin"))
        .await
        .unwrap();
    assert_eq!(again, record);
    // Concurrent puts of new bytes agree on one record.
    let racing = Bytes::from_static(b"raced to s3");
    let (a, b) = tokio::join!(
        store.put(racing.clone(), "text/plain", Some("a.txt")),
        store.put(racing, "text/plain", Some("b.txt"))
    );
    assert_eq!(a.unwrap(), b.unwrap());
    // The keys sit under the prefix, content-addressed.
    let id = &record.id;
    let stored = keys(&bucket).await;
    assert!(
        stored.contains(&format!("gateway/blobs/{}/{id}", &id[..2])),
        "{stored:?}"
    );
    assert!(
        stored.contains(&format!("gateway/meta/{id}.json")),
        "{stored:?}"
    );
    assert!(
        stored.iter().all(|key| key.starts_with("gateway/")),
        "{stored:?}"
    );
    // A store opened again (a restarted Gateway) finds the bytes.
    let reopened = open(&format!("s3://{bucket}/gateway"));
    assert_eq!(&reopened.get(id).await.unwrap().1[..], &bytes[..]);
    assert!(reopened.ready().await);
}

#[tokio::test]
async fn the_server_refuses_a_second_create_of_a_key() {
    // `PutMode::Create` is what makes a repeated put a no-op: the server must refuse to
    // replace an existing key (S3's conditional write, `If-None-Match: *`).
    let bucket = gatehouse_testkit::fresh_bucket("create").await;
    let raw = raw_bucket(&bucket);
    let key = ObjectPath::from("k");
    let create = || PutOptions::from(PutMode::Create);
    raw.put_opts(&key, PutPayload::from_static(b"first"), create())
        .await
        .unwrap();
    let second = raw
        .put_opts(&key, PutPayload::from_static(b"second"), create())
        .await
        .unwrap_err();
    assert!(
        matches!(second, object_store::Error::AlreadyExists { .. }),
        "{second:?}"
    );
    let kept = raw.get(&key).await.unwrap().bytes().await.unwrap();
    assert_eq!(&kept[..], b"first");
}

#[tokio::test]
async fn prefixes_of_one_bucket_are_isolated() {
    let bucket = gatehouse_testkit::fresh_bucket("prefix").await;
    let one = open(&format!("s3://{bucket}/one"));
    let two = open(&format!("s3://{bucket}/two/nested/"));
    let record = one
        .put(Bytes::from_static(b"only in one"), "text/plain", None)
        .await
        .unwrap();
    assert!(matches!(
        two.get(&record.id).await,
        Err(MediaError::NotFound { .. })
    ));
    assert_eq!(two.usage().await.unwrap(), MediaUsage::default());
    assert_eq!(
        one.usage().await.unwrap(),
        MediaUsage {
            n_blobs: 1,
            bytes: 11
        }
    );
    let stored = keys(&bucket).await;
    assert!(
        stored.iter().all(|key| key.starts_with("one/")),
        "{stored:?}"
    );
    // Deleting in the other prefix touches nothing here.
    assert_eq!(two.delete(&record.id).await.unwrap(), None);
    assert!(one.get(&record.id).await.is_ok());
}

#[tokio::test]
async fn the_quota_and_the_id_checks_hold_over_s3() {
    let bucket = gatehouse_testkit::fresh_bucket("quota").await;
    let url = format!("s3://{bucket}/q");
    let first = open(&url)
        .put(
            Bytes::from(vec![1u8; 600]),
            "application/octet-stream",
            None,
        )
        .await
        .unwrap();
    // The quota counts what the bucket already holds under the prefix.
    let store = open(&url).with_quota(1000);
    let refused = store
        .put(
            Bytes::from(vec![2u8; 600]),
            "application/octet-stream",
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(refused.code(), "MEDIA_QUOTA_EXCEEDED");
    assert_eq!(store.usage().await.unwrap().n_blobs, 1);
    assert_eq!(
        store
            .put(
                Bytes::from(vec![1u8; 600]),
                "application/octet-stream",
                None
            )
            .await
            .unwrap()
            .id,
        first.id
    );
    assert_eq!(store.delete(&first.id).await.unwrap(), Some(600));
    store
        .put(
            Bytes::from(vec![2u8; 600]),
            "application/octet-stream",
            None,
        )
        .await
        .unwrap();
    // Bad ids are refused before any key is built: nothing outside the prefix is reachable.
    for bad in [
        "../one/meta/x",
        "ABC",
        &"g".repeat(64),
        &format!("{}/", "a".repeat(63)),
    ] {
        assert!(
            matches!(store.get(bad).await, Err(MediaError::InvalidId)),
            "{bad}"
        );
        assert!(
            matches!(store.delete(bad).await, Err(MediaError::InvalidId)),
            "{bad}"
        );
    }
    let missing = "0".repeat(64);
    assert!(matches!(
        store.get(&missing).await,
        Err(MediaError::NotFound { .. })
    ));
}

#[tokio::test]
async fn a_dead_endpoint_fails_with_media_store_failure() {
    // A port nothing listens on: bound, then released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dead = format!("http://127.0.0.1:{port}");
    let location: MediaLocation = "s3://gatehouse-dead/x".parse().unwrap();
    let store = MediaStore::open_location_with_env(&location, s3_env(&dead)).unwrap();
    let error = store
        .put(Bytes::from_static(b"lost?"), "text/plain", None)
        .await
        .unwrap_err();
    assert_eq!(error.code(), "MEDIA_STORE_FAILURE", "{error:?}");
    assert!(!error.is_client_error());
    assert_eq!(
        store.get(&"0".repeat(64)).await.unwrap_err().code(),
        "MEDIA_STORE_FAILURE"
    );
    assert!(!store.ready().await);
}

/// An endpoint that accepts connections and never answers (a hung proxy) makes the store not
/// ready within its probe timeout, not after the S3 request timeout and its retries.
#[tokio::test]
async fn a_silent_endpoint_is_not_ready_within_the_probe_timeout() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent = format!("http://{}", listener.local_addr().unwrap());
    // Accepts every connection and holds it open without a byte in answer.
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let location: MediaLocation = "s3://gatehouse-silent/x".parse().unwrap();
    let store = MediaStore::open_location_with_env(&location, s3_env(&silent)).unwrap();
    // Well past the probe timeout, well short of the request timeout (60 s) with its retries.
    let bound = gatehouse_media::READY_PROBE_TIMEOUT * 4;
    let ready = tokio::time::timeout(bound, store.ready()).await;
    assert_eq!(ready, Ok(false), "readiness waited on the silent endpoint");
    holder.abort();
}

#[tokio::test]
async fn gatehouse_s3_variables_override_the_aws_ones() {
    let bucket = gatehouse_testkit::fresh_bucket("override").await;
    let location: MediaLocation = format!("s3://{bucket}/o").parse().unwrap();
    // AWS_ENDPOINT_URL names a dead endpoint; GATEHOUSE_S3_ENDPOINT the live one wins.
    let mut env = s3_env("http://127.0.0.1:9");
    env.push(("GATEHOUSE_S3_ENDPOINT".to_owned(), endpoint()));
    env.push(("GATEHOUSE_S3_PATH_STYLE".to_owned(), "true".to_owned()));
    let store = MediaStore::open_location_with_env(&location, env.clone()).unwrap();
    let record = store
        .put(Bytes::from_static(b"overridden"), "text/plain", None)
        .await
        .unwrap();
    assert_eq!(&store.get(&record.id).await.unwrap().1[..], b"overridden");
    // A path style that is neither true nor false is refused when the store is opened.
    env.push(("GATEHOUSE_S3_PATH_STYLE".to_owned(), "sometimes".to_owned()));
    let error = MediaStore::open_location_with_env(&location, env).unwrap_err();
    assert_eq!(error.code(), "MEDIA_STORE_FAILURE");
    assert!(
        format!("{error:?}").contains("GATEHOUSE_S3_PATH_STYLE='sometimes'"),
        "{error:?}"
    );
}

/// With no keys, region or endpoint in the environment, the profile in the standard shared
/// files supplies all three: the store reaches the server named by the config file's
/// `endpoint_url`, signs with the credentials file's keys (without any, `object_store` would
/// ask the instance credential endpoint, which does not exist here), and round-trips a blob.
#[tokio::test]
async fn the_standard_aws_files_supply_keys_region_and_endpoint() {
    let bucket = gatehouse_testkit::fresh_bucket("profile").await;
    let location: MediaLocation = format!("s3://{bucket}/p").parse().unwrap();
    let home = tempfile::tempdir().unwrap();
    let aws = home.path().join(".aws");
    std::fs::create_dir(&aws).unwrap();
    std::fs::write(
        aws.join("credentials"),
        "[media]\naws_access_key_id = gatehouse-test\naws_secret_access_key = from-the-file\n",
    )
    .unwrap();
    std::fs::write(
        aws.join("config"),
        format!(
            "[profile media]\nregion = us-east-1\nendpoint_url = {}\n",
            endpoint()
        ),
    )
    .unwrap();
    let env: Vec<(String, String)> = [
        ("HOME", home.path().display().to_string()),
        ("AWS_PROFILE", "media".to_owned()),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_owned(), value))
    .collect();
    let store = MediaStore::open_location_with_env(&location, env.clone()).unwrap();
    let record = store
        .put(
            Bytes::from_static(b"signed from a profile"),
            "text/plain",
            None,
        )
        .await
        .unwrap();
    assert_eq!(
        &store.get(&record.id).await.unwrap().1[..],
        b"signed from a profile"
    );
    assert!(
        keys(&bucket)
            .await
            .iter()
            .any(|key| key.starts_with("p/blobs/"))
    );
    // A profile that is in neither file is refused when the store is opened, by name.
    let mut unknown = env;
    unknown.push(("AWS_PROFILE".to_owned(), "absent-profile".to_owned()));
    let error = MediaStore::open_location_with_env(&location, unknown).unwrap_err();
    assert_eq!(error.code(), "MEDIA_STORE_FAILURE");
    assert!(
        format!("{error:?}").contains("'absent-profile'"),
        "{error:?}"
    );
}
