//! The Telegram Bot API (<https://core.telegram.org/bots/api>): the client a Telegram channel
//! uses, what an update asks ([`interpret`]), and the adapter that sends replies.
//!
//! - **Calls.** Every method is `POST {api-base}/bot{token}/{method}` with a JSON body; the
//!   answer is `{"ok":true,"result":…}` or `{"ok":false,"error_code","description",
//!   "parameters":{"retry_after"}}`. The token is part of the URL, so no error this module
//!   returns carries a URL (`reqwest::Error::without_url`), and no redirect is followed.
//! - **Messages in.** A private chat is a direct chat; a group or supergroup is a group, where a
//!   message addresses the bot when it mentions its `@username` (a `mention` entity, or a
//!   `/command@username`), names it with a `text_mention`, or replies to one of its messages. A
//!   forum topic (`message_thread_id` with `is_topic_message`) is a thread. A message's id is
//!   `<chat id>:<message id>`, since Telegram numbers messages per chat: two chats' messages
//!   never share a dedup key.
//! - **Replies out.** Markdown is rendered to the HTML parse mode
//!   ([`crate::text::markdown_to_telegram_html`]) and split so each message's visible text is
//!   within [`MAX_MESSAGE_UTF16`]; the first part replies to the message it answers, each part
//!   goes to its forum topic, and a part the Bot API refuses with `429` is sent again after the
//!   `retry_after` it names ([`crate::adapter::MAX_INLINE_WAIT`] in all, then the delivery is retried later
//!   from the part that failed). Reply artifacts go out with `sendPhoto` (images up to 10 MB)
//!   or `sendDocument` (up to 50 MB).

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::adapter::Adapter;
use crate::adapter::Outgoing;
use crate::adapter::SendError;
use crate::files::OutgoingFile;
use crate::secret::Secret;
use crate::text::markdown_to_telegram_html;
use crate::text::split_markdown;

/// The longest visible text of one message, in UTF-16 code units (`sendMessage`'s `text`,
/// "1-4096 characters after entities parsing").
pub const MAX_MESSAGE_UTF16: usize = 4096;

/// The largest file a bot may download (`getFile`: "bots can download files of up to 20MB").
pub const MAX_DOWNLOAD_BYTES: u64 = 20 * 1024 * 1024;

/// The largest document a bot may send (`sendDocument`: 50 MB).
pub const MAX_DOCUMENT_BYTES: u64 = 50 * 1024 * 1024;

/// The largest photo a bot may send (`sendPhoto`: 10 MB).
pub const MAX_PHOTO_BYTES: u64 = 10 * 1024 * 1024;

/// How long one ordinary call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an upload may take.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// Whether `token` is a Telegram webhook secret token: 1 to 256 of `A-Z`, `a-z`, `0-9`, `_`
/// and `-` (`setWebhook`'s `secret_token`).
#[must_use]
pub fn valid_secret_token(token: &str) -> bool {
    (1..=256).contains(&token.len())
        && token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The header a webhook update carries its secret token in.
pub const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// Whether `presented` is the channel's `secret`, compared in constant time.
#[must_use]
pub fn secret_matches(secret: &Secret, presented: Option<&str>) -> bool {
    use subtle::ConstantTimeEq;
    presented
        .is_some_and(|presented| bool::from(presented.as_bytes().ct_eq(secret.expose().as_bytes())))
}

/// A call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TelegramError {
    /// The Bot API answered an error.
    #[error("the Telegram Bot API answered {code}: {description}")]
    Api {
        /// Its `error_code` (the HTTP status).
        code: u16,
        /// Its `description`.
        description: String,
        /// Its `parameters.retry_after`.
        retry_after: Option<Duration>,
    },
    /// The Bot API could not be reached or did not answer in time.
    #[error("the Telegram Bot API did not answer: {0}")]
    Transport(String),
    /// The answer is not what the API documents.
    #[error("the Telegram Bot API's answer is not understood: {0}")]
    Decode(String),
    /// A file is larger than may be downloaded.
    #[error("the file is larger than {max_bytes} bytes")]
    TooLarge {
        /// The bound.
        max_bytes: u64,
    },
}

impl TelegramError {
    /// Whether trying again later may work.
    #[must_use]
    pub fn transient(&self) -> bool {
        match self {
            TelegramError::Api { code, .. } => *code == 429 || *code >= 500,
            TelegramError::Transport(_) => true,
            TelegramError::Decode(_) | TelegramError::TooLarge { .. } => false,
        }
    }

    /// The wait a `429` asks for.
    fn rate_limit(&self) -> Option<Duration> {
        match self {
            TelegramError::Api {
                code: 429,
                retry_after,
                ..
            } => Some(retry_after.unwrap_or(Duration::from_secs(1))),
            _ => None,
        }
    }

    /// Whether it is the answer to an edit that changes nothing.
    fn not_modified(&self) -> bool {
        matches!(self, TelegramError::Api { code: 400, description, .. }
            if description.contains("message is not modified"))
    }

    fn send_error(self) -> SendError {
        match self.transient() {
            true => SendError::Transient {
                retry_after: match &self {
                    TelegramError::Api { retry_after, .. } => *retry_after,
                    _ => None,
                },
                message: self.to_string(),
            },
            false => SendError::Permanent {
                message: self.to_string(),
            },
        }
    }
}

/// `{"ok", "result", "error_code", "description", "parameters"}`.
#[derive(Deserialize)]
struct Answer<T> {
    ok: bool,
    result: Option<T>,
    error_code: Option<u16>,
    description: Option<String>,
    parameters: Option<ResponseParameters>,
}

#[derive(Deserialize)]
struct ResponseParameters {
    retry_after: Option<u64>,
}

/// A Telegram user (`User`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct User {
    /// Its id.
    pub id: i64,
    /// Whether it is a bot.
    #[serde(default)]
    pub is_bot: bool,
    /// Its first name.
    #[serde(default)]
    pub first_name: String,
    /// Its username, without `@`.
    pub username: Option<String>,
}

/// A chat (`Chat`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Chat {
    /// Its id.
    pub id: i64,
    /// `private`, `group`, `supergroup` or `channel`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A special part of a message's text (`MessageEntity`), in UTF-16 code units.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct MessageEntity {
    /// `mention`, `bot_command`, `text_mention`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// Where it starts.
    pub offset: usize,
    /// How long it is.
    pub length: usize,
    /// The user a `text_mention` names.
    pub user: Option<User>,
}

/// A file a message carries (`Document`, `Audio`, `Video`, `Voice`, or a `PhotoSize`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct FileRef {
    /// What `getFile` takes.
    pub file_id: String,
    /// Its name, when the sender gave one.
    pub file_name: Option<String>,
    /// Its MIME type, as the sender declared it.
    pub mime_type: Option<String>,
    /// Its size in bytes, when known.
    pub file_size: Option<u64>,
}

/// A message (`Message`), with the fields a channel reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Message {
    /// Its id, unique in its chat.
    pub message_id: i64,
    /// Its sender; absent in channels.
    pub from: Option<User>,
    /// Its chat.
    pub chat: Chat,
    /// Its forum topic, with `is_topic_message`.
    pub message_thread_id: Option<i64>,
    /// Whether it was sent to a forum topic.
    #[serde(default)]
    pub is_topic_message: bool,
    /// The text.
    pub text: Option<String>,
    /// The text's entities.
    #[serde(default)]
    pub entities: Vec<MessageEntity>,
    /// A file's caption.
    pub caption: Option<String>,
    /// The caption's entities.
    #[serde(default)]
    pub caption_entities: Vec<MessageEntity>,
    /// The message it replies to.
    pub reply_to_message: Option<Box<Message>>,
    /// A general file.
    pub document: Option<FileRef>,
    /// A photo, in several sizes (the last is the largest).
    #[serde(default)]
    pub photo: Vec<FileRef>,
    /// An audio file.
    pub audio: Option<FileRef>,
    /// A video.
    pub video: Option<FileRef>,
    /// A voice note.
    pub voice: Option<FileRef>,
}

/// An update (`Update`): only new messages are asked for (`allowed_updates`); any other kind is
/// skipped.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Update {
    /// Its id, increasing.
    pub update_id: i64,
    /// A new message.
    pub message: Option<Message>,
}

/// The update kinds a channel asks for.
pub const ALLOWED_UPDATES: &[&str] = &["message"];

/// A file of an incoming message, not fetched yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IncomingFile {
    /// What `getFile` takes.
    pub file_id: String,
    /// Its name (made up from the kind when the sender gave none).
    pub name: String,
    /// The MIME type the sender declared.
    pub mime_type: String,
    /// Its size, when Telegram said.
    pub size: Option<u64>,
}

/// A message a channel judges, in Telegram's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// `<chat id>:<message id>`.
    pub message_id: String,
    /// The sender's user id.
    pub sender: String,
    /// The chat id.
    pub chat: String,
    /// Whether the chat is a group or supergroup.
    pub group: bool,
    /// The forum topic.
    pub thread: Option<String>,
    /// Whether it addresses the bot (always in a private chat).
    pub mentioned: bool,
    /// Its text or caption.
    pub text: String,
    /// Its files.
    pub files: Vec<IncomingFile>,
}

/// The bot's own account, from `getMe`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotIdentity {
    /// Its user id.
    pub id: i64,
    /// Its username, without `@`.
    pub username: String,
}

/// What `update` asks of the channel: a message from a person in a private chat, group or
/// supergroup; `None` for anything else (channel posts, service messages, other bots,
/// messages with neither text nor a file).
#[must_use]
pub fn interpret(update: &Update, me: &BotIdentity) -> Option<Incoming> {
    let message = update.message.as_ref()?;
    let from = message.from.as_ref()?;
    if from.is_bot {
        return None;
    }
    let group = match message.chat.kind.as_str() {
        "private" => false,
        "group" | "supergroup" => true,
        _ => return None,
    };
    let (text, entities) = match (&message.text, &message.caption) {
        (Some(text), _) => (text.clone(), &message.entities),
        (None, Some(caption)) => (caption.clone(), &message.caption_entities),
        (None, None) => (String::new(), &message.entities),
    };
    let files = files_of(message);
    if text.trim().is_empty() && files.is_empty() {
        return None;
    }
    let mentioned = !group
        || entities.iter().any(|entity| names_bot(&text, entity, me))
        || message
            .reply_to_message
            .as_ref()
            .and_then(|replied| replied.from.as_ref())
            .is_some_and(|author| author.id == me.id);
    Some(Incoming {
        message_id: format!("{}:{}", message.chat.id, message.message_id),
        sender: from.id.to_string(),
        chat: message.chat.id.to_string(),
        group,
        thread: message
            .message_thread_id
            .filter(|_| message.is_topic_message)
            .map(|id| id.to_string()),
        mentioned,
        text,
        files,
    })
}

/// Whether `entity` of `text` names the bot.
fn names_bot(text: &str, entity: &MessageEntity, me: &BotIdentity) -> bool {
    let handle = format!("@{}", me.username);
    match entity.kind.as_str() {
        "mention" => {
            entity_text(text, entity).is_some_and(|named| named.eq_ignore_ascii_case(&handle))
        }
        "bot_command" => entity_text(text, entity).is_some_and(|command| {
            command
                .split_once('@')
                .is_some_and(|(_, bot)| bot.eq_ignore_ascii_case(&me.username))
        }),
        "text_mention" => entity.user.as_ref().is_some_and(|user| user.id == me.id),
        _ => false,
    }
}

/// The text an entity covers (offsets count UTF-16 code units).
fn entity_text(text: &str, entity: &MessageEntity) -> Option<String> {
    let units: Vec<u16> = text.encode_utf16().collect();
    let end = entity.offset.checked_add(entity.length)?;
    units.get(entity.offset..end).map(String::from_utf16_lossy)
}

/// The files a message carries: its document, audio, video or voice note, and the largest
/// size of its photo.
fn files_of(message: &Message) -> Vec<IncomingFile> {
    let named = |file: &FileRef, kind: &str, extension: &str, mime: &str| IncomingFile {
        file_id: file.file_id.clone(),
        name: file
            .file_name
            .clone()
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| format!("{kind}.{extension}")),
        mime_type: file.mime_type.clone().unwrap_or_else(|| mime.to_owned()),
        size: file.file_size,
    };
    let mut files = Vec::new();
    if let Some(file) = &message.document {
        files.push(named(file, "document", "bin", crate::files::OCTET_STREAM));
    }
    if let Some(file) = message.photo.last() {
        files.push(named(file, "photo", "jpg", "image/jpeg"));
    }
    if let Some(file) = &message.audio {
        files.push(named(file, "audio", "mp3", "audio/mpeg"));
    }
    if let Some(file) = &message.video {
        files.push(named(file, "video", "mp4", "video/mp4"));
    }
    if let Some(file) = &message.voice {
        files.push(named(file, "voice", "ogg", "audio/ogg"));
    }
    files
}

/// A Bot API client for one bot.
#[derive(Clone)]
pub struct TelegramClient {
    http: reqwest::Client,
    api_base: url::Url,
    token: Secret,
}

/// `File`, as `getFile` answers.
#[derive(Deserialize)]
struct FileInfo {
    file_path: Option<String>,
    file_size: Option<u64>,
}

/// The part of a sent `Message` a sender reads.
#[derive(Deserialize)]
struct SentMessage {
    message_id: i64,
}

/// `reply_parameters`.
#[derive(Serialize)]
struct ReplyParameters {
    message_id: i64,
    allow_sending_without_reply: bool,
}

/// `sendMessage`'s parameters.
#[derive(Serialize)]
struct SendMessage<'a> {
    chat_id: &'a str,
    text: &'a str,
    parse_mode: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_thread_id: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reply_parameters: Option<ReplyParameters>,
}

/// `editMessageText`'s parameters.
#[derive(Serialize)]
struct EditMessageText<'a> {
    chat_id: &'a str,
    message_id: i64,
    text: &'a str,
    parse_mode: &'static str,
}

impl TelegramClient {
    /// A client of the Bot API at `api_base` for the bot whose token is `token`.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(api_base: url::Url, token: Secret) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            http,
            api_base,
            token,
        })
    }

    /// `{api-base}/bot{token}/{method}`.
    fn method_url(&self, method: &str) -> url::Url {
        let mut url = self.api_base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty()
                .push(&format!("bot{}", self.token.expose()))
                .push(method);
        }
        url
    }

    /// Calls `method` with `params` as JSON, waiting at most `timeout`.
    async fn call<P: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
        timeout: Duration,
    ) -> Result<T, TelegramError> {
        let request = self
            .http
            .post(self.method_url(method))
            .json(params)
            .timeout(timeout);
        self.answer(request).await
    }

    /// Sends `request` and reads the Bot API's answer.
    async fn answer<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, TelegramError> {
        let response = request
            .send()
            .await
            .map_err(|error| TelegramError::Transport(error.without_url().to_string()))?;
        let status = response.status().as_u16();
        let body = crate::files::read_capped(response, crate::files::MAX_API_ANSWER_BYTES)
            .await
            .map_err(|error| match error {
                crate::files::Capped::TooLarge => TelegramError::Decode(format!(
                    "an answer of more than {} bytes",
                    crate::files::MAX_API_ANSWER_BYTES
                )),
                crate::files::Capped::Transport(message) => TelegramError::Transport(message),
            })?;
        let answer: Answer<T> = serde_json::from_slice(&body).map_err(|error| {
            match status {
                200 => TelegramError::Decode(error.to_string()),
                // A proxy's page, not the Bot API's JSON.
                _ => TelegramError::Api {
                    code: status,
                    description: String::from("(no Bot API answer)"),
                    retry_after: None,
                },
            }
        })?;
        match (answer.ok, answer.result) {
            (true, Some(result)) => Ok(result),
            (true, None) => Err(TelegramError::Decode(String::from(
                "an answer without result",
            ))),
            (false, _) => Err(TelegramError::Api {
                code: answer.error_code.unwrap_or(status),
                description: answer.description.unwrap_or_default(),
                retry_after: answer
                    .parameters
                    .and_then(|parameters| parameters.retry_after)
                    .map(Duration::from_secs),
            }),
        }
    }

    /// `getMe`: the bot's id and username.
    ///
    /// # Errors
    /// [`TelegramError`]; a bot without a username cannot be mentioned and is refused.
    pub async fn get_me(&self) -> Result<BotIdentity, TelegramError> {
        let me: User = self
            .call("getMe", &serde_json::json!({}), CALL_TIMEOUT)
            .await?;
        let username = me
            .username
            .ok_or_else(|| TelegramError::Decode(String::from("the bot has no username")))?;
        Ok(BotIdentity {
            id: me.id,
            username,
        })
    }

    /// `getUpdates` from `offset` (confirming every update before it), waiting up to `wait`
    /// for one.
    ///
    /// # Errors
    /// [`TelegramError`]; `409` when another poller or a webhook holds the bot.
    pub async fn get_updates(
        &self,
        offset: Option<i64>,
        wait: Duration,
    ) -> Result<Vec<Update>, TelegramError> {
        #[derive(Serialize)]
        struct GetUpdates {
            #[serde(skip_serializing_if = "Option::is_none")]
            offset: Option<i64>,
            timeout: u64,
            allowed_updates: &'static [&'static str],
        }
        // Updates are read one by one, so an update this build cannot read never hides the
        // others: it is skipped, and its id still moves the offset on.
        let raw: Vec<serde_json::Value> = self
            .call(
                "getUpdates",
                &GetUpdates {
                    offset,
                    timeout: wait.as_secs(),
                    allowed_updates: ALLOWED_UPDATES,
                },
                wait + CALL_TIMEOUT,
            )
            .await?;
        Ok(raw
            .into_iter()
            .filter_map(|value| {
                let update_id = value.get("update_id").and_then(serde_json::Value::as_i64)?;
                Some(serde_json::from_value(value).unwrap_or(Update {
                    update_id,
                    message: None,
                }))
            })
            .collect())
    }

    /// `deleteWebhook`, keeping pending updates: polling cannot run while a webhook is set.
    ///
    /// # Errors
    /// [`TelegramError`].
    pub async fn delete_webhook(&self) -> Result<(), TelegramError> {
        let _: bool = self
            .call(
                "deleteWebhook",
                &serde_json::json!({"drop_pending_updates": false}),
                CALL_TIMEOUT,
            )
            .await?;
        Ok(())
    }

    /// `setWebhook` to `url`, with `secret` in every update's [`SECRET_HEADER`].
    ///
    /// # Errors
    /// [`TelegramError`].
    pub async fn set_webhook(&self, url: &url::Url, secret: &Secret) -> Result<(), TelegramError> {
        let _: bool = self
            .call(
                "setWebhook",
                &serde_json::json!({
                    "url": url.as_str(),
                    "secret_token": secret.expose(),
                    "allowed_updates": ALLOWED_UPDATES,
                }),
                CALL_TIMEOUT,
            )
            .await?;
        Ok(())
    }

    /// `sendChatAction` `typing` in `chat` (and its forum topic); Telegram shows it for 5 s.
    ///
    /// # Errors
    /// [`TelegramError`].
    pub async fn typing(&self, chat: &str, thread: Option<&str>) -> Result<(), TelegramError> {
        let mut params = serde_json::json!({"chat_id": chat, "action": "typing"});
        if let Some(thread) = thread.and_then(|thread| thread.parse::<i64>().ok()) {
            params["message_thread_id"] = thread.into();
        }
        let _: bool = self.call("sendChatAction", &params, CALL_TIMEOUT).await?;
        Ok(())
    }

    /// Downloads the file `file_id` (at most `max_bytes`, and never more than the Bot API's
    /// [`MAX_DOWNLOAD_BYTES`]), within `timeout`.
    ///
    /// # Errors
    /// [`TelegramError`]; [`TelegramError::TooLarge`] past the bound.
    pub async fn download(
        &self,
        file_id: &str,
        max_bytes: u64,
        timeout: Duration,
    ) -> Result<bytes::Bytes, TelegramError> {
        let max_bytes = max_bytes.min(MAX_DOWNLOAD_BYTES);
        let info: FileInfo = self
            .call(
                "getFile",
                &serde_json::json!({"file_id": file_id}),
                CALL_TIMEOUT,
            )
            .await
            .map_err(|error| match error {
                TelegramError::Api { description, .. }
                    if description.contains("file is too big") =>
                {
                    TelegramError::TooLarge {
                        max_bytes: MAX_DOWNLOAD_BYTES,
                    }
                }
                other => other,
            })?;
        if info.file_size.is_some_and(|size| size > max_bytes) {
            return Err(TelegramError::TooLarge { max_bytes });
        }
        let path = info
            .file_path
            .ok_or_else(|| TelegramError::Decode(String::from("getFile gave no file_path")))?;
        let mut url = self.api_base.clone();
        if let Ok(mut segments) = url.path_segments_mut() {
            segments
                .pop_if_empty()
                .push("file")
                .push(&format!("bot{}", self.token.expose()))
                .extend(
                    path.split('/')
                        .filter(|part| !part.is_empty() && *part != ".."),
                );
        }
        let response = self
            .http
            .get(url)
            .timeout(timeout.min(crate::files::DOWNLOAD_TIMEOUT))
            .send()
            .await
            .map_err(|error| TelegramError::Transport(error.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(TelegramError::Api {
                code: response.status().as_u16(),
                description: String::from("the file could not be downloaded"),
                retry_after: crate::webhook::retry_after(response.headers()),
            });
        }
        crate::files::read_capped(response, max_bytes)
            .await
            .map_err(|error| match error {
                crate::files::Capped::TooLarge => TelegramError::TooLarge { max_bytes },
                crate::files::Capped::Transport(message) => TelegramError::Transport(message),
            })
    }

    /// Sends one part of a reply; returns its message id.
    async fn send_message(&self, message: &SendMessage<'_>) -> Result<i64, TelegramError> {
        let sent: SentMessage = self.call("sendMessage", message, CALL_TIMEOUT).await?;
        Ok(sent.message_id)
    }

    /// Replaces the text of the bot's message `message_id`; an edit that changes nothing is
    /// not an error.
    async fn edit_message(&self, edit: &EditMessageText<'_>) -> Result<(), TelegramError> {
        match self
            .call::<_, serde_json::Value>("editMessageText", edit, CALL_TIMEOUT)
            .await
        {
            Err(error) if error.not_modified() => Ok(()),
            other => other.map(|_| ()),
        }
    }

    /// Sends `file` as a photo (an image within [`MAX_PHOTO_BYTES`]) or a document.
    async fn send_file(
        &self,
        chat: &str,
        thread: Option<i64>,
        file: &OutgoingFile,
    ) -> Result<(), TelegramError> {
        let photo = file.mime_type.starts_with("image/")
            && matches!(
                file.mime_type.as_str(),
                "image/jpeg" | "image/png" | "image/webp"
            )
            && (file.bytes.len() as u64) <= MAX_PHOTO_BYTES;
        let (method, field) = match photo {
            true => ("sendPhoto", "photo"),
            false => ("sendDocument", "document"),
        };
        let part = reqwest::multipart::Part::bytes(file.bytes.to_vec())
            .file_name(file.name.clone())
            .mime_str(&file.mime_type)
            .map_err(|error| TelegramError::Decode(error.without_url().to_string()))?;
        let mut form = reqwest::multipart::Form::new()
            .text("chat_id", chat.to_owned())
            .part(field, part);
        if let Some(thread) = thread {
            form = form.text("message_thread_id", thread.to_string());
        }
        let request = self
            .http
            .post(self.method_url(method))
            .multipart(form)
            .timeout(UPLOAD_TIMEOUT);
        let _: SentMessage = self.answer(request).await?;
        Ok(())
    }
}

/// Sends replies to Telegram chats.
pub struct TelegramAdapter {
    client: TelegramClient,
    /// How far each delivery got in this process.
    progress: crate::adapter::Progress,
}

impl TelegramAdapter {
    /// An adapter sending through `client`.
    #[must_use]
    pub fn new(client: TelegramClient) -> Self {
        Self {
            client,
            progress: crate::adapter::Progress::default(),
        }
    }
}

/// The HTML of each message of a reply: Markdown split on boundaries, rendered, and split
/// again where a rendered part's visible text is past [`MAX_MESSAGE_UTF16`] (a part of
/// astral characters counts twice).
#[must_use]
pub fn reply_parts(text: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut pending: Vec<(String, usize)> = split_markdown(text, 4000)
        .into_iter()
        .rev()
        .map(|part| (part, 4000))
        .collect();
    while let Some((part, limit)) = pending.pop() {
        let (html, visible) = markdown_to_telegram_html(&part);
        if visible <= MAX_MESSAGE_UTF16 || limit <= 64 {
            if visible > 0 {
                parts.push(html);
            }
            continue;
        }
        let smaller = limit / 2;
        for piece in split_markdown(&part, smaller).into_iter().rev() {
            pending.push((piece, smaller));
        }
    }
    parts
}

#[async_trait]
impl Adapter for TelegramAdapter {
    async fn send(&self, message: &Outgoing) -> Result<(), SendError> {
        let chat = message.conversation.as_str();
        let thread = message
            .thread
            .as_deref()
            .and_then(|thread| thread.parse::<i64>().ok());
        // `<chat>:<message>` of the message answered.
        let reply_to = message
            .in_reply_to
            .as_deref()
            .and_then(|id| id.rsplit_once(':'))
            .and_then(|(_, id)| id.parse::<i64>().ok());
        let replaces = message
            .replaces
            .as_deref()
            .and_then(|id| id.parse::<i64>().ok());
        let parts = &reply_parts(&message.text);
        let send = |html: &str, reply_to: Option<i64>| {
            let html = html.to_owned();
            async move {
                self.client
                    .send_message(&SendMessage {
                        chat_id: chat,
                        text: &html,
                        parse_mode: "HTML",
                        message_thread_id: thread,
                        reply_parameters: reply_to.map(|message_id| ReplyParameters {
                            message_id,
                            allow_sending_without_reply: true,
                        }),
                    })
                    .await
                    .map(|_| ())
            }
        };
        self.progress
            .send_steps(
                &message.delivery_id,
                parts.len() + message.files.len(),
                TelegramError::rate_limit,
                TelegramError::transient,
                |index| async move {
                    let first = index == 0;
                    match (parts.get(index), replaces) {
                        // A streamed message that is gone (deleted by an admin) is not
                        // replaced: the reply is sent anew.
                        (Some(html), Some(original)) if first => {
                            let edited = self
                                .client
                                .edit_message(&EditMessageText {
                                    chat_id: chat,
                                    message_id: original,
                                    text: html,
                                    parse_mode: "HTML",
                                })
                                .await;
                            match edited {
                                Err(error) if !error.transient() => send(html, reply_to).await,
                                edited => edited,
                            }
                        }
                        (Some(html), _) => send(html, reply_to.filter(|_| first)).await,
                        (None, _) => {
                            let file = &message.files[index - parts.len()];
                            if file.bytes.len() as u64 > MAX_DOCUMENT_BYTES {
                                let note = crate::files::unsent_note(
                                    &file.name,
                                    &format!(
                                        "it is larger than the {MAX_DOCUMENT_BYTES} bytes a bot may send"
                                    ),
                                );
                                send(&markdown_to_telegram_html(&note).0, None).await
                            } else {
                                self.client.send_file(chat, thread, file).await
                            }
                        }
                    }
                },
            )
            .await
            .map_err(TelegramError::send_error)
    }
}

/// The longest Markdown a streamed Telegram message shows (its HTML's visible text stays
/// within [`MAX_MESSAGE_UTF16`] unless most of it is astral characters, and a refused edit is
/// only skipped).
pub const MAX_STREAM_CHARS: usize = 3500;

/// A Telegram chat a reply streams to, by `editMessageText` of one message.
pub struct TelegramStream {
    /// The bot's client.
    pub client: TelegramClient,
    /// The chat.
    pub chat: String,
    /// The message the reply answers (`<chat>:<message>`).
    pub in_reply_to: String,
    /// The forum topic.
    pub thread: Option<String>,
}

#[async_trait]
impl crate::adapter::StreamSink for TelegramStream {
    fn max_chars(&self) -> usize {
        MAX_STREAM_CHARS
    }

    async fn show(
        &self,
        text: &str,
        shown: Option<&str>,
        _edits: u32,
    ) -> Result<String, SendError> {
        let (html, _) = markdown_to_telegram_html(text);
        match shown.and_then(|id| id.parse::<i64>().ok()) {
            Some(message_id) => {
                self.client
                    .edit_message(&EditMessageText {
                        chat_id: &self.chat,
                        message_id,
                        text: &html,
                        parse_mode: "HTML",
                    })
                    .await
                    .map_err(TelegramError::send_error)?;
                Ok(message_id.to_string())
            }
            None => {
                let reply_to = self
                    .in_reply_to
                    .rsplit_once(':')
                    .and_then(|(_, id)| id.parse::<i64>().ok());
                let sent = self
                    .client
                    .send_message(&SendMessage {
                        chat_id: &self.chat,
                        text: &html,
                        parse_mode: "HTML",
                        message_thread_id: self
                            .thread
                            .as_deref()
                            .and_then(|thread| thread.parse::<i64>().ok()),
                        reply_parameters: reply_to.map(|message_id| ReplyParameters {
                            message_id,
                            allow_sending_without_reply: true,
                        }),
                    })
                    .await
                    .map_err(TelegramError::send_error)?;
                Ok(sent.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    fn me() -> BotIdentity {
        BotIdentity {
            id: 77,
            username: String::from("gate_bot"),
        }
    }

    fn update(value: serde_json::Value) -> Update {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_private_message_is_direct_and_addressed() {
        let incoming = interpret(
            &update(serde_json::json!({"update_id": 5, "message": {
                "message_id": 9, "date": 1, "from": {"id": 42, "is_bot": false, "first_name": "A"},
                "chat": {"id": 42, "type": "private"}, "text": "/say hi"}})),
            &me(),
        )
        .unwrap();
        assert_eq!(incoming.message_id, "42:9");
        assert_eq!(incoming.sender, "42");
        assert!(!incoming.group && incoming.mentioned);
        assert_eq!(incoming.thread, None);
    }

    #[test]
    fn a_group_message_addresses_the_bot_by_mention_command_or_reply() {
        let group = |text: &str, entities: serde_json::Value, reply: Option<i64>| {
            let mut message = serde_json::json!({
                "message_id": 3, "date": 1, "from": {"id": 42, "is_bot": false, "first_name": "A"},
                "chat": {"id": -100, "type": "supergroup"}, "text": text, "entities": entities,
                "message_thread_id": 8, "is_topic_message": true});
            if let Some(author) = reply {
                message["reply_to_message"] = serde_json::json!({"message_id": 1, "date": 1,
                    "from": {"id": author, "is_bot": true, "first_name": "B"},
                    "chat": {"id": -100, "type": "supergroup"}, "text": "x"});
            }
            interpret(
                &update(serde_json::json!({"update_id": 1, "message": message})),
                &me(),
            )
            .unwrap()
        };
        // "é" is one UTF-16 unit and "😀" two: offsets count units.
        let text = "😀 é @Gate_Bot hi";
        let mention = serde_json::json!([{"type": "mention", "offset": 5, "length": 9}]);
        let addressed = group(text, mention, None);
        assert!(addressed.group && addressed.mentioned, "{addressed:?}");
        assert_eq!(addressed.chat, "-100");
        assert_eq!(addressed.thread.as_deref(), Some("8"));
        let other = serde_json::json!([{"type": "mention", "offset": 0, "length": 6}]);
        assert!(!group("@other hi", other, None).mentioned);
        let command = serde_json::json!([{"type": "bot_command", "offset": 0, "length": 13}]);
        assert!(group("/say@gate_bot hi", command, None).mentioned);
        assert!(group("thanks", serde_json::json!([]), Some(77)).mentioned);
        assert!(!group("thanks", serde_json::json!([]), Some(78)).mentioned);
    }

    #[test]
    fn channel_posts_bots_and_empty_messages_ask_nothing() {
        for message in [
            serde_json::json!({"message_id": 1, "date": 1, "chat": {"id": -5, "type": "channel"}, "text": "x"}),
            serde_json::json!({"message_id": 1, "date": 1, "from": {"id": 5, "is_bot": true, "first_name": "B"}, "chat": {"id": 5, "type": "private"}, "text": "x"}),
            serde_json::json!({"message_id": 1, "date": 1, "from": {"id": 5, "is_bot": false, "first_name": "A"}, "chat": {"id": 5, "type": "private"}}),
        ] {
            let update = update(serde_json::json!({"update_id": 1, "message": message}));
            assert_eq!(interpret(&update, &me()), None);
        }
    }

    #[test]
    fn a_document_is_a_file_named_by_its_sender() {
        let incoming = interpret(
            &update(serde_json::json!({"update_id": 5, "message": {
                "message_id": 9, "date": 1, "from": {"id": 42, "is_bot": false, "first_name": "A"},
                "chat": {"id": 42, "type": "private"},
                "document": {"file_id": "F1", "file_unique_id": "u", "file_name": "a.csv", "mime_type": "text/csv", "file_size": 12}}})),
            &me(),
        )
        .unwrap();
        assert_eq!(incoming.text, "");
        assert_eq!(
            incoming.files,
            vec![IncomingFile {
                file_id: String::from("F1"),
                name: String::from("a.csv"),
                mime_type: String::from("text/csv"),
                size: Some(12),
            }]
        );
    }

    #[test]
    fn a_long_reply_splits_within_the_bound_and_loses_nothing() {
        let words: String = (0..2500).map(|n| format!("w{n} ")).collect();
        let parts = reply_parts(&words);
        assert!(parts.len() >= 3, "{}", parts.len());
        for part in &parts {
            assert!(part.encode_utf16().count() <= MAX_MESSAGE_UTF16);
        }
        let joined: Vec<String> = parts
            .iter()
            .flat_map(|part| part.split_whitespace().map(str::to_owned))
            .collect();
        let expected: Vec<String> = words.split_whitespace().map(str::to_owned).collect();
        assert_eq!(joined, expected);
        // Astral characters count twice.
        let emoji = "😀".repeat(5000);
        for part in reply_parts(&emoji) {
            assert!(part.encode_utf16().count() <= MAX_MESSAGE_UTF16);
        }
    }

    #[test]
    fn secret_tokens_are_checked() {
        assert!(valid_secret_token("abc_DEF-123"));
        assert!(!valid_secret_token(""));
        assert!(!valid_secret_token("has space"));
        assert!(!valid_secret_token(&"a".repeat(257)));
        let secret = Secret::new(String::from("tok"));
        assert!(secret_matches(&secret, Some("tok")));
        assert!(!secret_matches(&secret, Some("tok2")));
        assert!(!secret_matches(&secret, None));
    }
}
