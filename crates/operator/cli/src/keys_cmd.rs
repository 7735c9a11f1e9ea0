//! `gatehouse keys create|list|revoke`: the Gateway's API keys, through its HTTP API (an admin
//! key or the operator token is needed).

use std::process::ExitCode;

use gatehouse_api::keys::ApiKeyParams;
use gatehouse_api::keys::ApiKeySummary;
use gatehouse_api::keys::Scope;

/// Arguments of `gatehouse keys`.
#[derive(Debug, clap::Args)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    command: KeysCommand,
    #[command(flatten)]
    api: crate::chat_cmd::ApiArgs,
}

#[derive(Debug, clap::Subcommand)]
enum KeysCommand {
    /// Create a key and print its secret, which is shown only this once.
    Create {
        /// The key's unique name (letters, digits, `.`, `_`, `-`); logs and the audit trail show
        /// only this.
        #[arg(long)]
        name: String,
        /// What the key may do: chat, read, documents or admin (repeat for several).
        #[arg(long = "scope", required = true, value_parser = parse_scope)]
        scopes: Vec<Scope>,
        /// For a chat key: the session-key prefix its sessions must start with.
        #[arg(long)]
        sessions: Option<String>,
        /// Seconds until the key expires (default: never).
        #[arg(long)]
        expires_in: Option<u64>,
        /// The most requests per minute (default: unlimited).
        #[arg(long)]
        requests_per_minute: Option<u32>,
        /// The most turns queued or running at once for its requests (default: the Gateway's
        /// share, half its worker capacity).
        #[arg(long)]
        concurrent_turns: Option<u32>,
        /// The most event streams and long polls it may hold open at once (default: the
        /// Gateway's share, 64).
        #[arg(long)]
        max_streams: Option<u32>,
        /// The most media bytes it may hold: its uploads plus the checkpoints and worktree
        /// versions of the sessions it creates (default: the Gateway's share, a quarter of its
        /// media quota).
        #[arg(long)]
        media_quota_bytes: Option<u64>,
        /// The most tokens (`totalTokens`) its turns may use per UTC day; past it its messages
        /// are refused with 429 BUDGET_EXHAUSTED until the next UTC day (default: no budget).
        #[arg(long)]
        tokens_per_day: Option<u64>,
    },
    /// List the keys (names, scopes, expiry, last use; never a secret).
    List,
    /// Revoke a key: it is refused from the next request on, on every replica.
    Revoke {
        /// The key's name.
        name: String,
    },
}

fn parse_scope(text: &str) -> Result<Scope, String> {
    Scope::parse(text)
        .ok_or_else(|| format!("unknown scope {text:?}: use chat, read, documents or admin"))
}

/// Runs `gatehouse keys`: exit 0 on success, 1 when the Gateway refuses or a revoked name is
/// unknown.
pub(crate) fn run(args: KeysArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let runtime = crate::signals::client_runtime()?;
    runtime.block_on(async move {
        match args.command {
            KeysCommand::Create {
                name,
                scopes,
                sessions,
                expires_in,
                requests_per_minute,
                concurrent_turns,
                max_streams,
                media_quota_bytes,
                tokens_per_day,
            } => {
                let params = ApiKeyParams {
                    name,
                    scopes,
                    sessions,
                    expires_in_seconds: expires_in,
                    requests_per_minute,
                    concurrent_turns,
                    max_streams,
                    media_quota_bytes,
                    tokens_per_day,
                };
                let created = client
                    .create_key(&params)
                    .await
                    .map_err(crate::memory_cmd::refused)?;
                match args.api.json {
                    true => crate::output::json(&created),
                    false => crate::output::line(&created.key),
                }
                Ok(ExitCode::SUCCESS)
            }
            KeysCommand::List => {
                let list = client.keys().await.map_err(crate::memory_cmd::refused)?;
                match args.api.json {
                    true => crate::output::json(&list),
                    false => {
                        for key in &list.keys {
                            crate::output::line(&describe(key));
                        }
                    }
                }
                Ok(ExitCode::SUCCESS)
            }
            KeysCommand::Revoke { name } => {
                let revoked = client
                    .revoke_key(&name)
                    .await
                    .map_err(crate::memory_cmd::refused)?;
                if args.api.json {
                    crate::output::json(&revoked);
                }
                match revoked.revoked {
                    true => {
                        if !args.api.json {
                            crate::output::line(&format!("revoked {name}"));
                        }
                        Ok(ExitCode::SUCCESS)
                    }
                    false => {
                        crate::output::error_line(&format!("no key is named {name}"));
                        Ok(ExitCode::from(1))
                    }
                }
            }
        }
    })
}

/// Returns one line of `gatehouse keys list`: the name, the scopes, then what is set of the
/// prefix, the expiry, the last use and the limits.
fn describe(key: &ApiKeySummary) -> String {
    let scopes: Vec<&str> = key.scopes.iter().map(|scope| scope.as_str()).collect();
    let mut line = format!("{}  scopes={}", key.name, scopes.join(","));
    let optional = [
        (
            "sessions",
            key.sessions.as_ref().map(|prefix| format!("{prefix}*")),
        ),
        (
            "expiresAtMs",
            key.expires_at_ms.map(|expires| expires.to_string()),
        ),
        (
            "lastUsedAtMs",
            key.last_used_at_ms.map(|used| used.to_string()),
        ),
        (
            "requestsPerMinute",
            key.requests_per_minute.map(|limit| limit.to_string()),
        ),
        (
            "concurrentTurns",
            key.concurrent_turns.map(|limit| limit.to_string()),
        ),
        ("maxStreams", key.max_streams.map(|limit| limit.to_string())),
        (
            "mediaQuotaBytes",
            key.media_quota_bytes.map(|limit| limit.to_string()),
        ),
        (
            "tokensPerDay",
            key.tokens_per_day.map(|limit| limit.to_string()),
        ),
    ];
    for (label, value) in optional {
        if let Some(value) = value {
            line.push_str(&format!("  {label}={value}"));
        }
    }
    line
}
