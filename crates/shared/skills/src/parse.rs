//! Parsing `SKILL.md` and evaluating its gating.

use serde::Deserialize;
use serde::Serialize;

/// A parsed skill.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Skill {
    /// The name (required).
    pub name: String,
    /// What it is for (required).
    pub description: String,
    /// The gating of `metadata.openclaw`.
    #[serde(default)]
    pub gating: Gating,
}

/// The gating rules of a skill.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Gating {
    /// Skip the `requires` checks (but not `os`).
    #[serde(default)]
    pub always: bool,
    /// The operating systems it runs on (`linux`, `darwin`, `win32`); empty means any.
    #[serde(default)]
    pub os: Vec<String>,
    /// Binaries that must all be on `PATH`.
    #[serde(default)]
    pub bins: Vec<String>,
    /// Binaries of which one must be on `PATH`.
    #[serde(default)]
    pub any_bins: Vec<String>,
    /// Environment variables that must be set.
    #[serde(default)]
    pub env: Vec<String>,
}

/// Why a `SKILL.md` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    /// No `---` frontmatter at the top.
    #[error("no YAML frontmatter")]
    NoFrontmatter,
    /// `name` or `description` is missing or empty.
    #[error("the frontmatter has no {0}")]
    Missing(&'static str),
}

#[derive(Debug, Deserialize)]
struct Frontmatter {
    name: Option<String>,
    description: Option<String>,
    metadata: Option<serde_json::Value>,
}

/// Parses the frontmatter of a `SKILL.md`: YAML first, then, if that fails, simple
/// `key: value` lines.
///
/// # Errors
/// [`ParseError`].
pub fn parse_skill(text: &str) -> Result<Skill, ParseError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut lines = text.lines();
    if lines.next().map(str::trim_end) != Some("---") {
        return Err(ParseError::NoFrontmatter);
    }
    let body: Vec<&str> = lines
        .by_ref()
        .take_while(|line| line.trim_end() != "---")
        .collect();
    let yaml = body.join("\n");
    let frontmatter =
        serde_saphyr::from_str::<Frontmatter>(&yaml).unwrap_or_else(|_| line_parse(&body));
    let name = frontmatter
        .name
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .ok_or(ParseError::Missing("name"))?;
    let description = frontmatter
        .description
        .map(|text| text.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|text| !text.is_empty())
        .ok_or(ParseError::Missing("description"))?;
    Ok(Skill {
        name,
        description,
        gating: gating(frontmatter.metadata.as_ref()),
    })
}

fn line_parse(lines: &[&str]) -> Frontmatter {
    let value = |key: &str| {
        lines.iter().find_map(|line| {
            let (name, value) = line.split_once(':')?;
            (name.trim() == key).then(|| value.trim().trim_matches('"').to_owned())
        })
    };
    Frontmatter {
        name: value("name"),
        description: value("description"),
        metadata: value("metadata").and_then(|text| serde_json::from_str(&text).ok()),
    }
}

fn gating(metadata: Option<&serde_json::Value>) -> Gating {
    let Some(metadata) = metadata else {
        return Gating::default();
    };
    // A metadata block written as a JSON string is parsed as JSON.
    let parsed;
    let metadata = match metadata.as_str() {
        Some(text) => {
            parsed = serde_json::from_str::<serde_json::Value>(text).unwrap_or_default();
            &parsed
        }
        None => metadata,
    };
    let openclaw = ["openclaw", "clawdbot", "clawdis"]
        .iter()
        .find_map(|key| metadata.get(*key))
        .cloned()
        .unwrap_or_default();
    let strings = |value: &serde_json::Value| -> Vec<String> {
        match value {
            serde_json::Value::String(one) => vec![one.clone()],
            serde_json::Value::Array(many) => many
                .iter()
                .filter_map(serde_json::Value::as_str)
                .map(str::to_owned)
                .collect(),
            _ => Vec::new(),
        }
    };
    let requires = &openclaw["requires"];
    Gating {
        always: openclaw["always"].as_bool().unwrap_or(false),
        os: strings(&openclaw["os"]),
        bins: strings(&requires["bins"]),
        any_bins: strings(&requires["anyBins"]),
        env: strings(&requires["env"]),
    }
}

/// What the host a skill would run on offers.
pub trait Probe {
    /// The operating system, as skills name it (`linux`, `darwin`, `win32`).
    fn os(&self) -> &str;
    /// Whether `name` is an executable on `PATH`.
    fn has_bin(&self, name: &str) -> bool;
    /// Whether the variable `name` is set and not empty.
    fn has_env(&self, name: &str) -> bool;
}

/// This process's host.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemProbe;

impl Probe for SystemProbe {
    fn os(&self) -> &str {
        match std::env::consts::OS {
            "macos" => "darwin",
            "windows" => "win32",
            other => other,
        }
    }

    fn has_bin(&self, name: &str) -> bool {
        use std::os::unix::fs::PermissionsExt;
        if name.is_empty() || name.contains('/') {
            return false;
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
    }

    fn has_env(&self, name: &str) -> bool {
        std::env::var_os(name).is_some_and(|value| !value.is_empty())
    }
}

/// Returns why `skill` cannot be used on the host `probe` describes; empty when it can.
pub fn gate(skill: &Skill, probe: &dyn Probe) -> Vec<String> {
    let gating = &skill.gating;
    let mut reasons = Vec::new();
    if !gating.os.is_empty() && !gating.os.iter().any(|os| os == probe.os()) {
        reasons.push(format!(
            "needs os {} (this host is {})",
            gating.os.join(" or "),
            probe.os()
        ));
    }
    if gating.always {
        return reasons;
    }
    for bin in &gating.bins {
        if !probe.has_bin(bin) {
            reasons.push(format!("missing binary {bin}"));
        }
    }
    if !gating.any_bins.is_empty() && !gating.any_bins.iter().any(|bin| probe.has_bin(bin)) {
        reasons.push(format!(
            "needs one of the binaries {}",
            gating.any_bins.join(", ")
        ));
    }
    for name in &gating.env {
        if !probe.has_env(name) {
            reasons.push(format!("missing environment variable {name}"));
        }
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;

    struct FakeProbe;

    impl Probe for FakeProbe {
        fn os(&self) -> &str {
            "linux"
        }
        fn has_bin(&self, name: &str) -> bool {
            name == "git"
        }
        fn has_env(&self, name: &str) -> bool {
            name == "TOKEN"
        }
    }

    #[test]
    fn yaml_frontmatter_with_openclaw_gating() {
        let skill = parse_skill(
            "---\nname: deploy\ndescription: >\n  Ships the\n  service.\nmetadata:\n  openclaw:\n    os: [linux]\n    requires:\n      bins: [git, kubectl]\n      anyBins: [podman, docker]\n      env: TOKEN\n---\n# Deploy\n",
        )
        .unwrap();
        assert_eq!(skill.name, "deploy");
        assert_eq!(skill.description, "Ships the service.");
        assert_eq!(skill.gating.bins, vec!["git", "kubectl"]);
        assert_eq!(skill.gating.env, vec!["TOKEN"]);
        assert_eq!(
            gate(&skill, &FakeProbe),
            vec![
                "missing binary kubectl",
                "needs one of the binaries podman, docker"
            ]
        );
    }

    #[test]
    fn always_skips_requires_but_not_os_and_json_metadata_is_read() {
        let skill = parse_skill(
            "---\nname: mac\ndescription: Mac only\nmetadata: '{\"openclaw\":{\"always\":true,\"os\":[\"darwin\"],\"requires\":{\"bins\":[\"nope\"]}}}'\n---\n",
        )
        .unwrap();
        assert_eq!(
            gate(&skill, &FakeProbe),
            vec!["needs os darwin (this host is linux)"]
        );
    }

    #[test]
    fn missing_fields_and_frontmatter_are_refused_and_bad_yaml_falls_back_to_lines() {
        assert_eq!(
            parse_skill("# no frontmatter"),
            Err(ParseError::NoFrontmatter)
        );
        assert_eq!(
            parse_skill("---\nname: x\n---\n"),
            Err(ParseError::Missing("description"))
        );
        let skill =
            parse_skill("---\nname: odd\ndescription: uses: colons: freely\n---\n").unwrap();
        assert_eq!(skill.description, "uses: colons: freely");
        assert!(gate(&skill, &FakeProbe).is_empty());
    }
}
