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
    // Never inherit an operator token or log settings from the developer's shell.
    command
        .env_remove("GATEHOUSE_TOKEN")
        .env("GATEHOUSE_LOG", "info");
    command
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

    pub(crate) fn start_with(state_dir: &Path, logs: &Path, extra: &[&str]) -> Gateway {
        let stderr_log = logs.join(format!("gateway-{}.log", unique()));
        let mut child = gatehouse()
            .args([
                "gateway",
                "--listen",
                "127.0.0.1:0",
                "--tick-interval-ms",
                "500",
                "--state",
            ])
            .arg(state_dir)
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_log).unwrap())
            .spawn()
            .unwrap();
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
        let response = self.get(path).await;
        assert!(
            response.status().is_success(),
            "{path}: {}",
            response.status()
        );
        response.json().await.unwrap()
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
    let stderr_log = logs.join(format!("node-{}.log", unique()));
    let mut command = gatehouse();
    command
        .args([
            "node",
            "--runtime",
            "native",
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
