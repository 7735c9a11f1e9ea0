//! Checks the architecture documentation against the tree: every repository path named in
//! `ARCHITECTURE.md`, in every other `ARCHITECTURE.md`, in `README.md` and in `docs/*.md` exists, every
//! relative link (and its `#section`) resolves, and `ARCHITECTURE.md` stays small enough to
//! read in one sitting.
//!
//! A path counts when it is written in backticks and starts with one of [`REPO_PREFIXES`], or
//! is one of the [`TOP_LEVEL_FILES`]; a word with a placeholder (`{key}`, `<root>`, `*`,
//! `$VAR`) or a URL is not a path. Fenced code blocks are not read.

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;

/// The largest `ARCHITECTURE.md`, in bytes: the overview stays short, and details go next to
/// the code they describe.
const MAX_ARCHITECTURE_BYTES: usize = 30_000;

/// The folders of the repository whose paths the documents name.
const REPO_PREFIXES: [&str; 5] = ["crates/", "docs/", "scripts/", "deploy/", ".ci/"];

/// The files at the top of the repository that the documents may name without a folder.
/// Other bare names (`SKILL.md`, `gateway.db`) are files of an Agent or an installation.
const TOP_LEVEL_FILES: [&str; 6] = [
    "ARCHITECTURE.md",
    "README.md",
    "Cargo.toml",
    "Cargo.lock",
    "clippy.toml",
    "rustfmt.toml",
];

/// Folders never searched for documents.
const SKIPPED_DIRS: [&str; 3] = ["target", "node_modules", "__pycache__"];

#[test]
fn every_path_and_link_in_the_architecture_documents_exists() {
    let root = repo_root();
    let documents = documents(&root);
    assert!(
        documents.contains(&root.join("ARCHITECTURE.md")),
        "no ARCHITECTURE.md at the repository root {}",
        root.display()
    );
    let mut broken = Vec::new();
    for document in &documents {
        let text = std::fs::read_to_string(document)
            .unwrap_or_else(|error| panic!("cannot read {}: {error}", document.display()));
        let relative = document.strip_prefix(&root).unwrap_or(document);
        for reference in references(&text) {
            if let Some(problem) = check(&root, document, &reference) {
                broken.push(format!(
                    "{}:{}: {problem}",
                    relative.display(),
                    reference.line
                ));
            }
        }
    }
    pretty_assertions::assert_eq!(broken, Vec::<String>::new());
}

#[test]
fn architecture_md_is_at_most_thirty_thousand_bytes() {
    let path = repo_root().join("ARCHITECTURE.md");
    let size = std::fs::metadata(&path)
        .unwrap_or_else(|error| panic!("cannot stat {}: {error}", path.display()))
        .len();
    assert!(
        size <= MAX_ARCHITECTURE_BYTES as u64,
        "ARCHITECTURE.md is {size} bytes, over {MAX_ARCHITECTURE_BYTES}: move details next to the code they describe"
    );
}

#[test]
fn references_are_read_from_backticks_and_links_only() {
    let text = "\
# Title

See `crates/gateway/store/src/lib.rs`, `scripts/test --fresh-install-check` and `README.md`.
Not paths: `gateway.db`, `SKILL.md`, `<root>/node/`, `crates/{name}`, `crates/*/src`, `$HOME/docs/x`, `https://example.com/docs/x`, `store::records`.
A [link](docs/operations.md#metrics), a [URL](https://example.com/), a [section](#title).

```sh
cat crates/not/read.rs
```
";
    let found: Vec<(usize, Kind, String)> = references(text)
        .into_iter()
        .map(|reference| (reference.line, reference.kind, reference.target))
        .collect();
    pretty_assertions::assert_eq!(
        found,
        vec![
            (
                3,
                Kind::Code,
                String::from("crates/gateway/store/src/lib.rs")
            ),
            (3, Kind::Code, String::from("scripts/test")),
            (3, Kind::Code, String::from("README.md")),
            (5, Kind::Link, String::from("docs/operations.md#metrics")),
            (5, Kind::Link, String::from("#title")),
        ]
    );
    pretty_assertions::assert_eq!(
        anchors("# Title\n## The `exec` sandbox\n## Logs, request ids and traces\n## Title\n"),
        vec![
            String::from("title"),
            String::from("the-exec-sandbox"),
            String::from("logs-request-ids-and-traces"),
            String::from("title-1"),
        ]
    );
}

/// How a document names a reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A repository path in backticks, relative to the repository root.
    Code,
    /// A Markdown link target, relative to the document's directory.
    Link,
}

/// One path or link a document names, with its 1-based line.
#[derive(Debug)]
struct Reference {
    line: usize,
    kind: Kind,
    target: String,
}

/// Returns the repository root: the nearest ancestor of this crate that holds `Cargo.lock`.
fn repo_root() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    for ancestor in manifest_dir.ancestors() {
        if ancestor.join("Cargo.lock").is_file() {
            return ancestor.to_path_buf();
        }
    }
    panic!("no Cargo.lock above {}", manifest_dir.display());
}

/// Returns the documents to check: every `ARCHITECTURE.md` in the tree, `README.md` and
/// `docs/*.md`, sorted.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir)
            .unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
        for entry in entries {
            let entry =
                entry.unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
            let name = entry.file_name();
            let name = name.to_string_lossy();
            let file_type = entry
                .file_type()
                .unwrap_or_else(|error| panic!("cannot stat {}: {error}", entry.path().display()));
            if file_type.is_dir() {
                if !name.starts_with('.') && !SKIPPED_DIRS.contains(&name.as_ref()) {
                    pending.push(entry.path());
                }
            } else if file_type.is_file() && name == "ARCHITECTURE.md" {
                found.push(entry.path());
            }
        }
    }
    found.push(root.join("README.md"));
    let docs = root.join("docs");
    for entry in std::fs::read_dir(&docs)
        .unwrap_or_else(|error| panic!("cannot list {}: {error}", docs.display()))
    {
        let path = entry
            .unwrap_or_else(|error| panic!("cannot list {}: {error}", docs.display()))
            .path();
        if path.extension().is_some_and(|extension| extension == "md") {
            found.push(path);
        }
    }
    found.sort();
    found
}

/// Returns the repository paths in backticks and the relative link targets of `text`, outside
/// fenced code blocks.
fn references(text: &str) -> Vec<Reference> {
    let mut found = Vec::new();
    let mut in_fence = false;
    for (line_idx, line) in text.lines().enumerate() {
        let line_number = line_idx + 1;
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        for span in code_spans(line) {
            for word in span.split_whitespace() {
                if is_repo_path(word) {
                    found.push(Reference {
                        line: line_number,
                        kind: Kind::Code,
                        target: word.to_owned(),
                    });
                }
            }
        }
        for target in link_targets(line) {
            if is_relative_link(target) {
                found.push(Reference {
                    line: line_number,
                    kind: Kind::Link,
                    target: target.to_owned(),
                });
            }
        }
    }
    found
}

/// Returns the contents of the inline code spans of one line (text between single backticks).
fn code_spans(line: &str) -> Vec<&str> {
    let mut spans = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find('`') {
        let after = &rest[start + 1..];
        let Some(end) = after.find('`') else {
            break;
        };
        spans.push(&after[..end]);
        rest = &after[end + 1..];
    }
    spans
}

/// Returns the targets of the Markdown links of one line (`[text](target)`).
fn link_targets(line: &str) -> Vec<&str> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(start) = rest.find("](") {
        let after = &rest[start + 2..];
        let Some(end) = after.find(')') else {
            break;
        };
        targets.push(after[..end].trim());
        rest = &after[end + 1..];
    }
    targets
}

/// Tells whether a word in backticks names a repository path: it starts with a repository
/// folder, or is one of [`TOP_LEVEL_FILES`], and holds no placeholder.
fn is_repo_path(word: &str) -> bool {
    let has_placeholder = word.contains("://")
        || word
            .chars()
            .any(|character| matches!(character, '{' | '}' | '<' | '>' | '*' | '$' | '?'));
    if has_placeholder {
        return false;
    }
    let in_repo_folder = REPO_PREFIXES.iter().any(|prefix| word.starts_with(prefix));
    in_repo_folder || TOP_LEVEL_FILES.contains(&word)
}

/// Tells whether a link target is relative to the document (not a URL or an e-mail address).
fn is_relative_link(target: &str) -> bool {
    !(target.is_empty() || target.contains("://") || target.starts_with("mailto:"))
}

/// Returns what is wrong with `reference` in `document`, or `None` when it resolves.
fn check(root: &Path, document: &Path, reference: &Reference) -> Option<String> {
    let (path, anchor) = match reference.target.split_once('#') {
        Some((path, anchor)) => (path, Some(anchor)),
        None => (reference.target.as_str(), None),
    };
    let resolved = match (reference.kind, path.is_empty()) {
        (_, true) => document.to_path_buf(),
        (Kind::Code, false) => root.join(path),
        (Kind::Link, false) => document.parent().unwrap_or(root).join(path),
    };
    if !resolved.exists() {
        return Some(format!("`{}` does not exist", reference.target));
    }
    let anchor = anchor?;
    if resolved
        .extension()
        .is_none_or(|extension| extension != "md")
    {
        return None;
    }
    let text = match std::fs::read_to_string(&resolved) {
        Ok(text) => text,
        Err(error) => return Some(format!("cannot read `{}`: {error}", reference.target)),
    };
    match anchors(&text).iter().any(|known| known == anchor) {
        true => None,
        false => Some(format!(
            "`{}` names a section that does not exist",
            reference.target
        )),
    }
}

/// Returns the anchors GitHub gives the headings of `text`: lower case, punctuation removed,
/// spaces as `-`, and `-1`, `-2`, ... after a repeated heading.
fn anchors(text: &str) -> Vec<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut found = Vec::new();
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let slug: String = title
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|character| match character {
                ' ' => Some('-'),
                '-' | '_' => Some(character),
                _ if character.is_alphanumeric() => Some(character),
                _ => None,
            })
            .collect();
        let count = seen.entry(slug.clone()).or_insert(0);
        match *count {
            0 => found.push(slug),
            n => found.push(format!("{slug}-{n}")),
        }
        *count += 1;
    }
    found
}
