//! Skill copies for native turns: the Gateway's selected skills are written into the session
//! workspace under [`SKILL_COPIES_DIR`] before the turn, private and read-only (directories
//! 0500, files 0400), and removed before the next turn's preparation. A failed removal stops
//! the preparation: a turn never runs next to stale copies.

use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use base64::Engine;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::worker::SKILL_COPIES_DIR;
use gatehouse_protocol::worker::SKILL_COPY_MAX_BYTES;
use gatehouse_protocol::worker::SKILL_COPY_MAX_FILES;
use gatehouse_protocol::worker::SkillCopy;

/// The code of a failed cleanup.
pub(crate) const SKILL_CLEANUP_FAILED: &str = "SKILL_CLEANUP_FAILED";

/// Removes the previous copies from `session_workspace` and writes `copies`; a copy with a
/// `source` is read from the Agent workspace at `agent_workspace` through the no-follow root.
///
/// # Errors
/// `SKILL_CLEANUP_FAILED` when the old copies cannot be removed; `INVALID_PARAMS` for a name
/// or path that is not a plain relative path; `PATH_TRAVERSAL` for a source outside the Agent
/// workspace; I/O failures.
pub(crate) fn prepare(
    session_workspace: &Path,
    agent_workspace: &Path,
    copies: &[SkillCopy],
) -> Result<(), WireError> {
    let dir = session_workspace.join(SKILL_COPIES_DIR);
    remove(&dir).map_err(|error| {
        WireError::new(
            ErrorCode::Internal,
            format!(
                "cannot remove the previous turn's skill copies ({error}); the turn is not prepared"
            ),
        )
        .with_code(SKILL_CLEANUP_FAILED)
    })?;
    if copies.is_empty() {
        return Ok(());
    }
    let io = |error: std::io::Error| {
        WireError::new(
            ErrorCode::WriteError,
            format!("cannot write the skill copies: {error}"),
        )
    };
    std::fs::create_dir_all(session_workspace).map_err(io)?;
    let private_dir = |path: &Path| {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
    };
    private_dir(&dir).map_err(io)?;
    for copy in copies {
        if !is_plain_name(&copy.name) {
            return Err(invalid(&copy.name));
        }
        let skill_dir = dir.join(&copy.name);
        private_dir(&skill_dir).map_err(io)?;
        let files = match &copy.source {
            Some(source) => read_source(agent_workspace, source)?,
            None => copy
                .files
                .iter()
                .map(|file| {
                    base64::engine::general_purpose::STANDARD
                        .decode(&file.content_base64)
                        .map(|bytes| (file.path.clone(), bytes))
                        .map_err(|_| {
                            WireError::new(ErrorCode::InvalidBase64, "a skill file is not base64")
                        })
                })
                .collect::<Result<Vec<_>, _>>()?,
        };
        for (path, bytes) in files {
            if !path.split('/').all(is_plain_name) {
                return Err(invalid(&path));
            }
            let target = skill_dir.join(&path);
            if let Some(parent) = target.parent() {
                private_dir(parent).map_err(io)?;
            }
            let mut out = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o400)
                .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                .open(&target)
                .map_err(io)?;
            out.write_all(&bytes).map_err(io)?;
        }
    }
    set_dirs_mode(&dir, 0o500).map_err(io)
}

/// Reads the regular files of the skill directory `source` (absolute, in the Agent workspace):
/// no links, no subdirectories, `SKILL.md` required.
fn read_source(agent_workspace: &Path, source: &str) -> Result<Vec<(String, Vec<u8>)>, WireError> {
    use gatehouse_fsops::root::ContentMode;
    use gatehouse_fsops::root::FetchLimits;
    use gatehouse_fsops::root::Kind;
    let root = gatehouse_fsops::Root::open(agent_workspace).map_err(|error| error.to_wire())?;
    let rel = gatehouse_fsops::path::map_wire_path(root.logical_path(), source)
        .map_err(|error| error.to_wire())?;
    let listing = root
        .list(&rel, SKILL_COPY_MAX_FILES * 4, None)
        .map_err(|error| error.to_wire())?;
    let mut files = Vec::new();
    let mut total = 0;
    for entry in listing.entries {
        if entry.kind != Kind::File
            || entry.name.starts_with('.')
            || files.len() >= SKILL_COPY_MAX_FILES
        {
            continue;
        }
        total += entry.size;
        if total > SKILL_COPY_MAX_BYTES {
            break;
        }
        let fetched = root
            .fetch(
                &rel.join(&entry.name),
                FetchLimits {
                    max_bytes: SKILL_COPY_MAX_BYTES,
                    content: ContentMode::Transfer,
                },
            )
            .map_err(|error| error.to_wire())?;
        files.push((entry.name, fetched.content.unwrap_or_default()));
    }
    if !files.iter().any(|(name, _)| name == "SKILL.md") {
        return Err(WireError::new(
            ErrorCode::NotFound,
            format!("{source} has no SKILL.md"),
        ));
    }
    files.sort_by_key(|(name, _)| (name != "SKILL.md", name.clone()));
    Ok(files)
}

fn invalid(what: &str) -> WireError {
    WireError::new(
        ErrorCode::InvalidParams,
        format!("{what:?} is not a plain relative name"),
    )
}

/// A file or directory name with no separators, not `.` or `..`, and not hidden.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Removes `dir` and everything below it, never following a link: a link or file in its place
/// is removed itself; read-only directories are made writable first.
fn remove(dir: &Path) -> std::io::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
        Ok(metadata) if metadata.is_dir() => {
            set_dirs_mode(dir, 0o700)?;
            std::fs::remove_dir_all(dir)
        }
        Ok(_) => std::fs::remove_file(dir),
    }
}

/// Sets the mode of `dir` and of every directory below it, without following links; children
/// first when closing (0500), parents first when opening (0700).
fn set_dirs_mode(dir: &Path, mode: u32) -> std::io::Result<()> {
    let opening = mode & 0o200 != 0;
    if opening {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    }
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if std::fs::symlink_metadata(entry.path())?.is_dir() {
            set_dirs_mode(&entry.path(), mode)?;
        }
    }
    if !opening {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test fails loudly on any unexpected error"
    )]

    use gatehouse_protocol::worker::SkillCopyFile;

    use super::*;

    fn copy(name: &str, path: &str, text: &str) -> SkillCopy {
        SkillCopy {
            name: name.to_owned(),
            files: vec![SkillCopyFile {
                path: path.to_owned(),
                content_base64: base64::engine::general_purpose::STANDARD.encode(text),
            }],
            source: None,
        }
    }

    fn mode(path: &Path) -> u32 {
        std::fs::symlink_metadata(path)
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    }

    #[test]
    fn copies_are_private_read_only_and_replaced_each_turn() {
        let temp = tempfile::tempdir().unwrap();
        let ws = temp.path().join("ws");
        prepare(&ws, temp.path(), &[copy("greeter", "SKILL.md", "hello")]).unwrap();
        let file = ws.join(".gatehouse-skills/greeter/SKILL.md");
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "hello");
        assert_eq!(mode(&file), 0o400);
        assert_eq!(mode(&ws.join(".gatehouse-skills/greeter")), 0o500);
        assert_eq!(mode(&ws.join(".gatehouse-skills")), 0o500);
        // The next turn without skills removes them, read-only or not.
        prepare(&ws, temp.path(), &[]).unwrap();
        assert!(!ws.join(".gatehouse-skills").exists());
        // A link planted in their place is removed, not followed.
        let outside = temp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("keep"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, ws.join(".gatehouse-skills")).unwrap();
        prepare(&ws, temp.path(), &[copy("greeter", "SKILL.md", "again")]).unwrap();
        assert!(outside.join("keep").exists());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), "again");
    }

    #[test]
    fn workspace_skills_are_copied_from_the_agent_workspace_without_links() {
        let temp = tempfile::tempdir().unwrap();
        let agent = temp.path().join("agent");
        let skill = agent.join("skills/notes");
        std::fs::create_dir_all(&skill).unwrap();
        std::fs::write(skill.join("SKILL.md"), "notes skill").unwrap();
        std::fs::write(skill.join("template.txt"), "t").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", skill.join("leak.txt")).unwrap();
        let agent = agent.canonicalize().unwrap();
        let ws = temp.path().join("ws");
        let source = SkillCopy {
            name: String::from("notes"),
            files: Vec::new(),
            source: Some(format!("{}/skills/notes", agent.display())),
        };
        prepare(&ws, &agent, &[source]).unwrap();
        let copied = ws.join(".gatehouse-skills/notes");
        assert_eq!(
            std::fs::read_to_string(copied.join("SKILL.md")).unwrap(),
            "notes skill"
        );
        assert!(copied.join("template.txt").is_file());
        assert!(!copied.join("leak.txt").exists(), "a link was followed");
        // A source outside the Agent workspace is refused.
        let outside = SkillCopy {
            name: String::from("x"),
            files: Vec::new(),
            source: Some(String::from("/etc")),
        };
        assert_eq!(
            prepare(&ws, &agent, &[outside]).unwrap_err().code,
            "PATH_TRAVERSAL"
        );
    }

    #[test]
    fn names_and_paths_must_be_plain() {
        let temp = tempfile::tempdir().unwrap();
        for (name, path) in [
            ("../x", "SKILL.md"),
            ("ok", "../SKILL.md"),
            (".hidden", "SKILL.md"),
            ("ok", "/etc/passwd"),
        ] {
            let error = prepare(temp.path(), temp.path(), &[copy(name, path, "x")]).unwrap_err();
            assert_eq!(error.code, "INVALID_PARAMS", "{name} {path}");
        }
    }
}
