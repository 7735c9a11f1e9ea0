//! The errors of a turn and of setting up a tool context, with their stable codes.

use gatehouse_fsops::FsError;
use gatehouse_model::ModelError;

/// The stable codes of the agent's own failures (model failures keep the model's code).
pub mod codes {
    /// The turn made the maximum number of model calls and the model still asked for tools.
    pub const AGENT_STEP_LIMIT: &str = "AGENT_STEP_LIMIT";
    /// The turn was cancelled by its caller.
    pub const AGENT_CANCELLED: &str = "AGENT_CANCELLED";
    /// No sandbox is available and the sandbox policy requires one.
    pub const SANDBOX_UNAVAILABLE: &str = "SANDBOX_UNAVAILABLE";
    /// The sandbox helper could not apply one of its layers (descriptors, resource limits,
    /// `no_new_privs`, Landlock or seccomp), so the command was not run; the message names it.
    pub const SANDBOX_LAYER_FAILED: &str = "SANDBOX_LAYER_FAILED";
    /// Startup: the kernel gives no Landlock and `--sandbox-allow-missing landlock` was not
    /// passed.
    pub const SANDBOX_LANDLOCK_UNAVAILABLE: &str = "SANDBOX_LANDLOCK_UNAVAILABLE";
    /// Startup: the kernel gives no seccomp filters and `--sandbox-allow-missing seccomp` was
    /// not passed.
    pub const SANDBOX_SECCOMP_UNAVAILABLE: &str = "SANDBOX_SECCOMP_UNAVAILABLE";
    /// A sandboxed command held more processes than the sandbox's process limit, so the
    /// supervisor inside the sandbox killed every process of the command (the command's output
    /// ends with a line naming the limit and this code).
    pub const SANDBOX_PROCESS_LIMIT: &str = "SANDBOX_PROCESS_LIMIT";
    /// Startup: bubblewrap is there but the hardened sandbox does not start (for example user
    /// namespaces are refused); the message carries bubblewrap's own.
    pub const SANDBOX_TRIAL_FAILED: &str = "SANDBOX_TRIAL_FAILED";
    /// The sandbox helper got a spec it cannot read (a node and helper of different builds).
    pub const SANDBOX_SPEC_INVALID: &str = "SANDBOX_SPEC_INVALID";
    /// A tool was called that is not offered in this session.
    pub const TOOL_NOT_ALLOWED: &str = "TOOL_NOT_ALLOWED";
    /// `edit` found no occurrence of `old_string`.
    pub const EDIT_NO_MATCH: &str = "EDIT_NO_MATCH";
    /// `edit` found several occurrences of `old_string` and `replace_all` was not set.
    pub const EDIT_AMBIGUOUS: &str = "EDIT_AMBIGUOUS";
    /// `apply_patch` got a patch it cannot parse.
    pub const PATCH_INVALID: &str = "PATCH_INVALID";
    /// `apply_patch` got a patch that does not fit the files in the workspace.
    pub const PATCH_CONFLICT: &str = "PATCH_CONFLICT";
    /// A command could not be started.
    pub const EXEC_FAILED: &str = "EXEC_FAILED";
    /// `process` was given an id it does not know.
    pub const PROCESS_NOT_FOUND: &str = "PROCESS_NOT_FOUND";
    /// `process start` was refused because too many background processes exist.
    pub const PROCESS_LIMIT: &str = "PROCESS_LIMIT";
    /// A file is not valid UTF-8 where text is required.
    pub const NOT_TEXT: &str = "NOT_TEXT";
    /// A tool failed in an unexpected way.
    pub const TOOL_INTERNAL: &str = "TOOL_INTERNAL";
}

/// Returns of this crate.
pub type Result<T> = std::result::Result<T, AgentError>;

/// Why a turn, or the set-up of a [`crate::ToolContext`], failed.
///
/// Tool failures are not errors of the turn: they become tool results the model reads. Every
/// variant has a stable [`AgentError::code`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The model call failed; the code is the model's (`MODEL_UNAVAILABLE`, ...). Returned by
    /// [`crate::run_turn`]; the model client has already retried as far as allowed.
    #[error("model call failed")]
    Model {
        /// The model's error.
        #[source]
        source: ModelError,
    },
    /// The model made [`crate::MAX_MODEL_CALLS_PER_TURN`] calls and still asked for tools.
    /// Returned by [`crate::run_turn`]; retrying the same turn will likely loop again.
    #[error("the turn made {limit} model calls without a final answer")]
    StepLimit {
        /// The limit that applied.
        limit: usize,
    },
    /// The caller cancelled the turn; running tools were killed. Not retried.
    #[error("the turn was cancelled")]
    Cancelled,
    /// The session workspace cannot be opened. Returned by [`crate::ToolContext::new`].
    #[error("cannot open the session workspace")]
    Workspace {
        /// The fsops error.
        #[source]
        source: FsError,
    },
}

impl AgentError {
    /// Returns the stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            AgentError::Model { source } => source.code(),
            AgentError::StepLimit { .. } => codes::AGENT_STEP_LIMIT,
            AgentError::Cancelled => codes::AGENT_CANCELLED,
            AgentError::Workspace { source } => source.code().as_str(),
        }
    }

    /// Returns true when the caller cancelled the turn.
    pub fn is_cancel(&self) -> bool {
        matches!(self, AgentError::Cancelled)
    }
}
