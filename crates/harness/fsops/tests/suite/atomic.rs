//! A write killed (SIGKILL) at a random moment leaves the target with its old content or its new
//! content, never a mix and never truncated.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use gatehouse_fsops::RelPath;
use gatehouse_fsops::Root;
use gatehouse_fsops::root::ContentMode;
use gatehouse_fsops::root::Overwrite;
use gatehouse_fsops::root::Parents;
use gatehouse_fsops::root::WriteOptions;

/// When set, this test's process is the child that writes in a loop until it is killed.
const CHILD_ROOT_ENV: &str = "GATEHOUSE_FSOPS_TEST_WRITE_LOOP_ROOT";
const THIS_TEST: &str = "suite::atomic::a_write_killed_at_any_moment_leaves_old_or_new_content";
const SIZE: usize = 4 * 1024 * 1024;
const KILLS: u64 = 12;

fn content(fill: u8) -> Vec<u8> {
    vec![fill; SIZE]
}

fn write_loop(root_dir: &Path) -> ! {
    let root = Root::open(root_dir).unwrap();
    let rel = RelPath::parse("target.bin").unwrap();
    let options = WriteOptions {
        overwrite: Overwrite::Allow,
        parents: Parents::MustExist,
        content: ContentMode::Transfer,
    };
    let (a, b) = (content(b'a'), content(b'b'));
    loop {
        root.write(&rel, &a, options).unwrap();
        root.write(&rel, &b, options).unwrap();
    }
}

#[test]
fn a_write_killed_at_any_moment_leaves_old_or_new_content() {
    if let Some(root_dir) = std::env::var_os(CHILD_ROOT_ENV) {
        write_loop(Path::new(&root_dir));
    }
    let temp = tempfile::tempdir().unwrap();
    let root_dir = temp.path().canonicalize().unwrap();
    std::fs::write(root_dir.join("target.bin"), content(b'a')).unwrap();
    let exe = std::env::current_exe().unwrap();
    for kill in 0..KILLS {
        let mut child = Command::new(&exe)
            .args(["--exact", THIS_TEST, "--nocapture"])
            .env(CHILD_ROOT_ENV, &root_dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Vary the moment of death across the write cycle.
        std::thread::sleep(Duration::from_millis(40 + kill * 17));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the writer exited before it was killed"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        let bytes = std::fs::read(root_dir.join("target.bin")).unwrap();
        assert_eq!(bytes.len(), SIZE, "kill {kill}: truncated target");
        let first = bytes[0];
        assert!(
            first == b'a' || first == b'b',
            "kill {kill}: unknown content"
        );
        assert!(
            bytes.iter().all(|byte| *byte == first),
            "kill {kill}: mixed content"
        );
    }
}
