//! `gatehouse up` (embedded mode) as a real process: documents, admission under load, idempotent
//! retries, `kill -9` recovery, a full disk, and `gatehouse chat`.

use std::path::Path;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;

use crate::suite::support::Process;
use crate::suite::support::WAIT;
use crate::suite::support::files_under;
use crate::suite::support::gatehouse;

/// A running `gatehouse up`.
pub(crate) struct Up {
    pub(crate) process: Process,
    pub(crate) url: String,
    pub(crate) token: String,
    pub(crate) lines: Vec<String>,
}

impl Up {
    pub(crate) fn start(data: &Path) -> Up {
        Up::start_with(gatehouse(), data)
    }

    /// Starts `up` on `data` with its local SQLite file and media directory whatever
    /// `GATEHOUSE_TEST_BACKEND` says, for a test of those files.
    pub(crate) fn start_local(data: &Path) -> Up {
        let mut command = gatehouse();
        crate::suite::backend::keep_local(&mut command, &data.join("gateway"));
        Up::start_with(command, data)
    }

    /// Starts `up --runtime codex` on `data`, with the Codex the test script installed.
    pub(crate) fn start_codex(data: &Path) -> Up {
        let mut command = gatehouse();
        command
            .args(["up", "--listen", "127.0.0.1:0", "--runtime", "codex"])
            .arg("--codex-bin")
            .arg(crate::suite::support::codex_bin())
            .arg("--data")
            .arg(data);
        Up::spawn(command, None, &data.join("gateway"), data)
    }

    /// Starts `command` (a [`gatehouse`] command with its environment set) as `up` on `data`.
    pub(crate) fn start_with(mut command: Command, data: &Path) -> Up {
        command
            .args(["up", "--listen", "127.0.0.1:0", "--data"])
            .arg(data);
        Up::spawn(command, None, &data.join("gateway"), data)
    }

    /// Spawns `command`; the operator token is `token` when given, else read from the state.
    pub(crate) fn spawn(
        mut command: Command,
        token: Option<&str>,
        gateway_state: &Path,
        logs: &Path,
    ) -> Up {
        crate::suite::backend::apply(&mut command, gateway_state);
        std::fs::create_dir_all(logs).unwrap();
        let stderr_log = logs.join(format!("up-{}.log", std::process::id()));
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(
                std::fs::File::options()
                    .create(true)
                    .append(true)
                    .open(&stderr_log)
                    .unwrap(),
            )
            .spawn()
            .unwrap();
        let receiver = crate::suite::support::stdout_lines(&mut child);
        let process = Process::from_child(child, stderr_log);
        let mut lines = Vec::new();
        for _ in 0..4 {
            let line = receiver
                .recv_timeout(WAIT)
                .unwrap_or_else(|_| panic!("up printed too little: {}", process.stderr()));
            lines.push(line);
        }
        let url = lines[0]
            .strip_prefix("gatehouse up: listening on ")
            .unwrap()
            .to_owned();
        let token = match token {
            Some(token) => token.to_owned(),
            None => std::fs::read_to_string(gateway_state.join("operator-token"))
                .unwrap()
                .trim()
                .to_owned(),
        };
        Up {
            process,
            url,
            token,
            lines,
        }
    }

    pub(crate) async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        self.request_as(&self.token, method, path, body).await
    }

    /// A request with `token` (an API key's or the operator's); returns the status and the
    /// JSON body (or the text, as a JSON string).
    pub(crate) async fn request_as(
        &self,
        token: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> (u16, serde_json::Value) {
        let mut request = reqwest::Client::new()
            .request(method, format!("{}{path}", self.url))
            .bearer_auth(token)
            .timeout(WAIT);
        if let Some(body) = body {
            request = request.json(&body);
        }
        crate::suite::support::status_and_body(request).await
    }

    pub(crate) async fn wait_ready(&self) {
        let deadline = Instant::now() + WAIT;
        while !reqwest::get(format!("{}/readyz", self.url))
            .await
            .is_ok_and(|response| response.status().as_u16() == 200)
        {
            assert!(
                Instant::now() < deadline,
                "up never became ready: {}",
                self.process.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Returns the content of `AGENTS.md` through the documents API, which its node serves;
    /// fails the test on any other answer than `200`.
    pub(crate) async fn agents_document(&self) -> String {
        let (status, agents) = self
            .request(
                reqwest::Method::GET,
                "/v1/agents/main/files/AGENTS.md",
                None,
            )
            .await;
        assert_eq!(status, 200, "{agents}");
        agents["content"].as_str().unwrap().to_owned()
    }

    pub(crate) async fn post(
        &self,
        session: &str,
        body: serde_json::Value,
    ) -> (u16, serde_json::Value) {
        self.request(
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/messages"),
            Some(body),
        )
        .await
    }

    pub(crate) async fn transcript(&self, session: &str) -> Vec<serde_json::Value> {
        let (status, body) = self
            .request(
                reqwest::Method::GET,
                &format!("/v1/sessions/{session}/transcript"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body["messages"].as_array().unwrap().clone()
    }

    pub(crate) async fn turn_status(&self, turn: &str, wait: u64) -> serde_json::Value {
        let (status, body) = self
            .request(
                reqwest::Method::GET,
                &format!("/v1/turns/{turn}?wait={wait}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{body}");
        body
    }
}

fn data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    (temp, data)
}

#[tokio::test(flavor = "multi_thread")]
async fn up_runs_both_roles_with_separate_roots_and_serves_the_documents() {
    let (_temp, data) = data_dir();
    let up = Up::start(&data);
    assert!(
        up.lines[1].starts_with("operator token file: "),
        "{:?}",
        up.lines
    );
    assert!(
        up.lines[3].starts_with("model: mock")
            && up.lines[3].contains("--model openai-responses:URL:MODEL"),
        "{:?}",
        up.lines
    );
    up.wait_ready().await;
    let agents = up.agents_document().await;
    assert!(agents.starts_with("# Agent instructions"), "{agents}");
    let (status, put) = up
        .request(
            reqwest::Method::PUT,
            "/v1/agents/main/files/USER.md",
            Some(serde_json::json!({"content": "# User\nowner edit\n"})),
        )
        .await;
    assert_eq!(
        (status, put),
        (200, serde_json::json!({"name": "USER.md", "size": 18}))
    );

    // chat: the in-process Harness runs the turn in a real worker process with the mock model,
    // and the reply streams to the terminal.
    let chat = |text: &str| {
        gatehouse()
            .args([
                "chat",
                "--url",
                &up.url,
                "--session",
                "talk",
                "--token-file",
            ])
            .arg(data.join("gateway/operator-token"))
            .arg(text)
            .output()
            .unwrap()
    };
    let output = chat("/say hello");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&output.stdout), "hello\n");
    let output = chat(r#"/tool write {"path":"a.txt","content":"x"}"#);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let output = chat(r#"/tool read {"path":"a.txt"}"#);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains('x'),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    // A failing model fails the turn with its code, and chat says so.
    let output = chat("/fail 401");
    assert_eq!(output.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("MODEL_AUTH_FAILED"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // exec in a worker cannot read the Gateway's state next door.
    let token_file = data.join("gateway/operator-token");
    let output = chat(&format!(
        r#"/tool exec {{"command":"cat {}"}}"#,
        token_file.display()
    ));
    assert!(
        !String::from_utf8_lossy(&output.stdout).contains(&up.token),
        "the operator token leaked"
    );
    let transcript = up.transcript("talk").await;
    assert_eq!(transcript[0]["content"], "/say hello");
    assert_eq!(transcript[1]["content"], "hello");
    drop(up);

    // A restart keeps the owner's edit and does not reset the documents.
    let up = Up::start(&data);
    up.wait_ready().await;
    let (status, user) = up
        .request(reqwest::Method::GET, "/v1/agents/main/files/USER.md", None)
        .await;
    assert_eq!(
        (status, &user["content"]),
        (200, &serde_json::json!("# User\nowner edit\n")),
        "{user}"
    );
    // The roots are separate: the Gateway holds no workspace file, the Harness no Gateway state.
    for file in files_under(&data.join("gateway")) {
        assert!(
            !file.ends_with("USER.md") && !file.ends_with("AGENTS.md"),
            "{}",
            file.display()
        );
    }
    for file in files_under(&data.join("harness")) {
        assert!(
            !file.ends_with("gateway.db") && !file.ends_with("operator-token"),
            "{}",
            file.display()
        );
    }
    assert!(data.join("harness/workspace/USER.md").is_file());
}

#[tokio::test(flavor = "multi_thread")]
async fn two_hundred_sessions_times_five_messages_are_each_stored_once_in_order() {
    let (_temp, data) = data_dir();
    let up = std::sync::Arc::new(Up::start(&data));
    up.wait_ready().await;
    let mut sessions = Vec::new();
    for session in 0..200 {
        let up = std::sync::Arc::clone(&up);
        sessions.push(tokio::spawn(async move {
            let key = format!("load-{session}");
            for message in 0..5 {
                // A busy store may answer 503 STORE_UNAVAILABLE ("retry later"); the client
                // retries with the same idempotency key, as the API says, and the message must
                // still be stored exactly once.
                let body = serde_json::json!({
                    "text": format!("{key} message {message}"),
                    "idempotencyKey": format!("{key}-{message}"),
                });
                let deadline = Instant::now() + WAIT;
                loop {
                    let (status, answer) = up.post(&key, body.clone()).await;
                    if status == 202 {
                        break;
                    }
                    assert_eq!(
                        (status, answer["error"]["code"].as_str()),
                        (503, Some("STORE_UNAVAILABLE")),
                        "{answer}"
                    );
                    assert!(Instant::now() < deadline, "the store stayed busy: {answer}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            key
        }));
    }
    for session in sessions {
        let key = session.await.unwrap();
        let texts: Vec<String> = up
            .transcript(&key)
            .await
            .iter()
            .filter(|message| message["role"] == "user")
            .map(|message| message["content"].as_str().unwrap().to_owned())
            .collect();
        let expected: Vec<String> = (0..5)
            .map(|message| format!("{key} message {message}"))
            .collect();
        assert_eq!(texts, expected);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_idempotent_retry_returns_the_same_turn() {
    let (_temp, data) = data_dir();
    let up = Up::start(&data);
    up.wait_ready().await;
    let body = serde_json::json!({"text": "only once", "idempotencyKey": "retry-1"});
    let (first_status, first) = up.post("s", body.clone()).await;
    let (second_status, second) = up.post("s", body).await;
    assert_eq!((first_status, second_status), (202, 202));
    assert_eq!(first["turnId"], second["turnId"]);
    let users = up
        .transcript("s")
        .await
        .iter()
        .filter(|message| message["role"] == "user")
        .count();
    assert_eq!(users, 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_loses_no_acknowledged_message_and_leaves_no_turn_running() {
    let (_temp, data) = data_dir();
    kill_9_loses_nothing(&data, &Up::start, 8).await;
}

/// Kills `up` (started by `start`) with SIGKILL while `clients` senders post messages to seven
/// sessions and one turn runs in an eighth (eight sessions in all, as many as `up` has worker
/// slots, so after the restart every session's queued turns find a slot, whichever order they
/// are dispatched in); then restarts it and checks
/// that every acknowledged message is stored exactly once with contiguous seqs, the running
/// turn is interrupted (not replayed) and the queued one proceeds.
pub(crate) async fn kill_9_loses_nothing(data: &Path, start: &dyn Fn(&Path) -> Up, clients: usize) {
    let mut up = start(data);
    up.wait_ready().await;
    let up_url = up.url.clone();
    let token = up.token.clone();
    // One turn is running (the mock model hangs) when the process dies.
    let (status, hanging) = up.post("hang", serde_json::json!({"text": "/hang"})).await;
    assert_eq!(status, 202);
    let hanging_turn = hanging["turnId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + WAIT;
    while up.turn_status(&hanging_turn, 0).await["status"] != "running" {
        assert!(Instant::now() < deadline, "the hanging turn never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A second message queues behind it.
    let (_, queued) = up
        .post(
            "hang",
            serde_json::json!({"text": "/say after the restart"}),
        )
        .await;
    let queued_turn = queued["turnId"].as_str().unwrap().to_owned();
    // Fire messages from several sessions and kill the process while they are being admitted
    // and dispatched.
    let mut senders = Vec::new();
    let acks = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for sender in 0..clients {
        let session = sender % 7;
        let url = up_url.clone();
        let token = token.clone();
        let acks = std::sync::Arc::clone(&acks);
        senders.push(tokio::spawn(async move {
            let client = reqwest::Client::new();
            let mut acknowledged = Vec::new();
            for message in 0..200 {
                let text = format!("s{session} c{sender} m{message}");
                let sent = client
                    .post(format!("{url}/v1/sessions/s{session}/messages"))
                    .bearer_auth(&token)
                    .json(&serde_json::json!({"text": text}))
                    .timeout(Duration::from_secs(5))
                    .send()
                    .await;
                match sent {
                    Ok(response) if response.status().as_u16() == 202 => {
                        let body: serde_json::Value = response.json().await.unwrap();
                        acknowledged.push((text, body["turnId"].as_str().unwrap().to_owned()));
                        acks.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    _ => break,
                }
            }
            (session, acknowledged)
        }));
    }
    // Kill once admissions are flowing (several acknowledged, more in flight), however long a
    // loaded machine takes to get there.
    let deadline = Instant::now() + WAIT;
    while acks.load(std::sync::atomic::Ordering::Relaxed) < 16 {
        assert!(Instant::now() < deadline, "no message was acknowledged");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    up.process.kill();
    let mut acknowledged = Vec::new();
    for sender in senders {
        acknowledged.push(sender.await.unwrap());
    }
    assert!(
        acknowledged.iter().any(|(_, list)| !list.is_empty()),
        "nothing was acknowledged before the kill"
    );
    let up = start(data);
    up.wait_ready().await;
    // Ready means this process's own node serves: the link the killed process left in the
    // store (live until its lease lapses, on PostgreSQL) does not make it ready early.
    up.agents_document().await;
    for (session, list) in acknowledged {
        let transcript = up.transcript(&format!("s{session}")).await;
        let seqs: Vec<i64> = transcript
            .iter()
            .map(|message| message["seq"].as_i64().unwrap())
            .collect();
        let expected_seqs: Vec<i64> = (1..=seqs.len() as i64).collect();
        assert_eq!(seqs, expected_seqs, "the transcript has gaps or duplicates");
        let stored: Vec<&str> = transcript
            .iter()
            .map(|message| message["content"].as_str().unwrap())
            .collect();
        for (text, turn) in &list {
            assert_eq!(
                stored.iter().filter(|stored| *stored == text).count(),
                1,
                "{text} is not stored exactly once"
            );
            // Every turn ends: interrupted if it was running at the kill, never replayed, and the
            // queued ones proceed.
            let status = up.turn_status(turn, 20).await;
            assert!(
                matches!(
                    status["status"].as_str(),
                    Some("completed" | "failed" | "interrupted")
                ),
                "{status}"
            );
        }
    }
    // The running turn is interrupted (by the new process, once the killed one's lease
    // expired) and not replayed; the queued one proceeds.
    let interrupted = up.turn_status(&hanging_turn, 20).await;
    assert_eq!(interrupted["status"], "interrupted", "{interrupted}");
    let proceeded = up.turn_status(&queued_turn, 20).await;
    assert_eq!(
        (proceeded["status"].as_str(), proceeded["reply"].as_str()),
        (Some("completed"), Some("after the restart")),
        "{proceeded}"
    );
    let hang_transcript = up.transcript("hang").await;
    assert_eq!(
        hang_transcript
            .iter()
            .filter(|message| message["content"] == "/hang")
            .count(),
        1
    );
    let (_, sessions) = up.request(reqwest::Method::GET, "/v1/sessions", None).await;
    for session in sessions["sessions"].as_array().unwrap() {
        assert!(session.get("activeTurnId").is_none(), "{session}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_full_gateway_disk_gives_clear_errors_and_keeps_acknowledged_messages() {
    let (_temp, data) = data_dir();
    let gateway_state = data.join("gateway");
    std::fs::create_dir_all(&gateway_state).unwrap();
    // A private mount namespace with a 2 MiB tmpfs as the Gateway state; nothing leaks to the host.
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(r#"mount -t tmpfs -o size=2m,mode=0700 tmpfs "$1" && exec "$2" up --listen 127.0.0.1:0 --gateway-state "$1" --harness-root "$3""#)
        .arg("sh")
        .arg(&gateway_state)
        .arg(env!("CARGO_BIN_EXE_gatehouse"))
        .arg(data.join("harness"))
        // The state is only visible inside the namespace, so the token is passed in.
        .env("GATEHOUSE_TOKEN", "disk-full-test-token");
    // The disk that fills is the one under the state directory, so the store stays there.
    crate::suite::backend::keep_local(&mut command, &gateway_state);
    let mut up = Up::spawn(
        command,
        Some("disk-full-test-token"),
        &gateway_state,
        &data.join("logs"),
    );
    up.wait_ready().await;
    let text = "x".repeat(100 * 1024);
    let mut acknowledged = 0;
    let mut refusal = None;
    for index in 0..200 {
        let (status, body) = up
            .post(
                "fill",
                serde_json::json!({"text": format!("{index} {text}")}),
            )
            .await;
        match status {
            202 => acknowledged += 1,
            _ => {
                refusal = Some((status, body));
                break;
            }
        }
    }
    let (status, body) = refusal.expect("a 2 MiB disk never filled");
    if status != 507 {
        // The Gateway logs the engine's own error as `cause`; show it with the failure.
        for entry in std::fs::read_dir(data.join("logs")).unwrap() {
            let log = std::fs::read_to_string(entry.unwrap().path()).unwrap_or_default();
            eprintln!("gateway log:\n{log}");
        }
    }
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (507, Some("STORAGE_FULL")),
        "{body}"
    );
    assert!(acknowledged > 0);
    let stored = up.transcript("fill").await;
    let users = stored
        .iter()
        .filter(|message| message["role"] == "user")
        .count();
    assert_eq!(
        users, acknowledged,
        "an acknowledged message was lost, or a refused one stored"
    );
    let health = reqwest::get(format!("{}/healthz", up.url)).await.unwrap();
    assert_eq!(health.status(), 200);
    up.process.kill();
}

#[tokio::test(flavor = "multi_thread")]
async fn an_attachment_is_staged_on_the_harness_and_read_by_the_turn() {
    let (_temp, data) = data_dir();
    let up = Up::start(&data);
    up.wait_ready().await;
    let media_id = crate::suite::support::media_id_of(
        crate::suite::support::media_upload(&up.url, &up.token, "attached content 7e1")
            .header("x-filename", "../../notes from me.txt"),
    )
    .await;
    let (status, posted) = up
        .post("att", serde_json::json!({"text": "what did I attach?", "attachments": [{"mediaId": media_id}]}))
        .await;
    assert_eq!(status, 202, "{posted}");
    let done = up.turn_status(posted["turnId"].as_str().unwrap(), 20).await;
    assert_eq!(done["status"], "completed", "{done}");
    // The mock echoes the prompt, which names the staged file.
    let reply = done["reply"].as_str().unwrap();
    let staged = reply
        .split_whitespace()
        .find(|word| word.starts_with("media/inbound/gatehouse-staged-"))
        .unwrap_or_else(|| panic!("no staged path in {reply}"))
        .trim_end_matches(',')
        .to_owned();
    assert!(staged.ends_with("/input-notes_from_me.txt"), "{staged}");
    // The staged copy is in the Agent workspace with a .gitignore, and the turn could read it.
    let agent_copy = data.join("harness/workspace").join(&staged);
    assert_eq!(
        std::fs::read_to_string(&agent_copy).unwrap(),
        "attached content 7e1"
    );
    assert!(agent_copy.parent().unwrap().join(".gitignore").is_file());
    let (_, read) = up
        .post(
            "att",
            serde_json::json!({"text": format!(r#"/tool read {{"path":"{staged}"}}"#)}),
        )
        .await;
    let read = up.turn_status(read["turnId"].as_str().unwrap(), 20).await;
    assert!(
        read["reply"]
            .as_str()
            .unwrap()
            .contains("attached content 7e1"),
        "{read}"
    );
    // A missing required attachment fails the turn before dispatch.
    let (_, missing) = up
        .post(
            "att",
            serde_json::json!({"text": "x", "attachments": [{"mediaId": "0".repeat(64)}]}),
        )
        .await;
    let missing = up
        .turn_status(missing["turnId"].as_str().unwrap(), 20)
        .await;
    assert_eq!(
        missing["error"]["code"], "ATTACHMENT_NOT_FOUND",
        "{missing}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn up_runs_the_codex_runtime_with_the_mock_model() {
    let (_temp, data) = data_dir();
    let up = Up::start_codex(&data);
    up.wait_ready().await;
    let (status, body) = up
        .post(
            "codex",
            serde_json::json!({"text": "/say hello from codex"}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let turn = up.turn_status(body["turnId"].as_str().unwrap(), 30).await;
    assert_eq!(
        (turn["status"].as_str(), turn["reply"].as_str()),
        (Some("completed"), Some("hello from codex")),
        "{turn}"
    );
    // Codex's home lives in the Harness root, never in the Gateway state.
    assert!(data.join("harness/codex-home/config.toml").is_file());
    assert!(!data.join("gateway/codex-home").exists());
}
