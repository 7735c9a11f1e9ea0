//! `gatehouse skills list`: the skills catalog of both hosts, through the Gateway's HTTP API.

use std::process::ExitCode;

/// Arguments of `gatehouse skills`.
#[derive(Debug, clap::Args)]
pub(crate) struct SkillsArgs {
    #[command(subcommand)]
    command: SkillsCommand,
    #[command(flatten)]
    api: crate::chat_cmd::ApiArgs,
}

#[derive(Debug, clap::Subcommand)]
enum SkillsCommand {
    /// List every skill with its host, tier, and why it is gated out or shadowed.
    List,
}

/// Runs `gatehouse skills list`.
pub(crate) fn run(args: SkillsArgs) -> anyhow::Result<ExitCode> {
    let SkillsCommand::List = args.command;
    let (base, token) = args.api.resolve()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let body: serde_json::Value = runtime.block_on(async {
        let response = reqwest::Client::new()
            .get(format!("{base}/v1/skills"))
            .bearer_auth(&token)
            .send()
            .await
            .map_err(|error| anyhow::anyhow!("cannot reach the gateway at {base}: {error}"))?;
        let status = response.status();
        if !status.is_success() {
            return Err(anyhow::anyhow!(
                "the gateway refused ({status}): {}",
                response.text().await.unwrap_or_default()
            ));
        }
        Ok(response.json().await?)
    })?;
    if args.api.json {
        crate::output::json(&body);
        return Ok(ExitCode::SUCCESS);
    }
    let mut lines = vec![format!(
        "{:<24} {:<8} {:<17} {:<10} {}",
        "name", "host", "tier", "state", "why"
    )];
    for skill in body["skills"].as_array().into_iter().flatten() {
        let gated: Vec<&str> = skill["gatedOut"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(serde_json::Value::as_str)
            .collect();
        let (state, why) = match (skill["shadowedBy"].as_str(), gated.is_empty()) {
            (Some(winner), _) => ("shadowed", format!("the {winner} skill wins")),
            (None, false) => ("gated", gated.join("; ")),
            (None, true) => ("available", String::new()),
        };
        lines.push(format!(
            "{:<24} {:<8} {:<17} {:<10} {}",
            skill["name"].as_str().unwrap_or_default(),
            skill["host"].as_str().unwrap_or_default(),
            skill["tier"].as_str().unwrap_or_default(),
            state,
            why
        ));
    }
    for warning in body["warnings"].as_array().into_iter().flatten() {
        lines.push(format!("warning: {}", warning.as_str().unwrap_or_default()));
    }
    crate::output::line(&lines.join("\n"));
    Ok(ExitCode::SUCCESS)
}
