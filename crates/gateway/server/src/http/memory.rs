//! `/v1/memory/...`: search, status and reindex of the memory index.

use gatehouse_api::error::ErrorBody;
use gatehouse_api::error::ErrorResponse;
use gatehouse_api::memory::MemoryGetQuery;
use gatehouse_api::memory::MemoryReadResult;
use gatehouse_api::memory::MemorySearchAnswer;
use gatehouse_api::memory::MemorySearchQuery;
use gatehouse_api::memory::MemoryStatus;
use gatehouse_api::memory::ReindexLine;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::memory::WORKSPACE_MEMORY;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::Query;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;

use crate::GatewayState;
use crate::cluster::wire::MemoryGetRequest;
use crate::http::error::ApiError;
use crate::memory::MemoryServiceError;

fn api_error(error: &MemoryServiceError) -> ApiError {
    let status = match error {
        MemoryServiceError::WorkspaceUnavailable(_) | MemoryServiceError::SearchUnavailable(_) => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        MemoryServiceError::Remote(_) => StatusCode::BAD_GATEWAY,
        MemoryServiceError::Index(_) if error.code() == ErrorCode::StorageFull => {
            StatusCode::INSUFFICIENT_STORAGE
        }
        // The index's PostgreSQL database is down: the store's outage status.
        MemoryServiceError::Index(_) if error.code() == ErrorCode::StoreUnavailable => {
            StatusCode::SERVICE_UNAVAILABLE
        }
        MemoryServiceError::Index(_) => StatusCode::INTERNAL_SERVER_ERROR,
    };
    ApiError::with_text_code(status, error.code(), error.to_string())
}

/// `GET /v1/memory/search?q=&limit=&minScore=`.
pub(crate) async fn search(
    State(state): State<Arc<GatewayState>>,
    Query(query): Query<MemorySearchQuery>,
) -> Result<Json<MemorySearchAnswer>, ApiError> {
    let Some(q) = query.q.filter(|q| !q.trim().is_empty()) else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "pass the query as q=",
        ));
    };
    let mut options = gatehouse_memory::search::SearchOptions::default();
    if let Some(limit) = query.limit {
        options.max_results = limit.clamp(1, 100);
    }
    if let Some(min_score) = query.min_score {
        options.min_score = min_score;
    }
    let answer = state
        .memory
        .search(&q, options)
        .await
        .map_err(|error| api_error(&error))?;
    Ok(Json(answer))
}

/// `GET /v1/memory/get?path=&from=&lines=`: lines of a memory file, read from the Harness now
/// (never from the index), through a node linked here or, without one, through the replica
/// that holds one.
pub(crate) async fn get(
    State(state): State<Arc<GatewayState>>,
    Query(query): Query<MemoryGetQuery>,
) -> Result<Json<MemoryReadResult>, ApiError> {
    let Some(path) = query.path else {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "pass the memory file as path=",
        ));
    };
    if let Some(url) = state
        .peers
        .forward_target(&state.registry, &[WORKSPACE_MEMORY])
        .await
    {
        let request = MemoryGetRequest {
            path,
            from: query.from,
            lines: query.lines,
        };
        return state
            .peers
            .memory_get(&url, &request)
            .await
            .map(Json)
            .map_err(ApiError::from);
    }
    let read = state
        .memory
        .get(&path, query.from, query.lines)
        .await
        .map_err(|error| match &error {
            MemoryServiceError::Remote(remote) => {
                ApiError::from(crate::workspace::WorkspaceError::Remote(remote.clone()))
            }
            _ => api_error(&error),
        })?;
    Ok(Json(read))
}

/// `GET /v1/memory/status`.
pub(crate) async fn status(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<MemoryStatus>, ApiError> {
    let status = state
        .memory
        .status()
        .await
        .map_err(|error| api_error(&error))?;
    Ok(Json(status))
}

/// `POST /v1/memory/reindex`: rebuilds the index. The answer streams one JSON line per file
/// (`{"done","total"}`) and ends with `{"status":…}` or `{"error":{"code","message"}}`.
pub(crate) async fn reindex(State(state): State<Arc<GatewayState>>) -> Response {
    use futures_util::StreamExt;
    let (progress, updates) = tokio::sync::mpsc::channel(64);
    let memory = Arc::clone(&state.memory);
    // The rebuild runs on its own; its progress sender is dropped when it ends, which ends the
    // progress lines, and then its outcome is the last line.
    let outcome = tokio::spawn(async move { memory.reindex(progress).await });
    let lines = futures_util::stream::unfold(updates, |mut updates| async move {
        let update = updates.recv().await?;
        Some((ReindexLine::Progress(update), updates))
    })
    .chain(futures_util::stream::once(async move {
        let failed = |code: &str, message: String| {
            ReindexLine::Failed(ErrorResponse {
                error: ErrorBody {
                    code: code.to_owned(),
                    message,
                    details: None,
                },
            })
        };
        match outcome.await {
            Ok(Ok(status)) => ReindexLine::Finished { status },
            Ok(Err(error)) => failed(error.code(), error.to_string()),
            Err(_) => failed(
                ErrorCode::Internal.as_str(),
                String::from("the rebuild stopped"),
            ),
        }
    }))
    .map(|line| {
        // The lines hold only strings, numbers and booleans, so they always serialize.
        let mut text = serde_json::to_string(&line).unwrap_or_default();
        text.push('\n');
        Ok::<_, std::io::Error>(text)
    });
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
}
