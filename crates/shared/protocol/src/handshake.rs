//! The handshake: `connect.challenge` → `connect` → `hello-ok`.
//!
//! 1. On a new connection the Gateway sends the event [`ConnectChallenge`] with a fresh nonce and
//!    its clock `ts`.
//! 2. The node answers with the request `connect` and [`ConnectParams`]: who it is, the commands it
//!    serves, its Ed25519 device proof ([`DeviceProof`]) over the v3 payload built by
//!    [`device_signature_payload_v3`], and either a bootstrap token (first enrollment) or its
//!    device token ([`ConnectAuth`]).
//! 3. The Gateway answers with [`HelloOk`], which carries the issued device token on enrollment,
//!    the frame limits and the tick interval.
//!
//! The device id is the lowercase hex SHA-256 of the raw 32-byte public key; the public key and
//! signature are base64url without padding. `signedAt` must equal the challenge `ts`, within a
//! skew of [`SIGNATURE_SKEW_MS`] of the Gateway's clock.

use crate::runtime::RuntimeKind;
use serde::Deserialize;
use serde::Serialize;

/// The protocol version this build speaks.
pub const PROTOCOL_VERSION: u32 = 5;

/// The first protocol version whose nodes apply a turn's own tool denials
/// (`AgentTurnParams::denied_tools`): the Gateway runs a turn with denials only on such a node.
pub const TURN_DENIALS_PROTOCOL: u32 = 5;

/// The largest accepted difference between `signedAt` and the Gateway's clock: 120 s.
pub const SIGNATURE_SKEW_MS: i64 = 120_000;

/// The role a node connects with.
pub const ROLE_NODE: &str = "node";

/// The `client.id` of a node host.
pub const CLIENT_ID_NODE_HOST: &str = "node-host";

/// The `client.mode` of a node host.
pub const CLIENT_MODE_NODE: &str = "node";

/// Payload of the `connect.challenge` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectChallenge {
    /// A fresh random value the device must sign.
    pub nonce: String,
    /// The Gateway's clock in Unix milliseconds; the device signs it as `signedAt`.
    pub ts: i64,
}

/// Parameters of the `connect` request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectParams {
    /// The lowest protocol version the client speaks.
    pub min_protocol: u32,
    /// The highest protocol version the client speaks.
    pub max_protocol: u32,
    /// Who the client is.
    pub client: ClientInfo,
    /// The role requested; a node host sends [`ROLE_NODE`].
    pub role: String,
    /// Requested scopes; empty for a node.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// The exact commands this node serves.
    #[serde(default)]
    pub commands: Vec<String>,
    /// The device's signed proof of identity.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceProof>,
    /// The credential presented with the proof.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ConnectAuth>,
    /// Gatehouse extension: the runtime the node hosts, `native` or `codex`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<RuntimeKind>,
    /// Gatehouse extension: the absolute path of the Agent workspace on the node, the remote root
    /// that Gateway paths are mapped under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_root: Option<String>,
}

/// The `client` object of [`ConnectParams`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientInfo {
    /// The client kind; a node host sends [`CLIENT_ID_NODE_HOST`].
    pub id: String,
    /// A name for operators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub display_name: Option<String>,
    /// The client's version.
    pub version: String,
    /// The operating system, for example `linux`.
    pub platform: String,
    /// The device family, for example `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_family: Option<String>,
    /// The client mode; a node host sends [`CLIENT_MODE_NODE`].
    pub mode: String,
}

/// The device's signed proof of identity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DeviceProof {
    /// Lowercase hex SHA-256 of the raw public key.
    pub id: String,
    /// The raw 32-byte Ed25519 public key, base64url without padding.
    pub public_key: String,
    /// The Ed25519 signature of the v3 payload, base64url without padding.
    pub signature: String,
    /// The challenge `ts` that was signed, in Unix milliseconds.
    pub signed_at: i64,
    /// The challenge nonce that was signed.
    pub nonce: String,
}

/// The credential of [`ConnectParams`]: a bootstrap token for the first enrollment, a device
/// token afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConnectAuth {
    /// The one-time bootstrap token from a setup code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootstrap_token: Option<String>,
    /// The device token issued by an earlier `hello-ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_token: Option<String>,
}

impl ConnectAuth {
    /// Returns the token that the v3 signature covers: the device token if present, else the
    /// bootstrap token, else the empty string.
    pub fn signed_token(&self) -> &str {
        self.device_token
            .as_deref()
            .or(self.bootstrap_token.as_deref())
            .unwrap_or("")
    }
}

/// The fields the v3 device signature covers.
#[derive(Debug, Clone, Copy)]
pub struct SignatureFields<'a> {
    /// The device id.
    pub device_id: &'a str,
    /// `client.id`.
    pub client_id: &'a str,
    /// `client.mode`.
    pub client_mode: &'a str,
    /// The requested role.
    pub role: &'a str,
    /// The requested scopes.
    pub scopes: &'a [String],
    /// The signed time, equal to the challenge `ts`.
    pub signed_at_ms: i64,
    /// The token presented in `auth` ([`ConnectAuth::signed_token`]).
    pub token: &'a str,
    /// The challenge nonce.
    pub nonce: &'a str,
    /// `client.platform`.
    pub platform: &'a str,
    /// `client.deviceFamily`, or empty.
    pub device_family: &'a str,
}

/// Returns the UTF-8 string a device signs, version 3:
/// `v3|deviceId|clientId|clientMode|role|scopesCsv|signedAtMs|token|nonce|platformLower|deviceFamilyLower`.
pub fn device_signature_payload_v3(fields: &SignatureFields<'_>) -> String {
    format!(
        "v3|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
        fields.device_id,
        fields.client_id,
        fields.client_mode,
        fields.role,
        fields.scopes.join(","),
        fields.signed_at_ms,
        fields.token,
        fields.nonce,
        fields.platform.to_lowercase(),
        fields.device_family.to_lowercase(),
    )
}

/// The payload of the successful `connect` response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloOk {
    /// Always `hello-ok`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The negotiated protocol version.
    pub protocol: u32,
    /// Who the server is.
    pub server: ServerInfo,
    /// What the connection was authenticated as, and the issued device token.
    pub auth: HelloAuth,
    /// Limits the client must respect.
    pub policy: HelloPolicy,
}

/// The `server` object of [`HelloOk`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    /// The Gateway's version.
    pub version: String,
    /// An id for this connection, for logs on both sides.
    pub conn_id: String,
}

/// The `details` of the error a refused `connect` is answered with: the finer reason (for
/// example `SIGNATURE_INVALID` or `CODE_EXPIRED`) beside the error's code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectRefusalDetails {
    /// The finer reason, a stable code.
    pub reason: String,
}

/// The `auth` object of [`HelloOk`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloAuth {
    /// How the client authenticated: `bootstrap-token` or `device-token`.
    pub method: String,
    /// The granted role.
    pub role: String,
    /// The granted scopes.
    #[serde(default)]
    pub scopes: Vec<String>,
    /// A newly issued device token; present after enrollment with a bootstrap token. The node
    /// stores it and presents it on every later connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_token: Option<String>,
    /// When the device token was issued, in Unix milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued_at_ms: Option<i64>,
}

/// The `policy` object of [`HelloOk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelloPolicy {
    /// The largest frame either side may send from now on, in bytes.
    pub max_payload: u64,
    /// The most bytes the server buffers for this client before dropping it.
    pub max_buffered_bytes: u64,
    /// The interval of the server's `tick` events; the client treats two missed ticks as a dead
    /// link.
    pub tick_interval_ms: u64,
}
