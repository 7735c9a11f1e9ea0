//! `process`: background commands that outlive one tool call, and their registry.

use gatehouse_protocol::error::ErrorCode;
use std::collections::BTreeMap;
use std::sync::Arc;

use gatehouse_model::ToolInput;
use gatehouse_model::ToolKind;
use gatehouse_model::ToolSpec;
use parking_lot::Mutex;
use rustix::process::Pid;
use serde::Deserialize;
use serde_json::Value;
use serde_json::json;
use tokio::task::JoinHandle;

use crate::context::ToolContext;
use crate::output::HeadTail;
use crate::tool::Tool;
use crate::tool::ToolError;
use crate::tool::outcome;
use crate::tool::parse_arguments;
use crate::tools::exec::Launch;
use crate::tools::exec::describe_exit;
use crate::tools::exec::kill_group;
use crate::tools::exec::spawn_command;

/// The most background processes (running or not yet killed) one context holds.
pub const MAX_BACKGROUND_PROCESSES: usize = 16;

/// The background processes of one [`ToolContext`]. Dropping it kills all of them.
#[derive(Debug, Default)]
pub(crate) struct ProcessRegistry {
    inner: Mutex<Registry>,
}

#[derive(Debug, Default)]
struct Registry {
    n_started: u64,
    entries: BTreeMap<u64, Background>,
}

/// One background process.
#[derive(Debug)]
struct Background {
    command: String,
    pgid: Option<Pid>,
    launch: Launch,
    output: Arc<Mutex<HeadTail>>,
    /// How it ended, once it has.
    exit: Arc<Mutex<Option<String>>>,
    waiter: JoinHandle<()>,
    reader: JoinHandle<()>,
}

impl Background {
    fn status(&self) -> String {
        match self.exit.lock().as_ref() {
            Some(exit) => format!("exited ({exit})"),
            None => String::from("running"),
        }
    }

    fn is_running(&self) -> bool {
        self.exit.lock().is_none()
    }

    fn take_output(&self) -> String {
        self.output.lock().take()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        // Only a running group is killed: once the waiter has reaped the leader and killed the
        // group, the id may belong to someone else.
        if let Some(pgid) = self.pgid
            && self.is_running()
        {
            kill_group(pgid);
        }
        self.waiter.abort();
        self.reader.abort();
    }
}

impl ProcessRegistry {
    fn lock(&self) -> parking_lot::MutexGuard<'_, Registry> {
        self.inner.lock()
    }

    /// Kills every running background process with all its descendants and waits (at most
    /// [`STOP_WAIT`] each) until they are gone; returns how many were running.
    ///
    /// The descendants are found through `/proc` before anything is killed: a sandboxed
    /// command runs in a session and PID namespace of its own below bubblewrap, so killing
    /// bubblewrap's group alone would leave it dying asynchronously. Each descendant is killed
    /// directly, and the wait lasts until none of them runs any more (a process that is only
    /// a zombie runs nothing); a namespace's init ends only after every process in it.
    pub(crate) async fn stop_all(&self) -> u64 {
        let entries = std::mem::take(&mut self.lock().entries);
        let mut n_stopped = 0;
        for (number, mut entry) in entries {
            let Some(pgid) = entry.pgid.filter(|_| entry.is_running()) else {
                continue;
            };
            let tree = descendants(pgid.as_raw_nonzero().get());
            kill_group(pgid);
            for pid in &tree {
                if let Some(pid) = Pid::from_raw(*pid) {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
            n_stopped += 1;
            let gone = tokio::time::timeout(STOP_WAIT, async {
                let _ = (&mut entry.waiter).await;
                while tree.iter().any(|pid| is_running(*pid)) {
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            })
            .await;
            if gone.is_err() {
                tracing::warn!(
                    process = %process_id(number),
                    "a killed background process did not end in time"
                );
            }
        }
        n_stopped
    }
}

/// Returns the pids of every descendant of `root` (children, their children, ...), read from
/// `/proc`; empty where `/proc` cannot be read.
fn descendants(root: i32) -> Vec<i32> {
    let mut parents = Vec::new();
    if let Ok(listing) = std::fs::read_dir("/proc") {
        for entry in listing.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|name| name.parse::<i32>().ok())
            else {
                continue;
            };
            if let Some((_, ppid)) = proc_state(pid) {
                parents.push((pid, ppid));
            }
        }
    }
    let mut found = vec![root];
    let mut next_idx = 0;
    while let Some(&parent) = found.get(next_idx) {
        next_idx += 1;
        for (pid, ppid) in &parents {
            if *ppid == parent && !found.contains(pid) {
                found.push(*pid);
            }
        }
    }
    found.remove(0);
    found
}

/// Returns true while `pid` exists and is not a zombie.
fn is_running(pid: i32) -> bool {
    proc_state(pid).is_some_and(|(state, _)| !matches!(state, 'Z' | 'X'))
}

/// Returns the state letter and the parent pid of `pid` from `/proc/<pid>/stat`.
fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid ...`; the command may itself contain `)`.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// How long [`ProcessRegistry::stop_all`] waits for one killed process to be reaped.
const STOP_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn process_id(number: u64) -> String {
    format!("p{number}")
}

fn parse_process_id(id: Option<&Value>) -> Result<u64, ToolError> {
    let text = match id {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Number(number)) => number.to_string(),
        Some(_) | None => {
            return Err(ToolError::InvalidArguments(String::from(
                "this action needs the id of a process",
            )));
        }
    };
    text.trim_start_matches('p')
        .parse::<u64>()
        .map_err(|_| ToolError::coded(ErrorCode::ProcessNotFound, format!("no process {text:?}")))
}

/// `process {action: start|poll|kill|list, command?, id?}`: background commands.
///
/// `start` launches `command` like `exec` does (same sandbox, environment and policy) and returns
/// its id (`p1`, ...). `poll` reports whether it runs or how it ended, followed by the output
/// since the previous poll (capped, head and tail kept). `kill` kills its process group and
/// forgets it. `list` shows every process. There is no timeout: a background process runs until
/// it ends, is killed, the turn ends (the node host stops every background process before it
/// prepares the next turn: [`ToolContext::stop_background`]), or the [`ToolContext`] is
/// dropped, which kills every process group.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessTool;

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Action {
    Start,
    Poll,
    Kill,
    List,
}

#[derive(Debug, Deserialize)]
struct ProcessArgs {
    action: Action,
    command: Option<String>,
    id: Option<Value>,
}

#[async_trait::async_trait]
impl Tool for ProcessTool {
    fn name(&self) -> &str {
        "process"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: String::from("process"),
            description: String::from(
                "Manage background shell commands in the workspace. start {command} returns an \
                 id; poll {id} returns the status and the output since the last poll; kill {id} \
                 stops it; list shows all.",
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": ["start", "poll", "kill", "list"]},
                    "command": {"type": "string", "description": "for start"},
                    "id": {"type": "string", "description": "for poll and kill"}
                },
                "required": ["action"],
                "additionalProperties": false
            }),
            kind: ToolKind::Function,
        }
    }

    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> crate::tool::ToolOutcome {
        let result = parse_arguments::<ProcessArgs>(&input).and_then(|args| match args.action {
            Action::Start => start(ctx, args.command.as_deref()),
            Action::Poll => poll(ctx, parse_process_id(args.id.as_ref())?),
            Action::Kill => kill(ctx, parse_process_id(args.id.as_ref())?),
            Action::List => Ok(list(ctx)),
        });
        outcome(result)
    }
}

fn start(ctx: &ToolContext, command: Option<&str>) -> Result<String, ToolError> {
    let Some(command) = command.filter(|command| !command.trim().is_empty()) else {
        return Err(ToolError::InvalidArguments(String::from(
            "start needs a command",
        )));
    };
    let mut registry = ctx.processes().lock();
    if registry.entries.len() >= MAX_BACKGROUND_PROCESSES {
        return Err(ToolError::coded(
            ErrorCode::ProcessLimit,
            format!("{MAX_BACKGROUND_PROCESSES} background processes exist; kill one first"),
        ));
    }
    let mut spawned = spawn_command(ctx, command)?;
    let pgid = spawned.group.pgid();
    // From here the entry owns the group: its drop kills it while it runs.
    spawned.group.disarm();
    let exit = Arc::new(Mutex::new(None));
    let waiter = {
        let exit = Arc::clone(&exit);
        let mut child = spawned.child;
        let launch = spawned.launch.clone();
        tokio::spawn(async move {
            let status = child.wait().await;
            // Leftover children of an unsandboxed shell share its group; end them with it
            // (a sandboxed command's go with bubblewrap's PID namespace).
            if let (Some(pgid), Launch::Unsandboxed) = (pgid, &launch) {
                kill_group(pgid);
            }
            let description = match status {
                Ok(status) => describe_exit(status),
                Err(err) => format!("exit code: unknown (wait failed: {err})"),
            };
            *exit.lock() = Some(description);
        })
    };
    registry.n_started += 1;
    let number = registry.n_started;
    let note = spawned.launch.note();
    registry.entries.insert(
        number,
        Background {
            command: command.to_owned(),
            pgid,
            launch: spawned.launch,
            output: spawned.output,
            exit,
            waiter,
            reader: spawned.reader,
        },
    );
    let mut text = format!("started process {}", process_id(number));
    if let Some(note) = note {
        text.push('\n');
        text.push_str(note);
    }
    Ok(text)
}

fn poll(ctx: &ToolContext, number: u64) -> Result<String, ToolError> {
    let registry = ctx.processes().lock();
    let Some(entry) = registry.entries.get(&number) else {
        return Err(not_found(number));
    };
    // Read the status before the output, so an "exited" status comes with all its output
    // (modulo the reader still draining the pipe).
    let status = entry.status();
    let output = entry.take_output();
    let output = match output.is_empty() {
        true => String::from("(no new output)"),
        false => output,
    };
    Ok(format!(
        "process {}: {status}\n{output}",
        process_id(number)
    ))
}

fn kill(ctx: &ToolContext, number: u64) -> Result<String, ToolError> {
    let Some(entry) = ctx.processes().lock().entries.remove(&number) else {
        return Err(not_found(number));
    };
    let was_running = entry.is_running();
    let output = entry.take_output();
    // Dropping the entry kills the group if it still runs.
    drop(entry);
    let mut text = match was_running {
        true => format!("killed process {}", process_id(number)),
        false => format!("process {} had already exited; removed", process_id(number)),
    };
    if !output.is_empty() {
        text.push('\n');
        text.push_str(&output);
    }
    Ok(text)
}

fn list(ctx: &ToolContext) -> String {
    let registry = ctx.processes().lock();
    if registry.entries.is_empty() {
        return String::from("no background processes");
    }
    registry
        .entries
        .iter()
        .map(|(number, entry)| {
            let sandbox = match entry.launch {
                Launch::Sandboxed => "",
                Launch::Unsandboxed => " [unsandboxed]",
            };
            format!(
                "{} {}{sandbox}: {}",
                process_id(*number),
                entry.status(),
                entry.command
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn not_found(number: u64) -> ToolError {
    ToolError::coded(
        ErrorCode::ProcessNotFound,
        format!("no process {}", process_id(number)),
    )
}
