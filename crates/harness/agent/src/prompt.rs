//! The system prompt: a fixed preamble and the workspace's bootstrap files.

use gatehouse_fsops::FsError;
use gatehouse_fsops::RelPath;
use gatehouse_fsops::Root;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::FetchLimits;
use gatehouse_protocol::commands::HARD_MAX_BYTES;

use crate::output::cut_chars;
use crate::output::truncation_marker;

/// The bootstrap files, in injection order.
pub const BOOTSTRAP_FILES: [&str; 4] = ["AGENTS.md", "SOUL.md", "IDENTITY.md", "USER.md"];

/// The most characters injected from one bootstrap file.
pub const BOOTSTRAP_MAX_CHARS: usize = 20_000;

/// The most characters injected from all bootstrap files together.
pub const BOOTSTRAP_TOTAL_MAX_CHARS: usize = 60_000;

/// The fixed start of every system prompt.
pub const PREAMBLE: &str = "You are an agent working in a session workspace. \
Your tools: read, write, edit, apply_patch, ls, grep, exec, process (only those offered to you can \
be called). File paths are relative to the workspace root; absolute paths, `..` and symbolic links \
are refused. Commands run with the workspace as the current directory, in a sandbox where the rest \
of the filesystem is read-only, /tmp is private and there is no network.";

/// A built system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemPrompt {
    /// The whole prompt text.
    pub text: String,
    /// What happened to each bootstrap file, in injection order (missing files are left out).
    pub files: Vec<InjectedFile>,
}

/// How one bootstrap file went into the prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InjectedFile {
    /// The file name, such as `AGENTS.md`.
    pub name: &'static str,
    /// The characters injected.
    pub n_chars_injected: usize,
    /// The characters left out by the per-file and total limits.
    pub n_chars_truncated: usize,
    /// The stable code of the error that kept the file out (a link, too large, ...), if any.
    pub error_code: Option<&'static str>,
}

/// Builds the system prompt: [`PREAMBLE`], then each of [`BOOTSTRAP_FILES`] that exists in the
/// workspace, read through fsops.
///
/// Each file is cut to [`BOOTSTRAP_MAX_CHARS`] characters and all of them together to
/// [`BOOTSTRAP_TOTAL_MAX_CHARS`]; a cut leaves a `[…truncated: N more chars]` marker telling the
/// model to read the file directly. Invalid UTF-8 is replaced. A missing file is skipped; a file
/// that cannot be read (a symbolic link, over the size limit, ...) leaves a one-line note with the
/// fsops code instead of its content. Never fails.
pub fn build_system_prompt(workspace: &Root) -> SystemPrompt {
    let mut text = String::from(PREAMBLE);
    let mut files = Vec::new();
    let mut n_chars_left = BOOTSTRAP_TOTAL_MAX_CHARS;
    let mut heading_written = false;
    for name in BOOTSTRAP_FILES {
        let content = match read_bootstrap_file(workspace, name) {
            Ok(Some(content)) => Ok(content),
            Ok(None) => continue,
            Err(error) => Err(error),
        };
        if !heading_written {
            text.push_str("\n\n# Workspace files (injected)");
            heading_written = true;
        }
        text.push_str(&format!("\n\n## {name}\n\n"));
        let content = match content {
            Ok(content) => content,
            Err(error) => {
                let code = error.code().as_str();
                text.push_str(&format!("[{name} could not be loaded: {code}]"));
                files.push(InjectedFile {
                    name,
                    n_chars_injected: 0,
                    n_chars_truncated: 0,
                    error_code: Some(code),
                });
                continue;
            }
        };
        let (kept, _) = cut_chars(&content, BOOTSTRAP_MAX_CHARS.min(n_chars_left));
        let n_chars_injected = kept.chars().count();
        let n_chars_truncated = content.chars().count() - n_chars_injected;
        n_chars_left -= n_chars_injected;
        text.push_str(kept);
        if n_chars_truncated > 0 {
            if !kept.is_empty() && !kept.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&truncation_marker(n_chars_truncated, "chars"));
            text.push_str(&format!(" (read {name} directly for the rest)"));
        }
        files.push(InjectedFile {
            name,
            n_chars_injected,
            n_chars_truncated,
            error_code: None,
        });
    }
    SystemPrompt { text, files }
}

/// Reads one bootstrap file; `None` when it does not exist.
fn read_bootstrap_file(workspace: &Root, name: &str) -> Result<Option<String>, FsError> {
    let rel = RelPath::parse(name)?;
    let limits = FetchLimits {
        max_bytes: HARD_MAX_BYTES,
        content: ContentMode::Transfer,
    };
    match workspace.fetch(&rel, limits) {
        Ok(fetched) => {
            let bytes = fetched.content.unwrap_or_default();
            Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
        }
        Err(FsError::NotFound { .. }) => Ok(None),
        Err(error) => Err(error),
    }
}
