//! Copying every blob of one media store to another ([`copy_media`]).
//!
//! The copy goes blob by blob through [`gatehouse_media::MediaStore::copy_to`], which checks
//! each blob against its id on both sides and leaves one the target already holds intact, so a
//! rerun after an interruption only copies what is missing.

use gatehouse_media::MediaStore;
use gatehouse_media::transfer::CopyOutcome;

use crate::error::Result;
use crate::migrate::Progress;

/// The outcome of a media copy.
#[derive(Debug, Clone, Default, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MediaReport {
    /// Blobs in the source.
    pub blobs: u64,
    /// Blobs this run copied.
    pub copied: u64,
    /// Blobs the target already held intact.
    pub already_present: u64,
    /// Blobs of the source without a record (a deletion stopped halfway), not copied.
    pub orphans: u64,
    /// Bytes this run copied.
    pub bytes_copied: u64,
    /// Whether the target holds every blob of the source (orphans aside) after the copy.
    pub verified: bool,
}

/// Copies every blob and record of `from` that `to` lacks, then checks that `to` holds them
/// all.
///
/// # Errors
/// The media stores' errors, among them [`gatehouse_media::MediaError::Corrupt`] for a source
/// blob that does not match its id.
pub async fn copy_media(
    from: &MediaStore,
    to: &MediaStore,
    progress: &mut (dyn FnMut(Progress<'_>) + Send),
) -> Result<MediaReport> {
    let ids = from.ids().await?;
    let mut report = MediaReport {
        blobs: ids.len() as u64,
        ..MediaReport::default()
    };
    let mut orphans = Vec::new();
    for (index, id) in ids.iter().enumerate() {
        match from.copy_to(id, to).await? {
            CopyOutcome::Copied { bytes } => {
                report.copied += 1;
                report.bytes_copied += bytes;
            }
            CopyOutcome::AlreadyPresent => report.already_present += 1,
            CopyOutcome::Orphan => {
                report.orphans += 1;
                orphans.push(id.as_str());
            }
        }
        progress(Progress::Blobs {
            done: index as u64 + 1,
            total: report.blobs,
        });
    }
    let copied = to.ids().await?;
    report.verified = ids
        .iter()
        .filter(|id| !orphans.contains(&id.as_str()))
        .all(|id| copied.binary_search(id).is_ok());
    Ok(report)
}
