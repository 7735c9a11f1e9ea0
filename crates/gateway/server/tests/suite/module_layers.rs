//! The Gateway's modules are layered: a module imports only from its own layer or lower ones.
//!
//! The layers are the numbered list under `# Layers` in the crate's doc comment (`src/lib.rs`),
//! one line per layer, lowest first, each line naming its modules in backquotes before its
//! first colon (`crate` is the root, `lib.rs`). This test reads them from there, walks the
//! crate's module tree from `src/lib.rs` (following `mod` declarations and their `#[path]`), and
//! resolves every path that starts with `crate::`, `super::` or `self::` (in `use` items,
//! expressions, types, patterns and macro arguments, test code included) to the top-level module
//! it reaches. A path that reaches a module of a higher layer fails the test, with the file, the
//! line, the path and the rule it breaks. Doc comments are not code and are not scanned.

use std::collections::BTreeMap;
use std::path::Path;
use std::path::PathBuf;

use pretty_assertions::assert_eq;
use syn::visit::Visit;

/// The name that stands for the crate root in the layers list.
const ROOT: &str = "crate";

/// A path found in the source that starts at the crate root, or climbs to it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Reference {
    line: usize,
    /// The path as written, `::`-joined (`crate::http::error::ApiError`).
    written: String,
    /// The absolute module path it resolves to, without `crate` (`["http", "error", "ApiError"]`).
    resolved: Vec<String>,
}

/// Collects the crate-relative paths of one file, tracking the inline modules it is in.
struct ReferenceScan {
    /// The absolute path of the module the visitor is in (empty at the root).
    module: Vec<String>,
    references: Vec<Reference>,
}

impl ReferenceScan {
    /// Records `segments` (as written, the first one `crate`, `super` or `self`) if they start
    /// at the root or climb to it; other paths name a local, a child module or another crate.
    fn record(&mut self, line: usize, segments: &[String]) {
        let Some(first) = segments.first() else {
            return;
        };
        let resolved = match first.as_str() {
            "crate" => segments[1..].to_vec(),
            "self" | "super" => {
                let mut resolved = self.module.clone();
                let mut rest = segments;
                if rest[0] == "self" {
                    rest = &rest[1..];
                }
                while rest.first().is_some_and(|segment| segment == "super") {
                    // `super` above the root does not compile; stay at the root.
                    resolved.pop();
                    rest = &rest[1..];
                }
                resolved.extend(rest.iter().cloned());
                resolved
            }
            _ => return,
        };
        self.references.push(Reference {
            line,
            written: segments.join("::"),
            resolved,
        });
    }

    /// Finds `crate::a::b`, `super::a` and `self::a` in the tokens of a macro that syn does not
    /// parse (`format!`, `assert_eq!`, `tokio::select!`, ...).
    fn check_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        let trees: Vec<proc_macro2::TokenTree> = tokens.into_iter().collect();
        let mut idx = 0;
        while idx < trees.len() {
            match &trees[idx] {
                proc_macro2::TokenTree::Group(group) => self.check_tokens(group.stream()),
                proc_macro2::TokenTree::Ident(ident)
                    if ident == "crate" || ident == "super" || ident == "self" =>
                {
                    let line = ident.span().start().line;
                    let mut segments = vec![ident.to_string()];
                    while let Some(next) = path_segment_after(&trees, idx) {
                        segments.push(next);
                        idx += 3;
                    }
                    if segments.len() > 1 {
                        self.record(line, &segments);
                    }
                }
                proc_macro2::TokenTree::Ident(_)
                | proc_macro2::TokenTree::Punct(_)
                | proc_macro2::TokenTree::Literal(_) => {}
            }
            idx += 1;
        }
    }
}

/// Returns the identifier of `:: ident` right after `trees[idx]`, if there is one.
fn path_segment_after(trees: &[proc_macro2::TokenTree], idx: usize) -> Option<String> {
    match trees.get(idx + 1..idx + 4)? {
        [
            proc_macro2::TokenTree::Punct(first),
            proc_macro2::TokenTree::Punct(second),
            proc_macro2::TokenTree::Ident(ident),
        ] if first.as_char() == ':' && second.as_char() == ':' => Some(ident.to_string()),
        _ => None,
    }
}

/// Flattens a `use` tree into its paths (a group gives one path per member), each as
/// (segments, line of the first segment).
fn use_paths(tree: &syn::UseTree, prefix: &mut Vec<String>, out: &mut Vec<(Vec<String>, usize)>) {
    let line = |ident: &syn::Ident| ident.span().start().line;
    match tree {
        syn::UseTree::Path(path) => {
            prefix.push(path.ident.to_string());
            use_paths(&path.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(name) => {
            let mut segments = prefix.clone();
            segments.push(name.ident.to_string());
            out.push((segments, line(&name.ident)));
        }
        syn::UseTree::Rename(rename) => {
            let mut segments = prefix.clone();
            segments.push(rename.ident.to_string());
            out.push((segments, line(&rename.ident)));
        }
        syn::UseTree::Glob(glob) => {
            out.push((prefix.clone(), glob.star_token.spans[0].start().line));
        }
        syn::UseTree::Group(group) => {
            for tree in &group.items {
                use_paths(tree, prefix, out);
            }
        }
    }
}

impl<'ast> Visit<'ast> for ReferenceScan {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        // An out-of-line module is scanned as its own file.
        if item.content.is_some() {
            self.module.push(item.ident.to_string());
            syn::visit::visit_item_mod(self, item);
            self.module.pop();
        }
    }

    fn visit_item_use(&mut self, item: &'ast syn::ItemUse) {
        let mut paths = Vec::new();
        use_paths(&item.tree, &mut Vec::new(), &mut paths);
        for (segments, line) in paths {
            self.record(line, &segments);
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let segments: Vec<String> = path
            .segments
            .iter()
            .map(|segment| segment.ident.to_string())
            .collect();
        if let Some(first) = path.segments.first() {
            self.record(first.ident.span().start().line, &segments);
        }
        syn::visit::visit_path(self, path);
    }

    /// `pub(crate)` and `pub(super)` say who may see an item; they import nothing.
    fn visit_visibility(&mut self, _visibility: &'ast syn::Visibility) {}

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        self.check_tokens(mac.tokens.clone());
    }
}

/// Returns the crate-relative references of `source`, a file whose items are in `module`.
fn references(source: &str, module: &[String]) -> Vec<Reference> {
    let file = syn::parse_file(source).unwrap();
    let mut scan = ReferenceScan {
        module: module.to_vec(),
        references: Vec::new(),
    };
    scan.visit_file(&file);
    scan.references
}

/// A source file of the crate and the module its items are in.
#[derive(Debug)]
struct SourceFile {
    path: PathBuf,
    module: Vec<String>,
}

/// Returns the `#[path = "…"]` of a module declaration, if it has one.
fn path_attribute(item: &syn::ItemMod) -> Option<PathBuf> {
    item.attrs.iter().find_map(|attr| match &attr.meta {
        syn::Meta::NameValue(pair) if pair.path.is_ident("path") => match &pair.value {
            syn::Expr::Lit(syn::ExprLit {
                lit: syn::Lit::Str(path),
                ..
            }) => Some(PathBuf::from(path.value())),
            _ => None,
        },
        _ => None,
    })
}

/// Adds `file` (whose items are in `module`) and every file its `mod` declarations load to
/// `out`, the way rustc finds them.
fn module_files(file: &Path, module: Vec<String>, out: &mut Vec<SourceFile>) {
    let source = std::fs::read_to_string(file)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", file.display()));
    let parsed = syn::parse_file(&source).unwrap();
    let dir = file.parent().unwrap();
    // `lib.rs` and `mod.rs` own their directory; `foo.rs` keeps its children in `foo/`.
    let owns_dir = matches!(
        file.file_name().and_then(|name| name.to_str()),
        Some("lib.rs" | "mod.rs")
    );
    let children_dir = match owns_dir {
        true => dir.to_path_buf(),
        false => dir.join(file.file_stem().unwrap()),
    };
    out.push(SourceFile {
        path: file.to_path_buf(),
        module: module.clone(),
    });
    declared_modules(&parsed.items, dir, &children_dir, &module, out);
}

/// Follows the `mod` declarations of `items`, which are in `module`, whose children without
/// a `#[path]` live in `children_dir`.
fn declared_modules(
    items: &[syn::Item],
    file_dir: &Path,
    children_dir: &Path,
    module: &[String],
    out: &mut Vec<SourceFile>,
) {
    for item in items {
        let syn::Item::Mod(item) = item else {
            continue;
        };
        let name = item.ident.to_string();
        let mut child = module.to_vec();
        child.push(name.clone());
        if let Some((_, items)) = &item.content {
            declared_modules(items, file_dir, &children_dir.join(&name), &child, out);
            continue;
        }
        let file = match path_attribute(item) {
            Some(path) => file_dir.join(path),
            None => {
                let flat = children_dir.join(format!("{name}.rs"));
                match flat.exists() {
                    true => flat,
                    false => children_dir.join(&name).join("mod.rs"),
                }
            }
        };
        module_files(&file, child, out);
    }
}

/// The layers of `# Layers` in the crate's doc comment, lowest first: each line's
/// backquoted names before its first colon.
fn layers(lib_source: &str) -> Vec<Vec<String>> {
    let mut layers = Vec::new();
    let mut in_section = false;
    for line in lib_source.lines() {
        let Some(doc) = line.strip_prefix("//!") else {
            continue;
        };
        let doc = doc.trim();
        if doc.starts_with('#') {
            in_section = doc == "# Layers";
            continue;
        }
        if !in_section {
            continue;
        }
        let Some((number, rest)) = doc.split_once(". ") else {
            continue;
        };
        if number.is_empty() || !number.chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        assert_eq!(
            number.parse::<usize>().unwrap(),
            layers.len() + 1,
            "the layers in src/lib.rs are numbered 1, 2, 3, … in order: {doc}"
        );
        let names = rest.split_once(':').map_or(rest, |(names, _)| names);
        let modules: Vec<String> = names
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        assert!(
            !modules.is_empty(),
            "a layer in src/lib.rs names no module before its colon: {doc}"
        );
        layers.push(modules);
    }
    layers
}

/// Returns the top-level module a resolved path is in: its first segment when that is a
/// module of the root, else the root itself (an item of `lib.rs`).
fn top_module<'a>(resolved: &'a [String], modules: &BTreeMap<String, usize>) -> &'a str {
    match resolved.first() {
        Some(first) if first != ROOT && modules.contains_key(first) => first,
        Some(_) | None => ROOT,
    }
}

/// The breaches of the layering in the crate at `crate_dir`, one line each.
fn breaches(crate_dir: &Path) -> Vec<String> {
    let lib = crate_dir.join("src/lib.rs");
    let lib_source = std::fs::read_to_string(&lib).unwrap();
    let layers = layers(&lib_source);
    assert!(
        layers.len() > 1,
        "src/lib.rs lists no layers under `# Layers`"
    );
    let mut layer_of = BTreeMap::new();
    for (idx, modules) in layers.iter().enumerate() {
        for module in modules {
            let previous = layer_of.insert(module.clone(), idx + 1);
            assert_eq!(
                previous, None,
                "module `{module}` is listed in two layers of src/lib.rs"
            );
        }
    }
    let mut files = Vec::new();
    module_files(&lib, Vec::new(), &mut files);
    let mut declared: Vec<String> = files
        .iter()
        .filter(|file| file.module.len() == 1)
        .map(|file| file.module[0].clone())
        .collect();
    declared.push(ROOT.to_owned());
    declared.sort();
    let mut listed: Vec<String> = layer_of.keys().cloned().collect();
    listed.sort();
    assert_eq!(
        listed, declared,
        "the layers in src/lib.rs must list every module the root declares, and `crate`, once"
    );
    let mut report = Vec::new();
    for file in &files {
        let from = file.module.first().map_or(ROOT, String::as_str);
        let from_layer = layer_of[from];
        let source = std::fs::read_to_string(&file.path).unwrap();
        for reference in references(&source, &file.module) {
            let to = top_module(&reference.resolved, &layer_of);
            let to_layer = layer_of[to];
            if to_layer > from_layer {
                let relative = file.path.strip_prefix(crate_dir).unwrap_or(&file.path);
                report.push(format!(
                    "{}:{}: `{from}` (layer {from_layer}) uses `{}`, which is in `{to}` (layer {to_layer}); a module may use only its own layer and lower ones",
                    relative.display(),
                    reference.line,
                    reference.written,
                ));
            }
        }
    }
    report
}

#[test]
fn no_gateway_module_imports_from_a_higher_layer() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let report = breaches(crate_dir);
    assert!(
        report.is_empty(),
        "these paths break the Gateway's module layers (the `# Layers` list in src/lib.rs); move \
         the item they use down to its user's layer or lower, or move the user up:\n{}",
        report.join("\n")
    );
}

#[test]
fn the_scan_resolves_every_kind_of_path_to_the_root() {
    let module = |path: &[&str]| {
        path.iter()
            .map(|segment| String::from(*segment))
            .collect::<Vec<_>>()
    };
    let source = r#"
use crate::http::error::ApiError;
use crate::{audit::Audit, link::{self, registry::NodeRegistry}};
use super::GatewayState;
use super::*;
use self::inner::Thing;
pub(crate) fn f() -> crate::turns::TurnEngine {
    let _ = crate::cluster::OPERATOR_TOKEN;
    tracing::info!(code = crate::metrics::INVOKE_CANCELLED, "text");
    let _ = super::super::clock::now_ms();
    Thing
}
mod inner {
    use super::super::shares::StreamGate;
    use super::Other;
}
"#;
    let found: Vec<(usize, String, Vec<String>)> = references(source, &module(&["link", "ws"]))
        .into_iter()
        .map(|reference| (reference.line, reference.written, reference.resolved))
        .collect();
    assert_eq!(
        found,
        vec![
            (
                2,
                "crate::http::error::ApiError".to_owned(),
                module(&["http", "error", "ApiError"])
            ),
            (
                3,
                "crate::audit::Audit".to_owned(),
                module(&["audit", "Audit"])
            ),
            (3, "crate::link::self".to_owned(), module(&["link", "self"])),
            (
                3,
                "crate::link::registry::NodeRegistry".to_owned(),
                module(&["link", "registry", "NodeRegistry"])
            ),
            (
                4,
                "super::GatewayState".to_owned(),
                module(&["link", "GatewayState"])
            ),
            (5, "super".to_owned(), module(&["link"])),
            (
                6,
                "self::inner::Thing".to_owned(),
                module(&["link", "ws", "inner", "Thing"])
            ),
            (
                7,
                "crate::turns::TurnEngine".to_owned(),
                module(&["turns", "TurnEngine"])
            ),
            (
                8,
                "crate::cluster::OPERATOR_TOKEN".to_owned(),
                module(&["cluster", "OPERATOR_TOKEN"])
            ),
            (
                9,
                "crate::metrics::INVOKE_CANCELLED".to_owned(),
                module(&["metrics", "INVOKE_CANCELLED"])
            ),
            (
                10,
                "super::super::clock::now_ms".to_owned(),
                module(&["clock", "now_ms"])
            ),
            (
                14,
                "super::super::shares::StreamGate".to_owned(),
                module(&["link", "shares", "StreamGate"])
            ),
            (
                15,
                "super::Other".to_owned(),
                module(&["link", "ws", "Other"])
            ),
        ]
    );
}

#[test]
fn the_layers_are_read_from_the_numbered_list() {
    let lib = "//! The crate.\n\
               //!\n\
               //! # Layers\n\
               //! Lowest first:\n\
               //! 1. `clock`, `secrets`: time and tokens; see `audit`.\n\
               //! 2. `crate` and `http`: the rest.\n\
               //!\n\
               //! # Other\n\
               //! 3. `not`: a layer.\n";
    assert_eq!(
        layers(lib),
        vec![
            vec!["clock".to_owned(), "secrets".to_owned()],
            vec!["crate".to_owned(), "http".to_owned()],
        ]
    );
}
