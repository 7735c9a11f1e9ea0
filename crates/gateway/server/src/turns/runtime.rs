//! [`TurnRuntime`]: what runs a turn. The Gateway admits and records turns; a runtime (native
//! workers or Codex, on the Harness) produces the reply. The Gateway itself never calls a model.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;

use gatehouse_api::events::ARTIFACT_REFUSED;
use gatehouse_api::events::ARTIFACT_STORED;
use gatehouse_api::events::ArtifactRefused;
use gatehouse_api::events::ArtifactStored;
use gatehouse_api::events::MESSAGE_COMPLETED;
use gatehouse_api::events::MESSAGE_DELTA;
use gatehouse_api::events::MODEL_RETRY;
use gatehouse_api::events::MessageCompleted;
use gatehouse_api::events::MessageDelta;
use gatehouse_api::events::ModelRetry;
use gatehouse_api::events::TOOL_COMPLETED;
use gatehouse_api::events::TOOL_STARTED;
use gatehouse_api::events::ToolCompleted;
use gatehouse_api::events::ToolStarted;
use gatehouse_api::events::TruncatedArguments;
use gatehouse_api::sessions::TurnError;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::worker::TokenUsage;
use gatehouse_store::Store;
use gatehouse_store::cluster::Fence;
use gatehouse_store::records::NewTurnMessage;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::turns::events::EventHub;
use gatehouse_protocol::time::now_ms;

/// What a runtime gets for one turn.
#[derive(Debug)]
pub struct TurnInput {
    /// The session.
    pub session_key: String,
    /// The turn.
    pub turn_id: String,
    /// The user texts of the turn, in order (several when messages were collected).
    pub user_texts: Vec<String>,
    /// Workspace-relative paths of the staged attachments.
    pub attachments: Vec<String>,
    /// Cancelled when the turn is aborted or the Gateway shuts down.
    pub cancel: CancellationToken,
    /// Texts steered into the running turn (`queueMode: "steer"`).
    pub steer: mpsc::Receiver<String>,
}

/// How a turn failed: a stable code and a message that says what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnFailure {
    /// The stable code, for example `MODEL_UNAVAILABLE` or `NO_RUNTIME`.
    pub code: String,
    /// What happened.
    pub message: String,
}

impl TurnFailure {
    /// Returns a failure with `code` and `message`. `code` is an
    /// [`ErrorCode`](gatehouse_protocol::error::ErrorCode), or the text of a code relayed from a
    /// node or a runtime, which this build may not know.
    pub fn new(code: impl AsRef<str>, message: impl Into<String>) -> Self {
        Self {
            code: code.as_ref().to_owned(),
            message: message.into(),
        }
    }
}

/// The most bytes of a failed turn's message the Gateway stores (4 KiB); a longer one, which a
/// node or a runtime may send, is cut with a marker.
pub(crate) const MAX_TURN_ERROR_MESSAGE_BYTES: usize = 4 * 1024;

impl TurnFailure {
    /// Returns the failure as the Gateway stores it: a code of the catalogue (a code this build
    /// does not know becomes `UNRECOGNIZED_CODE`, and the code as sent, cut by
    /// [`crate::audit::bounded_str`], leads the message), and a message of at most
    /// [`MAX_TURN_ERROR_MESSAGE_BYTES`].
    pub(crate) fn bounded(self) -> Self {
        let (code, message) = match ErrorCode::parse(&self.code) {
            Some(code) => (code, self.message),
            None => (
                ErrorCode::UnrecognizedCode,
                format!(
                    "{}: {}",
                    crate::audit::bounded_str(&self.code),
                    self.message
                ),
            ),
        };
        Self {
            code: String::from(code),
            message: bounded_text(&message, MAX_TURN_ERROR_MESSAGE_BYTES).into_owned(),
        }
    }
}

/// What a completed turn gives back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TurnReply {
    /// The turn's reply.
    pub text: String,
    /// The tokens the turn's model calls used, when the model reported them; stored with the
    /// turn and answered as `usage` by `GET /v1/turns/{id}` and the chat completions.
    pub usage: Option<TokenUsage>,
}

impl From<String> for TurnReply {
    /// A reply whose model reported no usage.
    fn from(text: String) -> Self {
        Self { text, usage: None }
    }
}

/// Which Harness nodes a runtime's turns run on: a session's turns are dispatched by the
/// Gateway replica that holds the link of such a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    /// The commands the node must serve.
    pub commands: &'static [&'static str],
    /// Whether each session is bound to one node (native: its workspace and worker live
    /// there), or any serving node runs its turns (Codex: one app-server node).
    pub binds_sessions: bool,
}

/// Runs turns.
#[async_trait::async_trait]
pub trait TurnRuntime: Send + Sync + 'static {
    /// The runtime's name, recorded on sessions: `native` or `codex`.
    fn name(&self) -> &str;

    /// The nodes this runtime's turns run on; `None` (the default) for a runtime that needs
    /// no node, whose turns run on whichever replica claims them.
    fn placement(&self) -> Option<Placement> {
        None
    }

    /// Whether a running turn accepts steered input.
    fn supports_steer(&self) -> bool;

    /// Runs one turn to its end. Complete messages are committed through `sink` as they finish;
    /// the returned [`TurnReply`] is the turn's reply and its token usage.
    ///
    /// # Errors
    /// A [`TurnFailure`] with a stable code; the Gateway records it and the session stays usable.
    async fn run_turn(&self, input: TurnInput, sink: TurnSink) -> Result<TurnReply, TurnFailure>;

    /// Whether the runtime can take a turn now, beyond a connected node (for Codex: an
    /// initialized app-server connection). `/readyz` reports the failure's code and message.
    ///
    /// # Errors
    /// A [`TurnFailure`] saying what is missing.
    async fn readiness(&self) -> Result<(), TurnFailure> {
        Ok(())
    }
}

/// The roles a runtime may commit to a transcript (a node's worker included): `user` messages
/// come only from the API.
pub(crate) const RUNTIME_ROLES: &[&str] = &["assistant", "tool"];

/// The most bytes of one committed message's content; the rest is cut at a character boundary
/// and replaced by a marker naming how much was left out.
pub const MAX_MESSAGE_BYTES: usize = 1024 * 1024;

/// The most bytes of one `tool.started` event's arguments as JSON; larger arguments are stored
/// as `{"truncated": true, "bytes": N}`.
pub const MAX_TOOL_ARGUMENTS_BYTES: usize = 64 * 1024;

/// What one reported model call or retry counts against [`MAX_TURN_STORED_BYTES`], whatever
/// its size: so a turn takes at most 4,096 of them, and a node cannot turn a flood of reports
/// into a flood of store writes.
const USAGE_REPORT_BYTES: usize = 16 * 1024;

/// The most tokens of each kind one reported model call may add; more is counted as this. With
/// at most 4,096 calls a turn, no sum of turns a node can report overflows the store's 64-bit
/// columns for years of turns.
pub(crate) const MAX_TOKENS_PER_CALL: u64 = 1 << 32;

/// The most bytes of a `model.retry` event's message; the rest is cut.
const MAX_RETRY_MESSAGE_BYTES: usize = 1024;

/// The most bytes a tool name may have in a stored message or event; longer names are cut.
pub(crate) const MAX_TOOL_NAME_BYTES: usize = 256;

/// The most bytes one turn may store in the transcript and the event log together (message
/// contents and tool arguments, after the cuts above); past it the turn fails with
/// `TURN_STORAGE_EXCEEDED`. A runtime, or a hostile node, can so add at most this much durable
/// state per turn.
pub const MAX_TURN_STORED_BYTES: u64 = 64 * 1024 * 1024;

/// Returns `text` cut to at most `max` bytes at a character boundary, with a marker when cut.
/// Returns the JSON of an event payload. The payload types serialize only strings, numbers,
/// booleans and maps with string keys, so the conversion cannot fail; `null` stands in if it
/// ever did.
fn payload<T: serde::Serialize>(value: &T) -> serde_json::Value {
    serde_json::to_value(value).unwrap_or(serde_json::Value::Null)
}

fn bounded_text(text: &str, max: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= max {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!(
        "{}…[truncated {} bytes]",
        &text[..end],
        text.len() - end
    ))
}

/// A runtime's channel back to the Gateway for one turn: deltas are streamed, complete messages
/// and tool events are committed. Every commit is fenced: once the turn has ended (aborted,
/// interrupted) or the lease it was claimed under is no longer live, commits are refused.
#[derive(Clone)]
pub struct TurnSink {
    store: Arc<dyn Store>,
    hub: Arc<EventHub>,
    /// The lease the turn was claimed under.
    fence: Fence,
    session_key: String,
    turn_id: String,
    /// Bytes this turn has stored so far, against [`MAX_TURN_STORED_BYTES`].
    stored: Arc<AtomicU64>,
    /// The tokens this turn may use (`--turn-max-tokens`); `None`: no ceiling.
    ceiling: Option<u64>,
    /// The sum of the model calls reported so far ([`TurnSink::model_usage`]).
    usage: UsageMeter,
}

/// The running sum of a turn's reported model calls, shared by its sink and its driver; `None`
/// until a call is reported.
pub(crate) type UsageMeter = Arc<parking_lot::Mutex<Option<TokenUsage>>>;

/// The longest model name a turn's usage keeps, in bytes; a longer one (from a hostile node
/// host) is cut.
pub(crate) const MAX_MODEL_NAME_BYTES: usize = 128;

impl TurnSink {
    pub(crate) fn new(
        store: Arc<dyn Store>,
        hub: Arc<EventHub>,
        fence: Fence,
        session_key: String,
        turn_id: String,
    ) -> Self {
        Self {
            store,
            hub,
            fence,
            session_key,
            turn_id,
            stored: Arc::new(AtomicU64::new(0)),
            ceiling: None,
            usage: UsageMeter::default(),
        }
    }

    /// Returns this sink with the turn's token ceiling and the meter its reported calls are
    /// summed in.
    #[must_use]
    pub(crate) fn with_usage(mut self, ceiling: Option<u64>, meter: UsageMeter) -> Self {
        self.ceiling = ceiling;
        self.usage = meter;
        self
    }

    /// Returns the most tokens the turn may use, to send to the runtime; `None`: no ceiling.
    pub fn max_turn_tokens(&self) -> Option<u64> {
        self.ceiling
    }

    /// Counts one model call's `usage` against the turn: added to the turn in the store at
    /// once (so the daily budgets see it on every replica, also if the turn then fails) and to
    /// the turn's running sum.
    ///
    /// # Errors
    /// `TURN_BUDGET_EXCEEDED` once the sum passes the turn's ceiling (the call is counted
    /// first); `TURN_STORAGE_EXCEEDED` past the turn's storage budget, which each report
    /// charges [`USAGE_REPORT_BYTES`]; `TURN_FENCED` when the turn is no longer running; a store
    /// failure.
    pub async fn model_usage(&self, mut usage: TokenUsage) -> Result<(), TurnFailure> {
        // Each report is a store write: a node that floods them fills the turn's storage budget
        // and ends it, like one that floods tool events.
        self.charge(USAGE_REPORT_BYTES)?;
        usage.model = usage
            .model
            .map(|model| bounded_text(&model, MAX_MODEL_NAME_BYTES).into_owned());
        for count in [
            &mut usage.input_tokens,
            &mut usage.cached_input_tokens,
            &mut usage.output_tokens,
            &mut usage.total_tokens,
        ] {
            *count = (*count).min(MAX_TOKENS_PER_CALL);
        }
        usage.model_calls = usage.model_calls.min(1);
        usage.retries = usage.retries.min(u64::from(u8::MAX));
        // The total is recomputed rather than taken as sent: the parts are what is billed.
        usage.total_tokens = usage
            .input_tokens
            .saturating_add(usage.cached_input_tokens)
            .saturating_add(usage.output_tokens)
            .max(usage.total_tokens);
        match self
            .store
            .add_turn_usage(&self.fence, &self.turn_id, &usage)
            .await
        {
            Ok(true) => {}
            Ok(false) => {
                return Err(TurnFailure::new(
                    ErrorCode::TurnFenced,
                    "the turn is no longer running; its usage was not counted",
                ));
            }
            Err(error) => return Err(TurnFailure::new(error.code(), error.to_string())),
        }
        let total = {
            let mut sum = self.usage.lock();
            let added = match sum.take() {
                Some(sum) => sum.plus(usage),
                None => usage,
            };
            let total = added.total_tokens;
            *sum = Some(added);
            total
        };
        match self.ceiling {
            Some(ceiling) if total > ceiling => Err(TurnFailure::new(
                ErrorCode::TurnBudgetExceeded,
                format!(
                    "the turn's model calls used {total} tokens, more than the {ceiling} a turn may use (--turn-max-tokens); it was stopped"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Records that a model call is retried: the `model.retry` event.
    ///
    /// # Errors
    /// A [`TurnFailure`] when the event cannot be stored.
    pub async fn model_retry(
        &self,
        attempt: u32,
        code: &str,
        message: &str,
        delay_ms: u64,
    ) -> Result<(), TurnFailure> {
        let code = bounded_text(code, MAX_TOOL_NAME_BYTES);
        let message = bounded_text(message, MAX_RETRY_MESSAGE_BYTES);
        self.charge(USAGE_REPORT_BYTES + code.len() + message.len())?;
        let retry = ModelRetry {
            turn_id: self.turn_id.clone(),
            attempt,
            code: code.into_owned(),
            message: message.into_owned(),
            delay_ms,
        };
        self.event(MODEL_RETRY, payload(&retry)).await
    }

    /// Returns the lease the turn was claimed under, which the turn's other writes (its
    /// checkpoint, its worktree result) carry too.
    pub(crate) fn fence(&self) -> &Fence {
        &self.fence
    }

    /// Counts `bytes` against the turn's storage budget.
    fn charge(&self, bytes: usize) -> Result<(), TurnFailure> {
        let bytes = u64::try_from(bytes).unwrap_or(u64::MAX);
        let total = self
            .stored
            .fetch_add(bytes, Ordering::Relaxed)
            .saturating_add(bytes);
        if total > MAX_TURN_STORED_BYTES {
            return Err(TurnFailure::new(
                ErrorCode::TurnStorageExceeded.as_str(),
                format!(
                    "the turn stored more than {MAX_TURN_STORED_BYTES} bytes of messages and tool events; it was stopped"
                ),
            ));
        }
        Ok(())
    }

    /// Streams a piece of assistant text. Not stored.
    pub fn delta(&self, text: &str) {
        self.hub.publish_ephemeral(
            &self.session_key,
            MESSAGE_DELTA,
            payload(&MessageDelta {
                turn_id: self.turn_id.clone(),
                text: text.to_owned(),
            }),
        );
    }

    /// Records that a tool started.
    ///
    /// # Errors
    /// A [`TurnFailure`] when the event cannot be stored.
    pub async fn tool_started(
        &self,
        tool: &str,
        arguments: &serde_json::Value,
    ) -> Result<(), TurnFailure> {
        let tool = bounded_text(tool, MAX_TOOL_NAME_BYTES);
        let size = serde_json::to_string(arguments).map_or(0, |text| text.len());
        let arguments = match size > MAX_TOOL_ARGUMENTS_BYTES {
            true => payload(&TruncatedArguments {
                truncated: true,
                bytes: size,
            }),
            false => arguments.clone(),
        };
        self.charge(tool.len() + size.min(MAX_TOOL_ARGUMENTS_BYTES))?;
        let started = ToolStarted {
            turn_id: self.turn_id.clone(),
            tool: tool.into_owned(),
            arguments,
        };
        self.event(TOOL_STARTED, payload(&started)).await
    }

    /// Records that a tool finished.
    ///
    /// # Errors
    /// A [`TurnFailure`] when the event cannot be stored.
    pub async fn tool_completed(&self, tool: &str, ok: bool) -> Result<(), TurnFailure> {
        let tool = bounded_text(tool, MAX_TOOL_NAME_BYTES);
        self.charge(tool.len())?;
        let completed = ToolCompleted {
            turn_id: self.turn_id.clone(),
            tool: tool.into_owned(),
            ok,
        };
        self.event(TOOL_COMPLETED, payload(&completed)).await
    }

    /// Records that a reply artifact was fetched from the Harness into the media store.
    pub async fn artifact_stored(&self, path: &str, media_id: &str, size: u64) {
        // The session holds its reply artifacts: a key limited to its prefix may download them.
        let grantee = format!("session:{}", self.session_key);
        if let Err(error) = self
            .store
            .grant_media(media_id, &grantee, gatehouse_protocol::time::now_ms())
            .await
        {
            tracing::error!(error = %error, media_id, "cannot record the session of a reply artifact");
        }
        let artifact = gatehouse_store::records::TurnArtifact {
            path: path.to_owned(),
            media_id: media_id.to_owned(),
            size_bytes: size,
        };
        if let Err(error) = self
            .store
            .record_turn_artifact(&self.turn_id, &artifact, gatehouse_protocol::time::now_ms())
            .await
        {
            tracing::error!(error = %error, media_id, "cannot record a reply artifact of the turn");
        }
        let stored = ArtifactStored {
            turn_id: self.turn_id.clone(),
            path: path.to_owned(),
            media_id: media_id.to_owned(),
            size,
        };
        if let Err(failure) = self.event(ARTIFACT_STORED, payload(&stored)).await {
            tracing::error!(code = %failure.code, "cannot record a reply artifact");
        }
    }

    /// Records that a reply artifact was refused or could not be fetched, with a stable code.
    pub async fn artifact_refused(&self, path: &str, code: &str, message: &str) {
        let refused = ArtifactRefused {
            turn_id: self.turn_id.clone(),
            path: path.to_owned(),
            error: TurnError {
                code: Some(code.to_owned()),
                message: Some(message.to_owned()),
            },
        };
        if let Err(failure) = self.event(ARTIFACT_REFUSED, payload(&refused)).await {
            tracing::error!(code = %failure.code, "cannot record a refused reply artifact");
        }
    }

    /// Commits a complete `assistant` or `tool` message and returns its transcript seq. A
    /// runtime never commits any other role: `user` messages come only from the API. Content
    /// past [`MAX_MESSAGE_BYTES`] is cut with a marker.
    ///
    /// # Errors
    /// `ROLE_NOT_ALLOWED` for any other role; `TURN_STORAGE_EXCEEDED` past
    /// [`MAX_TURN_STORED_BYTES`]; `TURN_FENCED` when the turn is no longer running;
    /// `STORE_FAILURE` otherwise.
    pub async fn commit(
        &self,
        role: &str,
        content: &str,
        tool_name: Option<&str>,
    ) -> Result<i64, TurnFailure> {
        if !RUNTIME_ROLES.contains(&role) {
            return Err(TurnFailure::new(
                gatehouse_protocol::error::ErrorCode::RoleNotAllowed.as_str(),
                "a runtime commits only assistant and tool messages",
            ));
        }
        self.commit_as(role, content, tool_name).await
    }

    /// Commits a `user` message steered into the running turn by the API.
    pub(crate) async fn commit_user(&self, content: &str) -> Result<i64, TurnFailure> {
        self.commit_as("user", content, None).await
    }

    async fn commit_as(
        &self,
        role: &str,
        content: &str,
        tool_name: Option<&str>,
    ) -> Result<i64, TurnFailure> {
        let content = bounded_text(content, MAX_MESSAGE_BYTES);
        let tool_name = tool_name.map(|name| bounded_text(name, MAX_TOOL_NAME_BYTES));
        self.charge(content.len() + tool_name.as_ref().map_or(0, |name| name.len()))?;
        let tool_name = tool_name.as_deref();
        let message = NewTurnMessage {
            turn_id: self.turn_id.clone(),
            role: role.to_owned(),
            content: content.into_owned(),
            tool_name: tool_name.map(str::to_owned),
            now_ms: now_ms(),
        };
        match self.store.commit_turn_message(&self.fence, &message).await {
            Ok(Some(seq)) => {
                let completed = MessageCompleted {
                    turn_id: self.turn_id.clone(),
                    role: role.to_owned(),
                    tool_name: message.tool_name,
                };
                let _ = self.event(MESSAGE_COMPLETED, payload(&completed)).await;
                Ok(seq)
            }
            Ok(None) => Err(TurnFailure::new(
                ErrorCode::TurnFenced,
                "the turn is no longer running; the message was not committed",
            )),
            Err(error) => Err(TurnFailure::new(error.code(), error.to_string())),
        }
    }

    async fn event(&self, kind: &str, payload: serde_json::Value) -> Result<(), TurnFailure> {
        let appended = self
            .store
            .append_turn_event(&self.fence, &self.turn_id, kind, &payload, now_ms())
            .await
            .map_err(|error| TurnFailure::new(error.code(), error.to_string()))?;
        if appended.is_none() {
            return Err(TurnFailure::new(
                ErrorCode::TurnFenced,
                "the turn is no longer running; the event was not stored",
            ));
        }
        self.hub.sync(&self.session_key).await;
        Ok(())
    }
}
