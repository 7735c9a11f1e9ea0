//! The channels' routes: `GET /v1/channels`, the pairing routes, and the signed webhook kind's
//! inbound and reply bodies (`POST /channels/{name}/inbound`).

use schemars::JsonSchema;
use serde::Deserialize;
use serde::Serialize;

/// A channel's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChannelKind {
    /// A Matrix homeserver (client–server API).
    Matrix,
    /// Signed webhooks in and out.
    Webhook,
    /// Slack.
    Slack,
    /// Telegram's Bot API.
    Telegram,
}

impl ChannelKind {
    /// Returns the kind as the config file and the API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            ChannelKind::Matrix => "matrix",
            ChannelKind::Webhook => "webhook",
            ChannelKind::Slack => "slack",
            ChannelKind::Telegram => "telegram",
        }
    }
}

/// Whether a channel is receiving and delivering.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChannelState {
    /// Starting, or reconnecting after a failure.
    Connecting,
    /// Receiving, and its last delivery attempt (if any) succeeded.
    Connected,
    /// Receiving, but a delivery is being retried, or one was given up after the last
    /// success (see `lastError`).
    Degraded,
    /// Not running on this Gateway.
    Stopped,
}

/// The answer of `GET /v1/channels`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChannelList {
    /// The configured channels, in the config file's order.
    pub channels: Vec<ChannelStatus>,
}

/// One channel's state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChannelStatus {
    /// Its configured name.
    pub name: String,
    /// Its kind.
    pub kind: ChannelKind,
    /// The agent its sessions belong to.
    pub agent: String,
    /// Whether it is receiving and delivering.
    pub state: ChannelState,
    /// When its last message was received, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_inbound_at: Option<i64>,
    /// When the platform last took one of its replies, Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_delivery_at: Option<i64>,
    /// Replies in its outbox not yet delivered or given up.
    pub pending_deliveries: u64,
    /// Its latest failure, when newer than its latest success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<ChannelError>,
}

/// A channel's latest failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ChannelError {
    /// The stable code.
    pub code: String,
    /// What happened; never content or credentials.
    pub message: String,
}

/// The answer of `GET /v1/channels/{name}/pairings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PairingList {
    /// The pending pairings, oldest first.
    pub pairings: Vec<Pairing>,
}

/// A pending pairing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pairing {
    /// The code the sender was given.
    pub code: String,
    /// The sender's platform id.
    pub sender: String,
    /// When the code stops being accepted, Unix milliseconds.
    pub expires_at_ms: i64,
}

/// The answer of `POST /v1/channels/{name}/pairings/{code}/approve`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PairingApproved {
    /// Always true.
    pub approved: bool,
    /// The sender now allowed on the channel.
    pub sender: String,
}

/// The answer of `DELETE /v1/channels/{name}/pairings/{code}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PairingDenied {
    /// Always true.
    pub denied: bool,
    /// The sender whose request was denied; it may ask again later.
    pub sender: String,
}

/// A file carried inline by a webhook message or reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookAttachment {
    /// The file's name.
    pub file_name: String,
    /// Its MIME type.
    pub mime_type: String,
    /// Its bytes, standard base64.
    pub base64: String,
}

/// The body of `POST /channels/{name}/inbound` for a `webhook` channel, signed with
/// `X-Gatehouse-Timestamp` and `X-Gatehouse-Signature`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct WebhookMessage {
    /// The sending system's id of the message: a repeated id admits nothing new.
    pub message_id: String,
    /// The sender's id.
    pub sender: String,
    /// The conversation (a room, a ticket); a direct message when left out or equal to
    /// `sender`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
    /// The text.
    pub text: String,
    /// Files, inline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<WebhookAttachment>,
}

/// Why a webhook message was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NotAcceptedReason {
    /// The sender must be paired first; a code was sent to it (once).
    Pairing,
    /// The channel's access policy refuses the sender or the conversation.
    Denied,
    /// The message was received before.
    Duplicate,
}

/// The answer of `POST /channels/{name}/inbound` for a `webhook` channel: `202` with the
/// session and turn when admitted, else `200` with the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookAnswer {
    /// Whether the message was admitted.
    pub accepted: bool,
    /// The session it joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_key: Option<String>,
    /// The turn it joined.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_id: Option<String>,
    /// Why it was not admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<NotAcceptedReason>,
}

/// The body a `webhook` channel POSTs to its `reply-url`, signed like the inbound messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhookDelivery {
    /// The outbox entry's id, the same on every retry: a receiver drops a repeat.
    pub delivery_id: String,
    /// The `messageId` it answers (absent for a notice such as a pairing approval).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_reply_to: Option<String>,
    /// The inbound message's conversation, or the sender for a direct message.
    pub conversation: String,
    /// The inbound message's sender: the reply's recipient.
    pub sender: String,
    /// The reply.
    pub text: String,
    /// Files, inline.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<WebhookAttachment>,
}
