//! Media store URLs of `gatehouse state`: `file://DIR`, a local directory.
//!
//! This is the one place that turns such a URL into a [`MediaStore`], so other schemes (an
//! object store) plug in here without touching the commands.

use std::path::PathBuf;

use gatehouse_media::MediaStore;

use crate::exit::UsageError;

/// Whether the store must exist already (a source to read) or may be created (a target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MediaRole {
    /// Read from: a missing directory is an error, and nothing is created.
    Existing,
    /// Written to: the directory is created when missing.
    Create,
}

/// Opens the media store `url` names.
///
/// # Errors
/// A usage error for a URL that is not `file://DIR` or a source directory that does not
/// exist; the media store's error when it cannot be opened.
pub(crate) fn open_media_url(url: &str, role: MediaRole) -> anyhow::Result<MediaStore> {
    let Some(dir) = url.strip_prefix("file://").filter(|dir| !dir.is_empty()) else {
        return Err(UsageError::new(format!(
            "the media URL '{url}' is not file://DIR, for example file:///var/lib/gatehouse/gateway/media"
        ))
        .into());
    };
    let dir = PathBuf::from(dir);
    if role == MediaRole::Existing && !dir.is_dir() {
        return Err(UsageError::new(format!(
            "the media directory {} does not exist",
            dir.display()
        ))
        .into());
    }
    Ok(MediaStore::open(&dir)?)
}
