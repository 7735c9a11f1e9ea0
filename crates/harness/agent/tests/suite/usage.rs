//! Usage per model call, retries and the turn's token ceiling, against the mock model's HTTP
//! server (Anthropic and OpenAI Responses shapes).

use std::sync::Arc;
use std::time::Duration;

use gatehouse_agent::AgentError;
use gatehouse_agent::AgentEvent;
use gatehouse_agent::ToolSet;
use gatehouse_agent::TurnOutput;
use gatehouse_agent::TurnRequest;
use gatehouse_mockmodel::RecordedRequest;
use gatehouse_mockmodel::Recorder;
use gatehouse_model::ModelApi;
use gatehouse_model::ModelClient;
use gatehouse_model::ModelConfig;
use gatehouse_model::RetryPolicy;
use gatehouse_model::Timeouts;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::worker::TokenUsage;
use pretty_assertions::assert_eq;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use crate::suite::support::Session;
use crate::suite::support::WAIT_LIMIT;

/// The mock model's HTTP server on `127.0.0.1:0`, stopped when dropped.
struct MockServer {
    base_url: String,
    recorder: Recorder,
    _shutdown: oneshot::Sender<()>,
}

impl MockServer {
    async fn start() -> MockServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base_url = format!("http://{}/v1", listener.local_addr().unwrap());
        let recorder = Recorder::default();
        let (shutdown, shutdown_receiver) = oneshot::channel::<()>();
        tokio::spawn(gatehouse_mockmodel::serve_with_recorder(
            listener,
            recorder.clone(),
            async move {
                let _ = shutdown_receiver.await;
            },
        ));
        MockServer {
            base_url,
            recorder,
            _shutdown: shutdown,
        }
    }

    /// Returns a client of `api` for this server, with quick retries.
    fn client(&self, api: ModelApi) -> Arc<dyn ModelClient> {
        let config = ModelConfig {
            api,
            base_url: self.base_url.clone(),
            model: String::from("mock-model"),
            key_env: String::from("TEST_MODEL_KEY"),
            timeouts: Timeouts::default(),
            retry: RetryPolicy::new(Duration::from_millis(10), Duration::from_millis(20), 2),
        };
        config
            .build_with_env(&|_| Some(String::from("sk-test")))
            .unwrap()
    }

    fn requests(&self) -> Vec<RecordedRequest> {
        self.recorder.requests()
    }
}

/// Runs one turn of `model` with `user_text` and the ceiling `max_turn_tokens`.
async fn turn(
    model: &dyn ModelClient,
    session: &Session,
    user_text: &str,
    max_turn_tokens: Option<u64>,
) -> (Vec<AgentEvent>, Result<TurnOutput, AgentError>) {
    let ctx = session.files_only();
    let request = TurnRequest {
        system: String::from("you are a test"),
        history: Vec::new(),
        user_texts: vec![user_text.to_owned()],
        max_turn_tokens,
    };
    let mut events = Vec::new();
    let result = tokio::time::timeout(
        WAIT_LIMIT,
        gatehouse_agent::run_turn(
            model,
            request,
            &ToolSet::native(),
            &ctx,
            &mut |event| events.push(event),
            &CancellationToken::new(),
        ),
    )
    .await
    .expect("the turn finishes in time");
    (events, result)
}

/// Returns the usage of every `ModelUsage` event, in order.
fn call_usages(events: &[AgentEvent]) -> Vec<TokenUsage> {
    events
        .iter()
        .filter_map(|event| match event {
            AgentEvent::ModelUsage { usage } => Some(usage.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_text_turn_reports_one_model_call() {
    let mock = MockServer::start().await;
    let model = mock.client(ModelApi::Anthropic);
    let session = Session::new();
    let (events, result) = turn(model.as_ref(), &session, "/say hi", None).await;
    let output = result.unwrap();
    assert_eq!(output.reply, "hi");
    let usages = call_usages(&events);
    assert_eq!(usages.len(), 1, "{events:?}");
    let usage = &usages[0];
    assert_eq!(
        (usage.model_calls, usage.retries, usage.model.as_deref()),
        (1, 0, Some("mock-model"))
    );
    assert!(usage.total_tokens > 0);
    assert_eq!(output.usage.as_ref(), Some(usage));
}

#[tokio::test]
async fn a_one_tool_turn_reports_two_calls_and_the_second_reads_the_cache() {
    let mock = MockServer::start().await;
    let model = mock.client(ModelApi::Anthropic);
    let session = Session::new();
    let (events, result) = turn(model.as_ref(), &session, "/tool ls {}", None).await;
    let output = result.unwrap();
    assert!(output.reply.starts_with("tool ls -> "), "{}", output.reply);
    let usages = call_usages(&events);
    assert_eq!(usages.len(), 2, "{events:?}");
    // The first call wrote the system prompt and tools to the cache, the second read them.
    assert_eq!(usages[0].cached_input_tokens, 0);
    assert!(usages[1].cached_input_tokens > 0, "{usages:?}");
    let sum = usages[0].clone().plus(usages[1].clone());
    assert_eq!(sum.model_calls, 2);
    assert_eq!(output.usage, Some(sum));
    // The usage of the first call came before its tool ran.
    let usage_idx = events
        .iter()
        .position(|event| matches!(event, AgentEvent::ModelUsage { .. }))
        .unwrap();
    let tool_idx = events
        .iter()
        .position(|event| matches!(event, AgentEvent::ToolStarted { .. }))
        .unwrap();
    assert!(usage_idx < tool_idx);
    // The second request answered the tool call by its id.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let tool_use = &requests[1].body["messages"][1]["content"][0];
    let tool_result = &requests[1].body["messages"][2]["content"][0];
    assert_eq!(tool_use["type"], "tool_use");
    assert_eq!(tool_result["type"], "tool_result");
    assert_eq!(tool_result["tool_use_id"], tool_use["id"]);
}

#[tokio::test]
async fn an_overloaded_model_is_retried_and_the_retry_is_reported_and_counted() {
    let mock = MockServer::start().await;
    let model = mock.client(ModelApi::Anthropic);
    let session = Session::new();
    let (events, result) = turn(model.as_ref(), &session, "/flaky 1 529 fine now", None).await;
    let output = result.unwrap();
    assert_eq!(output.reply, "fine now");
    let first = events.first().unwrap();
    assert_eq!(
        first,
        &AgentEvent::ModelRetry {
            attempt: 1,
            code: ErrorCode::ModelUnavailable,
            message: String::from("model answered with status 529: mock failure with status 529"),
            delay_ms: 0,
        }
    );
    assert_eq!(call_usages(&events)[0].retries, 1);
    assert_eq!(output.usage.map(|usage| usage.retries), Some(1));
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn passing_the_turn_ceiling_ends_the_turn_before_its_tools_run() {
    let mock = MockServer::start().await;
    let model = mock.client(ModelApi::Anthropic);
    let session = Session::new();
    let (events, result) = turn(model.as_ref(), &session, "/tool ls {}", Some(5)).await;
    let error = result.unwrap_err();
    assert_eq!(error.code(), ErrorCode::TurnBudgetExceeded);
    let usages = call_usages(&events);
    assert_eq!(usages.len(), 1);
    assert!(matches!(
        error,
        AgentError::TurnBudgetExceeded { limit: 5, used } if used == usages[0].total_tokens
    ));
    assert!(
        !events
            .iter()
            .any(|event| matches!(event, AgentEvent::ToolStarted { .. })),
        "{events:?}"
    );
    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["max_tokens"], 5);
}

#[tokio::test]
async fn each_call_asks_for_at_most_the_tokens_left() {
    let mock = MockServer::start().await;
    let model = mock.client(ModelApi::Responses);
    let session = Session::new();
    let (events, result) = turn(model.as_ref(), &session, "/tool ls {}", Some(10_000)).await;
    result.unwrap();
    let usages = call_usages(&events);
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["max_output_tokens"], 10_000);
    assert_eq!(
        requests[1].body["max_output_tokens"],
        10_000 - usages[0].total_tokens
    );
}

/// A model whose every answer stops at its output limit, as a Responses stream ends with
/// `response.incomplete` (`max_output_tokens`).
#[derive(Debug)]
struct CutModel;

#[async_trait::async_trait]
impl ModelClient for CutModel {
    fn model(&self) -> &str {
        "cut"
    }

    async fn stream(
        &self,
        _request: &gatehouse_model::ModelRequest,
    ) -> gatehouse_model::Result<gatehouse_model::ModelEventStream> {
        let error = gatehouse_model::ModelError::Incomplete {
            reason: String::from("max_output_tokens"),
        };
        Ok(Box::pin(futures_util::stream::iter([Err(error)])))
    }
}

#[tokio::test]
async fn a_call_cut_at_its_output_limit_passes_the_ceiling_only_when_there_is_one() {
    let session = Session::new();
    let (_, result) = turn(&CutModel, &session, "go", Some(100)).await;
    assert!(
        matches!(
            result,
            Err(AgentError::TurnBudgetExceeded {
                limit: 100,
                used: 0
            })
        ),
        "{result:?}"
    );
    let (_, result) = turn(&CutModel, &session, "go", None).await;
    assert_eq!(result.unwrap_err().code(), ErrorCode::ModelBadResponse);
}
