//! `gatehouse up` with its state in PostgreSQL and its blobs on S3 (`--store postgres://...
//! --media s3://...`), on the throwaway servers scripts/test starts (`GATEHOUSE_TEST_POSTGRES_URL`,
//! and the moto S3 API server `GATEHOUSE_TEST_S3_ENDPOINT` names): media and checkpoints land
//! in the bucket and nowhere on the local disk, a lost session workspace is rebuilt from S3, a
//! restart keeps everything, and while S3 cannot be reached uploads, checkpoints and `/readyz`
//! answer MEDIA_STORE_FAILURE, recovering without a restart once it can.

use std::path::Path;
use std::path::PathBuf;
use std::time::Instant;

use gatehouse_testkit::create_bucket;
use gatehouse_testkit::fresh_bucket;
use gatehouse_testkit::s3_endpoint;
use pretty_assertions::assert_eq;

use crate::suite::postgres::Outage;
use crate::suite::postgres::completed_turn;
use crate::suite::postgres::contents;
use crate::suite::postgres::fresh_database;
use crate::suite::support::Gateway;
use crate::suite::support::Process;
use crate::suite::support::WAIT;
use crate::suite::support::files_under;
use crate::suite::support::gatehouse;
use crate::suite::up::Up;

/// Returns a bucket name no other test uses, for a server of the test's own.
fn bucket_name() -> String {
    gatehouse_testkit::unique_name("gh-cli", '-')
}

/// A `moto_server` of the test's own (the one scripts/install installs, named by
/// `GATEHOUSE_MOTO_SERVER`) on a fixed loopback port, so the test can stop it and start it again
/// where the Gateway expects it. It keeps its objects in memory: a restart loses them.
struct OwnS3 {
    port: u16,
    logs: PathBuf,
    process: Option<Process>,
}

impl OwnS3 {
    async fn start(logs: &Path) -> OwnS3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let mut server = OwnS3 {
            port,
            logs: logs.to_path_buf(),
            process: None,
        };
        server.restart().await;
        server
    }

    fn endpoint(&self) -> url::Url {
        url::Url::parse(&format!("http://127.0.0.1:{}", self.port)).unwrap()
    }

    /// Starts the server on its port and waits until it answers.
    async fn restart(&mut self) {
        let program = std::env::var("GATEHOUSE_MOTO_SERVER").unwrap_or_else(|_| {
            panic!(
                "GATEHOUSE_MOTO_SERVER is not set: this test starts an S3 API server of its own. \
                 Run scripts/test, whose scripts/install names it, or set it to the path of \
                 moto_server (pip install 'moto[server]')"
            )
        });
        let log = self.logs.join(format!("moto-{}.log", self.port));
        let child = std::process::Command::new(program)
            .args(["-H", "127.0.0.1", "-p", &self.port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let process = Process::from_child(child, log);
        let probe = self.endpoint().join("moto-api/").unwrap();
        let deadline = Instant::now() + WAIT;
        while !reqwest::get(probe.clone())
            .await
            .is_ok_and(|response| response.status().is_success())
        {
            assert!(
                Instant::now() < deadline,
                "moto_server did not answer: {}",
                process.stderr()
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        self.process = Some(process);
    }

    /// Kills the server (SIGKILL): every connection drops and the port refuses new ones.
    fn stop(&mut self) {
        if let Some(mut process) = self.process.take() {
            process.kill();
        }
    }
}

/// Returns the keys under `prefix` in `bucket`, as the test server lists them.
async fn bucket_keys(bucket: &str, prefix: &str) -> Vec<String> {
    bucket_keys_at(&s3_endpoint(), bucket, prefix).await
}

/// Returns the keys under `prefix` in `bucket`, as the server at `endpoint` lists them.
async fn bucket_keys_at(endpoint: &url::Url, bucket: &str, prefix: &str) -> Vec<String> {
    let listing = reqwest::Client::new()
        .get(endpoint.join(bucket).unwrap())
        .query(&[("list-type", "2"), ("prefix", prefix)])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    listing
        .split("<Key>")
        .skip(1)
        .filter_map(|part| part.split_once("</Key>"))
        .map(|(key, _)| key.to_owned())
        .collect()
}

/// A fresh PostgreSQL database and a fresh bucket on the test servers, for a Gateway to keep
/// its state and blobs in (`--store`, `--media`, and the S3 settings in its environment).
#[derive(Clone)]
pub(crate) struct ExternalState {
    /// The store URL.
    pub(crate) store: String,
    /// The media URL (`s3://BUCKET/gateway`).
    pub(crate) media: String,
    /// The bucket.
    pub(crate) bucket: String,
    /// The S3 endpoint and credentials, as the Gateway's environment.
    env: Vec<(&'static str, String)>,
}

impl ExternalState {
    /// Creates the database and the bucket.
    pub(crate) async fn new() -> ExternalState {
        let bucket = fresh_bucket("cli").await;
        ExternalState {
            store: fresh_database().await.to_string(),
            media: format!("s3://{bucket}/gateway"),
            env: s3_env(&s3_endpoint()),
            bucket,
        }
    }

    /// Returns the Gateway arguments that select the store and the media store.
    pub(crate) fn args(&self) -> [&str; 4] {
        ["--store", &self.store, "--media", &self.media]
    }

    /// Returns the S3 settings for the Gateway's environment.
    pub(crate) fn envs(&self) -> Vec<(&str, &str)> {
        self.env
            .iter()
            .map(|(name, value)| (*name, value.as_str()))
            .collect()
    }

    /// Starts `gatehouse up` on `data` with this store and media store.
    pub(crate) fn up(&self, data: &Path) -> Up {
        let mut command = gatehouse();
        command
            .env("GATEHOUSE_STORE", &self.store)
            .env("GATEHOUSE_MEDIA", &self.media)
            .envs(self.envs());
        Up::start_with(command, data)
    }

    /// Returns the keys of the Gateway's objects in the bucket.
    pub(crate) async fn keys(&self) -> Vec<String> {
        bucket_keys(&self.bucket, "gateway/").await
    }

    /// Returns the Gateway's objects in the bucket (blobs and their records) with their sizes:
    /// what `<state>/media` holds for a local media store.
    pub(crate) async fn objects(&self) -> Vec<(String, u64)> {
        use futures_util::TryStreamExt;
        use object_store::ObjectStore;

        let prefix = object_store::path::Path::from("gateway");
        let listed: Vec<object_store::ObjectMeta> = self
            .client()
            .list(Some(&prefix))
            .try_collect()
            .await
            .unwrap();
        listed
            .into_iter()
            .map(|meta| (meta.location.to_string(), meta.size))
            .collect()
    }

    /// Returns the Gateway's blobs in the bucket (`gateway/blobs/<2 hex>/<id>`), by media id,
    /// with their contents: what `<state>/media/blobs` holds for a local media store.
    pub(crate) async fn blobs(&self) -> std::collections::BTreeMap<String, Vec<u8>> {
        use object_store::ObjectStoreExt;

        let client = self.client();
        let mut blobs = std::collections::BTreeMap::new();
        for key in bucket_keys(&self.bucket, "gateway/blobs/").await {
            let [_, _, _, id] = key.split('/').collect::<Vec<_>>()[..] else {
                continue;
            };
            let object = client
                .get(&object_store::path::Path::from(key.as_str()))
                .await
                .unwrap_or_else(|error| panic!("{key}: {error}"));
            blobs.insert(id.to_owned(), object.bytes().await.unwrap().to_vec());
        }
        blobs
    }

    /// Returns an S3 client of the test's own for the bucket, with the test credentials.
    fn client(&self) -> object_store::aws::AmazonS3 {
        let mut builder = object_store::aws::AmazonS3Builder::new()
            .with_bucket_name(&self.bucket)
            .with_virtual_hosted_style_request(false);
        for (name, value) in &self.env {
            let key = match *name {
                "AWS_ENDPOINT_URL" => object_store::aws::AmazonS3ConfigKey::Endpoint,
                "AWS_ALLOW_HTTP" => {
                    builder = builder.with_allow_http(value == "true");
                    continue;
                }
                "AWS_REGION" => object_store::aws::AmazonS3ConfigKey::Region,
                "AWS_ACCESS_KEY_ID" => object_store::aws::AmazonS3ConfigKey::AccessKeyId,
                "AWS_SECRET_ACCESS_KEY" => object_store::aws::AmazonS3ConfigKey::SecretAccessKey,
                other => panic!("no S3 setting for {other}"),
            };
            builder = builder.with_config(key, value);
        }
        builder.build().unwrap()
    }
}

/// The S3 settings of a Gateway using the server at `endpoint`: credentials in the environment
/// only.
fn s3_env(endpoint: &url::Url) -> Vec<(&'static str, String)> {
    vec![
        ("AWS_ENDPOINT_URL", endpoint.to_string()),
        ("AWS_ALLOW_HTTP", "true".to_owned()),
        ("AWS_REGION", "us-east-1".to_owned()),
        ("AWS_ACCESS_KEY_ID", "gatehouse-test".to_owned()),
        (
            "AWS_SECRET_ACCESS_KEY",
            "gatehouse-test-secret-5b1f".to_owned(),
        ),
    ]
}

/// Starts `up` on `data` with the store at `store` and the media under `media` on the S3
/// server at `endpoint`, with its credentials in the environment only.
fn up_on(data: &Path, store: &url::Url, media: &str, endpoint: &url::Url) -> Up {
    let mut command = gatehouse();
    command
        .env("GATEHOUSE_STORE", store.as_str())
        .env("GATEHOUSE_MEDIA", media)
        .envs(s3_env(endpoint));
    Up::start_with(command, data)
}

/// Uploads `bytes` and returns the answer's status and body.
async fn upload(up: &Up, bytes: &'static [u8]) -> (u16, serde_json::Value) {
    crate::suite::support::status_and_json(
        crate::suite::support::media_upload(&up.url, &up.token, bytes)
            .header("X-Filename", "note.txt")
            .timeout(WAIT),
    )
    .await
}

/// Downloads `media_id` and returns the answer's status and bytes.
async fn download(up: &Up, media_id: &str) -> (u16, Vec<u8>) {
    let response = reqwest::Client::new()
        .get(format!("{}/v1/media/{media_id}", up.url))
        .bearer_auth(&up.token)
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.bytes().await.unwrap().to_vec())
}

/// Returns the session workspace under `data`'s Harness that holds `file`.
fn session_workspace_with(data: &Path, file: &str) -> PathBuf {
    files_under(&data.join("harness"))
        .into_iter()
        .find(|path| path.ends_with(file))
        .map(|path| {
            path.ancestors()
                .nth(Path::new(file).components().count())
                .unwrap()
                .to_path_buf()
        })
        .unwrap_or_else(|| panic!("no session workspace holds {file}"))
}

/// Asserts that nothing of the media store is on the local disk.
fn no_local_media(data: &Path) {
    let local = files_under(&data.join("gateway").join("media"));
    assert!(
        local.is_empty(),
        "media written to the local disk: {local:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn up_on_postgres_and_s3_keeps_media_and_checkpoints_in_the_bucket_across_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let store = fresh_database().await;
    let bucket = fresh_bucket("cli").await;
    let media = format!("s3://{bucket}/gateway");
    let endpoint = s3_endpoint();
    let mut up = up_on(&data, &store, &media, &endpoint);
    up.wait_ready().await;

    let (status, uploaded) = upload(&up, b"an upload kept on s3").await;
    assert_eq!(status, 200, "{uploaded}");
    let media_id = uploaded["mediaId"].as_str().unwrap().to_owned();
    assert_eq!(
        download(&up, &media_id).await,
        (200, b"an upload kept on s3".to_vec())
    );
    let (status, again) = upload(&up, b"an upload kept on s3").await;
    assert_eq!(
        (status, &again),
        (200, &uploaded),
        "a repeated upload is a no-op"
    );

    // A native turn writes into its session workspace; its checkpoint goes to the bucket.
    let wrote = completed_turn(
        &up,
        "ck",
        r#"/tool write {"path":"dir/keep.txt","content":"kept across a lost disk on s3"}"#,
    )
    .await;
    assert_eq!(wrote["status"], "completed");
    let keys = bucket_keys(&bucket, "gateway/").await;
    assert!(
        keys.contains(&format!("gateway/meta/{media_id}.json")),
        "{keys:?}"
    );
    let checkpoint_blob = gatehouse_media::media_id(b"kept across a lost disk on s3");
    assert!(
        keys.contains(&format!(
            "gateway/blobs/{}/{checkpoint_blob}",
            &checkpoint_blob[..2]
        )),
        "the checkpoint blob is not in the bucket: {keys:?}"
    );
    no_local_media(&data);

    // The session workspace is lost; the next turn rebuilds it from the checkpoint on S3.
    let workspace = session_workspace_with(&data, "dir/keep.txt");
    std::fs::remove_dir_all(&workspace).unwrap();
    let read = completed_turn(&up, "ck", r#"/tool read {"path":"dir/keep.txt"}"#).await;
    assert!(
        read["reply"]
            .as_str()
            .unwrap()
            .contains("kept across a lost disk on s3"),
        "{read}"
    );
    let transcript = contents(&up.transcript("ck").await);
    up.process.terminate();
    let log = up.process.stderr();
    assert!(log.contains(&media), "the media URL is not logged: {log}");
    assert!(
        !log.contains("gatehouse-test-secret-5b1f"),
        "the S3 secret is in the log"
    );

    // A restarted Gateway serves the same media and transcript from PostgreSQL and S3.
    let up = up_on(&data, &store, &media, &endpoint);
    up.wait_ready().await;
    assert_eq!(
        download(&up, &media_id).await,
        (200, b"an upload kept on s3".to_vec())
    );
    assert_eq!(contents(&up.transcript("ck").await), transcript);
    no_local_media(&data);
}

#[tokio::test(flavor = "multi_thread")]
async fn while_s3_is_unreachable_uploads_and_checkpoints_fail_with_media_store_failure_and_recover()
{
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let store = fresh_database().await;
    let bucket = fresh_bucket("cli").await;
    let media = format!("s3://{bucket}/gw");
    // The Gateway reaches S3 through a forwarder: stopping it is, to the Gateway, the server
    // going away; the objects stay on the server behind it, so what was acknowledged can be
    // checked once it is back.
    let direct = s3_endpoint();
    let mut outage = Outage::new(&direct).await;
    let mut through = direct.clone();
    through.set_port(Some(outage.port)).unwrap();
    let mut up = up_on(&data, &store, &media, &through);
    up.wait_ready().await;

    let (status, before) = upload(&up, b"acknowledged before the outage").await;
    assert_eq!(status, 200, "{before}");
    let before_id = before["mediaId"].as_str().unwrap().to_owned();
    completed_turn(
        &up,
        "o",
        r#"/tool write {"path":"good.txt","content":"the last good checkpoint"}"#,
    )
    .await;

    outage.begin();
    let (status, refused) = upload(&up, b"sent during the outage").await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (500, Some("MEDIA_STORE_FAILURE")),
        "{refused}"
    );
    // A turn whose checkpoint cannot be stored fails with the same code.
    let (status, posted) = up
        .post(
            "o",
            serde_json::json!({"text": r#"/tool write {"path":"lost.txt","content":"not checkpointed"}"#}),
        )
        .await;
    assert_eq!(status, 202, "{posted}");
    let failed = up.turn_status(posted["turnId"].as_str().unwrap(), 30).await;
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("MEDIA_STORE_FAILURE")),
        "{failed}"
    );
    wait_media_not_ready(&up).await;

    outage.end().await;
    up.wait_ready().await;
    // Nothing acknowledged was lost, and the Gateway serves again without a restart.
    assert_eq!(
        download(&up, &before_id).await,
        (200, b"acknowledged before the outage".to_vec())
    );
    let (status, after) = upload(&up, b"sent during the outage").await;
    assert_eq!(status, 200, "{after}");
    let keys = bucket_keys(&bucket, "gw/").await;
    assert!(
        keys.contains(&format!(
            "gw/meta/{}.json",
            after["mediaId"].as_str().unwrap()
        )),
        "{keys:?}"
    );
    // The session's workspace is lost; it is rebuilt from the last checkpoint that was stored.
    let workspace = session_workspace_with(&data, "good.txt");
    std::fs::remove_dir_all(&workspace).unwrap();
    let read = completed_turn(&up, "o", r#"/tool read {"path":"good.txt"}"#).await;
    assert!(
        read["reply"]
            .as_str()
            .unwrap()
            .contains("the last good checkpoint"),
        "{read}"
    );
    assert_eq!(
        contents(&up.transcript("o").await)
            .iter()
            .filter(|(role, _)| role == "user")
            .count(),
        3,
        "every acknowledged message is in the transcript"
    );
    up.process.terminate();
}

/// Waits until `/readyz` answers `503 MEDIA_STORE_FAILURE`.
async fn wait_media_not_ready(up: &Up) {
    crate::suite::postgres::wait_readyz_refuses_with(up, "MEDIA_STORE_FAILURE").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_s3_server_fails_uploads_and_a_restarted_one_serves_without_a_gateway_restart() {
    let temp = tempfile::tempdir().unwrap();
    let base = temp.path().canonicalize().unwrap();
    let data = base.join("data");
    let mut s3 = OwnS3::start(&base).await;
    let bucket = bucket_name();
    create_bucket(&s3.endpoint(), &bucket).await;
    let store = fresh_database().await;
    let mut up = up_on(&data, &store, &format!("s3://{bucket}/g"), &s3.endpoint());
    up.wait_ready().await;
    let (status, body) = upload(&up, b"stored before the server stopped").await;
    assert_eq!(status, 200, "{body}");

    s3.stop();
    let (status, refused) = upload(&up, b"sent while the server is stopped").await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (500, Some("MEDIA_STORE_FAILURE")),
        "{refused}"
    );
    wait_media_not_ready(&up).await;

    // The server comes back on the same port, empty (moto keeps nothing across a restart), so
    // the bucket is made again; the same Gateway process stores and serves new uploads.
    s3.restart().await;
    create_bucket(&s3.endpoint(), &bucket).await;
    up.wait_ready().await;
    let (status, stored) = upload(&up, b"sent while the server is stopped").await;
    assert_eq!(status, 200, "{stored}");
    assert_eq!(
        download(&up, stored["mediaId"].as_str().unwrap()).await,
        (200, b"sent while the server is stopped".to_vec())
    );
    let keys = bucket_keys_at(&s3.endpoint(), &bucket, "g/").await;
    assert!(
        keys.contains(&format!(
            "g/meta/{}.json",
            stored["mediaId"].as_str().unwrap()
        )),
        "{keys:?}"
    );
    up.process.terminate();
}

#[tokio::test(flavor = "multi_thread")]
async fn the_config_key_media_selects_the_directory_and_the_flag_wins_over_it() {
    let temp = tempfile::tempdir().unwrap();
    let base = temp.path().canonicalize().unwrap();
    let configured = base.join("configured-media");
    let config = base.join("gateway.toml");
    std::fs::write(
        &config,
        format!("media = {:?}\n", format!("file://{}", configured.display())),
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let upload_to = |gateway: &Gateway| {
        let url = format!("{}/v1/media", gateway.url);
        let token = gateway.token.clone();
        async move {
            let response = reqwest::Client::new()
                .post(url)
                .bearer_auth(token)
                .header("Content-Type", "text/plain")
                .body("configured media")
                .send()
                .await
                .unwrap();
            assert_eq!(response.status().as_u16(), 200);
        }
    };
    let state = base.join("from-file");
    let gateway = Gateway::start_with(&state, &base, &["--config", config]);
    gateway.get("/readyz").await;
    upload_to(&gateway).await;
    assert!(
        !files_under(&configured).is_empty(),
        "the media key was not used"
    );
    assert!(files_under(&state.join("media")).is_empty());
    drop(gateway);

    let flagged = base.join("flag-media");
    let state = base.join("from-flag");
    let flag = format!("file://{}", flagged.display());
    let gateway = Gateway::start_with(&state, &base, &["--config", config, "--media", &flag]);
    gateway.get("/readyz").await;
    upload_to(&gateway).await;
    assert!(
        !files_under(&flagged).is_empty(),
        "the --media flag did not win over the config file"
    );
}

#[test]
fn a_bad_media_url_is_a_usage_error_that_names_its_code() {
    let temp = tempfile::tempdir().unwrap();
    for (url, code) in [
        ("s3://key:secret-9f2@bucket/x", "MEDIA_URL_EXTRA_PARTS"),
        ("s3://bucket/a/../b", "MEDIA_URL_BAD_PREFIX"),
        ("s3://", "MEDIA_URL_EMPTY_BUCKET"),
        ("ftp://host/dir", "MEDIA_URL_SCHEME"),
    ] {
        let output = gatehouse()
            .args(["gateway", "--listen", "127.0.0.1:0", "--state"])
            .arg(temp.path().join("state"))
            .args(["--media", url])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{url}: {stderr}");
        assert!(stderr.contains(code), "{url}: {stderr}");
        assert!(!stderr.contains("secret-9f2"), "{url}: {stderr}");
    }
}
