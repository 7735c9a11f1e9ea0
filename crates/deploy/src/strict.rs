//! Strict, path-aware decoding of a parsed YAML tree into typed configuration.
//!
//! serde's own errors say what went wrong ("invalid type: integer, expected a string") but not
//! where. This module walks a `serde_json::Value` with a deserializer that knows the key path of
//! every node it hands out, so each error names the offending key (for example
//! `runtime.scratchVolumes[0].claimUid`). Keys that the target type does not know are collected
//! through `serde_ignored` and reported as errors by the caller.

use std::fmt;

use serde::Deserialize;
use serde::de;
use serde_json::Value;

/// A decoding failure at a key path.
#[derive(Debug)]
pub(crate) struct PathError {
    /// The dotted key path, or `None` until the deserializer that raised it attaches one.
    path: Option<String>,
    message: String,
}

impl PathError {
    /// Returns the dotted key path; the empty string stands for the document root.
    pub(crate) fn path(&self) -> &str {
        self.path.as_deref().unwrap_or("")
    }

    /// Returns the message without the path.
    pub(crate) fn message(&self) -> &str {
        &self.message
    }

    /// Attaches `path` unless a deeper deserializer already did.
    ///
    /// serde reports a missing key from the map that lacks it, so the message is rewritten to
    /// point at the key itself.
    fn at(mut self, path: &str) -> Self {
        if self.path.is_some() {
            return self;
        }
        let missing_key = self
            .message
            .strip_prefix("missing field `")
            .and_then(|rest| rest.strip_suffix('`'))
            .map(str::to_owned);
        match missing_key {
            Some(key) => {
                self.path = Some(child_key(path, &key));
                self.message = String::from("missing required key");
            }
            None => self.path = Some(path.to_owned()),
        }
        self
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

impl de::Error for PathError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self {
            path: None,
            message: msg.to_string(),
        }
    }
}

/// The outcome of a strict decode: the value, or the first error, plus every unknown key path.
pub(crate) struct Decoded<T> {
    pub(crate) result: Result<T, PathError>,
    pub(crate) unknown_keys: Vec<String>,
}

/// Decodes `value` into `T`, naming the key path of any error and collecting unknown keys.
pub(crate) fn decode<'de, T: Deserialize<'de>>(value: &'de Value) -> Decoded<T> {
    let mut unknown_keys = Vec::new();
    let deserializer = ValueDeserializer {
        value,
        path: String::new(),
    };
    let result = serde_ignored::deserialize(deserializer, |path| {
        unknown_keys.push(format_ignored_path(&path));
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

/// A deserializer over one node of a JSON value tree that knows the node's key path.
struct ValueDeserializer<'de> {
    value: &'de Value,
    path: String,
}

impl<'de> de::Deserializer<'de> for ValueDeserializer<'de> {
    type Error = PathError;

    fn deserialize_any<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, PathError> {
        let result = match self.value {
            Value::Null => visitor.visit_unit(),
            Value::Bool(flag) => visitor.visit_bool(*flag),
            Value::Number(number) => match (number.as_u64(), number.as_i64(), number.as_f64()) {
                (Some(unsigned), _, _) => visitor.visit_u64(unsigned),
                (None, Some(signed), _) => visitor.visit_i64(signed),
                (None, None, Some(float)) => visitor.visit_f64(float),
                (None, None, None) => Err(de::Error::custom("unsupported number")),
            },
            Value::String(text) => visitor.visit_borrowed_str(text),
            Value::Array(items) => visitor.visit_seq(SeqAccess {
                items: items.iter().enumerate(),
                path: &self.path,
            }),
            Value::Object(entries) => visitor.visit_map(MapAccess {
                entries: entries.iter(),
                pending: None,
                path: &self.path,
            }),
        };
        result.map_err(|err| err.at(&self.path))
    }

    fn deserialize_option<V: de::Visitor<'de>>(self, visitor: V) -> Result<V::Value, PathError> {
        match self.value {
            Value::Null => visitor
                .visit_none()
                .map_err(|err: PathError| err.at(&self.path)),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_enum<V: de::Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, PathError> {
        let result = match self.value {
            Value::String(text) => {
                visitor.visit_enum(de::value::BorrowedStrDeserializer::<PathError>::new(text))
            }
            other => Err(de::Error::invalid_type(unexpected(other), &visitor)),
        };
        result.map_err(|err| err.at(&self.path))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string
        bytes byte_buf unit unit_struct newtype_struct seq tuple
        tuple_struct map struct identifier ignored_any
    }
}

fn unexpected(value: &Value) -> de::Unexpected<'_> {
    match value {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(flag) => de::Unexpected::Bool(*flag),
        Value::Number(_) => de::Unexpected::Other("number"),
        Value::String(text) => de::Unexpected::Str(text),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

struct SeqAccess<'de, 'p> {
    items: std::iter::Enumerate<std::slice::Iter<'de, Value>>,
    path: &'p str,
}

impl<'de> de::SeqAccess<'de> for SeqAccess<'de, '_> {
    type Error = PathError;

    fn next_element_seed<T: de::DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, PathError> {
        let Some((index, value)) = self.items.next() else {
            return Ok(None);
        };
        let path = child_index(self.path, index);
        seed.deserialize(ValueDeserializer { value, path })
            .map(Some)
    }
}

struct MapAccess<'de, 'p> {
    entries: serde_json::map::Iter<'de>,
    pending: Option<(&'de String, &'de Value)>,
    path: &'p str,
}

impl<'de> de::MapAccess<'de> for MapAccess<'de, '_> {
    type Error = PathError;

    fn next_key_seed<K: de::DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, PathError> {
        let Some((key, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.pending = Some((key, value));
        seed.deserialize(de::value::BorrowedStrDeserializer::<PathError>::new(key))
            .map(Some)
            .map_err(|err| err.at(&child_key(self.path, key)))
    }

    fn next_value_seed<V: de::DeserializeSeed<'de>>(
        &mut self,
        seed: V,
    ) -> Result<V::Value, PathError> {
        let Some((key, value)) = self.pending.take() else {
            return Err(de::Error::custom("value requested before its key"));
        };
        let path = child_key(self.path, key);
        seed.deserialize(ValueDeserializer { value, path })
    }
}
