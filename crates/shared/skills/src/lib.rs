//! Skills: `SKILL.md` files (YAML frontmatter with `name` and `description`, then Markdown),
//! found on two hosts and merged into one catalog.
//!
//! - The Gateway reads its own roots (the configured `managed` and `bundled` directories)
//!   locally; the Harness's roots (`<workspace>/skills`, `<workspace>/.agents/skills`) are
//!   discovered by the node (`workspace.skills`), which parses and gates them there, because
//!   that is where they run.
//! - Precedence: workspace beats managed beats bundled; on a name clash the higher tier wins and
//!   a warning says so.
//! - Gating (`metadata.openclaw`): `os`, `requires.bins` (all on `PATH`), `requires.anyBins`
//!   (one on `PATH`), `requires.env`; `always` skips the `requires` checks but not `os`.
//! - Limits: a file is at most 256,000 bytes, discovery goes at most 6 levels deep, and each
//!   source yields at most 200 skills.
//! - The `<available_skills>` prompt block is at most 18,000 characters and 150 skills;
//!   descriptions are shortened, then dropped, before whole entries are.

#![deny(missing_docs)]

pub mod catalog;
pub mod local;
pub mod parse;
pub mod prompt;

pub use catalog::Catalog;
pub use catalog::CatalogEntry;
pub use parse::Skill;

/// The largest `SKILL.md`, in bytes.
pub const MAX_SKILL_FILE_BYTES: u64 = 256_000;

/// How deep discovery looks below a root.
pub const MAX_DEPTH: usize = 6;

/// The most skills one source yields.
pub const MAX_SKILLS_PER_SOURCE: usize = 200;

/// Where a skill comes from, highest precedence first.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum Tier {
    /// `<workspace>/skills` on the Harness.
    Workspace,
    /// `<workspace>/.agents/skills` on the Harness.
    WorkspaceAgents,
    /// The Gateway's managed directory.
    Managed,
    /// The Gateway's bundled directory.
    Bundled,
}

impl Tier {
    /// Returns the tier as the wire writes it (kebab case).
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Workspace => "workspace",
            Tier::WorkspaceAgents => "workspace-agents",
            Tier::Managed => "managed",
            Tier::Bundled => "bundled",
        }
    }

    /// The host the tier lives on: `harness` or `gateway`.
    pub fn host(self) -> &'static str {
        match self {
            Tier::Workspace | Tier::WorkspaceAgents => "harness",
            Tier::Managed | Tier::Bundled => "gateway",
        }
    }
}
