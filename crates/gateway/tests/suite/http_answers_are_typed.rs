//! Every HTTP answer of the Gateway is a `gatehouse_api` type: no non-test source of the
//! `http` module builds JSON with `json!`. The one exception is the `details` of an audit row
//! (the arguments of `Audit::record` and `Audit::record_limited`), which are opaque by design.

use std::path::Path;
use std::path::PathBuf;

use syn::visit::Visit;

/// The methods whose arguments may be built with `json!`: the audit trail's `details`.
const AUDIT_METHODS: &[&str] = &["record", "record_limited"];

/// A `json!` found outside test code and audit rows, by line.
#[derive(Debug, PartialEq, Eq)]
struct Finding {
    line: usize,
}

/// Collects the `json!` invocations of one file, skipping `#[cfg(test)]` items and the
/// arguments of audit calls.
#[derive(Default)]
struct JsonScan {
    findings: Vec<Finding>,
}

/// True when the attributes hold `#[cfg(test)]` or `#[test]`.
fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("test")
            || (attr.path().is_ident("cfg")
                && attr
                    .parse_args::<syn::Ident>()
                    .is_ok_and(|ident| ident == "test"))
    })
}

impl JsonScan {
    /// Finds `json !` in the tokens of a macro that syn does not parse (`format!`, `vec!`, ...).
    fn check_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let mut previous_is_json = false;
        for tree in tokens {
            match tree {
                proc_macro2::TokenTree::Ident(ident) => {
                    previous_is_json = ident == "json";
                    continue;
                }
                proc_macro2::TokenTree::Punct(punct)
                    if previous_is_json && punct.as_char() == '!' =>
                {
                    self.findings.push(Finding {
                        line: punct.span().start().line,
                    });
                }
                proc_macro2::TokenTree::Group(group) => self.check_tokens(group.stream()),
                proc_macro2::TokenTree::Punct(_) | proc_macro2::TokenTree::Literal(_) => {}
            }
            previous_is_json = false;
        }
    }
}

impl<'ast> Visit<'ast> for JsonScan {
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

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        match AUDIT_METHODS.iter().any(|name| call.method == name) {
            // The receiver is still code that could answer; only the row's arguments are exempt.
            true => self.visit_expr(&call.receiver),
            false => syn::visit::visit_expr_method_call(self, call),
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        match mac.path.segments.last() {
            Some(segment) if segment.ident == "json" => self.findings.push(Finding {
                line: mac.path.segments[0].ident.span().start().line,
            }),
            Some(_) | None => self.check_tokens(mac.tokens.clone()),
        }
    }
}

/// Returns the `json!` findings of a source text.
fn scan(source: &str) -> Vec<Finding> {
    let file = syn::parse_file(source).unwrap();
    let mut scan = JsonScan::default();
    scan.visit_file(&file);
    scan.findings
}

/// Every `.rs` file under `dir`, sorted.
fn rust_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_sources(&path, out);
        } else if path.extension().is_some_and(|extension| extension == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_http_handler_builds_its_answer_with_json_macro() {
    let http = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/http");
    let mut sources = Vec::new();
    rust_sources(&http, &mut sources);
    assert!(
        sources.len() > 5,
        "the http module was not found at {http:?}"
    );
    let mut report = Vec::new();
    for path in &sources {
        let source = std::fs::read_to_string(path).unwrap();
        for finding in scan(&source) {
            report.push(format!("{}:{}", path.display(), finding.line));
        }
    }
    assert!(
        report.is_empty(),
        "these HTTP sources build JSON with json!; answer with a gatehouse_api type instead:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_scan_finds_json_in_code_and_nested_macros_but_not_in_tests_or_audit_rows() {
    let source = r#"
        fn answer() -> Json<Value> { Json(serde_json::json!({"a": 1})) }
        fn nested() -> String { format!("{}", json!({"b": 2})) }
        async fn audited(audit: &Audit) {
            audit.record("operator", "x", "succeeded", None, serde_json::json!({"c": 3})).await;
        }
        #[cfg(test)]
        mod tests { fn f() -> Value { serde_json::json!({}) } }
        #[test]
        fn g() { let _ = json!(null); }
    "#;
    assert_eq!(scan(source), vec![Finding { line: 2 }, Finding { line: 3 }]);
}
