//! Listing a media store and copying its blobs to another one, for moving an installation
//! (`gatehouse state migrate --media-from --media-to`) and checking one (`gatehouse state
//! check --media`). Both stores may be any `object_store` backend.

use futures_util::StreamExt;
use object_store::ObjectStoreExt;
use object_store::PutMode;
use object_store::PutOptions;
use object_store::PutPayload;
use object_store::path::Path as ObjectPath;

use crate::MediaError;
use crate::MediaStore;
use crate::Result;
use crate::blob_key;
use crate::check_id;
use crate::meta_key;

/// What [`MediaStore::copy_to`] did with one blob.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyOutcome {
    /// The blob and its record were copied and read back intact; `bytes` is the blob's size.
    Copied {
        /// The size of the blob.
        bytes: u64,
    },
    /// The target already held the blob and its record, and the blob hashes to its id.
    AlreadyPresent,
    /// The source holds the blob without its record (a deletion stopped halfway): it is not
    /// served, so it is not copied.
    Orphan,
}

impl MediaStore {
    /// Returns the ids of every stored blob, sorted. Keys under `blobs/` that are not exactly
    /// a blob key (`blobs/<first 2 hex>/<id>`) are left out.
    ///
    /// # Errors
    /// [`MediaError::Store`] when the backend cannot list.
    pub async fn ids(&self) -> Result<Vec<String>> {
        let prefix = ObjectPath::from("blobs");
        let mut listing = self.objects.list(Some(&prefix));
        let mut ids = Vec::new();
        while let Some(meta) = listing.next().await {
            let meta = meta.map_err(|source| MediaError::Store { source })?;
            if let Some(id) = crate::blob_id(&meta.location) {
                ids.push(id.to_owned());
            }
        }
        ids.sort_unstable();
        Ok(ids)
    }

    /// Returns whether the blob and the record of `id` are both stored, without reading the
    /// bytes.
    ///
    /// # Errors
    /// [`MediaError::InvalidId`] before any storage access; [`MediaError::Store`] otherwise.
    pub async fn contains(&self, id: &str) -> Result<bool> {
        check_id(id)?;
        for key in [meta_key(id), blob_key(id)] {
            match self.objects.head(&key).await {
                Ok(_) => {}
                Err(object_store::Error::NotFound { .. }) => return Ok(false),
                Err(source) => return Err(MediaError::Store { source }),
            }
        }
        Ok(true)
    }

    /// Copies the blob and the record of `id` to `target`, unless `target` already holds them
    /// intact. The source's bytes are checked against the id before they are written, the
    /// record is copied as it is stored (its MIME type, file name and time are kept), and the
    /// copy is read back and checked again. A blob or record of `target` that is missing or
    /// does not match is replaced.
    ///
    /// # Errors
    /// - [`MediaError::InvalidId`] before any storage access;
    /// - [`MediaError::Corrupt`] when the source's bytes do not match the id, or the copy reads
    ///   back wrong;
    /// - [`MediaError::Store`] and the write errors of the target otherwise.
    pub async fn copy_to(&self, id: &str, target: &MediaStore) -> Result<CopyOutcome> {
        check_id(id)?;
        match target.get(id).await {
            Ok(_) => return Ok(CopyOutcome::AlreadyPresent),
            Err(MediaError::NotFound { .. } | MediaError::Corrupt { .. }) => {}
            Err(error) => return Err(error),
        }
        let (record, bytes) = match self.get(id).await {
            Ok(found) => found,
            Err(MediaError::NotFound { .. }) if self.record(id).await.is_err() => {
                return Ok(CopyOutcome::Orphan);
            }
            Err(error) => return Err(error),
        };
        let meta = self
            .objects
            .get(&meta_key(id))
            .await
            .map_err(|source| MediaError::Store { source })?
            .bytes()
            .await
            .map_err(|source| MediaError::Store { source })?;
        let overwrite = || PutOptions::from(PutMode::Overwrite);
        target
            .objects
            .put_opts(&blob_key(id), PutPayload::from(bytes), overwrite())
            .await
            .map_err(MediaError::from_write)?;
        target
            .objects
            .put_opts(&meta_key(id), PutPayload::from(meta), overwrite())
            .await
            .map_err(MediaError::from_write)?;
        let (copied, _) = target.get(id).await?;
        if copied != record {
            return Err(MediaError::Corrupt { id: id.to_owned() });
        }
        Ok(CopyOutcome::Copied { bytes: record.size })
    }
}
