//! `gatehouse usage [--group-by session|key|agent|day] [--from MS] [--to MS]`: the tokens and
//! model calls of turns, through `GET /v1/usage` (read scope). The Gateway and token are found
//! as `gatehouse keys` finds them.

use std::process::ExitCode;

use gatehouse_api::usage::UsageGroupBy;
use gatehouse_api::usage::UsageParams;
use gatehouse_api::usage::UsageRowView;

#[derive(Debug, clap::Args)]
pub(crate) struct UsageArgs {
    /// How turns are grouped: by session, by the API key that sent them (`-` for the operator
    /// token and channels), by agent, or by UTC day.
    #[arg(long, value_enum, default_value = "session")]
    group_by: GroupBy,
    /// Count turns admitted at or after this time (Unix milliseconds).
    #[arg(long, value_name = "MS")]
    from: Option<i64>,
    /// Count turns admitted before this time (Unix milliseconds).
    #[arg(long, value_name = "MS")]
    to: Option<i64>,
    #[command(flatten)]
    api: crate::chat_cmd::ApiArgs,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum GroupBy {
    Session,
    Key,
    Agent,
    Day,
}

impl From<GroupBy> for UsageGroupBy {
    fn from(group_by: GroupBy) -> Self {
        match group_by {
            GroupBy::Session => UsageGroupBy::Session,
            GroupBy::Key => UsageGroupBy::Key,
            GroupBy::Agent => UsageGroupBy::Agent,
            GroupBy::Day => UsageGroupBy::Day,
        }
    }
}

/// Runs `gatehouse usage`: exit 0 with the rows (a line each, or `--json`), 1 when the Gateway
/// refuses.
pub(crate) fn run(args: UsageArgs) -> anyhow::Result<ExitCode> {
    let client = args.api.client()?;
    let params = UsageParams {
        group_by: args.group_by.into(),
        from: args.from,
        to: args.to,
    };
    let runtime = crate::signals::client_runtime()?;
    runtime.block_on(async move {
        let usage = client
            .usage(&params)
            .await
            .map_err(crate::memory_cmd::refused)?;
        match args.api.json {
            true => crate::output::json(&usage),
            false => usage
                .rows
                .iter()
                .for_each(|row| crate::output::line(&describe(row))),
        }
        Ok(ExitCode::SUCCESS)
    })
}

/// One row as a line: the group, then its counts as `name=value`.
fn describe(row: &UsageRowView) -> String {
    format!(
        "{}  turns={}  modelCalls={}  inputTokens={}  cachedInputTokens={}  outputTokens={}  totalTokens={}",
        row.group.escape_debug(),
        row.totals.turns,
        row.totals.model_calls,
        row.totals.input_tokens,
        row.totals.cached_input_tokens,
        row.totals.output_tokens,
        row.totals.total_tokens
    )
}
