//! The console's login sessions through the real router (issue 18): the cookie's attributes,
//! the security headers of every console answer, the cookie accepted on `/v1` like its key's
//! bearer token, the CSRF token and same-origin check on state-changing requests, logout and key
//! revocation ending a session on the server, what a `chat` key's pages show, and cross-site
//! posts to the console's own routes.

use axum::body::Body;
use axum::http::HeaderMap;
use axum::http::Request;
use axum::http::StatusCode;
use axum::http::header;
use pretty_assertions::assert_eq;
use tower::ServiceExt;

use crate::suite::support::FakeWorkspace;
use crate::suite::support::FetchAnswer;
use crate::suite::support::TOKEN;
use crate::suite::support::TestGateway;
use crate::suite::support::WriteAnswer;
use crate::suite::support::gateway;
use crate::suite::support::operator_request;

/// The `Host` of every request here, and so the console's own origin.
const HOST: &str = "gatehouse.test:7420";
const ORIGIN: &str = "http://gatehouse.test:7420";

/// One answer: status, headers and body text.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: String,
}

async fn send(gateway: &TestGateway, request: Request<Body>) -> Answer {
    let response = gateway.router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8(bytes.to_vec()).unwrap(),
    }
}

async fn fresh_gateway() -> TestGateway {
    gateway(FakeWorkspace::new(
        FetchAnswer::File(b"# Agents\n".to_vec()),
        WriteAnswer::Confirmed,
    ))
    .await
}

/// Posts the login form with `key` as the console's own page would.
fn login_request(key: &str) -> Request<Body> {
    Request::builder()
        .method("POST")
        .uri("/console/login")
        .header(header::HOST, HOST)
        .header(header::ORIGIN, ORIGIN)
        .header("sec-fetch-site", "same-origin")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("key={key}")))
        .unwrap()
}

/// A logged-in console session: its cookie and its CSRF token.
struct Login {
    cookie: String,
    csrf: String,
}

/// Logs in with `key`, then reads the CSRF token from the console page.
async fn log_in(gateway: &TestGateway, key: &str) -> Login {
    let answer = send(gateway, login_request(key)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    let set_cookie = answer.headers[header::SET_COOKIE].to_str().unwrap();
    let cookie = set_cookie.split(';').next().unwrap().to_owned();
    let page = send(gateway, cookie_request("GET", "/console/", &cookie)).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    let marker = r#"<meta name="gatehouse-csrf" content=""#;
    let start = page.body.find(marker).expect("the page carries the token") + marker.len();
    let csrf = page.body[start..].split('"').next().unwrap().to_owned();
    Login { cookie, csrf }
}

/// A request with the session cookie and the console's own `Host`, nothing else.
fn cookie_request(method: &str, uri: &str, cookie: &str) -> Request<Body> {
    cookie_request_builder(method, uri, cookie)
        .body(Body::empty())
        .unwrap()
}

fn cookie_request_builder(method: &str, uri: &str, cookie: &str) -> axum::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(uri)
        .header(header::HOST, HOST)
        .header(header::COOKIE, cookie)
}

/// Creates a key with the operator token and returns its secret.
async fn create_key(gateway: &TestGateway, body: serde_json::Value) -> String {
    let mut request = operator_request("POST", "/v1/keys", Body::from(body.to_string()));
    request
        .headers_mut()
        .insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
    let (status, created) = gateway.send(request).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    created["key"].as_str().unwrap().to_owned()
}

/// Returns the targets of a console page's navigation links, in order.
fn nav_links(body: &str) -> Vec<&str> {
    body.split(r#"<li><a href=""#)
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap())
        .collect()
}

fn error_code(answer: &Answer) -> String {
    let body: serde_json::Value = serde_json::from_str(&answer.body).unwrap();
    body["error"]["code"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn issue_18_login_sets_an_http_only_strict_cookie_and_every_console_answer_has_the_csp() {
    let gateway = fresh_gateway().await;
    for path in [
        "/console/",
        "/console/chat",
        "/console/assets/console.js",
        "/console/assets/console.css",
    ] {
        let answer = send(&gateway, Request::get(path).body(Body::empty()).unwrap()).await;
        assert_eq!(answer.status, StatusCode::OK, "{path}");
        let policy = answer.headers[header::CONTENT_SECURITY_POLICY]
            .to_str()
            .unwrap();
        assert!(policy.contains("default-src 'self'"), "{policy}");
        assert!(policy.contains("script-src 'self';"), "{policy}");
        assert!(policy.contains("frame-ancestors 'none'"), "{policy}");
        assert!(!policy.contains("unsafe-inline"), "{policy}");
        assert_eq!(answer.headers[header::X_CONTENT_TYPE_OPTIONS], "nosniff");
    }
    // Without a session every page is the login form.
    let page = send(
        &gateway,
        Request::get("/console/audit").body(Body::empty()).unwrap(),
    )
    .await;
    assert!(
        page.body.contains(r#"<form id="login-form""#),
        "{}",
        page.body
    );
    // The script sets no markup from data.
    let script = send(
        &gateway,
        Request::get("/console/assets/console.js")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        script.headers[header::CONTENT_TYPE],
        "text/javascript; charset=utf-8"
    );
    for sink in [
        ".innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
    ] {
        assert!(!script.body.contains(sink), "console.js uses {sink}");
    }

    let answer = send(&gateway, login_request(TOKEN)).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.headers[header::LOCATION], "/console/");
    let set_cookie = answer.headers[header::SET_COOKIE].to_str().unwrap();
    let attributes: Vec<&str> = set_cookie.split("; ").skip(1).collect();
    assert_eq!(
        attributes,
        ["HttpOnly", "SameSite=Strict", "Path=/", "Max-Age=43200"]
    );
    let value = set_cookie.split(';').next().unwrap();
    assert!(value.starts_with("gatehouse_console="), "{set_cookie}");
    assert!(!set_cookie.contains(TOKEN), "the cookie holds the token");

    // Behind a TLS-terminating proxy the cookie is Secure.
    let mut request = login_request(TOKEN);
    request
        .headers_mut()
        .insert("x-forwarded-proto", "https".parse().unwrap());
    let answer = send(&gateway, request).await;
    let set_cookie = answer.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(set_cookie.ends_with("; Secure"), "{set_cookie}");

    // A wrong key is the login form again, with no cookie.
    let answer = send(&gateway, login_request("ghk_not-a-key")).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(answer.headers.get(header::SET_COOKIE).is_none());
    assert!(answer.body.contains("login-error"), "{}", answer.body);
}

#[tokio::test]
async fn issue_18_the_cookie_opens_v1_and_a_state_change_needs_the_csrf_token_and_the_origin() {
    let gateway = fresh_gateway().await;
    let key = create_key(
        &gateway,
        serde_json::json!({"name": "console-admin", "scopes": ["admin"]}),
    )
    .await;
    let login = log_in(&gateway, &key).await;

    let answer = send(
        &gateway,
        cookie_request("GET", "/v1/sessions", &login.cookie),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);

    let create = |csrf: Option<&str>, extra: &[(&'static str, &'static str)], name: &str| {
        let mut builder = cookie_request_builder("POST", "/v1/keys", &login.cookie)
            .header(header::CONTENT_TYPE, "application/json");
        if let Some(csrf) = csrf {
            builder = builder.header("x-gatehouse-csrf", csrf);
        }
        for (header_name, value) in extra {
            builder = builder.header(*header_name, *value);
        }
        builder
            .body(Body::from(
                serde_json::json!({"name": name, "scopes": ["read"]}).to_string(),
            ))
            .unwrap()
    };
    let refused: Vec<(Request<Body>, &str)> = vec![
        (
            create(None, &[("sec-fetch-site", "same-origin")], "k1"),
            "no token",
        ),
        (
            create(Some("wrong"), &[("sec-fetch-site", "same-origin")], "k2"),
            "a wrong token",
        ),
        (
            create(Some(&login.csrf), &[("sec-fetch-site", "same-site")], "k3"),
            "a same-site page",
        ),
        (
            create(
                Some(&login.csrf),
                &[("origin", "http://evil.test:7420")],
                "k4",
            ),
            "another origin",
        ),
    ];
    for (request, why) in refused {
        let answer = send(&gateway, request).await;
        assert_eq!(
            answer.status,
            StatusCode::FORBIDDEN,
            "{why}: {}",
            answer.body
        );
        assert_eq!(error_code(&answer), "FORBIDDEN", "{why}");
    }
    let answer = send(
        &gateway,
        create(
            Some(&login.csrf),
            &[("sec-fetch-site", "same-origin"), ("origin", ORIGIN)],
            "k5",
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);

    // Only the last one was created.
    let (status, listed) = gateway
        .send(operator_request("GET", "/v1/keys", Body::empty()))
        .await;
    assert_eq!(status, StatusCode::OK);
    let mut names: Vec<&str> = listed["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|key| key["name"].as_str().unwrap())
        .collect();
    names.sort_unstable();
    assert_eq!(names, ["console-admin", "k5"]);

    // A bearer token still needs neither, and wins over a cookie.
    let mut request = operator_request("GET", "/v1/sessions", Body::empty());
    request
        .headers_mut()
        .insert(header::COOKIE, "gatehouse_console=unknown".parse().unwrap());
    let (status, _) = gateway.send(request).await;
    assert_eq!(status, StatusCode::OK);
    let answer = send(
        &gateway,
        cookie_request("GET", "/v1/sessions", "gatehouse_console=unknown"),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn issue_18_logout_and_revocation_end_the_session_on_the_server() {
    let gateway = fresh_gateway().await;
    let key = create_key(
        &gateway,
        serde_json::json!({"name": "reader", "scopes": ["read"]}),
    )
    .await;

    // A logout without the session's token (a forged one) is refused and changes nothing.
    let login = log_in(&gateway, &key).await;
    let logout = |csrf: &str, fetch_site: &'static str| {
        cookie_request_builder("POST", "/console/logout", &login.cookie)
            .header("sec-fetch-site", fetch_site)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from(format!("csrf={csrf}")))
            .unwrap()
    };
    let answer = send(&gateway, logout("guess", "same-origin")).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    let answer = send(&gateway, logout(&login.csrf, "same-site")).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    let answer = send(&gateway, cookie_request("GET", "/v1/audit", &login.cookie)).await;
    assert_eq!(answer.status, StatusCode::OK);

    let answer = send(&gateway, logout(&login.csrf, "same-origin")).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    let cleared = answer.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(
        cleared.starts_with("gatehouse_console=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    // The browser could keep sending the old cookie; the server no longer knows it.
    let answer = send(&gateway, cookie_request("GET", "/v1/audit", &login.cookie)).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let page = send(&gateway, cookie_request("GET", "/console/", &login.cookie)).await;
    assert!(page.body.contains("login-form"), "{}", page.body);

    // Revoking the key ends its console sessions at their next request.
    let login = log_in(&gateway, &key).await;
    let answer = send(&gateway, cookie_request("GET", "/v1/audit", &login.cookie)).await;
    assert_eq!(answer.status, StatusCode::OK);
    let (status, revoked) = gateway
        .send(operator_request("DELETE", "/v1/keys/reader", Body::empty()))
        .await;
    assert_eq!(
        (status, revoked),
        (StatusCode::OK, serde_json::json!({"revoked": true}))
    );
    let answer = send(&gateway, cookie_request("GET", "/v1/audit", &login.cookie)).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let page = send(&gateway, cookie_request("GET", "/console/", &login.cookie)).await;
    assert!(page.body.contains("login-form"), "{}", page.body);

    // The audit trail has the logins and the logout by key name, never a secret.
    let events = gateway.audit_events().await;
    let console_rows: Vec<(String, String)> = events
        .iter()
        .filter(|event| event["action"].as_str().unwrap().starts_with("console."))
        .map(|event| {
            (
                event["actor"].as_str().unwrap().to_owned(),
                event["action"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let row = |action: &str| (String::from("key:reader"), String::from(action));
    assert_eq!(
        console_rows,
        [
            row("console.login"),
            row("console.logout"),
            row("console.login")
        ]
    );
    assert!(!serde_json::Value::from(events).to_string().contains(&key));
}

#[tokio::test]
async fn issue_18_a_chat_key_sees_only_sessions_and_chat() {
    let gateway = fresh_gateway().await;
    let key = create_key(
        &gateway,
        serde_json::json!({"name": "app", "scopes": ["chat"], "sessions": "app-"}),
    )
    .await;
    let login = log_in(&gateway, &key).await;
    let page = send(&gateway, cookie_request("GET", "/console/", &login.cookie)).await;
    let links = nav_links(&page.body);
    assert_eq!(links, ["/console/", "/console/chat"]);
    // A new chat opens under the key's prefix.
    assert!(
        page.body.contains(r#"value="app-console""#),
        "{}",
        page.body
    );

    for page in ["documents", "nodes", "audit", "keys", "memory", "skills"] {
        let answer = send(
            &gateway,
            cookie_request("GET", &format!("/console/{page}"), &login.cookie),
        )
        .await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{page}");
        assert!(answer.body.contains(r#"id="denied""#), "{page}");
    }
    let chat = send(
        &gateway,
        cookie_request("GET", "/console/chat?session=app-1", &login.cookie),
    )
    .await;
    assert_eq!(chat.status, StatusCode::OK);
    assert!(
        chat.body.contains(r#"data-session="app-1""#),
        "{}",
        chat.body
    );

    for path in [
        "/v1/agents/main/files/AGENTS.md",
        "/v1/nodes",
        "/v1/audit",
        "/v1/keys",
        "/v1/sessions",
    ] {
        let answer = send(&gateway, cookie_request("GET", path, &login.cookie)).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{path}");
        assert_eq!(error_code(&answer), "SCOPE_DENIED", "{path}");
    }
}

#[tokio::test]
async fn issue_18_a_documents_key_sees_only_the_documents_and_no_session() {
    let gateway = fresh_gateway().await;
    let (status, _) = gateway
        .send(operator_request(
            "POST",
            "/v1/sessions/private-1/messages",
            Body::from(r#"{"text":"hi"}"#),
        ))
        .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let key = create_key(
        &gateway,
        serde_json::json!({"name": "editor", "scopes": ["documents"]}),
    )
    .await;
    let login = log_in(&gateway, &key).await;
    let page = send(&gateway, cookie_request("GET", "/console/", &login.cookie)).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(!page.body.contains("private-1"), "{}", page.body);
    let links = nav_links(&page.body);
    assert_eq!(links, ["/console/documents"]);
    let chat = send(
        &gateway,
        cookie_request("GET", "/console/chat", &login.cookie),
    )
    .await;
    assert_eq!(chat.status, StatusCode::FORBIDDEN);
    let documents = send(
        &gateway,
        cookie_request("GET", "/console/documents", &login.cookie),
    )
    .await;
    assert_eq!(documents.status, StatusCode::OK);
    assert!(
        documents.body.contains(r#"id="doc-save""#),
        "{}",
        documents.body
    );
}

#[tokio::test]
async fn issue_18_a_cross_site_login_is_refused() {
    let gateway = fresh_gateway().await;
    for (name, value) in [
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
        ("origin", "http://evil.test"),
    ] {
        let mut request = login_request(TOKEN);
        request.headers_mut().remove("sec-fetch-site");
        request.headers_mut().remove(header::ORIGIN);
        request.headers_mut().insert(name, value.parse().unwrap());
        let answer = send(&gateway, request).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{name}: {value}");
        assert!(answer.headers.get(header::SET_COOKIE).is_none());
        assert!(answer.body.contains("FORBIDDEN"), "{}", answer.body);
    }
}

#[tokio::test]
async fn issue_18_every_console_refusal_is_an_html_page_not_plain_text() {
    let gateway = fresh_gateway().await;
    for (path, content_type, body) in [
        (
            "/console/login",
            "application/x-www-form-urlencoded",
            "nokey=1",
        ),
        (
            "/console/login",
            "application/json",
            r#"{"key":"test-token"}"#,
        ),
        ("/console/logout", "text/plain", "csrf=x"),
    ] {
        let request = Request::builder()
            .method("POST")
            .uri(path)
            .header(header::HOST, HOST)
            .header("sec-fetch-site", "same-origin")
            .header(header::CONTENT_TYPE, content_type)
            .body(Body::from(body))
            .unwrap();
        let answer = send(&gateway, request).await;
        assert!(answer.status.is_client_error(), "{path}: {}", answer.status);
        assert_eq!(
            answer.headers[header::CONTENT_TYPE],
            "text/html; charset=utf-8",
            "{path} {content_type}"
        );
        assert!(
            answer.body.contains(r#"id="error-message""#),
            "{}",
            answer.body
        );
        assert!(answer.headers.get(header::SET_COOKIE).is_none());
    }
    // axum's own refusals (a method the route does not take, a malformed query) are pages too.
    for (method, uri) in [
        ("PUT", "/console/"),
        ("DELETE", "/console/login"),
        ("GET", "/console/chat?session=a&session=b"),
    ] {
        let request = Request::builder()
            .method(method)
            .uri(uri)
            .body(Body::empty())
            .unwrap();
        let answer = send(&gateway, request).await;
        assert!(
            answer.status.is_client_error(),
            "{method} {uri}: {}",
            answer.status
        );
        assert_eq!(
            answer.headers[header::CONTENT_TYPE],
            "text/html; charset=utf-8",
            "{method} {uri}"
        );
        assert!(
            answer.body.contains(r#"id="error-message""#),
            "{}",
            answer.body
        );
    }
}

/// An event stream opened with the console's cookie ends with `stream.dropped` once the console
/// session is logged out, though the key itself stays valid.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn issue_18_a_logged_out_sessions_event_stream_ends() {
    let gateway = fresh_gateway().await;
    let key = create_key(
        &gateway,
        serde_json::json!({"name": "watcher", "scopes": ["read"]}),
    )
    .await;
    let login = log_in(&gateway, &key).await;
    let response = gateway
        .router
        .clone()
        .oneshot(cookie_request(
            "GET",
            "/v1/sessions/watched/events?after=0",
            &login.cookie,
        ))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let logout = cookie_request_builder("POST", "/console/logout", &login.cookie)
        .header("sec-fetch-site", "same-origin")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(format!("csrf={}", login.csrf)))
        .unwrap();
    assert_eq!(send(&gateway, logout).await.status, StatusCode::SEE_OTHER);
    let bytes = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        axum::body::to_bytes(response.into_body(), usize::MAX),
    )
    .await
    .expect("the stream of a logged-out console session did not end")
    .unwrap();
    let text = String::from_utf8(bytes.to_vec()).unwrap();
    assert!(
        text.contains("event: stream.dropped") && text.contains("UNAUTHORIZED"),
        "{text}"
    );
    // The key itself still works with its bearer token.
    let mut request = operator_request("GET", "/v1/sessions", Body::empty());
    request.headers_mut().insert(
        header::AUTHORIZATION,
        format!("Bearer {key}").parse().unwrap(),
    );
    let (status, _) = gateway.send(request).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_console_login_counts_against_the_keys_requests_per_minute() {
    let gateway = fresh_gateway().await;
    let key = create_key(
        &gateway,
        serde_json::json!({"name": "slow", "scopes": ["chat"], "requestsPerMinute": 2}),
    )
    .await;
    let statuses: Vec<StatusCode> = {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(send(&gateway, login_request(&key)).await.status);
        }
        statuses
    };
    assert_eq!(
        statuses,
        vec![
            StatusCode::SEE_OTHER,
            StatusCode::SEE_OTHER,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
}

#[tokio::test]
async fn a_second_console_cookie_of_the_same_name_is_no_session() {
    let gateway = fresh_gateway().await;
    let login = log_in(&gateway, TOKEN).await;
    let alone = send(
        &gateway,
        cookie_request("GET", "/v1/sessions", &login.cookie),
    )
    .await;
    assert_eq!(alone.status, StatusCode::OK, "{}", alone.body);
    // Another service on the same host (any port) can plant a cookie of the name.
    let planted = format!("{}; gatehouse_console=planted", login.cookie);
    let refused = send(&gateway, cookie_request("GET", "/v1/sessions", &planted)).await;
    assert_eq!(refused.status, StatusCode::UNAUTHORIZED, "{}", refused.body);
}
