//! The errors of a turn and of setting up a tool context, with their stable codes.

use gatehouse_fsops::FsError;
use gatehouse_model::ModelError;
use gatehouse_protocol::error::ErrorCode;

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
    /// The turn's model calls used more tokens (`totalTokens`, summed) than its ceiling
    /// ([`crate::TurnRequest::max_turn_tokens`]), or a call stopped at the output limit the
    /// ceiling set. Returned by [`crate::run_turn`] after the call that passed it; the tool calls
    /// of that call did not run. Not retried: the same turn would pass the ceiling again.
    #[error("the turn passed its ceiling of {limit} tokens ({used} counted)")]
    TurnBudgetExceeded {
        /// The ceiling.
        limit: u64,
        /// The tokens of the calls that answered (a call stopped at its output limit reports
        /// none, so this may be below the ceiling).
        used: u64,
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
    pub fn code(&self) -> ErrorCode {
        match self {
            AgentError::Model { source } => source.code(),
            AgentError::StepLimit { .. } => ErrorCode::AgentStepLimit,
            AgentError::TurnBudgetExceeded { .. } => ErrorCode::TurnBudgetExceeded,
            AgentError::Cancelled => ErrorCode::AgentCancelled,
            AgentError::Workspace { source } => source.code(),
        }
    }

    /// Returns true when the caller cancelled the turn.
    pub fn is_cancel(&self) -> bool {
        matches!(self, AgentError::Cancelled)
    }
}
