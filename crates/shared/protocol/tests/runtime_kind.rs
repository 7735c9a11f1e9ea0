//! The runtime kind keeps the wire texts `native` and `codex`, wherever it travels.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use gatehouse_protocol::handshake::ConnectParams;
use gatehouse_protocol::runtime::RuntimeKind;
use serde_json::json;

#[test]
fn each_kind_has_its_wire_text_in_json_and_as_text() {
    for (kind, text) in [
        (RuntimeKind::Native, "native"),
        (RuntimeKind::Codex, "codex"),
    ] {
        assert_eq!(serde_json::to_value(kind).unwrap(), json!(text));
        assert_eq!(
            serde_json::from_value::<RuntimeKind>(json!(text)).unwrap(),
            kind
        );
        assert_eq!(RuntimeKind::parse(text), Some(kind));
        assert_eq!(kind.to_string(), text);
        assert_eq!(kind, text);
    }
    assert_eq!(RuntimeKind::default(), RuntimeKind::Native);
    assert_eq!(RuntimeKind::parse("Native"), None);
    assert!(serde_json::from_value::<RuntimeKind>(json!("wasm")).is_err());
}

fn connect(runtime: Option<&str>) -> serde_json::Value {
    let mut params = json!({
        "minProtocol": 3,
        "maxProtocol": 3,
        "client": {"id": "node-host", "version": "0.1.0", "platform": "linux", "mode": "node"},
        "role": "node",
    });
    if let Some(runtime) = runtime {
        params["runtime"] = json!(runtime);
    }
    params
}

#[test]
fn connect_reads_the_declared_runtime_and_refuses_an_unknown_one() {
    let codex: ConnectParams = serde_json::from_value(connect(Some("codex"))).unwrap();
    assert_eq!(codex.runtime, Some(RuntimeKind::Codex));
    let none: ConnectParams = serde_json::from_value(connect(None)).unwrap();
    assert_eq!(none.runtime, None);
    assert!(
        serde_json::to_value(&none)
            .unwrap()
            .get("runtime")
            .is_none()
    );
    let error = serde_json::from_value::<ConnectParams>(connect(Some("wasm"))).unwrap_err();
    assert!(error.to_string().contains("wasm"), "{error}");
}
