//! A hostile Harness node for tests: it enrolls with a setup code, signs the v3 handshake like a
//! real node, and then speaks the wire protocol one frame at a time, sending whatever a test
//! wants: progress for invokes it does not run, oversized chunks, forged tool calls.

use std::collections::VecDeque;

use base64::Engine;
use ed25519_dalek::Signer;
use ed25519_dalek::SigningKey;
use futures_util::SinkExt;
use futures_util::StreamExt;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::ResponseFrame;
use gatehouse_protocol::handshake::ClientInfo;
use gatehouse_protocol::handshake::ConnectAuth;
use gatehouse_protocol::handshake::ConnectChallenge;
use gatehouse_protocol::handshake::ConnectParams;
use gatehouse_protocol::handshake::DeviceProof;
use gatehouse_protocol::handshake::SignatureFields;
use gatehouse_protocol::handshake::device_signature_payload_v3;
use gatehouse_protocol::invoke::InvokeRequest;
use sha2::Digest;
use tokio_tungstenite::tungstenite::Message;

use crate::suite::support::Gateway;
use crate::suite::support::WAIT;

/// A device key for crafted handshakes.
pub(crate) struct Device {
    key: SigningKey,
    pub(crate) public_key: String,
    pub(crate) id: String,
}

impl Device {
    pub(crate) fn new(seed: u8) -> Self {
        let key = SigningKey::from_bytes(&[seed; 32]);
        let raw = key.verifying_key().to_bytes();
        Self {
            public_key: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw),
            id: hex::encode(sha2::Sha256::digest(raw)),
            key,
        }
    }
}

/// How to spoil a correct handshake.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Spoil {
    Nothing,
    Signature,
    SignedAt(i64),
    DeviceId,
}

/// Returns a `connect` frame for `device` answering `challenge`, declaring no commands.
pub(crate) fn connect_frame(
    challenge: &ConnectChallenge,
    device: &Device,
    auth: ConnectAuth,
    spoil: Spoil,
) -> String {
    connect_frame_with(challenge, device, auth, spoil, &[])
}

/// Returns a `connect` frame for `device` answering `challenge` and declaring `commands`.
pub(crate) fn connect_frame_with(
    challenge: &ConnectChallenge,
    device: &Device,
    auth: ConnectAuth,
    spoil: Spoil,
    commands: &[&str],
) -> String {
    let signed_at = match spoil {
        Spoil::SignedAt(offset) => challenge.ts + offset,
        Spoil::Nothing | Spoil::Signature | Spoil::DeviceId => challenge.ts,
    };
    let id = match spoil {
        Spoil::DeviceId => "0".repeat(64),
        Spoil::Nothing | Spoil::Signature | Spoil::SignedAt(_) => device.id.clone(),
    };
    let payload = device_signature_payload_v3(&SignatureFields {
        device_id: &id,
        client_id: "node-host",
        client_mode: "node",
        role: "node",
        scopes: &[],
        signed_at_ms: signed_at,
        token: auth.signed_token(),
        nonce: &challenge.nonce,
        platform: "linux",
        device_family: "server",
    });
    let signed = match spoil {
        Spoil::Signature => format!("{payload}tampered"),
        Spoil::Nothing | Spoil::SignedAt(_) | Spoil::DeviceId => payload,
    };
    let signature = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .encode(device.key.sign(signed.as_bytes()).to_bytes());
    let params = ConnectParams {
        min_protocol: 3,
        max_protocol: 4,
        client: ClientInfo {
            id: "node-host".into(),
            display_name: Some("crafted".into()),
            version: "test".into(),
            platform: "linux".into(),
            device_family: Some("server".into()),
            mode: "node".into(),
        },
        role: "node".into(),
        scopes: vec![],
        commands: commands
            .iter()
            .map(|command| (*command).to_owned())
            .collect(),
        device: Some(DeviceProof {
            id,
            public_key: device.public_key.clone(),
            signature,
            signed_at,
            nonce: challenge.nonce.clone(),
        }),
        auth: Some(auth),
        runtime: Some(gatehouse_protocol::runtime::RuntimeKind::Native),
        workspace_root: None,
    };
    serde_json::json!({"type": "req", "id": "c1", "method": "connect", "params": params})
        .to_string()
}

/// Returns the bootstrap token inside a setup code.
pub(crate) fn bootstrap_token(setup_code: &str) -> String {
    let json = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(setup_code)
        .unwrap();
    let value: serde_json::Value = serde_json::from_slice(&json).unwrap();
    assert_eq!(value["v"], 1);
    value["bootstrapToken"].as_str().unwrap().to_owned()
}

/// The commands a node hosting the native runtime declares.
pub(crate) const NATIVE_COMMANDS: &[&str] =
    &["agent.turn", "agent.session.stop", "agent.session.restore"];

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Reads the `connect.challenge` a fresh `/node` connection starts with.
pub(crate) async fn read_challenge<S>(
    socket: &mut tokio_tungstenite::WebSocketStream<S>,
) -> ConnectChallenge
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match tokio::time::timeout(WAIT, socket.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
    {
        Message::Text(text) => match serde_json::from_str::<Frame>(&text).unwrap() {
            Frame::Event(event) => {
                assert_eq!(event.event, "connect.challenge");
                serde_json::from_value::<ConnectChallenge>(event.payload.unwrap()).unwrap()
            }
            other => panic!("expected the challenge, got {other:?}"),
        },
        other => panic!("expected text, got {other:?}"),
    }
}

/// An enrolled node driven frame by frame by a test. A task keeps reading the link, so the
/// node answers the Gateway's keep-alive probes while the test does something else.
pub(crate) struct HostileNode {
    sink: futures_util::stream::SplitSink<Socket, Message>,
    frames: tokio::sync::mpsc::UnboundedReceiver<Frame>,
    reader: tokio::task::JoinHandle<()>,
    pub(crate) device: Device,
    /// Invokes that arrived while the node waited for something else.
    invokes: VecDeque<InvokeRequest>,
    /// The ids of `node.invoke.cancel` events that arrived meanwhile.
    cancels: VecDeque<String>,
    next_id: u64,
}

impl HostileNode {
    /// Enrolls a new device (`seed` picks its key) with a fresh setup code, declaring
    /// `commands`, and returns it connected.
    pub(crate) async fn enroll(gateway: &Gateway, seed: u8, commands: &[&str]) -> HostileNode {
        let token = bootstrap_token(&gateway.setup_code(600));
        let (mut socket, _) = tokio_tungstenite::connect_async(gateway.ws_url())
            .await
            .unwrap();
        let challenge = read_challenge(&mut socket).await;
        let device = Device::new(seed);
        let auth = ConnectAuth {
            bootstrap_token: Some(token),
            device_token: None,
        };
        let frame = connect_frame_with(&challenge, &device, auth, Spoil::Nothing, commands);
        socket.send(Message::Text(frame.into())).await.unwrap();
        let (sink, mut stream) = socket.split();
        let (sender, frames) = tokio::sync::mpsc::unbounded_channel();
        let reader = tokio::spawn(async move {
            while let Some(Ok(message)) = stream.next().await {
                if let Message::Text(text) = message
                    && sender.send(serde_json::from_str(&text).unwrap()).is_err()
                {
                    return;
                }
            }
        });
        let mut node = HostileNode {
            sink,
            frames,
            reader,
            device,
            invokes: VecDeque::new(),
            cancels: VecDeque::new(),
            next_id: 0,
        };
        let hello = node.response("c1").await;
        assert!(hello.ok, "the node was not admitted: {hello:?}");
        node
    }

    /// Sends one text frame as is.
    pub(crate) async fn send_text(&mut self, text: String) {
        self.sink.send(Message::Text(text.into())).await.unwrap();
    }

    /// Sends a request and returns its id.
    pub(crate) async fn request(&mut self, method: &str, params: serde_json::Value) -> String {
        self.next_id += 1;
        let id = format!("h{}", self.next_id);
        let frame =
            serde_json::json!({"type": "req", "id": id, "method": method, "params": params});
        self.send_text(frame.to_string()).await;
        id
    }

    /// Sends a request and waits for its response.
    pub(crate) async fn call(&mut self, method: &str, params: serde_json::Value) -> ResponseFrame {
        let id = self.request(method, params).await;
        self.response(&id).await
    }

    /// Reads frames until the response to `id`, keeping every invoke that arrives meanwhile.
    pub(crate) async fn response(&mut self, id: &str) -> ResponseFrame {
        loop {
            match self.next_frame().await {
                Frame::Res(response) if response.id == id => return response,
                Frame::Res(_) | Frame::Req(_) => {}
                Frame::Event(event) => self.keep_invoke(event),
            }
        }
    }

    /// Returns the invokes received so far, after a round trip that flushes everything the
    /// Gateway sent before it.
    pub(crate) async fn received_invokes(&mut self) -> Vec<InvokeRequest> {
        self.call("probe", serde_json::json!({})).await;
        self.invokes.drain(..).collect()
    }

    /// Waits for the next `node.invoke.request` of `command`, dropping others.
    pub(crate) async fn next_invoke(&mut self, command: &str) -> InvokeRequest {
        loop {
            while let Some(invoke) = self.invokes.pop_front() {
                if invoke.command == command {
                    return invoke;
                }
            }
            if let Frame::Event(event) = self.next_frame().await {
                self.keep_invoke(event);
            }
        }
    }

    /// Sends one progress chunk for `invoke_id` and returns the Gateway's answer.
    pub(crate) async fn progress(
        &mut self,
        invoke_id: &str,
        seq: u64,
        chunk: &str,
    ) -> ResponseFrame {
        let params = serde_json::json!({"invokeId": invoke_id, "nodeId": self.device.id, "seq": seq, "chunk": chunk});
        self.call("node.invoke.progress", params).await
    }

    /// Sends one progress chunk of `bytes` copies of `letter` for `invoke_id`, building the
    /// frame text directly (a letter needs no JSON escaping), and returns the Gateway's answer.
    pub(crate) async fn progress_of(
        &mut self,
        invoke_id: &str,
        seq: u64,
        letter: char,
        bytes: usize,
    ) -> ResponseFrame {
        assert!(letter.is_ascii_alphanumeric());
        self.next_id += 1;
        let id = format!("h{}", self.next_id);
        let mut text = format!(
            r#"{{"type":"req","id":"{id}","method":"node.invoke.progress","params":{{"invokeId":"{invoke_id}","nodeId":"{}","seq":{seq},"chunk":""#,
            self.device.id
        );
        text.extend(std::iter::repeat_n(letter, bytes));
        text.push_str(r#""}}"#);
        self.send_text(text).await;
        self.response(&id).await
    }

    /// Streams `lines` (each a JSON value) for `invoke_id` as progress, in chunks of at most
    /// 16 KiB, and returns the answers that were not `ok`.
    pub(crate) async fn stream_lines(
        &mut self,
        invoke_id: &str,
        lines: &[serde_json::Value],
    ) -> Vec<ResponseFrame> {
        let mut text = String::new();
        for line in lines {
            text.push_str(&line.to_string());
            text.push('\n');
        }
        let mut refused = Vec::new();
        // The tests stream ASCII, so a byte boundary is a character boundary.
        for (seq, piece) in (0_u64..).zip(text.as_bytes().chunks(16 * 1024)) {
            let response = self
                .progress(invoke_id, seq, std::str::from_utf8(piece).unwrap())
                .await;
            if !response.ok {
                refused.push(response);
            }
        }
        refused
    }

    /// Ends `invoke_id` with `payload`.
    pub(crate) async fn finish(&mut self, invoke_id: &str, payload: serde_json::Value) {
        let params = serde_json::json!({"id": invoke_id, "nodeId": self.device.id, "ok": true, "payload": payload});
        self.call("node.invoke.result", params).await;
    }

    /// Fails `invoke_id` with `code`.
    pub(crate) async fn fail(&mut self, invoke_id: &str, code: &str) {
        self.fail_with(invoke_id, code, "refused by the test node")
            .await;
    }

    /// Fails `invoke_id` with `code` and `message`.
    pub(crate) async fn fail_with(&mut self, invoke_id: &str, code: &str, message: &str) {
        let params = serde_json::json!({"id": invoke_id, "nodeId": self.device.id, "ok": false, "error": {"code": code, "message": message}});
        self.call("node.invoke.result", params).await;
    }

    /// Waits for the next `node.invoke.cancel` and returns the invoke id it names, keeping
    /// every invoke that arrives meanwhile.
    pub(crate) async fn next_cancel(&mut self) -> String {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if let Some(id) = self.cancels.pop_front() {
                return id;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no node.invoke.cancel arrived"
            );
            if let Frame::Event(event) = self.next_frame().await {
                self.keep_invoke(event);
            }
        }
    }

    fn keep_invoke(&mut self, event: gatehouse_protocol::frame::EventFrame) {
        match event.event.as_str() {
            "node.invoke.request" => self
                .invokes
                .push_back(serde_json::from_value(event.payload.unwrap()).unwrap()),
            "node.invoke.cancel" => {
                let cancel: gatehouse_protocol::invoke::InvokeCancel =
                    serde_json::from_value(event.payload.unwrap()).unwrap();
                self.cancels.push_back(cancel.id);
            }
            _ => {}
        }
    }

    async fn next_frame(&mut self) -> Frame {
        tokio::time::timeout(WAIT, self.frames.recv())
            .await
            .expect("the gateway sent nothing")
            .expect("the gateway closed the link")
    }
}

impl Drop for HostileNode {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// Returns the parameters of an `agent.turn` invoke.
pub(crate) fn turn_params(invoke: &InvokeRequest) -> gatehouse_protocol::worker::AgentTurnParams {
    serde_json::from_str(invoke.params_json.as_deref().unwrap()).unwrap()
}

/// Returns the resident set size of process `pid`, in bytes.
pub(crate) fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kib * 1024
}
