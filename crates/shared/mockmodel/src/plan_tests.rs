use std::time::Duration;

use pretty_assertions::assert_eq;

use crate::plan::FailPlan;
use crate::plan::FlakyPlan;
use crate::plan::Plan;
use crate::plan::PlannedToolCall;
use crate::plan::PlannedToolInput;
use crate::plan::TextPlan;
use crate::plan::Usage;
use crate::plan::flaky;
use crate::plan::plan;
use crate::plan::text_deltas;
use crate::plan::usage;
use crate::plan::words;
use crate::view::ModelRequestView;
use crate::view::ViewItem;

fn user(text: &str) -> ViewItem {
    ViewItem::User {
        text: text.to_owned(),
    }
}

fn call(call_id: &str, name: &str) -> ViewItem {
    ViewItem::ToolCall {
        call_id: call_id.to_owned(),
        name: name.to_owned(),
    }
}

fn result(call_id: &str, output: &str) -> ViewItem {
    ViewItem::ToolResult {
        call_id: call_id.to_owned(),
        output: output.to_owned(),
    }
}

fn view(items: Vec<ViewItem>) -> ModelRequestView {
    ModelRequestView { items }
}

fn text(deltas: &[&str]) -> Plan {
    Plan::Text(TextPlan {
        deltas: deltas.iter().map(|delta| (*delta).to_owned()).collect(),
        delay: Duration::ZERO,
    })
}

fn function(call_id: &str, name: &str, arguments: &str) -> PlannedToolCall {
    PlannedToolCall {
        call_id: call_id.to_owned(),
        name: name.to_owned(),
        input: PlannedToolInput::Function {
            arguments: arguments.to_owned(),
        },
    }
}

#[test]
fn first_model_call_follows_the_table() {
    let cases: Vec<(&str, Plan)> = vec![
        ("/say hello", text(&["he", "llo"])),
        ("/say hello world", text(&["hello", " world"])),
        ("  /say  padded  ", text(&["pad", "ded"])),
        (
            "/tool write {\"path\":\"a.txt\",\"content\":\"x\"}",
            Plan::ToolCalls(vec![function(
                "call_1",
                "write",
                "{\"path\":\"a.txt\",\"content\":\"x\"}",
            )]),
        ),
        (
            "/tool list",
            Plan::ToolCalls(vec![function("call_1", "list", "{}")]),
        ),
        (
            "/tool bad {not json",
            Plan::ToolCalls(vec![function("call_1", "bad", "{not json")]),
        ),
        (
            "/tool apply_patch {\"input\":\"*** Begin Patch\\n*** End Patch\\n\"}",
            Plan::ToolCalls(vec![PlannedToolCall {
                call_id: String::from("call_1"),
                name: String::from("apply_patch"),
                input: PlannedToolInput::Custom {
                    input: String::from("*** Begin Patch\n*** End Patch\n"),
                },
            }]),
        ),
        ("/fail 429", Plan::Fail(FailPlan { status: 429 })),
        ("/fail 500", Plan::Fail(FailPlan { status: 500 })),
        ("/fail 200", text(&["echo:", " /fail", " 200"])),
        ("/fail x", text(&["echo:", " /fail", " x"])),
        ("/hang", Plan::Hang),
        (
            "/slow 5 one two three",
            Plan::Text(TextPlan {
                deltas: vec![
                    String::from("one"),
                    String::from(" two"),
                    String::from(" three"),
                ],
                delay: Duration::from_millis(5),
            }),
        ),
        (
            "/slow fast words",
            text(&["echo:", " /slow", " fast", " words"]),
        ),
        ("hi", text(&["echo:", " hi"])),
        ("", text(&["ech", "o: "])),
        ("/sayhello", text(&["echo:", " /sayhello"])),
        // Rows are tried top to bottom, whatever the order of the lines.
        (
            "/tool a {}\n/say first row wins",
            text(&["first", " row", " wins"]),
        ),
        ("/hang\n/fail 503", Plan::Fail(FailPlan { status: 503 })),
        ("please\n/say ok\nthanks", text(&["o", "k"])),
    ];
    for (message, expected) in cases {
        assert_eq!(plan(&view(vec![user(message)])), expected, "{message:?}");
    }
}

#[test]
fn several_tool_lines_call_each_tool_in_order() {
    let request = view(vec![user(
        "do this\n/tool read {\"path\":\"a\"}\n/tool apply_patch {\"input\":\"P\"}\n/tool read {\"path\":\"b\"}",
    )]);
    let expected = Plan::ToolCalls(vec![
        function("call_1", "read", "{\"path\":\"a\"}"),
        PlannedToolCall {
            call_id: String::from("call_2"),
            name: String::from("apply_patch"),
            input: PlannedToolInput::Custom {
                input: String::from("P"),
            },
        },
        function("call_3", "read", "{\"path\":\"b\"}"),
    ]);
    assert_eq!(plan(&request), expected);
}

#[test]
fn call_ids_continue_after_calls_earlier_in_the_conversation() {
    let request = view(vec![
        user("/tool a {}"),
        call("call_1", "a"),
        result("call_1", "done"),
        ViewItem::Assistant {
            text: String::from("tool a -> done"),
        },
        user("/tool b {}"),
    ]);
    assert_eq!(
        plan(&request),
        Plan::ToolCalls(vec![function("call_2", "b", "{}")])
    );
}

#[test]
fn tool_results_are_quoted_one_line_each() {
    let request = view(vec![
        user("/tool write {}\n/tool read {}"),
        call("call_1", "write"),
        call("call_2", "read"),
        result("call_1", "ok"),
        result("call_2", "contents"),
    ]);
    let Plan::Text(reply) = plan(&request) else {
        panic!("expected text");
    };
    assert_eq!(reply.text(), "tool write -> ok\ntool read -> contents");
    assert!(reply.deltas.len() >= 2);
}

#[test]
fn tool_result_names_fall_back_to_the_script_order() {
    let request = view(vec![
        user("/tool write {}"),
        result("unmatched", "ok"),
        result("unmatched-too", "ok"),
    ]);
    let Plan::Text(reply) = plan(&request) else {
        panic!("expected text");
    };
    assert_eq!(reply.text(), "tool write -> ok\ntool unknown -> ok");
}

#[test]
fn tool_results_are_cut_at_two_thousand_chars() {
    let long = "é".repeat(2_500);
    let request = view(vec![
        user("/tool read {}"),
        call("call_1", "read"),
        result("call_1", &long),
    ]);
    let Plan::Text(reply) = plan(&request) else {
        panic!("expected text");
    };
    assert_eq!(reply.text(), format!("tool read -> {}", "é".repeat(2_000)));
}

#[test]
fn only_the_last_user_message_counts() {
    let request = view(vec![
        user("/fail 500"),
        ViewItem::Assistant {
            text: String::from("x"),
        },
        user("/say later"),
    ]);
    assert_eq!(plan(&request), text(&["la", "ter"]));
    // Tool results before the last user message are history, not answers.
    let request = view(vec![
        user("/tool a {}"),
        call("call_1", "a"),
        result("call_1", "done"),
        user("/say next"),
    ]);
    assert_eq!(plan(&request), text(&["ne", "xt"]));
}

#[test]
fn deltas_join_back_to_the_text() {
    for sample in [
        "",
        "a",
        "ab",
        "héllo",
        "two words",
        " lead",
        "trail  ",
        "a\nb c",
        "   ",
    ] {
        assert_eq!(text_deltas(sample).concat(), sample, "{sample:?}");
        assert_eq!(words(sample).concat(), sample, "{sample:?}");
        if sample.chars().count() >= 2 {
            assert!(text_deltas(sample).len() >= 2, "{sample:?}");
        }
    }
}

#[test]
fn usage_is_deterministic() {
    let request = view(vec![user("/say hello")]);
    let reply = plan(&request);
    assert_eq!(
        usage(&request, &reply),
        Usage {
            input_tokens: 3,
            output_tokens: 2,
            ..Usage::default()
        }
    );
}

#[test]
fn error_bodies_have_the_openai_shape() {
    assert_eq!(
        FailPlan { status: 429 }.error_body(),
        serde_json::json!({
            "error": {
                "message": "mock failure with status 429",
                "type": "requests",
                "param": null,
                "code": "rate_limit_exceeded",
            }
        })
    );
}

#[test]
fn flaky_applies_only_when_its_text_is_the_answer() {
    let request = view(vec![user("/flaky 2 529 at last")]);
    assert_eq!(
        flaky(&request),
        Some(FlakyPlan {
            failures: 2,
            status: 529
        })
    );
    assert_eq!(
        match plan(&request) {
            Plan::Text(text) => text.text(),
            other => panic!("{other:?}"),
        },
        "at last"
    );
    let cases = [
        view(vec![user("/say hi\n/flaky 2 529 x")]),
        view(vec![user("/flaky 2 200 x")]),
        view(vec![user("/flaky two 529 x")]),
        view(vec![
            user("/flaky 1 529 x"),
            call("call_1", "ls"),
            result("call_1", "a"),
        ]),
    ];
    for request in cases {
        assert_eq!(flaky(&request), None, "{request:?}");
    }
}

#[test]
fn anthropic_error_bodies_name_the_error_type() {
    let body = FailPlan { status: 529 }.anthropic_error_body();
    assert_eq!(
        body,
        serde_json::json!({
            "type": "error",
            "error": {"type": "overloaded_error", "message": "mock failure with status 529"},
        })
    );
}
