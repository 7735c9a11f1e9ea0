//! The node's own state on disk: private directories, secret files and the device token.
//!
//! Secret files are created with mode 0600 from the start (there is no moment where they are
//! readable by others), written atomically (a temporary file in the same directory, fsync, then
//! rename) and never read through a symbolic link.

use std::fmt;
use std::io::Read;
use std::io::Write;
use std::os::unix::fs::DirBuilderExt;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::path::PathBuf;

use rustix::fs::Mode;
use rustix::fs::OFlags;
use serde::Deserialize;
use serde::Serialize;

use crate::error::NodeHostError;
use crate::error::Result;

/// The mode of private directories.
pub(crate) const PRIVATE_DIR_MODE: u32 = 0o700;

/// The mode of secret files.
pub(crate) const SECRET_FILE_MODE: u32 = 0o600;

/// The name of the device token file under `node/`.
pub(crate) const DEVICE_TOKEN_FILE: &str = "device-token.json";

/// The saved device token: what a successful enrollment leaves behind.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct DeviceTokenRecord {
    /// The Gateway URL the token was issued by; empty when unknown (embedded mode).
    pub(crate) gateway_url: String,
    /// The device the token belongs to.
    pub(crate) device_id: String,
    /// The token. Never log it.
    pub(crate) device_token: String,
    /// When the token was issued, in Unix milliseconds.
    pub(crate) issued_at_ms: i64,
}

impl fmt::Debug for DeviceTokenRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeviceTokenRecord")
            .field("gateway_url", &self.gateway_url)
            .field("device_id", &self.device_id)
            .field("device_token", &"<redacted>")
            .field("issued_at_ms", &self.issued_at_ms)
            .finish()
    }
}

/// Makes sure `path` is a directory with mode 0700 that is not a symbolic link: creates it with
/// that mode if missing, and tightens the mode of an existing one.
pub(crate) fn ensure_private_dir(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => Err(NodeHostError::StateSymlink {
            path: path.to_owned(),
        }),
        Ok(metadata) if !metadata.is_dir() => Err(NodeHostError::InvalidStateFile {
            path: path.to_owned(),
            reason: "is not a directory".to_owned(),
        }),
        Ok(metadata) => {
            if metadata.permissions().mode() & 0o7777 != PRIVATE_DIR_MODE {
                tracing::warn!(path = %path.display(), "tightening directory mode to 0700");
                set_mode(path, PRIVATE_DIR_MODE)?;
            }
            Ok(())
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            create_private_dir(path)?;
            // The umask may have removed owner bits; set the mode exactly.
            set_mode(path, PRIVATE_DIR_MODE)
        }
        Err(source) => Err(NodeHostError::StateIo {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Creates `path` with mode 0700 if it is missing; an existing directory is left as it is. A
/// symbolic link is refused.
pub(crate) fn ensure_dir_exists(path: &Path) -> Result<()> {
    match std::fs::symlink_metadata(path) {
        Ok(metadata) if metadata.file_type().is_symlink() => Err(NodeHostError::StateSymlink {
            path: path.to_owned(),
        }),
        Ok(metadata) if !metadata.is_dir() => Err(NodeHostError::InvalidStateFile {
            path: path.to_owned(),
            reason: "is not a directory".to_owned(),
        }),
        Ok(_) => Ok(()),
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => create_private_dir(path),
        Err(source) => Err(NodeHostError::StateIo {
            path: path.to_owned(),
            source,
        }),
    }
}

/// Reads the secret file at `path`, without following a symbolic link. Returns `None` when it
/// does not exist. A file readable by others is tightened to 0600 first.
pub(crate) fn read_secret_file(path: &Path) -> Result<Option<Vec<u8>>> {
    let io_error = |source: std::io::Error| NodeHostError::StateIo {
        path: path.to_owned(),
        source,
    };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => {
            return Err(NodeHostError::StateSymlink {
                path: path.to_owned(),
            });
        }
        Err(errno) => return Err(io_error(errno.into())),
    };
    let stat = rustix::fs::fstat(&fd).map_err(|errno| io_error(errno.into()))?;
    if rustix::fs::FileType::from_raw_mode(stat.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(NodeHostError::InvalidStateFile {
            path: path.to_owned(),
            reason: "is not a regular file".to_owned(),
        });
    }
    if stat.st_mode & 0o077 != 0 {
        tracing::warn!(path = %path.display(), "tightening secret file mode to 0600");
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(SECRET_FILE_MODE))
            .map_err(|errno| io_error(errno.into()))?;
    }
    let mut file = std::fs::File::from(fd);
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(io_error)?;
    Ok(Some(bytes))
}

/// Writes `bytes` to `dir/name` atomically, as a file created with mode 0600.
pub(crate) fn write_secret_file(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<()> {
    let mut suffix = [0_u8; 8];
    getrandom::fill(&mut suffix).map_err(std::io::Error::other)?;
    let temp_path = dir.join(format!(".{name}.{}.tmp", hex::encode(suffix)));
    let written = write_new_file(&temp_path, bytes)
        .and_then(|()| std::fs::rename(&temp_path, dir.join(name)));
    if let Err(err) = written {
        let _ = std::fs::remove_file(&temp_path);
        return Err(err);
    }
    // Make the rename durable.
    std::fs::File::open(dir)?.sync_all()
}

/// Loads the saved device token from `node_dir`, if any.
pub(crate) fn load_device_token(node_dir: &Path) -> Result<Option<DeviceTokenRecord>> {
    let path = node_dir.join(DEVICE_TOKEN_FILE);
    let Some(bytes) = read_secret_file(&path)? else {
        return Ok(None);
    };
    let record: DeviceTokenRecord =
        serde_json::from_slice(&bytes).map_err(|err| NodeHostError::InvalidStateFile {
            path: path.clone(),
            reason: format!(
                "not a device token record (line {}, column {})",
                err.line(),
                err.column()
            ),
        })?;
    if record.device_token.is_empty() {
        return Err(NodeHostError::InvalidStateFile {
            path,
            reason: "the device token is empty".to_owned(),
        });
    }
    Ok(Some(record))
}

/// Saves `record` to `node_dir/device-token.json` atomically with mode 0600.
pub(crate) fn save_device_token(node_dir: &Path, record: &DeviceTokenRecord) -> Result<()> {
    let path = node_dir.join(DEVICE_TOKEN_FILE);
    let bytes =
        serde_json::to_vec_pretty(record).map_err(|err| NodeHostError::SaveDeviceToken {
            path: path.clone(),
            source: std::io::Error::other(err),
        })?;
    write_secret_file(node_dir, DEVICE_TOKEN_FILE, &bytes)
        .map_err(|source| NodeHostError::SaveDeviceToken { path, source })
}

/// Returns the path of the device token file under `node_dir`.
pub(crate) fn device_token_path(node_dir: &Path) -> PathBuf {
    node_dir.join(DEVICE_TOKEN_FILE)
}

fn write_new_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(SECRET_FILE_MODE)
        .custom_flags(OFlags::NOFOLLOW.bits() as i32)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

fn create_private_dir(path: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .mode(PRIVATE_DIR_MODE)
        .create(path)
        .map_err(|source| NodeHostError::StateIo {
            path: path.to_owned(),
            source,
        })
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).map_err(|source| {
        NodeHostError::StateIo {
            path: path.to_owned(),
            source,
        }
    })
}
