use pretty_assertions::assert_eq;

use crate::model_spec::ModelApi;
use crate::model_spec::ModelSpec;
use crate::model_spec::ModelSpecError;

#[test]
fn parse_accepts_the_documented_forms() {
    assert_eq!(
        ModelSpec::parse("mock", "OPENAI_API_KEY"),
        Ok(ModelSpec::Mock)
    );
    let table = [
        (
            "openai-chat:http://127.0.0.1:9/v1:gpt",
            ModelApi::Chat,
            "http://127.0.0.1:9/v1",
            "gpt",
        ),
        (
            "openai-responses:https://api.openai.com/v1:gpt-4.1-mini",
            ModelApi::Responses,
            "https://api.openai.com/v1",
            "gpt-4.1-mini",
        ),
        (
            "openai-chat:http://llm:8000:qwen",
            ModelApi::Chat,
            "http://llm:8000",
            "qwen",
        ),
        (
            "anthropic:https://api.anthropic.com/v1:claude-sonnet-4-5",
            ModelApi::Anthropic,
            "https://api.anthropic.com/v1",
            "claude-sonnet-4-5",
        ),
    ];
    for (spec, api, base_url, model) in table {
        let Ok(ModelSpec::Remote(remote)) = ModelSpec::parse(spec, "MY_KEY") else {
            panic!("{spec} was refused");
        };
        assert_eq!(
            (
                remote.api(),
                remote.base_url(),
                remote.model(),
                remote.key_env()
            ),
            (api, base_url, model, "MY_KEY"),
            "{spec}"
        );
        assert_eq!(ModelSpec::Remote(remote).to_string(), spec);
    }
}

#[test]
fn parse_refuses_malformed_specs_without_repeating_them() {
    let table = [
        ("nonsense", "unknown api"),
        ("", "unknown api"),
        ("anthropic-messages:http://x/v1:claude", "unknown api"),
        (
            "openai-chat:gpt",
            "the url must start with http:// or https://",
        ),
        (
            "openai-chat:http://x/v1:",
            "no model name after the url (a number there is taken for a port)",
        ),
        (
            "openai-chat:http://llm:8000",
            "no model name after the url (a number there is taken for a port)",
        ),
        (
            "openai-chat:ftp://x/v1:gpt",
            "the url must start with http:// or https://",
        ),
        (
            "openai-chat:http://x",
            "the url must start with http:// or https://",
        ),
        ("openai-chat:http:///v1:gpt", "the url has no host"),
        (
            "openai-chat:https://user:sk-secret@x/v1:gpt",
            "the url must not carry credentials; put the key in the variable named by --model-key-env",
        ),
    ];
    for (spec, reason) in table {
        let err = ModelSpec::parse(spec, "OPENAI_API_KEY").unwrap_err();
        assert_eq!(err, ModelSpecError::InvalidSpec { reason }, "{spec}");
        assert!(!err.to_string().contains("sk-secret"));
    }
}

#[test]
fn parse_refuses_invalid_key_variable_names() {
    for name in ["", "1KEY", "MY-KEY", "KEY=x"] {
        assert_eq!(
            ModelSpec::parse("mock", name),
            Err(ModelSpecError::InvalidKeyEnv {
                name: name.to_owned()
            })
        );
    }
    assert_eq!(ModelSpec::parse("mock", "_key1"), Ok(ModelSpec::Mock));
    assert_eq!(ModelSpec::Mock.key_env(), None);
}

#[test]
fn the_default_key_variable_depends_on_the_api() {
    use crate::model_spec::default_key_env;
    assert_eq!(
        [
            "mock",
            "openai-responses:https://api.openai.com/v1:gpt",
            "openai-chat:http://llm:8000:qwen",
            "anthropic:https://api.anthropic.com/v1:claude-sonnet-4-5",
        ]
        .map(default_key_env),
        [
            "OPENAI_API_KEY",
            "OPENAI_API_KEY",
            "OPENAI_API_KEY",
            "ANTHROPIC_API_KEY"
        ]
    );
}
