use pretty_assertions::assert_eq;

use crate::config::ApiKey;
use crate::config::ModelApi;
use crate::config::ModelConfig;
use crate::config::ModelSpecError;
use crate::config::RetryPolicy;
use gatehouse_protocol::error::ErrorCode;

#[test]
fn parses_specs() {
    let cases: Vec<(&str, (ModelApi, &str, &str))> = vec![
        ("mock", (ModelApi::Mock, "", "mock")),
        (
            "openai-responses:https://api.openai.com/v1:gpt-5",
            (ModelApi::Responses, "https://api.openai.com/v1", "gpt-5"),
        ),
        (
            "openai-chat:http://127.0.0.1:8000/v1:meta-llama/Llama-3.1-8B",
            (
                ModelApi::Chat,
                "http://127.0.0.1:8000/v1",
                "meta-llama/Llama-3.1-8B",
            ),
        ),
        (
            "anthropic:https://api.anthropic.com/v1:claude-sonnet-4-5",
            (
                ModelApi::Anthropic,
                "https://api.anthropic.com/v1",
                "claude-sonnet-4-5",
            ),
        ),
        (
            "openai-responses:http://localhost:7430/v1:mock-model",
            (
                ModelApi::Responses,
                "http://localhost:7430/v1",
                "mock-model",
            ),
        ),
    ];
    for (spec, expected) in cases {
        let config = ModelConfig::parse(spec, "MY_KEY").unwrap();
        let (api, base_url, model) = expected;
        assert_eq!(
            (config.api, config.base_url.as_str(), config.model.as_str()),
            (api, base_url, model),
            "{spec}"
        );
        assert_eq!(config.key_env, "MY_KEY");
        assert_eq!(config.spec(), spec);
    }
}

#[test]
fn refuses_bad_specs() {
    let cases = [
        (
            "openai:http://x:m",
            ModelSpecError::UnknownApi {
                spec: String::from("openai:http://x:m"),
            },
        ),
        (
            "mock:extra",
            ModelSpecError::UnknownApi {
                spec: String::from("mock:extra"),
            },
        ),
        (
            "openai-chat:gpt-5",
            ModelSpecError::InvalidUrl {
                spec: String::from("openai-chat:gpt-5"),
            },
        ),
        (
            "openai-chat:ftp://host:gpt-5",
            ModelSpecError::InvalidUrl {
                spec: String::from("openai-chat:ftp://host:gpt-5"),
            },
        ),
        (
            "openai-responses:http://:gpt-5",
            ModelSpecError::InvalidUrl {
                spec: String::from("openai-responses:http://:gpt-5"),
            },
        ),
        (
            "openai-responses:http://host/v1:",
            ModelSpecError::MissingModel {
                spec: String::from("openai-responses:http://host/v1:"),
            },
        ),
        (
            "openai-responses:http://host:8000/v1",
            ModelSpecError::MissingModel {
                spec: String::from("openai-responses:http://host:8000/v1"),
            },
        ),
    ];
    for (spec, expected) in cases {
        assert_eq!(ModelConfig::parse(spec, "K"), Err(expected), "{spec}");
    }
}

#[test]
fn a_missing_or_empty_key_is_an_auth_error() {
    let config = ModelConfig::parse("openai-chat:http://127.0.0.1:9/v1:m", "GH_TEST_KEY").unwrap();
    for value in [None, Some(String::new())] {
        let error = config.build_with_env(&|_| value.clone()).unwrap_err();
        assert_eq!(error.code(), ErrorCode::ModelAuthFailed);
        assert_eq!(
            error.to_string(),
            "model api key variable GH_TEST_KEY is unset or empty"
        );
    }
    // The mock needs no key.
    assert!(ModelConfig::mock().build_with_env(&|_| None).is_ok());
}

#[test]
fn https_builds_a_tls_client_and_other_schemes_are_refused() {
    let config =
        ModelConfig::parse("openai-responses:https://api.openai.com/v1:gpt-5", "K").unwrap();
    let client = config
        .build_with_env(&|_| Some(String::from("sk-secret")))
        .unwrap();
    assert!(!format!("{client:?}").contains("sk-secret"));
    let mut ftp = config.clone();
    ftp.base_url = String::from("ftp://example.com/v1");
    let error = ftp
        .build_with_env(&|_| Some(String::from("sk-secret")))
        .unwrap_err();
    assert_eq!(error.code(), ErrorCode::ModelUnavailable);
    assert!(!format!("{error:?}").contains("sk-secret"));
}

#[test]
fn the_key_never_shows_in_debug_output() {
    let config = ModelConfig::parse("openai-chat:http://127.0.0.1:9/v1:m", "K").unwrap();
    let client = config
        .build_with_env(&|_| Some(String::from("sk-very-secret")))
        .unwrap();
    let debug = format!(
        "{client:?} {:?}",
        ApiKey::new(String::from("sk-very-secret"))
    );
    assert!(!debug.contains("sk-very-secret"), "{debug}");
}

#[test]
fn retries_are_capped_at_two() {
    let millisecond = std::time::Duration::from_millis(1);
    let policy = RetryPolicy::new(millisecond, millisecond, 5);
    assert_eq!(policy.n_retries(), 2);
    let mut pauses = policy.pauses();
    assert!(pauses.next(None).is_some());
    assert!(pauses.next(None).is_some());
    assert_eq!(pauses.next(None), None, "no retry left");
}

#[test]
fn the_default_pauses_are_500_ms_then_2_s_with_jitter_of_up_to_as_long_again() {
    use std::time::Duration;
    let policy = RetryPolicy::default();
    assert_eq!(policy.n_retries(), 2);
    let delays = [Duration::from_millis(500), Duration::from_secs(2)];
    let mut first_pauses = std::collections::HashSet::new();
    for _ in 0..100 {
        let mut pauses = policy.pauses();
        for delay in delays {
            let pause = pauses.next(None).unwrap();
            assert!(
                pause >= delay && pause < delay * 2,
                "{pause:?} for {delay:?}"
            );
            if delay == delays[0] {
                first_pauses.insert(pause);
            }
        }
        assert_eq!(pauses.next(None), None, "no retry left");
    }
    assert!(first_pauses.len() > 1, "the pauses have no jitter");
}

#[test]
fn a_retry_after_replaces_the_backoff_up_to_its_bound() {
    use std::time::Duration;
    let policy = RetryPolicy::new(Duration::from_millis(500), Duration::from_secs(2), 2)
        .with_max_retry_after(Duration::from_secs(5));
    let mut pauses = policy.pauses();
    assert_eq!(
        pauses.next(Some(Duration::from_secs(3))),
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        pauses.next(Some(Duration::from_secs(3600))),
        Some(Duration::from_secs(5))
    );
    assert_eq!(pauses.next(Some(Duration::ZERO)), None, "no retry left");
    assert_eq!(
        RetryPolicy::default().max_retry_after(),
        crate::config::DEFAULT_MAX_RETRY_AFTER
    );
}

#[test]
fn retry_after_is_seconds_or_an_http_date() {
    use std::time::Duration;
    use std::time::SystemTime;

    use crate::http::parse_retry_after;
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_445_412_480);
    assert_eq!(
        parse_retry_after("120", now),
        Some(Duration::from_secs(120))
    );
    assert_eq!(parse_retry_after(" 0 ", now), Some(Duration::ZERO));
    // 1445412480 is Wed, 21 Oct 2015 07:28:00 GMT.
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:28:07 GMT", now),
        Some(Duration::from_secs(7))
    );
    assert_eq!(
        parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now),
        Some(Duration::ZERO),
        "a date already past is no wait"
    );
    assert_eq!(parse_retry_after("soon", now), None);
    assert_eq!(parse_retry_after("-5", now), None);
}
