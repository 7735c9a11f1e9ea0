//! The in-process mock model: `gatehouse-mockmodel`'s script, without HTTP.

use std::time::Duration;

use futures_util::StreamExt;
use gatehouse_mockmodel::ModelRequestView;
use gatehouse_mockmodel::Plan;
use gatehouse_mockmodel::PlannedToolInput;
use gatehouse_mockmodel::ViewItem;

use crate::ModelClient;
use crate::ModelEventStream;
use crate::config::Timeouts;
use crate::error::ModelError;
use crate::error::Result;
use crate::error::TimeoutPhase;
use crate::types::Message;
use crate::types::ModelEvent;
use crate::types::ModelRequest;
use crate::types::ToolCall;
use crate::types::ToolInput;
use crate::types::Usage;

/// The deterministic mock model (DESIGN §10), in process.
///
/// It follows the same script as `gatehouse mock-model` and yields the same events an HTTP client
/// would: `/say` and the echo stream text, `/tool` makes tool calls (`apply_patch` freeform),
/// `/fail STATUS` returns [`ModelError::Status`] from `stream` (no retries), `/slow` waits between
/// words, and `/hang` yields nothing until `timeouts.first_event` has passed, then
/// [`ModelError::Timeout`].
#[derive(Debug, Clone, Default)]
pub struct MockClient {
    timeouts: Timeouts,
}

impl MockClient {
    /// Returns a mock whose `/hang` gives up after `timeouts.first_event`.
    pub fn new(timeouts: Timeouts) -> MockClient {
        MockClient { timeouts }
    }
}

#[async_trait::async_trait]
impl ModelClient for MockClient {
    fn model(&self) -> &str {
        "mock"
    }

    async fn stream(&self, request: &ModelRequest) -> Result<ModelEventStream> {
        let view = view(request);
        let plan = gatehouse_mockmodel::plan(&view);
        let usage = gatehouse_mockmodel::usage(&view, &plan);
        let usage = Some(Usage {
            input_tokens: usage.input_tokens,
            output_tokens: usage.output_tokens,
            total_tokens: usage.total_tokens(),
        });
        // Each step is yielded after its pause.
        let mut steps: Vec<(Duration, Result<ModelEvent>)> = Vec::new();
        match plan {
            Plan::Fail(fail) => {
                let body = fail.error_body();
                let message = body
                    .pointer("/error/message")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                return Err(ModelError::Status {
                    status: fail.status,
                    message,
                });
            }
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
