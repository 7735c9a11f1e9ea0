"""Drives the Gatehouse console in headless Chromium through selenium.

Run by crates/operator/cli/tests/suite/console.rs against a real `gatehouse up` (mock model), which passes
everything in the environment. The first argument names the scenario: `pages` (every page, with
the native runtime), `artifacts` (a reply artifact of the Codex runtime, logged in with the
operator token) or `channels` (run by crates/operator/cli/tests/suite/channels.rs against a
`gatehouse gateway` with a webhook channel: the channels page approves the pending pairing
GATEHOUSE_CONSOLE_PAIRING_CODE).

- GATEHOUSE_CONSOLE_URL: the Gateway's base URL.
- GATEHOUSE_CONSOLE_ADMIN_KEY, GATEHOUSE_CONSOLE_CHAT_KEY: an admin key (or the operator token)
  and a chat key limited to the session prefix GATEHOUSE_CONSOLE_CHAT_PREFIX (`pages` only).
- GATEHOUSE_CONSOLE_WORKSPACE: the Harness's Agent workspace directory.
- GATEHOUSE_CONSOLE_SCREENSHOTS: where each page's screenshot at 1280 and 390 px goes.
- GATEHOUSE_CONSOLE_SCRATCH: an empty directory for the files the script uploads.
- GATEHOUSE_CHROMIUM, GATEHOUSE_CHROMEDRIVER: the browser and its driver.

Every check raises on failure, so the script exits non-zero with the reason; each passed check
prints one `ok` line.
"""

import http.server
import json
import os
import pathlib
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

BASE = os.environ["GATEHOUSE_CONSOLE_URL"].rstrip("/")
ADMIN_KEY = os.environ["GATEHOUSE_CONSOLE_ADMIN_KEY"]
CHAT_KEY = os.environ.get("GATEHOUSE_CONSOLE_CHAT_KEY", "")
CHAT_PREFIX = os.environ.get("GATEHOUSE_CONSOLE_CHAT_PREFIX", "")
WORKSPACE = pathlib.Path(os.environ["GATEHOUSE_CONSOLE_WORKSPACE"])
SCREENSHOTS = pathlib.Path(os.environ["GATEHOUSE_CONSOLE_SCREENSHOTS"])
SCRATCH = pathlib.Path(os.environ["GATEHOUSE_CONSOLE_SCRATCH"])
WAIT_SECONDS = 30
SESSION = "console-e2e"
WIDTHS = (1280, 390)

# Installed before any page script runs: a payload that executed would call it, and the call
# survives navigation in localStorage.
PWNED_HOOK = """
window.__pwned = function (where) {
  localStorage.setItem('__pwned', String(where));
};
"""
IMG_PAYLOAD = "<img src=x onerror=\"window.__pwned('img')\">"
SCRIPT_PAYLOAD = "<script>window.__pwned('script')</script>"


def ok(what):
    print(f"ok: {what}", flush=True)


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def start_browser(profile):
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ["GATEHOUSE_CHROMIUM"]
    for argument in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--no-first-run",
        "--disable-extensions",
        f"--user-data-dir={profile}",
        "--window-size=1280,900",
    ):
        options.add_argument(argument)
    service = Service(executable_path=os.environ["GATEHOUSE_CHROMEDRIVER"])
    driver = webdriver.Chrome(options=options, service=service)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": PWNED_HOOK})
    return driver


def wait_for(driver, condition, what, state=None):
    """Waits for `condition`; on a timeout the error names `what` and, when given, what
    `state(driver)` then shows."""
    try:
        return WebDriverWait(driver, WAIT_SECONDS, poll_frequency=0.02).until(
            lambda d: condition(d)
        )
    except Exception as error:
        seen = f" (the page showed {state(driver)!r})" if state else ""
        raise AssertionError(f"timed out waiting for {what}{seen}: {error}") from None


def text_of(driver, selector):
    return driver.execute_script(
        "const n = document.querySelector(arguments[0]); return n ? n.textContent : null;",
        selector,
    )


def assert_not_pwned(driver, where):
    called = driver.execute_script("return localStorage.getItem('__pwned');")
    check(called is None, f"a payload ran on {where}: {called}")
    injected = driver.execute_script(
        "return document.querySelectorAll('main img, main script, main b').length;"
    )
    check(injected == 0, f"{where} holds {injected} element(s) built from untrusted text")


def screenshot(driver, name):
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    for width in WIDTHS:
        driver.set_window_size(width, 900)
        driver.execute_script("window.scrollTo(0, 0);")
        time.sleep(0.2)
        scroll_width = driver.execute_script("return document.documentElement.scrollWidth;")
        client_width = driver.execute_script("return document.documentElement.clientWidth;")
        check(
            scroll_width <= client_width + 1,
            f"the {name} page scrolls sideways at {width} px ({scroll_width} > {client_width})",
        )
        driver.save_screenshot(str(SCREENSHOTS / f"{name}-{width}.png"))
    driver.set_window_size(1280, 900)
    ok(f"screenshots of {name} at {WIDTHS}")


def log_in(driver, key):
    driver.get(f"{BASE}/console/")
    field = wait_for(driver, lambda d: d.find_element(By.ID, "key"), "the login form")
    label = driver.find_element(By.CSS_SELECTOR, "label[for=key]").text
    check(label, "the key field has a label")
    field.send_keys(key)
    driver.find_element(By.CSS_SELECTOR, "#login-form button").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "whoami"), "the console after login")


def nav_titles(driver):
    return [a.text for a in driver.find_elements(By.CSS_SELECTOR, "header nav a")]


def send(driver, text):
    box = driver.find_element(By.ID, "message")
    driver.execute_script("arguments[0].value = arguments[1];", box, text)
    driver.find_element(By.ID, "send").click()


def transcript_contents(driver):
    return driver.execute_script(
        "return Array.from(document.querySelectorAll('#transcript .msg .content'), n => n.textContent);"
    )


def live_text(driver):
    return driver.execute_script(
        "const n = document.querySelector('#live .msg .content'); return n ? n.textContent : '';"
    )


def http_status(path, cookie, method="GET"):
    request = urllib.request.Request(f"{BASE}{path}", method=method)
    request.add_header("Cookie", f"gatehouse_console={cookie}")
    try:
        with urllib.request.urlopen(request, timeout=WAIT_SECONDS) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def session_cookie(driver):
    cookies = [c for c in driver.get_cookies() if c["name"] == "gatehouse_console"]
    check(len(cookies) == 1, f"one session cookie, got {cookies}")
    return cookies[0]


def chat_checks(driver):
    driver.get(f"{BASE}/console/chat?session={SESSION}")
    wait_for(driver, lambda d: d.find_elements(By.ID, "send-form"), "the chat page")
    for control in ("session", "message", "queue-mode", "attachment"):
        check(
            driver.find_elements(By.CSS_SELECTOR, f"label[for={control}]"),
            f"the {control} control has a label",
        )

    send(driver, "/say hello")
    wait_for(driver, lambda d: "hello" in transcript_contents(d), "the reply hello")
    ok("/say hello shows hello")

    send(driver, "/slow 200 a b c d")
    seen = []
    def grown(d):
        text = live_text(d)
        if text and (not seen or seen[-1] != text):
            seen.append(text)
        return "a b c d" in transcript_contents(d)
    wait_for(driver, grown, "the slow reply to complete")
    partial = [text for text in seen if text and text != "a b c d"]
    check(partial, f"the reply grew before it completed; seen {seen}")
    ok(f"/slow grows before completing: {seen}")

    final = "one two three four five six seven eight"
    send(driver, f"/slow 300 {final}")
    wait_for(driver, lambda d: "two" in live_text(d), "the reply to start streaming")
    last_seq = driver.execute_script(
        "return Number(sessionStorage.getItem(arguments[0]));", f"gatehouse.lastSeq.{SESSION}"
    )
    check(last_seq > 0, f"the page remembered the last event seq ({last_seq})")
    driver.refresh()
    wait_for(driver, lambda d: d.find_elements(By.ID, "send-form"), "the chat page after reload")
    resumed = wait_for(
        driver,
        lambda d: d.find_element(By.ID, "live").get_attribute("data-after"),
        "the event stream to reopen",
    )
    check(int(resumed) >= last_seq, f"the stream resumed with after={resumed}, not {last_seq}")
    after_reload = []
    def finished(d):
        text = live_text(d)
        if text:
            after_reload.append(text)
        return final in transcript_contents(d)
    wait_for(driver, finished, "the rest of the reply after the reload")
    partial = [text for text in after_reload if text != final]
    check(partial, f"deltas streamed into the page after the reload: {after_reload}")
    ok(f"reload mid-reply resumed with after={resumed}; the rest arrived ({partial[0]!r}, then all)")

    send(driver, '/tool write {"path":"tool-note.txt","content":"written by a tool"}')
    wait_for(
        driver,
        lambda d: any(c.startswith("tool write -> ") for c in transcript_contents(d)),
        "the reply after the tool result",
    )
    tool = wait_for(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#transcript details.msg.tool"),
        "the tool message",
    )[0]
    check(tool.get_attribute("open") is None, "a tool message starts collapsed")
    tool.find_element(By.TAG_NAME, "summary").click()
    check(tool.get_attribute("open") is not None, "a tool message opens on click")
    tool_output = tool.find_element(By.TAG_NAME, "pre").text
    check(tool_output and "tool write" in tool.text, f"the tool output is shown: {tool.text!r}")
    ok(f"a tool call and its result are a collapsible message: {tool_output!r}")

    upload = SCRATCH / "notes.txt"
    upload_bytes = f"attached {time.time_ns()}\n"
    upload.write_text(upload_bytes, encoding="utf-8")
    driver.find_element(By.ID, "attachment").send_keys(str(upload))
    wait_for(driver, lambda d: "notes.txt" in (text_of(d, "#attachments") or ""), "the upload")
    driver.execute_script("document.getElementById('queue-mode').value = 'followup';")
    send(driver, "/say with an attachment")
    wait_for(driver, lambda d: "with an attachment" in transcript_contents(d), "the reply")
    check(not text_of(driver, "#attachments"), "the attachment list is empty after sending")
    harness_root = WORKSPACE.parent
    staged = [
        path for path in harness_root.rglob("*notes.txt")
        if path.is_file() and path.read_text(encoding="utf-8") == upload_bytes
    ]
    check(staged, "the attachment was staged into the session's workspace on the Harness")
    ok(f"an uploaded attachment reached the Harness: {staged[0].relative_to(harness_root)}")

    # The reply may show before its turn has ended (staging and the checkpoint are slower on
    # PostgreSQL and S3): an abort sent meanwhile would stop that turn, not the hanging one.
    wait_for(driver, lambda d: "completed" in (text_of(d, "#chat-status") or ""), "the attachment turn's end")
    ended = text_of(driver, "#chat-status")
    send(driver, "/hang")
    wait_for(
        driver,
        lambda d: "running" in (text_of(d, "#chat-status") or "") and text_of(d, "#chat-status") != ended,
        "the hanging turn",
    )
    driver.find_element(By.ID, "abort").click()
    wait_for(
        driver,
        lambda d: "aborted" in (text_of(d, "#chat-status") or ""),
        "the abort",
        state=lambda d: text_of(d, "#chat-status"),
    )
    ok(f"Abort stops the running turn: {text_of(driver, '#chat-status')}")

    send(driver, f"/say {IMG_PAYLOAD}{SCRIPT_PAYLOAD}")
    wait_for(
        driver,
        lambda d: any(SCRIPT_PAYLOAD in c for c in transcript_contents(d)),
        "the payload reply shown as text",
    )
    check(any(IMG_PAYLOAD in c for c in transcript_contents(driver)), "the img payload as text")
    assert_not_pwned(driver, "the chat page")
    ok("a reply with <img onerror> and <script> is shown as text")
    screenshot(driver, "chat")


def documents_checks(driver):
    driver.get(f"{BASE}/console/documents")
    wait_for(driver, lambda d: "loaded AGENTS.md" in (text_of(d, "#doc-status") or ""), "AGENTS.md")
    content = f"# Agents\nconsole edit {time.time_ns()}\n{IMG_PAYLOAD}\n{SCRIPT_PAYLOAD}\nnaïve ✓\n"
    box = driver.find_element(By.ID, "doc-content")
    box.clear()
    box.send_keys(content)
    size = len(content.encode("utf-8"))
    check(
        text_of(driver, "#doc-size") == f"{size} / 16384 bytes",
        f"the size counter says {text_of(driver, '#doc-size')}, not {size} bytes",
    )
    driver.find_element(By.ID, "doc-save").click()
    wait_for(driver, lambda d: "saved AGENTS.md" in (text_of(d, "#doc-status") or ""), "the save")
    on_disk = (WORKSPACE / "AGENTS.md").read_text(encoding="utf-8")
    check(on_disk == content, f"the Harness file holds {on_disk!r}, not {content!r}")
    ok("Save wrote the new bytes to the Harness workspace file")

    harness_edit = f"# Agents\nedited on the Harness {time.time_ns()} {SCRIPT_PAYLOAD}\n"
    (WORKSPACE / "AGENTS.md").write_text(harness_edit, encoding="utf-8")
    driver.find_element(By.ID, "doc-reload").click()
    wait_for(
        driver,
        lambda d: d.find_element(By.ID, "doc-content").get_property("value") == harness_edit,
        "the Harness edit after Reload",
    )
    assert_not_pwned(driver, "the documents page")
    ok("Reload shows the edit made on the Harness")

    driver.execute_script(
        "const box = document.getElementById('doc-content');"
        "box.value = 'x'.repeat(16385); box.dispatchEvent(new Event('input'));"
    )
    counter = driver.find_element(By.ID, "doc-size")
    check("error" in counter.get_attribute("class"), "the counter marks a document over 16 KiB")
    driver.find_element(By.ID, "doc-save").click()
    wait_for(
        driver,
        lambda d: "not saved: INVALID_REQUEST" in (text_of(d, "#doc-status") or ""),
        "the API's refusal of an oversized document",
    )
    check(
        (WORKSPACE / "AGENTS.md").read_text(encoding="utf-8") == harness_edit,
        "a refused save left the file alone",
    )
    ok(f"an oversized save shows the API's message: {text_of(driver, '#doc-status')}")
    driver.find_element(By.ID, "doc-reload").click()
    wait_for(
        driver,
        lambda d: d.find_element(By.ID, "doc-content").get_property("value") == harness_edit,
        "the reload after the refusal",
    )
    screenshot(driver, "documents")


def memory_checks(driver):
    hostile = WORKSPACE / "memory" / "<b>x<" / "b>.md"
    hostile.parent.mkdir(parents=True, exist_ok=True)
    hostile.write_text(f"zebraquartz notes {IMG_PAYLOAD}\n", encoding="utf-8")
    driver.get(f"{BASE}/console/memory")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#memory-index dt"), "the index status")
    driver.find_element(By.ID, "memory-reindex").click()
    wait_for(driver, lambda d: "reindexed" in (text_of(d, "#memory-status") or ""), "the reindex")
    progress = driver.execute_script(
        "const p = document.getElementById('memory-progress'); return [p.value, p.max];"
    )
    check(progress[0] == progress[1], f"the progress bar is full after the reindex: {progress}")
    ok(f"reindex finished: {text_of(driver, '#memory-status')}")
    driver.find_element(By.ID, "memory-query").send_keys("zebraquartz")
    driver.find_element(By.CSS_SELECTOR, "#memory-search button").click()
    wait_for(
        driver,
        lambda d: "memory/<b>x</b>.md" in (text_of(d, "#memory-results") or ""),
        "the workspace file named <b>x</b>.md in the results",
    )
    check("score" in text_of(driver, "#memory-results"), "the results show their scores")
    assert_not_pwned(driver, "the memory page")
    ok("a workspace file named <b>x</b>.md is shown as text in memory search")
    screenshot(driver, "memory")


def admin_pages(driver):
    driver.get(f"{BASE}/console/")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#sessions tbody tr"), "sessions")
    check(SESSION in text_of(driver, "#sessions"), "the sessions page lists the chat session")
    ok("the sessions page lists the session")
    screenshot(driver, "sessions")

    driver.get(f"{BASE}/console/nodes")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#nodes tbody tr"), "nodes")
    check("connected" in text_of(driver, "#nodes tbody"), "the embedded node is listed")
    check(
        "worker slots in use" in text_of(driver, "#nodes tbody"),
        f"the node's capacity and slots are shown: {text_of(driver, '#nodes tbody')}",
    )
    driver.find_element(By.CSS_SELECTOR, "#setup-code-form button").click()
    wait_for(
        driver,
        lambda d: d.find_element(By.ID, "setup-code").get_property("value"),
        "an issued setup code",
    )
    ok("the nodes page lists the node and issues a setup code")
    screenshot(driver, "nodes")

    skill = WORKSPACE / "skills" / "hostile"
    skill.mkdir(parents=True, exist_ok=True)
    description = f"Says {IMG_PAYLOAD} and {SCRIPT_PAYLOAD}".replace("'", "''")
    (skill / "SKILL.md").write_text(
        f"---\nname: hostile\ndescription: '{description}'\n---\n# hostile\n",
        encoding="utf-8",
    )
    driver.get(f"{BASE}/console/skills")
    wait_for(driver, lambda d: "hostile" in (text_of(d, "#skills tbody") or ""), "the skills")
    check(SCRIPT_PAYLOAD in text_of(driver, "#skills tbody"), "the description is shown as text")
    assert_not_pwned(driver, "the skills page")
    ok(f"the skills page shows a hostile description as text: {text_of(driver, '#skills-status')}")
    screenshot(driver, "skills")

    driver.get(f"{BASE}/console/audit")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#audit tbody tr"), "audit rows")
    driver.find_element(By.ID, "audit-action").send_keys("console.login")
    driver.find_element(By.CSS_SELECTOR, "#audit-filter button").click()
    actions = driver.execute_script(
        "return Array.from(document.querySelectorAll('#audit tbody tr td:nth-child(4)'), n => n.textContent);"
    )
    check(actions and set(actions) == {"console.login"}, f"the action filter shows {actions}")
    ok("the audit page filters by action")
    screenshot(driver, "audit")

    driver.get(f"{BASE}/console/keys")
    wait_for(driver, lambda d: "console-chat" in (text_of(d, "#keys tbody") or ""), "the keys")
    check(CHAT_KEY not in driver.page_source, "the keys page shows no secret")
    ok("the keys page lists the keys without secrets")
    screenshot(driver, "keys")


class EvilPages(http.server.BaseHTTPRequestHandler):
    """Serves forms that post to the console from another origin (another port, same host)."""

    def do_GET(self):
        targets = {
            "/logout": ("/console/logout", "csrf", "guess"),
            "/login": ("/console/login", "key", ADMIN_KEY),
        }
        action, name, value = targets[self.path]
        body = (
            "<!DOCTYPE html><html><body>"
            f"<form id=f method=post action='{BASE}{action}'>"
            f"<input name={name} value='{value}'></form>"
            "<script>document.getElementById('f').submit()</script></body></html>"
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def cross_site_checks(driver):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), EvilPages)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    evil = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        for path in ("/logout", "/login"):
            driver.get(f"{evil}{path}")
            wait_for(
                driver,
                lambda d: d.current_url.startswith(BASE)
                and "FORBIDDEN" in (text_of(d, "#error-message") or ""),
                f"the refusal of the cross-site POST {path}",
            )
            ok(f"a cross-site form POST to /console{path} is refused: {text_of(driver, '#error-message')}")
    finally:
        server.shutdown()
    driver.get(f"{BASE}/console/")
    wait_for(driver, lambda d: d.find_elements(By.ID, "whoami"), "the session after the forged logout")
    ok("the forged logout left the session alone")


def chat_key_checks(driver):
    log_in(driver, CHAT_KEY)
    titles = nav_titles(driver)
    check(titles == ["Sessions", "Chat"], f"a chat key's navigation is {titles}")
    for page in ("documents", "nodes", "audit", "keys", "memory", "skills", "channels"):
        driver.get(f"{BASE}/console/{page}")
        wait_for(driver, lambda d: d.find_elements(By.ID, "denied"), f"the refusal of {page}")
    ok("a chat key sees only Sessions and Chat, and the other pages refuse it")
    driver.get(f"{BASE}/console/")
    wait_for(driver, lambda d: d.find_elements(By.ID, "whoami"), "the sessions page")
    check(SESSION not in driver.page_source, "a prefixed chat key does not see other sessions")
    statuses = driver.execute_async_script(
        """
        const done = arguments[arguments.length - 1];
        const paths = ['/v1/agents/main/files/AGENTS.md', '/v1/nodes', '/v1/audit', '/v1/keys',
                       '/v1/sessions/console-e2e/transcript'];
        Promise.all(paths.map(p => fetch(p).then(r => r.json().then(b => [p, r.status, b.error && b.error.code]))))
          .then(done);
        """
    )
    for path, status, code in statuses:
        check(status == 403 and code == "SCOPE_DENIED", f"{path} answered {status} {code}")
    ok(f"the routes answer 403 when called by hand: {statuses}")
    session = f"{CHAT_PREFIX}console"
    driver.get(f"{BASE}/console/chat?session={session}")
    wait_for(driver, lambda d: d.find_elements(By.ID, "send-form"), "the chat key's chat page")
    send(driver, "/say from the chat key")
    wait_for(driver, lambda d: "from the chat key" in transcript_contents(d), "the chat key's reply")
    ok("a chat key chats in a session under its prefix")


def logout_checks(driver):
    cookie = session_cookie(driver)["value"]
    check(http_status("/v1/sessions", cookie) == 200, "the cookie authenticates /v1")
    driver.find_element(By.CSS_SELECTOR, "form.logout button").click()
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-form"), "the login page after logout")
    check(http_status("/v1/sessions", cookie) == 401, "the old cookie is refused after logout")
    ok("logout ends the session on the server")


def artifact_checks(driver):
    log_in(driver, ADMIN_KEY)
    check(text_of(driver, "#whoami") == "operator", "logged in with the operator token")
    driver.get(f"{BASE}/console/chat?session=codex-artifacts")
    wait_for(driver, lambda d: d.find_elements(By.ID, "send-form"), "the chat page")
    artifact_bytes = f"artifact {time.time_ns()}\n"
    (WORKSPACE / "report.txt").write_text(artifact_bytes, encoding="utf-8")
    send(driver, "/say MEDIA:report.txt")
    link = wait_for(
        driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#artifacts a"), "the artifact link"
    )[0]
    check(link.text == "report.txt", f"the artifact is listed by its path: {link.text!r}")
    check(link.get_attribute("download") == "report.txt", "the artifact downloads as report.txt")
    downloaded = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0]).then(r => r.text()).then(done);",
        link.get_attribute("href"),
    )
    check(downloaded == artifact_bytes, f"the artifact holds {downloaded!r}")
    ok("a reply artifact is listed and downloads")
    send(driver, "/say MEDIA:../gateway/operator-token")
    refusal = wait_for(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, "#artifacts li.error"),
        "the refusal of an artifact outside the workspace",
    )[0].text
    check(refusal.startswith("../gateway/operator-token refused: "), f"the refusal says {refusal!r}")
    check(len(driver.find_elements(By.CSS_SELECTOR, "#artifacts a")) == 1, "no second artifact")
    ok(f"an artifact outside the workspace is listed as refused: {refusal}")
    screenshot(driver, "chat-artifacts")


def channels_checks(driver):
    """The channels page of a Gateway with one webhook channel and one pending pairing."""
    code = os.environ["GATEHOUSE_CONSOLE_PAIRING_CODE"]
    driver.get(f"{BASE}/console/")
    log_in(driver, ADMIN_KEY)
    driver.get(f"{BASE}/console/channels")
    wait_for(driver, lambda d: d.find_elements(By.CSS_SELECTOR, "#channels tbody tr"), "the channels")
    row = text_of(driver, "#channels tbody")
    check(all(word in row for word in ("hooks", "webhook", "connected")), f"the channel row is {row!r}")
    wait_for(driver, lambda d: code in (text_of(d, "#pairings tbody") or ""), "the pending pairing")
    check("bob" in text_of(driver, "#pairings tbody"), "the pairing names its sender")
    ok("the channels page lists the channel and its pending pairing")
    screenshot(driver, "channels")
    driver.find_element(By.CSS_SELECTOR, f'button[aria-label="Approve {code}"]').click()
    wait_for(
        driver,
        lambda d: "approved bob on hooks" in (text_of(d, "#channels-status") or ""),
        "the approval",
    )
    wait_for(driver, lambda d: not d.find_elements(By.CSS_SELECTOR, "#pairings tbody tr"), "no pairing left")
    assert_not_pwned(driver, "the channels page")
    ok("the channels page approves a pairing")


def pages(driver):
    driver.get(f"{BASE}/console/")
    wait_for(driver, lambda d: d.find_elements(By.ID, "login-form"), "the login page")
    screenshot(driver, "login")
    log_in(driver, ADMIN_KEY)
    cookie = session_cookie(driver)
    check(cookie["httpOnly"] and cookie["sameSite"] == "Strict", f"cookie flags: {cookie}")
    check(cookie["value"] != ADMIN_KEY, "the cookie is not the key")
    stored = driver.execute_script(
        "return JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + location.href + document.cookie;"
    )
    check(ADMIN_KEY not in stored, "the key is in no storage, URL or script-visible cookie")
    check(
        nav_titles(driver)
        == ["Sessions", "Chat", "Agent documents", "Nodes", "Memory", "Skills", "Audit", "API keys", "Channels"],
        f"an admin key's navigation is {nav_titles(driver)}",
    )
    ok("logged in with an admin key; the cookie is HttpOnly and SameSite=Strict")

    chat_checks(driver)
    documents_checks(driver)
    memory_checks(driver)
    admin_pages(driver)
    cross_site_checks(driver)
    logout_checks(driver)
    chat_key_checks(driver)
    assert_not_pwned(driver, "the last page")


def main():
    scenario = {"pages": pages, "artifacts": artifact_checks, "channels": channels_checks}[sys.argv[1]]
    with tempfile.TemporaryDirectory(prefix="gatehouse-console-browser-") as profile:
        driver = start_browser(profile)
        try:
            scenario(driver)
            print(json.dumps({"passed": True}), flush=True)
        finally:
            driver.quit()


if __name__ == "__main__":
    main()
