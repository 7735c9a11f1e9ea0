//! The Gateway media store: content-addressed blobs behind [`object_store`].
//!
//! Uploads are stored once per content. The media id is the lowercase hex BLAKE3 of the bytes;
//! the blob lives at `blobs/<first 2 hex>/<id>` and a small JSON record (SHA-256, size, MIME
//! type, sanitized original file name, creation time) at `meta/<id>.json`. Both are written with
//! [`PutMode::Create`], so storing the same bytes twice is a no-op that returns the first
//! record. Ids are validated (exactly 64 lowercase hex characters) before any key is built, so
//! no id can address another object.
//!
//! The store sits behind `Arc<dyn ObjectStore>`: [`MediaStore::open`] roots a
//! [`LocalFileSystem`] at a directory, [`MediaStore::open_location`] opens what a media URL
//! ([`MediaLocation`]: `file://DIR` or `s3://BUCKET/PREFIX`) names, and
//! [`MediaStore::with_object_store`] accepts any other backend (in-memory, for tests). The keys
//! below are relative to the URL's prefix, so stores under two prefixes of one bucket never see
//! each other's objects.
//!
//! ```no_run
//! # async fn example() -> Result<(), gatehouse_media::MediaError> {
//! let store = gatehouse_media::MediaStore::open(std::path::Path::new("state/media"))?;
//! let record = store
//!     .put(bytes::Bytes::from_static(b"hello"), "text/plain", Some("hello.txt"))
//!     .await?;
//! let (_record, bytes) = store.get(&record.id).await?;
//! assert_eq!(&bytes[..], b"hello");
//! # Ok(())
//! # }
//! ```
//!
//! # Quota and deletion
//! A store opened with a quota ([`MediaStore::with_quota`]) refuses a `put` that would create
//! a blob past the quota with [`MediaError::QuotaExceeded`], before anything is written; storing
//! bytes that are already stored needs no room and is never refused. The quota counts the bytes
//! of the blobs (not of their small metadata records); the count is taken by listing the store
//! on first use and kept up to date by `put` and [`MediaStore::delete`] of this process.
//! [`MediaStore::delete`] exists for the Gateway's garbage collection of checkpoint blobs; it
//! removes the metadata record first and then the blob, so a crash in between leaves a blob
//! without a record, which a later `put` of the same bytes completes again.
//!
//! # Modules
//! - [`error`]: [`MediaError`] and its stable codes.
//! - [`filename`]: [`sanitize_filename`], shared with attachment staging.
//! - [`transfer`]: listing the blobs and copying them to another store.
//! - [`location`]: [`MediaLocation`], the parsed media URL.
//! - `s3` (with the `s3` feature): the S3 backend, configured from the environment.

#![deny(missing_docs)]

#[cfg(feature = "s3")]
pub mod aws_profile;
pub mod error;
pub mod filename;
pub mod location;
#[cfg(feature = "s3")]
pub mod s3;
pub mod transfer;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use futures_util::StreamExt;
use object_store::ObjectStore;
use object_store::ObjectStoreExt;
use object_store::PutMode;
use object_store::PutOptions;
use object_store::PutPayload;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use serde::Deserialize;
use serde::Serialize;
use sha2::Digest;

pub use crate::error::MediaError;
pub use crate::error::Result;
pub use crate::filename::sanitize_filename;
pub use crate::location::MediaLocation;

/// The length of a media id: a BLAKE3 digest in lowercase hex.
pub const MEDIA_ID_LEN: usize = 64;

/// The longest accepted MIME type, in bytes.
pub const MAX_MIME_TYPE_BYTES: usize = 255;

/// The version written into every metadata object.
const META_VERSION: u32 = 1;

/// How long [`MediaStore::ready`] reuses the answer of its last probe.
pub const READY_CACHE: Duration = Duration::from_secs(5);

/// How long one readiness probe may take before the store counts as not answering: an endpoint
/// that accepts connections and never answers must not hold readiness for the request timeout.
pub const READY_PROBE_TIMEOUT: Duration = Duration::from_secs(5);

/// The key [`MediaStore::ready`] asks the backend about; it is never written, so the answer is
/// "not found" from a store that works.
const READY_PROBE_KEY: &str = "meta/readiness-probe";

/// What the store knows about one stored blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MediaRecord {
    /// The media id: the lowercase hex BLAKE3 of the bytes.
    pub id: String,
    /// The lowercase hex SHA-256 of the bytes, for clients that check with SHA-256.
    pub sha256: String,
    /// The size in bytes.
    pub size: u64,
    /// The MIME type given at the first upload of these bytes.
    pub mime_type: String,
    /// The sanitized file name given at the first upload, when there was one.
    pub filename: Option<String>,
    /// When the bytes were first stored, in Unix seconds.
    pub created_at: i64,
}

/// How much the store holds: the number of blobs and their total size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MediaUsage {
    /// The number of stored blobs.
    pub n_blobs: u64,
    /// Their total size in bytes.
    pub bytes: u64,
}

/// A content-addressed blob store.
///
/// Concurrent `put`s of the same bytes are safe: both return the same record. The store never
/// replaces an object; it deletes one only when [`MediaStore::delete`] is called.
#[derive(Debug, Clone)]
pub struct MediaStore {
    objects: Arc<dyn ObjectStore>,
    /// The most bytes of blobs the store may hold; `None` for no quota.
    quota_bytes: Option<u64>,
    /// The bytes of blobs stored (and reserved by `put`s in flight), shared by the clones.
    used: Arc<UsedBytes>,
    /// When the backend was last probed by [`MediaStore::ready`], and whether it answered. The
    /// lock is held across the probe, so concurrent callers share one.
    readiness: Arc<tokio::sync::Mutex<Option<(Instant, bool)>>>,
}

/// The running count behind the quota, taken by listing the store once.
#[derive(Debug, Default)]
struct UsedBytes {
    measured: tokio::sync::OnceCell<()>,
    bytes: AtomicU64,
}

/// The metadata object, as stored. Kept apart from [`MediaRecord`] so the stored shape is a
/// deliberate choice.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct MetaFile {
    version: u32,
    id: String,
    sha256: String,
    size: u64,
    mime_type: String,
    filename: Option<String>,
    created_at: i64,
}

impl MediaStore {
    /// Opens the store rooted at `dir`, creating the directory (mode 0700) when it is missing.
    /// Files are written with the process umask; nothing widens it.
    ///
    /// # Errors
    /// [`MediaError::Open`] when the directory cannot be created or opened.
    pub fn open(dir: &Path) -> Result<Self, MediaError> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(MediaError::Open)?;
        let local = LocalFileSystem::new_with_prefix(dir)
            .map_err(|error| MediaError::Open(std::io::Error::other(error)))?
            .with_fsync(true);
        Ok(Self::with_object_store(Arc::new(local)))
    }

    /// Opens the store `location` names: [`MediaStore::open`] for a directory, the S3 backend
    /// (configured from the environment, see `s3`) for a bucket. Nothing is sent to S3 yet: an
    /// unreachable endpoint fails the first call, not the opening.
    ///
    /// # Errors
    /// [`MediaError::Open`] when the directory cannot be created, the S3 settings in the
    /// environment are unusable, or this build has no S3 support.
    pub fn open_location(location: &MediaLocation) -> Result<Self, MediaError> {
        // Variables that are not UTF-8 are none of the S3 settings.
        let env = std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        });
        Self::open_location_with_env(location, env)
    }

    /// [`MediaStore::open_location`] with the S3 settings read from `env` instead of the
    /// process environment (a test's own endpoint and keys).
    ///
    /// # Errors
    /// As [`MediaStore::open_location`].
    pub fn open_location_with_env(
        location: &MediaLocation,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Self, MediaError> {
        match location {
            MediaLocation::Local(dir) => Self::open(dir),
            #[cfg(feature = "s3")]
            MediaLocation::Remote(s3) => Ok(Self::with_object_store(crate::s3::open(
                s3,
                &env.into_iter().collect(),
            )?)),
            #[cfg(not(feature = "s3"))]
            MediaLocation::Remote(s3) => {
                drop(env);
                Err(MediaError::Open(std::io::Error::other(format!(
                    "cannot open {s3}: this gatehouse was built without S3 support (the `s3` \
                     feature)"
                ))))
            }
        }
    }

    /// Returns a store over any object store backend.
    pub fn with_object_store(objects: Arc<dyn ObjectStore>) -> Self {
        Self {
            objects,
            quota_bytes: None,
            used: Arc::default(),
            readiness: Arc::default(),
        }
    }

    /// Returns whether the backend answers, probing it (a `HEAD` of a key that is never
    /// written) at most once per [`READY_CACHE`]; between probes the last answer is returned.
    /// A failed probe is logged with its cause.
    pub async fn ready(&self) -> bool {
        let mut last = self.readiness.lock().await;
        if let Some((at, ready)) = *last
            && at.elapsed() < READY_CACHE
        {
            return ready;
        }
        let key = ObjectPath::from(READY_PROBE_KEY);
        let probe = self.objects.head(&key);
        let ready = match tokio::time::timeout(READY_PROBE_TIMEOUT, probe).await {
            Ok(Ok(_) | Err(object_store::Error::NotFound { .. })) => true,
            Ok(Err(error)) => {
                tracing::error!(error = %error, "the media store does not answer");
                false
            }
            Err(_) => {
                tracing::error!(
                    timeout_ms = READY_PROBE_TIMEOUT.as_millis(),
                    "the media store did not answer its readiness probe in time"
                );
                false
            }
        };
        *last = Some((Instant::now(), ready));
        ready
    }

    /// Returns this store with a quota: `put` refuses to create a blob that would take the total
    /// size of the stored blobs past `quota_bytes`.
    #[must_use]
    pub fn with_quota(mut self, quota_bytes: u64) -> Self {
        self.quota_bytes = Some(quota_bytes);
        self
    }

    /// Returns the quota in bytes, when the store has one.
    pub fn quota_bytes(&self) -> Option<u64> {
        self.quota_bytes
    }

    /// Stores `bytes` and returns their record. Storing the same bytes again is not an error:
    /// the record of the first upload (its MIME type, file name and time) is returned.
    ///
    /// `filename` is sanitized with [`sanitize_filename`]; an empty one counts as none.
    ///
    /// # Errors
    /// - [`MediaError::InvalidMimeType`] before anything is written;
    /// - [`MediaError::QuotaExceeded`] before anything is written, when new bytes would take the
    ///   store past its quota;
    /// - [`MediaError::StorageFull`] when the disk or quota is full;
    /// - [`MediaError::Corrupt`] when an existing metadata object for these bytes is unreadable;
    /// - [`MediaError::Store`], [`MediaError::Encode`], [`MediaError::Join`] otherwise.
    pub async fn put(
        &self,
        bytes: Bytes,
        mime_type: &str,
        filename: Option<&str>,
    ) -> Result<MediaRecord> {
        let mime_type = checked_mime_type(mime_type)?;
        let filename = filename
            .filter(|name| !name.trim().is_empty())
            .map(sanitize_filename);
        let hashed = bytes.clone();
        let (id, sha256) = tokio::task::spawn_blocking(move || {
            (
                media_id(&hashed),
                hex::encode(sha2::Sha256::digest(&hashed)),
            )
        })
        .await?;
        let size = bytes.len() as u64;
        let blob_key = blob_key(&id);
        let reserved = self.reserve(&blob_key, size).await?;
        match self
            .objects
            .put_opts(&blob_key, PutPayload::from(bytes), create())
            .await
        {
            Ok(_) => {}
            // S3 reports a lost create race as a failed precondition.
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => {
                self.release(reserved);
                tracing::debug!(media_id = %id, "media blob already stored");
            }
            Err(error) => {
                self.release(reserved);
                return Err(MediaError::from_write(error));
            }
        }
        let meta = MetaFile {
            version: META_VERSION,
            id: id.clone(),
            sha256,
            size,
            mime_type,
            filename,
            created_at: unix_now(),
        };
        let encoded = serde_json::to_vec(&meta)?;
        match self
            .objects
            .put_opts(&meta_key(&id), PutPayload::from(encoded), create())
            .await
        {
            Ok(_) => Ok(into_record(meta)),
            Err(
                object_store::Error::AlreadyExists { .. }
                | object_store::Error::Precondition { .. },
            ) => self.read_meta(&id).await,
            Err(error) => Err(MediaError::from_write(error)),
        }
    }

    /// Returns the record and the bytes of `id`, after checking that the bytes still hash to
    /// the id.
    ///
    /// # Errors
    /// - [`MediaError::InvalidId`] before any storage access;
    /// - [`MediaError::NotFound`] when nothing is stored under the id;
    /// - [`MediaError::Corrupt`] when the bytes or metadata do not match the id;
    /// - [`MediaError::Store`], [`MediaError::Join`] otherwise.
    pub async fn get(&self, id: &str) -> Result<(MediaRecord, Bytes)> {
        check_id(id)?;
        let record = self.read_meta(id).await?;
        let bytes = match self.objects.get(&blob_key(id)).await {
            Ok(result) => result
                .bytes()
                .await
                .map_err(|source| MediaError::Store { source })?,
            Err(object_store::Error::NotFound { .. }) => {
                // Metadata without its blob: the blob was removed behind the store's back.
                tracing::error!(media_id = %id, "media metadata has no blob");
                return Err(MediaError::NotFound { id: id.to_owned() });
            }
            Err(source) => return Err(MediaError::Store { source }),
        };
        let checked = bytes.clone();
        let digest =
            tokio::task::spawn_blocking(move || blake3::hash(&checked).to_hex().to_string())
                .await?;
        if digest != id || bytes.len() as u64 != record.size {
            tracing::error!(media_id = %id, "media blob does not match its id");
            return Err(MediaError::Corrupt { id: id.to_owned() });
        }
        Ok((record, bytes))
    }

    /// Deletes the blob and the record of `id` and returns the size of the deleted blob, or
    /// `None` when no blob was stored under the id (deleting twice is not an error). The
    /// record goes first, so a crash in between leaves a blob without a record, which a later
    /// `put` of the same bytes completes; a blob is never served without its record.
    ///
    /// The caller decides that nothing refers to the id any more; the store does not know.
    ///
    /// # Errors
    /// - [`MediaError::InvalidId`] before any storage access;
    /// - [`MediaError::Store`] when the backend cannot delete.
    pub async fn delete(&self, id: &str) -> Result<Option<u64>> {
        check_id(id)?;
        let blob_key = blob_key(id);
        let size = match self.objects.head(&blob_key).await {
            Ok(meta) => Some(meta.size),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(source) => return Err(MediaError::Store { source }),
        };
        for key in [meta_key(id), blob_key] {
            match self.objects.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(source) => return Err(MediaError::Store { source }),
            }
        }
        if let Some(size) = size {
            self.release(size);
        }
        Ok(size)
    }

    /// Returns how many blobs the store holds and their total size, by listing it.
    ///
    /// # Errors
    /// [`MediaError::Store`] when the backend cannot list.
    pub async fn usage(&self) -> Result<MediaUsage> {
        let prefix = ObjectPath::from("blobs");
        let mut listing = self.objects.list(Some(&prefix));
        let mut usage = MediaUsage::default();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|source| MediaError::Store { source })?;
            if blob_id(&meta.location).is_none() {
                continue;
            }
            usage.n_blobs += 1;
            usage.bytes = usage.bytes.saturating_add(meta.size);
        }
        Ok(usage)
    }

    /// Returns the total size of the stored blobs: for a store with a quota, the running count
    /// behind it (taken by listing once, then kept by `put` and `delete` of this process, so a
    /// `put` in flight is included); without a quota, a fresh listing.
    ///
    /// # Errors
    /// [`MediaError::Store`] when the backend cannot list.
    pub async fn stored_bytes(&self) -> Result<u64> {
        match self.quota_bytes {
            Some(_) => {
                self.measure().await?;
                Ok(self.used.bytes.load(Ordering::SeqCst))
            }
            None => Ok(self.usage().await?.bytes),
        }
    }

    /// Takes the count behind the quota by listing the store, once.
    async fn measure(&self) -> Result<()> {
        self.used
            .measured
            .get_or_try_init(|| async {
                let usage = self.usage().await?;
                self.used.bytes.fetch_add(usage.bytes, Ordering::SeqCst);
                Ok::<(), MediaError>(())
            })
            .await?;
        Ok(())
    }

    /// Reserves `size` bytes under the quota for a new blob at `blob_key` and returns the bytes
    /// reserved: `size`, or 0 when the store has no quota or the blob is already stored (it
    /// needs no room).
    async fn reserve(&self, blob_key: &ObjectPath, size: u64) -> Result<u64> {
        let Some(quota_bytes) = self.quota_bytes else {
            return Ok(0);
        };
        self.measure().await?;
        let reserved = self
            .used
            .bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                used.checked_add(size).filter(|total| *total <= quota_bytes)
            });
        match reserved {
            Ok(_) => Ok(size),
            Err(used_bytes) => match self.objects.head(blob_key).await {
                Ok(_) => Ok(0),
                Err(object_store::Error::NotFound { .. }) => Err(MediaError::QuotaExceeded {
                    quota_bytes,
                    used_bytes,
                    size,
                }),
                Err(source) => Err(MediaError::Store { source }),
            },
        }
    }

    /// Gives back `size` bytes of the quota count (a failed or deduplicated put, a delete).
    fn release(&self, size: u64) {
        if self.quota_bytes.is_none() || size == 0 {
            return;
        }
        let _ = self
            .used
            .bytes
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |used| {
                Some(used.saturating_sub(size))
            });
    }

    /// Returns the record of `id` without reading its bytes.
    ///
    /// # Errors
    /// - [`MediaError::InvalidId`] before any storage access;
    /// - [`MediaError::NotFound`] when nothing is stored under the id;
    /// - [`MediaError::Corrupt`] when the metadata is unreadable or names another id;
    /// - [`MediaError::Store`] otherwise.
    pub async fn record(&self, id: &str) -> Result<MediaRecord> {
        check_id(id)?;
        self.read_meta(id).await
    }

    /// Reads and checks the metadata of an already validated `id`.
    async fn read_meta(&self, id: &str) -> Result<MediaRecord> {
        let encoded = match self.objects.get(&meta_key(id)).await {
            Ok(result) => result
                .bytes()
                .await
                .map_err(|source| MediaError::Store { source })?,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(MediaError::NotFound { id: id.to_owned() });
            }
            Err(source) => return Err(MediaError::Store { source }),
        };
        let meta: MetaFile = match serde_json::from_slice(&encoded) {
            Ok(meta) => meta,
            Err(error) => {
                tracing::error!(media_id = %id, error = %error, "media metadata is unreadable");
                return Err(MediaError::Corrupt { id: id.to_owned() });
            }
        };
        if meta.id != id || meta.version != META_VERSION {
            tracing::error!(media_id = %id, "media metadata names another id or version");
            return Err(MediaError::Corrupt { id: id.to_owned() });
        }
        Ok(into_record(meta))
    }
}

/// Returns the media id of `bytes` (the lowercase hex BLAKE3), the id [`MediaStore::put`] stores
/// them under. Hashing takes about a millisecond per megabyte: call it off the async threads.
pub fn media_id(bytes: &[u8]) -> String {
    blake3::hash(bytes).to_hex().to_string()
}

/// Refuses anything but exactly 64 lowercase hex characters, the form of every media id.
///
/// # Errors
/// [`MediaError::InvalidId`].
pub fn check_id(id: &str) -> Result<()> {
    let valid = id.len() == MEDIA_ID_LEN
        && id
            .bytes()
            .all(|byte| matches!(byte, b'0'..=b'9' | b'a'..=b'f'));
    match valid {
        true => Ok(()),
        false => Err(MediaError::InvalidId),
    }
}

/// Trims the MIME type and refuses empty, long, slash-less or non-printable ones, so it can be
/// sent back as a `Content-Type` header.
fn checked_mime_type(mime_type: &str) -> Result<String> {
    let trimmed = mime_type.trim();
    let valid = !trimmed.is_empty()
        && trimmed.len() <= MAX_MIME_TYPE_BYTES
        && trimmed.contains('/')
        && trimmed.bytes().all(|byte| matches!(byte, 0x20..=0x7e));
    match valid {
        true => Ok(trimmed.to_owned()),
        false => Err(MediaError::InvalidMimeType),
    }
}

/// The blob key of a validated id: `blobs/<first 2 hex>/<id>`.
fn blob_key(id: &str) -> ObjectPath {
    debug_assert!(check_id(id).is_ok(), "blob_key needs a validated id");
    ObjectPath::from(format!("blobs/{}/{id}", &id[..2]))
}

/// Returns the id of a listed key that is exactly a blob key of this store
/// (`blobs/<first 2 hex>/<id>`), and `None` for anything else under `blobs/`: a deeper key (the
/// blobs of another store whose prefix lies inside this one's, as `PREFIX/blobs/x/...`) or a
/// stray object is neither counted nor copied.
pub(crate) fn blob_id(key: &ObjectPath) -> Option<&str> {
    let mut parts = key.parts();
    let (Some(top), Some(shard), Some(name), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return None;
    };
    let id = key.filename()?;
    let is_blob = top.as_ref() == "blobs"
        && name.as_ref() == id
        && check_id(id).is_ok()
        && shard.as_ref() == &id[..2];
    is_blob.then_some(id)
}

/// The metadata key of a validated id: `meta/<id>.json`.
fn meta_key(id: &str) -> ObjectPath {
    debug_assert!(check_id(id).is_ok(), "meta_key needs a validated id");
    ObjectPath::from(format!("meta/{id}.json"))
}

fn create() -> PutOptions {
    PutOptions::from(PutMode::Create)
}

fn into_record(meta: MetaFile) -> MediaRecord {
    let MetaFile {
        version: _,
        id,
        sha256,
        size,
        mime_type,
        filename,
        created_at,
    } = meta;
    MediaRecord {
        id,
        sha256,
        size,
        mime_type,
        filename,
        created_at,
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| {
            i64::try_from(elapsed.as_secs()).unwrap_or(i64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use crate::checked_mime_type;

    #[test]
    fn mime_types() {
        assert_eq!(
            checked_mime_type(" text/plain; charset=utf-8 ").ok(),
            Some("text/plain; charset=utf-8".to_owned())
        );
        for bad in ["", "   ", "text", "text/plain\r\nx: y", "tëxt/plain"] {
            assert!(checked_mime_type(bad).is_err(), "{bad:?}");
        }
        assert!(checked_mime_type(&format!("a/{}", "b".repeat(300))).is_err());
    }
}
