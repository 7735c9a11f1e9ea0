//! Media store URLs of `gatehouse state`: `file://DIR` or `s3://BUCKET/PREFIX`, parsed by
//! [`MediaLocation`] exactly as `--media` is, and opened as a [`MediaStore`].

use gatehouse_media::MediaStore;
use gatehouse_media::location::MediaLocation;

use crate::exit::UsageError;

/// Whether the store must exist already (a source to read) or may be created (a target).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MediaRole {
    /// Read from: a missing directory is an error, and nothing is created.
    Existing,
    /// Written to: the directory is created when missing.
    Create,
}

/// Opens the media store `url` names; an `s3://` store is configured from the environment
/// (`AWS_*`, `GATEHOUSE_S3_*`) as the Gateway's is.
///
/// # Errors
/// A usage error naming the code of a URL that is neither `file://DIR` nor
/// `s3://BUCKET/PREFIX`, or of a source directory that does not exist; the media store's error
/// when it cannot be opened.
pub(crate) fn open_media_url(url: &str, role: MediaRole) -> anyhow::Result<MediaStore> {
    let location: MediaLocation =
        url.parse()
            .map_err(|error: gatehouse_media::location::MediaLocationError| {
                UsageError::new(format!("{} ({})", error, error.code().as_str()))
            })?;
    if let (MediaLocation::Local(dir), MediaRole::Existing) = (&location, role)
        && !dir.is_dir()
    {
        return Err(UsageError::new(format!(
            "the media directory {} does not exist",
            dir.display()
        ))
        .into());
    }
    Ok(MediaStore::open_location(&location)?)
}
