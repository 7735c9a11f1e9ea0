//! Taking bytes into the media store on someone's behalf: an API upload (`POST /v1/media`) or a
//! file a channel received. One path for both: the bytes are charged to their owner's media
//! share first (refused past it), written to the content-addressed store, pinned so checkpoint
//! garbage collection never deletes them, and granted to whoever may download them; all under
//! the media write hold, so no collection runs between the write and the pin.

use std::sync::Arc;

use gatehouse_media::MediaError;
use gatehouse_media::MediaRecord;
use gatehouse_media::MediaStore;
use gatehouse_protocol::time::now_ms;
use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::records::CheckpointBlob;
use gatehouse_store::records::MediaCharge;
use gatehouse_store::records::MediaChargeKind;

use crate::retention::MediaRetention;

/// Where bytes are taken in.
#[derive(Clone)]
pub(crate) struct Intake {
    /// The store: charges, pins and grants.
    pub(crate) store: Arc<dyn Store>,
    /// The media store the bytes go to.
    pub(crate) media: Arc<MediaStore>,
    /// The media write hold.
    pub(crate) retention: Arc<MediaRetention>,
}

/// Bytes to take in, and on whose behalf.
pub(crate) struct Incoming<'a> {
    /// Who is charged for them (`key:<sha256>`, `operator`, `channel:<name>`).
    pub(crate) owner: &'a str,
    /// The owner's media share; `None` charges without a limit.
    pub(crate) quota_bytes: Option<u64>,
    /// Who may download them besides an admin (`key:<sha256>`, `session:<key>`), if anyone.
    pub(crate) grantee: Option<&'a str>,
    /// The pin's kind (`upload`, `channel`).
    pub(crate) pin: &'a str,
    /// The bytes.
    pub(crate) bytes: bytes::Bytes,
    /// Their MIME type.
    pub(crate) mime_type: &'a str,
    /// Their original file name, if any.
    pub(crate) filename: Option<&'a str>,
}

/// Why bytes were not taken in.
#[derive(Debug, thiserror::Error)]
pub(crate) enum IntakeError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// They would pass the owner's media share.
    #[error(
        "{used_bytes} bytes of media are charged already, and {new_bytes} more would pass the share of {quota_bytes} bytes"
    )]
    OverShare {
        /// What the owner holds.
        used_bytes: u64,
        /// What these bytes add.
        new_bytes: u64,
        /// The share.
        quota_bytes: u64,
    },
    /// The media store refused them (full, unreadable).
    #[error(transparent)]
    Media(#[from] MediaError),
    /// They could not be hashed.
    #[error("cannot hash the bytes: {0}")]
    Hash(String),
}

impl Intake {
    /// An intake into `media`, charging and pinning in `store`, under `retention`'s hold.
    pub(crate) fn new(
        store: &Arc<dyn Store>,
        media: &Arc<MediaStore>,
        retention: &Arc<MediaRetention>,
    ) -> Self {
        Self {
            store: Arc::clone(store),
            media: Arc::clone(media),
            retention: Arc::clone(retention),
        }
    }

    /// Takes `incoming` in and returns its record.
    ///
    /// # Errors
    /// [`IntakeError`]; nothing stays charged for bytes that were not written.
    pub(crate) async fn take(&self, incoming: Incoming<'_>) -> Result<MediaRecord, IntakeError> {
        let writing = self.retention.hold().await?;
        let taken = self.take_held(incoming).await;
        writing.release().await;
        taken
    }

    async fn take_held(&self, incoming: Incoming<'_>) -> Result<MediaRecord, IntakeError> {
        let hashed = incoming.bytes.clone();
        let media_id = tokio::task::spawn_blocking(move || gatehouse_media::media_id(&hashed))
            .await
            .map_err(|error| IntakeError::Hash(error.to_string()))?;
        let blob = CheckpointBlob {
            media_id,
            size_bytes: incoming.bytes.len() as u64,
        };
        let charged = self
            .store
            .charge_media(
                incoming.owner,
                MediaChargeKind::Upload,
                std::slice::from_ref(&blob),
                incoming.quota_bytes,
                now_ms(),
            )
            .await?;
        let fresh = match charged {
            MediaCharge::Charged { new_bytes, .. } => new_bytes > 0,
            MediaCharge::OverQuota {
                used_bytes,
                new_bytes,
            } => {
                return Err(IntakeError::OverShare {
                    used_bytes,
                    new_bytes,
                    quota_bytes: incoming.quota_bytes.unwrap_or_default(),
                });
            }
        };
        let record = match self
            .media
            .put(incoming.bytes, incoming.mime_type, incoming.filename)
            .await
        {
            Ok(record) => record,
            Err(error) => {
                if fresh
                    && let Err(error) = self
                        .store
                        .uncharge_media(incoming.owner, MediaChargeKind::Upload, &blob.media_id)
                        .await
                {
                    tracing::error!(error = %error, media_id = %blob.media_id, "cannot take back the charge of refused media");
                }
                return Err(error.into());
            }
        };
        self.store
            .pin_media(&record.id, incoming.pin, now_ms())
            .await?;
        if let Some(grantee) = incoming.grantee {
            self.store
                .grant_media(&record.id, grantee, now_ms())
                .await?;
        }
        Ok(record)
    }
}
