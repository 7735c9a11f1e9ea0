//! [`run_turn`]: one turn of the agent loop.

use futures_util::StreamExt;
use gatehouse_model::Message;
use gatehouse_model::ModelClient;
use gatehouse_model::ModelError;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelRequest;
use gatehouse_model::ToolCall;
use gatehouse_model::ToolInput;
use gatehouse_model::ToolSpec;
use gatehouse_model::Usage;
use gatehouse_protocol::worker::TokenUsage;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::context::ToolContext;
use crate::error::AgentError;
use crate::error::Result;
use crate::tool::ToolSet;

/// The most model calls one turn makes; a model that still asks for tools after that many calls
/// fails the turn with `AGENT_STEP_LIMIT`.
pub const MAX_MODEL_CALLS_PER_TURN: usize = 24;

/// What one turn starts from. The caller rebuilds it for every turn ("stateless").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRequest {
    /// The system prompt (see [`crate::build_system_prompt`]).
    pub system: String,
    /// The conversation before this turn, oldest first.
    pub history: Vec<Message>,
    /// The user messages of this turn, in order (one, or several collected while busy).
    pub user_texts: Vec<String>,
}

/// What one turn produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutput {
    /// The text of the model's final answer (the call that asked for no tools).
    pub reply: String,
    /// The messages this turn added after the history, in order: the user messages, then each
    /// model call's assistant text (when not empty), tool calls, and tool results. The next turn's
    /// history is the old history followed by these.
    pub new_messages: Vec<Message>,
    /// The tokens of the turn's model calls, summed over the calls whose stream reported them;
    /// `None` when none did.
    pub usage: Option<TokenUsage>,
}

/// Who a completed message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageRole {
    /// The model's text.
    Assistant,
    /// A tool's result.
    Tool,
}

/// What a turn reports while it runs, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AgentEvent {
    /// A piece of the model's text, as it streams.
    TextDelta(String),
    /// A tool call is about to run.
    ToolStarted {
        /// The model's id of the call.
        call_id: String,
        /// The tool name.
        name: String,
        /// The JSON arguments, or the freeform input.
        arguments: String,
    },
    /// A tool call ended.
    ToolCompleted {
        /// The model's id of the call.
        call_id: String,
        /// The tool name.
        name: String,
        /// Whether the tool succeeded.
        ok: bool,
        /// The text given back to the model.
        output: String,
    },
    /// A message is complete and may be committed to the transcript: the assistant text of a
    /// model call (when not empty), or a tool result.
    MessageCompleted {
        /// Who it is from.
        role: MessageRole,
        /// The text.
        content: String,
        /// The tool name, for tool results.
        tool_name: Option<String>,
    },
}

/// Runs one turn: calls the model with the history, the new user messages and the tools on
/// offer; runs the tool calls it makes, in order; and calls it again with the results, until it
/// answers without asking for tools.
///
/// Events are forwarded to `events` as they happen. Tool failures are results for the model, not
/// errors of the turn; a call to a tool not in `tools` is refused without running anything.
///
/// # Errors
/// - [`AgentError::Model`] when a model call fails (its code is the model's, such as
///   `MODEL_UNAVAILABLE`); a stream that ends without completing is `MODEL_BAD_RESPONSE`;
/// - [`AgentError::StepLimit`] after [`MAX_MODEL_CALLS_PER_TURN`] model calls that all asked for
///   tools (their tools have run);
/// - [`AgentError::Cancelled`] when `cancel` fires: the model stream is dropped and a running tool
///   is stopped (an `exec` command's process group is killed).
pub async fn run_turn(
    model: &dyn ModelClient,
    request: TurnRequest,
    tools: &ToolSet,
    ctx: &ToolContext,
    events: &mut (dyn FnMut(AgentEvent) + Send),
    cancel: &CancellationToken,
) -> Result<TurnOutput> {
    let TurnRequest {
        system,
        history,
        user_texts,
    } = request;
    let n_history = history.len();
    let mut messages = history;
    messages.extend(user_texts.into_iter().map(|text| Message::User { text }));
    let specs: Vec<ToolSpec> = tools.specs();
    let mut usage: Option<TokenUsage> = None;
    for _ in 0..MAX_MODEL_CALLS_PER_TURN {
        let model_request = ModelRequest {
            system: system.clone(),
            messages: std::mem::take(&mut messages),
            tools: specs.clone(),
            max_output_tokens: None,
        };
        let step = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(AgentError::Cancelled),
            step = stream_model(model, &model_request, &mut *events) => step,
        };
        messages = model_request.messages;
        let (text, calls, step_usage) = step?;
        usage = add_usage(usage, step_usage);
        if !text.is_empty() {
            messages.push(Message::Assistant { text: text.clone() });
            events(AgentEvent::MessageCompleted {
                role: MessageRole::Assistant,
                content: text.clone(),
                tool_name: None,
            });
        }
        if calls.is_empty() {
            return Ok(TurnOutput {
                reply: text,
                new_messages: messages.split_off(n_history),
                usage,
            });
        }
        messages.extend(calls.iter().cloned().map(Message::ToolCall));
        for call in calls {
            let arguments = match &call.input {
                ToolInput::Function { arguments_json } => arguments_json.clone(),
                ToolInput::Freeform { input } => input.clone(),
            };
            events(AgentEvent::ToolStarted {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                arguments,
            });
            let outcome = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(AgentError::Cancelled),
                outcome = tools.call(ctx, &call) => outcome,
            };
            tracing::debug!(tool = %call.name, ok = outcome.ok, "tool call finished");
            events(AgentEvent::ToolCompleted {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
                ok: outcome.ok,
                output: outcome.output.clone(),
            });
            messages.push(Message::ToolResult {
                call_id: call.call_id,
                output: outcome.output.clone(),
            });
            events(AgentEvent::MessageCompleted {
                role: MessageRole::Tool,
                content: outcome.output,
                tool_name: Some(call.name),
            });
        }
    }
    Err(AgentError::StepLimit {
        limit: MAX_MODEL_CALLS_PER_TURN,
    })
}

/// Returns `total` with a model call's `step` added; either may be absent.
fn add_usage(total: Option<TokenUsage>, step: Option<Usage>) -> Option<TokenUsage> {
    let step = step.map(|step| TokenUsage {
        input_tokens: step.input_tokens,
        output_tokens: step.output_tokens,
        total_tokens: step.total_tokens,
        model_calls: 1,
        ..TokenUsage::default()
    });
    match (total, step) {
        (Some(total), Some(step)) => Some(total.plus(step)),
        (total, step) => total.or(step),
    }
}

/// What one model call gave: its text, its tool calls and its token counts, when reported.
type Step = (String, Vec<ToolCall>, Option<Usage>);

/// Streams one model call, forwarding text deltas; returns its text, tool calls and usage.
///
/// The call runs under a `model_call` span with the model name, and, when it ends, its outcome
/// (`ok` or the error's code) and its duration; a cancelled call closes the span without them.
async fn stream_model(
    model: &dyn ModelClient,
    request: &ModelRequest,
    events: &mut (dyn FnMut(AgentEvent) + Send),
) -> Result<Step> {
    let span = tracing::info_span!(
        "model_call",
        model = model.model(),
        outcome = tracing::field::Empty,
        error_code = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    );
    let started = std::time::Instant::now();
    let result = stream_model_events(model, request, events)
        .instrument(span.clone())
        .await;
    match &result {
        Ok(_) => span.record("outcome", "ok"),
        Err(error) => span
            .record("outcome", "error")
            .record("error_code", error.code().as_str()),
    };
    span.record(
        "duration_ms",
        u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    );
    result
}

async fn stream_model_events(
    model: &dyn ModelClient,
    request: &ModelRequest,
    events: &mut (dyn FnMut(AgentEvent) + Send),
) -> Result<Step> {
    let mut stream = model
        .stream(request)
        .await
        .map_err(|source| AgentError::Model { source })?;
    let mut calls = Vec::new();
    while let Some(event) = stream.next().await {
        match event.map_err(|source| AgentError::Model { source })? {
            ModelEvent::TextDelta(delta) => events(AgentEvent::TextDelta(delta)),
            ModelEvent::ToolCall(call) => calls.push(call),
            ModelEvent::Completed { text, usage } => return Ok((text, calls, usage)),
        }
    }
    Err(AgentError::Model {
        source: ModelError::Truncated,
    })
}
