//! The node status file, `<root>/node/status.json`, which `gatehouse node health` reads.
//!
//! The node host listens on no port, so its liveness and readiness are told through this file
//! instead of HTTP. The host rewrites it at every connection attempt and failure, right after
//! `hello-ok`, every [`STATUS_HEARTBEAT`] while a session is connected (a task owned by the
//! session), and when a session ends or the host stops. A probe reads it with [`read_status`]
//! and judges it with [`NodeStatus::check`].
//!
//! The file holds no secret (error codes only, never a token or a setup code), but it is written
//! like the secret files: mode 0600, atomically (a temporary file in `node/`, then a rename), and
//! never through a symbolic link: a link in place of the file or of `node/` is refused and left
//! untouched, on write and on read. Nothing is fsynced: after a crash the file may be stale or
//! missing, which a probe reports as unhealthy, and the next write repairs it.

use gatehouse_protocol::error::ErrorCode;
use std::io::Read;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rustix::fs::AtFlags;
use rustix::fs::FileType;
use rustix::fs::Mode;
use rustix::fs::OFlags;
use serde::Deserialize;
use serde::Serialize;
use tokio::task::JoinHandle;

use crate::error::NodeHostError;
use crate::error::Result;
use crate::node_state::SECRET_FILE_MODE;

/// The name of the status file under `node/`.
pub const STATUS_FILE: &str = "status.json";

/// How often a connected session rewrites the status file.
pub const STATUS_HEARTBEAT: Duration = Duration::from_secs(10);

/// The oldest status, in milliseconds, that still counts as live.
pub const LIVENESS_MAX_AGE_MS: i64 = 90_000;

/// The oldest status, in milliseconds, that still counts as ready.
pub const READINESS_MAX_AGE_MS: i64 = 30_000;

/// The largest status file [`read_status`] accepts.
const MAX_STATUS_BYTES: u64 = 64 * 1024;

/// The contents of the status file. Its JSON form (camelCase) is what probes and operators read,
/// so it is a compatibility promise.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// Whether a session has passed `hello-ok` and has not ended.
    pub connected: bool,
    /// When the file was written, in Unix milliseconds.
    pub updated_at_ms: i64,
    /// The Gateway's id of the current connection, while connected.
    pub gateway_conn_id: Option<String>,
    /// The stable code of the last failure (`CONNECT_FAILED`, a Gateway refusal code, ...);
    /// cleared by `hello-ok`.
    pub last_error_code: Option<String>,
    /// The process id of the node host.
    pub pid: u32,
}

/// What a probe checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// The host is running: the status is at most [`LIVENESS_MAX_AGE_MS`] old.
    Liveness,
    /// The host is connected: `connected` is true and the status is at most
    /// [`READINESS_MAX_AGE_MS`] old.
    Readiness,
}

/// Why [`NodeStatus::check`] failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Unhealthy {
    /// The status was written too long ago: the host is stuck or gone.
    #[error("the node status is stale: written {age_ms} ms ago, the limit is {max_age_ms} ms")]
    Stale {
        /// How long ago the status was written.
        age_ms: i64,
        /// The limit of the probe.
        max_age_ms: i64,
    },
    /// The status claims to be written in the future: the clock jumped back, or the file was
    /// forged.
    #[error("the node status is {ahead_ms} ms in the future")]
    FromTheFuture {
        /// How far ahead of the clock it is.
        ahead_ms: i64,
    },
    /// The host runs but has no session with the Gateway.
    #[error("the node host is not connected to the gateway (last error: {})", last_error_code.as_deref().unwrap_or("none"))]
    NotConnected {
        /// The code of the last failure, if any.
        last_error_code: Option<String>,
    },
}

impl NodeStatus {
    /// Returns `Ok` when this status passes `probe` at `now_ms` (Unix milliseconds).
    ///
    /// # Errors
    /// [`Unhealthy::Stale`] or [`Unhealthy::FromTheFuture`] when `updated_at_ms` is further than
    /// the probe's limit from `now_ms`; for [`Probe::Readiness`], [`Unhealthy::NotConnected`]
    /// when `connected` is false.
    pub fn check(&self, probe: Probe, now_ms: i64) -> std::result::Result<(), Unhealthy> {
        let max_age_ms = match probe {
            Probe::Liveness => LIVENESS_MAX_AGE_MS,
            Probe::Readiness => READINESS_MAX_AGE_MS,
        };
        let age_ms = now_ms.saturating_sub(self.updated_at_ms);
        if age_ms > max_age_ms {
            return Err(Unhealthy::Stale { age_ms, max_age_ms });
        }
        if age_ms < -max_age_ms {
            return Err(Unhealthy::FromTheFuture {
                ahead_ms: age_ms.saturating_neg(),
            });
        }
        match probe {
            Probe::Readiness if !self.connected => Err(Unhealthy::NotConnected {
                last_error_code: self.last_error_code.clone(),
            }),
            Probe::Readiness | Probe::Liveness => Ok(()),
        }
    }
}

/// Returns the path of the status file of the node root `root`: `root/node/status.json`.
pub fn status_path(root: &Path) -> PathBuf {
    root.join("node").join(STATUS_FILE)
}

/// Reads the status file of the node root `root` without following a symbolic link at `node/`
/// or at the file. Returns `None` when `node/` or the file does not exist.
///
/// # Errors
/// [`NodeHostError::StateSymlink`] when `node/` or the file is a symbolic link;
/// [`NodeHostError::InvalidStateFile`] when either has the wrong type, or the file is too large
/// or not a status; [`NodeHostError::StatusIo`] when a system call fails.
pub fn read_status(root: &Path) -> Result<Option<NodeStatus>> {
    let node_dir = root.join("node");
    let path = node_dir.join(STATUS_FILE);
    let io_error = |errno: rustix::io::Errno| NodeHostError::StatusIo {
        path: path.clone(),
        source: errno.into(),
    };
    let dir = match open_dir_nofollow(&node_dir) {
        Ok(dir) => dir,
        Err(NodeHostError::StatusIo { source, .. })
            if source.kind() == std::io::ErrorKind::NotFound =>
        {
            return Ok(None);
        }
        Err(err) => return Err(err),
    };
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = match rustix::fs::openat(&dir, STATUS_FILE, flags, Mode::empty()) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) => return Ok(None),
        Err(rustix::io::Errno::LOOP) => return Err(NodeHostError::StateSymlink { path }),
        Err(errno) => return Err(io_error(errno)),
    };
    let stat = rustix::fs::fstat(&fd).map_err(io_error)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(NodeHostError::InvalidStateFile {
            path,
            reason: "is not a regular file".to_owned(),
        });
    }
    let mut bytes = Vec::new();
    std::fs::File::from(fd)
        .take(MAX_STATUS_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| NodeHostError::StatusIo {
            path: path.clone(),
            source,
        })?;
    if bytes.len() as u64 > MAX_STATUS_BYTES {
        return Err(NodeHostError::InvalidStateFile {
            path,
            reason: format!("is larger than {MAX_STATUS_BYTES} bytes"),
        });
    }
    match serde_json::from_slice(&bytes) {
        Ok(status) => Ok(Some(status)),
        Err(err) => Err(NodeHostError::InvalidStateFile {
            path,
            reason: format!(
                "not a node status (line {}, column {})",
                err.line(),
                err.column()
            ),
        }),
    }
}

/// A change the host reports to the status file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum StatusUpdate {
    /// A connection attempt starts; the last error code is kept.
    Connecting,
    /// An attempt or a session failed with this code.
    Failed {
        /// The error's stable code.
        code: String,
    },
    /// `hello-ok` arrived.
    Connected {
        /// The Gateway's connection id.
        conn_id: String,
    },
    /// Nothing changed; the session is still connected.
    Heartbeat,
    /// The session ended because of the shutdown signal, or the host stopped.
    Stopped,
}

/// The writer of the status file. It keeps the current status, so that every write (a
/// heartbeat included) writes the latest state; writes are serialized by its lock, so a late
/// heartbeat can never bring back an older state.
#[derive(Debug)]
pub(crate) struct StatusFile {
    node_dir: PathBuf,
    current: Mutex<NodeStatus>,
}

impl StatusFile {
    /// Returns a writer for `node_dir/status.json`; writes nothing yet.
    pub(crate) fn new(node_dir: PathBuf) -> StatusFile {
        StatusFile {
            node_dir,
            current: Mutex::new(NodeStatus {
                connected: false,
                updated_at_ms: 0,
                gateway_conn_id: None,
                last_error_code: None,
                pid: std::process::id(),
            }),
        }
    }

    /// Applies `update` and writes the file, stamped with the current time. Blocking.
    ///
    /// # Errors
    /// [`NodeHostError::StateSymlink`] when `node/` or the status file is a symbolic link
    /// (nothing is written); [`NodeHostError::InvalidStateFile`] when the file is not a regular
    /// file; [`NodeHostError::StatusIo`] when a system call fails.
    pub(crate) fn record(&self, update: StatusUpdate) -> Result<()> {
        let mut current = self.current.lock();
        match update {
            StatusUpdate::Connecting | StatusUpdate::Stopped => {
                current.connected = false;
                current.gateway_conn_id = None;
            }
            StatusUpdate::Failed { code } => {
                current.connected = false;
                current.gateway_conn_id = None;
                current.last_error_code = Some(code_for_status(&code));
            }
            StatusUpdate::Connected { conn_id } => {
                current.connected = true;
                current.gateway_conn_id = Some(conn_id);
                current.last_error_code = None;
            }
            // A heartbeat only refreshes a live session; one that lands after the session ended
            // (its blocking write cannot be cancelled) writes nothing.
            StatusUpdate::Heartbeat if !current.connected => return Ok(()),
            StatusUpdate::Heartbeat => {}
        }
        current.updated_at_ms = gatehouse_protocol::time::now_ms();
        let bytes = serde_json::to_vec(&*current).map_err(|err| NodeHostError::StatusIo {
            path: self.node_dir.join(STATUS_FILE),
            source: std::io::Error::other(err),
        })?;
        write_status_file(&self.node_dir, &bytes)
    }

    /// Records `update` on a blocking thread; a failure is logged, never returned, since the
    /// status file must not stop the node host.
    pub(crate) async fn publish(self: &Arc<Self>, update: StatusUpdate) {
        let status = Arc::clone(self);
        let written = tokio::task::spawn_blocking(move || status.record(update)).await;
        let err = match written {
            Ok(Ok(())) => return,
            Ok(Err(err)) => err,
            Err(join_error) => NodeHostError::Join(join_error),
        };
        tracing::warn!(code = err.code(), error = %err, "cannot write the node status file");
    }

    /// Starts a task that publishes [`StatusUpdate::Heartbeat`] every `interval`, until the
    /// returned guard is dropped.
    pub(crate) fn start_heartbeat(self: &Arc<Self>, interval: Duration) -> Heartbeat {
        let status = Arc::clone(self);
        let task = tokio::spawn(async move {
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                status.publish(StatusUpdate::Heartbeat).await;
            }
        });
        Heartbeat { task }
    }
}

/// Owns the heartbeat task of one session and aborts it when dropped.
#[derive(Debug)]
pub(crate) struct Heartbeat {
    task: JoinHandle<()>,
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Returns `code` if it looks like a stable code (`A-Z`, `0-9`, `_`, at most 64 bytes), else a
/// fixed placeholder: a Gateway refusal code is remote input and must not carry anything else
/// into the file.
fn code_for_status(code: &str) -> String {
    let looks_like_code = !code.is_empty()
        && code.len() <= 64
        && code
            .bytes()
            .all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit() || byte == b'_');
    match looks_like_code {
        true => code.to_owned(),
        false => ErrorCode::UnknownError.as_str().to_owned(),
    }
}

/// Opens `path` as a directory without following a symbolic link.
fn open_dir_nofollow(path: &Path) -> Result<OwnedFd> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::open(path, flags, Mode::empty()) {
        Ok(fd) => Ok(fd),
        // With O_DIRECTORY, Linux reports a symbolic link as ENOTDIR; tell the two apart.
        Err(rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP) => match rustix::fs::lstat(path) {
            Ok(stat) if FileType::from_raw_mode(stat.st_mode) == FileType::Symlink => {
                Err(NodeHostError::StateSymlink {
                    path: path.to_owned(),
                })
            }
            Ok(_) | Err(_) => Err(NodeHostError::InvalidStateFile {
                path: path.to_owned(),
                reason: "is not a directory".to_owned(),
            }),
        },
        Err(errno) => Err(NodeHostError::StatusIo {
            path: path.to_owned(),
            source: errno.into(),
        }),
    }
}

/// Writes `bytes` to `node_dir/status.json` through a temporary file and a rename, both relative
/// to a no-follow handle on `node_dir`. A symbolic link at the status path is refused before
/// anything is created; should one appear in between, the rename replaces the link itself and
/// still writes nothing through it.
fn write_status_file(node_dir: &Path, bytes: &[u8]) -> Result<()> {
    let path = node_dir.join(STATUS_FILE);
    let io_error = |errno: rustix::io::Errno| NodeHostError::StatusIo {
        path: path.clone(),
        source: errno.into(),
    };
    let dir = open_dir_nofollow(node_dir)?;
    match rustix::fs::statat(&dir, STATUS_FILE, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(stat) => match FileType::from_raw_mode(stat.st_mode) {
            FileType::RegularFile => {}
            FileType::Symlink => return Err(NodeHostError::StateSymlink { path }),
            FileType::Directory
            | FileType::Fifo
            | FileType::Socket
            | FileType::CharacterDevice
            | FileType::BlockDevice
            | FileType::Unknown => {
                return Err(NodeHostError::InvalidStateFile {
                    path,
                    reason: "is not a regular file".to_owned(),
                });
            }
        },
        Err(rustix::io::Errno::NOENT) => {}
        Err(errno) => return Err(io_error(errno)),
    }
    let mut suffix = [0_u8; 8];
    getrandom::fill(&mut suffix).map_err(|err| NodeHostError::StatusIo {
        path: path.clone(),
        source: std::io::Error::other(err),
    })?;
    let temp_name = format!(".{STATUS_FILE}.{}.tmp", hex::encode(suffix));
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mode = Mode::from_raw_mode(SECRET_FILE_MODE);
    let fd = rustix::fs::openat(&dir, &temp_name, flags, mode).map_err(io_error)?;
    let written = rustix::fs::fchmod(&fd, mode)
        .map_err(std::io::Error::from)
        .and_then(|()| std::fs::File::from(fd).write_all(bytes))
        .and_then(|()| {
            rustix::fs::renameat(&dir, &temp_name, &dir, STATUS_FILE).map_err(Into::into)
        });
    if let Err(source) = written {
        let _ = rustix::fs::unlinkat(&dir, &temp_name, AtFlags::empty());
        return Err(NodeHostError::StatusIo { path, source });
    }
    Ok(())
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
