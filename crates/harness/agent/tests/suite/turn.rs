//! The agent loop: streaming, tool rounds, history, model errors, the step limit, cancellation.

use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use gatehouse_agent::AgentEvent;
use gatehouse_agent::MAX_MODEL_CALLS_PER_TURN;
use gatehouse_agent::MessageRole;
use gatehouse_agent::ToolSet;
use gatehouse_agent::TurnRequest;
use gatehouse_model::Message;
use gatehouse_model::MockClient;
use gatehouse_model::ModelClient;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelEventStream;
use gatehouse_model::ModelRequest;
use gatehouse_model::ToolCall;
use gatehouse_model::ToolInput;
use pretty_assertions::assert_eq;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::suite::support::Session;
use crate::suite::support::WAIT_LIMIT;
use crate::suite::support::processes_with_argv;
use crate::suite::support::require_bwrap;
use crate::suite::support::run;
use crate::suite::support::tool_line;
use crate::suite::support::wait_until;

/// A turn with no system prompt and no history.
fn bare_request(user_texts: Vec<String>) -> TurnRequest {
    TurnRequest {
        system: String::new(),
        history: Vec::new(),
        user_texts,
        max_turn_tokens: None,
    }
}

#[tokio::test]
async fn say_streams_the_reply_in_several_deltas() {
    let session = Session::new();
    let ctx = session.files_only();
    let turn = run(&ToolSet::native(), &ctx, Vec::new(), "/say hi").await;
    assert_eq!(turn.reply(), "hi");
    let deltas: Vec<&str> = turn
        .events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::TextDelta(delta) => Some(delta.as_str()),
            _ => None,
        })
        .collect();
    assert!(deltas.len() >= 2, "deltas: {deltas:?}");
    assert_eq!(deltas.concat(), "hi");
    assert_eq!(
        turn.events.last(),
        Some(&AgentEvent::MessageCompleted {
            role: MessageRole::Assistant,
            content: String::from("hi"),
            tool_name: None,
        })
    );
    assert_eq!(
        turn.result.unwrap().new_messages,
        vec![
            Message::User {
                text: String::from("/say hi")
            },
            Message::Assistant {
                text: String::from("hi")
            },
        ]
    );
}

#[tokio::test]
async fn a_written_file_is_read_back_in_the_next_turn() {
    let session = Session::new();
    let ctx = session.files_only();
    let tools = ToolSet::native();
    let arguments = json!({"path": "a.txt", "content": "x"});
    let write = tool_line("write", &arguments);
    let first = run(&tools, &ctx, Vec::new(), &write).await;
    assert_eq!(first.reply(), "tool write -> wrote 1 bytes to a.txt");
    assert_eq!(session.read("a.txt"), "x");
    let non_delta: Vec<&AgentEvent> = first
        .events
        .iter()
        .filter(|event| {
            !matches!(
                event,
                AgentEvent::TextDelta(_) | AgentEvent::ModelUsage { .. }
            )
        })
        .collect();
    assert_eq!(
        non_delta,
        vec![
            &AgentEvent::ToolStarted {
                call_id: String::from("call_1"),
                name: String::from("write"),
                arguments: arguments.to_string(),
            },
            &AgentEvent::ToolCompleted {
                call_id: String::from("call_1"),
                name: String::from("write"),
                ok: true,
                output: String::from("wrote 1 bytes to a.txt"),
            },
            &AgentEvent::MessageCompleted {
                role: MessageRole::Tool,
                content: String::from("wrote 1 bytes to a.txt"),
                tool_name: Some(String::from("write")),
            },
            &AgentEvent::MessageCompleted {
                role: MessageRole::Assistant,
                content: String::from("tool write -> wrote 1 bytes to a.txt"),
                tool_name: None,
            },
        ]
    );

    let history = first.result.unwrap().new_messages;
    assert_eq!(
        history.len(),
        4,
        "user, tool call, tool result, assistant: {history:?}"
    );
    let read = tool_line("read", &json!({"path": "a.txt"}));
    let second = run(&tools, &ctx, history, &read).await;
    assert_eq!(second.reply(), "tool read ->      1\tx\n");
}

#[tokio::test]
async fn several_tool_calls_run_in_order() {
    let session = Session::new();
    let ctx = session.files_only();
    let text = [
        tool_line("write", &json!({"path": "d/a.txt", "content": "one"})),
        tool_line(
            "edit",
            &json!({"path": "d/a.txt", "old_string": "one", "new_string": "two"}),
        ),
        tool_line("read", &json!({"path": "d/a.txt"})),
    ]
    .join("\n");
    let turn = run(&ToolSet::native(), &ctx, Vec::new(), &text).await;
    assert_eq!(
        turn.reply(),
        "tool write -> wrote 3 bytes to d/a.txt\n\
         tool edit -> replaced 1 occurrence(s) in d/a.txt\n\
         tool read ->      1\ttwo\n"
    );
}

#[tokio::test]
async fn a_model_error_keeps_its_code() {
    let session = Session::new();
    let ctx = session.files_only();
    for (line, code) in [
        ("/fail 500", "MODEL_UNAVAILABLE"),
        ("/fail 401", "MODEL_AUTH_FAILED"),
    ] {
        let turn = run(&ToolSet::native(), &ctx, Vec::new(), line).await;
        let error = turn.result.unwrap_err();
        assert_eq!(error.code(), code, "{line}");
    }
}

/// The model's call of `ls` with no arguments, with the id `call_N`.
fn ls_call(n_call: usize) -> ToolCall {
    ToolCall {
        call_id: format!("call_{n_call}"),
        name: String::from("ls"),
        input: ToolInput::Function {
            arguments_json: String::from("{}"),
        },
    }
}

/// A model that asks for `ls` on every call.
#[derive(Debug, Default)]
struct LoopingModel {
    n_calls: AtomicUsize,
}

#[async_trait::async_trait]
impl ModelClient for LoopingModel {
    fn model(&self) -> &str {
        "looping"
    }

    async fn stream(&self, _request: &ModelRequest) -> gatehouse_model::Result<ModelEventStream> {
        let n_call = self.n_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let events = vec![
            Ok(ModelEvent::ToolCall(ls_call(n_call))),
            Ok(ModelEvent::Completed {
                text: String::new(),
                usage: None,
            }),
        ];
        Ok(Box::pin(futures_util::stream::iter(events)))
    }
}

#[tokio::test]
async fn a_model_that_never_stops_hits_the_step_limit() {
    let session = Session::new();
    let ctx = session.files_only();
    let model = LoopingModel::default();
    let request = bare_request(vec![String::from("go")]);
    let mut n_tool_runs = 0;
    let result = tokio::time::timeout(
        WAIT_LIMIT,
        gatehouse_agent::run_turn(
            &model,
            request,
            &ToolSet::native(),
            &ctx,
            &mut |event| {
                if let AgentEvent::ToolCompleted { .. } = event {
                    n_tool_runs += 1;
                }
            },
            &CancellationToken::new(),
        ),
    )
    .await
    .unwrap();
    let error = result.unwrap_err();
    assert_eq!(error.code(), "AGENT_STEP_LIMIT");
    assert_eq!(
        model.n_calls.load(Ordering::SeqCst),
        MAX_MODEL_CALLS_PER_TURN
    );
    assert_eq!(n_tool_runs, MAX_MODEL_CALLS_PER_TURN);
}

#[tokio::test]
async fn cancelling_stops_the_model_stream() {
    let session = Session::new();
    let ctx = session.files_only();
    let cancel = CancellationToken::new();
    let request = bare_request(vec![String::from(
        "/slow 200 one two three four five six seven eight",
    )]);
    let mut deltas = Vec::new();
    let canceller = cancel.clone();
    let result = tokio::time::timeout(
        WAIT_LIMIT,
        gatehouse_agent::run_turn(
            &MockClient::default(),
            request,
            &ToolSet::native(),
            &ctx,
            &mut |event| {
                if let AgentEvent::TextDelta(delta) = event {
                    deltas.push(delta);
                    canceller.cancel();
                }
            },
            &cancel,
        ),
    )
    .await
    .unwrap();
    let error = result.unwrap_err();
    assert_eq!(error.code(), "AGENT_CANCELLED");
    assert!(error.is_cancel());
    assert_eq!(deltas.len(), 1, "{deltas:?}");
}

#[tokio::test]
async fn cancelling_kills_a_running_command() {
    require_bwrap();
    let session = Session::new();
    let ctx = session.sandboxed();
    let cancel = CancellationToken::new();
    let line = tool_line("exec", &json!({"command": "sleep 4246 & sleep 4246"}));
    let request = bare_request(vec![line]);
    let canceller = cancel.clone();
    let cancel_when_running = tokio::spawn(async move {
        wait_until("the command runs", || {
            processes_with_argv(&["sleep", "4246"]).len() == 2
        })
        .await;
        canceller.cancel();
    });
    let result = tokio::time::timeout(
        WAIT_LIMIT,
        gatehouse_agent::run_turn(
            &MockClient::default(),
            request,
            &ToolSet::native(),
            &ctx,
            &mut |_event| {},
            &cancel,
        ),
    )
    .await
    .unwrap();
    cancel_when_running.await.unwrap();
    assert_eq!(result.unwrap_err().code(), "AGENT_CANCELLED");
    wait_until("the cancelled command is gone", || {
        processes_with_argv(&["sleep", "4246"]).is_empty()
    })
    .await;
}

#[tokio::test]
async fn several_user_texts_are_one_turn() {
    let session = Session::new();
    let ctx = session.files_only();
    let request = bare_request(vec![String::from("first"), String::from("/say second")]);
    let output = tokio::time::timeout(
        WAIT_LIMIT,
        gatehouse_agent::run_turn(
            &MockClient::default(),
            request,
            &ToolSet::native(),
            &ctx,
            &mut |_event| {},
            &CancellationToken::new(),
        ),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(output.reply, "second");
    assert_eq!(output.new_messages.len(), 3);
}

/// A model whose calls report the token counts of `usages`, one per call: every call but the
/// last asks for `ls`, the last answers `done`.
#[derive(Debug)]
struct UsageModel {
    usages: Vec<Option<gatehouse_model::Usage>>,
    n_calls: AtomicUsize,
}

#[async_trait::async_trait]
impl ModelClient for UsageModel {
    fn model(&self) -> &str {
        "usage"
    }

    async fn stream(&self, _request: &ModelRequest) -> gatehouse_model::Result<ModelEventStream> {
        let n_call = self.n_calls.fetch_add(1, Ordering::SeqCst);
        let usage = self.usages[n_call];
        let last = n_call + 1 == self.usages.len();
        let mut events = Vec::new();
        if !last {
            events.push(Ok(ModelEvent::ToolCall(ls_call(n_call))));
        }
        events.push(Ok(ModelEvent::Completed {
            text: if last {
                String::from("done")
            } else {
                String::new()
            },
            usage,
        }));
        Ok(Box::pin(futures_util::stream::iter(events)))
    }
}

#[tokio::test]
async fn a_turns_usage_sums_its_model_calls() {
    let usage = |input_tokens, cached_input_tokens, output_tokens| {
        Some(gatehouse_model::Usage::new(
            input_tokens,
            cached_input_tokens,
            output_tokens,
        ))
    };
    let tokens = |input_tokens, cached_input_tokens, output_tokens, model_calls| {
        Some(gatehouse_protocol::worker::TokenUsage {
            input_tokens,
            cached_input_tokens,
            output_tokens,
            total_tokens: input_tokens + cached_input_tokens + output_tokens,
            model_calls,
            retries: 0,
            model: Some(String::from("usage")),
        })
    };
    // A call whose stream reported no tokens still counts as a call.
    let cases = [
        (vec![usage(7, 0, 3), usage(11, 4, 2)], tokens(18, 4, 5, 2)),
        (
            vec![usage(7, 1, 3), usage(11, 2, 2), usage(20, 3, 1)],
            tokens(38, 6, 6, 3),
        ),
        (vec![None, usage(11, 0, 2)], tokens(11, 0, 2, 2)),
        (vec![usage(7, 0, 3), None], tokens(7, 0, 3, 2)),
        (vec![None, None], tokens(0, 0, 0, 2)),
        (vec![None], tokens(0, 0, 0, 1)),
    ];
    let session = Session::new();
    let ctx = session.files_only();
    for (usages, expected) in cases {
        let n_calls = usages.len();
        let model = UsageModel {
            usages: usages.clone(),
            n_calls: AtomicUsize::new(0),
        };
        let output = tokio::time::timeout(
            WAIT_LIMIT,
            gatehouse_agent::run_turn(
                &model,
                bare_request(vec![String::from("go")]),
                &ToolSet::native(),
                &ctx,
                &mut |_event| {},
                &CancellationToken::new(),
            ),
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(output.reply, "done", "{usages:?}");
        assert_eq!(model.n_calls.load(Ordering::SeqCst), n_calls, "{usages:?}");
        assert_eq!(output.usage, expected, "{usages:?}");
    }
}
