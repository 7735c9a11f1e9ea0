use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use gatehouse_model::ModelClient;
use gatehouse_model::ModelError;
use gatehouse_model::ModelEvent;
use gatehouse_model::ModelEventStream;
use gatehouse_model::ModelRequest;
use gatehouse_model::RetryNotice;
use gatehouse_model::RetryObserver;
use gatehouse_model::Usage;
use gatehouse_model::broker::BrokerEvent;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::worker::TokenUsage;
use gatehouse_protocol::worker::WorkerEvent;
use gatehouse_protocol::worker::WorkerRequest;
use pretty_assertions::assert_eq;

use crate::broker::BrokerAction;
use crate::broker::TurnBroker;

/// What one call of a [`ScriptedClient`] does.
struct Script {
    retries: Vec<RetryNotice>,
    events: Vec<Result<ModelEvent, ModelError>>,
}

/// A provider that answers each call by its next script and records the requests it got.
#[derive(Default)]
struct ScriptedClient {
    scripts: Mutex<VecDeque<Script>>,
    requests: Mutex<Vec<ModelRequest>>,
}

impl std::fmt::Debug for ScriptedClient {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("ScriptedClient")
    }
}

#[async_trait::async_trait]
impl ModelClient for ScriptedClient {
    async fn stream(&self, request: &ModelRequest) -> gatehouse_model::Result<ModelEventStream> {
        self.stream_observing(request, &|_| {}).await
    }

    async fn stream_observing(
        &self,
        request: &ModelRequest,
        on_retry: &RetryObserver<'_>,
    ) -> gatehouse_model::Result<ModelEventStream> {
        self.requests.lock().unwrap().push(request.clone());
        let script = self.scripts.lock().unwrap().pop_front().unwrap();
        for notice in &script.retries {
            on_retry(notice);
        }
        Ok(Box::pin(futures_util::stream::iter(script.events)))
    }

    fn model(&self) -> &str {
        "scripted"
    }
}

fn scripted(scripts: Vec<Script>) -> Arc<ScriptedClient> {
    Arc::new(ScriptedClient {
        scripts: Mutex::new(scripts.into()),
        requests: Mutex::default(),
    })
}

fn answer(text: &str, usage: Usage) -> Script {
    Script {
        retries: Vec::new(),
        events: vec![
            Ok(ModelEvent::TextDelta(text.to_owned())),
            Ok(ModelEvent::Completed {
                text: text.to_owned(),
                usage: Some(usage),
            }),
        ],
    }
}

fn request_json() -> serde_json::Value {
    serde_json::to_value(ModelRequest::default()).unwrap()
}

fn event(id: u64, event: BrokerEvent) -> BrokerAction {
    BrokerAction::ToWorker(WorkerRequest::ModelEvent {
        id,
        event: serde_json::to_value(event).unwrap(),
    })
}

fn failed_code(action: &BrokerAction) -> Option<ErrorCode> {
    let BrokerAction::ToWorker(WorkerRequest::ModelEvent { event, .. }) = action else {
        return None;
    };
    match serde_json::from_value::<BrokerEvent>(event.clone()).ok()? {
        BrokerEvent::Failed { code, .. } => Some(code),
        _ => None,
    }
}

/// Collects the broker's actions until the open call ends.
async fn run_to_end(broker: &mut TurnBroker) -> Vec<BrokerAction> {
    let mut actions = Vec::new();
    loop {
        let next = tokio::time::timeout(Duration::from_secs(10), broker.next_actions())
            .await
            .expect("the call never ended");
        let ended = next.iter().any(|action| match action {
            BrokerAction::ToWorker(WorkerRequest::ModelEvent { event, .. }) => {
                serde_json::from_value::<BrokerEvent>(event.clone()).is_ok_and(|e| e.is_last())
            }
            _ => false,
        });
        actions.extend(next);
        if ended {
            return actions;
        }
    }
}

fn call_usage(usage: Usage, retries: u64) -> TokenUsage {
    TokenUsage {
        input_tokens: usage.input_tokens,
        cached_input_tokens: usage.cached_input_tokens,
        output_tokens: usage.output_tokens,
        total_tokens: usage.total_tokens,
        model_calls: 1,
        retries,
        model: Some(String::from("scripted")),
    }
}

#[tokio::test]
async fn an_answered_call_streams_each_event_and_reports_the_providers_usage_first() {
    let retry = RetryNotice {
        attempt: 1,
        code: ErrorCode::ModelRateLimited,
        message: String::from("model answered with status 429"),
        delay: Duration::from_millis(250),
    };
    let usage = Usage::new(11, 5, 3);
    let client = scripted(vec![Script {
        retries: vec![retry.clone()],
        events: vec![
            Ok(ModelEvent::TextDelta(String::from("hel"))),
            Ok(ModelEvent::TextDelta(String::from("lo"))),
            Ok(ModelEvent::Completed {
                text: String::from("hello"),
                usage: Some(usage),
            }),
        ],
    }]);
    let mut broker = TurnBroker::new(Ok(client), None);
    assert_eq!(broker.start(7, request_json()), Vec::new());
    let actions = run_to_end(&mut broker).await;
    assert_eq!(
        actions,
        vec![
            event(7, BrokerEvent::from_retry(&retry)),
            event(
                7,
                BrokerEvent::TextDelta {
                    text: String::from("hel")
                }
            ),
            event(
                7,
                BrokerEvent::TextDelta {
                    text: String::from("lo")
                }
            ),
            BrokerAction::ToGateway(WorkerEvent::ModelUsage {
                usage: call_usage(usage, 1)
            }),
            event(
                7,
                BrokerEvent::Completed {
                    text: String::from("hello"),
                    usage: Some(usage),
                }
            ),
        ]
    );
    assert_eq!(broker.usage(), Some(&call_usage(usage, 1)));
    assert_eq!(broker.exceeded(), None);
}

#[tokio::test]
async fn the_ceiling_caps_each_calls_output_and_refuses_calls_once_passed() {
    let client = scripted(vec![
        answer("a", Usage::new(20, 0, 10)),
        answer("b", Usage::new(50, 20, 30)),
    ]);
    let mut broker = TurnBroker::new(Ok(Arc::clone(&client) as Arc<dyn ModelClient>), Some(100));
    let request = ModelRequest {
        max_output_tokens: Some(1000),
        ..ModelRequest::default()
    };
    assert_eq!(
        broker.start(1, serde_json::to_value(&request).unwrap()),
        Vec::new()
    );
    run_to_end(&mut broker).await;
    assert_eq!(broker.start(2, request_json()), Vec::new());
    run_to_end(&mut broker).await;
    let limits: Vec<Option<u64>> = client
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|request| request.max_output_tokens)
        .collect();
    // The first asked for 1000 of the 100 left, the second for none of the 70 left.
    assert_eq!(limits, vec![Some(100), Some(70)]);
    assert_eq!(broker.usage().map(|usage| usage.total_tokens), Some(130));
    assert_eq!(
        broker.exceeded().map(|error| error.code),
        Some(String::from("TURN_BUDGET_EXCEEDED"))
    );
    let refused = broker.start(3, request_json());
    assert_eq!(refused.len(), 1);
    assert_eq!(
        failed_code(&refused[0]),
        Some(ErrorCode::TurnBudgetExceeded)
    );
    // The refused call never reached the provider.
    assert_eq!(client.requests.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_call_cut_at_the_capped_output_limit_is_turn_budget_exceeded() {
    let incomplete = || Script {
        retries: Vec::new(),
        events: vec![Err(ModelError::Incomplete {
            reason: String::from("max_output_tokens"),
        })],
    };
    let mut capped = TurnBroker::new(Ok(scripted(vec![incomplete()])), Some(50));
    capped.start(1, request_json());
    let actions = run_to_end(&mut capped).await;
    assert_eq!(
        failed_code(&actions[0]),
        Some(ErrorCode::TurnBudgetExceeded)
    );
    // Without a ceiling it is the provider's error.
    let mut free = TurnBroker::new(Ok(scripted(vec![incomplete()])), None);
    free.start(1, request_json());
    let actions = run_to_end(&mut free).await;
    assert_eq!(failed_code(&actions[0]), Some(ErrorCode::ModelBadResponse));
}

#[tokio::test]
async fn garbage_a_second_open_call_and_a_missing_model_are_refused_with_codes() {
    let client = scripted(vec![answer("a", Usage::new(1, 0, 1))]);
    let mut broker = TurnBroker::new(Ok(client), None);
    let garbage = broker.start(1, serde_json::json!({"messages": "nonsense"}));
    assert_eq!(failed_code(&garbage[0]), Some(ErrorCode::InvalidRequest));
    assert_eq!(broker.start(2, request_json()), Vec::new());
    let second = broker.start(3, request_json());
    assert_eq!(failed_code(&second[0]), Some(ErrorCode::InvalidRequest));
    run_to_end(&mut broker).await;

    let mut without = TurnBroker::new(
        Err(WireError::new(
            ErrorCode::ModelAuthFailed,
            "model api key variable K is unset or empty",
        )),
        None,
    );
    let refused = without.start(1, request_json());
    assert_eq!(failed_code(&refused[0]), Some(ErrorCode::ModelAuthFailed));
}

#[tokio::test]
async fn a_provider_gone_mid_stream_ends_the_call_with_a_code_and_counts_nothing() {
    let client = scripted(vec![
        Script {
            retries: Vec::new(),
            events: vec![
                Ok(ModelEvent::TextDelta(String::from("par"))),
                Err(ModelError::Timeout {
                    phase: gatehouse_model::TimeoutPhase::Idle,
                }),
            ],
        },
        // A stream that stops without its completion.
        Script {
            retries: Vec::new(),
            events: vec![Ok(ModelEvent::TextDelta(String::from("x")))],
        },
    ]);
    let mut broker = TurnBroker::new(Ok(client), None);
    broker.start(1, request_json());
    let actions = run_to_end(&mut broker).await;
    assert_eq!(actions.len(), 2);
    assert_eq!(failed_code(&actions[1]), Some(ErrorCode::ModelUnavailable));
    broker.start(2, request_json());
    let actions = run_to_end(&mut broker).await;
    assert_eq!(failed_code(&actions[1]), Some(ErrorCode::ModelBadResponse));
    assert_eq!(broker.usage(), None);
}

#[tokio::test]
async fn without_an_open_call_the_broker_waits() {
    let mut broker = TurnBroker::new(Ok(scripted(Vec::new())), None);
    let waited = tokio::time::timeout(Duration::from_millis(50), broker.next_actions()).await;
    assert!(waited.is_err());
}
