//! Issue 19: `worktree` sessions through a real `gatehouse up` with the mock model: the agent's
//! changes (edits, an executable, a link, a deletion) reach the Gateway's worktree, a Gateway-side
//! edit survives a conflicting agent edit, a result staged when the Gateway dies is applied once
//! at the next start, a new turn waits for the previous result and gives up after 15 s, and a
//! result with a link out of the tree is refused whole.

use std::path::Path;
use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;

use crate::suite::support::WAIT;
use crate::suite::support::gatehouse;
use crate::suite::up::Up;

/// A read of a worktree path: status, `x-gatehouse-*` headers, body.
pub(crate) struct Read {
    pub(crate) status: u16,
    executable: Option<String>,
    link_target: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) body: Vec<u8>,
}

pub(crate) async fn read(up: &Up, session: &str, path: &str) -> Read {
    let response = reqwest::Client::new()
        .get(format!("{}/v1/sessions/{session}/{path}", up.url))
        .bearer_auth(&up.token)
        .timeout(WAIT)
        .send()
        .await
        .unwrap();
    let header = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|value| value.to_str().unwrap().to_owned())
    };
    let (executable, link_target, version) = (
        header("x-gatehouse-executable"),
        header("x-gatehouse-link-target"),
        header("x-gatehouse-worktree-version"),
    );
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap().to_vec();
    Read {
        status,
        executable,
        link_target,
        version,
        body,
    }
}

pub(crate) async fn write(up: &Up, session: &str, path: &str, content: &str) -> serde_json::Value {
    let request = reqwest::Client::new()
        .put(format!("{}/v1/sessions/{session}/worktree/{path}", up.url))
        .bearer_auth(&up.token)
        .body(content.to_owned())
        .timeout(WAIT);
    let (status, body) = crate::suite::support::status_and_json(request).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Creates `session` as a worktree session.
pub(crate) async fn create_worktree_session(up: &Up, session: &str) {
    let (status, body) = up
        .request(
            reqwest::Method::PUT,
            &format!("/v1/sessions/{session}"),
            Some(serde_json::json!({"workspace": {"source": "worktree"}})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(body["workspace"]["source"], "worktree", "{body}");
}

/// Posts one message and returns its turn once it ended.
pub(crate) async fn run(up: &Up, session: &str, text: &str) -> serde_json::Value {
    let (status, accepted) = up.post(session, serde_json::json!({"text": text})).await;
    assert_eq!(status, 202, "{accepted}");
    up.turn_status(accepted["turnId"].as_str().unwrap(), 60)
        .await
}

pub(crate) fn exec(command: &str) -> String {
    format!("/tool exec {}", serde_json::json!({"command": command}))
}

/// Waits until the turn's workspace result is applied and returns the turn.
pub(crate) async fn applied(up: &Up, turn_id: &str) -> serde_json::Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let turn = up.turn_status(turn_id, 0).await;
        if turn["workspace"]["state"] == "applied" {
            return turn;
        }
        assert!(
            Instant::now() < deadline,
            "the result was never applied: {turn}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn data_dir() -> (tempfile::TempDir, std::path::PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    (temp, data)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_19_a_worktree_takes_the_agents_changes_and_keeps_its_own_on_conflict() {
    let (_temp, data) = data_dir();
    let up = Up::start(&data);
    up.wait_ready().await;
    create_worktree_session(&up, "w1").await;
    // The worktree's first files, written on the Gateway side before the first turn: they are
    // the workspace's inventory.
    write(&up, "w1", "a.txt", "one\n").await;
    write(&up, "w1", "c.txt", "gone\n").await;
    let first = run(
        &up,
        "w1",
        &exec(
            "cat a.txt c.txt && printf 'agent\\n' > a.txt && printf '#!/bin/sh\\necho b\\n' > b.sh \
             && chmod +x b.sh && ln -s a.txt l && rm c.txt",
        ),
    )
    .await;
    assert_eq!(first["status"], "completed", "{first}");
    let reply = first["reply"].as_str().unwrap();
    assert!(
        reply.contains("one") && reply.contains("gone"),
        "the inventory did not reach the workspace: {first}"
    );
    let first = applied(&up, first["turnId"].as_str().unwrap()).await;
    assert_eq!(
        first["workspace"]["conflicts"],
        serde_json::json!([]),
        "{first}"
    );
    assert_eq!(
        first["workspace"]["applied"],
        serde_json::json!(["a.txt", "b.sh", "c.txt", "l"]),
        "{first}"
    );
    let a = read(&up, "w1", "worktree/a.txt").await;
    assert_eq!((a.status, a.body.as_slice()), (200, &b"agent\n"[..]));
    let b = read(&up, "w1", "worktree/b.sh").await;
    assert_eq!((b.status, b.executable.as_deref()), (200, Some("true")));
    let l = read(&up, "w1", "worktree/l").await;
    assert_eq!((l.status, l.link_target.as_deref()), (200, Some("a.txt")));
    assert_eq!(read(&up, "w1", "worktree/c.txt").await.status, 404);
    // The archive holds exactly that: the link as a link, the script executable.
    let tar = read(&up, "w1", "worktree.tar").await;
    assert_eq!(tar.status, 200);
    let listing = list_tar(&data, &tar.body);
    assert_eq!(
        listing,
        vec![
            String::from("-rw-r--r-- a.txt"),
            String::from("-rwxr-xr-x b.sh"),
            String::from("lrwxrwxrwx l -> a.txt"),
        ]
    );

    // A Gateway-side edit of a.txt, then a turn that edits a.txt and adds d.txt.
    write(&up, "w1", "a.txt", "gateway\n").await;
    let second = run(
        &up,
        "w1",
        &exec("printf 'agent two\\n' > a.txt && printf 'dee\\n' > d.txt"),
    )
    .await;
    assert_eq!(second["status"], "completed", "{second}");
    let turn_id = second["turnId"].as_str().unwrap().to_owned();
    let second = applied(&up, &turn_id).await;
    assert_eq!(
        second["workspace"]["conflicts"],
        serde_json::json!(["a.txt"]),
        "{second}"
    );
    assert_eq!(
        second["workspace"]["applied"],
        serde_json::json!(["d.txt"]),
        "{second}"
    );
    assert_eq!(
        second["workspace"]["stagedRef"],
        format!("refs/gatehouse/worker-results/{turn_id}"),
        "{second}"
    );
    assert_eq!(read(&up, "w1", "worktree/a.txt").await.body, b"gateway\n");
    assert_eq!(read(&up, "w1", "worktree/d.txt").await.body, b"dee\n");
    let diff = String::from_utf8(read(&up, "w1", "worktree/diff").await.body).unwrap();
    for expected in [
        "diff --git a/b.sh b/b.sh\nnew file mode 100755",
        "+gateway",
        "+dee",
        "diff --git a/l b/l\nnew file mode 120000",
    ] {
        assert!(
            diff.contains(expected),
            "{expected:?} is not in the diff:\n{diff}"
        );
    }
    let events = session_events(&up, "w1").await;
    assert!(
        events.contains("event: workspace.conflict") && events.contains(&turn_id),
        "no workspace.conflict event: {events}"
    );
    let (status, session) = up
        .request(reqwest::Method::GET, "/v1/sessions/w1", None)
        .await;
    assert_eq!(
        (status, &session["workspace"]["source"]),
        (200, &serde_json::json!("worktree"))
    );
    // The source is locked once the session has messages.
    let (status, refused) = up
        .request(
            reqwest::Method::PUT,
            "/v1/sessions/w1",
            Some(serde_json::json!({"workspace": {"source": "empty"}})),
        )
        .await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (409, &serde_json::json!("SESSION_SOURCE_LOCKED"))
    );

    // The history as a git repository: one commit per version, each turn's whole result a ref.
    let exported = data.join("exported");
    let output = session_cli(&up, &["export", "w1", "--to", exported.to_str().unwrap()]);
    assert!(output.status.success(), "{output:?}");
    let first_turn = first["turnId"].as_str().unwrap();
    let subjects = git(&exported, &["log", "--format=%s", "main"]);
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        vec![
            format!("turn {turn_id}"),
            String::from("edit by operator"),
            format!("turn {first_turn}"),
            String::from("edit by operator"),
            String::from("edit by operator"),
            String::from("start"),
        ]
    );
    assert_eq!(
        std::fs::read_to_string(exported.join("a.txt")).unwrap(),
        "gateway\n"
    );
    assert_eq!(
        std::fs::read_to_string(exported.join("d.txt")).unwrap(),
        "dee\n"
    );
    assert_eq!(
        std::fs::read_link(exported.join("l")).unwrap(),
        Path::new("a.txt")
    );
    assert_eq!(
        crate::suite::support::mode(&exported.join("b.sh")) & 0o111,
        0o111
    );
    assert!(!exported.join("c.txt").exists());
    let staged = format!("refs/gatehouse/worker-results/{turn_id}");
    assert_eq!(
        git(&exported, &["show", &format!("{staged}:a.txt")]),
        "agent two"
    );
    assert_eq!(
        git(&exported, &["rev-parse", &format!("{staged}^")]),
        git(&exported, &["rev-parse", "main^"]),
        "a staged result's parent is the version it was merged into"
    );
    // `session create` sets a source from the command line.
    let output = session_cli(&up, &["create", "w9", "--worktree"]);
    assert!(output.status.success(), "{output:?}");
    let (_, created) = up
        .request(reqwest::Method::GET, "/v1/sessions/w9", None)
        .await;
    assert_eq!(created["workspace"]["source"], "worktree", "{created}");
}

/// Runs `gatehouse session ARGS` against `up` as the operator.
fn session_cli(up: &Up, args: &[&str]) -> std::process::Output {
    gatehouse()
        .arg("session")
        .args(args)
        .args(["--url", &up.url])
        .env("GATEHOUSE_TOKEN", &up.token)
        .output()
        .unwrap()
}

/// Lists a tar archive with the system `tar`, one `MODE PATH[ -> TARGET]` per entry.
fn list_tar(scratch: &Path, archive: &[u8]) -> Vec<String> {
    std::fs::create_dir_all(scratch).unwrap();
    let file = scratch.join("worktree.tar");
    std::fs::write(&file, archive).unwrap();
    let output = std::process::Command::new("tar")
        .arg("-tvf")
        .arg(&file)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            format!("{} {}", fields[0], fields[5..].join(" "))
        })
        .collect()
}

/// Reads the session's durable events from the start, for a moment.
async fn session_events(up: &Up, session: &str) -> String {
    let mut response = reqwest::Client::new()
        .get(format!("{}/v1/sessions/{session}/events?after=0", up.url))
        .bearer_auth(&up.token)
        .send()
        .await
        .unwrap();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout_at(deadline, response.chunk()).await {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if text.contains("workspace.conflict") && text.contains("turn.completed") {
            break;
        }
    }
    text
}

/// Starts `up` on `data` with every worktree apply held back `delay_ms`.
fn start_delayed(data: &Path, delay_ms: u64) -> Up {
    let mut command = gatehouse();
    command.env(
        "GATEHOUSE_TEST_WORKTREE_APPLY_DELAY_MS",
        delay_ms.to_string(),
    );
    Up::start_with(command, data)
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_19_a_turn_waits_for_the_previous_result_then_fails_reconciling() {
    let (_temp, data) = data_dir();
    let up = start_delayed(&data, 60_000);
    up.wait_ready().await;
    create_worktree_session(&up, "w2").await;
    let first = run(&up, "w2", &exec("printf 'x\\n' > x.txt")).await;
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(first["workspace"]["state"], "staged", "{first}");
    let started = Instant::now();
    let second = run(&up, "w2", "/say after").await;
    assert_eq!(second["status"], "failed", "{second}");
    assert_eq!(second["error"]["code"], "WORKSPACE_RECONCILING", "{second}");
    assert!(
        second["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the previous turn's workspace result is still reconciling"),
        "{second}"
    );
    // It waited for the result first (the figure is a floor, not a timing assertion).
    assert!(started.elapsed() >= Duration::from_secs(15), "{second}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_19_a_result_staged_when_the_gateway_died_is_applied_once_at_the_next_start() {
    let (_temp, data) = data_dir();
    let mut up = start_delayed(&data, 600_000);
    up.wait_ready().await;
    create_worktree_session(&up, "w3").await;
    write(&up, "w3", "a.txt", "base\n").await;
    let turn = run(
        &up,
        "w3",
        &exec("printf 'agent\\n' > a.txt && printf 'new\\n' > n.txt"),
    )
    .await;
    assert_eq!(turn["status"], "completed", "{turn}");
    assert_eq!(turn["workspace"]["state"], "staged", "{turn}");
    let turn_id = turn["turnId"].as_str().unwrap().to_owned();
    // Staged, not applied: the worktree still has the Gateway's version.
    assert_eq!(read(&up, "w3", "worktree/a.txt").await.body, b"base\n");
    up.process.kill();
    let up = Up::start(&data);
    up.wait_ready().await;
    let turn = applied(&up, &turn_id).await;
    assert_eq!(turn["status"], "completed", "{turn}");
    assert_eq!(
        turn["workspace"]["applied"],
        serde_json::json!(["a.txt", "n.txt"]),
        "{turn}"
    );
    let a = read(&up, "w3", "worktree/a.txt").await;
    assert_eq!(a.body, b"agent\n");
    // Versions: the start, the edit, and one apply: applied once.
    assert_eq!(a.version.as_deref(), Some("3"));
    assert_eq!(read(&up, "w3", "worktree/n.txt").await.body, b"new\n");
    // The turn was not replayed: its two messages are the transcript.
    let roles: Vec<String> = up
        .transcript("w3")
        .await
        .iter()
        .map(|message| message["role"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(roles.first().map(String::as_str), Some("user"));
    assert_eq!(
        roles.iter().filter(|role| *role == "user").count(),
        1,
        "{roles:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_19_a_result_with_a_link_out_of_the_tree_is_refused_whole() {
    let (_temp, data) = data_dir();
    let up = Up::start(&data);
    up.wait_ready().await;
    create_worktree_session(&up, "w4").await;
    write(&up, "w4", "a.txt", "kept\n").await;
    // An absolute link, then a relative one that climbs out: each result is refused whole.
    for (command, link) in [
        (
            "printf 'changed\\n' > a.txt && ln -s /etc/passwd out",
            "out",
        ),
        ("rm out && ln -s ../../outside out2", "out2"),
    ] {
        let turn = run(&up, "w4", &exec(command)).await;
        assert_eq!(turn["status"], "failed", "{turn}");
        assert_eq!(turn["error"]["code"], "CHECKPOINT_INVALID", "{turn}");
        assert!(turn.get("workspace").is_none(), "{turn}");
        let a = read(&up, "w4", "worktree/a.txt").await;
        assert_eq!(
            (a.body.as_slice(), a.version.as_deref()),
            (&b"kept\n"[..], Some("2"))
        );
        assert_eq!(
            read(&up, "w4", &format!("worktree/{link}")).await.status,
            404
        );
    }
}

/// Runs `git` in `dir` and returns its trimmed standard output.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(output.status.success(), "git {args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A repository past a checkpoint's 16 MiB bound: the checkpoint leaves the big file out and
/// names it, and a lost workspace is rebuilt by the node from the pinned commit with the
/// checkpoint laid over it, so the big file comes back from the commit, the agent's edits and
/// its new file from the checkpoint, and the file it deleted stays deleted.
#[tokio::test(flavor = "multi_thread")]
async fn issue_19_a_repository_past_the_checkpoint_bound_is_rebuilt_whole() {
    use sha2::Digest;
    let (temp, data) = data_dir();
    let source = temp.path().canonicalize().unwrap().join("source");
    std::fs::create_dir_all(&source).unwrap();
    git(&source, &["init", "-q", "-b", "main"]);
    // 17 MiB that do not compress, so the commit is past the bound however git stores it.
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let big: Vec<u8> = (0..17 * 1024 * 1024)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            (state >> 56) as u8
        })
        .collect();
    let big_sha = hex::encode(sha2::Sha256::digest(&big));
    std::fs::write(source.join("big.bin"), &big).unwrap();
    std::fs::write(source.join("a.txt"), "original\n").unwrap();
    std::fs::write(source.join("gone.txt"), "to be deleted\n").unwrap();
    git(&source, &["add", "."]);
    git(&source, &["commit", "-q", "-m", "big"]);
    let url = format!("file://{}", source.display());
    let up = Up::start(&data);
    up.wait_ready().await;
    let (status, created) = up
        .request(
            reqwest::Method::PUT,
            "/v1/sessions/big",
            Some(serde_json::json!({"workspace": {"source": "repository", "url": url}})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let first = run(
        &up,
        "big",
        &exec("printf 'edited\\n' > a.txt && rm gone.txt && printf 'mine\\n' > mine.txt && wc -c < big.bin"),
    )
    .await;
    assert_eq!(first["status"], "completed", "{first}");
    assert!(
        first["reply"]
            .as_str()
            .unwrap()
            .contains(&big.len().to_string()),
        "{first}"
    );
    let (status, moved) = up
        .request(
            reqwest::Method::POST,
            "/v1/sessions/big/move",
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(status, 200, "{moved}");
    let second = run(
        &up,
        "big",
        &exec("sha256sum big.bin && cat a.txt mine.txt && ls gone.txt 2>&1; true"),
    )
    .await;
    assert_eq!(second["status"], "completed", "{second}");
    let reply = second["reply"].as_str().unwrap();
    assert!(
        reply.contains(&big_sha),
        "the big file did not come back: {second}"
    );
    assert!(
        reply.contains("edited") && reply.contains("mine") && !reply.contains("original"),
        "{second}"
    );
    assert!(
        reply.contains("No such file"),
        "gone.txt came back: {second}"
    );
    assert!(
        up.process
            .stderr()
            .contains("rebuilt a lost session workspace from its pinned commit and checkpoint"),
        "the rebuild did not lay the checkpoint over the commit"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_19_a_repository_session_is_pinned_to_its_commit_and_rebuilt_from_it() {
    let (temp, data) = data_dir();
    let source = temp.path().canonicalize().unwrap().join("source");
    std::fs::create_dir_all(&source).unwrap();
    git(&source, &["init", "-q", "-b", "main"]);
    std::fs::write(source.join("a.txt"), "tagged\n").unwrap();
    git(&source, &["add", "a.txt"]);
    git(&source, &["commit", "-q", "-m", "one"]);
    git(&source, &["tag", "v1"]);
    let tagged = git(&source, &["rev-parse", "v1^{commit}"]);
    let bare = temp.path().canonicalize().unwrap().join("origin.git");
    git(
        temp.path(),
        &[
            "clone",
            "-q",
            "--bare",
            source.to_str().unwrap(),
            bare.to_str().unwrap(),
        ],
    );
    let url = format!("file://{}", bare.display());
    let up = Up::start(&data);
    up.wait_ready().await;
    let (status, created) = up
        .request(
            reqwest::Method::PUT,
            "/v1/sessions/r1",
            Some(
                serde_json::json!({"workspace": {"source": "repository", "url": url, "ref": "v1"}}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let first = run(&up, "r1", &exec("cat a.txt && printf 'mine\\n' > mine.txt")).await;
    assert_eq!(first["status"], "completed", "{first}");
    assert!(
        first["reply"].as_str().unwrap().contains("tagged"),
        "{first}"
    );
    let (_, session) = up
        .request(reqwest::Method::GET, "/v1/sessions/r1", None)
        .await;
    assert_eq!(session["workspace"]["commit"], tagged, "{session}");
    // The tag moves; the session stays on its commit.
    std::fs::write(source.join("a.txt"), "moved\n").unwrap();
    git(&source, &["commit", "-q", "-am", "two"]);
    git(&source, &["tag", "-f", "v1"]);
    git(
        &source,
        &[
            "push",
            "-q",
            "--force",
            bare.to_str().unwrap(),
            "main",
            "refs/tags/v1",
        ],
    );
    assert_ne!(git(&bare, &["rev-parse", "v1^{commit}"]), tagged);
    // The session workspace is deleted (the move discards it on the node): the next turn
    // rebuilds it from the pinned commit and the agent's checkpointed change.
    let (status, moved) = up
        .request(
            reqwest::Method::POST,
            "/v1/sessions/r1/move",
            Some(serde_json::json!({})),
        )
        .await;
    assert_eq!(status, 200, "{moved}");
    let second = run(&up, "r1", &exec("cat a.txt mine.txt")).await;
    assert_eq!(second["status"], "completed", "{second}");
    let reply = second["reply"].as_str().unwrap();
    assert!(
        reply.contains("tagged") && reply.contains("mine") && !reply.contains("moved"),
        "{second}"
    );
    let (_, session) = up
        .request(reqwest::Method::GET, "/v1/sessions/r1", None)
        .await;
    assert_eq!(session["workspace"]["commit"], tagged, "{session}");
    // A ref that does not resolve fails the first turn.
    let (status, _) = up
        .request(
            reqwest::Method::PUT,
            "/v1/sessions/r2",
            Some(serde_json::json!({"workspace": {"source": "repository", "url": url, "ref": "no-such-tag"}})),
        )
        .await;
    assert_eq!(status, 201);
    let failed = run(&up, "r2", "/say hi").await;
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("SOURCE_UNAVAILABLE")),
        "{failed}"
    );
    // Credentials never ride in a URL, and only an admin names a path on the node host.
    let (status, refused) = up
        .request(
            reqwest::Method::PUT,
            "/v1/sessions/r4",
            Some(serde_json::json!({"workspace": {"source": "repository", "url": "https://ghp_secret@example.com/r.git"}})),
        )
        .await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (400, &serde_json::json!("INVALID_REQUEST")),
        "{refused}"
    );
    assert!(!refused.to_string().contains("ghp_secret"), "{refused}");
    let (status, key) = up
        .request(
            reqwest::Method::POST,
            "/v1/keys",
            Some(serde_json::json!({"name": "chat-r5", "scopes": ["chat"], "sessions": "r5"})),
        )
        .await;
    assert_eq!(status, 200, "{key}");
    let as_chat_key = |source: serde_json::Value| {
        let request = reqwest::Client::new()
            .put(format!("{}/v1/sessions/r5", up.url))
            .bearer_auth(key["key"].as_str().unwrap())
            .json(&serde_json::json!({"workspace": source}));
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(
        as_chat_key(serde_json::json!({"source": "worktree", "from": {"url": url}})).await,
        403
    );
    assert_eq!(
        as_chat_key(
            serde_json::json!({"source": "repository", "url": "https://example.com/r.git"})
        )
        .await,
        201
    );
    // A worktree from the repository starts from the ref's tree (the moved tag now), fetched by
    // the node: the agent sees it, and the worktree holds it as its first version.
    let (status, _) = up
        .request(
            reqwest::Method::PUT,
            "/v1/sessions/r3",
            Some(serde_json::json!({"workspace": {"source": "worktree", "from": {"url": url, "ref": "v1"}}})),
        )
        .await;
    assert_eq!(status, 201);
    assert_eq!(
        read(&up, "r3", "worktree/a.txt").await.status,
        404,
        "no worktree before the first turn"
    );
    let third = run(&up, "r3", &exec("cat a.txt && printf 'added\\n' > b.txt")).await;
    assert_eq!(third["status"], "completed", "{third}");
    assert!(
        third["reply"].as_str().unwrap().contains("moved"),
        "{third}"
    );
    let third = applied(&up, third["turnId"].as_str().unwrap()).await;
    assert_eq!(
        third["workspace"]["applied"],
        serde_json::json!(["b.txt"]),
        "{third}"
    );
    let a = read(&up, "r3", "worktree/a.txt").await;
    assert_eq!(
        (a.body.as_slice(), a.version.as_deref()),
        (&b"moved\n"[..], Some("2"))
    );
    let (_, session) = up
        .request(reqwest::Method::GET, "/v1/sessions/r3", None)
        .await;
    assert_eq!(
        session["workspace"]["commit"],
        git(&bare, &["rev-parse", "v1^{commit}"]),
        "{session}"
    );
}

/// Sets `session`'s repository to `url` as `token`; returns the status and body.
async fn put_repository(
    up: &Up,
    token: &str,
    session: &str,
    url: &str,
) -> (u16, serde_json::Value) {
    up.request_as(
        token,
        reqwest::Method::PUT,
        &format!("/v1/sessions/{session}"),
        Some(serde_json::json!({"workspace": {"source": "repository", "url": url}})),
    )
    .await
}

/// Runs a turn of `session` as `token`; returns the finished turn.
async fn turn_as(up: &Up, token: &str, session: &str) -> serde_json::Value {
    let (status, accepted) = up
        .request_as(
            token,
            reqwest::Method::POST,
            &format!("/v1/sessions/{session}/messages"),
            Some(serde_json::json!({"text": "/say hi"})),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let (status, turn) = up
        .request_as(
            token,
            reqwest::Method::GET,
            &format!("/v1/turns/{}?wait=60", accepted["turnId"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(status, 200, "{turn}");
    turn
}

/// Issue 33: a chat key limited to its sessions neither scans the node host's network through
/// a repository session's error (a closed port and a port that speaks no TLS answer alike, and
/// internal addresses are refused unless the node host allows them) nor reads the node host's
/// files through another spelling of `file://`.
#[tokio::test(flavor = "multi_thread")]
async fn issue_33_a_chat_key_scans_no_port_and_reads_no_node_state_through_a_repository() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    // Loopback is allowed here, so git does connect; what it saw must still stay in the log.
    let mut command = gatehouse();
    command
        .args([
            "up",
            "--listen",
            "127.0.0.1:0",
            "--source-allow-hosts",
            "127.0.0.1",
        ])
        .arg("--data")
        .arg(&data);
    let up = Up::spawn(command, None, &data.join("gateway"), &data);
    up.wait_ready().await;
    let (status, key) = up
        .request(
            reqwest::Method::POST,
            "/v1/keys",
            Some(serde_json::json!({"name": "scanner", "scopes": ["chat"], "sessions": "scan"})),
        )
        .await;
    assert_eq!(status, 200, "{key}");
    let chat = key["key"].as_str().unwrap().to_owned();
    // An open port that speaks plain TCP, and a closed one.
    let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open_port = open.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in open.incoming() {
            let Ok(mut stream) = stream else { break };
            let _ = std::io::Write::write_all(&mut stream, b"SSH-2.0-OpenSSH_9.6\r\n");
        }
    });
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut errors = Vec::new();
    for (session, port) in [("scan-open", open_port), ("scan-closed", closed_port)] {
        let url = format!("https://127.0.0.1:{port}/x");
        let (status, created) = put_repository(&up, &chat, session, &url).await;
        assert_eq!(status, 201, "{created}");
        let turn = turn_as(&up, &chat, session).await;
        assert_eq!(turn["status"], "failed", "{turn}");
        let text = turn.to_string();
        assert!(
            !text.contains("Couldn't connect") && !text.contains("TLS") && !text.contains("SSL"),
            "{turn}"
        );
        let error = turn["error"].clone();
        assert!(
            !error.to_string().contains(&port.to_string()),
            "the error names the port: {error}"
        );
        errors.push(error);
    }
    assert_eq!(
        errors[0], errors[1],
        "a closed and an open port answer apart"
    );
    assert_eq!(errors[0]["code"], "SOURCE_UNAVAILABLE", "{}", errors[0]);
    // The node host's log has git's message.
    assert!(
        up.process
            .stderr()
            .contains("git cannot fetch a session's repository"),
        "{}",
        up.process.stderr()
    );
    // A cloud's metadata service is refused before git runs, naming only the class.
    let (status, created) = put_repository(
        &up,
        &chat,
        "scan-metadata",
        "https://169.254.169.254/latest/",
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let turn = turn_as(&up, &chat, "scan-metadata").await;
    assert_eq!(turn["error"]["code"], "SOURCE_UNAVAILABLE", "{turn}");
    let message = turn["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("link-local") && !message.contains("169.254"),
        "{turn}"
    );
    // No spelling of file:// passes for a chat key.
    let sources = data.join("harness").join("sources").join("x");
    for url in [
        format!("FILE://{}", sources.display()),
        format!("File://localhost{}", sources.display()),
        format!("file://localhost{}", sources.display()),
    ] {
        let (status, refused) = put_repository(&up, &chat, "scan-file", &url).await;
        assert_eq!(
            (status, &refused["error"]["code"]),
            (403, &serde_json::json!("SCOPE_DENIED")),
            "{url}: {refused}"
        );
    }
    let (status, refused) = put_repository(
        &up,
        &chat,
        "scan-file",
        &format!(" file://{}", sources.display()),
    )
    .await;
    assert_eq!(
        (status, &refused["error"]["code"]),
        (400, &serde_json::json!("INVALID_REQUEST")),
        "{refused}"
    );
    // The operator may name a path on the node host, but never into the node's own state,
    // whatever host the URL names.
    let (status, created) = put_repository(
        &up,
        &up.token,
        "own-state",
        &format!("file://localhost{}", sources.display()),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    let turn = turn_as(&up, &up.token, "own-state").await;
    assert_eq!(turn["error"]["code"], "SOURCE_UNAVAILABLE", "{turn}");
    assert!(
        turn["error"]["message"]
            .as_str()
            .unwrap()
            .contains("own state"),
        "{turn}"
    );
}
