//! `POST /v1/media` and `GET /v1/media/{mediaId}`: upload and download of media.
//!
//! Uploads are read as a raw body, capped at `media_max_bytes` while they stream in (a declared
//! `Content-Length` over the cap is refused before reading), and stored in the content-addressed
//! media store (under the Gateway's media quota: `507 MEDIA_QUOTA_EXCEEDED`), and pinned so
//! checkpoint garbage collection never deletes them. [`media_error`] is the one place where media store errors become HTTP errors.

use gatehouse_api::error::PayloadTooLargeDetails;
use gatehouse_api::media::MediaDeleted;
use gatehouse_api::media::MediaUploaded;
use gatehouse_protocol::error::ErrorCode;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::body::Bytes;
use axum::extract::Path;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use futures_util::StreamExt;
use gatehouse_api::keys::Scope;
use gatehouse_media::MediaError;

use crate::GatewayState;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::intake::Incoming;
use crate::intake::IntakeError;
use crate::retention::ReleaseError;

/// The MIME type of an upload without `Content-Type`.
const DEFAULT_MIME_TYPE: &str = "application/octet-stream";

/// The header that carries the original file name of an upload.
const FILENAME_HEADER: &str = "x-filename";

pub(crate) async fn upload_media(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<MediaUploaded>, ApiError> {
    let max_bytes = state.config.media_max_bytes;
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > max_bytes) {
        return Err(payload_too_large(max_bytes));
    }
    let mime_type = match headers.get(header::CONTENT_TYPE) {
        Some(value) => value.to_str().map_err(|_| {
            ApiError::invalid_request("the Content-Type header must be printable ascii")
        })?,
        None => DEFAULT_MIME_TYPE,
    };
    // Header values may carry UTF-8 bytes; anything else is replaced before sanitizing.
    let filename = headers
        .get(FILENAME_HEADER)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let bytes = read_capped(body, max_bytes).await?;
    let stored = store_upload(&state, &principal, bytes, mime_type, filename.as_deref()).await;
    let record = stored?;
    state
        .audit
        .record_caller(
            principal.actor(),
            "media.upload",
            "succeeded",
            None,
            serde_json::json!({
                "mediaId": record.id,
                "size": record.size,
                "mimeType": record.mime_type,
            }),
        )
        .await;
    Ok(Json(MediaUploaded {
        media_id: record.id,
        sha256: record.sha256,
        size: record.size,
        mime_type: record.mime_type,
    }))
}

/// `DELETE /v1/media/{mediaId}`: removes the caller's upload of the blob (an admin's request
/// removes every upload of it), so it no longer counts against the caller's media share; once no
/// upload holds the blob, it is collected unless a turn or a checkpoint refers to it. Audited as
/// `media.delete`.
///
/// # Errors
/// `404 MEDIA_NOT_FOUND` when the caller holds no upload of it; a store failure.
pub(crate) async fn delete_media(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(media_id): Path<String>,
) -> Result<Json<MediaDeleted>, ApiError> {
    gatehouse_media::check_id(&media_id).map_err(media_error)?;
    let owner = match principal.has(Scope::Admin) {
        true => None,
        false => Some(principal.owner()),
    };
    let released = state
        .retention
        .release_upload(owner.as_deref(), &media_id)
        .await
        .map_err(|error| match error {
            ReleaseError::Busy => {
                ApiError::new(ErrorCode::StoreUnavailable, error.to_string()).with_retry_after(1)
            }
            ReleaseError::Store(error) => crate::http::error::store_error(&error),
        })?;
    if !released.released {
        return Err(ApiError::new(
            ErrorCode::MediaNotFound,
            format!("no upload of media {media_id} is yours to delete"),
        ));
    }
    state
        .audit
        .record_caller(
            principal.actor(),
            "media.delete",
            "succeeded",
            None,
            serde_json::json!({"mediaId": media_id, "unpinned": released.unpinned}),
        )
        .await;
    Ok(Json(MediaDeleted {
        deleted: true,
        unpinned: released.unpinned,
    }))
}

pub(crate) async fn download_media(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(media_id): Path<String>,
) -> Result<Response, ApiError> {
    principal
        .check_media(state.store.as_ref(), &media_id)
        .await?;
    let (record, bytes) = state.media.get(&media_id).await.map_err(media_error)?;
    let content_type = HeaderValue::from_str(&record.mime_type)
        .unwrap_or(HeaderValue::from_static(DEFAULT_MIME_TYPE));
    // The stored name is sanitized to `[A-Za-z0-9._-]`, so it needs no quoting rules.
    let disposition = match &record.filename {
        Some(filename) => format!("attachment; filename=\"{filename}\""),
        None => String::from("attachment"),
    };
    let disposition =
        HeaderValue::from_str(&disposition).unwrap_or(HeaderValue::from_static("attachment"));
    Ok((untrusted_download_headers(content_type, disposition), bytes).into_response())
}

/// The `Content-Security-Policy` of every download whose bytes came from outside the Gateway:
/// nothing loads, nothing runs, and the document is sandboxed even if a browser renders it.
const UNTRUSTED_CONTENT_POLICY: &str = "default-src 'none'; sandbox";

/// Returns the headers of a download of untrusted bytes (media, Harness workspace files): its
/// type, a download disposition, `nosniff`, and [`UNTRUSTED_CONTENT_POLICY`], so that HTML
/// written by the Harness is never rendered as a page of the Gateway's origin.
pub(crate) fn untrusted_download_headers(
    content_type: HeaderValue,
    disposition: HeaderValue,
) -> [(header::HeaderName, HeaderValue); 4] {
    [
        (header::CONTENT_TYPE, content_type),
        (header::CONTENT_DISPOSITION, disposition),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(UNTRUSTED_CONTENT_POLICY),
        ),
    ]
}

/// Reads `body` into memory, refusing it as soon as it passes `max_bytes`: at most `max_bytes`
/// plus one chunk in flight is ever held.
async fn read_capped(body: Body, max_bytes: u64) -> Result<Bytes, ApiError> {
    let mut stream = body.into_data_stream();
    let mut first: Option<Bytes> = None;
    let mut buffer: Vec<u8> = Vec::new();
    let mut n_bytes: u64 = 0;
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(error) => {
                tracing::debug!(error = %error, "cannot read an upload body");
                return Err(ApiError::invalid_request("cannot read the request body"));
            }
        };
        n_bytes = n_bytes.saturating_add(chunk.len() as u64);
        if n_bytes > max_bytes {
            return Err(payload_too_large(max_bytes));
        }
        // A body that arrives in one chunk is kept without a copy.
        match first.take() {
            None if buffer.is_empty() => first = Some(chunk),
            None => append(&mut buffer, &chunk, max_bytes),
            Some(previous) => {
                append(&mut buffer, &previous, max_bytes);
                append(&mut buffer, &chunk, max_bytes);
            }
        }
    }
    match first {
        Some(only) => Ok(only),
        None => Ok(Bytes::from(buffer)),
    }
}

/// Appends `chunk`, growing `buffer` by doubling but never past `max_bytes` of capacity (the
/// caller has checked that the data fits).
fn append(buffer: &mut Vec<u8>, chunk: &[u8], max_bytes: u64) {
    let needed = buffer.len() + chunk.len();
    if needed > buffer.capacity() {
        let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
        let target = needed
            .max(buffer.capacity().saturating_mul(2))
            .min(cap)
            .max(needed);
        buffer.reserve_exact(target - buffer.len());
    }
    buffer.extend_from_slice(chunk);
}

fn payload_too_large(max_bytes: u64) -> ApiError {
    ApiError {
        // A number always serializes.
        details: serde_json::to_value(PayloadTooLargeDetails { max_bytes }).ok(),
        ..ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the upload is larger than {max_bytes} bytes"),
        )
    }
}

/// Maps a media store error to its HTTP error; server faults are logged here, where the cause
/// is known, and answered with a generic body.
fn media_error(error: MediaError) -> ApiError {
    match error {
        MediaError::InvalidId => ApiError::new(
            ErrorCode::InvalidMediaId,
            "a media id is 64 lowercase hex characters",
        ),
        MediaError::InvalidMimeType => ApiError::new(ErrorCode::InvalidMimeType, error.to_string()),
        MediaError::NotFound { .. } => ApiError::not_found(error.to_string()),
        MediaError::QuotaExceeded { .. } => {
            tracing::warn!(error = %error, "refused an upload over the media quota");
            ApiError::new(
                error.code(),
                format!("{error}; raise --media-quota-bytes or remove media"),
            )
        }
        MediaError::StorageFull { .. } => {
            tracing::error!(error = ?error, "the media store is full");
            ApiError::new(
                ErrorCode::StorageFull,
                "the gateway media store is out of space",
            )
        }
        MediaError::Corrupt { .. }
        | MediaError::Open(_)
        | MediaError::Store { .. }
        | MediaError::Encode(_)
        | MediaError::Join(_) => {
            // The debug form carries the cause chain (the object store's own error).
            tracing::error!(error = ?error, code = %error.code(), "media store failure");
            ApiError::internal(error.code())
        }
    }
}

/// Stores an upload under the caller's media share, pinned, and granted to the caller's key
/// ([`crate::intake`]).
async fn store_upload(
    state: &GatewayState,
    principal: &Principal,
    bytes: bytes::Bytes,
    mime_type: &str,
    filename: Option<&str>,
) -> Result<gatehouse_media::MediaRecord, ApiError> {
    let owner = principal.owner();
    let grantee = principal.media_grantee();
    let taken = state
        .intake()
        .take(Incoming {
            owner: &owner,
            quota_bytes: principal.key().map(|key| state.media_share(key)),
            grantee: grantee.as_deref(),
            pin: "upload",
            bytes,
            mime_type,
            filename,
        })
        .await;
    match taken {
        Ok(record) => Ok(record),
        Err(IntakeError::OverShare {
            used_bytes,
            new_bytes,
            quota_bytes,
        }) => {
            tracing::info!(
                actor = principal.actor(),
                used_bytes,
                new_bytes,
                quota_bytes,
                "refused an upload over the key's media share"
            );
            Err(ApiError::new(
                ErrorCode::KeyMediaQuotaExceeded,
                format!(
                    "this key has {used_bytes} bytes of media (its uploads and its sessions' checkpoints and worktrees), \
                     and {new_bytes} more would pass its media share of {quota_bytes} bytes; delete uploads it no longer needs \
                     (DELETE /v1/media/{{mediaId}}) or ask an operator for a larger share"
                ),
            ))
        }
        Err(IntakeError::Media(error)) => Err(media_error(error)),
        Err(IntakeError::Store(error)) => Err(crate::http::error::store_error(&error)),
        Err(IntakeError::Hash(error)) => {
            tracing::error!(error = %error, "cannot hash an upload");
            Err(ApiError::internal(ErrorCode::Internal))
        }
    }
}
