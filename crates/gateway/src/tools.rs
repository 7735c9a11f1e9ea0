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
use gatehouse_store::model::TurnStatus;

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

/// The Gateway-provided tools and the policy over them.
pub struct GatewayTools {
    store: Arc<dyn Store>,
    audit: Audit,
    layers: Vec<ToolLayer>,
    memory: Option<Arc<crate::memory::MemoryService>>,
}

impl GatewayTools {
    /// Returns the tools under the policy `layers` (no layers: every tool allowed).
    pub fn new(store: Arc<dyn Store>, audit: Audit, layers: Vec<ToolLayer>) -> Self {
        Self {
            store,
            audit,
            layers,
            memory: None,
        }
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

    /// Returns the specs of the tools a turn may call.
    pub fn offered(&self) -> Vec<GatewayToolSpec> {
        let mut all = vec![GatewayToolSpec {
            name: String::from(SESSION_STATUS),
            description: String::from(
                "Returns the state of this conversation: its session key, runtime, number of messages and turns, and the running turn.",
            ),
            parameters: serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
        }];
        if self.memory.is_some() {
            all.push(GatewayToolSpec {
                name: String::from(MEMORY_SEARCH),
                description: String::from(
                    "Searches the agent's memory notes (MEMORY.md, memory/*.md). Search first, then read only the lines you need with memory_get. Results cite path#Lstart-Lend.",
                ),
                parameters: serde_json::json!({"type": "object", "properties": {
                    "query": {"type": "string"},
                    "maxResults": {"type": "integer", "minimum": 1},
                    "minScore": {"type": "number"}
                }, "required": ["query"], "additionalProperties": false}),
            });
            all.push(GatewayToolSpec {
                name: String::from(MEMORY_GET),
                description: String::from(
                    "Reads lines of a memory file: path as cited by memory_search, from (1-based line) and lines (default 120).",
                ),
                parameters: serde_json::json!({"type": "object", "properties": {
                    "path": {"type": "string"},
                    "from": {"type": "integer", "minimum": 1},
                    "lines": {"type": "integer", "minimum": 1}
                }, "required": ["path"], "additionalProperties": false}),
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
        let status = serde_json::json!({
            "sessionKey": params.session_key,
            "runtime": session.as_ref().map(|session| session.runtime.clone()),
            "messages": transcript.len(),
            "turns": n_turns,
            "activeTurnId": session.and_then(|session| session.active_turn_id),
        });
        Ok(GatewayToolResult {
            ok: true,
            output: status.to_string(),
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
        let arguments = &params.arguments;
        let answer = if params.tool == MEMORY_SEARCH {
            let Some(query) = arguments["query"].as_str() else {
                return Err(WireError::new(
                    ErrorCode::InvalidParams,
                    "memory_search needs a query",
                ));
            };
            let mut options = gatehouse_memory::search::SearchOptions::default();
            if let Some(max) = arguments["maxResults"].as_u64() {
                options.max_results = usize::try_from(max.clamp(1, 50)).unwrap_or(6);
            }
            if let Some(min) = arguments["minScore"].as_f64() {
                options.min_score = min;
            }
            memory
                .search(query, options)
                .await
                .map(|answer| serde_json::to_string(&answer).unwrap_or_default())
        } else {
            let Some(path) = arguments["path"].as_str() else {
                return Err(WireError::new(
                    ErrorCode::InvalidParams,
                    "memory_get needs a path",
                ));
            };
            let number = |name: &str| {
                arguments[name]
                    .as_u64()
                    .and_then(|value| u32::try_from(value).ok())
            };
            memory
                .get(path, number("from"), number("lines"))
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
    serde_json::json!({"tool": params.tool, "sessionKey": params.session_key, "turnId": params.turn_id})
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
