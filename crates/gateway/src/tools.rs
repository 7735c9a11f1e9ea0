//! Gateway-provided tools: tools a turn calls that run on the Gateway, not on the Harness
//! (today `session_status`). The Gateway offers only what its tool policy allows, and checks a
//! call again when it arrives: the tool must be allowed and the calling turn must be running.
//! Every call and every refusal is audited, without arguments or output.

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

/// `session_status`: the state of the caller's session.
pub const SESSION_STATUS: &str = "session_status";

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
}

impl GatewayTools {
    /// Returns the tools under the policy `layers` (no layers: every tool allowed).
    pub fn new(store: Arc<dyn Store>, audit: Audit, layers: Vec<ToolLayer>) -> Self {
        Self {
            store,
            audit,
            layers,
        }
    }

    fn allowed(&self, tool: &str) -> bool {
        gatehouse_policy::tool::evaluate_tool(&self.layers, tool) == ToolDecision::Allow
    }

    /// Returns the specs of the tools a turn may call.
    pub fn offered(&self) -> Vec<GatewayToolSpec> {
        let all = [GatewayToolSpec {
            name: String::from(SESSION_STATUS),
            description: String::from(
                "Returns the state of this conversation: its session key, runtime, number of messages and turns, and the running turn.",
            ),
            parameters: serde_json::json!({"type": "object", "properties": {}, "additionalProperties": false}),
        }];
        all.into_iter()
            .filter(|spec| self.allowed(&spec.name))
            .collect()
    }

    /// Runs a call from node `device_id`.
    ///
    /// # Errors
    /// `POLICY_DENIED` for a tool the policy refuses (or one that does not exist), `INVALID_REQUEST`
    /// for a call from a turn that is not running in that session, and store failures.
    pub async fn call(
        &self,
        device_id: &str,
        params: &GatewayToolParams,
    ) -> Result<GatewayToolResult, WireError> {
        self.call_as(&format!("node:{device_id}"), params).await
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
        let actor = actor.to_owned();
        let details = serde_json::json!({"tool": params.tool, "sessionKey": params.session_key, "turnId": params.turn_id});
        if params.tool != SESSION_STATUS || !self.allowed(&params.tool) {
            self.audit
                .record(
                    &actor,
                    "gateway.tool.call",
                    "denied",
                    Some("POLICY_DENIED"),
                    details,
                )
                .await;
            return Err(WireError::new(
                ErrorCode::PolicyDenied,
                format!("the tool {} is not offered to this turn", params.tool),
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
            self.audit
                .record(
                    &actor,
                    "gateway.tool.call",
                    "denied",
                    Some("TURN_NOT_RUNNING"),
                    details,
                )
                .await;
            return Err(WireError::new(
                ErrorCode::InvalidRequest,
                "the calling turn is not running in that session",
            ));
        }
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
        self.audit
            .record(&actor, "gateway.tool.call", "succeeded", None, details)
            .await;
        Ok(GatewayToolResult {
            ok: true,
            output: status.to_string(),
        })
    }
}

fn store_error(error: gatehouse_store::StoreError) -> WireError {
    WireError::new(ErrorCode::Unavailable, error.to_string())
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
