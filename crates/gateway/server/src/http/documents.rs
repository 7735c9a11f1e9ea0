//! `GET/PUT /v1/agents/{agent}/files/{name}`: the four Agent documents.
//!
//! The handlers decode the request, call [`crate::documents`] and map the result; the rules,
//! the audit and the choice of codes are documented there. The checks run in this order, and
//! each refusal happens before any call reaches the node:
//! 1. `sec-fetch-site: cross-site` (any case) is `403 FORBIDDEN`, audited as a denial.
//! 2. An unknown agent is `404 NOT_FOUND`; an unknown name is `400 INVALID_REQUEST`.
//! 3. (PUT) A body over 48 KiB is `413 PAYLOAD_TOO_LARGE`, decided on the raw bytes as they
//!    stream in (a declared `Content-Length` over the limit is refused without reading).
//! 4. (PUT) A body that is not exactly `{"content": <string>}` is `400 INVALID_REQUEST`; invalid
//!    content is `400 INVALID_REQUEST` with `details: {"path": "/content", "code": ...}`.

use gatehouse_api::documents::Document;
use gatehouse_api::documents::DocumentWritten;
use gatehouse_api::error::ContentErrorDetails;
use gatehouse_protocol::error::ErrorCode;
use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::body::Body;
use axum::extract::Path;
use axum::extract::State;
use axum::extract::rejection::PathRejection;
use axum::http::HeaderMap;
use axum::http::header;
use futures_util::StreamExt;

use crate::GatewayState;
use crate::documents;
use crate::documents::DocumentError;
use crate::documents::DocumentName;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::http::same_origin;

pub(crate) async fn get_document(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
) -> Result<Json<Document>, ApiError> {
    let (_agent, name) = admit(&state, &principal, &headers, path, documents::READ_ACTION).await?;
    let content = documents::read_document(state.workspace.as_ref(), name).await?;
    Ok(Json(Document {
        name: name.as_str().to_owned(),
        content: content.into_string(),
    }))
}

pub(crate) async fn put_document(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    body: Body,
) -> Result<Json<DocumentWritten>, ApiError> {
    let (agent, name) = admit(&state, &principal, &headers, path, documents::WRITE_ACTION).await?;
    let raw = read_limited_body(&headers, body).await?;
    let content = documents::decode_write_body(&raw)?;
    let size = documents::write_document(
        state.workspace.as_ref(),
        &state.audit,
        principal.actor(),
        &agent,
        name,
        &content,
    )
    .await?;
    Ok(Json(DocumentWritten {
        name: name.as_str().to_owned(),
        size: u64::try_from(size).unwrap_or(u64::MAX),
    }))
}

/// Refuses cross-site requests (audited), unknown agents and unknown names.
async fn admit(
    state: &GatewayState,
    principal: &Principal,
    headers: &HeaderMap,
    path: Result<Path<(String, String)>, PathRejection>,
    action: &str,
) -> Result<(String, DocumentName), ApiError> {
    if same_origin::is_cross_site(headers) {
        let (agent, name) = match &path {
            Ok(Path((agent, name))) => (Some(agent.as_str()), Some(name.as_str())),
            Err(_) => (None, None),
        };
        documents::record_denial(
            &state.audit,
            principal.actor(),
            action,
            agent,
            name,
            ErrorCode::Forbidden.as_str(),
        )
        .await;
        return Err(ApiError::new(
            ErrorCode::Forbidden,
            "cross-site requests are refused (sec-fetch-site: cross-site)",
        ));
    }
    let Path((agent, name)) = match path {
        Ok(path) => path,
        Err(rejection) => {
            return Err(ApiError::invalid_request(format!(
                "invalid path: {}",
                rejection.body_text()
            )));
        }
    };
    documents::check_agent(&agent)?;
    let name = DocumentName::parse(&name)?;
    Ok((agent, name))
}

/// Reads the whole body, refusing it as soon as it is over [`documents::MAX_BODY_BYTES`], so a
/// streamed body without `Content-Length` is bounded too.
async fn read_limited_body(headers: &HeaderMap, body: Body) -> Result<Vec<u8>, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    if declared.is_some_and(|length| length > documents::MAX_BODY_BYTES as u64) {
        return Err(DocumentError::BodyTooLarge.into());
    }
    let mut stream = body.into_data_stream();
    let mut raw = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(chunk) => chunk,
            Err(error) => {
                tracing::debug!(error = %error, "cannot read a document body");
                return Err(ApiError::invalid_request("cannot read the request body"));
            }
        };
        if raw.len() + chunk.len() > documents::MAX_BODY_BYTES {
            return Err(DocumentError::BodyTooLarge.into());
        }
        raw.extend_from_slice(&chunk);
    }
    Ok(raw)
}

impl From<DocumentError> for ApiError {
    fn from(error: DocumentError) -> Self {
        match error {
            DocumentError::UnknownAgent { .. } => ApiError::not_found(error.to_string()),
            DocumentError::UnknownName { .. } => ApiError::invalid_request(error.to_string()),
            DocumentError::BodyTooLarge => {
                ApiError::new(ErrorCode::PayloadTooLarge, error.to_string())
            }
            DocumentError::BodyNotObject => ApiError::invalid_request(error.to_string()),
            DocumentError::MalformedBody(ref source) => {
                ApiError::invalid_request(format!("{error}: {source}"))
            }
            DocumentError::InvalidContent(ref content_error) => ApiError {
                details: Some(content_details(content_error)),
                ..ApiError::invalid_request(error.to_string())
            },
            DocumentError::StoredContentInvalid(ref content_error) => ApiError {
                details: Some(content_details(content_error)),
                ..ApiError::new(
                    ErrorCode::InvalidDocument,
                    format!("{error}; fix the file in the agent workspace or replace it"),
                )
            },
            DocumentError::Workspace(workspace_error) => ApiError::from(workspace_error),
        }
    }
}

fn content_details(content_error: &documents::ContentError) -> serde_json::Value {
    let details = ContentErrorDetails {
        path: String::from(documents::CONTENT_POINTER),
        code: String::from(content_error.detail_code()),
    };
    // Two strings always serialize.
    serde_json::to_value(details).unwrap_or_default()
}
