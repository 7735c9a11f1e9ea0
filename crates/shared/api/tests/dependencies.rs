//! The API crate is what an HTTP client of the Gateway links: it must not pull in the Gateway's
//! store or its SQL driver. The store depends on this crate for the records that are also wire
//! types, never the reverse. The test walks the normal (non-dev, non-build) dependencies of
//! `gatehouse-api` in `cargo metadata`'s resolved graph, on every platform and with the features
//! the workspace enables.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::collections::BTreeSet;
use std::collections::HashMap;
use std::process::Command;

use serde::Deserialize;

/// The packages an API client must never link, by name or name prefix (`sqlx-core`, ...).
const FORBIDDEN: [&str; 2] = ["gatehouse-store", "sqlx"];

/// What the test reads of `cargo metadata --format-version 1`.
#[derive(Deserialize)]
struct Metadata {
    packages: Vec<Package>,
    resolve: Resolve,
}

#[derive(Deserialize)]
struct Package {
    id: String,
    name: String,
}

#[derive(Deserialize)]
struct Resolve {
    nodes: Vec<Node>,
}

#[derive(Deserialize)]
struct Node {
    id: String,
    deps: Vec<NodeDep>,
}

#[derive(Deserialize)]
struct NodeDep {
    pkg: String,
    dep_kinds: Vec<DepKind>,
}

#[derive(Deserialize)]
struct DepKind {
    /// `null` for a normal dependency, `"dev"` or `"build"` otherwise.
    kind: Option<String>,
}

/// Returns the workspace's resolved dependency graph.
fn metadata() -> Metadata {
    let output = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("cargo metadata answers its JSON format")
}

/// Returns the names of the packages `root` links: its normal dependencies, transitively.
fn linked_packages(metadata: &Metadata, root: &str) -> BTreeSet<String> {
    let names: HashMap<&str, &str> = metadata
        .packages
        .iter()
        .map(|package| (package.id.as_str(), package.name.as_str()))
        .collect();
    let nodes: HashMap<&str, &Node> = metadata
        .resolve
        .nodes
        .iter()
        .map(|node| (node.id.as_str(), node))
        .collect();
    let root_id = metadata
        .packages
        .iter()
        .find(|package| package.name == root)
        .map(|package| package.id.as_str())
        .expect("the root package is in the workspace");
    let mut seen = BTreeSet::from([root_id]);
    let mut pending = vec![root_id];
    while let Some(id) = pending.pop() {
        let normal = nodes[id]
            .deps
            .iter()
            .filter(|dep| dep.dep_kinds.iter().any(|kind| kind.kind.is_none()));
        for dep in normal {
            if seen.insert(dep.pkg.as_str()) {
                pending.push(dep.pkg.as_str());
            }
        }
    }
    seen.remove(root_id);
    seen.into_iter().map(|id| names[id].to_owned()).collect()
}

#[test]
fn the_api_crate_links_neither_the_store_nor_sqlx() {
    let linked = linked_packages(&metadata(), "gatehouse-api");
    assert!(
        linked.contains("serde"),
        "the walk found the API crate's dependencies: {linked:?}"
    );
    let forbidden: Vec<&String> = linked
        .iter()
        .filter(|name| FORBIDDEN.iter().any(|prefix| name.starts_with(prefix)))
        .collect();
    assert!(
        forbidden.is_empty(),
        "gatehouse-api depends on {forbidden:?}; wire types belong in the api or protocol crate, \
         and the store depends on them, not the reverse"
    );
}
