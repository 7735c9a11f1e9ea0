//! The `matrix` kind: a client of the Matrix client–server API (v3) for one bot account, what
//! a `/sync` answer means for the Gateway ([`interpret`]), and the adapter that sends replies.
//!
//! Platform ids are opaque: room ids of room version 12 have no `:server` part, so nothing here
//! parses an id's shape; ids go into URL paths percent-encoded as whole segments.
//! End-to-end encrypted rooms are not supported: an invite into one is rejected, and an
//! encrypted message is answered with a notice saying so ([`Input::Encrypted`]).

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde::Serialize;

use crate::adapter::Adapter;
use crate::adapter::Outgoing;
use crate::adapter::SendError;
use crate::files::OutgoingFile;
use crate::secret::Secret;
use crate::text::markdown_to_html;
use crate::text::split;

/// The most characters of one message the adapter sends; a longer reply is split. With the
/// HTML escaping of `formatted_body` (up to 6 bytes a character) and the plain `body` beside
/// it, an event stays well under the homeserver's 65,536 bytes.
pub const MAX_MESSAGE_CHARS: usize = 6_000;

/// The most characters of a message that replaces another (`m.replace`): an edit carries its
/// text twice (the `* ` fallback and `m.new_content`, each with its HTML), so half of
/// [`MAX_MESSAGE_CHARS`] keeps it as small.
pub const MAX_EDIT_CHARS: usize = MAX_MESSAGE_CHARS / 2;

/// How long one request other than `/sync` may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How many of a room's latest events a retried delivery looks through for the parts an
/// earlier attempt sent.
pub const RECENT_EVENTS: u32 = 100;

/// The notice an encrypted message is answered with.
pub const ENCRYPTED_NOTICE: &str = "This room is end-to-end encrypted, which this agent does not \
     support: it cannot read messages here. Write to it in an unencrypted room.";

/// The notice a file or image is answered with.
pub const UNSUPPORTED_NOTICE: &str = "This agent reads text messages and unencrypted files here; \
     this kind of message is not passed on.";

/// A failed Matrix request.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MatrixError {
    /// The homeserver answered an error.
    #[error("the homeserver answered HTTP {status} {errcode}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The Matrix `errcode` (`M_FORBIDDEN`, `M_LIMIT_EXCEEDED`, ...), or empty.
        errcode: String,
        /// The server's `retry_after_ms`, or its `Retry-After` header.
        retry_after: Option<Duration>,
    },
    /// The homeserver could not be reached or did not answer in time.
    #[error("the homeserver did not answer: {0}")]
    Transport(String),
    /// The answer is not what the API documents.
    #[error("the homeserver's answer is not understood: {0}")]
    Decode(String),
    /// A file is larger than the Gateway takes.
    #[error("the file is larger than {max_bytes} bytes")]
    TooLarge {
        /// The bound.
        max_bytes: u64,
    },
    /// A file's `mxc://` URI is malformed.
    #[error("the file's address is not an mxc:// URI")]
    BadUri,
}

impl MatrixError {
    /// Whether trying again later may work.
    #[must_use]
    pub fn transient(&self) -> bool {
        match self {
            MatrixError::Status { status, .. } => *status == 429 || *status >= 500,
            MatrixError::Transport(_) => true,
            MatrixError::Decode(_) | MatrixError::TooLarge { .. } | MatrixError::BadUri => false,
        }
    }
}

#[derive(Deserialize)]
struct ErrorBody {
    #[serde(default)]
    errcode: String,
    #[serde(default)]
    retry_after_ms: Option<u64>,
}

/// A bot account on a homeserver.
#[derive(Clone)]
pub struct MatrixClient {
    http: reqwest::Client,
    homeserver: url::Url,
    token: Secret,
}

/// The answer of `/sync`, kept opaque: read it with [`SyncAnswer::next_batch`] and
/// [`interpret`].
#[derive(Debug, Clone, Deserialize)]
pub struct SyncAnswer {
    next_batch: String,
    #[serde(default)]
    rooms: Rooms,
}

impl SyncAnswer {
    /// The token to pass as `since` next time.
    #[must_use]
    pub fn next_batch(&self) -> &str {
        &self.next_batch
    }
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Rooms {
    #[serde(default)]
    join: BTreeMap<String, JoinedRoom>,
    #[serde(default)]
    invite: BTreeMap<String, InvitedRoom>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct JoinedRoom {
    #[serde(default)]
    timeline: Events,
    #[serde(default)]
    summary: RoomSummary,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct RoomSummary {
    #[serde(default, rename = "m.joined_member_count")]
    joined_member_count: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct InvitedRoom {
    #[serde(default)]
    invite_state: Events,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Events {
    #[serde(default, deserialize_with = "each_event")]
    events: Vec<RoomEvent>,
}

/// Reads a list of events one by one, leaving out any that is not what the API documents: any
/// room member can send an event with odd fields, and one must never stop a channel's sync.
fn each_event<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Vec<RoomEvent>, D::Error> {
    let raw = serde_json::Value::deserialize(deserializer)?;
    let serde_json::Value::Array(events) = raw else {
        return Ok(Vec::new());
    };
    Ok(events
        .into_iter()
        .filter_map(|event| serde_json::from_value(event).ok())
        .collect())
}

#[derive(Debug, Clone, Deserialize)]
struct RoomEvent {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    sender: String,
    #[serde(default)]
    event_id: Option<String>,
    #[serde(default)]
    state_key: Option<String>,
    #[serde(default)]
    content: EventContent,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct EventContent {
    #[serde(default)]
    msgtype: Option<String>,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    membership: Option<String>,
    #[serde(default)]
    is_direct: Option<bool>,
    #[serde(default, rename = "m.mentions")]
    mentions: Option<Mentions>,
    #[serde(default, rename = "m.relates_to")]
    relates_to: Option<Relation>,
    /// A file's `mxc://` URI (an unencrypted file; an encrypted one has `file` instead).
    #[serde(default)]
    url: Option<String>,
    /// A file's name when `body` is a caption.
    #[serde(default)]
    filename: Option<String>,
    #[serde(default)]
    info: Option<FileInfo>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct FileInfo {
    #[serde(default)]
    mimetype: Option<String>,
    #[serde(default)]
    size: Option<u64>,
}

/// A file a message carries (`m.file`, `m.image`, `m.audio`, `m.video`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MatrixFile {
    /// Its `mxc://` URI.
    pub url: String,
    /// Its name.
    pub name: String,
    /// The MIME type the sender declared.
    pub mime_type: String,
    /// The size the sender declared.
    pub size: Option<u64>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Mentions {
    #[serde(default)]
    user_ids: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
struct Relation {
    #[serde(default)]
    rel_type: Option<String>,
    #[serde(default)]
    event_id: Option<String>,
}

/// Who the bot is, for telling which messages address it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotIdentity {
    /// Its user id.
    pub user_id: String,
    /// Its display name, when it has one.
    pub display_name: Option<String>,
}

/// What one `/sync` answer asks of the Gateway, in timeline order per room.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The homeserver's count of a joined room's members changed (its room summary); it comes
    /// before the room's messages.
    Members {
        /// The room.
        room: String,
        /// How many users are joined.
        joined: u64,
    },
    /// The bot was invited to a room.
    Invite {
        /// The room.
        room: String,
        /// Who invited it.
        inviter: String,
        /// Whether the inviter marked it a direct chat.
        direct: bool,
        /// Whether the room is end-to-end encrypted.
        encrypted: bool,
    },
    /// A text message from someone else.
    Message {
        /// The room.
        room: String,
        /// The event id: the message's id.
        event_id: String,
        /// Its sender.
        sender: String,
        /// The text (a file's caption; empty for a file without one).
        text: String,
        /// The file it carries, if it is a file message.
        file: Option<MatrixFile>,
        /// The thread's root event, for a message in a thread.
        thread: Option<String>,
        /// Whether it names the bot (`m.mentions`, its user id, or its display name).
        mentioned: bool,
    },
    /// An encrypted message, which the bot cannot read.
    Encrypted {
        /// The room.
        room: String,
        /// The event id.
        event_id: String,
        /// Its sender.
        sender: String,
    },
    /// A message the bot does not read (an encrypted file, a location, an unknown type).
    Unsupported {
        /// The room.
        room: String,
        /// The event id.
        event_id: String,
        /// Its sender.
        sender: String,
    },
}

/// Reads what `answer` asks of the Gateway: invites first, then each joined room's new
/// messages; the bot's own events, edits and state changes ask nothing.
#[must_use]
pub fn interpret(answer: &SyncAnswer, bot: &BotIdentity) -> Vec<Input> {
    let mut inputs = Vec::new();
    for (room, invited) in &answer.rooms.invite {
        let events = &invited.invite_state.events;
        let Some(invite) = events.iter().find(|event| {
            event.kind == "m.room.member"
                && event.state_key.as_deref() == Some(bot.user_id.as_str())
                && event.content.membership.as_deref() == Some("invite")
        }) else {
            continue;
        };
        inputs.push(Input::Invite {
            room: room.clone(),
            inviter: invite.sender.clone(),
            direct: invite.content.is_direct == Some(true),
            encrypted: events.iter().any(|event| event.kind == "m.room.encryption"),
        });
    }
    for (room, joined) in &answer.rooms.join {
        if let Some(count) = joined.summary.joined_member_count {
            inputs.push(Input::Members {
                room: room.clone(),
                joined: count,
            });
        }
        for event in &joined.timeline.events {
            if event.sender == bot.user_id || event.state_key.is_some() {
                continue;
            }
            let Some(event_id) = event.event_id.clone() else {
                continue;
            };
            let (room, sender) = (room.clone(), event.sender.clone());
            match event.kind.as_str() {
                "m.room.encrypted" => inputs.push(Input::Encrypted {
                    room,
                    event_id,
                    sender,
                }),
                "m.room.message" => {
                    let relation = event.content.relates_to.as_ref();
                    if relation.and_then(|r| r.rel_type.as_deref()) == Some("m.replace") {
                        continue;
                    }
                    let body = event.content.body.clone().unwrap_or_default();
                    match event.content.msgtype.as_deref() {
                        // Bots speak in notices: answering one could loop two bots forever.
                        Some("m.notice") => {}
                        Some("m.text" | "m.emote") if !body.trim().is_empty() => {
                            let mentioned = mentions(&event.content, &body, bot);
                            inputs.push(Input::Message {
                                room,
                                event_id,
                                sender,
                                text: body,
                                file: None,
                                thread: thread_of(relation),
                                mentioned,
                            });
                        }
                        Some("m.text" | "m.emote") => {}
                        Some("m.file" | "m.image" | "m.audio" | "m.video")
                            if event.content.url.is_some() =>
                        {
                            let (file, caption) = file_of(&event.content, body);
                            let mentioned = mentions(&event.content, &caption, bot);
                            inputs.push(Input::Message {
                                room,
                                event_id,
                                sender,
                                text: caption,
                                file: Some(file),
                                thread: thread_of(relation),
                                mentioned,
                            });
                        }
                        _ => inputs.push(Input::Unsupported {
                            room,
                            event_id,
                            sender,
                        }),
                    }
                }
                _ => {}
            }
        }
    }
    inputs
}

/// The thread root of a message in a thread.
fn thread_of(relation: Option<&Relation>) -> Option<String> {
    relation
        .filter(|r| r.rel_type.as_deref() == Some("m.thread"))
        .and_then(|r| r.event_id.clone())
}

/// A file message's file and caption: with `filename` set and different from `body`, `body`
/// is a caption; otherwise `body` is the file's name and there is no caption.
fn file_of(content: &EventContent, body: String) -> (MatrixFile, String) {
    let info = content.info.clone().unwrap_or_default();
    let (name, caption) = match &content.filename {
        Some(filename) if !filename.is_empty() && *filename != body => (filename.clone(), body),
        _ => (body, String::new()),
    };
    let file = MatrixFile {
        url: content.url.clone().unwrap_or_default(),
        name,
        mime_type: info
            .mimetype
            .unwrap_or_else(|| String::from(crate::files::OCTET_STREAM)),
        size: info.size,
    };
    (file, caption)
}

fn mentions(content: &EventContent, body: &str, bot: &BotIdentity) -> bool {
    content
        .mentions
        .as_ref()
        .is_some_and(|mentions| mentions.user_ids.contains(&bot.user_id))
        || body.contains(&bot.user_id)
        || bot
            .display_name
            .as_deref()
            .filter(|name| !name.trim().is_empty())
            .is_some_and(|name| body.to_lowercase().contains(&name.to_lowercase()))
}

#[derive(Deserialize)]
struct WhoAmI {
    user_id: String,
}

#[derive(Deserialize)]
struct DisplayName {
    #[serde(default)]
    displayname: Option<String>,
}

#[derive(Deserialize)]
struct JoinedMembers {
    #[serde(default)]
    joined: BTreeMap<String, serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct SentEvent {
    event_id: String,
}

#[derive(Deserialize)]
struct Uploaded {
    content_uri: String,
}

#[derive(Deserialize)]
struct MessagesPage {
    #[serde(default)]
    chunk: Vec<PageEvent>,
}

#[derive(Deserialize)]
struct PageEvent {
    #[serde(default)]
    unsigned: Unsigned,
}

#[derive(Default, Deserialize)]
struct Unsigned {
    #[serde(default)]
    transaction_id: Option<String>,
}

/// The body of `POST /createRoom`.
#[derive(Serialize)]
struct CreateRoom<'a> {
    preset: &'static str,
    is_direct: bool,
    invite: &'a [&'a str],
}

#[derive(Deserialize)]
struct CreatedRoom {
    room_id: String,
}

impl MatrixClient {
    /// A client of `homeserver` (its base URL) with the bot's access token.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(homeserver: url::Url, token: Secret) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            http,
            homeserver,
            token,
        })
    }

    /// `homeserver/_matrix/client/v3/<segments>`, each segment percent-encoded whole.
    fn endpoint(&self, segments: &[&str]) -> url::Url {
        let mut all = vec!["client", "v3"];
        all.extend_from_slice(segments);
        self.api_url(&all)
    }

    /// `homeserver/_matrix/<segments>`, each segment percent-encoded whole.
    fn api_url(&self, segments: &[&str]) -> url::Url {
        let mut url = self.homeserver.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("_matrix").extend(segments);
        }
        url
    }

    async fn call<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
        timeout: Duration,
    ) -> Result<T, MatrixError> {
        let answer = request
            .bearer_auth(self.token.expose())
            .timeout(timeout)
            .send()
            .await
            .map_err(|error| MatrixError::Transport(error.without_url().to_string()))?;
        let status = answer.status();
        let header_retry = crate::webhook::retry_after(answer.headers());
        let bytes = answer
            .bytes()
            .await
            .map_err(|error| MatrixError::Transport(error.without_url().to_string()))?;
        if !status.is_success() {
            let body: Option<ErrorBody> = serde_json::from_slice(&bytes).ok();
            return Err(MatrixError::Status {
                status: status.as_u16(),
                errcode: body.as_ref().map(|b| b.errcode.clone()).unwrap_or_default(),
                retry_after: body
                    .and_then(|b| b.retry_after_ms)
                    .map(Duration::from_millis)
                    .or(header_retry),
            });
        }
        serde_json::from_slice(&bytes).map_err(|error| MatrixError::Decode(error.to_string()))
    }

    /// `GET /account/whoami`: the token's user id.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn whoami(&self) -> Result<String, MatrixError> {
        let answer: WhoAmI = self
            .call(
                self.http.get(self.endpoint(&["account", "whoami"])),
                REQUEST_TIMEOUT,
            )
            .await?;
        Ok(answer.user_id)
    }

    /// `GET /profile/{user}/displayname`; `None` when it has none.
    ///
    /// # Errors
    /// [`MatrixError`] other than a missing profile.
    pub async fn display_name(&self, user_id: &str) -> Result<Option<String>, MatrixError> {
        let request = self
            .http
            .get(self.endpoint(&["profile", user_id, "displayname"]));
        match self.call::<DisplayName>(request, REQUEST_TIMEOUT).await {
            Ok(answer) => Ok(answer.displayname),
            Err(MatrixError::Status { status: 404, .. }) => Ok(None),
            Err(error) => Err(error),
        }
    }

    /// `GET /sync`, from `since` (the first sync when `None`), held open by the server up to
    /// `timeout`; the request is given up after twice that (and at least 5 s).
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn sync(
        &self,
        since: Option<&str>,
        timeout: Duration,
    ) -> Result<SyncAnswer, MatrixError> {
        let mut url = self.endpoint(&["sync"]);
        {
            let mut query = url.query_pairs_mut();
            query.append_pair("timeout", &timeout.as_millis().to_string());
            if let Some(since) = since {
                query.append_pair("since", since);
            }
        }
        self.call(self.http.get(url), timeout + REQUEST_TIMEOUT)
            .await
    }

    /// `POST /join/{room}`.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn join(&self, room: &str) -> Result<(), MatrixError> {
        let request = self
            .http
            .post(self.endpoint(&["join", room]))
            .json(&serde_json::json!({}));
        self.call::<serde::de::IgnoredAny>(request, REQUEST_TIMEOUT)
            .await
            .map(drop)
    }

    /// `POST /rooms/{room}/leave`: leaves a room, or rejects an invite.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn leave(&self, room: &str) -> Result<(), MatrixError> {
        let request = self
            .http
            .post(self.endpoint(&["rooms", room, "leave"]))
            .json(&serde_json::json!({}));
        self.call::<serde::de::IgnoredAny>(request, REQUEST_TIMEOUT)
            .await
            .map(drop)
    }

    /// `GET /rooms/{room}/joined_members`: how many users are joined.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn joined_member_count(&self, room: &str) -> Result<usize, MatrixError> {
        let request = self
            .http
            .get(self.endpoint(&["rooms", room, "joined_members"]));
        let answer: JoinedMembers = self.call(request, REQUEST_TIMEOUT).await?;
        Ok(answer.joined.len())
    }

    /// `PUT /rooms/{room}/typing/{user}`.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn typing(&self, room: &str, user_id: &str, on: bool) -> Result<(), MatrixError> {
        let body = match on {
            true => serde_json::json!({"typing": true, "timeout": 30_000}),
            false => serde_json::json!({"typing": false}),
        };
        let request = self
            .http
            .put(self.endpoint(&["rooms", room, "typing", user_id]))
            .json(&body);
        self.call::<serde::de::IgnoredAny>(request, REQUEST_TIMEOUT)
            .await
            .map(drop)
    }

    /// Downloads the file at `mxc` (`mxc://<server>/<media id>`) through the authenticated
    /// media API (`GET /_matrix/client/v1/media/download/{server}/{id}`), refusing more than
    /// `max_bytes` before and while reading, and giving up after `timeout` (at most
    /// [`crate::files::DOWNLOAD_TIMEOUT`]).
    ///
    /// # Errors
    /// [`MatrixError`]: [`MatrixError::TooLarge`] past the bound, [`MatrixError::BadUri`].
    pub async fn download(
        &self,
        mxc: &str,
        max_bytes: u64,
        timeout: Duration,
    ) -> Result<bytes::Bytes, MatrixError> {
        let (server, media_id) = mxc
            .strip_prefix("mxc://")
            .and_then(|rest| rest.split_once('/'))
            .filter(|(server, id)| !server.is_empty() && !id.is_empty() && !id.contains('/'))
            .ok_or(MatrixError::BadUri)?;
        let url = self.api_url(&["client", "v1", "media", "download", server, media_id]);
        let transport =
            |error: reqwest::Error| MatrixError::Transport(error.without_url().to_string());
        let answer = self
            .http
            .get(url)
            .bearer_auth(self.token.expose())
            // The whole request, its body included.
            .timeout(timeout.min(crate::files::DOWNLOAD_TIMEOUT))
            .send()
            .await
            .map_err(transport)?;
        let status = answer.status();
        if !status.is_success() {
            return Err(MatrixError::Status {
                status: status.as_u16(),
                errcode: String::new(),
                retry_after: crate::webhook::retry_after(answer.headers()),
            });
        }
        crate::files::read_capped(answer, max_bytes)
            .await
            .map_err(|error| match error {
                crate::files::Capped::TooLarge => MatrixError::TooLarge { max_bytes },
                crate::files::Capped::Transport(message) => MatrixError::Transport(message),
            })
    }

    /// Returns the transaction ids of this token's events among the latest
    /// [`RECENT_EVENTS`] of `room` (`GET /rooms/{room}/messages`): the homeserver shows an
    /// event's `unsigned.transaction_id` only to the client that sent it.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn sent_transactions(
        &self,
        room: &str,
    ) -> Result<std::collections::HashSet<String>, MatrixError> {
        let mut url = self.endpoint(&["rooms", room, "messages"]);
        url.query_pairs_mut()
            .append_pair("dir", "b")
            .append_pair("limit", &RECENT_EVENTS.to_string());
        let page: MessagesPage = self.call(self.http.get(url), REQUEST_TIMEOUT).await?;
        Ok(page
            .chunk
            .into_iter()
            .filter_map(|event| event.unsigned.transaction_id)
            .collect())
    }

    /// Uploads `file` (`POST /_matrix/media/v3/upload`) and returns its `mxc://` URI.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn upload(&self, file: &OutgoingFile) -> Result<String, MatrixError> {
        let mut url = self.api_url(&["media", "v3", "upload"]);
        url.query_pairs_mut().append_pair("filename", &file.name);
        let request = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, &file.mime_type)
            .body(file.bytes.clone());
        let answer: Uploaded = self.call(request, crate::files::DOWNLOAD_TIMEOUT).await?;
        Ok(answer.content_uri)
    }

    /// `PUT /rooms/{room}/send/m.room.message/{txn}`: idempotent per token and `txn`.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn send(
        &self,
        room: &str,
        txn: &str,
        content: &serde_json::Value,
    ) -> Result<String, MatrixError> {
        let request = self
            .http
            .put(self.endpoint(&["rooms", room, "send", "m.room.message", txn]))
            .json(content);
        let answer: SentEvent = self.call(request, REQUEST_TIMEOUT).await?;
        Ok(answer.event_id)
    }

    /// Sends `text` as an `m.text` message shaped like a reply ([`message_content`], answering
    /// nothing) under the transaction id `txn`, and returns its event id.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn send_text(
        &self,
        room: &str,
        txn: &str,
        text: &str,
    ) -> Result<String, MatrixError> {
        self.send(room, txn, &message_content(text, None, None))
            .await
    }

    /// `POST /createRoom`: a new private room that this account creates, inviting `invite`
    /// (user ids), and returns its id. When `direct`, the invites are marked as a direct chat
    /// and the invitees get the creator's power level (the `trusted_private_chat` preset, as
    /// clients open a direct chat). The Gateway never creates rooms: this serves a client that
    /// acts as a person writing to a bot, such as `gatehouse bench channel`.
    ///
    /// # Errors
    /// [`MatrixError`].
    pub async fn create_room(&self, invite: &[&str], direct: bool) -> Result<String, MatrixError> {
        let body = CreateRoom {
            preset: match direct {
                true => "trusted_private_chat",
                false => "private_chat",
            },
            is_direct: direct,
            invite,
        };
        let request = self.http.post(self.endpoint(&["createRoom"])).json(&body);
        let answer: CreatedRoom = self.call(request, REQUEST_TIMEOUT).await?;
        Ok(answer.room_id)
    }
}

/// The content of one reply message: plain `body`, and the Markdown rendered as sanitised
/// HTML in `formatted_body`. The first part of a reply answers `in_reply_to`; in a thread,
/// every part goes into the thread (with `in_reply_to` as the fallback reply for clients
/// without threads).
#[must_use]
pub fn message_content(
    text: &str,
    in_reply_to: Option<&str>,
    thread: Option<&str>,
) -> serde_json::Value {
    let mut content = text_content(text);
    match (thread, in_reply_to) {
        (Some(root), reply) => {
            content["m.relates_to"] = in_thread(root, reply.unwrap_or(root));
        }
        (None, Some(event_id)) => {
            content["m.relates_to"] = serde_json::json!({"m.in_reply_to": {"event_id": event_id}});
        }
        (None, None) => {}
    }
    content
}

/// The content of an edit that replaces the message `original` with `text` (`m.replace`):
/// clients show the new content in place of the old; `body` carries the `* ` fallback.
#[must_use]
pub fn edit_content(text: &str, original: &str) -> serde_json::Value {
    let mut content = text_content(&format!("* {text}"));
    content["m.new_content"] = text_content(text);
    content["m.relates_to"] = serde_json::json!({"rel_type": "m.replace", "event_id": original});
    content
}

/// The content of a message carrying the uploaded `file` at `mxc`: `m.image`, `m.audio` or
/// `m.video` by its MIME type, `m.file` otherwise; in `thread` when given.
#[must_use]
pub fn file_content(file: &OutgoingFile, mxc: &str, thread: Option<&str>) -> serde_json::Value {
    let msgtype = match file.mime_type.split('/').next().unwrap_or_default() {
        "image" => "m.image",
        "audio" => "m.audio",
        "video" => "m.video",
        _ => "m.file",
    };
    let mut content = serde_json::json!({
        "msgtype": msgtype,
        "body": file.name,
        "filename": file.name,
        "url": mxc,
        "info": {"mimetype": file.mime_type, "size": file.bytes.len()},
        "m.mentions": {},
    });
    if let Some(root) = thread {
        content["m.relates_to"] = in_thread(root, root);
    }
    content
}

/// The relation of a message in the thread of `root`, with `reply` as the fallback reply for
/// clients without threads.
fn in_thread(root: &str, reply: &str) -> serde_json::Value {
    serde_json::json!({
        "rel_type": "m.thread",
        "event_id": root,
        "is_falling_back": true,
        "m.in_reply_to": {"event_id": reply},
    })
}

/// A text message's own fields. An empty `m.mentions`: a name or `@room` in the model's text
/// pings nobody.
fn text_content(text: &str) -> serde_json::Value {
    serde_json::json!({
        "msgtype": "m.text",
        "body": text,
        "format": "org.matrix.custom.html",
        "formatted_body": markdown_to_html(text),
        "m.mentions": {},
    })
}

/// Sends replies as the bot: each outbox entry's parts with the transaction ids
/// `<delivery id>.<part>`, so a retried entry never shows twice.
pub struct MatrixAdapter {
    client: MatrixClient,
}

impl MatrixAdapter {
    /// An adapter sending through `client`.
    #[must_use]
    pub fn new(client: MatrixClient) -> Self {
        Self { client }
    }
}

#[async_trait]
impl Adapter for MatrixAdapter {
    async fn send(&self, message: &Outgoing) -> Result<(), SendError> {
        let in_reply_to = message
            .in_reply_to
            .as_deref()
            .filter(|id| id.starts_with('$'));
        let thread = message.thread.as_deref();
        // A homeserver remembers transaction ids for a while only (Synapse: about 30 minutes),
        // and a retry may come later: a retry first looks for what an earlier attempt sent.
        let sent = match message.attempt {
            0 => std::collections::HashSet::new(),
            _ => self
                .client
                .sent_transactions(&message.conversation)
                .await
                .map_err(send_error)?,
        };
        // A reply that replaces its streamed message is split for an edit's size throughout.
        let limit = match message.replaces {
            Some(_) => MAX_EDIT_CHARS,
            None => MAX_MESSAGE_CHARS,
        };
        for (index, part) in split(&message.text, limit).iter().enumerate() {
            let txn = format!("{}.{index}", message.delivery_id);
            if sent.contains(&txn) {
                continue;
            }
            // The first part replaces the message that streamed the reply, when there is one.
            let content = match (index, message.replaces.as_deref()) {
                (0, Some(original)) => edit_content(part, original),
                (0, None) => message_content(part, in_reply_to, thread),
                _ => message_content(part, None, thread),
            };
            self.client
                .send(&message.conversation, &txn, &content)
                .await
                .map_err(send_error)?;
        }
        // Each file once: a retry uploads it again, but its message's transaction id shows it
        // once.
        for (index, file) in message.files.iter().enumerate() {
            let txn = format!("{}.file{index}", message.delivery_id);
            if sent.contains(&txn) {
                continue;
            }
            // A file the homeserver refuses for good (too large for it) becomes a line saying
            // so; the reply goes on.
            let content = match self.client.upload(file).await {
                Ok(mxc) => file_content(file, &mxc, thread),
                Err(error) if !error.transient() => message_content(
                    &crate::files::unsent_note(&file.name, &error.to_string()),
                    None,
                    thread,
                ),
                Err(error) => return Err(send_error(error)),
            };
            self.client
                .send(&message.conversation, &txn, &content)
                .await
                .map_err(send_error)?;
        }
        Ok(())
    }
}

/// A Matrix room a reply streams to, by `m.replace` edits of one message.
pub struct MatrixStream {
    /// The bot's client.
    pub client: MatrixClient,
    /// The room.
    pub room: String,
    /// The event the reply answers.
    pub in_reply_to: String,
    /// The thread the reply goes into.
    pub thread: Option<String>,
    /// The turn, whose id names each edit's transaction.
    pub turn_id: String,
}

#[async_trait]
impl crate::adapter::StreamSink for MatrixStream {
    fn max_chars(&self) -> usize {
        MAX_EDIT_CHARS
    }

    async fn show(&self, text: &str, shown: Option<&str>, edits: u32) -> Result<String, SendError> {
        let content = match shown {
            None => message_content(text, Some(&self.in_reply_to), self.thread.as_deref()),
            Some(original) => edit_content(text, original),
        };
        // One transaction id per edit: a retried request never shows twice.
        let txn = format!("stream-{}.{edits}", self.turn_id);
        let sent = self
            .client
            .send(&self.room, &txn, &content)
            .await
            .map_err(send_error)?;
        Ok(shown.map_or(sent, str::to_owned))
    }
}

/// A failed request as the deliverer sees it: worth retrying, or not.
fn send_error(error: MatrixError) -> SendError {
    let retry_after = match &error {
        MatrixError::Status { retry_after, .. } => *retry_after,
        _ => None,
    };
    match error.transient() {
        true => SendError::Transient {
            message: error.to_string(),
            retry_after,
        },
        false => SendError::Permanent {
            message: error.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    fn bot() -> BotIdentity {
        BotIdentity {
            user_id: "@bot:hs.test".into(),
            display_name: Some("Helper".into()),
        }
    }

    #[test]
    fn a_sync_answer_becomes_invites_and_messages() {
        let answer: SyncAnswer = serde_json::from_value(serde_json::json!({
            "next_batch": "s42",
            "rooms": {
                "invite": {"!dm": {"invite_state": {"events": [
                    {"type": "m.room.member", "sender": "@alice:hs.test", "state_key": "@bot:hs.test",
                     "content": {"membership": "invite", "is_direct": true}},
                    {"type": "m.room.encryption", "sender": "@alice:hs.test", "state_key": "",
                     "content": {"algorithm": "m.megolm.v1.aes-sha2"}}
                ]}}},
                "join": {"!room": {"summary": {"m.joined_member_count": 3}, "timeline": {"events": [
                    {"type": "m.room.message", "sender": "@bot:hs.test", "event_id": "$own",
                     "content": {"msgtype": "m.text", "body": "mine"}},
                    {"type": "m.room.member", "sender": "@carol:hs.test", "event_id": "$m",
                     "state_key": "@carol:hs.test", "content": {"membership": "join"}},
                    {"type": "m.room.message", "sender": "@carol:hs.test", "event_id": "$1",
                     "content": {"msgtype": "m.text", "body": "hi", "m.mentions": {"user_ids": ["@bot:hs.test"]}}},
                    {"type": "m.room.message", "sender": "@carol:hs.test", "event_id": "$2",
                     "content": {"msgtype": "m.text", "body": "helper, look",
                                 "m.relates_to": {"rel_type": "m.thread", "event_id": "$1"}}},
                    {"type": "m.room.message", "sender": "@carol:hs.test", "event_id": "$3",
                     "content": {"msgtype": "m.text", "body": "* edit",
                                 "m.relates_to": {"rel_type": "m.replace", "event_id": "$2"}}},
                    {"type": "m.room.message", "sender": "@carol:hs.test", "event_id": "$4",
                     "content": {"msgtype": "m.image", "body": "cat.png"}},
                    {"type": "m.room.encrypted", "sender": "@carol:hs.test", "event_id": "$5",
                     "content": {"algorithm": "m.megolm.v1.aes-sha2"}},
                    {"type": "m.room.message", "sender": "@carol:hs.test", "event_id": "$6",
                     "content": {"msgtype": "m.text", "body": "just chatting"}},
                    {"type": "m.room.message", "sender": "@otherbot:hs.test", "event_id": "$7",
                     "content": {"msgtype": "m.notice", "body": "a bot's notice"}},
                    {"type": "m.room.message", "sender": "@carol:hs.test", "event_id": "$8",
                     "content": {"msgtype": "m.file", "body": "helper, read this",
                                 "filename": "notes.txt", "url": "mxc://hs.test/abc",
                                 "info": {"mimetype": "text/plain", "size": 12}}},
                    {"type": "m.room.message", "sender": "@carol:hs.test", "event_id": "$9",
                     "content": {"msgtype": "m.image", "body": "cat.png",
                                 "url": "mxc://hs.test/cat"}},
                    {"type": "m.room.message", "sender": "@mallory:hs.test", "event_id": "$10",
                     "content": {"msgtype": "m.file", "body": "x", "url": 5,
                                 "info": {"size": -1}}}
                ]}}}
            }
        }))
        .unwrap();
        assert_eq!(answer.next_batch(), "s42");
        let message =
            |id: &str, text: &str, thread: Option<&str>, mentioned: bool| Input::Message {
                room: "!room".into(),
                event_id: id.into(),
                sender: "@carol:hs.test".into(),
                text: text.into(),
                file: None,
                thread: thread.map(Into::into),
                mentioned,
            };
        let file = |id: &str, caption: &str, file: MatrixFile, mentioned: bool| Input::Message {
            room: "!room".into(),
            event_id: id.into(),
            sender: "@carol:hs.test".into(),
            text: caption.into(),
            file: Some(file),
            thread: None,
            mentioned,
        };
        assert_eq!(
            interpret(&answer, &bot()),
            vec![
                Input::Invite {
                    room: "!dm".into(),
                    inviter: "@alice:hs.test".into(),
                    direct: true,
                    encrypted: true,
                },
                Input::Members {
                    room: "!room".into(),
                    joined: 3,
                },
                message("$1", "hi", None, true),
                message("$2", "helper, look", Some("$1"), true),
                Input::Unsupported {
                    room: "!room".into(),
                    event_id: "$4".into(),
                    sender: "@carol:hs.test".into(),
                },
                Input::Encrypted {
                    room: "!room".into(),
                    event_id: "$5".into(),
                    sender: "@carol:hs.test".into(),
                },
                message("$6", "just chatting", None, false),
                file(
                    "$8",
                    "helper, read this",
                    MatrixFile {
                        url: "mxc://hs.test/abc".into(),
                        name: "notes.txt".into(),
                        mime_type: "text/plain".into(),
                        size: Some(12),
                    },
                    true
                ),
                file(
                    "$9",
                    "",
                    MatrixFile {
                        url: "mxc://hs.test/cat".into(),
                        name: "cat.png".into(),
                        mime_type: crate::files::OCTET_STREAM.into(),
                        size: None,
                    },
                    false
                ),
            ]
        );
    }

    #[test]
    fn ids_go_into_paths_as_whole_encoded_segments() {
        let client = MatrixClient::new(
            url::Url::parse("http://127.0.0.1:8008/").unwrap(),
            Secret::new("t".into()),
        )
        .unwrap();
        let url = client.endpoint(&["rooms", "!a/b?c#d", "send", "m.room.message", "x.0"]);
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:8008/_matrix/client/v3/rooms/!a%2Fb%3Fc%23d/send/m.room.message/x.0"
        );
    }

    #[test]
    fn a_reply_carries_plain_and_sanitised_html_bodies() {
        let content = message_content("**done** <b>x</b>", Some("$ev"), None);
        assert_eq!(content["body"], "**done** <b>x</b>");
        let html = content["formatted_body"].as_str().unwrap();
        assert!(
            html.contains("<strong>done</strong>") && !html.contains("<b>"),
            "{html}"
        );
        assert_eq!(content["m.relates_to"]["m.in_reply_to"]["event_id"], "$ev");
        assert_eq!(content["m.mentions"], serde_json::json!({}));
    }

    #[test]
    fn a_reply_in_a_thread_stays_in_it_and_an_edit_replaces_its_original() {
        let content = message_content("ok", Some("$last"), Some("$root"));
        assert_eq!(
            content["m.relates_to"],
            serde_json::json!({"rel_type": "m.thread", "event_id": "$root",
                "is_falling_back": true, "m.in_reply_to": {"event_id": "$last"}})
        );
        let content = message_content("part 2", None, Some("$root"));
        assert_eq!(
            content["m.relates_to"]["m.in_reply_to"]["event_id"],
            "$root"
        );
        let edit = edit_content("final *text*", "$stream");
        assert_eq!(edit["body"], "* final *text*");
        assert_eq!(edit["m.new_content"]["body"], "final *text*");
        assert!(
            edit["m.new_content"]["formatted_body"]
                .as_str()
                .unwrap()
                .contains("<em>text</em>")
        );
        assert_eq!(
            edit["m.relates_to"],
            serde_json::json!({"rel_type": "m.replace", "event_id": "$stream"})
        );
    }
}
