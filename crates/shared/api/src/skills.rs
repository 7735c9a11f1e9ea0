//! `GET /v1/skills`: the skills catalog of both hosts.

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

pub use gatehouse_skills::CatalogEntry;
pub use gatehouse_skills::Tier;

/// The answer of `GET /v1/skills`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkillsView {
    /// Every skill with its host, tier, and why it is gated out or shadowed.
    pub skills: Vec<CatalogEntry>,
    /// Files that were not taken, and why.
    pub skipped: Vec<SkippedSkill>,
    /// Name clashes and unavailable sources.
    pub warnings: Vec<String>,
}

/// A `SKILL.md` that was not taken into the catalog.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SkippedSkill {
    /// `gateway` or `harness`.
    pub host: String,
    /// Its path on that host.
    pub path: String,
    /// Why it was skipped.
    pub reason: String,
}
