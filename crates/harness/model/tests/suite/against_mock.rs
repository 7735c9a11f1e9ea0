//! The HTTP clients (OpenAI Responses, Chat Completions, Anthropic Messages) against the real mock
//! model server.

use std::sync::Mutex;
use std::time::Duration;

use gatehouse_model::Message;
use gatehouse_model::ModelApi;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelRequest;
use gatehouse_model::RetryNotice;
use gatehouse_model::RetryPolicy;
use gatehouse_model::TimeoutPhase;
use gatehouse_model::Timeouts;
use gatehouse_model::ToolCall;
use gatehouse_model::ToolInput;
use gatehouse_model::ToolKind;
use gatehouse_model::ToolSpec;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::KEY;
use crate::suite::support::Server;
use crate::suite::support::client;
use crate::suite::support::deltas;
use crate::suite::support::drain;
use crate::suite::support::quick_retry;
use crate::suite::support::refused;

const APIS: [ModelApi; 3] = [ModelApi::Responses, ModelApi::Chat, ModelApi::Anthropic];

fn user(text: &str) -> ModelRequest {
    ModelRequest {
        system: String::from("you are a test"),
        messages: vec![Message::User {
            text: text.to_owned(),
        }],
        tools: vec![
            ToolSpec {
                name: String::from("write"),
                description: String::from("writes a file"),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}),
                kind: ToolKind::Function,
            },
            ToolSpec {
                name: String::from("apply_patch"),
                description: String::from("applies a patch"),
                parameters: json!({}),
                kind: ToolKind::Freeform,
            },
        ],
        max_output_tokens: None,
    }
}

#[tokio::test]
async fn say_streams_at_least_two_deltas_that_join_to_the_text() {
    for api in APIS {
        let mock = Server::mock().await;
        let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
        let stream = client.stream(&user("/say hello")).await.unwrap();
        let (events, error) = drain(stream).await;
        assert!(error.is_none(), "{api:?}: {error:?}");
        let deltas = deltas(&events);
        assert!(deltas.len() >= 2, "{api:?}: {deltas:?}");
        assert_eq!(deltas.concat(), "hello", "{api:?}");
        let Some(ModelEvent::Completed { text, usage }) = events.last() else {
            panic!("{api:?}: no completion in {events:?}");
        };
        assert_eq!(text, "hello");
        assert!(usage.is_some_and(|usage| usage.total_tokens > 0), "{api:?}");
    }
}

#[tokio::test]
async fn a_tool_call_and_its_result_round_trip() {
    for api in APIS {
        let mock = Server::mock().await;
        let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
        let mut request = user("/tool write {\"path\":\"a.txt\",\"content\":\"x\"}");
        let (events, error) = drain(client.stream(&request).await.unwrap()).await;
        assert!(error.is_none(), "{api:?}: {error:?}");
        let call = ToolCall {
            call_id: String::from("call_1"),
            name: String::from("write"),
            input: ToolInput::Function {
                arguments_json: String::from("{\"path\":\"a.txt\",\"content\":\"x\"}"),
            },
        };
        assert_eq!(
            events,
            [
                ModelEvent::ToolCall(call.clone()),
                ModelEvent::Completed {
                    text: String::new(),
                    usage: events.last().and_then(|event| match event {
                        ModelEvent::Completed { usage, .. } => *usage,
                        ModelEvent::TextDelta(_) | ModelEvent::ToolCall(_) => None,
                    }),
                },
            ],
            "{api:?}"
        );

        request.messages.push(Message::ToolCall(call));
        request.messages.push(Message::ToolResult {
            call_id: String::from("call_1"),
            output: String::from("wrote 1 byte"),
        });
        let (events, error) = drain(client.stream(&request).await.unwrap()).await;
        assert!(error.is_none(), "{api:?}: {error:?}");
        assert_eq!(
            deltas(&events).concat(),
            "tool write -> wrote 1 byte",
            "{api:?}"
        );

        // The second request carried the call and its output in the API's own shape.
        let recorded = mock.recorded().await;
        assert_eq!(recorded.len(), 2);
        let body = &recorded[1].body;
        match api {
            ModelApi::Responses => {
                assert_eq!(body["instructions"], "you are a test");
                assert_eq!(body["input"][1]["type"], "function_call");
                assert_eq!(
                    body["input"][2],
                    json!({"type": "function_call_output", "call_id": "call_1", "output": "wrote 1 byte"})
                );
            }
            ModelApi::Chat => {
                assert_eq!(
                    body["messages"][0],
                    json!({"role": "system", "content": "you are a test"})
                );
                assert_eq!(body["messages"][2]["tool_calls"][0]["id"], "call_1");
                assert_eq!(
                    body["messages"][3],
                    json!({"role": "tool", "tool_call_id": "call_1", "content": "wrote 1 byte"})
                );
            }
            ModelApi::Anthropic => {
                assert_eq!(
                    body["system"],
                    json!([{"type": "text", "text": "you are a test", "cache_control": {"type": "ephemeral"}}])
                );
                assert_eq!(
                    body["messages"][1]["content"][0],
                    json!({"type": "tool_use", "id": "call_1", "name": "write", "input": {"path": "a.txt", "content": "x"}})
                );
                assert_eq!(
                    body["messages"][2],
                    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "wrote 1 byte"}]})
                );
            }
            ModelApi::Mock => unreachable!(),
        }
    }
}

#[tokio::test]
async fn apply_patch_is_a_freeform_call() {
    for api in APIS {
        let mock = Server::mock().await;
        let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
        let patch = "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch\n";
        let script = format!("/tool apply_patch {}", json!({ "input": patch }));
        let mut request = user(&script);
        let (events, error) = drain(client.stream(&request).await.unwrap()).await;
        assert!(error.is_none(), "{api:?}: {error:?}");
        let call = ToolCall {
            call_id: String::from("call_1"),
            name: String::from("apply_patch"),
            input: ToolInput::Freeform {
                input: patch.to_owned(),
            },
        };
        assert_eq!(events[0], ModelEvent::ToolCall(call.clone()), "{api:?}");

        request.messages.push(Message::ToolCall(call));
        request.messages.push(Message::ToolResult {
            call_id: String::from("call_1"),
            output: String::from("Success."),
        });
        let (events, _) = drain(client.stream(&request).await.unwrap()).await;
        assert_eq!(
            deltas(&events).concat(),
            "tool apply_patch -> Success.",
            "{api:?}"
        );
        let recorded = mock.recorded().await;
        let body = &recorded[1].body;
        if api == ModelApi::Responses {
            // A freeform tool is offered as a custom tool, and its call and output go back as such.
            assert_eq!(
                body["tools"][1],
                json!({"type": "custom", "name": "apply_patch", "description": "applies a patch", "format": {"type": "text"}})
            );
            assert_eq!(body["input"][1]["type"], "custom_tool_call");
            assert_eq!(body["input"][1]["input"], patch);
            assert_eq!(body["input"][2]["type"], "custom_tool_call_output");
        } else if api == ModelApi::Anthropic {
            // Offered as a tool with one string `input`, the last tool, which marks the cache.
            assert_eq!(
                body["tools"][1]["input_schema"]["required"],
                json!(["input"])
            );
            assert_eq!(
                body["tools"][1]["cache_control"],
                json!({"type": "ephemeral"})
            );
            assert_eq!(
                body["messages"][1]["content"][0]["input"],
                json!({ "input": patch })
            );
        } else {
            assert_eq!(
                body["tools"][1]["function"]["parameters"]["required"],
                json!(["input"])
            );
            assert_eq!(
                body["messages"][2]["tool_calls"][0]["function"]["arguments"],
                json!({ "input": patch }).to_string()
            );
        }
    }
}

#[tokio::test]
async fn status_429_is_rate_limited_after_two_retries() {
    for api in APIS {
        let mock = Server::mock().await;
        let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
        let error = refused(client.stream(&user("/fail 429")).await);
        assert_eq!(error.code(), ErrorCode::ModelRateLimited, "{api:?}");
        assert_eq!(
            error.to_string(),
            "model answered with status 429: mock failure with status 429"
        );
        assert_eq!(
            mock.recorded().await.len(),
            3,
            "{api:?}: one try and two retries"
        );
    }
}

#[tokio::test]
async fn status_401_is_an_auth_failure_without_retry() {
    for api in APIS {
        let mock = Server::mock().await;
        let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
        for status in ["401", "403"] {
            let error = refused(client.stream(&user(&format!("/fail {status}"))).await);
            assert_eq!(error.code(), ErrorCode::ModelAuthFailed, "{api:?} {status}");
        }
        assert_eq!(mock.recorded().await.len(), 2, "{api:?}: no retries");
    }
}

#[tokio::test]
async fn status_500_is_unavailable_after_retries() {
    for api in APIS {
        let mock = Server::mock().await;
        let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
        let error = refused(client.stream(&user("/fail 500")).await);
        assert_eq!(error.code(), ErrorCode::ModelUnavailable, "{api:?}");
        assert_eq!(mock.recorded().await.len(), 3, "{api:?}");
        // Other client errors are neither retried nor called unavailable.
        let error = refused(client.stream(&user("/fail 400")).await);
        assert_eq!(error.code(), ErrorCode::ModelBadResponse, "{api:?}");
        assert_eq!(mock.recorded().await.len(), 4, "{api:?}");
    }
}

#[tokio::test]
async fn a_hanging_stream_times_out_as_unavailable() {
    for api in APIS {
        let mock = Server::mock().await;
        let timeouts = Timeouts {
            idle: Duration::from_millis(300),
            ..Timeouts::default()
        };
        let client = client(api, &mock.base_url, timeouts, quick_retry());
        let stream = client.stream(&user("/hang")).await.unwrap();
        // The keep-alive comments do not count as events, so the idle timeout fires.
        let (events, error) = drain(stream).await;
        assert_eq!(events, [], "{api:?}");
        let error = error.unwrap();
        assert_eq!(error.code(), ErrorCode::ModelUnavailable, "{api:?}");
        assert!(
            matches!(
                error,
                gatehouse_model::ModelError::Timeout {
                    phase: TimeoutPhase::Idle
                }
            ),
            "{api:?}: {error:?}"
        );
        // A timeout after the stream started is not retried.
        assert_eq!(mock.recorded().await.len(), 1, "{api:?}");
    }
}

#[tokio::test]
async fn the_key_reaches_the_model_as_a_bearer_token() {
    for api in APIS {
        let mock = Server::mock().await;
        let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
        drain(client.stream(&user("hi")).await.unwrap()).await;
        let recorded = mock.recorded().await;
        assert_eq!(recorded.len(), 1);
        let request = &recorded[0];
        let path = match api {
            ModelApi::Responses => "/v1/responses",
            ModelApi::Chat | ModelApi::Mock => "/v1/chat/completions",
            ModelApi::Anthropic => "/v1/messages",
        };
        assert_eq!(
            (request.method.as_str(), request.path.as_str()),
            ("POST", path)
        );
        if api == ModelApi::Anthropic {
            assert_eq!(request.headers["x-api-key"], KEY);
            assert_eq!(request.headers["anthropic-version"], "2023-06-01");
            assert!(!request.headers.contains_key("authorization"));
            assert_eq!(request.body["max_tokens"], 8192);
        } else {
            assert_eq!(request.headers["authorization"], format!("Bearer {KEY}"));
        }
        assert_eq!(request.body["model"], "mock-model");
        assert_eq!(request.body["stream"], true);
        assert!(!format!("{client:?}").contains(KEY));
    }
}

#[tokio::test]
async fn an_unreachable_model_is_unavailable_after_retries() {
    // Bind a port, then free it, so that connecting is refused.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    for api in APIS {
        let client = client(
            api,
            &format!("http://{address}/v1"),
            Timeouts::default(),
            RetryPolicy::new(Duration::from_millis(5), Duration::from_millis(5), 2),
        );
        let error = refused(client.stream(&user("hi")).await);
        assert_eq!(error.code(), ErrorCode::ModelUnavailable, "{api:?}");
        assert!(error.is_retryable(), "{api:?}: {error:?}");
    }
}

#[tokio::test]
async fn the_output_limit_goes_in_each_apis_field() {
    for (api, field) in [
        (ModelApi::Responses, "max_output_tokens"),
        (ModelApi::Chat, "max_completion_tokens"),
        (ModelApi::Anthropic, "max_tokens"),
    ] {
        let mock = Server::mock().await;
        let client = client(api, &mock.base_url, Timeouts::default(), quick_retry());
        let mut request = user("/say hi");
        request.max_output_tokens = Some(77);
        drain(client.stream(&request).await.unwrap()).await;
        let recorded = mock.recorded().await;
        assert_eq!(recorded[0].body[field], 77, "{api:?}");
        // Without a limit, only Anthropic (which requires one) sends the field.
        drain(client.stream(&user("/say hi")).await.unwrap()).await;
        let recorded = mock.recorded().await;
        assert_eq!(
            recorded[1].body.get(field).is_some(),
            api == ModelApi::Anthropic,
            "{api:?}"
        );
    }
}

#[tokio::test]
async fn a_flaky_answer_is_retried_to_success_and_each_retry_is_observed() {
    for (api, status) in [
        (ModelApi::Responses, 503),
        (ModelApi::Chat, 429),
        (ModelApi::Anthropic, 529),
    ] {
        let mock = Server::mock().await;
        // A policy pause of a minute: only the mock's `Retry-After: 0` keeps this quick.
        let retry = RetryPolicy::new(Duration::from_secs(60), Duration::from_secs(60), 2);
        let client = client(api, &mock.base_url, Timeouts::default(), retry);
        let notices = Mutex::new(Vec::new());
        let on_retry = |notice: &RetryNotice| notices.lock().unwrap().push(notice.clone());
        let request = user(&format!("/flaky 2 {status} back again"));
        let stream = tokio::time::timeout(
            Duration::from_secs(20),
            client.stream_observing(&request, &on_retry),
        )
        .await
        .expect("the Retry-After of 0 was not honoured")
        .unwrap();
        let (events, error) = drain(stream).await;
        assert!(error.is_none(), "{api:?}: {error:?}");
        assert_eq!(deltas(&events).concat(), "back again", "{api:?}");
        let code = match status {
            429 => ErrorCode::ModelRateLimited,
            _ => ErrorCode::ModelUnavailable,
        };
        let message =
            format!("model answered with status {status}: mock failure with status {status}");
        assert_eq!(
            notices.into_inner().unwrap(),
            [1, 2].map(|attempt| RetryNotice {
                attempt,
                code,
                message: message.clone(),
                delay: Duration::ZERO,
            }),
            "{api:?}"
        );
        assert_eq!(mock.recorded().await.len(), 3, "{api:?}");
    }
}

#[tokio::test]
async fn anthropic_overloaded_is_unavailable_after_retries() {
    let mock = Server::mock().await;
    let client = client(
        ModelApi::Anthropic,
        &mock.base_url,
        Timeouts::default(),
        quick_retry(),
    );
    let error = refused(client.stream(&user("/fail 529")).await);
    assert_eq!(error.code(), ErrorCode::ModelUnavailable);
    assert_eq!(
        error.to_string(),
        "model answered with status 529: mock failure with status 529"
    );
    assert_eq!(mock.recorded().await.len(), 3, "one try and two retries");
}

#[tokio::test]
async fn anthropic_reads_the_cached_prefix_on_the_second_call() {
    let mock = Server::mock().await;
    let client = client(
        ModelApi::Anthropic,
        &mock.base_url,
        Timeouts::default(),
        quick_retry(),
    );
    let mut usages = Vec::new();
    for text in ["/say one", "/say two"] {
        let (events, error) = drain(client.stream(&user(text)).await.unwrap()).await;
        assert!(error.is_none(), "{error:?}");
        let Some(ModelEvent::Completed {
            usage: Some(usage), ..
        }) = events.last()
        else {
            panic!("no usage in {events:?}");
        };
        usages.push(*usage);
    }
    // The first call writes the prefix (system prompt and tools): uncached input; the second
    // reads the same prefix from the cache.
    assert_eq!(usages[0].cached_input_tokens, 0);
    assert!(usages[1].cached_input_tokens > 0, "{usages:?}");
    assert_eq!(
        usages[0].input_tokens,
        usages[1].input_tokens + usages[1].cached_input_tokens
    );
    for usage in &usages {
        assert_eq!(
            usage.total_tokens,
            usage.input_tokens + usage.cached_input_tokens + usage.output_tokens
        );
    }
}
