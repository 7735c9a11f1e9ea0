//! The merged catalog: every discovered skill with its tier and host, the winner of each name,
//! and why a skill is gated out or shadowed.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde::Serialize;

use crate::Tier;

/// One discovered skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CatalogEntry {
    /// The name.
    pub name: String,
    /// The description.
    pub description: String,
    /// Where it comes from.
    pub tier: Tier,
    /// `gateway` or `harness`.
    pub host: String,
    /// The absolute path of its `SKILL.md` on its host.
    pub location: String,
    /// Why it cannot be used on its host; empty when it can.
    #[serde(default)]
    pub gated_out: Vec<String>,
    /// The tier of the skill that wins this name, when this one is shadowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadowed_by: Option<Tier>,
}

impl CatalogEntry {
    /// Whether the skill is offered: it wins its name and is not gated out.
    pub fn available(&self) -> bool {
        self.shadowed_by.is_none() && self.gated_out.is_empty()
    }
}

/// The catalog.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    /// Every skill, winners first within a name, sorted by name.
    pub skills: Vec<CatalogEntry>,
    /// Name clashes and other things an operator should know.
    pub warnings: Vec<String>,
}

impl Catalog {
    /// Merges `entries` from every source: for each name the highest tier wins, and each loser
    /// is marked shadowed with a warning.
    pub fn resolve(mut entries: Vec<CatalogEntry>) -> Self {
        entries.sort_by(|a, b| a.name.cmp(&b.name).then(a.tier.cmp(&b.tier)));
        let mut winners: BTreeMap<String, Tier> = BTreeMap::new();
        let mut warnings = Vec::new();
        for entry in &mut entries {
            match winners.get(&entry.name) {
                Some(winner) => {
                    warnings.push(format!(
                        "skill {:?} from {} ({}) is shadowed by the {} one",
                        entry.name,
                        tier_name(entry.tier),
                        entry.location,
                        tier_name(*winner)
                    ));
                    entry.shadowed_by = Some(*winner);
                }
                None => {
                    winners.insert(entry.name.clone(), entry.tier);
                }
            }
        }
        Self {
            skills: entries,
            warnings,
        }
    }

    /// The skills offered to the model.
    pub fn available(&self) -> impl Iterator<Item = &CatalogEntry> {
        self.skills.iter().filter(|entry| entry.available())
    }
}

/// The configuration name of `tier`.
pub fn tier_name(tier: Tier) -> &'static str {
    match tier {
        Tier::Workspace => "workspace",
        Tier::WorkspaceAgents => "workspace-agents",
        Tier::Managed => "managed",
        Tier::Bundled => "bundled",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, tier: Tier, gated: &[&str]) -> CatalogEntry {
        CatalogEntry {
            name: name.to_owned(),
            description: format!("{name} from {}", tier_name(tier)),
            tier,
            host: tier.host().to_owned(),
            location: format!("/{}/{name}/SKILL.md", tier_name(tier)),
            gated_out: gated.iter().map(|reason| (*reason).to_owned()).collect(),
            shadowed_by: None,
        }
    }

    #[test]
    fn workspace_beats_managed_beats_bundled_with_a_warning_per_clash() {
        let catalog = Catalog::resolve(vec![
            entry("deploy", Tier::Bundled, &[]),
            entry("deploy", Tier::Workspace, &[]),
            entry("deploy", Tier::Managed, &[]),
            entry("lint", Tier::Bundled, &[]),
            entry("lint", Tier::Managed, &[]),
            entry("gpu", Tier::Managed, &["missing binary nvidia-smi"]),
        ]);
        let available: Vec<(&str, Tier)> = catalog
            .available()
            .map(|entry| (entry.name.as_str(), entry.tier))
            .collect();
        assert_eq!(
            available,
            vec![("deploy", Tier::Workspace), ("lint", Tier::Managed)]
        );
        assert_eq!(catalog.warnings.len(), 3, "{:?}", catalog.warnings);
        assert!(catalog.warnings[0].contains("shadowed by the workspace one"));
        let gpu = catalog
            .skills
            .iter()
            .find(|entry| entry.name == "gpu")
            .unwrap_or_else(|| panic!("gpu listed"));
        assert_eq!(gpu.gated_out, vec!["missing binary nvidia-smi"]);
        assert_eq!(
            catalog
                .skills
                .iter()
                .find(|e| e.name == "lint" && e.tier == Tier::Bundled)
                .and_then(|e| e.shadowed_by),
            Some(Tier::Managed)
        );
    }
}
