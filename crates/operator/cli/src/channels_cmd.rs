//! `gatehouse channels list|pairings NAME|approve NAME CODE|deny NAME CODE`: the Gateway's
//! channels and their pending pairings, through the HTTP API (admin for the pairing commands).
//! The Gateway and token are found as `gatehouse keys` finds them.

use std::process::ExitCode;

use gatehouse_api::channels::ChannelStatus;

use crate::exit::UsageError;

#[derive(Debug, clap::Args)]
pub(crate) struct ChannelsArgs {
    #[command(subcommand)]
    command: ChannelsCommand,
    #[command(flatten)]
    api: crate::chat_cmd::ApiArgs,
}

#[derive(Debug, clap::Subcommand)]
enum ChannelsCommand {
    /// List the configured channels with their state and pending deliveries.
    List,
    /// List a channel's pending pairing requests.
    Pairings {
        /// The channel's name.
        name: String,
    },
    /// Approve a pairing: its sender may write to the agent from now on.
    Approve {
        /// The channel's name.
        name: String,
        /// The code the sender was given.
        code: String,
    },
    /// Deny a pairing: the request is dropped; the sender may ask again later.
    Deny {
        /// The channel's name.
        name: String,
        /// The code the sender was given.
        code: String,
    },
}

/// Refuses a channel name or code that could not be one, before it is put in a URL path.
fn check(name: &str, code: Option<&str>) -> Result<(), UsageError> {
    if !gatehouse_channels::config::valid_name(name) {
        return Err(UsageError::new(format!(
            "{name:?} is not a channel name (1 to 64 of a-z, 0-9 and '-')"
        )));
    }
    if let Some(code) = code
        && !gatehouse_channels::pairing::plausible_code(code)
    {
        return Err(UsageError::new(format!(
            "{code:?} is not a pairing code (8 of {})",
            String::from_utf8_lossy(gatehouse_channels::pairing::CODE_ALPHABET)
        )));
    }
    Ok(())
}

pub(crate) fn run(args: ChannelsArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        ChannelsCommand::List => {}
        ChannelsCommand::Pairings { name } => check(name, None)?,
        ChannelsCommand::Approve { name, code } | ChannelsCommand::Deny { name, code } => {
            check(name, Some(code))?;
        }
    }
    let client = args.api.client()?;
    let json = args.api.json;
    let runtime = crate::signals::client_runtime()?;
    runtime.block_on(async move {
        let refused = crate::memory_cmd::refused;
        match args.command {
            ChannelsCommand::List => {
                let list = client.channels().await.map_err(refused)?;
                match json {
                    true => crate::output::json(&list),
                    false => list
                        .channels
                        .iter()
                        .for_each(|channel| crate::output::line(&describe(channel))),
                }
            }
            ChannelsCommand::Pairings { name } => {
                let list = client.channel_pairings(&name).await.map_err(refused)?;
                match json {
                    true => crate::output::json(&list),
                    false => list.pairings.iter().for_each(|pairing| {
                        crate::output::line(&format!(
                            "{}  sender={}  expiresAtMs={}",
                            pairing.code,
                            pairing.sender.escape_debug(),
                            pairing.expires_at_ms
                        ));
                    }),
                }
            }
            ChannelsCommand::Approve { name, code } => {
                let approved = client
                    .approve_pairing(&name, &code)
                    .await
                    .map_err(refused)?;
                match json {
                    true => crate::output::json(&approved),
                    false => {
                        crate::output::line(&format!("approved {}", approved.sender.escape_debug()))
                    }
                }
            }
            ChannelsCommand::Deny { name, code } => {
                let denied = client.deny_pairing(&name, &code).await.map_err(refused)?;
                match json {
                    true => crate::output::json(&denied),
                    false => {
                        crate::output::line(&format!("denied {}", denied.sender.escape_debug()))
                    }
                }
            }
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// One line of `gatehouse channels list`; platform text is escaped, so nothing a sender or a
/// platform wrote reaches the terminal as a control sequence.
fn describe(channel: &ChannelStatus) -> String {
    let state = serde_json::to_value(channel.state)
        .ok()
        .and_then(|value| value.as_str().map(str::to_owned))
        .unwrap_or_default();
    let mut line = format!(
        "{}  kind={}  agent={}  state={state}  pending={}",
        channel.name,
        channel.kind.as_str(),
        channel.agent,
        channel.pending_deliveries
    );
    if let Some(at) = channel.last_inbound_at {
        line.push_str(&format!("  lastInboundAt={at}"));
    }
    if let Some(at) = channel.last_delivery_at {
        line.push_str(&format!("  lastDeliveryAt={at}"));
    }
    if let Some(error) = &channel.last_error {
        line.push_str(&format!(
            "  lastError={}: {}",
            error.code,
            error.message.escape_debug()
        ));
    }
    line
}
