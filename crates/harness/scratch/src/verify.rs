//! The operator's post-deploy check of a scratch directory.
//!
//! [`verify`] runs every check it can and lists each one as passed or failed, rather than
//! stopping at the first failure, so one run shows the operator everything that is wrong. It
//! creates nothing that outlives the call: the private `gatehouse` directory is only inspected,
//! and the temporary directory and file it writes are removed before it returns.

use gatehouse_protocol::error::ErrorCode;
use std::io::Read;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;

use rustix::fs::StatVfsMountFlags;

use crate::Capacity;
use crate::FilesystemInfo;
use crate::PRIVATE_DIR_MODE;
use crate::PRIVATE_DIR_NAME;
use crate::PrivateDir;
use crate::ScratchError;

/// How many bytes the write-and-read-back check writes.
pub const PROBE_FILE_SIZE: usize = 4096;

/// The result of [`verify`].
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct VerifyReport {
    /// The directory that was checked, as given.
    pub path: PathBuf,
    /// Whether every check passed.
    pub passed: bool,
    /// The capacity before the checks wrote anything, when `statvfs` succeeded.
    pub capacity: Option<Capacity>,
    /// The filesystem behind the directory, when `statfs` and `stat` succeeded.
    pub filesystem: Option<FilesystemInfo>,
    /// Every check, in the order it ran.
    pub checks: Vec<Check>,
}

/// One check of [`verify`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Check {
    /// The stable name of the check (see [`CHECK_NAMES`]).
    pub name: &'static str,
    /// Whether it passed.
    pub passed: bool,
    /// The error code when it failed because of a [`ScratchError`], e.g. `SCRATCH_UNSAFE`.
    pub code: Option<&'static str>,
    /// What was found, in a few words.
    pub detail: String,
}

/// The names of the checks, in the order [`verify`] runs them.
pub const CHECK_NAMES: [&str; 8] = [
    "directory",
    "writable-filesystem",
    "writable-directory",
    "private-directory",
    "capacity",
    "temp-directory",
    "write-read",
    "cleanup",
];

/// Runs the operator's check of the scratch directory `dir`.
///
/// The checks, in order: `dir` is a directory; its filesystem is not mounted read-only; the
/// process may write in it; an existing `gatehouse` private directory is owned by the process
/// uid with mode 0700 (an absent one passes, since the node host creates it); `statvfs` reports
/// capacity with some space available; a new private temporary directory (mode 0700) can be
/// created in `dir`; a small file written there reads back with the same bytes; and the file
/// and directory are removed again. A check that depends on a failed one fails as skipped.
pub fn verify(dir: &Path) -> VerifyReport {
    let mut checks = Vec::with_capacity(CHECK_NAMES.len());
    let mut capacity = None;
    let mut filesystem = None;

    let is_directory = crate::check_directory(dir);
    let directory_ok = is_directory.is_ok();
    checks.push(outcome(
        "directory",
        is_directory.map(|()| String::from("a directory")),
    ));

    let vfs = match directory_ok {
        true => crate::statvfs(dir).ok(),
        false => None,
    };
    if let Some(vfs) = &vfs {
        capacity = Some(crate::capacity(vfs));
        filesystem = crate::filesystem_info(dir, vfs).ok();
    }
    let writable_filesystem = match &vfs {
        None => skipped("writable-filesystem", "statvfs failed"),
        Some(vfs) if vfs.f_flag.contains(StatVfsMountFlags::RDONLY) => failed(
            "writable-filesystem",
            &ScratchError::ReadOnlyFilesystem {
                path: dir.to_owned(),
            },
        ),
        Some(_) => passed("writable-filesystem", "mounted read-write"),
    };
    checks.push(writable_filesystem);

    let writable_directory = match directory_ok {
        true => outcome(
            "writable-directory",
            crate::check_writable(dir)
                .map(|()| format!("writable by uid {}", crate::effective_uid())),
        ),
        false => skipped("writable-directory", "not a directory"),
    };
    let writable = writable_directory.passed;
    checks.push(writable_directory);

    let private_dir = dir.join(PRIVATE_DIR_NAME);
    let private_check = match directory_ok {
        true => outcome(
            "private-directory",
            crate::check_private_dir(&private_dir).map(|state| match state {
                PrivateDir::Present => format!(
                    "{PRIVATE_DIR_NAME}/ owned by uid {} with mode {PRIVATE_DIR_MODE:04o}",
                    crate::effective_uid()
                ),
                PrivateDir::Absent => format!(
                    "{PRIVATE_DIR_NAME}/ absent; the node host creates it with mode {PRIVATE_DIR_MODE:04o}"
                ),
            }),
        ),
        false => skipped("private-directory", "not a directory"),
    };
    checks.push(private_check);

    let capacity_check = match capacity {
        Some(capacity) if capacity.available_bytes > 0 => passed(
            "capacity",
            &format!(
                "{} bytes total, {} bytes available",
                capacity.total_bytes, capacity.available_bytes
            ),
        ),
        Some(capacity) => Check {
            name: "capacity",
            passed: false,
            code: Some(ErrorCode::ScratchNoSpace.as_str()),
            detail: format!("{} bytes total, no bytes available", capacity.total_bytes),
        },
        None => skipped("capacity", "statvfs failed"),
    };
    checks.push(capacity_check);

    match writable {
        true => checks.extend(write_read_cycle(dir)),
        false => {
            for name in ["temp-directory", "write-read", "cleanup"] {
                checks.push(skipped(name, "the directory is not writable"));
            }
        }
    }

    VerifyReport {
        path: dir.to_owned(),
        passed: checks.iter().all(|check| check.passed),
        capacity,
        filesystem,
        checks,
    }
}

/// Creates a private temporary directory in `dir`, writes and reads back a file in it, and
/// removes both. Returns the `temp-directory`, `write-read` and `cleanup` checks.
fn write_read_cycle(dir: &Path) -> [Check; 3] {
    let temp_dir = dir.join(crate::unique_name(".gatehouse-verify"));
    if let Err(errno) =
        rustix::fs::mkdir(&temp_dir, rustix::fs::Mode::from_raw_mode(PRIVATE_DIR_MODE))
    {
        let err = ScratchError::from_write_error(dir, errno.into());
        return [
            failed("temp-directory", &err),
            skipped("write-read", "no temporary directory"),
            skipped("cleanup", "nothing was created"),
        ];
    }
    let temp_check = match std::fs::symlink_metadata(&temp_dir) {
        Ok(metadata) => outcome(
            "temp-directory",
            crate::check_owned_private(&temp_dir, &metadata)
                .map(|()| format!("created a private directory with mode {PRIVATE_DIR_MODE:04o}")),
        ),
        Err(err) => failed(
            "temp-directory",
            &ScratchError::Io {
                path: temp_dir.clone(),
                source: err,
            },
        ),
    };
    let file = temp_dir.join("probe");
    let write_read = outcome("write-read", write_and_read_back(dir, &file));
    let file_removed = match std::fs::remove_file(&file) {
        Ok(()) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(err) => Err(err),
    };
    let cleanup_result = file_removed
        .and_then(|()| std::fs::remove_dir(&temp_dir))
        .map_err(|err| ScratchError::Io {
            path: temp_dir.clone(),
            source: err,
        })
        .and_then(|()| match std::fs::symlink_metadata(&temp_dir) {
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                Ok(String::from("removed the file and the directory"))
            }
            Ok(_) => Err(ScratchError::Io {
                path: temp_dir.clone(),
                source: std::io::Error::other("still present after removal"),
            }),
            Err(err) => Err(ScratchError::Io {
                path: temp_dir.clone(),
                source: err,
            }),
        });
    [temp_check, write_read, outcome("cleanup", cleanup_result)]
}

/// Writes [`PROBE_FILE_SIZE`] bytes to a new file, syncs it, reads it back and compares.
fn write_and_read_back(dir: &Path, file: &Path) -> crate::Result<String> {
    let content = probe_content();
    let mut writer = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(file)
        .map_err(|err| ScratchError::from_write_error(dir, err))?;
    writer
        .write_all(&content)
        .and_then(|()| writer.sync_all())
        .map_err(|err| ScratchError::from_write_error(dir, err))?;
    drop(writer);
    let mut read_back = Vec::with_capacity(PROBE_FILE_SIZE);
    std::fs::File::open(file)
        .and_then(|mut reader| reader.read_to_end(&mut read_back))
        .map_err(|err| ScratchError::Io {
            path: file.to_owned(),
            source: err,
        })?;
    match read_back == content {
        true => Ok(format!("wrote and read back {PROBE_FILE_SIZE} bytes")),
        false => Err(ScratchError::Io {
            path: file.to_owned(),
            source: std::io::Error::other(format!(
                "read back {} bytes that differ from the {PROBE_FILE_SIZE} written",
                read_back.len()
            )),
        }),
    }
}

/// Returns bytes that differ from run to run, so stale data cannot pass for a fresh write.
fn probe_content() -> Vec<u8> {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    // xorshift64; any non-zero state works.
    let mut state = u64::try_from(seed & u128::from(u64::MAX)).unwrap_or(1) | 1;
    let mut content = Vec::with_capacity(PROBE_FILE_SIZE);
    while content.len() < PROBE_FILE_SIZE {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        content.extend_from_slice(&state.to_le_bytes());
    }
    content.truncate(PROBE_FILE_SIZE);
    content
}

fn outcome(name: &'static str, result: crate::Result<String>) -> Check {
    match result {
        Ok(detail) => passed(name, &detail),
        Err(err) => failed(name, &err),
    }
}

fn passed(name: &'static str, detail: &str) -> Check {
    Check {
        name,
        passed: true,
        code: None,
        detail: detail.to_owned(),
    }
}

fn failed(name: &'static str, err: &ScratchError) -> Check {
    Check {
        name,
        passed: false,
        code: Some(err.code().as_str()),
        detail: err.to_string(),
    }
}

fn skipped(name: &'static str, reason: &str) -> Check {
    Check {
        name,
        passed: false,
        code: None,
        detail: format!("skipped: {reason}"),
    }
}
