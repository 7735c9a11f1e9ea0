//! What the mock reads from a request: the conversation, as a flat list of items.

use serde_json::Value;
use serde_json::json;

/// The part of a model request the mock looks at: the conversation items in order.
///
/// System and developer messages, tool definitions and sampling settings are not part of the view;
/// the mock's reply never depends on them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelRequestView {
    /// The conversation, oldest first.
    pub items: Vec<ViewItem>,
}

/// One conversation item of a [`ModelRequestView`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ViewItem {
    /// A user message; several text parts are joined with newlines.
    User {
        /// The message text.
        text: String,
    },
    /// An assistant text message.
    Assistant {
        /// The message text.
        text: String,
    },
    /// A tool call the model made earlier (function or freeform).
    ToolCall {
        /// The id that the matching [`ViewItem::ToolResult`] refers to.
        call_id: String,
        /// The tool name.
        name: String,
    },
    /// The output of a tool call, sent back to the model.
    ToolResult {
        /// The id of the call this output answers.
        call_id: String,
        /// The output as text.
        output: String,
    },
}

impl ModelRequestView {
    /// Returns the view of an OpenAI Responses request body (`POST /v1/responses`).
    ///
    /// Reads `input`, either a string (one user message) or a list of items: `message` items
    /// (`role` user or assistant; a bare `{role, content}` counts as a message),
    /// `function_call`/`custom_tool_call` and `function_call_output`/`custom_tool_call_output`.
    /// Anything else is skipped, so the view never fails.
    pub fn from_responses_body(body: &Value) -> ModelRequestView {
        let mut items = Vec::new();
        match body.get("input") {
            Some(Value::String(text)) => items.push(ViewItem::User { text: text.clone() }),
            Some(Value::Array(input)) => {
                for item in input {
                    if let Some(view_item) = responses_item(item) {
                        items.push(view_item);
                    }
                }
            }
            _ => {}
        }
        ModelRequestView { items }
    }

    /// Returns the view of an OpenAI Chat Completions request body (`POST /v1/chat/completions`).
    ///
    /// Reads `messages`: `user` messages, `assistant` messages (their text, then each of their
    /// `tool_calls`) and `tool` messages. System and developer messages are skipped.
    pub fn from_chat_body(body: &Value) -> ModelRequestView {
        let mut items = Vec::new();
        let messages = body.get("messages").and_then(Value::as_array);
        for message in messages.into_iter().flatten() {
            let content = message.get("content").map(content_text).unwrap_or_default();
            match message.get("role").and_then(Value::as_str) {
                Some("user") => items.push(ViewItem::User { text: content }),
                Some("assistant") => {
                    if !content.is_empty() {
                        items.push(ViewItem::Assistant { text: content });
                    }
                    let tool_calls = message.get("tool_calls").and_then(Value::as_array);
                    for call in tool_calls.into_iter().flatten() {
                        items.push(ViewItem::ToolCall {
                            call_id: string_field(call, "id"),
                            name: call
                                .get("function")
                                .map(|function| string_field(function, "name"))
                                .unwrap_or_default(),
                        });
                    }
                }
                Some("tool") => items.push(ViewItem::ToolResult {
                    call_id: string_field(message, "tool_call_id"),
                    output: content,
                }),
                _ => {}
            }
        }
        ModelRequestView { items }
    }

    /// Returns the view of an Anthropic Messages request body (`POST /v1/messages`).
    ///
    /// Reads `messages`: a user message's `text` blocks (or string content) are a user item and
    /// its `tool_result` blocks tool results (before the text); an assistant message's `text`
    /// blocks are an assistant item and its `tool_use` blocks tool calls. `system` is skipped.
    pub fn from_anthropic_body(body: &Value) -> ModelRequestView {
        let mut items = Vec::new();
        let messages = body.get("messages").and_then(Value::as_array);
        for message in messages.into_iter().flatten() {
            let blocks: Vec<Value> = match message.get("content") {
                Some(Value::String(text)) => vec![json!({"type": "text", "text": text})],
                Some(Value::Array(blocks)) => blocks.clone(),
                _ => Vec::new(),
            };
            let mut texts: Vec<&str> = Vec::new();
            let mut others = Vec::new();
            for block in &blocks {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => texts.push(
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or_default(),
                    ),
                    Some("tool_result") => others.push(ViewItem::ToolResult {
                        call_id: string_field(block, "tool_use_id"),
                        output: block.get("content").map(content_text).unwrap_or_default(),
                    }),
                    Some("tool_use") => others.push(ViewItem::ToolCall {
                        call_id: string_field(block, "id"),
                        name: string_field(block, "name"),
                    }),
                    _ => {}
                }
            }
            let text = texts.join("\n");
            match message.get("role").and_then(Value::as_str) {
                Some("user") => {
                    items.extend(others);
                    if !texts.is_empty() {
                        items.push(ViewItem::User { text });
                    }
                }
                Some("assistant") => {
                    if !text.is_empty() {
                        items.push(ViewItem::Assistant { text });
                    }
                    items.extend(others);
                }
                _ => {}
            }
        }
        ModelRequestView { items }
    }
}

fn responses_item(item: &Value) -> Option<ViewItem> {
    let item_type = match item.get("type").and_then(Value::as_str) {
        Some(item_type) => item_type,
        None if item.get("role").is_some() => "message",
        None => return None,
    };
    match item_type {
        "message" => {
            let text = item.get("content").map(content_text).unwrap_or_default();
            match item.get("role").and_then(Value::as_str) {
                Some("user") => Some(ViewItem::User { text }),
                Some("assistant") => Some(ViewItem::Assistant { text }),
                _ => None,
            }
        }
        "function_call" | "custom_tool_call" => Some(ViewItem::ToolCall {
            call_id: string_field(item, "call_id"),
            name: string_field(item, "name"),
        }),
        "function_call_output" | "custom_tool_call_output" => Some(ViewItem::ToolResult {
            call_id: string_field(item, "call_id"),
            output: item.get("output").map(content_text).unwrap_or_default(),
        }),
        _ => None,
    }
}

/// Returns the text of a `content` or `output` value: a string as is, the `text` of each part of a
/// list joined with newlines, and any other JSON as its compact serialization.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(parts) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter_map(|part| match part {
                    Value::String(text) => Some(text.as_str()),
                    _ => part.get("text").and_then(Value::as_str),
                })
                .collect();
            texts.join("\n")
        }
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn string_field(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
