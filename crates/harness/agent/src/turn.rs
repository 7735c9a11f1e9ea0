//! [`run_turn`]: one turn of the agent loop.

use futures_util::StreamExt;
use gatehouse_model::Message;
use gatehouse_model::ModelClient;
use gatehouse_model::ModelError;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelRequest;
use gatehouse_model::RetryNotice;
use gatehouse_model::ToolCall;
use gatehouse_model::ToolInput;
use gatehouse_model::ToolSpec;
use gatehouse_model::Usage;
use gatehouse_protocol::error::ErrorCode;
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
    /// The most tokens (`total_tokens`, summed over the turn's model calls) the turn may use;
    /// `None` for no ceiling. Each call asks for at most the tokens left as its output limit.
    pub max_turn_tokens: Option<u64>,
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
    /// The turn's model calls summed: tokens as their streams reported them (a call that
    /// reported none adds none), calls that answered, retries, and the model name. `Some` once
    /// a call answered, which every finished turn has.
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
    /// A model call failed with something its client retries; the retry follows after `delay_ms`.
    ModelRetry {
        /// The attempt that failed, from 1.
        attempt: u32,
        /// The failure's stable code.
        code: ErrorCode,
        /// What happened.
        message: String,
        /// The wait before the next attempt, in milliseconds.
        delay_ms: u64,
    },
    /// A model call answered: its own counts (`model_calls` 1, the `retries` before it, the
    /// client's model name). Sent before the call's text is committed and its tools run.
    ModelUsage {
        /// The call's counts.
        usage: TokenUsage,
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
/// Events are forwarded to `events` as they happen: each retry of a model call
/// ([`AgentEvent::ModelRetry`], before the client waits) and each answered call's usage
/// ([`AgentEvent::ModelUsage`]). Tool failures are results for the model, not errors of the
/// turn; a call to a tool not in `tools` is refused without running anything.
///
/// With [`TurnRequest::max_turn_tokens`], each call's output limit is the tokens left (at least
/// one), and once the calls' summed `total_tokens` pass the ceiling the turn ends: the text of
/// the call that passed it is committed, its tool calls do not run.
///
/// # Errors
/// - [`AgentError::Model`] when a model call fails (its code is the model's, such as
///   `MODEL_UNAVAILABLE`); a stream that ends without completing is `MODEL_BAD_RESPONSE`;
/// - [`AgentError::StepLimit`] after [`MAX_MODEL_CALLS_PER_TURN`] model calls that all asked for
///   tools (their tools have run);
/// - [`AgentError::TurnBudgetExceeded`] when the turn passed `max_turn_tokens`, or a call
///   stopped at the output limit the ceiling gave it;
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
        max_turn_tokens,
    } = request;
    let n_history = history.len();
    let mut messages = history;
    messages.extend(user_texts.into_iter().map(|text| Message::User { text }));
    let specs: Vec<ToolSpec> = tools.specs();
    let mut usage: Option<TokenUsage> = None;
    for _ in 0..MAX_MODEL_CALLS_PER_TURN {
        let used = usage.as_ref().map_or(0, |usage| usage.total_tokens);
        let model_request = ModelRequest {
            system: system.clone(),
            messages: std::mem::take(&mut messages),
            tools: specs.clone(),
            max_output_tokens: max_turn_tokens.map(|limit| limit.saturating_sub(used).max(1)),
        };
        let step = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(AgentError::Cancelled),
            step = stream_model(model, &model_request, &mut *events) => step,
        };
        messages = model_request.messages;
        let step = match (step, max_turn_tokens) {
            (Err(AgentError::Model { source }), Some(limit)) if source.is_output_limit() => {
                return Err(AgentError::TurnBudgetExceeded { limit, used });
            }
            (step, _) => step?,
        };
        let call_usage = call_usage(step.usage, step.n_retries, model.model());
        events(AgentEvent::ModelUsage {
            usage: call_usage.clone(),
        });
        let turn_usage = match usage {
            Some(total) => total.plus(call_usage),
            None => call_usage,
        };
        let used = turn_usage.total_tokens;
        usage = Some(turn_usage);
        let Step { text, calls, .. } = step;
        if !text.is_empty() {
            messages.push(Message::Assistant { text: text.clone() });
            events(AgentEvent::MessageCompleted {
                role: MessageRole::Assistant,
                content: text.clone(),
                tool_name: None,
            });
        }
        if let Some(limit) = max_turn_tokens
            && used > limit
        {
            tracing::info!(limit, used, "turn token ceiling passed");
            return Err(AgentError::TurnBudgetExceeded { limit, used });
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

/// Returns the counts of one answered model call: its tokens (zero when the stream reported
/// none), one call, its retries and the model name.
fn call_usage(usage: Option<Usage>, n_retries: u64, model: &str) -> TokenUsage {
    let usage = usage.unwrap_or_default();
    TokenUsage {
        input_tokens: usage.input_tokens,
        cached_input_tokens: usage.cached_input_tokens,
        output_tokens: usage.output_tokens,
        total_tokens: usage.total_tokens,
        model_calls: 1,
        retries: n_retries,
        model: Some(model.to_owned()),
    }
}

/// What one model call gave.
struct Step {
    /// The whole assistant text.
    text: String,
    /// The tool calls, in order.
    calls: Vec<ToolCall>,
    /// The token counts, when the stream reported them.
    usage: Option<Usage>,
    /// The failed attempts the client retried before this one answered.
    n_retries: u64,
}

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
    // The client reports a retry from inside `stream_observing`, before it waits; the notice is
    // passed on here while the call is still open. Unbounded is safe: a client retries a call
    // only a few times (`gatehouse_model::MAX_RETRIES` for the HTTP clients).
    let (retry_sender, mut retry_receiver) = tokio::sync::mpsc::unbounded_channel::<RetryNotice>();
    let on_retry = move |notice: &RetryNotice| {
        let _ = retry_sender.send(notice.clone());
    };
    let mut n_retries: u64 = 0;
    let mut report_retry = |notice: RetryNotice, n_retries: &mut u64| {
        *n_retries += 1;
        tracing::info!(
            attempt = notice.attempt,
            code = notice.code.as_str(),
            "model call retried"
        );
        events(AgentEvent::ModelRetry {
            attempt: notice.attempt,
            code: notice.code,
            message: notice.message,
            delay_ms: u64::try_from(notice.delay.as_millis()).unwrap_or(u64::MAX),
        });
    };
    let opened = {
        let opening = model.stream_observing(request, &on_retry);
        tokio::pin!(opening);
        loop {
            tokio::select! {
                biased;
                Some(notice) = retry_receiver.recv() => report_retry(notice, &mut n_retries),
                opened = &mut opening => break opened,
            }
        }
    };
    while let Ok(notice) = retry_receiver.try_recv() {
        report_retry(notice, &mut n_retries);
    }
    let mut stream = opened.map_err(|source| AgentError::Model { source })?;
    let mut calls = Vec::new();
    while let Some(event) = stream.next().await {
        match event.map_err(|source| AgentError::Model { source })? {
            ModelEvent::TextDelta(delta) => events(AgentEvent::TextDelta(delta)),
            ModelEvent::ToolCall(call) => calls.push(call),
            ModelEvent::Completed { text, usage } => {
                return Ok(Step {
                    text,
                    calls,
                    usage,
                    n_retries,
                });
            }
        }
    }
    Err(AgentError::Model {
        source: ModelError::Truncated,
    })
}
