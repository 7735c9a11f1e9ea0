//! Slack: the Web API client a Slack channel uses (<https://api.slack.com/web>), what an event
//! asks ([`interpret`]), the Events API's request signature, and the adapter that sends
//! replies.
//!
//! - **Calls.** Every method is `POST {api-base}/{method}` with the token as a bearer header
//!   (the bot token, or the app-level token for `apps.connections.open`); the answer is
//!   `{"ok":true,…}` or `{"ok":false,"error"}`, and a rate limit is HTTP `429` with
//!   `Retry-After`. No redirect is followed and no error carries a URL.
//! - **Events in.** A direct message is a `message` event with `channel_type` `im`; in a channel
//!   a message addresses the bot when it mentions it (`<@BOTID>`; Slack also sends such a
//!   message as an `app_mention` event, and both carry the same id, so whichever comes first is
//!   judged and the other is a duplicate: neither drops the mention). A message in a thread
//!   (`thread_ts`) belongs to the thread. A message's id is `<channel>:<ts>`. Messages of bots
//!   (the bot's own included), edits and other subtypes are skipped; a `file_share` is a
//!   message with files.
//! - **Replies out.** Markdown is rendered to `mrkdwn` ([`crate::text::markdown_to_mrkdwn`]) and
//!   split into messages of at most [`MAX_MESSAGE_CHARS`] characters of Markdown, posted with
//!   `chat.postMessage` into the thread the message came from; a reply that streamed replaces
//!   its message with `chat.update`. Reply artifacts go out with
//!   `files.getUploadURLExternal`, an upload, and `files.completeUploadExternal`. A `429` is
//!   waited out for its `Retry-After` ([`crate::adapter::MAX_INLINE_WAIT`] in all per
//!   attempt), and the reply goes on from the part that was refused.

use std::time::Duration;

use async_trait::async_trait;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use crate::adapter::Adapter;
use crate::adapter::Outgoing;
use crate::adapter::SendError;
use crate::files::OutgoingFile;
use crate::secret::Secret;
use crate::text::markdown_to_mrkdwn;
use crate::text::split_markdown;
use crate::webhook::Scheme;

/// The longest Markdown of one message; Slack truncates a text past 40,000 characters and
/// advises keeping messages within 4,000.
pub const MAX_MESSAGE_CHARS: usize = 3500;

/// How Slack signs an Events API request: `v0=HMAC-SHA256("v0:<timestamp>:<body>")` in
/// `X-Slack-Signature`, the timestamp in `X-Slack-Request-Timestamp`.
pub const SIGNATURE: Scheme = Scheme {
    timestamp_header: "x-slack-request-timestamp",
    signature_header: "x-slack-signature",
    signed_prefix: "v0:",
    separator: ":",
    tag_prefix: "v0=",
};

/// How long one ordinary call may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// How long an upload may take.
const UPLOAD_TIMEOUT: Duration = Duration::from_secs(300);

/// The host Slack serves files from (`url_private`), besides the Web API's own.
const FILES_HOST: &str = "files.slack.com";

/// A call that failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlackError {
    /// The Web API answered `ok: false`.
    #[error("Slack answered {0}")]
    Api(String),
    /// Slack limited the rate of the method (`429`).
    #[error("Slack limited the rate of {method}")]
    RateLimited {
        /// The method.
        method: String,
        /// Its `Retry-After`.
        retry_after: Duration,
    },
    /// An HTTP status other than the API's answers.
    #[error("Slack answered HTTP {0}")]
    Status(u16),
    /// Slack could not be reached or did not answer in time.
    #[error("Slack did not answer: {0}")]
    Transport(String),
    /// The answer is not what the API documents.
    #[error("Slack's answer is not understood: {0}")]
    Decode(String),
    /// A file is larger than the Gateway takes.
    #[error("the file is larger than {max_bytes} bytes")]
    TooLarge {
        /// The bound.
        max_bytes: u64,
    },
    /// A file's address is not on Slack's hosts: the bot token is not sent there.
    #[error("the file's address is not on Slack")]
    ForeignUrl,
}

impl SlackError {
    /// Whether trying again later may work.
    #[must_use]
    pub fn transient(&self) -> bool {
        match self {
            SlackError::RateLimited { .. } | SlackError::Transport(_) => true,
            SlackError::Status(status) => *status >= 500,
            // Slack's own errors worth another attempt.
            SlackError::Api(error) => matches!(
                error.as_str(),
                "internal_error"
                    | "fatal_error"
                    | "service_unavailable"
                    | "request_timeout"
                    | "ratelimited"
            ),
            SlackError::Decode(_) | SlackError::TooLarge { .. } | SlackError::ForeignUrl => false,
        }
    }

    /// The wait a rate limit asks for.
    fn rate_limit(&self) -> Option<Duration> {
        match self {
            SlackError::RateLimited { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }

    fn send_error(self) -> SendError {
        match self.transient() {
            true => SendError::Transient {
                retry_after: self.rate_limit(),
                message: self.to_string(),
            },
            false => SendError::Permanent {
                message: self.to_string(),
            },
        }
    }
}

/// A file shared in a message.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct SlackFile {
    /// Its id.
    pub id: String,
    /// Its name.
    #[serde(default)]
    pub name: Option<String>,
    /// Its MIME type, as Slack saw it.
    #[serde(default)]
    pub mimetype: Option<String>,
    /// Its size.
    #[serde(default)]
    pub size: Option<u64>,
    /// Where the bot downloads it (with its token).
    #[serde(default)]
    pub url_private_download: Option<String>,
    /// Where the bot reads it (with its token).
    #[serde(default)]
    pub url_private: Option<String>,
}

/// An event of an `event_callback` (`message`, `app_mention`), with the fields a channel
/// reads.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Event {
    /// `message`, `app_mention`, ...
    #[serde(rename = "type")]
    pub kind: String,
    /// `file_share`, `message_changed`, `bot_message`, ...
    #[serde(default)]
    pub subtype: Option<String>,
    /// The conversation.
    #[serde(default)]
    pub channel: Option<String>,
    /// `im`, `channel`, `group`, `mpim`.
    #[serde(default)]
    pub channel_type: Option<String>,
    /// The author.
    #[serde(default)]
    pub user: Option<String>,
    /// Set when a bot wrote it.
    #[serde(default)]
    pub bot_id: Option<String>,
    /// The text.
    #[serde(default)]
    pub text: Option<String>,
    /// Its timestamp, its id in the conversation.
    #[serde(default)]
    pub ts: Option<String>,
    /// The thread's root, for a message in a thread.
    #[serde(default)]
    pub thread_ts: Option<String>,
    /// Shared files.
    #[serde(default)]
    pub files: Vec<SlackFile>,
}

/// What Slack posts to an Events API Request URL, or wraps in a Socket Mode envelope.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Callback {
    /// The Request URL's check: the answer echoes `challenge`.
    UrlVerification {
        /// What to echo.
        challenge: String,
    },
    /// An event.
    EventCallback {
        /// Its id (the same on every retry).
        #[serde(default)]
        event_id: Option<String>,
        /// The workspace it happened in.
        #[serde(default)]
        team_id: Option<String>,
        /// The event; one this build does not read is kept as `None`.
        #[serde(default, deserialize_with = "lenient_event")]
        event: Option<Box<Event>>,
    },
    /// Anything else (`app_rate_limited`, ...).
    #[serde(other)]
    Other,
}

fn lenient_event<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Box<Event>>, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(serde_json::from_value(value).ok().map(Box::new))
}

/// A Socket Mode message.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SocketMessage {
    /// The connection is open.
    Hello,
    /// Slack will close the connection: open another.
    Disconnect {
        /// `refresh_requested`, `warning`, `link_disabled`, ...
        #[serde(default)]
        reason: Option<String>,
    },
    /// An event, to be acknowledged by its envelope id.
    EventsApi {
        /// What the acknowledgement names.
        envelope_id: String,
        /// The event.
        payload: Box<Callback>,
    },
    /// Anything else (slash commands, interactivity): acknowledged when it has an envelope id,
    /// and otherwise ignored.
    #[serde(other)]
    Other,
}

/// The envelope id of any Socket Mode message that carries one.
#[must_use]
pub fn envelope_id(message: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Envelope {
        envelope_id: Option<String>,
    }
    serde_json::from_str::<Envelope>(message)
        .ok()
        .and_then(|envelope| envelope.envelope_id)
}

/// The bot's own identity, from `auth.test`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BotIdentity {
    /// Its user id (`U…`), which mentions name.
    pub user_id: String,
    /// Its workspace: events of another one (an app installed in several) are not taken.
    pub team_id: String,
}

impl Callback {
    /// The event of an `event_callback` from `me`'s workspace.
    #[must_use]
    pub fn event_for(self, me: &BotIdentity) -> Option<Box<Event>> {
        match self {
            Callback::EventCallback { team_id, event, .. }
                if team_id.as_deref().is_none_or(|team| team == me.team_id) =>
            {
                event
            }
            _ => None,
        }
    }
}

/// A message a channel judges, in Slack's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// `<channel>:<ts>`.
    pub message_id: String,
    /// The author's user id.
    pub sender: String,
    /// The conversation.
    pub channel: String,
    /// Whether it is a channel rather than a direct message.
    pub group: bool,
    /// The thread's root `ts`.
    pub thread: Option<String>,
    /// Whether it addresses the bot (always in a direct message).
    pub mentioned: bool,
    /// The text.
    pub text: String,
    /// Its files.
    pub files: Vec<SlackFile>,
}

/// What `event` asks of the channel; `None` for anything but a person's message to the bot's
/// direct messages or channels (and, where `require_mention`, a channel message that does not
/// mention the bot).
#[must_use]
pub fn interpret(event: &Event, me: &BotIdentity, require_mention: bool) -> Option<Incoming> {
    if !matches!(event.kind.as_str(), "message" | "app_mention") {
        return None;
    }
    if event.bot_id.is_some() || !matches!(event.subtype.as_deref(), None | Some("file_share")) {
        return None;
    }
    let sender = event.user.clone()?;
    if sender == me.user_id {
        return None;
    }
    let channel = event.channel.clone()?;
    let ts = event.ts.clone()?;
    let group = match (event.kind.as_str(), event.channel_type.as_deref()) {
        ("message", Some("im")) => false,
        ("message", Some("channel" | "group")) | ("app_mention", _) => true,
        _ => return None,
    };
    let text = event.text.clone().unwrap_or_default();
    if text.trim().is_empty() && event.files.is_empty() {
        return None;
    }
    let mentioned =
        !group || event.kind == "app_mention" || text.contains(&format!("<@{}>", me.user_id));
    // Where a mention is required, a channel's `message` that does not show one is left to
    // its `app_mention` (Slack may write the mention otherwise): judging it first would
    // record it as ignored, and the mention would then be a duplicate.
    if group && !mentioned && require_mention && event.kind == "message" {
        return None;
    }
    Some(Incoming {
        message_id: format!("{channel}:{ts}"),
        sender,
        channel,
        group,
        thread: event.thread_ts.clone(),
        mentioned,
        text,
        files: event.files.clone(),
    })
}

/// A Web API client for one app.
#[derive(Clone)]
pub struct SlackClient {
    http: reqwest::Client,
    api_base: url::Url,
    bot_token: Secret,
    app_token: Option<Secret>,
}

/// `{"ok","error"}`; the method's own fields are read after.
#[derive(Deserialize)]
struct Answer {
    ok: bool,
    error: Option<String>,
}

impl SlackClient {
    /// A client of the Web API at `api_base`, with the bot token and, for Socket Mode, the
    /// app-level token.
    ///
    /// # Errors
    /// The HTTP client cannot be built.
    pub fn new(
        api_base: url::Url,
        bot_token: Secret,
        app_token: Option<Secret>,
    ) -> Result<Self, reqwest::Error> {
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            http,
            api_base,
            bot_token,
            app_token,
        })
    }

    fn method_url(&self, method: &str) -> url::Url {
        let mut url = self.api_base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push(method);
        }
        url
    }

    /// Calls `method` with `token`, its arguments as JSON (`Some`) or as a form.
    async fn call<T: DeserializeOwned>(
        &self,
        method: &str,
        token: &Secret,
        json: Option<&serde_json::Value>,
        form: &[(&str, String)],
    ) -> Result<T, SlackError> {
        let request = self
            .http
            .post(self.method_url(method))
            .bearer_auth(token.expose())
            .timeout(CALL_TIMEOUT);
        let request = match json {
            // `json` sets `application/json`; Slack asks for the charset too.
            Some(json) => request
                .header("content-type", "application/json; charset=utf-8")
                .body(json.to_string()),
            None => request
                .header("content-type", "application/x-www-form-urlencoded")
                .body(
                    url::form_urlencoded::Serializer::new(String::new())
                        .extend_pairs(form)
                        .finish(),
                ),
        };
        let response = request
            .send()
            .await
            .map_err(|error| SlackError::Transport(error.without_url().to_string()))?;
        let status = response.status().as_u16();
        if status == 429 {
            let retry_after =
                crate::webhook::retry_after(response.headers()).unwrap_or(Duration::from_secs(1));
            return Err(SlackError::RateLimited {
                method: method.to_owned(),
                retry_after,
            });
        }
        let body = crate::files::read_capped(response, crate::files::MAX_API_ANSWER_BYTES)
            .await
            .map_err(|error| match error {
                crate::files::Capped::TooLarge => SlackError::Decode(format!(
                    "{method} answered more than {} bytes",
                    crate::files::MAX_API_ANSWER_BYTES
                )),
                crate::files::Capped::Transport(message) => SlackError::Transport(message),
            })?;
        let value: serde_json::Value =
            serde_json::from_slice(&body).map_err(|error| match status {
                200 => SlackError::Decode(error.to_string()),
                other => SlackError::Status(other),
            })?;
        let answer =
            Answer::deserialize(&value).map_err(|error| SlackError::Decode(error.to_string()))?;
        if !answer.ok {
            return Err(SlackError::Api(
                answer
                    .error
                    .unwrap_or_else(|| String::from("an unnamed error")),
            ));
        }
        T::deserialize(value).map_err(|error| SlackError::Decode(format!("{method}: {error}")))
    }

    /// `auth.test`: the bot's user id.
    ///
    /// # Errors
    /// [`SlackError`]; a wrong token is `invalid_auth`.
    pub async fn auth_test(&self) -> Result<BotIdentity, SlackError> {
        #[derive(Deserialize)]
        struct AuthTest {
            user_id: String,
            team_id: String,
        }
        let answer: AuthTest = self
            .call(
                "auth.test",
                &self.bot_token,
                Some(&serde_json::json!({})),
                &[],
            )
            .await?;
        Ok(BotIdentity {
            user_id: answer.user_id,
            team_id: answer.team_id,
        })
    }

    /// `users.info`: the name `user` shows under (its display name, else its real name, else
    /// its handle).
    ///
    /// # Errors
    /// [`SlackError`]; an unknown user is `user_not_found`.
    pub async fn user_name(&self, user: &str) -> Result<String, SlackError> {
        #[derive(Deserialize)]
        struct Info {
            user: UserInfo,
        }
        #[derive(Deserialize)]
        struct UserInfo {
            #[serde(default)]
            name: String,
            #[serde(default)]
            real_name: Option<String>,
            #[serde(default)]
            profile: Option<Profile>,
        }
        #[derive(Deserialize)]
        struct Profile {
            #[serde(default)]
            display_name: Option<String>,
        }
        // Its arguments are taken as a form only.
        let info: Info = self
            .call(
                "users.info",
                &self.bot_token,
                None,
                &[("user", user.to_owned())],
            )
            .await?;
        let user = info.user;
        Ok([
            user.profile.and_then(|profile| profile.display_name),
            user.real_name,
            Some(user.name),
        ]
        .into_iter()
        .flatten()
        .find(|name| !name.trim().is_empty())
        .unwrap_or_default())
    }

    /// `apps.connections.open` with the app-level token: a Socket Mode URL, good for one
    /// connection.
    ///
    /// # Errors
    /// [`SlackError`]; no app-level token is a decode error.
    pub async fn open_connection(&self) -> Result<String, SlackError> {
        #[derive(Deserialize)]
        struct Opened {
            url: String,
        }
        let token = self
            .app_token
            .as_ref()
            .ok_or_else(|| SlackError::Decode(String::from("no app-level token")))?;
        let opened: Opened = self
            .call(
                "apps.connections.open",
                token,
                Some(&serde_json::json!({})),
                &[],
            )
            .await?;
        Ok(opened.url)
    }

    /// `chat.postMessage` of `text` (mrkdwn) in `channel`, in `thread`; returns its `ts`.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn post_message(
        &self,
        channel: &str,
        text: &str,
        thread: Option<&str>,
    ) -> Result<String, SlackError> {
        #[derive(Deserialize)]
        struct Posted {
            ts: String,
        }
        let mut body = serde_json::json!({"channel": channel, "text": text, "mrkdwn": true});
        if let Some(thread) = thread {
            body["thread_ts"] = thread.into();
        }
        let posted: Posted = self
            .call("chat.postMessage", &self.bot_token, Some(&body), &[])
            .await?;
        Ok(posted.ts)
    }

    /// `chat.update` of the bot's message `ts` in `channel` to `text`.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn update(&self, channel: &str, ts: &str, text: &str) -> Result<(), SlackError> {
        let _: serde_json::Value = self
            .call(
                "chat.update",
                &self.bot_token,
                Some(&serde_json::json!({"channel": channel, "ts": ts, "text": text})),
                &[],
            )
            .await?;
        Ok(())
    }

    /// Whether the bot token may be sent to `url`: a private file's path (`/files-pri/…`) on
    /// Slack's file host over https, or on the Web API's own origin; never another path there
    /// (a crafted file URL could name an API method).
    fn may_fetch(&self, url: &url::Url) -> bool {
        let own = url.scheme() == self.api_base.scheme()
            && url.host_str() == self.api_base.host_str()
            && url.port_or_known_default() == self.api_base.port_or_known_default();
        let files = url.scheme() == "https" && url.host_str() == Some(FILES_HOST);
        (own || files) && url.path().starts_with("/files-pri/") && !url.path().contains("/../")
    }

    /// Downloads a shared file (its `url_private_download`, else `url_private`) with the bot
    /// token, at most `max_bytes`, within `timeout`.
    ///
    /// # Errors
    /// [`SlackError`]; [`SlackError::ForeignUrl`] for an address off Slack.
    pub async fn download(
        &self,
        file: &SlackFile,
        max_bytes: u64,
        timeout: Duration,
    ) -> Result<bytes::Bytes, SlackError> {
        if file.size.is_some_and(|size| size > max_bytes) {
            return Err(SlackError::TooLarge { max_bytes });
        }
        let url = file
            .url_private_download
            .as_deref()
            .or(file.url_private.as_deref())
            .and_then(|url| url::Url::parse(url).ok())
            .ok_or(SlackError::ForeignUrl)?;
        if !self.may_fetch(&url) {
            return Err(SlackError::ForeignUrl);
        }
        let response = self
            .http
            .get(url)
            .bearer_auth(self.bot_token.expose())
            .timeout(timeout.min(crate::files::DOWNLOAD_TIMEOUT))
            .send()
            .await
            .map_err(|error| SlackError::Transport(error.without_url().to_string()))?;
        if !response.status().is_success() {
            return Err(SlackError::Status(response.status().as_u16()));
        }
        crate::files::read_capped(response, max_bytes)
            .await
            .map_err(|error| match error {
                crate::files::Capped::TooLarge => SlackError::TooLarge { max_bytes },
                crate::files::Capped::Transport(message) => SlackError::Transport(message),
            })
    }

    /// Uploads `file` and shares it in `channel` (and `thread`):
    /// `files.getUploadURLExternal`, the bytes to its URL, `files.completeUploadExternal`.
    ///
    /// # Errors
    /// [`SlackError`].
    pub async fn upload(
        &self,
        channel: &str,
        thread: Option<&str>,
        file: &OutgoingFile,
    ) -> Result<(), SlackError> {
        #[derive(Deserialize)]
        struct Target {
            upload_url: String,
            file_id: String,
        }
        let target: Target = self
            .call(
                "files.getUploadURLExternal",
                &self.bot_token,
                None,
                &[
                    ("filename", file.name.clone()),
                    ("length", file.bytes.len().to_string()),
                ],
            )
            .await?;
        let upload_url = url::Url::parse(&target.upload_url)
            .map_err(|error| SlackError::Decode(format!("the upload URL: {error}")))?;
        let part = reqwest::multipart::Part::bytes(file.bytes.to_vec())
            .file_name(file.name.clone())
            .mime_str(&file.mime_type)
            .map_err(|error| SlackError::Decode(error.without_url().to_string()))?;
        let uploaded = self
            .http
            .post(upload_url)
            .multipart(reqwest::multipart::Form::new().part("file", part))
            .timeout(UPLOAD_TIMEOUT)
            .send()
            .await
            .map_err(|error| SlackError::Transport(error.without_url().to_string()))?;
        if !uploaded.status().is_success() {
            return Err(SlackError::Status(uploaded.status().as_u16()));
        }
        let files = serde_json::json!([{"id": target.file_id, "title": file.name}]).to_string();
        let mut form = vec![("files", files), ("channel_id", channel.to_owned())];
        if let Some(thread) = thread {
            form.push(("thread_ts", thread.to_owned()));
        }
        let _: serde_json::Value = self
            .call("files.completeUploadExternal", &self.bot_token, None, &form)
            .await?;
        Ok(())
    }
}

/// Sends replies to Slack conversations.
pub struct SlackAdapter {
    client: SlackClient,
    progress: crate::adapter::Progress,
}

impl SlackAdapter {
    /// An adapter sending through `client`.
    #[must_use]
    pub fn new(client: SlackClient) -> Self {
        Self {
            client,
            progress: crate::adapter::Progress::default(),
        }
    }
}

/// The `mrkdwn` of each message of a reply.
#[must_use]
pub fn reply_parts(text: &str) -> Vec<String> {
    split_markdown(text, MAX_MESSAGE_CHARS)
        .iter()
        .map(|part| markdown_to_mrkdwn(part))
        .filter(|part| !part.trim().is_empty())
        .collect()
}

#[async_trait]
impl Adapter for SlackAdapter {
    async fn send(&self, message: &Outgoing) -> Result<(), SendError> {
        let channel = message.conversation.as_str();
        let thread = message.thread.as_deref();
        let parts = &reply_parts(&message.text);
        let post = |text: &str| {
            let text = text.to_owned();
            async move {
                self.client
                    .post_message(channel, &text, thread)
                    .await
                    .map(|_| ())
            }
        };
        self.progress
            .send_steps(
                &message.delivery_id,
                parts.len() + message.files.len(),
                SlackError::rate_limit,
                SlackError::transient,
                |index| async move {
                    match (parts.get(index), message.replaces.as_deref()) {
                        // A streamed message that is gone (deleted, too old to edit) is not
                        // replaced: the reply is posted anew.
                        (Some(text), Some(ts)) if index == 0 => {
                            match self.client.update(channel, ts, text).await {
                                Err(error) if !error.transient() => post(text).await,
                                updated => updated,
                            }
                        }
                        (Some(text), _) => post(text).await,
                        (None, _) => {
                            let file = &message.files[index - parts.len()];
                            self.client.upload(channel, thread, file).await
                        }
                    }
                },
            )
            .await
            .map_err(SlackError::send_error)
    }
}

/// The user ids `text` mentions (`<@U…>` or `<@U…|name>`), each once, at most `limit`.
#[must_use]
pub fn mentioned_users(text: &str, limit: usize) -> Vec<String> {
    let mut users: Vec<String> = Vec::new();
    for piece in text.split("<@").skip(1) {
        let Some(end) = piece.find('>') else {
            continue;
        };
        let id = piece[..end].split('|').next().unwrap_or_default();
        if !id.is_empty()
            && id.len() <= 32
            && id.bytes().all(|b| b.is_ascii_alphanumeric())
            && !users.iter().any(|seen| seen == id)
        {
            users.push(id.to_owned());
            if users.len() >= limit {
                break;
            }
        }
    }
    users
}

/// `text` with each `<@ID>` (or `<@ID|label>`) of `names` written `@name`, so the agent reads
/// people's names rather than ids.
#[must_use]
pub fn with_names(text: &str, names: &[(String, String)]) -> String {
    let mut text = text.to_owned();
    for (id, name) in names {
        let plain = format!("<@{id}>");
        text = text.replace(&plain, &format!("@{name}"));
        let labelled = format!("<@{id}|");
        while let Some(start) = text.find(&labelled) {
            let Some(end) = text[start..].find('>') else {
                break;
            };
            text.replace_range(start..start + end + 1, &format!("@{name}"));
        }
    }
    text
}

/// A Slack conversation a reply streams to, by `chat.update` of one message.
pub struct SlackStream {
    /// The bot's client.
    pub client: SlackClient,
    /// The conversation.
    pub channel: String,
    /// The thread.
    pub thread: Option<String>,
}

#[async_trait]
impl crate::adapter::StreamSink for SlackStream {
    fn max_chars(&self) -> usize {
        MAX_MESSAGE_CHARS
    }

    async fn show(
        &self,
        text: &str,
        shown: Option<&str>,
        _edits: u32,
    ) -> Result<String, SendError> {
        let text = markdown_to_mrkdwn(text);
        match shown {
            Some(ts) => {
                self.client
                    .update(&self.channel, ts, &text)
                    .await
                    .map_err(SlackError::send_error)?;
                Ok(ts.to_owned())
            }
            None => self
                .client
                .post_message(&self.channel, &text, self.thread.as_deref())
                .await
                .map_err(SlackError::send_error),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "a test fails loudly")]

    use super::*;

    fn me() -> BotIdentity {
        BotIdentity {
            user_id: String::from("U0BOT"),
            team_id: String::from("T1"),
        }
    }

    fn event(value: serde_json::Value) -> Event {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_direct_message_and_a_mention_are_judged_and_the_rest_skipped() {
        let dm = interpret(
            &event(
                serde_json::json!({"type": "message", "channel": "D1", "channel_type": "im",
                "user": "U1", "text": "/say hi", "ts": "1.000100"}),
            ),
            &me(),
            false,
        )
        .unwrap();
        assert_eq!(dm.message_id, "D1:1.000100");
        assert!(!dm.group && dm.mentioned && dm.thread.is_none());
        // The message event and the app_mention of one message share their id, and both see
        // the mention.
        let plain = interpret(
            &event(
                serde_json::json!({"type": "message", "channel": "C1", "channel_type": "channel",
                "user": "U1", "text": "<@U0BOT> hi", "ts": "2.0", "thread_ts": "1.5"}),
            ),
            &me(),
            false,
        )
        .unwrap();
        let mention = interpret(
            &event(
                serde_json::json!({"type": "app_mention", "channel": "C1", "user": "U1",
                "text": "<@U0BOT> hi", "ts": "2.0", "thread_ts": "1.5"}),
            ),
            &me(),
            false,
        )
        .unwrap();
        assert_eq!(plain, mention);
        assert!(plain.group && plain.mentioned);
        assert_eq!(plain.thread.as_deref(), Some("1.5"));
        let unaddressed = interpret(
            &event(
                serde_json::json!({"type": "message", "channel": "C1", "channel_type": "channel",
                "user": "U1", "text": "hi all", "ts": "3.0"}),
            ),
            &me(),
            false,
        )
        .unwrap();
        assert!(!unaddressed.mentioned);
        for skipped in [
            serde_json::json!({"type": "message", "channel": "D1", "channel_type": "im", "user": "U0BOT", "text": "x", "ts": "4.0"}),
            serde_json::json!({"type": "message", "channel": "D1", "channel_type": "im", "bot_id": "B1", "user": "U2", "text": "x", "ts": "4.0"}),
            serde_json::json!({"type": "message", "subtype": "message_changed", "channel": "D1", "channel_type": "im", "ts": "4.0"}),
            serde_json::json!({"type": "reaction_added", "user": "U1"}),
        ] {
            assert_eq!(interpret(&event(skipped), &me(), false), None);
        }
        // Where a mention is required, the unaddressed channel message is left alone.
        let unaddressed = event(serde_json::json!({"type": "message", "channel": "C1",
            "channel_type": "channel", "user": "U1", "text": "hi all", "ts": "3.0"}));
        assert_eq!(interpret(&unaddressed, &me(), true), None);
        {}
    }

    #[test]
    fn socket_messages_and_callbacks_parse() {
        let message: SocketMessage = serde_json::from_str(
            r#"{"envelope_id":"e1","type":"events_api","accept_response_payload":false,"payload":{"type":"event_callback","event_id":"Ev1","event":{"type":"message","channel":"D1","channel_type":"im","user":"U1","text":"hi","ts":"1.0"}}}"#,
        )
        .unwrap();
        let SocketMessage::EventsApi {
            envelope_id,
            payload,
        } = message
        else {
            panic!("{message:?}");
        };
        let Callback::EventCallback {
            event: Some(event), ..
        } = *payload
        else {
            panic!("{payload:?}");
        };
        assert_eq!(envelope_id, "e1");
        assert_eq!(event.text.as_deref(), Some("hi"));
        let disconnect: SocketMessage =
            serde_json::from_str(r#"{"type":"disconnect","reason":"refresh_requested"}"#).unwrap();
        assert!(matches!(disconnect, SocketMessage::Disconnect { .. }));
        let other: SocketMessage =
            serde_json::from_str(r#"{"type":"slash_commands","envelope_id":"e2"}"#).unwrap();
        assert_eq!(other, SocketMessage::Other);
        assert_eq!(
            envelope_id_of(r#"{"type":"slash_commands","envelope_id":"e2"}"#),
            "e2"
        );
        let odd: Callback = serde_json::from_str(
            r#"{"type":"event_callback","event_id":"Ev2","event":{"type":"message","files":"not a list"}}"#,
        )
        .unwrap();
        assert_eq!(
            odd,
            Callback::EventCallback {
                event_id: Some(String::from("Ev2")),
                team_id: None,
                event: None
            }
        );
        // An event of another workspace is not taken.
        let me = BotIdentity {
            user_id: String::from("U0BOT"),
            team_id: String::from("T1"),
        };
        let of = |team: &str| -> Callback {
            serde_json::from_value(serde_json::json!({"type": "event_callback", "team_id": team,
                "event": {"type": "message", "channel": "D1", "channel_type": "im", "user": "U1", "text": "x", "ts": "1.0"}}))
            .unwrap()
        };
        assert!(of("T1").event_for(&me).is_some());
        assert!(of("T2").event_for(&me).is_none());
    }

    fn envelope_id_of(message: &str) -> String {
        envelope_id(message).unwrap()
    }

    #[test]
    fn the_events_api_signature_is_checked() {
        let secret = Secret::new(String::from("8f742231b10e8888abcd99yyyzzz85a5"));
        // Slack's documented example (api.slack.com/authentication/verifying-requests-from-slack).
        let body = b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let signature = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
        assert_eq!(
            crate::webhook::verify_with(
                &SIGNATURE,
                &secret,
                Some("1531420618"),
                Some(signature),
                body,
                1_531_420_618 + 10
            ),
            Ok(())
        );
        assert!(
            crate::webhook::verify_with(
                &SIGNATURE,
                &secret,
                Some("1531420618"),
                Some(signature),
                body,
                1_531_420_618 + 301
            )
            .is_err()
        );
        assert!(
            crate::webhook::verify_with(
                &SIGNATURE,
                &secret,
                Some("1531420618"),
                Some(signature),
                b"other",
                1_531_420_618
            )
            .is_err()
        );
    }

    #[test]
    fn mentions_become_names() {
        let text = "<@U0BOT> ask <@U1|al> and <@U1>, not <@U2 or <!channel>";
        assert_eq!(mentioned_users(text, 10), vec!["U0BOT", "U1"]);
        assert_eq!(mentioned_users(text, 1), vec!["U0BOT"]);
        let names = [
            (String::from("U0BOT"), String::from("gatebot")),
            (String::from("U1"), String::from("Alice")),
        ];
        assert_eq!(
            with_names(text, &names),
            "@gatebot ask @Alice and @Alice, not <@U2 or <!channel>"
        );
    }

    #[test]
    fn a_file_url_off_slack_gets_no_token() {
        let client = SlackClient::new(
            url::Url::parse("https://slack.com/api").unwrap(),
            Secret::new(String::from("xoxb-1")),
            None,
        )
        .unwrap();
        for (url, allowed) in [
            ("https://files.slack.com/files-pri/T1-F1/a.txt", true),
            ("https://slack.com/files-pri/T1-F1/a.txt", true),
            (
                "https://slack.com/api/conversations.history?channel=C1",
                false,
            ),
            ("https://files.slack.com/other/a.txt", false),
            ("http://files.slack.com/x", false),
            ("https://files.slack.com.evil.example/x", false),
            ("https://evil.example/x", false),
        ] {
            assert_eq!(
                client.may_fetch(&url::Url::parse(url).unwrap()),
                allowed,
                "{url}"
            );
        }
    }
}
