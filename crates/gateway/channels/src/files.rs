//! Files a channel receives with a message and sends with a reply: their bounds, and the MIME
//! type a file is stored under, which comes from its bytes rather than from the sender.
//!
//! A received file goes into the Gateway's media store like an API upload and is staged for
//! the turn as an API attachment is; a file refused (too large, too many, past the channel's
//! media share, unreadable) reaches the agent as a line of the message's text saying so, so the
//! agent can tell the sender. A turn's reply artifacts go back with its reply.

use std::time::Duration;

/// The most files of one message a channel passes on; the others are refused.
pub const MAX_FILES_PER_MESSAGE: usize = 8;

/// The most files sent back with one reply (as for reply artifacts).
pub const MAX_REPLY_FILES: usize = 16;

/// The most bytes of files sent back with one reply (as for reply artifacts).
pub const MAX_REPLY_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How long the download of one file from a platform may take.
pub const DOWNLOAD_TIMEOUT: Duration = Duration::from_secs(120);

/// The MIME type of bytes nothing else is known of.
pub const OCTET_STREAM: &str = "application/octet-stream";

/// A file to send back with a reply.
#[derive(Clone, PartialEq, Eq)]
pub struct OutgoingFile {
    /// Its name (the artifact's file name).
    pub name: String,
    /// Its MIME type, as the media store recorded it.
    pub mime_type: String,
    /// Its bytes.
    pub bytes: bytes::Bytes,
}

impl std::fmt::Debug for OutgoingFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutgoingFile")
            .field("name", &self.name)
            .field("mime_type", &self.mime_type)
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

/// Returns the MIME type to store `bytes` under: the type their magic numbers show; else, for
/// UTF-8 bytes declared as a `text/` type, that type when it is plain text, Markdown, CSV or
/// TSV and `text/plain` otherwise; else [`OCTET_STREAM`]. A sender's word never makes bytes an image, a document or an executable.
#[must_use]
pub fn sniff_mime_type(bytes: &[u8], declared: &str) -> String {
    if let Some(kind) = infer::get(bytes) {
        return kind.mime_type().to_owned();
    }
    let declared = declared.trim().to_ascii_lowercase();
    let essence = declared.split(';').next().unwrap_or_default().trim();
    if essence.starts_with("text/") && std::str::from_utf8(bytes).is_ok() {
        let kept = TEXT_TYPES.iter().find(|known| **known == essence);
        return kept.copied().unwrap_or("text/plain").to_owned();
    }
    OCTET_STREAM.to_owned()
}

/// Returns `name` fit to show as a file's name on a platform: no path separators, control
/// characters or bidirectional overrides (each becomes `_`), at most 255 bytes, and `file`
/// when nothing is left.
#[must_use]
pub fn display_name(name: &str) -> String {
    let bidi = |c: char| matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}');
    let mut shown = String::new();
    for c in name.trim().chars() {
        let c = match c {
            '/' | '\\' => '_',
            c if c.is_control() || bidi(c) => '_',
            c => c,
        };
        if shown.len() + c.len_utf8() > 255 {
            break;
        }
        shown.push(c);
    }
    match shown.trim().is_empty() {
        true => String::from("file"),
        false => shown,
    }
}

/// The line added to a message's text for a file that was not passed on.
#[must_use]
pub fn refusal_note(name: &str, reason: &str) -> String {
    format!("[The file {name:?} was not passed on: {reason}]")
}

/// The line a reply carries for one of its files that could not be sent.
#[must_use]
pub fn unsent_note(name: &str, reason: &str) -> String {
    format!("[The file {name:?} could not be sent: {reason}]")
}

/// The largest answer of a platform's API read (a file download has its own bound).
pub const MAX_API_ANSWER_BYTES: u64 = 16 * 1024 * 1024;

/// Why a download stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Capped {
    /// The body is longer than the bound.
    TooLarge,
    /// The body could not be read (the message carries no URL).
    Transport(String),
}

/// Reads `response`'s body, refusing one longer than `max_bytes` as soon as it says so or
/// grows past it.
///
/// # Errors
/// [`Capped`].
pub async fn read_capped(
    mut response: reqwest::Response,
    max_bytes: u64,
) -> Result<bytes::Bytes, Capped> {
    if response
        .content_length()
        .is_some_and(|length| length > max_bytes)
    {
        return Err(Capped::TooLarge);
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|error| Capped::Transport(error.without_url().to_string()))?
    {
        if (bytes.len() + chunk.len()) as u64 > max_bytes {
            return Err(Capped::TooLarge);
        }
        bytes.extend_from_slice(&chunk);
    }
    Ok(bytes.into())
}

/// The most bytes of files one webhook reply carries inline (base64 makes them a third
/// larger); the others are named in its text instead.
pub const MAX_WEBHOOK_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// The `text/` types a sender's declaration is believed for (with UTF-8 bytes); any other
/// declared `text/` type is stored as `text/plain`.
const TEXT_TYPES: [&str; 4] = [
    "text/plain",
    "text/markdown",
    "text/csv",
    "text/tab-separated-values",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shown_file_name_has_no_separators_controls_or_overrides() {
        assert_eq!(display_name("report.txt"), "report.txt");
        assert_eq!(display_name("a\\b\n\u{202E}fdp.exe"), "a_b__fdp.exe");
        assert_eq!(display_name(" \t"), "file");
        assert_eq!(display_name(&"é".repeat(200)).len(), 254);
    }

    #[test]
    fn the_bytes_decide_the_type_and_a_declared_type_is_believed_only_for_text() {
        let png = [
            0x89, b'P', b'N', b'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 0x0D,
        ];
        assert_eq!(sniff_mime_type(&png, "text/plain"), "image/png");
        assert_eq!(
            sniff_mime_type(b"%PDF-1.7\n", "image/png"),
            "application/pdf"
        );
        assert_eq!(
            sniff_mime_type(b"plain words", "text/markdown; charset=utf-8"),
            "text/markdown"
        );
        assert_eq!(sniff_mime_type(b"plain words", "image/png"), OCTET_STREAM);
        assert_eq!(
            sniff_mime_type(&[0xff, 0xfe, 0x00], "text/plain"),
            OCTET_STREAM
        );
        assert_eq!(
            sniff_mime_type(b"hello <b>you</b>", "text/html"),
            "text/plain"
        );
        assert_eq!(sniff_mime_type(b"x", "text/x\"<>"), "text/plain");
        let mut elf = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        elf.resize(64, 0);
        assert_eq!(
            sniff_mime_type(&elf, "text/plain"),
            "application/x-executable"
        );
    }
}
