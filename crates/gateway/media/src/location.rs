//! [`MediaLocation`]: where the media store keeps its blobs, as the operator names it with a URL.
//!
//! - `file://DIR`: a local directory (`file:///abs/dir` or `file://relative/dir`), the default.
//! - `s3://BUCKET[/PREFIX]`: the objects under `PREFIX/` in an S3 bucket (any S3-compatible
//!   store). The endpoint, region and credentials come from the environment (see
//!   [`crate::s3`]), never from the URL, so the URL holds no secret and is safe to log.
//!
//! Every refusal is a [`MediaLocationError`] with a stable [`MediaLocationError::code`].

use gatehouse_location::Location;
use gatehouse_location::Remote;
use gatehouse_protocol::error::ErrorCode;
use std::fmt;

/// Where the media store keeps its blobs: [`Location::Local`], a local directory
/// (`file://DIR`), or [`Location::Remote`], a bucket of an S3-compatible object store and a key
/// prefix in it (`s3://BUCKET/PREFIX`).
pub type MediaLocation = Location<S3Location>;

/// A bucket and a key prefix in it, as `s3://BUCKET/PREFIX` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Location {
    bucket: String,
    /// The prefix without leading or trailing `/`; empty for the whole bucket.
    prefix: String,
}

/// A media URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MediaLocationError {
    /// The URL is neither `file://` nor `s3://`.
    #[error("the media URL '{0}' is neither file://DIR nor s3://BUCKET/PREFIX")]
    UnknownScheme(String),
    /// `file://` without a directory.
    #[error("a file:// media URL needs a directory, for example file:///var/lib/gatehouse/media")]
    EmptyPath,
    /// `s3://` without a bucket.
    #[error("an s3:// media URL needs a bucket, for example s3://gatehouse-media/gateway")]
    EmptyBucket,
    /// The bucket is not a valid S3 bucket name.
    #[error(
        "'{0}' is not an S3 bucket name: 3 to 63 lowercase letters, digits, '-' and '.', \
         starting and ending with a letter or digit"
    )]
    InvalidBucket(String),
    /// The URL carries user info, a port, a query or a fragment, which an `s3://` media URL
    /// never has; credentials and endpoint settings belong in the environment.
    #[error(
        "an s3:// media URL is only s3://BUCKET/PREFIX: credentials, endpoint and options go in \
         the AWS_* or GATEHOUSE_S3_* environment variables, not in the URL"
    )]
    ExtraParts,
    /// A prefix segment is `.` or `..`, empty (`a//b`), or holds a character object keys
    /// should not hold.
    #[error(
        "the media URL's prefix '{0}' has an empty, '.' or '..' segment or a control character"
    )]
    InvalidPrefix(String),
}

impl MediaLocationError {
    /// Returns the stable code of this refusal.
    pub fn code(&self) -> ErrorCode {
        match self {
            MediaLocationError::UnknownScheme(_) => ErrorCode::MediaUrlScheme,
            MediaLocationError::EmptyPath => ErrorCode::MediaUrlEmptyPath,
            MediaLocationError::EmptyBucket => ErrorCode::MediaUrlEmptyBucket,
            MediaLocationError::InvalidBucket(_) => ErrorCode::MediaUrlBadBucket,
            MediaLocationError::ExtraParts => ErrorCode::MediaUrlExtraParts,
            MediaLocationError::InvalidPrefix(_) => ErrorCode::MediaUrlBadPrefix,
        }
    }
}

impl Remote for S3Location {
    const LOCAL_SCHEME: &'static str = "file://";
    type Error = MediaLocationError;

    fn empty_path() -> MediaLocationError {
        MediaLocationError::EmptyPath
    }

    fn parse_remote(text: &str) -> Option<Result<Self, MediaLocationError>> {
        text.strip_prefix("s3://").map(S3Location::parse)
    }

    fn unknown_scheme(text: &str) -> MediaLocationError {
        // Only the scheme is echoed: the rest may be a mistyped URL with credentials in it.
        let scheme = text.split_once("://").map_or(text, |(scheme, _)| scheme);
        MediaLocationError::UnknownScheme(format!("{scheme}://…"))
    }
}

impl S3Location {
    /// Parses what follows `s3://`.
    fn parse(rest: &str) -> Result<Self, MediaLocationError> {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.contains(['@', ':', '?', '#']) || prefix.contains(['?', '#']) {
            return Err(MediaLocationError::ExtraParts);
        }
        if bucket.is_empty() {
            return Err(MediaLocationError::EmptyBucket);
        }
        if !valid_bucket(bucket) {
            return Err(MediaLocationError::InvalidBucket(bucket.to_owned()));
        }
        let prefix = prefix.trim_end_matches('/');
        let valid_prefix = prefix.is_empty()
            || prefix.split('/').all(|segment| {
                !segment.is_empty()
                    && segment != "."
                    && segment != ".."
                    && !segment.chars().any(char::is_control)
            });
        if !valid_prefix {
            return Err(MediaLocationError::InvalidPrefix(prefix.to_owned()));
        }
        Ok(Self {
            bucket: bucket.to_owned(),
            prefix: prefix.to_owned(),
        })
    }

    /// Returns the bucket name.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Returns the key prefix without leading or trailing `/`; empty for the whole bucket.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }
}

impl fmt::Display for S3Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.prefix.is_empty() {
            true => write!(f, "s3://{}", self.bucket),
            false => write!(f, "s3://{}/{}", self.bucket, self.prefix),
        }
    }
}

/// S3's bucket naming rules: 3 to 63 characters of lowercase letters, digits, `-` and `.`,
/// starting and ending with a letter or digit, no `..`.
fn valid_bucket(bucket: &str) -> bool {
    let alphanumeric = |byte: u8| byte.is_ascii_lowercase() || byte.is_ascii_digit();
    let bytes = bucket.as_bytes();
    (3..=63).contains(&bytes.len())
        && bytes
            .iter()
            .all(|&byte| alphanumeric(byte) || byte == b'-' || byte == b'.')
        && bytes.first().copied().is_some_and(alphanumeric)
        && bytes.last().copied().is_some_and(alphanumeric)
        && !bucket.contains("..")
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test fails loudly on any unexpected error"
    )]

    use pretty_assertions::assert_eq;

    use std::path::PathBuf;

    use super::*;

    /// The local form is `file://DIR` (its parsing is `gatehouse_location`'s, tested there).
    #[test]
    fn file_urls_name_a_directory() {
        let location: MediaLocation = "file://state/media".parse().unwrap();
        assert_eq!(location, MediaLocation::Local(PathBuf::from("state/media")));
        assert_eq!(location.to_string(), "file://state/media");
    }

    #[test]
    fn s3_urls_name_a_bucket_and_a_prefix() {
        let location: MediaLocation = "s3://gatehouse-media/prod/gateway/".parse().unwrap();
        let MediaLocation::Remote(s3) = &location else {
            panic!("not s3: {location:?}");
        };
        assert_eq!(
            (s3.bucket(), s3.prefix()),
            ("gatehouse-media", "prod/gateway")
        );
        assert_eq!(location.to_string(), "s3://gatehouse-media/prod/gateway");
        let bare: MediaLocation = "s3://media.example".parse().unwrap();
        assert_eq!(bare.to_string(), "s3://media.example");
    }

    #[test]
    fn bad_urls_are_refused_with_stable_codes() {
        let cases = [
            ("file://", "MEDIA_URL_EMPTY_PATH"),
            ("s3://", "MEDIA_URL_EMPTY_BUCKET"),
            ("s3:///prefix", "MEDIA_URL_EMPTY_BUCKET"),
            ("s3://Bucket/x", "MEDIA_URL_BAD_BUCKET"),
            ("s3://ab/x", "MEDIA_URL_BAD_BUCKET"),
            ("s3://-bucket/x", "MEDIA_URL_BAD_BUCKET"),
            ("s3://a..b/x", "MEDIA_URL_BAD_BUCKET"),
            ("s3://bucket/a/../b", "MEDIA_URL_BAD_PREFIX"),
            ("s3://bucket/./b", "MEDIA_URL_BAD_PREFIX"),
            ("s3://bucket/a//b", "MEDIA_URL_BAD_PREFIX"),
            ("s3://bucket/a\nb", "MEDIA_URL_BAD_PREFIX"),
            ("s3://bucket/x?region=eu-west-1", "MEDIA_URL_EXTRA_PARTS"),
            ("s3://bucket/x#frag", "MEDIA_URL_EXTRA_PARTS"),
            ("s3://key:s3cret@bucket/x", "MEDIA_URL_EXTRA_PARTS"),
            ("s3://bucket:9000/x", "MEDIA_URL_EXTRA_PARTS"),
            ("gs://bucket/x", "MEDIA_URL_SCHEME"),
            ("/var/lib/media", "MEDIA_URL_SCHEME"),
        ];
        for (url, code) in cases {
            let error = url.parse::<MediaLocation>().unwrap_err();
            assert_eq!(error.code(), code, "{url}: {error}");
        }
    }

    #[test]
    fn a_refusal_never_echoes_credentials() {
        for url in [
            "s3://key:s3cret@bucket/x",
            "http://key:s3cret@minio:9000/bucket",
        ] {
            let error = url.parse::<MediaLocation>().unwrap_err().to_string();
            assert!(!error.contains("s3cret"), "{error}");
        }
    }
}
