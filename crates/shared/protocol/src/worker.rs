//! The native runtime's messages: the `agent.turn` node command, and the JSON lines a node host
//! and its `gatehouse worker` children exchange over pipes.
//!
//! Flow of one native turn:
//! 1. The Gateway invokes `agent.turn` ([`AgentTurnParams`]) on the node. The params carry the
//!    session's prior conversation, so a worker holds no state the Gateway cannot rebuild.
//! 2. The node host hands the turn to the session's worker as one [`WorkerRequest`] line.
//! 3. The worker answers with [`WorkerEvent`] lines: deltas, tool events and complete messages,
//!    then exactly one `done` or `failed`. Each model call goes to the node host's inference
//!    broker as a [`WorkerEvent::ModelCall`] and its events come back as
//!    [`WorkerRequest::ModelEvent`] lines; the broker reports each call's usage itself.
//! 4. The node streams each event line to the Gateway as `node.invoke.progress` chunks (a line
//!    may span chunks; lines end with `\n`) and ends the invoke with [`AgentTurnResult`].

use serde::Deserialize;
use serde::Serialize;

/// `agent.turn`: run one native turn on the node.
pub const AGENT_TURN: &str = "agent.turn";

/// `agent.session.stop`: stop a session's worker and free its slot.
pub const AGENT_SESSION_STOP: &str = "agent.session.stop";

/// Link method `node.gateway.tool` (node → Gateway): run a Gateway-provided tool for a running
/// turn. The Gateway re-checks its tool policy and that the turn is running, and executes it.
pub const NODE_GATEWAY_TOOL: &str = "node.gateway.tool";

/// A Gateway-provided tool offered to a native turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayToolSpec {
    /// The tool name, for example `session_status`.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// Its JSON Schema parameters.
    pub parameters: serde_json::Value,
}

/// Parameters of `node.gateway.tool`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayToolParams {
    /// The session of the turn.
    pub session_key: String,
    /// The turn that calls the tool; it must be running.
    pub turn_id: String,
    /// The tool.
    pub tool: String,
    /// Its arguments.
    pub arguments: serde_json::Value,
}

/// Result of `node.gateway.tool`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GatewayToolResult {
    /// Whether the tool succeeded.
    pub ok: bool,
    /// Its output, for the model.
    pub output: String,
}

/// `agent.session.restore`: rebuild a session's missing execution workspace from a checkpoint.
pub const AGENT_SESSION_RESTORE: &str = "agent.session.restore";

/// The largest checkpoint, in bytes of file content: a restore travels in one frame.
pub const MAX_CHECKPOINT_BYTES: u64 = 16 * 1024 * 1024;

/// The longest line a node host writes to its worker's stdin, and so the longest the worker
/// reads, newline excluded: 25 MiB and 64 KiB.
///
/// Every request line re-encodes what reached the node in one link frame (the `agent.turn`
/// params with the session's whole history, or a Gateway tool's answer), which
/// [`crate::frame::MAX_FRAME_BYTES`] bounds, so the history never has to be cut for the pipe;
/// the 64 KiB on top leave room for the request's tag and the `traceparent` the node host adds.
/// A longer request is never written: the turn fails with `WORKER_LINE_TOO_LONG`, and a worker
/// that reads one answers with a `failed` event of that code and skips the line.
pub const MAX_WORKER_REQUEST_LINE_BYTES: usize = crate::frame::MAX_FRAME_BYTES + 64 * 1024;

/// The longest line a worker may write to stdout, and so the longest its node host reads,
/// newline excluded: [`crate::invoke::MAX_PROGRESS_LINE_BYTES`] (24 MiB).
///
/// The node host forwards each event line to the Gateway as progress, where a longer line
/// fails the invoke anyway; the largest event is a checkpoint of [`MAX_CHECKPOINT_BYTES`] in
/// base64 with its manifest, which fits. A longer line fails the turn with
/// `WORKER_LINE_TOO_LONG` and the node host stops the worker, whose output is then out of step.
/// A worker checks its model calls ([`WorkerEvent::ModelCall`]) against this bound before it
/// writes them: a longer one is never written, and that call fails with `WORKER_LINE_TOO_LONG`.
pub const MAX_WORKER_EVENT_LINE_BYTES: usize = crate::invoke::MAX_PROGRESS_LINE_BYTES;

/// A prior message of the session, for context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HistoryMessage {
    /// `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

/// Parameters of `agent.turn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentTurnParams {
    /// The Gateway's session key.
    pub session_key: String,
    /// The turn id.
    pub turn_id: String,
    /// The session's earlier user and assistant messages, oldest first.
    #[serde(default)]
    pub history: Vec<HistoryMessage>,
    /// The user texts of this turn.
    pub user_texts: Vec<String>,
    /// Workspace-relative paths of staged attachments.
    #[serde(default)]
    pub attachments: Vec<String>,
    /// The id of the session's latest accepted checkpoint, if any. A node whose session
    /// workspace is missing refuses the turn with `WORKSPACE_MISSING`, and the Gateway restores
    /// it with `agent.session.restore` first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<String>,
    /// The session workspace must already exist (it came from a workspace source): a node whose
    /// session workspace is missing refuses the turn with `WORKSPACE_MISSING` even without a
    /// checkpoint, and the Gateway rebuilds it first.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub workspace_required: bool,
    /// The Gateway-provided tools this turn may call (after the Gateway's tool policy).
    #[serde(default)]
    pub gateway_tools: Vec<GatewayToolSpec>,
    /// Tools this turn may not run, on top of the node's own denials (deny wins): the
    /// `deny-tools` of the channel whose session this is. Entries are tool names or `group:`
    /// names, as in the tool policy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub denied_tools: Vec<String>,
    /// The `<available_skills>` block for the system prompt, if any skills are available.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills_prompt: Option<String>,
    /// Gateway-provided skills to copy into the session workspace for this turn.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skill_copies: Vec<SkillCopy>,
    /// The W3C `traceparent` of the node host's invoke span, which the node host sets when it
    /// hands the turn to its worker, so the worker's spans join the turn's trace. The Gateway
    /// carries its own in the invoke envelope ([`crate::invoke::InvokeRequest::traceparent`]) and
    /// leaves this one absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
    /// The most tokens (`totalTokens`, summed over the turn's model calls) this turn may use:
    /// the Gateway's `--turn-max-tokens`. The worker checks it after each model call and ends
    /// the turn with `TURN_BUDGET_EXCEEDED` once it is passed, and asks each call for at most
    /// the tokens left as its output limit. Absent: no ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turn_tokens: Option<u64>,
}

/// One entry of a tree (a checkpoint's, a worktree's, a fetched commit's): a regular file or a
/// link, kept as its target and never followed. `C` says where a file's content is: [`Inline`]
/// on the wire between the Gateway and a node, a media blob in the Gateway's store. Whatever
/// `C` is, the entry is judged by one rule set ([`crate::checkpoint::validate_manifest`]).
///
/// Its JSON is an object with camel-case keys in field order, the content's keys last; absent
/// optional fields are left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TreeEntry<C> {
    /// The path relative to the workspace.
    pub path: String,
    /// `file` or `symlink` (kept as text, so an unknown kind is refused by the rules rather
    /// than by the parser).
    pub kind: String,
    /// Whether the file is executable.
    #[serde(default)]
    pub executable: bool,
    /// Lowercase hex SHA-256 of the content (files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The size in bytes (files).
    #[serde(default)]
    pub size: u64,
    /// The link target (links), as stored; never followed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// Where a file's content is.
    #[serde(flatten)]
    pub content: C,
}

impl<C> TreeEntry<C> {
    /// A regular file at `path` whose content has the lowercase hex SHA-256 `sha256` and
    /// `size` bytes, kept as `content`.
    #[must_use]
    pub fn file(path: &str, sha256: &str, size: u64, executable: bool, content: C) -> Self {
        Self {
            path: path.to_owned(),
            kind: String::from("file"),
            executable,
            sha256: Some(sha256.to_owned()),
            size,
            target: None,
            content,
        }
    }

    /// A symbolic link at `path` to `target`, which is kept as text and never followed.
    #[must_use]
    pub fn symlink(path: &str, target: &str) -> Self
    where
        C: Default,
    {
        Self {
            path: path.to_owned(),
            kind: String::from("symlink"),
            executable: false,
            sha256: None,
            size: 0,
            target: Some(target.to_owned()),
            content: C::default(),
        }
    }

    /// Returns the entry with its content kept elsewhere (for example a reported file's content
    /// once the Gateway stored it as a media blob).
    #[must_use]
    pub fn with_content<D>(self, content: D) -> TreeEntry<D> {
        TreeEntry {
            path: self.path,
            kind: self.kind,
            executable: self.executable,
            sha256: self.sha256,
            size: self.size,
            target: self.target,
            content,
        }
    }
}

/// Where a [`TreeEntry`]'s content is, as the manifest rules need to know it.
pub trait EntryContent {
    /// The length of the content carried in the entry itself (standard base64), if any.
    fn inline_len(&self) -> Option<usize>;
}

/// A file's content carried in the entry, when the node sends or restores it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Inline {
    /// The content, standard base64; absent for an unchanged file.
    #[serde(
        rename = "contentBase64",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub base64: Option<String>,
}

impl EntryContent for Inline {
    fn inline_len(&self) -> Option<usize> {
        self.base64.as_ref().map(String::len)
    }
}

/// One entry of a checkpoint on the wire, each file with its content when it changed.
pub type CheckpointEntry = TreeEntry<Inline>;

/// The paths a checkpoint left out (a file past [`MAX_CHECKPOINT_BYTES`], or what came past
/// the entry bound); each covers everything below it. A rebuild of a `repository` session keeps
/// the pinned commit's version of these, instead of losing them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OmittedPaths {
    /// At most [`crate::checkpoint::MAX_CHECKPOINT_OMITTED`] paths and
    /// [`crate::checkpoint::MAX_CHECKPOINT_OMITTED_BYTES`] of them, each a canonical relative
    /// path as an entry's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
    /// More was left out than `paths` names (so nothing absent from the checkpoint is known to
    /// have been deleted).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
}

impl OmittedPaths {
    /// Returns true when nothing was left out.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && !self.truncated
    }
}

/// Parameters of `agent.session.restore`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSessionRestoreParams {
    /// The session.
    pub session_key: String,
    /// The checkpoint restored.
    pub checkpoint_id: String,
    /// Every entry, each file with its content.
    pub entries: Vec<CheckpointEntry>,
}

/// Result of `agent.session.restore`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSessionRestoreResult {
    /// How many entries were restored.
    #[serde(default)]
    pub restored: u64,
}

/// `agent.session.source`: fetch one commit of a repository into a session's missing execution
/// workspace (the `repository` and `worktree` workspace sources).
pub const AGENT_SESSION_SOURCE: &str = "agent.session.source";

/// Parameters of `agent.session.source`.
///
/// The node host fetches with its own `git` and its own credentials (the Gateway holds none for
/// repositories), into a cache of its own outside every session workspace, and writes the
/// commit's files into the session workspace through directory handles that never follow a
/// link. The workspace must not exist yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSessionSourceParams {
    /// The session whose workspace is created.
    pub session_key: String,
    /// The repository: a `file://`, `https://` or `ssh://` URL.
    pub url: String,
    /// The branch, tag or commit to resolve when `commit` is absent; absent means the
    /// repository's `HEAD`.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<String>,
    /// The pinned commit (40 lowercase hex digits) to fetch instead of resolving `ref`: sent for
    /// every fetch after the first, so a moved ref never changes the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// Also answer every written entry with its content (the `worktree` source, whose first
    /// tree the Gateway keeps); the answer is then bounded like a checkpoint manifest.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub report: bool,
    /// Rebuild from `commit` and this checkpoint: the workspace gets every checkpoint entry,
    /// plus the commit's entries that the checkpoint left out (all those it does not name when
    /// its omitted list is truncated); needs `commit`, and not `report`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overlay: Option<SourceOverlay>,
}

/// A checkpoint laid over a pinned commit by `agent.session.source`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceOverlay {
    /// The checkpoint.
    pub checkpoint_id: String,
    /// Every entry, each file with its content.
    pub entries: Vec<CheckpointEntry>,
    /// What the checkpoint left out.
    #[serde(default, skip_serializing_if = "OmittedPaths::is_empty")]
    pub omitted: OmittedPaths,
}

/// Result of `agent.session.source`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSessionSourceResult {
    /// The commit written, 40 lowercase hex digits.
    pub commit: String,
    /// How many entries were written.
    #[serde(default)]
    pub written: u64,
    /// With `report`: every written entry, each file with its content, in path order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub entries: Vec<CheckpointEntry>,
}

/// Result of `agent.turn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentTurnResult {
    /// The final reply.
    pub reply: String,
    /// The tokens the turn's model calls used, summed over the calls that reported them; absent
    /// when none did (or from a node host that does not report usage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TokenUsage>,
}

/// Token counts of a turn, summed over its model calls as the model (or, behind the broker, the
/// node host) reported them. It is also the `usage` of `GET /v1/turns/{id}`.
///
/// `input_tokens` counts uncached input (cache writes included), `cached_input_tokens` cache
/// reads, and `total_tokens` is input + cached input + output. Fields added after the first
/// version default to zero (or absent), so an older node host's answer still reads.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsage {
    /// Uncached input tokens (cache writes included).
    pub input_tokens: u64,
    /// Input tokens read from the provider's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Tokens written (the answer).
    pub output_tokens: u64,
    /// Input, cached input and output together.
    pub total_tokens: u64,
    /// Model calls that answered.
    #[serde(default)]
    pub model_calls: u64,
    /// Attempts that were retried (a 429, 5xx or overloaded answer, or a connect error).
    #[serde(default)]
    pub retries: u64,
    /// The model name as configured on the node host, when it said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

impl TokenUsage {
    /// Returns the sum of `self` and `other`, saturating; the model name is `self`'s, or
    /// `other`'s when `self` has none.
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            cached_input_tokens: self
                .cached_input_tokens
                .saturating_add(other.cached_input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
            model_calls: self.model_calls.saturating_add(other.model_calls),
            retries: self.retries.saturating_add(other.retries),
            model: self.model.or(other.model),
        }
    }
}

/// Parameters of `agent.session.stop`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSessionStopParams {
    /// The session whose worker stops.
    pub session_key: String,
    /// Also delete the session's directory on this node (its execution workspace): sent when
    /// the session moves to another node, so this node keeps no copy of a session it no longer
    /// owns and a later move back rebuilds it from the latest checkpoint.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub discard: bool,
}

/// Result of `agent.session.stop`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSessionStopResult {
    /// Whether a worker of the session was running and was stopped.
    #[serde(default)]
    pub stopped: bool,
    /// Whether the session's directory was deleted (asked with `discard`).
    #[serde(default)]
    pub discarded: bool,
}

/// The first line a worker reads on stdin: everything it needs to start. Secrets are not in it;
/// the model key arrives in the environment variable the model config names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerLaunch {
    /// The session this worker serves.
    pub session_key: String,
    /// The absolute path of the session's execution workspace.
    pub workspace: String,
    /// The absolute path of the Agent workspace, read only for the bootstrap documents
    /// (`AGENTS.md`, `SOUL.md`, `IDENTITY.md`, `USER.md`) of the system prompt.
    pub agent_workspace: String,
    /// The model spec of the node host: `mock`, `openai-responses:URL:MODEL`,
    /// `openai-chat:URL:MODEL` or `anthropic:URL:MODEL`. A worker with a [`WorkerLaunch::broker`]
    /// never builds a client from it; one without may only run `mock` in process.
    pub model: String,
    /// The node host's inference broker, which the worker asks for every model call over its
    /// own pipe ([`WorkerEvent::ModelCall`]). The node host always sets it; the worker then
    /// holds no model key. Absent only for a worker started by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<WorkerBroker>,
    /// Whether `exec` may run without bubblewrap when it is missing.
    pub allow_unsandboxed: bool,
    /// Directories `exec` must not see (covered by empty file systems in its sandbox): the
    /// Harness root (the node identity, other sessions) and, in embedded mode, the Gateway state.
    #[serde(default)]
    pub hidden_paths: Vec<String>,
    /// Native tools the operator denies (names or groups such as `group:runtime`); denied tools
    /// are not offered to the model and are refused if called.
    #[serde(default)]
    pub denied_tools: Vec<String>,
    /// The longest an `exec` may run, in seconds.
    #[serde(default = "default_exec_timeout_seconds")]
    pub exec_timeout_seconds: u64,
    /// An operator scratch directory bound read-write at `/sandbox/scratch` for `exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scratch: Option<String>,
    /// The sandbox the node host decided on at startup; the worker applies exactly this and
    /// never probes the kernel again.
    pub sandbox: SandboxSettings,
}

/// The inference broker a worker reaches over its pipe to the node host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerBroker {
    /// The name of the model the broker calls, for the worker's spans and logs.
    pub model: String,
}

/// The default uid and gid of a sandboxed command inside its user namespace.
pub const DEFAULT_SANDBOX_ID: u32 = 1000;

/// How every sandboxed command runs, decided once by the node host at startup and passed to its
/// workers in [`WorkerLaunch`], so that no worker decides differently.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxSettings {
    /// The uid of the command inside its user namespace; never 0.
    pub uid: u32,
    /// The gid of the command inside its user namespace; never 0.
    pub gid: u32,
    /// Extra host paths the operator mounts read-only (and, with Landlock, read and execute)
    /// besides the system directories.
    #[serde(default)]
    pub read_only_paths: Vec<String>,
    /// The resource limits of each command.
    pub limits: SandboxLimits,
    /// The Landlock ABI to enforce, or `None` when the operator accepted a kernel without
    /// Landlock (`--sandbox-allow-missing landlock`).
    pub landlock_abi: Option<u8>,
    /// Whether the seccomp filter is installed; `false` only when the operator accepted a
    /// kernel without seccomp filters (`--sandbox-allow-missing seccomp`).
    pub seccomp: bool,
}

impl Default for SandboxSettings {
    /// Every layer on: uid and gid [`DEFAULT_SANDBOX_ID`], no extra paths, the default limits,
    /// Landlock ABI 1 (the floor every Landlock kernel has) and seccomp.
    fn default() -> SandboxSettings {
        SandboxSettings {
            uid: DEFAULT_SANDBOX_ID,
            gid: DEFAULT_SANDBOX_ID,
            read_only_paths: Vec::new(),
            limits: SandboxLimits::default(),
            landlock_abi: Some(1),
            seccomp: true,
        }
    }
}

/// The resource limits of one sandboxed command (soft and hard limit alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SandboxLimits {
    /// `RLIMIT_AS`: the address space of each process, in bytes (default 8 GiB).
    pub address_space_bytes: u64,
    /// `RLIMIT_NPROC`: the processes (and threads) of the command's user (default 256). The
    /// kernel does not enforce it when the node host runs as root.
    pub processes: u64,
    /// `RLIMIT_NOFILE`: open files per process (default 1024).
    pub open_files: u64,
    /// `RLIMIT_FSIZE`: the largest file a process may write, in bytes (default 1 GiB).
    pub file_size_bytes: u64,
    /// `RLIMIT_CPU`: CPU seconds per process (default 1800).
    pub cpu_seconds: u64,
    /// The size of the private `/tmp` (a tmpfs), in bytes (default 512 MiB).
    pub tmp_size_bytes: u64,
}

impl Default for SandboxLimits {
    fn default() -> SandboxLimits {
        SandboxLimits {
            address_space_bytes: 8 << 30,
            processes: 256,
            open_files: 1024,
            file_size_bytes: 1 << 30,
            cpu_seconds: 1800,
            tmp_size_bytes: 512 << 20,
        }
    }
}

/// The default `exec` timeout: 1800 s.
pub const DEFAULT_EXEC_TIMEOUT_SECONDS: u64 = 1800;

fn default_exec_timeout_seconds() -> u64 {
    DEFAULT_EXEC_TIMEOUT_SECONDS
}

/// A line a worker reads after its launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum WorkerRequest {
    /// Run a turn.
    Turn(Box<AgentTurnParams>),
    /// The answer to a [`WorkerEvent::GatewayTool`].
    GatewayToolResult {
        /// The id of the call.
        id: String,
        /// The Gateway's answer.
        result: GatewayToolResult,
    },
    /// Kill every background process of the session (its `process` jobs, each with its whole
    /// process group or sandbox) and answer [`WorkerEvent::BackgroundStopped`] once they are
    /// reaped. The node host sends it between turns, before it prepares the next one, so no
    /// job of an earlier turn runs while the node host works in the session workspace.
    StopBackground,
    /// An event of the worker's open model call ([`WorkerEvent::ModelCall`]) from the node
    /// host's inference broker.
    ModelEvent {
        /// The id of the call.
        id: u64,
        /// The event: a `gatehouse_model::broker::BrokerEvent`, whose shape the model crate
        /// owns.
        event: serde_json::Value,
    },
}

/// A line a worker writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum WorkerEvent {
    /// A piece of assistant text, streamed; not stored.
    Delta {
        /// The text.
        text: String,
    },
    /// A tool started.
    ToolStarted {
        /// The tool.
        tool: String,
        /// Its arguments, as the model gave them.
        arguments: serde_json::Value,
    },
    /// A tool finished.
    ToolCompleted {
        /// The tool.
        tool: String,
        /// Whether it succeeded.
        ok: bool,
    },
    /// A complete message, to commit to the transcript.
    Message {
        /// `assistant` or `tool`.
        role: String,
        /// The complete content.
        content: String,
        /// The tool, for tool messages.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tool_name: Option<String>,
    },
    /// The session workspace after the turn: every eligible entry, with the content of the files
    /// that changed since the previous checkpoint. Sent before `done`.
    Checkpoint {
        /// Every entry; `contentBase64` only on files new or changed since the last checkpoint.
        entries: Vec<CheckpointEntry>,
        /// What the scan left out; absent when nothing was.
        #[serde(default, skip_serializing_if = "OmittedPaths::is_empty")]
        omitted: OmittedPaths,
    },
    /// A call of a Gateway-provided tool; the node relays it to the Gateway and answers with a
    /// [`WorkerRequest::GatewayToolResult`].
    GatewayTool {
        /// An id for the answer.
        id: String,
        /// The tool.
        tool: String,
        /// Its arguments.
        arguments: serde_json::Value,
    },
    /// One model call answered: its own token counts (`modelCalls` 1, `retries` the attempts
    /// retried before it answered, `model` the configured name). Sent after each call, before
    /// the tools it asked for run; the Gateway sums these into the turn's `usage`, also for a
    /// turn that then fails, and ends the turn once the sum passes its `maxTurnTokens`.
    ///
    /// The node host's inference broker writes these from its own count of the provider's
    /// answers; a `modelUsage` line a worker writes is dropped, never forwarded.
    ModelUsage {
        /// The call's counts.
        usage: TokenUsage,
    },
    /// A model call failed with something worth retrying and is tried again after `delayMs`;
    /// the Gateway appends it to the session's events as `model.retry`.
    ModelRetry {
        /// The attempt that failed, from 1.
        attempt: u32,
        /// The stable code of the failure, for example `MODEL_RATE_LIMITED`.
        code: String,
        /// What happened, without the credential.
        message: String,
        /// How long the worker waits before the next attempt, in milliseconds.
        delay_ms: u64,
    },
    /// The turn ended with a reply.
    Done {
        /// The reply.
        reply: String,
        /// The tokens the turn used, when the model reported them.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<TokenUsage>,
    },
    /// The turn failed.
    Failed {
        /// A stable code, for example `MODEL_UNAVAILABLE`.
        code: String,
        /// What happened.
        message: String,
    },
    /// The answer to [`WorkerRequest::StopBackground`]: every background process is gone.
    /// Only the node host reads it; it never reaches the Gateway.
    BackgroundStopped {
        /// How many were still running and were killed.
        stopped: u64,
    },
    /// A model call for the node host's inference broker, which answers with
    /// [`WorkerRequest::ModelEvent`] lines of the same `id`. At most one call is open at a time.
    /// Only the node host reads it; it never reaches the Gateway.
    ModelCall {
        /// The worker's id of the call, new for each call.
        id: u64,
        /// The request: a `gatehouse_model::ModelRequest`, whose shape the model crate owns.
        request: serde_json::Value,
    },
}

/// A Gateway-provided skill copied into the session workspace for one native turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillCopy {
    /// The skill's directory name under [`SKILL_COPIES_DIR`].
    pub name: String,
    /// Its files, paths relative to the skill directory (`SKILL.md` first). Empty for a skill
    /// of the Harness workspace, which the node copies from `source` itself.
    #[serde(default)]
    pub files: Vec<SkillCopyFile>,
    /// For a skill of the Harness workspace: the absolute path of its directory in the Agent
    /// workspace; the node copies its regular files (no links) without them crossing the link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

/// One file of a [`SkillCopy`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillCopyFile {
    /// The path relative to the skill directory, canonical.
    pub path: String,
    /// The content, standard base64.
    pub content_base64: String,
}

/// The most bytes copied from one skill directory, on either host.
pub const SKILL_COPY_MAX_BYTES: u64 = 1024 * 1024;

/// The most files copied from one skill directory, on either host.
pub const SKILL_COPY_MAX_FILES: usize = 64;

/// The directory of the session workspace that holds a turn's skill copies. It is private and
/// read-only, left out of checkpoints, and removed before the next turn is prepared.
pub const SKILL_COPIES_DIR: &str = ".gatehouse-skills";
