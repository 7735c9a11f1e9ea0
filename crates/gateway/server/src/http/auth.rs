//! Who sends a `/v1` request, and whether the route is theirs to call.
//!
//! [`authenticate`], the layer in front of every `/v1` route, resolves the bearer token to a
//! [`Principal`]: the operator token (the bootstrap admin key, compared in constant time) or an
//! API key, found by the SHA-256 of its secret in the store on every request, so a key revoked
//! or expired on any replica is refused by the next request (`401 UNAUTHORIZED`), with nothing
//! cached. It then judges the route by [`ROUTE_SCOPES`], the one table of which scopes open
//! which route: a route outside the key's scopes, or a session outside the session-key prefix a
//! `chat` key is limited to, is `403 SCOPE_DENIED` (audited with the key's name, at most
//! [`crate::audit::LIMITED_ROWS_PER_WINDOW`] rows per key per minute). The principal travels to
//! the handler as a request extension, so each audit row of the request names the key; nothing
//! about a key but its name is ever logged or audited. A key's requests per minute are counted
//! here too ([`crate::http::limits`]).
//!
//! A request without an `Authorization` header may instead carry the console's session cookie
//! ([`crate::http::console`]): the session names the key that logged in, which is found in the
//! store again on every request exactly like a bearer key, so revocation and expiry apply to
//! console users at once. A state-changing request (any method but `GET` and `HEAD`) made with
//! the cookie must also come from the console's own origin ([`same_origin::check`]) and echo the
//! session's CSRF token in `X-Gatehouse-Csrf`; otherwise it is `403 FORBIDDEN` before any
//! handler runs.

use std::sync::Arc;

use axum::RequestExt;
use axum::extract::MatchedPath;
use axum::extract::RawPathParams;
use axum::extract::Request;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::IntoResponse;
use axum::response::Response;
use gatehouse_api::keys::Scope;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_store::records::ApiKeyRecord;

use crate::GatewayState;
use crate::audit::Limited;
use crate::http::console::session::COOKIE_NAME;
use crate::http::console::session::ConsoleLease;
use crate::http::console::session::ConsoleSession;
use crate::http::console::session::Identity;
use crate::http::console::session::cookie_value;
use crate::http::error::ApiError;
use crate::http::error::store_error;
use crate::http::same_origin;
use crate::secrets::secrets_equal;
use crate::secrets::sha256_hex;
use gatehouse_protocol::time::now_ms;

/// The start of every API key's secret, so a leaked one is recognisable (and a secret scanner
/// can look for it).
pub(crate) const KEY_PREFIX: &str = "ghk_";

/// The header a state-changing request made with the console's cookie carries the session's
/// CSRF token in.
pub(crate) const CSRF_HEADER: &str = "x-gatehouse-csrf";

/// The audit actor of the operator token.
pub(crate) const OPERATOR_ACTOR: &str = "operator";

/// How a route names the session it works on, for the prefix a `chat` key is limited to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SessionOf {
    /// The route works on no one session.
    Nothing,
    /// The `{key}` of the path.
    PathKey,
    /// The session of the turn `{turn_id}` of the path.
    Turn,
    /// The handler chooses the session and checks it with [`Principal::check_session`].
    Handler,
}

/// One row of [`ROUTE_SCOPES`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct RouteScope {
    /// The method.
    pub(crate) method: &'static str,
    /// The route template, as `API.md` writes it.
    pub(crate) path: &'static str,
    /// The scopes that open it besides `admin`, which opens every route.
    pub(crate) scopes: &'static [Scope],
    /// The session a `chat` key's prefix is checked against.
    pub(crate) session: SessionOf,
}

const CHAT: &[Scope] = &[Scope::Chat];
const CHAT_READ: &[Scope] = &[Scope::Chat, Scope::Read];
const READ: &[Scope] = &[Scope::Read];
const READ_DOCUMENTS: &[Scope] = &[Scope::Read, Scope::Documents];
const DOCUMENTS: &[Scope] = &[Scope::Documents];
const ADMIN: &[Scope] = &[];

const fn route(
    method: &'static str,
    path: &'static str,
    scopes: &'static [Scope],
    session: SessionOf,
) -> RouteScope {
    RouteScope {
        method,
        path,
        scopes,
        session,
    }
}

/// Which scopes open each `/v1` route (`admin` opens all of them). A route missing here is open
/// to `admin` only, so a new route is closed until it is listed. `read` opens every `GET` route
/// but `GET /v1/keys`, which stays with `admin` like the rest of key management.
pub(crate) const ROUTE_SCOPES: &[RouteScope] = &[
    route("GET", "/v1/nodes", READ, SessionOf::Nothing),
    route("GET", "/v1/replicas", READ, SessionOf::Nothing),
    route("POST", "/v1/nodes/setup-codes", ADMIN, SessionOf::Nothing),
    route(
        "GET",
        "/v1/agents/{agent}/workspace/{*path}",
        READ,
        SessionOf::Nothing,
    ),
    route("GET", "/v1/audit", READ, SessionOf::Nothing),
    route("GET", "/v1/usage", READ, SessionOf::Nothing),
    route(
        "GET",
        "/v1/agents/{agent}/files/{name}",
        READ_DOCUMENTS,
        SessionOf::Nothing,
    ),
    route(
        "PUT",
        "/v1/agents/{agent}/files/{name}",
        DOCUMENTS,
        SessionOf::Nothing,
    ),
    route("GET", "/v1/sessions", READ, SessionOf::Nothing),
    route(
        "POST",
        "/v1/sessions/{key}/messages",
        CHAT,
        SessionOf::PathKey,
    ),
    route(
        "GET",
        "/v1/sessions/{key}/transcript",
        CHAT_READ,
        SessionOf::PathKey,
    ),
    route(
        "GET",
        "/v1/sessions/{key}/events",
        CHAT_READ,
        SessionOf::PathKey,
    ),
    route("POST", "/v1/sessions/{key}/abort", CHAT, SessionOf::PathKey),
    route("POST", "/v1/sessions/{key}/stop", ADMIN, SessionOf::Nothing),
    route("POST", "/v1/sessions/{key}/move", ADMIN, SessionOf::Nothing),
    route("GET", "/v1/sessions/{key}", CHAT_READ, SessionOf::PathKey),
    route("PUT", "/v1/sessions/{key}", CHAT, SessionOf::PathKey),
    route(
        "GET",
        "/v1/sessions/{key}/worktree.tar",
        CHAT_READ,
        SessionOf::PathKey,
    ),
    route(
        "GET",
        "/v1/sessions/{key}/worktree.json",
        CHAT_READ,
        SessionOf::PathKey,
    ),
    route(
        "GET",
        "/v1/sessions/{key}/worktree/diff",
        CHAT_READ,
        SessionOf::PathKey,
    ),
    route(
        "GET",
        "/v1/sessions/{key}/worktree/{*path}",
        CHAT_READ,
        SessionOf::PathKey,
    ),
    route(
        "PUT",
        "/v1/sessions/{key}/worktree/{*path}",
        CHAT,
        SessionOf::PathKey,
    ),
    route("GET", "/v1/turns/{turn_id}", CHAT_READ, SessionOf::Turn),
    route("POST", "/v1/media", CHAT, SessionOf::Nothing),
    route("GET", "/v1/media/{media_id}", CHAT_READ, SessionOf::Nothing),
    route("DELETE", "/v1/media/{media_id}", CHAT, SessionOf::Nothing),
    route("GET", "/v1/memory/search", READ, SessionOf::Nothing),
    route("GET", "/v1/memory/get", READ, SessionOf::Nothing),
    route("GET", "/v1/memory/status", READ, SessionOf::Nothing),
    route("POST", "/v1/memory/reindex", ADMIN, SessionOf::Nothing),
    route("GET", "/v1/skills", READ, SessionOf::Nothing),
    route("POST", "/v1/keys", ADMIN, SessionOf::Nothing),
    route("GET", "/v1/keys", ADMIN, SessionOf::Nothing),
    route("DELETE", "/v1/keys/{name}", ADMIN, SessionOf::Nothing),
    route("GET", "/v1/channels", READ, SessionOf::Nothing),
    route(
        "GET",
        "/v1/channels/{name}/pairings",
        ADMIN,
        SessionOf::Nothing,
    ),
    route(
        "POST",
        "/v1/channels/{name}/pairings/{code}/approve",
        ADMIN,
        SessionOf::Nothing,
    ),
    route(
        "DELETE",
        "/v1/channels/{name}/pairings/{code}",
        ADMIN,
        SessionOf::Nothing,
    ),
    route("GET", "/v1/models", CHAT_READ, SessionOf::Nothing),
    route("POST", "/v1/chat/completions", CHAT, SessionOf::Handler),
];

/// Returns the row of `method` and `path` (a route template, with or without `/v1`); `None`
/// for a route that is not listed (open to `admin` only).
/// A `HEAD` request is the `GET` of the same route without its body, so it has the `GET`
/// row's scopes.
pub(crate) fn route_scope(method: &Method, path: &str) -> Option<&'static RouteScope> {
    let path = path.strip_prefix("/v1").unwrap_or(path);
    let method = if method == Method::HEAD {
        Method::GET.as_str()
    } else {
        method.as_str()
    };
    ROUTE_SCOPES
        .iter()
        .find(|row| row.method == method && row.path.strip_prefix("/v1") == Some(path))
}

/// Who sent a request: the operator token or an API key, with what it may do.
#[derive(Debug, Clone)]
pub(crate) struct Principal {
    /// `operator`, or `key:NAME`: the actor of the request's audit rows.
    actor: String,
    /// The key, for an API key; `None` for the operator token.
    key: Option<ApiKeyRecord>,
    /// The console session the request came through, when it came with the cookie.
    console: Option<ConsoleLease>,
}

impl Principal {
    /// Returns the principal of the operator token: every scope, every session.
    pub(crate) fn operator() -> Self {
        Self {
            actor: OPERATOR_ACTOR.to_owned(),
            key: None,
            console: None,
        }
    }

    fn api_key(key: ApiKeyRecord) -> Self {
        Self {
            actor: format!("key:{}", key.name),
            key: Some(key),
            console: None,
        }
    }

    /// Returns who a console session of this principal acts as.
    pub(crate) fn identity(&self) -> Identity {
        match &self.key {
            None => Identity::Operator,
            Some(key) => Identity::Key {
                secret_sha256: key.secret_sha256.clone(),
            },
        }
    }

    /// Returns whether this principal may still be served, for an answer that outlives its
    /// request's check (an event stream, a followed turn): always for the operator token; for
    /// a key, whether the store still holds it unexpired. A store that cannot answer counts as
    /// no: a long-lived answer ends rather than go on unchecked. A principal that came through
    /// a console session is also no longer valid once that session is logged out or expired.
    pub(crate) async fn still_valid(&self, store: &dyn gatehouse_store::Store) -> bool {
        if let Some(lease) = &self.console
            && !lease.is_live(gatehouse_protocol::time::now_ms())
        {
            return false;
        }
        let Some(key) = &self.key else {
            return true;
        };
        matches!(
            store
                .use_api_key(&key.secret_sha256, gatehouse_protocol::time::now_ms())
                .await,
            Ok(Some(_))
        )
    }

    /// Returns the actor of the request's audit rows: `operator` or `key:NAME`.
    pub(crate) fn actor(&self) -> &str {
        &self.actor
    }

    /// Returns the API key, `None` for the operator token.
    pub(crate) fn key(&self) -> Option<&ApiKeyRecord> {
        self.key.as_ref()
    }

    /// Returns the owner this principal's uploads and sessions are recorded under:
    /// `key:<secret sha256>`, or `operator` for the operator token.
    pub(crate) fn owner(&self) -> String {
        match &self.key {
            Some(key) => key.owner(),
            None => gatehouse_store::records::OPERATOR_OWNER.to_owned(),
        }
    }

    /// Returns the media grantee of this principal's uploads (`key:<secret sha256>`), `None` for
    /// the operator token.
    pub(crate) fn media_grantee(&self) -> Option<String> {
        self.key
            .as_ref()
            .map(|key| format!("key:{}", key.secret_sha256))
    }

    /// Checks that this principal may read or attach `media_id`: a key limited to a session
    /// prefix only when it uploaded the blob or a session under its prefix holds it; every
    /// other principal always. A refusal is the answer for a blob that does not exist, so a
    /// limited key learns nothing of other apps' media.
    ///
    /// # Errors
    /// `404 MEDIA_NOT_FOUND` when it may not; a store failure.
    pub(crate) async fn check_media(
        &self,
        store: &dyn gatehouse_store::Store,
        media_id: &str,
    ) -> Result<(), ApiError> {
        let (Some(prefix), Some(grantee)) = (self.session_prefix(), self.media_grantee()) else {
            return Ok(());
        };
        match store.media_granted(media_id, &grantee, prefix).await {
            Ok(true) => Ok(()),
            Ok(false) => Err(ApiError::new(
                ErrorCode::MediaNotFound,
                format!("media {media_id} not found"),
            )),
            Err(error) => Err(crate::http::error::store_error(&error)),
        }
    }

    /// Returns the session-key prefix this principal's sessions must start with, if any.
    pub(crate) fn session_prefix(&self) -> Option<&str> {
        self.key.as_ref()?.session_prefix.as_deref()
    }

    /// Returns whether this principal holds `scope` (`admin` and the operator token hold every
    /// scope).
    pub(crate) fn has(&self, scope: Scope) -> bool {
        match &self.key {
            None => true,
            Some(key) => key.scopes.contains(&scope) || key.scopes.contains(&Scope::Admin),
        }
    }

    /// Refuses `session_key` with `403 SCOPE_DENIED` when this principal reaches sessions only
    /// through a `chat` grant limited to a prefix that `session_key` does not start with.
    /// Used by handlers that choose their session ([`SessionOf::Handler`]), which post to it;
    /// only `admin` reaches every session regardless of the prefix.
    ///
    /// # Errors
    /// [`ErrorCode::ScopeDenied`].
    pub(crate) fn check_session(&self, session_key: &str) -> Result<(), ApiError> {
        if self.has(Scope::Admin) {
            return Ok(());
        }
        match self.session_prefix() {
            Some(prefix) if !session_key.starts_with(prefix) => Err(ApiError::new(
                ErrorCode::ScopeDenied,
                format!("this key may use only the sessions whose key starts with {prefix:?}"),
            )),
            Some(_) | None => Ok(()),
        }
    }
}

/// How often an answer that outlives its request (an event stream, a followed turn) checks that
/// its key was not revoked and has not expired; past that it ends.
pub(crate) const KEY_RECHECK_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Why a request was refused before its handler.
enum Refusal {
    /// An answer to send as it is (`401`, a store failure).
    Answer(ApiError),
    /// `403 SCOPE_DENIED`, audited.
    Scope(ApiError),
}

/// Authenticates a `/v1` request, judges its route by [`ROUTE_SCOPES`], and hands the
/// [`Principal`] to the handler as a request extension.
pub(crate) async fn authenticate(
    State(state): State<Arc<GatewayState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let principal = match principal_of(&state, request.method(), request.headers()).await {
        Ok(principal) => principal,
        Err(error) => return error.into_response(),
    };
    // The request's span (and so each of its log lines) names the key.
    tracing::Span::current().record("actor", principal.actor());
    if let Some(key) = principal.key()
        && let Err(error) = state
            .key_limits
            .admit_request(key, std::time::Instant::now())
    {
        tracing::info!(
            actor = principal.actor(),
            "request over the key's rate limit"
        );
        return error.into_response();
    }
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|matched| matched.as_str().to_owned());
    if let Some(route) = route {
        let method = request.method().clone();
        let row = route_scope(&method, &route);
        let params: Vec<(String, String)> = match request.extract_parts::<RawPathParams>().await {
            Ok(params) => params
                .iter()
                .map(|(name, value)| (name.to_owned(), value.to_owned()))
                .collect(),
            Err(_) => Vec::new(),
        };
        match authorize(&state, &principal, row, &params).await {
            Ok(()) => {}
            Err(Refusal::Answer(error)) => return error.into_response(),
            Err(Refusal::Scope(error)) => {
                record_scope_denial(&state, &principal, &method, &route).await;
                return error.into_response();
            }
        }
    }
    request.extensions_mut().insert(principal);
    next.run(request).await
}

/// Resolves the bearer token of a request, else its console session cookie.
async fn principal_of(
    state: &GatewayState,
    method: &Method,
    headers: &HeaderMap,
) -> Result<Principal, ApiError> {
    let presented = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .map(str::trim);
    if let Some(token) = presented {
        return principal_of_token(state, token).await;
    }
    if let Some(session_id) = cookie_value(headers, COOKIE_NAME) {
        return principal_of_console(state, method, headers, session_id)
            .await
            .map(|(principal, _)| principal);
    }
    Err(ApiError::unauthorized(
        "send Authorization: Bearer <token>; the token is in <gateway-state>/operator-token",
    ))
}

/// Resolves the console session `session_id`: its key found in the store again, and for a
/// state-changing request the same-origin check and the CSRF token.
///
/// # Errors
/// `401 UNAUTHORIZED` for an unknown or ended session or a key that is gone (which also ends
/// the session); `403 FORBIDDEN` for a cross-origin request or a missing or wrong CSRF token.
pub(crate) async fn principal_of_console(
    state: &GatewayState,
    method: &Method,
    headers: &HeaderMap,
    session_id: &str,
) -> Result<(Principal, ConsoleSession), ApiError> {
    let Some((session, lease)) = state.console_sessions.find(session_id, now_ms()) else {
        return Err(ApiError::unauthorized(
            "the console session has ended; log in again at /console/",
        ));
    };
    let changes_state = !(method == Method::GET || method == Method::HEAD);
    if changes_state {
        same_origin::check(headers)?;
        let presented = headers
            .get(CSRF_HEADER)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        if !session.csrf_matches(presented) {
            return Err(ApiError::new(
                ErrorCode::Forbidden,
                "a state-changing console request must carry the session's X-Gatehouse-Csrf token",
            ));
        }
    }
    let mut principal = match &session.identity {
        Identity::Operator => Principal::operator(),
        Identity::Key { secret_sha256 } => {
            let found = state
                .store
                .use_api_key(secret_sha256, now_ms())
                .await
                .map_err(|error| store_error(&error))?;
            match found {
                Some(key) => Principal::api_key(key),
                None => {
                    state.console_sessions.remove(session_id);
                    return Err(ApiError::unauthorized(
                        "the API key of this console session is unknown, revoked or expired; log in again",
                    ));
                }
            }
        }
    };
    principal.console = Some(lease);
    Ok((principal, session))
}

/// Resolves a presented token: the operator token, or an API key found by its hash.
///
/// # Errors
/// `401 UNAUTHORIZED` for a token that is neither; a store failure.
pub(crate) async fn principal_of_token(
    state: &GatewayState,
    token: &str,
) -> Result<Principal, ApiError> {
    if state.operator_token.matches(token) {
        return Ok(Principal::operator());
    }
    if !token.starts_with(KEY_PREFIX) {
        return Err(ApiError::unauthorized(
            "the bearer token is not the operator token",
        ));
    }
    let presented_sha256 = sha256_hex(token.as_bytes());
    let found = state
        .store
        .use_api_key(&presented_sha256, now_ms())
        .await
        .map_err(|error| store_error(&error))?;
    match found {
        // The store found the row by its hash; the comparison here keeps the decision itself
        // independent of where two hashes differ.
        Some(key) if secrets_equal(key.secret_sha256.as_bytes(), presented_sha256.as_bytes()) => {
            Ok(Principal::api_key(key))
        }
        Some(_) | None => Err(ApiError::unauthorized(
            "the API key is unknown, revoked or expired",
        )),
    }
}

/// Judges `principal` against the route's row, given the request's path parameters.
async fn authorize(
    state: &GatewayState,
    principal: &Principal,
    row: Option<&RouteScope>,
    params: &[(String, String)],
) -> Result<(), Refusal> {
    let param = |name: &str| {
        params
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.clone())
    };
    if principal.has(Scope::Admin) {
        return Ok(());
    }
    let Some(row) = row else {
        return Err(Refusal::Scope(scope_denied(
            "this route needs the admin scope",
        )));
    };
    let through_other = row
        .scopes
        .iter()
        .any(|scope| *scope != Scope::Chat && principal.has(*scope));
    if through_other {
        return Ok(());
    }
    if !(row.scopes.contains(&Scope::Chat) && principal.has(Scope::Chat)) {
        let names: Vec<&str> = row.scopes.iter().map(|scope| scope.as_str()).collect();
        let needed = match names.is_empty() {
            true => String::from("admin"),
            false => format!("{} or admin", names.join(", ")),
        };
        return Err(Refusal::Scope(scope_denied(&format!(
            "this route needs the scope {needed}; this key has another"
        ))));
    }
    let Some(prefix) = principal.session_prefix() else {
        return Ok(());
    };
    let session_key = match row.session {
        SessionOf::Nothing | SessionOf::Handler => return Ok(()),
        SessionOf::PathKey => param("key"),
        SessionOf::Turn => match param("turn_id") {
            Some(turn_id) => state
                .store
                .turn(&turn_id)
                .await
                .map_err(|error| Refusal::Answer(store_error(&error)))?
                .map(|turn| turn.session_key),
            None => None,
        },
    };
    match session_key {
        Some(session_key) if session_key.starts_with(prefix) => Ok(()),
        // A turn that does not exist is the handler's 404 whatever the key.
        None if row.session == SessionOf::Turn => Ok(()),
        Some(_) | None => Err(Refusal::Scope(scope_denied(&format!(
            "this key may use only the sessions whose key starts with {prefix:?}"
        )))),
    }
}

fn scope_denied(message: &str) -> ApiError {
    ApiError::new(ErrorCode::ScopeDenied, message)
}

/// Audits a `SCOPE_DENIED` refusal with the key's name and the route template, at most
/// [`crate::audit::LIMITED_ROWS_PER_WINDOW`] rows per key per minute.
async fn record_scope_denial(
    state: &GatewayState,
    principal: &Principal,
    method: &Method,
    route: &str,
) {
    let code = ErrorCode::ScopeDenied.as_str();
    let recorded = state
        .audit
        .record_caller(
            principal.actor(),
            "http.request",
            "denied",
            Some(code),
            serde_json::json!({"method": method.as_str(), "route": route}),
        )
        .await;
    if recorded == Limited::Recorded {
        tracing::info!(actor = principal.actor(), method = %method, route, "request outside the key's scopes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_of_the_table_is_found_by_its_method_and_template() {
        for row in ROUTE_SCOPES {
            let method = Method::from_bytes(row.method.as_bytes()).unwrap();
            let found = route_scope(&method, row.path).unwrap();
            assert_eq!((found.method, found.path), (row.method, row.path));
            let nested = row.path.strip_prefix("/v1").unwrap();
            assert!(route_scope(&method, nested).is_some(), "{}", row.path);
        }
        assert!(route_scope(&Method::DELETE, "/v1/sessions").is_none());
    }
}
