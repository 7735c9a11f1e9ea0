//! The bodies of the replica-to-replica routes (`/internal/replica/...`): what one replica
//! sends another that holds a node's link, and the typed answers, so a forwarded call keeps
//! every error the holder's workspace client gave.

use base64::Engine;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::skills::SkillsDiscovery;
use serde::Deserialize;
use serde::Serialize;

use crate::memory::MemoryServiceError;
use crate::workspace::WorkspaceError;
use crate::workspace::WorkspaceFile;
use crate::workspace::WriteMode;
use crate::workspace::Written;

/// A read of an Agent-workspace file, relative to the workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FetchRequest {
    /// The path relative to the Agent workspace.
    pub path: String,
}

/// A read of lines of a memory file (`GET /v1/memory/get` on a replica without the node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct MemoryGetRequest {
    /// The workspace-relative path of the memory file.
    pub path: String,
    /// The first line, 1-based.
    pub from: Option<u32>,
    /// How many lines.
    pub lines: Option<u32>,
}

/// The Harness workspace's skills as the holder's node discovered them, or why it could not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum DiscoveryAnswer {
    /// The node's discovery.
    Found(SkillsDiscovery),
    /// Why there is none.
    Unavailable {
        /// The reason, for the catalog's warning.
        reason: String,
    },
}

/// A write of an Agent-workspace file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct WriteRequest {
    /// The path relative to the Agent workspace.
    pub path: String,
    /// The content, base64.
    pub content_base64: String,
    /// Whether an existing file is replaced.
    pub mode: ForwardedWriteMode,
}

/// [`WriteMode`] on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum ForwardedWriteMode {
    /// [`WriteMode::Replace`].
    Replace,
    /// [`WriteMode::CreateNew`].
    CreateNew,
}

impl From<WriteMode> for ForwardedWriteMode {
    fn from(mode: WriteMode) -> Self {
        match mode {
            WriteMode::Replace => Self::Replace,
            WriteMode::CreateNew => Self::CreateNew,
        }
    }
}

impl From<ForwardedWriteMode> for WriteMode {
    fn from(mode: ForwardedWriteMode) -> Self {
        match mode {
            ForwardedWriteMode::Replace => Self::Replace,
            ForwardedWriteMode::CreateNew => Self::CreateNew,
        }
    }
}

/// A file read on the holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct FetchAnswer {
    /// The canonical remote path.
    pub path: String,
    /// The content, base64.
    pub content_base64: String,
    /// The MIME type the node guessed.
    pub mime_type: String,
}

impl From<WorkspaceFile> for FetchAnswer {
    fn from(file: WorkspaceFile) -> Self {
        Self {
            path: file.path,
            content_base64: base64::engine::general_purpose::STANDARD.encode(&file.bytes),
            mime_type: file.mime_type,
        }
    }
}

impl FetchAnswer {
    /// Returns the file, or [`WorkspaceError::Corrupt`] for content that is not base64.
    pub(crate) fn into_file(self) -> Result<WorkspaceFile, WorkspaceError> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(self.content_base64)
            .map_err(|_| WorkspaceError::Corrupt)?;
        Ok(WorkspaceFile {
            path: self.path,
            bytes,
            mime_type: self.mime_type,
        })
    }
}

/// A confirmed write on the holder.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WriteAnswer {
    /// The canonical remote path.
    pub path: String,
    /// The bytes written.
    pub size: u64,
}

impl From<Written> for WriteAnswer {
    fn from(written: Written) -> Self {
        Self {
            path: written.path,
            size: written.size,
        }
    }
}

impl From<WriteAnswer> for Written {
    fn from(answer: WriteAnswer) -> Self {
        Self {
            path: answer.path,
            size: answer.size,
        }
    }
}

/// The holder's answer: the result, or the [`WorkspaceError`] its client gave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Forwarded<T> {
    /// The call succeeded.
    Ok(T),
    /// The call failed.
    Err(ForwardedError),
}

/// A [`WorkspaceError`] on the wire, variant for variant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub(crate) enum ForwardedError {
    /// [`WorkspaceError::BadPath`].
    BadPath {
        /// The code.
        code: String,
        /// What is wrong.
        message: String,
    },
    /// [`WorkspaceError::PolicyDenied`].
    PolicyDenied {
        /// The code.
        code: String,
        /// `read` or `write`.
        access: String,
        /// The remote path.
        path: String,
    },
    /// [`WorkspaceError::Unavailable`].
    Unavailable,
    /// [`WorkspaceError::Timeout`].
    Timeout,
    /// [`WorkspaceError::UnknownOutcome`].
    UnknownOutcome,
    /// [`WorkspaceError::Remote`].
    Remote {
        /// The node's code.
        code: String,
        /// The node's message.
        message: String,
    },
    /// [`WorkspaceError::Corrupt`].
    Corrupt,
}

impl From<&WorkspaceError> for ForwardedError {
    fn from(error: &WorkspaceError) -> Self {
        match error {
            WorkspaceError::BadPath { code, message } => Self::BadPath {
                code: code.as_str().to_owned(),
                message: message.clone(),
            },
            WorkspaceError::PolicyDenied { code, kind, path } => Self::PolicyDenied {
                code: (*code).to_owned(),
                access: (*kind).to_owned(),
                path: path.clone(),
            },
            WorkspaceError::Unavailable => Self::Unavailable,
            WorkspaceError::Timeout => Self::Timeout,
            WorkspaceError::UnknownOutcome => Self::UnknownOutcome,
            WorkspaceError::Remote(error) => Self::Remote {
                code: error.code.clone(),
                message: error.message.clone(),
            },
            WorkspaceError::Corrupt => Self::Corrupt,
        }
    }
}

impl From<&MemoryServiceError> for ForwardedError {
    /// A memory read fails for want of a node, or with the node's code; any other failure
    /// crosses as its code and message.
    fn from(error: &MemoryServiceError) -> Self {
        match error {
            MemoryServiceError::WorkspaceUnavailable(_) => Self::Unavailable,
            MemoryServiceError::Remote(error) => Self::Remote {
                code: error.code.clone(),
                message: error.message.clone(),
            },
            other => Self::Remote {
                code: other.code().to_owned(),
                message: other.to_string(),
            },
        }
    }
}

impl From<ForwardedError> for WorkspaceError {
    fn from(error: ForwardedError) -> Self {
        match error {
            ForwardedError::BadPath { code, message } => Self::BadPath {
                code: ErrorCode::parse(&code).unwrap_or(ErrorCode::InvalidPath),
                message,
            },
            ForwardedError::PolicyDenied { code, access, path } => Self::PolicyDenied {
                code: ErrorCode::parse(&code)
                    .unwrap_or(ErrorCode::PolicyDenied)
                    .as_str(),
                kind: match access.as_str() {
                    "write" => "write",
                    _ => "read",
                },
                path,
            },
            ForwardedError::Unavailable => Self::Unavailable,
            ForwardedError::Timeout => Self::Timeout,
            ForwardedError::UnknownOutcome => Self::UnknownOutcome,
            ForwardedError::Remote { code, message } => Self::Remote(WireError {
                code,
                message,
                details: None,
                retryable: None,
            }),
            ForwardedError::Corrupt => Self::Corrupt,
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    /// Every workspace error survives the hop between replicas with its code and message.
    #[test]
    fn a_forwarded_workspace_error_keeps_its_code_and_message() {
        let errors = [
            WorkspaceError::BadPath {
                code: ErrorCode::PathTraversal,
                message: String::from("\"../x\" has a .. segment"),
            },
            WorkspaceError::PolicyDenied {
                code: ErrorCode::NoPolicy.as_str(),
                kind: "write",
                path: String::from("/ws/x"),
            },
            WorkspaceError::Unavailable,
            WorkspaceError::Timeout,
            WorkspaceError::UnknownOutcome,
            WorkspaceError::Remote(WireError::new(ErrorCode::SymlinkRedirect, "a link")),
            WorkspaceError::Corrupt,
        ];
        for error in errors {
            let wire = serde_json::to_string(&ForwardedError::from(&error)).unwrap();
            let back: WorkspaceError = serde_json::from_str::<ForwardedError>(&wire)
                .unwrap()
                .into();
            assert_eq!(
                (back.code(), back.to_string()),
                (error.code(), error.to_string()),
                "{wire}"
            );
        }
    }

    /// A memory read's failure keeps its code across the hop: no node is
    /// `DEPENDENCY_UNAVAILABLE`, a node's refusal is its own code and message.
    #[test]
    fn a_forwarded_memory_error_keeps_its_code() {
        let cases = [
            (
                MemoryServiceError::WorkspaceUnavailable(String::from("no node")),
                ErrorCode::DependencyUnavailable.as_str(),
            ),
            (
                MemoryServiceError::Remote(WireError::new(ErrorCode::NotFound, "no such file")),
                ErrorCode::NotFound.as_str(),
            ),
        ];
        for (error, code) in cases {
            let wire = serde_json::to_string(&ForwardedError::from(&error)).unwrap();
            let back: WorkspaceError = serde_json::from_str::<ForwardedError>(&wire)
                .unwrap()
                .into();
            assert_eq!(back.code(), code, "{wire}");
        }
    }
}
