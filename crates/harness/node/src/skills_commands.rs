//! `workspace.skills`: discovers the skills of the Agent workspace (`skills/` and
//! `.agents/skills/`) through the no-follow [`gatehouse_fsops::Root`], parses them, and gates
//! them against this host (its OS, `PATH` and environment), where they run.

use std::sync::Arc;

use gatehouse_fsops::path::RelPath;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::FetchLimits;
use gatehouse_fsops::root::Kind;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::command::WorkspaceSkills;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::skills::DiscoveredSkill;
use gatehouse_protocol::skills::SkillsDiscovery;
use gatehouse_protocol::skills::SkillsRequest;
use gatehouse_protocol::skills::SkippedSkill;
use gatehouse_skills::parse::SystemProbe;

use crate::file_commands::Workspace;
use crate::invoke::InvokeContext;

/// The workspace skill roots, highest precedence first, with their tier names.
const ROOTS: [(&str, &str); 2] = [
    ("skills", "workspace"),
    (".agents/skills", "workspace-agents"),
];

/// The `workspace.skills` command.
pub(crate) struct SkillsCommand {
    pub(crate) workspace: Arc<Workspace>,
    /// The canonical workspace directory, which requests must name.
    pub(crate) workspace_dir: String,
}

impl Serve<WorkspaceSkills, InvokeContext> for SkillsCommand {
    /// `op` has one value, `discover`; anything else fails to parse (`INVALID_PARAMS`).
    fn serve(&self, request: SkillsRequest, _context: InvokeContext) -> Served<SkillsDiscovery> {
        let workspace = Arc::clone(&self.workspace);
        let workspace_dir = self.workspace_dir.clone();
        Box::pin(async move {
            crate::file_commands::check_workspace_dir(&request.workspace_dir, &workspace_dir)?;
            tokio::task::spawn_blocking(move || discover(&workspace, &workspace_dir))
                .await
                .map_err(|_| WireError::new(ErrorCode::Internal, "skills discovery failed"))
        })
    }
}

fn discover(workspace: &Workspace, workspace_dir: &str) -> SkillsDiscovery {
    let mut skills = Vec::new();
    let mut skipped = Vec::new();
    for (root, tier) in ROOTS {
        let mut found = Vec::new();
        walk(workspace, root, 0, &mut found, &mut skipped);
        found.sort();
        if found.len() > gatehouse_skills::MAX_SKILLS_PER_SOURCE {
            for path in found.drain(gatehouse_skills::MAX_SKILLS_PER_SOURCE..) {
                skipped.push(SkippedSkill {
                    path,
                    reason: String::from("more than 200 skills in this source"),
                });
            }
        }
        for path in found {
            match read_skill(workspace, &path) {
                Ok(skill) => skills.push(DiscoveredSkill {
                    gated_out: gatehouse_skills::parse::gate(&skill, &SystemProbe),
                    name: skill.name,
                    description: skill.description,
                    tier: tier.to_owned(),
                    location: format!("{workspace_dir}/{path}"),
                }),
                Err(reason) => skipped.push(SkippedSkill { path, reason }),
            }
        }
    }
    SkillsDiscovery { skills, skipped }
}

fn read_skill(workspace: &Workspace, path: &str) -> Result<gatehouse_skills::Skill, String> {
    let rel = RelPath::parse(path).map_err(|error| error.to_string())?;
    let fetched = workspace
        .root
        .fetch(
            &rel,
            FetchLimits {
                max_bytes: gatehouse_skills::MAX_SKILL_FILE_BYTES,
                content: ContentMode::Transfer,
            },
        )
        .map_err(|error| error.to_string())?;
    let text = String::from_utf8(fetched.content.unwrap_or_default())
        .map_err(|_| String::from("not UTF-8"))?;
    gatehouse_skills::parse::parse_skill(&text).map_err(|error| error.to_string())
}

fn walk(
    workspace: &Workspace,
    dir: &str,
    depth: usize,
    found: &mut Vec<String>,
    skipped: &mut Vec<SkippedSkill>,
) {
    if depth > gatehouse_skills::MAX_DEPTH {
        return;
    }
    let Ok(rel) = RelPath::parse(dir) else {
        return;
    };
    let Ok(listing) = workspace.root.list(&rel, 5000, None) else {
        return;
    };
    for entry in &listing.entries {
        let path = format!("{dir}/{}", entry.name);
        match entry.kind {
            Kind::Directory => walk(workspace, &path, depth + 1, found, skipped),
            Kind::File if entry.name == "SKILL.md" => {
                if entry.size > gatehouse_skills::MAX_SKILL_FILE_BYTES {
                    skipped.push(SkippedSkill {
                        path,
                        reason: String::from("larger than 256000 bytes"),
                    });
                } else {
                    found.push(path);
                }
            }
            Kind::Symlink => skipped.push(SkippedSkill {
                path,
                reason: String::from("symbolic link (never followed)"),
            }),
            _ => {}
        }
    }
}
