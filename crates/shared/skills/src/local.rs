//! Discovery of skills in a local directory (the Gateway's managed and bundled roots): every
//! `SKILL.md` at most [`MAX_DEPTH`](crate::MAX_DEPTH) levels down, no symbolic link followed,
//! files over [`MAX_SKILL_FILE_BYTES`](crate::MAX_SKILL_FILE_BYTES) skipped, at most
//! [`MAX_SKILLS_PER_SOURCE`](crate::MAX_SKILLS_PER_SOURCE) per root.

use std::path::Path;

use crate::Tier;
use crate::catalog::CatalogEntry;
use crate::parse::Probe;

/// A file that was not taken, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Skipped {
    /// The path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// Finds the skills under `root` as `tier`, gated with `probe`. A missing root yields nothing.
pub fn discover(root: &Path, tier: Tier, probe: &dyn Probe) -> (Vec<CatalogEntry>, Vec<Skipped>) {
    let mut found = Vec::new();
    let mut skipped = Vec::new();
    walk(root, 0, tier, probe, &mut found, &mut skipped);
    found.sort_by(|a: &CatalogEntry, b| a.location.cmp(&b.location));
    if found.len() > crate::MAX_SKILLS_PER_SOURCE {
        for extra in found.drain(crate::MAX_SKILLS_PER_SOURCE..) {
            skipped.push(Skipped {
                path: extra.location,
                reason: format!(
                    "more than {} skills in this source",
                    crate::MAX_SKILLS_PER_SOURCE
                ),
            });
        }
    }
    (found, skipped)
}

fn walk(
    dir: &Path,
    depth: usize,
    tier: Tier,
    probe: &dyn Probe,
    found: &mut Vec<CatalogEntry>,
    skipped: &mut Vec<Skipped>,
) {
    if depth > crate::MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(std::fs::DirEntry::file_name);
    for entry in entries {
        let path = entry.path();
        let Ok(metadata) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        let shown = path.display().to_string();
        if metadata.file_type().is_symlink() {
            skipped.push(Skipped {
                path: shown,
                reason: String::from("symbolic link (never followed)"),
            });
        } else if metadata.is_dir() {
            walk(&path, depth + 1, tier, probe, found, skipped);
        } else if entry.file_name() == "SKILL.md" {
            if metadata.len() > crate::MAX_SKILL_FILE_BYTES {
                skipped.push(Skipped {
                    path: shown,
                    reason: format!("larger than {} bytes", crate::MAX_SKILL_FILE_BYTES),
                });
                continue;
            }
            let text = match std::fs::read_to_string(&path) {
                Ok(text) => text,
                Err(error) => {
                    skipped.push(Skipped {
                        path: shown,
                        reason: error.to_string(),
                    });
                    continue;
                }
            };
            match crate::parse::parse_skill(&text) {
                Ok(skill) => found.push(CatalogEntry {
                    gated_out: crate::parse::gate(&skill, probe),
                    name: skill.name,
                    description: skill.description,
                    tier,
                    host: tier.host().to_owned(),
                    location: shown,
                    shadowed_by: None,
                }),
                Err(error) => skipped.push(Skipped {
                    path: shown,
                    reason: error.to_string(),
                }),
            }
        }
    }
}
