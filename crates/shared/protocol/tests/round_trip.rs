//! Every wire type survives a JSON round trip, and reads the field names the protocol uses.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use gatehouse_protocol::commands::DirListParams;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::FileWriteParams;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::frame::EventFrame;
use gatehouse_protocol::frame::Frame;
use gatehouse_protocol::frame::RequestFrame;
use gatehouse_protocol::frame::ResponseFrame;
use gatehouse_protocol::handshake::ClientInfo;
use gatehouse_protocol::handshake::ConnectAuth;
use gatehouse_protocol::handshake::ConnectChallenge;
use gatehouse_protocol::handshake::ConnectParams;
use gatehouse_protocol::handshake::DeviceProof;
use gatehouse_protocol::handshake::HelloAuth;
use gatehouse_protocol::handshake::HelloOk;
use gatehouse_protocol::handshake::HelloPolicy;
use gatehouse_protocol::handshake::ServerInfo;
use gatehouse_protocol::handshake::SignatureFields;
use gatehouse_protocol::handshake::device_signature_payload_v3;
use gatehouse_protocol::invoke::InvokeRequest;
use gatehouse_protocol::invoke::InvokeResult;
use pretty_assertions::assert_eq;
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::json;

fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: &T) {
    let text = serde_json::to_string(value).unwrap();
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, value);
}

#[test]
fn frames_use_the_type_tag_and_camel_case() {
    let req = Frame::Req(RequestFrame {
        id: "7".into(),
        method: "connect".into(),
        params: Some(json!({"a": 1})),
    });
    assert_eq!(
        serde_json::to_value(&req).unwrap(),
        json!({"type": "req", "id": "7", "method": "connect", "params": {"a": 1}})
    );
    let res = Frame::Res(ResponseFrame::failure(
        "7",
        WireError::new(ErrorCode::NotFound, "no such file"),
    ));
    assert_eq!(
        serde_json::to_value(&res).unwrap(),
        json!({"type": "res", "id": "7", "ok": false,
               "error": {"code": "NOT_FOUND", "message": "no such file"}})
    );
    let event = Frame::Event(EventFrame {
        event: "tick".into(),
        payload: None,
        seq: Some(3),
    });
    assert_eq!(
        serde_json::to_value(&event).unwrap(),
        json!({"type": "event", "event": "tick", "seq": 3})
    );
    for frame in [req, res, event] {
        round_trip(&frame);
    }
}

#[test]
fn unknown_fields_are_ignored_and_unknown_frame_types_refused() {
    let frame: Frame =
        serde_json::from_str(r#"{"type":"event","event":"tick","newField":true}"#).unwrap();
    assert!(matches!(frame, Frame::Event(_)));
    assert!(serde_json::from_str::<Frame>(r#"{"type":"bogus","id":"1"}"#).is_err());
    assert!(serde_json::from_str::<Frame>(r#"{"type":"req","id":"1"}"#).is_err());
}

#[test]
fn handshake_messages_round_trip() {
    round_trip(&ConnectChallenge {
        nonce: "abc".into(),
        ts: 1_700_000_000_000,
    });
    let params = ConnectParams {
        min_protocol: 3,
        max_protocol: 4,
        client: ClientInfo {
            id: "node-host".into(),
            display_name: Some("harness".into()),
            version: "0.1.0".into(),
            platform: "linux".into(),
            device_family: None,
            mode: "node".into(),
        },
        role: "node".into(),
        scopes: vec![],
        commands: vec!["file.fetch".into()],
        device: Some(DeviceProof {
            id: "ab".into(),
            public_key: "pk".into(),
            signature: "sig".into(),
            signed_at: 5,
            nonce: "n".into(),
        }),
        auth: Some(ConnectAuth {
            bootstrap_token: Some("boot".into()),
            device_token: None,
        }),
        runtime: Some(gatehouse_protocol::runtime::RuntimeKind::Native),
        workspace_root: Some("/srv/harness/workspace".into()),
    };
    round_trip(&params);
    let value = serde_json::to_value(&params).unwrap();
    assert_eq!(value["device"]["publicKey"], json!("pk"));
    assert_eq!(value["device"]["signedAt"], json!(5));
    assert_eq!(value["auth"]["bootstrapToken"], json!("boot"));
    assert_eq!(value["minProtocol"], json!(3));

    let hello = HelloOk {
        kind: "hello-ok".into(),
        protocol: 4,
        server: ServerInfo {
            version: "0.1.0".into(),
            conn_id: "c1".into(),
        },
        auth: HelloAuth {
            method: "bootstrap-token".into(),
            role: "node".into(),
            scopes: vec![],
            device_token: Some("dt".into()),
            issued_at_ms: Some(9),
        },
        policy: HelloPolicy {
            max_payload: 26_214_400,
            max_buffered_bytes: 52_428_800,
            tick_interval_ms: 30_000,
        },
    };
    round_trip(&hello);
    assert_eq!(
        serde_json::to_value(&hello).unwrap()["type"],
        json!("hello-ok")
    );
}

#[test]
fn the_v3_signature_payload_joins_every_field_with_pipes() {
    let scopes = vec!["a".to_owned(), "b".to_owned()];
    let payload = device_signature_payload_v3(&SignatureFields {
        device_id: "dev",
        client_id: "node-host",
        client_mode: "node",
        role: "node",
        scopes: &scopes,
        signed_at_ms: 1234,
        token: "tok",
        nonce: "nonce",
        platform: "Linux",
        device_family: "Server",
    });
    assert_eq!(
        payload,
        "v3|dev|node-host|node|node|a,b|1234|tok|nonce|linux|server"
    );
}

#[test]
fn invoke_messages_use_the_payload_json_spelling() {
    let result = InvokeResult {
        payload: None,
        id: "i".into(),
        node_id: "n".into(),
        ok: true,
        payload_json: Some("{}".into()),
        error: None,
    };
    assert_eq!(
        serde_json::to_value(&result).unwrap(),
        json!({"id": "i", "nodeId": "n", "ok": true, "payloadJSON": "{}"})
    );
    round_trip(&result);
    let request = InvokeRequest {
        id: "i".into(),
        node_id: "n".into(),
        command: "file.fetch".into(),
        params_json: Some(r#"{"path":"/w/a"}"#.into()),
        timeout_ms: Some(1000),
        traceparent: None,
    };
    assert_eq!(
        serde_json::to_value(&request).unwrap()["paramsJSON"],
        json!(r#"{"path":"/w/a"}"#)
    );
    round_trip(&request);
}

#[test]
fn the_trace_context_is_optional_in_the_invoke_envelope() {
    // An envelope of a peer that predates the field still parses, and none is sent without one.
    let older: InvokeRequest = serde_json::from_value(
        json!({"id": "i", "nodeId": "n", "command": "file.fetch", "paramsJSON": "{}"}),
    )
    .unwrap();
    assert_eq!(older.traceparent, None);
    assert!(
        serde_json::to_value(&older)
            .unwrap()
            .get("traceparent")
            .is_none()
    );
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = InvokeRequest {
        traceparent: Some(traceparent.into()),
        ..older
    };
    assert_eq!(
        serde_json::to_value(&traced).unwrap()["traceparent"],
        json!(traceparent)
    );
    round_trip(&traced);
}

#[test]
fn command_params_read_the_spec_field_names() {
    let fetch: FileFetchParams = serde_json::from_value(
        json!({"path": "/w/a", "maxBytes": 10, "followSymlinks": false, "preflightOnly": true}),
    )
    .unwrap();
    assert_eq!(fetch.max_bytes, Some(10));
    assert_eq!(fetch.preflight_only, Some(true));
    let write: FileWriteParams = serde_json::from_value(json!({
        "path": "/w/a", "contentBase64": "eA==", "overwrite": true,
        "createParents": true, "expectedSha256": "00"
    }))
    .unwrap();
    assert!(write.overwrite && write.create_parents);
    assert_eq!(write.expected_sha256.as_deref(), Some("00"));
    let list: DirListParams =
        serde_json::from_value(json!({"path": "/w", "limit": 5, "pageToken": "x"})).unwrap();
    assert_eq!(list.page_token.as_deref(), Some("x"));
}

#[test]
fn every_error_code_round_trips_through_its_wire_text() {
    for code in ErrorCode::ALL {
        assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
        round_trip(code);
    }
    assert_eq!(ErrorCode::parse("NO_SUCH_CODE"), None);
    let unknown = WireError {
        code: "FUTURE_CODE".into(),
        message: "m".into(),
        details: None,
        retryable: None,
    };
    round_trip(&unknown);
    assert_eq!(unknown.known_code(), None);
}

proptest! {
    #[test]
    fn arbitrary_request_frames_round_trip(id in ".{0,40}", method in "[a-z.]{1,30}", n in any::<i64>()) {
        let frame = Frame::Req(RequestFrame { id, method, params: Some(json!({"n": n})) });
        let text = serde_json::to_string(&frame).unwrap();
        let back: Frame = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(back, frame);
    }

    #[test]
    fn arbitrary_text_never_panics_the_frame_parser(text in ".{0,200}") {
        let _ = serde_json::from_str::<Frame>(&text);
    }
}
