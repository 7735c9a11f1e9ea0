//! The error-code catalogue is the one place that names a stable code.
//!
//! - `docs/errors.md` is generated from [`ErrorCode`]; the test fails when the file is stale and
//!   rewrites it when `GATEHOUSE_BLESS=1` is set.
//! - Every non-test Rust source of the workspace is parsed, and a string literal that is a
//!   catalogue code, or looks like one (upper snake case), fails the test unless it is on the
//!   short allow-list of upper-case strings that are not codes.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;
use std::path::PathBuf;

use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::ErrorGroup;
use syn::visit::Visit;

/// The environment variable that makes the test rewrite `docs/errors.md` instead of failing.
const BLESS_ENV: &str = "GATEHOUSE_BLESS";

/// Upper-case string literals that are not error codes, with the reason each is one.
/// Environment variables of the project itself (`GATEHOUSE_…`) and OpenTelemetry's (`OTEL_…`)
/// are allowed by prefix.
const NOT_CODES: &[(&str, &str)] = &[
    (
        "GIT_DIR",
        "a git variable the node host clears before it runs git",
    ),
    (
        "GIT_WORK_TREE",
        "a git variable the node host clears before it runs git",
    ),
    (
        "GIT_INDEX_FILE",
        "a git variable the node host clears before it runs git",
    ),
    (
        "GIT_OBJECT_DIRECTORY",
        "a git variable the node host clears before it runs git",
    ),
    (
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "a git variable the node host clears before it runs git",
    ),
    (
        "GIT_COMMON_DIR",
        "a git variable the node host clears before it runs git",
    ),
    (
        "GIT_NAMESPACE",
        "a git variable the node host clears before it runs git",
    ),
    (
        "GIT_TERMINAL_PROMPT",
        "the git variable that keeps it from asking for credentials",
    ),
    (
        "GIT_ALLOW_PROTOCOL",
        "the git variable naming the transports it may use",
    ),
    (
        "GIT_SSH_COMMAND",
        "the git variable the node host sets to pin ssh to a checked address",
    ),
    (
        "GIT_SSH",
        "the git variable the node host clears when it pins ssh",
    ),
    (
        "OPENAI_API_KEY",
        "the default name of the model key variable",
    ),
    (
        "ANTHROPIC_API_KEY",
        "the default name of the model key variable for an anthropic: model",
    ),
    (
        "CODEX_HOME",
        "the environment variable Codex reads its home from",
    ),
    ("RUST_LOG", "the log filter variable of Codex"),
    (
        "AWS_PROFILE",
        "the AWS variable naming the shared-file profile",
    ),
    (
        "AWS_SHARED_CREDENTIALS_FILE",
        "the AWS variable naming the shared credentials file",
    ),
    (
        "AWS_CONFIG_FILE",
        "the AWS variable naming the shared config file",
    ),
    ("AWS_REGION", "the AWS variable naming the region"),
    (
        "AWS_DEFAULT_REGION",
        "the older AWS variable naming the region",
    ),
    ("AWS_ENDPOINT_URL", "the AWS variable naming the endpoint"),
    (
        "AWS_ENDPOINT",
        "object_store's variable naming the endpoint",
    ),
    (
        "AWS_ALLOW_HTTP",
        "the S3 client's variable that allows a plain-HTTP endpoint",
    ),
    ("AWS_ACCESS_KEY_ID", "the S3 client's access key variable"),
    (
        "AWS_SECRET_ACCESS_KEY",
        "the S3 client's secret key variable",
    ),
    ("XDG_DATA_HOME", "the platform data directory variable"),
    (
        "CARGO_PKG_VERSION",
        "the variable `env!` reads the crate version from",
    ),
    (
        "RLIMIT_AS",
        "the name of a resource limit in sandbox messages",
    ),
    (
        "RLIMIT_NPROC",
        "the name of a resource limit in sandbox messages",
    ),
    (
        "RLIMIT_NOFILE",
        "the name of a resource limit in sandbox messages",
    ),
    (
        "RLIMIT_FSIZE",
        "the name of a resource limit in sandbox messages",
    ),
    (
        "RLIMIT_CPU",
        "the name of a resource limit in sandbox messages",
    ),
];

/// The prefix of the project's own environment variables, which are not codes.
const ENV_PREFIX: &str = "GATEHOUSE_";

/// The prefix of OpenTelemetry's standard environment variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
/// `OTEL_SERVICE_NAME`, ...), which the processes read to export traces.
const OTEL_ENV_PREFIX: &str = "OTEL_";

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .unwrap()
}

/// Renders `docs/errors.md`: one table per group, in the order of the catalogue.
fn render_errors_md() -> String {
    let mut out = String::from(
        "# Error codes\n\n\
         Every error the Gateway answers over HTTP has the shape \
         `{\"error\":{\"code\",\"message\",\"details\"?}}`, and every refusal on the node link, every \
         failed turn and tool call carries one of the stable codes below.\n\
         A client matches on the code, never on the message.\n\
         The status is the one the Gateway answers with the code over HTTP; a code that never \
         reaches an HTTP answer on its own has the status a Gateway relaying it would use.\n\
         A code a newer peer sends that this build does not know is passed through as text.\n\n\
         This file is generated from `gatehouse_protocol::error::ErrorCode` \
         (`crates/shared/protocol/src/error.rs`); after changing the catalogue, regenerate it with \
         `GATEHOUSE_BLESS=1 cargo test -p gatehouse-protocol --test error_catalogue`.\n",
    );
    for group in ErrorGroup::ALL {
        let codes: Vec<ErrorCode> = ErrorCode::ALL
            .iter()
            .copied()
            .filter(|code| code.group() == *group)
            .collect();
        write!(
            out,
            "\n## {}\n\n| Code | HTTP | Meaning |\n|---|---|---|\n",
            group.title()
        )
        .unwrap();
        for code in codes {
            writeln!(
                out,
                "| `{}` | {} | {} |",
                code.as_str(),
                code.http_status(),
                code.meaning().replace('|', "\\|")
            )
            .unwrap();
        }
    }
    out
}

#[test]
fn docs_errors_md_is_generated_from_the_catalogue() {
    let path = workspace_root().join("docs/errors.md");
    let expected = render_errors_md();
    if std::env::var_os(BLESS_ENV).is_some_and(|value| value == "1") {
        std::fs::write(&path, &expected).unwrap();
        return;
    }
    let actual = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        actual == expected,
        "docs/errors.md is stale: it does not match the catalogue in crates/shared/protocol/src/error.rs; \
         regenerate it with `{BLESS_ENV}=1 cargo test -p gatehouse-protocol --test error_catalogue`"
    );
}

#[test]
fn every_code_has_one_wire_text_an_error_status_and_a_meaning() {
    let mut texts = BTreeSet::new();
    for code in ErrorCode::ALL {
        let text = code.as_str();
        assert!(texts.insert(text), "{text} appears twice in the catalogue");
        assert!(
            looks_like_code(text) || is_word(text),
            "{text} is not upper snake case"
        );
        assert_eq!(text.parse::<ErrorCode>(), Ok(*code));
        assert_eq!(*code, text, "a code compares equal to its wire text");
        assert!(
            (400..=599).contains(&code.http_status()),
            "{text} has status {}, not an error status",
            code.http_status()
        );
        let meaning = code.meaning();
        assert!(
            !meaning.is_empty() && !meaning.contains('\n') && meaning.ends_with('.'),
            "{text} needs a one-line meaning that ends with a full stop: {meaning:?}"
        );
    }
    for group in ErrorGroup::ALL {
        assert!(
            ErrorCode::ALL.iter().any(|code| code.group() == *group),
            "group {group:?} has no code"
        );
    }
    assert_eq!(ErrorCode::NotFound.http_status(), 404);
    assert_eq!(ErrorCode::DependencyUnavailable.http_status(), 503);
    assert!("NO_SUCH_CODE".parse::<ErrorCode>().is_err());
}

/// True for text shaped like a multi-word stable code, for example `NOT_FOUND`.
fn looks_like_code(text: &str) -> bool {
    let mut words = text.split('_');
    let first = words.next().unwrap_or_default();
    let word_ok = |word: &str| {
        !word.is_empty()
            && word
                .bytes()
                .all(|byte| byte.is_ascii_uppercase() || byte.is_ascii_digit())
    };
    first.len() >= 2
        && first.as_bytes()[0].is_ascii_uppercase()
        && word_ok(first)
        && text.contains('_')
        && words.all(word_ok)
}

/// True for one upper-case word, for example `TIMEOUT`.
fn is_word(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_uppercase())
}

/// One string literal that looks like a stable code, where it was found.
struct Finding {
    line: usize,
    text: String,
}

/// Collects the suspicious string literals of one file, skipping `#[cfg(test)]` items.
struct LiteralScan {
    codes: BTreeSet<&'static str>,
    findings: Vec<Finding>,
}

impl LiteralScan {
    fn check(&mut self, text: &str, line: usize) {
        let is_code = self.codes.contains(text);
        let allowed = text.starts_with(ENV_PREFIX)
            || text.starts_with(OTEL_ENV_PREFIX)
            || NOT_CODES.iter().any(|(name, _)| *name == text);
        if is_code || (looks_like_code(text) && !allowed) {
            self.findings.push(Finding {
                line,
                text: text.to_owned(),
            });
        }
    }

    /// Checks the literals inside a token stream that syn does not parse (macro input, the
    /// arguments of an attribute).
    fn check_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        for tree in tokens {
            match tree {
                proc_macro2::TokenTree::Group(group) => self.check_tokens(group.stream()),
                proc_macro2::TokenTree::Literal(literal) => {
                    let line = literal.span().start().line;
                    if let syn::Lit::Str(text) = syn::Lit::new(literal) {
                        self.check(&text.value(), line);
                    }
                }
                proc_macro2::TokenTree::Ident(_) | proc_macro2::TokenTree::Punct(_) => {}
            }
        }
    }
}

/// True when the attributes hold `#[cfg(test)]`.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg")
            && attr
                .parse_args::<syn::Ident>()
                .is_ok_and(|ident| ident == "test")
    }) || attrs.iter().any(|attr| attr.path().is_ident("test"))
}

impl<'ast> Visit<'ast> for LiteralScan {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_fn(self, item);
        }
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !is_test_only(&item.attrs) {
            syn::visit::visit_item_impl(self, item);
        }
    }

    fn visit_lit_str(&mut self, literal: &'ast syn::LitStr) {
        self.check(&literal.value(), literal.span().start().line);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.check_tokens(mac.tokens.clone());
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        match &attr.meta {
            syn::Meta::List(list) => self.check_tokens(list.tokens.clone()),
            syn::Meta::NameValue(_) | syn::Meta::Path(_) => syn::visit::visit_attribute(self, attr),
        }
    }
}

/// Every `.rs` file under `dir`, sorted, without the `*_tests.rs` files.
fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs")
            && !path
                .file_stem()
                .and_then(|stem| stem.to_str())
                .is_some_and(|stem| stem.ends_with("_tests"))
        {
            out.push(path);
        }
    }
}

#[test]
fn no_stable_code_literal_outside_the_catalogue() {
    let root = workspace_root();
    let catalogue = root.join("crates/shared/protocol/src/error.rs");
    let mut files = Vec::new();
    // `crates/<side>/<crate>/src`: every crate of every side of the split.
    let mut crates: Vec<PathBuf> = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .flat_map(|side| std::fs::read_dir(side.unwrap().path()).unwrap())
        .map(|entry| entry.unwrap().path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    assert!(
        crates.len() > 10,
        "the crates were not found under {root:?}"
    );
    for src in &crates {
        rust_sources(src, &mut files);
    }
    let mut report = String::new();
    for file in files.iter().filter(|file| **file != catalogue) {
        let text = std::fs::read_to_string(file).unwrap();
        let syntax = syn::parse_file(&text)
            .unwrap_or_else(|error| panic!("{}: cannot parse: {error}", file.display()));
        let mut scan = LiteralScan {
            codes: ErrorCode::ALL.iter().map(|code| code.as_str()).collect(),
            findings: Vec::new(),
        };
        scan.visit_file(&syntax);
        for finding in scan.findings {
            let relative = file.strip_prefix(&root).unwrap_or(file);
            writeln!(
                report,
                "{}:{}: \"{}\"",
                relative.display(),
                finding.line,
                finding.text
            )
            .unwrap();
        }
    }
    assert!(
        report.is_empty(),
        "string literals that look like stable codes appear outside the catalogue; use a \
         gatehouse_protocol::error::ErrorCode variant (add one with a doc comment if the code is \
         new), or, for an upper-case string that is not a code, add it to NOT_CODES in this \
         test:\n{report}"
    );
}

#[test]
fn the_scan_finds_codes_in_code_macros_and_attributes_but_not_in_tests() {
    let source = r#"
        fn a() -> &'static str { "NOT_FOUND" }
        fn b() { let _ = format!("{}", "SOME_NEW_CODE"); }
        #[arg(default_value = "ANOTHER_CODE")]
        struct C;
        fn d() { std::env::var("GATEHOUSE_URL"); std::env::var("OPENAI_API_KEY"); }
        fn e() -> &'static str { "TIMEOUT" }
        #[cfg(test)]
        mod tests { fn f() -> &'static str { "NOT_FOUND" } }
    "#;
    let mut scan = LiteralScan {
        codes: ErrorCode::ALL.iter().map(|code| code.as_str()).collect(),
        findings: Vec::new(),
    };
    scan.visit_file(&syn::parse_file(source).unwrap());
    let found: Vec<(usize, &str)> = scan
        .findings
        .iter()
        .map(|finding| (finding.line, finding.text.as_str()))
        .collect();
    assert_eq!(
        found,
        vec![
            (2, "NOT_FOUND"),
            (3, "SOME_NEW_CODE"),
            (4, "ANOTHER_CODE"),
            (7, "TIMEOUT")
        ]
    );
}
