use std::sync::Arc;
use std::sync::Mutex;

use futures_util::StreamExt;
use gatehouse_protocol::error::ErrorCode;
use pretty_assertions::assert_eq;

use crate::Message;
use crate::ModelClient;
use crate::ModelError;
use crate::ModelEvent;
use crate::ModelRequest;
use crate::RetryNotice;
use crate::ToolCall;
use crate::ToolInput;
use crate::ToolKind;
use crate::ToolSpec;
use crate::Usage;
use crate::broker::BrokerEvent;
use crate::broker::BrokerInbox;
use crate::broker::BrokeredClient;

/// A client whose sent calls are recorded, with the inbox the test delivers events to.
fn client() -> (BrokeredClient, Arc<BrokerInbox>, Arc<Mutex<Vec<u64>>>) {
    let inbox = Arc::new(BrokerInbox::default());
    let sent = Arc::new(Mutex::new(Vec::new()));
    let record = Arc::clone(&sent);
    let client = BrokeredClient::new(
        String::from("m"),
        Arc::new(move |id, _request: &ModelRequest| {
            record.lock().unwrap().push(id);
            Ok(())
        }),
        Arc::clone(&inbox),
    );
    (client, inbox, sent)
}

#[test]
fn a_request_and_every_event_survive_their_json() {
    let request = ModelRequest {
        system: String::from("sys"),
        messages: vec![
            Message::User {
                text: String::from("hi"),
            },
            Message::Assistant {
                text: String::from("yo"),
            },
            Message::ToolCall(ToolCall {
                call_id: String::from("c1"),
                name: String::from("exec"),
                input: ToolInput::Function {
                    arguments_json: String::from("{\"command\":\"ls\"}"),
                },
            }),
            Message::ToolCall(ToolCall {
                call_id: String::from("c2"),
                name: String::from("apply_patch"),
                input: ToolInput::Freeform {
                    input: String::from("*** Begin Patch"),
                },
            }),
            Message::ToolResult {
                call_id: String::from("c1"),
                output: String::from("out"),
            },
        ],
        tools: vec![ToolSpec {
            name: String::from("exec"),
            description: String::from("runs"),
            parameters: serde_json::json!({"type": "object"}),
            kind: ToolKind::Freeform,
        }],
        max_output_tokens: Some(7),
    };
    let json = serde_json::to_string(&request).unwrap();
    assert_eq!(
        serde_json::from_str::<ModelRequest>(&json).unwrap(),
        request
    );
    let events = vec![
        BrokerEvent::Retry {
            attempt: 1,
            code: ErrorCode::ModelRateLimited,
            message: String::from("429"),
            delay_ms: 500,
        },
        BrokerEvent::TextDelta {
            text: String::from("a"),
        },
        BrokerEvent::ToolCall {
            call: ToolCall {
                call_id: String::from("c"),
                name: String::from("ls"),
                input: ToolInput::Function {
                    arguments_json: String::from("{}"),
                },
            },
        },
        BrokerEvent::Completed {
            text: String::from("a"),
            usage: Some(Usage::new(1, 2, 3)),
        },
        BrokerEvent::Failed {
            code: ErrorCode::TurnBudgetExceeded,
            message: String::from("over"),
        },
    ];
    for event in events {
        let json = serde_json::to_string(&event).unwrap();
        assert_eq!(serde_json::from_str::<BrokerEvent>(&json).unwrap(), event);
    }
}

#[test]
fn garbage_is_refused_by_the_wire_types() {
    for line in [
        "",
        "nonsense",
        "{\"type\":\"textDelta\"}",
        "{\"type\":\"unknown\",\"text\":\"a\"}",
        "{\"type\":\"failed\",\"code\":\"NO_SUCH_CODE_AT_ALL\",\"message\":\"m\"}",
        "{\"type\":\"textDelta\",\"text\":\"a\",\"extra\":1}",
    ] {
        assert!(
            serde_json::from_str::<BrokerEvent>(line).is_err(),
            "{line} was accepted"
        );
    }
    assert!(serde_json::from_str::<ModelRequest>("{\"system\":\"s\",\"key\":\"x\"}").is_err());
}

#[tokio::test]
async fn retries_reach_the_observer_and_deltas_stream_in_order() {
    let (client, inbox, sent) = client();
    let deliver = {
        let inbox = Arc::clone(&inbox);
        let sent = Arc::clone(&sent);
        tokio::spawn(async move {
            // Waits for the call to be sent, then answers it.
            let id = loop {
                if let Some(id) = sent.lock().unwrap().first().copied() {
                    break id;
                }
                tokio::task::yield_now().await;
            };
            for event in [
                BrokerEvent::Retry {
                    attempt: 1,
                    code: ErrorCode::ModelUnavailable,
                    message: String::from("529"),
                    delay_ms: 5,
                },
                BrokerEvent::TextDelta {
                    text: String::from("he"),
                },
                BrokerEvent::TextDelta {
                    text: String::from("llo"),
                },
                BrokerEvent::Completed {
                    text: String::from("hello"),
                    usage: Some(Usage::new(10, 4, 2)),
                },
            ] {
                assert!(inbox.deliver(id, event));
            }
            // A late event of the ended call is dropped.
            assert!(!inbox.deliver(
                id,
                BrokerEvent::TextDelta {
                    text: String::from("late"),
                }
            ));
        })
    };
    let notices = Mutex::new(Vec::new());
    let on_retry = |notice: &RetryNotice| notices.lock().unwrap().push(notice.clone());
    let stream = client
        .stream_observing(&ModelRequest::default(), &on_retry)
        .await
        .unwrap();
    let events: Vec<ModelEvent> = stream.map(Result::unwrap).collect().await;
    deliver.await.unwrap();
    assert_eq!(
        events,
        vec![
            ModelEvent::TextDelta(String::from("he")),
            ModelEvent::TextDelta(String::from("llo")),
            ModelEvent::Completed {
                text: String::from("hello"),
                usage: Some(Usage::new(10, 4, 2)),
            },
        ]
    );
    assert_eq!(
        notices.into_inner().unwrap(),
        vec![RetryNotice {
            attempt: 1,
            code: ErrorCode::ModelUnavailable,
            message: String::from("529"),
            delay: std::time::Duration::from_millis(5),
        }]
    );
}

#[tokio::test]
async fn a_refusal_before_the_answer_is_the_calls_error_with_the_brokers_code() {
    let (client, inbox, sent) = client();
    let answer = tokio::spawn(async move {
        let id = loop {
            if let Some(id) = sent.lock().unwrap().first().copied() {
                break id;
            }
            tokio::task::yield_now().await;
        };
        inbox.deliver(
            id,
            BrokerEvent::Failed {
                code: ErrorCode::TurnBudgetExceeded,
                message: String::from("the turn used its tokens"),
            },
        );
    });
    let Err(error) = client.stream(&ModelRequest::default()).await else {
        panic!("the call did not fail");
    };
    answer.await.unwrap();
    assert_eq!(error.code(), ErrorCode::TurnBudgetExceeded);
}

#[tokio::test]
async fn a_broker_gone_mid_stream_ends_the_call_with_model_unavailable() {
    let (client, inbox, sent) = client();
    let answer = {
        let inbox = Arc::clone(&inbox);
        tokio::spawn(async move {
            let id = loop {
                if let Some(id) = sent.lock().unwrap().first().copied() {
                    break id;
                }
                tokio::task::yield_now().await;
            };
            inbox.deliver(
                id,
                BrokerEvent::TextDelta {
                    text: String::from("par"),
                },
            );
            inbox.close();
        })
    };
    let Ok(mut stream) = client.stream(&ModelRequest::default()).await else {
        panic!("the call did not open");
    };
    answer.await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        ModelEvent::TextDelta(String::from("par"))
    );
    let error = stream.next().await.unwrap().unwrap_err();
    assert_eq!(error.code(), ErrorCode::ModelUnavailable);
    assert!(stream.next().await.is_none());
    // Every later call fails at once.
    let Err(error) = client.stream(&ModelRequest::default()).await else {
        panic!("the call did not fail");
    };
    assert_eq!(error.code(), ErrorCode::ModelUnavailable);
}

#[tokio::test]
async fn a_call_that_cannot_be_sent_fails_with_the_senders_error() {
    let client = BrokeredClient::new(
        String::from("m"),
        Arc::new(|_, _: &ModelRequest| {
            Err(ModelError::Brokered {
                code: ErrorCode::WorkerLineTooLong,
                message: String::from("too long"),
            })
        }),
        Arc::new(BrokerInbox::default()),
    );
    let Err(error) = client.stream(&ModelRequest::default()).await else {
        panic!("the call did not fail");
    };
    assert_eq!(error.code(), ErrorCode::WorkerLineTooLong);
}
