//! Issue 17 end to end: `gatehouse keys` against a real `gatehouse up`, and the official `openai`
//! Python SDK (installed by scripts/install into the venv of `GATEHOUSE_PYTHON`) talking to
//! `/v1` with a `chat` key, its turns answered by the mock model over HTTP, which records what
//! each turn sent it. The captured log, the audit trail and the Gateway's state hold the key's
//! name and never its secret.

use std::path::Path;
use std::process::Command;

use pretty_assertions::assert_eq;

use crate::suite::support::dirs;
use crate::suite::support::files_under;
use crate::suite::support::gatehouse;
use crate::suite::support::installed;
use crate::suite::support::mock_model;
use crate::suite::support::mock_requests;
use crate::suite::up::Up;

/// The SDK's side: each call the issue names, with what it observed printed as one JSON object.
/// Exceptions other than the expected ones propagate, so the script fails loudly.
const SDK_SCRIPT: &str = r#"
import json
import sys

import openai

base_url, key = sys.argv[1], sys.argv[2]
client = openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=60)
seen = {"version": openai.__version__}
seen["models"] = [model.id for model in client.models.list()]

said = client.chat.completions.create(
    model="main", messages=[{"role": "user", "content": "/say hello"}]
)
seen["content"] = said.choices[0].message.content
seen["finish"] = said.choices[0].finish_reason
seen["usage"] = [said.usage.prompt_tokens, said.usage.completion_tokens, said.usage.total_tokens]

pieces, finishes, usages = [], [], []
for chunk in client.chat.completions.create(
    model="main",
    messages=[{"role": "user", "content": "/say hello"}],
    stream=True,
    stream_options={"include_usage": True},
):
    for choice in chunk.choices:
        if choice.delta.content:
            pieces.append(choice.delta.content)
        finishes.append(choice.finish_reason)
    if chunk.usage is not None:
        usage = chunk.usage
        usages.append([len(chunk.choices), usage.prompt_tokens, usage.completion_tokens, usage.total_tokens])
seen["streamed"] = "".join(pieces)
seen["streamUsage"] = usages
seen["pieces"] = len(pieces)
seen["streamFinish"] = finishes[-1]

session = {"X-Gatehouse-Session": "app1-conversation"}
first = client.chat.completions.create(
    model="main",
    messages=[{"role": "user", "content": "/say remember-the-first-turn"}],
    extra_headers=session,
)
second = client.chat.completions.create(
    model="main",
    messages=[{"role": "user", "content": "/say second-turn"}],
    extra_headers=session,
)
seen["session"] = [first.choices[0].message.content, second.choices[0].message.content]

try:
    client.chat.completions.create(
        model="main", messages=[{"role": "user", "content": "/fail 401"}]
    )
    seen["failure"] = None
except openai.APIError as error:
    seen["failure"] = {
        "class": type(error).__name__,
        "isStatusError": isinstance(error, openai.APIStatusError),
        "status": error.status_code,
        "code": error.code,
        "type": error.type,
    }

try:
    client.chat.completions.create(
        model="main",
        messages=[{"role": "user", "content": "/say hi"}],
        extra_headers={"X-Gatehouse-Session": "app2-x"},
    )
    seen["otherApp"] = None
except openai.PermissionDeniedError as error:
    seen["otherApp"] = error.code

print(json.dumps(seen))
"#;

/// Runs `gatehouse keys ARGS` against `up` with the operator token file and returns its exit
/// code and stdout.
fn keys_cli(up: &Up, data: &Path, args: &[&str]) -> (i32, String) {
    let token_file = data.join("gateway").join("operator-token");
    let output = gatehouse()
        .arg("keys")
        .args(args)
        .arg("--url")
        .arg(&up.url)
        .arg("--token-file")
        .arg(&token_file)
        .output()
        .unwrap();
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8(output.stdout).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_17_the_openai_python_sdk_chats_through_a_chat_key() {
    let python = installed("GATEHOUSE_PYTHON", "a Python venv with openai==3.51.0");
    let dirs = dirs();
    let data = dirs.base.join("data");
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let mut command = gatehouse();
    command
        .env("MOCK_MODEL_KEY", "mock-model-key")
        .env("GATEHOUSE_LOG", "debug")
        .args(["up", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .args([
            "--model",
            &format!("openai-chat:{mock_url}/v1:mock-model"),
            "--model-key-env",
            "MOCK_MODEL_KEY",
        ]);
    let up = Up::spawn(command, None, &data.join("gateway"), &data);
    up.wait_ready().await;

    let (code, created) = keys_cli(
        &up,
        &data,
        &[
            "create",
            "--name",
            "app1",
            "--scope",
            "chat",
            "--sessions",
            "app1-",
            "--json",
        ],
    );
    assert_eq!(code, 0, "{created}");
    let created: serde_json::Value = serde_json::from_str(&created).unwrap();
    let key = created["key"].as_str().unwrap().to_owned();
    assert_eq!(
        created,
        serde_json::json!({"name": "app1", "key": key, "scopes": ["chat"], "sessions": "app1-"})
    );
    // Without --json only the key is printed.
    let (code, bare) = keys_cli(
        &up,
        &data,
        &[
            "create",
            "--name",
            "dash",
            "--scope",
            "read",
            "--expires-in",
            "3600",
            "--requests-per-minute",
            "100",
            "--concurrent-turns",
            "2",
        ],
    );
    assert_eq!(code, 0, "{bare}");
    assert!(
        bare.trim().starts_with("ghk_") && !bare.trim().contains(' '),
        "{bare}"
    );

    let script = dirs.base.join("sdk_check.py");
    std::fs::write(&script, SDK_SCRIPT).unwrap();
    let output = Command::new(&python)
        .arg(&script)
        .arg(format!("{}/v1", up.url))
        .arg(&key)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the SDK script failed: {stderr}\n{stdout}"
    );
    let seen: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    // `usage` is what the model reported for the turn's one call: the mock's count for a new
    // session's `/say hello` (the stream's in one more chunk, with no choices).
    let view = gatehouse_mockmodel::ModelRequestView {
        items: vec![gatehouse_mockmodel::ViewItem::User {
            text: String::from("/say hello"),
        }],
    };
    let usage = gatehouse_mockmodel::usage(&view, &gatehouse_mockmodel::plan(&view));
    assert!(
        usage.input_tokens > 0 && usage.output_tokens > 0,
        "{usage:?}"
    );
    assert_eq!(
        seen,
        serde_json::json!({
            "version": "3.51.0",
            "models": ["main"],
            "content": "hello",
            "finish": "stop",
            "usage": [usage.input_tokens, usage.output_tokens, usage.total_tokens()],
            "streamed": "hello",
            "streamUsage": [[0, usage.input_tokens, usage.output_tokens, usage.total_tokens()]],
            "pieces": seen["pieces"],
            "streamFinish": "stop",
            "session": ["remember-the-first-turn", "second-turn"],
            "failure": {
                "class": "InternalServerError",
                "isStatusError": true,
                "status": 502,
                "code": "MODEL_AUTH_FAILED",
                "type": "server_error",
            },
            "otherApp": "SCOPE_DENIED",
        })
    );
    // The mock streams `/say` in at least two deltas, and they arrived as separate chunks.
    assert!(seen["pieces"].as_u64().unwrap() >= 2, "{seen}");

    // The second turn of the session sent the model the first turn's text: the Gateway's
    // transcript is the history.
    let requests = mock_requests(&mock_url).await;
    let second = requests
        .iter()
        .find(|request| request["body"].to_string().contains("/say second-turn"))
        .expect("the second turn reached the model");
    assert!(
        second["body"]
            .to_string()
            .contains("remember-the-first-turn"),
        "{second}"
    );

    // The key's use is listed, revocation takes effect on the next request, and a second revoke
    // finds nothing.
    let (code, listed) = keys_cli(&up, &data, &["list", "--json"]);
    assert_eq!(code, 0, "{listed}");
    let listed: serde_json::Value = serde_json::from_str(&listed).unwrap();
    let names: Vec<&str> = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["app1", "dash"]);
    assert!(listed["keys"][0]["lastUsedAtMs"].is_i64(), "{listed}");
    let dash = &listed["keys"][1];
    assert_eq!(
        (
            &dash["scopes"],
            &dash["requestsPerMinute"],
            &dash["concurrentTurns"]
        ),
        (
            &serde_json::json!(["read"]),
            &serde_json::json!(100),
            &serde_json::json!(2)
        ),
        "{listed}"
    );
    assert!(dash["expiresAtMs"].as_i64().unwrap() > dash["createdAtMs"].as_i64().unwrap());
    let (code, text) = keys_cli(&up, &data, &["list"]);
    assert_eq!(code, 0);
    assert!(
        text.contains("app1  scopes=chat  sessions=app1-*"),
        "{text}"
    );
    let (code, revoked) = keys_cli(&up, &data, &["revoke", "app1"]);
    assert_eq!((code, revoked.trim()), (0, "revoked app1"));
    let refused = reqwest::Client::new()
        .get(format!("{}/v1/models", up.url))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);
    let (code, _) = keys_cli(&up, &data, &["revoke", "app1"]);
    assert_eq!(code, 1);

    // Nothing about the key but its name is in the log, the audit trail or the state.
    let (status, audit) = up.request(reqwest::Method::GET, "/v1/audit", None).await;
    assert_eq!(status, 200, "{audit}");
    let audit = audit.to_string();
    assert!(
        audit.contains("key:app1") || audit.contains("\"app1\""),
        "{audit}"
    );
    let secret = key.strip_prefix("ghk_").unwrap();
    let log = up.process.stderr();
    assert!(log.contains("key:app1"), "the log names the key");
    assert!(!log.contains(secret), "the log holds the secret");
    assert!(!audit.contains(secret), "the audit trail holds the secret");
    for file in files_under(&data) {
        let bytes = std::fs::read(&file).unwrap();
        assert!(
            !String::from_utf8_lossy(&bytes).contains(secret),
            "{} holds the secret",
            file.display()
        );
    }
}

/// A completion that names no session gets a session of its own, used for that one turn; its
/// worker is stopped when the turn ends, so such requests never fill the node's worker slots
/// (with one slot, each of several anonymous completions is answered; before, the second was
/// refused with `WORKER_CAPACITY_EXHAUSTED` until an operator stopped the first session).
#[tokio::test(flavor = "multi_thread")]
async fn anonymous_completions_give_their_worker_slot_back() {
    let dirs = dirs();
    let data = dirs.base.join("data");
    let mut command = gatehouse();
    command
        .args(["up", "--listen", "127.0.0.1:0", "--capacity", "1", "--data"])
        .arg(&data);
    let up = Up::spawn(command, None, &data.join("gateway"), &data);
    up.wait_ready().await;
    let client = reqwest::Client::new();
    for round in 0..3 {
        let text = format!("/say round {round}");
        let deadline = std::time::Instant::now() + crate::suite::support::WAIT;
        loop {
            let answer = client
                .post(format!("{}/v1/chat/completions", up.url))
                .bearer_auth(&up.token)
                .json(&serde_json::json!({
                    "model": "main",
                    "messages": [{"role": "user", "content": text}],
                }))
                .send()
                .await
                .unwrap();
            let status = answer.status().as_u16();
            let body: serde_json::Value = answer.json().await.unwrap();
            if status == 200 {
                assert_eq!(
                    body["choices"][0]["message"]["content"],
                    format!("round {round}"),
                    "{body}"
                );
                break;
            }
            // The previous session's worker is released just after its turn ends.
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (503, Some("WORKER_CAPACITY_EXHAUSTED")),
                "{body}"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "round {round}: the one worker slot never came back: {body}"
            );
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}
