//! `GET /v1/agents/{agent}/workspace/{path…}`: the raw bytes of an Agent-workspace file, read
//! from the Harness through the workspace service under the path policy, as an inert download.

use std::sync::Arc;

use axum::extract::Path;
use axum::extract::State;
use axum::http::HeaderValue;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::GatewayState;
use crate::http::error::ApiError;

/// Answers the file's bytes with its MIME type and the headers of an untrusted download; the
/// node's codes become their HTTP errors ([`ApiError`]'s `From<WorkspaceError>`).
pub(crate) async fn read_workspace_file(
    State(state): State<Arc<GatewayState>>,
    Path((agent, path)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    if agent != "main" {
        return Err(ApiError::not_found(format!(
            "no agent {agent:?}; the agent is \"main\""
        )));
    }
    let file = state.workspace.fetch(&path).await?;
    let content_type = HeaderValue::from_str(&file.mime_type)
        .unwrap_or(HeaderValue::from_static("application/octet-stream"));
    let headers = crate::http::media::untrusted_download_headers(
        content_type,
        HeaderValue::from_static("attachment"),
    );
    Ok((headers, file.bytes).into_response())
}
