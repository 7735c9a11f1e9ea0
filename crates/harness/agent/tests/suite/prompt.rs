//! The system prompt: bootstrap files, limits and markers.

use gatehouse_agent::prompt::BOOTSTRAP_MAX_CHARS;
use gatehouse_agent::prompt::InjectedFile;
use gatehouse_agent::prompt::PREAMBLE;
use pretty_assertions::assert_eq;

use crate::suite::support::OUTSIDE_MARKER;
use crate::suite::support::Session;

fn injected(name: &'static str, n_chars_injected: usize, n_chars_truncated: usize) -> InjectedFile {
    InjectedFile {
        name,
        n_chars_injected,
        n_chars_truncated,
        error_code: None,
    }
}

#[test]
fn files_are_injected_in_order_and_missing_ones_skipped() {
    let session = Session::new();
    session.write("USER.md", "the user");
    session.write("AGENTS.md", "the rules\n");
    let ctx = session.files_only();
    let prompt = gatehouse_agent::build_system_prompt(ctx.workspace());
    assert_eq!(
        prompt.text,
        format!(
            "{PREAMBLE}\n\n# Workspace files (injected)\n\n## AGENTS.md\n\nthe rules\n\n\n## USER.md\n\nthe user"
        )
    );
    assert_eq!(
        prompt.files,
        vec![injected("AGENTS.md", 10, 0), injected("USER.md", 8, 0)]
    );
}

#[test]
fn no_files_give_the_preamble_alone() {
    let session = Session::new();
    let ctx = session.files_only();
    let prompt = gatehouse_agent::build_system_prompt(ctx.workspace());
    assert_eq!(prompt.text, PREAMBLE);
    assert!(prompt.text.contains("apply_patch"));
    assert_eq!(prompt.files, Vec::new());
}

#[test]
fn a_file_at_the_limit_is_whole() {
    let session = Session::new();
    session.write("SOUL.md", &"s".repeat(BOOTSTRAP_MAX_CHARS));
    let ctx = session.files_only();
    let prompt = gatehouse_agent::build_system_prompt(ctx.workspace());
    assert!(!prompt.text.contains("truncated"));
    assert_eq!(prompt.files, vec![injected("SOUL.md", 20_000, 0)]);
}

#[test]
fn per_file_and_total_limits_leave_markers() {
    let session = Session::new();
    for (name, letter) in [
        ("AGENTS.md", "a"),
        ("SOUL.md", "é"),
        ("IDENTITY.md", "i"),
        ("USER.md", "u"),
    ] {
        session.write(name, &letter.repeat(25_000));
    }
    let ctx = session.files_only();
    let prompt = gatehouse_agent::build_system_prompt(ctx.workspace());
    assert_eq!(
        prompt.files,
        vec![
            injected("AGENTS.md", 20_000, 5_000),
            injected("SOUL.md", 20_000, 5_000),
            injected("IDENTITY.md", 20_000, 5_000),
            injected("USER.md", 0, 25_000),
        ]
    );
    let agents_marker = "\n[…truncated: 5000 more chars] (read AGENTS.md directly for the rest)";
    assert!(
        prompt
            .text
            .contains(&format!("{}{agents_marker}", "a".repeat(20_000)))
    );
    assert!(!prompt.text.contains(&"a".repeat(20_001)));
    assert!(prompt.text.contains(&format!(
        "{}\n[…truncated: 5000 more chars]",
        "é".repeat(20_000)
    )));
    assert!(prompt.text.ends_with(
        "## USER.md\n\n[…truncated: 25000 more chars] (read USER.md directly for the rest)"
    ));
    assert!(!prompt.text.contains('u'.to_string().repeat(2).as_str()));
}

#[test]
fn invalid_utf8_is_replaced_and_links_are_not_followed() {
    let session = Session::new();
    std::fs::write(session.path("IDENTITY.md"), b"name: \xff\xfe bot").unwrap();
    std::os::unix::fs::symlink(
        session.outside.join("secret.txt"),
        session.path("AGENTS.md"),
    )
    .unwrap();
    let ctx = session.files_only();
    let prompt = gatehouse_agent::build_system_prompt(ctx.workspace());
    assert!(
        prompt.text.contains("name: \u{fffd}\u{fffd} bot"),
        "{}",
        prompt.text
    );
    assert!(!prompt.text.contains(OUTSIDE_MARKER));
    assert!(
        prompt
            .text
            .contains("[AGENTS.md could not be loaded: SYMLINK_REDIRECT]"),
        "{}",
        prompt.text
    );
    assert_eq!(prompt.files[0].error_code, Some("SYMLINK_REDIRECT"));
}
