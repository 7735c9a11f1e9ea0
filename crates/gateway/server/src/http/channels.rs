//! `POST /channels/{name}/inbound` (no bearer token: the platform's own signature),
//! `GET /v1/channels`, and the pairing routes `GET /v1/channels/{name}/pairings`,
//! `POST /v1/channels/{name}/pairings/{code}/approve`, `DELETE /v1/channels/{name}/pairings/{code}`
//! (admin, see [`crate::http::auth::ROUTE_SCOPES`]).
//!
//! An inbound request is checked in this order, and nothing is admitted unless every check
//! passes: the body is within [`MAX_INBOUND_BODY_BYTES`] (`413`, before the handler runs), the
//! channel exists, is enabled and takes inbound requests (`404 CHANNEL_NOT_FOUND`), the
//! signature and timestamp verify (`401 CHANNEL_SIGNATURE_INVALID`, audited at most
//! [`crate::audit::LIMITED_ROWS_PER_WINDOW`] rows per channel per minute), the body parses
//! (`400 INVALID_REQUEST`).

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::Path;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::Response;
use base64::Engine;
use gatehouse_api::channels::ChannelError;
use gatehouse_api::channels::ChannelList;
use gatehouse_api::channels::ChannelState;
use gatehouse_api::channels::ChannelStatus;
use gatehouse_api::channels::Pairing;
use gatehouse_api::channels::PairingApproved;
use gatehouse_api::channels::PairingDenied;
use gatehouse_api::channels::PairingList;
use gatehouse_api::channels::WebhookAnswer;
use gatehouse_api::channels::WebhookMessage;
use gatehouse_channels::webhook;
use gatehouse_protocol::error::ErrorCode;
use gatehouse_protocol::time::now_ms;
use gatehouse_store::records::NewDelivery;

use crate::GatewayState;
use crate::channels::Channel;
use crate::channels::FileSource;
use crate::channels::Inbound;
use crate::channels::InboundFile;
use crate::channels::LoopStatus;
use crate::channels::ReceiveParts;
use crate::channels::Received;
use crate::http::auth::Principal;
use crate::http::error::ApiError;
use crate::http::error::store_error;
use crate::http::sessions::MAX_TEXT_BYTES;

/// The largest inbound request body: 1 MiB.
pub(crate) const MAX_INBOUND_BODY_BYTES: usize = 1024 * 1024;

/// The longest platform id (message, sender, conversation) an inbound message may carry.
pub(crate) const MAX_PLATFORM_ID_BYTES: usize = 255;

/// `POST /channels/{name}/inbound`.
pub(crate) async fn inbound(
    State(state): State<Arc<GatewayState>>,
    Path(name): Path<String>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let not_found = || {
        ApiError::new(
            ErrorCode::ChannelNotFound,
            "no enabled channel of that name takes inbound requests",
        )
    };
    let channel = state.channels.enabled(&name).ok_or_else(not_found)?;
    if let Some(bot) = channel.slack() {
        return match &bot.signing_secret {
            Some(secret) => slack_inbound(&state, channel, bot, secret, &headers, body).await,
            None => Err(not_found()),
        };
    }
    if let Some(bot) = channel.telegram() {
        return match &bot.webhook {
            Some((_, secret)) => {
                telegram_inbound(&state, channel, bot, secret, &headers, &body).await
            }
            None => Err(not_found()),
        };
    }
    let secret = channel.webhook_secret().ok_or_else(not_found)?;
    let checked = match verify(&state, channel, secret, &headers, &body).await {
        Ok(()) => serde_json::from_slice::<WebhookMessage>(&body)
            .map_err(|error| ApiError::invalid_request(format!("invalid body: {error}")))
            .and_then(check_message),
        Err(refusal) => Err(refusal),
    };
    let inbound = checked.inspect_err(|_| state.channels.metrics.inbound(&name, "invalid"))?;
    let parts = receive_parts(&state);
    let received = crate::channels::receive(&parts, channel, inbound)
        .await
        .map_err(|error| store_error(&error))?;
    Ok(match received {
        Received::Admitted {
            session_key,
            turn_id,
        } => (
            StatusCode::ACCEPTED,
            Json(WebhookAnswer {
                accepted: true,
                session_key: Some(session_key),
                turn_id: Some(turn_id),
                reason: None,
            }),
        )
            .into_response(),
        // Nothing was recorded: the sending system may send it again once a turn ended.
        Received::Busy { share } => {
            return Err(ApiError::new(
                ErrorCode::RateLimited,
                format!(
                    "this sender has {share} turns queued or running on the channel already; send the message again once one ended"
                ),
            )
            .with_retry_after(crate::http::limits::TURN_RETRY_AFTER_SECONDS));
        }
        Received::NotAccepted(reason) => Json(WebhookAnswer {
            accepted: false,
            session_key: None,
            turn_id: None,
            reason: Some(reason),
        })
        .into_response(),
    })
}

/// An update the Bot API posted to a Telegram channel in webhook mode: verified by its secret
/// token header, then judged as a polled one. The answer is `200` unless the store failed
/// (`503`, so the Bot API posts it again; what was judged already admits nothing then).
async fn telegram_inbound(
    state: &Arc<GatewayState>,
    channel: &Channel,
    bot: &crate::channels::TelegramBot,
    secret: &gatehouse_channels::secret::Secret,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Response, ApiError> {
    let presented = headers
        .get(gatehouse_channels::telegram::SECRET_HEADER)
        .and_then(|value| value.to_str().ok());
    if !gatehouse_channels::telegram::secret_matches(secret, presented) {
        state
            .channels
            .metrics
            .inbound(&channel.spec.name, "invalid");
        let why = match presented {
            None => "no secret token header",
            Some(_) => "a wrong secret token",
        };
        return Err(refused(state, channel, why).await);
    }
    // An update this build cannot read is skipped with a 200, as a polled one is: a 4xx would
    // only make the Bot API post it again until it gives up.
    let Ok(update) = serde_json::from_slice::<gatehouse_channels::telegram::Update>(body) else {
        state
            .channels
            .metrics
            .inbound(&channel.spec.name, "invalid");
        tracing::info!(channel = %channel.spec.name, "skipped a Telegram update this build cannot read");
        return Ok(StatusCode::OK.into_response());
    };
    let me = bot.identity().await.map_err(unavailable)?;
    if let Some(incoming) = gatehouse_channels::telegram::interpret(&update, &me) {
        let parts = receive_parts(state);
        crate::channels::receive_update(
            &parts,
            channel,
            bot,
            incoming,
            &tokio_util::sync::CancellationToken::new(),
        )
        .await
        .map_err(|error| store_error(&error))?;
    }
    Ok(StatusCode::OK.into_response())
}

/// The answer to Slack's `url_verification` request: its challenge, echoed.
#[derive(serde::Serialize)]
struct SlackChallenge {
    challenge: String,
}

/// How long a Slack event is judged before the answer goes out: Slack waits 3 s, and retries
/// what it got no answer to.
const SLACK_ANSWER_WITHIN: std::time::Duration = std::time::Duration::from_secs(2);

/// A request Slack's Events API posted to a Slack channel: verified by its `v0` signature, then
/// the `url_verification` challenge is echoed, or the event judged. An event judged within
/// [`SLACK_ANSWER_WITHIN`] is answered `200` (`503` when the store failed, so Slack retries);
/// one that takes longer goes on after a `200`.
async fn slack_inbound(
    state: &Arc<GatewayState>,
    channel: &Channel,
    bot: &crate::channels::SlackBot,
    secret: &gatehouse_channels::secret::Secret,
    headers: &HeaderMap,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let scheme = &gatehouse_channels::slack::SIGNATURE;
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    if let Err(refusal) = webhook::verify_with(
        scheme,
        secret,
        header(scheme.timestamp_header),
        header(scheme.signature_header),
        &body,
        now_ms() / 1_000,
    ) {
        state
            .channels
            .metrics
            .inbound(&channel.spec.name, "invalid");
        return Err(refused(state, channel, &refusal.to_string()).await);
    }
    let callback: gatehouse_channels::slack::Callback =
        serde_json::from_slice(&body).map_err(|error| {
            state
                .channels
                .metrics
                .inbound(&channel.spec.name, "invalid");
            ApiError::invalid_request(format!("invalid event: {error}"))
        })?;
    if let gatehouse_channels::slack::Callback::UrlVerification { challenge } = callback {
        return Ok(Json(SlackChallenge { challenge }).into_response());
    }
    let me = bot.identity().await.map_err(unavailable)?;
    let Some(incoming) = callback.event_for(&me).and_then(|event| {
        gatehouse_channels::slack::interpret(&event, &me, channel.spec.require_mention)
    }) else {
        return Ok(StatusCode::OK.into_response());
    };
    let state = Arc::clone(state);
    let name = channel.spec.name.clone();
    let judging = tokio::spawn(async move {
        let Some((channel, bot)) = state
            .channels
            .enabled(&name)
            .and_then(|channel| Some((channel, channel.slack()?)))
        else {
            return Ok(());
        };
        crate::channels::receive_event(
            &receive_parts(&state),
            channel,
            bot,
            incoming,
            &tokio_util::sync::CancellationToken::new(),
        )
        .await
        .map(|_| ())
    });
    match crate::channels::judged_within(judging, SLACK_ANSWER_WITHIN).await {
        Some(Err(error)) => Err(store_error(&error)),
        // Judged, or going on after the answer (a failure then is logged, and the event lost:
        // Slack does not send an answered event again).
        Some(Ok(())) | None => Ok(StatusCode::OK.into_response()),
    }
}

/// What receiving needs, from the Gateway's state.
fn receive_parts(state: &GatewayState) -> ReceiveParts<'_> {
    ReceiveParts {
        store: &state.store,
        turns: &state.turns,
        audit: &state.audit,
        channels: &state.channels,
    }
}

/// A platform's bot that cannot be identified now: `503 CHANNEL_UNAVAILABLE`, so the platform
/// posts again.
fn unavailable(message: String) -> ApiError {
    ApiError::new(ErrorCode::ChannelUnavailable, message).with_retry_after(5)
}

/// Audits a refused inbound request (rate-limited per channel and action) and returns its
/// `401 CHANNEL_SIGNATURE_INVALID`.
async fn refused(state: &GatewayState, channel: &Channel, why: &str) -> ApiError {
    crate::channels::audit_channel(
        &state.audit,
        &channel.spec.name,
        "channel.inbound",
        "denied",
        Some(ErrorCode::ChannelSignatureInvalid.as_str()),
        serde_json::json!({"channel": channel.spec.name, "why": why}),
    )
    .await;
    ApiError::new(
        ErrorCode::ChannelSignatureInvalid,
        format!("the request is not verified: {why}"),
    )
}

/// Checks the request's signature headers against the channel's `secret`; a refusal is
/// audited, rate-limited per channel and action.
async fn verify(
    state: &GatewayState,
    channel: &Channel,
    secret: &gatehouse_channels::secret::Secret,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), ApiError> {
    let header = |name: &str| headers.get(name).and_then(|value| value.to_str().ok());
    let verified = webhook::verify(
        secret,
        header(webhook::TIMESTAMP_HEADER),
        header(webhook::SIGNATURE_HEADER),
        body,
        now_ms() / 1_000,
    );
    let Err(refusal) = verified else {
        return Ok(());
    };
    Err(refused(state, channel, &refusal.to_string()).await)
}

/// Checks a webhook message's fields and makes it platform-neutral.
fn check_message(message: WebhookMessage) -> Result<Inbound, ApiError> {
    for (field, value) in [
        ("messageId", Some(&message.message_id)),
        ("sender", Some(&message.sender)),
        ("conversation", message.conversation.as_ref()),
    ] {
        if let Some(value) = value
            && (value.is_empty() || value.len() > MAX_PLATFORM_ID_BYTES)
        {
            return Err(ApiError::invalid_request(format!(
                "{field} must be 1 to {MAX_PLATFORM_ID_BYTES} bytes"
            )));
        }
    }
    if message.text.trim().is_empty() && message.attachments.is_empty() {
        return Err(ApiError::invalid_request(
            "text must not be empty unless the message carries attachments",
        ));
    }
    if message.text.len() > MAX_TEXT_BYTES {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("text is over {MAX_TEXT_BYTES} bytes"),
        ));
    }
    if message.attachments.len() > gatehouse_channels::files::MAX_FILES_PER_MESSAGE {
        return Err(ApiError::invalid_request(format!(
            "at most {} attachments",
            gatehouse_channels::files::MAX_FILES_PER_MESSAGE
        )));
    }
    let mut files = Vec::with_capacity(message.attachments.len());
    for (index, attachment) in message.attachments.into_iter().enumerate() {
        if attachment.file_name.trim().is_empty() || attachment.file_name.len() > 255 {
            return Err(ApiError::invalid_request(format!(
                "attachments[{index}].fileName must be 1 to 255 bytes"
            )));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(attachment.base64.as_bytes())
            .map_err(|error| {
                ApiError::invalid_request(format!(
                    "attachments[{index}].base64 is not standard base64: {error}"
                ))
            })?;
        files.push(InboundFile {
            name: attachment.file_name,
            mime_type: attachment.mime_type,
            source: FileSource::Inline(bytes.into()),
        });
    }
    let group = message
        .conversation
        .filter(|conversation| *conversation != message.sender);
    Ok(Inbound {
        message_id: message.message_id,
        conversation: group.clone().unwrap_or_else(|| message.sender.clone()),
        sender: message.sender,
        group,
        thread: None,
        // A webhook message is sent to the agent: it is addressed by being sent.
        mentioned: true,
        text: message.text,
        files,
    })
}

/// `GET /v1/channels`.
pub(crate) async fn list_channels(
    State(state): State<Arc<GatewayState>>,
) -> Result<Json<ChannelList>, ApiError> {
    let mut channels = Vec::new();
    for channel in state.channels.all() {
        let figures = state
            .store
            .channel_figures(&channel.spec.name)
            .await
            .map_err(|error| store_error(&error))?;
        // A sync returns within two thirds of the channel's lease: a loop silent for a whole
        // lease is deaf.
        let status =
            channel.loop_status(state.config.replica.lease * crate::channels::SYNC_LEASE_FACTOR);
        let loop_error = match status.clone() {
            LoopStatus::Failing(message) => Some(ChannelError {
                code: ErrorCode::ChannelUnavailable.as_str().to_owned(),
                message,
            }),
            _ => None,
        };
        let delivery_error = figures.last_error.map(|message| ChannelError {
            code: ErrorCode::DeliveryFailed.as_str().to_owned(),
            message,
        });
        let state = match (channel.enabled(), status) {
            (false, _) => ChannelState::Stopped,
            (true, LoopStatus::Failing(_)) => ChannelState::Degraded,
            (true, LoopStatus::Starting) if channel.polls() => ChannelState::Connecting,
            (true, _) if delivery_error.is_some() => ChannelState::Degraded,
            (true, _) => ChannelState::Connected,
        };
        channels.push(ChannelStatus {
            name: channel.spec.name.clone(),
            kind: channel.spec.kind,
            agent: channel.spec.agent.clone(),
            state,
            last_inbound_at: figures.last_inbound_at_ms,
            last_delivery_at: figures.last_delivery_at_ms,
            pending_deliveries: figures.pending_deliveries,
            last_error: loop_error.or(delivery_error),
        });
    }
    Ok(Json(ChannelList { channels }))
}

/// Returns the configured channel `name` (enabled or not), or `404 CHANNEL_NOT_FOUND`.
fn configured<'a>(state: &'a GatewayState, name: &str) -> Result<&'a Channel, ApiError> {
    state
        .channels
        .get(name)
        .ok_or_else(|| ApiError::new(ErrorCode::ChannelNotFound, "no channel of that name"))
}

/// `GET /v1/channels/{name}/pairings`.
pub(crate) async fn list_pairings(
    State(state): State<Arc<GatewayState>>,
    Path(name): Path<String>,
) -> Result<Json<PairingList>, ApiError> {
    configured(&state, &name)?;
    let pairings = state
        .store
        .channel_pairings(&name, now_ms())
        .await
        .map_err(|error| store_error(&error))?
        .into_iter()
        .map(|pairing| Pairing {
            code: pairing.code,
            sender: pairing.sender,
            expires_at_ms: pairing.expires_at_ms,
        })
        .collect();
    Ok(Json(PairingList { pairings }))
}

fn pairing_not_found() -> ApiError {
    ApiError::new(
        ErrorCode::PairingNotFound,
        "no pairing with that code is pending on the channel",
    )
}

/// Audits an operator's decision on a pairing and returns its sender, or `404
/// PAIRING_NOT_FOUND` when no such pairing was pending.
async fn decided(
    state: &GatewayState,
    principal: &Principal,
    action: &str,
    channel: &str,
    sender: Result<Option<String>, gatehouse_store::StoreError>,
) -> Result<String, ApiError> {
    let sender = sender
        .map_err(|error| store_error(&error))?
        .ok_or_else(pairing_not_found)?;
    state
        .audit
        .record_caller(
            principal.actor(),
            action,
            "succeeded",
            None,
            serde_json::json!({"channel": channel, "sender": sender}),
        )
        .await;
    Ok(sender)
}

/// `POST /v1/channels/{name}/pairings/{code}/approve`.
pub(crate) async fn approve_pairing(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path((name, code)): Path<(String, String)>,
) -> Result<Json<PairingApproved>, ApiError> {
    configured(&state, &name)?;
    if !gatehouse_channels::pairing::plausible_code(&code) {
        return Err(pairing_not_found());
    }
    let notice = NewDelivery {
        delivery_id: crate::channels::new_delivery_id(),
        text: gatehouse_channels::pairing::APPROVED_NOTICE.to_owned(),
    };
    let sender = state
        .store
        .approve_channel_pairing(&name, &code, &notice, now_ms())
        .await;
    let sender = decided(&state, &principal, "channel.pairing.approve", &name, sender).await?;
    state.channels.wake();
    Ok(Json(PairingApproved {
        approved: true,
        sender,
    }))
}

/// `DELETE /v1/channels/{name}/pairings/{code}`.
pub(crate) async fn deny_pairing(
    State(state): State<Arc<GatewayState>>,
    Extension(principal): Extension<Principal>,
    Path((name, code)): Path<(String, String)>,
) -> Result<Json<PairingDenied>, ApiError> {
    configured(&state, &name)?;
    if !gatehouse_channels::pairing::plausible_code(&code) {
        return Err(pairing_not_found());
    }
    let sender = state
        .store
        .deny_channel_pairing(&name, &code, now_ms())
        .await;
    let sender = decided(&state, &principal, "channel.pairing.deny", &name, sender).await?;
    Ok(Json(PairingDenied {
        denied: true,
        sender,
    }))
}
