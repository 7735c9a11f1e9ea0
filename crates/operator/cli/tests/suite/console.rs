//! Issue 18 end to end: the console in a real browser. A real `gatehouse up` (mock model) gets
//! an admin key and a `chat` key limited to a session prefix, and
//! `crates/operator/cli/tests/console/console_browser.py` drives headless Chromium through selenium
//! against it: login, chat with streaming and a reload mid-reply, the documents editor against
//! the Harness workspace file, memory, nodes, skills, audit and keys, payloads shown as text, a
//! cross-site form post refused, logout, and what a `chat` key sees. Chromium, chromedriver and
//! selenium come from scripts/install (`GATEHOUSE_CHROMIUM`, `GATEHOUSE_CHROMEDRIVER`, the venv
//! of `GATEHOUSE_PYTHON`); the test fails with their names when one is missing.
//!
//! A second test runs the chat against `gatehouse up --runtime codex`, whose replies name
//! artifacts, logged in with the operator token.
//!
//! The screenshots of every page at 1280 and 390 px wide are kept as the tests' artifacts in
//! `$GATEHOUSE_TEST_ARTIFACTS/console/SCENARIO`, else `console-screenshots/SCENARIO` in cargo's
//! per-target temporary directory.

use std::path::Path;
use std::path::PathBuf;
use std::process::Command;

use crate::suite::support::Process;
use crate::suite::support::dirs;
use crate::suite::support::gatehouse;
use crate::suite::support::installed;
use crate::suite::up::Up;

/// The browser script, next to this suite.
const SCRIPT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/console/console_browser.py"
);

/// The session prefix of the `chat` key.
const CHAT_PREFIX: &str = "app-";

/// The pages the script photographs, each at both widths.
const PAGES: &[&str] = &[
    "login",
    "sessions",
    "chat",
    "documents",
    "nodes",
    "memory",
    "skills",
    "audit",
    "keys",
];

/// Returns where a scenario's screenshots go (emptied first).
fn screenshot_dir(scenario: &str) -> PathBuf {
    let root = match std::env::var_os("GATEHOUSE_TEST_ARTIFACTS") {
        Some(root) => PathBuf::from(root).join("console"),
        None => PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("console-screenshots"),
    };
    let dir = root.join(scenario);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Creates an API key through `POST /v1/keys` with the operator token and returns its secret.
async fn create_key(up: &Up, body: serde_json::Value) -> String {
    let (status, created) = up
        .request(reqwest::Method::POST, "/v1/keys", Some(body))
        .await;
    assert_eq!(status, 200, "{created}");
    created["key"].as_str().unwrap().to_owned()
}

/// Runs the browser script's `scenario` against the Gateway at `url` (run by `gateway`, with
/// the Harness root `data/harness`) with `keys` (the names and values of its variables) and
/// returns the directory of its screenshots. Fails with the script's output and the Gateway's
/// log when a check fails.
pub(crate) fn run_browser(
    scenario: &str,
    url: &str,
    gateway: &Process,
    data: &Path,
    keys: &[(&str, &str)],
) -> PathBuf {
    let python = installed("GATEHOUSE_PYTHON", "a Python venv with selenium==4.51.0");
    let chromium = installed("GATEHOUSE_CHROMIUM", "Debian's chromium");
    let chromedriver = installed("GATEHOUSE_CHROMEDRIVER", "Debian's chromium-driver");
    let screenshots = screenshot_dir(scenario);
    let scratch = data.join("browser-scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let output = Command::new(&python)
        .arg(SCRIPT)
        .arg(scenario)
        .env("GATEHOUSE_CONSOLE_URL", url)
        .envs(keys.iter().copied())
        .env(
            "GATEHOUSE_CONSOLE_WORKSPACE",
            data.join("harness").join("workspace"),
        )
        .env("GATEHOUSE_CONSOLE_SCREENSHOTS", &screenshots)
        .env("GATEHOUSE_CONSOLE_SCRATCH", &scratch)
        .env("GATEHOUSE_CHROMIUM", &chromium)
        .env("GATEHOUSE_CHROMEDRIVER", &chromedriver)
        // Selenium must use the given driver and never look for one on the network.
        .env("SE_OFFLINE", "true")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the browser script ({scenario}) failed:\n{stdout}\n{stderr}\nGateway log:\n{}",
        gateway.stderr()
    );
    assert!(
        stdout.trim_end().ends_with(r#"{"passed": true}"#),
        "{stdout}"
    );
    screenshots
}

/// Asserts that `dir` holds a PNG screenshot of each of `pages` at both widths.
pub(crate) fn assert_screenshots(dir: &Path, pages: &[&str]) {
    for page in pages {
        for width in [1280, 390] {
            let shot = dir.join(format!("{page}-{width}.png"));
            let bytes = std::fs::read(&shot)
                .unwrap_or_else(|error| panic!("no screenshot {}: {error}", shot.display()));
            assert!(
                bytes.starts_with(b"\x89PNG\r\n\x1a\n"),
                "{}",
                shot.display()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_18_the_console_works_in_a_real_browser() {
    let dirs = dirs();
    let data = dirs.base.join("data");
    let mut command = gatehouse();
    command
        .args(["up", "--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .args(["--memory-embedder", "none"]);
    let up = Up::spawn(command, None, &data.join("gateway"), &data);
    up.wait_ready().await;
    let admin_key = create_key(
        &up,
        serde_json::json!({"name": "console-admin", "scopes": ["admin"]}),
    )
    .await;
    let chat_key = create_key(
        &up,
        serde_json::json!({"name": "console-chat", "scopes": ["chat"], "sessions": CHAT_PREFIX}),
    )
    .await;

    let screenshots = run_browser(
        "pages",
        &up.url,
        &up.process,
        &data,
        &[
            ("GATEHOUSE_CONSOLE_ADMIN_KEY", &admin_key),
            ("GATEHOUSE_CONSOLE_CHAT_KEY", &chat_key),
            ("GATEHOUSE_CONSOLE_CHAT_PREFIX", CHAT_PREFIX),
        ],
    );
    assert_screenshots(&screenshots, PAGES);

    // The console's logins and logouts are audited by key name, and no secret reached the audit
    // trail or the log.
    let (status, audit) = up.request(reqwest::Method::GET, "/v1/audit", None).await;
    assert_eq!(status, 200, "{audit}");
    let audit_text = audit.to_string();
    let logins: Vec<&str> = audit["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|event| event["action"] == "console.login")
        .map(|event| event["actor"].as_str().unwrap())
        .collect();
    assert_eq!(logins, ["key:console-admin", "key:console-chat"]);
    assert!(audit_text.contains("console.logout"), "{audit_text}");
    let log = up.process.stderr();
    for secret in [&admin_key, &chat_key] {
        assert!(!audit_text.contains(secret.as_str()), "a key in the audit");
        assert!(!log.contains(secret.as_str()), "a key in the log");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_18_the_consoles_chat_downloads_a_codex_reply_artifact() {
    let dirs = dirs();
    let data = dirs.base.join("data");
    let up = Up::start_codex(&data);
    up.wait_ready().await;
    let screenshots = run_browser(
        "artifacts",
        &up.url,
        &up.process,
        &data,
        &[("GATEHOUSE_CONSOLE_ADMIN_KEY", &up.token)],
    );
    assert_screenshots(&screenshots, &["chat-artifacts"]);
    assert!(
        !up.process.stderr().contains(&up.token),
        "the operator token in the log"
    );
}
