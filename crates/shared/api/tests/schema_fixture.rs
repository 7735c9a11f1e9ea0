//! The committed JSON Schema of the API (`schema/api.schema.json`) is the one the types
//! generate: the test fails when the file is stale and rewrites it when `GATEHOUSE_BLESS=1` is
//! set, so every change to the contract shows in review as a change of that file.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

use std::path::Path;

/// The environment variable that makes the test rewrite the fixture instead of failing.
const BLESS_ENV: &str = "GATEHOUSE_BLESS";

/// Returns the schema as the committed file holds it: pretty JSON and a final newline.
fn rendered_schema() -> String {
    let mut text = serde_json::to_string_pretty(&gatehouse_api::schema::api_schema()).unwrap();
    text.push('\n');
    text
}

#[test]
fn the_committed_api_schema_is_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("schema/api.schema.json");
    let generated = rendered_schema();
    if std::env::var_os(BLESS_ENV).is_some_and(|value| value == "1") {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "crates/shared/api/schema/api.schema.json is stale: the API types changed; review the change and \
         regenerate it with `{BLESS_ENV}=1 cargo test -p gatehouse-api --test schema_fixture`"
    );
}

#[test]
fn every_route_of_the_schema_names_defined_types() {
    let schema = gatehouse_api::schema::api_schema();
    let definitions = schema["$defs"].as_object().unwrap();
    let routes = schema["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 42);
    for route in routes {
        for part in ["query", "body", "answer", "error"] {
            let Some(reference) = route[part]["$ref"].as_str() else {
                continue;
            };
            let name = reference.strip_prefix("#/$defs/").unwrap();
            assert!(
                definitions.contains_key(name),
                "{} {} names {reference}, which is not defined",
                route["method"],
                route["path"]
            );
        }
    }
}
