//! `gatehouse scratch verify` and `gatehouse scratch prepare` (the check `gatehouse node
//! --scratch` runs at start), including read-only mounts and an unprivileged uid.
//!
//! The tests run as root, like CI. Root bypasses permission bits, so "a directory the process
//! cannot write" runs the binary as uid 65534 through `setpriv`, and a read-only filesystem is
//! a read-only bind mount (or a tmpfs) made inside a private mount namespace with `unshare`, so
//! nothing leaks into the host's mounts. When such a tool is missing the test fails; it never
//! skips.

use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::process::Output;

use pretty_assertions::assert_eq;

const BIN: &str = env!("CARGO_BIN_EXE_gatehouse");
const OTHER_UID: u32 = 65534;
/// The exit code the shell wrappers use when the mount setup itself fails.
const SETUP_FAILED: i32 = 97;

fn gatehouse() -> Command {
    Command::new(BIN)
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).unwrap()
}

fn owner_and_mode(path: &Path) -> (u32, u32) {
    let metadata = std::fs::symlink_metadata(path).unwrap();
    (metadata.uid(), metadata.mode() & 0o7777)
}

/// Runs `script` with `sh -c` in a private mount namespace; `$0` is the binary, `$1` the dir.
fn in_private_mount_namespace(script: &str, dir: &Path) -> Output {
    let output = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            BIN,
        ])
        .arg(dir)
        .output()
        .expect("unshare(1) is required by this test (util-linux)");
    assert_ne!(
        output.status.code(),
        Some(SETUP_FAILED),
        "mount setup failed; this test needs mount namespaces and mount(8): {}",
        stderr(&output)
    );
    output
}

/// Returns `(f_blocks × f_frsize, f_bavail × f_frsize)` as `stat -f` reports them.
fn parse_stat_f(line: &str) -> (u64, u64) {
    let numbers: Vec<u64> = line
        .split_whitespace()
        .map(|field| field.parse().unwrap())
        .collect();
    let [blocks, available, fragment_size] = numbers[..] else {
        panic!("unexpected stat -f output {line:?}");
    };
    (blocks * fragment_size, available * fragment_size)
}

#[test]
fn verify_on_a_tmpfs_reports_statvfs_capacity_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
        mount -t tmpfs -o size=8m,mode=0755 tmpfs "$1" || exit 97
        "$0" scratch verify --json "$1"; echo "exit=$?"
        echo "--- stat"; stat -f -c '%b %a %S' "$1"
        echo "--- ls"; ls -A "$1"
    "#;
    let output = in_private_mount_namespace(script, dir.path());
    let text = stdout(&output);
    let (json, rest) = text.split_once("exit=").unwrap();
    let (exit, rest) = rest.split_once("\n--- stat\n").unwrap();
    let (stat_line, listing) = rest.split_once("--- ls\n").unwrap();
    assert_eq!(exit, "0", "{text}{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(json).unwrap();
    let (total, available) = parse_stat_f(stat_line);
    assert_eq!(report["capacity"]["totalBytes"], total);
    assert_eq!(report["capacity"]["availableBytes"], available);
    assert_eq!(total, 8 * 1024 * 1024);
    assert_eq!(report["filesystem"]["fsType"], "tmpfs");
    assert_eq!(report["passed"], true);
    assert_eq!(listing, "", "verify left entries behind");
    let names: Vec<&str> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|check| check["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "directory",
            "writable-filesystem",
            "writable-directory",
            "private-directory",
            "capacity",
            "temp-directory",
            "write-read",
            "cleanup",
        ]
    );
}

#[test]
fn verify_on_a_temp_dir_prints_capacity_and_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let output = gatehouse()
        .args(["scratch", "verify"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stdout(&output));
    let text = stdout(&output);
    let stat = Command::new("stat")
        .args(["-f", "-c", "%b %a %S"])
        .arg(dir.path())
        .output()
        .unwrap();
    let (total, _) = parse_stat_f(&stdout(&stat));
    assert!(text.contains(&format!("total bytes: {total}\n")), "{text}");
    assert!(text.contains("available bytes: "), "{text}");
    assert!(text.ends_with("result: pass\n"), "{text}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn verify_fails_with_exit_1_on_a_read_only_bind() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
        mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" || exit 97
        exec "$0" scratch verify --json "$1"
    "#;
    let output = in_private_mount_namespace(script, dir.path());
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["passed"], false);
    assert_eq!(report["filesystem"]["readOnly"], true);
    assert_eq!(report["checks"][1]["code"], "SCRATCH_READ_ONLY");
}

#[test]
fn prepare_passes_on_a_good_directory_and_creates_a_0700_private_directory() {
    let dir = tempfile::tempdir().unwrap();
    let output = gatehouse()
        .args(["scratch", "prepare", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["ok"], true);
    assert_eq!(report["created"], true);
    assert!(report["capacity"]["totalBytes"].as_u64().unwrap() > 0);
    let euid = std::fs::metadata("/proc/self").unwrap().uid();
    assert_eq!(owner_and_mode(&dir.path().join("gatehouse")), (euid, 0o700));
}

#[test]
fn prepare_refuses_a_0755_private_directory_and_leaves_its_mode() {
    let dir = tempfile::tempdir().unwrap();
    let private_dir = dir.path().join("gatehouse");
    std::fs::create_dir(&private_dir).unwrap();
    std::fs::set_permissions(&private_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let before = owner_and_mode(&private_dir);
    let output = gatehouse()
        .args(["scratch", "prepare"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    assert!(
        stderr(&output).contains("SCRATCH_UNSAFE"),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("0755"), "{}", stderr(&output));
    assert_eq!(owner_and_mode(&private_dir), before);
    assert_eq!(before.1, 0o755);
}

#[test]
fn prepare_refuses_a_private_directory_of_another_uid_and_leaves_its_owner() {
    let dir = tempfile::tempdir().unwrap();
    let private_dir = dir.path().join("gatehouse");
    std::fs::create_dir(&private_dir).unwrap();
    std::fs::set_permissions(&private_dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::chown(&private_dir, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let output = gatehouse()
        .args(["scratch", "prepare", "--json"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(report["code"], "SCRATCH_UNSAFE");
    assert!(stderr(&output).contains(&format!("owned by uid {OTHER_UID}")));
    assert_eq!(owner_and_mode(&private_dir), (OTHER_UID, 0o700));
}

#[test]
fn prepare_fails_on_a_read_only_bind() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
        mount --bind "$1" "$1" && mount -o remount,ro,bind "$1" || exit 97
        exec "$0" scratch prepare "$1"
    "#;
    let output = in_private_mount_namespace(script, dir.path());
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("SCRATCH_READ_ONLY"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn prepare_fails_on_a_read_only_tmpfs_even_with_a_good_private_directory() {
    let dir = tempfile::tempdir().unwrap();
    let script = r#"
        mount -t tmpfs -o size=1m,mode=0755 tmpfs "$1" || exit 97
        mkdir -m 0700 "$1/gatehouse" || exit 97
        mount -o remount,ro "$1" || exit 97
        exec "$0" scratch prepare "$1"
    "#;
    let output = in_private_mount_namespace(script, dir.path());
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stderr(&output).contains("SCRATCH_READ_ONLY"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn prepare_fails_when_the_process_cannot_write_the_directory() {
    // uid 65534 needs to reach both the binary and the scratch directory, so both sit in
    // world-traversable copies rather than in the build tree.
    let bin_dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(bin_dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = bin_dir.path().join("gatehouse");
    std::fs::copy(BIN, &bin).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let parent = tempfile::tempdir().unwrap();
    std::fs::set_permissions(parent.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let scratch = parent.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    std::fs::set_permissions(&scratch, std::fs::Permissions::from_mode(0o755)).unwrap();

    let run_as_other = |subcommand: &str| {
        Command::new("setpriv")
            .args(["--reuid", "65534", "--regid", "65534", "--clear-groups"])
            .arg(&bin)
            .args(["scratch", subcommand])
            .arg(&scratch)
            .output()
            .expect("setpriv(1) is required by this test (util-linux)")
    };
    let output = run_as_other("prepare");
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("SCRATCH_NOT_WRITABLE"),
        "{}",
        stderr(&output)
    );
    assert!(stderr(&output).contains("uid 65534"), "{}", stderr(&output));
    assert_eq!(std::fs::read_dir(&scratch).unwrap().count(), 0);
    assert_eq!(owner_and_mode(&scratch), (0, 0o755));

    let output = run_as_other("verify");
    assert_eq!(output.status.code(), Some(1), "{}", stdout(&output));
    assert!(
        stdout(&output).contains("[SCRATCH_NOT_WRITABLE]"),
        "{}",
        stdout(&output)
    );

    // The same directory made writable for uid 65534 passes, so the failure above was the
    // permission check and not the setup.
    std::os::unix::fs::chown(&scratch, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let output = run_as_other("prepare");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        owner_and_mode(&scratch.join("gatehouse")),
        (OTHER_UID, 0o700)
    );
}
