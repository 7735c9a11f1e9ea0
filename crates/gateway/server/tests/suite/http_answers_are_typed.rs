//! Every HTTP answer of the Gateway is a `gatehouse_api` type: no non-test source of the
//! `http` module builds JSON with `json!`. The one exception is the `details` of an audit row
//! (the arguments of `Audit::record`, `Audit::record_caller` and `Audit::record_limited`, the
//! `details` of an `AuditRow` and the arguments of the link's `audit_node_refusal`), which are
//! opaque by design.
//!
//! Likewise every result that goes to a node or comes from one is a serialized type: no
//! non-test source of the Gateway tools (`src/tools.rs`), of the link (`src/link`) or of the
//! Harness (`crates/harness/node/src`)
//! builds JSON with `json!`, except the functions of [`NODE_ALLOWED`], each of which builds a
//! payload that is opaque by design.

use std::path::Path;
use std::path::PathBuf;

use syn::visit::Visit;

/// The methods whose arguments may be built with `json!`: the audit trail's `details`.
const AUDIT_METHODS: &[&str] = &["record", "record_caller", "record_limited"];

/// The functions whose arguments may be built with `json!`: the link's and the channels' audit
/// helpers, whose last argument is the row's `details`.
const AUDIT_FUNCTIONS: &[&str] = &["audit_node_refusal", "audit_channel"];

/// The struct of an audit row, whose `details` field may be built with `json!`.
const AUDIT_ROW: &str = "AuditRow";

/// The functions of the Gateway tools and the Harness that may build JSON with `json!`, as
/// (source file under `crates/`, `Type::function` or `function`, why the payload is opaque).
const NODE_ALLOWED: &[(&str, &str, &str)] = &[(
    "harness/node/src/worker_child.rs",
    "GatewayToolProxy::call",
    "the arguments of a model's tool call, relayed to a Gateway tool as the model wrote them: \
     `{}` for arguments that are not JSON, `{\"input\"}` for a freeform call",
)];

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
    /// The enclosing function of each finding (`Type::function` inside an `impl`), or an empty
    /// string outside any function.
    items: Vec<String>,
    /// The `impl` and function names around the current node, innermost last.
    scope: Vec<String>,
    /// The files of `#[cfg(test)]` modules declared out of line (`#[path = "foo_tests.rs"]` or
    /// `mod tests;`), relative to the declaring file's directory.
    test_files: Vec<PathBuf>,
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

/// Returns the name of an `impl`'s type (`GatewayToolProxy` for
/// `impl Tool for GatewayToolProxy`).
fn impl_name(item: &syn::ItemImpl) -> String {
    match &*item.self_ty {
        syn::Type::Path(path) => path
            .path
            .segments
            .last()
            .map(|segment| segment.ident.to_string())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

impl JsonScan {
    /// Records a finding at `line` in the current function.
    fn found(&mut self, line: usize) {
        self.findings.push(Finding { line });
        self.items.push(self.scope.join("::"));
    }

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
                    self.found(punct.span().start().line);
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
            return;
        }
        if item.content.is_some() {
            return;
        }
        let path = item.attrs.iter().find_map(|attr| match &attr.meta {
            syn::Meta::NameValue(pair) if pair.path.is_ident("path") => match &pair.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(path),
                    ..
                }) => Some(PathBuf::from(path.value())),
                _ => None,
            },
            _ => None,
        });
        match path {
            Some(path) => self.test_files.push(path),
            None => {
                let name = item.ident.to_string();
                self.test_files.push(PathBuf::from(format!("{name}.rs")));
                self.test_files.push(Path::new(&name).join("mod.rs"));
            }
        }
    }

    fn visit_item_fn(&mut self, item: &'ast syn::ItemFn) {
        if !is_test_only(&item.attrs) {
            self.scope.push(item.sig.ident.to_string());
            syn::visit::visit_item_fn(self, item);
            self.scope.pop();
        }
    }

    fn visit_item_impl(&mut self, item: &'ast syn::ItemImpl) {
        if !is_test_only(&item.attrs) {
            self.scope.push(impl_name(item));
            syn::visit::visit_item_impl(self, item);
            self.scope.pop();
        }
    }

    fn visit_impl_item_fn(&mut self, item: &'ast syn::ImplItemFn) {
        if !is_test_only(&item.attrs) {
            self.scope.push(item.sig.ident.to_string());
            syn::visit::visit_impl_item_fn(self, item);
            self.scope.pop();
        }
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        match AUDIT_METHODS.iter().any(|name| call.method == name) {
            // The receiver is still code that could answer; only the row's arguments are exempt.
            true => self.visit_expr(&call.receiver),
            false => syn::visit::visit_expr_method_call(self, call),
        }
    }

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        let audit_helper = matches!(&*call.func, syn::Expr::Path(path)
            if path.path.segments.last().is_some_and(|last| AUDIT_FUNCTIONS.iter().any(|name| last.ident == name)));
        match audit_helper {
            true => {}
            false => syn::visit::visit_expr_call(self, call),
        }
    }

    fn visit_expr_struct(&mut self, row: &'ast syn::ExprStruct) {
        let is_audit_row = row
            .path
            .segments
            .last()
            .is_some_and(|last| last.ident == AUDIT_ROW);
        for field in &row.fields {
            let is_details = matches!(&field.member, syn::Member::Named(name) if name == "details");
            if !(is_audit_row && is_details) {
                self.visit_expr(&field.expr);
            }
        }
        if let Some(rest) = &row.rest {
            self.visit_expr(rest);
        }
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        match mac.path.segments.last() {
            Some(segment) if segment.ident == "json" => {
                self.found(mac.path.segments[0].ident.span().start().line);
            }
            Some(_) | None => self.check_tokens(mac.tokens.clone()),
        }
    }
}

/// Returns the `json!` findings of a source text.
fn scan(source: &str) -> Vec<Finding> {
    scan_file(source).findings
}

/// Returns the whole scan of a source text: findings, their functions and its test files.
fn scan_file(source: &str) -> JsonScan {
    let file = syn::parse_file(source).unwrap();
    let mut scan = JsonScan::default();
    scan.visit_file(&file);
    scan
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
        fn row() -> AuditRow { AuditRow { actor: "a", details: json!({"d": 4}) } }
        fn not_a_row() -> Other { Other { details: json!({"e": 5}) } }
        fn helper() { audit_node_refusal(context, "x", json!({"f": 6})); frame(json!({"g": 7})); }
    "#;
    assert_eq!(
        scan(source),
        vec![
            Finding { line: 2 },
            Finding { line: 3 },
            Finding { line: 12 },
            Finding { line: 13 }
        ]
    );
}

#[test]
fn no_node_bound_result_is_built_with_json_macro() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut sources = vec![crates.join("gateway/server/src/tools.rs")];
    rust_sources(&crates.join("gateway/server/src/link"), &mut sources);
    rust_sources(&crates.join("harness/node/src"), &mut sources);
    assert!(
        sources.len() > 10,
        "the harness sources were not found under {crates:?}"
    );
    let scans: Vec<(PathBuf, JsonScan)> = sources
        .into_iter()
        .map(|path| {
            let scan = scan_file(&std::fs::read_to_string(&path).unwrap());
            (path, scan)
        })
        .collect();
    let test_files: Vec<PathBuf> = scans
        .iter()
        .flat_map(|(path, scan)| {
            let dir = path.parent().unwrap().to_owned();
            scan.test_files.iter().map(move |file| dir.join(file))
        })
        .collect();
    assert!(
        test_files
            .iter()
            .any(|file| file.ends_with("harness/node/src/setup_code_tests.rs")),
        "the out-of-line test modules were not recognized: {test_files:?}"
    );
    let mut report = Vec::new();
    let mut allowed_used = vec![false; NODE_ALLOWED.len()];
    for (path, scan) in &scans {
        if test_files.contains(path) {
            continue;
        }
        let file = path.strip_prefix(&crates).unwrap();
        for (finding, item) in scan.findings.iter().zip(&scan.items) {
            let allowed = NODE_ALLOWED
                .iter()
                .position(|(allowed_file, allowed_item, _)| {
                    file == Path::new(allowed_file) && item == allowed_item
                });
            match allowed {
                Some(idx) => allowed_used[idx] = true,
                None => report.push(format!("{}:{} in {item}", file.display(), finding.line)),
            }
        }
    }
    assert!(
        report.is_empty(),
        "these sources build a node-bound result with json!; serialize a protocol type instead \
         (or, for a genuinely opaque payload, allow its function in NODE_ALLOWED with a reason):\n{}",
        report.join("\n")
    );
    let stale: Vec<&str> = NODE_ALLOWED
        .iter()
        .zip(&allowed_used)
        .filter(|(_, used)| !**used)
        .map(|((_, item, _), _)| *item)
        .collect();
    assert!(
        stale.is_empty(),
        "these NODE_ALLOWED entries match no json! any more; remove them: {stale:?}"
    );
}

#[test]
fn the_scan_names_the_function_of_each_finding_and_the_out_of_line_test_files() {
    let source = r#"
        fn free() -> Value { json!({}) }
        impl Tool for Proxy {
            fn call(&self) -> Value { serde_json::json!({"input": 1}) }
        }
        #[cfg(test)]
        #[path = "proxy_tests.rs"]
        mod tests;
        #[cfg(test)]
        mod more;
    "#;
    let scan = scan_file(source);
    assert_eq!(
        scan.findings,
        vec![Finding { line: 2 }, Finding { line: 4 }]
    );
    assert_eq!(
        scan.items,
        vec!["free".to_owned(), "Proxy::call".to_owned()]
    );
    assert_eq!(
        scan.test_files,
        vec![
            PathBuf::from("proxy_tests.rs"),
            PathBuf::from("more.rs"),
            Path::new("more").join("mod.rs")
        ]
    );
}
