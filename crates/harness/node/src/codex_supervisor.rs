//! The Codex runtime on the Harness: a supervised `codex app-server` and the `codex.appserver`
//! relay that carries its JSON-RPC lines to the Gateway over the existing link.
//!
//! - [`CodexSupervisor::run`] keeps one app-server running over stdio, with `CODEX_HOME` at
//!   `<root>/codex-home` (0700), `TMPDIR` at `<root>/tmp/codex` (never an ancestor of
//!   `CODEX_HOME`; Codex refuses to place its sandbox helpers under the temporary directory),
//!   and the Agent workspace as its working directory. It restarts the process
//!   [`RESTART_DELAY`] after an unexpected exit, kills its process group on shutdown, and
//!   forwards its stderr to the log.
//! - `config.toml` is rewritten at every start with the model provider: the base URL and the
//!   *name* of the key variable. The key itself reaches only the app-server's environment.
//! - The relay attaches to the idle process and owns its pipes until the Gateway ends the invoke;
//!   the process is then replaced, so every relay starts on a fresh app-server connection
//!   (`initialize` is once per connection). Threads persist in `CODEX_HOME`, so the Gateway
//!   resumes them on the new connection.

use std::path::Path;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use gatehouse_protocol::codex::CodexAttachParams;
use gatehouse_protocol::codex::CodexRelayEnd;
use gatehouse_protocol::command::CodexAppServer;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use parking_lot::Mutex;
use tokio::io::AsyncWriteExt;
use tokio::process::Child;
use tokio::process::ChildStdin;
use tokio::process::ChildStdout;
use tokio::sync::oneshot;
use tokio_util::codec::FramedRead;

use crate::bounded_lines::BoundedLine;
use crate::bounded_lines::BoundedLines;
use tokio_util::codec::LinesCodec;
use tokio_util::sync::CancellationToken;

use crate::invoke::InvokeContext;
use crate::model_spec::RemoteModel;

/// How long the supervisor waits before restarting an app-server that exited on its own.
pub const RESTART_DELAY: Duration = Duration::from_secs(1);

/// How long an app-server whose relay ended may take to exit by itself before it is killed.
const RECYCLE_GRACE: Duration = Duration::from_secs(2);

/// How long a relay waits for an idle app-server (one being started or replaced).
const ATTACH_WAIT: Duration = Duration::from_secs(20);

/// The longest JSON-RPC line accepted from the app-server: 64 MiB.
const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// The longest line of Codex's stderr forwarded to the log.
const MAX_STDERR_LINE_BYTES: usize = 64 * 1024;

/// The pinned Codex release this build is tested with.
pub const PINNED_CODEX_VERSION: &str = "0.171.0";

/// How to install Codex, for error messages.
pub const INSTALL_HINT: &str = "install it with `npm install -g @openai/codex@0.171.0` (or into any prefix) and put `codex` on PATH, or pass --codex-bin PATH";

/// The provider id written into `config.toml`.
const PROVIDER_ID: &str = "gatehouse";

/// How the node runs Codex.
#[derive(Debug, Clone)]
pub struct CodexSettings {
    /// The `codex` executable (the npm wrapper or the native binary).
    pub program: PathBuf,
    /// The model endpoint Codex calls with the Harness-held key.
    pub model: RemoteModel,
    /// Whether Codex sends the key (`env_key`); false only for the keyless loopback mock model
    /// of `gatehouse up`.
    pub send_key: bool,
}

/// Finds the `codex` executable: `configured` when given, else the first `codex` on `PATH`.
///
/// # Errors
/// A message that names what was looked for and says how to install Codex.
pub fn find_codex(configured: Option<&Path>) -> Result<PathBuf, String> {
    if let Some(path) = configured {
        return if is_executable(path) {
            Ok(path.to_path_buf())
        } else {
            Err(format!(
                "the Codex binary {} is missing or not executable; {INSTALL_HINT}",
                path.display()
            ))
        };
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("codex"))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| format!("`codex` was not found on PATH; {INSTALL_HINT}"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .is_ok_and(|metadata| metadata.is_file() && metadata.permissions().mode() & 0o111 != 0)
}

/// Returns why Codex cannot call `model`, or `Ok` when it can: Codex speaks only the OpenAI
/// Responses API, so a Chat Completions or Anthropic endpoint is refused.
///
/// # Errors
/// A message naming the API and the reason, for the operator.
pub fn check_model(model: &RemoteModel) -> Result<(), String> {
    match model.api() {
        crate::model_spec::ModelApi::Responses => Ok(()),
        crate::model_spec::ModelApi::Chat => Err(String::from(
            "the codex runtime cannot use an openai-chat model: Codex speaks only the OpenAI Responses API; use --model openai-responses:URL:MODEL",
        )),
        crate::model_spec::ModelApi::Anthropic => Err(String::from(
            "the codex runtime cannot use an anthropic model: Codex speaks only the OpenAI Responses API, not the Anthropic Messages API; use --model openai-responses:URL:MODEL, or the native runtime for anthropic",
        )),
    }
}

/// How many times the app-server retries a refused model request before the turn fails: as
/// many as the native runtime. A stream that drops after it started is not retried, as in the
/// native runtime (Codex's own defaults retry both, one inside the other, so a turn against an
/// unreachable model would try for minutes).
pub const CODEX_MODEL_RETRIES: u32 = 2;

/// Renders `config.toml` for `model`. Strings are written as TOML basic strings (JSON string
/// escaping is a subset of TOML's).
pub fn render_config(model: &RemoteModel, send_key: bool) -> String {
    let quote = |text: &str| serde_json::to_string(text).unwrap_or_else(|_| String::from("\"\""));
    format!(
        "# Written by the Gatehouse node host at every start; edits are replaced.\n\
         model = {model}\n\
         model_provider = \"{PROVIDER_ID}\"\n\
         sandbox_mode = \"workspace-write\"\n\
         cli_auth_credentials_store = \"file\"\n\
         web_search = \"disabled\"\n\
         \n\
         [model_providers.{PROVIDER_ID}]\n\
         name = \"Gatehouse Harness model\"\n\
         base_url = {base_url}\n\
         wire_api = \"responses\"\n\
         request_max_retries = {CODEX_MODEL_RETRIES}\n\
         stream_max_retries = 0\n\
         {key_line}\
         supports_websockets = false\n\
         \n\
         [features]\n\
         plugins = false\n\
         apps = false\n\
         remote_plugin = false\n\
         in_app_updates = false\n\
         goals = false\n\
         \n\
         [agents]\n\
         enabled = false\n\
         \n\
         [analytics]\n\
         enabled = false\n\
         \n\
         [feedback]\n\
         enabled = false\n",
        model = quote(model.model()),
        base_url = quote(model.base_url()),
        key_line = if send_key {
            format!("env_key = {}\n", quote(model.key_env()))
        } else {
            String::new()
        },
    )
}

/// The pipes of an idle app-server, handed to one relay. Dropping them asks the supervisor to
/// replace the process.
struct Pipes {
    stdin: ChildStdin,
    stdout: FramedRead<ChildStdout, LinesCodec>,
    _recycle: oneshot::Sender<()>,
}

/// Keeps one `codex app-server` running and hands it to relays.
pub(crate) struct CodexSupervisor {
    settings: CodexSettings,
    home: PathBuf,
    tmp: PathBuf,
    workspace: PathBuf,
    idle: Mutex<Option<Pipes>>,
    last_error: Mutex<Option<String>>,
    available: tokio::sync::Notify,
}

impl CodexSupervisor {
    /// Prepares `<root>/codex-home` (0700, with `config.toml` 0600) and `<root>/tmp/codex` (0700).
    pub(crate) fn prepare(
        settings: CodexSettings,
        root: &Path,
        workspace: &Path,
    ) -> crate::Result<CodexSupervisor> {
        check_model(&settings.model)
            .map_err(|reason| crate::NodeHostError::CodexModel { reason })?;
        let home = root.join("codex-home");
        crate::node_state::ensure_private_dir(&home)?;
        let tmp = root.join("tmp").join("codex");
        crate::node_state::ensure_private_dir(&tmp)?;
        let config = home.join("config.toml");
        write_private(
            &config,
            render_config(&settings.model, settings.send_key).as_bytes(),
        )
        .map_err(|source| crate::NodeHostError::StateIo {
            path: config.clone(),
            source,
        })?;
        Ok(CodexSupervisor {
            settings,
            home,
            tmp,
            workspace: workspace.to_path_buf(),
            idle: Mutex::new(None),
            last_error: Mutex::new(None),
            available: tokio::sync::Notify::new(),
        })
    }

    fn spawn(&self) -> std::io::Result<Child> {
        let mut command = tokio::process::Command::new(&self.settings.program);
        command
            .arg("app-server")
            .env_clear()
            .env(
                "PATH",
                std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into()),
            )
            .env("HOME", &self.home)
            .env("CODEX_HOME", &self.home)
            .env("TMPDIR", &self.tmp)
            .env("LANG", "C.UTF-8")
            .env("RUST_LOG", "warn")
            .current_dir(&self.workspace)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        let key_env = self.settings.model.key_env();
        if self.settings.send_key
            && let Some(key) = std::env::var_os(key_env)
        {
            command.env(key_env, key);
        }
        command.spawn()
    }

    /// Runs the app-server until `shutdown` fires, restarting it [`RESTART_DELAY`] after an
    /// unexpected exit and at once after a relay ends.
    pub(crate) async fn run(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let mut child = match self.spawn() {
                Ok(child) => child,
                Err(error) => {
                    let message = format!(
                        "cannot start {}: {error}; {INSTALL_HINT}",
                        self.settings.program.display()
                    );
                    tracing::error!("{message}");
                    *self.last_error.lock() = Some(message);
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(RESTART_DELAY) => continue,
                    }
                }
            };
            let pid = child.id();
            tracing::info!(pid, "started codex app-server");
            let (Some(stdin), Some(stdout), Some(stderr)) =
                (child.stdin.take(), child.stdout.take(), child.stderr.take())
            else {
                kill_group(&mut child).await;
                continue;
            };
            tokio::spawn(forward_stderr(stderr));
            let (recycle_tx, mut recycle_rx) = oneshot::channel::<()>();
            *self.idle.lock() = Some(Pipes {
                stdin,
                stdout: FramedRead::new(stdout, LinesCodec::new_with_max_length(MAX_LINE_BYTES)),
                _recycle: recycle_tx,
            });
            *self.last_error.lock() = None;
            self.available.notify_waiters();
            // A relay that ends drops the pipes: Codex sees its stdin close and exits 0 by
            // itself. Any other exit (a crash, a kill) is unexpected.
            let unexpected = tokio::select! {
                () = shutdown.cancelled() => {
                    self.idle.lock().take();
                    kill_group(&mut child).await;
                    tracing::info!("stopped codex app-server");
                    return;
                }
                status = child.wait() => match status {
                    Ok(status)
                        if status.success()
                            && matches!(
                                recycle_rx.try_recv(),
                                Err(oneshot::error::TryRecvError::Closed)
                            ) =>
                    {
                        None
                    }
                    other => Some(other),
                },
                _ = &mut recycle_rx => {
                    match tokio::time::timeout(RECYCLE_GRACE, child.wait()).await {
                        Ok(Ok(status)) if status.success() => None,
                        Ok(other) => Some(other),
                        Err(_) => None,
                    }
                }
            };
            self.idle.lock().take();
            match unexpected {
                Some(status) => {
                    let status = status.map_or_else(|error| error.to_string(), |s| s.to_string());
                    let message = format!("codex app-server exited unexpectedly ({status})");
                    tracing::warn!("{message}; restarting in {RESTART_DELAY:?}");
                    *self.last_error.lock() = Some(message);
                    kill_group(&mut child).await;
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = tokio::time::sleep(RESTART_DELAY) => {}
                    }
                }
                None => {
                    tracing::info!("the relay ended; replacing codex app-server");
                    kill_group(&mut child).await;
                }
            }
        }
    }

    /// Takes the idle app-server, waiting up to [`ATTACH_WAIT`] for one.
    async fn attach(&self) -> Result<Pipes, WireError> {
        let deadline = tokio::time::Instant::now() + ATTACH_WAIT;
        loop {
            let notified = self.available.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(pipes) = self.idle.lock().take() {
                return Ok(pipes);
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                let reason = self.last_error.lock().clone().unwrap_or_else(|| {
                    String::from("another relay holds it, or it is still starting")
                });
                return Err(WireError::new(
                    ErrorCode::Unavailable,
                    format!("codex app-server is not available: {reason}"),
                ));
            }
        }
    }
}

/// Writes `bytes` to `path` with mode 0600.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    use std::os::unix::fs::PermissionsExt;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    file.write_all(bytes)?;
    file.sync_all()
}

async fn kill_group(child: &mut Child) {
    if let Some(pid) = child
        .id()
        .and_then(|pid| rustix::process::Pid::from_raw(pid.cast_signed()))
    {
        let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
}

/// Forwards Codex's stderr to the log, line by line. A line longer than
/// [`MAX_STDERR_LINE_BYTES`] is skipped (with a warning), invalid UTF-8 is replaced, and
/// reading goes on to the end of the pipe, so Codex never blocks on a full one.
async fn forward_stderr(stderr: tokio::process::ChildStderr) {
    let mut lines = FramedRead::new(stderr, BoundedLines::lossy(MAX_STDERR_LINE_BYTES));
    while let Some(line) = lines.next().await {
        match line {
            Ok(BoundedLine::Line(line)) => tracing::info!(target: "codex", "{line}"),
            Ok(BoundedLine::TooLong) => {
                tracing::warn!(
                    limit = MAX_STDERR_LINE_BYTES,
                    "skipping an overlong line of codex stderr"
                );
            }
            Err(_) => return,
        }
    }
}

/// `codex.appserver`: relays JSON-RPC lines between the Gateway and the idle app-server.
pub(crate) struct CodexRelayHandler {
    pub(crate) supervisor: Arc<CodexSupervisor>,
}

impl Serve<CodexAppServer, InvokeContext> for CodexRelayHandler {
    fn serve(&self, _params: CodexAttachParams, context: InvokeContext) -> Served<CodexRelayEnd> {
        let supervisor = Arc::clone(&self.supervisor);
        Box::pin(async move {
            let mut pipes = supervisor.attach().await?;
            let InvokeContext {
                mut progress,
                mut input,
                ..
            } = context;
            let exited = || {
                WireError::new(
                    ErrorCode::Unavailable,
                    "codex app-server exited; the node restarts it",
                )
            };
            loop {
                tokio::select! {
                    line = pipes.stdout.next() => match line {
                        Some(Ok(mut line)) => {
                            line.push('\n');
                            if progress.send(&line).await.is_err() {
                                return Err(WireError::new(ErrorCode::Unavailable, "the link to the gateway closed"));
                            }
                        }
                        Some(Err(error)) => {
                            tracing::warn!(error = %error, "unreadable output from codex app-server");
                            return Err(exited());
                        }
                        None => return Err(exited()),
                    },
                    message = input.recv() => {
                        let Some(message) = message else {
                            return Ok(CodexRelayEnd {
                                reason: String::from("the gateway closed the relay input"),
                            });
                        };
                        let text = message.payload_json;
                        if text.contains('\n') {
                            tracing::warn!("dropping a relay input that spans several lines");
                            continue;
                        }
                        let written = async {
                            pipes.stdin.write_all(text.as_bytes()).await?;
                            pipes.stdin.write_all(b"\n").await?;
                            pipes.stdin.flush().await
                        };
                        if written.await.is_err() {
                            return Err(exited());
                        }
                    }
                }
            }
        })
    }
}

impl std::fmt::Debug for CodexSupervisor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CodexSupervisor")
            .field("program", &self.settings.program)
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_the_key_variable_and_quotes_values() {
        let model = match crate::model_spec::ModelSpec::parse(
            "openai-responses:http://127.0.0.1:9/v1:gpt-5.5",
            "HARNESS_KEY",
        ) {
            Ok(crate::model_spec::ModelSpec::Remote(model)) => model,
            other => panic!("unexpected {other:?}"),
        };
        let text = render_config(&model, true);
        assert!(!render_config(&model, false).contains("env_key"));
        let parsed: toml::Table = toml::from_str(&text).expect("valid TOML");
        assert_eq!(parsed["model"].as_str(), Some("gpt-5.5"));
        let provider = &parsed["model_providers"][PROVIDER_ID];
        assert_eq!(provider["base_url"].as_str(), Some("http://127.0.0.1:9/v1"));
        assert_eq!(
            provider["request_max_retries"].as_integer(),
            Some(i64::from(CODEX_MODEL_RETRIES))
        );
        assert_eq!(provider["stream_max_retries"].as_integer(), Some(0));
        assert_eq!(provider["env_key"].as_str(), Some("HARNESS_KEY"));
        assert_eq!(parsed["features"]["plugins"].as_bool(), Some(false));
        // Top-level keys must not end up inside a table.
        assert!(parsed.get("sandbox_mode").is_some());
    }

    #[test]
    fn only_a_responses_model_is_accepted() {
        let model = |spec: &str| match crate::model_spec::ModelSpec::parse(spec, "KEY") {
            Ok(crate::model_spec::ModelSpec::Remote(model)) => model,
            other => panic!("unexpected {other:?}"),
        };
        assert_eq!(
            check_model(&model("openai-responses:http://127.0.0.1:9/v1:gpt")),
            Ok(())
        );
        let refusal = check_model(&model("anthropic:https://api.anthropic.com/v1:claude"))
            .expect_err("anthropic is refused");
        assert!(refusal.contains("Anthropic Messages API"), "{refusal}");
        assert!(check_model(&model("openai-chat:http://127.0.0.1:9/v1:qwen")).is_err());
    }

    #[test]
    fn a_missing_binary_says_how_to_install() {
        let error = find_codex(Some(Path::new("/nonexistent/codex"))).unwrap_err();
        assert!(
            error.contains("npm install -g @openai/codex@0.171.0"),
            "{error}"
        );
    }
}
