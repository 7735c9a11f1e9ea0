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

/// Returns the MIME type to store `bytes` under: the type their magic numbers show; else the
/// sender's `declared` type when it is a `text/` type and the bytes are UTF-8 text; else
/// [`OCTET_STREAM`]. A sender's word never makes bytes an image, a document or an executable.
#[must_use]
pub fn sniff_mime_type(bytes: &[u8], declared: &str) -> String {
    if let Some(kind) = infer::get(bytes) {
        return kind.mime_type().to_owned();
    }
    let declared = declared.trim().to_ascii_lowercase();
    let essence = declared.split(';').next().unwrap_or_default().trim();
    if essence.starts_with("text/")
        && essence.len() <= 100
        && essence.bytes().all(|b| b.is_ascii_graphic())
        && std::str::from_utf8(bytes).is_ok()
    {
        return essence.to_owned();
    }
    OCTET_STREAM.to_owned()
}

/// The line added to a message's text for a file that was not passed on.
#[must_use]
pub fn refusal_note(name: &str, reason: &str) -> String {
    format!("[The file {name:?} was not passed on: {reason}]")
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(sniff_mime_type(b"x", "text/pl ain"), OCTET_STREAM);
        let elf = [0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(
            sniff_mime_type(&elf, "text/plain"),
            "application/x-executable"
        );
    }
}
