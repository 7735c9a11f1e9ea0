//! Agent documents: the four Markdown files (`AGENTS.md`, `SOUL.md`, `IDENTITY.md`, `USER.md`)
//! at the root of the Harness Agent workspace, read and replaced through the enrolled node.
//!
//! This module holds the rules, independent of HTTP: which agent and names exist, how a write
//! body is decoded, what content is acceptable, and what is audited. The handlers in
//! `http::documents` only decode the request, call these functions and map the result.
//!
//! # Rules
//! - The only agent is [`MAIN_AGENT`]; any other is [`DocumentError::UnknownAgent`].
//! - Only the four [`DocumentName`]s are served; any other name is
//!   [`DocumentError::UnknownName`].
//! - A write body is at most [`MAX_BODY_BYTES`] bytes and is exactly `{"content": <string>}`.
//! - Content is well-formed Unicode, has no NUL, and is at most [`MAX_CONTENT_BYTES`] bytes of
//!   UTF-8 ([`ContentError`]). Content read back from the node is checked again.
//! - Every invalid request is refused before any call reaches the node.
//! - Writes replace the file ([`WriteMode::Replace`]): the last write wins, and there is no
//!   stale-save detection. A write that was sent and not confirmed is never replayed.
//!
//! # Wire codes (chosen here, mapped in `http::documents`)
//! - Invalid content in a write body is `400 INVALID_REQUEST` with
//!   `details: {"path": "/content", "code": ...}`, where the detail code is `INVALID_VALUE`
//!   (a lone surrogate), `INVALID_FORMAT` (NUL) or `TOO_LONG` (over 16 KiB of UTF-8). The
//!   top-level code stays `INVALID_REQUEST`, like every other malformed request; the detail code
//!   says which rule failed.
//! - A file on the node that breaks the same rules (not UTF-8, NUL, too long) is
//!   `422 INVALID_DOCUMENT` with the same `details`: the request was fine, the stored file cannot
//!   be served as a document. Fix it in the workspace or replace it with a write.
//!
//! # Audit
//! Each write that reaches the node is recorded as [`WRITE_ACTION`] with the outcome
//! `succeeded`, `failed` or `unknown` and `details: {"agent", "name", "size"}`. Each refusal of
//! the caller (a cross-site request) is recorded with the outcome `denied` and a reason code.
//! Reads are not audited. Content never enters the audit trail or the log.

use crate::audit::Audit;
use crate::audit::loggable;
use crate::workspace::WorkspaceAccess;
use crate::workspace::WorkspaceError;
use crate::workspace::WriteMode;
use gatehouse_protocol::error::ErrorCode;

/// The only agent id served.
pub(crate) const MAIN_AGENT: &str = "main";

/// The largest document, in bytes of UTF-8 (16 KiB).
pub(crate) const MAX_CONTENT_BYTES: usize = 16 * 1024;

/// The largest write request body, in bytes (48 KiB). It leaves room for JSON escapes of a
/// [`MAX_CONTENT_BYTES`] document.
pub(crate) const MAX_BODY_BYTES: usize = 48 * 1024;

/// The audit action of a document read (recorded only when refused).
pub(crate) const READ_ACTION: &str = "agents.files.read";

/// The audit action of a document write.
pub(crate) const WRITE_ACTION: &str = "agents.files.write";

/// The JSON pointer of the content in a write body and in error details.
pub(crate) const CONTENT_POINTER: &str = "/content";

/// One of the four Agent documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DocumentName {
    /// `AGENTS.md`.
    Agents,
    /// `SOUL.md`.
    Soul,
    /// `IDENTITY.md`.
    Identity,
    /// `USER.md`.
    User,
}

impl DocumentName {
    /// Every document, in a stable order.
    pub(crate) const ALL: [DocumentName; 4] = [
        DocumentName::Agents,
        DocumentName::Soul,
        DocumentName::Identity,
        DocumentName::User,
    ];

    /// Returns the document called exactly `name` (case-sensitive).
    ///
    /// # Errors
    /// [`DocumentError::UnknownName`] for any other name.
    pub(crate) fn parse(name: &str) -> Result<Self, DocumentError> {
        match Self::ALL
            .into_iter()
            .find(|document| document.as_str() == name)
        {
            Some(document) => Ok(document),
            None => Err(DocumentError::UnknownName {
                name: name.to_owned(),
            }),
        }
    }

    /// Returns the file name, which is also its path relative to the Agent workspace.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            DocumentName::Agents => "AGENTS.md",
            DocumentName::Soul => "SOUL.md",
            DocumentName::Identity => "IDENTITY.md",
            DocumentName::User => "USER.md",
        }
    }
}

/// Document content that passed every content rule: well-formed Unicode, no NUL, at most
/// [`MAX_CONTENT_BYTES`] bytes of UTF-8. It says nothing about the file on the node.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct DocumentContent {
    text: String,
}

impl DocumentContent {
    /// Returns `text` as document content.
    ///
    /// # Errors
    /// [`ContentError::Nul`] or [`ContentError::TooLong`].
    pub(crate) fn new(text: String) -> Result<Self, ContentError> {
        if text.contains('\0') {
            return Err(ContentError::Nul);
        }
        if text.len() > MAX_CONTENT_BYTES {
            return Err(ContentError::TooLong);
        }
        Ok(Self { text })
    }

    /// Returns `bytes` (as read from the node) as document content.
    ///
    /// # Errors
    /// [`ContentError::InvalidUnicode`] when the bytes are not UTF-8, then the errors of
    /// [`DocumentContent::new`].
    pub(crate) fn from_utf8(bytes: Vec<u8>) -> Result<Self, ContentError> {
        match String::from_utf8(bytes) {
            Ok(text) => Self::new(text),
            Err(_) => Err(ContentError::InvalidUnicode),
        }
    }

    /// Returns the text.
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }

    /// Returns the size in bytes of UTF-8.
    pub(crate) fn size(&self) -> usize {
        self.text.len()
    }

    /// Returns the text, consuming the content.
    pub(crate) fn into_string(self) -> String {
        self.text
    }
}

/// Shows the size only: content never goes to a log.
impl std::fmt::Debug for DocumentContent {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DocumentContent")
            .field("size", &self.size())
            .finish_non_exhaustive()
    }
}

/// Why content is not an acceptable document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ContentError {
    /// The content is not well-formed Unicode: a lone surrogate escape in a write body, or bytes
    /// on the node that are not UTF-8.
    #[error("the content is not well-formed unicode")]
    InvalidUnicode,
    /// The content contains NUL (U+0000).
    #[error("the content contains nul (U+0000)")]
    Nul,
    /// The content is longer than [`MAX_CONTENT_BYTES`] bytes of UTF-8.
    #[error("the content is over {MAX_CONTENT_BYTES} bytes of utf-8")]
    TooLong,
}

impl ContentError {
    /// Returns the stable detail code: `INVALID_VALUE`, `INVALID_FORMAT` or `TOO_LONG`.
    pub(crate) fn detail_code(&self) -> &'static str {
        match self {
            ContentError::InvalidUnicode => ErrorCode::InvalidValue.as_str(),
            ContentError::Nul => ErrorCode::InvalidFormat.as_str(),
            ContentError::TooLong => ErrorCode::TooLong.as_str(),
        }
    }
}

/// Why a document call failed. Only [`DocumentError::Workspace`] can happen after a call
/// reached the node; every other variant is decided before.
#[derive(Debug, thiserror::Error)]
pub(crate) enum DocumentError {
    /// The agent does not exist. Not retryable.
    #[error("no agent {agent:?}; the agent is \"main\"")]
    UnknownAgent {
        /// The agent id asked for.
        agent: String,
    },
    /// The name is not one of the four documents. Not retryable.
    #[error("{name:?} is not an agent document; use AGENTS.md, SOUL.md, IDENTITY.md or USER.md")]
    UnknownName {
        /// The name asked for.
        name: String,
    },
    /// The write body is longer than [`MAX_BODY_BYTES`]. Not retryable.
    #[error("the request body is over {MAX_BODY_BYTES} bytes")]
    BodyTooLarge,
    /// The write body is not exactly `{"content": <string>}`. Not retryable.
    #[error("the body must be exactly {{\"content\": <string>}}")]
    MalformedBody(#[source] serde_json::Error),
    /// The write body is not a JSON object. Not retryable.
    #[error("the body must be a json object: {{\"content\": <string>}}")]
    BodyNotObject,
    /// The content of a write body breaks a content rule. Not retryable.
    #[error("invalid content: {0}")]
    InvalidContent(#[source] ContentError),
    /// The file read from the node breaks a content rule. Retrying reads the same file; fix or
    /// replace it.
    #[error("the stored document cannot be served: {0}")]
    StoredContentInvalid(#[source] ContentError),
    /// The workspace call failed; see [`WorkspaceError`] for which ones may be retried. After
    /// [`WorkspaceError::UnknownOutcome`], read the file before writing again.
    #[error(transparent)]
    Workspace(WorkspaceError),
}

/// Returns `Ok` when `agent` is served.
///
/// # Errors
/// [`DocumentError::UnknownAgent`].
pub(crate) fn check_agent(agent: &str) -> Result<(), DocumentError> {
    if agent != MAIN_AGENT {
        return Err(DocumentError::UnknownAgent {
            agent: agent.to_owned(),
        });
    }
    Ok(())
}

/// Decodes a write body, which must be exactly `{"content": <string>}`, into checked content.
///
/// JSON parsers refuse a lone surrogate escape (such as `"\ud800"`) with the same error as any
/// other syntax error; to report it as invalid content, each lone surrogate escape is first
/// replaced with `\ufffd` (same length) and the body is parsed after. If the body then parses,
/// the only string it holds besides the `content` key is the content, so a replacement means the
/// content was not well-formed Unicode.
///
/// # Errors
/// [`DocumentError::BodyTooLarge`] over [`MAX_BODY_BYTES`], [`DocumentError::BodyNotObject`] or
/// [`DocumentError::MalformedBody`] for anything but an object with exactly one string field
/// `content`, [`DocumentError::InvalidContent`] when the content breaks a rule.
pub(crate) fn decode_write_body(raw: &[u8]) -> Result<DocumentContent, DocumentError> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct WriteBody {
        content: String,
    }

    if raw.len() > MAX_BODY_BYTES {
        return Err(DocumentError::BodyTooLarge);
    }
    let sanitized = replace_lone_surrogates(raw);
    let had_lone_surrogate = sanitized.is_some();
    let body = sanitized.as_deref().unwrap_or(raw);
    // A derived struct also accepts the sequence form `["..."]`; only an object is a body.
    let is_object = body.trim_ascii_start().first() == Some(&b'{');
    if !is_object {
        return Err(DocumentError::BodyNotObject);
    }
    let write_body: WriteBody = match serde_json::from_slice(body) {
        Ok(write_body) => write_body,
        Err(error) => return Err(DocumentError::MalformedBody(error)),
    };
    if had_lone_surrogate {
        return Err(DocumentError::InvalidContent(ContentError::InvalidUnicode));
    }
    DocumentContent::new(write_body.content).map_err(DocumentError::InvalidContent)
}

/// Reads `name` from the Agent workspace and checks it again.
///
/// # Errors
/// [`DocumentError::Workspace`] when the node cannot be reached or refuses (a missing file is
/// [`WorkspaceError::Remote`] with `NOT_FOUND`); [`DocumentError::StoredContentInvalid`] when the
/// file is not UTF-8, contains NUL or is too long.
pub(crate) async fn read_document(
    workspace: &dyn WorkspaceAccess,
    name: DocumentName,
) -> Result<DocumentContent, DocumentError> {
    let file = match workspace.fetch(name.as_str()).await {
        Ok(file) => file,
        Err(WorkspaceError::Remote(remote))
            if remote.known_code() == Some(gatehouse_protocol::error::ErrorCode::FileTooLarge) =>
        {
            // The node refuses files over its own limit, which is far above ours.
            return Err(DocumentError::StoredContentInvalid(ContentError::TooLong));
        }
        Err(error) => return Err(DocumentError::Workspace(error)),
    };
    DocumentContent::from_utf8(file.bytes).map_err(DocumentError::StoredContentInvalid)
}

/// Replaces the document `name` of `agent` with `content` (last write wins) and records the
/// outcome in `audit`. The write is sent once and never replayed.
///
/// Returns the size written, in bytes of UTF-8.
///
/// # Errors
/// [`DocumentError::Workspace`]: [`WorkspaceError::UnknownOutcome`] when the write was sent and
/// not confirmed (audited as `unknown`), any other error when it failed (audited as `failed`).
pub(crate) async fn write_document(
    workspace: &dyn WorkspaceAccess,
    audit: &Audit,
    actor: &str,
    agent: &str,
    name: DocumentName,
    content: &DocumentContent,
) -> Result<usize, DocumentError> {
    let size = content.size();
    let details = serde_json::json!({"agent": agent, "name": name.as_str(), "size": size});
    let result = workspace
        .write(
            name.as_str(),
            content.as_str().as_bytes(),
            WriteMode::Replace,
        )
        .await;
    match result {
        Ok(written) => {
            if written.size != size as u64 {
                tracing::warn!(
                    name = name.as_str(),
                    size,
                    reported = written.size,
                    "the node reported another size for a document write"
                );
            }
            tracing::info!(agent, name = name.as_str(), size, "document written");
            audit
                .record_caller(actor, WRITE_ACTION, "succeeded", None, details)
                .await;
            Ok(size)
        }
        Err(error) => {
            let (outcome, reason_code) = match &error {
                WorkspaceError::UnknownOutcome => ("unknown", ErrorCode::UnknownOutcome.as_str()),
                WorkspaceError::Unavailable | WorkspaceError::Timeout => {
                    ("failed", ErrorCode::DependencyUnavailable.as_str())
                }
                WorkspaceError::BadPath { code, .. } => ("failed", code.as_str()),
                WorkspaceError::PolicyDenied { code, .. } => ("failed", *code),
                WorkspaceError::Remote(remote) => ("failed", remote.code.as_str()),
                WorkspaceError::Corrupt => ("failed", ErrorCode::NodeBadResponse.as_str()),
            };
            tracing::warn!(
                agent,
                name = name.as_str(),
                size,
                outcome,
                error = %loggable(&error),
                "document write did not succeed"
            );
            audit
                .record_caller(actor, WRITE_ACTION, outcome, Some(reason_code), details)
                .await;
            Err(DocumentError::Workspace(error))
        }
    }
}

/// Records that a document call was refused before it reached the node, with `reason_code`
/// (for example `FORBIDDEN`). `action` is [`READ_ACTION`] or [`WRITE_ACTION`]; `agent` and
/// `name` are what the caller asked for, when known. Nothing of the body is recorded.
pub(crate) async fn record_denial(
    audit: &Audit,
    actor: &str,
    action: &str,
    agent: Option<&str>,
    name: Option<&str>,
    reason_code: &str,
) {
    tracing::info!(action, agent, name, reason_code, "document call denied");
    audit
        .record_caller(
            actor,
            action,
            "denied",
            Some(reason_code),
            serde_json::json!({"agent": agent, "name": name}),
        )
        .await;
}

/// Returns a copy of the JSON text `raw` in which every lone surrogate escape inside a string
/// (`\ud800`-`\udfff` not part of a high-low pair) is replaced with `\ufffd`, or `None` when there
/// is none. Other syntax is left for the parser to judge.
fn replace_lone_surrogates(raw: &[u8]) -> Option<Vec<u8>> {
    const REPLACEMENT: &[u8; 6] = b"\\ufffd";
    let mut sanitized: Option<Vec<u8>> = None;
    let mut in_string = false;
    let mut byte_idx = 0;
    while byte_idx < raw.len() {
        let byte = raw[byte_idx];
        if !in_string {
            in_string = byte == b'"';
            byte_idx += 1;
            continue;
        }
        match byte {
            b'"' => {
                in_string = false;
                byte_idx += 1;
            }
            b'\\' => {
                let Some(unit) = unicode_escape(raw, byte_idx) else {
                    // A two-byte escape (`\"`, `\\`, `\n`, ...) or a malformed one.
                    byte_idx += 2;
                    continue;
                };
                let is_pair = (0xD800..=0xDBFF).contains(&unit)
                    && unicode_escape(raw, byte_idx + 6)
                        .is_some_and(|low| (0xDC00..=0xDFFF).contains(&low));
                if is_pair {
                    byte_idx += 12;
                    continue;
                }
                if (0xD800..=0xDFFF).contains(&unit) {
                    let copy = sanitized.get_or_insert_with(|| raw.to_vec());
                    copy[byte_idx..byte_idx + REPLACEMENT.len()].copy_from_slice(REPLACEMENT);
                }
                byte_idx += 6;
            }
            _ => byte_idx += 1,
        }
    }
    sanitized
}

/// Returns the code unit of the `\uXXXX` escape starting at `start`, if there is one.
fn unicode_escape(raw: &[u8], start: usize) -> Option<u16> {
    let escape = raw.get(start..start + 6)?;
    if escape[0] != b'\\' || escape[1] != b'u' {
        return None;
    }
    let hex = std::str::from_utf8(&escape[2..]).ok()?;
    if !hex.bytes().all(|byte| byte.is_ascii_hexdigit()) {
        return None;
    }
    u16::from_str_radix(hex, 16).ok()
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use crate::documents::replace_lone_surrogates;

    #[test]
    fn replace_lone_surrogates_table() {
        let cases: [(&str, Option<&str>); 9] = [
            (r#"{"content":"plain"}"#, None),
            (r#"{"content":"\ud83d\ude00"}"#, None),
            (r#"{"content":"\\ud800"}"#, None),
            (r#"{"content":"\ud800"}"#, Some(r#"{"content":"\ufffd"}"#)),
            (
                r#"{"content":"a\udc00b"}"#,
                Some(r#"{"content":"a\ufffdb"}"#),
            ),
            (
                r#"{"content":"\udc00\ud800"}"#,
                Some(r#"{"content":"\ufffd\ufffd"}"#),
            ),
            (
                r#"{"content":"\ud800\u0041"}"#,
                Some(r#"{"content":"\ufffd\u0041"}"#),
            ),
            (r#"{"content":"\ud800"#, Some(r#"{"content":"\ufffd"#)),
            (r#"\ud800"#, None),
        ];
        for (raw, expected) in cases {
            let actual = replace_lone_surrogates(raw.as_bytes())
                .map(|bytes| String::from_utf8(bytes).unwrap());
            assert_eq!(actual.as_deref(), expected, "{raw}");
        }
    }
}
