//! [`sanitize_filename`]: turns an untrusted file name into one safe to use as a path segment.

/// The longest sanitized name, in bytes (the result is ASCII, so also in characters).
pub const MAX_FILENAME_BYTES: usize = 120;

/// The name used when nothing usable is left.
pub const FALLBACK_FILENAME: &str = "file";

/// The longest extension kept when a name is shortened, dot excluded.
const MAX_KEPT_EXTENSION_BYTES: usize = 16;

/// Returns a file name that is safe as a single path segment on any platform.
///
/// The result:
/// - has no directory part: everything up to the last `/` or `\` is dropped (a trailing separator
///   is ignored, so `dir/` gives `dir`);
/// - has no control characters (NUL included): they are dropped;
/// - holds only ASCII letters, digits, `.`, `-` and `_`: every other character becomes `_`, and
///   runs of `_` collapse to one;
/// - has no `..`: runs of dots collapse to one;
/// - never starts with `.` or `-`, and never ends with `.`;
/// - is never empty ([`FALLBACK_FILENAME`]);
/// - is at most [`MAX_FILENAME_BYTES`] bytes, keeping a short extension when it is shortened.
///
/// It is idempotent: a sanitized name sanitizes to itself. It does not make names unique.
pub fn sanitize_filename(name: &str) -> String {
    let base = name
        .split(['/', '\\'])
        .rev()
        .find(|segment| !segment.is_empty())
        .unwrap_or_default();
    let mut safe = String::with_capacity(base.len().min(MAX_FILENAME_BYTES * 4));
    for character in base.chars() {
        let mapped = match character {
            _ if character.is_control() => continue,
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => character,
            _ => '_',
        };
        let collapses = matches!(mapped, '_' | '.') && safe.ends_with(mapped);
        if !collapses {
            safe.push(mapped);
        }
    }
    let trimmed = safe
        .trim_start_matches(['.', '-'])
        .trim_end_matches('.')
        .to_owned();
    let shortened = shorten(trimmed);
    match shortened.is_empty() {
        true => FALLBACK_FILENAME.to_owned(),
        false => shortened,
    }
}

/// Cuts an ASCII `name` to [`MAX_FILENAME_BYTES`], keeping its extension when it is short.
fn shorten(name: String) -> String {
    if name.len() <= MAX_FILENAME_BYTES {
        return name;
    }
    let extension = match name.rsplit_once('.') {
        Some((stem, extension))
            if !stem.is_empty()
                && !extension.is_empty()
                && extension.len() <= MAX_KEPT_EXTENSION_BYTES =>
        {
            extension
        }
        Some(_) | None => "",
    };
    let stem_budget = match extension.is_empty() {
        true => MAX_FILENAME_BYTES,
        false => MAX_FILENAME_BYTES - extension.len() - 1,
    };
    // The name is ASCII here, so every byte index is a character boundary.
    let stem = name[..stem_budget].trim_end_matches('.');
    match (stem.is_empty(), extension.is_empty()) {
        (true, _) => String::new(),
        (false, true) => stem.to_owned(),
        (false, false) => format!("{stem}.{extension}"),
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use crate::filename::MAX_FILENAME_BYTES;
    use crate::filename::sanitize_filename;

    #[test]
    fn table() {
        let long_stem = "a".repeat(500);
        let long_with_extension = format!("{long_stem}.txt");
        let expected_long_with_extension = format!("{}.txt", "a".repeat(MAX_FILENAME_BYTES - 4));
        let cases: Vec<(&str, String)> = vec![
            ("report.pdf", "report.pdf".to_owned()),
            ("a/b/c.txt", "c.txt".to_owned()),
            ("..\\..\\evil.sh", "evil.sh".to_owned()),
            ("../../etc/passwd", "passwd".to_owned()),
            ("dir/", "dir".to_owned()),
            ("..", "file".to_owned()),
            ("...", "file".to_owned()),
            ("a..b", "a.b".to_owned()),
            ("name..", "name".to_owned()),
            ("bad\0na\u{1}me\u{7f}\n.txt", "badname.txt".to_owned()),
            ("\0\u{1b}", "file".to_owned()),
            (".hidden", "hidden".to_owned()),
            ("-rf", "rf".to_owned()),
            ("", "file".to_owned()),
            ("/", "file".to_owned()),
            ("my file (1).txt", "my_file_1_.txt".to_owned()),
            ("résumé.pdf", "r_sum_.pdf".to_owned()),
            ("a:b*c?.md", "a_b_c_.md".to_owned()),
            ("\u{202e}gpj.exe", "_gpj.exe".to_owned()),
            (long_stem.as_str(), "a".repeat(MAX_FILENAME_BYTES)),
            (long_with_extension.as_str(), expected_long_with_extension),
        ];
        for (input, expected) in cases {
            assert_eq!(sanitize_filename(input), expected, "input {input:?}");
        }
    }

    #[test]
    fn multibyte_names_are_capped_in_bytes() {
        let name = format!("{}.png", "é".repeat(300));
        let sanitized = sanitize_filename(&name);
        assert!(sanitized.len() <= MAX_FILENAME_BYTES, "{sanitized}");
        assert_eq!(sanitized, "_.png");
        let mixed = format!("{}.png", "aé".repeat(300));
        let sanitized = sanitize_filename(&mixed);
        assert_eq!(sanitized.len(), MAX_FILENAME_BYTES);
        assert!(sanitized.ends_with(".png"), "{sanitized}");
    }

    #[test]
    fn long_extensions_are_not_kept() {
        let name = format!("{}.{}", "a".repeat(200), "b".repeat(40));
        assert_eq!(sanitize_filename(&name), "a".repeat(MAX_FILENAME_BYTES));
    }

    #[test]
    fn idempotent() {
        let inputs = [
            "a/b/c.txt",
            "..\\..\\evil.sh",
            ".hidden",
            "x.y..z.",
            "__a__..__b",
            "-._-x",
            &format!("{}..{}", "q".repeat(119), "r".repeat(10)),
            &format!("{}.{}", "q".repeat(200), "r".repeat(3)),
            &"z.".repeat(200),
        ];
        for input in inputs {
            let once = sanitize_filename(input);
            assert_eq!(sanitize_filename(&once), once, "input {input:?}");
            assert!(!once.contains(".."), "{once}");
            assert!(!once.starts_with('.'), "{once}");
            assert!(once.len() <= MAX_FILENAME_BYTES, "{once}");
        }
    }
}
