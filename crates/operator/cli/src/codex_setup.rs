//! Wiring of the Codex runtime for `gatehouse gateway`, `gatehouse node` and `gatehouse up`:
//! the node's Codex settings (binary, model provider) and the Gateway's Codex runtime.

use std::path::Path;
use std::sync::Arc;

use gatehouse_codex_driver::runtime::ApprovalDecision;
use gatehouse_codex_driver::runtime::CodexConfig;
use gatehouse_codex_driver::runtime::CodexRuntime;
use gatehouse_harness::codex_supervisor::CodexSettings;
use gatehouse_harness::model_spec::ModelSpec;

use crate::exit::UsageError;

/// The environment variable naming the Codex binary when `--codex-bin` is not given.
pub(crate) const CODEX_BIN_ENV: &str = "GATEHOUSE_CODEX_BIN";

/// The model slug `gatehouse up --runtime codex` gives Codex for the mock model: a slug Codex
/// knows, so that it offers its full tool set (an unknown slug disables `apply_patch`).
pub(crate) const MOCK_CODEX_MODEL: &str = "gpt-5.5";

/// Returns the node's Codex settings for `model`, finding the binary from `codex_bin`, then
/// [`CODEX_BIN_ENV`], then `PATH`.
///
/// # Errors
/// A usage error when the model is not a Responses endpoint or Codex is missing; the message
/// says how to fix it.
pub(crate) fn node_settings(
    model: &ModelSpec,
    codex_bin: Option<&Path>,
    send_key: bool,
) -> anyhow::Result<CodexSettings> {
    let ModelSpec::Remote(remote) = model else {
        return Err(UsageError::new(
            "the codex runtime needs a Responses endpoint: pass --model openai-responses:URL:MODEL (Codex calls URL/responses with the key named by --model-key-env)",
        )
        .into());
    };
    gatehouse_harness::codex_supervisor::check_model(remote).map_err(UsageError::new)?;
    let from_env = std::env::var_os(CODEX_BIN_ENV).map(std::path::PathBuf::from);
    let program =
        gatehouse_harness::codex_supervisor::find_codex(codex_bin.or(from_env.as_deref()))
            .map_err(UsageError::new)?;
    Ok(CodexSettings {
        program,
        model: remote.clone(),
        send_key,
    })
}

/// Parses an approval decision flag.
///
/// # Errors
/// A usage error naming the flag.
pub(crate) fn approval(flag: &str, value: Option<&str>) -> anyhow::Result<ApprovalDecision> {
    match value {
        None => Ok(ApprovalDecision::Accept),
        Some(text) => ApprovalDecision::parse(text)
            .map_err(|message| UsageError::new(format!("{flag}: {message}")).into()),
    }
}

/// Returns the Gateway extensions that run turns on the Harness's Codex.
pub(crate) fn gateway_extensions(config: CodexConfig) -> gatehouse_gateway::Extensions {
    gatehouse_gateway::Extensions {
        runtime_factory: Some(Box::new(move |parts| {
            let runtime: Arc<dyn gatehouse_gateway::TurnRuntime> = CodexRuntime::new(parts, config);
            runtime
        })),
        ..gatehouse_gateway::Extensions::default()
    }
}
