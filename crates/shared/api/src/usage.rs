//! `GET /v1/usage`: the tokens and model calls of turns, summed by session, API key, agent or
//! UTC day.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// How `GET /v1/usage` groups turns (`groupBy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub enum UsageGroupBy {
    /// By session key (the default).
    #[default]
    Session,
    /// By the name of the API key that sent the turn; turns the operator token or a channel
    /// sent are the group `-`.
    Key,
    /// By agent: the `<agent>` of an `agent:<agent>:…` session key, `main` for other sessions.
    Agent,
    /// By UTC day of admission, as `YYYY-MM-DD`.
    Day,
}

impl UsageGroupBy {
    /// Returns the name the query and the CLI use.
    pub fn as_str(self) -> &'static str {
        match self {
            UsageGroupBy::Session => "session",
            UsageGroupBy::Key => "key",
            UsageGroupBy::Agent => "agent",
            UsageGroupBy::Day => "day",
        }
    }
}

/// The query of `GET /v1/usage`: turns admitted in `[from, to)` (Unix milliseconds; either may
/// be left out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageParams {
    /// The grouping.
    #[serde(default)]
    pub group_by: UsageGroupBy,
    /// The earliest admission time counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<i64>,
    /// The admission time from which turns are no longer counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<i64>,
}

/// The sums of a group of turns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageTotals {
    /// Turns admitted (every status).
    pub turns: u64,
    /// Their model calls that answered.
    pub model_calls: u64,
    /// Their uncached input tokens (cache writes included).
    pub input_tokens: u64,
    /// Their input tokens read from a prompt cache.
    pub cached_input_tokens: u64,
    /// Their output tokens.
    pub output_tokens: u64,
    /// All of them: input, cached input and output.
    pub total_tokens: u64,
}

impl UsageTotals {
    /// Returns the sums of `self` and `other`, saturating.
    #[must_use]
    pub fn plus(self, other: Self) -> Self {
        Self {
            turns: self.turns.saturating_add(other.turns),
            model_calls: self.model_calls.saturating_add(other.model_calls),
            input_tokens: self.input_tokens.saturating_add(other.input_tokens),
            cached_input_tokens: self
                .cached_input_tokens
                .saturating_add(other.cached_input_tokens),
            output_tokens: self.output_tokens.saturating_add(other.output_tokens),
            total_tokens: self.total_tokens.saturating_add(other.total_tokens),
        }
    }
}

/// One group of `GET /v1/usage`: its name and sums.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageRowView {
    /// The session key, key name, agent or day.
    pub group: String,
    /// Its sums.
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// The answer of `GET /v1/usage`: one row per group, ordered by group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UsageView {
    /// The groups.
    pub rows: Vec<UsageRowView>,
}
