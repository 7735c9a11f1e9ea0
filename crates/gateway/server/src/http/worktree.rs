//! Session workspace sources and `worktree` sessions' worktrees:
//! - `PUT /v1/sessions/{key}` sets a session's source before its first message, and
//!   `GET /v1/sessions/{key}` shows it;
//! - `GET`/`PUT /v1/sessions/{key}/worktree/{path}` read a file or link of the worktree's head
//!   and write a file (a Gateway-side edit: the "local" side of the next merge);
//! - `GET /v1/sessions/{key}/worktree.tar` is the head as a tar archive, and
//!   `GET /v1/sessions/{key}/worktree/diff` a unified diff of the head against the worktree's
//!   start.
//!
//! A file is answered as its bytes (`application/octet-stream`, `X-Gatehouse-Executable`); a
//! link as its target text with `X-Gatehouse-Link-Target`, never followed. A root file named
//! `diff` is not reachable as a path (the route answers the diff): it is in the tar archive.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use bytes::Bytes;
use gatehouse_api::sessions::Session;
use gatehouse_api::sessions::SessionCreated;
use gatehouse_api::sessions::SessionParams;
use gatehouse_api::sessions::WorkspaceSource;
use gatehouse_api::sessions::WorktreeLog;
use gatehouse_api::sessions::WorktreeTarQuery;
use gatehouse_api::sessions::WorktreeVersionSummary;
use gatehouse_api::sessions::WorktreeWriteQuery;
use gatehouse_api::sessions::WorktreeWritten;
use gatehouse_policy::repository::RepositoryUrl;
use gatehouse_policy::repository::Scheme;
use gatehouse_protocol::checkpoint::KIND_FILE;
use gatehouse_protocol::checkpoint::KIND_SYMLINK;
use gatehouse_protocol::checkpoint::validate_entry;
use gatehouse_protocol::checkpoint::validate_manifest;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::records::Blob;
use gatehouse_store::records::NewWorktreeVersion;
use gatehouse_store::records::StoredEntry;
use gatehouse_store::records::StoredManifest;
use gatehouse_store::records::WorkspaceSet;
use gatehouse_store::records::WorktreeOrigin;
use gatehouse_store::records::WorktreeVersion;
use sha2::Digest;

use crate::GatewayState;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::http::error::store_error;
use crate::http::sessions::check_session_key;
use crate::retention::NewBlob;

/// The largest file a Gateway-side edit writes (the bound of a whole checkpoint).
pub(crate) const MAX_WORKTREE_FILE_BYTES: usize =
    gatehouse_protocol::worker::MAX_CHECKPOINT_BYTES as usize;

/// How often an edit that lost a race with another write of the worktree tries again.
const EDIT_ATTEMPTS: usize = 8;

/// `PUT /v1/sessions/{key}` with `{"workspace": SOURCE}`: sets the session's workspace source
/// before its first message (`201` when it creates the session, `200` otherwise); a session
/// with messages keeps its source (`409 SESSION_SOURCE_LOCKED` for another one). Audited as
/// `session.source`.
pub(crate) async fn put_session(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(session_key): Path<String>,
    Json(params): Json<SessionParams>,
) -> Result<Response, ApiError> {
    check_session_key(&session_key)?;
    let url = check_source(&params.workspace)?;
    // A `file://` repository is a path on the node host: only an admin names one, so a chat
    // key limited to its sessions cannot read what the node host keeps elsewhere. The scheme
    // is the canonical reading, so `FILE://` is `file://` too.
    if url.is_some_and(|url| url.scheme() == Scheme::File)
        && !principal.has(gatehouse_api::keys::Scope::Admin)
    {
        return Err(ApiError::new(
            ErrorCode::ScopeDenied,
            "a file:// repository is a path on the node host: only the operator or an admin key may name one",
        ));
    }
    let native = gatehouse_protocol::runtime::RuntimeKind::Native.as_str();
    if params.workspace != WorkspaceSource::Empty && state.turns.runtime_name() != native {
        return Err(ApiError::invalid_request(format!(
            "the {} source needs the native runtime; this Gateway runs {}",
            source_name(&params.workspace),
            state.turns.runtime_name()
        )));
    }
    crate::http::sessions::claim_session(&state, &principal, &session_key).await?;
    let outcome = state
        .store
        .set_session_workspace(
            &session_key,
            state.turns.runtime_name(),
            &params.workspace,
            gatehouse_protocol::time::now_ms(),
        )
        .await
        .map_err(|error| store_error(&error))?;
    let status = match outcome {
        WorkspaceSet::Created => StatusCode::CREATED,
        WorkspaceSet::Replaced | WorkspaceSet::Unchanged => StatusCode::OK,
        WorkspaceSet::Locked(current) => {
            return Err(ApiError::new(
                ErrorCode::SessionSourceLocked,
                format!(
                    "the session has messages, so its workspace source ({}) cannot change; use a new session key",
                    source_name(&current.source)
                ),
            ));
        }
    };
    state
        .audit
        .record_caller(
            principal.actor(),
            "session.source",
            "succeeded",
            None,
            serde_json::json!({
                "sessionKey": session_key,
                "source": source_name(&params.workspace),
            }),
        )
        .await;
    let workspace = state
        .store
        .session_workspace(&session_key)
        .await
        .map_err(|error| store_error(&error))?
        .ok_or_else(|| ApiError::not_found(format!("no session {session_key}")))?;
    Ok((
        status,
        Json(SessionCreated {
            session_key,
            workspace,
        }),
    )
        .into_response())
}

/// `GET /v1/sessions/{key}`: the session with its workspace source.
pub(crate) async fn get_session(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
) -> Result<Json<Session>, ApiError> {
    check_session_key(&session_key)?;
    let missing = || ApiError::not_found(format!("no session {session_key}"));
    let workspace = state
        .store
        .session_workspace(&session_key)
        .await
        .map_err(|error| store_error(&error))?
        .ok_or_else(missing)?;
    let session = state
        .store
        .sessions()
        .await
        .map_err(|error| store_error(&error))?
        .into_iter()
        .find(|session| session.session_key == session_key)
        .ok_or_else(missing)?;
    Ok(Json(Session {
        summary: crate::http::sessions::summary_of(session),
        workspace,
    }))
}

/// Returns the name of a source kind, as audit rows and messages say it.
fn source_name(source: &WorkspaceSource) -> &'static str {
    match source {
        WorkspaceSource::Empty => "empty",
        WorkspaceSource::Repository { .. } => "repository",
        WorkspaceSource::Worktree { .. } => "worktree",
    }
}

/// Refuses a repository the Harness would refuse, with the Harness's own reading of the URL
/// ([`RepositoryUrl::parse`]: `file://`, `https://` or `ssh://` in any case, no whitespace, no
/// credentials, which live on the Harness side only, in its git configuration), and a ref git
/// would not take; returns the URL's canonical reading, if the source names a repository.
/// Which addresses the Harness may reach is the Harness's to judge, after it resolves the host.
fn check_source(source: &WorkspaceSource) -> Result<Option<RepositoryUrl>, ApiError> {
    let Some(repository) = source.repository() else {
        return Ok(None);
    };
    let url = RepositoryUrl::parse(&repository.url).map_err(|refusal| {
        ApiError::invalid_request(format!("the repository URL is refused: {refusal}"))
    })?;
    if let Some(reference) = &repository.reference {
        let valid = !reference.is_empty()
            && reference.len() <= 255
            && !reference.starts_with('-')
            && !reference.contains("..")
            && !reference
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || ":~^?*[\\".contains(c));
        if !valid {
            return Err(ApiError::invalid_request(
                "the ref is not a branch, tag or commit name git accepts",
            ));
        }
    }
    Ok(Some(url))
}

/// Returns the head of the session's worktree.
async fn head(state: &GatewayState, session_key: &str) -> Result<WorktreeVersion, ApiError> {
    check_session_key(session_key)?;
    state
        .store
        .worktree_version(session_key, None)
        .await
        .map_err(|error| store_error(&error))?
        .ok_or_else(|| {
            ApiError::not_found(format!(
                "session {session_key} has no worktree: it is not a worktree session, or its worktree starts from its repository at its first turn"
            ))
        })
}

/// `GET /v1/sessions/{key}/worktree/{path}`: a file's bytes or a link's target.
pub(crate) async fn read_worktree_file(
    State(state): State<Arc<GatewayState>>,
    Path((session_key, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let head = head(&state, &session_key).await?;
    let Some(entry) = head
        .manifest
        .entries
        .iter()
        .find(|entry| entry.path == path)
    else {
        return Err(ApiError::not_found(format!(
            "the worktree has no file or link {path:?}"
        )));
    };
    let version = HeaderValue::from(head.version);
    if entry.kind == KIND_SYMLINK {
        let target = entry.target.clone().unwrap_or_default();
        let mut response = target.clone().into_response();
        if let Ok(value) = HeaderValue::from_str(&target) {
            response
                .headers_mut()
                .insert("x-gatehouse-link-target", value);
        }
        response
            .headers_mut()
            .insert("x-gatehouse-worktree-version", version);
        return Ok(response);
    }
    let bytes = blob(&state, entry).await?;
    let mut response = bytes.into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        "x-gatehouse-executable",
        HeaderValue::from_static(if entry.executable { "true" } else { "false" }),
    );
    headers.insert("x-gatehouse-worktree-version", version);
    Ok(response)
}

/// Reads the content of a worktree file from the media store.
async fn blob(state: &GatewayState, entry: &StoredEntry) -> Result<Bytes, ApiError> {
    let Some(media_id) = &entry.content.media_id else {
        return Err(ApiError::new(
            ErrorCode::StoreFailure,
            format!("the worktree file {:?} has no stored content", entry.path),
        ));
    };
    state
        .media
        .get(media_id)
        .await
        .map(|(_, bytes)| bytes)
        .map_err(|error| ApiError::new(error.code(), error.to_string()))
}

/// `PUT /v1/sessions/{key}/worktree/{path}` (`?executable=true`): writes a file of the
/// worktree, a new version; the next merge keeps it where the agent changed the path too.
pub(crate) async fn write_worktree_file(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path((session_key, path)): Path<(String, String)>,
    Query(query): Query<WorktreeWriteQuery>,
    body: Bytes,
) -> Result<Json<WorktreeWritten>, ApiError> {
    if body.len() > MAX_WORKTREE_FILE_BYTES {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("a worktree file is at most {MAX_WORKTREE_FILE_BYTES} bytes"),
        ));
    }
    let sha256 = hex::encode(sha2::Sha256::digest(&body));
    let size = body.len() as u64;
    let mut entry = StoredEntry {
        path: path.clone(),
        kind: String::from(KIND_FILE),
        executable: query.executable,
        sha256: Some(sha256.clone()),
        size,
        target: None,
        content: Blob::default(),
    };
    validate_entry(&entry).map_err(|violation| {
        ApiError::new(
            ErrorCode::InvalidPath,
            format!("the path is refused: {}", violation.reason()),
        )
    })?;
    if gatehouse_protocol::checkpoint::is_git_path(&path) {
        return Err(ApiError::new(
            ErrorCode::InvalidPath,
            "a worktree holds no .git directory",
        ));
    }
    let media_id = gatehouse_media::media_id(&body);
    entry.content.media_id = Some(media_id.clone());
    for _ in 0..EDIT_ATTEMPTS {
        let head = head(&state, &session_key).await?;
        let manifest = with_entry(&head.manifest, entry.clone())?;
        let version = NewWorktreeVersion {
            session_key: session_key.clone(),
            expected_head: head.version,
            origin: WorktreeOrigin::Edit,
            actor: principal.actor().to_owned(),
            manifest,
        };
        let store = Arc::clone(&state.store);
        let written = state
            .retention
            .write_blobs_then(
                &session_key,
                vec![NewBlob {
                    media_id: media_id.clone(),
                    bytes: body.clone(),
                }],
                async move {
                    store
                        .save_worktree_version(&version, gatehouse_protocol::time::now_ms())
                        .await
                },
            )
            .await
            .map_err(|failure| {
                // A full media store or share is 507; anything else a dependency's failure.
                let status = ErrorCode::parse(&failure.code)
                    .map(crate::http::error::status_of)
                    .filter(|status| *status == StatusCode::INSUFFICIENT_STORAGE)
                    .unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
                ApiError::with_text_code(status, &failure.code, failure.message)
            })?;
        if written {
            crate::worktree::prune(state.store.as_ref(), &session_key).await;
            state
                .audit
                .record_caller(
                    principal.actor(),
                    "worktree.write",
                    "succeeded",
                    None,
                    serde_json::json!({
                        "sessionKey": session_key,
                        "path": path,
                        "size": size,
                        "version": head.version + 1,
                    }),
                )
                .await;
            return Ok(Json(WorktreeWritten {
                path,
                version: head.version + 1,
                sha256,
                size,
                executable: query.executable,
            }));
        }
    }
    Err(ApiError::new(
        ErrorCode::StoreUnavailable,
        "the worktree kept changing while the file was written; retry",
    ))
}

/// Returns `manifest` with `entry` put in its path's place, refused when the result breaks the
/// manifest rules (a file or link in the way, a bound passed).
fn with_entry(manifest: &StoredManifest, entry: StoredEntry) -> Result<StoredManifest, ApiError> {
    let mut entries: Vec<StoredEntry> = manifest
        .entries
        .iter()
        .filter(|existing| existing.path != entry.path)
        .cloned()
        .collect();
    entries.push(entry);
    entries.sort_by(|left, right| left.path.cmp(&right.path));
    validate_manifest(&entries).map_err(|error| {
        ApiError::new(
            ErrorCode::InvalidPath,
            format!(
                "the worktree cannot hold the file: {} ({})",
                error,
                error.violation.reason()
            ),
        )
    })?;
    Ok(StoredManifest { entries })
}

/// `GET /v1/sessions/{key}/worktree.json`: every version of the worktree, oldest first, each
/// `turn` version with its staged result's name and conflicts.
pub(crate) async fn worktree_log(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
) -> Result<Json<WorktreeLog>, ApiError> {
    let head = head(&state, &session_key).await?;
    let mut versions = Vec::new();
    // The first version, then the newest ones: the rest are forgotten.
    let newest = (head.version - crate::worktree::MAX_WORKTREE_VERSIONS + 1).max(2);
    for number in std::iter::once(1).chain(newest..=head.version) {
        let Some(version) = state
            .store
            .worktree_version(&session_key, Some(number))
            .await
            .map_err(|error| store_error(&error))?
        else {
            continue;
        };
        let result = match &version.turn_id {
            Some(turn_id) => state
                .store
                .worktree_result(turn_id)
                .await
                .map_err(|error| store_error(&error))?,
            None => None,
        };
        versions.push(WorktreeVersionSummary {
            version: version.version,
            origin: version.origin.as_str().to_owned(),
            actor: version.actor,
            created_at: version.created_at_ms,
            turn_id: version.turn_id,
            staged_ref: result.as_ref().map(|result| result.staged_ref.clone()),
            conflicts: result.map(|result| result.conflicts).unwrap_or_default(),
        });
    }
    Ok(Json(WorktreeLog {
        head: head.version,
        versions,
    }))
}

/// `GET /v1/sessions/{key}/worktree.tar` (`?version=N`, or `?turn=ID` for a turn's staged
/// result): a tree as a tar archive (files with their modes, links as links), in path order.
pub(crate) async fn worktree_tar(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
    Query(query): Query<WorktreeTarQuery>,
) -> Result<Response, ApiError> {
    let mut head = head(&state, &session_key).await?;
    if let Some(number) = query.version {
        head = state
            .store
            .worktree_version(&session_key, Some(number))
            .await
            .map_err(|error| store_error(&error))?
            .ok_or_else(|| ApiError::not_found(format!("the worktree has no version {number}")))?;
    }
    if let Some(turn_id) = &query.turn {
        let result = state
            .store
            .worktree_result(turn_id)
            .await
            .map_err(|error| store_error(&error))?
            .filter(|result| result.session_key == session_key)
            .ok_or_else(|| {
                ApiError::not_found(format!("the session has no result of turn {turn_id}"))
            })?;
        head.manifest = result.manifest;
    }
    let mut builder = tar::Builder::new(Vec::new());
    let mtime = u64::try_from(head.created_at_ms / 1000).unwrap_or(0);
    let tar_failure = |error: std::io::Error| {
        tracing::error!(error = %error, "cannot build a worktree archive");
        ApiError::internal(ErrorCode::Internal)
    };
    for entry in &head.manifest.entries {
        let mut header = tar::Header::new_gnu();
        header.set_mtime(mtime);
        if entry.kind == KIND_SYMLINK {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_mode(0o777);
            header.set_size(0);
            builder
                .append_link(
                    &mut header,
                    &entry.path,
                    entry.target.as_deref().unwrap_or_default(),
                )
                .map_err(tar_failure)?;
            continue;
        }
        let bytes = blob(&state, entry).await?;
        header.set_entry_type(tar::EntryType::Regular);
        header.set_mode(if entry.executable { 0o755 } else { 0o644 });
        header.set_size(bytes.len() as u64);
        builder
            .append_data(&mut header, &entry.path, bytes.as_ref())
            .map_err(tar_failure)?;
    }
    let archive = builder.into_inner().map_err(tar_failure)?;
    let mut response = archive.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/x-tar"),
    );
    response.headers_mut().insert(
        "x-gatehouse-worktree-version",
        HeaderValue::from(head.version),
    );
    Ok(response)
}

/// `GET /v1/sessions/{key}/worktree/diff`: a unified diff (git's form) of the head against the
/// worktree's first version; links diff as their target text, and files that are not UTF-8 as
/// `Binary files … differ`.
pub(crate) async fn worktree_diff(
    State(state): State<Arc<GatewayState>>,
    Path(session_key): Path<String>,
) -> Result<Response, ApiError> {
    let head = head(&state, &session_key).await?;
    let start = state
        .store
        .worktree_version(&session_key, Some(1))
        .await
        .map_err(|error| store_error(&error))?
        .map(|version| version.manifest)
        .unwrap_or_default();
    let mut text = String::new();
    let old: std::collections::BTreeMap<&str, &StoredEntry> = start
        .entries
        .iter()
        .map(|entry| (entry.path.as_str(), entry))
        .collect();
    let new: std::collections::BTreeMap<&str, &StoredEntry> = head
        .manifest
        .entries
        .iter()
        .map(|entry| (entry.path.as_str(), entry))
        .collect();
    let paths: std::collections::BTreeSet<&str> = old.keys().chain(new.keys()).copied().collect();
    for path in paths {
        let (before, after) = (old.get(path).copied(), new.get(path).copied());
        if let (Some(before), Some(after)) = (before, after)
            && before.kind == after.kind
            && before.executable == after.executable
            && before.sha256 == after.sha256
            && before.target == after.target
        {
            continue;
        }
        let before_text = match before {
            Some(entry) => Some(content(&state, entry).await?),
            None => None,
        };
        let after_text = match after {
            Some(entry) => Some(content(&state, entry).await?),
            None => None,
        };
        let (path, before, after) = (path.to_owned(), before.cloned(), after.cloned());
        // Line diffs are CPU work: off the async threads, each bounded in size and time.
        let piece = tokio::task::spawn_blocking(move || {
            file_diff(
                &path,
                before.as_ref(),
                after.as_ref(),
                before_text,
                after_text,
            )
        })
        .await
        .map_err(|error| {
            tracing::error!(error = %error, "a worktree diff failed");
            ApiError::internal(ErrorCode::Internal)
        })?;
        text.push_str(&piece);
    }
    let mut response = text.into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/x-diff; charset=utf-8"),
    );
    Ok(response)
}

/// Returns what a diff compares of an entry: a link's target, a file's content.
async fn content(state: &GatewayState, entry: &StoredEntry) -> Result<Bytes, ApiError> {
    match entry.kind.as_str() {
        KIND_SYMLINK => Ok(Bytes::from(entry.target.clone().unwrap_or_default())),
        _ => blob(state, entry).await,
    }
}

/// Returns git's mode of an entry.
fn mode(entry: &StoredEntry) -> &'static str {
    match (entry.kind.as_str(), entry.executable) {
        (KIND_SYMLINK, _) => "120000",
        (_, true) => "100755",
        (_, false) => "100644",
    }
}

/// The largest side of a text diff; a larger file is reported as changed, without lines.
const MAX_DIFF_SIDE_BYTES: usize = 1024 * 1024;

/// How long computing one file's line diff may take before it settles for a coarser one.
const DIFF_DEADLINE: std::time::Duration = std::time::Duration::from_secs(1);

/// Returns `prefix` + `path` as a diff names it: quoted the way git quotes (see
/// [`gatehouse_protocol::checkpoint::c_quoted`]) when the name holds a byte that is not
/// printable ASCII, a quote or a backslash, so a name can never pass for another line.
fn diff_name(prefix: &str, path: &str) -> String {
    let plain = path
        .bytes()
        .all(|byte| (0x20..=0x7e).contains(&byte) && byte != b'"' && byte != b'\\');
    match plain {
        true => format!("{prefix}{path}"),
        false => gatehouse_protocol::checkpoint::c_quoted(&format!("{prefix}{path}")),
    }
}

/// Returns the diff of one path.
fn file_diff(
    path: &str,
    before: Option<&StoredEntry>,
    after: Option<&StoredEntry>,
    before_text: Option<Bytes>,
    after_text: Option<Bytes>,
) -> String {
    let (a_name, b_name) = (diff_name("a/", path), diff_name("b/", path));
    let mut out = format!("diff --git {a_name} {b_name}\n");
    match (before, after) {
        (None, Some(after)) => out.push_str(&format!("new file mode {}\n", mode(after))),
        (Some(before), None) => out.push_str(&format!("deleted file mode {}\n", mode(before))),
        (Some(before), Some(after)) if mode(before) != mode(after) => {
            out.push_str(&format!(
                "old mode {}\nnew mode {}\n",
                mode(before),
                mode(after)
            ));
        }
        _ => {}
    }
    let old_name = before.map_or_else(|| String::from("/dev/null"), |_| a_name.clone());
    let new_name = after.map_or_else(|| String::from("/dev/null"), |_| b_name.clone());
    let empty = Bytes::new();
    let (old_bytes, new_bytes) = (
        before_text.unwrap_or_else(|| empty.clone()),
        after_text.unwrap_or(empty),
    );
    if old_bytes == new_bytes {
        return out;
    }
    if old_bytes.len().max(new_bytes.len()) > MAX_DIFF_SIDE_BYTES {
        out.push_str(&format!(
            "Files {old_name} and {new_name} differ ({} and {} bytes, too large to show)\n",
            old_bytes.len(),
            new_bytes.len()
        ));
        return out;
    }
    match (
        std::str::from_utf8(&old_bytes),
        std::str::from_utf8(&new_bytes),
    ) {
        (Ok(old_text), Ok(new_text)) => {
            let diff = similar::TextDiff::configure()
                .deadline(std::time::Instant::now() + DIFF_DEADLINE)
                .diff_lines(old_text, new_text);
            out.push_str(
                &diff
                    .unified_diff()
                    .context_radius(3)
                    .header(&old_name, &new_name)
                    .to_string(),
            );
            if !out.ends_with('\n') {
                out.push('\n');
            }
        }
        _ => out.push_str(&format!("Binary files {old_name} and {new_name} differ\n")),
    }
    out
}

#[cfg(test)]
mod tests {
    use gatehouse_store::records::Blob;
    use gatehouse_store::records::StoredEntry;

    fn entry(path: &str) -> StoredEntry {
        StoredEntry {
            path: path.to_owned(),
            kind: String::from("file"),
            executable: false,
            sha256: Some(String::from("0")),
            size: 1,
            target: None,
            content: Blob::default(),
        }
    }

    /// A name holding a newline is quoted, so it cannot forge the headers of another file.
    #[test]
    fn a_path_with_a_newline_cannot_forge_a_diff_header() {
        let path = "x\nnew file mode 100755\n--- /dev/null\n+++ b/Makefile";
        let diff = super::file_diff(
            path,
            None,
            Some(&entry(path)),
            None,
            Some(bytes::Bytes::from_static(b"evil\n")),
        );
        assert_eq!(diff.matches("diff --git").count(), 1, "{diff}");
        assert_eq!(
            diff.lines().filter(|line| line.starts_with("+++ ")).count(),
            1,
            "{diff}"
        );
        assert!(
            diff.starts_with("diff --git \"a/x\\nnew file mode 100755"),
            "{diff}"
        );
    }

    /// A file past the text-diff bound is reported as changed, without its lines.
    #[test]
    fn a_large_file_is_reported_without_its_lines() {
        let big = bytes::Bytes::from(vec![b'a'; super::MAX_DIFF_SIDE_BYTES + 1]);
        let diff = super::file_diff(
            "big",
            Some(&entry("big")),
            Some(&entry("big")),
            Some(big),
            Some(bytes::Bytes::from_static(b"b")),
        );
        assert!(diff.contains("too large to show"), "{diff}");
    }
}
