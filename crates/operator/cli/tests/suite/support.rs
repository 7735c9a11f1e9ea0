//! Real `gatehouse` processes for end-to-end tests: a Gateway and Harness nodes on loopback, each
//! with its own root, killed when dropped.

use std::io::BufRead;
use std::io::BufReader;
use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::Duration;
use std::time::Instant;

use gatehouse_api::sessions::MessageAccepted;
use gatehouse_api::sessions::Turn;

/// How long any wait in these tests may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(30);

/// Sends SIGTERM to `child` and waits up to [`WAIT`] for its exit status.
pub(crate) fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "process {} did not exit after SIGTERM",
            child.id()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn gatehouse() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gatehouse"));
    // Never inherit an operator token, a store, S3 overrides or log settings from the developer's
    // shell.
    command
        .env_remove("GATEHOUSE_TOKEN")
        .env_remove("GATEHOUSE_STORE")
        .env_remove("GATEHOUSE_MEDIA")
        .env_remove("GATEHOUSE_S3_ENDPOINT")
        .env_remove("GATEHOUSE_S3_REGION")
        .env_remove("GATEHOUSE_S3_PATH_STYLE")
        .env_remove("GATEHOUSE_LOG_FORMAT")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env("GATEHOUSE_LOG", "info");
    command
}

/// Takes `child`'s piped stdout and returns its lines as they come, read on a thread of their own
/// until the stream ends or the receiver is dropped.
pub(crate) fn stdout_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let stdout = child.stdout.take().unwrap();
    let (sender, receiver) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    receiver
}

/// Returns a request that uploads `body` as `text/plain` media to the Gateway at `url` with
/// `token`.
pub(crate) fn media_upload(
    url: &str,
    token: &str,
    body: impl Into<reqwest::Body>,
) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .post(format!("{url}/v1/media"))
        .bearer_auth(token)
        .header("content-type", "text/plain")
        .body(body)
}

/// Sends `request` and returns the answer's status and JSON body.
pub(crate) async fn status_and_json(request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Sends `request` and returns the answer's status and JSON body, or its text as a JSON string
/// when it is not JSON.
pub(crate) async fn status_and_body(request: reqwest::RequestBuilder) -> (u16, serde_json::Value) {
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// Sends the upload `request` and returns the `mediaId` of its answer.
pub(crate) async fn media_id_of(request: reqwest::RequestBuilder) -> String {
    let uploaded: serde_json::Value = request.send().await.unwrap().json().await.unwrap();
    uploaded["mediaId"].as_str().unwrap().to_owned()
}

/// A child process that is killed (SIGKILL) and reaped when dropped.
pub(crate) struct Process {
    child: Child,
    pub(crate) stderr_log: PathBuf,
}

impl Process {
    /// Returns the process id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Wraps a spawned child whose stderr goes to `stderr_log`.
    pub(crate) fn from_child(child: Child, stderr_log: PathBuf) -> Process {
        Process { child, stderr_log }
    }

    /// Sends SIGKILL and waits.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Sends SIGTERM and waits for the exit status.
    pub(crate) fn terminate(&mut self) -> std::process::ExitStatus {
        terminate(&mut self.child)
    }

    pub(crate) fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_log).unwrap_or_default()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A running `gatehouse gateway`.
pub(crate) struct Gateway {
    pub(crate) process: Process,
    pub(crate) url: String,
    pub(crate) state_dir: PathBuf,
    pub(crate) token: String,
}

impl Gateway {
    pub(crate) fn start(state_dir: &Path, logs: &Path) -> Gateway {
        Self::start_with(state_dir, logs, &[])
    }

    /// Starts a Gateway on its local SQLite file and media directory whatever
    /// `GATEHOUSE_TEST_BACKEND` says, for a test of those files.
    pub(crate) fn start_local(state_dir: &Path, logs: &Path) -> Gateway {
        let store = crate::suite::backend::local_store_args(state_dir);
        let args: Vec<&str> = store.iter().map(String::as_str).collect();
        Self::start_with(state_dir, logs, &args)
    }

    pub(crate) fn start_with(state_dir: &Path, logs: &Path, extra: &[&str]) -> Gateway {
        Self::start_on("127.0.0.1:0", state_dir, logs, extra)
    }

    /// Starts a Gateway like [`Gateway::start_with`], with extra environment variables.
    pub(crate) fn start_with_env(
        state_dir: &Path,
        logs: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Gateway {
        Self::start_on_with_env("127.0.0.1:0", state_dir, logs, extra, envs)
    }

    /// Starts a Gateway listening on `listen` (for a restart on the same port).
    pub(crate) fn start_on(listen: &str, state_dir: &Path, logs: &Path, extra: &[&str]) -> Gateway {
        Self::start_on_with_env(listen, state_dir, logs, extra, &[])
    }

    /// Starts a Gateway listening on `listen`, with extra environment variables.
    pub(crate) fn start_on_with_env(
        listen: &str,
        state_dir: &Path,
        logs: &Path,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Gateway {
        let mut command = gatehouse();
        command
            .args(gateway_args(listen, state_dir, extra))
            .envs(envs.iter().copied());
        Self::launch(command, state_dir, logs)
    }

    /// Starts a Gateway in its own mount namespace where `hidden` is covered by an empty
    /// file system: the Gateway process cannot see that directory at all.
    pub(crate) fn start_hiding(
        hidden: &Path,
        state_dir: &Path,
        logs: &Path,
        extra: &[&str],
    ) -> Gateway {
        let mut command = Command::new("unshare");
        command
            .args(["--mount", "--", "sh", "-c"])
            .arg(r#"mount -t tmpfs -o size=1m,mode=0700 tmpfs "$0" && exec "$@""#)
            .arg(hidden)
            .arg(env!("CARGO_BIN_EXE_gatehouse"))
            .args(gateway_args("127.0.0.1:0", state_dir, extra))
            .env_remove("GATEHOUSE_TOKEN")
            .env("GATEHOUSE_LOG", "info");
        Self::launch(command, state_dir, logs)
    }

    fn launch(mut command: Command, state_dir: &Path, logs: &Path) -> Gateway {
        crate::suite::backend::apply(&mut command, state_dir);
        let stderr_log = logs.join(format!("gateway-{}.log", unique()));
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_log).unwrap())
            .spawn()
            .unwrap();
        let receiver = stdout_lines(&mut child);
        let process = Process { child, stderr_log };
        let first = receiver
            .recv_timeout(WAIT)
            .unwrap_or_else(|_| panic!("gateway printed nothing: {}", process.stderr()));
        let url = first
            .strip_prefix("gatehouse gateway listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        let token = std::fs::read_to_string(state_dir.join("operator-token"))
            .unwrap()
            .trim()
            .to_owned();
        Gateway {
            process,
            url,
            state_dir: state_dir.to_path_buf(),
            token,
        }
    }

    /// Runs `gatehouse ARGS --url <this gateway> --token-file <its token file>`, as an operator.
    pub(crate) fn operator_cli(&self, args: &[&str]) -> std::process::Output {
        gatehouse()
            .args(args)
            .args(["--url", &self.url, "--token-file"])
            .arg(self.state_dir.join("operator-token"))
            .output()
            .unwrap()
    }

    pub(crate) fn ws_url(&self) -> String {
        format!("{}/node", self.url.replacen("http://", "ws://", 1))
    }

    /// Issues a setup code through the CLI, as an operator would.
    pub(crate) fn setup_code(&self, ttl_seconds: u64) -> String {
        let output = gatehouse()
            .args([
                "setup-code",
                "--url",
                &self.url,
                "--ttl-seconds",
                &ttl_seconds.to_string(),
                "--token-file",
            ])
            .arg(self.state_dir.join("operator-token"))
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "setup-code failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8(output.stdout).unwrap().trim().to_owned()
    }

    pub(crate) async fn get(&self, path: &str) -> reqwest::Response {
        reqwest::Client::new()
            .get(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .timeout(WAIT)
            .send()
            .await
            .unwrap()
    }

    pub(crate) async fn get_json(&self, path: &str) -> serde_json::Value {
        self.get_typed(path).await
    }

    /// Returns the successful answer of `GET path`, decoded as the route's API type `T` (or as
    /// JSON); the test fails when the answer is an error or another shape.
    pub(crate) async fn get_typed<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let response = self.get(path).await;
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        let bytes = response.bytes().await.unwrap();
        match serde_json::from_slice(&bytes) {
            Ok(answer) => answer,
            Err(error) => panic!(
                "{path}: the answer is not a {}: {error}: {}",
                std::any::type_name::<T>(),
                String::from_utf8_lossy(&bytes)
            ),
        }
    }

    /// Waits until `/readyz` answers 200.
    pub(crate) async fn wait_ready(&self) {
        let deadline = Instant::now() + WAIT;
        loop {
            let response = reqwest::get(format!("{}/readyz", self.url)).await.unwrap();
            if response.status().is_success() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "gateway never became ready: {}",
                self.process.stderr()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `/readyz` answers 503.
    pub(crate) async fn wait_not_ready(&self) {
        let deadline = Instant::now() + WAIT;
        loop {
            let response = reqwest::get(format!("{}/readyz", self.url)).await.unwrap();
            if response.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE {
                return;
            }
            assert!(Instant::now() < deadline, "gateway stayed ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Starts `gatehouse node` with `root`, optionally with a setup code written to a file.
pub(crate) fn start_node(
    gateway: &Gateway,
    root: &Path,
    setup_code: Option<&str>,
    logs: &Path,
) -> Process {
    start_node_with(gateway, root, setup_code, logs, &[], &[])
}

/// Starts `gatehouse node` like [`start_node`], with extra arguments and environment variables.
pub(crate) fn start_node_with(
    gateway: &Gateway,
    root: &Path,
    setup_code: Option<&str>,
    logs: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Process {
    start_node_runtime(gateway, root, setup_code, logs, "native", args, envs)
}

/// Starts a native node whose model is the mock at `mock_url`, with its key in a variable of
/// the node's environment (never argv).
pub(crate) fn start_mock_model_node(
    gateway: &Gateway,
    root: &Path,
    setup_code: Option<&str>,
    logs: &Path,
    mock_url: &str,
) -> Process {
    start_mock_model_node_with(gateway, root, setup_code, logs, mock_url, &[], &[])
}

/// Starts `gatehouse node` like [`start_mock_model_node`], with extra arguments and environment
/// variables.
pub(crate) fn start_mock_model_node_with(
    gateway: &Gateway,
    root: &Path,
    setup_code: Option<&str>,
    logs: &Path,
    mock_url: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Process {
    let model = format!("openai-chat:{mock_url}/v1:mock-model");
    start_node_with(
        gateway,
        root,
        setup_code,
        logs,
        &[
            &["--model", &model, "--model-key-env", "MOCK_MODEL_KEY"],
            args,
        ]
        .concat(),
        &[&[("MOCK_MODEL_KEY", "mock-model-test-key")], envs].concat(),
    )
}

/// Starts `gatehouse node --runtime RUNTIME` like [`start_node_with`].
pub(crate) fn start_node_runtime(
    gateway: &Gateway,
    root: &Path,
    setup_code: Option<&str>,
    logs: &Path,
    runtime: &str,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Process {
    let stderr_log = logs.join(format!("node-{}.log", unique()));
    let mut command = gatehouse();
    command
        .args([
            "node",
            "--runtime",
            runtime,
            "--gateway",
            &gateway.url,
            "--root",
        ])
        .arg(root)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr_log).unwrap());
    command.args(args);
    for (name, value) in envs {
        command.env(name, value);
    }
    if let Some(code) = setup_code {
        let file = logs.join(format!("setup-code-{}", unique()));
        std::fs::write(&file, code).unwrap();
        command.arg("--setup-code-file").arg(file);
    }
    Process {
        child: command.spawn().unwrap(),
        stderr_log,
    }
}

/// The arguments of a test Gateway: fast 500 ms link ticks unless `extra` sets its own.
fn gateway_args(listen: &str, state_dir: &Path, extra: &[&str]) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = ["gateway", "--listen", listen]
        .iter()
        .map(Into::into)
        .collect();
    if !extra.contains(&"--tick-interval-ms") {
        args.extend(["--tick-interval-ms", "500"].iter().map(Into::into));
    }
    args.push("--state".into());
    args.push(state_dir.into());
    args.extend(extra.iter().map(Into::into));
    args
}

fn unique() -> u64 {
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Every regular file under `dir`, recursively, with its path.
pub(crate) fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(current) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&current) else {
            continue;
        };
        for entry in entries {
            let entry = entry.unwrap();
            let file_type = entry.file_type().unwrap();
            if file_type.is_dir() {
                pending.push(entry.path());
            } else {
                files.push(entry.path());
            }
        }
    }
    files
}

pub(crate) fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

/// A private temporary base directory with a `logs/` directory in it.
pub(crate) struct Dirs {
    _temp: tempfile::TempDir,
    pub(crate) base: std::path::PathBuf,
}

/// Returns a fresh [`Dirs`].
pub(crate) fn dirs() -> Dirs {
    let temp = tempfile::tempdir().unwrap();
    let base = temp.path().canonicalize().unwrap();
    std::fs::create_dir_all(base.join("logs")).unwrap();
    Dirs { _temp: temp, base }
}

/// A Gateway and one native node whose workers ask the mock model, each with its own root under
/// `dirs.base` (`gateway/`, `harness/`); all of it killed and removed when dropped.
pub(crate) struct MockModelSetup {
    pub(crate) dirs: Dirs,
    pub(crate) gateway: Gateway,
    pub(crate) node: Process,
    /// The mock model, kept to live as long as the setup.
    _mock: Process,
    pub(crate) mock_url: String,
}

impl MockModelSetup {
    /// Starts the mock model, a Gateway with `gateway_args`, and a node enrolled with a setup
    /// code, and returns once the Gateway is ready.
    pub(crate) async fn start(dirs: Dirs, gateway_args: &[&str]) -> MockModelSetup {
        Self::start_on(dirs, "127.0.0.1:0", gateway_args).await
    }

    /// [`MockModelSetup::start`] with the Gateway listening on `listen`.
    pub(crate) async fn start_on(
        dirs: Dirs,
        listen: &str,
        gateway_args: &[&str],
    ) -> MockModelSetup {
        Self::start_with_node(dirs, listen, gateway_args, start_mock_model_node).await
    }

    /// [`MockModelSetup::start_on`] with the node started by `start_node` (given the Gateway,
    /// the node's root, its setup code, the log directory and the mock's URL).
    pub(crate) async fn start_with_node(
        dirs: Dirs,
        listen: &str,
        gateway_args: &[&str],
        start_node: impl FnOnce(&Gateway, &Path, Option<&str>, &Path, &str) -> Process,
    ) -> MockModelSetup {
        let logs = dirs.base.join("logs");
        let (mock, mock_url) = mock_model(&logs);
        let gateway = Gateway::start_on(listen, &dirs.base.join("gateway"), &logs, gateway_args);
        let code = gateway.setup_code(600);
        let node = start_node(
            &gateway,
            &dirs.base.join("harness"),
            Some(&code),
            &logs,
            &mock_url,
        );
        gateway.wait_ready().await;
        MockModelSetup {
            dirs,
            gateway,
            node,
            _mock: mock,
            mock_url,
        }
    }

    /// Returns the path of `name` under the base directory.
    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dirs.base.join(name)
    }
}

/// Starts `gatehouse mock-model` on a free port and returns it with its base URL.
pub(crate) fn mock_model(logs: &Path) -> (Process, String) {
    let stderr_log = logs.join("mock-model.log");
    let mut child = gatehouse()
        .args(["mock-model", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&stderr_log).unwrap())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("mock model listening on ")
        .unwrap()
        .to_owned();
    (Process::from_child(child, stderr_log), url)
}

/// Posts `text` to `session`, checks the 202 and returns the turn id.
pub(crate) async fn post_message(gateway: &Gateway, session: &str, text: &str) -> String {
    let response = reqwest::Client::new()
        .post(format!("{}/v1/sessions/{session}/messages", gateway.url))
        .bearer_auth(&gateway.token)
        .json(&serde_json::json!({"text": text}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let accepted: MessageAccepted = response.json().await.unwrap();
    accepted.turn_id
}

/// Posts `text` to `session` and waits for the turn to end.
pub(crate) async fn turn(gateway: &Gateway, session: &str, text: &str) -> serde_json::Value {
    let turn_id = post_message(gateway, session, text).await;
    wait_turn(gateway, &turn_id).await
}

/// Waits until the turn `turn_id` has ended and returns its answer as JSON, after checking
/// that every answer on the way decodes as the API's [`Turn`].
pub(crate) async fn wait_turn(gateway: &Gateway, turn_id: &str) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let body = gateway
            .get_json(&format!("/v1/turns/{turn_id}?wait=20"))
            .await;
        let turn: Turn = serde_json::from_value(body.clone()).unwrap();
        if turn.status.is_terminal() {
            return body;
        }
        if Instant::now() >= deadline {
            let log = gateway.process.stderr();
            let start = (log.len().saturating_sub(8_000)..log.len())
                .find(|index| log.is_char_boundary(*index))
                .unwrap_or(log.len());
            let tail = &log[start..];
            panic!("turn {turn_id} did not end: {body}; the gateway's log ends with:\n{tail}");
        }
    }
}

/// A process: its pid, argv and environment.
pub(crate) type ProcessInfo = (u32, Vec<String>, Vec<(String, String)>);

/// Every process this user can inspect.
pub(crate) fn processes() -> Vec<ProcessInfo> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<String> = cmdline
            .split(|byte| *byte == 0)
            .filter(|part| !part.is_empty())
            .map(|part| String::from_utf8_lossy(part).into_owned())
            .collect();
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let env = environ
            .split(|byte| *byte == 0)
            .filter_map(|pair| {
                String::from_utf8_lossy(pair)
                    .split_once('=')
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
            })
            .collect();
        found.push((pid, argv, env));
    }
    found
}

/// Returns the path in the variable `name`, which `scripts/test` sets after installing `what`.
/// A missing variable or path fails the test: CI installs everything, nothing is skipped.
pub(crate) fn installed(name: &str, what: &str) -> String {
    let path = std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run scripts/test, which installs {what} and sets it")
    });
    assert!(Path::new(&path).exists(), "{name}={path} does not exist");
    path
}

/// The Codex binary the test script installed.
pub(crate) fn codex_bin() -> String {
    installed("GATEHOUSE_CODEX_BIN", "@openai/codex@0.171.0")
}

/// Every request the mock model at `url` received, oldest first.
pub(crate) async fn mock_requests(url: &str) -> Vec<serde_json::Value> {
    reqwest::get(format!("{url}/_mock/requests"))
        .await
        .unwrap()
        .json::<Vec<serde_json::Value>>()
        .await
        .unwrap()
}

/// Asserts that a file called `name` was staged for a turn under the Harness root
/// (`gatehouse-staged-…`), each copy holding `bytes`.
pub(crate) fn assert_staged(setup: &MockModelSetup, name: &str, bytes: &[u8]) {
    let staged: Vec<PathBuf> = files_under(&setup.dirs.base.join("harness"))
        .into_iter()
        .filter(|path| {
            let path = path.to_string_lossy();
            path.contains("gatehouse-staged-") && path.ends_with(name)
        })
        .collect();
    assert!(!staged.is_empty(), "{name} was not staged");
    for path in staged {
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "{}", path.display());
    }
}
