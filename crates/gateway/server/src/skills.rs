//! [`SkillsService`]: the skills catalog across both hosts. The Gateway's own roots (managed,
//! bundled) are read here; the workspace roots are discovered by the node (`workspace.skills`),
//! which gates them on the Harness. Native turns get the `<available_skills>` prompt block and
//! private read-only copies of the selected Gateway skills in their session workspace.

use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use gatehouse_api::skills::SkillsView;
use gatehouse_api::skills::SkippedSkill;
use gatehouse_protocol::command::WorkspaceSkills;
use gatehouse_protocol::skills::SkillsDiscovery;
use gatehouse_protocol::skills::SkillsRequest;
use gatehouse_protocol::skills::WORKSPACE_SKILLS;
use gatehouse_protocol::worker::SKILL_COPIES_DIR;
use gatehouse_protocol::worker::SKILL_COPY_MAX_BYTES;
use gatehouse_protocol::worker::SKILL_COPY_MAX_FILES;
use gatehouse_protocol::worker::SkillCopy;
use gatehouse_protocol::worker::SkillCopyFile;
use gatehouse_skills::Catalog;
use gatehouse_skills::CatalogEntry;
use gatehouse_skills::Tier;

use crate::link::registry::NodeRegistry;

/// How long the node's discovery may take.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// The skills of both hosts.
pub struct SkillsService {
    managed_dir: Option<PathBuf>,
    bundled_dir: Option<PathBuf>,
    registry: Arc<NodeRegistry>,
}

impl SkillsService {
    /// Returns the service over the Gateway's `managed_dir` and `bundled_dir` and the node of
    /// `registry`.
    pub fn new(
        managed_dir: Option<PathBuf>,
        bundled_dir: Option<PathBuf>,
        registry: Arc<NodeRegistry>,
    ) -> Self {
        Self {
            managed_dir,
            bundled_dir,
            registry,
        }
    }

    /// Discovers every source and merges them.
    pub async fn catalog(&self) -> SkillsView {
        let workspace = self.workspace_skills().await;
        self.catalog_with(workspace).await
    }

    /// Discovers the Gateway's own sources and merges them with `workspace`, the Harness
    /// workspace's skills as a node discovered them (or why they are unavailable).
    pub(crate) async fn catalog_with(
        &self,
        workspace: Result<SkillsDiscovery, String>,
    ) -> SkillsView {
        let mut entries = Vec::new();
        let mut skipped = Vec::new();
        let mut warnings = Vec::new();
        let roots: Vec<(PathBuf, Tier)> = [
            (self.managed_dir.clone(), Tier::Managed),
            (self.bundled_dir.clone(), Tier::Bundled),
        ]
        .into_iter()
        .filter_map(|(dir, tier)| dir.map(|dir| (dir, tier)))
        .collect();
        let local = tokio::task::spawn_blocking(move || {
            roots
                .iter()
                .map(|(dir, tier)| {
                    gatehouse_skills::local::discover(
                        dir,
                        *tier,
                        &gatehouse_skills::parse::SystemProbe,
                    )
                })
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default();
        for (found, left_out) in local {
            entries.extend(found);
            skipped.extend(left_out.into_iter().map(|skip| SkippedSkill {
                host: String::from(Tier::Managed.host()),
                path: skip.path,
                reason: skip.reason,
            }));
        }
        match workspace {
            Ok(discovery) => {
                for skill in discovery.skills {
                    let tier = match skill.tier.as_str() {
                        "workspace" => Tier::Workspace,
                        "workspace-agents" => Tier::WorkspaceAgents,
                        other => {
                            warnings.push(format!("the node reported an unknown skill tier {other:?}"));
                            continue;
                        }
                    };
                    entries.push(CatalogEntry {
                        name: skill.name,
                        description: skill.description,
                        tier,
                        host: String::from("harness"),
                        location: skill.location,
                        gated_out: skill.gated_out,
                        shadowed_by: None,
                    });
                }
                skipped.extend(discovery.skipped.into_iter().map(
                    |skip| SkippedSkill {
                        host: String::from(Tier::Workspace.host()),
                        path: skip.path,
                        reason: skip.reason,
                    },
                ));
            }
            Err(reason) => warnings.push(format!(
                "the Harness workspace skills are unavailable ({reason}); only the Gateway's skills are listed"
            )),
        }
        let catalog = Catalog::resolve(entries);
        warnings.extend(catalog.warnings);
        SkillsView {
            skills: catalog.skills,
            skipped,
            warnings,
        }
    }

    /// Asks a node linked to this replica for the Harness workspace's skills.
    pub(crate) async fn workspace_skills(&self) -> Result<SkillsDiscovery, String> {
        let Some(node) = self.registry.find_serving(&[WORKSPACE_SKILLS]) else {
            return Err(String::from(
                "no node serving workspace.skills is connected",
            ));
        };
        let request = SkillsRequest {
            op: gatehouse_protocol::skills::SkillsOp::Discover,
            workspace_dir: node.workspace_root.clone().unwrap_or_default(),
        };
        self.registry
            .invoke::<WorkspaceSkills>(&node, &request, DISCOVERY_TIMEOUT)
            .await
            .map_err(|error| error.to_string())
    }

    /// The prompt block and the skill copies of a native turn: every available skill is copied
    /// into the session workspace under [`SKILL_COPIES_DIR`] (the Gateway's with their files,
    /// the Harness workspace's by directory, which the node copies itself) and listed there, so
    /// the model reads them with its own file tools.
    pub async fn for_native_turn(&self) -> (Option<String>, Vec<SkillCopy>) {
        let view = self.catalog().await;
        let available: Vec<CatalogEntry> = view
            .skills
            .into_iter()
            .filter(CatalogEntry::available)
            .collect();
        let wanted = available.clone();
        let copies: Vec<(String, SkillCopy)> = tokio::task::spawn_blocking(move || {
            let mut taken = std::collections::HashSet::new();
            wanted
                .iter()
                .filter_map(|entry| {
                    let copy = match entry.host.as_str() {
                        "gateway" => copy_of(entry).ok()?,
                        _ => SkillCopy {
                            name: copy_name(&entry.name),
                            files: Vec::new(),
                            source: Some(
                                Path::new(&entry.location)
                                    .parent()?
                                    .to_string_lossy()
                                    .into_owned(),
                            ),
                        },
                    };
                    // Two names that clean up to the same directory: the first one keeps it.
                    (!copy.name.is_empty() && taken.insert(copy.name.clone()))
                        .then(|| (entry.location.clone(), copy))
                })
                .collect()
        })
        .await
        .unwrap_or_default();
        let copied: std::collections::HashMap<&str, &str> = copies
            .iter()
            .map(|(location, copy)| (location.as_str(), copy.name.as_str()))
            .collect();
        let listed: Vec<&CatalogEntry> = available
            .iter()
            .filter(|entry| copied.contains_key(entry.location.as_str()))
            .collect();
        let location = |entry: &CatalogEntry| {
            let name = copied
                .get(entry.location.as_str())
                .copied()
                .unwrap_or_default();
            format!("{SKILL_COPIES_DIR}/{name}/SKILL.md")
        };
        let prompt = gatehouse_skills::prompt::render(
            &listed,
            &location,
            gatehouse_skills::prompt::MAX_PROMPT_CHARS,
            gatehouse_skills::prompt::MAX_PROMPT_SKILLS,
        );
        let copies = copies.into_iter().map(|(_, copy)| copy).collect();
        ((!prompt.is_empty()).then_some(prompt), copies)
    }
}

impl SkillsService {
    /// The prompt block for a Codex thread, whose working directory is the Agent workspace: the
    /// available skills of the Harness workspace at their own locations. The Gateway's skills
    /// are not listed, since Codex cannot read the Gateway's files.
    pub async fn for_codex_thread(&self) -> Option<String> {
        let view = self.catalog().await;
        let listed: Vec<&CatalogEntry> = view
            .skills
            .iter()
            .filter(|entry| entry.available() && entry.host == "harness")
            .collect();
        let prompt = gatehouse_skills::prompt::render(
            &listed,
            &|entry: &CatalogEntry| entry.location.clone(),
            gatehouse_skills::prompt::MAX_PROMPT_CHARS,
            gatehouse_skills::prompt::MAX_PROMPT_SKILLS,
        );
        (!prompt.is_empty()).then_some(prompt)
    }
}

/// The directory name of a skill's copy: its name with anything but `[A-Za-z0-9._-]` replaced.
fn copy_name(name: &str) -> String {
    let cleaned: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    cleaned.trim_start_matches('.').to_owned()
}

/// Reads the regular files of the skill's directory (not below it, no links), `SKILL.md` first.
fn copy_of(entry: &CatalogEntry) -> std::io::Result<SkillCopy> {
    let skill_md = Path::new(&entry.location);
    let dir = skill_md
        .parent()
        .ok_or_else(|| std::io::Error::other("a skill file has no directory"))?;
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .flatten()
        .filter(|item| {
            std::fs::symlink_metadata(item.path()).is_ok_and(|meta| meta.file_type().is_file())
        })
        .filter_map(|item| item.file_name().into_string().ok())
        .filter(|name| !name.starts_with('.'))
        .collect();
    names.sort_by_key(|name| (name != "SKILL.md", name.clone()));
    let mut files = Vec::new();
    let mut total = 0;
    for name in names.into_iter().take(SKILL_COPY_MAX_FILES) {
        let bytes = std::fs::read(dir.join(&name))?;
        total += bytes.len() as u64;
        if total > SKILL_COPY_MAX_BYTES {
            break;
        }
        files.push(SkillCopyFile {
            path: name,
            content_base64: base64::engine::general_purpose::STANDARD.encode(&bytes),
        });
    }
    let name = copy_name(&entry.name);
    if name.is_empty() || files.first().is_none_or(|file| file.path != "SKILL.md") {
        return Err(std::io::Error::other("nothing to copy"));
    }
    Ok(SkillCopy {
        name,
        files,
        source: None,
    })
}
