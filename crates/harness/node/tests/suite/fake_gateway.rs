//! An in-test Gateway speaking the link protocol over in-process channels.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use gatehouse_harness::NodeHostError;
use gatehouse_harness::host::NodeHost;
use gatehouse_harness::host::NodeHostConfig;
use gatehouse_harness::host::ReconnectPolicy;
use gatehouse_harness::host::Runtime;
use gatehouse_harness::link::Connector;
use gatehouse_harness::link::Link;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::RequestFrame;
use gatehouse_protocol::frame::names;
use gatehouse_protocol::handshake::ConnectParams;
use gatehouse_protocol::invoke::InvokeResult;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The longest any test waits for one thing.
pub(crate) const WAIT: Duration = Duration::from_secs(5);

/// The home directory given to the node's path policy.
pub(crate) const HOME: &str = "/home/node";

/// The bootstrap token of the first setup code.
pub(crate) const BOOTSTRAP_TOKEN: &str = "bt-first";

/// Returns a setup code text for `token`, with surrounding whitespace as an operator's file has.
pub(crate) fn setup_code_text(token: &str) -> String {
    let json = json!({
        "v": 1,
        "url": "ws://127.0.0.1:9/node",
        "bootstrapToken": token,
        "expiresAtMs": 4_000_000_000_000_i64,
    });
    format!(
        "{}\n",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json.to_string())
    )
}

/// Returns a node config for `root`, with the policy home passed explicitly.
pub(crate) fn config(root: &Path, setup_code_file: Option<PathBuf>) -> NodeHostConfig {
    NodeHostConfig {
        root: root.to_owned(),
        gateway_urls: Vec::new(),
        setup_code_file,
        runtime: Runtime::Native,
        display_name: Some("test node".to_owned()),
        home: Some(HOME.to_owned()),
    }
}

/// Short intervals for tests.
pub(crate) fn fast_reconnect() -> ReconnectPolicy {
    ReconnectPolicy {
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(200),
        handshake_timeout: Duration::from_secs(2),
        status_heartbeat: Duration::from_millis(50),
    }
}

/// Hands every link the node opens to the test.
pub(crate) struct ChannelConnector {
    links: mpsc::Sender<Link>,
}

impl Connector for ChannelConnector {
    async fn connect(&mut self, _gateway_url: Option<&str>) -> Result<Link, NodeHostError> {
        let (node, gateway) = Link::pair(64);
        self.links
            .send(gateway)
            .await
            .map_err(|_| NodeHostError::LinkClosed)?;
        Ok(node)
    }
}

/// A node host running its reconnect loop against the test.
pub(crate) struct TestNode {
    pub(crate) temp: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) setup_code_file: PathBuf,
    pub(crate) host: Arc<NodeHost>,
    links: mpsc::Receiver<Link>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), NodeHostError>>,
}

impl TestNode {
    /// Starts a fresh node with a setup code and fast reconnects.
    pub(crate) fn start() -> TestNode {
        TestNode::start_in(tempfile::tempdir().unwrap(), fast_reconnect())
    }

    /// Starts a node in `temp` (re-using any state there) with `reconnect` timing.
    pub(crate) fn start_in(temp: tempfile::TempDir, reconnect: ReconnectPolicy) -> TestNode {
        let root = temp.path().join("harness");
        let setup_code_file = temp.path().join("setup-code");
        if !setup_code_file.exists() {
            std::fs::write(&setup_code_file, setup_code_text(BOOTSTRAP_TOKEN)).unwrap();
        }
        let host =
            Arc::new(NodeHost::prepare(config(&root, Some(setup_code_file.clone()))).unwrap());
        let (links_tx, links) = mpsc::channel(16);
        let shutdown = CancellationToken::new();
        let task = tokio::spawn({
            let host = Arc::clone(&host);
            let shutdown = shutdown.clone();
            async move {
                let connector = ChannelConnector { links: links_tx };
                host.run_with_connector(connector, reconnect, shutdown)
                    .await
            }
        });
        TestNode {
            temp,
            root,
            setup_code_file,
            host,
            links,
            shutdown,
            task,
        }
    }

    /// Returns the canonical workspace path.
    pub(crate) fn workspace(&self) -> PathBuf {
        PathBuf::from(self.host.workspace_root())
    }

    /// Waits for the node's next connection.
    pub(crate) async fn accept(&mut self) -> GatewayConn {
        let link = tokio::time::timeout(WAIT, self.links.recv())
            .await
            .expect("timed out waiting for the node to connect")
            .expect("the node stopped connecting");
        GatewayConn { link }
    }

    /// Stops the node and returns its state directory.
    pub(crate) async fn stop(self) -> tempfile::TempDir {
        self.shutdown.cancel();
        let result = tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the node did not stop")
            .unwrap();
        result.unwrap();
        self.temp
    }
}

/// The Gateway's end of one connection.
pub(crate) struct GatewayConn {
    pub(crate) link: Link,
}

impl GatewayConn {
    pub(crate) async fn send(&self, frame: serde_json::Value) {
        self.link.outbound.send(frame.to_string()).await.unwrap();
    }

    /// Returns the next frame, or `None` when the node closed the link. The node's own
    /// `node.report` events, which it sends at will, are skipped.
    pub(crate) async fn try_recv(&mut self) -> Option<Frame> {
        loop {
            let text = tokio::time::timeout(WAIT, self.link.inbound.recv())
                .await
                .expect("timed out waiting for a frame")?;
            match serde_json::from_str(&text).unwrap() {
                Frame::Event(event) if event.event == names::NODE_REPORT => {}
                frame => return Some(frame),
            }
        }
    }

    pub(crate) async fn recv_request(&mut self) -> RequestFrame {
        match self.try_recv().await.expect("the node closed the link") {
            Frame::Req(request) => request,
            other => panic!("expected a request, got {other:?}"),
        }
    }

    pub(crate) async fn challenge(&self, nonce: &str, ts: i64) {
        self.send(json!({"type": "event", "event": "connect.challenge", "payload": {"nonce": nonce, "ts": ts}, "seq": 1}))
            .await;
    }

    /// Receives `connect` and returns its id and parameters.
    pub(crate) async fn recv_connect(&mut self) -> (String, ConnectParams) {
        let request = self.recv_request().await;
        assert_eq!(request.method, "connect");
        let params = serde_json::from_value(request.params.unwrap()).unwrap();
        (request.id, params)
    }

    pub(crate) async fn hello_ok(
        &self,
        id: &str,
        device_token: Option<&str>,
        max_payload: u64,
        tick_interval_ms: u64,
    ) {
        let mut auth = json!({"method": "bootstrap-token", "role": "node", "scopes": []});
        if let Some(device_token) = device_token {
            auth["deviceToken"] = json!(device_token);
            auth["issuedAtMs"] = json!(1_700_000_000_000_i64);
        }
        self.send(json!({
            "type": "res",
            "id": id,
            "ok": true,
            "payload": {
                "type": "hello-ok",
                "protocol": 4,
                "server": {"version": "test", "connId": "conn-1"},
                "auth": auth,
                "policy": {"maxPayload": max_payload, "maxBufferedBytes": max_payload, "tickIntervalMs": tick_interval_ms},
            },
        }))
        .await;
    }

    pub(crate) async fn refuse(&self, id: &str, code: &str) {
        self.send(json!({"type": "res", "id": id, "ok": false, "error": {"code": code, "message": "refused by the test"}}))
            .await;
    }

    /// Runs a whole handshake and accepts it; returns the connect parameters.
    pub(crate) async fn accept_handshake(&mut self, device_token: Option<&str>) -> ConnectParams {
        self.challenge("nonce-1", 1_700_000_000_000).await;
        let (id, params) = self.recv_connect().await;
        self.hello_ok(&id, device_token, 25 * 1024 * 1024, 0).await;
        params
    }

    /// Sends an invoke and returns its result, skipping progress.
    pub(crate) async fn invoke(
        &mut self,
        node_id: &str,
        id: &str,
        command: &str,
        params_json: &str,
    ) -> InvokeResult {
        self.send(json!({
            "type": "event",
            "event": "node.invoke.request",
            "payload": {"id": id, "nodeId": node_id, "command": command, "paramsJSON": params_json, "timeoutMs": 5000},
        }))
        .await;
        loop {
            let request = self.recv_request().await;
            if request.method == names::NODE_INVOKE_RESULT {
                let result: InvokeResult = serde_json::from_value(request.params.unwrap()).unwrap();
                assert_eq!(result.id, id);
                return result;
            }
        }
    }
}
