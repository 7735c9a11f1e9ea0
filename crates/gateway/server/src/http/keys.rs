//! `POST /v1/keys`, `GET /v1/keys`, `DELETE /v1/keys/{name}`: API keys (admin only, see
//! [`crate::http::auth::ROUTE_SCOPES`]).
//!
//! A new key's secret is [`KEY_PREFIX`] and 32 random bytes in base64url; it is answered once
//! and only its SHA-256 is stored. The audit rows (`key.create`, `key.revoke`) carry the key's
//! name, scopes, prefix and expiry, never the secret.

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::Path;
use axum::extract::State;
use gatehouse_api::keys::ApiKeyCreated;
use gatehouse_api::keys::ApiKeyList;
use gatehouse_api::keys::ApiKeyParams;
use gatehouse_api::keys::ApiKeyRevoked;
use gatehouse_api::keys::ApiKeySummary;
use gatehouse_api::keys::Scope;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::StoreError;
use gatehouse_store::records::NewApiKey;

use crate::GatewayState;
use crate::http::auth::KEY_PREFIX;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::http::error::store_error;
use crate::secrets::random_token;
use crate::secrets::sha256_hex;
use gatehouse_protocol::time::now_ms;

/// The longest key name, in bytes.
pub(crate) const MAX_KEY_NAME_BYTES: usize = 64;

/// The longest session-key prefix of a key, in bytes.
pub(crate) const MAX_SESSION_PREFIX_BYTES: usize = 64;

/// The longest `expiresInSeconds`: ten years.
pub(crate) const MAX_EXPIRES_IN_SECONDS: u64 = 10 * 365 * 24 * 60 * 60;

pub(crate) async fn create_key(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    body: axum::body::Bytes,
) -> Result<Json<ApiKeyCreated>, ApiError> {
    let params: ApiKeyParams = serde_json::from_slice(&body)
        .map_err(|error| ApiError::invalid_request(format!("invalid body: {error}")))?;
    check_name(&params.name)?;
    let mut scopes = params.scopes;
    scopes.sort_unstable();
    scopes.dedup();
    if scopes.is_empty() {
        return Err(ApiError::invalid_request(
            "scopes must name at least one of chat, read, documents, admin",
        ));
    }
    if let Some(prefix) = &params.sessions {
        check_session_prefix(prefix, &scopes)?;
    }
    let now = now_ms();
    let expires_at_ms = match params.expires_in_seconds {
        None => None,
        Some(seconds) if (1..=MAX_EXPIRES_IN_SECONDS).contains(&seconds) => {
            Some(now + i64::try_from(seconds * 1000).unwrap_or(i64::MAX / 2))
        }
        Some(_) => {
            return Err(ApiError::invalid_request(format!(
                "expiresInSeconds must be between 1 and {MAX_EXPIRES_IN_SECONDS}"
            )));
        }
    };
    if params.requests_per_minute == Some(0) || params.concurrent_turns == Some(0) {
        return Err(ApiError::invalid_request(
            "requestsPerMinute and concurrentTurns must be at least 1 (leave them out for no limit)",
        ));
    }
    if params
        .concurrent_turns
        .is_some_and(|turns| turns > MAX_CONCURRENT_TURNS)
    {
        return Err(ApiError::invalid_request(format!(
            "concurrentTurns must be at most {MAX_CONCURRENT_TURNS} (leave it out for no limit)"
        )));
    }
    if params
        .max_streams
        .is_some_and(|streams| !(1..=crate::shares::MAX_STREAMS_LIMIT).contains(&streams))
    {
        return Err(ApiError::invalid_request(format!(
            "maxStreams must be between 1 and {} (leave it out for the Gateway's default share)",
            crate::shares::MAX_STREAMS_LIMIT
        )));
    }
    if params
        .media_quota_bytes
        .is_some_and(|bytes| i64::try_from(bytes).is_err())
    {
        return Err(ApiError::invalid_request(format!(
            "mediaQuotaBytes must be at most {} (leave it out for the Gateway's default share)",
            i64::MAX
        )));
    }
    if params
        .tokens_per_day
        .is_some_and(|tokens| tokens == 0 || i64::try_from(tokens).is_err())
    {
        return Err(ApiError::invalid_request(format!(
            "tokensPerDay must be between 1 and {} (leave it out for no budget)",
            i64::MAX
        )));
    }
    let secret = random_token().map_err(|error| {
        tracing::error!(error = %error, "cannot draw a key secret");
        ApiError::internal(ErrorCode::Internal)
    })?;
    let secret = format!("{KEY_PREFIX}{secret}");
    let key = NewApiKey {
        name: params.name,
        secret_sha256: sha256_hex(secret.as_bytes()),
        scopes,
        session_prefix: params.sessions,
        created_at_ms: now,
        expires_at_ms,
        last_used_at_ms: None,
        requests_per_minute: params.requests_per_minute,
        concurrent_turns: params.concurrent_turns,
        max_streams: params.max_streams,
        media_quota_bytes: params.media_quota_bytes,
        tokens_per_day: params.tokens_per_day,
    };
    match state.store.insert_api_key(&key).await {
        Ok(()) => {}
        Err(StoreError::AlreadyExists { .. }) => {
            return Err(ApiError::new(
                ErrorCode::AlreadyExists,
                format!(
                    "a key named {:?} exists; revoke it first or choose another name",
                    key.name
                ),
            ));
        }
        Err(error) => return Err(store_error(&error)),
    }
    let scope_names: Vec<&str> = key.scopes.iter().map(|scope| scope.as_str()).collect();
    state
        .audit
        .record_caller(
            principal.actor(),
            "key.create",
            "succeeded",
            None,
            serde_json::json!({
                "name": key.name,
                "scopes": scope_names,
                "sessions": key.session_prefix,
                "expiresAtMs": key.expires_at_ms,
                "requestsPerMinute": key.requests_per_minute,
                "concurrentTurns": key.concurrent_turns,
                "maxStreams": key.max_streams,
                "mediaQuotaBytes": key.media_quota_bytes,
                "tokensPerDay": key.tokens_per_day,
            }),
        )
        .await;
    tracing::info!(key = %key.name, scopes = ?scope_names, "api key created");
    Ok(Json(ApiKeyCreated {
        name: key.name,
        key: secret,
        scopes: key.scopes,
        sessions: key.session_prefix,
        expires_at_ms: key.expires_at_ms,
        requests_per_minute: key.requests_per_minute,
        concurrent_turns: key.concurrent_turns,
        max_streams: key.max_streams,
        media_quota_bytes: key.media_quota_bytes,
        tokens_per_day: key.tokens_per_day,
    }))
}

pub(crate) async fn list_keys(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<ApiKeyList>, ApiError> {
    let keys = state
        .store
        .api_keys()
        .await
        .map_err(|error| store_error(&error))?;
    let keys = keys
        .into_iter()
        .map(|key| ApiKeySummary {
            name: key.name,
            scopes: key.scopes,
            sessions: key.session_prefix,
            created_at_ms: key.created_at_ms,
            expires_at_ms: key.expires_at_ms,
            last_used_at_ms: key.last_used_at_ms,
            requests_per_minute: key.requests_per_minute,
            concurrent_turns: key.concurrent_turns,
            max_streams: key.max_streams,
            media_quota_bytes: key.media_quota_bytes,
            tokens_per_day: key.tokens_per_day,
        })
        .collect();
    Ok(Json(ApiKeyList { keys }))
}

pub(crate) async fn revoke_key(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path(name): Path<String>,
) -> Result<Json<ApiKeyRevoked>, ApiError> {
    check_name(&name)?;
    let revoked = state
        .store
        .revoke_api_key(&name)
        .await
        .map_err(|error| store_error(&error))?;
    state
        .audit
        .record_caller(
            principal.actor(),
            "key.revoke",
            "succeeded",
            None,
            serde_json::json!({"name": name, "revoked": revoked}),
        )
        .await;
    tracing::info!(key = %name, revoked, "api key revoked");
    Ok(Json(ApiKeyRevoked { revoked }))
}

/// Key names: 1 to [`MAX_KEY_NAME_BYTES`] letters, digits, `.`, `_` and `-`, starting with a
/// letter or digit, so a name is safe in a log line, an audit row and a URL path.
fn check_name(name: &str) -> Result<(), ApiError> {
    let valid = !name.is_empty()
        && name.len() <= MAX_KEY_NAME_BYTES
        && name
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    match valid {
        true => Ok(()),
        false => Err(ApiError::invalid_request(format!(
            "the key name must be 1 to {MAX_KEY_NAME_BYTES} letters, digits, '.', '_' or '-', starting with a letter or digit"
        ))),
    }
}

/// The largest concurrent-turns limit: each admission of a limited key checks each of its
/// unended turns in the store.
pub(crate) const MAX_CONCURRENT_TURNS: u32 = 64;

/// A session prefix: 1 to [`MAX_SESSION_PREFIX_BYTES`] characters a session key may hold, on a
/// key whose only scope is `chat`: `read` reads every session, `admin` does everything, so a
/// prefix beside them would promise an isolation the key does not have.
fn check_session_prefix(prefix: &str, scopes: &[Scope]) -> Result<(), ApiError> {
    if scopes != [Scope::Chat] {
        return Err(ApiError::invalid_request(
            "sessions limits the chat scope: give it to a key whose only scope is chat",
        ));
    }
    let valid = !prefix.is_empty()
        && prefix.len() <= MAX_SESSION_PREFIX_BYTES
        && prefix
            .chars()
            .next()
            .is_some_and(|first| first.is_ascii_alphanumeric())
        && prefix
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'));
    match valid {
        true => Ok(()),
        false => Err(ApiError::invalid_request(format!(
            "sessions must be 1 to {MAX_SESSION_PREFIX_BYTES} letters, digits, '.', '_', ':' or '-', starting with a letter or digit"
        ))),
    }
}
