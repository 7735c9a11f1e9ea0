//! [`Root`]: a directory handle under which every operation is confined.

use std::fs::File;
use std::io::Read;
use std::io::Write;
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::AtFlags;
use rustix::fs::FileType;
use rustix::fs::Mode;
use rustix::fs::OFlags;
use rustix::fs::RenameFlags;
use rustix::fs::ResolveFlags;
use rustix::io::Errno;

use crate::dir::Dir;
use crate::error::FsError;
use crate::error::Result;
use crate::path::RelPath;

/// How paths are resolved beneath the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// One `openat2` call with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`:
    /// the kernel refuses every symbolic link and every escape atomically.
    Openat2,
    /// A walk that opens one component at a time with `O_NOFOLLOW`, for kernels without
    /// `openat2` (before 5.6, or where seccomp blocks it). Each step is relative to the directory
    /// handle of the previous one, so a concurrent swap of a directory for a link is still refused.
    ComponentWalk,
}

/// What a path is, as seen without following any link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symbolic link.
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

/// Metadata of one entry, read without following links.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    /// The canonical absolute path.
    pub path: String,
    /// What the entry is.
    pub kind: Kind,
    /// The size in bytes.
    pub size: u64,
    /// The permission bits.
    pub mode: u32,
    /// The modification time in Unix milliseconds.
    pub mtime_ms: i64,
    /// The hard-link count.
    pub links: u64,
}

/// Limits of one [`Root::fetch`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchLimits {
    /// The largest size accepted, in bytes.
    pub max_bytes: u64,
    /// Whether the content is wanted, or only the checks and the size.
    pub content: ContentMode,
}

/// Whether an operation transfers content or only runs its checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentMode {
    /// Read or write the content.
    Transfer,
    /// Run every check and touch no content (`preflightOnly`).
    PreflightOnly,
}

/// The outcome of [`Root::fetch`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetched {
    /// The canonical absolute path.
    pub path: String,
    /// The size in bytes.
    pub size: u64,
    /// The content; `None` on preflight.
    pub content: Option<Vec<u8>>,
}

/// Whether a write may replace an existing file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overwrite {
    /// Replace an existing regular file atomically.
    Allow,
    /// Refuse with [`FsError::ExistsNoOverwrite`] if anything exists at the path.
    Deny,
}

/// Whether a write creates missing parent directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Parents {
    /// Create missing parents (mode 0755), refusing links on the way.
    Create,
    /// Refuse with [`FsError::ParentNotFound`].
    MustExist,
}

/// Options of [`Root::write`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// Whether an existing file may be replaced.
    pub overwrite: Overwrite,
    /// Whether missing parents are created.
    pub parents: Parents,
    /// Whether anything is written.
    pub content: ContentMode,
}

/// The outcome of [`Root::write`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The canonical absolute path.
    pub path: String,
    /// The number of bytes written (or that would be, on preflight).
    pub size: u64,
    /// True when an existing file was (or would be) replaced.
    pub overwritten: bool,
}

/// One entry of a [`Listing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// The file name; names that are not UTF-8 are shown with replacement characters.
    pub name: String,
    /// What the entry is, without following links.
    pub kind: Kind,
    /// The size in bytes.
    pub size: u64,
    /// The modification time in Unix milliseconds.
    pub mtime_ms: i64,
}

/// One page of [`Root::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The canonical absolute path of the directory.
    pub path: String,
    /// The entries, sorted by the bytes of their names.
    pub entries: Vec<ListEntry>,
    /// The token of the next page, when more entries follow.
    pub next_page_token: Option<String>,
}

/// A directory handle under which every operation is confined.
///
/// A `Root` guarantees, for every operation:
/// - no symbolic link is followed, neither in the middle of a path nor at its end;
/// - nothing outside the directory it was opened on is read, written, created or listed, even
///   when the tree changes concurrently (every step is relative to an open directory handle);
/// - writes are atomic: a temporary file in the target's directory, then a rename.
///
/// It does not guarantee that a regular file inside the root is not also linked from elsewhere:
/// reads of files with more than one hard link are refused ([`FsError::HardlinkDenied`]), and
/// writes replace the directory entry, so a linked inode outside is never modified.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    logical: String,
    resolver: Resolver,
}

const RESOLVE_CONFINED: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// How often `openat2` is retried when the kernel reports a concurrent rename (`EAGAIN`).
const OPENAT2_RETRIES: usize = 16;

/// The mode of new files before the umask.
const NEW_FILE_MODE: u32 = 0o644;

/// The mode of new directories before the umask.
const NEW_DIR_MODE: u32 = 0o755;

impl Root {
    /// Opens the directory at `path`, which must be absolute and valid UTF-8, with the best
    /// resolver the kernel supports. The path itself is the root's logical path: wire paths are
    /// mapped under it.
    ///
    /// # Errors
    /// [`FsError::InvalidPath`] for a relative or non-UTF-8 path; [`FsError::NotFound`],
    /// [`FsError::NotDirectory`], [`FsError::SymlinkRedirect`] (the root itself is a link) or
    /// [`FsError::Read`] when the directory cannot be opened.
    pub fn open(path: &Path) -> Result<Self> {
        let root = Self::open_with(path, Resolver::Openat2)?;
        match openat2_is_available(&root.dir) {
            true => Ok(root),
            false => Ok(Self {
                resolver: Resolver::ComponentWalk,
                ..root
            }),
        }
    }

    /// Opens the directory at `path` with a chosen resolver. Tests use it to exercise the
    /// fallback walk on kernels that have `openat2`.
    ///
    /// # Errors
    /// As [`Root::open`].
    pub fn open_with(path: &Path, resolver: Resolver) -> Result<Self> {
        let logical = crate::path::logical_root(path)?;
        let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let dir = rustix::fs::open(path, flags, Mode::empty()).map_err(|errno| {
            let is_link = std::fs::symlink_metadata(path)
                .is_ok_and(|metadata| metadata.file_type().is_symlink());
            match is_link {
                true => FsError::SymlinkRedirect {
                    path: logical.clone(),
                },
                false => map_open_errno(errno, &logical, Access::Read),
            }
        })?;
        Ok(Self {
            dir,
            logical,
            resolver,
        })
    }

    /// Returns the root's logical absolute path.
    pub fn logical_path(&self) -> &str {
        &self.logical
    }

    /// Returns the resolver in use.
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// Returns the canonical absolute path of `rel`.
    pub fn canonical(&self, rel: &RelPath) -> String {
        let mut path = self.logical.clone();
        for component in rel.components() {
            path.push('/');
            path.push_str(component);
        }
        if path.is_empty() {
            path.push('/');
        }
        path
    }

    /// Reads the regular file at `rel`.
    ///
    /// # Errors
    /// [`FsError::IsDirectory`], [`FsError::NotRegularFile`] (FIFO, socket, device),
    /// [`FsError::HardlinkDenied`], [`FsError::FileTooLarge`] (the size is checked before and
    /// while reading, so a growing file is refused too), [`FsError::SymlinkRedirect`],
    /// [`FsError::NotFound`], [`FsError::PermissionDenied`], [`FsError::Read`].
    pub fn fetch(&self, rel: &RelPath, limits: FetchLimits) -> Result<Fetched> {
        let path = self.canonical(rel);
        // O_NONBLOCK keeps a FIFO from blocking the open; the type check below then refuses it.
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
        let fd = self
            .open_beneath(rel, flags, Mode::empty())
            .map_err(|errno| map_open_errno(errno, &path, Access::Read))?;
        let stat = rustix::fs::fstat(&fd).map_err(|errno| read_error(&path, errno))?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Directory => return Err(FsError::IsDirectory { path }),
            _ => return Err(FsError::NotRegularFile { path }),
        }
        let links = stat.st_nlink;
        if links > 1 {
            return Err(FsError::HardlinkDenied { path, links });
        }
        let size = u64::try_from(stat.st_size).unwrap_or(0);
        if size > limits.max_bytes {
            return Err(FsError::FileTooLarge {
                path,
                size,
                limit: limits.max_bytes,
            });
        }
        if limits.content == ContentMode::PreflightOnly {
            return Ok(Fetched {
                path,
                size,
                content: None,
            });
        }
        let capacity = usize::try_from(size).unwrap_or(0);
        let mut content = Vec::with_capacity(capacity);
        let mut file = File::from(fd);
        // Read one byte past the limit so a file that grew after fstat is still refused.
        let mut bounded = (&mut file).take(limits.max_bytes.saturating_add(1));
        bounded
            .read_to_end(&mut content)
            .map_err(|source| FsError::Read {
                path: path.clone(),
                source,
            })?;
        let read = content.len() as u64;
        if read > limits.max_bytes {
            return Err(FsError::FileTooLarge {
                path,
                size: read,
                limit: limits.max_bytes,
            });
        }
        Ok(Fetched {
            path,
            size: read,
            content: Some(content),
        })
    }

    /// Describes the entry at `rel` without following it: a final symbolic link is reported as
    /// [`Kind::Symlink`]; a link in the middle of the path is refused.
    ///
    /// # Errors
    /// [`FsError::SymlinkRedirect`], [`FsError::NotFound`], [`FsError::NotDirectory`],
    /// [`FsError::PermissionDenied`], [`FsError::Read`].
    pub fn stat(&self, rel: &RelPath) -> Result<Metadata> {
        let path = self.canonical(rel);
        let stat = match rel.split_last() {
            None => rustix::fs::fstat(&self.dir).map_err(|errno| read_error(&path, errno))?,
            Some((parent, name)) => {
                let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
                let parent_fd = self
                    .open_beneath(&parent, flags, Mode::empty())
                    .map_err(|errno| map_open_errno(errno, &path, Access::Read))?;
                rustix::fs::statat(&parent_fd, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(|errno| map_open_errno(errno, &path, Access::Read))?
            }
        };
        Ok(Metadata {
            path,
            kind: kind_of(stat.st_mode),
            size: u64::try_from(stat.st_size).unwrap_or(0),
            mode: stat.st_mode & 0o7777,
            mtime_ms: mtime_ms(&stat),
            links: stat.st_nlink,
        })
    }

    /// Writes `content` to `rel` atomically: a temporary file `<name>.<16 hex>.tmp` in the same
    /// directory, flushed to disk, then renamed over the target. A reader sees the old content or
    /// the new, never a mix; a crash before the rename leaves the target untouched.
    ///
    /// # Errors
    /// [`FsError::IsDirectory`] (the target or the root), [`FsError::SymlinkTargetDenied`] (the
    /// target is a link), [`FsError::SymlinkRedirect`] (a parent is a link),
    /// [`FsError::ExistsNoOverwrite`], [`FsError::ParentNotFound`], [`FsError::NotDirectory`],
    /// [`FsError::NotRegularFile`], [`FsError::PermissionDenied`], [`FsError::Write`].
    pub fn write(&self, rel: &RelPath, content: &[u8], options: WriteOptions) -> Result<Written> {
        let path = self.canonical(rel);
        let Some((parent, name)) = rel.split_last() else {
            return Err(FsError::IsDirectory { path });
        };
        let size = content.len() as u64;
        let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let parent_fd = match self.open_beneath(&parent, dir_flags, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => match (options.parents, options.content) {
                (Parents::MustExist, _) => return Err(FsError::ParentNotFound { path }),
                (Parents::Create, ContentMode::PreflightOnly) => {
                    return Ok(Written {
                        path,
                        size,
                        overwritten: false,
                    });
                }
                (Parents::Create, ContentMode::Transfer) => self.create_dirs(&parent, &path)?,
            },
            Err(errno) => return Err(map_open_errno(errno, &path, Access::Write)),
        };
        let existing = match rustix::fs::statat(&parent_fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(stat),
            Err(Errno::NOENT) => None,
            Err(errno) => return Err(map_open_errno(errno, &path, Access::Write)),
        };
        let existing_mode = match existing.as_ref().map(|stat| kind_of(stat.st_mode)) {
            None => None,
            Some(Kind::Symlink) => return Err(FsError::SymlinkTargetDenied { path }),
            Some(Kind::Directory) => return Err(FsError::IsDirectory { path }),
            Some(Kind::Other) => return Err(FsError::NotRegularFile { path }),
            Some(Kind::File) => existing.as_ref().map(|stat| stat.st_mode & 0o7777),
        };
        let overwritten = existing_mode.is_some();
        if overwritten && options.overwrite == Overwrite::Deny {
            return Err(FsError::ExistsNoOverwrite { path });
        }
        if options.content == ContentMode::PreflightOnly {
            return Ok(Written {
                path,
                size,
                overwritten,
            });
        }
        let mode = existing_mode.unwrap_or(NEW_FILE_MODE);
        let temp_name = write_temp_file(&parent_fd, name, content, mode, &path)?;
        let renamed = match options.overwrite {
            Overwrite::Allow => rustix::fs::renameat(&parent_fd, &temp_name, &parent_fd, name),
            Overwrite::Deny => rustix::fs::renameat_with(
                &parent_fd,
                &temp_name,
                &parent_fd,
                name,
                RenameFlags::NOREPLACE,
            ),
        };
        if let Err(errno) = renamed {
            let _ = rustix::fs::unlinkat(&parent_fd, &temp_name, AtFlags::empty());
            return match errno {
                Errno::EXIST => Err(FsError::ExistsNoOverwrite { path }),
                Errno::ISDIR => Err(FsError::IsDirectory { path }),
                errno => Err(write_error(&path, errno)),
            };
        }
        // Make the rename itself durable.
        rustix::fs::fsync(&parent_fd).map_err(|errno| write_error(&path, errno))?;
        Ok(Written {
            path,
            size,
            overwritten,
        })
    }

    /// Lists one page of the directory at `rel`, sorted by the bytes of the names. `after` is the
    /// `next_page_token` of the previous page; `limit` is the page size (at least 1).
    ///
    /// The order is stable across calls: entries created between pages appear on a later page if
    /// their names sort after the token, and are otherwise skipped.
    ///
    /// # Errors
    /// [`FsError::NotDirectory`], [`FsError::SymlinkRedirect`], [`FsError::NotFound`],
    /// [`FsError::PermissionDenied`], [`FsError::Read`], and [`FsError::InvalidPath`] for a
    /// malformed page token.
    pub fn list(&self, rel: &RelPath, limit: usize, after: Option<&str>) -> Result<Listing> {
        let path = self.canonical(rel);
        let after = match after {
            None => None,
            Some(token) => Some(hex::decode(token).map_err(|_| FsError::InvalidPath {
                path: path.clone(),
                reason: "page token is malformed",
            })?),
        };
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dir_fd = self
            .open_beneath(rel, flags, Mode::empty())
            .map_err(|errno| map_open_errno(errno, &path, Access::Read))?;
        let mut names: Vec<Vec<u8>> = Vec::new();
        let mut reader = rustix::fs::Dir::read_from(&dir_fd).map_err(|e| read_error(&path, e))?;
        while let Some(entry) = reader.read() {
            let entry = entry.map_err(|errno| read_error(&path, errno))?;
            let name = entry.file_name().to_bytes();
            if name == b"." || name == b".." {
                continue;
            }
            if after.as_deref().is_some_and(|after| name <= after) {
                continue;
            }
            names.push(name.to_vec());
        }
        names.sort_unstable();
        let limit = limit.max(1);
        let next_page_token = match names.len() > limit {
            true => names.get(limit - 1).map(hex::encode),
            false => None,
        };
        names.truncate(limit);
        let mut entries = Vec::with_capacity(names.len());
        for name in names {
            let stat = match rustix::fs::statat(&dir_fd, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)
            {
                Ok(stat) => stat,
                // Removed between the read and the stat: leave it out.
                Err(Errno::NOENT) => continue,
                Err(errno) => return Err(read_error(&path, errno)),
            };
            entries.push(ListEntry {
                name: String::from_utf8_lossy(&name).into_owned(),
                kind: kind_of(stat.st_mode),
                size: u64::try_from(stat.st_size).unwrap_or(0),
                mtime_ms: mtime_ms(&stat),
            });
        }
        Ok(Listing {
            path,
            entries,
            next_page_token,
        })
    }

    /// Opens the directory at `rel` as a [`Dir`] handle, for operations on its entries.
    ///
    /// # Errors
    /// [`FsError::SymlinkRedirect`] (a component or the directory itself is a link),
    /// [`FsError::NotFound`], [`FsError::NotDirectory`], [`FsError::PermissionDenied`],
    /// [`FsError::Read`].
    pub fn dir(&self, rel: &RelPath) -> Result<Dir> {
        let path = self.canonical(rel);
        // No `O_NOFOLLOW` here: with `O_DIRECTORY` it turns a final link into `ENOTDIR`, where
        // `RESOLVE_NO_SYMLINKS` (and the walk) report `ELOOP`, a link.
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        let fd = self
            .open_beneath(rel, flags, Mode::empty())
            .map_err(|errno| map_open_errno(errno, &path, Access::Read))?;
        Ok(Dir::from_fd(fd, path))
    }

    /// Returns the target of the symbolic link at `rel` as stored (`readlinkat` on the handle of
    /// its parent); the link is never followed.
    ///
    /// # Errors
    /// [`FsError::InvalidPath`] for the root or an entry that is not a link, and the errors of
    /// [`Root::dir`] for the parent.
    pub fn read_link(&self, rel: &RelPath) -> Result<std::ffi::OsString> {
        let Some((parent, name)) = rel.split_last() else {
            return Err(FsError::InvalidPath {
                path: self.canonical(rel),
                reason: "is not a symbolic link",
            });
        };
        self.dir(&parent)?.read_link(name)
    }

    /// Opens `rel` beneath the root with `flags`, never following a link.
    fn open_beneath(
        &self,
        rel: &RelPath,
        flags: OFlags,
        mode: Mode,
    ) -> rustix::io::Result<OwnedFd> {
        match self.resolver {
            Resolver::Openat2 => openat2_confined(&self.dir, &rel.to_os_path(), flags, mode),
            Resolver::ComponentWalk => self.walk_open(rel, flags, mode),
        }
    }

    /// The fallback resolver: one `openat(O_NOFOLLOW)` per component.
    fn walk_open(&self, rel: &RelPath, flags: OFlags, mode: Mode) -> rustix::io::Result<OwnedFd> {
        let dir_flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let Some((last, intermediates)) = rel.components().split_last() else {
            return rustix::fs::openat(&self.dir, ".", flags | OFlags::CLOEXEC, mode);
        };
        let mut current: Option<OwnedFd> = None;
        for component in intermediates {
            let base = current.as_ref().map_or(self.dir.as_fd(), AsFd::as_fd);
            let next = open_no_follow(base, component, dir_flags, Mode::empty())?;
            current = Some(next);
        }
        let base = current.as_ref().map_or(self.dir.as_fd(), AsFd::as_fd);
        open_no_follow(base, last, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, mode)
    }

    /// Creates the directories of `rel` that are missing, one component at a time, refusing
    /// links, and returns a handle to the last one.
    fn create_dirs(&self, rel: &RelPath, target: &str) -> Result<OwnedFd> {
        let open_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let mut current: Option<OwnedFd> = None;
        for component in rel.components() {
            let base = current.as_ref().map_or(self.dir.as_fd(), AsFd::as_fd);
            match rustix::fs::mkdirat(base, component.as_str(), Mode::from_raw_mode(NEW_DIR_MODE)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(errno) => return Err(map_open_errno(errno, target, Access::Write)),
            }
            let next = match self.resolver {
                Resolver::Openat2 => openat2_confined(base, component, open_flags, Mode::empty()),
                Resolver::ComponentWalk => open_no_follow(
                    base,
                    component,
                    open_flags | OFlags::NOFOLLOW,
                    Mode::empty(),
                ),
            }
            .map_err(|errno| map_open_errno(errno, target, Access::Write))?;
            current = Some(next);
        }
        match current {
            Some(fd) => Ok(fd),
            None => rustix::fs::openat(&self.dir, ".", open_flags, Mode::empty())
                .map_err(|errno| write_error(target, errno)),
        }
    }
}

/// Whether the failing operation reads or writes, to pick the error variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// The operation reads.
    Read,
    /// The operation writes.
    Write,
}

fn openat2_confined<Fd: AsFd>(
    dir: Fd,
    path: &str,
    flags: OFlags,
    mode: Mode,
) -> rustix::io::Result<OwnedFd> {
    let mut attempt = 0;
    loop {
        match rustix::fs::openat2(&dir, path, flags | OFlags::CLOEXEC, mode, RESOLVE_CONFINED) {
            Err(Errno::AGAIN) if attempt < OPENAT2_RETRIES => attempt += 1,
            result => return result,
        }
    }
}

/// Opens `name` in `dir` without following a link at `name`, and reports a link as `ELOOP`.
///
/// For a plain file open, the kernel itself answers `ELOOP` for a link under `O_NOFOLLOW`. With
/// `O_PATH` it would open the link, and with `O_DIRECTORY` it answers `ENOTDIR`; so those opens go
/// through an `O_PATH` handle whose type is checked on the handle itself (a second lookup by name
/// could be raced by a concurrent rename), and a directory is then reopened through that handle.
pub(crate) fn open_no_follow<Name: rustix::path::Arg + Copy>(
    dir: std::os::fd::BorrowedFd<'_>,
    name: Name,
    flags: OFlags,
    mode: Mode,
) -> rustix::io::Result<OwnedFd> {
    let wants_directory = flags.contains(OFlags::DIRECTORY);
    let wants_path = flags.contains(OFlags::PATH);
    if !wants_directory && !wants_path {
        return rustix::fs::openat(dir, name, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, mode);
    }
    let path_flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let handle = rustix::fs::openat(dir, name, path_flags, Mode::empty())?;
    let file_type = FileType::from_raw_mode(rustix::fs::fstat(&handle)?.st_mode);
    match file_type {
        FileType::Symlink => Err(Errno::LOOP),
        FileType::Directory if wants_path => Ok(handle),
        FileType::Directory => rustix::fs::openat(&handle, ".", flags | OFlags::CLOEXEC, mode),
        _ if wants_directory => Err(Errno::NOTDIR),
        // Only an O_PATH open of a non-directory is left.
        _ => Ok(handle),
    }
}

fn openat2_is_available(dir: &OwnedFd) -> bool {
    !matches!(
        rustix::fs::openat2(
            dir,
            ".",
            OFlags::PATH | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE_CONFINED
        ),
        Err(Errno::NOSYS | Errno::PERM)
    )
}

fn mtime_ms(stat: &rustix::fs::Stat) -> i64 {
    let millis_of_second = i64::try_from(stat.st_mtime_nsec / 1_000_000).unwrap_or(0);
    stat.st_mtime
        .saturating_mul(1000)
        .saturating_add(millis_of_second)
}

pub(crate) fn kind_of(mode: u32) -> Kind {
    match FileType::from_raw_mode(mode) {
        FileType::RegularFile => Kind::File,
        FileType::Directory => Kind::Directory,
        FileType::Symlink => Kind::Symlink,
        FileType::Fifo
        | FileType::Socket
        | FileType::CharacterDevice
        | FileType::BlockDevice
        | FileType::Unknown => Kind::Other,
    }
}

pub(crate) fn map_open_errno(errno: Errno, path: &str, access: Access) -> FsError {
    let path = path.to_owned();
    match errno {
        Errno::LOOP => FsError::SymlinkRedirect { path },
        Errno::XDEV => FsError::PathTraversal { path },
        Errno::NOENT => FsError::NotFound { path },
        Errno::NOTDIR => FsError::NotDirectory { path },
        Errno::ISDIR => FsError::IsDirectory { path },
        Errno::ACCESS | Errno::PERM => FsError::PermissionDenied { path },
        Errno::NAMETOOLONG => FsError::InvalidPath {
            path,
            reason: "a component is too long",
        },
        errno => match access {
            Access::Read => FsError::Read {
                path,
                source: errno.into(),
            },
            Access::Write => FsError::Write {
                path,
                source: errno.into(),
            },
        },
    }
}

pub(crate) fn read_error(path: &str, errno: Errno) -> FsError {
    FsError::Read {
        path: path.to_owned(),
        source: errno.into(),
    }
}

pub(crate) fn write_error(path: &str, errno: Errno) -> FsError {
    FsError::Write {
        path: path.to_owned(),
        source: errno.into(),
    }
}

/// Creates, fills and flushes a new temporary file next to `name`, and returns its name.
pub(crate) fn write_temp_file(
    parent: &OwnedFd,
    name: &str,
    content: &[u8],
    mode: u32,
    path: &str,
) -> Result<String> {
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut attempt = 0;
    let (temp_name, fd) = loop {
        let temp_name = temp_name_for(name);
        match rustix::fs::openat(parent, temp_name.as_str(), flags, Mode::from_raw_mode(mode)) {
            Ok(fd) => break (temp_name, fd),
            Err(Errno::EXIST) if attempt < 8 => attempt += 1,
            Err(errno) => return Err(map_open_errno(errno, path, Access::Write)),
        }
    };
    let mut file = File::from(fd);
    let filled = file
        .write_all(content)
        .and_then(|()| rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(Into::into))
        .and_then(|()| file.sync_data());
    if let Err(source) = filled {
        let _ = rustix::fs::unlinkat(parent, temp_name.as_str(), AtFlags::empty());
        return Err(FsError::Write {
            path: path.to_owned(),
            source,
        });
    }
    Ok(temp_name)
}

/// Returns `<name>.<16 hex>.tmp`, or a shorter `.gatehouse-<16 hex>.tmp` when the name is too long
/// for the suffix to fit in a file name.
fn temp_name_for(name: &str) -> String {
    let suffix = random_hex16();
    match name.len() + 21 <= 255 {
        true => format!("{name}.{suffix}.tmp"),
        false => format!(".gatehouse-{suffix}.tmp"),
    }
}

/// Returns 16 hex digits that differ between calls and processes (not cryptographic: the name is
/// only a collision-avoiding tag; `O_EXCL` guarantees that nothing is ever clobbered).
fn random_hex16() -> String {
    use std::hash::BuildHasher;
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos());
    let value =
        std::collections::hash_map::RandomState::new().hash_one((count, nanos, std::process::id()));
    format!("{value:016x}")
}
