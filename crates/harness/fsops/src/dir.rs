//! [`Dir`]: an open directory handle whose every operation names one entry of that directory,
//! and never follows a symbolic link.
//!
//! The node host uses it for its own work in session workspaces, where the sandboxed command
//! can swap any entry for a link at any moment: skill copies, their removal, checkpoint capture
//! and restore, and the session's directories. Each step opens the next directory relative to
//! the previous handle with `O_NOFOLLOW | O_DIRECTORY`, changes modes on handles (`fchmod`) and
//! creates and removes with the `*at` calls (`mkdirat`, `unlinkat`, `symlinkat`,
//! `readlinkat`), so a link planted anywhere is refused or removed itself, never followed.

use std::ffi::OsString;
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use rustix::fs::AtFlags;
use rustix::fs::Mode;
use rustix::fs::OFlags;
use rustix::fs::RenameFlags;
use rustix::io::Errno;

use crate::error::FsError;
use crate::error::Result;
use crate::path::RelPath;
use crate::root::Access;
use crate::root::Kind;
use crate::root::Overwrite;
use crate::root::kind_of;
use crate::root::map_open_errno;
use crate::root::open_no_follow;
use crate::root::write_error;
use crate::root::write_temp_file;

/// The deepest tree [`Dir::remove`] descends into; deeper trees are refused rather than
/// exhausting file descriptors or the stack.
pub const MAX_REMOVE_DEPTH: usize = 128;

/// How often one entry is examined again when it changes between the look and the removal
/// (a concurrent swap); past that, the removal fails instead of racing forever.
const REMOVE_ATTEMPTS: usize = 16;

/// The flags of every directory handle: readable (for listing), so `fchmod` works on it too.
const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// An open directory. Every operation takes one plain entry name (no `/`, not `.` or `..`) and
/// works relative to the handle, so it touches only that directory's entry, whatever happens
/// to the path the handle was opened by.
///
/// A `Dir` guarantees, for every operation:
/// - no symbolic link is followed: an entry that is a link is refused
///   ([`FsError::SymlinkRedirect`]), reported ([`Kind::Symlink`]), read as a string
///   ([`Dir::read_link`]) or removed itself ([`Dir::remove`]);
/// - modes are changed on open handles, never by path;
/// - files are written as a temporary file, flushed, then renamed into place.
///
/// It does not guarantee that the directory is still reachable by its path: a concurrent rename
/// moves the handle's directory with it, which is exactly what keeps an operation inside it.
#[derive(Debug)]
pub struct Dir {
    fd: OwnedFd,
    path: String,
}

impl Dir {
    /// Opens the directory at the absolute `path`, refusing a link at its last component.
    /// The components before it are trusted (an operator-chosen location such as the
    /// Harness root).
    ///
    /// # Errors
    /// [`FsError::InvalidPath`] for a relative or non-UTF-8 path, [`FsError::SymlinkRedirect`],
    /// [`FsError::NotFound`], [`FsError::NotDirectory`], [`FsError::PermissionDenied`],
    /// [`FsError::Read`].
    pub fn open(path: &Path) -> Result<Dir> {
        let logical = crate::path::logical_root(path)?;
        // `/` itself has no parent and no link to follow.
        let Some((parent, name)) = path.parent().zip(path.file_name()) else {
            let fd = rustix::fs::open(path, DIR_FLAGS, Mode::empty())
                .map_err(|errno| map_open_errno(errno, &logical, Access::Read))?;
            return Ok(Dir { fd, path: logical });
        };
        let parent_fd = rustix::fs::open(
            parent,
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|errno| map_open_errno(errno, &logical, Access::Read))?;
        let fd = open_no_follow(
            parent_fd.as_fd(),
            name.as_encoded_bytes(),
            DIR_FLAGS,
            Mode::empty(),
        )
        .map_err(|errno| map_open_errno(errno, &logical, Access::Read))?;
        Ok(Dir { fd, path: logical })
    }

    /// Wraps a directory handle opened by [`crate::Root`]; `path` is its canonical path.
    pub(crate) fn from_fd(fd: OwnedFd, path: String) -> Dir {
        Dir { fd, path }
    }

    /// Returns the path the directory was opened by, for messages; it may no longer lead here.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Opens the existing subdirectory `name`.
    ///
    /// # Errors
    /// [`FsError::SymlinkRedirect`] when `name` is a link, [`FsError::NotDirectory`],
    /// [`FsError::NotFound`], [`FsError::InvalidPath`] for a name that is not plain,
    /// [`FsError::PermissionDenied`], [`FsError::Read`].
    pub fn open_dir(&self, name: &str) -> Result<Dir> {
        let path = self.child_path(name)?;
        let fd = open_no_follow(self.fd.as_fd(), name, DIR_FLAGS, Mode::empty())
            .map_err(|errno| map_open_errno(errno, &path, Access::Read))?;
        Ok(Dir { fd, path })
    }

    /// Creates the subdirectory `name` with exactly `mode` (the umask does not apply) and opens
    /// it. Nothing may exist at `name`.
    ///
    /// # Errors
    /// [`FsError::ExistsNoOverwrite`] when anything (a link included) is at `name`;
    /// [`FsError::SymlinkRedirect`] when it was swapped for a link right after its creation;
    /// [`FsError::InvalidPath`], [`FsError::PermissionDenied`], [`FsError::Write`].
    pub fn create_dir(&self, name: &str, mode: u32) -> Result<Dir> {
        let path = self.child_path(name)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {}
            Err(Errno::EXIST) => return Err(FsError::ExistsNoOverwrite { path }),
            Err(errno) => return Err(map_open_errno(errno, &path, Access::Write)),
        }
        let created = self.open_dir(name)?;
        created.set_mode(mode)?;
        Ok(created)
    }

    /// Opens the subdirectory `name`, creating it with exactly `mode` when it is missing; an
    /// existing directory keeps its mode.
    ///
    /// # Errors
    /// [`FsError::SymlinkRedirect`] when `name` is a link, [`FsError::NotDirectory`] when it is
    /// something else, and the errors of [`Dir::create_dir`].
    pub fn ensure_dir(&self, name: &str, mode: u32) -> Result<Dir> {
        let path = self.child_path(name)?;
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(mode)) {
            Ok(()) => {
                let created = self.open_dir(name)?;
                created.set_mode(mode)?;
                Ok(created)
            }
            Err(Errno::EXIST) => self.open_dir(name),
            Err(errno) => Err(map_open_errno(errno, &path, Access::Write)),
        }
    }

    /// Opens the directory `rel` below this one, creating each missing component with exactly
    /// `mode`, one handle at a time; the empty path reopens this directory.
    ///
    /// # Errors
    /// As [`Dir::ensure_dir`], for the first component that fails.
    pub fn ensure_dirs(&self, rel: &RelPath, mode: u32) -> Result<Dir> {
        let mut current = self.reopen()?;
        for component in rel.components() {
            current = current.ensure_dir(component, mode)?;
        }
        Ok(current)
    }

    /// Returns a second handle to this directory.
    ///
    /// # Errors
    /// [`FsError::Read`] when the handle cannot be duplicated (out of descriptors).
    pub fn reopen(&self) -> Result<Dir> {
        let fd = rustix::fs::openat(&self.fd, ".", DIR_FLAGS, Mode::empty())
            .map_err(|errno| map_open_errno(errno, &self.path, Access::Read))?;
        Ok(Dir {
            fd,
            path: self.path.clone(),
        })
    }

    /// Sets the permission bits of this directory on its handle (`fchmod`).
    ///
    /// # Errors
    /// [`FsError::PermissionDenied`] when the caller does not own it, [`FsError::Write`].
    pub fn set_mode(&self, mode: u32) -> Result<()> {
        rustix::fs::fchmod(&self.fd, Mode::from_raw_mode(mode))
            .map_err(|errno| map_open_errno(errno, &self.path, Access::Write))
    }

    /// Returns what `name` is, without following it, or `None` when nothing is there.
    ///
    /// # Errors
    /// [`FsError::InvalidPath`], [`FsError::PermissionDenied`], [`FsError::Read`].
    pub fn kind(&self, name: &str) -> Result<Option<Kind>> {
        let path = self.child_path(name)?;
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Ok(Some(kind_of(stat.st_mode))),
            Err(Errno::NOENT) => Ok(None),
            Err(errno) => Err(map_open_errno(errno, &path, Access::Read)),
        }
    }

    /// Writes `content` to the regular file `name` with exactly `mode`: a temporary file in this
    /// directory, flushed, then renamed over `name` (or, with [`Overwrite::Deny`], renamed only
    /// if nothing is there). A link at `name` is replaced, never written through.
    ///
    /// # Errors
    /// [`FsError::ExistsNoOverwrite`], [`FsError::IsDirectory`], [`FsError::InvalidPath`],
    /// [`FsError::PermissionDenied`], [`FsError::Write`].
    pub fn write_file(
        &self,
        name: &str,
        content: &[u8],
        mode: u32,
        overwrite: Overwrite,
    ) -> Result<()> {
        let path = self.child_path(name)?;
        let temp_name = write_temp_file(&self.fd, name, content, mode, &path)?;
        let renamed = match overwrite {
            Overwrite::Allow => rustix::fs::renameat(&self.fd, &temp_name, &self.fd, name),
            Overwrite::Deny => rustix::fs::renameat_with(
                &self.fd,
                &temp_name,
                &self.fd,
                name,
                RenameFlags::NOREPLACE,
            ),
        };
        if let Err(errno) = renamed {
            let _ = rustix::fs::unlinkat(&self.fd, &temp_name, AtFlags::empty());
            return match errno {
                Errno::EXIST => Err(FsError::ExistsNoOverwrite { path }),
                Errno::ISDIR => Err(FsError::IsDirectory { path }),
                errno => Err(write_error(&path, errno)),
            };
        }
        rustix::fs::fsync(&self.fd).map_err(|errno| write_error(&path, errno))
    }

    /// Creates the symbolic link `name` pointing at `target` (`symlinkat`). The target is stored
    /// as given and is never resolved or followed here.
    ///
    /// # Errors
    /// [`FsError::ExistsNoOverwrite`] when anything is at `name`; [`FsError::InvalidPath`] for
    /// an empty target, one with NUL, or a name that is not plain; [`FsError::Write`].
    pub fn symlink(&self, name: &str, target: &str) -> Result<()> {
        let path = self.child_path(name)?;
        if target.is_empty() || target.contains('\0') {
            return Err(FsError::InvalidPath {
                path,
                reason: "a link target must be non-empty and without NUL",
            });
        }
        match rustix::fs::symlinkat(target, &self.fd, name) {
            Ok(()) => Ok(()),
            Err(Errno::EXIST) => Err(FsError::ExistsNoOverwrite { path }),
            Err(errno) => Err(map_open_errno(errno, &path, Access::Write)),
        }
    }

    /// Returns the target of the link `name` as stored (`readlinkat`); the link is not followed.
    ///
    /// # Errors
    /// [`FsError::NotFound`]; [`FsError::InvalidPath`] when `name` is not a link or not plain;
    /// [`FsError::Read`].
    pub fn read_link(&self, name: &str) -> Result<OsString> {
        let path = self.child_path(name)?;
        match rustix::fs::readlinkat(&self.fd, name, Vec::new()) {
            Ok(target) => Ok(OsString::from_vec(target.into_bytes())),
            Err(Errno::INVAL) => Err(FsError::InvalidPath {
                path,
                reason: "is not a symbolic link",
            }),
            Err(errno) => Err(map_open_errno(errno, &path, Access::Read)),
        }
    }

    /// Removes `name` and, when it is a directory, everything below it, never following a
    /// link: a link is unlinked itself, and each directory is entered only through a handle
    /// opened with `O_NOFOLLOW | O_DIRECTORY` relative to its parent's handle. Read-only
    /// directories on the way are made writable on their handles first. Returns false when
    /// nothing was there.
    ///
    /// An entry that changes while it is removed (swapped for a link, refilled) is examined
    /// again, a bounded number of times.
    ///
    /// # Errors
    /// [`FsError::Write`] when an entry keeps changing or the tree is deeper than
    /// [`MAX_REMOVE_DEPTH`]; [`FsError::PermissionDenied`]; [`FsError::InvalidPath`].
    pub fn remove(&self, name: &str) -> Result<bool> {
        let path = self.child_path(name)?;
        remove_entry(self.fd.as_fd(), name, &path, 0)
    }

    /// Returns the names of the entries of this directory (without `.` and `..`), sorted by
    /// their bytes; names that are not UTF-8 are left out.
    ///
    /// # Errors
    /// [`FsError::Read`].
    pub fn names(&self) -> Result<Vec<String>> {
        let mut names = read_names(self.fd.as_fd(), &self.path)?
            .into_iter()
            .filter_map(|name| String::from_utf8(name).ok())
            .collect::<Vec<_>>();
        names.sort_unstable();
        Ok(names)
    }

    /// Returns the path of the entry `name`, after checking that `name` is one plain component.
    fn child_path(&self, name: &str) -> Result<String> {
        let path = format!("{}/{name}", self.path);
        let plain = !name.is_empty()
            && name != "."
            && name != ".."
            && !name.contains('/')
            && !name.contains('\0')
            && name.len() <= 255;
        match plain {
            true => Ok(path),
            false => Err(FsError::InvalidPath {
                path,
                reason: "an entry name must be one plain component",
            }),
        }
    }
}

/// Reads the raw names of the directory `dir`, without `.` and `..`.
fn read_names(dir: std::os::fd::BorrowedFd<'_>, path: &str) -> Result<Vec<Vec<u8>>> {
    let mut reader = rustix::fs::Dir::read_from(dir).map_err(|errno| write_error(path, errno))?;
    let mut names = Vec::new();
    while let Some(entry) = reader.read() {
        let entry = entry.map_err(|errno| write_error(path, errno))?;
        let name = entry.file_name().to_bytes();
        if name != b"." && name != b".." {
            names.push(name.to_vec());
        }
    }
    Ok(names)
}

/// Removes the entry `name` of `parent` (see [`Dir::remove`]).
fn remove_entry<Name: rustix::path::Arg + Copy>(
    parent: std::os::fd::BorrowedFd<'_>,
    name: Name,
    path: &str,
    depth: usize,
) -> Result<bool> {
    if depth > MAX_REMOVE_DEPTH {
        return Err(FsError::Write {
            path: path.to_owned(),
            source: std::io::Error::other(format!(
                "the tree is deeper than {MAX_REMOVE_DEPTH} levels"
            )),
        });
    }
    for _ in 0..REMOVE_ATTEMPTS {
        let stat = match rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::NOENT) => return Ok(false),
            Err(errno) => return Err(map_open_errno(errno, path, Access::Write)),
        };
        match kind_of(stat.st_mode) {
            Kind::Directory => {
                let child = match open_no_follow(parent, name, DIR_FLAGS, Mode::empty()) {
                    Ok(child) => child,
                    // Swapped for something else since the look: look again.
                    Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => continue,
                    Err(errno) => return Err(map_open_errno(errno, path, Access::Write)),
                };
                // Entries of a read-only directory cannot be removed; open it on its handle.
                rustix::fs::fchmod(&child, Mode::from_raw_mode(0o700))
                    .map_err(|errno| map_open_errno(errno, path, Access::Write))?;
                for child_name in read_names(child.as_fd(), path)? {
                    let child_path = format!("{path}/{}", String::from_utf8_lossy(&child_name));
                    remove_entry(child.as_fd(), child_name.as_slice(), &child_path, depth + 1)?;
                }
                match rustix::fs::unlinkat(parent, name, AtFlags::REMOVEDIR) {
                    Ok(()) | Err(Errno::NOENT) => return Ok(true),
                    // Refilled, or swapped for a link or a file: look again.
                    Err(Errno::NOTEMPTY | Errno::EXIST | Errno::NOTDIR) => continue,
                    Err(errno) => return Err(map_open_errno(errno, path, Access::Write)),
                }
            }
            Kind::File | Kind::Symlink | Kind::Other => {
                match rustix::fs::unlinkat(parent, name, AtFlags::empty()) {
                    Ok(()) | Err(Errno::NOENT) => return Ok(true),
                    // Swapped for a directory: look again.
                    Err(Errno::ISDIR) => continue,
                    Err(errno) => return Err(map_open_errno(errno, path, Access::Write)),
                }
            }
        }
    }
    Err(FsError::Write {
        path: path.to_owned(),
        source: std::io::Error::other(format!(
            "the entry kept changing during {REMOVE_ATTEMPTS} removal attempts"
        )),
    })
}
