//! The node-host start check: refuse unsafe private directories, never repair them.

use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use gatehouse_scratch::ScratchError;
use gatehouse_scratch::Unsafety;
use pretty_assertions::assert_eq;

/// An unprivileged uid that owns nothing in the test's temporary directory.
const OTHER_UID: u32 = 65534;

fn owner_and_mode(path: &Path) -> (u32, u32, u32) {
    let metadata = std::fs::symlink_metadata(path).unwrap();
    (metadata.uid(), metadata.gid(), metadata.mode() & 0o7777)
}

fn make_private_dir(root: &Path, mode: u32) -> std::path::PathBuf {
    let private_dir = root.join("gatehouse");
    std::fs::create_dir(&private_dir).unwrap();
    std::fs::set_permissions(&private_dir, std::fs::Permissions::from_mode(mode)).unwrap();
    private_dir
}

#[test]
fn a_good_directory_passes_and_gets_a_0700_private_directory() {
    let root = tempfile::tempdir().unwrap();
    let report = gatehouse_scratch::prepare(root.path()).unwrap();
    assert!(report.created());
    assert_eq!(report.private_dir(), root.path().join("gatehouse"));
    let euid = rustix::process::geteuid().as_raw();
    let (uid, _, mode) = owner_and_mode(report.private_dir());
    assert_eq!((uid, mode), (euid, 0o700));
    // Only the private directory is left; the probe file is gone.
    let entries: Vec<_> = std::fs::read_dir(root.path()).unwrap().collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(std::fs::read_dir(report.private_dir()).unwrap().count(), 0);

    let again = gatehouse_scratch::prepare(root.path()).unwrap();
    assert!(!again.created());
}

#[test]
fn the_report_matches_statvfs() {
    let root = tempfile::tempdir().unwrap();
    let report = gatehouse_scratch::prepare(root.path()).unwrap();
    let vfs = rustix::fs::statvfs(root.path()).unwrap();
    assert_eq!(report.capacity().total_bytes, vfs.f_blocks * vfs.f_frsize);
    assert!(report.capacity().available_bytes <= report.capacity().total_bytes);
    assert!(report.filesystem().fs_magic.starts_with("0x"));
    assert!(!report.filesystem().read_only);
    let bind = report.bwrap_bind_args();
    assert_eq!(bind[0], "--bind");
    assert_eq!(bind[1], root.path().join("gatehouse").into_os_string());
    assert_eq!(bind[2], "/sandbox/scratch");
}

#[test]
fn a_0755_private_directory_is_unsafe_and_stays_0755() {
    let root = tempfile::tempdir().unwrap();
    let private_dir = make_private_dir(root.path(), 0o755);
    let before = owner_and_mode(&private_dir);
    let err = gatehouse_scratch::prepare(root.path()).unwrap_err();
    assert_eq!(err.code(), "SCRATCH_UNSAFE");
    match &err {
        ScratchError::Unsafe { path, problem } => {
            assert_eq!(path, &private_dir);
            assert_eq!(*problem, Unsafety::WrongMode { actual_mode: 0o755 });
        }
        other => panic!("unexpected {other}"),
    }
    assert_eq!(owner_and_mode(&private_dir), before);
    assert_eq!(before.2, 0o755);
}

#[test]
fn every_mode_but_0700_is_refused() {
    for mode in [
        0o500, 0o600, 0o710, 0o750, 0o770, 0o701, 0o777, 0o1700, 0o4700,
    ] {
        let root = tempfile::tempdir().unwrap();
        let private_dir = make_private_dir(root.path(), mode);
        let err = gatehouse_scratch::prepare(root.path()).unwrap_err();
        assert_eq!(err.code(), "SCRATCH_UNSAFE", "mode {mode:o}");
        assert_eq!(
            owner_and_mode(&private_dir).2,
            mode,
            "mode {mode:o} was changed"
        );
    }
}

#[test]
fn a_set_group_id_bit_inherited_from_an_fs_group_volume_is_tolerated() {
    let root = tempfile::tempdir().unwrap();
    make_private_dir(root.path(), 0o2700);
    gatehouse_scratch::prepare(root.path()).unwrap();
}

#[test]
fn a_private_directory_owned_by_another_uid_is_unsafe_and_keeps_its_owner() {
    let root = tempfile::tempdir().unwrap();
    let private_dir = make_private_dir(root.path(), 0o700);
    std::os::unix::fs::chown(&private_dir, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    let before = owner_and_mode(&private_dir);
    let err = gatehouse_scratch::prepare(root.path()).unwrap_err();
    let euid = rustix::process::geteuid().as_raw();
    assert_eq!(err.code(), "SCRATCH_UNSAFE");
    match err {
        ScratchError::Unsafe { problem, .. } => assert_eq!(
            problem,
            Unsafety::WrongOwner {
                expected_uid: euid,
                actual_uid: OTHER_UID
            }
        ),
        other => panic!("unexpected {other}"),
    }
    assert_eq!(owner_and_mode(&private_dir), before);
    assert_eq!(before, (OTHER_UID, OTHER_UID, 0o700));
}

#[test]
fn a_symlink_or_file_in_place_of_the_private_directory_is_unsafe() {
    let root = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::set_permissions(elsewhere.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), root.path().join("gatehouse")).unwrap();
    let err = gatehouse_scratch::prepare(root.path()).unwrap_err();
    assert_eq!(err.code(), "SCRATCH_UNSAFE");
    assert!(err.to_string().contains("not a directory"), "{err}");

    let root = tempfile::tempdir().unwrap();
    std::fs::write(root.path().join("gatehouse"), b"").unwrap();
    let err = gatehouse_scratch::prepare(root.path()).unwrap_err();
    assert_eq!(err.code(), "SCRATCH_UNSAFE");
}

#[test]
fn a_missing_path_or_a_file_is_refused_with_its_own_code() {
    let root = tempfile::tempdir().unwrap();
    let missing = root.path().join("missing");
    assert_eq!(
        gatehouse_scratch::prepare(&missing).unwrap_err().code(),
        "SCRATCH_NOT_FOUND"
    );
    let file = root.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    assert_eq!(
        gatehouse_scratch::prepare(&file).unwrap_err().code(),
        "SCRATCH_NOT_DIRECTORY"
    );
}

#[test]
fn error_messages_are_lowercase_and_say_it_is_never_repaired() {
    let root = tempfile::tempdir().unwrap();
    make_private_dir(root.path(), 0o755);
    let message = gatehouse_scratch::prepare(root.path())
        .unwrap_err()
        .to_string();
    assert!(message.starts_with("scratch directory "), "{message}");
    assert!(
        message.ends_with("its mode is 0755, not 0700; fix it by hand, it is never repaired"),
        "{message}"
    );
}
