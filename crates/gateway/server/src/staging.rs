//! Attachment staging: copies a turn's attachments from the media store to the Harness workspace
//! before the turn is dispatched.
//!
//! Each turn gets its own directory, `media/inbound/gatehouse-staged-<id>/`, holding a
//! `.gitignore` (`*`) and one `input-<sanitized name>` file per attachment. Every write goes
//! through [`WorkspaceAccess`], so the path policy applies and the bytes travel through the
//! enrolled node; nothing here opens a path of the Harness.
//!
//! Required attachments are checked against the media store before anything is written: a
//! missing one stops the turn with no write reaching the node. An optional attachment that
//! cannot be staged is skipped and reported. A failed required transfer is an error, and the
//! caller must not dispatch the turn.

use gatehouse_protocol::error::ErrorCode;
use std::collections::HashSet;
use std::sync::Arc;

use gatehouse_media::MediaError;
use gatehouse_media::MediaRecord;
use gatehouse_media::MediaStore;
use gatehouse_media::filename::MAX_FILENAME_BYTES;
use gatehouse_media::sanitize_filename;
use gatehouse_store::records::Attachment;

use crate::audit::loggable;
use crate::turns::AttachmentStager;
use crate::turns::runtime::TurnFailure;
use crate::workspace::WorkspaceAccess;
use crate::workspace::WorkspaceError;
use crate::workspace::WriteMode;

/// The workspace directory under which turns stage their attachments.
pub(crate) const STAGING_ROOT: &str = "media/inbound";

/// The prefix of a turn's staged directory name; the staged id follows.
pub(crate) const STAGED_DIR_PREFIX: &str = "gatehouse-staged-";

/// The prefix of every staged file name; the sanitized original name follows.
pub(crate) const STAGED_FILE_PREFIX: &str = "input-";

/// The content of the `.gitignore` written in each staged directory: ignore everything.
pub(crate) const GITIGNORE_CONTENT: &[u8] = b"*\n";

/// The longest accepted staged id.
pub(crate) const MAX_STAGED_ID_LEN: usize = 64;

/// An attachment copied to the Harness workspace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StagedAttachment {
    /// The media id.
    pub media_id: String,
    /// The path relative to the Agent workspace, as the prompt should name it.
    pub relative_path: String,
    /// The canonical path the node reported for the written file.
    pub remote_path: String,
    /// The bytes written.
    pub size: u64,
    /// The MIME type recorded at upload.
    pub mime_type: String,
}

/// An optional attachment that was not staged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SkippedAttachment {
    /// The media id as the caller sent it.
    pub media_id: String,
    /// The stable code of the reason: `ATTACHMENT_NOT_FOUND`, `ATTACHMENT_TRANSFER_FAILED` or
    /// `DEPENDENCY_UNAVAILABLE`.
    pub code: &'static str,
    /// What went wrong, without content.
    pub message: String,
}

/// What staging did for one turn.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct StagingReport {
    /// The staged directory relative to the workspace, when anything was written.
    pub directory: Option<String>,
    /// The staged attachments, in request order.
    pub staged: Vec<StagedAttachment>,
    /// The optional attachments that were skipped, in request order.
    pub skipped: Vec<SkippedAttachment>,
}

/// The [`AttachmentStager`] of the turn engine: stages each turn into a fresh staged directory
/// with [`stage_attachments`].
#[derive(Clone)]
pub(crate) struct WorkspaceStager {
    workspace: Arc<dyn WorkspaceAccess>,
    media: Arc<MediaStore>,
}

/// Why staging stopped the turn. Every variant means the turn must not be dispatched.
#[derive(Debug, thiserror::Error)]
pub(crate) enum StagingError {
    /// The staged id is empty, too long, or not made of letters, digits, `-` and `_`. A caller
    /// bug; nothing was written.
    #[error("the staged id must be 1 to 64 letters, digits, '-' or '_'")]
    InvalidStagedId,
    /// A required attachment is missing, has an invalid id, or cannot be read from the media
    /// store. Not retryable without a new upload.
    #[error("required attachment {media_id} is not in the media store")]
    AttachmentNotFound {
        /// The media id as the caller sent it.
        media_id: String,
        /// The media store's answer.
        #[source]
        source: MediaError,
    },
    /// A required attachment (or its directory's `.gitignore`) could not be written to the
    /// Harness workspace. The staged directory may hold earlier files of this turn.
    #[error("cannot stage a required attachment at {path}")]
    TransferFailed {
        /// The workspace-relative path of the failed write.
        path: String,
        /// The workspace's answer.
        #[source]
        source: WorkspaceError,
    },
    /// No node serves the workspace (or it did not answer). Retryable once a node is connected.
    #[error("cannot stage a required attachment at {path}: the workspace node is unavailable")]
    NodeUnavailable {
        /// The workspace-relative path of the failed write.
        path: String,
        /// The workspace's answer.
        #[source]
        source: WorkspaceError,
    },
    /// No random staged id could be drawn.
    #[error("cannot draw a staged id")]
    Entropy(#[source] std::io::Error),
}

impl StagingError {
    /// Returns the stable code of the turn failure.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            StagingError::InvalidStagedId => ErrorCode::InvalidStagedId.as_str(),
            StagingError::AttachmentNotFound { .. } => ErrorCode::AttachmentNotFound.as_str(),
            StagingError::TransferFailed { .. } => ErrorCode::AttachmentTransferFailed.as_str(),
            StagingError::NodeUnavailable { .. } => ErrorCode::DependencyUnavailable.as_str(),
            StagingError::Entropy(_) => ErrorCode::StagingFailure.as_str(),
        }
    }
}

impl WorkspaceStager {
    /// Returns a stager that copies from `media` to `workspace`.
    pub(crate) fn new(workspace: Arc<dyn WorkspaceAccess>, media: Arc<MediaStore>) -> Self {
        Self { workspace, media }
    }
}

#[async_trait::async_trait]
impl AttachmentStager for WorkspaceStager {
    async fn stage(
        &self,
        turn_id: &str,
        attachments: &[Attachment],
    ) -> Result<Vec<String>, TurnFailure> {
        let staged_id =
            new_staged_id().map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
        match stage_attachments(
            self.workspace.as_ref(),
            &self.media,
            attachments,
            &staged_id,
        )
        .await
        {
            Ok(report) => {
                tracing::info!(
                    turn_id,
                    n_staged = report.staged.len(),
                    n_skipped = report.skipped.len(),
                    "attachments staged"
                );
                Ok(report
                    .staged
                    .into_iter()
                    .map(|staged| staged.relative_path)
                    .collect())
            }
            Err(error) => {
                tracing::warn!(turn_id, code = error.code(), error = %loggable(&error), "attachments not staged");
                Err(TurnFailure::new(error.code(), error.to_string()))
            }
        }
    }
}

/// Returns a fresh random staged id for one turn (URL-safe base64, so filename-safe).
///
/// # Errors
/// [`StagingError::Entropy`] when the system has no randomness to give.
pub(crate) fn new_staged_id() -> Result<String, StagingError> {
    crate::secrets::random_token().map_err(StagingError::Entropy)
}

/// Returns the workspace-relative staged directory of `staged_id`.
pub(crate) fn staged_directory(staged_id: &str) -> String {
    format!("{STAGING_ROOT}/{STAGED_DIR_PREFIX}{staged_id}")
}

/// Copies `attachments` from `media` to the Harness workspace under
/// `media/inbound/gatehouse-staged-<staged_id>/`, after writing a `.gitignore` there.
///
/// Every required media id is looked up in the media store first; a failure there returns
/// before anything is written. File names come from the upload's sanitized name (`file` when
/// there is none) with `input-` in front; names repeated within the turn get `-2`, `-3`, … .
/// Files are created with [`WriteMode::CreateNew`], so a staged file is never replaced.
///
/// # Errors
/// - [`StagingError::InvalidStagedId`] before anything is read or written;
/// - [`StagingError::AttachmentNotFound`] for a required attachment the store cannot give;
/// - [`StagingError::TransferFailed`] or [`StagingError::NodeUnavailable`] for a required
///   attachment whose write failed.
///
/// Optional attachments never cause an error; they are listed in
/// [`StagingReport::skipped`].
pub(crate) async fn stage_attachments(
    workspace: &dyn WorkspaceAccess,
    media: &MediaStore,
    attachments: &[Attachment],
    staged_id: &str,
) -> Result<StagingReport, StagingError> {
    check_staged_id(staged_id)?;
    let mut report = StagingReport::default();

    // Look everything up before the first write, so a missing required attachment never
    // leaves anything on the Harness.
    let mut pending: Vec<(&Attachment, MediaRecord)> = Vec::with_capacity(attachments.len());
    for attachment in attachments {
        match media.record(&attachment.media_id).await {
            Ok(record) => pending.push((attachment, record)),
            Err(source) if attachment.required => {
                return Err(StagingError::AttachmentNotFound {
                    media_id: attachment.media_id.clone(),
                    source,
                });
            }
            Err(source) => report.skipped.push(skipped_lookup(attachment, &source)),
        }
    }
    if pending.is_empty() {
        return Ok(report);
    }

    let directory = staged_directory(staged_id);
    let gitignore = format!("{directory}/.gitignore");
    if let Err(source) = workspace
        .write(&gitignore, GITIGNORE_CONTENT, WriteMode::CreateNew)
        .await
    {
        if pending.iter().any(|(attachment, _)| attachment.required) {
            return Err(transfer_error(gitignore, source));
        }
        let (code, message) = transfer_reason(&source);
        for (attachment, _) in pending {
            report.skipped.push(SkippedAttachment {
                media_id: attachment.media_id.clone(),
                code,
                message: message.clone(),
            });
        }
        return Ok(report);
    }
    report.directory = Some(directory.clone());

    let mut used_names: HashSet<String> = HashSet::with_capacity(pending.len());
    for (attachment, record) in pending {
        let name = unique_name(
            &mut used_names,
            &sanitize_filename(record.filename.as_deref().unwrap_or_default()),
        );
        let relative_path = format!("{directory}/{STAGED_FILE_PREFIX}{name}");
        let bytes = match media.get(&record.id).await {
            Ok((_, bytes)) => bytes,
            Err(source) if attachment.required => {
                return Err(StagingError::AttachmentNotFound {
                    media_id: attachment.media_id.clone(),
                    source,
                });
            }
            Err(source) => {
                report.skipped.push(skipped_lookup(attachment, &source));
                continue;
            }
        };
        match workspace
            .write(&relative_path, &bytes, WriteMode::CreateNew)
            .await
        {
            Ok(written) => report.staged.push(StagedAttachment {
                media_id: record.id,
                relative_path,
                remote_path: written.path,
                size: written.size,
                mime_type: record.mime_type,
            }),
            Err(source) if attachment.required => {
                return Err(transfer_error(relative_path, source));
            }
            Err(source) => {
                let (code, message) = transfer_reason(&source);
                tracing::warn!(
                    media_id = %record.id,
                    code = %loggable(&code),
                    error = %loggable(&source),
                    "optional attachment not staged"
                );
                report.skipped.push(SkippedAttachment {
                    media_id: attachment.media_id.clone(),
                    code,
                    message,
                });
            }
        }
    }
    Ok(report)
}

fn check_staged_id(staged_id: &str) -> Result<(), StagingError> {
    let valid = (1..=MAX_STAGED_ID_LEN).contains(&staged_id.len())
        && staged_id
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_'));
    match valid {
        true => Ok(()),
        false => Err(StagingError::InvalidStagedId),
    }
}

fn skipped_lookup(attachment: &Attachment, source: &MediaError) -> SkippedAttachment {
    tracing::warn!(
        media_id = %attachment.media_id,
        code = %source.code(),
        error = %loggable(source),
        "optional attachment not found"
    );
    SkippedAttachment {
        media_id: attachment.media_id.clone(),
        code: ErrorCode::AttachmentNotFound.as_str(),
        message: source.to_string(),
    }
}

/// Classifies a failed write: an absent node is `DEPENDENCY_UNAVAILABLE`, the rest
/// `ATTACHMENT_TRANSFER_FAILED`.
fn transfer_reason(source: &WorkspaceError) -> (&'static str, String) {
    match source {
        WorkspaceError::Unavailable | WorkspaceError::Timeout => (
            ErrorCode::DependencyUnavailable.as_str(),
            source.to_string(),
        ),
        WorkspaceError::BadPath { .. }
        | WorkspaceError::PolicyDenied { .. }
        | WorkspaceError::UnknownOutcome
        | WorkspaceError::Remote(_)
        | WorkspaceError::Corrupt => (
            ErrorCode::AttachmentTransferFailed.as_str(),
            source.to_string(),
        ),
    }
}

fn transfer_error(path: String, source: WorkspaceError) -> StagingError {
    match source {
        WorkspaceError::Unavailable | WorkspaceError::Timeout => {
            StagingError::NodeUnavailable { path, source }
        }
        WorkspaceError::BadPath { .. }
        | WorkspaceError::PolicyDenied { .. }
        | WorkspaceError::UnknownOutcome
        | WorkspaceError::Remote(_)
        | WorkspaceError::Corrupt => StagingError::TransferFailed { path, source },
    }
}

/// Returns `name`, or `name` with `-2`, `-3`, … before its extension when it is taken, staying
/// within [`MAX_FILENAME_BYTES`]. `name` is already sanitized (ASCII).
fn unique_name(used_names: &mut HashSet<String>, name: &str) -> String {
    if used_names.insert(name.to_owned()) {
        return name.to_owned();
    }
    let (stem, extension) = match name.rsplit_once('.') {
        Some((stem, extension)) if !stem.is_empty() => (stem, format!(".{extension}")),
        Some(_) | None => (name, String::new()),
    };
    let mut n_copies: u64 = 2;
    loop {
        let suffix = format!("-{n_copies}");
        let budget = MAX_FILENAME_BYTES.saturating_sub(extension.len() + suffix.len());
        let stem = &stem[..stem.len().min(budget)];
        let candidate = format!("{stem}{suffix}{extension}");
        if used_names.insert(candidate.clone()) {
            return candidate;
        }
        n_copies += 1;
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use pretty_assertions::assert_eq;

    use crate::staging::check_staged_id;
    use crate::staging::unique_name;

    #[test]
    fn repeated_names_get_a_counter() {
        let mut used_names = HashSet::new();
        let names: Vec<String> = ["a.txt", "a.txt", "a.txt", "file", "file"]
            .iter()
            .map(|name| unique_name(&mut used_names, name))
            .collect();
        assert_eq!(names, ["a.txt", "a-2.txt", "a-3.txt", "file", "file-2"]);
    }

    #[test]
    fn repeated_long_names_stay_within_the_cap() {
        let long = format!("{}.txt", "x".repeat(116));
        let mut used_names = HashSet::new();
        assert_eq!(unique_name(&mut used_names, &long), long);
        let second = unique_name(&mut used_names, &long);
        assert_eq!(second, format!("{}-2.txt", "x".repeat(114)));
    }

    #[test]
    fn staged_ids() {
        assert!(check_staged_id("abc-DEF_123").is_ok());
        for bad in ["", "../x", "a/b", "a.b", "a b", &"a".repeat(65)] {
            assert!(check_staged_id(bad).is_err(), "{bad:?}");
        }
    }
}

#[cfg(test)]
#[path = "staging_workspace_tests.rs"]
mod workspace_tests;
