//! `workspace.skills`: the node discovers the skills of its workspace (`<workspace>/skills` and
//! `<workspace>/.agents/skills`), parses and gates them on the Harness, where they run, and
//! returns them to the Gateway's catalog. Nothing is followed through a symbolic link.

use serde::Deserialize;
use serde::Serialize;

pub use crate::commands::WORKSPACE_SKILLS;

/// What a `workspace.skills` request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum SkillsOp {
    /// Find, parse and gate the workspace's skills.
    Discover,
}

/// Parameters of `workspace.skills`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillsRequest {
    /// The operation.
    pub op: SkillsOp,
    /// The workspace directory; it must be this node's workspace.
    pub workspace_dir: String,
}

/// One skill the node found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiscoveredSkill {
    /// The name.
    pub name: String,
    /// The description.
    pub description: String,
    /// `workspace` (`skills/`) or `workspace-agents` (`.agents/skills/`).
    pub tier: String,
    /// The absolute path of its `SKILL.md` on the Harness.
    pub location: String,
    /// Why it cannot be used on the Harness; empty when it can.
    #[serde(default)]
    pub gated_out: Vec<String>,
}

/// A file the node did not take, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkippedSkill {
    /// The workspace-relative path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// Result of `discover`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SkillsDiscovery {
    /// The skills.
    pub skills: Vec<DiscoveredSkill>,
    /// What was left out.
    #[serde(default)]
    pub skipped: Vec<SkippedSkill>,
}
