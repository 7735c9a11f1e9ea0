use base64::Engine;
use pretty_assertions::assert_eq;

use crate::setup_code::SetupCodeError;
use crate::setup_code::SetupCodePayload;

fn payload() -> SetupCodePayload {
    SetupCodePayload {
        url: "ws://127.0.0.1:7420/node".into(),
        bootstrap_token: "bt-secret".into(),
        expires_at_ms: 1_900_000_000_000,
    }
}

fn base64url(text: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

/// The codes issued before the payload had a type were `json!` objects, whose keys serde_json
/// writes sorted and without spaces: the typed encoding must write the same bytes.
#[test]
fn encodes_the_bytes_of_the_codes_issued_before() {
    let earlier = base64url(
        r#"{"bootstrapToken":"bt-secret","expiresAtMs":1900000000000,"url":"ws://127.0.0.1:7420/node","v":1}"#,
    );
    assert_eq!(payload().encode(), earlier);
    assert_eq!(SetupCodePayload::decode(&earlier), Ok(payload()));
}

#[test]
fn decodes_with_padding_whitespace_and_unknown_fields() {
    let text = base64url(
        r#"{"v":1,"url":"ws://127.0.0.1:7420/node","bootstrapToken":"bt-secret","expiresAtMs":1900000000000,"later":true}"#,
    );
    assert_eq!(
        SetupCodePayload::decode(&format!("\n  {text}==  \n")),
        Ok(payload())
    );
}

#[test]
fn refuses_what_is_not_a_payload() {
    let cases = [
        ("", SetupCodeError::Empty),
        ("not base64!", SetupCodeError::NotBase64),
        (
            &base64url(r#"{"v":2,"url":"u","bootstrapToken":"t","expiresAtMs":1}"#),
            SetupCodeError::UnsupportedVersion { version: 2 },
        ),
        (
            &base64url(r#"{"v":1,"url":"  ","bootstrapToken":"t","expiresAtMs":1}"#),
            SetupCodeError::MissingField { field: "url" },
        ),
        (
            &base64url(r#"{"v":1,"url":"u","expiresAtMs":1}"#),
            SetupCodeError::MissingField {
                field: "bootstrapToken",
            },
        ),
        (
            &base64url(r#"{"url":"u","bootstrapToken":"t","expiresAtMs":1}"#),
            SetupCodeError::MissingField { field: "v" },
        ),
    ];
    for (text, error) in cases {
        assert_eq!(SetupCodePayload::decode(text), Err(error), "{text}");
    }
}

#[test]
fn debug_never_shows_the_token() {
    let debug = format!("{:?}", payload());
    assert!(!debug.contains("bt-secret"), "{debug}");
    assert!(debug.contains("ws://127.0.0.1:7420/node"), "{debug}");
}
