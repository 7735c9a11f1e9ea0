//! The file tools: `read`, `write`, `edit`, `ls` and `grep`, all through the workspace
//! [`Root`], so no symbolic link is followed and nothing outside the workspace is touched.

use gatehouse_fsops::RelPath;
use gatehouse_fsops::Root;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::FetchLimits;
use gatehouse_fsops::root::Kind;
use gatehouse_fsops::root::Overwrite;
use gatehouse_fsops::root::Parents;
use gatehouse_fsops::root::WriteOptions;
use gatehouse_model::ToolInput;
use gatehouse_model::ToolKind;
use gatehouse_model::ToolSpec;
use gatehouse_protocol::commands::HARD_MAX_BYTES;
use gatehouse_protocol::error::ErrorCode;
use serde::Deserialize;
use serde_json::json;

use crate::context::ToolContext;
use crate::output::cap_bytes;
use crate::output::cut_chars;
use crate::tool::Tool;
use crate::tool::ToolError;
use crate::tool::ToolOutcome;
use crate::tool::outcome;
use crate::tool::parse_arguments;
use crate::tool::run_blocking;

/// The output cap of `read`, in bytes.
pub const READ_OUTPUT_CAP_BYTES: usize = 100 * 1024;

/// The number of lines `read` returns when the call gives no `limit`.
pub const READ_DEFAULT_LINES: usize = 2_000;

/// The most entries `ls` shows.
pub const LS_MAX_ENTRIES: usize = 2_000;

/// The most matches `grep` reports.
pub const GREP_MAX_MATCHES: usize = 200;

/// Files larger than this are skipped by `grep`.
pub const GREP_MAX_FILE_BYTES: u64 = 1024 * 1024;

/// The most files `grep` looks at in one call.
pub const GREP_MAX_FILES: usize = 20_000;

/// A matching line longer than this is cut in `grep` output.
const GREP_MAX_LINE_CHARS: usize = 300;

/// The page size of directory listings.
const LIST_PAGE: usize = 1_000;

/// Directories `grep` does not descend into.
const GREP_SKIPPED_DIRS: [&str; 1] = [".git"];

const WRITE_OPTIONS: WriteOptions = WriteOptions {
    overwrite: Overwrite::Allow,
    parents: Parents::Create,
    content: ContentMode::Transfer,
};

/// Parses a tool's workspace-relative path; absolute paths and `..` are refused.
pub(crate) fn parse_path(path: &str) -> Result<RelPath, ToolError> {
    Ok(RelPath::parse(path)?)
}

/// Reads the whole regular file at `rel` (at most [`HARD_MAX_BYTES`]).
pub(crate) fn fetch_bytes(root: &Root, rel: &RelPath) -> Result<Vec<u8>, ToolError> {
    let limits = FetchLimits {
        max_bytes: HARD_MAX_BYTES,
        content: ContentMode::Transfer,
    };
    Ok(root.fetch(rel, limits)?.content.unwrap_or_default())
}

/// Reads the file at `rel` as UTF-8 text, refusing other content with `NOT_TEXT`.
pub(crate) fn fetch_text(root: &Root, rel: &RelPath, path: &str) -> Result<String, ToolError> {
    let bytes = fetch_bytes(root, rel)?;
    String::from_utf8(bytes).map_err(|_| {
        ToolError::coded(
            ErrorCode::NotText,
            format!("{path:?} is not valid UTF-8 text"),
        )
    })
}

/// Writes `content` to `rel` atomically, creating missing parents.
pub(crate) fn write_text(root: &Root, rel: &RelPath, content: &str) -> Result<u64, ToolError> {
    Ok(root.write(rel, content.as_bytes(), WRITE_OPTIONS)?.size)
}

/// `read {path, offset?, limit?}`: a text file with line numbers.
///
/// The output is `cat -n` style: each line is its 1-based number right-aligned in six columns, a
/// tab, then the line. `offset` is the first line (1-based, default 1) and `limit` the number of
/// lines (default [`READ_DEFAULT_LINES`]); a note says how to continue when lines remain. Invalid
/// UTF-8 is replaced, and the output is capped at [`READ_OUTPUT_CAP_BYTES`] with a marker.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadTool;

#[derive(Debug, Deserialize)]
struct ReadArgs {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[async_trait::async_trait]
impl Tool for ReadTool {
    fn name(&self) -> &str {
        "read"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: String::from("read"),
            description: String::from(
                "Read a text file of the workspace. Output lines are numbered (number, tab, line). \
                 Use offset (1-based first line) and limit (number of lines) for large files.",
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "path relative to the workspace"},
                    "offset": {"type": "integer", "minimum": 1},
                    "limit": {"type": "integer", "minimum": 1}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
            kind: ToolKind::Function,
        }
    }

    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> ToolOutcome {
        let result = async {
            let args: ReadArgs = parse_arguments(&input)?;
            let rel = parse_path(&args.path)?;
            let bytes = run_blocking(ctx, move |root| fetch_bytes(root, &rel)).await?;
            let text = String::from_utf8_lossy(&bytes);
            Ok(number_lines(&text, args.offset, args.limit))
        }
        .await;
        outcome(result)
    }
}

/// Returns lines `offset..offset+limit` of `text`, numbered, capped, with continuation notes.
fn number_lines(text: &str, offset: Option<usize>, limit: Option<usize>) -> String {
    if text.is_empty() {
        return String::from("(empty file)");
    }
    let first = offset.unwrap_or(1).max(1);
    let limit = limit.unwrap_or(READ_DEFAULT_LINES).max(1);
    let n_lines = text.lines().count();
    if first > n_lines {
        return format!("(no line {first}: the file has {n_lines} lines)");
    }
    let mut output = String::new();
    for (line_idx, line) in text.lines().enumerate().skip(first - 1).take(limit) {
        output.push_str(&format!("{:>6}\t{line}\n", line_idx + 1));
    }
    let last = (first - 1 + limit).min(n_lines);
    if last < n_lines {
        output.push_str(&format!(
            "[…{} more lines; continue with offset={}]\n",
            n_lines - last,
            last + 1
        ));
    }
    cap_bytes(output, READ_OUTPUT_CAP_BYTES)
}

/// `write {path, content}`: creates or replaces a file atomically, creating missing parents.
#[derive(Debug, Clone, Copy, Default)]
pub struct WriteTool;

#[derive(Debug, Deserialize)]
struct WriteArgs {
    path: String,
    content: String,
}

#[async_trait::async_trait]
impl Tool for WriteTool {
    fn name(&self) -> &str {
        "write"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: String::from("write"),
            description: String::from(
                "Create or replace a file of the workspace with the given content; missing parent \
                 directories are created.",
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "path relative to the workspace"},
                    "content": {"type": "string"}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
            kind: ToolKind::Function,
        }
    }

    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> ToolOutcome {
        let result = async {
            let args: WriteArgs = parse_arguments(&input)?;
            let rel = parse_path(&args.path)?;
            let content = args.content;
            let size = run_blocking(ctx, move |root| write_text(root, &rel, &content)).await?;
            Ok(format!("wrote {size} bytes to {}", args.path))
        }
        .await;
        outcome(result)
    }
}

/// `edit {path, old_string, new_string, replace_all?}`: exact-match replacement in a text file.
///
/// `old_string` must occur exactly once, or `replace_all` must be true; otherwise the call fails
/// with `EDIT_NO_MATCH` or `EDIT_AMBIGUOUS` and the file is unchanged.
#[derive(Debug, Clone, Copy, Default)]
pub struct EditTool;

#[derive(Debug, Deserialize)]
struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

#[async_trait::async_trait]
impl Tool for EditTool {
    fn name(&self) -> &str {
        "edit"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: String::from("edit"),
            description: String::from(
                "Replace an exact string in a text file. old_string must match exactly once \
                 unless replace_all is true.",
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "path relative to the workspace"},
                    "old_string": {"type": "string"},
                    "new_string": {"type": "string"},
                    "replace_all": {"type": "boolean", "default": false}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
            kind: ToolKind::Function,
        }
    }

    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> ToolOutcome {
        let result = async {
            let args: EditArgs = parse_arguments(&input)?;
            if args.old_string.is_empty() {
                return Err(ToolError::InvalidArguments(String::from(
                    "old_string must not be empty",
                )));
            }
            let rel = parse_path(&args.path)?;
            run_blocking(ctx, move |root| edit_file(root, &rel, &args)).await
        }
        .await;
        outcome(result)
    }
}

fn edit_file(root: &Root, rel: &RelPath, args: &EditArgs) -> Result<String, ToolError> {
    let text = fetch_text(root, rel, &args.path)?;
    let n_matches = text.matches(args.old_string.as_str()).count();
    let edited = match (n_matches, args.replace_all) {
        (0, _) => {
            return Err(ToolError::coded(
                ErrorCode::EditNoMatch,
                format!("old_string was not found in {}", args.path),
            ));
        }
        (1, _) | (_, true) => text.replace(args.old_string.as_str(), &args.new_string),
        (_, false) => {
            return Err(ToolError::coded(
                ErrorCode::EditAmbiguous,
                format!(
                    "old_string occurs {n_matches} times in {}; add context to make it unique \
                     or set replace_all",
                    args.path
                ),
            ));
        }
    };
    write_text(root, rel, &edited)?;
    Ok(format!(
        "replaced {n_matches} occurrence(s) in {}",
        args.path
    ))
}

/// `ls {path?}`: one page of a directory listing (at most [`LS_MAX_ENTRIES`] entries).
///
/// Each line is a name; directories end in `/`, symbolic links in `@` (never followed), other
/// special files in `|`, and regular files show their size.
#[derive(Debug, Clone, Copy, Default)]
pub struct LsTool;

#[derive(Debug, Deserialize)]
struct LsArgs {
    path: Option<String>,
}

#[async_trait::async_trait]
impl Tool for LsTool {
    fn name(&self) -> &str {
        "ls"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: String::from("ls"),
            description: String::from(
                "List a directory of the workspace (default: the workspace root). Directories end \
                 in /, symbolic links in @.",
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "directory relative to the workspace"}
                },
                "additionalProperties": false
            }),
            kind: ToolKind::Function,
        }
    }

    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> ToolOutcome {
        let result = async {
            let args: LsArgs = parse_arguments(&input)?;
            let rel = parse_path(args.path.as_deref().unwrap_or(""))?;
            run_blocking(ctx, move |root| list_dir(root, &rel)).await
        }
        .await;
        outcome(result)
    }
}

fn list_dir(root: &Root, rel: &RelPath) -> Result<String, ToolError> {
    let mut lines = Vec::new();
    let mut after: Option<String> = None;
    let mut more = false;
    loop {
        let listing = root.list(rel, LIST_PAGE, after.as_deref())?;
        for entry in listing.entries {
            if lines.len() == LS_MAX_ENTRIES {
                more = true;
                break;
            }
            let line = match entry.kind {
                Kind::Directory => format!("{}/", entry.name),
                Kind::Symlink => format!("{}@", entry.name),
                Kind::Other => format!("{}|", entry.name),
                Kind::File => format!("{} ({} bytes)", entry.name, entry.size),
            };
            lines.push(line);
        }
        match (listing.next_page_token, more) {
            (Some(token), false) => after = Some(token),
            (Some(_), true) | (None, _) => break,
        }
    }
    if lines.is_empty() {
        return Ok(String::from("(empty directory)"));
    }
    if more {
        lines.push(format!("[…stopped after {LS_MAX_ENTRIES} entries]"));
    }
    Ok(lines.join("\n"))
}

/// `grep {pattern, path?, regex?}`: a plain substring search over the text files under a path.
///
/// The walk never follows symbolic links and skips `.git`, binary files (a NUL in the content),
/// files over [`GREP_MAX_FILE_BYTES`] and files it cannot read. It reports at most
/// [`GREP_MAX_MATCHES`] matches as `path:line: text`. Regular expressions are not supported:
/// `regex: true` is refused.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrepTool;

#[derive(Debug, Deserialize)]
struct GrepArgs {
    pattern: String,
    path: Option<String>,
    #[serde(default)]
    regex: bool,
}

#[async_trait::async_trait]
impl Tool for GrepTool {
    fn name(&self) -> &str {
        "grep"
    }

    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: String::from("grep"),
            description: String::from(
                "Search the text files under a workspace path (default: the whole workspace) for \
                 a plain substring. Prints path:line: text per match.",
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "the substring to find"},
                    "path": {"type": "string", "description": "file or directory relative to the workspace"},
                    "regex": {"type": "boolean", "description": "not supported; must be false", "default": false}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
            kind: ToolKind::Function,
        }
    }

    async fn call(&self, ctx: &ToolContext, input: ToolInput) -> ToolOutcome {
        let result = async {
            let args: GrepArgs = parse_arguments(&input)?;
            if args.regex {
                return Err(ToolError::InvalidArguments(String::from(
                    "regular expressions are not supported; search for a plain substring",
                )));
            }
            if args.pattern.is_empty() {
                return Err(ToolError::InvalidArguments(String::from(
                    "pattern must not be empty",
                )));
            }
            let rel = parse_path(args.path.as_deref().unwrap_or(""))?;
            run_blocking(ctx, move |root| grep(root, &rel, &args.pattern)).await
        }
        .await;
        outcome(result)
    }
}

fn grep(root: &Root, start: &RelPath, pattern: &str) -> Result<String, ToolError> {
    let mut matches: Vec<String> = Vec::new();
    let mut n_files = 0usize;
    let mut stopped = false;
    let mut pending_files: Vec<RelPath> = Vec::new();
    let mut pending_dirs: Vec<RelPath> = Vec::new();
    match root.stat(start)?.kind {
        Kind::Directory => pending_dirs.push(start.clone()),
        Kind::File => pending_files.push(start.clone()),
        Kind::Symlink | Kind::Other => {
            // Let fetch report the refusal with its own code.
            fetch_bytes(root, start)?;
        }
    }
    // Depth first, files of a directory before its subdirectories, names in byte order.
    while !stopped {
        let Some(file) = pending_files.pop() else {
            let Some(dir) = pending_dirs.pop() else {
                break;
            };
            let (files, dirs) = list_children(root, &dir);
            pending_files.extend(files.into_iter().rev());
            pending_dirs.extend(dirs.into_iter().rev());
            continue;
        };
        n_files += 1;
        if n_files > GREP_MAX_FILES {
            stopped = true;
            break;
        }
        stopped = grep_file(root, &file, pattern, &mut matches);
    }
    if matches.is_empty() && !stopped {
        return Ok(String::from("no matches"));
    }
    if stopped {
        matches.push(format!(
            "[…stopped after {} matches or {GREP_MAX_FILES} files]",
            matches.len()
        ));
    }
    Ok(matches.join("\n"))
}

/// Returns the regular files and directories directly in `dir`, skipping links and unreadable
/// directories.
fn list_children(root: &Root, dir: &RelPath) -> (Vec<RelPath>, Vec<RelPath>) {
    let mut files = Vec::new();
    let mut dirs = Vec::new();
    let mut after: Option<String> = None;
    while let Ok(listing) = root.list(dir, LIST_PAGE, after.as_deref()) {
        for entry in listing.entries {
            match entry.kind {
                Kind::File if entry.size <= GREP_MAX_FILE_BYTES => {
                    files.push(dir.join(&entry.name))
                }
                Kind::Directory if !GREP_SKIPPED_DIRS.contains(&entry.name.as_str()) => {
                    dirs.push(dir.join(&entry.name));
                }
                Kind::File | Kind::Directory | Kind::Symlink | Kind::Other => {}
            }
        }
        match listing.next_page_token {
            Some(token) => after = Some(token),
            None => break,
        }
    }
    (files, dirs)
}

/// Appends the matches of `pattern` in `file`; returns true when the match cap was reached.
fn grep_file(root: &Root, file: &RelPath, pattern: &str, matches: &mut Vec<String>) -> bool {
    let limits = FetchLimits {
        max_bytes: GREP_MAX_FILE_BYTES,
        content: ContentMode::Transfer,
    };
    let Ok(fetched) = root.fetch(file, limits) else {
        return false;
    };
    let bytes = fetched.content.unwrap_or_default();
    if bytes.contains(&0) {
        return false;
    }
    let text = String::from_utf8_lossy(&bytes);
    let path = file.to_os_path();
    for (line_idx, line) in text.lines().enumerate() {
        if !line.contains(pattern) {
            continue;
        }
        if matches.len() == GREP_MAX_MATCHES {
            return true;
        }
        let (shown, n_cut) = cut_chars(line, GREP_MAX_LINE_CHARS);
        let ellipsis = if n_cut > 0 { "…" } else { "" };
        matches.push(format!("{path}:{}: {shown}{ellipsis}", line_idx + 1));
    }
    false
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use crate::tools::fs::number_lines;

    #[test]
    fn numbers_lines_with_offset_and_limit() {
        assert_eq!(
            number_lines("a\nb\nc\n", None, None),
            "     1\ta\n     2\tb\n     3\tc\n"
        );
        assert_eq!(
            number_lines("a\nb\nc", Some(2), Some(1)),
            "     2\tb\n[…1 more lines; continue with offset=3]\n"
        );
        assert_eq!(
            number_lines("a", Some(5), None),
            "(no line 5: the file has 1 lines)"
        );
        assert_eq!(number_lines("", None, None), "(empty file)");
    }
}
