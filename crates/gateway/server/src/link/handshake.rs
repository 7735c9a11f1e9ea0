//! Verifying a node's `connect` request: device signature, token, and enrollment.

use base64::Engine;
use ed25519_dalek::Signature;
use ed25519_dalek::VerifyingKey;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::handshake::CLIENT_MODE_NODE;
use gatehouse_protocol::handshake::ConnectChallenge;
use gatehouse_protocol::handshake::ConnectParams;
use gatehouse_protocol::handshake::PROTOCOL_VERSION;
use gatehouse_protocol::handshake::ROLE_NODE;
use gatehouse_protocol::handshake::SIGNATURE_SKEW_MS;
use gatehouse_protocol::handshake::SignatureFields;
use gatehouse_protocol::handshake::device_signature_payload_v3;
use gatehouse_protocol::runtime::RuntimeKind;
use gatehouse_store::Store;
use gatehouse_store::records::EnrollOutcome;
use gatehouse_store::records::Enrollment;
use gatehouse_store::records::NodeRecord;

use crate::secrets::random_token;
use crate::secrets::secrets_equal;
use crate::secrets::sha256_hex;

/// The lowest protocol version a node may speak.
pub(crate) const MIN_NODE_PROTOCOL: u32 = 3;

/// Why a `connect` was refused: a stable code, a detail code and a message for the node's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    /// The stable error code sent to the node and written to the audit trail.
    pub code: ErrorCode,
    /// A finer reason, for example `SIGNATURE_INVALID` or `CODE_EXPIRED`.
    pub reason: ErrorCode,
    /// What happened and what to do.
    pub message: String,
}

impl Refusal {
    fn new(code: ErrorCode, reason: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            reason,
            message: message.into(),
        }
    }
}

/// How an accepted node authenticated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Admission {
    /// With a setup code: the node is now enrolled, and this device token was issued to it.
    Enrolled {
        /// The new device token; sent once in `hello-ok` and stored only as a hash.
        device_token: String,
    },
    /// With the device token issued at enrollment.
    Reconnected,
}

/// Verifies `params` against `challenge` at time `now_ms`, then authenticates with the store:
/// a device token must match the enrolled node, and a bootstrap token consumes its setup code and
/// enrolls the node.
///
/// # Errors
/// A [`Refusal`] for every reason a node is not admitted; storage failures become
/// [`ErrorCode::Unavailable`].
pub(crate) async fn admit(
    store: &dyn Store,
    challenge: &ConnectChallenge,
    params: &ConnectParams,
    now_ms: i64,
) -> Result<Admission, Refusal> {
    if params.role != ROLE_NODE || params.client.mode != CLIENT_MODE_NODE {
        return Err(Refusal::new(
            ErrorCode::InvalidRequest,
            ErrorCode::RoleNotNode,
            "only nodes connect to /node: role and client.mode must be \"node\"",
        ));
    }
    if params.min_protocol > PROTOCOL_VERSION || params.max_protocol < MIN_NODE_PROTOCOL {
        return Err(Refusal::new(
            ErrorCode::InvalidRequest,
            ErrorCode::ProtocolUnsupported,
            format!(
                "this gateway speaks protocol {MIN_NODE_PROTOCOL}..={PROTOCOL_VERSION}; upgrade the node"
            ),
        ));
    }
    verify_device(challenge, params, now_ms)?;
    let Some(device) = params.device.as_ref() else {
        return Err(Refusal::new(
            ErrorCode::DeviceAuthFailed,
            ErrorCode::DeviceRequired,
            "a node must present a signed device identity",
        ));
    };
    let auth = params.auth.clone().unwrap_or_default();
    if let Some(device_token) = auth.device_token.as_deref() {
        let node = store.node(&device.id).await.map_err(store_refusal)?;
        let Some(node) = node else {
            return Err(Refusal::new(
                ErrorCode::Unauthorized,
                ErrorCode::DeviceUnknown,
                "this device is not enrolled; enroll it again with a new setup code",
            ));
        };
        let presented = sha256_hex(device_token.as_bytes());
        let key_matches = secrets_equal(node.public_key.as_bytes(), device.public_key.as_bytes());
        if !key_matches || !secrets_equal(presented.as_bytes(), node.device_token_sha256.as_bytes())
        {
            return Err(Refusal::new(
                ErrorCode::Unauthorized,
                ErrorCode::DeviceTokenMismatch,
                "the device token is not the one issued to this device; enroll it again with a new setup code",
            ));
        }
        return Ok(Admission::Reconnected);
    }
    let Some(bootstrap_token) = auth.bootstrap_token.as_deref() else {
        return Err(Refusal::new(
            ErrorCode::Unauthorized,
            ErrorCode::TokenRequired,
            "present a device token, or a bootstrap token from a setup code",
        ));
    };
    let device_token = random_token().map_err(|error| {
        Refusal::new(
            ErrorCode::Internal,
            ErrorCode::RandomFailed,
            format!("cannot issue a token: {error}"),
        )
    })?;
    let enrollment = Enrollment {
        token_sha256: sha256_hex(bootstrap_token.as_bytes()),
        now_ms,
        node: NodeRecord {
            device_id: device.id.clone(),
            public_key: device.public_key.clone(),
            display_name: listed_name(params, &device.id),
            runtime: declared_runtime(params).as_str().to_owned(),
            commands: params.commands.clone(),
            workspace_root: params.workspace_root.clone(),
            device_token_sha256: sha256_hex(device_token.as_bytes()),
            enrolled_at_ms: now_ms,
            last_seen_at_ms: now_ms,
        },
    };
    match store
        .enroll_node(&enrollment)
        .await
        .map_err(store_refusal)?
    {
        EnrollOutcome::Enrolled => Ok(Admission::Enrolled { device_token }),
        EnrollOutcome::UnknownCode => Err(Refusal::new(
            ErrorCode::SetupCodeInvalid,
            ErrorCode::CodeUnknown,
            "the setup code is not known to this gateway; issue a new one with `gatehouse setup-code`",
        )),
        EnrollOutcome::ExpiredCode => Err(Refusal::new(
            ErrorCode::SetupCodeInvalid,
            ErrorCode::CodeExpired,
            "the setup code expired; issue a new one with `gatehouse setup-code`",
        )),
        EnrollOutcome::UsedCode => Err(Refusal::new(
            ErrorCode::SetupCodeInvalid,
            ErrorCode::CodeUsed,
            "the setup code was already used; issue a new one with `gatehouse setup-code`",
        )),
    }
}

/// Checks the device proof: key format, id = sha256(key), nonce, `signedAt` = challenge `ts`
/// within ±120 s of now, and the Ed25519 signature over the v3 payload.
fn verify_device(
    challenge: &ConnectChallenge,
    params: &ConnectParams,
    now_ms: i64,
) -> Result<(), Refusal> {
    let Some(device) = params.device.as_ref() else {
        return Err(Refusal::new(
            ErrorCode::DeviceAuthFailed,
            ErrorCode::DeviceRequired,
            "a node must present a signed device identity",
        ));
    };
    let failed =
        |reason, message: &str| Err(Refusal::new(ErrorCode::DeviceAuthFailed, reason, message));
    let engine = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let Ok(key_bytes) = engine.decode(&device.public_key) else {
        return failed(
            ErrorCode::PublicKeyInvalid,
            "device.publicKey is not base64url",
        );
    };
    let Ok(key_array) = <[u8; 32]>::try_from(key_bytes.as_slice()) else {
        return failed(
            ErrorCode::PublicKeyInvalid,
            "device.publicKey is not 32 bytes",
        );
    };
    let Ok(key) = VerifyingKey::from_bytes(&key_array) else {
        return failed(
            ErrorCode::PublicKeyInvalid,
            "device.publicKey is not an Ed25519 key",
        );
    };
    if !secrets_equal(sha256_hex(&key_array).as_bytes(), device.id.as_bytes()) {
        return failed(
            ErrorCode::DeviceIdMismatch,
            "device.id is not the sha256 of device.publicKey",
        );
    }
    if !secrets_equal(device.nonce.as_bytes(), challenge.nonce.as_bytes()) {
        return failed(
            ErrorCode::NonceMismatch,
            "device.nonce is not the challenge nonce",
        );
    }
    if (now_ms - device.signed_at).abs() > SIGNATURE_SKEW_MS {
        return failed(
            ErrorCode::SignatureExpired,
            "device.signedAt is more than 120 s from the gateway clock; check the node's clock",
        );
    }
    if device.signed_at != challenge.ts {
        return failed(
            ErrorCode::SignedAtMismatch,
            "device.signedAt is not the challenge ts",
        );
    }
    let Ok(signature_bytes) = engine.decode(&device.signature) else {
        return failed(
            ErrorCode::SignatureInvalid,
            "device.signature is not base64url",
        );
    };
    let Ok(signature) = Signature::from_slice(&signature_bytes) else {
        return failed(
            ErrorCode::SignatureInvalid,
            "device.signature is not 64 bytes",
        );
    };
    let auth = params.auth.clone().unwrap_or_default();
    let device_family = params.client.device_family.clone().unwrap_or_default();
    let payload = device_signature_payload_v3(&SignatureFields {
        device_id: &device.id,
        client_id: &params.client.id,
        client_mode: &params.client.mode,
        role: &params.role,
        scopes: &params.scopes,
        signed_at_ms: device.signed_at,
        token: auth.signed_token(),
        nonce: &device.nonce,
        platform: &params.client.platform,
        device_family: &device_family,
    });
    if key.verify_strict(payload.as_bytes(), &signature).is_err() {
        return failed(
            ErrorCode::SignatureInvalid,
            "the device signature does not verify",
        );
    }
    Ok(())
}

/// The name a node is listed under: the one its client gives, or the first 12 characters of
/// its device id.
pub(crate) fn listed_name(params: &ConnectParams, device_id: &str) -> String {
    params
        .client
        .display_name
        .clone()
        .unwrap_or_else(|| device_id.chars().take(12).collect())
}

/// The runtime a node declares in `connect`; `native` when it declares none.
pub(crate) fn declared_runtime(params: &ConnectParams) -> RuntimeKind {
    params.runtime.unwrap_or_default()
}

fn store_refusal(error: gatehouse_store::StoreError) -> Refusal {
    tracing::error!(error = %error, "store failure during node admission");
    Refusal::new(
        ErrorCode::Unavailable,
        ErrorCode::StoreUnavailable,
        "the gateway cannot reach its store; retry later",
    )
}
