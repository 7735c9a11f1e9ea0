//! Gateway-provided tools: tools a turn calls that run on the Gateway, not on the Harness
//! (today `session_status`). The Gateway offers only what its tool policy allows, and checks a
//! call again when it arrives: the tool must be allowed and the calling turn must be running,
//! and a call from a node must come for a turn whose `agent.turn` invoke runs on that node's own
//! connection (`TURN_NOT_OWNED` otherwise).
//! Every call and every refusal is audited, without arguments or output, with bounded fields and
//! at most [`crate::audit::LIMITED_ROWS_PER_WINDOW`] rows per caller and minute.

use std::sync::Arc;

use gatehouse_policy::tool::ToolDecision;
use gatehouse_policy::tool::ToolLayer;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::error::WireError;
use gatehouse_protocol::worker::GatewayToolParams;
use gatehouse_protocol::worker::GatewayToolResult;
use gatehouse_protocol::worker::GatewayToolSpec;
use gatehouse_store::Store;
use gatehouse_store::StoreError;
use gatehouse_store::records::TurnStatus;

use crate::audit::Audit;
use crate::audit::AuditRow;
use crate::audit::Limited;
use crate::link::registry::NodeConnection;

/// `session_status`: the state of the caller's session.
pub(crate) const SESSION_STATUS: &str = "session_status";

/// `memory_search`: search the memory index.
pub(crate) const MEMORY_SEARCH: &str = "memory_search";

/// `memory_get`: read lines of a memory file from the Harness.
pub(crate) const MEMORY_GET: &str = "memory_get";

/// Gateway-local tools that are never offered to a Codex agent as dynamic tools: they would act
/// on the Gateway's own host (files, shells, processes, its configuration), while Codex's native
/// tools already act in the Harness. The list of the original system, with our tool names.
pub const CODEX_EXCLUDED_TOOLS: &[&str] = &[
    "ls",
    "read",
    "write",
    "edit",
    "apply_patch",
    "grep",
    "exec",
    "process",
    "gateway_exec",
    "gateway_process",
    "terminal",
    "openclaw",
    "gatehouse",
];

/// Returns `specs` without the [`CODEX_EXCLUDED_TOOLS`].
pub fn without_codex_excluded(specs: Vec<GatewayToolSpec>) -> Vec<GatewayToolSpec> {
    specs
        .into_iter()
        .filter(|spec| !CODEX_EXCLUDED_TOOLS.contains(&spec.name.as_str()))
        .collect()
}

/// The arguments of `session_status`: none.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct SessionStatusArguments {}

/// The arguments of `memory_search`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MemorySearchArguments {
    /// What to search for.
    query: String,
    /// How many hits to return at most (1 to 50; 6 when left out).
    #[schemars(range(min = 1))]
    max_results: Option<u64>,
    /// The lowest score a hit may have (0.35 when left out).
    min_score: Option<f64>,
}

/// The arguments of `memory_get`.
#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct MemoryGetArguments {
    /// The file, as `memory_search` cites it.
    path: String,
    /// The first line to read, 1-based (the first line of the file when left out).
    #[schemars(range(min = 1))]
    from: Option<u32>,
    /// How many lines to read (120 when left out).
    #[schemars(range(min = 1))]
    lines: Option<u32>,
}

/// The answer of `session_status`, which the model reads as JSON.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct SessionStatus {
    /// The caller's session.
    session_key: String,
    /// Its runtime (`native` or `codex`); `null` for a session the store does not list.
    runtime: Option<String>,
    /// The number of messages in its transcript.
    messages: usize,
    /// The number of turns in its transcript.
    turns: usize,
    /// The running turn, if any; `null` otherwise.
    active_turn_id: Option<String>,
}

/// The `details` of a tool call's audit row.
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct CallDetails<'a> {
    tool: &'a str,
    session_key: &'a str,
    turn_id: &'a str,
}

/// The Gateway-provided tools and the policy over them.
pub struct GatewayTools {
    store: Arc<dyn Store>,
    audit: Audit,
    layers: Vec<ToolLayer>,
    memory: Option<Arc<crate::memory::MemoryService>>,
    /// Each configured channel's denied tools, by channel name (channels without any left out).
    channel_denials: std::collections::HashMap<String, Vec<String>>,
    /// Every configured channel's name.
    channels: std::collections::HashSet<String>,
}

/// Whether `denied` (tool names or `group:` names, as in the tool policy) denies `tool`.
pub fn denied_by(denied: &[String], tool: &str) -> bool {
    if denied.is_empty() {
        return false;
    }
    let layer = ToolLayer::denying(gatehouse_policy::tool::LayerSource::Group, denied.to_vec());
    gatehouse_policy::tool::evaluate_tool(std::slice::from_ref(&layer), tool) != ToolDecision::Allow
}

impl GatewayTools {
    /// Returns the tools under the policy `layers` (no layers: every tool allowed).
    pub fn new(store: Arc<dyn Store>, audit: Audit, layers: Vec<ToolLayer>) -> Self {
        Self {
            store,
            audit,
            layers,
            memory: None,
            channel_denials: std::collections::HashMap::new(),
            channels: std::collections::HashSet::new(),
        }
    }

    /// Narrows the tools of the turns each configured channel's messages start by its denied
    /// tools (`channel name → entries`, every configured channel listed); deny wins over every
    /// allow.
    #[must_use]
    pub fn with_channel_denials(
        mut self,
        denials: impl IntoIterator<Item = (String, Vec<String>)>,
    ) -> Self {
        for (channel, denied) in denials {
            if !denied.is_empty() {
                self.channel_denials.insert(channel.clone(), denied);
            }
            self.channels.insert(channel);
        }
        self
    }

    /// Returns the tools `turn_id` may not run: the `deny-tools` of the channel whose message
    /// the turn took (with their equivalents), none for a turn no channel's message started,
    /// and every tool for a turn of a channel this Gateway no longer has (fail closed).
    ///
    /// # Errors
    /// The store's failure to say which channel the turn came from.
    pub async fn denied_for(&self, turn_id: &str) -> Result<Vec<String>, StoreError> {
        let Some(channel) = self.store.turn_channel(turn_id).await? else {
            return Ok(Vec::new());
        };
        Ok(match self.channel_denials.get(&channel) {
            Some(denied) => denied.clone(),
            None if self.channels.contains(&channel) => Vec::new(),
            None => vec![String::from("*")],
        })
    }

    /// Returns [`GatewayTools::offered`] without the tools in `denied`.
    pub fn offered_without(&self, denied: &[String]) -> Vec<GatewayToolSpec> {
        self.offered()
            .into_iter()
            .filter(|spec| !denied_by(denied, &spec.name))
            .collect()
    }

    /// Adds the memory tools, backed by `memory`.
    #[must_use]
    pub fn with_memory(mut self, memory: Arc<crate::memory::MemoryService>) -> Self {
        self.memory = Some(memory);
        self
    }

    fn allowed(&self, tool: &str) -> bool {
        gatehouse_policy::tool::evaluate_tool(&self.layers, tool) == ToolDecision::Allow
    }

    /// Returns the specs of the tools a turn may call. Each tool's parameters are the JSON Schema
    /// of its arguments type ([`tool_parameters`]), which the call is decoded into.
    pub fn offered(&self) -> Vec<GatewayToolSpec> {
        let mut all = vec![GatewayToolSpec {
            name: String::from(SESSION_STATUS),
            description: String::from(
                "Returns the state of this conversation: its session key, runtime, number of messages and turns, and the running turn.",
            ),
            parameters: tool_parameters::<SessionStatusArguments>(),
        }];
        if self.memory.is_some() {
            all.push(GatewayToolSpec {
                name: String::from(MEMORY_SEARCH),
                description: String::from(
                    "Searches the agent's memory notes (MEMORY.md, memory/*.md). Search first, then read only the lines you need with memory_get. Results cite path#Lstart-Lend.",
                ),
                parameters: tool_parameters::<MemorySearchArguments>(),
            });
            all.push(GatewayToolSpec {
                name: String::from(MEMORY_GET),
                description: String::from(
                    "Reads lines of a memory file: path as cited by memory_search, from (1-based line) and lines (default 120).",
                ),
                parameters: tool_parameters::<MemoryGetArguments>(),
            });
        }
        all.into_iter()
            .filter(|spec| self.allowed(&spec.name))
            .collect()
    }

    /// Runs a call that arrived on the link from `connection`.
    ///
    /// # Errors
    /// `TURN_NOT_OWNED` when the turn's `agent.turn` invoke does not run on this connection
    /// (another node's turn, or one that ended), then as [`GatewayTools::call_as`].
    pub async fn call(
        &self,
        connection: &NodeConnection,
        params: &GatewayToolParams,
    ) -> Result<GatewayToolResult, WireError> {
        let actor = format!("node:{}", connection.device_id);
        if !connection.runs_turn(&params.session_key, &params.turn_id) {
            self.deny(&actor, ErrorCode::TurnNotOwned.as_str(), params)
                .await;
            return Err(WireError::new(
                ErrorCode::TurnNotOwned,
                "this node does not run that turn; a node calls Gateway tools only for its own running turn",
            ));
        }
        self.call_as(&actor, params).await
    }

    /// Audits (rate-limited per caller) and logs a refused call.
    async fn deny(&self, actor: &str, code: &str, params: &GatewayToolParams) {
        let row = AuditRow {
            actor,
            action: "gateway.tool.call",
            outcome: "denied",
            reason_code: Some(code),
            details: call_details(params),
        };
        if self.audit.record_limited(actor, row).await == Limited::Recorded {
            tracing::warn!(actor = %crate::audit::bounded_str(actor), code, "gateway tool call refused");
        }
    }

    /// Runs a call on behalf of `actor` (recorded in the audit trail), with the checks of
    /// [`GatewayTools::call`].
    ///
    /// # Errors
    /// As [`GatewayTools::call`].
    pub async fn call_as(
        &self,
        actor: &str,
        params: &GatewayToolParams,
    ) -> Result<GatewayToolResult, WireError> {
        let known = params.tool == SESSION_STATUS
            || (self.memory.is_some()
                && [MEMORY_SEARCH, MEMORY_GET].contains(&params.tool.as_str()));
        if !known || !self.allowed(&params.tool) {
            self.deny(actor, ErrorCode::PolicyDenied.as_str(), params)
                .await;
            return Err(WireError::new(
                ErrorCode::PolicyDenied,
                format!(
                    "the tool {} is not offered to this turn",
                    crate::audit::bounded_str(&params.tool)
                ),
            ));
        }
        let turn = self
            .store
            .turn(&params.turn_id)
            .await
            .map_err(store_error)?;
        let running = turn.as_ref().is_some_and(|turn| {
            turn.session_key == params.session_key && turn.status == TurnStatus::Running
        });
        if !running {
            self.deny(actor, ErrorCode::TurnNotRunning.as_str(), params)
                .await;
            return Err(WireError::new(
                ErrorCode::InvalidRequest,
                "the calling turn is not running in that session",
            ));
        }
        let denied = self
            .denied_for(&params.turn_id)
            .await
            .map_err(store_error)?;
        if denied_by(&denied, &params.tool) {
            self.deny(actor, ErrorCode::PolicyDenied.as_str(), params)
                .await;
            return Err(WireError::new(
                ErrorCode::PolicyDenied,
                format!(
                    "the tool {} is denied to this turn by its channel",
                    crate::audit::bounded_str(&params.tool)
                ),
            ));
        }
        let outcome = match params.tool.as_str() {
            MEMORY_SEARCH | MEMORY_GET => self.memory_tool(params).await,
            _ => self.session_status(params).await,
        };
        let (outcome_name, reason) = match &outcome {
            Ok(result) if result.ok => ("succeeded", None),
            Ok(_) => ("failed", None),
            Err(error) => ("failed", Some(error.code.clone())),
        };
        let row = AuditRow {
            actor,
            action: "gateway.tool.call",
            outcome: outcome_name,
            reason_code: reason.as_deref(),
            details: call_details(params),
        };
        self.audit.record_limited(actor, row).await;
        outcome
    }

    async fn session_status(
        &self,
        params: &GatewayToolParams,
    ) -> Result<GatewayToolResult, WireError> {
        let SessionStatusArguments {} = decode_arguments(params)?;
        let transcript = self
            .store
            .transcript(&params.session_key)
            .await
            .map_err(store_error)?;
        let sessions = self.store.sessions().await.map_err(store_error)?;
        let session = sessions
            .into_iter()
            .find(|session| session.session_key == params.session_key);
        let n_turns = transcript
            .iter()
            .map(|message| message.turn_id.as_str())
            .collect::<std::collections::BTreeSet<_>>()
            .len();
        let status = SessionStatus {
            session_key: params.session_key.clone(),
            runtime: session.as_ref().map(|session| session.runtime.clone()),
            messages: transcript.len(),
            turns: n_turns,
            active_turn_id: session.and_then(|session| session.active_turn_id),
        };
        Ok(GatewayToolResult {
            ok: true,
            output: to_output(&status),
        })
    }

    /// Runs `memory_search` or `memory_get`. A failure the model can act on (nothing found, the
    /// workspace unavailable) is a result with `ok: false` and the stable code in the text.
    async fn memory_tool(
        &self,
        params: &GatewayToolParams,
    ) -> Result<GatewayToolResult, WireError> {
        let Some(memory) = &self.memory else {
            return Err(WireError::new(
                ErrorCode::PolicyDenied,
                "memory is not configured",
            ));
        };
        let answer = if params.tool == MEMORY_SEARCH {
            let arguments: MemorySearchArguments = decode_arguments(params)?;
            let mut options = gatehouse_memory::search::SearchOptions::default();
            if let Some(max) = arguments.max_results {
                options.max_results = usize::try_from(max.clamp(1, 50)).unwrap_or(6);
            }
            if let Some(min) = arguments.min_score {
                options.min_score = min;
            }
            memory
                .search(&arguments.query, options)
                .await
                .map(|answer| to_output(&answer))
        } else {
            let arguments: MemoryGetArguments = decode_arguments(params)?;
            memory
                .get(&arguments.path, arguments.from, arguments.lines)
                .await
                .map(|read| {
                    let mut text = read.text;
                    if read.more {
                        text.push_str(&format!(
                            "\n[More content available. Use from={} to continue.]",
                            read.from + read.lines
                        ));
                    }
                    text
                })
        };
        Ok(match answer {
            Ok(output) => GatewayToolResult { ok: true, output },
            Err(error) => GatewayToolResult {
                ok: false,
                output: format!("{}: {error}", error.code()),
            },
        })
    }
}

/// The audit details of a call: which tool, for which session and turn (bounded by the audit
/// trail), never its arguments or output.
fn call_details(params: &GatewayToolParams) -> serde_json::Value {
    let details = CallDetails {
        tool: &params.tool,
        session_key: &params.session_key,
        turn_id: &params.turn_id,
    };
    // Serializing three strings into a `Value` cannot fail.
    serde_json::to_value(details).unwrap_or_default()
}

/// Returns the JSON Schema of a tool's arguments type `T`, as a model's tool definition takes
/// it: an object schema, inlined, without the `$schema`, `title` and `description` that
/// describe the Rust type (the tool has its own description), without `format`s (model APIs
/// accept different sets of them), with `properties` even when there are none, and with an
/// optional argument typed as its value (`null` dropped from its `type`), since a call leaves
/// out an argument it does not pass.
fn tool_parameters<T: schemars::JsonSchema>() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .with(|settings| {
            settings.meta_schema = None;
            settings.inline_subschemas = true;
        })
        .into_generator();
    let mut schema = generator.into_root_schema_for::<T>();
    for keyword in ["title", "description"] {
        schema.remove(keyword);
    }
    // Some model APIs refuse an object schema without `properties`, which schemars leaves out
    // for a type without fields.
    if schema.get("properties").is_none() {
        schema.insert(
            String::from("properties"),
            serde_json::Value::Object(serde_json::Map::new()),
        );
    }
    let mut parameters = schema.to_value();
    simplify_for_models(&mut parameters);
    parameters
}

/// Removes every `format` of a schema and its subschemas, and `null` from every `type` list.
fn simplify_for_models(schema: &mut serde_json::Value) {
    match schema {
        serde_json::Value::Object(object) => {
            object.remove("format");
            if let Some(serde_json::Value::Array(types)) = object.get_mut("type") {
                types.retain(|kind| kind != "null");
                if let [single] = types.as_mut_slice() {
                    let single = single.take();
                    object.insert(String::from("type"), single);
                }
            }
            object.values_mut().for_each(simplify_for_models);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(simplify_for_models),
        serde_json::Value::Null
        | serde_json::Value::Bool(_)
        | serde_json::Value::Number(_)
        | serde_json::Value::String(_) => {}
    }
}

/// Decodes a call's arguments into the tool's arguments type; absent arguments (`null`, as a
/// Codex call without any sends them) are read as `{}`.
///
/// # Errors
/// `INVALID_PARAMS` naming what does not match the tool's parameters, so the model can retry.
fn decode_arguments<T: serde::de::DeserializeOwned>(
    params: &GatewayToolParams,
) -> Result<T, WireError> {
    let arguments = match &params.arguments {
        serde_json::Value::Null => serde_json::Value::Object(serde_json::Map::new()),
        arguments => arguments.clone(),
    };
    serde_json::from_value(arguments).map_err(|error| {
        WireError::new(
            ErrorCode::InvalidParams,
            format!(
                "invalid arguments for {}: {}",
                params.tool,
                crate::audit::bounded_str(&error.to_string())
            ),
        )
    })
}

/// Returns a tool's typed answer as the text the model reads: its JSON.
fn to_output<T: serde::Serialize>(answer: &T) -> String {
    // The answers are plain data (strings, numbers, lists); serializing them cannot fail.
    serde_json::to_string(answer).unwrap_or_default()
}

fn store_error(error: gatehouse_store::StoreError) -> WireError {
    WireError::new(ErrorCode::Unavailable, error.to_string())
}

#[async_trait::async_trait]
impl crate::link::session::NodeRequestHandler for GatewayTools {
    async fn gateway_tool(
        &self,
        connection: &NodeConnection,
        params: &GatewayToolParams,
    ) -> Result<GatewayToolResult, WireError> {
        self.call(connection, params).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str) -> GatewayToolSpec {
        GatewayToolSpec {
            name: name.to_owned(),
            description: String::new(),
            parameters: serde_json::json!({"type": "object"}),
        }
    }

    /// The generated parameters are the object schemas the tools had when they were written by
    /// hand, with a description per argument: what a model's tool definition (and a Codex
    /// dynamic tool's `inputSchema`) takes.
    #[test]
    fn tool_parameters_are_the_object_schemas_of_the_arguments_types() {
        use pretty_assertions::assert_eq;
        assert_eq!(
            tool_parameters::<SessionStatusArguments>(),
            serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false})
        );
        assert_eq!(
            tool_parameters::<MemorySearchArguments>(),
            serde_json::json!({"type": "object", "properties": {
                "query": {"type": "string", "description": "What to search for."},
                "maxResults": {"type": "integer", "minimum": 1,
                    "description": "How many hits to return at most (1 to 50; 6 when left out)."},
                "minScore": {"type": "number",
                    "description": "The lowest score a hit may have (0.35 when left out)."}
            }, "required": ["query"], "additionalProperties": false})
        );
        assert_eq!(
            tool_parameters::<MemoryGetArguments>(),
            serde_json::json!({"type": "object", "properties": {
                "path": {"type": "string", "description": "The file, as `memory_search` cites it."},
                "from": {"type": "integer", "minimum": 1,
                    "description": "The first line to read, 1-based (the first line of the file when left out)."},
                "lines": {"type": "integer", "minimum": 1,
                    "description": "How many lines to read (120 when left out)."}
            }, "required": ["path"], "additionalProperties": false})
        );
    }

    /// A call's arguments decode into its tool's type: absent ones as `{}`, and an unknown or
    /// mistyped argument is refused as `INVALID_PARAMS` naming it.
    #[test]
    fn arguments_decode_into_the_tools_types() {
        use pretty_assertions::assert_eq;
        let call = |tool: &str, arguments: serde_json::Value| GatewayToolParams {
            session_key: String::from("s"),
            turn_id: String::from("t1"),
            tool: String::from(tool),
            arguments,
        };
        let get: MemoryGetArguments = decode_arguments(&call(
            MEMORY_GET,
            serde_json::json!({"path": "MEMORY.md", "lines": 2}),
        ))
        .unwrap();
        assert_eq!(
            (get.path.as_str(), get.from, get.lines),
            ("MEMORY.md", None, Some(2))
        );
        let SessionStatusArguments {} =
            decode_arguments(&call(SESSION_STATUS, serde_json::Value::Null)).unwrap();
        let unknown = decode_arguments::<SessionStatusArguments>(&call(
            SESSION_STATUS,
            serde_json::json!({"verbose": true}),
        ))
        .unwrap_err();
        assert_eq!(unknown.code, "INVALID_PARAMS");
        assert!(unknown.message.contains("verbose"), "{}", unknown.message);
        let mistyped = decode_arguments::<MemorySearchArguments>(&call(
            MEMORY_SEARCH,
            serde_json::json!({"query": 3}),
        ))
        .unwrap_err();
        assert_eq!(mistyped.code, "INVALID_PARAMS");
        assert!(
            mistyped
                .message
                .starts_with("invalid arguments for memory_search"),
            "{}",
            mistyped.message
        );
    }

    #[test]
    fn codex_never_gets_gateway_local_tools() {
        let offered = without_codex_excluded(vec![
            spec("exec"),
            spec(SESSION_STATUS),
            spec("read"),
            spec("gateway_exec"),
            spec("terminal"),
            spec("apply_patch"),
        ]);
        let names: Vec<&str> = offered.iter().map(|spec| spec.name.as_str()).collect();
        assert_eq!(names, vec![SESSION_STATUS]);
    }
}

#[cfg(test)]
#[path = "tools_store_tests.rs"]
mod store_tests;
