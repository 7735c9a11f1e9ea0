//! `gatehouse setup-code`: asks a running Gateway for a one-time enrollment code and prints it.

use std::path::PathBuf;
use std::process::ExitCode;

use gatehouse_api::client::Client;
use gatehouse_api::nodes::SetupCodeParams;
use gatehouse_gateway::OPERATOR_TOKEN_ENV;

use crate::exit::UsageError;

/// Arguments of `gatehouse setup-code`.
#[derive(Debug, clap::Args)]
pub(crate) struct SetupCodeArgs {
    /// The Gateway's base URL.
    #[arg(long, default_value = "http://127.0.0.1:7420")]
    url: String,
    /// A file holding the operator token (default: the GATEHOUSE_TOKEN variable).
    #[arg(long)]
    token_file: Option<PathBuf>,
    /// How long the code stays valid, in seconds.
    #[arg(long, default_value_t = 600)]
    ttl_seconds: u64,
    /// Print `{"setupCode","expiresAtMs"}` instead of the bare code.
    #[arg(long)]
    json: bool,
}

/// Runs `gatehouse setup-code`.
pub(crate) fn run(args: SetupCodeArgs) -> anyhow::Result<ExitCode> {
    let token = match &args.token_file {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|error| UsageError::new(format!("cannot read {}: {error}", path.display())))?
            .trim()
            .to_owned(),
        None => std::env::var(OPERATOR_TOKEN_ENV).map_err(|_| {
            UsageError::new(
                "no operator token: pass --token-file <gateway-state>/operator-token or set GATEHOUSE_TOKEN",
            )
        })?,
    };
    let client = Client::new(&args.url, &token);
    let runtime = crate::signals::client_runtime()?;
    let params = SetupCodeParams {
        ttl_seconds: Some(args.ttl_seconds),
    };
    let issued = runtime.block_on(client.create_setup_code(&params))?;
    match args.json {
        true => crate::output::json(&issued),
        false => crate::output::line(&issued.setup_code),
    }
    Ok(ExitCode::SUCCESS)
}
