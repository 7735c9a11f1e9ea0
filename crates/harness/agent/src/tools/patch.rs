//! `apply_patch`: the freeform `*** Begin Patch` format, validated as a whole before any file is
//! written.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: notes/new.txt
//! +first line
//! *** Delete File: old.txt
//! *** Update File: src/a.txt
//! *** Move to: src/b.txt
//! @@ optional line to find first
//!  context line
//! -removed line
//! +added line
//! *** End of File
//! *** End Patch
//! ```
//!
//! `Add File` replaces a file that already exists. Paths are relative to the workspace.
//!
//! Every operation is first computed in memory against the current files (and against earlier
//! operations of the same patch); when any hunk does not fit or any path is refused, nothing is
//! written. Then the files are written (each atomically through fsops) and only then are files
//! deleted, so a failure while writing never loses content. A hunk's lines are searched exactly
//! first, then ignoring trailing whitespace, then ignoring surrounding whitespace.

use gatehouse_protocol::error::ErrorCode;
use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::Path;

use gatehouse_fsops::FsError;
use gatehouse_fsops::RelPath;
use gatehouse_fsops::Root;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::Kind;
use gatehouse_fsops::root::Overwrite;
use gatehouse_fsops::root::Parents;
use gatehouse_fsops::root::WriteOptions;
use gatehouse_model::ToolInput;
use gatehouse_model::ToolKind;
use gatehouse_model::ToolSpec;
use rustix::fs::AtFlags;
use rustix::fs::Mode;
use rustix::fs::OFlags;
use serde_json::Value;
use serde_json::json;

use crate::context::ToolContext;
use crate::tool::Tool;
use crate::tool::ToolError;
use crate::tool::ToolOutcome;
use crate::tool::outcome;
use crate::tool::run_blocking;
use crate::tools::fs::fetch_text;
use crate::tools::fs::parse_path;
use crate::tools::fs::write_text;

const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";
const ADD_FILE: &str = "*** Add File: ";
const DELETE_FILE: &str = "*** Delete File: ";
const UPDATE_FILE: &str = "*** Update File: ";
const MOVE_TO: &str = "*** Move to: ";
const END_OF_FILE: &str = "*** End of File";

/// `apply_patch`: a freeform tool taking the `*** Begin Patch` format (see the module docs).
///
/// The output is one line per operation: `A path` (added), `M path` (updated), `D path`
/// (deleted), `R old -> new` (updated and moved).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApplyPatchTool;

#[async_trait::async_trait]
impl Tool for ApplyPatchTool {
    fn name(&self) -> &str {
        "apply_patch"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: String::from("apply_patch"),
            description: String::from(
                "Edit workspace files with a patch. The input starts with `*** Begin Patch` and \
                 ends with `*** End Patch`. Sections: `*** Add File: PATH` followed by `+` lines; \
                 `*** Delete File: PATH`; `*** Update File: PATH`, optionally `*** Move to: PATH`, \
                 then hunks opened by `@@` (optionally followed by a line to find first) made of \
                 ` ` context, `-` removed and `+` added lines. Paths are relative. Nothing is \
                 written unless every hunk applies.",
            ),
            parameters: json!({
                "type": "object",
                "properties": {"input": {"type": "string", "description": "the whole patch"}},
                "required": ["input"],
                "additionalProperties": false
            }),
            kind: ToolKind::Freeform,
        }
    }

    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> ToolOutcome {
        let text = match input {
            ToolInput::Freeform { input } => input,
            // Chat Completions passes freeform tools as a function with one `input` argument.
            ToolInput::Function { arguments_json } => {
                match serde_json::from_str::<Value>(&arguments_json)
                    .ok()
                    .and_then(|value| {
                        value
                            .get("input")
                            .and_then(Value::as_str)
                            .map(str::to_owned)
                    }) {
                    Some(input) => input,
                    None => arguments_json,
                }
            }
        };
        let workspace_dir = ctx.workspace_dir().to_path_buf();
        let result = async {
            let ops = parse_patch(&text)?;
            run_blocking(ctx, move |root| apply(root, &workspace_dir, &ops)).await
        }
        .await;
        outcome(result)
    }
}

/// One section of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PatchOp {
    Add {
        path: String,
        content: String,
    },
    Delete {
        path: String,
    },
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

/// One `@@` hunk of an update.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// The line after `@@`, found before the hunk's lines are searched.
    pub(crate) context: Option<String>,
    /// Context and removed lines, in order.
    pub(crate) old_lines: Vec<String>,
    /// Context and added lines, in order.
    pub(crate) new_lines: Vec<String>,
    /// `*** End of File` closed the hunk: its lines are searched at the end of the file first.
    pub(crate) end_of_file: bool,
}

fn invalid(message: String) -> ToolError {
    ToolError::coded(ErrorCode::PatchInvalid, message)
}

fn conflict(message: String) -> ToolError {
    ToolError::coded(ErrorCode::PatchConflict, message)
}

/// Parses a whole patch.
pub(crate) fn parse_patch(text: &str) -> Result<Vec<PatchOp>, ToolError> {
    let lines: Vec<&str> = text.trim().lines().collect();
    let (Some(first), Some(last)) = (lines.first(), lines.last()) else {
        return Err(invalid(String::from("the patch is empty")));
    };
    if first.trim() != BEGIN_PATCH {
        return Err(invalid(format!("the first line must be {BEGIN_PATCH:?}")));
    }
    if lines.len() < 2 || last.trim() != END_PATCH {
        return Err(invalid(format!("the last line must be {END_PATCH:?}")));
    }
    let body = &lines[1..lines.len() - 1];
    let mut ops = Vec::new();
    let mut line_idx = 0;
    while line_idx < body.len() {
        let line = body[line_idx];
        let line_number = line_idx + 2;
        line_idx += 1;
        if let Some(path) = line.strip_prefix(ADD_FILE) {
            let mut content = String::new();
            while let Some(next) = body.get(line_idx).filter(|next| !next.starts_with("*** ")) {
                let Some(added) = next.strip_prefix('+') else {
                    return Err(invalid(format!(
                        "line {}: every line of an added file must start with '+'",
                        line_idx + 2
                    )));
                };
                content.push_str(added);
                content.push('\n');
                line_idx += 1;
            }
            ops.push(PatchOp::Add {
                path: path.trim().to_owned(),
                content,
            });
        } else if let Some(path) = line.strip_prefix(DELETE_FILE) {
            ops.push(PatchOp::Delete {
                path: path.trim().to_owned(),
            });
        } else if let Some(path) = line.strip_prefix(UPDATE_FILE) {
            let move_to = match body
                .get(line_idx)
                .and_then(|next| next.strip_prefix(MOVE_TO))
            {
                Some(target) => {
                    line_idx += 1;
                    Some(target.trim().to_owned())
                }
                None => None,
            };
            let (chunks, consumed) = parse_chunks(&body[line_idx..], line_idx + 2)?;
            line_idx += consumed;
            if chunks.is_empty() && move_to.is_none() {
                return Err(invalid(format!(
                    "line {line_number}: the update of {} has no hunks",
                    path.trim()
                )));
            }
            ops.push(PatchOp::Update {
                path: path.trim().to_owned(),
                move_to,
                chunks,
            });
        } else if line.trim().is_empty() {
            continue;
        } else {
            return Err(invalid(format!(
                "line {line_number}: expected an Add, Delete or Update File header, found {line:?}"
            )));
        }
    }
    if ops.is_empty() {
        return Err(invalid(String::from("the patch has no operations")));
    }
    Ok(ops)
}

/// Parses the hunks of one update, up to the next `*** ` header; returns them and the number of
/// lines consumed. `first_line_number` is the patch line number of `lines[0]`, for messages.
fn parse_chunks(
    lines: &[&str],
    first_line_number: usize,
) -> Result<(Vec<Chunk>, usize), ToolError> {
    let mut chunks: Vec<Chunk> = Vec::new();
    let mut current: Option<Chunk> = None;
    let mut line_idx = 0;
    while let Some(line) = lines.get(line_idx) {
        if line.starts_with("*** ") && *line != END_OF_FILE {
            break;
        }
        line_idx += 1;
        if *line == END_OF_FILE {
            let Some(mut chunk) = current.take() else {
                return Err(invalid(format!(
                    "line {}: {END_OF_FILE:?} outside a hunk",
                    first_line_number + line_idx - 1
                )));
            };
            chunk.end_of_file = true;
            chunks.push(chunk);
            continue;
        }
        if let Some(rest) = line.strip_prefix("@@") {
            if let Some(chunk) = current.take() {
                chunks.push(chunk);
            }
            let context = rest.trim();
            current = Some(Chunk {
                context: (!context.is_empty()).then(|| context.to_owned()),
                ..Chunk::default()
            });
            continue;
        }
        // The first hunk may omit its `@@` line.
        let chunk = match (&mut current, chunks.is_empty()) {
            (Some(chunk), _) => chunk,
            (None, true) => current.insert(Chunk::default()),
            (None, false) => {
                return Err(invalid(format!(
                    "line {}: expected '@@' to open a hunk, found {line:?}",
                    first_line_number + line_idx - 1
                )));
            }
        };
        match line.chars().next() {
            // A blank line inside a hunk is an empty context line.
            None => {
                chunk.old_lines.push(String::new());
                chunk.new_lines.push(String::new());
            }
            Some(' ') => {
                chunk.old_lines.push(line[1..].to_owned());
                chunk.new_lines.push(line[1..].to_owned());
            }
            Some('-') => chunk.old_lines.push(line[1..].to_owned()),
            Some('+') => chunk.new_lines.push(line[1..].to_owned()),
            Some(_) => {
                return Err(invalid(format!(
                    "line {}: a hunk line must start with ' ', '-' or '+', found {line:?}",
                    first_line_number + line_idx - 1
                )));
            }
        }
    }
    if let Some(chunk) = current {
        chunks.push(chunk);
    }
    if let Some(empty_idx) = chunks
        .iter()
        .position(|chunk| chunk.old_lines.is_empty() && chunk.new_lines.is_empty())
    {
        return Err(invalid(format!("hunk {} is empty", empty_idx + 1)));
    }
    Ok((chunks, line_idx))
}

/// What the patch will do to one path, computed before anything is written.
#[derive(Debug)]
enum Planned {
    Write(String),
    Delete,
}

/// Validates every operation, then writes and deletes; returns the summary.
fn apply(root: &Root, workspace_dir: &Path, ops: &[PatchOp]) -> Result<String, ToolError> {
    // Pending state per path, in the order paths were first touched.
    let mut order: Vec<RelPath> = Vec::new();
    let mut pending: HashMap<RelPath, Planned> = HashMap::new();
    let mut summary = Vec::new();
    let mut set = |rel: RelPath, planned: Planned, pending: &mut HashMap<RelPath, Planned>| {
        if !pending.contains_key(&rel) {
            order.push(rel.clone());
        }
        pending.insert(rel, planned);
    };
    for op in ops {
        match op {
            PatchOp::Add { path, content } => {
                let rel = parse_path(path)?;
                preflight_write(root, &rel)?;
                set(rel, Planned::Write(content.clone()), &mut pending);
                summary.push(format!("A {path}"));
            }
            PatchOp::Delete { path } => {
                let rel = parse_path(path)?;
                match pending.get(&rel) {
                    Some(Planned::Write(_)) => {}
                    Some(Planned::Delete) => {
                        return Err(conflict(format!("{path} is deleted twice")));
                    }
                    None => check_deletable(root, &rel)?,
                }
                set(rel, Planned::Delete, &mut pending);
                summary.push(format!("D {path}"));
            }
            PatchOp::Update {
                path,
                move_to,
                chunks,
            } => {
                let rel = parse_path(path)?;
                let current = match pending.get(&rel) {
                    Some(Planned::Write(content)) => content.clone(),
                    Some(Planned::Delete) => {
                        return Err(conflict(format!("{path} was deleted earlier in the patch")));
                    }
                    None => fetch_text(root, &rel, path)?,
                };
                let updated = apply_chunks(&current, chunks)
                    .map_err(|message| conflict(format!("{path}: {message}")))?;
                match move_to {
                    None => {
                        set(rel, Planned::Write(updated), &mut pending);
                        summary.push(format!("M {path}"));
                    }
                    Some(target) => {
                        let target_rel = parse_path(target)?;
                        preflight_write(root, &target_rel)?;
                        if target_rel != rel {
                            if !pending.contains_key(&rel) {
                                check_deletable(root, &rel)?;
                            }
                            set(rel, Planned::Delete, &mut pending);
                        }
                        set(target_rel, Planned::Write(updated), &mut pending);
                        summary.push(format!("R {path} -> {target}"));
                    }
                }
            }
        }
    }
    // Writes first, deletes last: a failure part-way never loses content.
    for rel in &order {
        if let Some(Planned::Write(content)) = pending.get(rel) {
            write_text(root, rel, content)?;
        }
    }
    for rel in &order {
        if let Some(Planned::Delete) = pending.get(rel) {
            match root.stat(rel) {
                Err(FsError::NotFound { .. }) => {}
                Ok(_) | Err(_) => unlink_file(root, workspace_dir, rel)?,
            }
        }
    }
    Ok(summary.join("\n"))
}

/// Checks that `rel` could be written (no link on the way or at the end, not a directory).
fn preflight_write(root: &Root, rel: &RelPath) -> Result<(), ToolError> {
    let options = WriteOptions {
        overwrite: Overwrite::Allow,
        parents: Parents::Create,
        content: ContentMode::PreflightOnly,
    };
    root.write(rel, &[], options)?;
    Ok(())
}

/// Checks that `rel` is a regular file reached without links.
fn check_deletable(root: &Root, rel: &RelPath) -> Result<(), ToolError> {
    let metadata = root.stat(rel)?;
    match metadata.kind {
        Kind::File => Ok(()),
        Kind::Symlink => Err(FsError::SymlinkTargetDenied {
            path: metadata.path,
        }
        .into()),
        Kind::Directory => Err(FsError::IsDirectory {
            path: metadata.path,
        }
        .into()),
        Kind::Other => Err(FsError::NotRegularFile {
            path: metadata.path,
        }
        .into()),
    }
}

/// Removes the regular file at `rel`, resolving its parent one component at a time without
/// following links (fsops has no delete).
fn unlink_file(root: &Root, workspace_dir: &Path, rel: &RelPath) -> Result<(), ToolError> {
    check_deletable(root, rel)?;
    let path = root.canonical(rel);
    let Some((parent, name)) = rel.split_last() else {
        return Err(FsError::IsDirectory { path }.into());
    };
    let write_error = |errno: rustix::io::Errno| FsError::Write {
        path: path.clone(),
        source: std::io::Error::from(errno),
    };
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut dir: OwnedFd =
        rustix::fs::open(workspace_dir, flags, Mode::empty()).map_err(write_error)?;
    for component in parent.components() {
        // A link in the way makes O_DIRECTORY | O_NOFOLLOW fail: nothing is followed.
        dir = rustix::fs::openat(&dir, component.as_str(), flags, Mode::empty())
            .map_err(write_error)?;
    }
    // unlinkat removes the entry itself; it never follows a link.
    rustix::fs::unlinkat(&dir, name, AtFlags::empty()).map_err(write_error)?;
    Ok(())
}

/// Returns `content` with every hunk applied, or why a hunk does not fit.
pub(crate) fn apply_chunks(content: &str, chunks: &[Chunk]) -> Result<String, String> {
    let mut lines: Vec<&str> = content.split('\n').collect();
    // A final newline leaves an empty last element; it is put back when joining.
    if lines.last() == Some(&"") {
        lines.pop();
    }
    let mut replacements: Vec<(usize, usize, &[String])> = Vec::new();
    let mut cursor = 0;
    for (chunk_idx, chunk) in chunks.iter().enumerate() {
        let hunk_number = chunk_idx + 1;
        if let Some(context) = &chunk.context {
            let Some(found) = seek(&lines, std::slice::from_ref(context), cursor, false) else {
                return Err(format!(
                    "hunk {hunk_number}: cannot find the line {context:?}"
                ));
            };
            cursor = found + 1;
        }
        if chunk.old_lines.is_empty() {
            replacements.push((lines.len(), 0, &chunk.new_lines));
            continue;
        }
        let mut old: &[String] = &chunk.old_lines;
        let mut new: &[String] = &chunk.new_lines;
        let mut found = seek(&lines, old, cursor, chunk.end_of_file);
        // A trailing empty line in the hunk may stand for the file's final newline.
        if found.is_none() && old.last().is_some_and(String::is_empty) {
            old = &old[..old.len() - 1];
            if new.last().is_some_and(String::is_empty) {
                new = &new[..new.len() - 1];
            }
            found = seek(&lines, old, cursor, chunk.end_of_file);
        }
        let Some(start) = found else {
            return Err(format!(
                "hunk {hunk_number} does not match the file (expected {:?})",
                chunk.old_lines
            ));
        };
        replacements.push((start, old.len(), new));
        cursor = start + old.len();
    }
    replacements.sort_by_key(|(start, _, _)| *start);
    let mut result: Vec<&str> = Vec::with_capacity(lines.len());
    let mut line_idx = 0;
    for (start, n_old, new) in replacements {
        if start < line_idx {
            return Err(String::from("hunks overlap"));
        }
        result.extend_from_slice(&lines[line_idx..start]);
        result.extend(new.iter().map(String::as_str));
        line_idx = start + n_old;
    }
    result.extend_from_slice(&lines[line_idx.min(lines.len())..]);
    let mut text = result.join("\n");
    if !text.is_empty() {
        text.push('\n');
    }
    Ok(text)
}

/// Finds `pattern` in `lines` at or after `start`: exactly, then ignoring trailing whitespace,
/// then ignoring surrounding whitespace. With `at_end`, a match at the end of the file is tried
/// first.
fn seek(lines: &[&str], pattern: &[String], start: usize, at_end: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last_start = lines.len() - pattern.len();
    let comparisons: [fn(&str, &str) -> bool; 3] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
    ];
    for equal in comparisons {
        let matches_at = |idx: usize| {
            pattern
                .iter()
                .zip(&lines[idx..idx + pattern.len()])
                .all(|(want, have)| equal(have, want))
        };
        if at_end && last_start >= start && matches_at(last_start) {
            return Some(last_start);
        }
        if let Some(idx) = (start..=last_start).find(|idx| matches_at(*idx)) {
            return Some(idx);
        }
    }
    None
}

#[cfg(test)]
#[path = "patch_tests.rs"]
mod tests;
