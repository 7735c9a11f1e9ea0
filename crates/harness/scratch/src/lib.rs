//! Preparation and verification of the operator-owned scratch volume.
//!
//! An operator may give the Harness a scratch filesystem (on Kubernetes, a PVC mounted at
//! `/sandbox/scratch`). Two checks guard it:
//!
//! - [`prepare`] runs when the node host starts (`gatehouse node --scratch DIR`). It checks that
//!   `DIR` is a directory on a writable filesystem and that its private `gatehouse`
//!   subdirectory is owned by the process's effective uid with mode 0700, creating it with mode
//!   0700 when absent. It never repairs anything: a wrong owner or mode fails with
//!   `SCRATCH_UNSAFE` and stays as it was.
//! - [`verify`] is the operator's post-deploy check (`gatehouse scratch verify DIR`). It reports
//!   capacity, filesystem type and device, runs the same directory checks without creating
//!   anything, and writes, reads back and removes a small file in a new private temporary
//!   directory. It leaves nothing behind.
//!
//! ```no_run
//! let report = gatehouse_scratch::prepare(std::path::Path::new("/sandbox/scratch"))
//!     .map_err(|err| format!("{}: {err}", err.code()))?;
//! let bwrap_args = report.bwrap_bind_args(); // ["--bind", "/sandbox/scratch/gatehouse", "/sandbox/scratch"]
//! # let _ = bwrap_args;
//! # Ok::<(), String>(())
//! ```
//!
//! Modules: [`verify`](mod@verify) holds the operator check and its report; this file holds the
//! start check, the shared filesystem facts and the error type.

#![deny(missing_docs)]

mod filesystem;
pub mod verify;

use gatehouse_protocol::error::ErrorCode;
use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::path::PathBuf;

use rustix::fs::Access;
use rustix::fs::AtFlags;
use rustix::fs::StatVfsMountFlags;

pub use crate::verify::verify;

/// Where the node host binds the scratch directory inside the `exec` sandbox.
pub const SANDBOX_SCRATCH_PATH: &str = "/sandbox/scratch";

/// The name of the private subdirectory that the node host owns inside the scratch directory.
pub const PRIVATE_DIR_NAME: &str = "gatehouse";

/// The only permission bits the private directory may have.
pub const PRIVATE_DIR_MODE: u32 = 0o700;

/// A shorthand for results whose error is [`ScratchError`].
pub type Result<T> = std::result::Result<T, ScratchError>;

/// Why a scratch directory was refused.
///
/// None of these goes away on retry: the operator must fix the volume. Nothing here is ever
/// repaired by this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScratchError {
    /// Returned when the scratch path does not exist.
    #[error("scratch path {} does not exist", path.display())]
    NotFound {
        /// The path that was checked.
        path: PathBuf,
    },

    /// Returned when the scratch path exists but is not a directory.
    #[error("scratch path {} is not a directory", path.display())]
    NotADirectory {
        /// The path that was checked.
        path: PathBuf,
    },

    /// Returned when the scratch directory is on a filesystem (or a bind mount) that is
    /// mounted read-only.
    #[error("scratch directory {} is on a read-only filesystem", path.display())]
    ReadOnlyFilesystem {
        /// The path that was checked.
        path: PathBuf,
    },

    /// Returned when the process may not create entries in the scratch directory.
    #[error("scratch directory {} is not writable by uid {uid}", path.display())]
    NotWritable {
        /// The path that was checked.
        path: PathBuf,
        /// The effective uid of the process.
        uid: u32,
    },

    /// Returned when the scratch filesystem has no space or quota left for a small file.
    #[error("scratch directory {} has no space left", path.display())]
    NoSpace {
        /// The path that was checked.
        path: PathBuf,
    },

    /// Returned when the private `gatehouse` directory exists with the wrong type, owner or
    /// mode. The directory is left exactly as it was.
    #[error("scratch directory {} is unsafe: {problem}; fix it by hand, it is never repaired", path.display())]
    Unsafe {
        /// The private directory.
        path: PathBuf,
        /// What is wrong with it.
        problem: Unsafety,
    },

    /// Returned when a system call on the scratch path fails for another reason.
    #[error("cannot check scratch path {}: {source}", path.display())]
    Io {
        /// The path being checked.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
}

impl ScratchError {
    /// Returns the stable code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::NotFound { .. } => ErrorCode::ScratchNotFound,
            Self::NotADirectory { .. } => ErrorCode::ScratchNotDirectory,
            Self::ReadOnlyFilesystem { .. } => ErrorCode::ScratchReadOnly,
            Self::NotWritable { .. } => ErrorCode::ScratchNotWritable,
            Self::NoSpace { .. } => ErrorCode::ScratchNoSpace,
            Self::Unsafe { .. } => ErrorCode::ScratchUnsafe,
            Self::Io { .. } => ErrorCode::ScratchIo,
        }
    }

    /// Maps an error of a write-like call (`mkdir`, `open` with create, `access`) on `path`.
    fn from_write_error(path: &Path, err: io::Error) -> Self {
        let path = path.to_owned();
        match rustix::io::Errno::from_io_error(&err) {
            Some(rustix::io::Errno::ROFS) => Self::ReadOnlyFilesystem { path },
            Some(rustix::io::Errno::ACCESS | rustix::io::Errno::PERM) => Self::NotWritable {
                path,
                uid: effective_uid(),
            },
            Some(rustix::io::Errno::NOSPC | rustix::io::Errno::DQUOT) => Self::NoSpace { path },
            Some(rustix::io::Errno::NOENT) => Self::NotFound { path },
            Some(_) | None => Self::Io { path, source: err },
        }
    }
}

/// What is wrong with an existing private directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unsafety {
    /// It is a symlink, a file or another non-directory.
    NotADirectory,
    /// It is owned by another uid than the process's effective uid.
    WrongOwner {
        /// The process's effective uid.
        expected_uid: u32,
        /// The directory's owner.
        actual_uid: u32,
    },
    /// Its permission bits are not exactly 0700.
    WrongMode {
        /// The directory's permission bits.
        actual_mode: u32,
    },
}

impl fmt::Display for Unsafety {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotADirectory => f.write_str("it is not a directory (a symlink or a file)"),
            Self::WrongOwner {
                expected_uid,
                actual_uid,
            } => write!(
                f,
                "it is owned by uid {actual_uid}, not by the process uid {expected_uid}"
            ),
            Self::WrongMode { actual_mode } => {
                write!(
                    f,
                    "its mode is {actual_mode:04o}, not {PRIVATE_DIR_MODE:04o}"
                )
            }
        }
    }
}

/// The size of a filesystem as `statvfs` reports it to an unprivileged caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Capacity {
    /// `f_blocks × f_frsize`.
    pub total_bytes: u64,
    /// `f_bavail × f_frsize`: what a process without reserved-block privileges may still use.
    pub available_bytes: u64,
}

/// Facts about the filesystem behind a path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FilesystemInfo {
    /// The name of the filesystem type, from `statfs` `f_type` (`"unknown"` when not listed).
    pub fs_type: String,
    /// The raw `f_type` magic number, as `0x` and eight or more hex digits.
    pub fs_magic: String,
    /// The device id of the directory (`st_dev`) as `major:minor`.
    pub device: String,
    /// Whether the mount is read-only (`ST_RDONLY`).
    pub read_only: bool,
}

/// The outcome of a successful [`prepare`].
#[derive(Debug, Clone)]
pub struct ScratchReport {
    root: PathBuf,
    private_dir: PathBuf,
    created: bool,
    capacity: Capacity,
    filesystem: FilesystemInfo,
}

impl ScratchReport {
    /// Returns the scratch directory that was checked.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Returns the private directory (`<root>/gatehouse`), owned by the process with mode 0700.
    pub fn private_dir(&self) -> &Path {
        &self.private_dir
    }

    /// Returns whether [`prepare`] created the private directory.
    pub fn created(&self) -> bool {
        self.created
    }

    /// Returns the capacity of the scratch filesystem at the time of the check.
    pub fn capacity(&self) -> Capacity {
        self.capacity
    }

    /// Returns facts about the scratch filesystem.
    pub fn filesystem(&self) -> &FilesystemInfo {
        &self.filesystem
    }

    /// Returns the bubblewrap arguments that bind the private directory read-write at
    /// [`SANDBOX_SCRATCH_PATH`]: `--bind <private_dir> /sandbox/scratch`.
    ///
    /// The bind adds one more writable path to the sandbox; it does not widen the file tools'
    /// path policy, which stays confined to the session workspace.
    pub fn bwrap_bind_args(&self) -> [OsString; 3] {
        [
            OsString::from("--bind"),
            self.private_dir.clone().into_os_string(),
            OsString::from(SANDBOX_SCRATCH_PATH),
        ]
    }
}

/// Checks the scratch directory at node-host start and prepares its private directory.
///
/// In order: `dir` must be a directory (symlinks to one are followed), on a filesystem that is
/// not mounted read-only, and writable by the process. Then the private directory
/// `dir/gatehouse` must be a real directory (not a symlink) owned by the effective uid with
/// permission bits exactly 0700; when absent it is created with mode 0700. Finally a small
/// probe file is created and removed in it. The set-group-id bit that a parent directory
/// propagates is tolerated; no other mode bit is.
///
/// # Errors
///
/// [`ScratchError::Unsafe`] (`SCRATCH_UNSAFE`) for a private directory with the wrong type,
/// owner or mode, which is left untouched; otherwise the variant that names the failed check.
pub fn prepare(dir: &Path) -> Result<ScratchReport> {
    check_directory(dir)?;
    let vfs = statvfs(dir)?;
    if vfs.f_flag.contains(StatVfsMountFlags::RDONLY) {
        return Err(ScratchError::ReadOnlyFilesystem {
            path: dir.to_owned(),
        });
    }
    check_writable(dir)?;
    let private_dir = dir.join(PRIVATE_DIR_NAME);
    let created = match check_private_dir(&private_dir)? {
        PrivateDir::Present => false,
        PrivateDir::Absent => {
            create_private_dir(&private_dir)?;
            true
        }
    };
    probe_write(&private_dir)?;
    let filesystem = filesystem_info(dir, &vfs)?;
    Ok(ScratchReport {
        root: dir.to_owned(),
        private_dir,
        created,
        capacity: capacity(&vfs),
        filesystem,
    })
}

/// Whether the private directory exists (and passed the checks) or is absent.
pub(crate) enum PrivateDir {
    Present,
    Absent,
}

/// Returns the effective uid of the process.
pub(crate) fn effective_uid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Checks that `dir` exists and is a directory.
pub(crate) fn check_directory(dir: &Path) -> Result<()> {
    match std::fs::metadata(dir) {
        Ok(metadata) if metadata.is_dir() => Ok(()),
        Ok(_) => Err(ScratchError::NotADirectory {
            path: dir.to_owned(),
        }),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Err(ScratchError::NotFound {
            path: dir.to_owned(),
        }),
        Err(err) => Err(ScratchError::Io {
            path: dir.to_owned(),
            source: err,
        }),
    }
}

pub(crate) fn statvfs(dir: &Path) -> Result<rustix::fs::StatVfs> {
    rustix::fs::statvfs(dir).map_err(|errno| ScratchError::Io {
        path: dir.to_owned(),
        source: errno.into(),
    })
}

pub(crate) fn capacity(vfs: &rustix::fs::StatVfs) -> Capacity {
    Capacity {
        total_bytes: vfs.f_blocks.saturating_mul(vfs.f_frsize),
        available_bytes: vfs.f_bavail.saturating_mul(vfs.f_frsize),
    }
}

/// Checks with the effective ids that the process may create entries in `dir`.
pub(crate) fn check_writable(dir: &Path) -> Result<()> {
    rustix::fs::accessat(
        rustix::fs::CWD,
        dir,
        Access::WRITE_OK | Access::EXEC_OK,
        AtFlags::EACCESS,
    )
    .map_err(|errno| ScratchError::from_write_error(dir, errno.into()))
}

/// Checks an existing private directory without following a symlink at its name.
pub(crate) fn check_private_dir(private_dir: &Path) -> Result<PrivateDir> {
    let metadata = match std::fs::symlink_metadata(private_dir) {
        Ok(metadata) => metadata,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(PrivateDir::Absent),
        Err(err) => {
            return Err(ScratchError::Io {
                path: private_dir.to_owned(),
                source: err,
            });
        }
    };
    check_owned_private(private_dir, &metadata)?;
    Ok(PrivateDir::Present)
}

/// Checks that `metadata` describes a directory owned by the effective uid with mode 0700.
pub(crate) fn check_owned_private(path: &Path, metadata: &std::fs::Metadata) -> Result<()> {
    let unsafe_because = |problem| ScratchError::Unsafe {
        path: path.to_owned(),
        problem,
    };
    if !metadata.file_type().is_dir() {
        return Err(unsafe_because(Unsafety::NotADirectory));
    }
    let expected_uid = effective_uid();
    if metadata.uid() != expected_uid {
        return Err(unsafe_because(Unsafety::WrongOwner {
            expected_uid,
            actual_uid: metadata.uid(),
        }));
    }
    // The set-group-id bit is inherited from a set-group-id parent (as Kubernetes leaves
    // fsGroup volumes) and grants nothing on a 0700 directory, so only it is ignored.
    let mode = metadata.mode() & 0o7777 & !0o2000;
    if mode != PRIVATE_DIR_MODE {
        return Err(unsafe_because(Unsafety::WrongMode {
            actual_mode: metadata.mode() & 0o7777,
        }));
    }
    Ok(())
}

/// Creates the private directory with mode 0700 and checks the result, since a umask or a
/// default ACL could have changed it. A directory that appears concurrently is checked as an
/// existing one.
fn create_private_dir(private_dir: &Path) -> Result<()> {
    match rustix::fs::mkdir(
        private_dir,
        rustix::fs::Mode::from_raw_mode(PRIVATE_DIR_MODE),
    ) {
        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
        Err(errno) => return Err(ScratchError::from_write_error(private_dir, errno.into())),
    }
    let metadata = std::fs::symlink_metadata(private_dir).map_err(|err| ScratchError::Io {
        path: private_dir.to_owned(),
        source: err,
    })?;
    check_owned_private(private_dir, &metadata)
}

/// Creates and removes a small file in `dir`, which catches what `access` cannot see, such as
/// an exhausted quota.
fn probe_write(dir: &Path) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;

    let probe = dir.join(unique_name(".probe"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&probe)
        .map_err(|err| ScratchError::from_write_error(dir, err))?;
    let written = file.write_all(b"gatehouse").and_then(|()| file.sync_all());
    drop(file);
    let removed = std::fs::remove_file(&probe);
    written.map_err(|err| ScratchError::from_write_error(dir, err))?;
    removed.map_err(|err| ScratchError::Io {
        path: probe,
        source: err,
    })
}

/// Returns a name that no other call in any process is using: prefix, pid, time and a counter.
pub(crate) fn unique_name(prefix: &str) -> String {
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{}-{nanos:x}-{count}", std::process::id())
}

/// Collects the type, device and read-only flag of the filesystem behind `dir`.
pub(crate) fn filesystem_info(dir: &Path, vfs: &rustix::fs::StatVfs) -> Result<FilesystemInfo> {
    let statfs = rustix::fs::statfs(dir).map_err(|errno| ScratchError::Io {
        path: dir.to_owned(),
        source: errno.into(),
    })?;
    let metadata = std::fs::metadata(dir).map_err(|err| ScratchError::Io {
        path: dir.to_owned(),
        source: err,
    })?;
    // `f_type` is a signed or unsigned word depending on the architecture; the magic numbers
    // are 32-bit patterns, so keep the low 32 bits of its two's-complement form.
    let magic = (statfs.f_type as u64) & 0xffff_ffff;
    let device = metadata.dev();
    Ok(FilesystemInfo {
        fs_type: filesystem::type_name(magic).to_owned(),
        fs_magic: format!("0x{magic:08x}"),
        device: format!(
            "{}:{}",
            rustix::fs::major(device),
            rustix::fs::minor(device)
        ),
        read_only: vfs.f_flag.contains(StatVfsMountFlags::RDONLY),
    })
}
