//! `workspace.memory`: lists, reads and watches the memory files of the Agent workspace for the
//! Gateway's index. Everything goes through the no-follow [`gatehouse_fsops::Root`]: a symbolic
//! link is skipped (and reported), never followed, and a hard-linked file is never read.
//!
//! The node keeps no index and no embedding configuration; `watch` only says when something
//! changed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use gatehouse_fsops::FsError;
use gatehouse_fsops::path::RelPath;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::FetchLimits;
use gatehouse_fsops::root::Kind;
use gatehouse_protocol::command::Serve;
use gatehouse_protocol::command::Served;
use gatehouse_protocol::command::WorkspaceMemory;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::memory::DEFAULT_READ_LINES;
use gatehouse_protocol::memory::DEFAULT_WATCH_DEBOUNCE_MS;
use gatehouse_protocol::memory::MAX_MEMORY_FILE_BYTES;
use gatehouse_protocol::memory::MAX_READ_CHARS;
use gatehouse_protocol::memory::MemoryAnswer;
use gatehouse_protocol::memory::MemoryFile;
use gatehouse_protocol::memory::MemoryIndexingResult;
use gatehouse_protocol::memory::MemoryListResult;
use gatehouse_protocol::memory::MemoryOp;
use gatehouse_protocol::memory::MemoryReadResult;
use gatehouse_protocol::memory::MemoryRequest;
use gatehouse_protocol::memory::SkippedFile;
use gatehouse_protocol::memory::WATCH_CHANGE;
use gatehouse_protocol::memory::WATCH_UNAVAILABLE;
use gatehouse_protocol::memory::is_canonical_relative;
use gatehouse_protocol::memory::is_memory_path;

use crate::file_commands::Workspace;
use crate::invoke::InvokeContext;

/// The root-level memory files.
const ROOT_FILES: [&str; 4] = ["MEMORY.md", "memory.md", "DREAMS.md", "dreams.md"];

/// How deep `memory/` (and an extra directory) is walked.
const MAX_DEPTH: usize = 16;

/// The most files one listing returns.
const MAX_FILES: usize = 20_000;

/// How often `watch` looks for changes.
const WATCH_POLL: Duration = Duration::from_millis(250);

/// The `workspace.memory` command.
pub(crate) struct MemoryCommand {
    pub(crate) workspace: Arc<Workspace>,
    /// The canonical workspace directory, which requests must name.
    pub(crate) workspace_dir: String,
}

impl Serve<WorkspaceMemory, InvokeContext> for MemoryCommand {
    fn serve(&self, request: MemoryRequest, context: InvokeContext) -> Served<MemoryAnswer> {
        let workspace = Arc::clone(&self.workspace);
        let workspace_dir = self.workspace_dir.clone();
        Box::pin(async move {
            crate::file_commands::check_workspace_dir(&request.workspace_dir, &workspace_dir)?;
            for extra in &request.extra_paths {
                check_canonical(extra)?;
            }
            match request.op {
                MemoryOp::Watch => watch(workspace, request, context).await,
                op => tokio::task::spawn_blocking(move || run_blocking(&workspace, op, &request))
                    .await
                    .map_err(|_| WireError::new(ErrorCode::Internal, "the memory read failed"))?,
            }
        })
    }
}

fn run_blocking(
    workspace: &Workspace,
    op: MemoryOp,
    request: &MemoryRequest,
) -> Result<MemoryAnswer, WireError> {
    match op {
        MemoryOp::List => Ok(MemoryAnswer::List(list(workspace, &request.extra_paths))),
        MemoryOp::Read => Ok(MemoryAnswer::Read(read(workspace, request)?)),
        MemoryOp::ReadForIndexing => {
            let path = allowed_path(request)?;
            let bytes = fetch(workspace, &path)?;
            let text = String::from_utf8(bytes.clone()).map_err(|_| {
                WireError::new(ErrorCode::ReadError, format!("{path} is not UTF-8"))
            })?;
            Ok(MemoryAnswer::Indexing(MemoryIndexingResult {
                path,
                text,
                sha256: gatehouse_fsops::commands::sha256_hex(&bytes),
            }))
        }
        MemoryOp::Watch => Err(WireError::new(ErrorCode::Internal, "watch is streamed")),
    }
}

fn check_canonical(path: &str) -> Result<(), WireError> {
    if gatehouse_fsops::path::has_dot_dot_segment(path) {
        return Err(WireError::new(
            ErrorCode::PathTraversal,
            format!("{path} leaves the workspace"),
        ));
    }
    if !is_canonical_relative(path) {
        return Err(WireError::new(
            ErrorCode::InvalidPath,
            format!("{path} is not a canonical workspace-relative path"),
        ));
    }
    Ok(())
}

/// The requested path, if it is canonical and a memory file (or under an extra path).
fn allowed_path(request: &MemoryRequest) -> Result<String, WireError> {
    let Some(path) = &request.rel_path else {
        return Err(WireError::new(
            ErrorCode::InvalidParams,
            "relPath is required",
        ));
    };
    check_canonical(path)?;
    let under_extra = request.extra_paths.iter().any(|extra| {
        path == extra || path.starts_with(&format!("{extra}/")) && path.ends_with(".md")
    });
    if !is_memory_path(path) && !under_extra {
        return Err(WireError::new(
            ErrorCode::PolicyDenied,
            format!("{path} is not a memory file"),
        ));
    }
    Ok(path.clone())
}

fn fetch(workspace: &Workspace, path: &str) -> Result<Vec<u8>, WireError> {
    let rel = RelPath::parse(path).map_err(|error| error.to_wire())?;
    let fetched = workspace
        .root
        .fetch(
            &rel,
            FetchLimits {
                max_bytes: MAX_MEMORY_FILE_BYTES,
                content: ContentMode::Transfer,
            },
        )
        .map_err(|error| error.to_wire())?;
    Ok(fetched.content.unwrap_or_default())
}

fn read(workspace: &Workspace, request: &MemoryRequest) -> Result<MemoryReadResult, WireError> {
    let path = allowed_path(request)?;
    let bytes = fetch(workspace, &path)?;
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    let total = u32::try_from(all.len()).unwrap_or(u32::MAX);
    let from = request.from.unwrap_or(1).max(1);
    let wanted = request.lines.unwrap_or(DEFAULT_READ_LINES).max(1);
    let start = usize::try_from(from - 1)
        .unwrap_or(usize::MAX)
        .min(all.len());
    let mut taken = Vec::new();
    let mut chars = 0;
    for line in all.iter().skip(start).take(wanted as usize) {
        chars += line.chars().count() + 1;
        if chars > MAX_READ_CHARS && !taken.is_empty() {
            break;
        }
        taken.push(*line);
    }
    let count = u32::try_from(taken.len()).unwrap_or(u32::MAX);
    Ok(MemoryReadResult {
        path,
        text: taken.join("\n"),
        from,
        lines: count,
        total_lines: total,
        more: start + taken.len() < all.len(),
    })
}

/// One file seen by a scan: its size and modification time, or why it was skipped.
type Scan = BTreeMap<String, Result<(u64, i64), String>>;

/// Walks the memory files without reading them.
fn scan(workspace: &Workspace, extra_paths: &[String]) -> Scan {
    let mut seen = Scan::new();
    for name in ROOT_FILES {
        note(workspace, name, &mut seen);
    }
    walk(workspace, "memory", 0, &mut seen);
    for extra in extra_paths {
        let Ok(rel) = RelPath::parse(extra) else {
            continue;
        };
        match workspace.root.stat(&rel) {
            Ok(metadata) if metadata.kind == Kind::Directory => {
                walk(workspace, extra, 0, &mut seen)
            }
            Ok(_) | Err(_) if extra.ends_with(".md") => note(workspace, extra, &mut seen),
            _ => {}
        }
    }
    seen
}

fn note(workspace: &Workspace, path: &str, seen: &mut Scan) {
    let Ok(rel) = RelPath::parse(path) else {
        return;
    };
    match workspace.root.stat(&rel) {
        Ok(metadata) if metadata.kind == Kind::File => {
            seen.insert(path.to_owned(), Ok((metadata.size, metadata.mtime_ms)));
        }
        Ok(metadata) if metadata.kind == Kind::Symlink => {
            seen.insert(path.to_owned(), Err(String::from("symlink")));
        }
        Ok(_) | Err(FsError::NotFound { .. }) => {}
        Err(FsError::SymlinkRedirect { .. }) => {
            seen.insert(path.to_owned(), Err(String::from("symlink")));
        }
        Err(_) => {
            seen.insert(path.to_owned(), Err(String::from("unreadable")));
        }
    }
}

fn walk(workspace: &Workspace, dir: &str, depth: usize, seen: &mut Scan) {
    if depth > MAX_DEPTH || seen.len() >= MAX_FILES {
        return;
    }
    let Ok(rel) = RelPath::parse(dir) else {
        return;
    };
    let mut after: Option<String> = None;
    loop {
        let listing = match workspace.root.list(&rel, 5000, after.as_deref()) {
            Ok(listing) => listing,
            Err(FsError::SymlinkRedirect { .. }) => {
                seen.insert(dir.to_owned(), Err(String::from("symlink")));
                return;
            }
            Err(_) => return,
        };
        for entry in &listing.entries {
            let path = format!("{dir}/{}", entry.name);
            match entry.kind {
                Kind::Directory => walk(workspace, &path, depth + 1, seen),
                Kind::File if path.ends_with(".md") => {
                    seen.insert(path, Ok((entry.size, entry.mtime_ms)));
                }
                Kind::Symlink if path.ends_with(".md") => {
                    seen.insert(path, Err(String::from("symlink")));
                }
                _ => {}
            }
        }
        match listing.next_page_token {
            Some(token) => after = Some(token),
            None => return,
        }
    }
}

fn list(workspace: &Workspace, extra_paths: &[String]) -> MemoryListResult {
    let mut files = Vec::new();
    let mut skipped = Vec::new();
    for (path, outcome) in scan(workspace, extra_paths) {
        match outcome {
            Err(reason) => skipped.push(SkippedFile { path, reason }),
            Ok((size, _)) if size > MAX_MEMORY_FILE_BYTES => skipped.push(SkippedFile {
                path,
                reason: String::from("too-large"),
            }),
            Ok((size, mtime_ms)) => match fetch(workspace, &path) {
                Ok(bytes) if std::str::from_utf8(&bytes).is_ok() => files.push(MemoryFile {
                    sha256: gatehouse_fsops::commands::sha256_hex(&bytes),
                    path,
                    size,
                    mtime_ms,
                }),
                Ok(_) => skipped.push(SkippedFile {
                    path,
                    reason: String::from("not-utf8"),
                }),
                Err(error) => skipped.push(SkippedFile {
                    path,
                    reason: match error.known_code() {
                        Some(ErrorCode::HardlinkDenied) => String::from("hardlink"),
                        Some(ErrorCode::SymlinkRedirect) => String::from("symlink"),
                        _ => String::from("unreadable"),
                    },
                }),
            },
        }
    }
    MemoryListResult { files, skipped }
}

/// Streams `"change"` after each quiet period following a change (and once at the start, so the
/// Gateway syncs), and `"unavailable"` when the workspace can no longer be read.
async fn watch(
    workspace: Arc<Workspace>,
    request: MemoryRequest,
    mut context: InvokeContext,
) -> Result<MemoryAnswer, WireError> {
    let debounce = Duration::from_millis(request.debounce_ms.unwrap_or(DEFAULT_WATCH_DEBOUNCE_MS));
    let extra = request.extra_paths.clone();
    let snapshot = |workspace: Arc<Workspace>, extra: Vec<String>| async move {
        tokio::task::spawn_blocking(move || {
            workspace
                .root
                .stat(&RelPath::root())
                .ok()
                .map(|_| scan(&workspace, &extra))
        })
        .await
        .ok()
        .flatten()
    };
    let line = |text: &str| format!("\"{text}\"\n");
    let Some(mut last) = snapshot(Arc::clone(&workspace), extra.clone()).await else {
        let _ = context.progress.send(&line(WATCH_UNAVAILABLE)).await;
        return Err(WireError::new(
            ErrorCode::Unavailable,
            "the workspace cannot be read",
        ));
    };
    if context.progress.send(&line(WATCH_CHANGE)).await.is_err() {
        return Ok(MemoryAnswer::WatchEnded);
    }
    let mut changed_at: Option<tokio::time::Instant> = None;
    loop {
        tokio::time::sleep(WATCH_POLL).await;
        let Some(now) = snapshot(Arc::clone(&workspace), extra.clone()).await else {
            let _ = context.progress.send(&line(WATCH_UNAVAILABLE)).await;
            return Err(WireError::new(
                ErrorCode::Unavailable,
                "the workspace cannot be read",
            ));
        };
        if now != last {
            last = now;
            changed_at = Some(tokio::time::Instant::now());
        }
        if let Some(at) = changed_at
            && at.elapsed() >= debounce
        {
            changed_at = None;
            if context.progress.send(&line(WATCH_CHANGE)).await.is_err() {
                return Ok(MemoryAnswer::WatchEnded);
            }
        }
    }
}
