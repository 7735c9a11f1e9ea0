//! The workspace file commands on the wire: `file.fetch`, `file.stat`, `file.write`,
//! `file.create` and `dir.list`, from protocol parameters to protocol results.
//!
//! This layer adds what the wire needs on top of [`Root`]: mapping absolute wire paths under the
//! root, the default and hard size limits, strict base64, SHA-256, the `expectedSha256` check
//! (before the disk is touched) and `dir.list` paging limits. It does not apply the path policy;
//! the node host does that before calling in.

use base64::Engine;
use gatehouse_protocol::commands::DEFAULT_DIR_LIST_LIMIT;
use gatehouse_protocol::commands::DEFAULT_FETCH_MAX_BYTES;
use gatehouse_protocol::commands::DirEntry;
use gatehouse_protocol::commands::DirListParams;
use gatehouse_protocol::commands::DirListResult;
use gatehouse_protocol::commands::EntryKind;
use gatehouse_protocol::commands::FileCreateParams;
use gatehouse_protocol::commands::FileFetchParams;
use gatehouse_protocol::commands::FileFetchResult;
use gatehouse_protocol::commands::FileStatParams;
use gatehouse_protocol::commands::FileStatResult;
use gatehouse_protocol::commands::FileWriteParams;
use gatehouse_protocol::commands::FileWriteResult;
use gatehouse_protocol::commands::HARD_MAX_BYTES;
use gatehouse_protocol::commands::MAX_DIR_LIST_LIMIT;
use sha2::Digest;

use crate::error::FsError;
use crate::error::Result;
use crate::path::map_wire_path;
use crate::root::ContentMode;
use crate::root::FetchLimits;
use crate::root::Kind;
use crate::root::Overwrite;
use crate::root::Parents;
use crate::root::Root;
use crate::root::WriteOptions;

/// Runs `file.fetch`: `maxBytes` defaults to 8 MiB and is clamped to the 16 MiB hard limit.
///
/// # Errors
/// Any [`FsError`] of path mapping and [`Root::fetch`].
pub fn file_fetch(root: &Root, params: &FileFetchParams) -> Result<FileFetchResult> {
    let rel = map_wire_path(root.logical_path(), &params.path)?;
    let max_bytes = params
        .max_bytes
        .unwrap_or(DEFAULT_FETCH_MAX_BYTES)
        .min(HARD_MAX_BYTES);
    let content = match params.preflight_only {
        Some(true) => ContentMode::PreflightOnly,
        Some(false) | None => ContentMode::Transfer,
    };
    let fetched = root.fetch(&rel, FetchLimits { max_bytes, content })?;
    let mime_type = crate::mime::guess(&fetched.path).to_owned();
    let (base64, sha256) = match &fetched.content {
        Some(bytes) => (
            Some(base64::engine::general_purpose::STANDARD.encode(bytes)),
            Some(sha256_hex(bytes)),
        ),
        None => (None, None),
    };
    Ok(FileFetchResult {
        ok: true,
        path: fetched.path,
        size: fetched.size,
        mime_type,
        base64,
        sha256,
    })
}

/// Runs `file.stat`.
///
/// # Errors
/// Any [`FsError`] of path mapping and [`Root::stat`].
pub fn file_stat(root: &Root, params: &FileStatParams) -> Result<FileStatResult> {
    let rel = map_wire_path(root.logical_path(), &params.path)?;
    let metadata = root.stat(&rel)?;
    Ok(FileStatResult {
        ok: true,
        path: metadata.path,
        kind: entry_kind(metadata.kind),
        size: metadata.size,
        mode: metadata.mode,
        mtime_ms: metadata.mtime_ms,
        hard_linked: metadata.links > 1 && metadata.kind == Kind::File,
    })
}

/// Runs `file.write`.
///
/// The content is decoded strictly (it must re-encode to exactly the text given), limited to
/// 16 MiB, and checked against `expectedSha256` before anything on disk is touched.
///
/// # Errors
/// [`FsError::InvalidBase64`], [`FsError::FileTooLarge`], [`FsError::IntegrityFailure`], and any
/// [`FsError`] of path mapping and [`Root::write`].
pub fn file_write(root: &Root, params: &FileWriteParams) -> Result<FileWriteResult> {
    let overwrite = match params.overwrite {
        true => Overwrite::Allow,
        false => Overwrite::Deny,
    };
    write_checked(
        root,
        WriteRequest {
            path: &params.path,
            content_base64: &params.content_base64,
            expected_sha256: params.expected_sha256.as_deref(),
            overwrite,
            create_parents: params.create_parents,
            preflight_only: params.preflight_only.unwrap_or(false),
        },
    )
}

/// Runs `file.create`: a write that never replaces an existing file.
///
/// # Errors
/// As [`file_write`]; an existing path gives [`FsError::ExistsNoOverwrite`].
pub fn file_create(root: &Root, params: &FileCreateParams) -> Result<FileWriteResult> {
    write_checked(
        root,
        WriteRequest {
            path: &params.path,
            content_base64: &params.content_base64,
            expected_sha256: params.expected_sha256.as_deref(),
            overwrite: Overwrite::Deny,
            create_parents: params.create_parents,
            preflight_only: params.preflight_only.unwrap_or(false),
        },
    )
}

/// Runs `dir.list`: `limit` defaults to 200 and is clamped to 1..=5000.
///
/// # Errors
/// Any [`FsError`] of path mapping and [`Root::list`].
pub fn dir_list(root: &Root, params: &DirListParams) -> Result<DirListResult> {
    let rel = map_wire_path(root.logical_path(), &params.path)?;
    let limit = params
        .limit
        .unwrap_or(DEFAULT_DIR_LIST_LIMIT)
        .clamp(1, MAX_DIR_LIST_LIMIT);
    let listing = root.list(&rel, limit as usize, params.page_token.as_deref())?;
    Ok(DirListResult {
        ok: true,
        path: listing.path,
        entries: listing
            .entries
            .into_iter()
            .map(|entry| DirEntry {
                name: entry.name,
                kind: entry_kind(entry.kind),
                size: entry.size,
                mtime_ms: entry.mtime_ms,
            })
            .collect(),
        next_page_token: listing.next_page_token,
    })
}

/// Returns the lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(bytes))
}

/// Decodes standard base64 strictly: the text must be exactly what encoding the bytes gives.
///
/// # Errors
/// [`FsError::InvalidBase64`].
pub fn decode_base64_strict(text: &str) -> Result<Vec<u8>> {
    let engine = base64::engine::general_purpose::STANDARD;
    let bytes = engine.decode(text).map_err(|_| FsError::InvalidBase64)?;
    if engine.encode(&bytes) != text {
        return Err(FsError::InvalidBase64);
    }
    Ok(bytes)
}

struct WriteRequest<'a> {
    path: &'a str,
    content_base64: &'a str,
    expected_sha256: Option<&'a str>,
    overwrite: Overwrite,
    create_parents: bool,
    preflight_only: bool,
}

fn write_checked(root: &Root, request: WriteRequest<'_>) -> Result<FileWriteResult> {
    let rel = map_wire_path(root.logical_path(), request.path)?;
    // The decoded size is known from the text length; refuse before decoding a huge body.
    let decoded_upper_bound = (request.content_base64.len() as u64 / 4) * 3;
    if decoded_upper_bound > HARD_MAX_BYTES + 2 {
        return Err(FsError::FileTooLarge {
            path: root.canonical(&rel),
            size: decoded_upper_bound,
            limit: HARD_MAX_BYTES,
        });
    }
    let content = decode_base64_strict(request.content_base64)?;
    if content.len() as u64 > HARD_MAX_BYTES {
        return Err(FsError::FileTooLarge {
            path: root.canonical(&rel),
            size: content.len() as u64,
            limit: HARD_MAX_BYTES,
        });
    }
    let sha256 = sha256_hex(&content);
    if let Some(expected) = request.expected_sha256
        && !expected.eq_ignore_ascii_case(&sha256)
    {
        return Err(FsError::IntegrityFailure {
            expected: expected.to_owned(),
            actual: sha256,
        });
    }
    let options = WriteOptions {
        overwrite: request.overwrite,
        parents: match request.create_parents {
            true => Parents::Create,
            false => Parents::MustExist,
        },
        content: match request.preflight_only {
            true => ContentMode::PreflightOnly,
            false => ContentMode::Transfer,
        },
    };
    let written = root.write(&rel, &content, options)?;
    Ok(FileWriteResult {
        ok: true,
        path: written.path,
        size: written.size,
        sha256,
        overwritten: written.overwritten,
    })
}

fn entry_kind(kind: Kind) -> EntryKind {
    match kind {
        Kind::File => EntryKind::File,
        Kind::Directory => EntryKind::Directory,
        Kind::Symlink => EntryKind::Symlink,
        Kind::Other => EntryKind::Other,
    }
}
