//! The in-process mock model: `gatehouse-mockmodel`'s script, without HTTP.

use std::time::Duration;

use futures_util::StreamExt;
use gatehouse_mockmodel::MockMemory;
use gatehouse_mockmodel::ModelRequestView;
use gatehouse_mockmodel::Plan;
use gatehouse_mockmodel::PlannedToolInput;
use gatehouse_mockmodel::ViewItem;

use crate::ModelClient;
use crate::ModelEventStream;
use crate::config::MAX_RETRIES;
use crate::config::Timeouts;
use crate::error::ModelError;
use crate::error::Result;
use crate::error::TimeoutPhase;
use crate::types::Message;
use crate::types::ModelEvent;
use crate::types::ModelRequest;
use crate::types::RetryNotice;
use crate::types::RetryObserver;
use crate::types::ToolCall;
use crate::types::ToolInput;
use crate::types::Usage;

/// The deterministic mock model (DESIGN §10), in process.
///
/// It follows the same script as `gatehouse mock-model` and yields the same events an HTTP client
/// would: `/say` and the echo stream text, `/tool` makes tool calls (`apply_patch` freeform),
/// `/fail STATUS` returns [`ModelError::Status`] from `stream` (no retries), `/slow` waits between
/// words, and `/hang` yields nothing until `timeouts.first_event` has passed, then
/// [`ModelError::Timeout`]. `/flaky N STATUS TEXT` fails the first N attempts of this client
/// with STATUS, retried at once (at most [`MAX_RETRIES`] times per call, each reported to the
/// retry observer) as an HTTP client would after `Retry-After: 0`. Clones share the `/flaky`
/// counts.
#[derive(Debug, Clone, Default)]
pub struct MockClient {
    timeouts: Timeouts,
    memory: MockMemory,
}

impl MockClient {
    /// Returns a mock whose `/hang` gives up after `timeouts.first_event`.
    pub fn new(timeouts: Timeouts) -> MockClient {
        MockClient {
            timeouts,
            memory: MockMemory::default(),
        }
    }
}

#[async_trait::async_trait]
impl ModelClient for MockClient {
    fn model(&self) -> &str {
        "mock"
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelEventStream> {
        self.stream_observing(request, &|_| {}).await
    }

    async fn stream_observing(
        &self,
        request: &ModelRequest,
        on_retry: &RetryObserver<'_>,
    ) -> Result<ModelEventStream> {
        let view = view(request);
        let plan = gatehouse_mockmodel::plan(&view);
        if let Some(flaky) = gatehouse_mockmodel::flaky(&view) {
            let user_text = request
                .messages
                .iter()
                .rev()
                .find_map(|message| match message {
                    Message::User { text } => Some(text.as_str()),
                    Message::Assistant { .. }
                    | Message::ToolCall(_)
                    | Message::ToolResult { .. } => None,
                })
                .unwrap_or_default();
            let fail = gatehouse_mockmodel::FailPlan {
                status: flaky.status,
            };
            let mut n_retries: u32 = 0;
            while self.memory.flaky_attempt(user_text) <= flaky.failures {
                let error = status_error(fail);
                if !error.is_retryable() || n_retries as usize >= MAX_RETRIES {
                    return Err(error);
                }
                n_retries += 1;
                on_retry(&RetryNotice {
                    attempt: n_retries,
                    code: error.code(),
                    message: error.to_string(),
                    delay: Duration::ZERO,
                });
            }
        }
        let usage = gatehouse_mockmodel::usage(&view, &plan);
        let usage = Some(Usage::new(
            usage.input_tokens + usage.cache_write_tokens,
            usage.cache_read_tokens,
            usage.output_tokens,
        ));
        // Each step is yielded after its pause.
        let mut steps: Vec<(Duration, Result<ModelEvent>)> = Vec::new();
        match plan {
            Plan::Fail(fail) => return Err(status_error(fail)),
            Plan::Hang => steps.push((
                self.timeouts.first_event,
                Err(ModelError::Timeout {
                    phase: TimeoutPhase::FirstEvent,
                }),
            )),
            Plan::Text(text) => {
                let full_text = text.text();
                for (delta_idx, delta) in text.deltas.into_iter().enumerate() {
                    let pause = if delta_idx == 0 {
                        Duration::ZERO
                    } else {
                        text.delay
                    };
                    steps.push((pause, Ok(ModelEvent::TextDelta(delta))));
                }
                steps.push((
                    Duration::ZERO,
                    Ok(ModelEvent::Completed {
                        text: full_text,
                        usage,
                    }),
                ));
            }
            Plan::ToolCalls(calls) => {
                for call in calls {
                    let input = match call.input {
                        PlannedToolInput::Function { arguments } => ToolInput::Function {
                            arguments_json: arguments,
                        },
                        PlannedToolInput::Custom { input } => ToolInput::Freeform { input },
                    };
                    steps.push((
                        Duration::ZERO,
                        Ok(ModelEvent::ToolCall(ToolCall {
                            call_id: call.call_id,
                            name: call.name,
                            input,
                        })),
                    ));
                }
                steps.push((
                    Duration::ZERO,
                    Ok(ModelEvent::Completed {
                        text: String::new(),
                        usage,
                    }),
                ));
            }
        }
        let steps = futures_util::stream::iter(steps).then(|(pause, item)| async move {
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
            item
        });
        Ok(Box::pin(steps))
    }
}

/// Returns the error of an HTTP client refused with `fail`'s status and body.
fn status_error(fail: gatehouse_mockmodel::FailPlan) -> ModelError {
    let body = fail.error_body();
    let message = body
        .pointer("/error/message")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
        .to_owned();
    ModelError::Status {
        status: fail.status,
        message,
    }
}

/// Returns the mock's view of `request`.
fn view(request: &ModelRequest) -> ModelRequestView {
    let items = request
        .messages
        .iter()
        .map(|message| match message {
            Message::User { text } => ViewItem::User { text: text.clone() },
            Message::Assistant { text } => ViewItem::Assistant { text: text.clone() },
            Message::ToolCall(call) => ViewItem::ToolCall {
                call_id: call.call_id.clone(),
                name: call.name.clone(),
            },
            Message::ToolResult { call_id, output } => ViewItem::ToolResult {
                call_id: call_id.clone(),
                output: output.clone(),
            },
        })
        .collect();
    ModelRequestView { items }
}
