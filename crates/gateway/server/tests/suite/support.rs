//! Shared helpers: a Gateway router over a temporary state directory and a counting fake of the
//! Harness workspace, driven as a tower `Service` without a socket.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering;

use axum::Router;
use axum::body::Body;
use axum::http::Request;
use axum::http::StatusCode;
use axum::http::header;
use gatehouse_gateway::Extensions;
use gatehouse_gateway::FallbackRuntime;
use gatehouse_gateway::GatewayConfig;
use gatehouse_gateway::RunningGateway;
use gatehouse_gateway::TurnRuntime;
use gatehouse_gateway::WorkspaceAccess;
use gatehouse_gateway::WorkspaceError;
use gatehouse_gateway::WorkspaceFile;
use gatehouse_gateway::WriteMode;
use gatehouse_gateway::Written;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use tower::ServiceExt;

/// The operator token of every test Gateway.
pub(crate) const TOKEN: &str = "test-token";

/// What the fake answers to `fetch`.
#[derive(Debug, Clone)]
pub(crate) enum FetchAnswer {
    /// The file exists with these bytes.
    File(Vec<u8>),
    /// The node answers `NOT_FOUND`.
    NotFound,
    /// The node refuses the file as over its own limit (`FILE_TOO_LARGE`).
    FileTooLarge,
    /// No node is connected.
    Unavailable,
}

/// What the fake answers to `write`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum WriteAnswer {
    /// The node confirms the write.
    Confirmed,
    /// The write was sent and not confirmed.
    UnknownOutcome,
    /// No node is connected.
    Unavailable,
}

/// One `write` the fake received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WriteCall {
    pub(crate) relative: String,
    pub(crate) bytes: Vec<u8>,
    pub(crate) mode: WriteMode,
}

/// A fake Harness workspace that counts and records every call and answers as configured.
#[derive(Debug)]
pub(crate) struct FakeWorkspace {
    fetch_answer: FetchAnswer,
    write_answer: WriteAnswer,
    n_fetches: AtomicUsize,
    fetched: Mutex<Vec<String>>,
    written: Mutex<Vec<WriteCall>>,
}

impl FakeWorkspace {
    pub(crate) fn new(fetch_answer: FetchAnswer, write_answer: WriteAnswer) -> Self {
        Self {
            fetch_answer,
            write_answer,
            n_fetches: AtomicUsize::new(0),
            fetched: Mutex::new(Vec::new()),
            written: Mutex::new(Vec::new()),
        }
    }

    /// Returns `(fetch calls, write calls)` so far.
    pub(crate) fn calls(&self) -> (usize, usize) {
        (
            self.n_fetches.load(Ordering::SeqCst),
            self.written.lock().unwrap().len(),
        )
    }

    /// Returns the relative paths fetched so far.
    pub(crate) fn fetched(&self) -> Vec<String> {
        self.fetched.lock().unwrap().clone()
    }

    /// Returns the writes received so far.
    pub(crate) fn written(&self) -> Vec<WriteCall> {
        self.written.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl WorkspaceAccess for FakeWorkspace {
    async fn fetch(&self, relative: &str) -> Result<WorkspaceFile, WorkspaceError> {
        self.n_fetches.fetch_add(1, Ordering::SeqCst);
        self.fetched.lock().unwrap().push(relative.to_owned());
        match &self.fetch_answer {
            FetchAnswer::File(bytes) => Ok(WorkspaceFile {
                path: format!("/workspace/{relative}"),
                bytes: bytes.clone(),
                mime_type: String::from("text/markdown"),
            }),
            FetchAnswer::NotFound => Err(WorkspaceError::Remote(WireError::new(
                ErrorCode::NotFound,
                "no such file",
            ))),
            FetchAnswer::FileTooLarge => Err(WorkspaceError::Remote(WireError::new(
                ErrorCode::FileTooLarge,
                "the file is over the limit",
            ))),
            FetchAnswer::Unavailable => Err(WorkspaceError::Unavailable),
        }
    }

    async fn write(
        &self,
        relative: &str,
        bytes: &[u8],
        mode: WriteMode,
    ) -> Result<Written, WorkspaceError> {
        self.written.lock().unwrap().push(WriteCall {
            relative: relative.to_owned(),
            bytes: bytes.to_vec(),
            mode,
        });
        match self.write_answer {
            WriteAnswer::Confirmed => Ok(Written {
                path: format!("/workspace/{relative}"),
                size: bytes.len() as u64,
            }),
            WriteAnswer::UnknownOutcome => Err(WorkspaceError::UnknownOutcome),
            WriteAnswer::Unavailable => Err(WorkspaceError::Unavailable),
        }
    }
}

/// A Gateway router over a temporary state directory and a fake workspace.
pub(crate) struct TestGateway {
    pub(crate) router: Router,
    pub(crate) workspace: Arc<FakeWorkspace>,
    running: RunningGateway,
    _state_dir: tempfile::TempDir,
}

impl TestGateway {
    /// Sends `request` through the router and returns the status and the JSON body (`Null` when
    /// the body is empty).
    pub(crate) async fn send(&self, request: Request<Body>) -> (StatusCode, serde_json::Value) {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let body = match bytes.is_empty() {
            true => serde_json::Value::Null,
            false => serde_json::from_slice(&bytes).unwrap(),
        };
        (status, body)
    }

    /// Returns the Gateway's store, to change what its figures count behind its back.
    pub(crate) fn store(&self) -> &Arc<dyn gatehouse_store::Store> {
        self.running.store()
    }

    /// Returns the audit trail as `GET /v1/audit` shows it.
    pub(crate) async fn audit_events(&self) -> Vec<serde_json::Value> {
        let (status, body) = self
            .send(operator_request("GET", "/v1/audit", Body::empty()))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        body["events"].as_array().unwrap().clone()
    }
}

/// Returns a Gateway whose workspace is `workspace`: the real router and state, with a SQLite
/// store, media store and operator token in a fresh temporary directory.
pub(crate) async fn gateway(workspace: FakeWorkspace) -> TestGateway {
    gateway_with(
        workspace,
        None,
        gatehouse_gateway::DEFAULT_MAX_CONCURRENT_TURNS,
    )
    .await
}

/// Returns a test Gateway whose turns run on `runtime`, at most `max_concurrent_turns` at once:
/// the Gateway as `start` prepares it (no node connects), driven through its router.
pub(crate) async fn gateway_with(
    workspace: FakeWorkspace,
    runtime: Option<Arc<dyn TurnRuntime>>,
    max_concurrent_turns: usize,
) -> TestGateway {
    gateway_refreshing_metrics_every(
        workspace,
        runtime,
        max_concurrent_turns,
        gatehouse_gateway::DEFAULT_METRICS_REFRESH_INTERVAL,
    )
    .await
}

/// Returns a test Gateway like [`gateway_with`] whose `/metrics` reuses the figures it read
/// from the store and the memory index for `metrics_refresh_interval`.
pub(crate) async fn gateway_refreshing_metrics_every(
    workspace: FakeWorkspace,
    runtime: Option<Arc<dyn TurnRuntime>>,
    max_concurrent_turns: usize,
    metrics_refresh_interval: std::time::Duration,
) -> TestGateway {
    gateway_configured(workspace, runtime, |config| {
        config.max_concurrent_turns = max_concurrent_turns;
        config.metrics_refresh_interval = metrics_refresh_interval;
    })
    .await
}

/// Returns a test Gateway like [`gateway_with`] whose configuration `configure` changed last.
pub(crate) async fn gateway_configured(
    workspace: FakeWorkspace,
    runtime: Option<Arc<dyn TurnRuntime>>,
    configure: impl FnOnce(&mut GatewayConfig),
) -> TestGateway {
    let state_dir = tempfile::tempdir().unwrap();
    let listen: SocketAddr = "127.0.0.1:0".parse().unwrap();
    let mut config = GatewayConfig::with_defaults(state_dir.path().to_path_buf(), listen);
    config.operator_token_override = Some(String::from(TOKEN));
    config.memory_embedder = Some(gatehouse_memory::embed::EmbedderKind::None);
    configure(&mut config);
    let workspace = Arc::new(workspace);
    let fallback_runtime = match runtime {
        Some(_) => FallbackRuntime::Node,
        None => FallbackRuntime::Off,
    };
    let extensions = Extensions {
        runtime,
        fallback_runtime,
        workspace: Some(Arc::clone(&workspace) as Arc<dyn WorkspaceAccess>),
        ..Extensions::default()
    };
    let running = gatehouse_gateway::start(config, extensions).await.unwrap();
    TestGateway {
        router: running.router(),
        workspace,
        running,
        _state_dir: state_dir,
    }
}

/// Returns a request with the operator's bearer token.
pub(crate) fn operator_request(method: &str, uri: &str, body: Body) -> Request<Body> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        .body(body)
        .unwrap()
}
