//! Writing to stdout and stderr without panicking on a closed pipe.

use std::io::Write;

/// Writes `text` and a newline to stdout. A broken pipe (for example `| head`) is ignored.
pub(crate) fn line(text: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{text}");
}

/// Writes `text` and a newline to stderr.
pub(crate) fn error_line(text: &str) {
    let mut stderr = std::io::stderr().lock();
    let _ = writeln!(stderr, "{text}");
}

/// Writes `value` as pretty JSON to stdout.
pub(crate) fn json<T: serde::Serialize + ?Sized>(value: &T) {
    let text = serde_json::to_string_pretty(value).unwrap_or_else(|_| String::from("null"));
    line(&text);
}
