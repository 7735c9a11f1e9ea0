//! The inference broker: the node host calls the model for its workers, so the model key
//! never leaves the node host's own environment.
//!
//! The node host builds one model client at startup from `--model` and `--model-key-env`
//! ([`build_client`]). A worker asks for each model call with a [`WorkerEvent::ModelCall`] line
//! on its stdout; [`TurnBroker`], which the turn's loop in [`crate::worker`] drives, runs the call
//! and streams each provider event back as a [`WorkerRequest::ModelEvent`] line on the worker's
//! stdin ([`gatehouse_model::broker`] describes the exchange). Since the channel is the worker's
//! own pipe, no command the worker runs can reach the broker.
//!
//! The broker is what the Gateway hears about usage: for each answered call it reads the
//! provider's own counts (cached input included) and sends the Gateway a
//! [`WorkerEvent::ModelUsage`] line (one call, the retries it made, the configured model name);
//! the worker's own `modelUsage` lines are dropped. With the turn's `maxTurnTokens`, it caps each
//! call's output at the tokens left and refuses any call once the turn's count passed the
//! ceiling, with `TURN_BUDGET_EXCEEDED`.

use std::sync::Arc;

use futures_util::StreamExt;
use gatehouse_model::ModelClient;
use gatehouse_model::ModelConfig;
use gatehouse_model::ModelError;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelRequest;
use gatehouse_model::RetryNotice;
use gatehouse_model::broker::BrokerEvent;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::worker::TokenUsage;
use gatehouse_protocol::worker::WorkerEvent;
use gatehouse_protocol::worker::WorkerRequest;

/// How many events of one call wait for the turn's loop to pass them on.
const CALL_EVENT_CAPACITY: usize = 64;

/// Builds the node host's model client from the model spec and the name of the variable that
/// holds its key, read from the node host's own environment (never logged).
///
/// # Errors
/// The code the worker's turns then fail with: `MODEL_AUTH_FAILED` for a spec that cannot be
/// parsed or a missing key, the client's code otherwise.
pub(crate) fn build_client(model: &str, key_env: &str) -> Result<Arc<dyn ModelClient>, WireError> {
    let config = ModelConfig::parse(model, key_env)
        .map_err(|error| WireError::new(ErrorCode::ModelAuthFailed, error.to_string()))?;
    config
        .build()
        .map_err(|error| WireError::new(error.code(), error.to_string()))
}

/// What the turn's loop does for the broker.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BrokerAction {
    /// Write this line to the worker.
    ToWorker(WorkerRequest),
    /// Send this event to the Gateway as a progress line.
    ToGateway(WorkerEvent),
}

/// What a call's task passes to the turn's loop.
enum CallOutput {
    Retry(RetryNotice),
    Event(ModelEvent),
    Failed(ModelError),
}

/// The call a worker has open.
struct OpenCall {
    id: u64,
    /// Whether the turn's ceiling capped its output limit.
    capped: bool,
    n_retries: u64,
    outputs: tokio::sync::mpsc::Receiver<CallOutput>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for OpenCall {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The broker of one turn of one worker: at most one open call, the turn's usage as the
/// broker counted it, and the turn's ceiling. Dropping it abandons the open call.
pub(crate) struct TurnBroker {
    client: Result<Arc<dyn ModelClient>, WireError>,
    max_turn_tokens: Option<u64>,
    usage: Option<TokenUsage>,
    call: Option<OpenCall>,
}

impl TurnBroker {
    /// Returns the broker of a turn that may use `max_turn_tokens` (none: no ceiling) and
    /// calls `client` (or fails every call with its error).
    pub(crate) fn new(
        client: Result<Arc<dyn ModelClient>, WireError>,
        max_turn_tokens: Option<u64>,
    ) -> TurnBroker {
        TurnBroker {
            client,
            max_turn_tokens,
            usage: None,
            call: None,
        }
    }

    /// Returns the turn's usage as the broker counted it: the answered calls summed, `None`
    /// before the first.
    pub(crate) fn usage(&self) -> Option<&TokenUsage> {
        self.usage.as_ref()
    }

    /// Returns the error of a turn whose counted tokens passed its ceiling, if they did.
    pub(crate) fn exceeded(&self) -> Option<WireError> {
        let limit = self.max_turn_tokens?;
        let used = self.used();
        (used > limit).then(|| budget_exceeded(limit, used))
    }

    fn used(&self) -> u64 {
        self.usage.as_ref().map_or(0, |usage| usage.total_tokens)
    }

    /// Starts the worker's call `id` with `request` (a `ModelRequest`'s JSON), or refuses it:
    /// `INVALID_REQUEST` while another call is open or for a malformed request,
    /// `TURN_BUDGET_EXCEEDED` once the turn passed its ceiling, the client's error when the
    /// node host has no model. The output limit is capped at the tokens the turn has left.
    pub(crate) fn start(&mut self, id: u64, request: serde_json::Value) -> Vec<BrokerAction> {
        if self.call.is_some() {
            return vec![failed(
                id,
                ErrorCode::InvalidRequest,
                String::from("a model call is already open; one call at a time"),
            )];
        }
        let mut request: ModelRequest = match serde_json::from_value(request) {
            Ok(request) => request,
            Err(error) => {
                return vec![failed(
                    id,
                    ErrorCode::InvalidRequest,
                    format!("malformed model request: {error}"),
                )];
            }
        };
        if let Some(error) = self.exceeded() {
            return vec![failed(id, ErrorCode::TurnBudgetExceeded, error.message)];
        }
        let client = match &self.client {
            Ok(client) => Arc::clone(client),
            Err(error) => {
                let code = ErrorCode::parse(&error.code).unwrap_or(ErrorCode::ModelUnavailable);
                return vec![failed(id, code, error.message.clone())];
            }
        };
        let capped = match self.max_turn_tokens {
            Some(limit) => {
                let left = limit.saturating_sub(self.used()).max(1);
                let asked = request.max_output_tokens.unwrap_or(u64::MAX);
                request.max_output_tokens = Some(asked.min(left));
                true
            }
            None => false,
        };
        let (sender, outputs) = tokio::sync::mpsc::channel(CALL_EVENT_CAPACITY);
        let task = tokio::spawn(run_call(client, request, sender));
        self.call = Some(OpenCall {
            id,
            capped,
            n_retries: 0,
            outputs,
            task,
        });
        Vec::new()
    }

    /// Waits for the open call's next event and returns what to do with it; never returns
    /// while no call is open (for a `select!` beside the worker's output). Cancel-safe.
    pub(crate) async fn next_actions(&mut self) -> Vec<BrokerAction> {
        let Some(call) = self.call.as_mut() else {
            return std::future::pending().await;
        };
        let output = call.outputs.recv().await;
        let id = call.id;
        match output {
            Some(CallOutput::Retry(notice)) => {
                call.n_retries += 1;
                vec![to_worker(id, &BrokerEvent::from_retry(&notice))]
            }
            Some(CallOutput::Event(ModelEvent::Completed { text, usage })) => {
                let n_retries = call.n_retries;
                self.call = None;
                let provider = usage.unwrap_or_default();
                let model = self
                    .client
                    .as_ref()
                    .map(|client| client.model().to_owned())
                    .ok();
                let call_usage = TokenUsage {
                    input_tokens: provider.input_tokens,
                    cached_input_tokens: provider.cached_input_tokens,
                    output_tokens: provider.output_tokens,
                    total_tokens: provider.total_tokens,
                    model_calls: 1,
                    retries: n_retries,
                    model,
                };
                self.usage = Some(match self.usage.take() {
                    Some(total) => total.plus(call_usage.clone()),
                    None => call_usage.clone(),
                });
                // The Gateway hears of the usage before the worker hears the answer, so the
                // count is ahead of everything the answer makes the worker do.
                vec![
                    BrokerAction::ToGateway(WorkerEvent::ModelUsage { usage: call_usage }),
                    to_worker(id, &BrokerEvent::Completed { text, usage }),
                ]
            }
            Some(CallOutput::Event(event)) => {
                vec![to_worker(id, &BrokerEvent::from_model_event(event))]
            }
            Some(CallOutput::Failed(error)) => {
                let capped = call.capped;
                self.call = None;
                let code = match (capped, error.is_output_limit()) {
                    (true, true) => ErrorCode::TurnBudgetExceeded,
                    (true, false) | (false, _) => error.code(),
                };
                vec![failed(id, code, error.to_string())]
            }
            None => {
                self.call = None;
                vec![failed(
                    id,
                    ErrorCode::ModelUnavailable,
                    String::from("the model call ended without an answer"),
                )]
            }
        }
    }
}

/// Runs one call and passes its retries and events to `outputs`, ending with the completion
/// or the failure; stops early when the turn's loop is gone.
async fn run_call(
    client: Arc<dyn ModelClient>,
    request: ModelRequest,
    outputs: tokio::sync::mpsc::Sender<CallOutput>,
) {
    let retries = outputs.clone();
    // Retries are reported from inside the client, which is not async there: `try_send` never
    // waits, and a client retries only a few times, far fewer than the channel holds.
    let on_retry = move |notice: &RetryNotice| {
        let _ = retries.try_send(CallOutput::Retry(notice.clone()));
    };
    let mut stream = match client.stream_observing(&request, &on_retry).await {
        Ok(stream) => stream,
        Err(error) => {
            let _ = outputs.send(CallOutput::Failed(error)).await;
            return;
        }
    };
    while let Some(event) = stream.next().await {
        let (output, last) = match event {
            Ok(event) => {
                let last = matches!(event, ModelEvent::Completed { .. });
                (CallOutput::Event(event), last)
            }
            Err(error) => (CallOutput::Failed(error), true),
        };
        if outputs.send(output).await.is_err() || last {
            return;
        }
    }
    let _ = outputs
        .send(CallOutput::Failed(ModelError::Truncated))
        .await;
}

fn to_worker(id: u64, event: &BrokerEvent) -> BrokerAction {
    BrokerAction::ToWorker(WorkerRequest::ModelEvent {
        id,
        event: serde_json::to_value(event).unwrap_or_default(),
    })
}

fn failed(id: u64, code: ErrorCode, message: String) -> BrokerAction {
    to_worker(id, &BrokerEvent::Failed { code, message })
}

fn budget_exceeded(limit: u64, used: u64) -> WireError {
    WireError::new(
        ErrorCode::TurnBudgetExceeded,
        format!("the turn used {used} tokens, more than its ceiling of {limit}"),
    )
}

#[cfg(test)]
#[path = "broker_tests.rs"]
mod tests;
