//! The pure part of the mock: from a request to a scripted reply (DESIGN §10).

use std::time::Duration;

use serde_json::Value;
use serde_json::json;

use crate::view::ModelRequestView;
use crate::view::ViewItem;

/// The longest tool result, in characters, quoted back in a `tool NAME -> RESULT` line.
pub const RESULT_CUT_CHARS: usize = 2_000;

/// The tool that is called as a freeform (custom) tool instead of a function.
pub const APPLY_PATCH: &str = "apply_patch";

/// What the mock answers to one request. Both HTTP endpoints and in-process clients render it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Stream text (`/say`, `/slow`, the echo, and the reply after tool results).
    Text(TextPlan),
    /// Call these tools, in order, and end the model call.
    ToolCalls(Vec<PlannedToolCall>),
    /// Answer with an HTTP error status and an OpenAI-shaped JSON error body (`/fail`).
    Fail(FailPlan),
    /// Start the stream, then send nothing but keep-alives until the client goes away (`/hang`).
    Hang,
}

/// Text streamed as a sequence of deltas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextPlan {
    /// The deltas, in order; they join to the full reply.
    pub deltas: Vec<String>,
    /// The pause between two consecutive deltas (zero except for `/slow`).
    pub delay: Duration,
}

/// One tool call the mock makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedToolCall {
    /// The call id, `call_N`, numbered after the calls already in the conversation.
    pub call_id: String,
    /// The tool name.
    pub name: String,
    /// The arguments.
    pub input: PlannedToolInput,
}

/// The arguments of a [`PlannedToolCall`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedToolInput {
    /// A function call with a JSON argument string, passed through exactly as written after the
    /// tool name (`{}` when nothing was written). It is not validated, so tests can send bad JSON.
    Function {
        /// The JSON arguments.
        arguments: String,
    },
    /// A freeform (custom) tool call, used for `apply_patch`.
    Custom {
        /// The `input` string of the JSON written after the tool name (the raw text when that is
        /// not a JSON object with a string `input`).
        input: String,
    },
}

/// An HTTP failure the mock answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailPlan {
    /// The HTTP status, always in `400..=599`.
    pub status: u16,
}

/// A `/flaky N STATUS TEXT` line: the first `failures` requests with this last user message are
/// answered with `status`, later ones with TEXT (the [`Plan`] of the same request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlakyPlan {
    /// How many requests fail first.
    pub failures: u32,
    /// The HTTP status they get, always in `400..=599`.
    pub status: u16,
}

/// Token counts the mock reports. They are deterministic estimates, not real tokenization.
///
/// [`usage`] fills only `input_tokens` and `output_tokens`; the HTTP server adds the cache
/// fields for requests that mark a prompt-cache prefix (Anthropic's `cache_control`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// About one token per four characters of conversation text, not counting the prefix.
    pub input_tokens: u64,
    /// The prefix (system prompt and tools) written to the cache: about one token per four
    /// characters of it, the first time the mock sees that prefix.
    pub cache_write_tokens: u64,
    /// The prefix read from the cache, when the mock saw the same prefix before.
    pub cache_read_tokens: u64,
    /// One token per text delta or tool call.
    pub output_tokens: u64,
}

impl TextPlan {
    /// Returns the full text (the deltas joined).
    pub fn text(&self) -> String {
        self.deltas.concat()
    }
}

impl PlannedToolCall {
    /// Returns the arguments as a JSON string for APIs that only know function calls (Chat
    /// Completions): the function arguments as they are, or `{"input": INPUT}` for a freeform call.
    pub fn function_arguments(&self) -> String {
        match &self.input {
            PlannedToolInput::Function { arguments } => arguments.clone(),
            PlannedToolInput::Custom { input } => json!({ "input": input }).to_string(),
        }
    }
}

impl FailPlan {
    /// Returns the OpenAI-shaped error body `{"error":{"message","type","param","code"}}`.
    pub fn error_body(&self) -> Value {
        let (error_type, code) = match self.status {
            401 | 403 => ("invalid_request_error", "invalid_api_key"),
            429 => ("requests", "rate_limit_exceeded"),
            500..=599 => ("server_error", "server_error"),
            _ => ("invalid_request_error", "mock_failure"),
        };
        json!({
            "error": {
                "message": format!("mock failure with status {}", self.status),
                "type": error_type,
                "param": null,
                "code": code,
            }
        })
    }
}

impl Usage {
    /// Returns all four counts added up.
    pub fn total_tokens(&self) -> u64 {
        self.input_tokens + self.cache_write_tokens + self.cache_read_tokens + self.output_tokens
    }
}

impl FailPlan {
    /// Returns the Anthropic-shaped error body `{"type":"error","error":{"type","message"}}`:
    /// 401 `authentication_error`, 403 `permission_error`, 404 `not_found_error`, 429
    /// `rate_limit_error`, 529 `overloaded_error`, other 5xx `api_error`, anything else
    /// `invalid_request_error`.
    pub fn anthropic_error_body(&self) -> Value {
        let error_type = match self.status {
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            429 => "rate_limit_error",
            529 => "overloaded_error",
            500..=599 => "api_error",
            _ => "invalid_request_error",
        };
        json!({
            "type": "error",
            "error": {
                "type": error_type,
                "message": format!("mock failure with status {}", self.status),
            }
        })
    }
}

/// Returns the scripted reply to `request`, following DESIGN §10.
///
/// The mock reads the last user message (earlier messages do not matter). When tool results follow
/// that message, the reply is one line per result, `tool NAME -> RESULT`, with the result cut at
/// [`RESULT_CUT_CHARS`] characters; NAME comes from the matching call in the conversation (or the
/// `/tool` line in the same position). Otherwise the rows below are tried top to bottom, and a row
/// matches when some line of the message, trimmed, is its command followed by whitespace or the end:
///
/// | line | plan |
/// |---|---|
/// | `/say TEXT` | [`Plan::Text`]: TEXT (rest of the line), in at least two deltas when it has two characters |
/// | `/tool NAME {json}` | [`Plan::ToolCalls`]: every `/tool` line, in order |
/// | `/fail STATUS` | [`Plan::Fail`], when STATUS is a number in `400..=599` |
/// | `/hang` | [`Plan::Hang`] |
/// | `/slow MS TEXT` | [`Plan::Text`]: TEXT word by word, MS milliseconds apart |
/// | `/flaky N STATUS TEXT` | [`Plan::Text`]: TEXT (the failures before it are [`flaky`]'s) |
/// | anything else | [`Plan::Text`]: `echo: ` and the whole message |
pub fn plan(request: &ModelRequestView) -> Plan {
    let last_user_idx = request
        .items
        .iter()
        .rposition(|item| matches!(item, ViewItem::User { .. }));
    let (user_text, before, after) = match last_user_idx {
        Some(idx) => {
            let text = match &request.items[idx] {
                ViewItem::User { text } => text.as_str(),
                ViewItem::Assistant { .. }
                | ViewItem::ToolCall { .. }
                | ViewItem::ToolResult { .. } => "",
            };
            (text, &request.items[..idx], &request.items[idx + 1..])
        }
        None => ("", &request.items[..0], &request.items[..]),
    };
    let commands: Vec<Command<'_>> = user_text.lines().filter_map(parse_line).collect();

    let n_results = after
        .iter()
        .filter(|item| matches!(item, ViewItem::ToolResult { .. }))
        .count();
    if n_results > 0 {
        return tool_results_plan(request, after, &commands);
    }

    for command in &commands {
        if let Command::Say(text) = command {
            return Plan::Text(TextPlan {
                deltas: text_deltas(text),
                delay: Duration::ZERO,
            });
        }
    }
    let n_prior_calls = before
        .iter()
        .filter(|item| matches!(item, ViewItem::ToolCall { .. }))
        .count();
    let tool_calls: Vec<PlannedToolCall> = commands
        .iter()
        .filter_map(|command| match command {
            Command::Tool { name, json } => Some((*name, *json)),
            Command::Say(_)
            | Command::Fail(_)
            | Command::Hang
            | Command::Slow { .. }
            | Command::Flaky { .. } => None,
        })
        .enumerate()
        .map(|(call_idx, (name, json))| planned_tool_call(n_prior_calls + call_idx + 1, name, json))
        .collect();
    if !tool_calls.is_empty() {
        return Plan::ToolCalls(tool_calls);
    }
    for command in &commands {
        if let Command::Fail(status) = command {
            return Plan::Fail(FailPlan { status: *status });
        }
    }
    if commands
        .iter()
        .any(|command| matches!(command, Command::Hang))
    {
        return Plan::Hang;
    }
    for command in &commands {
        if let Command::Slow { delay, text } = command {
            return Plan::Text(TextPlan {
                deltas: words(text),
                delay: *delay,
            });
        }
    }
    for command in &commands {
        if let Command::Flaky { text, .. } = command {
            return Plan::Text(TextPlan {
                deltas: text_deltas(text),
                delay: Duration::ZERO,
            });
        }
    }
    Plan::Text(TextPlan {
        deltas: text_deltas(&format!("echo: {user_text}")),
        delay: Duration::ZERO,
    })
}

/// Returns the `/flaky N STATUS TEXT` line that decides `request`: `Some` when [`plan`] answers
/// with that line's TEXT (no tool results follow the last user message and no line above it in
/// [`plan`]'s table applies) and STATUS is in `400..=599`.
///
/// The mock is pure, so counting is the caller's: the HTTP server and the in-process client
/// answer the first N requests whose last user message is this text with STATUS (and
/// `Retry-After: 0`), then TEXT; the count is per server or client instance.
pub fn flaky(request: &ModelRequestView) -> Option<FlakyPlan> {
    let last_user_idx = request
        .items
        .iter()
        .rposition(|item| matches!(item, ViewItem::User { .. }))?;
    if last_user_idx + 1 != request.items.len() {
        return None;
    }
    let ViewItem::User { text } = &request.items[last_user_idx] else {
        return None;
    };
    let commands: Vec<Command<'_>> = text.lines().filter_map(parse_line).collect();
    let mut flaky = None;
    for command in &commands {
        match command {
            Command::Say(_)
            | Command::Tool { .. }
            | Command::Fail(_)
            | Command::Hang
            | Command::Slow { .. } => return None,
            Command::Flaky {
                failures, status, ..
            } => {
                flaky = flaky.or(Some(FlakyPlan {
                    failures: *failures,
                    status: *status,
                }));
            }
        }
    }
    flaky
}

/// Returns the usage the mock reports for `plan` in answer to `request`.
pub fn usage(request: &ModelRequestView, plan: &Plan) -> Usage {
    let n_chars: usize = request
        .items
        .iter()
        .map(|item| match item {
            ViewItem::User { text } | ViewItem::Assistant { text } => text.chars().count(),
            ViewItem::ToolCall { name, .. } => name.chars().count(),
            ViewItem::ToolResult { output, .. } => output.chars().count(),
        })
        .sum();
    let n_outputs = match plan {
        Plan::Text(text) => text.deltas.len(),
        Plan::ToolCalls(calls) => calls.len(),
        Plan::Fail(_) | Plan::Hang => 0,
    };
    Usage {
        input_tokens: n_chars.div_ceil(4) as u64,
        output_tokens: n_outputs as u64,
        ..Usage::default()
    }
}

/// One recognized line of the last user message.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Command<'a> {
    Say(&'a str),
    Tool {
        name: &'a str,
        json: &'a str,
    },
    Fail(u16),
    Hang,
    Slow {
        delay: Duration,
        text: &'a str,
    },
    Flaky {
        failures: u32,
        status: u16,
        text: &'a str,
    },
}

fn parse_line(line: &str) -> Option<Command<'_>> {
    let line = line.trim();
    let (word, rest) = match line.split_once(char::is_whitespace) {
        Some((word, rest)) => (word, rest.trim_start()),
        None => (line, ""),
    };
    match word {
        "/say" => Some(Command::Say(rest)),
        "/tool" => {
            let (name, json) = match rest.split_once(char::is_whitespace) {
                Some((name, json)) => (name, json.trim()),
                None => (rest, ""),
            };
            if name.is_empty() {
                return None;
            }
            Some(Command::Tool { name, json })
        }
        "/fail" => match rest.parse::<u16>() {
            Ok(status) if (400..=599).contains(&status) => Some(Command::Fail(status)),
            Ok(_) | Err(_) => None,
        },
        "/hang" => Some(Command::Hang),
        "/flaky" => {
            let mut parts = rest.splitn(3, char::is_whitespace);
            let failures = parts.next()?.parse::<u32>().ok()?;
            let status = parts.next()?.parse::<u16>().ok()?;
            if !(400..=599).contains(&status) {
                return None;
            }
            let text = parts.next().unwrap_or_default().trim_start();
            Some(Command::Flaky {
                failures,
                status,
                text,
            })
        }
        "/slow" => {
            let (ms, text) = match rest.split_once(char::is_whitespace) {
                Some((ms, text)) => (ms, text.trim_start()),
                None => (rest, ""),
            };
            let ms = ms.parse::<u64>().ok()?;
            Some(Command::Slow {
                delay: Duration::from_millis(ms),
                text,
            })
        }
        _ => None,
    }
}

fn planned_tool_call(call_number: usize, name: &str, json: &str) -> PlannedToolCall {
    let arguments = if json.is_empty() { "{}" } else { json };
    let input = if name == APPLY_PATCH {
        let input = serde_json::from_str::<Value>(arguments)
            .ok()
            .and_then(|value| {
                value
                    .get("input")
                    .and_then(Value::as_str)
                    .map(str::to_owned)
            })
            .unwrap_or_else(|| arguments.to_owned());
        PlannedToolInput::Custom { input }
    } else {
        PlannedToolInput::Function {
            arguments: arguments.to_owned(),
        }
    };
    PlannedToolCall {
        call_id: format!("call_{call_number}"),
        name: name.to_owned(),
        input,
    }
}

fn tool_results_plan(
    request: &ModelRequestView,
    after: &[ViewItem],
    commands: &[Command<'_>],
) -> Plan {
    let script_names: Vec<&str> = commands
        .iter()
        .filter_map(|command| match command {
            Command::Tool { name, .. } => Some(*name),
            Command::Say(_)
            | Command::Fail(_)
            | Command::Hang
            | Command::Slow { .. }
            | Command::Flaky { .. } => None,
        })
        .collect();
    let mut lines = Vec::new();
    let results = after.iter().filter_map(|item| match item {
        ViewItem::ToolResult { call_id, output } => Some((call_id, output)),
        ViewItem::User { .. } | ViewItem::Assistant { .. } | ViewItem::ToolCall { .. } => None,
    });
    for (result_idx, (call_id, output)) in results.enumerate() {
        let called_name = request.items.iter().rev().find_map(|item| match item {
            ViewItem::ToolCall { call_id: id, name } if id == call_id => Some(name.as_str()),
            ViewItem::ToolCall { .. }
            | ViewItem::User { .. }
            | ViewItem::Assistant { .. }
            | ViewItem::ToolResult { .. } => None,
        });
        let name = called_name
            .or_else(|| script_names.get(result_idx).copied())
            .unwrap_or("unknown");
        let result: String = output.chars().take(RESULT_CUT_CHARS).collect();
        lines.push(format!("tool {name} -> {result}"));
    }
    Plan::Text(TextPlan {
        deltas: text_deltas(&lines.join("\n")),
        delay: Duration::ZERO,
    })
}

/// Splits `text` into deltas that join back to it: word by word, or (for a single word) in two
/// halves, so that any text of two or more characters streams in at least two deltas.
fn text_deltas(text: &str) -> Vec<String> {
    let pieces = words(text);
    if pieces.len() >= 2 {
        return pieces;
    }
    let n_chars = text.chars().count();
    if n_chars < 2 {
        return pieces;
    }
    let split_idx = text
        .char_indices()
        .nth(n_chars / 2)
        .map_or(text.len(), |(byte_idx, _)| byte_idx);
    vec![text[..split_idx].to_owned(), text[split_idx..].to_owned()]
}

/// Splits `text` into words, each with the whitespace before it; trailing whitespace joins the last
/// word. The pieces join back to `text`.
fn words(text: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut in_word = false;
    for ch in text.chars() {
        if ch.is_whitespace() {
            if in_word {
                pieces.push(std::mem::take(&mut current));
                in_word = false;
            }
        } else {
            in_word = true;
        }
        current.push(ch);
    }
    if !current.is_empty() {
        match pieces.last_mut() {
            Some(last) if !in_word => last.push_str(&current),
            Some(_) | None => pieces.push(current),
        }
    }
    pieces
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
