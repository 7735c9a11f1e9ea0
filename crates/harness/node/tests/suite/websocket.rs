//! The node host over a real WebSocket on loopback.

use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_harness::host::run_node_host;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::names;
use gatehouse_protocol::invoke::InvokeResult;
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::suite::fake_gateway::WAIT;
use crate::suite::fake_gateway::config;
use crate::suite::fake_gateway::setup_code_text;

/// Returns the node's next request, skipping its `node.report` events.
async fn recv_request(
    socket: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
) -> gatehouse_protocol::frame::RequestFrame {
    loop {
        let message = tokio::time::timeout(WAIT, socket.next())
            .await
            .expect("timed out waiting for the node")
            .unwrap()
            .unwrap();
        match serde_json::from_str::<Frame>(message.to_text().unwrap()).unwrap() {
            Frame::Req(request) => return request,
            Frame::Event(event) if event.event == names::NODE_REPORT => {}
            other => panic!("expected a request, got {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_node_dials_out_over_websocket_and_serves() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("setup-code");
    std::fs::write(&file, setup_code_text("bt")).unwrap();
    let mut config = config(&temp.path().join("harness"), Some(file));
    config.gateway_urls = vec![format!("http://127.0.0.1:{port}")];
    let shutdown = CancellationToken::new();
    let node = tokio::spawn(run_node_host(config, shutdown.clone()));

    let (mut socket, params) = accept_node(&listener).await;
    assert_eq!(credential_method(&params), "bootstrap-token");
    let node_id = params["device"]["id"].as_str().unwrap().to_owned();
    let workspace = params["workspaceRoot"].as_str().unwrap().to_owned();
    let invoke = json!({"type": "event", "event": "node.invoke.request", "payload": {
        "id": "i1", "nodeId": node_id, "command": "dir.list",
        "paramsJSON": json!({"path": workspace}).to_string(),
    }});
    socket
        .send(Message::text(invoke.to_string()))
        .await
        .unwrap();
    let request = recv_request(&mut socket).await;
    assert_eq!(request.method, "node.invoke.result");
    let result: InvokeResult = serde_json::from_value(request.params.unwrap()).unwrap();
    assert!(result.ok, "{result:?}");

    shutdown.cancel();
    tokio::time::timeout(WAIT, node)
        .await
        .expect("the node did not stop")
        .unwrap()
        .unwrap();
}

/// Takes the node's next connection on `listener` and answers its `connect` with `hello-ok`;
/// returns the link and the parameters of the node's `connect`.
async fn accept_node(
    listener: &tokio::net::TcpListener,
) -> (
    tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>,
    serde_json::Value,
) {
    let (stream, _) = tokio::time::timeout(WAIT, listener.accept())
        .await
        .unwrap()
        .unwrap();
    let mut socket = tokio_tungstenite::accept_async(stream).await.unwrap();
    let challenge =
        json!({"type": "event", "event": "connect.challenge", "payload": {"nonce": "n", "ts": 5}});
    socket
        .send(Message::text(challenge.to_string()))
        .await
        .unwrap();
    let connect = recv_request(&mut socket).await;
    assert_eq!(connect.method, "connect");
    let params = connect.params.unwrap();
    let method = credential_method(&params);
    let hello = json!({"type": "res", "id": connect.id, "ok": true, "payload": {
        "type": "hello-ok", "protocol": 4,
        "server": {"version": "test", "connId": "c1"},
        "auth": {"method": method, "role": "node", "deviceToken": "dt"},
        "policy": {"maxPayload": 26214400, "maxBufferedBytes": 26214400, "tickIntervalMs": 30000},
    }});
    socket.send(Message::text(hello.to_string())).await.unwrap();
    (socket, params)
}

/// Returns the credential a node's `connect` parameters present: `bootstrap-token` at first,
/// `device-token` once enrolled.
fn credential_method(params: &serde_json::Value) -> &'static str {
    match params["auth"].get("deviceToken") {
        Some(_) => "device-token",
        None => "bootstrap-token",
    }
}

/// With several Gateway URLs (the replicas of one Gateway), a URL that refuses the link is
/// passed over for the next, and a link that drops sends the node to the next URL, coming back
/// round to the live one.
#[tokio::test]
async fn the_node_moves_to_the_next_gateway_url_when_one_fails_or_drops() {
    // A "replica" that takes the TCP connection and closes it at once, and a live one.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_port = dead.local_addr().unwrap().port();
    let dead_hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hits = std::sync::Arc::clone(&dead_hits);
    let dead_task = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = dead.accept().await else {
                return;
            };
            hits.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(stream);
        }
    });
    let live = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let live_port = live.local_addr().unwrap().port();
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("setup-code");
    std::fs::write(&file, setup_code_text("bt")).unwrap();
    let mut config = config(&temp.path().join("harness"), Some(file));
    config.gateway_urls = vec![
        format!("http://127.0.0.1:{dead_port}"),
        format!("ws://127.0.0.1:{live_port}/node"),
    ];
    let host = gatehouse_harness::host::NodeHost::prepare(config).unwrap();
    assert_eq!(
        host.gateway_url().as_deref(),
        Some(format!("ws://127.0.0.1:{dead_port}/node").as_str())
    );
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let node = tokio::spawn(async move {
        host.run_with_connector(
            gatehouse_harness::link::WebSocketConnector,
            crate::suite::fake_gateway::fast_reconnect(),
            stop,
        )
        .await
    });
    // The first URL fails; the node moves on and enrolls on the second.
    let (socket, params) = accept_node(&live).await;
    assert_eq!(dead_hits.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert_eq!(credential_method(&params), "bootstrap-token");
    // The live replica drops the link: the node tries the next URL (the dead one again), then
    // comes round to the live one with its device token.
    drop(socket);
    let (_socket, params) = accept_node(&live).await;
    assert_eq!(dead_hits.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(credential_method(&params), "device-token");
    shutdown.cancel();
    tokio::time::timeout(WAIT, node)
        .await
        .expect("the node did not stop")
        .unwrap()
        .unwrap();
    dead_task.abort();
}
