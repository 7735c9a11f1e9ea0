use base64::Engine;
use pretty_assertions::assert_eq;
use serde_json::json;

use crate::setup_code::SetupCode;
use gatehouse_protocol::setup_code::SetupCodeError;

fn encode(value: &serde_json::Value) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(value.to_string())
}

fn valid_json() -> serde_json::Value {
    json!({"v": 1, "url": "ws://127.0.0.1:7420/node", "bootstrapToken": "bt-secret", "expiresAtMs": 1_900_000_000_000_i64})
}

#[test]
fn parses_a_valid_code() {
    let code = SetupCode::parse(&encode(&valid_json())).unwrap();
    assert_eq!(code.url(), "ws://127.0.0.1:7420/node");
    assert_eq!(code.bootstrap_token(), "bt-secret");
    assert_eq!(code.expires_at_ms(), 1_900_000_000_000);
}

#[test]
fn ignores_surrounding_whitespace_and_padding() {
    let text = format!("  {}==\n\n", encode(&valid_json()));
    let code = SetupCode::parse(&text).unwrap();
    assert_eq!(code.bootstrap_token(), "bt-secret");
}

#[test]
fn normalizes_an_http_url() {
    let mut value = valid_json();
    value["url"] = json!("http://gw:7420");
    let code = SetupCode::parse(&encode(&value)).unwrap();
    assert_eq!(code.url(), "ws://gw:7420/node");
}

#[test]
fn refuses_bad_base64() {
    assert_eq!(
        SetupCode::parse("not base64!"),
        Err(SetupCodeError::NotBase64)
    );
    assert_eq!(SetupCode::parse("   \n"), Err(SetupCodeError::Empty));
}

#[test]
fn refuses_bad_json() {
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode("{not json");
    assert!(matches!(
        SetupCode::parse(&text),
        Err(SetupCodeError::NotJson { .. })
    ));
}

#[test]
fn refuses_missing_or_empty_fields() {
    let cases = [
        ("bootstrapToken", None),
        ("bootstrapToken", Some(json!(""))),
        ("url", None),
        ("v", None),
        ("expiresAtMs", None),
    ];
    for (field, replacement) in cases {
        let mut value = valid_json();
        let object = value.as_object_mut().unwrap();
        match replacement {
            Some(replacement) => object.insert(field.to_owned(), replacement),
            None => object.remove(field),
        };
        assert_eq!(
            SetupCode::parse(&encode(&value)),
            Err(SetupCodeError::MissingField { field }),
            "{field}"
        );
    }
}

#[test]
fn refuses_another_version_and_a_bad_url() {
    let mut value = valid_json();
    value["v"] = json!(2);
    assert_eq!(
        SetupCode::parse(&encode(&value)),
        Err(SetupCodeError::UnsupportedVersion { version: 2 })
    );
    let mut value = valid_json();
    value["url"] = json!("ftp://gw");
    assert!(matches!(
        SetupCode::parse(&encode(&value)),
        Err(SetupCodeError::InvalidUrl { .. })
    ));
}

#[test]
fn debug_and_errors_never_show_the_token() {
    let code = SetupCode::parse(&encode(&valid_json())).unwrap();
    assert!(!format!("{code:?}").contains("bt-secret"));
    let mut value = valid_json();
    value["expiresAtMs"] = json!("bt-secret");
    let err = SetupCode::parse(&encode(&value)).unwrap_err();
    assert!(!err.to_string().contains("bt-secret"), "{err}");
}
