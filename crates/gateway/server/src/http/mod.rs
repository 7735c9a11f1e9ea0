//! The operator HTTP API and the `/node` endpoint, as one axum router.
//!
//! Every handler decodes its request into and answers with a `gatehouse_api` type; no answer
//! is JSON built by hand (a test of the crate parses these files to hold it). One file per group
//! of routes:
//! - `health`: `/healthz`, `/readyz`;
//! - `nodes`: `/v1/nodes`, `/v1/nodes/setup-codes`, `/v1/replicas`;
//! - `audit`: `/v1/audit`;
//! - `usage`: `/v1/usage`;
//! - `auth`: the bearer token as a principal, and the one table of the scopes of each route;
//! - `channels`: `/channels/{name}/inbound` (signed by the platform, no bearer token),
//!   `/v1/channels` and its pairing routes;
//! - `keys`: `/v1/keys`;
//! - `limits`: the rate limits of API keys;
//! - `openai`: `/v1/models`, `/v1/chat/completions`, with errors in OpenAI's shape;
//! - `workspace_files`: `/v1/agents/{agent}/workspace/{path}`;
//! - `documents`: `/v1/agents/{agent}/files/{name}`;
//! - `sessions`: messages, turns, sessions, transcripts, the event stream, abort, stop, move;
//! - `media`: `/v1/media`;
//! - `memory`: `/v1/memory/...`;
//! - `skills`: `/v1/skills`;
//! - `metrics`: `/metrics`;
//! - `node_socket`: `/node`;
//! - `replica`: `/internal/replica/...`, what the other replicas of this Gateway forward here;
//! - `console`: `/console/...`, the web console, and its login sessions;
//! - `same_origin`: the `Sec-Fetch-Site` and `Origin` checks of browser requests;
//! - [`error`]: [`error::ApiError`], the error shape of every answer, and the fallback;
//! - `request_trace`: the request span and `X-Request-Id`.

mod audit;
pub(crate) mod auth;
mod channels;
pub(crate) mod console;
mod documents;
pub mod error;
mod health;
mod keys;
pub(crate) mod limits;
mod media;
mod memory;
mod metrics;
mod node_socket;
mod nodes;
mod openai;
mod replica;
mod request_trace;
mod same_origin;
mod sessions;
mod skills;
pub(crate) mod usage;
mod workspace_files;
mod worktree;

use gatehouse_protocol::error::ErrorCode;
use std::sync::Arc;

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;

use crate::GatewayState;
use crate::http::error::ApiError;

/// Returns the router: `/healthz`, `/readyz`, `/metrics`, `/node`, `/console/...` ([`console`]),
/// and `/v1/...` behind the operator bearer token, an API key whose scopes open the route, or a
/// console session cookie ([`auth`]). Every error it answers, its own rejections included, has the API's
/// JSON shape ([`error::json_error_shape`]), and carries an `X-Request-Id` under an
/// `http_request` span ([`request_trace::layer`]).
pub fn app(state: Arc<GatewayState>) -> Router {
    let v1 = Router::new()
        .route("/nodes", get(nodes::list_nodes))
        .route("/replicas", get(nodes::list_replicas))
        .route(
            "/nodes/setup-codes",
            post(nodes::create_setup_code)
                .route_layer(axum::middleware::from_fn(require_json_content_type)),
        )
        .route(
            "/agents/{agent}/workspace/{*path}",
            get(workspace_files::read_workspace_file),
        )
        .route("/audit", get(audit::list_audit))
        .route("/usage", get(usage::get_usage))
        .route(
            "/agents/{agent}/files/{name}",
            get(documents::get_document)
                .put(documents::put_document)
                .route_layer(axum::middleware::from_fn(require_json_content_type)),
        )
        .route("/sessions", get(sessions::list_sessions))
        .route(
            "/sessions/{key}/messages",
            post(sessions::post_message)
                .route_layer(axum::middleware::from_fn(require_json_content_type)),
        )
        .route("/sessions/{key}/transcript", get(sessions::get_transcript))
        .route("/sessions/{key}/events", get(sessions::session_events))
        .route("/sessions/{key}/abort", post(sessions::abort_session))
        .route("/sessions/{key}/stop", post(sessions::stop_session))
        .route("/sessions/{key}/move", post(sessions::move_session))
        .route(
            "/sessions/{key}",
            get(worktree::get_session).put(worktree::put_session),
        )
        .route("/sessions/{key}/worktree.tar", get(worktree::worktree_tar))
        .route("/sessions/{key}/worktree.json", get(worktree::worktree_log))
        .route(
            "/sessions/{key}/worktree/diff",
            get(worktree::worktree_diff),
        )
        .route(
            "/sessions/{key}/worktree/{*path}",
            get(worktree::read_worktree_file)
                .put(worktree::write_worktree_file)
                .layer(axum::extract::DefaultBodyLimit::max(
                    worktree::MAX_WORKTREE_FILE_BYTES,
                )),
        )
        .route("/turns/{turn_id}", get(sessions::get_turn))
        .route("/media", post(media::upload_media))
        .route(
            "/media/{media_id}",
            get(media::download_media).delete(media::delete_media),
        )
        .route("/memory/search", get(memory::search))
        .route("/skills", get(skills::list_skills))
        .route("/memory/get", get(memory::get))
        .route("/memory/status", get(memory::status))
        .route("/memory/reindex", post(memory::reindex))
        .route(
            "/keys",
            post(keys::create_key)
                .get(keys::list_keys)
                .route_layer(axum::middleware::from_fn(require_json_content_type)),
        )
        .route("/keys/{name}", axum::routing::delete(keys::revoke_key))
        .route("/channels", get(channels::list_channels))
        .route("/channels/{name}/pairings", get(channels::list_pairings))
        .route(
            "/channels/{name}/pairings/{code}/approve",
            post(channels::approve_pairing),
        )
        .route(
            "/channels/{name}/pairings/{code}",
            axum::routing::delete(channels::deny_pairing),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            auth::authenticate,
        ));
    // The OpenAI-compatible routes answer every error, the authentication layer's included, in
    // OpenAI's shape, so their layer wraps the authentication.
    let openai_routes = Router::new()
        .route("/models", get(openai::list_models))
        .route(
            "/chat/completions",
            post(openai::chat_completions)
                .route_layer(axum::middleware::from_fn(require_json_content_type))
                .layer(axum::extract::DefaultBodyLimit::max(
                    openai::MAX_COMPLETION_BODY_BYTES,
                )),
        )
        .layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            auth::authenticate,
        ))
        .layer(axum::middleware::map_response(openai::error_shape));
    let v1 = v1.merge(openai_routes);
    let metrics_state = Arc::clone(&state);
    let router = Router::new()
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .route("/metrics", get(metrics::metrics))
        .route("/node", get(node_socket::node_socket))
        .route(
            "/channels/{name}/inbound",
            post(channels::inbound).layer(axum::extract::DefaultBodyLimit::max(
                channels::MAX_INBOUND_BODY_BYTES,
            )),
        )
        .nest("/v1", v1)
        .nest(
            crate::cluster::peers::INTERNAL_PREFIX,
            replica::router(Arc::clone(&state)),
        )
        .fallback(error::not_found)
        .with_state(Arc::clone(&state))
        .layer(axum::middleware::map_response(error::json_error_shape))
        // The console answers HTML, so it sits outside the JSON error layer.
        .merge(console::router(state))
        .layer(axum::middleware::from_fn_with_state(
            metrics_state,
            crate::metrics::track_http,
        ));
    request_trace::layer(router)
}

/// Refuses a request body sent with a `Content-Type` other than JSON (`415
/// UNSUPPORTED_MEDIA_TYPE`), so a form or text body is never parsed as JSON by accident. A body
/// without `Content-Type` is accepted, as before.
async fn require_json_content_type(request: Request, next: Next) -> Response {
    let content_type = request
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .map(|value| value.to_str().unwrap_or_default().to_ascii_lowercase());
    let is_json = |value: &str| {
        let essence = value.split(';').next().unwrap_or_default().trim();
        essence == "application/json" || essence.ends_with("+json")
    };
    match content_type {
        Some(value) if !is_json(&value) => ApiError::new(
            ErrorCode::UnsupportedMediaType,
            "send the body with Content-Type: application/json",
        )
        .into_response(),
        Some(_) | None => next.run(request).await,
    }
}
