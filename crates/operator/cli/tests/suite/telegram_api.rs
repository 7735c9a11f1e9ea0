//! A strict local stand-in for the Telegram Bot API (core.telegram.org/bots/api), for end-to-end
//! tests of the Telegram channel: an HTTP server on `127.0.0.1:0` that answers the methods the
//! channel uses the way the documentation says the real service does, refuses what it refuses,
//! and records what the bot sent so that a test can assert on it.
//!
//! The product is not special-cased for it: its [`TelegramApi::url`] takes the place of
//! `https://api.telegram.org` as the adapter's API base, and everything else is the public Bot
//! API. Each behaviour names, in its doc comment, the section of core.telegram.org/bots/api (or
//! another page of core.telegram.org) it follows. Where the stand-in is stricter or more lenient
//! than the real service, the comment says so.
//!
//! Some mistakes the real service cannot report to the bot (a request sent before a 429's
//! `retry_after` elapsed, two bot instances polling at once, an offset going backwards) are kept
//! as [`TelegramApi::violations`] for the tests to assert empty.

use std::collections::BTreeMap;
use std::collections::HashMap;
use std::collections::HashSet;
use std::collections::VecDeque;
use std::fmt::Display;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::PoisonError;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use axum::body::Body;
use axum::extract::State as Extract;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::Uri;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use tokio::task::JoinHandle;

/// The largest file a bot may download: core.telegram.org/bots/api#getfile ("For the moment,
/// bots can download files of up to 20MB in size").
const DOWNLOAD_LIMIT: u64 = 20 * 1024 * 1024;

/// The largest document a bot may send: core.telegram.org/bots/api#senddocument ("Bots can
/// currently send files of any type of up to 50 MB in size").
const DOCUMENT_LIMIT: usize = 50 * 1024 * 1024;

/// The largest photo a bot may send: core.telegram.org/bots/api#sendphoto ("The photo must be at
/// most 10 MB in size").
const PHOTO_LIMIT: usize = 10 * 1024 * 1024;

/// core.telegram.org/bots/api#sendmessage: `text` is "1-4096 characters after entities parsing"
/// (counted in UTF-16 code units, as every length and offset of the API is:
/// core.telegram.org/bots/api#messageentity).
const TEXT_LIMIT: usize = 4096;

/// core.telegram.org/bots/api#senddocument: `caption` is "0-1024 characters after entities
/// parsing".
const CAPTION_LIMIT: usize = 1024;

/// The largest request body read: a document at [`DOCUMENT_LIMIT`] and the form around it.
/// Anything larger is answered 413, as the real service does.
const REQUEST_LIMIT: usize = DOCUMENT_LIMIT + 1024 * 1024;

/// The first update identifier. core.telegram.org/bots/api#update: "The update's unique
/// identifier. Update identifiers start from a certain positive number and increase
/// sequentially" — deliberately not 1, so an adapter that assumes a start is caught.
const FIRST_UPDATE_ID: i64 = 100_000_001;

/// How long the webhook delivery waits before sending a refused update again. The real service
/// backs off for longer; the documentation (core.telegram.org/bots/api#setwebhook: "In case of
/// an unsuccessful request, we will give up after a reasonable amount of attempts") only
/// promises that it tries again.
const WEBHOOK_RETRY: Duration = Duration::from_millis(200);

/// How long one webhook request may take before it counts as failed.
const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// The actions of core.telegram.org/bots/api#sendchataction.
const CHAT_ACTIONS: [&str; 11] = [
    "typing",
    "upload_photo",
    "record_video",
    "upload_video",
    "record_voice",
    "upload_voice",
    "upload_document",
    "choose_sticker",
    "find_location",
    "record_video_note",
    "upload_video_note",
];

/// The update types left out when `allowed_updates` is empty or never given:
/// core.telegram.org/bots/api#getupdates ("Specify an empty list to receive all update types
/// except chat_member, message_reaction, and message_reaction_count (default)").
const DEFAULT_EXCLUDED_UPDATES: [&str; 3] =
    ["chat_member", "message_reaction", "message_reaction_count"];

/// The tags of core.telegram.org/bots/api#html-style ("Only the tags mentioned above are
/// currently supported").
const HTML_TAGS: [&str; 16] = [
    "b",
    "strong",
    "i",
    "em",
    "u",
    "ins",
    "s",
    "strike",
    "del",
    "span",
    "tg-spoiler",
    "a",
    "code",
    "pre",
    "blockquote",
    "tg-emoji",
];

/// Real Bot API methods this stand-in does not model. A call of one is answered 404 like an
/// unknown method, and also kept as a violation, so that a test fails with a clear sentence
/// rather than with an adapter error that blames Telegram.
const UNMODELLED_METHODS: [&str; 26] = [
    "answerCallbackQuery",
    "close",
    "copyMessage",
    "createForumTopic",
    "deleteMessage",
    "deleteMessages",
    "editMessageCaption",
    "editMessageMedia",
    "editMessageReplyMarkup",
    "forwardMessage",
    "getChat",
    "getChatAdministrators",
    "getChatMember",
    "leaveChat",
    "logOut",
    "pinChatMessage",
    "sendAnimation",
    "sendAudio",
    "sendMediaGroup",
    "sendMessageDraft",
    "sendSticker",
    "sendVideo",
    "sendVoice",
    "setChatMenuButton",
    "setMessageReaction",
    "unpinChatMessage",
];

/// The bot the stand-in serves: what `getMe` answers and who every message the bot sends is
/// from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BotUser {
    /// The bot's user id (the number before the colon of its token, for a real bot).
    pub(crate) id: i64,
    /// The bot's username without `@`: 5–32 of `A-Z a-z 0-9 _`, ending in `bot`
    /// (core.telegram.org/bots/features#botfather).
    pub(crate) username: String,
    /// The bot's display name.
    pub(crate) first_name: String,
}

/// A person who writes to the bot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Person {
    /// The user id; a private chat with this person has the same id
    /// (core.telegram.org/bots/api#chat).
    pub(crate) id: i64,
    /// The person's first name.
    pub(crate) first_name: String,
    /// The person's username without `@`, if they have one.
    pub(crate) username: Option<String>,
}

impl Person {
    /// The person as a User object (core.telegram.org/bots/api#user).
    fn user(&self) -> Value {
        let mut user = json!({"id": self.id, "is_bot": false, "first_name": self.first_name});
        if let Some(username) = &self.username {
            user["username"] = json!(username);
        }
        user
    }
}

/// The kind of chat a message is written in (core.telegram.org/bots/api#chat: `type` and
/// `is_forum`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ChatKind {
    /// A one-to-one chat with the bot; its id is the person's user id.
    Private,
    /// A basic group.
    Group,
    /// A supergroup; `forum` when topics are enabled in it.
    Supergroup {
        /// Whether the supergroup is a forum (has topics).
        forum: bool,
    },
}

/// A document a person sends to the bot: see [`TelegramApi::user_sends_document`]. Fields left
/// out with `..Default::default()` are absent.
#[derive(Clone, Debug, Default)]
pub(crate) struct Document<'a> {
    /// The file name Telegram shows and reports (`document.file_name`).
    pub(crate) file_name: &'a str,
    /// The MIME type the sender's client declared (`document.mime_type`).
    pub(crate) mime_type: &'a str,
    /// The file's contents, kept by the stand-in for `getFile` and the download URL.
    pub(crate) bytes: Vec<u8>,
    /// The caption written with the document.
    pub(crate) caption: Option<&'a str>,
    /// The forum topic (or reply thread) the document is sent in.
    pub(crate) thread: Option<i64>,
}

/// A message the bot sent or edited and the API accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Sent {
    /// `sendMessage`, `editMessageText`, `sendDocument` or `sendPhoto`.
    pub(crate) method: String,
    /// The chat the message is in.
    pub(crate) chat_id: i64,
    /// The new message's id, or the id of the edited message.
    pub(crate) message_id: i64,
    /// The visible text (or caption) after HTML entity parsing.
    pub(crate) text: String,
    /// The text (or caption) as the bot sent it.
    pub(crate) html: String,
    /// The forum topic the message landed in: the `message_thread_id` sent, or the topic of the
    /// message it replies to (core.telegram.org/bots/api#message: `message_thread_id`).
    pub(crate) message_thread_id: Option<i64>,
    /// The message it replies to, when that message exists.
    pub(crate) reply_to: Option<i64>,
    /// The uploaded file's name and contents (sendDocument and sendPhoto).
    pub(crate) file: Option<(String, Vec<u8>)>,
}

/// The running stand-in. Its server task, webhook delivery and waiting long polls stop when it
/// is dropped.
pub(crate) struct TelegramApi {
    /// The base URL, `http://127.0.0.1:PORT`, to use as the adapter's API base in place of
    /// `https://api.telegram.org`: methods are at `{url}/bot<token>/<method>` and files at
    /// `{url}/file/bot<token>/<file_path>` (core.telegram.org/bots/api#making-requests,
    /// core.telegram.org/bots/api#getfile).
    pub(crate) url: String,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl TelegramApi {
    /// Starts on `127.0.0.1:0` with one valid bot token.
    ///
    /// Panics when `bot.username` is not a possible bot username
    /// (core.telegram.org/bots/features#botfather: "5-32 characters long … Latin characters,
    /// numbers, and underscores. Your bot's username must end in 'bot'").
    pub(crate) async fn start(token: &str, bot: BotUser) -> Self {
        let valid_username = (5..=32).contains(&bot.username.len())
            && bot
                .username
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_')
            && bot.username.to_ascii_lowercase().ends_with("bot");
        assert!(
            valid_username,
            "{:?} is not a possible bot username",
            bot.username
        );
        let shared = Arc::new(Shared {
            state: Mutex::new(ApiState::new(token, bot)),
            wake: Notify::new(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let app = axum::Router::new()
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        TelegramApi {
            url,
            shared,
            server,
        }
    }

    /// A person writes a text message: queues an update
    /// `{update_id, message: {message_id, from, chat, date, text, entities?, message_thread_id?,
    /// is_topic_message?, reply_to_message?}}` (core.telegram.org/bots/api#update,
    /// core.telegram.org/bots/api#message) and returns `(update_id, message_id)`.
    ///
    /// `entities` holds the `mention`s (`@username`) and `bot_command`s (`/command` or
    /// `/command@bot` at the start of a word) Telegram's clients detect, with offsets and lengths
    /// in UTF-16 code units (core.telegram.org/bots/api#messageentity).
    ///
    /// `thread` is the forum topic (`message_thread_id`, with `is_topic_message` in a forum); 1
    /// is a forum's General topic, whose messages carry no thread id. As the real service does,
    /// a message in another topic that replies to nothing carries the topic's creation message
    /// as `reply_to_message`. `reply_to_bot_message` is the id of a message in this chat it
    /// replies to (panics when there is none).
    pub(crate) fn user_writes(
        &self,
        chat_id: i64,
        kind: ChatKind,
        from: &Person,
        text: &str,
        thread: Option<i64>,
        reply_to_bot_message: Option<i64>,
    ) -> (i64, i64) {
        let mut content = Map::new();
        content.insert("text".to_owned(), json!(text));
        let entities = detect_entities(text);
        if !entities.is_empty() {
            content.insert("entities".to_owned(), Value::Array(entities));
        }
        self.user_message(chat_id, kind, from, thread, reply_to_bot_message, content)
    }

    /// A person sends a document (core.telegram.org/bots/api#document), its bytes kept under a
    /// new `file_id` with `file_size` = its length, with an optional caption (whose mentions and
    /// commands are in `caption_entities`); returns `(update_id, message_id)`.
    pub(crate) fn user_sends_document(
        &self,
        chat_id: i64,
        kind: ChatKind,
        from: &Person,
        document: Document<'_>,
    ) -> (i64, i64) {
        let size = document.bytes.len() as u64;
        let file = {
            let mut state = self.shared.lock();
            state.store_file(document.file_name, "documents", size, Some(document.bytes))
        };
        let mut content = Map::new();
        content.insert(
            "document".to_owned(),
            json!({
                "file_name": document.file_name,
                "mime_type": document.mime_type,
                "file_id": file.0,
                "file_unique_id": file.1,
                "file_size": size,
            }),
        );
        if let Some(caption) = document.caption {
            content.insert("caption".to_owned(), json!(caption));
            let entities = detect_entities(caption);
            if !entities.is_empty() {
                content.insert("caption_entities".to_owned(), Value::Array(entities));
            }
        }
        self.user_message(chat_id, kind, from, document.thread, None, content)
    }

    /// A person sends a document of `size` bytes, more than the 20 MB a bot may download
    /// (core.telegram.org/bots/api#getfile), without the stand-in storing any bytes: `getFile`
    /// answers `file is too big` for it. Returns `(update_id, message_id)`.
    pub(crate) fn user_sends_huge_document(
        &self,
        chat_id: i64,
        kind: ChatKind,
        from: &Person,
        file_name: &str,
        size: u64,
    ) -> (i64, i64) {
        assert!(
            size > DOWNLOAD_LIMIT,
            "{size} bytes is not more than the 20 MB getFile bound"
        );
        let file = self
            .shared
            .lock()
            .store_file(file_name, "documents", size, None);
        let mut content = Map::new();
        content.insert(
            "document".to_owned(),
            json!({
                "file_name": file_name,
                "mime_type": "application/octet-stream",
                "file_id": file.0,
                "file_unique_id": file.1,
                "file_size": size,
            }),
        );
        self.user_message(chat_id, kind, from, None, None, content)
    }

    /// Queues a raw update (core.telegram.org/bots/api#update), its `update_id` filled in when
    /// absent, and returns the `update_id`. The chat and message of a `message`,
    /// `edited_message`, `channel_post` or `business_message` in it become known to the
    /// stand-in (so the bot may answer there). An update of a type the bot's `allowed_updates`
    /// leaves out is dropped, as the real service does.
    pub(crate) fn push_update(&self, update: Value) -> i64 {
        let id = self.shared.lock().queue(update);
        self.shared.wake.notify_waiters();
        id
    }

    /// Everything the bot sent or edited that the API accepted, in order.
    pub(crate) fn sent(&self) -> Vec<Sent> {
        self.shared.lock().sent.clone()
    }

    /// Calls of `method` (compared case-insensitively, like method names are:
    /// core.telegram.org/bots/api#making-requests) the stand-in received, accepted or not.
    pub(crate) fn calls(&self, method: &str) -> usize {
        self.shared
            .lock()
            .calls
            .get(&method.to_ascii_lowercase())
            .copied()
            .unwrap_or(0)
    }

    /// Answers the next `count` calls of `method` with 429 `Too Many Requests: retry after N`
    /// and `parameters.retry_after` = `seconds` (core.telegram.org/bots/api#responseparameters,
    /// core.telegram.org/bots/faq#my-bot-is-hitting-limits-how-do-i-avoid-this). A call of that
    /// method to the same chat before `seconds` passed is answered 429 again and kept as a
    /// violation.
    pub(crate) fn rate_limit_next(&self, method: &str, count: usize, seconds: u64) {
        let name = Method::parse(method)
            .unwrap_or_else(|| panic!("{method} is not a method the stand-in models"));
        self.shared.lock().limit_next.insert(name, (count, seconds));
    }

    /// Calls that broke the rules in a way the real API would not answer with an error the
    /// adapter could see, one sentence each: a call made before a 429's `retry_after` elapsed
    /// (per method and chat), a `getUpdates` while another one was long polling, a `getUpdates`
    /// with an offset lower than one already confirmed, a call of a real method this stand-in
    /// does not model, a `parse_mode` it does not model.
    pub(crate) fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// The highest offset a `getUpdates` confirmed (0 if none).
    pub(crate) fn confirmed_offset(&self) -> i64 {
        self.shared.lock().confirmed_offset
    }

    /// The webhook `setWebhook` set, as `(url, secret_token)`, or `None`.
    pub(crate) fn webhook(&self) -> Option<(String, Option<String>)> {
        self.shared
            .lock()
            .webhook
            .as_ref()
            .map(|webhook| (webhook.url.clone(), webhook.secret.clone()))
    }

    /// Every request body, URL query and header value the stand-in received, concatenated, for
    /// tests that check a credential never travels where it should not. The bot token
    /// legitimately appears only in URL paths, which are left out.
    pub(crate) fn request_log(&self) -> String {
        self.shared.lock().request_log.clone()
    }

    /// Times `sendChatAction` was accepted with action `typing`.
    pub(crate) fn typing_actions(&self) -> usize {
        self.shared.lock().typing
    }

    /// Queues a message from `from` with the given content fields.
    fn user_message(
        &self,
        chat_id: i64,
        kind: ChatKind,
        from: &Person,
        thread: Option<i64>,
        reply_to: Option<i64>,
        content: Map<String, Value>,
    ) -> (i64, i64) {
        let ids = self
            .shared
            .lock()
            .user_message(chat_id, kind, from, thread, reply_to, content);
        self.shared.wake.notify_waiters();
        ids
    }
}

impl Drop for TelegramApi {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.closed = true;
            state.webhook_generation += 1;
            if let Some(delivery) = state.delivery.take() {
                delivery.abort();
            }
        }
        self.shared.wake.notify_waiters();
        // Dropping the serve future makes axum shut its connections down gracefully: idle ones
        // close, and the long polls just woken answer first.
        self.server.abort();
    }
}

/// The state and the wake-up for long polls and the webhook delivery.
struct Shared {
    state: Mutex<ApiState>,
    /// Woken on every new update, every new `getUpdates`, webhook change and shutdown.
    wake: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, ApiState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A message the stand-in knows, in a chat.
#[derive(Clone, Debug)]
struct StoredMessage {
    /// The Message object as the API shows it.
    json: Value,
    /// Whether the bot sent it.
    from_bot: bool,
    /// The text and entities, for a text message.
    text: Option<Formatted>,
    /// The forum topic it is in.
    thread: Option<i64>,
    /// The message it replies to.
    reply_to: Option<i64>,
}

/// A chat someone wrote to the bot from.
#[derive(Debug)]
struct ChatState {
    kind: ChatKind,
    /// The Chat object (core.telegram.org/bots/api#chat).
    json: Value,
    next_message_id: i64,
    messages: BTreeMap<i64, StoredMessage>,
    /// The forum topics a person wrote in.
    topics: HashSet<i64>,
}

impl ChatState {
    fn new(chat_id: i64, kind: ChatKind, from: &Person) -> Self {
        let json = match kind {
            ChatKind::Private => {
                let mut chat =
                    json!({"id": chat_id, "type": "private", "first_name": from.first_name});
                if let Some(username) = &from.username {
                    chat["username"] = json!(username);
                }
                chat
            }
            ChatKind::Group => {
                json!({"id": chat_id, "type": "group", "title": format!("Group {chat_id}")})
            }
            ChatKind::Supergroup { forum } => {
                let mut chat = json!({"id": chat_id, "type": "supergroup", "title": format!("Supergroup {chat_id}")});
                if forum {
                    chat["is_forum"] = json!(true);
                }
                chat
            }
        };
        ChatState {
            kind,
            json,
            next_message_id: 1,
            messages: BTreeMap::new(),
            topics: HashSet::new(),
        }
    }

    fn is_forum(&self) -> bool {
        self.kind == ChatKind::Supergroup { forum: true }
    }

    fn new_message_id(&mut self) -> i64 {
        let id = self.next_message_id;
        self.next_message_id += 1;
        id
    }

    /// A stored message as `reply_to_message` shows it: core.telegram.org/bots/api#message
    /// ("Note that the Message object in this field will not contain further reply_to_message
    /// fields even if it itself is a reply").
    fn reply_json(&self, message_id: i64) -> Option<Value> {
        let mut json = self.messages.get(&message_id)?.json.clone();
        if let Some(object) = json.as_object_mut() {
            object.remove("reply_to_message");
        }
        Some(json)
    }

    /// core.telegram.org/bots/api#sendmessage: `message_thread_id` is the "Unique identifier for
    /// the target message thread (topic) of the forum; for forum supergroups only". The stand-in
    /// knows the topics people wrote in and the General topic (1).
    fn check_thread(&self, thread: Option<i64>) -> Result<(), ApiError> {
        match thread {
            None => Ok(()),
            Some(thread) if self.is_forum() && (thread == 1 || self.topics.contains(&thread)) => {
                Ok(())
            }
            Some(_) => Err(ApiError::bad_request("message thread not found")),
        }
    }
}

/// A file the stand-in keeps (core.telegram.org/bots/api#file).
#[derive(Debug)]
struct StoredFile {
    unique_id: String,
    file_name: String,
    size: u64,
    /// `None` for a file declared bigger than the stand-in keeps.
    bytes: Option<Vec<u8>>,
    /// `documents` or `photos`: where `getFile` puts its `file_path`.
    folder: &'static str,
    /// Set by the first `getFile`.
    path: Option<String>,
}

/// The webhook `setWebhook` set.
#[derive(Debug)]
struct Webhook {
    url: String,
    secret: Option<String>,
    last_error: Option<(i64, String)>,
}

/// Everything the stand-in knows.
struct ApiState {
    token: String,
    bot: BotUser,
    closed: bool,
    last_update_id: i64,
    /// Updates not yet confirmed (getUpdates) or delivered (webhook), in order.
    pending: VecDeque<Value>,
    /// The `allowed_updates` last given; empty is the default set.
    allowed_updates: Vec<String>,
    confirmed_offset: i64,
    chats: HashMap<i64, ChatState>,
    files: HashMap<String, StoredFile>,
    /// `file_path` → `file_id`.
    file_paths: HashMap<String, String>,
    next_file: u64,
    sent: Vec<Sent>,
    /// Lowercased method name → calls received.
    calls: HashMap<String, usize>,
    /// Method → (calls still to answer 429, retry_after).
    limit_next: HashMap<Method, (usize, u64)>,
    /// (method, chat) → when its last 429's retry_after elapses.
    retry_until: HashMap<(Method, Option<i64>), Instant>,
    violations: Vec<String>,
    webhook: Option<Webhook>,
    webhook_generation: u64,
    delivery: Option<AbortHandle>,
    next_poll: u64,
    /// The `getUpdates` long poll now waiting.
    waiting_poll: Option<u64>,
    /// Long polls a newer `getUpdates` ended; each answers 409.
    terminated_polls: HashSet<u64>,
    /// (scope, language_code) → commands, for setMyCommands and getMyCommands.
    commands: HashMap<(String, String), Value>,
    request_log: String,
    typing: usize,
}

impl ApiState {
    fn new(token: &str, bot: BotUser) -> Self {
        ApiState {
            token: token.to_owned(),
            bot,
            closed: false,
            last_update_id: FIRST_UPDATE_ID - 1,
            pending: VecDeque::new(),
            allowed_updates: Vec::new(),
            confirmed_offset: 0,
            chats: HashMap::new(),
            files: HashMap::new(),
            file_paths: HashMap::new(),
            next_file: 0,
            sent: Vec::new(),
            calls: HashMap::new(),
            limit_next: HashMap::new(),
            retry_until: HashMap::new(),
            violations: Vec::new(),
            webhook: None,
            webhook_generation: 0,
            delivery: None,
            next_poll: 0,
            waiting_poll: None,
            terminated_polls: HashSet::new(),
            commands: HashMap::new(),
            request_log: String::new(),
            typing: 0,
        }
    }

    /// The bot as a User object: core.telegram.org/bots/api#getme ("Returns basic information
    /// about the bot in form of a User object") with the bot-only fields of
    /// core.telegram.org/bots/api#user.
    fn bot_user(&self) -> Value {
        json!({
            "id": self.bot.id,
            "is_bot": true,
            "first_name": self.bot.first_name,
            "username": self.bot.username,
            "can_join_groups": true,
            "can_read_all_group_messages": false,
            "supports_inline_queries": false,
        })
    }

    /// Keeps a file and returns its `(file_id, file_unique_id)`.
    fn store_file(
        &mut self,
        file_name: &str,
        folder: &'static str,
        size: u64,
        bytes: Option<Vec<u8>>,
    ) -> (String, String) {
        self.next_file += 1;
        let number = self.next_file;
        let prefix = if folder == "photos" {
            "AgACAgIAAxkBAAI"
        } else {
            "BQACAgIAAxkBAAI"
        };
        let file_id = format!("{prefix}{number:06}StandIn");
        let unique_id = format!("AgAD{number:04}");
        self.files.insert(
            file_id.clone(),
            StoredFile {
                unique_id: unique_id.clone(),
                file_name: file_name.to_owned(),
                size,
                bytes,
                folder,
                path: None,
            },
        );
        (file_id, unique_id)
    }

    /// Queues an update (see [`TelegramApi::push_update`]).
    fn queue(&mut self, mut update: Value) -> i64 {
        let id = update
            .get("update_id")
            .and_then(Value::as_i64)
            .unwrap_or(self.last_update_id + 1);
        self.last_update_id = self.last_update_id.max(id);
        if let Some(object) = update.as_object_mut() {
            object.insert("update_id".to_owned(), json!(id));
        }
        self.register(&update);
        if self.allows(&update) {
            self.pending.push_back(update);
        }
        id
    }

    /// Makes the chat and message of a raw update known.
    fn register(&mut self, update: &Value) {
        for field in ["message", "channel_post", "business_message"] {
            let Some(message) = update.get(field) else {
                continue;
            };
            let (Some(chat), Some(message_id)) = (
                message.get("chat"),
                message.get("message_id").and_then(Value::as_i64),
            ) else {
                continue;
            };
            let Some(chat_id) = chat.get("id").and_then(Value::as_i64) else {
                continue;
            };
            let kind = match chat.get("type").and_then(Value::as_str) {
                Some("private") => ChatKind::Private,
                Some("supergroup") => ChatKind::Supergroup {
                    forum: chat.get("is_forum").and_then(Value::as_bool) == Some(true),
                },
                _ => ChatKind::Group,
            };
            let state = self.chats.entry(chat_id).or_insert_with(|| ChatState {
                kind,
                json: chat.clone(),
                next_message_id: 1,
                messages: BTreeMap::new(),
                topics: HashSet::new(),
            });
            let thread = message.get("message_thread_id").and_then(Value::as_i64);
            if let Some(thread) = thread
                && message.get("is_topic_message").and_then(Value::as_bool) == Some(true)
            {
                state.topics.insert(thread);
            }
            state.next_message_id = state.next_message_id.max(message_id + 1);
            state
                .messages
                .entry(message_id)
                .or_insert_with(|| StoredMessage {
                    json: message.clone(),
                    from_bot: false,
                    text: None,
                    thread,
                    reply_to: None,
                });
        }
    }

    /// Whether the bot's `allowed_updates` lets this update through
    /// (core.telegram.org/bots/api#getupdates, core.telegram.org/bots/api#setwebhook).
    fn allows(&self, update: &Value) -> bool {
        let Some(kind) = update
            .as_object()
            .and_then(|object| object.keys().find(|key| *key != "update_id"))
        else {
            return true;
        };
        if self.allowed_updates.is_empty() {
            !DEFAULT_EXCLUDED_UPDATES.contains(&kind.as_str())
        } else {
            self.allowed_updates.contains(kind)
        }
    }

    /// Builds, stores and queues a message a person wrote.
    fn user_message(
        &mut self,
        chat_id: i64,
        kind: ChatKind,
        from: &Person,
        thread: Option<i64>,
        reply_to: Option<i64>,
        content: Map<String, Value>,
    ) -> (i64, i64) {
        // core.telegram.org/bots/api#chat: a private chat's id is the other party's user id.
        assert!(
            kind != ChatKind::Private || chat_id == from.id,
            "a private chat's id is the user's id ({}), not {chat_id}",
            from.id
        );
        let chat = self
            .chats
            .entry(chat_id)
            .or_insert_with(|| ChatState::new(chat_id, kind, from));
        if chat.kind != kind {
            *chat = ChatState {
                messages: std::mem::take(&mut chat.messages),
                topics: std::mem::take(&mut chat.topics),
                next_message_id: chat.next_message_id,
                ..ChatState::new(chat_id, kind, from)
            };
        }
        let date = unix_now();
        // In a forum, a topic's id is the id of the service message that created it, and a
        // message in a topic that replies to nothing carries that message as reply_to_message.
        let topic = thread.filter(|thread| chat.is_forum() && *thread != 1);
        if let Some(topic) = topic
            && chat.topics.insert(topic)
            && !chat.messages.contains_key(&topic)
        {
            let created = json!({
                "message_id": topic,
                "from": from.user(),
                "chat": chat.json,
                "date": date,
                "message_thread_id": topic,
                "is_topic_message": true,
                "forum_topic_created": {"name": format!("Topic {topic}"), "icon_color": 7_322_096},
            });
            chat.messages.insert(
                topic,
                StoredMessage {
                    json: created,
                    from_bot: false,
                    text: None,
                    thread: Some(topic),
                    reply_to: None,
                },
            );
            chat.next_message_id = chat.next_message_id.max(topic + 1);
        }
        let message_id = chat.new_message_id();
        let mut message = json!({
            "message_id": message_id,
            "from": from.user(),
            "chat": chat.json,
            "date": date,
        });
        let in_thread = if chat.is_forum() { topic } else { thread };
        if let Some(thread) = in_thread {
            message["message_thread_id"] = json!(thread);
            if chat.is_forum() {
                message["is_topic_message"] = json!(true);
            }
        }
        let replied = reply_to.or(topic);
        if let Some(replied) = replied {
            let json = chat.reply_json(replied).unwrap_or_else(|| {
                panic!("there is no message {replied} in chat {chat_id} to reply to")
            });
            message["reply_to_message"] = json;
        }
        if let Some(object) = message.as_object_mut() {
            object.extend(content);
        }
        chat.messages.insert(
            message_id,
            StoredMessage {
                json: message.clone(),
                from_bot: false,
                text: None,
                thread: in_thread,
                reply_to: reply_to.or(topic),
            },
        );
        let update_id = self.queue(json!({"message": message}));
        (update_id, message_id)
    }

    /// Confirms updates below `offset`: core.telegram.org/bots/api#getupdates ("An update is
    /// considered confirmed as soon as getUpdates is called with an offset higher than its
    /// update_id. The negative offset can be specified to retrieve updates starting from -offset
    /// update from the end of the updates queue. All previous updates will be forgotten.").
    fn confirm(&mut self, offset: i64) {
        if offset > 0 {
            if offset < self.confirmed_offset {
                self.violations.push(format!(
                    "getUpdates was called with offset {offset}, lower than the offset {} an \
                     earlier getUpdates already confirmed",
                    self.confirmed_offset
                ));
            }
            self.pending.retain(|update| update_id(update) >= offset);
            self.confirmed_offset = self.confirmed_offset.max(offset);
        } else if offset < 0 {
            let keep = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
            while self.pending.len() > keep {
                if let Some(update) = self.pending.pop_front() {
                    self.confirmed_offset = self.confirmed_offset.max(update_id(&update) + 1);
                }
            }
        }
    }

    /// Answers 429 when `method` to `chat` is (still) rate limited: core.telegram.org/bots/api#
    /// responseparameters ("retry_after: In case of exceeding flood control, the number of
    /// seconds left to wait before the request can be repeated").
    fn throttle(&mut self, method: Method, chat: Option<i64>) -> Result<(), ApiError> {
        let now = Instant::now();
        if let Some(until) = self.retry_until.get(&(method, chat))
            && now < *until
        {
            let left = *until - now;
            let target = chat.map_or_else(String::new, |chat| format!(" to chat {chat}"));
            self.violations.push(format!(
                "{}{target} was called {:.1} s before the retry_after of its 429 elapsed",
                method.name(),
                left.as_secs_f64()
            ));
            return Err(ApiError::too_many_requests(left.as_secs().max(1)));
        }
        if let Some((count, seconds)) = self.limit_next.get_mut(&method)
            && *count > 0
        {
            *count -= 1;
            let seconds = *seconds;
            self.retry_until
                .insert((method, chat), now + Duration::from_secs(seconds));
            return Err(ApiError::too_many_requests(seconds));
        }
        Ok(())
    }

    /// Parses `text` by `parse_mode`: core.telegram.org/bots/api#formatting-options.
    fn format(&mut self, text: &str, parse_mode: Option<&str>) -> Result<Formatted, ApiError> {
        match parse_mode.map(str::trim) {
            None | Some("") => Ok(Formatted {
                text: text.to_owned(),
                entities: Vec::new(),
            }),
            Some(mode) if mode.eq_ignore_ascii_case("html") => parse_html(text)
                .map_err(|error| ApiError::bad_request(format!("can't parse entities: {error}"))),
            Some(mode)
                if mode.eq_ignore_ascii_case("markdownv2")
                    || mode.eq_ignore_ascii_case("markdown") =>
            {
                self.violations.push(format!(
                    "parse_mode {mode} was used; the stand-in models only HTML"
                ));
                Err(ApiError::bad_request(
                    "can't parse entities: the stand-in models only parse_mode HTML",
                ))
            }
            Some(_) => Err(ApiError::bad_request("unsupported parse_mode")),
        }
    }

    /// The replied message of a send: core.telegram.org/bots/api#replyparameters (`message_id`,
    /// `allow_sending_without_reply`: "Pass True if the message should be sent even if the
    /// specified message to be replied to is not found"), or the older `reply_to_message_id`
    /// and `allow_sending_without_reply` parameters. A reply to another chat is not modelled.
    fn reply_target(&self, chat: &ChatState, params: &Params) -> Result<Option<i64>, ApiError> {
        let (message_id, allow_without) = match params.json("reply_parameters")? {
            Some(reply) => {
                let Some(message_id) = reply.get("message_id").and_then(Value::as_i64) else {
                    return Err(ApiError::bad_request(
                        "can't parse reply parameters JSON object",
                    ));
                };
                let allow = reply
                    .get("allow_sending_without_reply")
                    .and_then(Value::as_bool)
                    .unwrap_or(false);
                (message_id, allow)
            }
            None => match params.int("reply_to_message_id")? {
                Some(message_id) => (message_id, params.flag("allow_sending_without_reply")?),
                None => return Ok(None),
            },
        };
        if chat.messages.contains_key(&message_id) {
            Ok(Some(message_id))
        } else if allow_without {
            Ok(None)
        } else {
            Err(ApiError::bad_request("message to be replied not found"))
        }
    }

    /// Runs a method that needs no waiting.
    fn call(&mut self, method: Method, params: &Params) -> Result<Value, ApiError> {
        match method {
            Method::GetMe => Ok(self.bot_user()),
            Method::DeleteWebhook => {
                self.delete_webhook(params.flag("drop_pending_updates")?);
                Ok(json!(true))
            }
            Method::GetWebhookInfo => Ok(self.webhook_info()),
            Method::SendMessage => self.send_message(params),
            Method::EditMessageText => self.edit_message_text(params),
            Method::SendChatAction => self.send_chat_action(params),
            Method::GetFile => self.get_file(params),
            Method::SendDocument | Method::SendPhoto => self.send_file(method, params),
            Method::SetMyCommands => self.set_my_commands(params),
            Method::GetMyCommands => Ok(self
                .commands
                .get(&commands_key(params))
                .cloned()
                .unwrap_or_else(|| json!([]))),
            Method::DeleteMyCommands => {
                self.commands.remove(&commands_key(params));
                Ok(json!(true))
            }
            Method::GetUpdates | Method::SetWebhook => {
                unreachable!("{} is answered by its own function", method.name())
            }
        }
    }

    /// core.telegram.org/bots/api#deletewebhook.
    fn delete_webhook(&mut self, drop_pending: bool) {
        self.webhook = None;
        self.webhook_generation += 1;
        if let Some(delivery) = self.delivery.take() {
            delivery.abort();
        }
        if drop_pending {
            self.pending.clear();
        }
    }

    /// core.telegram.org/bots/api#getwebhookinfo: a WebhookInfo, with `url` empty when no
    /// webhook is set.
    fn webhook_info(&self) -> Value {
        let mut info = json!({
            "url": "",
            "has_custom_certificate": false,
            "pending_update_count": self.pending.len(),
        });
        if let Some(webhook) = &self.webhook {
            info["url"] = json!(webhook.url);
            info["max_connections"] = json!(40);
            info["ip_address"] = json!("127.0.0.1");
            if !self.allowed_updates.is_empty() {
                info["allowed_updates"] = json!(self.allowed_updates);
            }
            if let Some((date, message)) = &webhook.last_error {
                info["last_error_date"] = json!(date);
                info["last_error_message"] = json!(message);
            }
        }
        info
    }

    /// core.telegram.org/bots/api#sendmessage.
    fn send_message(&mut self, params: &Params) -> Result<Value, ApiError> {
        let chat_id = params.chat_id()?;
        let html = params.text("text").unwrap_or_default();
        let formatted = self.format(html, params.text("parse_mode"))?;
        check_text(&formatted)?;
        let thread = params.int("message_thread_id")?;
        let chat = self
            .chats
            .get(&chat_id)
            .ok_or_else(|| ApiError::bad_request("chat not found"))?;
        chat.check_thread(thread)?;
        let reply_to = self.reply_target(chat, params)?;
        let mut content = Map::new();
        content.insert("text".to_owned(), json!(formatted.text));
        if !formatted.entities.is_empty() {
            content.insert(
                "entities".to_owned(),
                Value::Array(formatted.entities.clone()),
            );
        }
        let (message, thread) =
            self.bot_message(chat_id, thread, reply_to, content, Some(formatted.clone()));
        self.sent.push(Sent {
            method: Method::SendMessage.name().to_owned(),
            chat_id,
            message_id: message_id(&message),
            text: formatted.text,
            html: html.to_owned(),
            message_thread_id: thread,
            reply_to,
            file: None,
        });
        Ok(message)
    }

    /// Builds and stores a message the bot sends; returns it and the topic it landed in (a reply
    /// without `message_thread_id` lands in the replied message's topic).
    fn bot_message(
        &mut self,
        chat_id: i64,
        thread: Option<i64>,
        reply_to: Option<i64>,
        content: Map<String, Value>,
        text: Option<Formatted>,
    ) -> (Value, Option<i64>) {
        let bot = self.bot_user();
        let Some(chat) = self.chats.get_mut(&chat_id) else {
            unreachable!("the chat was checked before");
        };
        let thread = thread.filter(|thread| *thread != 1).or_else(|| {
            reply_to
                .and_then(|replied| chat.messages.get(&replied))
                .and_then(|replied| replied.thread)
                .filter(|_| chat.is_forum())
        });
        let message_id = chat.new_message_id();
        let mut message = json!({
            "message_id": message_id,
            "from": bot,
            "chat": chat.json,
            "date": unix_now(),
        });
        if let Some(thread) = thread {
            message["message_thread_id"] = json!(thread);
            message["is_topic_message"] = json!(true);
        }
        if let Some(replied) = reply_to.and_then(|replied| chat.reply_json(replied)) {
            message["reply_to_message"] = replied;
        }
        if let Some(object) = message.as_object_mut() {
            object.extend(content);
        }
        chat.messages.insert(
            message_id,
            StoredMessage {
                json: message.clone(),
                from_bot: true,
                text,
                thread,
                reply_to,
            },
        );
        (message, thread)
    }

    /// core.telegram.org/bots/api#editmessagetext.
    fn edit_message_text(&mut self, params: &Params) -> Result<Value, ApiError> {
        if params.text("inline_message_id").is_some() {
            return Err(ApiError::bad_request("message to edit not found"));
        }
        let chat_id = params.chat_id()?;
        let message_id = params
            .int("message_id")?
            .ok_or_else(|| ApiError::bad_request("message identifier is not specified"))?;
        let html = params.text("text").unwrap_or_default();
        let formatted = self.format(html, params.text("parse_mode"))?;
        check_text(&formatted)?;
        let chat = self
            .chats
            .get_mut(&chat_id)
            .ok_or_else(|| ApiError::bad_request("chat not found"))?;
        let message = chat
            .messages
            .get_mut(&message_id)
            .filter(|message| message.from_bot)
            .ok_or_else(|| ApiError::bad_request("message to edit not found"))?;
        let Some(current) = &message.text else {
            return Err(ApiError::bad_request(
                "there is no text in the message to edit",
            ));
        };
        if *current == formatted {
            return Err(ApiError::bad_request(
                "message is not modified: specified new message content and reply markup are \
                 exactly the same as a current content and reply markup of the message",
            ));
        }
        message.json["text"] = json!(formatted.text);
        message.json["edit_date"] = json!(unix_now());
        if let Some(object) = message.json.as_object_mut() {
            object.remove("entities");
            if !formatted.entities.is_empty() {
                object.insert(
                    "entities".to_owned(),
                    Value::Array(formatted.entities.clone()),
                );
            }
        }
        message.text = Some(formatted.clone());
        let result = message.json.clone();
        let sent = Sent {
            method: Method::EditMessageText.name().to_owned(),
            chat_id,
            message_id,
            text: formatted.text,
            html: html.to_owned(),
            message_thread_id: message.thread,
            reply_to: message.reply_to,
            file: None,
        };
        self.sent.push(sent);
        Ok(result)
    }

    /// core.telegram.org/bots/api#sendchataction.
    fn send_chat_action(&mut self, params: &Params) -> Result<Value, ApiError> {
        let chat_id = params.chat_id()?;
        let action = params.text("action").unwrap_or_default();
        if !CHAT_ACTIONS.contains(&action) {
            return Err(ApiError::bad_request("wrong parameter action in request"));
        }
        let thread = params.int("message_thread_id")?;
        let chat = self
            .chats
            .get(&chat_id)
            .ok_or_else(|| ApiError::bad_request("chat not found"))?;
        chat.check_thread(thread)?;
        if action == "typing" {
            self.typing += 1;
        }
        Ok(json!(true))
    }

    /// core.telegram.org/bots/api#getfile: a File whose `file_path` the bot downloads from
    /// `/file/bot<token>/<file_path>`.
    fn get_file(&mut self, params: &Params) -> Result<Value, ApiError> {
        let file_id = params.text("file_id").unwrap_or_default();
        let next_path = self.file_paths.len() + 1;
        let file = self
            .files
            .get_mut(file_id)
            .ok_or_else(|| ApiError::bad_request("invalid file_id"))?;
        if file.size > DOWNLOAD_LIMIT {
            return Err(ApiError::bad_request("file is too big"));
        }
        let path = match &file.path {
            Some(path) => path.clone(),
            None => {
                let extension = match file.folder {
                    "photos" => ".jpg".to_owned(),
                    _ => file
                        .file_name
                        .rsplit_once('.')
                        .map(|(_, extension)| extension)
                        .filter(|extension| {
                            !extension.is_empty()
                                && extension.len() <= 8
                                && extension.bytes().all(|byte| byte.is_ascii_alphanumeric())
                        })
                        .map(|extension| format!(".{}", extension.to_ascii_lowercase()))
                        .unwrap_or_default(),
                };
                let path = format!("{}/file_{next_path}{extension}", file.folder);
                file.path = Some(path.clone());
                self.file_paths.insert(path.clone(), file_id.to_owned());
                path
            }
        };
        Ok(json!({
            "file_id": file_id,
            "file_unique_id": file.unique_id,
            "file_size": file.size,
            "file_path": path,
        }))
    }

    /// core.telegram.org/bots/api#senddocument and core.telegram.org/bots/api#sendphoto, the file
    /// uploaded as multipart/form-data or given as a `file_id` the stand-in knows
    /// (core.telegram.org/bots/api#sending-files). Sending by HTTP URL is not modelled.
    fn send_file(&mut self, method: Method, params: &Params) -> Result<Value, ApiError> {
        let (field, folder, limit) = match method {
            Method::SendPhoto => ("photo", "photos", PHOTO_LIMIT),
            _ => ("document", "documents", DOCUMENT_LIMIT),
        };
        let chat_id = params.chat_id()?;
        let caption_html = params.text("caption").unwrap_or_default();
        let caption = self.format(caption_html, params.text("parse_mode"))?;
        if utf16_len(&caption.text) > CAPTION_LIMIT {
            return Err(ApiError::bad_request("message caption is too long"));
        }
        let (file_name, mime_type, bytes, known_id) = match params.0.get(field) {
            None => {
                return Err(ApiError::bad_request(format!(
                    "there is no {field} in the request"
                )));
            }
            Some(Param::File {
                file_name,
                content_type,
                bytes,
            }) => {
                if bytes.is_empty() {
                    return Err(ApiError::bad_request("file must be non-empty"));
                }
                if bytes.len() > limit {
                    return Err(ApiError::bad_request("file is too big"));
                }
                let mime_type = content_type
                    .clone()
                    .unwrap_or_else(|| "application/octet-stream".to_owned());
                (file_name.clone(), mime_type, bytes.clone(), None)
            }
            Some(Param::Text(file_id)) => {
                let Some(file) = self.files.get(file_id) else {
                    return Err(ApiError::bad_request(
                        "wrong file identifier/HTTP URL specified",
                    ));
                };
                let Some(bytes) = file.bytes.clone() else {
                    return Err(ApiError::bad_request("file is too big"));
                };
                let mime_type = "application/octet-stream".to_owned();
                (file.file_name.clone(), mime_type, bytes, Some(file_id))
            }
        };
        let thread = params.int("message_thread_id")?;
        let chat = self
            .chats
            .get(&chat_id)
            .ok_or_else(|| ApiError::bad_request("chat not found"))?;
        chat.check_thread(thread)?;
        let reply_to = self.reply_target(chat, params)?;
        let size = bytes.len() as u64;
        let (file_id, unique_id) = match known_id {
            Some(file_id) => {
                let unique_id = self
                    .files
                    .get(file_id)
                    .map(|file| file.unique_id.clone())
                    .unwrap_or_default();
                (file_id.clone(), unique_id)
            }
            None => self.store_file(&file_name, folder, size, Some(bytes.clone())),
        };
        let mut content = Map::new();
        if method == Method::SendPhoto {
            // Photo dimensions are not decoded: one size of 1×1 stands for the PhotoSize array
            // (core.telegram.org/bots/api#photosize).
            content.insert(
                "photo".to_owned(),
                json!([{"file_id": file_id, "file_unique_id": unique_id, "width": 1, "height": 1, "file_size": size}]),
            );
        } else {
            content.insert(
                "document".to_owned(),
                json!({"file_name": file_name, "mime_type": mime_type, "file_id": file_id, "file_unique_id": unique_id, "file_size": size}),
            );
        }
        if !caption.text.is_empty() {
            content.insert("caption".to_owned(), json!(caption.text));
            if !caption.entities.is_empty() {
                content.insert(
                    "caption_entities".to_owned(),
                    Value::Array(caption.entities.clone()),
                );
            }
        }
        let (message, thread) = self.bot_message(chat_id, thread, reply_to, content, None);
        self.sent.push(Sent {
            method: method.name().to_owned(),
            chat_id,
            message_id: message_id(&message),
            text: caption.text,
            html: caption_html.to_owned(),
            message_thread_id: thread,
            reply_to,
            file: Some((file_name, bytes)),
        });
        Ok(message)
    }

    /// core.telegram.org/bots/api#setmycommands: at most 100 BotCommands, each `command` 1-32
    /// of lowercase English letters, digits and underscores, each `description` 1-256
    /// characters (core.telegram.org/bots/api#botcommand).
    fn set_my_commands(&mut self, params: &Params) -> Result<Value, ApiError> {
        let commands = params
            .json("commands")?
            .ok_or_else(|| ApiError::bad_request("parameter \"commands\" is required"))?;
        let Some(list) = commands.as_array() else {
            return Err(ApiError::bad_request(
                "can't parse commands JSON object: array expected",
            ));
        };
        if list.len() > 100 {
            return Err(ApiError::bad_request("too many commands specified"));
        }
        for command in list {
            let name = command
                .get("command")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let valid_name = (1..=32).contains(&name.len())
                && name
                    .bytes()
                    .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
            if !valid_name {
                return Err(ApiError::bad_request("BOT_COMMAND_INVALID"));
            }
            let description = command
                .get("description")
                .and_then(Value::as_str)
                .unwrap_or_default();
            if !(1..=256).contains(&description.chars().count()) {
                return Err(ApiError::bad_request("BOT_COMMAND_DESCRIPTION_INVALID"));
            }
        }
        self.commands.insert(commands_key(params), commands);
        Ok(json!(true))
    }
}

/// The key setMyCommands, getMyCommands and deleteMyCommands keep commands under.
fn commands_key(params: &Params) -> (String, String) {
    (
        params
            .text("scope")
            .unwrap_or(r#"{"type":"default"}"#)
            .to_owned(),
        params.text("language_code").unwrap_or_default().to_owned(),
    )
}

/// The length checks of core.telegram.org/bots/api#sendmessage ("1-4096 characters after
/// entities parsing"). As the real service does, a text of only white space counts as empty.
fn check_text(formatted: &Formatted) -> Result<(), ApiError> {
    if formatted.text.trim().is_empty() {
        return Err(ApiError::bad_request("message text is empty"));
    }
    if utf16_len(&formatted.text) > TEXT_LIMIT {
        return Err(ApiError::bad_request("message is too long"));
    }
    Ok(())
}

/// The methods the stand-in models, by their documented names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Method {
    GetMe,
    GetUpdates,
    SetWebhook,
    DeleteWebhook,
    GetWebhookInfo,
    SendMessage,
    EditMessageText,
    SendChatAction,
    GetFile,
    SendDocument,
    SendPhoto,
    SetMyCommands,
    GetMyCommands,
    DeleteMyCommands,
}

impl Method {
    const ALL: [Method; 14] = [
        Method::GetMe,
        Method::GetUpdates,
        Method::SetWebhook,
        Method::DeleteWebhook,
        Method::GetWebhookInfo,
        Method::SendMessage,
        Method::EditMessageText,
        Method::SendChatAction,
        Method::GetFile,
        Method::SendDocument,
        Method::SendPhoto,
        Method::SetMyCommands,
        Method::GetMyCommands,
        Method::DeleteMyCommands,
    ];

    fn name(self) -> &'static str {
        match self {
            Method::GetMe => "getMe",
            Method::GetUpdates => "getUpdates",
            Method::SetWebhook => "setWebhook",
            Method::DeleteWebhook => "deleteWebhook",
            Method::GetWebhookInfo => "getWebhookInfo",
            Method::SendMessage => "sendMessage",
            Method::EditMessageText => "editMessageText",
            Method::SendChatAction => "sendChatAction",
            Method::GetFile => "getFile",
            Method::SendDocument => "sendDocument",
            Method::SendPhoto => "sendPhoto",
            Method::SetMyCommands => "setMyCommands",
            Method::GetMyCommands => "getMyCommands",
            Method::DeleteMyCommands => "deleteMyCommands",
        }
    }

    /// core.telegram.org/bots/api#making-requests: "All methods in the Bot API are
    /// case-insensitive."
    fn parse(name: &str) -> Option<Method> {
        Method::ALL
            .into_iter()
            .find(|method| method.name().eq_ignore_ascii_case(name))
    }
}

/// An unsuccessful answer: core.telegram.org/bots/api#making-requests ("If 'ok' equals False,
/// the error is explained in the 'description'. An Integer 'error_code' field is also
/// returned"), with the HTTP status equal to `error_code` as the real service sends it.
#[derive(Debug)]
struct ApiError {
    code: u16,
    description: String,
    retry_after: Option<u64>,
}

impl ApiError {
    fn new(code: u16, description: impl Display) -> Self {
        ApiError {
            code,
            description: description.to_string(),
            retry_after: None,
        }
    }

    fn bad_request(detail: impl Display) -> Self {
        ApiError::new(400, format!("Bad Request: {detail}"))
    }

    fn conflict(detail: impl Display) -> Self {
        ApiError::new(409, format!("Conflict: {detail}"))
    }

    fn unauthorized() -> Self {
        ApiError::new(401, "Unauthorized")
    }

    fn not_found() -> Self {
        ApiError::new(404, "Not Found")
    }

    /// core.telegram.org/bots/api#responseparameters: `retry_after`.
    fn too_many_requests(seconds: u64) -> Self {
        ApiError {
            retry_after: Some(seconds),
            ..ApiError::new(429, format!("Too Many Requests: retry after {seconds}"))
        }
    }

    /// core.telegram.org/bots/api#getupdates: "This method will not work if an outgoing webhook
    /// is set up."
    fn webhook_active() -> Self {
        ApiError::conflict(
            "can't use getUpdates method while webhook is active; use deleteWebhook to delete \
             the webhook first",
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body =
            json!({"ok": false, "error_code": self.code, "description": self.description});
        if let Some(seconds) = self.retry_after {
            body["parameters"] = json!({"retry_after": seconds});
        }
        let status = StatusCode::from_u16(self.code).unwrap_or(StatusCode::BAD_REQUEST);
        (status, axum::Json(body)).into_response()
    }
}

/// A successful answer: `{"ok": true, "result": …}` (core.telegram.org/bots/api#making-requests).
fn answer(result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(result) => axum::Json(json!({"ok": true, "result": result})).into_response(),
        Err(error) => error.into_response(),
    }
}

/// One request parameter.
#[derive(Debug)]
enum Param {
    Text(String),
    File {
        file_name: String,
        content_type: Option<String>,
        bytes: Vec<u8>,
    },
}

/// A request's parameters, from the URL query and the body: core.telegram.org/bots/api#
/// making-requests ("We support four ways of passing parameters in Bot API requests: URL query
/// string, application/x-www-form-urlencoded, application/json (except for uploading files),
/// multipart/form-data (use to upload files)"). A JSON value that is not a string is kept as its
/// JSON text, the form the other three ways pass it in.
#[derive(Debug, Default)]
struct Params(HashMap<String, Param>);

impl Params {
    fn parse(query: Option<&str>, headers: &HeaderMap, body: &[u8]) -> Result<Self, ApiError> {
        let mut params = Params::default();
        if let Some(query) = query {
            params.add_form(query.as_bytes());
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default();
        let mime = content_type
            .split(';')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        match mime.as_str() {
            "application/json" if !body.is_empty() => {
                let value: Value = serde_json::from_slice(body).map_err(|error| {
                    ApiError::bad_request(format!("can't parse JSON object: {error}"))
                })?;
                let Value::Object(object) = value else {
                    return Err(ApiError::bad_request(
                        "can't parse JSON object: object expected",
                    ));
                };
                for (key, value) in object {
                    let text = match value {
                        Value::String(text) => text,
                        other => other.to_string(),
                    };
                    params.0.insert(key, Param::Text(text));
                }
            }
            "application/x-www-form-urlencoded" => params.add_form(body),
            "multipart/form-data" => {
                let boundary = multipart_boundary(content_type).ok_or_else(|| {
                    ApiError::bad_request("multipart/form-data without a boundary")
                })?;
                let parts = parse_multipart(body, &boundary).map_err(|error| {
                    ApiError::bad_request(format!("can't parse multipart/form-data: {error}"))
                })?;
                for part in parts {
                    let param = match part.file_name {
                        Some(file_name) => Param::File {
                            file_name,
                            content_type: part.content_type,
                            bytes: part.bytes,
                        },
                        None => Param::Text(String::from_utf8_lossy(&part.bytes).into_owned()),
                    };
                    params.0.insert(part.name, param);
                }
            }
            _ => {}
        }
        Ok(params)
    }

    fn add_form(&mut self, form: &[u8]) {
        for (key, value) in url::form_urlencoded::parse(form) {
            self.0
                .insert(key.into_owned(), Param::Text(value.into_owned()));
        }
    }

    /// A text parameter; an empty one counts as absent, as the real service treats it.
    fn text(&self, key: &str) -> Option<&str> {
        match self.0.get(key) {
            Some(Param::Text(text)) if !text.is_empty() => Some(text.as_str()),
            _ => None,
        }
    }

    fn int(&self, key: &str) -> Result<Option<i64>, ApiError> {
        self.text(key)
            .map(|text| {
                text.trim().parse::<i64>().map_err(|_| {
                    ApiError::bad_request(format!("invalid {key} specified: Integer expected"))
                })
            })
            .transpose()
    }

    fn flag(&self, key: &str) -> Result<bool, ApiError> {
        match self.text(key).map(str::to_ascii_lowercase).as_deref() {
            None | Some("false" | "0") => Ok(false),
            Some("true" | "1") => Ok(true),
            Some(_) => Err(ApiError::bad_request(format!(
                "invalid {key} specified: Boolean expected"
            ))),
        }
    }

    fn json(&self, key: &str) -> Result<Option<Value>, ApiError> {
        self.text(key)
            .map(|text| {
                serde_json::from_str(text)
                    .map_err(|_| ApiError::bad_request(format!("can't parse {key} JSON object")))
            })
            .transpose()
    }

    /// core.telegram.org/bots/api#sendmessage: `chat_id` is "Integer or String" — a number, or
    /// the number as text. `@channelusername` targets are not modelled (no channel is known).
    fn chat_id(&self) -> Result<i64, ApiError> {
        let chat_id = self
            .text("chat_id")
            .ok_or_else(|| ApiError::bad_request("chat_id is empty"))?;
        chat_id
            .trim()
            .parse()
            .map_err(|_| ApiError::bad_request("chat not found"))
    }

    /// `allowed_updates`, a JSON array of update type names, when given.
    fn allowed_updates(&self) -> Result<Option<Vec<String>>, ApiError> {
        let Some(value) = self.json("allowed_updates")? else {
            return Ok(None);
        };
        serde_json::from_value(value)
            .map(Some)
            .map_err(|_| ApiError::bad_request("can't parse allowed_updates JSON object"))
    }
}

/// One part of a multipart/form-data body.
#[derive(Debug)]
struct Part {
    name: String,
    file_name: Option<String>,
    content_type: Option<String>,
    bytes: Vec<u8>,
}

/// The `boundary` parameter of a multipart Content-Type (RFC 7578 section 4.1).
fn multipart_boundary(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|parameter| {
        let (key, value) = parameter.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_owned())
    })
}

/// Splits a multipart/form-data body (RFC 7578, RFC 2046 section 5.1.1) into its parts.
fn parse_multipart(body: &[u8], boundary: &str) -> Result<Vec<Part>, String> {
    let opening = format!("--{boundary}");
    let delimiter = format!("\r\n--{boundary}");
    let start = find(body, opening.as_bytes()).ok_or("no opening boundary")?;
    let mut rest = &body[start + opening.len()..];
    let mut parts = Vec::new();
    loop {
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        rest = rest
            .strip_prefix(b"\r\n")
            .ok_or("a boundary is not followed by CRLF")?;
        let head_end = find(rest, b"\r\n\r\n").ok_or("a part's headers do not end")?;
        let head = std::str::from_utf8(&rest[..head_end])
            .map_err(|_| "a part's headers are not UTF-8".to_owned())?;
        rest = &rest[head_end + 4..];
        let end = find(rest, delimiter.as_bytes()).ok_or("a part is not closed by a boundary")?;
        let mut part = Part {
            name: String::new(),
            file_name: None,
            content_type: None,
            bytes: rest[..end].to_vec(),
        };
        rest = &rest[end + delimiter.len()..];
        for line in head.split("\r\n") {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            if name.trim().eq_ignore_ascii_case("content-disposition") {
                for (key, value) in header_parameters(value) {
                    match key.as_str() {
                        "name" => part.name = value,
                        "filename" => part.file_name = Some(value),
                        _ => {}
                    }
                }
            } else if name.trim().eq_ignore_ascii_case("content-type") {
                part.content_type = Some(value.trim().to_owned());
            }
        }
        if part.name.is_empty() {
            return Err("a part has no name".to_owned());
        }
        parts.push(part);
    }
}

/// The `key=value` parameters after the first `;` of a header value, values unquoted.
fn header_parameters(value: &str) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    let mut field = String::new();
    let mut quoted = false;
    let mut escaped = false;
    for character in value.chars() {
        if escaped {
            field.push(character);
            escaped = false;
        } else if quoted && character == '\\' {
            escaped = true;
        } else if character == '"' {
            quoted = !quoted;
        } else if character == ';' && !quoted {
            fields.push(std::mem::take(&mut field));
        } else {
            field.push(character);
        }
    }
    fields.push(field);
    fields
        .into_iter()
        .skip(1)
        .filter_map(|field| {
            let (key, value) = field.split_once('=')?;
            Some((key.trim().to_ascii_lowercase(), value.trim().to_owned()))
        })
        .collect()
}

/// The first position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    let (&first, tail) = needle.split_first()?;
    let mut from = 0;
    while let Some(position) = haystack[from..].iter().position(|byte| *byte == first) {
        let at = from + position;
        if haystack[at + 1..].starts_with(tail) {
            return Some(at);
        }
        from = at + 1;
    }
    None
}

/// The visible text of a message and its entities (core.telegram.org/bots/api#messageentity).
#[derive(Clone, Debug, Default, PartialEq)]
struct Formatted {
    text: String,
    entities: Vec<Value>,
}

/// A tag of [`parse_html`] not yet closed.
struct OpenTag {
    name: String,
    /// `href` of `a`, `emoji-id` of `tg-emoji`, the language of `code`, `expandable` of
    /// `blockquote`.
    argument: Option<String>,
    /// The UTF-16 offset of its content.
    offset: usize,
    /// A `pre`'s language, from a `code class="language-…"` directly inside it.
    language: Option<String>,
    order: usize,
}

/// Parses Telegram HTML: core.telegram.org/bots/api#html-style.
///
/// - Only the tags listed there: `b`, `strong`, `i`, `em`, `u`, `ins`, `s`, `strike`, `del`,
///   `span class="tg-spoiler"`, `tg-spoiler`, `a href`, `code` (with `class="language-…"` inside
///   `pre`), `pre`, `blockquote` (optionally `expandable`), `tg-emoji emoji-id` ("Only the tags
///   mentioned above are currently supported").
/// - "All <, > and & symbols that are not a part of a tag or an HTML entity must be replaced with
///   the corresponding HTML entities"; "All numerical HTML entities are supported"; "The API
///   currently supports only the following named HTML entities: &lt;, &gt;, &amp; and &quot;".
///
/// The error messages are the real service's where it has one (those of TDLib's HTML parser,
/// which the Bot API server uses). Stricter than the real service, which lets through a `&` that
/// begins no entity and an `a` without `href`: the documentation says both are wrong, so the
/// stand-in refuses them. A bare `>` is accepted, as the real service does.
fn parse_html(html: &str) -> Result<Formatted, String> {
    let bytes = html.as_bytes();
    let end = bytes.len();
    let mut text = String::new();
    let mut offset = 0;
    let mut open: Vec<OpenTag> = Vec::new();
    let mut entities: Vec<(usize, usize, usize, Value)> = Vec::new();
    let mut opened = 0;
    let mut i = 0;
    while i < end {
        match bytes[i] {
            b'&' => {
                let (character, length) = html_entity(&html[i..]).map_err(|error| {
                    error.unwrap_or_else(|| {
                        format!(
                            "Character \"&\" at byte offset {i} begins no HTML entity; it must \
                             be written as \"&amp;\""
                        )
                    })
                })?;
                text.push(character);
                offset += character.len_utf16();
                i += length;
            }
            b'<' if bytes.get(i + 1) == Some(&b'/') => {
                let begin = i;
                let Some(tag) = open.pop() else {
                    return Err(format!("Unexpected end tag at byte offset {begin}"));
                };
                let mut j = i + 2;
                while j < end && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'-') {
                    j += 1;
                }
                let end_name = html[begin + 2..j].to_ascii_lowercase();
                while j < end && is_space(bytes[j]) {
                    j += 1;
                }
                if j == end || bytes[j] != b'>' {
                    return Err(format!("Unclosed end tag at byte offset {begin}"));
                }
                if !end_name.is_empty() && end_name != tag.name {
                    return Err(format!(
                        "Unmatched end tag at byte offset {begin}, expected \"</{}>\", found \
                         \"</{end_name}>\"",
                        tag.name
                    ));
                }
                i = j + 1;
                let length = offset - tag.offset;
                let entity = match tag.name.as_str() {
                    "b" | "strong" => Some(json!({"type": "bold"})),
                    "i" | "em" => Some(json!({"type": "italic"})),
                    "u" | "ins" => Some(json!({"type": "underline"})),
                    "s" | "strike" | "del" => Some(json!({"type": "strikethrough"})),
                    "span" | "tg-spoiler" => Some(json!({"type": "spoiler"})),
                    "a" => Some(json!({"type": "text_link", "url": tag.argument})),
                    "tg-emoji" => {
                        Some(json!({"type": "custom_emoji", "custom_emoji_id": tag.argument}))
                    }
                    "blockquote" if tag.argument.is_some() => {
                        Some(json!({"type": "expandable_blockquote"}))
                    }
                    "blockquote" => Some(json!({"type": "blockquote"})),
                    "pre" => Some(match tag.language {
                        Some(language) => json!({"type": "pre", "language": language}),
                        None => json!({"type": "pre"}),
                    }),
                    _ => match open.last_mut() {
                        // "Use nested pre and code tags, to define programming language for pre
                        // entity."
                        Some(parent) if parent.name == "pre" && tag.argument.is_some() => {
                            parent.language = tag.argument;
                            None
                        }
                        _ => Some(json!({"type": "code"})),
                    },
                };
                if let Some(mut entity) = entity
                    && length > 0
                {
                    entity["offset"] = json!(tag.offset);
                    entity["length"] = json!(length);
                    entities.push((tag.offset, length, tag.order, entity));
                }
            }
            b'<' => {
                let (tag, next) = start_tag(html, i, offset, opened)?;
                open.push(tag);
                opened += 1;
                i = next;
            }
            _ => {
                let character = html[i..].chars().next().unwrap_or_default();
                text.push(character);
                offset += character.len_utf16();
                i += character.len_utf8();
            }
        }
    }
    if let Some(tag) = open.last() {
        return Err(format!(
            "Can't find end tag corresponding to start tag \"{}\"",
            tag.name
        ));
    }
    entities
        .sort_by_key(|(offset, length, order, _)| (*offset, std::cmp::Reverse(*length), *order));
    Ok(Formatted {
        text,
        entities: entities.into_iter().map(|entity| entity.3).collect(),
    })
}

/// Parses the start tag at byte `begin`; returns it and the byte after its `>`.
fn start_tag(
    html: &str,
    begin: usize,
    offset: usize,
    order: usize,
) -> Result<(OpenTag, usize), String> {
    let bytes = html.as_bytes();
    let end = bytes.len();
    let mut j = begin + 1;
    while j < end && !is_space(bytes[j]) && bytes[j] != b'>' {
        j += 1;
    }
    if j == end {
        return Err(format!("Unclosed start tag at byte offset {begin}"));
    }
    let name = html[begin + 1..j].to_ascii_lowercase();
    if !HTML_TAGS.contains(&name.as_str()) {
        return Err(format!(
            "Unsupported start tag \"{name}\" at byte offset {begin}"
        ));
    }
    let mut argument = None;
    loop {
        while j < end && is_space(bytes[j]) {
            j += 1;
        }
        if j == end {
            return Err(format!(
                "Unclosed start tag \"{name}\" at byte offset {begin}"
            ));
        }
        if bytes[j] == b'>' {
            j += 1;
            break;
        }
        let attribute_begin = j;
        while j < end && !is_space(bytes[j]) && bytes[j] != b'=' && bytes[j] != b'>' {
            j += 1;
        }
        let attribute = html[attribute_begin..j].to_ascii_lowercase();
        if attribute.is_empty() {
            return Err(format!(
                "Empty attribute name in the tag \"{name}\" at byte offset {begin}"
            ));
        }
        while j < end && is_space(bytes[j]) {
            j += 1;
        }
        if j == end || bytes[j] != b'=' {
            // Only a blockquote takes attributes without a value (`expandable`).
            if name == "blockquote" {
                if attribute == "expandable" {
                    argument = Some(String::new());
                }
                continue;
            }
            return Err(format!(
                "Expected equal sign in declaration of an attribute of the tag \"{name}\" at \
                 byte offset {begin}"
            ));
        }
        j += 1;
        while j < end && is_space(bytes[j]) {
            j += 1;
        }
        if j == end {
            return Err(format!(
                "Unclosed start tag \"{name}\" at byte offset {begin}"
            ));
        }
        let value = if bytes[j] == b'"' || bytes[j] == b'\'' {
            let quote = bytes[j];
            j += 1;
            let mut value = String::new();
            while j < end && bytes[j] != quote {
                if bytes[j] == b'&'
                    && let Ok((character, length)) = html_entity(&html[j..])
                {
                    value.push(character);
                    j += length;
                    continue;
                }
                let character = html[j..].chars().next().unwrap_or_default();
                value.push(character);
                j += character.len_utf8();
            }
            if j == end {
                return Err(format!("Unclosed start tag at byte offset {begin}"));
            }
            j += 1;
            value
        } else {
            let token_begin = j;
            while j < end
                && (bytes[j].is_ascii_alphanumeric() || bytes[j] == b'.' || bytes[j] == b'-')
            {
                j += 1;
            }
            if j < end && !is_space(bytes[j]) && bytes[j] != b'>' {
                return Err(format!(
                    "Unexpected end of name token at byte offset {token_begin}"
                ));
            }
            html[token_begin..j].to_ascii_lowercase()
        };
        match (name.as_str(), attribute.as_str()) {
            ("a", "href") | ("tg-emoji", "emoji-id") => argument = Some(value),
            ("code", "class") => argument = value.strip_prefix("language-").map(str::to_owned),
            ("span", "class") => argument = Some(value),
            ("blockquote", "expandable") => argument = Some(String::new()),
            _ => {}
        }
    }
    let required = match name.as_str() {
        "a" => Some("href"),
        "tg-emoji" => Some("emoji-id"),
        _ => None,
    };
    if let Some(attribute) = required
        && argument.as_deref().is_none_or(str::is_empty)
    {
        return Err(format!(
            "Tag \"{name}\" must have attribute \"{attribute}\" at byte offset {begin}"
        ));
    }
    if name == "span" && argument.as_deref() != Some("tg-spoiler") {
        return Err(format!(
            "Tag \"span\" must have class \"tg-spoiler\" at byte offset {begin}"
        ));
    }
    let tag = OpenTag {
        name,
        argument,
        offset,
        language: None,
        order,
    };
    Ok((tag, j))
}

/// The white space of TDLib's HTML parser.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n' | 0x0B | 0x0C)
}

/// Decodes the HTML entity `&…;` at the start of `text` into its character and length. `Err`
/// carries the real service's message for an entity it refuses, or `None` when `text` begins
/// no entity.
fn html_entity(text: &str) -> Result<(char, usize), Option<String>> {
    let end = text
        .bytes()
        .take(12)
        .position(|byte| byte == b';')
        .ok_or(None)?;
    let body = &text[1..end];
    let character = match body {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        _ => {
            let number = body.strip_prefix('#').ok_or(None)?;
            let (digits, radix) = match number.strip_prefix(['x', 'X']) {
                Some(hex) => (hex, 16),
                None => (number, 10),
            };
            if digits.is_empty() || !digits.chars().all(|digit| digit.is_digit(radix)) {
                return Err(None);
            }
            let code = u32::from_str_radix(digits, radix).map_err(|_| None)?;
            if (0xD800..=0xDFFF).contains(&code) {
                return Err(Some(
                    "Text contains invalid Unicode characters after decoding HTML entities, \
                     check for unmatched surrogate code units"
                        .to_owned(),
                ));
            }
            char::from_u32(code)
                .filter(|character| *character != '\0')
                .ok_or(None)?
        }
    };
    Ok((character, end + 1))
}

/// The `mention` and `bot_command` entities Telegram's clients detect in a person's text, with
/// UTF-16 offsets and lengths (core.telegram.org/bots/api#messageentity): a mention is `@`
/// and 2-32 of `A-Z a-z 0-9 _` not preceded by a letter, digit or `_`; a command is `/` and 1-64
/// of them (and optionally `@` and the bot's username) at the start of the text or after white
/// space.
fn detect_entities(text: &str) -> Vec<Value> {
    let characters: Vec<char> = text.chars().collect();
    let mut offsets = Vec::with_capacity(characters.len() + 1);
    let mut offset = 0;
    for character in &characters {
        offsets.push(offset);
        offset += character.len_utf16();
    }
    offsets.push(offset);
    let word = |character: char| character.is_ascii_alphanumeric() || character == '_';
    let run = |from: usize| {
        let mut end = from;
        while end < characters.len() && word(characters[end]) {
            end += 1;
        }
        end
    };
    let mut entities = Vec::new();
    let mut i = 0;
    while i < characters.len() {
        let previous = i.checked_sub(1).map(|previous| characters[previous]);
        if characters[i] == '@'
            && !previous.is_some_and(|previous| previous.is_alphanumeric() || previous == '_')
        {
            let end = run(i + 1);
            if (2..=32).contains(&(end - i - 1)) {
                entities.push(json!({"type": "mention", "offset": offsets[i], "length": offsets[end] - offsets[i]}));
                i = end;
                continue;
            }
        }
        if characters[i] == '/' && previous.is_none_or(char::is_whitespace) {
            let mut end = run(i + 1);
            if (1..=64).contains(&(end - i - 1)) {
                if end < characters.len() && characters[end] == '@' {
                    let bot_end = run(end + 1);
                    if (3..=32).contains(&(bot_end - end - 1)) {
                        end = bot_end;
                    }
                }
                entities.push(json!({"type": "bot_command", "offset": offsets[i], "length": offsets[end] - offsets[i]}));
                i = end;
                continue;
            }
        }
        i += 1;
    }
    entities
}

fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

fn update_id(update: &Value) -> i64 {
    update
        .get("update_id")
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

fn message_id(message: &Value) -> i64 {
    message
        .get("message_id")
        .and_then(Value::as_i64)
        .unwrap_or_default()
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as i64)
}

/// Every request: `/bot<token>/<method>` and `/file/bot<token>/<file_path>`.
async fn handle(
    Extract(shared): Extract<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Ok(body) = axum::body::to_bytes(body, REQUEST_LIMIT).await else {
        return ApiError::new(413, "Request Entity Too Large").into_response();
    };
    shared.lock().log_request(&uri, &headers, &body);
    let path = uri.path();
    if let Some(rest) = path.strip_prefix("/file/bot") {
        return download(&shared, rest);
    }
    let Some((token, name)) = path
        .strip_prefix("/bot")
        .and_then(|rest| rest.split_once('/'))
    else {
        return ApiError::not_found().into_response();
    };
    answer(api_call(&shared, token, name, uri.query(), &headers, &body).await)
}

impl ApiState {
    fn log_request(&mut self, uri: &Uri, headers: &HeaderMap, body: &[u8]) {
        if let Some(query) = uri.query() {
            self.request_log.push_str(query);
            self.request_log.push('\n');
        }
        for value in headers.values() {
            self.request_log
                .push_str(&String::from_utf8_lossy(value.as_bytes()));
            self.request_log.push('\n');
        }
        self.request_log.push_str(&String::from_utf8_lossy(body));
        self.request_log.push('\n');
    }
}

/// A method call: core.telegram.org/bots/api#making-requests ("All queries to the Telegram Bot
/// API must be served over HTTPS and need to be presented in this form:
/// https://api.telegram.org/bot<token>/METHOD_NAME").
async fn api_call(
    shared: &Arc<Shared>,
    token: &str,
    name: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Value, ApiError> {
    {
        let mut state = shared.lock();
        *state.calls.entry(name.to_ascii_lowercase()).or_default() += 1;
        if token != state.token {
            return Err(ApiError::unauthorized());
        }
        if Method::parse(name).is_none()
            && let Some(real) = UNMODELLED_METHODS
                .iter()
                .find(|method| method.eq_ignore_ascii_case(name))
        {
            state
                .violations
                .push(format!("{real} was called; the stand-in does not model it"));
        }
    }
    let method = Method::parse(name).ok_or_else(ApiError::not_found)?;
    let params = Params::parse(query, headers, body)?;
    {
        let chat = params
            .text("chat_id")
            .and_then(|chat| chat.trim().parse().ok());
        shared.lock().throttle(method, chat)?;
    }
    match method {
        Method::GetUpdates => get_updates(shared, &params).await,
        Method::SetWebhook => set_webhook(shared, &params),
        other => {
            let result = shared.lock().call(other, &params);
            shared.wake.notify_waiters();
            result
        }
    }
}

/// Clears a long poll's marks when it ends, however it ends (also when the client goes away and
/// its request is dropped).
struct PollGuard {
    shared: Arc<Shared>,
    id: u64,
}

impl Drop for PollGuard {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if state.waiting_poll == Some(self.id) {
            state.waiting_poll = None;
        }
        state.terminated_polls.remove(&self.id);
    }
}

/// core.telegram.org/bots/api#getupdates: `offset` confirms the updates below it, `limit` (1-100,
/// default 100; values outside are clamped) caps how many are returned, `timeout` (seconds,
/// default 0) is how long to wait for one when there is none, `allowed_updates` sets the types
/// the bot receives from now on. A newer `getUpdates` ends a waiting one with 409 ("terminated by
/// other getUpdates request"), and that overlap is kept as a violation. While a webhook is set
/// the method answers 409 ("This method will not work if an outgoing webhook is set up").
async fn get_updates(shared: &Arc<Shared>, params: &Params) -> Result<Value, ApiError> {
    let offset = params.int("offset")?.unwrap_or(0);
    let limit = usize::try_from(params.int("limit")?.unwrap_or(100).clamp(1, 100)).unwrap_or(100);
    let timeout = u64::try_from(params.int("timeout")?.unwrap_or(0)).unwrap_or(0);
    let allowed = params.allowed_updates()?;
    let id = {
        let mut state = shared.lock();
        if state.webhook.is_some() {
            return Err(ApiError::webhook_active());
        }
        if let Some(allowed) = allowed {
            state.allowed_updates = allowed;
        }
        if let Some(older) = state.waiting_poll.take() {
            state.violations.push(
                "getUpdates was called while an earlier getUpdates long poll was still \
                 waiting (two bot instances polling); the real API ends the older one with 409 \
                 Conflict"
                    .to_owned(),
            );
            state.terminated_polls.insert(older);
        }
        state.confirm(offset);
        state.next_poll += 1;
        state.next_poll
    };
    shared.wake.notify_waiters();
    let _guard = PollGuard {
        shared: Arc::clone(shared),
        id,
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
    loop {
        let notified = shared.wake.notified();
        {
            let mut state = shared.lock();
            if state.terminated_polls.remove(&id) {
                return Err(ApiError::conflict(
                    "terminated by other getUpdates request; make sure that only one bot \
                     instance is running",
                ));
            }
            if state.webhook.is_some() {
                return Err(ApiError::webhook_active());
            }
            let updates: Vec<Value> = state.pending.iter().take(limit).cloned().collect();
            if !updates.is_empty() || tokio::time::Instant::now() >= deadline || state.closed {
                if state.waiting_poll == Some(id) {
                    state.waiting_poll = None;
                }
                return Ok(Value::Array(updates));
            }
            state.waiting_poll = Some(id);
        }
        tokio::select! {
            () = notified => {}
            () = tokio::time::sleep_until(deadline) => {}
        }
    }
}

/// core.telegram.org/bots/api#setwebhook: `url` (an empty one removes the webhook),
/// `secret_token` ("1-256 characters. Only characters A-Z, a-z, 0-9, _ and - are allowed"),
/// `allowed_updates` and `drop_pending_updates`. Updates are then POSTed as JSON to the url, in
/// order, with `X-Telegram-Bot-Api-Secret-Token` when a secret is set; a refused one (non-2xx or
/// no answer) is sent again until the url takes it.
///
/// Lenient where the real service is not: it requires HTTPS on port 443, 80, 88 or 8443
/// ("Ports currently supported for webhooks: 443, 80, 88, 8443"); the stand-in also accepts
/// plain http to a loopback host on any port, as a test's receiver is.
fn set_webhook(shared: &Arc<Shared>, params: &Params) -> Result<Value, ApiError> {
    let Some(Param::Text(url)) = params.0.get("url") else {
        return Err(ApiError::bad_request("parameter \"url\" is required"));
    };
    let secret = params.text("secret_token").map(str::to_owned);
    if let Some(secret) = &secret {
        let valid = secret.len() <= 256
            && secret
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-');
        if !valid {
            return Err(ApiError::bad_request(
                "secret token contains unallowed characters",
            ));
        }
    }
    let allowed = params.allowed_updates()?;
    let drop_pending = params.flag("drop_pending_updates")?;
    if url.is_empty() {
        shared.lock().delete_webhook(drop_pending);
        shared.wake.notify_waiters();
        return Ok(json!(true));
    }
    let parsed = url::Url::parse(url)
        .map_err(|_| ApiError::bad_request("bad webhook: invalid webhook URL specified"))?;
    let loopback = match parsed.host() {
        Some(url::Host::Ipv4(address)) => address.is_loopback(),
        Some(url::Host::Ipv6(address)) => address.is_loopback(),
        Some(url::Host::Domain(domain)) => domain == "localhost",
        None => false,
    };
    let secure = parsed.scheme() == "https"
        && matches!(parsed.port_or_known_default(), Some(443 | 80 | 88 | 8443));
    let loopback_http = parsed.scheme() == "http" && loopback;
    if !(secure || loopback_http) {
        return Err(ApiError::bad_request(
            "bad webhook: An HTTPS URL must be provided for webhook",
        ));
    }
    {
        let mut state = shared.lock();
        state.delete_webhook(drop_pending);
        if let Some(allowed) = allowed {
            state.allowed_updates = allowed;
        }
        state.webhook = Some(Webhook {
            url: url.clone(),
            secret: secret.clone(),
            last_error: None,
        });
        let generation = state.webhook_generation;
        let delivery = tokio::spawn(deliver(Arc::clone(shared), generation, url.clone(), secret));
        state.delivery = Some(delivery.abort_handle());
    }
    shared.wake.notify_waiters();
    Ok(json!(true))
}

/// The webhook delivery: core.telegram.org/bots/api#setwebhook ("Whenever there is an update
/// for the bot, we will send an HTTPS POST request to the specified URL, containing a
/// JSON-serialized Update. In case of an unsuccessful request (a request with response HTTP
/// status code different from 2XY), we will repeat the request and give up after a reasonable
/// amount of attempts."). The stand-in never gives up, and sends one update at a time, in order.
async fn deliver(shared: Arc<Shared>, generation: u64, url: String, secret: Option<String>) {
    let client = reqwest::Client::new();
    loop {
        let notified = shared.wake.notified();
        let next = {
            let state = shared.lock();
            if state.closed || state.webhook_generation != generation {
                return;
            }
            state.pending.front().cloned()
        };
        let Some(update) = next else {
            tokio::select! {
                () = notified => {}
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            continue;
        };
        let mut request = client.post(&url).json(&update).timeout(WEBHOOK_TIMEOUT);
        if let Some(secret) = &secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        let failure = match request.send().await {
            Ok(response) if response.status().is_success() => None,
            Ok(response) => Some(format!(
                "Wrong response from the webhook: {}",
                response.status()
            )),
            Err(error) => Some(format!("Connection failed: {error}")),
        };
        let retry = {
            let mut state = shared.lock();
            if state.webhook_generation != generation {
                return;
            }
            match failure {
                None => {
                    if state.pending.front().map(update_id) == Some(update_id(&update)) {
                        state.pending.pop_front();
                    }
                    false
                }
                Some(message) => {
                    if let Some(webhook) = &mut state.webhook {
                        webhook.last_error = Some((unix_now(), message));
                    }
                    true
                }
            }
        };
        if retry {
            tokio::time::sleep(WEBHOOK_RETRY).await;
        }
    }
}

/// `GET /file/bot<token>/<file_path>`: core.telegram.org/bots/api#getfile ("The file can then
/// be downloaded via the link https://api.telegram.org/file/bot<token>/<file_path>, where
/// <file_path> is taken from the response"). Only paths a `getFile` returned exist.
fn download(shared: &Shared, rest: &str) -> Response {
    let state = shared.lock();
    let Some((token, path)) = rest.split_once('/') else {
        return ApiError::not_found().into_response();
    };
    if token != state.token {
        return ApiError::unauthorized().into_response();
    }
    let bytes = state
        .file_paths
        .get(path)
        .and_then(|file_id| state.files.get(file_id))
        .and_then(|file| file.bytes.clone());
    match bytes {
        Some(bytes) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        None => ApiError::not_found().into_response(),
    }
}

/// The bot token of the self-test.
const TEST_TOKEN: &str = "123456:AAE-stand-in_token";

/// POSTs `body` as JSON to `url`; returns the HTTP status and the JSON answer.
async fn post_json(client: &reqwest::Client, url: &str, body: &Value) -> (u16, Value) {
    let response = client.post(url).json(body).send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Calls `method` of `api` with the test token; returns the HTTP status and the JSON answer.
async fn call(
    client: &reqwest::Client,
    api: &TelegramApi,
    method: &str,
    body: Value,
) -> (u16, Value) {
    post_json(
        client,
        &format!("{}/bot{TEST_TOKEN}/{method}", api.url),
        &body,
    )
    .await
}

/// Calls `method` and returns its `result`, failing unless it succeeded.
async fn accepted(client: &reqwest::Client, api: &TelegramApi, method: &str, body: Value) -> Value {
    let (status, answer) = call(client, api, method, body).await;
    assert_eq!(status, 200, "{method}: {answer}");
    assert_eq!(answer["ok"], true, "{method}: {answer}");
    answer["result"].clone()
}

/// Calls `method` and returns its error `(error_code, description)`, failing unless it was
/// refused with the HTTP status equal to the error code.
async fn refused(
    client: &reqwest::Client,
    api: &TelegramApi,
    method: &str,
    body: Value,
) -> (u16, String) {
    let (status, answer) = call(client, api, method, body).await;
    assert_eq!(answer["ok"], false, "{method}: {answer}");
    assert_eq!(answer["error_code"], status, "{method}: {answer}");
    (status, answer["description"].as_str().unwrap().to_owned())
}

/// Waits until `done` holds, failing after [`crate::suite::support::WAIT`].
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + crate::suite::support::WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A multipart/form-data body of text `fields` and one file part; returns the Content-Type and
/// the body.
fn multipart_body(fields: &[(&str, &str)], file: (&str, &str, &[u8])) -> (String, Vec<u8>) {
    let boundary = "stand-in-boundary-7MA4YWxkTrZu0gW";
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend_from_slice(
            format!(
                "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n"
            )
            .as_bytes(),
        );
    }
    let (name, file_name, bytes) = file;
    body.extend_from_slice(
        format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; \
             filename=\"{file_name}\"\r\nContent-Type: application/octet-stream\r\n\r\n"
        )
        .as_bytes(),
    );
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    (format!("multipart/form-data; boundary={boundary}"), body)
}

#[tokio::test]
async fn telegram_api_stand_in_is_strict() {
    let bot = BotUser {
        id: 123_456,
        username: "gatehouse_test_bot".to_owned(),
        first_name: "Gatehouse".to_owned(),
    };
    let api = TelegramApi::start(TEST_TOKEN, bot).await;
    let client = reqwest::Client::new();
    let ada = Person {
        id: 42,
        first_name: "Ada".to_owned(),
        username: Some("ada_l".to_owned()),
    };

    // A wrong token is 401, an unknown method 404, and method names are case-insensitive.
    let (status, answer) = post_json(
        &client,
        &format!("{}/bot123456:wrong/getMe", api.url),
        &json!({}),
    )
    .await;
    assert_eq!(status, 401);
    assert_eq!(
        answer,
        json!({"ok": false, "error_code": 401, "description": "Unauthorized"})
    );
    assert_eq!(
        refused(&client, &api, "getMeNow", json!({})).await,
        (404, "Not Found".to_owned())
    );
    let me = accepted(&client, &api, "GETME", json!({})).await;
    assert_eq!(
        me,
        json!({
            "id": 123_456, "is_bot": true, "first_name": "Gatehouse",
            "username": "gatehouse_test_bot", "can_join_groups": true,
            "can_read_all_group_messages": false, "supports_inline_queries": false,
        })
    );
    assert_eq!(api.calls("getMe"), 2);

    // A message is returned by getUpdates, with its entities in UTF-16 units, until an offset
    // confirms it.
    let text = "/start@gatehouse_test_bot 👋 hi @gatehouse_test_bot";
    let (first_update, first_message) =
        api.user_writes(42, ChatKind::Private, &ada, text, None, None);
    let updates = accepted(&client, &api, "getUpdates", json!({})).await;
    assert_eq!(updates.as_array().unwrap().len(), 1, "{updates}");
    assert_eq!(updates[0]["update_id"], first_update);
    let message = &updates[0]["message"];
    assert_eq!(message["message_id"], first_message);
    assert_eq!(message["text"], text);
    assert_eq!(
        message["chat"],
        json!({"id": 42, "type": "private", "first_name": "Ada", "username": "ada_l"})
    );
    assert_eq!(
        message["from"],
        json!({"id": 42, "is_bot": false, "first_name": "Ada", "username": "ada_l"})
    );
    assert_eq!(
        message["entities"],
        json!([
            {"type": "bot_command", "offset": 0, "length": 25},
            {"type": "mention", "offset": 32, "length": 19},
        ])
    );
    let next = first_update + 1;
    assert_eq!(
        accepted(&client, &api, "getUpdates", json!({"offset": next})).await,
        json!([])
    );
    assert_eq!(api.confirmed_offset(), next);

    // A long poll wakes when a message arrives.
    let poll = {
        let client = client.clone();
        let url = format!("{}/bot{TEST_TOKEN}/getUpdates", api.url);
        tokio::spawn(async move {
            post_json(&client, &url, &json!({"offset": next, "timeout": 20})).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !poll.is_finished(),
        "the long poll answered with nothing to return"
    );
    let started = Instant::now();
    let (second_update, second_message) =
        api.user_writes(42, ChatKind::Private, &ada, "are you there?", None, None);
    let (status, answer) = poll.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(answer["result"][0]["update_id"], second_update);
    assert_eq!(answer["result"][0]["message"]["message_id"], second_message);
    let next = second_update + 1;
    assert_eq!(
        accepted(&client, &api, "getUpdates", json!({"offset": next})).await,
        json!([])
    );
    assert!(api.violations().is_empty(), "{:?}", api.violations());

    // A long poll the client gave up on is no overlap.
    let impatient = reqwest::Client::builder()
        .timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let gave_up = impatient
        .post(format!("{}/bot{TEST_TOKEN}/getUpdates", api.url))
        .json(&json!({"offset": next, "timeout": 20}))
        .send()
        .await;
    assert!(gave_up.is_err(), "{gave_up:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    accepted(&client, &api, "getUpdates", json!({"offset": next})).await;
    assert!(api.violations().is_empty(), "{:?}", api.violations());

    // Overlapping long polls: the older one is ended with 409 and the overlap is kept.
    let older = {
        let client = client.clone();
        let url = format!("{}/bot{TEST_TOKEN}/getUpdates", api.url);
        tokio::spawn(async move {
            post_json(&client, &url, &json!({"offset": next, "timeout": 20})).await
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        accepted(&client, &api, "getUpdates", json!({"offset": next})).await,
        json!([])
    );
    let (status, answer) = older.await.unwrap();
    assert_eq!(status, 409);
    assert_eq!(
        answer,
        json!({
            "ok": false, "error_code": 409,
            "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
        })
    );
    let violations = api.violations();
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("long poll"), "{violations:?}");

    // An offset lower than one already confirmed is kept as a violation.
    accepted(&client, &api, "getUpdates", json!({"offset": first_update})).await;
    let violations = api.violations();
    assert_eq!(violations.len(), 2, "{violations:?}");
    assert!(violations[1].contains("lower than"), "{violations:?}");

    // HTML the API refuses.
    let html = |text: &str| json!({"chat_id": 42, "text": text, "parse_mode": "HTML"});
    let refusals = [
        (
            "<p>hi</p>",
            "Bad Request: can't parse entities: Unsupported start tag \"p\" at byte offset 0",
        ),
        (
            "a < b",
            "Bad Request: can't parse entities: Unsupported start tag \"\" at byte offset 2",
        ),
        (
            "<b>bold</i>",
            "Bad Request: can't parse entities: Unmatched end tag at byte offset 7, expected \"</b>\", found \"</i>\"",
        ),
        (
            "<b>bold",
            "Bad Request: can't parse entities: Can't find end tag corresponding to start tag \"b\"",
        ),
        (
            "<span class=\"x\">s</span>",
            "Bad Request: can't parse entities: Tag \"span\" must have class \"tg-spoiler\" at byte offset 0",
        ),
        ("<b></b>", "Bad Request: message text is empty"),
    ];
    for (text, description) in refusals {
        assert_eq!(
            refused(&client, &api, "sendMessage", html(text)).await,
            (400, description.to_owned()),
            "{text}"
        );
    }
    let (status, description) = refused(&client, &api, "sendMessage", html("AT&T")).await;
    assert_eq!(status, 400);
    assert!(
        description.starts_with("Bad Request: can't parse entities: "),
        "{description}"
    );
    for text in ["a".repeat(4097), "😀".repeat(2049)] {
        assert_eq!(
            refused(
                &client,
                &api,
                "sendMessage",
                json!({"chat_id": 42, "text": text})
            )
            .await,
            (400, "Bad Request: message is too long".to_owned())
        );
    }
    assert_eq!(
        refused(&client, &api, "sendMessage", json!({"chat_id": 42})).await,
        (400, "Bad Request: message text is empty".to_owned())
    );
    assert_eq!(
        refused(
            &client,
            &api,
            "sendMessage",
            json!({"chat_id": 77, "text": "hi"})
        )
        .await,
        (400, "Bad Request: chat not found".to_owned())
    );
    assert_eq!(
        refused(
            &client,
            &api,
            "sendMessage",
            json!({"chat_id": 42, "text": "hi", "message_thread_id": 3})
        )
        .await,
        (400, "Bad Request: message thread not found".to_owned())
    );
    assert_eq!(
        refused(
            &client,
            &api,
            "sendMessage",
            json!({"chat_id": 42, "text": "hi", "reply_parameters": {"message_id": 999}})
        )
        .await,
        (
            400,
            "Bad Request: message to be replied not found".to_owned()
        )
    );
    assert!(api.sent().is_empty(), "{:?}", api.sent());

    // Valid HTML is sent: the visible text and its entities, in UTF-16 units.
    let formatted = "<b>Hi</b> &lt;there&gt; &#x1F600; <a href=\"https://example.com/?a=1&amp;b=2\">link</a> <pre><code class=\"language-rust\">fn</code></pre>";
    let message = accepted(&client, &api, "sendMessage", html(formatted)).await;
    assert_eq!(message["text"], "Hi <there> 😀 link fn");
    assert_eq!(
        message["entities"],
        json!([
            {"type": "bold", "offset": 0, "length": 2},
            {"type": "text_link", "url": "https://example.com/?a=1&b=2", "offset": 14, "length": 4},
            {"type": "pre", "language": "rust", "offset": 19, "length": 2},
        ])
    );
    assert_eq!(message["from"]["id"], 123_456);
    assert_eq!(message["chat"]["id"], 42);
    let sent_id = message["message_id"].as_i64().unwrap();
    assert!(sent_id > second_message, "{message}");
    assert_eq!(
        api.sent(),
        vec![Sent {
            method: "sendMessage".to_owned(),
            chat_id: 42,
            message_id: sent_id,
            text: "Hi <there> 😀 link fn".to_owned(),
            html: formatted.to_owned(),
            message_thread_id: None,
            reply_to: None,
            file: None,
        }]
    );
    accepted(
        &client,
        &api,
        "sendMessage",
        json!({"chat_id": 42, "text": "a".repeat(4096)}),
    )
    .await;

    // Replies, and parameters from a URL query as text.
    let query: String = url::form_urlencoded::Serializer::new(String::new())
        .append_pair("chat_id", "42")
        .append_pair("text", "a reply")
        .append_pair(
            "reply_parameters",
            &json!({"message_id": first_message}).to_string(),
        )
        .finish();
    let (status, answer) = post_json(
        &client,
        &format!("{}/bot{TEST_TOKEN}/sendMessage?{query}", api.url),
        &json!({}),
    )
    .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer["result"]["reply_to_message"]["message_id"],
        first_message
    );
    assert_eq!(api.sent().last().unwrap().reply_to, Some(first_message));
    let lenient = json!({"chat_id": "42", "text": "no reply", "reply_parameters": {"message_id": 999, "allow_sending_without_reply": true}});
    let message = accepted(&client, &api, "sendMessage", lenient).await;
    assert!(message.get("reply_to_message").is_none(), "{message}");
    assert_eq!(api.sent().last().unwrap().reply_to, None);

    // editMessageText: the same content is refused, another is recorded.
    let same =
        json!({"chat_id": 42, "message_id": sent_id, "text": formatted, "parse_mode": "HTML"});
    assert_eq!(
        refused(&client, &api, "editMessageText", same).await,
        (400, "Bad Request: message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message".to_owned())
    );
    for message_id in [999, first_message] {
        assert_eq!(
            refused(
                &client,
                &api,
                "editMessageText",
                json!({"chat_id": 42, "message_id": message_id, "text": "x"})
            )
            .await,
            (400, "Bad Request: message to edit not found".to_owned())
        );
    }
    let edited = accepted(
        &client,
        &api,
        "editMessageText",
        json!({"chat_id": 42, "message_id": sent_id, "text": "<i>done</i>", "parse_mode": "HTML"}),
    )
    .await;
    assert_eq!(edited["text"], "done");
    assert_eq!(edited["message_id"], sent_id);
    let last = api.sent().last().unwrap().clone();
    assert_eq!(
        (last.method.as_str(), last.message_id, last.text.as_str()),
        ("editMessageText", sent_id, "done")
    );

    // 429: the next call is refused with retry_after; a call before it elapsed is refused again
    // and kept as a violation; another chat and a call after it elapsed are fine.
    let bob = Person {
        id: 43,
        first_name: "Bob".to_owned(),
        username: None,
    };
    api.user_writes(
        -1_001,
        ChatKind::Supergroup { forum: true },
        &bob,
        "in a topic",
        Some(7),
        None,
    );
    api.rate_limit_next("sendMessage", 1, 1);
    let (status, answer) = call(
        &client,
        &api,
        "sendMessage",
        json!({"chat_id": 42, "text": "hi"}),
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(
        answer,
        json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 1", "parameters": {"retry_after": 1}})
    );
    let limited_at = Instant::now();
    let (status, _) = call(
        &client,
        &api,
        "sendMessage",
        json!({"chat_id": 42, "text": "hi"}),
    )
    .await;
    assert_eq!(status, 429);
    let violations = api.violations();
    assert_eq!(violations.len(), 3, "{violations:?}");
    assert!(violations[2].contains("retry_after"), "{violations:?}");
    accepted(
        &client,
        &api,
        "sendMessage",
        json!({"chat_id": -1_001, "text": "other chat"}),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1_100).saturating_sub(limited_at.elapsed())).await;
    accepted(
        &client,
        &api,
        "sendMessage",
        json!({"chat_id": 42, "text": "hi"}),
    )
    .await;
    assert_eq!(api.violations().len(), 3, "{:?}", api.violations());

    // Forum topics: the topic people wrote in and General exist, others do not.
    let updates = accepted(&client, &api, "getUpdates", json!({"offset": next})).await;
    let topic_message = &updates.as_array().unwrap().last().unwrap()["message"];
    assert_eq!(topic_message["message_thread_id"], 7);
    assert_eq!(topic_message["is_topic_message"], true);
    assert_eq!(topic_message["chat"]["is_forum"], true);
    assert_eq!(
        topic_message["reply_to_message"]["forum_topic_created"]["name"],
        "Topic 7"
    );
    let next = updates.as_array().unwrap().last().unwrap()["update_id"]
        .as_i64()
        .unwrap()
        + 1;
    for thread in [7, 1] {
        accepted(
            &client,
            &api,
            "sendMessage",
            json!({"chat_id": -1_001, "text": "t", "message_thread_id": thread}),
        )
        .await;
    }
    assert_eq!(api.sent().last().unwrap().message_thread_id, None);
    assert_eq!(
        refused(
            &client,
            &api,
            "sendMessage",
            json!({"chat_id": -1_001, "text": "t", "message_thread_id": 8})
        )
        .await,
        (400, "Bad Request: message thread not found".to_owned())
    );

    // Raw updates: ids are filled in, their chats become known, and a type left out by default
    // (message_reaction) is dropped.
    let reaction = api.push_update(json!({"message_reaction": {"chat": {"id": 42, "type": "private"}, "message_id": first_message, "date": 0}}));
    let group_message = json!({"message_id": 5, "from": bob.user(), "chat": {"id": -5, "type": "group", "title": "G"}, "date": 0, "text": "raw"});
    let raw = api.push_update(json!({"message": group_message}));
    assert_eq!(raw, reaction + 1);
    let updates = accepted(&client, &api, "getUpdates", json!({"offset": next})).await;
    assert_eq!(
        updates,
        json!([{"update_id": raw, "message": group_message}])
    );
    let reply = json!({"chat_id": -5, "text": "raw reply", "reply_parameters": {"message_id": 5}});
    accepted(&client, &api, "sendMessage", reply).await;
    let last = api.sent().last().unwrap().clone();
    assert_eq!(
        (last.chat_id, last.html.as_str(), last.reply_to),
        (-5, "raw reply", Some(5))
    );
    let next = raw + 1;

    // sendChatAction.
    assert_eq!(
        accepted(
            &client,
            &api,
            "sendChatAction",
            json!({"chat_id": 42, "action": "typing"})
        )
        .await,
        json!(true)
    );
    assert_eq!(api.typing_actions(), 1);
    assert_eq!(
        refused(
            &client,
            &api,
            "sendChatAction",
            json!({"chat_id": 42, "action": "dancing"})
        )
        .await,
        (
            400,
            "Bad Request: wrong parameter action in request".to_owned()
        )
    );

    // Files: getFile and the download link; the 20 MB bound; uploads.
    let document = Document {
        file_name: "notes.txt",
        mime_type: "text/plain",
        bytes: b"hello file".to_vec(),
        caption: Some("see /this"),
        ..Document::default()
    };
    api.user_sends_document(42, ChatKind::Private, &ada, document);
    api.user_sends_huge_document(42, ChatKind::Private, &ada, "huge.bin", 21 * 1024 * 1024);
    let updates = accepted(&client, &api, "getUpdates", json!({"offset": next})).await;
    let [small, huge] = updates.as_array().unwrap().as_slice() else {
        panic!("{updates}");
    };
    assert_eq!(small["message"]["document"]["file_size"], 10);
    assert_eq!(
        small["message"]["caption_entities"],
        json!([{"type": "bot_command", "offset": 4, "length": 5}])
    );
    let file_id = small["message"]["document"]["file_id"].as_str().unwrap();
    let file = accepted(&client, &api, "getFile", json!({"file_id": file_id})).await;
    assert_eq!(file["file_size"], 10);
    let file_path = file["file_path"].as_str().unwrap();
    assert!(
        file_path.starts_with("documents/") && file_path.ends_with(".txt"),
        "{file}"
    );
    let download = client
        .get(format!("{}/file/bot{TEST_TOKEN}/{file_path}", api.url))
        .send()
        .await
        .unwrap();
    assert_eq!(download.status(), 200);
    assert_eq!(download.bytes().await.unwrap().as_ref(), b"hello file");
    let missing = client
        .get(format!(
            "{}/file/bot{TEST_TOKEN}/documents/nothing.txt",
            api.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let huge_id = huge["message"]["document"]["file_id"].as_str().unwrap();
    assert_eq!(
        refused(&client, &api, "getFile", json!({"file_id": huge_id})).await,
        (400, "Bad Request: file is too big".to_owned())
    );
    assert_eq!(
        refused(&client, &api, "getFile", json!({"file_id": "nope"})).await,
        (400, "Bad Request: invalid file_id".to_owned())
    );
    let next = huge["update_id"].as_i64().unwrap() + 1;
    let (content_type, body) = multipart_body(
        &[
            ("chat_id", "42"),
            ("caption", "<b>report</b>"),
            ("parse_mode", "HTML"),
        ],
        ("document", "report.csv", b"a,b\n1,2\n"),
    );
    let answer: Value = client
        .post(format!("{}/bot{TEST_TOKEN}/sendDocument", api.url))
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    assert_eq!(answer["result"]["document"]["file_name"], "report.csv");
    assert_eq!(answer["result"]["caption"], "report");
    let last = api.sent().last().unwrap().clone();
    assert_eq!(last.method, "sendDocument");
    assert_eq!(last.text, "report");
    assert_eq!(
        last.file,
        Some(("report.csv".to_owned(), b"a,b\n1,2\n".to_vec()))
    );
    assert_eq!(
        refused(&client, &api, "sendDocument", json!({"chat_id": 42})).await,
        (
            400,
            "Bad Request: there is no document in the request".to_owned()
        )
    );

    // Webhooks: a bad secret is refused; with one set getUpdates is a conflict and updates are
    // POSTed with the secret, again after a refusal.
    assert_eq!(
        refused(
            &client,
            &api,
            "setWebhook",
            json!({"url": "https://example.com/hook", "secret_token": "bad secret!"})
        )
        .await,
        (
            400,
            "Bad Request: secret token contains unallowed characters".to_owned()
        )
    );
    assert_eq!(
        refused(
            &client,
            &api,
            "setWebhook",
            json!({"url": "http://example.com/hook"})
        )
        .await,
        (
            400,
            "Bad Request: bad webhook: An HTTPS URL must be provided for webhook".to_owned()
        )
    );
    type Received = Arc<Mutex<Vec<(Option<String>, Value)>>>;
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/hook", listener.local_addr().unwrap());
    let receiver = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(
                |Extract(received): Extract<Received>,
                 headers: HeaderMap,
                 axum::Json(update): axum::Json<Value>| async move {
                    let secret = headers
                        .get("x-telegram-bot-api-secret-token")
                        .map(|value| value.to_str().unwrap().to_owned());
                    let mut received = received.lock().unwrap();
                    received.push((secret, update));
                    match received.len() {
                        1 => StatusCode::INTERNAL_SERVER_ERROR,
                        _ => StatusCode::OK,
                    }
                },
            ),
        )
        .with_state(Arc::clone(&received));
    let receiver = tokio::spawn(async move { axum::serve(listener, receiver).await });
    accepted(&client, &api, "getUpdates", json!({"offset": next})).await;
    let secret = "s3cret_-token";
    assert_eq!(
        accepted(
            &client,
            &api,
            "setWebhook",
            json!({"url": hook, "secret_token": secret})
        )
        .await,
        json!(true)
    );
    assert_eq!(api.webhook(), Some((hook.clone(), Some(secret.to_owned()))));
    assert_eq!(
        refused(&client, &api, "getUpdates", json!({})).await,
        (409, "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first".to_owned())
    );
    let (hooked_update, _) =
        api.user_writes(42, ChatKind::Private, &ada, "via webhook", None, None);
    eventually("two webhook requests", || {
        received.lock().unwrap().len() >= 2
    })
    .await;
    let deliveries = received.lock().unwrap().clone();
    assert_eq!(deliveries.len(), 2, "{deliveries:?}");
    for (header, update) in &deliveries {
        assert_eq!(header.as_deref(), Some(secret));
        assert_eq!(update["update_id"], hooked_update);
        assert_eq!(update["message"]["text"], "via webhook");
    }
    // The update is forgotten once the receiver took it.
    let deadline = Instant::now() + crate::suite::support::WAIT;
    let info = loop {
        let info = accepted(&client, &api, "getWebhookInfo", json!({})).await;
        if info["pending_update_count"] == 0 || Instant::now() > deadline {
            break info;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(info["url"], hook);
    assert_eq!(info["pending_update_count"], 0, "{info}");
    assert!(
        info["last_error_message"].as_str().unwrap().contains("500"),
        "{info}"
    );
    assert_eq!(
        accepted(&client, &api, "deleteWebhook", json!({})).await,
        json!(true)
    );
    assert_eq!(api.webhook(), None);
    assert_eq!(
        accepted(
            &client,
            &api,
            "getUpdates",
            json!({"offset": hooked_update + 1})
        )
        .await,
        json!([])
    );
    receiver.abort();

    // The token travelled only in URL paths.
    assert!(!api.request_log().contains(TEST_TOKEN));
    assert!(api.request_log().contains("report.csv"));
    assert_eq!(api.violations().len(), 3, "{:?}", api.violations());
}
