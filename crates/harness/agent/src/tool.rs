//! The [`Tool`] trait, tool outcomes, and the [`ToolSet`] offered to the model.

use gatehouse_fsops::FsError;
use gatehouse_model::ToolCall;
use gatehouse_model::ToolInput;
use gatehouse_model::ToolSpec;
use gatehouse_policy::tool::ToolDecision;
use gatehouse_policy::tool::ToolLayer;
use gatehouse_policy::tool::evaluate_tool;
use gatehouse_protocol::error::ErrorCode;
use serde::de::DeserializeOwned;

use crate::context::ToolContext;

/// The result of one tool call, as the model will read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    /// True when the tool did what was asked (for `exec`: the command exited with 0).
    pub ok: bool,
    /// The text the model gets back. A failure reads `CODE: message`.
    pub output: String,
}

impl ToolOutcome {
    /// Returns a successful outcome.
    pub fn success(output: String) -> ToolOutcome {
        ToolOutcome { ok: true, output }
    }

    /// Returns a failed outcome reading `CODE: message`.
    pub fn failure(code: ErrorCode, message: &str) -> ToolOutcome {
        ToolOutcome {
            ok: false,
            output: format!("{code}: {message}"),
        }
    }
}

/// A tool the model may call.
///
/// Implementors must never panic on any input, must touch files only through the context's
/// workspace [`gatehouse_fsops::Root`], and must report every failure as a failed
/// [`ToolOutcome`]. Dropping the future returned by [`Tool::call`] must stop whatever the call
/// started (the turn drops it on cancellation).
#[async_trait::async_trait]
pub trait Tool: Send + Sync + std::fmt::Debug {
    /// Returns the name the model calls the tool by.
    fn name(&self) -> &str;

    /// Returns the description and argument schema offered to the model.
    fn spec(&self) -> ToolSpec;

    /// Runs one call.
    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> ToolOutcome;
}

/// The tools offered to the model in one session.
#[derive(Debug)]
pub struct ToolSet {
    tools: Vec<Box<dyn Tool>>,
}

impl ToolSet {
    /// Returns a set of the given tools, in that order.
    pub fn new(tools: Vec<Box<dyn Tool>>) -> ToolSet {
        ToolSet { tools }
    }

    /// Returns the eight native tools: `read`, `write`, `edit`, `apply_patch`, `ls`, `grep`,
    /// `exec`, `process`.
    pub fn native() -> ToolSet {
        ToolSet::new(crate::tools::native_tools())
    }

    /// Returns this set without the tools the policy `layers` refuse (see
    /// [`gatehouse_policy::tool::evaluate_tool`]). No layers keep every tool.
    pub fn filtered(self, layers: &[ToolLayer]) -> ToolSet {
        let tools = self
            .tools
            .into_iter()
            .filter(|tool| evaluate_tool(layers, tool.name()) == ToolDecision::Allow)
            .collect();
        ToolSet { tools }
    }

    /// Returns the names of the tools on offer, in order.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|tool| tool.name()).collect()
    }

    /// Returns the specs offered to the model, in order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|tool| tool.spec()).collect()
    }

    /// Returns the tool named `name`, if it is on offer.
    pub fn get(&self, name: &str) -> Option<&dyn Tool> {
        self.tools
            .iter()
            .find(|tool| tool.name() == name)
            .map(|tool| &**tool)
    }

    /// Runs `call` with the tool it names. A tool that is not on offer is never run: the
    /// outcome is a `TOOL_NOT_ALLOWED` failure.
    pub async fn call(&self, ctx: &ToolContext, call: &ToolCall) -> ToolOutcome {
        match self.get(&call.name) {
            Some(tool) => tool.call(ctx, call.input.clone()).await,
            None => ToolOutcome::failure(
                ErrorCode::ToolNotAllowed,
                &format!("tool {:?} is not available in this session", call.name),
            ),
        }
    }
}

/// Why a native tool call failed; turned into a failed [`ToolOutcome`] at the end of the call.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ToolError {
    #[error("{0}")]
    InvalidArguments(String),
    #[error("{message}")]
    Coded { code: ErrorCode, message: String },
    #[error(transparent)]
    Fs(#[from] FsError),
}

impl ToolError {
    pub(crate) fn coded(code: ErrorCode, message: String) -> ToolError {
        ToolError::Coded { code, message }
    }

    pub(crate) fn code(&self) -> ErrorCode {
        match self {
            ToolError::InvalidArguments(_) => ErrorCode::InvalidParams,
            ToolError::Coded { code, .. } => *code,
            ToolError::Fs(source) => source.code(),
        }
    }

    pub(crate) fn into_outcome(self) -> ToolOutcome {
        let message = match &self {
            ToolError::Fs(source) => match std::error::Error::source(source) {
                Some(cause) => format!("{source}: {cause}"),
                None => source.to_string(),
            },
            ToolError::InvalidArguments(_) | ToolError::Coded { .. } => self.to_string(),
        };
        ToolOutcome::failure(self.code(), &message)
    }
}

/// Turns a tool's result into its outcome.
pub(crate) fn outcome(result: Result<String, ToolError>) -> ToolOutcome {
    match result {
        Ok(output) => ToolOutcome::success(output),
        Err(error) => error.into_outcome(),
    }
}

/// Parses the JSON arguments of a function tool. Freeform input is read as the JSON text.
pub(crate) fn parse_arguments<T: DeserializeOwned>(input: &ToolInput) -> Result<T, ToolError> {
    let text = match input {
        ToolInput::Function { arguments_json } => arguments_json.as_str(),
        ToolInput::Freeform { input } => input.as_str(),
    };
    let text = match text.trim().is_empty() {
        true => "{}",
        false => text,
    };
    serde_json::from_str(text)
        .map_err(|err| ToolError::InvalidArguments(format!("invalid arguments: {err}")))
}

/// Runs the blocking file operation `op` on the workspace off the async threads.
pub(crate) async fn run_blocking<T, F>(ctx: &ToolContext, op: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce(&gatehouse_fsops::Root) -> Result<T, ToolError> + Send + 'static,
{
    let workspace = ctx.shared_workspace();
    match tokio::task::spawn_blocking(move || op(&workspace)).await {
        Ok(result) => result,
        Err(err) => Err(ToolError::coded(
            ErrorCode::ToolInternal,
            format!("tool task failed: {err}"),
        )),
    }
}
