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
    let client = args.api.client()?;
    let runtime = crate::signals::client_runtime()?;
    let view = runtime.block_on(client.skills())?;
    if args.api.json {
        crate::output::json(&view);
        return Ok(ExitCode::SUCCESS);
    }
    let mut lines = vec![format!(
        "{:<24} {:<8} {:<17} {:<10} {}",
        "name", "host", "tier", "state", "why"
    )];
    for skill in &view.skills {
        let (state, why) = match (skill.shadowed_by, skill.gated_out.is_empty()) {
            (Some(winner), _) => ("shadowed", format!("the {} skill wins", winner.as_str())),
            (None, false) => ("gated", skill.gated_out.join("; ")),
            (None, true) => ("available", String::new()),
        };
        lines.push(format!(
            "{:<24} {:<8} {:<17} {:<10} {}",
            skill.name,
            skill.host,
            skill.tier.as_str(),
            state,
            why
        ));
    }
    for warning in &view.warnings {
        lines.push(format!("warning: {warning}"));
    }
    crate::output::line(&lines.join("\n"));
    Ok(ExitCode::SUCCESS)
}
