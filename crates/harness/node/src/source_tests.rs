use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;

use base64::Engine;
use gatehouse_fsops::test_support::tree;
use gatehouse_policy::repository::RepositoryUrl;
use gatehouse_policy::repository::SourceAllowList;
use gatehouse_protocol::checkpoint::validate_manifest;
use gatehouse_protocol::worker::AgentSessionSourceParams;
use gatehouse_protocol::worker::CheckpointEntry;
use gatehouse_protocol::worker::Inline;
use gatehouse_protocol::worker::SandboxSettings;
use pretty_assertions::assert_eq;

use crate::source::Remote;
use crate::source::SourceRequest;
use crate::worker::WorkerRetirement;
use crate::worker::WorkerSettings;
use crate::worker::WorkerSupervisor;
use crate::worker::session_dir_name;

/// Runs the test's own git (no user or system configuration) in `dir`; returns its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args([
            "-c",
            "user.name=Test",
            "-c",
            "user.email=test@example.com",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgSign=false",
            "-c",
            "tag.gpgSign=false",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

/// A Harness root, a supervisor on it, and a repository the test builds.
struct Fixture {
    _temp: tempfile::TempDir,
    root: PathBuf,
    repo: PathBuf,
    url: String,
    supervisor: WorkerSupervisor,
}

impl Fixture {
    fn new() -> Fixture {
        Fixture::allowing(SourceAllowList::default())
    }

    /// A fixture whose node host has `allow` as its `source-allow-hosts`.
    fn allowing(allow: SourceAllowList) -> Fixture {
        let temp = tempfile::tempdir().unwrap();
        let base = temp.path().canonicalize().unwrap();
        let root = base.join("harness");
        let repo = base.join("repo");
        std::fs::create_dir_all(&root).unwrap();
        std::fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "--quiet"]);
        let settings = WorkerSettings {
            program: PathBuf::from("/nonexistent/gatehouse"),
            capacity: 1,
            retirement: WorkerRetirement::Never,
            model: String::from("mock"),
            model_key_env: String::from("SOURCE_TEST_KEY"),
            allow_unsandboxed: false,
            scratch: None,
            hidden_paths: Vec::new(),
            denied_tools: Vec::new(),
            exec_timeout_seconds: 10,
            sandbox: SandboxSettings::default(),
            telemetry_env: Vec::new(),
            source_allow: allow,
        };
        Fixture {
            _temp: temp,
            url: format!("file://{}", repo.display()),
            supervisor: WorkerSupervisor::new(settings, root.clone()),
            root,
            repo,
        }
    }

    /// Writes `content` at `path` in the repository's work tree.
    fn write(&self, path: &str, content: &str) {
        let path = self.repo.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }

    /// Commits everything; returns the commit.
    fn commit(&self, message: &str) -> String {
        git(&self.repo, &["add", "--all"]);
        git(&self.repo, &["commit", "--quiet", "--message", message]);
        git(&self.repo, &["rev-parse", "HEAD"])
    }

    fn params(&self, session_key: &str) -> AgentSessionSourceParams {
        AgentSessionSourceParams {
            session_key: session_key.to_owned(),
            url: self.url.clone(),
            reference: None,
            commit: None,
            report: false,
            overlay: None,
        }
    }

    fn session_dir(&self, session_key: &str) -> PathBuf {
        self.root
            .join("sessions")
            .join(session_dir_name(session_key))
    }

    fn workspace(&self, session_key: &str) -> PathBuf {
        self.session_dir(session_key).join("workspace")
    }

    fn read(&self, session_key: &str, path: &str) -> String {
        std::fs::read_to_string(self.workspace(session_key).join(path)).unwrap()
    }
}

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn a_tag_a_branch_and_head_resolve_to_their_commits() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "one");
    let first = fixture.commit("first");
    git(
        &fixture.repo,
        &["tag", "--annotate", "v1", "--message", "v1"],
    );
    git(&fixture.repo, &["branch", "old"]);
    fixture.write("a.txt", "two");
    let second = fixture.commit("second");
    for (session_key, reference, commit, content) in [
        ("tag", Some("v1"), &first, "one"),
        ("branch", Some("old"), &first, "one"),
        ("full-ref", Some("refs/heads/main"), &second, "two"),
        ("head", None, &second, "two"),
    ] {
        let mut params = fixture.params(session_key);
        params.reference = reference.map(str::to_owned);
        let result = fixture.supervisor.source(params).await.unwrap();
        assert_eq!(
            (result.commit.as_str(), result.written, result.entries.len()),
            (commit.as_str(), 1, 0),
            "{session_key}"
        );
        assert_eq!(fixture.read(session_key, "a.txt"), content, "{session_key}");
    }
}

#[tokio::test]
async fn exec_bits_and_links_are_written_as_such_and_never_followed() {
    let fixture = Fixture::new();
    fixture.write("run.sh", "#!/bin/sh\necho ran\n");
    std::fs::set_permissions(
        fixture.repo.join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fixture.write("dir/plain.txt", "plain");
    fixture.write(
        ".gatehouse-skills/s/SKILL.md",
        "a skill copy is never sourced",
    );
    std::os::unix::fs::symlink("../outside", fixture.repo.join("l")).unwrap();
    std::os::unix::fs::symlink("/etc", fixture.repo.join("dir/etc")).unwrap();
    git(&fixture.repo, &["add", "--all"]);
    // A submodule entry: left out, never fetched.
    let submodule = "1111111111111111111111111111111111111111";
    git(
        &fixture.repo,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{submodule},sub"),
        ],
    );
    git(&fixture.repo, &["commit", "--quiet", "--message", "links"]);
    let session_dir = fixture.session_dir("links");
    let result = fixture
        .supervisor
        .source(fixture.params("links"))
        .await
        .unwrap();
    assert_eq!(result.written, 4);
    let workspace = fixture.workspace("links");
    assert_eq!(
        (
            mode(&workspace.join("run.sh")),
            mode(&workspace.join("dir/plain.txt"))
        ),
        (0o755, 0o644)
    );
    for (path, target) in [("l", "../outside"), ("dir/etc", "/etc")] {
        assert!(
            std::fs::symlink_metadata(workspace.join(path))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{path}"
        );
        assert_eq!(
            std::fs::read_link(workspace.join(path)).unwrap(),
            PathBuf::from(target)
        );
    }
    assert!(!session_dir.join("outside").exists(), "a link was followed");
    assert!(!workspace.join("sub").exists(), "a submodule was written");
    assert!(
        !workspace.join(".gatehouse-skills").exists(),
        "an excluded path was written"
    );
    assert!(!workspace.join(".git").exists());
}

/// A crafted tree with a link `l -> ../outside` and a file `l/x` below it is refused before
/// anything is written, and nothing appears outside the workspace.
#[tokio::test]
async fn a_tree_with_an_entry_below_a_link_is_refused() {
    let fixture = Fixture::new();
    let hash = |content: &str| {
        let path = fixture.repo.join("blob");
        std::fs::write(&path, content).unwrap();
        git(&fixture.repo, &["hash-object", "-w", "blob"])
    };
    let link = hash("../outside");
    let planted = hash("planted");
    let below = git_with_input(
        &fixture.repo,
        &["mktree"],
        &format!("100644 blob {planted}\tx\n"),
    );
    let top = git_with_input(
        &fixture.repo,
        &["mktree"],
        &format!("120000 blob {link}\tl\n040000 tree {below}\tl\n"),
    );
    let commit = git(&fixture.repo, &["commit-tree", &top, "-m", "crafted"]);
    let mut params = fixture.params("crafted");
    params.commit = Some(commit);
    let error = fixture.supervisor.source(params).await.unwrap_err();
    assert_eq!(error.code, "SOURCE_UNAVAILABLE", "{error:?}");
    assert!(error.message.contains("is below a link"), "{error:?}");
    // Outside the node host's cache, only the (empty) session directory was made.
    let sources = fixture.root.join("sources");
    let made: Vec<PathBuf> = tree(&fixture.root)
        .into_keys()
        .filter(|path| !path.starts_with(&sources))
        .collect();
    assert_eq!(
        made,
        vec![
            fixture.root.clone(),
            fixture.root.join("sessions"),
            fixture.session_dir("crafted"),
        ]
    );
}

/// Runs the test's git with `input` on stdin; returns its stdout.
fn git_with_input(dir: &Path, args: &[&str], input: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    String::from_utf8(output.stdout).unwrap().trim().to_owned()
}

#[tokio::test]
async fn a_pinned_commit_yields_its_tree_after_the_tag_moved() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "old");
    let old = fixture.commit("old");
    git(&fixture.repo, &["tag", "v1"]);
    let mut first = fixture.params("first");
    first.reference = Some(String::from("v1"));
    assert_eq!(fixture.supervisor.source(first).await.unwrap().commit, old);
    fixture.write("a.txt", "new");
    fixture.commit("new");
    git(&fixture.repo, &["tag", "--force", "v1"]);
    // A new session has an empty cache: the commit is fetched by id. The first session's
    // cache has it: nothing is fetched.
    std::fs::remove_dir_all(fixture.workspace("first")).unwrap();
    for session_key in ["second", "first"] {
        let mut pinned = fixture.params(session_key);
        pinned.reference = Some(String::from("v1"));
        pinned.commit = Some(old.clone());
        let result = fixture.supervisor.source(pinned).await.unwrap();
        assert_eq!(result.commit, old, "{session_key}");
        assert_eq!(fixture.read(session_key, "a.txt"), "old", "{session_key}");
    }
    // A commit the repository does not have, even among its branches and tags.
    let mut missing = fixture.params("missing");
    missing.commit = Some("0123456789abcdef0123456789abcdef01234567".to_owned());
    let error = fixture.supervisor.source(missing).await.unwrap_err();
    assert_eq!(error.code, "SOURCE_UNAVAILABLE", "{error:?}");
    assert!(
        error.message.contains("is not in the session's repository"),
        "{error:?}"
    );
    assert!(!fixture.workspace("missing").exists());
}

#[tokio::test]
async fn an_unknown_ref_or_an_unreachable_repository_is_source_unavailable() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "a");
    fixture.commit("a");
    let mut unknown = fixture.params("unknown");
    unknown.reference = Some(String::from("no-such-branch"));
    let error = fixture.supervisor.source(unknown).await.unwrap_err();
    assert_eq!(
        (error.code.as_str(), error.message.as_str()),
        (
            "SOURCE_UNAVAILABLE",
            "the ref no-such-branch does not resolve to a commit"
        )
    );
    // A directory that exists but holds no repository: git itself fails.
    let not_a_repository = fixture.root.parent().unwrap().join("not-a-repository");
    std::fs::create_dir(&not_a_repository).unwrap();
    let mut unreachable = fixture.params("unreachable");
    unreachable.url = format!("file://{}", not_a_repository.display());
    let error = fixture.supervisor.source(unreachable).await.unwrap_err();
    // git's message (which names the path) stays in the node host's log.
    assert_eq!(
        (error.code.as_str(), error.message.as_str()),
        (
            "SOURCE_UNAVAILABLE",
            "the session's repository cannot be fetched: git failed (the node host's log has its message)"
        )
    );
    assert!(!fixture.workspace("unknown").exists());
    assert!(!fixture.workspace("unreachable").exists());
}

#[tokio::test]
async fn refused_params_are_invalid_params_before_anything_runs() {
    let fixture = Fixture::new();
    let long_ref = "a".repeat(256);
    let cases: Vec<(&str, Option<&str>, Option<&str>)> = vec![
        ("https://user:secret@example.com/repo.git", None, None),
        ("https://:secret@example.com/repo.git", None, None),
        ("https://secret@example.com/repo.git", None, None),
        ("ssh://u%3Asecret@example.com/repo.git", None, None),
        ("ext::sh -c touch% /tmp/owned", None, None),
        ("-uhttps://example.com/repo.git", None, None),
        ("http://example.com/repo.git", None, None),
        ("git@example.com:repo.git", None, None),
        (" file:///srv/repo", None, None),
        ("file://otherhost/srv/repo", None, None),
        ("ssh://-oProxyCommand=touch/repo", None, None),
        ("https://example.com/repo.git\n", None, None),
        ("https://", None, None),
        ("https://example.com/repo.git", Some("-x"), None),
        ("https://example.com/repo.git", Some(""), None),
        ("https://example.com/repo.git", Some("a b"), None),
        ("https://example.com/repo.git", Some("a..b"), None),
        (
            "https://example.com/repo.git",
            Some("main:refs/heads/x"),
            None,
        ),
        ("https://example.com/repo.git", Some("main~1"), None),
        ("https://example.com/repo.git", Some("main^"), None),
        ("https://example.com/repo.git", Some("ma?n"), None),
        ("https://example.com/repo.git", Some("ma*"), None),
        ("https://example.com/repo.git", Some("[main"), None),
        ("https://example.com/repo.git", Some("a\\b"), None),
        ("https://example.com/repo.git", Some("a\0b"), None),
        ("https://example.com/repo.git", Some(&long_ref), None),
        (
            "https://example.com/repo.git",
            None,
            Some("0123456789ABCDEF0123456789abcdef01234567"),
        ),
        ("https://example.com/repo.git", None, Some("0123456")),
    ];
    for (url, reference, commit) in cases {
        let params = AgentSessionSourceParams {
            session_key: String::from("refused"),
            url: url.to_owned(),
            reference: reference.map(str::to_owned),
            commit: commit.map(str::to_owned),
            report: false,
            overlay: None,
        };
        let error = fixture.supervisor.source(params).await.unwrap_err();
        assert_eq!(
            error.code, "INVALID_PARAMS",
            "{url} {reference:?} {commit:?}"
        );
        assert!(!error.message.contains("secret"), "{error:?}");
    }
    assert!(
        !fixture.root.join("sessions").exists() && !fixture.root.join("sources").exists(),
        "a refused request touched the node root"
    );
}

#[test]
fn accepted_urls_keep_their_user_name_for_redaction() {
    for (url, user) in [
        ("https://example.com/repo.git", None),
        ("ssh://git@example.com/repo.git", Some("git")),
        ("ssh://example.com:2222/repo.git", None),
        ("file:///srv/repo", None),
    ] {
        let params = AgentSessionSourceParams {
            session_key: String::from("s"),
            url: url.to_owned(),
            reference: Some(String::from("release/v1.2")),
            commit: Some("0123456789abcdef0123456789abcdef01234567".to_owned()),
            report: false,
            overlay: None,
        };
        let request = SourceRequest::parse(&params).unwrap();
        assert_eq!(request.url.user(), user, "{url}");
        assert_eq!(request.reference, "release/v1.2");
    }
    assert_eq!(
        crate::source::redact(
            b"fatal: unable to access 'ssh://token-user@example.com/repo.git/'",
            Some("token-user")
        ),
        "fatal: unable to access 'ssh://example.com/repo.git/'"
    );
}

/// A `file://` repository inside the node host's root (another session's workspace or source
/// cache, directly or through a link) is refused before anything is fetched.
#[tokio::test]
async fn a_repository_inside_the_node_root_is_refused() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "private");
    fixture.commit("a");
    let inside = fixture.root.join("sessions").join("someone-else");
    std::fs::create_dir_all(&inside).unwrap();
    let outside = fixture.root.parent().unwrap().join("link-into-root");
    std::os::unix::fs::symlink(&inside, &outside).unwrap();
    for url in [
        format!("file://{}", inside.display()),
        format!("file://{}", outside.display()),
        format!("file://{}/sources", fixture.root.display()),
        // Every spelling of the same path: git ignores a file URL's host and reads `%2e%2e`.
        format!("file://localhost{}/sources/x", fixture.root.display()),
        format!("FILE://{}/sources", fixture.root.display()),
        format!("File://LOCALHOST{}", inside.display()),
        format!("file://{}/sessions/%2e%2e/sources", fixture.root.display()),
    ] {
        let params = AgentSessionSourceParams {
            session_key: String::from("reader"),
            url: url.clone(),
            reference: None,
            commit: None,
            report: true,
            overlay: None,
        };
        let error = fixture.supervisor.source(params).await.unwrap_err();
        assert_eq!(error.code, "SOURCE_UNAVAILABLE", "{url}");
        assert!(error.message.contains("own state"), "{url}: {error:?}");
    }
    assert!(!fixture.workspace("reader").exists());
}

#[tokio::test]
async fn an_existing_workspace_is_not_overwritten() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "from the repository");
    fixture.commit("a");
    let workspace = fixture.workspace("existing");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(workspace.join("a.txt"), "the session's own").unwrap();
    let error = fixture
        .supervisor
        .source(fixture.params("existing"))
        .await
        .unwrap_err();
    assert_eq!(error.code, "EXISTS_NO_OVERWRITE", "{error:?}");
    assert_eq!(fixture.read("existing", "a.txt"), "the session's own");
    assert!(!fixture.root.join("sources").exists(), "it fetched anyway");
}

#[tokio::test]
async fn a_report_answers_every_written_entry_as_a_valid_manifest() {
    let fixture = Fixture::new();
    fixture.write("b/run.sh", "#!/bin/sh\n");
    std::fs::set_permissions(
        fixture.repo.join("b/run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    fixture.write("a.txt", "alpha");
    std::os::unix::fs::symlink("a.txt", fixture.repo.join("c")).unwrap();
    let commit = fixture.commit("report");
    let mut params = fixture.params("report");
    params.report = true;
    let result = fixture.supervisor.source(params).await.unwrap();
    validate_manifest(&result.entries).unwrap();
    let file = |path: &str, content: &[u8], executable: bool| CheckpointEntry {
        path: path.to_owned(),
        kind: String::from("file"),
        executable,
        sha256: Some(gatehouse_fsops::commands::sha256_hex(content)),
        size: content.len() as u64,
        target: None,
        content: Inline {
            base64: Some(base64::engine::general_purpose::STANDARD.encode(content)),
        },
    };
    assert_eq!(
        (result.commit, result.written, result.entries),
        (
            commit,
            3,
            vec![
                file("a.txt", b"alpha", false),
                file("b/run.sh", b"#!/bin/sh\n", true),
                CheckpointEntry {
                    path: String::from("c"),
                    kind: String::from("symlink"),
                    executable: false,
                    sha256: None,
                    size: 0,
                    target: Some(String::from("a.txt")),
                    content: Inline::default(),
                },
            ]
        )
    );
    // The hashes are those of what was written.
    assert_eq!(
        gatehouse_fsops::commands::sha256_hex(
            &std::fs::read(fixture.workspace("report").join("a.txt")).unwrap()
        ),
        gatehouse_fsops::commands::sha256_hex(b"alpha")
    );
}

#[tokio::test]
async fn a_report_past_the_manifest_bound_is_refused_naming_it() {
    let fixture = Fixture::new();
    // One file past the 16 MiB of a checkpoint manifest; a source without a report takes it.
    let big = "x".repeat(gatehouse_protocol::checkpoint::MAX_CHECKPOINT_BYTES as usize + 1);
    fixture.write("big.txt", &big);
    fixture.commit("big");
    let mut params = fixture.params("big");
    params.report = true;
    let error = fixture.supervisor.source(params).await.unwrap_err();
    assert_eq!(error.code, "SOURCE_UNAVAILABLE", "{error:?}");
    assert!(error.message.contains("a reported source"), "{error:?}");
    assert!(!fixture.workspace("big").exists());
    let result = fixture
        .supervisor
        .source(fixture.params("big"))
        .await
        .unwrap();
    assert_eq!(result.written, 1);
}

#[tokio::test]
async fn the_cache_is_a_bare_repository_outside_the_session_directory() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "a");
    fixture.commit("a");
    fixture
        .supervisor
        .source(fixture.params("cached"))
        .await
        .unwrap();
    let id = session_dir_name("cached");
    let sources = fixture.root.join("sources");
    let cache = sources.join(&id);
    assert_eq!(mode(&sources), 0o700);
    assert!(cache.join("objects").is_dir() && cache.join("HEAD").is_file());
    assert!(!cache.join("hooks").exists(), "a template was copied");
    assert!(!cache.starts_with(fixture.session_dir("cached")));
    assert_eq!(
        std::fs::read_dir(fixture.session_dir("cached"))
            .unwrap()
            .map(|entry| entry.unwrap().file_name())
            .collect::<Vec<_>>(),
        vec![std::ffi::OsString::from("workspace")]
    );
    assert!(!fixture.workspace("cached").join(".git").exists());
    // Discarding the session deletes its cache too.
    assert!(crate::worker::discard_session_dir(&fixture.root, "cached").unwrap());
    assert!(!cache.exists());
}

/// A server that sends no commit by id (protocol v0 without `allowReachableSHA1InWant`) still
/// yields a pinned commit: from its branches and tags, past the shallow cache's boundary.
#[tokio::test]
async fn a_commit_the_server_refuses_by_id_comes_from_its_branches_and_tags() {
    let fixture = Fixture::new();
    fixture.write("a.txt", "old");
    let old = fixture.commit("old");
    fixture.write("a.txt", "new");
    let new = fixture.commit("new");
    // The session's cache, made ahead with a client that speaks protocol v0.
    let cache = fixture
        .root
        .join("sources")
        .join(session_dir_name("pinned"));
    std::fs::create_dir_all(&cache).unwrap();
    git(&cache, &["init", "--quiet", "--bare", "--template="]);
    git(&cache, &["config", "protocol.version", "0"]);
    assert_eq!(
        fixture
            .supervisor
            .source(fixture.params("pinned"))
            .await
            .unwrap()
            .commit,
        new
    );
    assert_eq!(
        git(&cache, &["rev-parse", "--is-shallow-repository"]),
        "true"
    );
    std::fs::remove_dir_all(fixture.workspace("pinned")).unwrap();
    let mut pinned = fixture.params("pinned");
    pinned.commit = Some(old.clone());
    let result = fixture.supervisor.source(pinned).await.unwrap();
    assert_eq!(result.commit, old);
    assert_eq!(fixture.read("pinned", "a.txt"), "old");
    // It came through the fallback, which fetched the branches and the whole history.
    assert_eq!(
        git(&cache, &["rev-parse", "refs/gatehouse/heads/main"]),
        new
    );
    assert_eq!(
        git(&cache, &["rev-parse", "--is-shallow-repository"]),
        "false"
    );
}

/// A checkpoint entry of a file with its content, as the Gateway sends it for an overlay.
fn checkpoint_file(path: &str, content: &str) -> CheckpointEntry {
    CheckpointEntry {
        path: path.to_owned(),
        kind: String::from("file"),
        executable: false,
        sha256: Some(gatehouse_fsops::commands::sha256_hex(content.as_bytes())),
        size: content.len() as u64,
        target: None,
        content: Inline {
            base64: Some(base64::engine::general_purpose::STANDARD.encode(content)),
        },
    }
}

/// A rebuild over the pinned commit: the workspace holds the checkpoint, plus the commit's
/// files the checkpoint left out; a file the agent deleted stays deleted, and a checkpoint
/// entry in the way of a commit entry wins.
#[tokio::test]
async fn an_overlay_keeps_what_the_checkpoint_left_out_from_the_commit() {
    let fixture = Fixture::new();
    fixture.write("big.bin", "the commit's big file");
    fixture.write("a.txt", "a1");
    fixture.write("gone.txt", "deleted by the agent");
    fixture.write("vendor/lib.rs", "vendored");
    fixture.write("d/x", "below what became a file");
    let commit = fixture.commit("start");
    let overlay = gatehouse_protocol::worker::SourceOverlay {
        checkpoint_id: String::from("c1"),
        entries: vec![
            checkpoint_file("a.txt", "a2"),
            checkpoint_file("d", "now a file"),
            checkpoint_file("new.txt", "new"),
        ],
        omitted: gatehouse_protocol::worker::OmittedPaths {
            paths: vec![String::from("big.bin"), String::from("vendor")],
            truncated: false,
        },
    };
    let mut params = fixture.params("s");
    params.commit = Some(commit.clone());
    params.overlay = Some(overlay.clone());
    let result = fixture.supervisor.source(params).await.unwrap();
    assert_eq!(
        (result.commit.as_str(), result.written),
        (commit.as_str(), 5)
    );
    let workspace = fixture.workspace("s");
    let mut files: Vec<String> = tree(&workspace)
        .keys()
        .filter(|path| path.is_file())
        .map(|path| path.strip_prefix(&workspace).unwrap().display().to_string())
        .collect();
    files.sort();
    assert_eq!(files, ["a.txt", "big.bin", "d", "new.txt", "vendor/lib.rs"]);
    assert_eq!(fixture.read("s", "a.txt"), "a2");
    assert_eq!(fixture.read("s", "big.bin"), "the commit's big file");
    assert_eq!(fixture.read("s", "d"), "now a file");
    assert_eq!(fixture.read("s", "vendor/lib.rs"), "vendored");

    // Content that does not match its hash fails the rebuild, and nothing is left behind.
    let mut forged = overlay.clone();
    forged.entries[0].content.base64 = Some(base64::engine::general_purpose::STANDARD.encode("a3"));
    let mut params = fixture.params("forged");
    params.commit = Some(commit.clone());
    params.overlay = Some(forged);
    let error = fixture.supervisor.source(params).await.unwrap_err();
    assert_eq!(error.code, "INTEGRITY_FAILURE", "{error:?}");
    assert!(!fixture.workspace("forged").exists());

    // An omitted path that escapes is refused before anything is fetched.
    let mut escaping = overlay.clone();
    escaping.omitted.paths.push(String::from("../elsewhere"));
    let mut params = fixture.params("escaping");
    params.commit = Some(commit.clone());
    params.overlay = Some(escaping);
    let error = fixture.supervisor.source(params).await.unwrap_err();
    assert_eq!(error.code, "CHECKPOINT_INVALID", "{error:?}");
    assert!(!fixture.workspace("escaping").exists());

    // An overlay needs the pinned commit.
    let mut params = fixture.params("unpinned");
    params.overlay = Some(overlay);
    let error = fixture.supervisor.source(params).await.unwrap_err();
    assert_eq!(error.code, "INVALID_PARAMS", "{error:?}");
}

/// Binds a TCP port on loopback and closes it again: nothing listens there.
fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Returns the error of a source from `url` on `fixture`'s node host.
async fn source_error(fixture: &Fixture, url: &str) -> gatehouse_protocol::error::WireError {
    let mut params = fixture.params("network");
    params.url = url.to_owned();
    fixture.supervisor.source(params).await.unwrap_err()
}

/// By default the node host fetches from no loopback, link-local or private address, whether
/// the URL names it or a host name resolves to it, and it refuses before git runs.
#[tokio::test]
async fn internal_addresses_are_refused_unless_allowed() {
    let fixture = Fixture::new();
    let port = closed_port();
    for url in [
        format!("https://127.0.0.1:{port}/x"),
        String::from("https://169.254.169.254/latest/meta-data/"),
        format!("https://[::1]:{port}/"),
        format!("https://[::ffff:127.0.0.1]:{port}/x"),
        format!("https://localhost:{port}/x"),
        format!("ssh://git@127.0.0.1:{port}/x"),
        String::from("ssh://10.0.0.1/x"),
    ] {
        let error = source_error(&fixture, &url).await;
        assert_eq!(error.code, "SOURCE_UNAVAILABLE", "{url}: {error:?}");
        assert!(
            error
                .message
                .starts_with("the repository's host is refused: it is or resolves to a ")
                && error.message.contains("source-allow-hosts"),
            "{url}: {error:?}"
        );
        assert!(
            !error.message.contains(&port.to_string()),
            "{url}: {error:?}"
        );
    }
    assert!(
        !fixture.root.join("sources").exists(),
        "a refused source reached git"
    );
}

/// An allow-listed host is fetched from, through the address that was checked; git's message
/// about the failed connection stays in the node host's log.
#[tokio::test]
async fn an_allowed_host_is_fetched_from_its_checked_address() {
    let fixture = Fixture::allowing(SourceAllowList::new(["localhost", "127.0.0.0/8"]).unwrap());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    // A plain TCP server: it answers git's TLS hello with text and hangs up.
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = std::sync::Arc::clone(&accepted);
    let server = tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let _ =
                tokio::io::AsyncWriteExt::write_all(&mut stream, b"HTTP/1.0 200 OK\r\n\r\n").await;
        }
    });
    let closed = closed_port();
    let mut errors = Vec::new();
    for url in [
        format!("https://localhost:{port}/x"),
        format!("https://127.0.0.1:{port}/x"),
        format!("https://127.0.0.1:{closed}/x"),
    ] {
        let error = source_error(&fixture, &url).await;
        assert!(
            !error.message.contains("TLS")
                && !error.message.contains("connect")
                && !error.message.contains(&port.to_string())
                && !error.message.contains(&closed.to_string()),
            "{url}: {error:?}"
        );
        errors.push((error.code, error.message));
    }
    let expected = (
        String::from("SOURCE_UNAVAILABLE"),
        String::from(
            "the session's repository cannot be fetched: git failed (the node host's log has its message)",
        ),
    );
    assert_eq!(errors, vec![expected.clone(), expected.clone(), expected]);
    server.abort();
    // git connected to the checked address, by name and by literal.
    assert!(
        accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2,
        "git never reached the allowed host"
    );
}

/// git connects to the addresses that were checked, never to a new resolution of the name.
#[test]
fn a_remote_is_pinned_to_its_checked_addresses() {
    let address = |text: &str| text.parse::<std::net::IpAddr>().unwrap();
    let checked = [address("10.1.2.3"), address("fd00::1")];
    let remote = |url: &str| Remote::pinned(&RepositoryUrl::parse(url).unwrap(), &checked);
    let strings = |items: &[&str]| {
        items
            .iter()
            .map(|item| (*item).to_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(
        remote("HTTPS://Git.Corp.Example/r.git"),
        Remote {
            url: String::from("https://git.corp.example/r.git"),
            user: None,
            config: strings(&[
                "http.followRedirects=false",
                "http.curloptResolve=git.corp.example:443:10.1.2.3,[fd00::1]",
            ]),
            env: Vec::new(),
        }
    );
    assert_eq!(
        remote("ssh://git@git.corp.example:2222/r.git"),
        Remote {
            url: String::from("ssh://git@git.corp.example:2222/r.git"),
            user: Some(String::from("git")),
            config: strings(&["ssh.variant=ssh"]),
            env: vec![(
                "GIT_SSH_COMMAND",
                String::from("ssh -o HostName=10.1.2.3 -o 'HostKeyAlias=[git.corp.example]:2222'")
            )],
        }
    );
    assert_eq!(
        remote("ssh://git.corp.example/r.git").env,
        vec![(
            "GIT_SSH_COMMAND",
            String::from("ssh -o HostName=10.1.2.3 -o 'HostKeyAlias=git.corp.example'")
        )]
    );
    // An address literal needs no pinning; https still follows no redirect.
    let literal = remote("https://192.0.2.7:8443/r.git");
    assert_eq!(
        (literal.url.as_str(), literal.config, literal.env),
        (
            "https://192.0.2.7:8443/r.git",
            strings(&["http.followRedirects=false"]),
            Vec::new()
        )
    );
    let file = remote("file://localhost/srv/r");
    assert_eq!(
        (file.url.as_str(), file.config.len(), file.env.len()),
        ("file:///srv/r", 0, 0)
    );
}

/// A hostile swap: a `file://` repository named through a link outside the root passes the
/// own-state check, and the link is then pointed into the root before git opens it. git is given
/// the path the check resolved, never the link, so the swap reads nothing of the node's state;
/// and a path that does not resolve (a link planted later) is refused before git runs.
#[test]
fn a_file_repository_is_fetched_by_the_path_the_check_resolved() {
    let fixture = Fixture::new();
    let base = fixture.root.parent().unwrap().to_path_buf();
    let link = base.join("link-to-repo");
    std::os::unix::fs::symlink(&fixture.repo, &link).unwrap();
    let url = RepositoryUrl::parse(&format!("file://{}", link.display())).unwrap();
    let resolved = crate::source::resolve_file_source(&fixture.root, &url).unwrap();
    assert_eq!(resolved.file_path().unwrap(), fixture.repo);
    // Swapped after the check: what git is given still names the repository itself.
    std::fs::remove_file(&link).unwrap();
    std::os::unix::fs::symlink(fixture.root.join("sources"), &link).unwrap();
    let remote = Remote::pinned(&resolved, &[]);
    assert_eq!(
        remote,
        Remote::pinned(
            &RepositoryUrl::parse(&format!("file://{}", fixture.repo.display())).unwrap(),
            &[]
        )
    );
    // A path that does not resolve is refused, inside the root as its own state.
    let missing =
        RepositoryUrl::parse(&format!("file://{}", base.join("later").display())).unwrap();
    let error = crate::source::resolve_file_source(&fixture.root, &missing).unwrap_err();
    assert_eq!(error.code, "SOURCE_UNAVAILABLE");
    assert!(error.message.contains("does not exist"), "{error:?}");
    let inside =
        RepositoryUrl::parse(&format!("file://{}/sources/later", fixture.root.display())).unwrap();
    let error = crate::source::resolve_file_source(&fixture.root, &inside).unwrap_err();
    assert!(error.message.contains("own state"), "{error:?}");
}
