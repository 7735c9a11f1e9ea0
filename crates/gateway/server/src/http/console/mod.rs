//! The console: `/console/`, a few server-rendered pages and one small script, every asset
//! compiled into the binary.
//!
//! - `GET /console/` and `GET /console/{page}` answer the login form without a session, else the
//!   page: the sessions page is rendered here in full, the others are a labelled skeleton that
//!   `console.js` fills from the `/v1` routes with the session cookie. The navigation lists only
//!   the pages the key's scopes open, and a page outside them is `403`.
//! - `POST /console/login` takes the key from the form body, checks it like a bearer token,
//!   and sets the session cookie ([`session`]); `POST /console/logout` ends the session on the
//!   server and clears the cookie. Both refuse a request from another origin
//!   ([`crate::http::same_origin::check`]).
//! - `GET /console/assets/{file}`: `console.js` and `console.css`.
//!
//! Every answer carries a `Content-Security-Policy` that allows only this origin's script and
//! style (no inline script or style), `frame-ancestors 'none'` and `nosniff`. The pages escape
//! every value they render (maud escapes by construction), and the script puts untrusted text
//! (replies, tool output, file names, documents, skill descriptions, audit fields) into the
//! page only as text nodes, never as markup.
//!
//! The answers here are HTML, so this router sits outside the API's JSON error layer.

pub(crate) mod session;

use std::sync::Arc;

use axum::Form;
use axum::Router;
use axum::extract::Path;
use axum::extract::Query;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::HeaderMap;
use axum::http::HeaderValue;
use axum::http::Method;
use axum::http::StatusCode;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Redirect;
use axum::response::Response;
use axum::routing::get;
use axum::routing::post;
use gatehouse_api::keys::Scope;
use maud::DOCTYPE;
use maud::Markup;
use maud::html;
use serde::Deserialize;

use crate::GatewayState;
use crate::http::auth::Principal;
use crate::http::auth::principal_of_console;
use crate::http::auth::principal_of_token;
use crate::http::console::session::COOKIE_NAME;
use crate::http::console::session::ConsoleSession;
use crate::http::console::session::SESSION_TTL_MS;
use crate::http::console::session::cookie_value;
use crate::http::error::ApiError;
use crate::http::same_origin;
use gatehouse_protocol::time::now_ms;

/// The policy of every console answer: only this origin's script, style, images and
/// connections; no inline script or style, no plugins, no framing, forms post only here.
pub(crate) const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
     style-src 'self'; img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The console's script, hand-written, with no dependency.
const CONSOLE_JS: &str = include_str!("assets/console.js");

/// The console's style sheet.
const CONSOLE_CSS: &str = include_str!("assets/console.css");

/// The audit action of a console login.
const LOGIN_ACTION: &str = "console.login";

/// The audit action of a console logout.
const LOGOUT_ACTION: &str = "console.logout";

/// Returns the console's routes, each answer with the console's security headers.
pub(crate) fn router(state: Arc<GatewayState>) -> Router {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(sessions_page))
        .route("/console/login", post(login).get(to_console))
        .route("/console/logout", post(logout).get(to_console))
        .route("/console/assets/{file}", get(asset))
        .route("/console/{page}", get(page))
        .with_state(state)
        .layer(axum::middleware::map_response(security_headers))
}

/// One page of the console.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Page {
    Sessions,
    Chat,
    Documents,
    Nodes,
    Memory,
    Skills,
    Audit,
    Keys,
    Channels,
}

impl Page {
    /// Every page, in the navigation's order.
    const ALL: [Page; 9] = [
        Page::Sessions,
        Page::Chat,
        Page::Documents,
        Page::Nodes,
        Page::Memory,
        Page::Skills,
        Page::Audit,
        Page::Keys,
        Page::Channels,
    ];

    /// Returns the page's name in its path and in `data-page`.
    fn slug(self) -> &'static str {
        match self {
            Page::Sessions => "sessions",
            Page::Chat => "chat",
            Page::Documents => "documents",
            Page::Nodes => "nodes",
            Page::Memory => "memory",
            Page::Skills => "skills",
            Page::Audit => "audit",
            Page::Keys => "keys",
            Page::Channels => "channels",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Page::Sessions => "Sessions",
            Page::Chat => "Chat",
            Page::Documents => "Agent documents",
            Page::Nodes => "Nodes",
            Page::Memory => "Memory",
            Page::Skills => "Skills",
            Page::Audit => "Audit",
            Page::Keys => "API keys",
            Page::Channels => "Channels",
        }
    }

    fn href(self) -> String {
        match self {
            Page::Sessions => String::from("/console/"),
            other => format!("/console/{}", other.slug()),
        }
    }

    fn from_slug(slug: &str) -> Option<Page> {
        Page::ALL.into_iter().find(|page| page.slug() == slug)
    }

    /// Returns whether `principal` may see the page: the scopes of the `/v1` routes it reads.
    /// A `chat` key sees the sessions and the chat only; a `documents` key the documents only.
    fn is_open_to(self, principal: &Principal) -> bool {
        match self {
            Page::Sessions | Page::Chat => principal.has(Scope::Chat) || principal.has(Scope::Read),
            Page::Documents => principal.has(Scope::Documents) || principal.has(Scope::Read),
            Page::Nodes | Page::Memory | Page::Skills | Page::Audit | Page::Channels => {
                principal.has(Scope::Read)
            }
            Page::Keys => principal.has(Scope::Admin),
        }
    }
}

/// The signed-in user of a page request.
struct Viewer {
    principal: Principal,
    session: ConsoleSession,
}

/// Returns the viewer of a page request, `None` without a live session.
async fn viewer(state: &GatewayState, headers: &HeaderMap) -> Result<Option<Viewer>, Response> {
    let Some(session_id) = cookie_value(headers, COOKIE_NAME) else {
        return Ok(None);
    };
    match principal_of_console(state, &Method::GET, headers, session_id).await {
        Ok((principal, session)) => Ok(Some(Viewer { principal, session })),
        Err(error) if error.status == StatusCode::UNAUTHORIZED => Ok(None),
        Err(error) => Err(error_page(&error)),
    }
}

/// `GET /console/`: the sessions page (or the login form).
async fn sessions_page(State(state): State<Arc<GatewayState>>, headers: HeaderMap) -> Response {
    let viewer = match viewer(&state, &headers).await {
        Ok(Some(viewer)) => viewer,
        Ok(None) => return login_page(StatusCode::OK, None),
        Err(response) => return response,
    };
    // `/console/` is every key's landing page; one that may not list sessions sees only the
    // navigation to its pages.
    if !Page::Sessions.is_open_to(&viewer.principal) {
        let body = html! {
            h1 { "Gatehouse console" }
            p #no-sessions { "This key's scopes list no sessions; its pages are above." }
        };
        return page_response(StatusCode::OK, Page::Sessions, &viewer, body);
    }
    let sessions = match state.store.sessions().await {
        Ok(sessions) => sessions,
        Err(error) => return error_page(&crate::http::error::store_error(&error)),
    };
    let usage = match crate::http::usage::by_session(state.store.as_ref()).await {
        Ok(usage) => usage,
        Err(error) => return error_page(&error),
    };
    // A key that reaches sessions only through a prefixed `chat` grant sees only its own.
    let prefix = match viewer.principal.has(Scope::Read) {
        true => None,
        false => viewer.principal.session_prefix(),
    };
    let mut sessions: Vec<_> = sessions
        .into_iter()
        .filter(|session| prefix.is_none_or(|prefix| session.session_key.starts_with(prefix)))
        .collect();
    sessions.sort_by_key(|session| std::cmp::Reverse(session.updated_at_ms));
    let new_key = default_session_key(&viewer.principal);
    let body = html! {
        h1 { "Sessions" }
        form.inline method="get" action="/console/chat" {
            label for="new-session" { "Session key" }
            input #new-session name="session" required value=(new_key)
                pattern="[A-Za-z0-9][A-Za-z0-9._:-]{0,127}";
            button type="submit" { "Open chat" }
        }
        @if sessions.is_empty() {
            p #no-sessions { "No sessions yet: open a chat to start one." }
        } @else {
            div.table-wrap {
                table #sessions {
                    caption { "Every session, newest activity first" }
                    thead { tr {
                        th scope="col" { "Key" } th scope="col" { "Runtime" }
                        th scope="col" { "Status" } th scope="col" { "Running turn" }
                        th scope="col" { "Last activity" }
                        th scope="col" { "Model calls" } th scope="col" { "Tokens" }
                    } }
                    tbody {
                        @for session in &sessions {
                            tr {
                                td { a href=(format!("/console/chat?session={}", session.session_key)) { (session.session_key) } }
                                td { (session.runtime) }
                                td { @if session.active_turn_id.is_some() { "running" } @else { "idle" } }
                                td.mono { (session.active_turn_id.as_deref().unwrap_or("—")) }
                                td { time data-ms=(session.updated_at_ms) { (session.updated_at_ms) } }
                                @let used = usage.get(&session.session_key).copied().unwrap_or_default();
                                td.num { (used.model_calls) }
                                td.num title=(format!(
                                    "input {}, cached input {}, output {}",
                                    used.input_tokens, used.cached_input_tokens, used.output_tokens
                                )) { (used.total_tokens) }
                            }
                        }
                    }
                }
            }
        }
    };
    page_response(StatusCode::OK, Page::Sessions, &viewer, body)
}

/// The query of the chat page.
#[derive(Debug, Deserialize)]
struct ChatQuery {
    session: Option<String>,
}

/// `GET /console/{page}`: a page skeleton the script fills in.
async fn page(
    State(state): State<Arc<GatewayState>>,
    Path(slug): Path<String>,
    Query(query): Query<ChatQuery>,
    headers: HeaderMap,
) -> Response {
    let Some(page) = Page::from_slug(&slug) else {
        return plain_page(
            StatusCode::NOT_FOUND,
            "Not found",
            "There is no such console page.",
        );
    };
    let viewer = match viewer(&state, &headers).await {
        Ok(Some(viewer)) => viewer,
        Ok(None) => return login_page(StatusCode::OK, None),
        Err(response) => return response,
    };
    if !page.is_open_to(&viewer.principal) {
        let body = html! {
            h1 { "Not for this key" }
            p #denied { "The scopes of this key do not open the " (page.title()) " page." }
        };
        return page_response(StatusCode::FORBIDDEN, page, &viewer, body);
    }
    let body = match page {
        Page::Sessions => return Redirect::to("/console/").into_response(),
        Page::Chat => {
            let session_key = query
                .session
                .filter(|key| !key.is_empty())
                .unwrap_or_else(|| default_session_key(&viewer.principal));
            chat_body(&session_key, viewer.principal.has(Scope::Chat))
        }
        Page::Documents => documents_body(viewer.principal.has(Scope::Documents)),
        Page::Nodes => nodes_body(viewer.principal.has(Scope::Admin)),
        Page::Memory => memory_body(viewer.principal.has(Scope::Admin)),
        Page::Skills => skills_body(),
        Page::Audit => audit_body(),
        Page::Keys => keys_body(),
        Page::Channels => channels_body(viewer.principal.has(Scope::Admin)),
    };
    page_response(StatusCode::OK, page, &viewer, body)
}

/// Returns the session a new chat opens: `console` under the key's session prefix.
fn default_session_key(principal: &Principal) -> String {
    format!("{}console", principal.session_prefix().unwrap_or_default())
}

/// The chat page: the transcript, the reply in progress, the artifacts, and (for a key that
/// may send) the message form with the queue mode, attachments, Send and Abort.
fn chat_body(session_key: &str, may_send: bool) -> Markup {
    html! {
        h1 { "Chat" }
        form #session-form.inline method="get" action="/console/chat" {
            label for="session" { "Session key" }
            input #session name="session" required value=(session_key);
            button type="submit" { "Open" }
        }
        p #chat-status role="status" {}
        section #transcript aria-label="Transcript" data-session=(session_key) {}
        section #live aria-label="Reply in progress" aria-live="polite" {}
        section #artifacts-section aria-label="Artifacts" {
            h2 { "Artifacts" }
            ul #artifacts {}
        }
        @if may_send {
            form #send-form {
                label for="message" { "Message" }
                textarea #message name="text" rows="3" required {}
                div.controls {
                    label for="queue-mode" { "Queue mode" }
                    select #queue-mode name="queueMode" {
                        option value="" { "default (followup)" }
                        option value="followup" { "followup" }
                        option value="steer" { "steer" }
                        option value="collect" { "collect" }
                        option value="interrupt" { "interrupt" }
                    }
                    label for="attachment" { "Attach files" }
                    input #attachment type="file" multiple;
                    button #send type="submit" { "Send" }
                    button #abort type="button" { "Abort" }
                }
                ul #attachments aria-label="Attachments" {}
            }
        } @else {
            p { "This key may read this session but not send to it." }
        }
    }
}

/// The documents page: the file, Reload, Save (for a key that may write), the content and its
/// size against the 16 KiB limit.
fn documents_body(may_save: bool) -> Markup {
    html! {
        h1 { "Agent documents" }
        form #doc-form {
            div.controls {
                label for="doc-name" { "File" }
                select #doc-name {
                    @for name in ["AGENTS.md", "SOUL.md", "IDENTITY.md", "USER.md"] {
                        option value=(name) { (name) }
                    }
                }
                button #doc-reload type="button" { "Reload" }
                @if may_save { button #doc-save type="submit" { "Save" } }
            }
            label for="doc-content" { "Content" }
            textarea #doc-content rows="18" spellcheck="false" aria-describedby="doc-size" {}
            p #doc-size { "0 / 16384 bytes" }
        }
        p #doc-status role="status" {}
    }
}

/// The nodes page, with the setup-code form for an admin key.
fn nodes_body(may_issue: bool) -> Markup {
    html! {
        h1 { "Nodes" }
        (empty_table("nodes", "Enrolled nodes", &["Node", "Name", "Connected", "Runtime", "Capacity", "Commands", "Last seen"]))
        @if may_issue {
            h2 { "Enroll a node" }
            form #setup-code-form.inline {
                label for="setup-ttl" { "Valid for (seconds)" }
                input #setup-ttl type="number" min="1" value="600";
                button type="submit" { "Issue setup code" }
            }
            label for="setup-code" { "Setup code" }
            textarea #setup-code readonly rows="3" {}
        }
        p #nodes-status role="status" {}
    }
}

/// The memory page: search, the index status, and Reindex for an admin key.
fn memory_body(may_reindex: bool) -> Markup {
    html! {
        h1 { "Memory" }
        form #memory-search.inline {
            label for="memory-query" { "Search" }
            input #memory-query type="search" required;
            label for="memory-limit" { "Results" }
            input #memory-limit type="number" min="1" max="50" value="10";
            button type="submit" { "Search" }
        }
        ol #memory-results aria-label="Search results" {}
        h2 { "Index" }
        dl #memory-index {}
        @if may_reindex {
            button #memory-reindex type="button" { "Reindex" }
            label for="memory-progress" { "Reindex progress" }
            progress #memory-progress max="1" value="0" {}
        }
        p #memory-status role="status" {}
    }
}

/// An empty table `id` with `caption` and one column header per `headers`, which the page's
/// script fills from the API.
fn empty_table(id: &str, caption: &str, headers: &[&str]) -> Markup {
    html! {
        div.table-wrap { table #(id) {
            caption { (caption) }
            thead { tr { @for header in headers { th scope="col" { (header) } } } }
            tbody {}
        } }
    }
}

/// The skills page.
fn skills_body() -> Markup {
    html! {
        h1 { "Skills" }
        (empty_table("skills", "Every skill of both hosts", &["Name", "Host", "Tier", "Available", "Shadowed by", "Description"]))
        h2 { "Skipped" }
        ul #skills-skipped {}
        p #skills-status role="status" {}
    }
}

/// The audit page: the action and actor filters, the table and its pager.
fn audit_body() -> Markup {
    html! {
        h1 { "Audit" }
        form #audit-filter.inline {
            label for="audit-action" { "Action" }
            input #audit-action type="search" list="audit-actions";
            datalist #audit-actions {}
            label for="audit-actor" { "Actor" }
            input #audit-actor type="search";
            button type="submit" { "Filter" }
        }
        (empty_table("audit", "Audit trail, newest first", &["Seq", "At", "Actor", "Action", "Outcome", "Code", "Details"]))
        nav.pager aria-label="Audit pages" {
            button #audit-newer type="button" { "Newer" }
            span #audit-page {}
            button #audit-older type="button" { "Older" }
        }
        p #audit-status role="status" {}
    }
}

/// The API keys page (admin): the keys, revocation, and the form that creates one.
/// The channels page: each channel's state, and for an admin key the pending pairings with
/// Approve and Deny.
fn channels_body(may_decide: bool) -> Markup {
    html! {
        h1 { "Channels" }
        (empty_table("channels", "Configured channels", &["Name", "Kind", "Agent", "State", "Pending deliveries", "Last message", "Last delivery", "Last error"]))
        @if may_decide {
            h2 { "Pairing requests" }
            (empty_table("pairings", "Pending pairing codes", &["Channel", "Code", "Sender", "Expires", "Decide"]))
        }
        p #channels-status role="status" {}
    }
}

fn keys_body() -> Markup {
    html! {
        h1 { "API keys" }
        (empty_table("keys", "Keys (never their secrets)", &["Name", "Scopes", "Sessions", "Expires", "Last used", "Revoke"]))
        h2 { "Create a key" }
        form #key-form {
            div.controls {
                label for="key-name" { "Name" }
                input #key-name required;
                fieldset {
                    legend { "Scopes" }
                    @for scope in ["chat", "read", "documents", "admin"] {
                        label { input type="checkbox" name="scope" value=(scope); " " (scope) }
                    }
                }
                label for="key-sessions" { "Session prefix" }
                input #key-sessions;
                button type="submit" { "Create" }
            }
        }
        label for="key-secret" { "New key (shown once)" }
        input #key-secret readonly;
        p #keys-status role="status" {}
    }
}

/// Returns a whole page: the header with the navigation the key's scopes open, then `body`.
fn page_response(status: StatusCode, page: Page, viewer: &Viewer, body: Markup) -> Response {
    let principal = &viewer.principal;
    let scopes: Vec<&str> = [Scope::Chat, Scope::Read, Scope::Documents, Scope::Admin]
        .into_iter()
        .filter(|scope| principal.has(*scope))
        .map(Scope::as_str)
        .collect();
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                meta name="gatehouse-csrf" content=(viewer.session.csrf_token);
                title { (page.title()) " · Gatehouse console" }
                link rel="stylesheet" href="/console/assets/console.css";
                script src="/console/assets/console.js" defer {}
            }
            body data-page=(page.slug()) data-scopes=(scopes.join(" ")) {
                a.skip href="#main" { "Skip to content" }
                header {
                    a.brand href="/console/" { "Gatehouse" }
                    nav aria-label="Console pages" {
                        ul {
                            @for item in Page::ALL.into_iter().filter(|item| item.is_open_to(principal)) {
                                li { a href=(item.href()) aria-current=[(item == page).then_some("page")] { (item.title()) } }
                            }
                        }
                    }
                    form.logout method="post" action="/console/logout" {
                        input type="hidden" name="csrf" value=(viewer.session.csrf_token);
                        span #whoami { (principal.actor()) }
                        button type="submit" { "Log out" }
                    }
                }
                main #main { (body) }
            }
        }
    };
    html_response(status, markup)
}

/// Returns the login form, with `message` above it when a login failed.
fn login_page(status: StatusCode, message: Option<&str>) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "Log in · Gatehouse console" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body data-page="login" {
                main #main.login {
                    h1 { "Gatehouse console" }
                    @if let Some(message) = message { p #login-error role="alert" { (message) } }
                    form #login-form method="post" action="/console/login" {
                        label for="key" { "API key or operator token" }
                        input #key name="key" type="password" autocomplete="off" required;
                        button type="submit" { "Log in" }
                    }
                    p.hint { "Create a key with " code { "gatehouse keys create --name NAME --scope admin" } "; the operator token is in " code { "<gateway-state>/operator-token" } "." }
                }
            }
        }
    };
    html_response(status, markup)
}

/// Returns a page with a heading and one sentence, for refusals outside a session.
fn plain_page(status: StatusCode, title: &str, message: &str) -> Response {
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · Gatehouse console" }
                link rel="stylesheet" href="/console/assets/console.css";
            }
            body data-page="error" {
                main #main {
                    h1 { (title) }
                    p #error-message { (message) }
                    p { a href="/console/" { "Back to the console" } }
                }
            }
        }
    };
    html_response(status, markup)
}

/// Returns the page of an API error: its status, its code and its message.
fn error_page(error: &ApiError) -> Response {
    let message = format!("{}: {}", error.code, error.message);
    plain_page(error.status, "Refused", &message)
}

/// Returns `markup` as an HTML answer that no cache keeps.
fn html_response(status: StatusCode, markup: Markup) -> Response {
    (
        status,
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        markup.into_string(),
    )
        .into_response()
}

/// The form of `POST /console/login`.
#[derive(Deserialize)]
struct LoginForm {
    key: String,
}

impl std::fmt::Debug for LoginForm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoginForm").finish_non_exhaustive()
    }
}

/// Returns the form of a console POST that came from the console's own origin, or the HTML
/// page that refuses it (a cross-origin request, or a form that does not decode).
fn same_origin_form<T>(
    headers: &HeaderMap,
    form: Result<Form<T>, FormRejection>,
) -> Result<T, Box<Response>> {
    same_origin::check(headers).map_err(|error| Box::new(error_page(&error)))?;
    form.map(|Form(form)| form)
        .map_err(|rejection| Box::new(form_rejection_page(&rejection)))
}

/// `POST /console/login`: the key of the form, checked like a bearer token, becomes a session.
async fn login(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let form = match same_origin_form(&headers, form) {
        Ok(form) => form,
        Err(page) => return *page,
    };
    let principal = match principal_of_token(&state, form.key.trim()).await {
        Ok(principal) => principal,
        Err(error) if error.status == StatusCode::UNAUTHORIZED => {
            tracing::info!("console login with an unknown key");
            return login_page(
                StatusCode::UNAUTHORIZED,
                Some("That key is unknown, revoked or expired."),
            );
        }
        Err(error) => return error_page(&error),
    };
    // A login is one of the key's requests: its per-minute limit holds here too.
    if let Some(key) = principal.key()
        && let Err(error) = state
            .key_limits
            .admit_request(key, std::time::Instant::now())
    {
        return error_page(&error);
    }
    let created = state
        .console_sessions
        .create(principal.identity(), principal.actor(), now_ms());
    let (session_id, _) = match created {
        Ok(Some(created)) => created,
        Ok(None) => {
            return plain_page(
                StatusCode::SERVICE_UNAVAILABLE,
                "Login failed",
                "The Gateway holds as many console sessions as it keeps; try again later.",
            );
        }
        Err(error) => {
            tracing::error!(error = %error, "cannot draw a console session id");
            return plain_page(
                StatusCode::INTERNAL_SERVER_ERROR,
                "Login failed",
                "The Gateway could not draw a session id; try again.",
            );
        }
    };
    state
        .audit
        .record_caller(
            principal.actor(),
            LOGIN_ACTION,
            "succeeded",
            None,
            serde_json::json!({}),
        )
        .await;
    let max_age_seconds = SESSION_TTL_MS / 1000;
    let cookie = format!(
        "{COOKIE_NAME}={session_id}; HttpOnly; SameSite=Strict; Path=/; Max-Age={max_age_seconds}{}",
        secure_attribute(&state, &headers)
    );
    with_cookie(Redirect::to("/console/").into_response(), &cookie)
}

/// The form of `POST /console/logout`.
#[derive(Debug, Deserialize)]
struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// `POST /console/logout`: ends the session on the server and clears the cookie. The request
/// must come from the console's origin and carry the session's CSRF token.
async fn logout(
    State(state): State<Arc<GatewayState>>,
    headers: HeaderMap,
    form: Result<Form<LogoutForm>, FormRejection>,
) -> Response {
    let form = match same_origin_form(&headers, form) {
        Ok(form) => form,
        Err(page) => return *page,
    };
    if let Some(session_id) = cookie_value(&headers, COOKIE_NAME) {
        let found = state.console_sessions.find(session_id, now_ms());
        if let Some((session, _)) = found {
            let presented = headers
                .get(crate::http::auth::CSRF_HEADER)
                .and_then(|value| value.to_str().ok())
                .unwrap_or(&form.csrf);
            if !session.csrf_matches(presented) {
                return plain_page(
                    StatusCode::FORBIDDEN,
                    "Refused",
                    "The logout did not carry this session's token; use the Log out button.",
                );
            }
            state.console_sessions.remove(session_id);
            state
                .audit
                .record_caller(
                    &session.actor,
                    LOGOUT_ACTION,
                    "succeeded",
                    None,
                    serde_json::json!({}),
                )
                .await;
        }
    }
    let cookie = format!(
        "{COOKIE_NAME}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
        secure_attribute(&state, &headers)
    );
    with_cookie(Redirect::to("/console/").into_response(), &cookie)
}

/// Returns the page of a form body axum could not read (a wrong `Content-Type`, a missing
/// field), with axum's status and its explanation, so no console answer is plain text.
fn form_rejection_page(rejection: &FormRejection) -> Response {
    plain_page(rejection.status(), "Refused", &rejection.body_text())
}

/// `GET /console/login` and `GET /console/logout`: back to the console.
async fn to_console() -> Redirect {
    Redirect::to("/console/")
}

/// Returns `; Secure` when the console is served over TLS: the Gateway's public URL is `https`,
/// or the TLS-terminating proxy in front says so in `X-Forwarded-Proto`.
fn secure_attribute(state: &GatewayState, headers: &HeaderMap) -> &'static str {
    let public_https = state
        .config
        .public_url
        .as_deref()
        .is_some_and(|url| url.starts_with("https://"));
    let forwarded_https = headers
        .get("x-forwarded-proto")
        .is_some_and(|value| value.as_bytes().eq_ignore_ascii_case(b"https"));
    match public_https || forwarded_https {
        true => "; Secure",
        false => "",
    }
}

/// Adds a `Set-Cookie` header to `response`.
fn with_cookie(mut response: Response, cookie: &str) -> Response {
    match HeaderValue::from_str(cookie) {
        Ok(value) => {
            response.headers_mut().append(header::SET_COOKIE, value);
            response
        }
        // A random token is base64url, so the cookie is always a valid header value.
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// `GET /console/assets/{file}`.
async fn asset(Path(file): Path<String>) -> Response {
    let (content_type, text) = match file.as_str() {
        "console.js" => ("text/javascript; charset=utf-8", CONSOLE_JS),
        "console.css" => ("text/css; charset=utf-8", CONSOLE_CSS),
        _ => {
            return plain_page(
                StatusCode::NOT_FOUND,
                "Not found",
                "There is no such asset.",
            );
        }
    };
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        text,
    )
        .into_response()
}

/// Replaces an error answer that is not HTML (axum's own rejections: an unknown method, a bad
/// path or query) with a console page of the same status, so no console answer is plain text.
fn html_errors(response: Response) -> Response {
    let status = response.status();
    let is_html = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.starts_with("text/html"));
    if is_html || !(status.is_client_error() || status.is_server_error()) {
        return response;
    }
    let mut page = plain_page(
        status,
        "Refused",
        "The console cannot serve this request; go back to the console and try again.",
    );
    if let Some(allow) = response.headers().get(header::ALLOW) {
        page.headers_mut().insert(header::ALLOW, allow.clone());
    }
    page
}

/// Adds the console's security headers to every answer of its routes. The referrer policy is
/// `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` with the
/// console's own form posts, which the origin check could not tell from a forged one.
async fn security_headers(response: Response) -> Response {
    let mut response = html_errors(response);
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}
