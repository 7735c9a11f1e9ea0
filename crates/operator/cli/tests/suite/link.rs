//! The Gateway↔Harness link with real processes and sockets on loopback: enrollment, reading the
//! workspace through the Gateway, reconnection with the saved identity, every refusal code, a node
//! killed mid-transfer, and the storage split.

use std::time::Duration;
use std::time::Instant;

use base64::Engine;
use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::handshake::ConnectAuth;
use gatehouse_protocol::handshake::ConnectChallenge;
use pretty_assertions::assert_eq;
use tokio_tungstenite::tungstenite::Message;

use crate::suite::hostile::Device;
use crate::suite::hostile::Spoil;
use crate::suite::hostile::bootstrap_token;
use crate::suite::hostile::connect_frame;
use crate::suite::hostile::read_challenge;
use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::files_under;
use crate::suite::support::mode;
use crate::suite::support::start_node;

struct Dirs {
    _temp: tempfile::TempDir,
    gateway: std::path::PathBuf,
    harness: std::path::PathBuf,
    logs: std::path::PathBuf,
}

fn dirs() -> Dirs {
    let temp = tempfile::tempdir().unwrap();
    let base = temp.path().canonicalize().unwrap();
    let logs = base.join("logs");
    std::fs::create_dir_all(&logs).unwrap();
    Dirs {
        gateway: base.join("gateway"),
        harness: base.join("harness"),
        logs,
        _temp: temp,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_enrolls_serves_the_workspace_and_reconnects_without_a_second_enrollment() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.gateway, &dirs.logs);
    let code = gateway.setup_code(600);
    let mut node = start_node(&gateway, &dirs.harness, Some(&code), &dirs.logs);
    gateway.wait_ready().await;

    let marker = "workspace-only-marker-7f3a";
    std::fs::write(
        dirs.harness.join("workspace/notes.md"),
        format!("# notes\n{marker}\n"),
    )
    .unwrap();
    let response = gateway.get("/v1/agents/main/workspace/notes.md").await;
    assert_eq!(response.status(), 200, "{}", node.stderr());
    assert_eq!(response.headers()["content-type"], "text/markdown");
    assert_eq!(
        response.text().await.unwrap(),
        format!("# notes\n{marker}\n")
    );

    let nodes = gateway.get_json("/v1/nodes").await;
    let listed = nodes["nodes"].as_array().unwrap();
    assert_eq!(listed.len(), 1);
    let node_id = listed[0]["nodeId"].as_str().unwrap().to_owned();
    assert_eq!(listed[0]["connected"], true);
    assert_eq!(listed[0]["runtime"], "native");
    assert_eq!(
        listed[0]["commands"],
        serde_json::json!([
            "agent.session.restore",
            "agent.session.source",
            "agent.session.stop",
            "agent.turn",
            "dir.list",
            "file.create",
            "file.fetch",
            "file.stat",
            "file.write",
            "workspace.memory",
            "workspace.skills"
        ])
    );

    // Restart the node without the setup code: it reconnects with its saved identity.
    assert!(
        node.terminate().success(),
        "node did not exit cleanly: {}",
        node.stderr()
    );
    gateway.wait_not_ready().await;
    let _node = start_node(&gateway, &dirs.harness, None, &dirs.logs);
    gateway.wait_ready().await;
    let again = gateway.get("/v1/agents/main/workspace/notes.md").await;
    assert_eq!(again.status(), 200);
    let nodes = gateway.get_json("/v1/nodes").await;
    assert_eq!(nodes["nodes"].as_array().unwrap().len(), 1);
    assert_eq!(nodes["nodes"][0]["nodeId"], node_id.as_str());

    let audit = gateway.get_json("/v1/audit").await;
    let connects: Vec<&serde_json::Value> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["action"] == "node.connect" && event["outcome"] == "allowed")
        .collect();
    let methods: Vec<&str> = connects
        .iter()
        .map(|event| event["details"]["method"].as_str().unwrap())
        .collect();
    assert_eq!(methods, vec!["bootstrap-token", "device-token"]);

    // The node's private state is private.
    assert_eq!(mode(&dirs.harness.join("node")), 0o700);
    assert_eq!(mode(&dirs.harness.join("node/identity.json")), 0o600);
    assert_eq!(mode(&dirs.harness.join("node/device-token.json")), 0o600);
    // The Gateway's state holds no workspace file and no workspace content.
    assert_eq!(mode(&dirs.gateway), 0o700);
    assert_eq!(mode(&dirs.gateway.join("operator-token")), 0o600);
    for file in files_under(&dirs.gateway) {
        assert_ne!(file.file_name().unwrap(), "notes.md", "{}", file.display());
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains(marker),
            "workspace content in gateway state: {}",
            file.display()
        );
        assert_eq!(
            mode(&file) & 0o077,
            0,
            "{} is readable by others",
            file.display()
        );
    }
    // And the Harness root holds no Gateway state.
    for file in files_under(&dirs.harness) {
        assert_ne!(file.file_name().unwrap(), "gateway.db");
        assert_ne!(file.file_name().unwrap(), "operator-token");
    }
}

/// Issue 12, finding 8: HTML written by the Harness is served as an inert download (never as a
/// page of the Gateway's origin), and `/readyz`, which needs no token, names no node.
#[tokio::test(flavor = "multi_thread")]
async fn issue_12_harness_html_is_an_inert_download_and_readyz_names_no_node() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.gateway, &dirs.logs);
    let code = gateway.setup_code(600);
    let _node = start_node(&gateway, &dirs.harness, Some(&code), &dirs.logs);
    gateway.wait_ready().await;
    let page = "<script>alert(document.cookie)</script>";
    std::fs::write(dirs.harness.join("workspace/x.html"), page).unwrap();
    let response = gateway.get("/v1/agents/main/workspace/x.html").await;
    assert_eq!(response.status(), 200);
    let headers = response.headers();
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert_eq!(headers["content-disposition"], "attachment");
    assert_eq!(
        headers["content-security-policy"],
        "default-src 'none'; sandbox"
    );
    assert_eq!(response.text().await.unwrap(), page);

    let ready = reqwest::get(format!("{}/readyz", gateway.url))
        .await
        .unwrap();
    assert_eq!(ready.status(), 200);
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body, serde_json::json!({"status": "ready"}));
}

/// Issue 12, finding 8: a setup code names the Gateway's own listen address (or its public URL),
/// never the `Host` header of the request that asked for it.
#[tokio::test(flavor = "multi_thread")]
async fn issue_12_a_setup_code_never_takes_its_url_from_the_host_header() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.gateway, &dirs.logs);
    let response = reqwest::Client::new()
        .post(format!("{}/v1/nodes/setup-codes", gateway.url))
        .bearer_auth(&gateway.token)
        .header("Host", "attacker.example:443")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    let code = body["setupCode"].as_str().unwrap();
    let decoded = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(code)
        .unwrap();
    let decoded: serde_json::Value = serde_json::from_slice(&decoded).unwrap();
    assert_eq!(decoded["url"], gateway.ws_url().as_str());
}

#[tokio::test(flavor = "multi_thread")]
async fn traversal_and_symlinks_through_the_http_route_are_refused() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.gateway, &dirs.logs);
    let code = gateway.setup_code(600);
    let _node = start_node(&gateway, &dirs.harness, Some(&code), &dirs.logs);
    gateway.wait_ready().await;
    let workspace = dirs.harness.join("workspace");
    std::fs::create_dir_all(workspace.join("docs")).unwrap();
    std::fs::write(workspace.join("docs/a.txt"), "inside").unwrap();
    std::os::unix::fs::symlink("/etc", workspace.join("etc-link")).unwrap();
    std::os::unix::fs::symlink(workspace.join("docs/a.txt"), workspace.join("file-link")).unwrap();
    std::os::unix::fs::symlink(workspace.join("docs"), workspace.join("docs-link")).unwrap();
    let cases = [
        ("etc-link/passwd", 403, "SYMLINK_REDIRECT"),
        ("file-link", 403, "SYMLINK_REDIRECT"),
        ("docs-link/a.txt", 403, "SYMLINK_REDIRECT"),
        ("..%2F..%2Fetc%2Fpasswd", 403, "PATH_TRAVERSAL"),
        (
            "docs%2F..%2F..%2Fnode%2Fidentity.json",
            403,
            "PATH_TRAVERSAL",
        ),
        ("docs/..%5C..%5Cnode", 403, "PATH_TRAVERSAL"),
        ("missing.txt", 404, "NOT_FOUND"),
        ("docs", 400, "IS_DIRECTORY"),
    ];
    for (path, status, code) in cases {
        let response = gateway
            .get(&format!("/v1/agents/main/workspace/{path}"))
            .await;
        assert_eq!(response.status().as_u16(), status, "{path}");
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{path}: {body}");
    }
    let ok = gateway.get("/v1/agents/main/workspace/docs/a.txt").await;
    assert_eq!(ok.text().await.unwrap(), "inside");
    let other_agent = gateway.get("/v1/agents/other/workspace/docs/a.txt").await;
    assert_eq!(other_agent.status(), 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_node_during_16_mib_fetches_fails_them_promptly_and_the_gateway_stays_healthy()
{
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.gateway, &dirs.logs);
    let code = gateway.setup_code(600);
    let mut node = start_node(&gateway, &dirs.harness, Some(&code), &dirs.logs);
    gateway.wait_ready().await;
    let big: Vec<u8> = (0..16 * 1024 * 1024_u32)
        .map(|index| (index % 251) as u8)
        .collect();
    std::fs::write(dirs.harness.join("workspace/big.bin"), &big).unwrap();
    // One fetch completes, to show the transfer works at full size.
    let whole = gateway.get("/v1/agents/main/workspace/big.bin").await;
    assert_eq!(whole.status(), 200);
    assert!(whole.bytes().await.unwrap() == big);

    let mut fetches = Vec::new();
    for _ in 0..8 {
        let client = reqwest::Client::new();
        let url = format!("{}/v1/agents/main/workspace/big.bin", gateway.url);
        let token = gateway.token.clone();
        fetches.push(tokio::spawn(async move {
            let response = client
                .get(url)
                .bearer_auth(token)
                .timeout(WAIT)
                .send()
                .await
                .unwrap();
            let status = response.status().as_u16();
            let body = response.bytes().await.unwrap();
            (status, body)
        }));
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    node.kill();
    let killed_at = Instant::now();
    let mut failed = 0;
    for fetch in fetches {
        let (status, body) = fetch.await.unwrap();
        match status {
            200 => assert!(body == big, "a completed fetch returned wrong bytes"),
            503 => {
                let error: serde_json::Value = serde_json::from_slice(&body).unwrap();
                assert_eq!(error["error"]["code"], "DEPENDENCY_UNAVAILABLE");
                failed += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    // The invoke timeout is 30 s; a disconnect must fail callers long before it.
    assert!(
        killed_at.elapsed() < Duration::from_secs(10),
        "callers waited {:?}",
        killed_at.elapsed()
    );
    assert!(failed > 0, "no fetch was in flight when the node died");
    let health = reqwest::get(format!("{}/healthz", gateway.url))
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let after = gateway.get("/v1/agents/main/workspace/big.bin").await;
    assert_eq!(after.status(), 503);
    let body: serde_json::Value = after.json().await.unwrap();
    assert_eq!(body["error"]["code"], "DEPENDENCY_UNAVAILABLE");
}

#[tokio::test(flavor = "multi_thread")]
async fn v1_routes_require_the_operator_token() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.gateway, &dirs.logs);
    let client = reqwest::Client::new();
    let missing = client
        .get(format!("{}/v1/nodes", gateway.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 401);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "UNAUTHORIZED");
    let wrong = client
        .get(format!("{}/v1/nodes", gateway.url))
        .bearer_auth("not-the-token")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    let setup = client
        .post(format!("{}/v1/nodes/setup-codes", gateway.url))
        .json(&serde_json::json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(setup.status(), 401);
    assert_eq!(gateway.get("/v1/nodes").await.status(), 200);
    let health = client
        .get(format!("{}/healthz", gateway.url))
        .send()
        .await
        .unwrap();
    assert_eq!(
        health.json::<serde_json::Value>().await.unwrap(),
        serde_json::json!({"status": "ok"})
    );
}

#[derive(Debug, PartialEq, Eq)]
enum Outcome {
    Hello,
    Refused {
        code: String,
        reason: String,
        close_reason: String,
    },
    Closed {
        close_reason: String,
    },
}

/// Opens `/node`, reads the challenge, sends what `frame` builds, and reports how the Gateway
/// answered.
async fn handshake(gateway: &Gateway, frame: impl FnOnce(&ConnectChallenge) -> String) -> Outcome {
    let (mut socket, _) = tokio_tungstenite::connect_async(gateway.ws_url())
        .await
        .unwrap();
    let challenge = read_challenge(&mut socket).await;
    socket
        .send(Message::Text(frame(&challenge).into()))
        .await
        .unwrap();
    let mut refused: Option<(String, String)> = None;
    loop {
        let message = tokio::time::timeout(WAIT, socket.next()).await.unwrap();
        let close_reason = match message {
            Some(Ok(Message::Text(text))) => match serde_json::from_str::<Frame>(&text).unwrap() {
                Frame::Res(response) if response.ok => return Outcome::Hello,
                Frame::Res(response) => {
                    let error = response.error.unwrap();
                    let reason = error
                        .details
                        .as_ref()
                        .and_then(|d| d["reason"].as_str())
                        .unwrap_or_default()
                        .to_owned();
                    refused = Some((error.code, reason));
                    continue;
                }
                Frame::Req(_) | Frame::Event(_) => continue,
            },
            Some(Ok(Message::Close(frame))) => frame
                .map(|frame| frame.reason.to_string())
                .unwrap_or_default(),
            Some(Ok(_)) => continue,
            Some(Err(_)) | None => String::new(),
        };
        return match refused {
            Some((code, reason)) => Outcome::Refused {
                code,
                reason,
                close_reason,
            },
            None => Outcome::Closed { close_reason },
        };
    }
}

fn refused(code: &str, reason: &str) -> Outcome {
    Outcome::Refused {
        code: code.into(),
        reason: reason.into(),
        close_reason: code.into(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn every_bad_handshake_is_refused_with_its_code_and_audited() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.gateway, &dirs.logs);
    let with_bootstrap = |token: &str| ConnectAuth {
        bootstrap_token: Some(token.to_owned()),
        device_token: None,
    };

    // A good enrollment, then the same code again from another device: replayed.
    let token = bootstrap_token(&gateway.setup_code(600));
    let first = Device::new(1);
    let outcome = handshake(&gateway, |challenge| {
        connect_frame(challenge, &first, with_bootstrap(&token), Spoil::Nothing)
    })
    .await;
    assert_eq!(outcome, Outcome::Hello);
    let second = Device::new(2);
    let replay = handshake(&gateway, |challenge| {
        connect_frame(challenge, &second, with_bootstrap(&token), Spoil::Nothing)
    })
    .await;
    assert_eq!(replay, refused("SETUP_CODE_INVALID", "CODE_USED"));

    // An expired code.
    let short = bootstrap_token(&gateway.setup_code(1));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let expired = handshake(&gateway, |challenge| {
        connect_frame(
            challenge,
            &Device::new(3),
            with_bootstrap(&short),
            Spoil::Nothing,
        )
    })
    .await;
    assert_eq!(expired, refused("SETUP_CODE_INVALID", "CODE_EXPIRED"));

    // An unknown code.
    let unknown = handshake(&gateway, |challenge| {
        connect_frame(
            challenge,
            &Device::new(4),
            with_bootstrap("made-up"),
            Spoil::Nothing,
        )
    })
    .await;
    assert_eq!(unknown, refused("SETUP_CODE_INVALID", "CODE_UNKNOWN"));

    // Device proofs that do not verify; each uses a fresh good code so only the proof is wrong.
    for (spoil, reason) in [
        (Spoil::Signature, "SIGNATURE_INVALID"),
        (Spoil::SignedAt(-200_000), "SIGNATURE_EXPIRED"),
        (Spoil::SignedAt(-5_000), "SIGNED_AT_MISMATCH"),
        (Spoil::DeviceId, "DEVICE_ID_MISMATCH"),
    ] {
        let token = bootstrap_token(&gateway.setup_code(600));
        let outcome = handshake(&gateway, |challenge| {
            connect_frame(challenge, &Device::new(5), with_bootstrap(&token), spoil)
        })
        .await;
        assert_eq!(outcome, refused("DEVICE_AUTH_FAILED", reason));
    }

    // An unknown device presenting a device token.
    let stranger = handshake(&gateway, |challenge| {
        connect_frame(
            challenge,
            &Device::new(6),
            ConnectAuth {
                bootstrap_token: None,
                device_token: Some("guess".into()),
            },
            Spoil::Nothing,
        )
    })
    .await;
    assert_eq!(stranger, refused("UNAUTHORIZED", "DEVICE_UNKNOWN"));

    // A 65 KiB frame before authentication, and malformed JSON.
    let oversized = handshake(&gateway, |_| {
        format!("{{\"pad\":\"{}\"}}", "x".repeat(65 * 1024))
    })
    .await;
    assert_eq!(
        oversized,
        Outcome::Closed {
            close_reason: "FRAME_TOO_LARGE".into()
        }
    );
    let malformed = handshake(&gateway, |_| String::from("{not json")).await;
    assert_eq!(
        malformed,
        Outcome::Closed {
            close_reason: "INVALID_REQUEST".into()
        }
    );

    // Every refusal was audited with its code, and no secret went into the trail.
    let audit = gateway.get_json("/v1/audit").await;
    let denied: Vec<String> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["action"] == "node.connect" && event["outcome"] == "denied")
        .map(|event| event["reasonCode"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        denied,
        vec![
            "SETUP_CODE_INVALID",
            "SETUP_CODE_INVALID",
            "SETUP_CODE_INVALID",
            "DEVICE_AUTH_FAILED",
            "DEVICE_AUTH_FAILED",
            "DEVICE_AUTH_FAILED",
            "DEVICE_AUTH_FAILED",
            "UNAUTHORIZED",
            "FRAME_TOO_LARGE",
            "INVALID_REQUEST",
        ]
    );
    let trail = audit.to_string();
    assert!(
        !trail.contains(&token),
        "a bootstrap token reached the audit trail"
    );
    let log = gateway.process.stderr();
    assert!(
        log.contains("node connection refused"),
        "refusals are not logged: {log}"
    );
    assert!(!log.contains(&token), "a bootstrap token reached the log");
}

/// Issue 14: the operator commands read the Gateway's answers through the typed API client, so
/// a refusal reaches the operator with the API's stable code and message, and a success is the
/// route's typed answer.
#[tokio::test(flavor = "multi_thread")]
async fn issue_14_operator_commands_show_the_stable_code_of_a_refusal() {
    let dirs = dirs();
    let gateway = Gateway::start(&dirs.gateway, &dirs.logs);
    let wrong_token = dirs.logs.join("wrong-token");
    std::fs::write(&wrong_token, "not-the-operator-token").unwrap();
    let output = crate::suite::support::gatehouse()
        .args(["skills", "list", "--url", &gateway.url, "--token-file"])
        .arg(&wrong_token)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("(401): UNAUTHORIZED: the bearer token is not the operator token"),
        "{stderr}"
    );

    let output = gateway.operator_cli(&["setup-code", "--ttl-seconds", "0"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("(400): INVALID_REQUEST: ttlSeconds must be between 1 and"),
        "{stderr}"
    );

    let output = gateway.operator_cli(&["setup-code", "--json"]);
    assert!(output.status.success());
    let issued: gatehouse_api::nodes::SetupCode = serde_json::from_slice(&output.stdout).unwrap();
    assert!(!issued.setup_code.is_empty());
}
