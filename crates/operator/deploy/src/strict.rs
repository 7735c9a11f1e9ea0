//! Strict, path-aware decoding of a parsed YAML tree into typed configuration.
//!
//! serde's own errors say what went wrong ("invalid type: integer, expected a string") but not
//! where. `serde_path_to_error` tracks the key path of the node being decoded, so each error
//! names the offending key (for example `runtime.scratchVolumes[0].claimUid`). Keys that the
//! target type does not know are collected through `serde_ignored` and reported as errors by the
//! caller.

use std::fmt;

use serde::Deserialize;
use serde_json::Value;

/// A decoding failure at a key path.
#[derive(Debug)]
pub(crate) struct PathError {
    /// The dotted key path; the empty string stands for the document root.
    path: String,
    message: String,
}

impl PathError {
    /// Returns the dotted key path; the empty string stands for the document root.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// Returns the message without the path.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// Returns the error `message` raised while decoding the node at `path`.
    ///
    /// serde reports a missing key from the map that lacks it, so the message is rewritten to
    /// point at the key itself.
    fn at(path: &str, message: String) -> Self {
        let missing_key = message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'));
        match missing_key {
            Some(key) => Self {
                path: child_key(path, key),
                message: String::from("missing required key"),
            },
            None => Self {
                path: path.to_owned(),
                message,
            },
        }
    }
}

impl fmt::Display for PathError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path() {
            "" => write!(f, "{}", self.message),
            path => write!(f, "{path}: {}", self.message),
        }
    }
}

impl std::error::Error for PathError {}

/// The outcome of a strict decode: the value, or the first error, plus every unknown key path.
pub(crate) struct Decoded<T> {
    pub(crate) result: Result<T, PathError>,
    pub(crate) unknown_keys: Vec<String>,
}

/// Decodes `value` into `T`, naming the key path of any error and collecting unknown keys.
pub(crate) fn decode<'de, T: Deserialize<'de>>(value: &'de Value) -> Decoded<T> {
    let mut unknown_keys = Vec::new();
    let mut record_unknown = |path: serde_ignored::Path<'_>| {
        unknown_keys.push(format_ignored_path(&path));
    };
    let deserializer = serde_ignored::Deserializer::new(value, &mut record_unknown);
    let result = serde_path_to_error::deserialize(deserializer).map_err(|error| {
        // serde_path_to_error writes the root as `.`; ours is the empty string.
        let path = match error.path().to_string() {
            root if root == "." => String::new(),
            path => path,
        };
        PathError::at(&path, error.into_inner().to_string())
    });
    Decoded {
        result,
        unknown_keys,
    }
}

/// Returns the path of `key` under `parent`.
pub(crate) fn child_key(parent: &str, key: &str) -> String {
    match parent {
        "" => key.to_owned(),
        parent => format!("{parent}.{key}"),
    }
}

/// Returns the path of item `index` under `parent`.
pub(crate) fn child_index(parent: &str, index: usize) -> String {
    format!("{parent}[{index}]")
}

/// Formats a `serde_ignored` path in the same notation as [`child_key`] and [`child_index`].
pub(crate) fn format_ignored_path(path: &serde_ignored::Path<'_>) -> String {
    match path {
        serde_ignored::Path::Root => String::new(),
        serde_ignored::Path::Seq { parent, index } => {
            child_index(&format_ignored_path(parent), *index)
        }
        serde_ignored::Path::Map { parent, key } => child_key(&format_ignored_path(parent), key),
        serde_ignored::Path::Some { parent }
        | serde_ignored::Path::NewtypeStruct { parent }
        | serde_ignored::Path::NewtypeVariant { parent } => format_ignored_path(parent),
    }
}
