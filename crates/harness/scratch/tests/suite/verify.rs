//! The operator's post-deploy check.

use std::os::unix::fs::MetadataExt;
use std::os::unix::fs::PermissionsExt;

use gatehouse_scratch::verify::CHECK_NAMES;
use pretty_assertions::assert_eq;

fn names(report: &gatehouse_scratch::verify::VerifyReport) -> Vec<&'static str> {
    report.checks.iter().map(|check| check.name).collect()
}

#[test]
fn a_good_directory_passes_every_check_and_is_left_as_it_was() {
    let root = tempfile::tempdir().unwrap();
    let report = gatehouse_scratch::verify(root.path());
    assert!(report.passed, "{report:#?}");
    assert_eq!(names(&report), CHECK_NAMES.to_vec());
    assert!(
        report
            .checks
            .iter()
            .all(|check| check.passed && check.code.is_none())
    );
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    let capacity = report.capacity.unwrap();
    let vfs = rustix::fs::statvfs(root.path()).unwrap();
    assert_eq!(capacity.total_bytes, vfs.f_blocks * vfs.f_frsize);
    let filesystem = report.filesystem.unwrap();
    let device = std::fs::metadata(root.path()).unwrap().dev();
    assert_eq!(
        filesystem.device,
        format!(
            "{}:{}",
            rustix::fs::major(device),
            rustix::fs::minor(device)
        )
    );
}

#[test]
fn an_unsafe_private_directory_fails_its_check_and_is_not_changed() {
    let root = tempfile::tempdir().unwrap();
    let private_dir = root.path().join("gatehouse");
    std::fs::create_dir(&private_dir).unwrap();
    std::fs::set_permissions(&private_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let report = gatehouse_scratch::verify(root.path());
    assert!(!report.passed);
    let failed: Vec<(&str, Option<&str>)> = report
        .checks
        .iter()
        .filter(|check| !check.passed)
        .map(|check| (check.name, check.code))
        .collect();
    assert_eq!(failed, vec![("private-directory", Some("SCRATCH_UNSAFE"))]);
    let mode = std::fs::metadata(&private_dir).unwrap().mode() & 0o7777;
    assert_eq!(mode, 0o755);
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1);
}

#[test]
fn a_missing_directory_fails_and_skips_what_depends_on_it() {
    let root = tempfile::tempdir().unwrap();
    let report = gatehouse_scratch::verify(&root.path().join("missing"));
    assert!(!report.passed);
    assert_eq!(names(&report), CHECK_NAMES.to_vec());
    assert_eq!(report.checks[0].code, Some("SCRATCH_NOT_FOUND"));
    assert!(report.checks[1..].iter().all(|check| !check.passed));
    assert!(report.capacity.is_none());
}
