use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::Ordering;
use std::time::Duration;

use gatehouse_protocol::command::Command;
use gatehouse_protocol::command::NodeCommand;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::frame::EventFrame;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::RequestFrame;
use gatehouse_protocol::frame::names;
use gatehouse_protocol::handshake::HelloAuth;
use gatehouse_protocol::handshake::HelloOk;
use gatehouse_protocol::handshake::HelloPolicy;
use gatehouse_protocol::handshake::ServerInfo;
use gatehouse_protocol::invoke::InvokeInput;
use gatehouse_protocol::invoke::InvokeProgress;
use gatehouse_protocol::invoke::InvokeResult;
use gatehouse_protocol::invoke::MAX_PROGRESS_CHUNK_BYTES;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::error::NodeHostError;
use crate::invoke::CommandSet;
use crate::invoke::InvokeContext;
use crate::invoke::Outbound;
use crate::link::Link;
use crate::session::serve;

const NODE_ID: &str = "node-1";
const WAIT: Duration = Duration::from_secs(5);

/// Declares a command of these tests: any JSON in, any JSON out.
macro_rules! test_command {
    ($marker:ident = $name:literal) => {
        enum $marker {}

        impl Command for $marker {
            const NAME: &'static str = $name;
            type Params = serde_json::Value;
            type Result = serde_json::Value;
        }

        impl NodeCommand for $marker {}
    };
}

test_command!(TestEcho = "test.echo");
test_command!(TestBig = "test.big");
test_command!(TestSlow = "test.slow");

/// Streams every input back as progress, and ends with the number of inputs on `"end"`.
struct Echo;

impl Serve<TestEcho, InvokeContext> for Echo {
    fn serve(
        &self,
        _params: serde_json::Value,
        mut context: InvokeContext,
    ) -> Served<serde_json::Value> {
        Box::pin(async move {
            let mut n_inputs = 0;
            while let Some(input) = context.input.recv().await {
                if input.payload_json == "\"end\"" {
                    return Ok(json!({"inputs": n_inputs}));
                }
                n_inputs += 1;
                if context.progress.send(&input.payload_json).await.is_err() {
                    break;
                }
            }
            Err(WireError::new(ErrorCode::Internal, "input closed"))
        })
    }
}

/// Sends `size` bytes of progress, then returns `size` bytes of payload.
struct Big {
    size: usize,
}

impl Serve<TestBig, InvokeContext> for Big {
    fn serve(
        &self,
        _params: serde_json::Value,
        mut context: InvokeContext,
    ) -> Served<serde_json::Value> {
        let size = self.size;
        Box::pin(async move {
            let text = "é".repeat(size / 2);
            let _ = context.progress.send(&text).await;
            Ok(json!({"text": text}))
        })
    }
}

/// Never finishes; records when it is dropped.
struct Slow {
    started: Arc<AtomicBool>,
    dropped: Arc<AtomicBool>,
}

struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Serve<TestSlow, InvokeContext> for Slow {
    fn serve(
        &self,
        _params: serde_json::Value,
        _context: InvokeContext,
    ) -> Served<serde_json::Value> {
        let guard = SetOnDrop(Arc::clone(&self.dropped));
        let started = Arc::clone(&self.started);
        Box::pin(async move {
            let _guard = guard;
            started.store(true, Ordering::SeqCst);
            std::future::pending::<()>().await;
            Ok(json!(null))
        })
    }
}

fn hello(max_payload: u64, tick_interval_ms: u64) -> HelloOk {
    HelloOk {
        kind: "hello-ok".to_owned(),
        protocol: 4,
        server: ServerInfo {
            version: "test".to_owned(),
            conn_id: "c1".to_owned(),
        },
        auth: HelloAuth {
            method: "device-token".to_owned(),
            role: "node".to_owned(),
            scopes: Vec::new(),
            device_token: None,
            issued_at_ms: None,
        },
        policy: HelloPolicy {
            max_payload,
            max_buffered_bytes: max_payload,
            tick_interval_ms,
        },
    }
}

/// Starts `serve` on one end of a link pair and returns the Gateway's end.
fn start(commands: CommandSet, hello: HelloOk) -> (Link, tokio::task::JoinHandle<NodeHostError>) {
    let (node, gateway) = Link::pair(64);
    let max = usize::try_from(hello.policy.max_payload).unwrap();
    let outbound = Outbound::new(node.outbound.clone(), max);
    let task = tokio::spawn(async move { serve(node, &hello, outbound, NODE_ID, &commands).await });
    (gateway, task)
}

async fn send_event(gateway: &Link, event: &str, payload: serde_json::Value) {
    let frame = Frame::Event(EventFrame {
        event: event.to_owned(),
        payload: Some(payload),
        seq: None,
    });
    gateway
        .outbound
        .send(serde_json::to_string(&frame).unwrap())
        .await
        .unwrap();
}

async fn invoke(gateway: &Link, id: &str, command: &str, params: &str) {
    let payload = json!({"id": id, "nodeId": NODE_ID, "command": command, "paramsJSON": params});
    send_event(gateway, names::NODE_INVOKE_REQUEST, payload).await;
}

async fn recv(gateway: &mut Link) -> Frame {
    let text = tokio::time::timeout(WAIT, gateway.inbound.recv())
        .await
        .expect("timed out waiting for a frame")
        .expect("link closed");
    serde_json::from_str(&text).unwrap()
}

async fn recv_request(gateway: &mut Link) -> RequestFrame {
    match recv(gateway).await {
        Frame::Req(request) => request,
        other => panic!("expected a request, got {other:?}"),
    }
}

fn params<T: serde::de::DeserializeOwned>(request: RequestFrame) -> T {
    serde_json::from_value(request.params.unwrap()).unwrap()
}

#[tokio::test]
async fn duplex_command_gets_input_and_streams_progress() {
    let mut commands = CommandSet::default();
    commands.register::<TestEcho>(Echo);
    let (mut gateway, _task) = start(commands, hello(1 << 20, 0));
    invoke(&gateway, "i1", "test.echo", "{}").await;
    for (seq, text) in ["\"a\"", "\"b\"", "\"end\""].into_iter().enumerate() {
        let input = InvokeInput {
            id: "i1".to_owned(),
            node_id: NODE_ID.to_owned(),
            seq: seq as u64,
            payload_json: text.to_owned(),
        };
        send_event(
            &gateway,
            names::NODE_INVOKE_INPUT,
            serde_json::to_value(&input).unwrap(),
        )
        .await;
    }
    let mut progress = Vec::new();
    let result = loop {
        let request = recv_request(&mut gateway).await;
        match request.method.as_str() {
            names::NODE_INVOKE_PROGRESS => progress.push(params::<InvokeProgress>(request)),
            names::NODE_INVOKE_RESULT => break params::<InvokeResult>(request),
            other => panic!("unexpected {other}"),
        }
    };
    let chunks: Vec<(u64, String)> = progress.into_iter().map(|p| (p.seq, p.chunk)).collect();
    assert_eq!(
        chunks,
        vec![(0, "\"a\"".to_owned()), (1, "\"b\"".to_owned())]
    );
    assert_eq!(
        result,
        InvokeResult {
            payload: Some(serde_json::json!({"inputs": 2})),
            id: "i1".to_owned(),
            node_id: NODE_ID.to_owned(),
            ok: true,
            payload_json: None,
            error: None,
        }
    );
}

#[tokio::test]
async fn progress_is_split_into_chunks_on_char_boundaries() {
    let mut commands = CommandSet::default();
    commands.register::<TestBig>(Big { size: 40_000 });
    let (mut gateway, _task) = start(commands, hello(1 << 20, 0));
    invoke(&gateway, "i1", "test.big", "{}").await;
    let mut text = String::new();
    let mut seqs = Vec::new();
    loop {
        let request = recv_request(&mut gateway).await;
        if request.method == names::NODE_INVOKE_RESULT {
            assert!(params::<InvokeResult>(request).ok);
            break;
        }
        let progress = params::<InvokeProgress>(request);
        assert!(progress.chunk.len() <= MAX_PROGRESS_CHUNK_BYTES);
        seqs.push(progress.seq);
        text.push_str(&progress.chunk);
    }
    assert_eq!(seqs, vec![0, 1, 2]);
    assert_eq!(text, "é".repeat(20_000));
}

#[tokio::test]
async fn a_result_over_max_payload_becomes_file_too_large() {
    let mut commands = CommandSet::default();
    commands.register::<TestBig>(Big { size: 8_000 });
    let (mut gateway, _task) = start(commands, hello(6_000, 0));
    invoke(&gateway, "i1", "test.big", "{}").await;
    let result = loop {
        let request = recv_request(&mut gateway).await;
        if request.method == names::NODE_INVOKE_RESULT {
            break params::<InvokeResult>(request);
        }
    };
    assert!(!result.ok);
    assert_eq!(result.error.unwrap().code, "FILE_TOO_LARGE");
}

#[tokio::test]
async fn cancel_aborts_the_command_and_answers_cancelled() {
    let started = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let mut commands = CommandSet::default();
    commands.register::<TestSlow>(Slow {
        started: Arc::clone(&started),
        dropped: Arc::clone(&dropped),
    });
    let (mut gateway, _task) = start(commands, hello(1 << 20, 0));
    invoke(&gateway, "i1", "test.slow", "{}").await;
    wait_for(&started).await;
    send_event(
        &gateway,
        names::NODE_INVOKE_CANCEL,
        json!({"id": "i1", "nodeId": NODE_ID}),
    )
    .await;
    let result = params::<InvokeResult>(recv_request(&mut gateway).await);
    assert_eq!(result.id, "i1");
    assert_eq!(result.error.unwrap().code, "CANCELLED");
    wait_for(&dropped).await;
}

async fn wait_for(flag: &AtomicBool) {
    tokio::time::timeout(WAIT, async {
        while !flag.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("timed out waiting for a flag");
}

#[tokio::test]
async fn a_request_from_the_gateway_is_refused() {
    let (mut gateway, _task) = start(CommandSet::default(), hello(1 << 20, 0));
    let frame = json!({"type": "req", "id": "g1", "method": "node.describe"});
    gateway.outbound.send(frame.to_string()).await.unwrap();
    match recv(&mut gateway).await {
        Frame::Res(response) => {
            assert_eq!(response.id, "g1");
            assert!(!response.ok);
            assert_eq!(response.error.unwrap().code, "INVALID_REQUEST");
        }
        other => panic!("expected a response, got {other:?}"),
    }
}

#[tokio::test]
async fn a_silent_link_is_dropped_after_two_ticks() {
    let (gateway, task) = start(CommandSet::default(), hello(1 << 20, 30));
    let reason = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
    assert!(
        matches!(reason, NodeHostError::LinkIdle { idle_ms: 60 }),
        "{reason:?}"
    );
    drop(gateway);
}

#[tokio::test]
async fn ticks_keep_the_link_alive_and_close_ends_it() {
    let (gateway, task) = start(CommandSet::default(), hello(1 << 20, 40));
    for _ in 0..6 {
        send_event(&gateway, names::TICK, json!({"ts": 1})).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!task.is_finished());
    drop(gateway);
    let reason = tokio::time::timeout(WAIT, task).await.unwrap().unwrap();
    assert!(matches!(reason, NodeHostError::LinkClosed), "{reason:?}");
}
