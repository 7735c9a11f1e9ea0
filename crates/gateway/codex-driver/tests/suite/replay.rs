//! Replays app-server sessions recorded from the real `codex app-server` (the version in
//! [`TESTED_CODEX_VERSION`]) while the CLI's codex tests drove it against the mock model; see
//! `tests/fixtures/README.md` for how they were recorded.
//!
//! Every line of a recording must decode into the message types: the Gateway's requests and
//! answers into their params and responses (and encode back to exactly what was sent), Codex's
//! responses into the response type of their request, and Codex's notifications and requests
//! into the typed variants. The notifications of each turn then go through the driver's
//! [`TurnState`], whose view (reply, tools, transcript, outcome) must be what the run produced.

use std::collections::HashMap;

use gatehouse_codex_driver::messages::ApprovalResponse;
use gatehouse_codex_driver::messages::ClientRequest;
use gatehouse_codex_driver::messages::DynamicToolCallResponse;
use gatehouse_codex_driver::messages::ElicitationResponse;
use gatehouse_codex_driver::messages::Envelope;
use gatehouse_codex_driver::messages::Initialize;
use gatehouse_codex_driver::messages::PermissionsApprovalResponse;
use gatehouse_codex_driver::messages::ServerNotification;
use gatehouse_codex_driver::messages::ServerRequest;
use gatehouse_codex_driver::messages::TESTED_CODEX_VERSION;
use gatehouse_codex_driver::messages::ThreadResume;
use gatehouse_codex_driver::messages::ThreadStart;
use gatehouse_codex_driver::messages::TurnInterrupt;
use gatehouse_codex_driver::messages::TurnStart;
use gatehouse_codex_driver::messages::TurnSteer;
use gatehouse_codex_driver::messages::UserInput;
use gatehouse_codex_driver::messages::decode;
use gatehouse_codex_driver::messages::encode;
use gatehouse_codex_driver::runtime::TurnEvent;
use gatehouse_codex_driver::runtime::TurnState;
use gatehouse_protocol::worker::TokenUsage;
use pretty_assertions::assert_eq;

/// The driver's view of one recorded turn.
#[derive(Debug, Default)]
struct TurnView {
    /// The user text of `turn/start`.
    input: String,
    /// The concatenated deltas.
    deltas: String,
    /// The tools started, in order.
    started: Vec<String>,
    /// The tools completed, with their outcome.
    completed: Vec<(String, bool)>,
    /// The transcript messages committed: role and content.
    committed: Vec<(&'static str, String)>,
    /// The reply, or the failure code; `None` when the turn never ended in the recording.
    outcome: Option<Result<String, String>>,
    /// The turn's token usage as the driver summed it when the turn ended.
    usage: Option<TokenUsage>,
    /// The sum of the turn's `Usage` events.
    counted: Option<TokenUsage>,
    /// The attempts of the turn's `Retry` events.
    retries: Vec<u32>,
}

/// Replays the fixture `name` and returns the driver's view of each turn, in order.
fn replay(name: &str) -> Vec<TurnView> {
    let path = format!("{}/tests/fixtures/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap();
    // The Gateway's requests by id, and Codex's; both restart on a new connection.
    let mut client_pending: HashMap<i64, String> = HashMap::new();
    let mut server_pending: HashMap<String, String> = HashMap::new();
    let mut turns: Vec<TurnView> = Vec::new();
    let mut current: Option<(String, TurnState)> = None;
    let mut n_notifications = 0;
    for (line_idx, line) in text.lines().enumerate() {
        let context = format!("{name}.jsonl line {}", line_idx + 1);
        let record: serde_json::Value = serde_json::from_str(line).expect(&context);
        let from = record["from"].as_str().expect(&context).to_owned();
        let envelope: Envelope = decode("line", record["message"].clone())
            .unwrap_or_else(|error| panic!("{context}: {error}"));
        let params = envelope.params.clone().unwrap_or_default();
        match (from.as_str(), envelope.method.as_deref(), &envelope.id) {
            ("gateway", Some(method), Some(id)) => {
                let id = id.as_i64().expect(&context);
                match method {
                    Initialize::METHOD => {
                        client_pending.clear();
                        server_pending.clear();
                        current = None;
                        round_trip::<<Initialize as ClientRequest>::Params>(&context, &params);
                    }
                    ThreadStart::METHOD => {
                        round_trip::<<ThreadStart as ClientRequest>::Params>(&context, &params);
                    }
                    ThreadResume::METHOD => {
                        round_trip::<<ThreadResume as ClientRequest>::Params>(&context, &params);
                    }
                    TurnStart::METHOD => {
                        let start =
                            round_trip::<<TurnStart as ClientRequest>::Params>(&context, &params);
                        turns.push(TurnView {
                            input: texts(&start.input),
                            ..TurnView::default()
                        });
                    }
                    TurnSteer::METHOD => {
                        round_trip::<<TurnSteer as ClientRequest>::Params>(&context, &params);
                    }
                    TurnInterrupt::METHOD => {
                        round_trip::<<TurnInterrupt as ClientRequest>::Params>(&context, &params);
                    }
                    other => panic!("{context}: the driver sent an unexpected request {other}"),
                }
                client_pending.insert(id, method.to_owned());
            }
            ("gateway", Some(method), None) => {
                assert_eq!(method, "initialized", "{context}");
            }
            ("gateway", None, Some(id)) => {
                let method = server_pending
                    .remove(&id.to_string())
                    .unwrap_or_else(|| panic!("{context}: an answer to no request"));
                let Some(result) = envelope.result.clone() else {
                    assert!(envelope.error.is_some(), "{context}");
                    continue;
                };
                match method.as_str() {
                    "item/commandExecution/requestApproval" | "item/fileChange/requestApproval" => {
                        round_trip::<ApprovalResponse>(&context, &result);
                    }
                    "item/tool/call" => {
                        round_trip::<DynamicToolCallResponse>(&context, &result);
                    }
                    "item/permissions/requestApproval" => {
                        round_trip::<PermissionsApprovalResponse>(&context, &result);
                    }
                    "mcpServer/elicitation/request" => {
                        round_trip::<ElicitationResponse>(&context, &result);
                    }
                    other => panic!("{context}: an answer to an unexpected request {other}"),
                }
            }
            ("codex", None, Some(id)) => {
                let id = id.as_i64().expect(&context);
                let method = client_pending
                    .remove(&id)
                    .unwrap_or_else(|| panic!("{context}: a response to no request"));
                let Some(result) = envelope.result.clone() else {
                    panic!("{context}: codex refused {method}: {:?}", envelope.error);
                };
                match method.as_str() {
                    Initialize::METHOD => {
                        let info = decode_as::<<Initialize as ClientRequest>::Response>(
                            &context, &method, result,
                        );
                        assert!(
                            info.user_agent.contains(TESTED_CODEX_VERSION),
                            "{context}: recorded from another codex: {}",
                            info.user_agent
                        );
                    }
                    ThreadStart::METHOD | ThreadResume::METHOD => {
                        decode_as::<<ThreadStart as ClientRequest>::Response>(
                            &context, &method, result,
                        );
                    }
                    TurnStart::METHOD => {
                        let started = decode_as::<<TurnStart as ClientRequest>::Response>(
                            &context, &method, result,
                        );
                        current = Some((started.turn.id.clone(), TurnState::new(started.turn.id)));
                    }
                    TurnSteer::METHOD => {
                        let steered = decode_as::<<TurnSteer as ClientRequest>::Response>(
                            &context, &method, result,
                        );
                        let running = current.as_ref().map(|(turn_id, _)| turn_id.clone());
                        assert_eq!(Some(steered.turn_id), running, "{context}");
                    }
                    TurnInterrupt::METHOD => {
                        decode_as::<<TurnInterrupt as ClientRequest>::Response>(
                            &context, &method, result,
                        );
                    }
                    other => panic!("{context}: a response to an unexpected request {other}"),
                }
            }
            ("codex", Some(method), Some(id)) => {
                let request = ServerRequest::decode(method, params)
                    .unwrap_or_else(|error| panic!("{context}: {error}"));
                assert!(
                    !matches!(request, ServerRequest::Other { .. }),
                    "{context}: {method} is a request the driver does not type"
                );
                server_pending.insert(id.to_string(), method.to_owned());
            }
            ("codex", Some(method), None) => {
                let notification = ServerNotification::decode(method, params)
                    .unwrap_or_else(|error| panic!("{context}: {error}"));
                n_notifications += 1;
                let Some((_, state)) = current.as_mut() else {
                    continue;
                };
                let view = turns.last_mut().expect(&context);
                let events = state.observe(notification);
                let usage = state.usage();
                for event in events {
                    match event {
                        TurnEvent::Delta(text) => view.deltas.push_str(&text),
                        TurnEvent::ToolStarted { tool, .. } => view.started.push(tool),
                        TurnEvent::ToolCompleted { tool, ok } => view.completed.push((tool, ok)),
                        TurnEvent::Commit { role, content, .. } => {
                            view.committed.push((role, content));
                        }
                        TurnEvent::Retry { attempt, .. } => view.retries.push(attempt),
                        // Each response's count is an event the sink adds to the store.
                        TurnEvent::Usage(call) => {
                            view.counted = Some(match view.counted.take() {
                                Some(sum) => sum.plus(call),
                                None => call,
                            });
                        }
                        TurnEvent::Ended(outcome) => {
                            view.outcome = Some(outcome.map_err(|failure| failure.code));
                            assert_eq!(
                                view.counted, usage,
                                "{context}: the usage events sum to the turn's usage"
                            );
                            view.usage = usage;
                            current = None;
                            break;
                        }
                    }
                }
            }
            (from, method, id) => {
                panic!("{context}: an unexpected message from {from}: {method:?} {id:?}")
            }
        }
    }
    assert!(n_notifications > 0, "{name}: no notifications recorded");
    turns
}

/// Decodes `value` as `T` and checks it encodes back to exactly `value`: the types carry
/// every field the driver sends.
fn round_trip<T: serde::Serialize + serde::de::DeserializeOwned>(
    context: &str,
    value: &serde_json::Value,
) -> T {
    let typed: T =
        decode("sent", value.clone()).unwrap_or_else(|error| panic!("{context}: {error}"));
    assert_eq!(&encode(&typed), value, "{context}: the types lose a field");
    typed
}

fn decode_as<T: serde::de::DeserializeOwned>(
    context: &str,
    method: &str,
    value: serde_json::Value,
) -> T {
    decode(method, value).unwrap_or_else(|error| panic!("{context}: {error}"))
}

fn texts(input: &[UserInput]) -> String {
    input
        .iter()
        .filter_map(|item| match item {
            UserInput::Text { text } => Some(text.as_str()),
            UserInput::LocalImage { .. } | UserInput::Other => None,
        })
        .collect()
}

fn replies(turns: &[TurnView]) -> Vec<(&str, Option<Result<&str, &str>>)> {
    turns
        .iter()
        .map(|turn| {
            let outcome = turn.outcome.as_ref().map(|outcome| match outcome {
                Ok(reply) => Ok(reply.as_str()),
                Err(code) => Err(code.as_str()),
            });
            (turn.input.as_str(), outcome)
        })
        .collect()
}

#[test]
fn a_text_turn_replays_into_its_reply() {
    let turns = replay("text_turn");
    assert_eq!(replies(&turns), vec![("/say hi", Some(Ok("hi")))]);
    assert_eq!(turns[0].deltas, "hi");
    assert_eq!(turns[0].committed, vec![("assistant", String::from("hi"))]);
    assert!(turns[0].started.is_empty() && turns[0].completed.is_empty());
}

#[test]
fn commands_patches_and_gateway_tools_replay_into_tool_events() {
    let turns = replay("tools");
    for (turn, tool) in turns
        .iter()
        .zip(["exec_command", "apply_patch", "session_status"])
    {
        assert_eq!(turn.started, vec![String::from(tool)]);
        assert_eq!(turn.completed, vec![(String::from(tool), true)]);
    }
    assert_eq!(turns.len(), 3);
    for (turn, tool) in turns
        .iter()
        .zip(["exec_command", "apply_patch", "session_status"])
    {
        let Some(Ok(reply)) = &turn.outcome else {
            panic!("the {tool} turn did not complete: {:?}", turn.outcome);
        };
        assert!(
            reply.starts_with(&format!("tool {tool} -> ")),
            "the mock model echoes the tool output: {reply}"
        );
    }
    // Each turn's usage sums the `last` counts of its two model responses (the tool call, then
    // the answer); the thread's running `total` of the recording is not counted twice. The
    // recording's model reports no cached input.
    let usage = |input_tokens, output_tokens, total_tokens| {
        Some(TokenUsage {
            input_tokens,
            output_tokens,
            total_tokens,
            model_calls: 2,
            ..TokenUsage::default()
        })
    };
    assert_eq!(turns[0].usage, usage(253 + 281, 1 + 20, 254 + 301));
    assert_eq!(turns[1].usage, usage(335 + 360, 1 + 18, 336 + 378));
    assert_eq!(turns[0].committed[0].0, "tool");
    assert!(
        turns[0].committed[0]
            .1
            .starts_with("$ /bin/bash -lc 'echo hi > f.txt'\nstatus: completed\nexit code: 0\n"),
        "{}",
        turns[0].committed[0].1
    );
    assert_eq!(
        turns[1].committed[0],
        (
            "tool",
            String::from("status: completed\nadd /base/harness/workspace/p.txt")
        )
    );
}

#[test]
fn a_declined_command_replays_as_a_failed_tool_and_a_completed_turn() {
    let turns = replay("declined_command");
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].started, vec![String::from("exec_command")]);
    assert_eq!(
        turns[0].completed,
        vec![(String::from("exec_command"), false)]
    );
    assert!(
        turns[0].committed[0]
            .1
            .contains("status: declined\nexit code: none"),
        "{}",
        turns[0].committed[0].1
    );
    let Some(Ok(reply)) = &turns[0].outcome else {
        panic!("the turn did not complete: {:?}", turns[0].outcome);
    };
    assert!(reply.starts_with("tool exec_command -> exec_command failed"));
}

#[test]
fn a_resumed_thread_and_a_steered_turn_replay_into_their_replies() {
    assert_eq!(
        replies(&replay("resumed_thread")),
        vec![("/say and again", Some(Ok("and again")))]
    );
    let steered = replay("steered_turn");
    assert_eq!(
        replies(&steered),
        vec![("/slow 400 one two three four five", Some(Ok("steered")))]
    );
}

#[test]
fn interrupted_and_killed_turns_replay_into_their_outcomes() {
    assert_eq!(
        replies(&replay("interrupted_and_killed")),
        vec![
            ("/say warm", Some(Ok("warm"))),
            // Codex was killed during this turn: it never completed.
            ("/hang", None),
            ("/say back", Some(Ok("back"))),
            ("/hang", Some(Err("ABORTED"))),
            ("/say still here", Some(Ok("still here"))),
            ("/hang", None),
        ]
    );
}

#[test]
fn reply_artifact_turns_replay_into_their_media_lines() {
    assert_eq!(
        replies(&replay("reply_artifacts")),
        vec![
            ("/say MEDIA:report.txt", Some(Ok("MEDIA:report.txt"))),
            ("/say MEDIA:link.txt", Some(Ok("MEDIA:link.txt"))),
            (
                "/say MEDIA:../gateway/operator-token",
                Some(Ok("MEDIA:../gateway/operator-token"))
            ),
        ]
    );
}

/// Returns the first recorded message of `fixture` with `method`.
fn recorded(fixture: &str, method: &str, item_type: Option<&str>) -> serde_json::Value {
    let path = format!(
        "{}/tests/fixtures/{fixture}.jsonl",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .map(|record| record["message"].clone())
        .find(|message| {
            message["method"] == method
                && item_type.is_none_or(|kind| message["params"]["item"]["type"] == kind)
        })
        .unwrap()
}

#[test]
fn a_renamed_or_missing_field_is_an_error_that_names_it_not_an_empty_reply() {
    let mut delta = recorded("text_turn", "item/agentMessage/delta", None)["params"].clone();
    let text = delta.as_object_mut().unwrap().remove("delta").unwrap();
    delta["textDelta"] = text;
    let error = ServerNotification::decode("item/agentMessage/delta", delta).unwrap_err();
    assert_eq!(error.method, "item/agentMessage/delta");
    assert!(error.message.contains("missing field `delta`"), "{error}");

    let mut completed =
        recorded("text_turn", "item/completed", Some("agentMessage"))["params"].clone();
    completed["item"]
        .as_object_mut()
        .unwrap()
        .remove("text")
        .unwrap();
    let error = ServerNotification::decode("item/completed", completed).unwrap_err();
    assert!(error.path.starts_with("item"), "{error}");
    assert!(error.message.contains("missing field `text`"), "{error}");

    let mut finished = recorded("text_turn", "turn/completed", None)["params"].clone();
    finished["turn"]["status"] = serde_json::json!(7);
    let error = ServerNotification::decode("turn/completed", finished).unwrap_err();
    assert_eq!(error.path, "turn.status");
}

/// An `error` with `willRetry` is a retry of the turn (numbered, with its code) counted into the
/// next response's usage; one without it is the turn's failure, not a retry.
#[test]
fn codex_retries_are_events_and_count_into_the_next_responses_usage() {
    let mut state = TurnState::new(String::from("turn-1"));
    let notify = |method: &str, params: serde_json::Value| {
        ServerNotification::decode(method, params).unwrap()
    };
    let retrying = serde_json::json!({
        "threadId": "th", "turnId": "turn-1", "willRetry": true,
        "error": {"message": "stream disconnected", "codexErrorInfo": "responseStreamDisconnected"}
    });
    for attempt in 1..=2 {
        let events = state.observe(notify("error", retrying.clone()));
        assert!(
            matches!(
                events.as_slice(),
                [TurnEvent::Retry { attempt: got, code: "MODEL_UNAVAILABLE", message }]
                    if *got == attempt && message == "stream disconnected"
            ),
            "{events:?}"
        );
    }
    let counts = serde_json::json!({"totalTokens": 12, "inputTokens": 10,
        "cachedInputTokens": 4, "outputTokens": 2});
    let events = state.observe(notify(
        "thread/tokenUsage/updated",
        serde_json::json!({"threadId": "th", "turnId": "turn-1",
            "tokenUsage": {"total": &counts, "last": &counts}}),
    ));
    let [TurnEvent::Usage(usage)] = events.as_slice() else {
        panic!("{events:?}");
    };
    assert_eq!(
        (usage.input_tokens, usage.cached_input_tokens, usage.retries),
        (6, 4, 2)
    );
    let mut failing = retrying;
    failing["willRetry"] = serde_json::json!(false);
    assert!(state.observe(notify("error", failing)).is_empty());
}
