//! A session workspace with a sibling "outside" tree to escape into, and helpers to run turns
//! and tool calls.

use std::os::unix::fs::symlink;
use std::path::Path;
use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use gatehouse_agent::AgentError;
use gatehouse_agent::AgentEvent;
use gatehouse_agent::BwrapLocation;
use gatehouse_agent::SandboxPolicy;
use gatehouse_agent::ToolConfig;
use gatehouse_agent::ToolContext;
use gatehouse_agent::ToolOutcome;
use gatehouse_agent::ToolSet;
use gatehouse_agent::TurnOutput;
use gatehouse_agent::TurnRequest;
use gatehouse_model::Message;
use gatehouse_model::MockClient;
use gatehouse_model::ToolCall;
use gatehouse_model::ToolInput;
use tokio_util::sync::CancellationToken;

/// The content of the file outside the workspace; no tool may ever return it.
pub(crate) const OUTSIDE_MARKER: &str = "OUTSIDE-SECRET-MARKER-7f3a";

/// The longest any test waits for something to happen.
pub(crate) const WAIT_LIMIT: Duration = Duration::from_secs(10);

pub(crate) struct Session {
    _temp: tempfile::TempDir,
    /// The session workspace.
    pub(crate) workspace: PathBuf,
    /// A sibling directory holding `secret.txt`.
    pub(crate) outside: PathBuf,
}

impl Session {
    /// Returns a workspace with `link` (a symlink to the outside directory) and `secret-link` (a
    /// symlink to the outside secret file).
    pub(crate) fn new() -> Session {
        let temp = tempfile::tempdir().unwrap();
        let base = temp.path().canonicalize().unwrap();
        let workspace = base.join("workspace");
        let outside = base.join("outside");
        std::fs::create_dir_all(&workspace).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), OUTSIDE_MARKER).unwrap();
        symlink(&outside, workspace.join("link")).unwrap();
        symlink(outside.join("secret.txt"), workspace.join("secret-link")).unwrap();
        Session {
            _temp: temp,
            workspace,
            outside,
        }
    }

    pub(crate) fn context(&self, config: ToolConfig) -> ToolContext {
        ToolContext::new(&self.workspace, config).unwrap()
    }

    /// Returns a context for tests that run no command (bubblewrap is not checked).
    pub(crate) fn files_only(&self) -> ToolContext {
        self.context(ToolConfig::new(SandboxPolicy::Require))
    }

    /// Returns a context that runs commands under bubblewrap, failing when it is not installed.
    pub(crate) fn sandboxed(&self) -> ToolContext {
        require_bwrap();
        self.context(ToolConfig::new(SandboxPolicy::Require))
    }

    /// Returns a context whose bubblewrap does not exist, with the given policy.
    pub(crate) fn without_bwrap(&self, sandbox: SandboxPolicy) -> ToolContext {
        let config = ToolConfig {
            bwrap: BwrapLocation::At(PathBuf::from("/nonexistent/gatehouse/bwrap")),
            ..ToolConfig::new(sandbox)
        };
        self.context(config)
    }

    pub(crate) fn path(&self, rel: &str) -> PathBuf {
        self.workspace.join(rel)
    }

    pub(crate) fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.path(rel)).unwrap()
    }

    pub(crate) fn write(&self, rel: &str, content: &str) {
        let path = self.path(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// Asserts that the outside directory holds only the untouched secret.
    pub(crate) fn assert_outside_untouched(&self) {
        let mut names: Vec<String> = std::fs::read_dir(&self.outside)
            .unwrap()
            .map(|entry| entry.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        pretty_assertions::assert_eq!(names, vec![String::from("secret.txt")]);
        pretty_assertions::assert_eq!(
            std::fs::read_to_string(self.outside.join("secret.txt")).unwrap(),
            OUTSIDE_MARKER
        );
    }
}

/// Fails the test when bubblewrap is not on PATH.
pub(crate) fn require_bwrap() {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("bwrap").is_file()));
    assert!(
        found,
        "bubblewrap (bwrap) is not installed: install it (for example `apt-get install bubblewrap`) \
         to run the exec and process tests"
    );
}

/// The events and result of one turn.
pub(crate) struct Turn {
    pub(crate) events: Vec<AgentEvent>,
    pub(crate) result: Result<TurnOutput, AgentError>,
}

impl Turn {
    pub(crate) fn reply(&self) -> &str {
        &self.result.as_ref().unwrap().reply
    }
}

/// Runs one turn of the mock model with `user_text` after `history`.
pub(crate) async fn run(
    tools: &ToolSet,
    ctx: &ToolContext,
    history: Vec<Message>,
    user_text: &str,
) -> Turn {
    let request = TurnRequest {
        system: String::from("test"),
        history,
        user_texts: vec![user_text.to_owned()],
        max_turn_tokens: None,
    };
    let mut events = Vec::new();
    let result = tokio::time::timeout(
        WAIT_LIMIT * 3,
        gatehouse_agent::run_turn(
            &MockClient::default(),
            request,
            tools,
            ctx,
            &mut |event| events.push(event),
            &CancellationToken::new(),
        ),
    )
    .await
    .expect("the turn finishes in time");
    Turn { events, result }
}

/// Returns the mock line that calls `name` with `arguments`.
pub(crate) fn tool_line(name: &str, arguments: &serde_json::Value) -> String {
    format!("/tool {name} {arguments}")
}

/// Calls one tool directly (no model), with JSON arguments.
pub(crate) async fn call(
    ctx: &ToolContext,
    name: &str,
    arguments: &serde_json::Value,
) -> ToolOutcome {
    let input = ToolInput::Function {
        arguments_json: arguments.to_string(),
    };
    call_input(ctx, name, input).await
}

/// Calls one tool directly (no model) with the given input.
pub(crate) async fn call_input(ctx: &ToolContext, name: &str, input: ToolInput) -> ToolOutcome {
    let call = ToolCall {
        call_id: String::from("call_test"),
        name: name.to_owned(),
        input,
    };
    tokio::time::timeout(WAIT_LIMIT * 3, ToolSet::native().call(ctx, &call))
        .await
        .expect("the tool call finishes in time")
}

/// Calls `apply_patch` directly with a freeform patch.
pub(crate) async fn patch(ctx: &ToolContext, text: &str) -> ToolOutcome {
    call_input(
        ctx,
        "apply_patch",
        ToolInput::Freeform {
            input: text.to_owned(),
        },
    )
    .await
}

/// Returns the pids of live processes whose command line is exactly `argv`.
pub(crate) fn processes_with_argv(argv: &[&str]) -> Vec<u32> {
    let mut wanted = Vec::new();
    for arg in argv {
        wanted.extend_from_slice(arg.as_bytes());
        wanted.push(0);
    }
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read(entry.path().join("cmdline")).is_ok_and(|cmdline| cmdline == wanted) {
            pids.push(pid);
        }
    }
    pids
}

/// Waits until `condition` holds, failing the test after [`WAIT_LIMIT`].
pub(crate) async fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let start = Instant::now();
    while !condition() {
        assert!(
            start.elapsed() < WAIT_LIMIT,
            "timed out waiting until {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Returns true when `path` exists (without following a final link).
pub(crate) fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}
