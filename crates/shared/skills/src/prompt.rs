//! The `<available_skills>` block of the system prompt, within a budget: at most 18,000
//! characters and 150 skills. Over budget, descriptions are shortened first, then dropped, and
//! only then are whole entries left out (with a note saying how many).

use crate::catalog::CatalogEntry;

/// The most characters of the block.
pub const MAX_PROMPT_CHARS: usize = 18_000;

/// The most skills in the block.
pub const MAX_PROMPT_SKILLS: usize = 150;

/// The shortest description kept when descriptions are shortened.
const MIN_DESCRIPTION_CHARS: usize = 24;

const DESCRIPTION_OPEN: &str = "    <description>";
const DESCRIPTION_CLOSE: &str = "</description>\n";

const INTRO: &str = "The following skills give specialised instructions for particular tasks.\n\
When a task matches a skill's description, read its SKILL.md at the listed location first.\n\
Relative paths in a skill resolve against the skill's directory.\n";

/// Renders the block for `skills` (in order) with `location(entry)` as each path, within
/// `max_chars` and `max_skills`. Returns the empty string when there are no skills.
pub fn render(
    skills: &[&CatalogEntry],
    location: &dyn Fn(&CatalogEntry) -> String,
    max_chars: usize,
    max_skills: usize,
) -> String {
    if skills.is_empty() {
        return String::new();
    }
    let mut count = skills.len().min(max_skills);
    loop {
        let shown = &skills[..count];
        let omitted = skills.len() - count;
        // Full descriptions, then an even share of what is left, then none.
        let full = block(shown, location, None, omitted);
        if full.chars().count() <= max_chars {
            return full;
        }
        let bare = block(shown, location, Some(0), omitted);
        let bare_len = bare.chars().count();
        if bare_len <= max_chars {
            // Each description costs its text plus the tags around it.
            let share = ((max_chars - bare_len) / shown.len().max(1))
                .saturating_sub(DESCRIPTION_OPEN.len() + DESCRIPTION_CLOSE.len());
            let shortened = block(shown, location, Some(share), omitted);
            if share >= MIN_DESCRIPTION_CHARS && shortened.chars().count() <= max_chars {
                return shortened;
            }
            return bare;
        }
        if count == 0 {
            return String::new();
        }
        count -= 1;
    }
}

fn block(
    skills: &[&CatalogEntry],
    location: &dyn Fn(&CatalogEntry) -> String,
    description_chars: Option<usize>,
    omitted: usize,
) -> String {
    let mut text = String::from(INTRO);
    text.push_str("<available_skills>\n");
    for skill in skills {
        text.push_str("  <skill>\n    <name>");
        text.push_str(&escape(&skill.name));
        text.push_str("</name>\n");
        let description = match description_chars {
            None => Some(skill.description.clone()),
            Some(0) => None,
            Some(limit) => Some(shorten(&skill.description, limit)),
        };
        if let Some(description) = description {
            text.push_str(DESCRIPTION_OPEN);
            text.push_str(&escape(&description));
            text.push_str(DESCRIPTION_CLOSE);
        }
        text.push_str("    <location>");
        text.push_str(&escape(&location(skill)));
        text.push_str("</location>\n  </skill>\n");
    }
    text.push_str("</available_skills>\n");
    if omitted > 0 {
        text.push_str(&format!(
            "({omitted} more skills are not listed here; `gatehouse skills list` shows them all.)\n"
        ));
    }
    text
}

fn shorten(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        return text.to_owned();
    }
    let mut cut: String = text.chars().take(limit.saturating_sub(1)).collect();
    cut.push('…');
    cut
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tier;

    fn entries(count: usize, description: &str) -> Vec<CatalogEntry> {
        (0..count)
            .map(|index| CatalogEntry {
                name: format!("skill-{index:03}"),
                description: description.to_owned(),
                tier: Tier::Bundled,
                host: String::from("gateway"),
                location: format!("/skills/skill-{index:03}/SKILL.md"),
                gated_out: Vec::new(),
                shadowed_by: None,
            })
            .collect()
    }

    fn render_all(skills: &[CatalogEntry], max_chars: usize, max_skills: usize) -> String {
        let refs: Vec<&CatalogEntry> = skills.iter().collect();
        render(
            &refs,
            &|entry| entry.location.clone(),
            max_chars,
            max_skills,
        )
    }

    #[test]
    fn a_small_catalog_is_listed_whole_and_escaped() {
        let mut skills = entries(2, "Builds <things> & more");
        skills[1].description = String::from("Second");
        let text = render_all(&skills, MAX_PROMPT_CHARS, MAX_PROMPT_SKILLS);
        assert!(text.contains("<description>Builds &lt;things&gt; &amp; more</description>"));
        assert!(text.contains("<location>/skills/skill-001/SKILL.md</location>"));
        assert!(!text.contains("more skills are not listed"));
    }

    #[test]
    fn descriptions_are_shortened_then_dropped_before_entries() {
        let long = "d".repeat(400);
        let skills = entries(100, &long);
        let text = render_all(&skills, MAX_PROMPT_CHARS, MAX_PROMPT_SKILLS);
        assert!(text.chars().count() <= MAX_PROMPT_CHARS, "{}", text.len());
        assert_eq!(text.matches("<skill>").count(), 100, "every entry kept");
        assert!(text.contains('…'), "descriptions shortened");
        // With very little room, descriptions go and entries stay as long as they fit.
        let tight = render_all(&skills, 10_500, MAX_PROMPT_SKILLS);
        assert!(tight.chars().count() <= 10_500);
        assert!(!tight.contains("<description>"));
        assert_eq!(tight.matches("<skill>").count(), 100);
        // Past that, entries are dropped and the block says so.
        let tighter = render_all(&skills, 4_000, MAX_PROMPT_SKILLS);
        assert!(tighter.chars().count() <= 4_000);
        assert!(tighter.matches("<skill>").count() < 100);
        assert!(tighter.contains("more skills are not listed"));
    }

    #[test]
    fn at_most_150_skills_are_listed() {
        let skills = entries(200, "short");
        let text = render_all(&skills, usize::MAX, MAX_PROMPT_SKILLS);
        assert_eq!(text.matches("<skill>").count(), 150);
        assert!(text.contains("(50 more skills are not listed"));
    }
}
