//! The `exec` sandbox against hostile commands, on real processes: `gatehouse up` with its data
//! directory outside `/tmp`, run once as root (the normal test run) and once as an unprivileged
//! user (uid 65534 through `setpriv`), with the mock model calling `exec`. Every probe must fail,
//! and no secret may reach the reply, the transcript or the audit trail.

use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;
use std::time::Instant;

use crate::suite::support::gatehouse;
use crate::suite::up::Up;

/// The unprivileged user of the second run.
const NOBODY: u32 = 65534;

/// A small file-size limit, so that `head -c` past it is quick.
const FILE_SIZE_LIMIT: u64 = 1024 * 1024;

/// A small process limit for the fork bombs.
const PROCESS_LIMIT: u64 = 48;

/// Who runs the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum As {
    Root,
    Nobody,
}

/// A base directory outside `/tmp` that uid 65534 can traverse. `/var/tmp` is the FHS directory
/// for temporary files outside `/tmp`.
fn base_dir() -> tempfile::TempDir {
    let base = tempfile::Builder::new()
        .prefix("gatehouse-sandbox-test-")
        .tempdir_in("/var/tmp")
        .unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    base
}

/// `gatehouse up` on `DATA` outside `/tmp`, as root or as uid 65534, with a UNIX socket listening
/// on the host outside the workspace.
struct Target {
    _base: tempfile::TempDir,
    base: PathBuf,
    data: PathBuf,
    up: Up,
    socket: std::os::unix::net::UnixListener,
    socket_path: PathBuf,
    who: As,
}

impl Target {
    fn start(who: As, extra: &[&str]) -> Target {
        let base_temp = base_dir();
        let base = base_temp.path().canonicalize().unwrap();
        let data = base.join("data");
        std::fs::create_dir(&data).unwrap();
        let mut command = match who {
            As::Root => gatehouse(),
            As::Nobody => {
                std::os::unix::fs::chown(&data, Some(NOBODY), Some(NOBODY)).unwrap();
                // The test binary lives under a private target directory: give uid 65534 its own
                // link (or copy) in a directory it can reach.
                let bin = base.join("bin");
                std::fs::create_dir(&bin).unwrap();
                let program = bin.join("gatehouse");
                if std::fs::hard_link(env!("CARGO_BIN_EXE_gatehouse"), &program).is_err() {
                    std::fs::copy(env!("CARGO_BIN_EXE_gatehouse"), &program).unwrap();
                }
                let mut command = Command::new("setpriv");
                command
                    .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                    .arg(&program)
                    .env_remove("GATEHOUSE_TOKEN")
                    .env_remove("GATEHOUSE_SANDBOX_ALLOW_MISSING")
                    .env("GATEHOUSE_LOG", "info");
                command
            }
        };
        command
            .args([
                "up",
                "--listen",
                "127.0.0.1:0",
                "--capacity",
                "64",
                "--data",
            ])
            .arg(&data)
            .arg("--sandbox-file-size-bytes")
            .arg(FILE_SIZE_LIMIT.to_string())
            .args(extra);
        let up = Up::spawn(command, None, &data.join("gateway"), &base.join("logs"));
        let socket_path = base.join("host.sock");
        let socket = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
        socket.set_nonblocking(true).unwrap();
        std::fs::set_permissions(&socket_path, std::fs::Permissions::from_mode(0o777)).unwrap();
        Target {
            _base: base_temp,
            base,
            data,
            up,
            socket,
            socket_path,
            who,
        }
    }

    /// The operator token, the node's secret key and, when enrolled, its device token.
    fn secrets(&self) -> Vec<String> {
        let mut secrets = vec![
            std::fs::read_to_string(self.data.join("gateway/operator-token"))
                .unwrap()
                .trim()
                .to_owned(),
        ];
        for (file, field) in [
            ("identity.json", "secretKey"),
            ("device-token.json", "deviceToken"),
        ] {
            let Ok(text) = std::fs::read_to_string(self.data.join("harness/node").join(file))
            else {
                continue;
            };
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            if let Some(secret) = value[field].as_str() {
                secrets.push(secret.to_owned());
            }
        }
        assert!(
            secrets.iter().all(|secret| secret.len() >= 16),
            "{secrets:?}"
        );
        assert!(secrets.len() >= 2, "{secrets:?}");
        secrets
    }

    /// Runs `command` through `exec` in `session` and returns the tool's output.
    async fn exec(&self, session: &str, command: &str) -> String {
        self.exec_with(session, serde_json::json!({ "command": command }))
            .await
    }

    /// Runs `exec` with `arguments` in `session` and returns the tool's output.
    async fn exec_with(&self, session: &str, arguments: serde_json::Value) -> String {
        let text = format!("/tool exec {arguments}");
        let (status, posted) = self
            .up
            .post(session, serde_json::json!({ "text": text }))
            .await;
        assert_eq!(status, 202, "{posted}");
        let turn_id = posted["turnId"].as_str().unwrap();
        let deadline = Instant::now() + Duration::from_secs(120);
        let done = loop {
            let done = self.up.turn_status(turn_id, 20).await;
            if done["status"] != "running" && done["status"] != "queued" {
                break done;
            }
            assert!(Instant::now() < deadline, "the turn did not end: {done}");
        };
        assert_eq!(done["status"], "completed", "{done}");
        let transcript = self.up.transcript(session).await;
        let output = transcript
            .iter()
            .rev()
            .find(|message| message["role"] == "tool")
            .unwrap_or_else(|| panic!("no tool message in {transcript:?}"))["content"]
            .as_str()
            .unwrap()
            .to_owned();
        self.assert_no_secret(session, &done.to_string()).await;
        output
    }

    /// Asserts that no secret is in `text`, the session's transcript or the audit trail.
    async fn assert_no_secret(&self, session: &str, text: &str) {
        let transcript = serde_json::Value::Array(self.up.transcript(session).await).to_string();
        let (status, audit) = self
            .up
            .request(reqwest::Method::GET, "/v1/audit", None)
            .await;
        assert_eq!(status, 200, "{audit}");
        let audit = audit.to_string();
        for secret in self.secrets() {
            for (what, haystack) in [
                ("reply", text),
                ("transcript", &transcript),
                ("audit", &audit),
            ] {
                assert!(
                    !haystack.contains(&secret),
                    "a secret reached the {what} ({:?})",
                    self.who
                );
            }
        }
    }
}

/// Asserts that the probe's command failed: its `rc=N.` line is there and N is not 0.
fn assert_failed(probe: &str, output: &str) {
    let rc = output
        .lines()
        .find_map(|line| line.strip_prefix("rc="))
        .unwrap_or_else(|| panic!("{probe}: no rc line in {output}"));
    assert!(!rc.starts_with("0."), "{probe} succeeded: {output}");
}

/// The hostile commands of findings 1 and 7, each ending with `rc=$?.`.
fn escape_probes(target: &Target) -> Vec<(String, String)> {
    let data = target.data.display();
    let socket = target.socket_path.display();
    let connect = format!(
        "perl -MIO::Socket::UNIX -e 'IO::Socket::UNIX->new(Peer => $ARGV[0]) or die qq(connect: $!\\n); print qq(connected\\n)' {socket}"
    );
    [
        ("umount the gateway state", format!("umount {data}/gateway")),
        (
            "umount -l the harness root",
            format!("umount -l {data}/harness"),
        ),
        ("umount a system mount", String::from("umount /usr")),
        ("umount -l a system mount", String::from("umount -l /usr")),
        (
            "remount / read-write",
            String::from("mount -o remount,bind,rw /"),
        ),
        (
            "remount /usr read-write",
            String::from("mount -o remount,bind,rw /usr"),
        ),
        ("unshare -m", String::from("unshare -m true")),
        ("unshare -Ur", String::from("unshare -Ur true")),
        ("nsenter", String::from("nsenter -t 1 -m -u -i -n -p true")),
        ("chroot", String::from("chroot / true")),
        (
            "the token through /proc/1/root",
            format!("cat /proc/1/root{data}/gateway/operator-token"),
        ),
        ("ls /proc/1/root/root", String::from("ls /proc/1/root/root")),
        (
            "cat the operator token",
            format!("cat {data}/gateway/operator-token"),
        ),
        (
            "cat the node identity",
            format!("cat {data}/harness/node/identity.json {data}/harness/node/device-token.json"),
        ),
        ("ls /root", String::from("ls /root")),
        ("ls /home", String::from("ls /home")),
        ("write into /usr", String::from("echo x > /usr/escape")),
        ("write into /etc", String::from("echo x > /etc/escape")),
        (
            "write into the data directory",
            format!("echo x > {data}/escape"),
        ),
        ("stop the supervisor", String::from("kill -STOP 2")),
        ("kill the supervisor", String::from("kill -KILL 2")),
        ("list the host's SSH keys", String::from("ls /etc/ssh")),
        ("read /etc/gshadow", String::from("cat /etc/gshadow")),
        ("connect to a host UNIX socket", connect),
        ("read /etc/shadow", String::from("grep -c : /etc/shadow")),
        (
            "head past the file-size limit",
            format!("head -c {} /dev/zero > big", 3 * FILE_SIZE_LIMIT),
        ),
    ]
    .into_iter()
    .map(|(name, command)| (name.to_owned(), format!("{command}; echo \"rc=$?.\"")))
    .collect()
}

/// Runs every probe of findings 1, 6 (file size) and 7 against `target`.
async fn hostile_commands_fail(target: &Target) {
    for (index, (probe, command)) in escape_probes(target).iter().enumerate() {
        let output = target.exec(&format!("probe{index}"), command).await;
        assert_failed(probe, &output);
    }
    // Nothing was written outside, nothing connected, and the big file stopped at the limit.
    for path in ["/usr/escape", "/etc/escape"] {
        assert!(!Path::new(path).exists(), "{path}");
    }
    assert!(!target.data.join("escape").exists());
    assert!(
        matches!(target.socket.accept(), Err(error) if error.kind() == std::io::ErrorKind::WouldBlock),
        "a sandboxed command connected to the host socket"
    );
    let big_session = format!("probe{}", escape_probes(target).len() - 1);
    let size = target.exec(&big_session, "wc -c < big").await;
    assert_eq!(
        size.lines().nth(1),
        Some(FILE_SIZE_LIMIT.to_string().as_str()),
        "{size}"
    );
    // The seccomp filter refuses what the host allows: io_uring_setup (425 on every Linux
    // architecture) with no parameters fails with EFAULT on the host, EPERM in the sandbox.
    let io_uring = "syscall(425, 1, 0); print qq($!\\n)";
    let host = Command::new("perl")
        .args(["-e", io_uring])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&host.stdout).trim(), "Bad address");
    let sandboxed = target
        .exec("seccomp", &format!("perl -e '{io_uring}'"))
        .await;
    assert!(
        sandboxed
            .lines()
            .any(|line| line == "Operation not permitted"),
        "{sandboxed}"
    );
    // The command is unprivileged and filtered, and sees only the system directories.
    let status = target
        .exec(
            "status",
            "grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; id -u; ls /",
        )
        .await;
    for line in [
        "CapEff:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "1000",
    ] {
        assert!(
            status.lines().any(|candidate| candidate == line),
            "{line:?} not in {status}"
        );
    }
    let top_of_data = target
        .data
        .components()
        .nth(1)
        .unwrap()
        .as_os_str()
        .to_str()
        .unwrap()
        .to_owned();
    let root_entries: Vec<&str> = status
        .lines()
        .skip_while(|line| *line != "1000")
        .skip(1)
        .collect();
    for entry in &root_entries {
        assert!(
            [
                "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sandbox", "sbin",
                "tmp", "usr"
            ]
            .contains(entry)
                || *entry == top_of_data,
            "unexpected /{entry} in the sandbox: {status}"
        );
    }
    assert!(!root_entries.contains(&"root") && !root_entries.contains(&"home"));
}

#[test]
fn the_sandbox_helper_is_hidden_and_refuses_a_spec_it_cannot_read() {
    let help = gatehouse().arg("--help").output().unwrap();
    assert!(!String::from_utf8_lossy(&help.stdout).contains("sandbox-exec"));
    let refused = gatehouse()
        .args(["sandbox-exec", "--spec", "{}", "--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(126));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("SANDBOX_SPEC_INVALID"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_1_and_7_hostile_commands_fail_as_root() {
    let target = Target::start(As::Root, &[]);
    target.up.wait_ready().await;
    hostile_commands_fail(&target).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_1_and_7_hostile_commands_fail_as_an_unprivileged_node() {
    let target = Target::start(As::Nobody, &[]);
    target.up.wait_ready().await;
    assert!(
        target
            .up
            .process
            .stderr()
            .contains("process-limit: active: 256 processes (RLIMIT_NPROC, and counted"),
        "{}",
        target.up.process.stderr()
    );
    hostile_commands_fail(&target).await;
}

/// Opens a file without `FD_CLOEXEC`, so that every child of this process inherits it.
fn inheritable_file(dir: &Path) -> std::fs::File {
    let file = std::fs::File::create(dir.join("inherited")).unwrap();
    rustix::io::fcntl_setfd(&file, rustix::io::FdFlags::empty()).unwrap();
    file
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_7_only_stdin_stdout_and_stderr_reach_the_command() {
    for who in [As::Root, As::Nobody] {
        let holder = tempfile::tempdir().unwrap();
        let file = inheritable_file(holder.path());
        let number = std::os::fd::AsRawFd::as_raw_fd(&file).to_string();
        let target = Target::start(who, &[]);
        target.up.wait_ready().await;
        // The node really holds the inherited descriptor, so the sandbox is what drops it.
        let node_fd = PathBuf::from(format!("/proc/{}/fd/{number}", target.up.process.pid()));
        assert!(
            node_fd.exists(),
            "{who:?}: the node did not inherit fd {number}"
        );
        let listing = target.exec("fds", "ls /proc/self/fd").await;
        let fds: Vec<&str> = listing.lines().skip(1).collect();
        // 0, 1 and 2, and the descriptor `ls` itself reads the directory with.
        assert_eq!(fds, ["0", "1", "2", "3"], "{who:?}: {listing}");
        drop(file);
    }
}

/// Counts the processes of `outer_uid` whose command line holds the bomb's shell function.
fn bomb_processes(outer_uid: u32) -> usize {
    let mut count = 0;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let mut cmdline = String::new();
        let Ok(mut file) = std::fs::File::open(path.join("cmdline")) else {
            continue;
        };
        // The bomb's own text, not just its name: test runners' command lines name the tests.
        if file.read_to_string(&mut cmdline).is_err() || !cmdline.contains("bomb() {") {
            continue;
        }
        let status = std::fs::read_to_string(path.join("status")).unwrap_or_default();
        let uid_matches = status
            .lines()
            .find_map(|line| line.strip_prefix("Uid:"))
            .and_then(|ids| ids.split_whitespace().next())
            .is_some_and(|uid| uid == outer_uid.to_string());
        if uid_matches {
            count += 1;
        }
    }
    count
}

/// A fork bomb that keeps its shell in the foreground until it is killed.
const FORK_BOMB: &str = "bomb() { bomb | bomb & }; bomb; sleep 600";

/// Runs `exec` with `arguments` in `target` while sampling the bomb's processes of `outer_uid`
/// on the host; returns the tool's output and the largest number of bomb processes seen.
async fn run_sampled(
    target: &Target,
    arguments: serde_json::Value,
    outer_uid: u32,
) -> (String, usize) {
    let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = std::sync::Arc::clone(&sampling);
        std::thread::spawn(move || {
            let mut most = 0;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(bomb_processes(outer_uid));
                std::thread::sleep(Duration::from_millis(1));
            }
            most
        })
    };
    let output = target.exec_with("bomb", arguments).await;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    (output, sampler.join().unwrap())
}

/// Waits until no bomb process of `outer_uid` is left.
async fn assert_bomb_gone(outer_uid: u32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while bomb_processes(outer_uid) > 0 {
        assert!(
            Instant::now() < deadline,
            "bomb processes outlived the call"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_6_a_fork_bomb_is_bounded_by_the_process_limit_as_an_unprivileged_node() {
    let limit = PROCESS_LIMIT.to_string();
    let target = Target::start(
        As::Nobody,
        &["--sandbox-processes", &limit, "--exec-timeout-seconds", "4"],
    );
    target.up.wait_ready().await;
    let bomb = serde_json::json!({ "command": FORK_BOMB });
    let (output, most) = run_sampled(&target, bomb, NOBODY).await;
    // RLIMIT_NPROC refuses the forks; the bomb then ends at the exec timeout, or earlier when
    // the sandbox helper counts more than the limit (its count includes zombies not yet reaped).
    assert!(
        output.contains("timed out after") || output.contains("(SANDBOX_PROCESS_LIMIT)"),
        "{output}"
    );
    assert!(
        output.contains("Cannot fork") || output.contains("fork"),
        "{output}"
    );
    assert!(most > 0, "the sampler never saw the bomb");
    // The limit counts the sandbox user's processes; bubblewrap's own two (whose command lines
    // also name the bomb) are outside it.
    assert!(
        most <= PROCESS_LIMIT as usize + 2,
        "{most} bomb processes ran under a limit of {PROCESS_LIMIT}"
    );
    assert_bomb_gone(NOBODY).await;
    let after = target.exec("after", "echo alive; echo \"rc=$?.\"").await;
    assert!(after.contains("alive"), "{after}");
}

/// How far above [`PROCESS_LIMIT`] the bomb's processes may be seen on the host as root: what
/// the bomb forks within one polling interval of the sandbox helper and until its kill lands, on
/// a loaded machine, plus bubblewrap's two processes and the helper (whose command lines name
/// the bomb). On a loaded two-core machine the sandbox had allocated at most 103 PIDs in all when
/// the kill landed (so at most the limit plus 53 processes), and this sampler saw at most 38.
const ROOT_SLACK: usize = 64;

#[tokio::test(flavor = "multi_thread")]
async fn finding_6_a_fork_bomb_is_bounded_as_root_too() {
    // The kernel exempts root's processes from RLIMIT_NPROC even inside the user namespace; the
    // sandbox helper counts the sandbox's processes and kills all of them past the limit.
    let limit = PROCESS_LIMIT.to_string();
    let target = Target::start(
        As::Root,
        &[
            "--sandbox-processes",
            &limit,
            "--exec-timeout-seconds",
            "30",
        ],
    );
    target.up.wait_ready().await;
    let stderr = target.up.process.stderr();
    assert!(
        stderr.contains(&format!(
            "sandbox: process-limit: active: {PROCESS_LIMIT} processes (counted by the sandbox helper"
        )),
        "{stderr}"
    );
    let bomb = serde_json::json!({ "command": FORK_BOMB });
    let (output, most) = run_sampled(&target, bomb, 0).await;
    assert!(
        output.contains(&format!(
            "gatehouse sandbox: process limit of {PROCESS_LIMIT} exceeded; every process of the command was killed (SANDBOX_PROCESS_LIMIT)"
        )),
        "{output}"
    );
    assert!(!output.contains("timed out after"), "{output}");
    assert!(most > 0, "the sampler never saw the bomb");
    assert!(
        most <= PROCESS_LIMIT as usize + ROOT_SLACK,
        "{most} bomb processes ran under a limit of {PROCESS_LIMIT}"
    );
    assert_bomb_gone(0).await;
    let after = target.exec("after", "echo alive; echo \"rc=$?.\"").await;
    assert!(after.contains("alive"), "{after}");
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_1_every_sandbox_layer_is_reported_at_startup_as_root_and_as_non_root() {
    let target = Target::start(As::Nobody, &[]);
    target.up.wait_ready().await;
    let stderr = target.up.process.stderr();
    for layer in [
        "sandbox: userns: active: uid 1000 gid 1000",
        "sandbox: caps: active",
        "sandbox: no_new_privs: active",
        "sandbox: seccomp: active",
        "sandbox: landlock: active: ABI ",
        "sandbox: mounts: active: deny by default",
        "sandbox: rlimits: active",
        &format!("sandbox: process-limit: active: {} processes", 256),
        "sandbox: fds: active",
    ] {
        assert!(stderr.contains(layer), "{layer:?} not in {stderr}");
    }
    drop(target);
    // As root every layer is active too, and the node starts without any flag.
    let target = Target::start(As::Root, &[]);
    target.up.wait_ready().await;
    let stderr = target.up.process.stderr();
    assert!(
        stderr.contains(
            "sandbox: process-limit: active: 256 processes (counted by the sandbox helper"
        ),
        "{stderr}"
    );
    assert!(!stderr.contains("MISSING"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread")]
async fn finding_7_an_operator_listed_path_is_read_only_and_nothing_else_appears() {
    let extra = base_dir();
    std::fs::write(extra.path().join("tool.txt"), "extra-content").unwrap();
    std::fs::set_permissions(
        extra.path().join("tool.txt"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();
    let extra_path = extra.path().canonicalize().unwrap();
    let target = Target::start(
        As::Root,
        &["--sandbox-read-only", extra_path.to_str().unwrap()],
    );
    target.up.wait_ready().await;
    let read = target
        .exec("ro", &format!("cat {}/tool.txt", extra_path.display()))
        .await;
    assert!(read.contains("extra-content"), "{read}");
    let write = target
        .exec(
            "ro",
            &format!(
                "echo x > {}/tool.txt; echo \"rc=$?.\"",
                extra_path.display()
            ),
        )
        .await;
    assert_failed("write into the read-only path", &write);
    assert_eq!(
        std::fs::read_to_string(extra_path.join("tool.txt")).unwrap(),
        "extra-content"
    );
    // Of the test's base directory only the path down to the workspace exists (bubblewrap makes
    // it to mount the workspace): not the logs, the host socket or the Gateway state.
    let listing = target
        .exec(
            "ro",
            &format!("ls {} {}", target.base.display(), target.data.display()),
        )
        .await;
    for absent in ["logs", "host.sock", "gateway"] {
        assert!(
            !listing.lines().any(|line| line == absent),
            "{absent} in {listing}"
        );
    }
    assert!(listing.lines().any(|line| line == "harness"), "{listing}");
}

#[test]
fn finding_7_the_node_config_file_lists_read_only_paths_and_accepted_layers() {
    let temp = base_dir();
    let extra = temp.path().canonicalize().unwrap().join("toolchain");
    std::fs::create_dir(&extra).unwrap();
    let config = temp.path().join("node.toml");
    let write_config = |read_only: &Path| {
        std::fs::write(
            &config,
            format!(
                "root = {:?}\nruntime = \"native\"\nsandbox-read-only = [{:?}]\nsandbox-allow-missing = [\"seccomp\"]\n",
                temp.path().join("harness").display().to_string(),
                read_only.display().to_string(),
            ),
        )
        .unwrap();
    };
    let node = || {
        gatehouse()
            .env_remove("GATEHOUSE_SANDBOX_ALLOW_MISSING")
            .args(["node", "--config"])
            .arg(&config)
            .output()
            .unwrap()
    };
    write_config(&extra);
    let output = node();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("extra read-only: {}", extra.display())),
        "{stderr}"
    );
    // The file's accepted layer is read like the flag (unused here: the kernel gives seccomp).
    assert!(stderr.contains("sandbox: seccomp: active"), "{stderr}");
    write_config(&temp.path().join("missing"));
    let output = node();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--sandbox-read-only"), "{stderr}");
}

/// Issue 19 against a node host run as root and as uid 65534, with its data outside `/tmp`:
/// the node fetches a repository (its own git, its own cache) into a session workspace, the
/// sandboxed agent sees the files and the links as links, and in a worktree session a result
/// whose link leads out only through another link is refused whole while a clean one applies.
async fn workspace_sources_hold(target: &Target) {
    use crate::suite::worktree::applied;
    use crate::suite::worktree::create_worktree_session;
    use crate::suite::worktree::exec;
    use crate::suite::worktree::git;
    use crate::suite::worktree::read;
    use crate::suite::worktree::run;
    use crate::suite::worktree::write;
    let up = &target.up;
    let repository = target.base.join("repository");
    std::fs::create_dir(&repository).unwrap();
    git(&repository, &["init", "-q", "-b", "main"]);
    std::fs::write(repository.join("a.txt"), "tagged\n").unwrap();
    std::os::unix::fs::symlink("a.txt", repository.join("rel")).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", repository.join("abs")).unwrap();
    git(&repository, &["add", "-A"]);
    git(&repository, &["commit", "-q", "-m", "one"]);
    git(&repository, &["tag", "v1"]);
    if target.who == As::Nobody {
        // The node host's git reads only a repository its own user owns.
        let chown = Command::new("chown")
            .args(["-R", "65534:65534"])
            .arg(&repository)
            .status()
            .unwrap();
        assert!(chown.success());
    }
    let url = format!("file://{}", repository.display());
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
    let first = run(
        up,
        "r1",
        &exec("cat a.txt; readlink rel; readlink abs; id -u"),
    )
    .await;
    assert_eq!(
        first["status"],
        "completed",
        "{first} {}",
        up.process.stderr()
    );
    let reply = first["reply"].as_str().unwrap();
    assert!(
        reply.contains("tagged") && reply.contains("a.txt") && reply.contains("/etc/hostname"),
        "{first}"
    );
    // The cache is the node host's own, outside every session workspace.
    let sources = target.data.join("harness/sources");
    assert_eq!(
        std::fs::metadata(&sources).unwrap().permissions().mode() & 0o777,
        0o700
    );
    if target.who == As::Nobody {
        use std::os::unix::fs::MetadataExt;
        assert_eq!(std::fs::metadata(&sources).unwrap().uid(), NOBODY);
    }

    create_worktree_session(up, "w1").await;
    write(up, "w1", "a.txt", "kept\n").await;
    let clean = run(up, "w1", &exec("printf 'agent\\n' > b.txt")).await;
    assert_eq!(clean["status"], "completed", "{clean}");
    applied(up, clean["turnId"].as_str().unwrap()).await;
    // `a/b/l` resolves to the root, so `y` through it climbs out: refused whole.
    let hostile = run(
        up,
        "w1",
        &exec("mkdir -p a/b && ln -s ../.. a/b/l && ln -s a/b/l/../etc/passwd y && printf 'x\\n' > b.txt"),
    )
    .await;
    assert_eq!(
        (
            hostile["status"].as_str(),
            hostile["error"]["code"].as_str()
        ),
        (Some("failed"), Some("CHECKPOINT_INVALID")),
        "{hostile}"
    );
    let b = read(up, "w1", "worktree/b.txt").await;
    assert_eq!(
        (b.body.as_slice(), b.version.as_deref()),
        (&b"agent\n"[..], Some("3"))
    );
    assert_eq!(read(up, "w1", "worktree/y").await.status, 404);
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_19_workspace_sources_hold_as_root() {
    let target = Target::start(As::Root, &[]);
    target.up.wait_ready().await;
    workspace_sources_hold(&target).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_19_workspace_sources_hold_as_an_unprivileged_node() {
    let target = Target::start(As::Nobody, &[]);
    target.up.wait_ready().await;
    workspace_sources_hold(&target).await;
}

/// The model key is in the node host's environment (the broker's credential) and each worker's
/// pipes lead into the node host: a process of the node's own uid that is not root (a worker
/// taken over by what it runs) can read neither the node host's nor another worker's
/// `/proc/PID/environ`, nor open their descriptors. Both processes are non-dumpable.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_of_the_nodes_uid_cannot_read_the_node_hosts_key_or_reach_its_pipes() {
    let target = Target::start(As::Nobody, &[]);
    target.up.wait_ready().await;
    // A worker exists once a turn ran.
    target.exec("s", "true").await;
    let node = target.up.process.pid();
    let workers: Vec<u32> = crate::suite::support::processes()
        .into_iter()
        .filter(|(pid, argv, _)| argv.iter().any(|arg| arg == "worker") && parent(*pid) == node)
        .map(|(pid, _, _)| pid)
        .collect();
    assert!(!workers.is_empty(), "no worker is running");
    for pid in std::iter::once(node).chain(workers) {
        // Root (this test) sees the files, so the refusal below is the process's protection.
        assert!(
            std::fs::read(format!("/proc/{pid}/environ")).is_ok(),
            "root cannot read /proc/{pid}/environ"
        );
        for probe in [
            format!("cat /proc/{pid}/environ"),
            format!("ls /proc/{pid}/fd"),
        ] {
            let output = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
                .args(["sh", "-c", &probe])
                .output()
                .unwrap();
            assert!(
                !output.status.success() && output.stdout.is_empty(),
                "uid 65534 ran `{probe}`: {output:?}"
            );
        }
    }
}

/// The parent of `pid`, from the fourth field of `/proc/PID/stat` (after the parenthesised name,
/// which may itself hold spaces); 0 when it is gone.
fn parent(pid: u32) -> u32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}
