//! Issue 12, finding 6 (checkpoints had no quota and no garbage collection) and finding 8's
//! error shape: a dedicated `gatehouse gateway` with quota flags, a `gatehouse node` and the
//! mock model, whose `exec` tool calls write big files into the session workspace.

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;

use crate::suite::support::Gateway;
use crate::suite::support::MockModelSetup;
use crate::suite::support::dirs;
use crate::suite::support::files_under;
use crate::suite::support::turn;
use crate::suite::support::wait_turn;

/// Link ticks slow enough that a multi-megabyte checkpoint frame, parsed by a debug build on a
/// busy machine, never starves the keep-alive (the node gives up after two silent ticks).
const TICK_INTERVAL_MS: &str = "3000";

/// Starts a Gateway with `gateway_args`, a native node and the mock model.
async fn setup(gateway_args: &[&str]) -> MockModelSetup {
    MockModelSetup::start(
        dirs(),
        &[gateway_args, &["--tick-interval-ms", TICK_INTERVAL_MS]].concat(),
    )
    .await
}

/// Runs `command` through the model's `exec` tool in `session` and returns the ended turn.
async fn exec(gateway: &Gateway, session: &str, command: &str) -> serde_json::Value {
    let text = format!("/tool exec {}", serde_json::json!({ "command": command }));
    turn(gateway, session, &text).await
}

/// Returns the blob files of the Gateway's media store, by file name (the media id), with
/// their contents.
async fn media_blobs(gateway: &Gateway) -> BTreeMap<String, Vec<u8>> {
    if let Some(external) = crate::suite::backend::external(&gateway.state_dir) {
        return external.blobs().await;
    }
    files_under(&gateway.state_dir.join("media/blobs"))
        .into_iter()
        .map(|file| {
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&file).unwrap())
        })
        .collect()
}

/// Returns every file of the Gateway's media store (blobs and records) with its size.
async fn media_objects(gateway: &Gateway) -> Vec<(String, u64)> {
    if let Some(external) = crate::suite::backend::external(&gateway.state_dir) {
        return external.objects().await;
    }
    files_under(&gateway.state_dir.join("media"))
        .into_iter()
        .map(|file| {
            let size = std::fs::metadata(&file).unwrap().len();
            (file.display().to_string(), size)
        })
        .collect()
}

/// Returns the session workspace that holds `file`.
fn session_workspace_with(harness: &Path, file: &str) -> PathBuf {
    files_under(&harness.join("sessions"))
        .into_iter()
        .find(|path| path.file_name().is_some_and(|name| name == file))
        .map(|path| path.parent().unwrap().to_path_buf())
        .unwrap_or_else(|| panic!("no session workspace holds {file}"))
}

/// Returns the audit events with `action`.
async fn audit(gateway: &Gateway, action: &str) -> Vec<serde_json::Value> {
    gateway.get_json("/v1/audit?after=0").await["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["action"] == action)
        .cloned()
        .collect()
}

/// Reads the session's event stream from the start until an event of `kind` arrives.
async fn wait_event(gateway: &Gateway, session: &str, kind: &str) -> String {
    let mut response = reqwest::Client::new()
        .get(format!(
            "{}/v1/sessions/{session}/events?after=0",
            gateway.url
        ))
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text.contains(&format!("event: {kind}")) {
        assert!(Instant::now() < deadline, "no {kind} event in {text}");
        match tokio::time::timeout(Duration::from_secs(1), response.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => {}
        }
    }
    text
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_6_checkpoint_quota_fails_the_turn_and_keeps_the_last_good_checkpoint() {
    let setup = setup(&["--checkpoint-quota-bytes", "10000000"]).await;
    let gateway = &setup.gateway;
    let first = exec(
        gateway,
        "q",
        "echo kept > keep.txt && head -c 1000000 /dev/urandom > medium",
    )
    .await;
    assert_eq!(
        first["status"],
        "completed",
        "{first}\nNODE {}\nGATEWAY {}",
        setup.node.stderr(),
        gateway.process.stderr()
    );
    let good_blobs = media_blobs(gateway).await;
    assert_eq!(good_blobs.len(), 2, "keep.txt and medium");

    // 15 MB more than the 10 MB quota allows: the turn fails with the quota's code.
    let over = exec(gateway, "q", "head -c 15000000 /dev/urandom > big").await;
    assert_eq!(over["status"], "failed", "{over}");
    assert_eq!(
        over["error"]["code"],
        "CHECKPOINT_QUOTA_EXCEEDED",
        "{over}\nNODE {}\nGATEWAY {}",
        setup.node.stderr(),
        gateway.process.stderr()
    );
    let events = wait_event(gateway, "q", "turn.failed").await;
    assert!(events.contains("CHECKPOINT_QUOTA_EXCEEDED"), "{events}");
    let refused = audit(gateway, "checkpoint.store").await;
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(refused[0]["outcome"], "denied");
    assert_eq!(refused[0]["reasonCode"], "CHECKPOINT_QUOTA_EXCEEDED");
    assert_eq!(refused[0]["details"]["sessionKey"], "q");
    assert_eq!(refused[0]["details"]["quotaBytes"], 10_000_000);
    // Nothing of the refused checkpoint was stored.
    assert_eq!(media_blobs(gateway).await, good_blobs);

    // The session workspace is lost; the next turn rebuilds it from the last good checkpoint.
    let workspace = session_workspace_with(&setup.path("harness"), "keep.txt");
    let medium = std::fs::read(workspace.join("medium")).unwrap();
    std::fs::remove_dir_all(&workspace).unwrap();
    let read = turn(gateway, "q", r#"/tool read {"path":"keep.txt"}"#).await;
    assert_eq!(read["status"], "completed", "{read}");
    assert!(read["reply"].as_str().unwrap().contains("kept"), "{read}");
    assert_eq!(std::fs::read(workspace.join("medium")).unwrap(), medium);
    assert!(!workspace.join("big").exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_6_unreferenced_checkpoint_blobs_are_collected() {
    let setup = setup(&[]).await;
    let gateway = &setup.gateway;
    let attachment = b"an attachment that stays 5d0".to_vec();
    let attachment_id = crate::suite::support::media_id_of(crate::suite::support::media_upload(
        &gateway.url,
        &gateway.token,
        attachment.clone(),
    ))
    .await;
    let posted: serde_json::Value = reqwest::Client::new()
        .post(format!("{}/v1/sessions/gc/messages", gateway.url))
        .bearer_auth(&gateway.token)
        .json(&serde_json::json!({
            "text": "/tool exec {\"command\":\"echo small > small.txt && head -c 3000000 /dev/urandom > big\"}",
            "attachments": [{"mediaId": attachment_id}],
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let first = wait_turn(gateway, posted["turnId"].as_str().unwrap()).await;
    assert_eq!(
        first["status"],
        "completed",
        "{first}\n{}\n{}",
        setup.node.stderr(),
        gateway.process.stderr()
    );
    let workspace = session_workspace_with(&setup.path("harness"), "small.txt");
    let mut old_bigs = vec![std::fs::read(workspace.join("big")).unwrap()];
    for _ in 0..3 {
        let overwrite = exec(gateway, "gc", "head -c 3000000 /dev/urandom > big").await;
        assert_eq!(overwrite["status"], "completed", "{overwrite}");
        let current = std::fs::read(workspace.join("big")).unwrap();
        let blobs = media_blobs(gateway).await;
        // Exactly the attachment and the current checkpoint's files remain.
        let mut expected: Vec<&[u8]> = vec![&attachment, b"small\n", &current];
        expected.sort();
        let mut found: Vec<&[u8]> = blobs.values().map(Vec::as_slice).collect();
        found.sort();
        assert_eq!(found.len(), 3, "{:?}", blobs.keys().collect::<Vec<_>>());
        assert!(found == expected, "the media store holds other blobs");
        assert!(blobs.contains_key(&attachment_id));
        for old in &old_bigs {
            assert!(
                blobs.values().all(|blob| blob != old),
                "an old blob was kept"
            );
        }
        old_bigs.push(current);
    }
    let media_files = media_objects(gateway).await;
    let media_bytes: u64 = media_files.iter().map(|(_, size)| size).sum();
    // Three blobs and their three records: about one 3 MB file, never the 12 MB written.
    assert_eq!(media_files.len(), 6, "{media_files:?}");
    assert!(media_bytes < 3_100_000, "{media_bytes}");
    let collected = audit(gateway, "media.gc").await;
    let deleted: u64 = collected
        .iter()
        .map(|event| event["details"]["deletedBlobs"].as_u64().unwrap())
        .sum();
    let deleted_bytes: u64 = collected
        .iter()
        .map(|event| event["details"]["deletedBytes"].as_u64().unwrap())
        .sum();
    assert_eq!((deleted, deleted_bytes), (3, 9_000_000), "{collected:?}");
    assert!(
        collected
            .iter()
            .all(|event| event["outcome"] == "succeeded")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_6_media_quota_refuses_uploads_over_http() {
    let dirs = dirs();
    let gateway = Gateway::start_with(
        &dirs.base.join("gateway"),
        &dirs.base.join("logs"),
        &["--media-quota-bytes", "1000000"],
    );
    let upload = |bytes: Vec<u8>| {
        reqwest::Client::new()
            .post(format!("{}/v1/media", gateway.url))
            .bearer_auth(&gateway.token)
            .body(bytes)
            .send()
    };
    let first = upload(vec![1; 600_000]).await.unwrap();
    assert_eq!(first.status(), 200);
    let refused = upload(vec![2; 600_000]).await.unwrap();
    assert_eq!(refused.status(), 507);
    assert_eq!(refused.headers()["content-type"], "application/json");
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "MEDIA_QUOTA_EXCEEDED", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--media-quota-bytes"),
        "{body}"
    );
    // The same bytes again need no room; nothing of the refused upload was written.
    assert_eq!(upload(vec![1; 600_000]).await.unwrap().status(), 200);
    assert_eq!(media_blobs(&gateway).await.len(), 1);

    // The config file's key sets the same quota.
    let config = dirs.base.join("gateway.toml");
    std::fs::write(&config, "media-quota-bytes = 1000\n").unwrap();
    let configured = Gateway::start_with(
        &dirs.base.join("configured"),
        &dirs.base.join("logs"),
        &["--config", config.to_str().unwrap()],
    );
    let refused = reqwest::Client::new()
        .post(format!("{}/v1/media", configured.url))
        .bearer_auth(&configured.token)
        .body(vec![3u8; 2000])
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 507);
}

/// Sends `request` and returns its status, its `Content-Type` and its JSON error code, checking
/// that the body is the API's error shape with a message.
async fn error_of(request: reqwest::RequestBuilder) -> (u16, String, String) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    let text = response.text().await.unwrap();
    let body: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|_| panic!("{status}: not JSON: {text:?}"));
    assert!(
        !body["error"]["message"].as_str().unwrap().is_empty(),
        "{body}"
    );
    let code = body["error"]["code"].as_str().unwrap().to_owned();
    (status, content_type, code)
}

fn json_error(status: u16, code: &str) -> (u16, String, String) {
    (status, "application/json".to_owned(), code.to_owned())
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_8_oversized_body_gets_json_error() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.base.join("gateway"), &dirs.base.join("logs"));
    let client = reqwest::Client::new();
    let messages = format!("{}/v1/sessions/s/messages", gateway.url);
    // Just over the 2 MiB limit of JSON bodies.
    let text = "x".repeat(2 * 1024 * 1024 + 1024);
    let oversized = client
        .post(&messages)
        .bearer_auth(&gateway.token)
        .json(&serde_json::json!({ "text": text }));
    assert_eq!(
        error_of(oversized).await,
        json_error(413, "PAYLOAD_TOO_LARGE")
    );
    let document = client
        .put(format!("{}/v1/agents/main/files/AGENTS.md", gateway.url))
        .bearer_auth(&gateway.token)
        .json(&serde_json::json!({ "content": text }));
    assert_eq!(
        error_of(document).await,
        json_error(413, "PAYLOAD_TOO_LARGE")
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_8_malformed_requests_get_json_errors() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.base.join("gateway"), &dirs.base.join("logs"));
    let client = reqwest::Client::new();
    let messages = format!("{}/v1/sessions/s/messages", gateway.url);
    let cases: Vec<(&str, reqwest::RequestBuilder, (u16, String, String))> = vec![
        (
            "invalid JSON",
            client
                .post(&messages)
                .bearer_auth(&gateway.token)
                .header("content-type", "application/json")
                .body("{\"text\": "),
            json_error(400, "INVALID_REQUEST"),
        ),
        (
            "a missing field",
            client
                .post(&messages)
                .bearer_auth(&gateway.token)
                .json(&serde_json::json!({"attachments": []})),
            json_error(400, "INVALID_REQUEST"),
        ),
        (
            "a wrong content type",
            client
                .post(&messages)
                .bearer_auth(&gateway.token)
                .header("content-type", "application/x-www-form-urlencoded")
                .body("text=hello"),
            json_error(415, "UNSUPPORTED_MEDIA_TYPE"),
        ),
        (
            "a bad query",
            client
                .get(format!("{}/v1/turns/t1?wait=soon", gateway.url))
                .bearer_auth(&gateway.token),
            json_error(400, "INVALID_REQUEST"),
        ),
        (
            "an unknown route",
            client
                .get(format!("{}/v1/no-such-route", gateway.url))
                .bearer_auth(&gateway.token),
            json_error(404, "NOT_FOUND"),
        ),
        (
            "an unknown route outside /v1",
            client.get(format!("{}/nothing-here", gateway.url)),
            json_error(404, "NOT_FOUND"),
        ),
        (
            "a wrong method",
            client.delete(&messages).bearer_auth(&gateway.token),
            json_error(405, "METHOD_NOT_ALLOWED"),
        ),
        (
            "a wrong method outside /v1",
            client.post(format!("{}/healthz", gateway.url)),
            json_error(405, "METHOD_NOT_ALLOWED"),
        ),
        (
            "a plain GET of the node socket",
            client.get(format!("{}/node", gateway.url)),
            json_error(400, "INVALID_REQUEST"),
        ),
    ];
    for (what, request, expected) in cases {
        assert_eq!(error_of(request).await, expected, "{what}");
    }
    // A 405 still says which methods the route has.
    let wrong_method = client
        .delete(&messages)
        .bearer_auth(&gateway.token)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong_method.headers()["allow"], "POST");
}
