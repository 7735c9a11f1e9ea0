//! `GET/PUT /v1/agents/{agent}/files/{name}` through the real router, with a counting fake of the
//! Harness workspace (oce-spec §2.1, §4.1 and §10 items 1 and 3).

use axum::body::Body;
use axum::body::Bytes;
use axum::http::Request;
use axum::http::StatusCode;
use axum::http::header;
use gatehouse_gateway::WriteMode;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::suite::support::FakeWorkspace;
use crate::suite::support::FetchAnswer;
use crate::suite::support::TOKEN;
use crate::suite::support::TestGateway;
use crate::suite::support::WriteAnswer;
use crate::suite::support::WriteCall;
use crate::suite::support::gateway;
use crate::suite::support::operator_request;

const AGENTS_URI: &str = "/v1/agents/main/files/AGENTS.md";

/// A content that must never appear in the audit trail.
const MARKER: &str = "secret-document-marker-7f3a";

/// How a matrix row sends its body.
enum CaseBody {
    /// No body.
    Empty,
    /// These bytes, with a matching `Content-Length`.
    Bytes(Vec<u8>),
    /// These chunks as a stream, without `Content-Length`.
    Streamed(Vec<Vec<u8>>),
    /// These bytes, with this declared `Content-Length`.
    Declared(Vec<u8>, u64),
}

/// One row of the validation matrix.
struct Case {
    label: &'static str,
    method: &'static str,
    uri: String,
    headers: Vec<(&'static str, &'static str)>,
    authorized: bool,
    body: CaseBody,
    status: StatusCode,
    code: &'static str,
    details: Option<serde_json::Value>,
}

/// The outcome of one row: what the API answered and how many calls reached the node.
#[derive(Debug, PartialEq)]
struct Outcome {
    label: &'static str,
    status: StatusCode,
    code: String,
    details: Option<serde_json::Value>,
    node_calls: (usize, usize),
}

fn get(label: &'static str, uri: &str) -> Case {
    Case {
        label,
        method: "GET",
        uri: uri.to_owned(),
        headers: Vec::new(),
        authorized: true,
        body: CaseBody::Empty,
        status: StatusCode::BAD_REQUEST,
        code: "INVALID_REQUEST",
        details: None,
    }
}

fn put(label: &'static str, uri: &str, body: CaseBody) -> Case {
    Case {
        method: "PUT",
        body,
        ..get(label, uri)
    }
}

fn put_agents(label: &'static str, body: &[u8]) -> Case {
    put(label, AGENTS_URI, CaseBody::Bytes(body.to_vec()))
}

/// Returns `{"content": <content>}` as JSON.
fn content_body(content: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({ "content": content })).unwrap()
}

impl Case {
    fn expect(self, status: StatusCode, code: &'static str) -> Self {
        Self {
            status,
            code,
            ..self
        }
    }

    fn expect_content_detail(self, detail_code: &str) -> Self {
        Self {
            details: Some(json!({"path": "/content", "code": detail_code})),
            ..self
        }
    }

    fn with_header(mut self, name: &'static str, value: &'static str) -> Self {
        self.headers.push((name, value));
        self
    }

    fn unauthorized(self) -> Self {
        Self {
            authorized: false,
            ..self
        }
    }

    fn request(self) -> Request<Body> {
        let mut builder = Request::builder().method(self.method).uri(self.uri);
        if self.authorized {
            builder = builder.header(header::AUTHORIZATION, format!("Bearer {TOKEN}"));
        }
        for (name, value) in self.headers {
            builder = builder.header(name, value);
        }
        let body = match self.body {
            CaseBody::Empty => Body::empty(),
            CaseBody::Bytes(bytes) => {
                builder = builder.header(header::CONTENT_LENGTH, bytes.len());
                Body::from(bytes)
            }
            CaseBody::Streamed(chunks) => Body::from_stream(futures_util::stream::iter(
                chunks
                    .into_iter()
                    .map(|chunk| Ok::<_, std::io::Error>(Bytes::from(chunk))),
            )),
            CaseBody::Declared(bytes, length) => {
                builder = builder.header(header::CONTENT_LENGTH, length);
                Body::from(bytes)
            }
        };
        builder.body(body).unwrap()
    }
}

fn matrix() -> Vec<Case> {
    let valid = content_body("# Agents\n");
    // 16385 bytes of UTF-8 made of 2-, 3- and 4-byte characters.
    let too_long_2 = content_body(&format!("{}a", "é".repeat(8192)));
    let too_long_3 = content_body(&format!("{}é", "€".repeat(5461)));
    let too_long_4 = content_body(&format!("{}a", "😀".repeat(4096)));
    // 5462 escaped `€` are 32772 bytes of JSON and decode to 16386 bytes of UTF-8.
    let too_long_escaped = format!(r#"{{"content":"{}"}}"#, r"\u20ac".repeat(5462)).into_bytes();
    // Exactly 48 KiB of body, whose content is over 16 KiB: the body limit is not the content
    // limit.
    let mut at_body_limit = b"{\"content\":\"".to_vec();
    at_body_limit.resize(49152 - 2, b'x');
    at_body_limit.extend_from_slice(b"\"}");
    let mut over_body_limit = b"{\"content\":\"".to_vec();
    over_body_limit.resize(49153 - 2, b'x');
    over_body_limit.extend_from_slice(b"\"}");
    let streamed_over_limit = vec![vec![b' '; 16 * 1024]; 4];

    vec![
        // Agent and name.
        get("get: unknown agent", "/v1/agents/other/files/AGENTS.md")
            .expect(StatusCode::NOT_FOUND, "NOT_FOUND"),
        put(
            "put: unknown agent",
            "/v1/agents/other/files/AGENTS.md",
            CaseBody::Bytes(valid.clone()),
        )
        .expect(StatusCode::NOT_FOUND, "NOT_FOUND"),
        get(
            "get: name outside the four",
            "/v1/agents/main/files/README.md",
        ),
        get(
            "get: name in the wrong case",
            "/v1/agents/main/files/agents.md",
        ),
        get(
            "get: memory is not a document",
            "/v1/agents/main/files/MEMORY.md",
        ),
        get(
            "get: encoded traversal",
            "/v1/agents/main/files/..%2FAGENTS.md",
        ),
        get(
            "get: encoded nul in the name",
            "/v1/agents/main/files/AGENTS.md%00",
        ),
        put(
            "put: name outside the four",
            "/v1/agents/main/files/BOOTSTRAP.md",
            CaseBody::Bytes(valid.clone()),
        ),
        // Origin and authentication.
        get("get: cross-site", AGENTS_URI)
            .with_header("sec-fetch-site", "Cross-Site")
            .expect(StatusCode::FORBIDDEN, "FORBIDDEN"),
        put_agents("put: cross-site", &valid)
            .with_header("Sec-Fetch-Site", "CROSS-SITE")
            .expect(StatusCode::FORBIDDEN, "FORBIDDEN"),
        put(
            "put: cross-site is checked before the name",
            "/v1/agents/main/files/README.md",
            CaseBody::Bytes(valid.clone()),
        )
        .with_header("sec-fetch-site", "cross-site")
        .expect(StatusCode::FORBIDDEN, "FORBIDDEN"),
        get("get: no bearer token", AGENTS_URI)
            .unauthorized()
            .expect(StatusCode::UNAUTHORIZED, "UNAUTHORIZED"),
        put_agents("put: no bearer token", &valid)
            .unauthorized()
            .expect(StatusCode::UNAUTHORIZED, "UNAUTHORIZED"),
        // Body size.
        put_agents("put: body of 48 KiB + 1", &over_body_limit)
            .expect(StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
        put(
            "put: streamed body over 48 KiB without length",
            AGENTS_URI,
            CaseBody::Streamed(streamed_over_limit),
        )
        .expect(StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
        put(
            "put: declared length over 48 KiB",
            AGENTS_URI,
            CaseBody::Declared(valid.clone(), 1024 * 1024),
        )
        .expect(StatusCode::PAYLOAD_TOO_LARGE, "PAYLOAD_TOO_LARGE"),
        put_agents(
            "put: body of exactly 48 KiB, content too long",
            &at_body_limit,
        )
        .expect_content_detail("TOO_LONG"),
        // Body shape.
        put_agents("put: unknown field", br#"{"content":"x","extra":1}"#),
        put_agents("put: missing content", b"{}"),
        put_agents("put: content is a number", br#"{"content":5}"#),
        put_agents("put: content is null", br#"{"content":null}"#),
        put_agents("put: content is an array", br#"{"content":["x"]}"#),
        put_agents("put: body is an array", br#"["x"]"#),
        put_agents("put: not json", b"content=x"),
        put_agents("put: empty body", b""),
        put_agents(
            "put: duplicate content",
            br#"{"content":"x","content":"y"}"#,
        ),
        put_agents("put: trailing data", br#"{"content":"x"} {}"#),
        put_agents(
            "put: raw control character is not json",
            b"{\"content\":\"a\0b\"}",
        ),
        put_agents(
            "put: lone surrogate in an unknown field",
            br#"{"content":"x","\ud800":1}"#,
        ),
        // Content.
        put_agents("put: lone high surrogate", br#"{"content":"\ud800"}"#)
            .expect_content_detail("INVALID_VALUE"),
        put_agents("put: lone low surrogate", br#"{"content":"a\udc00b"}"#)
            .expect_content_detail("INVALID_VALUE"),
        put_agents(
            "put: surrogates in the wrong order",
            br#"{"content":"\udc00\ud800"}"#,
        )
        .expect_content_detail("INVALID_VALUE"),
        put_agents(
            "put: high surrogate before another escape",
            br#"{"content":"\ud800\u0041"}"#,
        )
        .expect_content_detail("INVALID_VALUE"),
        put_agents("put: escaped nul", br#"{"content":"a\u0000b"}"#)
            .expect_content_detail("INVALID_FORMAT"),
        put_agents("put: 16385 bytes of 2-byte characters", &too_long_2)
            .expect_content_detail("TOO_LONG"),
        put_agents("put: 16385 bytes of 3-byte characters", &too_long_3)
            .expect_content_detail("TOO_LONG"),
        put_agents("put: 16385 bytes of 4-byte characters", &too_long_4)
            .expect_content_detail("TOO_LONG"),
        put_agents("put: 16386 bytes written as escapes", &too_long_escaped)
            .expect_content_detail("TOO_LONG"),
    ]
}

/// §10 item 1: every invalid request is refused with its status, code and detail code, and none
/// reaches the node.
#[tokio::test]
async fn validation_matrix_rejects_before_any_node_call() {
    let gateway = gateway(FakeWorkspace::new(
        FetchAnswer::File(b"# Agents\n".to_vec()),
        WriteAnswer::Confirmed,
    ))
    .await;
    let mut expected = Vec::new();
    let mut actual = Vec::new();
    for case in matrix() {
        let before = gateway.workspace.calls();
        expected.push(Outcome {
            label: case.label,
            status: case.status,
            code: case.code.to_owned(),
            details: case.details.clone(),
            node_calls: before,
        });
        let label = case.label;
        let (status, body) = gateway.send(case.request()).await;
        actual.push(Outcome {
            label,
            status,
            code: body["error"]["code"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            details: body["error"].get("details").cloned(),
            node_calls: gateway.workspace.calls(),
        });
    }
    assert_eq!(actual, expected);
    assert_eq!(gateway.workspace.calls(), (0, 0));
}

/// The error body always has the documented shape, with a message.
#[tokio::test]
async fn rejection_has_the_error_shape() {
    let gateway = writable_gateway().await;
    let (status, body) = put_document(&gateway, AGENTS_URI, r#"{"content":"\ud800"}"#).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"error": {
            "code": "INVALID_REQUEST",
            "message": "invalid content: the content is not well-formed unicode",
            "details": {"path": "/content", "code": "INVALID_VALUE"},
        }})
    );
}

/// Content of exactly 16 KiB of UTF-8 passes whatever the character width, and is written once,
/// as a replacement, under the document's name.
#[tokio::test]
async fn put_at_the_content_limit_writes_once_with_replace() {
    let contents = [
        "é".repeat(8192),
        format!("{}a", "€".repeat(5461)),
        "😀".repeat(4096),
    ];
    for content in contents {
        assert_eq!(content.len(), 16384);
        let gateway = writable_gateway().await;
        let mut request = operator_request(
            "PUT",
            "/v1/agents/main/files/SOUL.md",
            Body::from(content_body(&content)),
        );
        request
            .headers_mut()
            .insert("sec-fetch-site", "same-origin".parse().unwrap());
        let (status, body) = gateway.send(request).await;
        assert_eq!(
            (status, body),
            (StatusCode::OK, json!({"name": "SOUL.md", "size": 16384}))
        );
        assert_eq!(
            gateway.workspace.written(),
            vec![WriteCall {
                relative: String::from("SOUL.md"),
                bytes: content.into_bytes(),
                mode: WriteMode::Replace,
            }]
        );
        assert_eq!(gateway.workspace.calls(), (0, 1));
    }
}

/// A surrogate pair escape is well-formed and is written as its character.
#[tokio::test]
async fn put_accepts_a_surrogate_pair_escape() {
    let gateway = writable_gateway().await;
    let (status, body) = put_document(
        &gateway,
        "/v1/agents/main/files/USER.md",
        r#"{"content":"\ud83d\ude00"}"#,
    )
    .await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"name": "USER.md", "size": 4}))
    );
    assert_eq!(
        gateway.workspace.written()[0].bytes,
        "😀".as_bytes().to_vec()
    );
}

/// A body of exactly 48 KiB (here, padded with JSON whitespace) is accepted.
#[tokio::test]
async fn put_accepts_a_body_of_exactly_48_kib() {
    let gateway = writable_gateway().await;
    let mut raw = br#"{"content":"hi"}"#.to_vec();
    raw.resize(49152, b' ');
    let (status, body) = put_document(&gateway, "/v1/agents/main/files/IDENTITY.md", raw).await;
    assert_eq!(
        (status, body),
        (StatusCode::OK, json!({"name": "IDENTITY.md", "size": 2}))
    );
    assert_eq!(gateway.workspace.calls(), (0, 1));
}

/// Each of the four documents is read from the workspace root under its own name.
#[tokio::test]
async fn get_returns_the_document() {
    for name in ["AGENTS.md", "SOUL.md", "IDENTITY.md", "USER.md"] {
        let gateway = gateway(FakeWorkspace::new(
            FetchAnswer::File("# Soul\né€😀\n".as_bytes().to_vec()),
            WriteAnswer::Confirmed,
        ))
        .await;
        let mut request = operator_request(
            "GET",
            &format!("/v1/agents/main/files/{name}"),
            Body::empty(),
        );
        request
            .headers_mut()
            .insert("sec-fetch-site", "same-site".parse().unwrap());
        let (status, body) = gateway.send(request).await;
        assert_eq!(
            (status, body),
            (
                StatusCode::OK,
                json!({"name": name, "content": "# Soul\né€😀\n"})
            )
        );
        assert_eq!(gateway.workspace.fetched(), vec![name.to_owned()]);
        assert_eq!(gateway.workspace.calls(), (1, 0));
    }
}

/// A missing file is `404 NOT_FOUND`.
#[tokio::test]
async fn get_of_a_missing_file_is_not_found() {
    let gateway = writable_gateway().await;
    let (status, body) = gateway
        .send(operator_request("GET", AGENTS_URI, Body::empty()))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::NOT_FOUND, Some("NOT_FOUND"))
    );
    assert_eq!(gateway.workspace.calls(), (1, 0));
}

/// What is read back is checked again: a stored file that breaks a content rule is
/// `422 INVALID_DOCUMENT` with the rule's detail code; one at the limit is served.
#[tokio::test]
async fn get_checks_the_stored_file_again() {
    let cases = [
        (
            "not utf-8",
            FetchAnswer::File(vec![b'#', 0xff, 0xfe]),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("INVALID_DOCUMENT"),
            Some(json!({"path": "/content", "code": "INVALID_VALUE"})),
        ),
        (
            "encoded lone surrogate",
            FetchAnswer::File(vec![0xed, 0xa0, 0x80]),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("INVALID_DOCUMENT"),
            Some(json!({"path": "/content", "code": "INVALID_VALUE"})),
        ),
        (
            "nul",
            FetchAnswer::File(b"a\0b".to_vec()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("INVALID_DOCUMENT"),
            Some(json!({"path": "/content", "code": "INVALID_FORMAT"})),
        ),
        (
            "16385 bytes",
            FetchAnswer::File(format!("{}a", "é".repeat(8192)).into_bytes()),
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("INVALID_DOCUMENT"),
            Some(json!({"path": "/content", "code": "TOO_LONG"})),
        ),
        (
            "over the node's own limit",
            FetchAnswer::FileTooLarge,
            StatusCode::UNPROCESSABLE_ENTITY,
            Some("INVALID_DOCUMENT"),
            Some(json!({"path": "/content", "code": "TOO_LONG"})),
        ),
        (
            "16384 bytes",
            FetchAnswer::File("é".repeat(8192).into_bytes()),
            StatusCode::OK,
            None,
            None,
        ),
    ];
    for (label, answer, status, code, details) in cases {
        let gateway = gateway(FakeWorkspace::new(answer, WriteAnswer::Confirmed)).await;
        let (actual_status, body) = gateway
            .send(operator_request("GET", AGENTS_URI, Body::empty()))
            .await;
        assert_eq!(
            (
                label,
                actual_status,
                body["error"]["code"].as_str(),
                body["error"].get("details").cloned()
            ),
            (label, status, code, details)
        );
        assert_eq!(gateway.workspace.calls(), (1, 0), "{label}");
    }
}

/// An unreachable node is `503 DEPENDENCY_UNAVAILABLE` for reads; there is no local fallback.
#[tokio::test]
async fn get_when_the_node_is_unavailable_is_dependency_unavailable() {
    let gateway = gateway(FakeWorkspace::new(
        FetchAnswer::Unavailable,
        WriteAnswer::Confirmed,
    ))
    .await;
    let (status, body) = gateway
        .send(operator_request("GET", AGENTS_URI, Body::empty()))
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Some("DEPENDENCY_UNAVAILABLE")
        )
    );
    assert_eq!(gateway.workspace.calls(), (1, 0));
}

/// §10 item 3: a write sent and not confirmed is `503 UNKNOWN_OUTCOME`, is sent exactly once,
/// and is audited as `unknown`.
#[tokio::test]
async fn put_with_unknown_outcome_is_never_replayed() {
    put_fails_once_and_is_audited(WriteAnswer::UnknownOutcome, "UNKNOWN_OUTCOME", "unknown").await;
}

/// An unreachable node is `503 DEPENDENCY_UNAVAILABLE` for writes, audited as `failed`.
#[tokio::test]
async fn put_when_the_node_is_unavailable_is_audited_as_failed() {
    put_fails_once_and_is_audited(WriteAnswer::Unavailable, "DEPENDENCY_UNAVAILABLE", "failed")
        .await;
}

/// PUTs `AGENTS.md` against a node that answers the write with `answer`, and checks the 503 with
/// `code`, that the write was sent exactly once (never replayed), and the one audit record.
async fn put_fails_once_and_is_audited(answer: WriteAnswer, code: &str, outcome: &str) {
    let gateway = gateway(FakeWorkspace::new(FetchAnswer::NotFound, answer)).await;
    let (status, body) = put_document(&gateway, AGENTS_URI, content_body(MARKER)).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, Some(code))
    );
    assert_eq!(gateway.workspace.calls(), (0, 1));
    assert_eq!(
        audit_without_seq(&gateway).await,
        vec![json!({
            "actor": "operator",
            "action": "agents.files.write",
            "outcome": outcome,
            "reasonCode": code,
            "details": {"agent": "main", "name": "AGENTS.md", "size": MARKER.len()},
        })]
    );
}

/// Writes and denials are audited with names and sizes, never content; reads and invalid
/// requests are not audited.
#[tokio::test]
async fn audit_trail_never_holds_content() {
    let gateway = gateway(FakeWorkspace::new(
        FetchAnswer::File(MARKER.as_bytes().to_vec()),
        WriteAnswer::Confirmed,
    ))
    .await;
    let (status, _) = put_document(&gateway, AGENTS_URI, content_body(MARKER)).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = gateway
        .send(operator_request("GET", AGENTS_URI, Body::empty()))
        .await;
    assert_eq!(
        (status, body["content"].as_str()),
        (StatusCode::OK, Some(MARKER))
    );
    let mut cross_site_put = operator_request(
        "PUT",
        "/v1/agents/main/files/USER.md",
        Body::from(content_body(MARKER)),
    );
    cross_site_put
        .headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().unwrap());
    let (status, _) = gateway.send(cross_site_put).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let mut cross_site_get = operator_request("GET", AGENTS_URI, Body::empty());
    cross_site_get
        .headers_mut()
        .insert("sec-fetch-site", "Cross-Site".parse().unwrap());
    let (status, _) = gateway.send(cross_site_get).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _) = put_document(
        &gateway,
        AGENTS_URI,
        format!(r#"{{"content":"{MARKER}","extra":1}}"#),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);

    let events = audit_without_seq(&gateway).await;
    assert_eq!(
        events,
        vec![
            json!({
                "actor": "operator",
                "action": "agents.files.write",
                "outcome": "succeeded",
                "reasonCode": null,
                "details": {"agent": "main", "name": "AGENTS.md", "size": MARKER.len()},
            }),
            json!({
                "actor": "operator",
                "action": "agents.files.write",
                "outcome": "denied",
                "reasonCode": "FORBIDDEN",
                "details": {"agent": "main", "name": "USER.md"},
            }),
            json!({
                "actor": "operator",
                "action": "agents.files.read",
                "outcome": "denied",
                "reasonCode": "FORBIDDEN",
                "details": {"agent": "main", "name": "AGENTS.md"},
            }),
        ]
    );
    let raw_trail = serde_json::to_string(&gateway.audit_events().await).unwrap();
    assert!(!raw_trail.contains(MARKER), "{raw_trail}");
    assert_eq!(gateway.workspace.calls(), (1, 1));
}

/// Returns the audit trail without the fields that change from run to run.
/// A Gateway whose node has no document yet and confirms every write.
async fn writable_gateway() -> TestGateway {
    gateway(FakeWorkspace::new(
        FetchAnswer::NotFound,
        WriteAnswer::Confirmed,
    ))
    .await
}

/// Sends an operator `PUT` of `body` to `uri`.
async fn put_document(
    gateway: &TestGateway,
    uri: &str,
    body: impl Into<Body>,
) -> (StatusCode, serde_json::Value) {
    gateway
        .send(operator_request("PUT", uri, body.into()))
        .await
}

async fn audit_without_seq(gateway: &TestGateway) -> Vec<serde_json::Value> {
    let mut events = gateway.audit_events().await;
    for event in &mut events {
        let object = event.as_object_mut().unwrap();
        assert!(object.remove("seq").is_some_and(|seq| seq.is_i64()));
        assert!(object.remove("at").is_some_and(|at| at.is_i64()));
    }
    events
}
