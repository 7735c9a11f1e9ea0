//! Typed commands: one marker type per command binds its wire name to its parameter and result
//! types, so a caller and the handler that answers it cannot disagree on either.
//!
//! - A [`NodeCommand`] is served by the node and invoked by the Gateway through
//!   `node.invoke.request` / `node.invoke.result`.
//! - A [`GatewayRequest`] is served by the Gateway and sent by the node as a `req` frame
//!   (`node.gateway.tool`).
//!
//! Both sides go through the same functions: the caller encodes with [`encode_params`] and
//! decodes with [`decode_result`], the serving side decodes with [`decode_params`], answers
//! through a [`Serve`] implementation (on the node) and encodes with [`encode_result`]. Each takes the marker
//! as its type parameter, so passing the parameters of one command to another, or answering
//! with another command's result, does not compile.
//!
//! ```
//! use gatehouse_protocol::command::{Command, NodeCommand, AgentSessionStop};
//! use gatehouse_protocol::worker::AgentSessionStopParams;
//! let params = AgentSessionStopParams { session_key: String::from("s"), discard: false };
//! let text = gatehouse_protocol::command::encode_params::<AgentSessionStop>(&params).unwrap();
//! assert_eq!(AgentSessionStop::NAME, "agent.session.stop");
//! assert_eq!(text, r#"{"sessionKey":"s"}"#);
//! ```

use std::future::Future;
use std::pin::Pin;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::codex::CodexAttachParams;
use crate::codex::CodexRelayEnd;
use crate::commands::DirListParams;
use crate::commands::DirListResult;
use crate::commands::FileCreateParams;
use crate::commands::FileFetchParams;
use crate::commands::FileFetchResult;
use crate::commands::FileStatParams;
use crate::commands::FileStatResult;
use crate::commands::FileWriteParams;
use crate::commands::FileWriteResult;
use crate::error::WireError;
use crate::memory::MemoryAnswer;
use crate::memory::MemoryRequest;
use crate::skills::SkillsDiscovery;
use crate::skills::SkillsRequest;
use crate::worker::AgentSessionRestoreParams;
use crate::worker::AgentSessionRestoreResult;
use crate::worker::AgentSessionSourceParams;
use crate::worker::AgentSessionSourceResult;
use crate::worker::AgentSessionStopParams;
use crate::worker::AgentSessionStopResult;
use crate::worker::AgentTurnParams;
use crate::worker::AgentTurnResult;
use crate::worker::GatewayToolParams;
use crate::worker::GatewayToolResult;

/// A command of the link: its wire name and the types of its parameters and result.
pub trait Command: Send + Sync + 'static {
    /// The wire name, for example `file.fetch`.
    const NAME: &'static str;
    /// What the caller sends.
    type Params: Serialize + DeserializeOwned + Send + Sync + 'static;
    /// What the serving side answers on success.
    type Result: Serialize + DeserializeOwned + Send + 'static;
}

/// A command the node serves and the Gateway invokes (`node.invoke.*`).
pub trait NodeCommand: Command {}

/// A request the Gateway serves and the node sends as a `req` frame.
pub trait GatewayRequest: Command {}

/// The future a [`Serve`] implementation returns: the command's result or the wire error to
/// answer with.
pub type Served<R> = Pin<Box<dyn Future<Output = Result<R, WireError>> + Send + 'static>>;

/// Serves the command `C`; `Context` is what the serving side hands each call besides its
/// parameters (on the node, the invoke's progress and input channels).
///
/// The node registers one implementation per command it serves and its dispatcher decodes the
/// parameters with [`decode_params`] and encodes the result with [`encode_result`], so an
/// implementation whose parameter or result type is not the command's does not compile.
pub trait Serve<C: Command, Context>: Send + Sync + 'static {
    /// Answers one call.
    fn serve(&self, params: C::Params, context: Context) -> Served<C::Result>;
}

/// Defines one marker type per command and the list of the node commands' names.
macro_rules! command_definitions {
    (
        node {
            $(
                $(#[$node_meta:meta])*
                $node:ident = $node_name:expr => $node_params:ty, $node_result:ty;
            )*
        }
        gateway {
            $(
                $(#[$gateway_meta:meta])*
                $gateway:ident = $gateway_name:expr => $gateway_params:ty, $gateway_result:ty;
            )*
        }
    ) => {
        $(
            $(#[$node_meta])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            pub enum $node {}

            impl Command for $node {
                const NAME: &'static str = $node_name;
                type Params = $node_params;
                type Result = $node_result;
            }

            impl NodeCommand for $node {}
        )*

        $(
            $(#[$gateway_meta])*
            #[derive(Debug, Clone, Copy, PartialEq, Eq)]
            pub enum $gateway {}

            impl Command for $gateway {
                const NAME: &'static str = $gateway_name;
                type Params = $gateway_params;
                type Result = $gateway_result;
            }

            impl GatewayRequest for $gateway {}
        )*

        /// The name of every node command, in the order defined.
        pub const NODE_COMMANDS: &[&str] = &[$($node_name),*];
    };
}

command_definitions! {
    node {
        /// `file.fetch`: read a file.
        FileFetch = crate::commands::FILE_FETCH => FileFetchParams, FileFetchResult;
        /// `file.stat`: describe a path.
        FileStat = crate::commands::FILE_STAT => FileStatParams, FileStatResult;
        /// `file.write`: write a file atomically.
        FileWrite = crate::commands::FILE_WRITE => FileWriteParams, FileWriteResult;
        /// `file.create`: write a file that must not exist yet.
        FileCreate = crate::commands::FILE_CREATE => FileCreateParams, FileWriteResult;
        /// `dir.list`: list a directory, one page at a time.
        DirList = crate::commands::DIR_LIST => DirListParams, DirListResult;
        /// `workspace.memory`: the memory file service; the answer's shape follows the request's
        /// `op`.
        WorkspaceMemory = crate::commands::WORKSPACE_MEMORY => MemoryRequest, MemoryAnswer;
        /// `workspace.skills`: the skills discovery service.
        WorkspaceSkills = crate::commands::WORKSPACE_SKILLS => SkillsRequest, SkillsDiscovery;
        /// `agent.turn`: one native turn, its events streamed as progress lines.
        AgentTurn = crate::worker::AGENT_TURN => AgentTurnParams, AgentTurnResult;
        /// `agent.session.restore`: rebuild a session workspace from a checkpoint.
        AgentSessionRestore = crate::worker::AGENT_SESSION_RESTORE
            => AgentSessionRestoreParams, AgentSessionRestoreResult;
        /// `agent.session.source`: fetch a repository commit into a missing session workspace.
        AgentSessionSource = crate::worker::AGENT_SESSION_SOURCE
            => AgentSessionSourceParams, AgentSessionSourceResult;
        /// `agent.session.stop`: stop a session's worker.
        AgentSessionStop = crate::worker::AGENT_SESSION_STOP
            => AgentSessionStopParams, AgentSessionStopResult;
        /// `codex.appserver`: the duplex relay to the node's `codex app-server`.
        CodexAppServer = crate::codex::CODEX_APPSERVER => CodexAttachParams, CodexRelayEnd;
    }
    gateway {
        /// `node.gateway.tool`: run a Gateway-provided tool for a running turn.
        GatewayTool = crate::worker::NODE_GATEWAY_TOOL => GatewayToolParams, GatewayToolResult;
    }
}

/// The five file commands every workspace node serves.
pub const FILE_COMMANDS: &[&str] = &[
    FileFetch::NAME,
    FileStat::NAME,
    FileWrite::NAME,
    FileCreate::NAME,
    DirList::NAME,
];

/// Encodes the parameters of `C` as the JSON text of a request.
///
/// # Errors
/// When the parameters do not serialize (a map with non-string keys; none of ours).
pub fn encode_params<C: Command>(params: &C::Params) -> Result<String, serde_json::Error> {
    serde_json::to_string(params)
}

/// Decodes the parameters of `C` from a request's JSON text; absent parameters read as `{}`.
///
/// # Errors
/// When the text is not JSON of the expected shape; the serving side answers `INVALID_PARAMS`.
pub fn decode_params<C: Command>(text: Option<&str>) -> Result<C::Params, serde_json::Error> {
    serde_json::from_str(text.unwrap_or("{}"))
}

/// Encodes the result of `C` as the JSON payload of an answer.
///
/// # Errors
/// When the result does not serialize (none of ours).
pub fn encode_result<C: Command>(
    result: &C::Result,
) -> Result<serde_json::Value, serde_json::Error> {
    serde_json::to_value(result)
}

/// Decodes the result of `C` from the JSON payload of an answer.
///
/// # Errors
/// When the payload is not JSON of the expected shape.
pub fn decode_result<C: Command>(
    payload: serde_json::Value,
) -> Result<C::Result, serde_json::Error> {
    serde_json::from_value(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_command_has_one_distinct_name() {
        let mut names = NODE_COMMANDS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), NODE_COMMANDS.len());
        assert!(NODE_COMMANDS.contains(&AgentSessionStop::NAME));
        assert!(!NODE_COMMANDS.contains(&GatewayTool::NAME));
        for name in FILE_COMMANDS {
            assert!(NODE_COMMANDS.contains(name), "{name}");
        }
    }

    #[test]
    fn results_round_trip_through_their_command() {
        let answer = AgentSessionStopResult {
            stopped: true,
            discarded: false,
        };
        let payload = encode_result::<AgentSessionStop>(&answer).unwrap_or_default();
        assert_eq!(
            payload,
            serde_json::json!({"stopped": true, "discarded": false})
        );
        let decoded = decode_result::<AgentSessionStop>(payload).ok();
        assert_eq!(decoded, Some(answer));
        // A result of another shape is refused, not read as defaults.
        assert!(decode_result::<AgentTurn>(serde_json::json!({"stopped": true})).is_err());
        let params = decode_params::<CodexAppServer>(None).ok();
        assert_eq!(params, Some(CodexAttachParams {}));
    }
}
