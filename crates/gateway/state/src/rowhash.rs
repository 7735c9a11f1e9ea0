//! Content hashes of tables, equal for the same rows on either backend.
//!
//! A row is hashed over a canonical encoding of its catalogued columns: each value is tagged
//! (null, integer, text, JSON) and length-prefixed; JSON is re-serialized with its object keys
//! sorted and no whitespace (PostgreSQL's `jsonb` reorders keys); NUL in text becomes U+FFFD,
//! as the PostgreSQL backend stores it. A table's hash is the BLAKE3 of its rows' sorted
//! digests, so it does not depend on the order a backend returns rows in.

use crate::db::Cell;
use crate::error::Result;
use crate::error::StateError;
use crate::tables::Kind;
use crate::tables::Table;

pub use gatehouse_store::scrub_nul;

/// Accumulates the digests of a table's rows.
#[derive(Debug)]
pub struct TableHasher {
    table: &'static Table,
    digests: Vec<[u8; 32]>,
}

impl TableHasher {
    /// Starts the hash of `table`.
    pub fn new(table: &'static Table) -> Self {
        Self {
            table,
            digests: Vec::new(),
        }
    }

    /// Adds one row (its catalogued columns, in catalogue order).
    ///
    /// # Errors
    /// [`StateError::Corrupt`] when a JSON column does not hold JSON.
    pub fn add(&mut self, row: &[Cell]) -> Result<()> {
        let mut hasher = blake3::Hasher::new();
        for (cell, column) in row.iter().zip(self.table.columns) {
            match (cell, column.kind) {
                (Cell::Null, _) => {
                    hasher.update(&[0]);
                }
                (Cell::Int(value), _) => {
                    hasher.update(&[1]);
                    hasher.update(&value.to_le_bytes());
                }
                (Cell::Text(value), Kind::Json) => {
                    let canonical = canonical_json(value).map_err(|error| StateError::Corrupt {
                        table: self.table.name,
                        column: column.name,
                        reason: error.to_string(),
                    })?;
                    tagged(&mut hasher, 3, canonical.as_bytes());
                }
                (Cell::Text(value), _) => {
                    tagged(&mut hasher, 2, scrub_nul(value).as_bytes());
                }
            }
        }
        self.digests.push(*hasher.finalize().as_bytes());
        Ok(())
    }

    /// Returns the number of rows added.
    pub fn rows(&self) -> u64 {
        self.digests.len() as u64
    }

    /// Returns the table's hash, in lowercase hex.
    pub fn finish(mut self) -> String {
        self.digests.sort_unstable();
        let mut hasher = blake3::Hasher::new();
        hasher.update(self.table.name.as_bytes());
        for digest in &self.digests {
            hasher.update(digest);
        }
        hasher.finalize().to_hex().to_string()
    }
}

fn tagged(hasher: &mut blake3::Hasher, tag: u8, bytes: &[u8]) {
    hasher.update(&[tag]);
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// Returns the canonical form of the JSON text `text`: object keys sorted, no whitespace, NUL in
/// strings and keys replaced by U+FFFD. It is also what a PostgreSQL `jsonb` column is given.
///
/// # Errors
/// The parser's error when `text` is not JSON.
pub fn canonical_json(text: &str) -> std::result::Result<String, serde_json::Error> {
    let value: serde_json::Value = serde_json::from_str(text)?;
    let mut out = String::with_capacity(text.len());
    write_canonical(&value, &mut out)?;
    Ok(out)
}

fn write_canonical(
    value: &serde_json::Value,
    out: &mut String,
) -> std::result::Result<(), serde_json::Error> {
    match value {
        serde_json::Value::Object(map) => {
            let mut entries: Vec<(std::borrow::Cow<'_, str>, &serde_json::Value)> = map
                .iter()
                .map(|(key, item)| (scrub_nul(key), item))
                .collect();
            entries.sort_by(|left, right| left.0.cmp(&right.0));
            out.push('{');
            for (index, (key, item)) in entries.into_iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(key.as_ref())?);
                out.push(':');
                write_canonical(item, out)?;
            }
            out.push('}');
        }
        serde_json::Value::Array(items) => {
            out.push('[');
            for (index, item) in items.iter().enumerate() {
                if index > 0 {
                    out.push(',');
                }
                write_canonical(item, out)?;
            }
            out.push(']');
        }
        serde_json::Value::String(text) => {
            out.push_str(&serde_json::to_string(scrub_nul(text).as_ref())?);
        }
        other => out.push_str(&serde_json::to_string(other)?),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(
        clippy::unwrap_used,
        reason = "a test fails loudly on any unexpected error"
    )]

    use super::*;

    #[test]
    fn canonical_json_sorts_keys_drops_whitespace_and_replaces_nul() {
        assert_eq!(
            canonical_json(r#"{ "b": [1, {"z": "x\u0000", "a": null}], "a": true }"#).unwrap(),
            "{\"a\":true,\"b\":[1,{\"a\":null,\"z\":\"x\u{fffd}\"}]}"
        );
        assert!(canonical_json("{").is_err());
    }

    #[test]
    fn a_table_hash_ignores_row_order_and_jsonb_formatting_but_not_content() {
        let table = crate::tables::table("checkpoints").unwrap();
        let row = |id: &str, manifest: &str| {
            vec![
                Cell::Text(id.to_owned()),
                Cell::Text(String::from("s")),
                Cell::Text(manifest.to_owned()),
                Cell::Int(7),
            ]
        };
        let hash = |rows: &[Vec<Cell>]| {
            let mut hasher = TableHasher::new(table);
            for row in rows {
                hasher.add(row).unwrap();
            }
            hasher.finish()
        };
        let sqlite = hash(&[row("a", r#"{"v":1,"entries":[]}"#), row("b", "{}")]);
        let postgres = hash(&[row("b", "{}"), row("a", r#"{"entries": [], "v": 1}"#)]);
        assert_eq!(sqlite, postgres);
        assert_ne!(
            sqlite,
            hash(&[row("a", r#"{"v":2,"entries":[]}"#), row("b", "{}")])
        );
        assert_ne!(sqlite, hash(&[row("a", r#"{"v":1,"entries":[]}"#)]));
    }
}
