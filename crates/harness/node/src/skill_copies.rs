//! Skill copies for native turns: the Gateway's selected skills are written into the session
//! workspace under [`SKILL_COPIES_DIR`] before the turn, private and read-only (directories
//! 0500, files 0400), and removed before the next turn's preparation. A failed removal stops
//! the preparation: a turn never runs next to stale copies.

use std::path::Path;

use base64::Engine;
use gatehouse_fsops::Dir;
use gatehouse_fsops::RelPath;
use gatehouse_fsops::root::Kind;
use gatehouse_fsops::root::Overwrite;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::worker::SKILL_COPIES_DIR;
use gatehouse_protocol::worker::SKILL_COPY_MAX_BYTES;
use gatehouse_protocol::worker::SKILL_COPY_MAX_FILES;
use gatehouse_protocol::worker::SkillCopy;

/// The mode of the copies' directories while they are written.
const OPEN_DIR_MODE: u32 = 0o700;

/// The mode of the copies' directories once written.
const CLOSED_DIR_MODE: u32 = 0o500;

/// The mode of a copied file.
const FILE_MODE: u32 = 0o400;

/// Removes the previous copies from the session workspace and writes `copies`; a copy with a
/// `source` is read from the Agent workspace at `agent_workspace` through the no-follow root.
///
/// Every step goes through directory handles ([`Dir`]) opened from `session_workspace`: the
/// sandboxed command can write the session workspace and may swap `.gatehouse-skills` or any
/// directory below it for a link at any moment, and a link is then removed or refused, never
/// followed. Nothing is created, chmodded or removed outside the session workspace.
///
/// # Errors
/// `SKILL_CLEANUP_FAILED` when the old copies cannot be removed; `INVALID_PARAMS` for a name
/// or path that is not a plain relative path; `PATH_TRAVERSAL` for a source outside the Agent
/// workspace; `SYMLINK_REDIRECT` or `EXISTS_NO_OVERWRITE` when an entry was swapped while the
/// copies were written; other I/O failures with their fsops codes.
pub(crate) fn prepare(
    session_workspace: &Dir,
    agent_workspace: &Path,
    copies: &[SkillCopy],
) -> Result<(), WireError> {
    session_workspace
        .remove(SKILL_COPIES_DIR)
        .map_err(|error| {
            WireError::new(
                ErrorCode::SkillCleanupFailed,
                format!(
                    "cannot remove the previous turn's skill copies ({error}); the turn is not prepared"
                ),
            )
        })?;
    if copies.is_empty() {
        return Ok(());
    }
    let fs = |error: gatehouse_fsops::FsError| error.to_wire();
    // Created fresh: anything at the name now was put there after the removal.
    let dir = session_workspace
        .create_dir(SKILL_COPIES_DIR, OPEN_DIR_MODE)
        .map_err(fs)?;
    for copy in copies {
        if !is_plain_name(&copy.name) {
            return Err(invalid(&copy.name));
        }
        let skill_dir = dir.create_dir(&copy.name, OPEN_DIR_MODE).map_err(fs)?;
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
            let rel = RelPath::parse(&path).map_err(fs)?;
            let Some((parent, name)) = rel.split_last() else {
                return Err(invalid(&path));
            };
            skill_dir
                .ensure_dirs(&parent, OPEN_DIR_MODE)
                .and_then(|parent_dir| {
                    parent_dir.write_file(name, &bytes, FILE_MODE, Overwrite::Deny)
                })
                .map_err(fs)?;
        }
    }
    close_dirs(&dir).map_err(fs)
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

/// Makes `dir` and every directory below it read-only ([`CLOSED_DIR_MODE`]), children first,
/// each on its own handle; links are never entered.
fn close_dirs(dir: &Dir) -> gatehouse_fsops::Result<()> {
    for name in dir.names()? {
        if dir.kind(&name)? == Some(Kind::Directory) {
            close_dirs(&dir.open_dir(&name)?)?;
        }
    }
    dir.set_mode(CLOSED_DIR_MODE)
}

#[cfg(test)]
#[path = "skill_copies_tests.rs"]
mod tests;
