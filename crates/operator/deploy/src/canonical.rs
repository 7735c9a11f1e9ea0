//! Canonical forms: JSON values with sorted keys, so output never depends on insertion order or
//! on which `serde_json` map features another crate in the build turns on.

use serde_json::Value;

/// Returns a copy of `value` whose maps, at every depth, hold their keys in sorted order.
pub(crate) fn sorted(value: &Value) -> Value {
    match value {
        Value::Object(entries) => {
            let mut keys: Vec<&String> = entries.keys().collect();
            keys.sort();
            let mut sorted_entries = serde_json::Map::with_capacity(entries.len());
            for key in keys {
                if let Some(child) = entries.get(key) {
                    sorted_entries.insert(key.clone(), sorted(child));
                }
            }
            Value::Object(sorted_entries)
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => value.clone(),
    }
}

/// Returns `value` as compact JSON with sorted keys.
pub(crate) fn to_json_string(value: &Value) -> String {
    sorted(value).to_string()
}
