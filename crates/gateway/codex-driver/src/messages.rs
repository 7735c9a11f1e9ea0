//! The subset of the Codex app-server protocol (v2, as served by @openai/codex 0.171.0) that the
//! Gateway's driver sends and reads, as serde types.
//!
//! - Fields are camelCase on the wire, as Codex spells them; the `"jsonrpc"` member is absent
//!   (Codex speaks "JSON-RPC lite").
//! - Unknown fields are ignored everywhere, and unknown item types, statuses and methods decode
//!   into an explicit `Other` variant, so a newer Codex that adds to the protocol still works.
//! - A field the driver needs that is missing, or of the wrong type, is a [`DecodeError`] that
//!   names the method and the path of the field: a renamed field fails the turn loudly instead
//!   of making the reply silently empty.
//! - Each client request is bound to its params and response types by [`ClientRequest`], so
//!   [`crate::rpc::RpcClient::call`] cannot send the params of one method and decode the answer
//!   of another.

use serde::Deserialize;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The Codex version these types were written and recorded against.
pub const TESTED_CODEX_VERSION: &str = "0.171.0";

/// A request the client sends, bound to its wire name, params and response.
pub trait ClientRequest {
    /// The JSON-RPC method, for example `thread/start`.
    const METHOD: &'static str;
    /// The params sent.
    type Params: Serialize + DeserializeOwned;
    /// The `result` of a successful response.
    type Response: Serialize + DeserializeOwned;
}

/// Why a message could not be decoded into these types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("codex app-server sent {method} that does not decode at {path}: {message}")]
pub struct DecodeError {
    /// The method of the message (for a response, the method of its request).
    pub method: String,
    /// The path of the offending field, `.` for the message itself.
    pub path: String,
    /// What is wrong with it.
    pub message: String,
}

/// Decodes `value` as `T`, naming `method` and the offending field's path on failure.
///
/// # Errors
/// A [`DecodeError`] when a required field is missing or a field has the wrong type.
pub fn decode<T: DeserializeOwned>(
    method: &str,
    value: serde_json::Value,
) -> Result<T, DecodeError> {
    serde_path_to_error::deserialize(value).map_err(|error| DecodeError {
        method: method.to_owned(),
        // Serde's message quotes the offending value, which Codex or a node chose: keep it short.
        path: gatehouse_gateway::bounded_str(&error.path().to_string()).into_owned(),
        message: gatehouse_gateway::bounded_str(&error.into_inner().to_string()).into_owned(),
    })
}

/// Encodes params or a response as the JSON value of a message.
pub fn encode<T: Serialize>(value: &T) -> serde_json::Value {
    // These types are plain structs of strings, numbers and `Value`s: encoding cannot fail.
    serde_json::to_value(value).unwrap_or_default()
}

// --- Handshake ---------------------------------------------------------------------------

/// `initialize`: the handshake, sent once per connection and followed by `initialized`.
#[derive(Debug)]
pub enum Initialize {}

impl ClientRequest for Initialize {
    const METHOD: &'static str = "initialize";
    type Params = InitializeParams;
    type Response = InitializeResponse;
}

/// The params of `initialize`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeParams {
    /// Who the client is; `name` becomes Codex's `originator`.
    pub client_info: ClientInfo,
    /// What the client opts into.
    pub capabilities: InitializeCapabilities,
}

/// The `clientInfo` of `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientInfo {
    /// The client's name.
    pub name: String,
    /// A human title.
    pub title: Option<String>,
    /// The client's version.
    pub version: String,
}

/// The `capabilities` of `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeCapabilities {
    /// Unlocks experimental methods and fields, which dynamic tools need.
    pub experimental_api: bool,
    /// Notifications this connection does not want.
    #[serde(default)]
    pub opt_out_notification_methods: Vec<String>,
}

/// The result of `initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    /// The user agent Codex sends upstream.
    pub user_agent: String,
}

// --- Threads -----------------------------------------------------------------------------

/// `thread/start`: starts a new thread.
#[derive(Debug)]
pub enum ThreadStart {}

impl ClientRequest for ThreadStart {
    const METHOD: &'static str = "thread/start";
    type Params = ThreadStartParams;
    type Response = ThreadResponse;
}

/// `thread/resume`: loads a stored thread on this connection.
#[derive(Debug)]
pub enum ThreadResume {}

impl ClientRequest for ThreadResume {
    const METHOD: &'static str = "thread/resume";
    type Params = ThreadResumeParams;
    type Response = ThreadResponse;
}

/// The settings shared by `thread/start` and `thread/resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadSettings {
    /// The thread's working directory (the node's workspace).
    pub cwd: String,
    /// When Codex asks for approval; the Gateway uses `untrusted`, so it answers every one.
    pub approval_policy: String,
    /// The sandbox mode, for example `workspace-write`.
    pub sandbox: String,
    /// Extra developer instructions (the workspace's skills), when there are any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub developer_instructions: Option<String>,
}

/// The params of `thread/start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadStartParams {
    /// Where and how the thread runs.
    #[serde(flatten)]
    pub settings: ThreadSettings,
    /// The Gateway tools offered to the agent (an experimental field).
    pub dynamic_tools: Vec<DynamicToolSpec>,
    /// The service name recorded on the thread.
    pub service_name: String,
}

/// One dynamic tool of `thread/start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolSpec {
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The tool's name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// The JSON Schema of its arguments (opaque to the driver).
    pub input_schema: serde_json::Value,
}

/// The params of `thread/resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadResumeParams {
    /// The thread to resume.
    pub thread_id: String,
    /// Leaves the thread's past turns out of the answer.
    pub exclude_turns: bool,
    /// Where and how the thread runs from now on.
    #[serde(flatten)]
    pub settings: ThreadSettings,
}

/// The result of `thread/start` and `thread/resume`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadResponse {
    /// The thread.
    pub thread: Thread,
}

/// A thread, as far as the driver reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Thread {
    /// The thread id (a UUIDv7).
    pub id: String,
}

// --- Turns -------------------------------------------------------------------------------

/// `turn/start`: starts a turn on a thread.
#[derive(Debug)]
pub enum TurnStart {}

impl ClientRequest for TurnStart {
    const METHOD: &'static str = "turn/start";
    type Params = TurnStartParams;
    type Response = TurnResponse;
}

/// `turn/steer`: adds input to the running turn.
#[derive(Debug)]
pub enum TurnSteer {}

impl ClientRequest for TurnSteer {
    const METHOD: &'static str = "turn/steer";
    type Params = TurnSteerParams;
    type Response = TurnSteerResponse;
}

/// `turn/interrupt`: interrupts the running turn, which then completes as `interrupted`.
#[derive(Debug)]
pub enum TurnInterrupt {}

impl ClientRequest for TurnInterrupt {
    const METHOD: &'static str = "turn/interrupt";
    type Params = TurnInterruptParams;
    type Response = EmptyResponse;
}

/// The params of `turn/start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnStartParams {
    /// The thread.
    pub thread_id: String,
    /// What the user sent.
    pub input: Vec<UserInput>,
}

/// The params of `turn/steer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteerParams {
    /// The thread.
    pub thread_id: String,
    /// The turn that must still be running.
    pub expected_turn_id: String,
    /// What the user added.
    pub input: Vec<UserInput>,
}

/// The result of `turn/steer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnSteerResponse {
    /// The turn the input joined.
    pub turn_id: String,
}

/// The params of `turn/interrupt`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnInterruptParams {
    /// The thread.
    pub thread_id: String,
    /// The turn to interrupt.
    pub turn_id: String,
}

/// A result with nothing in it (`{}`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct EmptyResponse {}

/// The result of `turn/start`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnResponse {
    /// The started turn (`inProgress`).
    pub turn: Turn,
}

/// One input item of a turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum UserInput {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image file on the Harness, which Codex reads and inlines.
    LocalImage {
        /// Its absolute path.
        path: String,
    },
    /// Any other kind (the driver never sends one).
    #[serde(other)]
    Other,
}

/// A turn, as far as the driver reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Turn {
    /// The turn id.
    pub id: String,
    /// Where the turn is.
    pub status: TurnStatus,
    /// Why it failed, when it did.
    #[serde(default)]
    pub error: Option<TurnError>,
}

/// The status of a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum TurnStatus {
    /// Running.
    InProgress,
    /// Ended normally.
    Completed,
    /// Ended by `turn/interrupt`.
    Interrupted,
    /// Ended by an error.
    Failed,
    /// A status this version does not know; the driver treats it as a failure.
    #[serde(other)]
    Other,
}

/// Why a turn failed, in `turn.error` and the `error` notification.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnError {
    /// The message.
    pub message: String,
    /// Codex's machine-readable reason.
    #[serde(default)]
    pub codex_error_info: Option<CodexErrorInfo>,
}

/// Codex's machine-readable reason for an error: a bare name (`"unauthorized"`) or an object
/// with one key, the name, holding details (`{"httpConnectionFailed": {"httpStatusCode": 502}}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CodexErrorInfo {
    /// A bare name.
    Name(String),
    /// A name with details.
    Detailed(serde_json::Map<String, serde_json::Value>),
}

impl CodexErrorInfo {
    /// Returns the reason's name, or `other` for an empty object.
    pub fn name(&self) -> &str {
        match self {
            Self::Name(name) => name,
            Self::Detailed(map) => map.keys().next().map_or("other", String::as_str),
        }
    }
}

// --- Items -------------------------------------------------------------------------------

/// An item of a turn, as far as the driver reads it; every other item type is [`ThreadItem::Other`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ThreadItem {
    /// The agent's message; its `text` is complete in `item/completed`.
    #[serde(rename_all = "camelCase")]
    AgentMessage {
        /// The item id.
        id: String,
        /// The text.
        text: String,
    },
    /// A shell command the agent runs.
    #[serde(rename_all = "camelCase")]
    CommandExecution {
        /// The item id.
        id: String,
        /// The command line.
        command: String,
        /// Where it is.
        status: ItemStatus,
        /// Its exit code, once it ran.
        #[serde(default)]
        exit_code: Option<i64>,
        /// Its whole output, once it ran.
        #[serde(default)]
        aggregated_output: Option<String>,
    },
    /// A patch the agent applies.
    #[serde(rename_all = "camelCase")]
    FileChange {
        /// The item id.
        id: String,
        /// The files it changes.
        changes: Vec<FileUpdateChange>,
        /// Where it is.
        status: ItemStatus,
    },
    /// A call of a dynamic (Gateway) tool.
    #[serde(rename_all = "camelCase")]
    DynamicToolCall {
        /// The item id (the model's call id).
        id: String,
        /// The tool's name.
        tool: String,
        /// Its arguments (opaque to the driver).
        #[serde(default)]
        arguments: serde_json::Value,
        /// Where it is.
        status: ItemStatus,
        /// Whether it succeeded, once it ran.
        #[serde(default)]
        success: Option<bool>,
    },
    /// Any other item (user messages, reasoning, plans, ...), which the driver ignores.
    #[serde(other)]
    Other,
}

/// The status of a command, file change or tool call item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ItemStatus {
    /// Running.
    InProgress,
    /// Done.
    Completed,
    /// Ran and failed.
    Failed,
    /// Refused by an approval.
    Declined,
    /// A status this version does not know.
    #[serde(other)]
    Other,
}

impl ItemStatus {
    /// Returns the status as Codex spells it, `unknown` for [`ItemStatus::Other`].
    pub fn wire(self) -> &'static str {
        match self {
            Self::InProgress => "inProgress",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Declined => "declined",
            Self::Other => "unknown",
        }
    }
}

/// One file of a `fileChange` item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FileUpdateChange {
    /// The file's absolute path.
    pub path: String,
    /// What happens to it.
    pub kind: PatchChangeKind,
}

/// What a patch does to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum PatchChangeKind {
    /// Creates it.
    Add,
    /// Deletes it.
    Delete,
    /// Changes it, maybe moving it.
    Update,
    /// A kind this version does not know.
    #[serde(other)]
    Other,
}

impl PatchChangeKind {
    /// Returns the kind as Codex spells it, `change` for [`PatchChangeKind::Other`].
    pub fn wire(&self) -> &'static str {
        match self {
            Self::Add => "add",
            Self::Delete => "delete",
            Self::Update => "update",
            Self::Other => "change",
        }
    }
}

// --- Notifications -----------------------------------------------------------------------

/// A server notification the driver acts on; every other method is [`ServerNotification::Other`].
#[derive(Debug, Clone, PartialEq)]
pub enum ServerNotification {
    /// `item/agentMessage/delta`: more text of the agent's message.
    AgentMessageDelta(AgentMessageDeltaNotification),
    /// `item/started`.
    ItemStarted(ItemNotification),
    /// `item/completed`: the authoritative final state of an item.
    ItemCompleted(ItemNotification),
    /// `error`: an error in the middle of a turn.
    Error(ErrorNotification),
    /// `warning`.
    Warning(WarningNotification),
    /// `turn/started`.
    TurnStarted(TurnNotification),
    /// `turn/completed`: the turn ended (completed, interrupted or failed).
    TurnCompleted(TurnNotification),
    /// `thread/tokenUsage/updated`: the tokens of the thread after a model response.
    TokenUsageUpdated(TokenUsageNotification),
    /// Any other method, which the driver ignores.
    Other {
        /// The method.
        method: String,
    },
}

impl ServerNotification {
    /// Decodes the notification `method` with `params`.
    ///
    /// # Errors
    /// A [`DecodeError`] when a known method's params lack a field the driver needs.
    pub fn decode(method: &str, params: serde_json::Value) -> Result<Self, DecodeError> {
        Ok(match method {
            "item/agentMessage/delta" => Self::AgentMessageDelta(decode(method, params)?),
            "item/started" => Self::ItemStarted(decode(method, params)?),
            "item/completed" => Self::ItemCompleted(decode(method, params)?),
            "error" => Self::Error(decode(method, params)?),
            "warning" => Self::Warning(decode(method, params)?),
            "turn/started" => Self::TurnStarted(decode(method, params)?),
            "turn/completed" => Self::TurnCompleted(decode(method, params)?),
            "thread/tokenUsage/updated" => Self::TokenUsageUpdated(decode(method, params)?),
            other => Self::Other {
                method: other.to_owned(),
            },
        })
    }
}

/// The params of `item/agentMessage/delta`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentMessageDeltaNotification {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The agent message item.
    pub item_id: String,
    /// The new text.
    pub delta: String,
}

/// The params of `item/started` and `item/completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ItemNotification {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The item.
    pub item: ThreadItem,
}

/// The params of `error`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorNotification {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// Whether Codex retries by itself.
    #[serde(default)]
    pub will_retry: bool,
    /// The error.
    pub error: TurnError,
}

/// The params of `warning`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WarningNotification {
    /// The warning.
    pub message: String,
    /// The thread, when it concerns one.
    #[serde(default)]
    pub thread_id: Option<String>,
}

/// The params of `turn/started` and `turn/completed`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TurnNotification {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn: Turn,
}

/// The params of `thread/tokenUsage/updated`, sent after every model response of a turn (and
/// again after a thread resume).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsageNotification {
    /// The thread.
    pub thread_id: String,
    /// The turn the model response belongs to.
    pub turn_id: String,
    /// The counts.
    pub token_usage: ThreadTokenUsage,
}

/// The `tokenUsage` of a [`TokenUsageNotification`]: the thread's running total and the last
/// model response's counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ThreadTokenUsage {
    /// The whole thread so far.
    pub total: TokenBreakdown,
    /// The last model response.
    pub last: TokenBreakdown,
}

/// The token counts of a [`ThreadTokenUsage`]; the cached input is a part of the input, and
/// the reasoning output Codex also sends a part of the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TokenBreakdown {
    /// All tokens.
    pub total_tokens: u64,
    /// Input tokens, cached ones included.
    pub input_tokens: u64,
    /// The input tokens read from the provider's prompt cache.
    #[serde(default)]
    pub cached_input_tokens: u64,
    /// Output tokens.
    pub output_tokens: u64,
}

// --- Server requests ---------------------------------------------------------------------

/// A server request the driver answers; every other method is [`ServerRequest::Other`], which
/// the driver refuses with a JSON-RPC error.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerRequest {
    /// `item/commandExecution/requestApproval`.
    CommandExecutionApproval(ApprovalParams),
    /// `item/fileChange/requestApproval`.
    FileChangeApproval(ApprovalParams),
    /// `item/permissions/requestApproval`.
    PermissionsApproval(ApprovalParams),
    /// `item/tool/call`: run a dynamic (Gateway) tool.
    DynamicToolCall(DynamicToolCallParams),
    /// `mcpServer/elicitation/request`, which the Gateway always declines.
    McpServerElicitation,
    /// Any other method.
    Other {
        /// The method.
        method: String,
    },
}

impl ServerRequest {
    /// Decodes the server request `method` with `params`.
    ///
    /// # Errors
    /// A [`DecodeError`] when a known method's params lack a field the driver needs.
    pub fn decode(method: &str, params: serde_json::Value) -> Result<Self, DecodeError> {
        Ok(match method {
            "item/commandExecution/requestApproval" => {
                Self::CommandExecutionApproval(decode(method, params)?)
            }
            "item/fileChange/requestApproval" => Self::FileChangeApproval(decode(method, params)?),
            "item/permissions/requestApproval" => {
                Self::PermissionsApproval(decode(method, params)?)
            }
            "item/tool/call" => Self::DynamicToolCall(decode(method, params)?),
            "mcpServer/elicitation/request" => Self::McpServerElicitation,
            other => Self::Other {
                method: other.to_owned(),
            },
        })
    }
}

/// The params of an approval request (command, file change or permissions), as far as the
/// driver reads them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalParams {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The item waiting for the approval.
    pub item_id: String,
}

/// The answer to a command or file-change approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalResponse {
    /// `accept`, `acceptForSession` or `decline`.
    pub decision: String,
}

/// The answer to a permissions approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PermissionsApprovalResponse {
    /// The permissions granted (the Gateway grants none).
    pub permissions: serde_json::Map<String, serde_json::Value>,
    /// How long the grant holds: `turn` or `session`.
    pub scope: String,
}

/// The answer to an MCP elicitation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ElicitationResponse {
    /// `accept`, `decline` or `cancel`.
    pub action: String,
    /// The content of an accepted elicitation.
    pub content: Option<serde_json::Value>,
}

/// The params of `item/tool/call`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolCallParams {
    /// The thread.
    pub thread_id: String,
    /// The turn.
    pub turn_id: String,
    /// The model's call id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// Its arguments, already parsed (opaque to the driver).
    #[serde(default)]
    pub arguments: serde_json::Value,
}

/// The answer to `item/tool/call`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DynamicToolCallResponse {
    /// What the tool returned.
    pub content_items: Vec<ToolContentItem>,
    /// Whether it succeeded.
    pub success: bool,
}

/// One content item of a dynamic tool's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum ToolContentItem {
    /// Text for the model.
    InputText {
        /// The text.
        text: String,
    },
}

// --- Envelopes ---------------------------------------------------------------------------

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JsonRpcError {
    /// The JSON-RPC error code.
    pub code: i64,
    /// The message.
    pub message: String,
}

/// One line of the app-server connection, in either direction: a request, a notification, a
/// response or an error. Its params and result stay JSON values until the method is known.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Envelope {
    /// The request id (an integer for the client's requests, any JSON for the server's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<serde_json::Value>,
    /// The method of a request or notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    /// The params of a request or notification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub params: Option<serde_json::Value>,
    /// The result of a successful response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    /// The error of a failed response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<JsonRpcError>,
}

/// Returns the `threadId` a message's params name, directly or in a `thread` object.
pub fn thread_of(params: &serde_json::Value) -> Option<String> {
    params
        .get("threadId")
        .or_else(|| params.get("thread").and_then(|thread| thread.get("id")))
        .and_then(serde_json::Value::as_str)
        .map(str::to_owned)
}
