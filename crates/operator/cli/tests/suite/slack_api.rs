//! A strict local stand-in for Slack, for end-to-end tests of the Slack channel: the Web API
//! (api.slack.com/web), Socket Mode (api.slack.com/apis/socket-mode) and the Events API
//! (api.slack.com/apis/events-api), served from one HTTP server on `127.0.0.1:0`. It answers the
//! methods the channel uses the way the documentation says the real service does, refuses what
//! it refuses, and records what the bot sent so that a test can assert on it.
//!
//! The product is not special-cased for it: [`SlackApi::url`] takes the place of
//! `https://slack.com/api` as the adapter's API base, and everything else (the Socket Mode URL,
//! the upload URLs, the files' `url_private`) is handed out by the API itself, as Slack does.
//! Each behaviour names, in its doc comment, the page of api.slack.com it follows. Where the
//! stand-in is stricter or more lenient than the real service, the comment says so.
//!
//! Some mistakes the real service cannot report to the app (a call made before a 429's
//! `Retry-After` elapsed, an envelope left unacknowledged, two Socket Mode connections at once)
//! are kept as [`SlackApi::violations`] for the tests to assert empty.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::collections::HashMap;
use std::collections::HashSet;
use std::collections::VecDeque;
use std::fmt::Display;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::MutexGuard;
use std::sync::PoisonError;
use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering;
use std::time::Duration;
use std::time::Instant;
use std::time::SystemTime;
use std::time::UNIX_EPOCH;

use axum::body::Body;
use axum::extract::State as Extract;
use axum::extract::ws::Message as WsMessage;
use axum::extract::ws::WebSocket;
use axum::extract::ws::WebSocketUpgrade;
use axum::http::HeaderMap;
use axum::http::StatusCode;
use axum::http::Uri;
use axum::http::header;
use axum::response::IntoResponse;
use axum::response::Response;
use base64::Engine as _;
use futures_util::FutureExt as _;
use futures_util::SinkExt as _;
use futures_util::StreamExt as _;
use serde_json::Map;
use serde_json::Value;
use serde_json::json;
use sha2::Digest as _;
use sha2::Sha256;
use tokio::sync::Notify;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// The workspace every user, channel and event belongs to.
const TEAM_ID: &str = "T0TEAM";

/// The workspace's name (api.slack.com/methods/auth.test: `team`).
const TEAM_NAME: &str = "Gatehouse Tests";

/// The app the tokens belong to (`api_app_id` of every event_callback,
/// api.slack.com/apis/events-api#callback-field).
const APP_ID: &str = "A0APP";

/// The deprecated verification token Slack still puts in every event_callback and
/// url_verification (api.slack.com/apis/events-api#callback-field: `token`).
const VERIFICATION_TOKEN: &str = "StandInVerificationToken";

/// api.slack.com/methods/chat.postMessage#truncating: "For best results, limit the number of
/// characters in the text field to 4,000 characters. Ideally, messages should be short and
/// human-readable. Slack will truncate messages containing more than 40,000 characters." The
/// stand-in refuses such a text with the documented `msg_too_long` rather than truncating it.
const TEXT_LIMIT: usize = 40_000;

/// The largest file files.getUploadURLExternal accepts: api.slack.com/methods/files.upload
/// ("the maximum file size is 1 GB").
const UPLOAD_LIMIT: u64 = 1024 * 1024 * 1024;

/// The largest request body the stand-in reads; a bigger one is answered 413. Smaller than
/// Slack's 1 GB so that a runaway test does not fill the memory.
const REQUEST_LIMIT: usize = 64 * 1024 * 1024;

/// api.slack.com/apis/socket-mode#acknowledge: "your app must acknowledge the event within 3
/// seconds"; api.slack.com/apis/events-api#responding: "respond ... with an HTTP 2xx within
/// three seconds".
const ANSWER_WITHIN: Duration = Duration::from_secs(3);

/// How often an event is retried: api.slack.com/apis/events-api#retries ("we'll retry ... up to
/// three times"); Socket Mode envelopes are retried the same number of times.
const RETRIES: u32 = 3;

/// The pauses before the Events API retries. The real service backs off for minutes
/// (api.slack.com/apis/events-api#retries: nearly immediately, after 1 minute and after 5
/// minutes); the stand-in waits 1 s, 2 s and 3 s so that a test sees every retry.
const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(3),
];

/// How long a Socket Mode connection stays open after its `disconnect` message
/// (api.slack.com/apis/socket-mode#disconnect: the connection is refreshed "a few seconds" after
/// the warning; the stand-in waits one).
const REFRESH_GRACE: Duration = Duration::from_secs(1);

/// Real Web API methods the stand-in does not model. A call of one is answered
/// `unknown_method` and also kept as a violation, so that a test fails with a clear sentence
/// rather than with an adapter error that blames Slack.
const UNMODELLED_METHODS: [&str; 17] = [
    "apps.connections.open.v2",
    "assistant.threads.setStatus",
    "bots.info",
    "chat.delete",
    "chat.getPermalink",
    "chat.postEphemeral",
    "conversations.history",
    "conversations.info",
    "conversations.members",
    "conversations.open",
    "conversations.replies",
    "files.info",
    "files.upload",
    "reactions.add",
    "reactions.remove",
    "team.info",
    "users.conversations",
];

/// A member of the workspace: a person, or the bot user.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlackUser {
    /// The user id, `U…` (api.slack.com/types/user).
    pub(crate) id: String,
    /// The user's handle (`name`).
    pub(crate) name: String,
}

/// A message the bot posted or updated and the API accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Posted {
    /// `chat.postMessage` or `chat.update`.
    pub(crate) method: String,
    /// The channel the message is in.
    pub(crate) channel: String,
    /// The message's `ts` (the new one, or the updated one's).
    pub(crate) ts: String,
    /// The thread it is in, when it is a reply.
    pub(crate) thread_ts: Option<String>,
    /// The `text` as the bot sent it.
    pub(crate) text: String,
}

/// A file the bot uploaded (files.getUploadURLExternal, the upload, and
/// files.completeUploadExternal).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Uploaded {
    /// The channel it was shared in; empty when it was completed without a channel (a private
    /// file).
    pub(crate) channel: String,
    /// The thread it was shared in.
    pub(crate) thread_ts: Option<String>,
    /// The file name given to files.getUploadURLExternal.
    pub(crate) name: String,
    /// The bytes uploaded.
    pub(crate) bytes: Vec<u8>,
}

/// The running stand-in. Its server, Socket Mode connections and event delivery stop when it is
/// dropped.
pub(crate) struct SlackApi {
    /// `http://127.0.0.1:PORT/api`, the adapter's API base in place of `https://slack.com/api`:
    /// Web API methods are at `{url}/{method}` (api.slack.com/web#basics).
    pub(crate) url: String,
    shared: Arc<Shared>,
    tasks: Vec<AbortHandle>,
}

impl SlackApi {
    /// Starts on `127.0.0.1:0` with a bot token (`xoxb-…`), an app-level token (`xapp-…`) and a
    /// signing secret (api.slack.com/authentication/token-types). `bot` is the bot user
    /// (`U…`); its bot id is `B` followed by the rest of its user id, the team is `T0TEAM` and
    /// the app `A0APP`. Panics when a token does not have its documented prefix.
    pub(crate) async fn start(
        bot_token: &str,
        app_token: &str,
        signing_secret: &str,
        bot: SlackUser,
    ) -> Self {
        assert!(
            bot_token.starts_with("xoxb-"),
            "a bot token starts with xoxb-"
        );
        assert!(
            app_token.starts_with("xapp-"),
            "an app-level token starts with xapp-"
        );
        assert!(bot.id.starts_with('U'), "a user id starts with U");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(&base, bot_token, app_token, signing_secret, bot)),
            dispatch: Notify::new(),
            events: Notify::new(),
        });
        let app = axum::Router::new()
            .route("/link/", axum::routing::get(link))
            .fallback(handle)
            .with_state(Arc::clone(&shared));
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let dispatcher = tokio::spawn(dispatch(Arc::clone(&shared)));
        SlackApi {
            url: format!("{base}/api"),
            shared,
            tasks: vec![server.abort_handle(), dispatcher.abort_handle()],
        }
    }

    /// Opens the direct message channel (`D…`, api.slack.com/types/im) between `user` and the
    /// bot, or returns the one already open.
    pub(crate) fn open_dm(&self, user: &SlackUser) -> String {
        self.shared.lock().open_dm(user)
    }

    /// Creates a channel with the bot and `members` in it; returns its id. Public and private
    /// channels both have `C…` ids (api.slack.com/types/conversation: "private channels ... now
    /// also begin with C"); a private one's messages come as `channel_type` `group`
    /// (api.slack.com/events/message.groups).
    pub(crate) fn create_channel(
        &self,
        name: &str,
        private: bool,
        members: &[&SlackUser],
    ) -> String {
        let mut state = self.shared.lock();
        let id = state.new_id("C");
        let mut channel = Channel::new(if private { Kind::Private } else { Kind::Public }, name);
        channel.members.insert(state.bot.id.clone());
        for user in members {
            state.users.insert(user.id.clone(), (*user).clone());
            channel.members.insert(user.id.clone());
        }
        state.channels.insert(id.clone(), channel);
        id
    }

    /// `user` writes `text` in `channel` (a member of it), in the thread `thread_ts` when given
    /// (the ts of a top-level message there). Stores the message under a new, increasing `ts`
    /// and emits what an app subscribed to `message.im`, `message.channels`, `message.groups`
    /// and `app_mention` receives: a `message` event (api.slack.com/events/message.im,
    /// api.slack.com/events/message.channels, api.slack.com/events/message.groups) with
    /// `channel_type` `im`, `channel` or `group`, and, in a channel, when the text mentions the
    /// bot (`<@BOTID>`), also an `app_mention` event (api.slack.com/events/app_mention) with the
    /// same `ts` and its own `event_id`. Each is wrapped in an event_callback
    /// (api.slack.com/apis/events-api#callback-field). Returns the message's `ts`.
    pub(crate) fn user_writes(
        &self,
        channel: &str,
        user: &SlackUser,
        text: &str,
        thread_ts: Option<&str>,
    ) -> String {
        let ts = self
            .shared
            .lock()
            .user_message(channel, user, text, thread_ts, None);
        self.shared.wake();
        ts
    }

    /// Like [`SlackApi::user_writes`] with one file shared: a `message` with subtype
    /// `file_share` and `files: [{id, name, mimetype, size, url_private, url_private_download,
    /// …}]` (api.slack.com/events/message/file_share, api.slack.com/types/file). The file's
    /// `url_private` is served by the stand-in at `{base}/files-pri/{team}-{file id}/{name}`,
    /// only to a request with `Authorization: Bearer <bot token>`
    /// (api.slack.com/types/file#authentication). Returns the message's `ts`.
    pub(crate) fn user_shares_file(
        &self,
        channel: &str,
        user: &SlackUser,
        text: &str,
        name: &str,
        mimetype: &str,
        bytes: Vec<u8>,
    ) -> String {
        let ts = {
            let mut state = self.shared.lock();
            let file = state.user_file(user, name, mimetype, bytes);
            state.user_message(channel, user, text, None, Some(json!([file])))
        };
        self.shared.wake();
        ts
    }

    /// Everything the bot posted or updated that the API accepted, in order.
    pub(crate) fn posted(&self) -> Vec<Posted> {
        self.shared.lock().posted.clone()
    }

    /// The files the bot uploaded and completed, in order (one per file and channel).
    pub(crate) fn uploaded(&self) -> Vec<Uploaded> {
        self.shared.lock().uploaded.clone()
    }

    /// Answers the next `count` calls of `method` with HTTP 429, `Retry-After: seconds` and
    /// `{"ok":false,"error":"ratelimited"}` (api.slack.com/docs/rate-limits). A call of that
    /// method before `seconds` passed is answered 429 again and kept as a violation.
    pub(crate) fn rate_limit_next(&self, method: &str, count: usize, seconds: u64) {
        assert!(
            ApiMethod::parse(method).is_some(),
            "{method} is not a method the stand-in models"
        );
        self.shared
            .lock()
            .limit_next
            .insert(method.to_owned(), (count, seconds));
    }

    /// Broken rules the app could not see as errors, one sentence each: a call of a method
    /// before its 429's `Retry-After` elapsed; a Socket Mode envelope not acknowledged within
    /// 3 s; an acknowledgement of an unknown `envelope_id`; more than one Socket Mode connection
    /// open at once; a Web API call with the app-level token where the bot token is needed or
    /// the other way round; an upload whose size is not the `length` announced; an Events API
    /// request not answered within 3 s; a url_verification not answered with its challenge; a
    /// call of a real method the stand-in does not model.
    pub(crate) fn violations(&self) -> Vec<String> {
        self.shared.lock().violations.clone()
    }

    /// Socket Mode: how many WebSocket connections were opened so far, and how many are open
    /// now.
    pub(crate) fn socket_connections(&self) -> (usize, usize) {
        let state = self.shared.lock();
        (state.opened, state.sockets.len())
    }

    /// Socket Mode: closes every open WebSocket abruptly, without a close frame, as a dropped
    /// connection. Envelopes sent on them and not yet acknowledged are sent again on the next
    /// connection, without a violation.
    pub(crate) fn drop_sockets(&self) {
        let mut state = self.shared.lock();
        for socket in state.sockets.values_mut() {
            socket.closing = true;
            let _ = socket.tx.send(Outgoing::Drop);
        }
    }

    /// Socket Mode: sends `{"type":"disconnect","reason":"refresh_requested","debug_info":
    /// {"host":…}}` on every open WebSocket and closes it about a second later
    /// (api.slack.com/apis/socket-mode#disconnect). No more envelopes go to such a connection,
    /// and it does not count as open when the app opens its replacement meanwhile (as the page
    /// recommends).
    pub(crate) fn request_refresh(&self) {
        let mut state = self.shared.lock();
        for socket in state.sockets.values_mut() {
            socket.closing = true;
            let _ = socket.tx.send(Outgoing::Refresh);
        }
    }

    /// Events API mode: from now on events are POSTed to `url`, the app's Request URL, instead
    /// of going over Socket Mode (events still waiting for a connection go there too).
    ///
    /// First sends the url_verification request `{token, challenge, type: "url_verification"}`
    /// (api.slack.com/events/url_verification) and requires the answer to be HTTP 200 with the
    /// challenge, as plain text, as `challenge=…` or as JSON `{"challenge": …}`; anything else
    /// is kept as a violation. Every request is signed as api.slack.com/authentication/
    /// verifying-requests-from-slack describes: `X-Slack-Request-Timestamp` and
    /// `X-Slack-Signature: v0=hex(HMAC-SHA256(signing secret, "v0:{timestamp}:{body}"))`, with
    /// `Content-Type: application/json`.
    ///
    /// Then each event callback is POSTed (api.slack.com/apis/events-api#receiving-events); an
    /// answer other than 2xx, a failed connection or no answer within 3 s is retried up to
    /// three times (api.slack.com/apis/events-api#retries) with the same body and signature and
    /// `X-Slack-Retry-Num: N` and `X-Slack-Retry-Reason` (`http_error`, `http_timeout` or
    /// `connection_failed`). The stand-in retries after 1 s, 2 s and 3 s where Slack backs off
    /// for minutes. No answer within 3 s is kept as a violation.
    pub(crate) async fn use_events_api(&self, url: &str) {
        let (secret, challenge) = {
            let state = self.shared.lock();
            (state.signing_secret.clone(), random_hex(32))
        };
        let body = json!({"token": VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"})
            .to_string();
        let delivery = Delivery::signed(&secret, body);
        let client = reqwest::Client::new();
        let answer = match delivery.request(&client, url, None).send().await {
            Ok(response) => {
                let status = response.status();
                let text = response.text().await.unwrap_or_default();
                Ok((status, text))
            }
            Err(error) => Err(error.to_string()),
        };
        let echoed = |text: &str| {
            text.trim() == challenge
                || serde_json::from_str::<Value>(text)
                    .is_ok_and(|value| value["challenge"] == challenge.as_str())
                || url::form_urlencoded::parse(text.as_bytes())
                    .any(|(key, value)| key == "challenge" && value == challenge.as_str())
        };
        let mut state = self.shared.lock();
        match answer {
            Ok((status, text)) if status == StatusCode::OK && echoed(&text) => {}
            Ok((status, text)) => state.violations.push(format!(
                "the url_verification request was answered {status} {text:?}, not HTTP 200 with \
                 the challenge {challenge:?}"
            )),
            Err(error) => state.violations.push(format!(
                "the url_verification request got no answer within 3 s: {error}"
            )),
        }
        state.events_url = Some(url.to_owned());
        let waiting: Vec<Value> = state
            .pending
            .drain(..)
            .map(|envelope| envelope.payload)
            .collect();
        state.events_queue.extend(waiting);
        let task = tokio::spawn(deliver_events(
            Arc::clone(&self.shared),
            url.to_owned(),
            client,
        ));
        if let Some(old) = state.events_task.replace(task.abort_handle()) {
            old.abort();
        }
        drop(state);
        self.shared.wake();
    }

    /// Events API mode: POSTs the last event delivered again, with `X-Slack-Retry-Num: 1` and
    /// `X-Slack-Retry-Reason: http_timeout`, as Slack does when it did not see the answer
    /// (api.slack.com/apis/events-api#retries); returns the HTTP status the app answered, 0 for
    /// none within 3 s. Panics when no event was delivered yet.
    pub(crate) async fn redeliver_last_event(&self) -> u16 {
        let (delivery, url) = {
            let state = self.shared.lock();
            let delivery = state
                .last_event
                .clone()
                .unwrap_or_else(|| panic!("no event was delivered over the Events API yet"));
            (delivery, state.events_url.clone().unwrap_or_default())
        };
        let client = reqwest::Client::new();
        post_event(
            &self.shared,
            &client,
            &url,
            &delivery,
            Some((1, "http_timeout")),
        )
        .await
        .unwrap_or_default()
    }

    /// Every request body, URL query and header value the stand-in received (and every
    /// WebSocket message from the app), concatenated, except the values of `Authorization`
    /// headers: for tests that check a credential only travels in Authorization headers.
    pub(crate) fn request_log_without_authorization(&self) -> String {
        self.shared.lock().request_log.clone()
    }

    /// Calls of the Web API method `method` received, accepted or not.
    pub(crate) fn calls(&self, method: &str) -> usize {
        self.shared.lock().calls.get(method).copied().unwrap_or(0)
    }
}

impl Drop for SlackApi {
    fn drop(&mut self) {
        {
            let mut state = self.shared.lock();
            state.closed = true;
            for socket in state.sockets.values() {
                let _ = socket.tx.send(Outgoing::Drop);
            }
            if let Some(task) = state.events_task.take() {
                task.abort();
            }
        }
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// The state, and the wake-ups of the Socket Mode dispatcher and the Events API delivery.
struct Shared {
    state: Mutex<State>,
    dispatch: Notify,
    events: Notify,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the dispatcher and the delivery after events were queued or a connection changed.
    fn wake(&self) {
        self.dispatch.notify_one();
        self.events.notify_one();
    }
}

/// The kind of a conversation (api.slack.com/types/conversation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A direct message with the bot (`is_im`).
    Im,
    /// A public channel.
    Public,
    /// A private channel (`is_private`).
    Private,
}

impl Kind {
    /// The `channel_type` of its message events: api.slack.com/events/message ("channel_type:
    /// ... im, channel, group").
    fn channel_type(self) -> &'static str {
        match self {
            Kind::Im => "im",
            Kind::Public => "channel",
            Kind::Private => "group",
        }
    }
}

/// A message the stand-in keeps.
#[derive(Clone, Debug)]
struct Stored {
    user: String,
    text: String,
    thread_ts: Option<String>,
    from_bot: bool,
}

/// A conversation the bot is in.
#[derive(Debug)]
struct Channel {
    kind: Kind,
    /// The name; for a DM, the other member's id.
    name: String,
    members: BTreeSet<String>,
    /// `ts` → message.
    messages: BTreeMap<String, Stored>,
}

impl Channel {
    fn new(kind: Kind, name: &str) -> Self {
        Channel {
            kind,
            name: name.to_owned(),
            members: BTreeSet::new(),
            messages: BTreeMap::new(),
        }
    }

    /// Whether `ts` is a top-level message here (one that can be replied to).
    fn is_parent(&self, ts: &str) -> bool {
        self.messages.get(ts).is_some_and(|message| {
            message
                .thread_ts
                .as_deref()
                .is_none_or(|thread| thread == ts)
        })
    }
}

/// A file a person shared, served at its `url_private`.
#[derive(Debug)]
struct ServedFile {
    mimetype: String,
    bytes: Vec<u8>,
}

/// A file announced by files.getUploadURLExternal.
#[derive(Debug)]
struct PendingUpload {
    name: String,
    length: u64,
    /// The upload URL's secret part.
    token: String,
    bytes: Option<Vec<u8>>,
    completed: bool,
}

/// A Socket Mode envelope (api.slack.com/apis/socket-mode#events).
#[derive(Clone, Debug)]
struct Envelope {
    id: String,
    payload: Value,
    retry_attempt: u32,
    retry_reason: &'static str,
}

impl Envelope {
    fn json(&self) -> Value {
        json!({
            "envelope_id": self.id,
            "payload": self.payload,
            "type": "events_api",
            "accept_response_payload": false,
            "retry_attempt": self.retry_attempt,
            "retry_reason": self.retry_reason,
        })
    }

    /// `event.type event_id`, for violations.
    fn describe(&self) -> String {
        format!(
            "{} {}",
            self.payload["event"]["type"].as_str().unwrap_or_default(),
            self.payload["event_id"].as_str().unwrap_or_default()
        )
    }
}

/// An envelope sent and not yet acknowledged.
#[derive(Clone, Debug)]
struct InFlight {
    envelope: Envelope,
    socket: u64,
    deadline: Instant,
}

/// What a connection's task is told to do.
#[derive(Debug)]
enum Outgoing {
    Text(String),
    Refresh,
    Drop,
}

/// An open Socket Mode connection.
#[derive(Debug)]
struct Socket {
    tx: mpsc::UnboundedSender<Outgoing>,
    /// Told to disconnect: gets no more envelopes and does not count as open.
    closing: bool,
}

/// The token a Web API call came with (api.slack.com/authentication/token-types).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TokenType {
    Bot,
    App,
}

/// Everything the stand-in knows.
struct State {
    base: String,
    bot_token: String,
    app_token: String,
    signing_secret: String,
    bot: SlackUser,
    bot_id: String,
    closed: bool,
    next_id: u64,
    /// The last `ts` handed out, in microseconds.
    last_ts: u64,
    users: BTreeMap<String, SlackUser>,
    channels: BTreeMap<String, Channel>,
    posted: Vec<Posted>,
    uploaded: Vec<Uploaded>,
    calls: HashMap<String, usize>,
    /// Method → (calls still to answer 429, Retry-After seconds).
    limit_next: HashMap<String, (usize, u64)>,
    /// Method → when its last 429's Retry-After elapses.
    retry_until: HashMap<String, Instant>,
    violations: Vec<String>,
    request_log: String,
    /// `url_private` and `url_private_download` paths (after `/files-pri/`) → file.
    served: HashMap<String, Arc<ServedFile>>,
    /// File id → an upload announced by files.getUploadURLExternal.
    uploads: BTreeMap<String, PendingUpload>,
    /// Unused apps.connections.open tickets.
    tickets: HashSet<String>,
    sockets: BTreeMap<u64, Socket>,
    next_socket: u64,
    opened: usize,
    next_pick: usize,
    /// Envelopes waiting for a connection.
    pending: VecDeque<Envelope>,
    /// Envelopes sent and not acknowledged, in the order sent.
    in_flight: Vec<InFlight>,
    /// Every envelope id ever sent.
    sent_envelopes: HashSet<String>,
    /// The Request URL once [`SlackApi::use_events_api`] was called.
    events_url: Option<String>,
    events_queue: VecDeque<Value>,
    events_task: Option<AbortHandle>,
    last_event: Option<Delivery>,
}

impl State {
    fn new(
        base: &str,
        bot_token: &str,
        app_token: &str,
        signing_secret: &str,
        bot: SlackUser,
    ) -> Self {
        let bot_id = format!("B{}", &bot.id[1..]);
        let mut users = BTreeMap::new();
        users.insert(bot.id.clone(), bot.clone());
        State {
            base: base.to_owned(),
            bot_token: bot_token.to_owned(),
            app_token: app_token.to_owned(),
            signing_secret: signing_secret.to_owned(),
            bot,
            bot_id,
            closed: false,
            next_id: 0,
            last_ts: 0,
            users,
            channels: BTreeMap::new(),
            posted: Vec::new(),
            uploaded: Vec::new(),
            calls: HashMap::new(),
            limit_next: HashMap::new(),
            retry_until: HashMap::new(),
            violations: Vec::new(),
            request_log: String::new(),
            served: HashMap::new(),
            uploads: BTreeMap::new(),
            tickets: HashSet::new(),
            sockets: BTreeMap::new(),
            next_socket: 0,
            opened: 0,
            next_pick: 0,
            pending: VecDeque::new(),
            in_flight: Vec::new(),
            sent_envelopes: HashSet::new(),
            events_url: None,
            events_queue: VecDeque::new(),
            events_task: None,
            last_event: None,
        }
    }

    /// A new id: `prefix` and upper-case hexadecimal digits, as Slack's ids are upper-case
    /// alphanumerics (api.slack.com/changelog/2016-08-11-user-id-format-changes).
    fn new_id(&mut self, prefix: &str) -> String {
        self.next_id += 1;
        format!("{prefix}{:08X}", self.next_id)
    }

    /// A new message `ts`: the current time in seconds with six decimals, unique and increasing
    /// in the workspace (api.slack.com/messaging/retrieving#individual_messages: "ts ... unique
    /// per channel").
    fn new_ts(&mut self) -> String {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| u64::try_from(elapsed.as_micros()).unwrap_or(0));
        let micros = now.max(self.last_ts + 1);
        self.last_ts = micros;
        format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
    }

    fn log(&mut self, text: &str) {
        self.request_log.push_str(text);
        self.request_log.push('\n');
    }

    fn log_request(&mut self, uri: &Uri, headers: &HeaderMap, body: &[u8]) {
        if let Some(query) = uri.query() {
            self.log(query);
        }
        for (name, value) in headers {
            if name != header::AUTHORIZATION {
                self.log(&String::from_utf8_lossy(value.as_bytes()));
            }
        }
        self.log(&String::from_utf8_lossy(body));
    }

    fn open_dm(&mut self, user: &SlackUser) -> String {
        self.users.insert(user.id.clone(), user.clone());
        if let Some((id, _)) = self
            .channels
            .iter()
            .find(|(_, channel)| channel.kind == Kind::Im && channel.name == user.id)
        {
            return id.clone();
        }
        let id = self.new_id("D");
        let mut channel = Channel::new(Kind::Im, &user.id);
        channel.members.insert(user.id.clone());
        channel.members.insert(self.bot.id.clone());
        self.channels.insert(id.clone(), channel);
        id
    }

    /// Stores a person's file and returns its File object (api.slack.com/types/file).
    fn user_file(&mut self, user: &SlackUser, name: &str, mimetype: &str, bytes: Vec<u8>) -> Value {
        let id = self.new_id("F");
        let encoded = percent_encode(name);
        let private = format!("{TEAM_ID}-{id}/{encoded}");
        let download = format!("{TEAM_ID}-{id}/download/{encoded}");
        let size = bytes.len();
        let file = Arc::new(ServedFile {
            mimetype: mimetype.to_owned(),
            bytes,
        });
        self.served.insert(private.clone(), Arc::clone(&file));
        self.served.insert(download.clone(), file);
        let filetype = name
            .rsplit_once('.')
            .map_or("binary", |(_, extension)| extension);
        json!({
            "id": id,
            "created": unix_now(),
            "timestamp": unix_now(),
            "name": name,
            "title": name,
            "mimetype": mimetype,
            "filetype": filetype,
            "pretty_type": filetype.to_ascii_uppercase(),
            "user": user.id,
            "user_team": TEAM_ID,
            "editable": false,
            "size": size,
            "mode": "hosted",
            "is_external": false,
            "external_type": "",
            "is_public": false,
            "public_url_shared": false,
            "display_as_bot": false,
            "username": "",
            "url_private": format!("{}/files-pri/{private}", self.base),
            "url_private_download": format!("{}/files-pri/{download}", self.base),
            "permalink": format!("https://gatehouse-tests.slack.com/files/{}/{id}/{encoded}", user.id),
            "has_rich_preview": false,
            "file_access": "visible",
        })
    }

    /// See [`SlackApi::user_writes`].
    fn user_message(
        &mut self,
        channel_id: &str,
        user: &SlackUser,
        text: &str,
        thread_ts: Option<&str>,
        files: Option<Value>,
    ) -> String {
        self.users.insert(user.id.clone(), user.clone());
        let (kind, parent_user) = {
            let channel = self
                .channels
                .get(channel_id)
                .unwrap_or_else(|| panic!("there is no channel {channel_id}"));
            assert!(
                channel.members.contains(&user.id),
                "{} is not a member of {channel_id}",
                user.id
            );
            let parent_user = thread_ts.map(|thread| {
                assert!(
                    channel.is_parent(thread),
                    "there is no top-level message {thread} in {channel_id} to reply to"
                );
                channel.messages[thread].user.clone()
            });
            (channel.kind, parent_user)
        };
        let ts = self.new_ts();
        let client_msg_id = uuid();
        let mut event = json!({
            "type": "message",
            "channel": channel_id,
            "user": user.id,
            "text": text,
            "ts": ts,
            "event_ts": ts,
            "channel_type": kind.channel_type(),
            "team": TEAM_ID,
            "client_msg_id": client_msg_id,
            "blocks": rich_text(text),
        });
        if let Some(thread) = thread_ts {
            event["thread_ts"] = json!(thread);
            event["parent_user_id"] = json!(parent_user);
        }
        if let Some(files) = &files {
            event["subtype"] = json!("file_share");
            event["files"] = files.clone();
            event["upload"] = json!(false);
            event["display_as_bot"] = json!(false);
        }
        if let Some(channel) = self.channels.get_mut(channel_id) {
            channel.messages.insert(
                ts.clone(),
                Stored {
                    user: user.id.clone(),
                    text: text.to_owned(),
                    thread_ts: thread_ts.map(str::to_owned),
                    from_bot: false,
                },
            );
        }
        self.emit(event);
        // api.slack.com/events/app_mention: "Subscribe to only the message events that mention
        // your app or bot" — in conversations the app is in, not in its DMs.
        if kind != Kind::Im && mentions(text, &self.bot.id) {
            let mut mention = json!({
                "type": "app_mention",
                "user": user.id,
                "text": text,
                "ts": ts,
                "channel": channel_id,
                "event_ts": ts,
                "team": TEAM_ID,
                "client_msg_id": client_msg_id,
                "blocks": rich_text(text),
            });
            if let Some(thread) = thread_ts {
                mention["thread_ts"] = json!(thread);
            }
            if let Some(files) = files {
                mention["files"] = files;
            }
            self.emit(mention);
        }
        ts
    }

    /// Wraps `event` in an event_callback (api.slack.com/apis/events-api#callback-field) and
    /// queues it for Socket Mode or the Events API.
    fn emit(&mut self, event: Value) {
        let event_id = self.new_id("Ev");
        let context = json!({
            "et": event["type"],
            "tid": TEAM_ID,
            "aid": APP_ID,
            "cid": event["channel"],
        });
        let event_context = format!(
            "4-{}",
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(context.to_string())
        );
        let callback = json!({
            "token": VERIFICATION_TOKEN,
            "team_id": TEAM_ID,
            "api_app_id": APP_ID,
            "event": event,
            "type": "event_callback",
            "event_id": event_id,
            "event_time": unix_now(),
            "authorizations": [{
                "enterprise_id": null,
                "team_id": TEAM_ID,
                "user_id": self.bot.id,
                "is_bot": true,
                "is_enterprise_install": false,
            }],
            "is_ext_shared_channel": false,
            "event_context": event_context,
        });
        if self.events_url.is_some() {
            self.events_queue.push_back(callback);
        } else {
            self.pending.push_back(Envelope {
                id: uuid(),
                payload: callback,
                retry_attempt: 0,
                retry_reason: "",
            });
        }
    }

    /// Socket Mode bookkeeping: envelopes not acknowledged within 3 s are kept as violations
    /// and sent again (api.slack.com/apis/socket-mode#acknowledge: "If your app doesn't
    /// acknowledge an event, Slack will retry", with `retry_attempt` counting up and
    /// `retry_reason`), up to three times; waiting envelopes go to the open connections in
    /// turn.
    fn dispatch(&mut self) {
        let now = Instant::now();
        let mut expired = Vec::new();
        self.in_flight.retain(|flight| {
            if flight.deadline <= now {
                expired.push(flight.clone());
                false
            } else {
                true
            }
        });
        for flight in expired.into_iter().rev() {
            let envelope = flight.envelope;
            let resend = envelope.retry_attempt < RETRIES;
            self.violations.push(format!(
                "the Socket Mode envelope {} ({}, retry_attempt {}) was not acknowledged within \
                 3 s{}",
                envelope.id,
                envelope.describe(),
                envelope.retry_attempt,
                if resend { "; it is sent again" } else { "" }
            ));
            if resend {
                self.pending.push_front(Envelope {
                    retry_attempt: envelope.retry_attempt + 1,
                    retry_reason: "timeout",
                    ..envelope
                });
            }
        }
        let open: Vec<u64> = self
            .sockets
            .iter()
            .filter(|(_, socket)| !socket.closing)
            .map(|(id, _)| *id)
            .collect();
        if open.is_empty() {
            return;
        }
        while let Some(envelope) = self.pending.pop_front() {
            let socket = open[self.next_pick % open.len()];
            self.next_pick += 1;
            let text = envelope.json().to_string();
            let sent = self
                .sockets
                .get(&socket)
                .is_some_and(|open| open.tx.send(Outgoing::Text(text)).is_ok());
            if !sent {
                self.pending.push_front(envelope);
                return;
            }
            self.sent_envelopes.insert(envelope.id.clone());
            self.in_flight.push(InFlight {
                envelope,
                socket,
                deadline: now + ANSWER_WITHIN,
            });
        }
    }

    /// A message the app sent on a Socket Mode connection: an acknowledgement is `{"envelope_id":
    /// …, "payload"?: …}` (api.slack.com/apis/socket-mode#acknowledge). Other messages are
    /// ignored, as Slack does.
    fn socket_message(&mut self, text: &str) {
        self.log(text);
        let Ok(message) = serde_json::from_str::<Value>(text) else {
            self.violations.push(format!(
                "the app sent a Socket Mode message that is not JSON: {text:?}"
            ));
            return;
        };
        let Some(id) = message.get("envelope_id").and_then(Value::as_str) else {
            return;
        };
        if !self.sent_envelopes.contains(id) {
            self.violations.push(format!(
                "the app acknowledged the unknown envelope_id {id:?}"
            ));
            return;
        }
        self.in_flight.retain(|flight| flight.envelope.id != id);
        self.pending.retain(|envelope| envelope.id != id);
    }

    /// Answers 429 while `method` is rate limited: api.slack.com/docs/rate-limits ("you'll
    /// receive a HTTP 429 Too Many Requests error, and a Retry-After HTTP header containing the
    /// number of seconds until you can retry").
    fn throttle(&mut self, method: &str) -> Result<(), ApiError> {
        let now = Instant::now();
        if let Some(until) = self.retry_until.get(method)
            && now < *until
        {
            let left = *until - now;
            self.violations.push(format!(
                "{method} was called {:.1} s before the Retry-After of its 429 elapsed",
                left.as_secs_f64()
            ));
            return Err(ApiError::RateLimited(left.as_secs().max(1)));
        }
        if let Some((count, seconds)) = self.limit_next.get_mut(method)
            && *count > 0
        {
            *count -= 1;
            let seconds = *seconds;
            self.retry_until
                .insert(method.to_owned(), now + Duration::from_secs(seconds));
            return Err(ApiError::RateLimited(seconds));
        }
        Ok(())
    }

    /// A Web API call: api.slack.com/web#basics ("HTTP RPC-style methods ... at
    /// https://slack.com/api/METHOD_FAMILY.method"; every answer is a JSON object whose `ok`
    /// tells success, and `error` the reason otherwise).
    fn web_api(
        &mut self,
        name: &str,
        query: Option<&str>,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Map<String, Value>, ApiError> {
        *self.calls.entry(name.to_owned()).or_default() += 1;
        let Some(method) = ApiMethod::parse(name) else {
            if UNMODELLED_METHODS.contains(&name) {
                self.violations
                    .push(format!("{name} was called; the stand-in does not model it"));
            }
            return Err(ApiError::UnknownMethod(name.to_owned()));
        };
        // api.slack.com/authentication/basics: "Tokens should be passed as an HTTP Authorization
        // header"; api.slack.com/methods/auth.test: `not_authed` ("No authentication token
        // provided"), `invalid_auth` ("Some aspect of authentication cannot be validated").
        // Stricter than Slack: a `token` argument is not accepted, only the header.
        let token = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "))
            .map(str::trim);
        let token_type = match token {
            None | Some("") => return Err(ApiError::failed("not_authed")),
            Some(token) if token == self.bot_token => TokenType::Bot,
            Some(token) if token == self.app_token => TokenType::App,
            Some(_) => return Err(ApiError::failed("invalid_auth")),
        };
        // api.slack.com/authentication/token-types#app: app-level tokens are for
        // apps.connections.open and a few app methods only; apps.connections.open takes no
        // other ("not_allowed_token_type").
        let needed = if method == ApiMethod::ConnectionsOpen {
            TokenType::App
        } else {
            TokenType::Bot
        };
        if token_type != needed {
            let (given, wanted) = match needed {
                TokenType::App => ("the bot token", "the app-level token (xapp-)"),
                TokenType::Bot => ("the app-level token", "the bot token (xoxb-)"),
            };
            self.violations
                .push(format!("{name} was called with {given}; it needs {wanted}"));
            return Err(ApiError::failed("not_allowed_token_type"));
        }
        self.throttle(name)?;
        let (params, warnings) = Params::parse(method, query, headers, body)?;
        let mut answer = match method {
            ApiMethod::AuthTest => self.auth_test(),
            ApiMethod::ConnectionsOpen => self.connections_open(),
            ApiMethod::PostMessage => self.post_message(&params)?,
            ApiMethod::Update => self.update(&params)?,
            ApiMethod::UsersInfo => self.users_info(&params)?,
            ApiMethod::GetUploadUrl => self.get_upload_url(&params)?,
            ApiMethod::CompleteUpload => self.complete_upload(&params)?,
        };
        // api.slack.com/web#responses: warnings ("missing_charset", "superfluous_charset") in
        // `warning` and `response_metadata.warnings`.
        if !warnings.is_empty() {
            answer.insert("warning".to_owned(), json!(warnings.join(",")));
            answer.insert(
                "response_metadata".to_owned(),
                json!({"warnings": warnings}),
            );
        }
        Ok(answer)
    }

    /// api.slack.com/methods/auth.test.
    fn auth_test(&self) -> Map<String, Value> {
        object(json!({
            "ok": true,
            "url": "https://gatehouse-tests.slack.com/",
            "team": TEAM_NAME,
            "user": self.bot.name,
            "team_id": TEAM_ID,
            "user_id": self.bot.id,
            "bot_id": self.bot_id,
            "is_enterprise_install": false,
        }))
    }

    /// api.slack.com/methods/apps.connections.open: a WebSocket URL with a single-use ticket
    /// (api.slack.com/apis/socket-mode#call: "the URL ... is single-use").
    fn connections_open(&mut self) -> Map<String, Value> {
        let ticket = uuid();
        self.tickets.insert(ticket.clone());
        let ws = self.base.replacen("http://", "ws://", 1);
        object(json!({
            "ok": true,
            "url": format!("{ws}/link/?ticket={ticket}&app_id={APP_ID}"),
        }))
    }

    /// The conversation a message goes to: a channel id, or a user id for the DM with that
    /// user (api.slack.com/methods/chat.postMessage#channels: "Pass a user's ID as the channel
    /// ... to post to their app home / DM"). `channel_not_found`, `not_in_channel`.
    fn target(&mut self, params: &Params) -> Result<String, ApiError> {
        let Some(channel) = params.text("channel") else {
            return Err(ApiError::failed("channel_not_found"));
        };
        let id = match self.users.get(&channel).cloned() {
            Some(user) if channel.starts_with('U') => self.open_dm(&user),
            _ => channel,
        };
        let Some(conversation) = self.channels.get(&id) else {
            return Err(ApiError::failed("channel_not_found"));
        };
        if !conversation.members.contains(&self.bot.id) {
            return Err(ApiError::failed("not_in_channel"));
        }
        Ok(id)
    }

    /// The message text: api.slack.com/methods/chat.postMessage#arg_text ("required unless
    /// blocks or attachments"; `no_text`, `msg_too_long`).
    fn message_text(params: &Params) -> Result<String, ApiError> {
        let text = params.text("text").unwrap_or_default();
        let has_blocks = ["blocks", "attachments"].into_iter().any(|key| {
            params
                .json(key)
                .is_some_and(|value| value.as_array().is_some_and(|array| !array.is_empty()))
        });
        if text.trim().is_empty() && !has_blocks {
            return Err(ApiError::failed("no_text"));
        }
        if text.chars().count() > TEXT_LIMIT {
            return Err(ApiError::failed("msg_too_long"));
        }
        Ok(text)
    }

    /// The message object of a bot message (api.slack.com/methods/chat.postMessage#examples).
    fn bot_message(&self, text: &str, ts: &str, thread_ts: Option<&str>) -> Value {
        let mut message = json!({
            "type": "message",
            "text": text,
            "user": self.bot.id,
            "ts": ts,
            "bot_id": self.bot_id,
            "app_id": APP_ID,
            "team": TEAM_ID,
            "bot_profile": {"id": self.bot_id, "app_id": APP_ID, "name": self.bot.name, "deleted": false, "team_id": TEAM_ID},
            "blocks": rich_text(text),
        });
        if let Some(thread) = thread_ts {
            message["thread_ts"] = json!(thread);
            message["parent_user_id"] = json!(self.bot.id);
        }
        message
    }

    /// api.slack.com/methods/chat.postMessage: `channel`, `text` (see [`State::message_text`]),
    /// `thread_ts` ("Provide another message's ts value to make this message a reply. Avoid
    /// using a reply's ts value; use its parent instead": `thread_not_found` for anything but a
    /// top-level message of that channel), `mrkdwn` (a boolean, default true). As Slack does,
    /// the app then receives its own message as a `message` event with `bot_id`
    /// (api.slack.com/events/message: "messages sent by apps ... include bot_id").
    fn post_message(&mut self, params: &Params) -> Result<Map<String, Value>, ApiError> {
        let channel = self.target(params)?;
        let text = State::message_text(params)?;
        let thread_ts = params.text("thread_ts");
        if let Some(thread) = &thread_ts
            && !self.channels[&channel].is_parent(thread)
        {
            return Err(ApiError::failed("thread_not_found"));
        }
        if let Some(mrkdwn) = params.text("mrkdwn")
            && !["true", "false", "1", "0"].contains(&mrkdwn.as_str())
        {
            return Err(ApiError::invalid_arguments(format!(
                "invalid boolean for mrkdwn: {mrkdwn}"
            )));
        }
        let ts = self.new_ts();
        let message = self.bot_message(&text, &ts, thread_ts.as_deref());
        let kind = self.channels[&channel].kind;
        if let Some(conversation) = self.channels.get_mut(&channel) {
            conversation.messages.insert(
                ts.clone(),
                Stored {
                    user: self.bot.id.clone(),
                    text: text.clone(),
                    thread_ts: thread_ts.clone(),
                    from_bot: true,
                },
            );
        }
        self.posted.push(Posted {
            method: "chat.postMessage".to_owned(),
            channel: channel.clone(),
            ts: ts.clone(),
            thread_ts,
            text,
        });
        let mut event = message.clone();
        event["channel"] = json!(channel);
        event["event_ts"] = json!(ts);
        event["channel_type"] = json!(kind.channel_type());
        self.emit(event);
        Ok(object(json!({
            "ok": true,
            "channel": channel,
            "ts": ts,
            "message": message,
        })))
    }

    /// api.slack.com/methods/chat.update: `channel`, `ts`, `text`; `message_not_found`,
    /// `cant_update_message` ("Authenticated user does not have permission to update this
    /// message"). The same text again is fine. The app then receives a `message_changed`
    /// event (api.slack.com/events/message/message_changed).
    fn update(&mut self, params: &Params) -> Result<Map<String, Value>, ApiError> {
        let channel = self.target(params)?;
        let text = State::message_text(params)?;
        let ts = params
            .text("ts")
            .ok_or_else(|| ApiError::failed("message_not_found"))?;
        let bot_id = self.bot.id.clone();
        let conversation = self
            .channels
            .get_mut(&channel)
            .ok_or_else(|| ApiError::failed("channel_not_found"))?;
        let kind = conversation.kind;
        let stored = conversation
            .messages
            .get_mut(&ts)
            .ok_or_else(|| ApiError::failed("message_not_found"))?;
        if !stored.from_bot || stored.user != bot_id {
            return Err(ApiError::failed("cant_update_message"));
        }
        let previous_text = std::mem::replace(&mut stored.text, text.clone());
        let thread_ts = stored.thread_ts.clone();
        let edited_ts = self.new_ts();
        let mut message = self.bot_message(&text, &ts, thread_ts.as_deref());
        message["edited"] = json!({"user": self.bot.id, "ts": edited_ts});
        self.posted.push(Posted {
            method: "chat.update".to_owned(),
            channel: channel.clone(),
            ts: ts.clone(),
            thread_ts: thread_ts.clone(),
            text: text.clone(),
        });
        let event_ts = self.new_ts();
        let event = json!({
            "type": "message",
            "subtype": "message_changed",
            "hidden": true,
            "channel": channel,
            "ts": event_ts,
            "event_ts": event_ts,
            "channel_type": kind.channel_type(),
            "message": message,
            "previous_message": self.bot_message(&previous_text, &ts, thread_ts.as_deref()),
        });
        self.emit(event);
        Ok(object(json!({
            "ok": true,
            "channel": channel,
            "ts": ts,
            "text": text,
            "message": message,
        })))
    }

    /// api.slack.com/methods/users.info: `user`; `user_not_found`.
    fn users_info(&self, params: &Params) -> Result<Map<String, Value>, ApiError> {
        let id = params.required("user")?;
        let user = self
            .users
            .get(&id)
            .ok_or_else(|| ApiError::failed("user_not_found"))?;
        let is_bot = user.id == self.bot.id;
        let mut profile = json!({
            "display_name": user.name,
            "real_name": user.name,
            "team": TEAM_ID,
        });
        if is_bot {
            profile["bot_id"] = json!(self.bot_id);
        }
        Ok(object(json!({
            "ok": true,
            "user": {
                "id": user.id,
                "team_id": TEAM_ID,
                "name": user.name,
                "deleted": false,
                "real_name": user.name,
                "is_bot": is_bot,
                "is_app_user": false,
                "profile": profile,
            },
        })))
    }

    /// api.slack.com/methods/files.getUploadURLExternal: `filename` and `length` ("Size in
    /// bytes of the file being uploaded") are required; answers an `upload_url` and a
    /// `file_id`.
    fn get_upload_url(&mut self, params: &Params) -> Result<Map<String, Value>, ApiError> {
        let name = params.required("filename")?;
        let length = params.required("length")?;
        let length = length
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|length| (1..=UPLOAD_LIMIT).contains(length))
            .ok_or_else(|| {
                ApiError::invalid_arguments(format!(
                    "length must be a positive integer of at most 1 GB, not {length:?}"
                ))
            })?;
        let file_id = self.new_id("F");
        let token = random_hex(32);
        let upload_url = format!("{}/upload/v1/{token}", self.base);
        self.uploads.insert(
            file_id.clone(),
            PendingUpload {
                name,
                length,
                token,
                bytes: None,
                completed: false,
            },
        );
        Ok(object(json!({
            "ok": true,
            "upload_url": upload_url,
            "file_id": file_id,
        })))
    }

    /// api.slack.com/methods/files.completeUploadExternal: `files` ("Array of file ids and
    /// their corresponding (optional) titles", a JSON string in a form), `channel_id` or
    /// `channels` (comma-separated) to share them in, `thread_ts` ("Provide another message's
    /// ts value to upload this file as a reply ... make sure to provide only one channel when
    /// using thread_ts"), `initial_comment`. `file_not_found` for an id never announced (or
    /// already completed), `file_uploads_incomplete` for one whose bytes were not uploaded.
    fn complete_upload(&mut self, params: &Params) -> Result<Map<String, Value>, ApiError> {
        let Some(files) = params.json("files") else {
            return Err(ApiError::invalid_arguments(
                "missing required field: files (a JSON array of {id, title?})",
            ));
        };
        let Some(files) = files.as_array().filter(|files| !files.is_empty()) else {
            return Err(ApiError::invalid_arguments(
                "files must be a non-empty array",
            ));
        };
        let mut ids = Vec::new();
        for file in files {
            let Some(id) = file.get("id").and_then(Value::as_str) else {
                return Err(ApiError::invalid_arguments("every file needs an id"));
            };
            let title = file.get("title").and_then(Value::as_str).map(str::to_owned);
            match self.uploads.get(id) {
                None => return Err(ApiError::failed("file_not_found")),
                Some(upload) if upload.completed => {
                    return Err(ApiError::failed("file_not_found"));
                }
                Some(upload) if upload.bytes.is_none() => {
                    return Err(ApiError::failed("file_uploads_incomplete"));
                }
                Some(_) => ids.push((id.to_owned(), title)),
            }
        }
        let mut channels = Vec::new();
        if let Some(channel) = params.text("channel_id") {
            channels.push(channel);
        }
        if let Some(list) = params.text("channels") {
            channels.extend(
                list.split(',')
                    .map(str::trim)
                    .filter(|channel| !channel.is_empty())
                    .map(str::to_owned),
            );
        }
        let thread_ts = params.text("thread_ts");
        if thread_ts.is_some() && channels.len() != 1 {
            return Err(ApiError::invalid_arguments(
                "thread_ts needs exactly one channel",
            ));
        }
        let mut targets = Vec::new();
        for channel in channels {
            let mut single = Params::default();
            single.0.insert("channel".to_owned(), json!(channel));
            targets.push(self.target(&single)?);
        }
        if let (Some(thread), [channel]) = (&thread_ts, targets.as_slice())
            && !self.channels[channel].is_parent(thread)
        {
            return Err(ApiError::failed("thread_not_found"));
        }
        let mut answered = Vec::new();
        for (id, title) in ids {
            let Some(upload) = self.uploads.get_mut(&id) else {
                continue;
            };
            upload.completed = true;
            let bytes = upload.bytes.clone().unwrap_or_default();
            let name = upload.name.clone();
            for channel in &targets {
                self.uploaded.push(Uploaded {
                    channel: channel.clone(),
                    thread_ts: thread_ts.clone(),
                    name: name.clone(),
                    bytes: bytes.clone(),
                });
            }
            if targets.is_empty() {
                self.uploaded.push(Uploaded {
                    channel: String::new(),
                    thread_ts: None,
                    name: name.clone(),
                    bytes: bytes.clone(),
                });
            }
            answered.push(json!({
                "id": id,
                "name": name,
                "title": title.unwrap_or_else(|| name.clone()),
                "size": bytes.len(),
                "channels": targets,
                "user": self.bot.id,
            }));
        }
        Ok(object(json!({"ok": true, "files": answered})))
    }
}

/// The methods the stand-in models.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ApiMethod {
    AuthTest,
    ConnectionsOpen,
    PostMessage,
    Update,
    UsersInfo,
    GetUploadUrl,
    CompleteUpload,
}

impl ApiMethod {
    fn parse(name: &str) -> Option<Self> {
        Some(match name {
            "auth.test" => ApiMethod::AuthTest,
            "apps.connections.open" => ApiMethod::ConnectionsOpen,
            "chat.postMessage" => ApiMethod::PostMessage,
            "chat.update" => ApiMethod::Update,
            "users.info" => ApiMethod::UsersInfo,
            "files.getUploadURLExternal" => ApiMethod::GetUploadUrl,
            "files.completeUploadExternal" => ApiMethod::CompleteUpload,
            _ => return None,
        })
    }

    /// Whether the method takes a JSON body: the "Content types" of its page. chat.postMessage,
    /// chat.update and files.completeUploadExternal list `application/json`;
    /// files.getUploadURLExternal, users.info, auth.test and apps.connections.open list only
    /// `application/x-www-form-urlencoded` (api.slack.com/web#posting_json: "JSON-encoded
    /// bodies ... for write methods"). The real service ignores a JSON body of the others, so
    /// their required arguments are then missing (`invalid_arguments`).
    fn accepts_json(self) -> bool {
        matches!(
            self,
            ApiMethod::PostMessage | ApiMethod::Update | ApiMethod::CompleteUpload
        )
    }
}

/// An unsuccessful Web API answer.
#[derive(Debug)]
enum ApiError {
    /// HTTP 200 `{"ok": false, "error": …}` (api.slack.com/web#evaluating_responses), with
    /// `response_metadata.messages` when there is a detail.
    Failed {
        error: &'static str,
        detail: Option<String>,
    },
    /// HTTP 200 `{"ok": false, "error": "unknown_method", "req_method": …}`.
    UnknownMethod(String),
    /// HTTP 429 with `Retry-After` (api.slack.com/docs/rate-limits).
    RateLimited(u64),
}

impl ApiError {
    fn failed(error: &'static str) -> Self {
        ApiError::Failed {
            error,
            detail: None,
        }
    }

    /// `invalid_arguments` with a `[ERROR] …` message, as Slack's newer methods answer a
    /// missing or malformed argument.
    fn invalid_arguments(detail: impl Display) -> Self {
        ApiError::Failed {
            error: "invalid_arguments",
            detail: Some(format!("[ERROR] {detail}")),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        match self {
            ApiError::Failed { error, detail } => {
                let mut body = json!({"ok": false, "error": error});
                if let Some(detail) = detail {
                    body["response_metadata"] = json!({"messages": [detail]});
                }
                json_response(StatusCode::OK, &body)
            }
            ApiError::UnknownMethod(name) => json_response(
                StatusCode::OK,
                &json!({"ok": false, "error": "unknown_method", "req_method": name}),
            ),
            ApiError::RateLimited(seconds) => {
                let mut response = json_response(
                    StatusCode::TOO_MANY_REQUESTS,
                    &json!({"ok": false, "error": "ratelimited"}),
                );
                if let Ok(value) = seconds.to_string().parse() {
                    response.headers_mut().insert(header::RETRY_AFTER, value);
                }
                response
            }
        }
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "application/json; charset=utf-8")],
        body.to_string(),
    )
        .into_response()
}

/// The arguments of a call, from the URL query and the body.
#[derive(Debug, Default)]
struct Params(HashMap<String, Value>);

impl Params {
    /// api.slack.com/web#posting_json and api.slack.com/web#basics: arguments come as
    /// `application/x-www-form-urlencoded` (the body, or the query string of a GET) or, for
    /// methods that take it, as a JSON body with `Content-Type: application/json`. A JSON
    /// body sent with another Content-Type is not understood (`invalid_arguments`);
    /// `application/json` without `charset` earns the `missing_charset` warning, a form with a
    /// `charset` the `superfluous_charset` one (api.slack.com/web#responses).
    fn parse(
        method: ApiMethod,
        query: Option<&str>,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<(Params, Vec<&'static str>), ApiError> {
        let mut params = Params::default();
        let mut warnings = Vec::new();
        if let Some(query) = query {
            params.add_form(query.as_bytes());
        }
        if body.iter().all(u8::is_ascii_whitespace) {
            return Ok((params, warnings));
        }
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mime = content_type.split(';').next().unwrap_or_default().trim();
        let charset = content_type.contains("charset=");
        let looks_like_json = body
            .iter()
            .find(|byte| !byte.is_ascii_whitespace())
            .is_some_and(|byte| *byte == b'{' || *byte == b'[');
        match mime {
            "application/json" => {
                if !charset {
                    warnings.push("missing_charset");
                }
                if !method.accepts_json() {
                    return Ok((params, warnings));
                }
                let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(body) else {
                    return Err(ApiError::failed("invalid_json"));
                };
                params.0.extend(object);
            }
            "application/x-www-form-urlencoded" | "" if looks_like_json => {
                return Err(ApiError::invalid_arguments(format!(
                    "a JSON body needs Content-Type: application/json, not {content_type:?}"
                )));
            }
            "application/x-www-form-urlencoded" => {
                if charset {
                    warnings.push("superfluous_charset");
                }
                params.add_form(body);
            }
            "" => params.add_form(body),
            _ => return Err(ApiError::failed("invalid_form_data")),
        }
        Ok((params, warnings))
    }

    fn add_form(&mut self, form: &[u8]) {
        for (key, value) in url::form_urlencoded::parse(form) {
            self.0.insert(key.into_owned(), json!(value));
        }
    }

    /// A text argument (a JSON number or boolean as its text); an empty one counts as absent.
    fn text(&self, key: &str) -> Option<String> {
        match self.0.get(key)? {
            Value::String(text) if text.is_empty() => None,
            Value::String(text) => Some(text.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    }

    /// A required text argument; `invalid_arguments` when it is missing.
    fn required(&self, key: &str) -> Result<String, ApiError> {
        self.text(key)
            .ok_or_else(|| ApiError::invalid_arguments(format!("missing required field: {key}")))
    }

    /// A JSON argument: a value in a JSON body, or JSON text in a form.
    fn json(&self, key: &str) -> Option<Value> {
        match self.0.get(key)? {
            Value::String(text) => serde_json::from_str(text).ok(),
            other => Some(other.clone()),
        }
    }
}

/// Every HTTP request but the Socket Mode link: the Web API at `/api/{method}`, the upload URLs
/// and the files' private URLs.
async fn handle(
    Extract(shared): Extract<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let Ok(body) = axum::body::to_bytes(body, REQUEST_LIMIT).await else {
        return (StatusCode::PAYLOAD_TOO_LARGE, "Request Entity Too Large").into_response();
    };
    shared.lock().log_request(&uri, &headers, &body);
    let path = uri.path();
    if let Some(name) = path.strip_prefix("/api/") {
        let result = shared.lock().web_api(name, uri.query(), &headers, &body);
        shared.wake();
        return match result {
            Ok(answer) => json_response(StatusCode::OK, &Value::Object(answer)),
            Err(error) => error.into_response(),
        };
    }
    if let Some(token) = path.strip_prefix("/upload/v1/") {
        return upload(&shared, token, &headers, &body);
    }
    if let Some(rest) = path.strip_prefix("/files-pri/") {
        return private_file(&shared, rest, &headers);
    }
    (StatusCode::NOT_FOUND, "Not Found").into_response()
}

/// `POST {upload_url}`: api.slack.com/methods/files.getUploadURLExternal ("Upload a file by
/// making a POST request to the upload URL ... raw bytes or multipart form data"). Answers HTTP
/// 200 `OK - {length}`. The URL takes one upload; the byte count must equal the `length`
/// announced, else the upload is refused with 400 and kept as a violation.
fn upload(shared: &Shared, token: &str, headers: &HeaderMap, body: &[u8]) -> Response {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let bytes = if content_type
        .to_ascii_lowercase()
        .starts_with("multipart/form-data")
    {
        match multipart_file(content_type, body) {
            Some(bytes) => bytes,
            None => {
                return (StatusCode::BAD_REQUEST, "malformed multipart body").into_response();
            }
        }
    } else {
        body.to_vec()
    };
    let mut state = shared.lock();
    let Some((file_id, upload)) = state
        .uploads
        .iter_mut()
        .find(|(_, upload)| upload.token == token && upload.bytes.is_none())
    else {
        return (StatusCode::NOT_FOUND, "Not Found").into_response();
    };
    let length = upload.length;
    if bytes.len() as u64 != length {
        let message = format!(
            "the upload of {file_id} ({}) sent {} bytes, not the {length} announced to \
             files.getUploadURLExternal",
            upload.name,
            bytes.len()
        );
        state.violations.push(message);
        return (StatusCode::BAD_REQUEST, "length mismatch").into_response();
    }
    upload.bytes = Some(bytes);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        format!("OK - {length}"),
    )
        .into_response()
}

/// The bytes of the file part of a multipart/form-data body (RFC 7578): the part with a
/// `filename`, or the only part.
fn multipart_file(content_type: &str, body: &[u8]) -> Option<Vec<u8>> {
    let boundary = content_type.split(';').skip(1).find_map(|parameter| {
        let (key, value) = parameter.split_once('=')?;
        key.trim()
            .eq_ignore_ascii_case("boundary")
            .then(|| value.trim().trim_matches('"').to_owned())
    })?;
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let mut rest = &body[find(body, delimiter.as_bytes())? + delimiter.len()..];
    while !rest.starts_with(b"--") {
        rest = rest.strip_prefix(b"\r\n")?;
        let head_end = find(rest, b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&rest[..head_end]).to_ascii_lowercase();
        rest = &rest[head_end + 4..];
        let closing = format!("\r\n{delimiter}");
        let end = find(rest, closing.as_bytes())?;
        parts.push((head.contains("filename="), rest[..end].to_vec()));
        rest = &rest[end + closing.len()..];
    }
    let only = parts.len() == 1;
    parts
        .into_iter()
        .find(|(has_name, _)| *has_name || only)
        .map(|(_, bytes)| bytes)
}

/// The first position of `needle` in `haystack`.
fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack
        .windows(needle.len())
        .position(|window| window == needle)
}

/// `GET url_private` / `url_private_download`: api.slack.com/types/file#authentication ("you
/// must provide an Authorization header with your bot or user token as a bearer token"). Without
/// it (or with another token) the real service answers a sign-in page; the stand-in answers 403
/// with an HTML page, so JSON parsing fails as it would.
fn private_file(shared: &Shared, rest: &str, headers: &HeaderMap) -> Response {
    let state = shared.lock();
    let authorized = headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.strip_prefix("Bearer "))
        .is_some_and(|token| token.trim() == state.bot_token);
    if !authorized {
        return (
            StatusCode::FORBIDDEN,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            "<!DOCTYPE html><html><head><title>Slack</title></head><body>Sign in to \
             Slack</body></html>",
        )
            .into_response();
    }
    match state.served.get(rest) {
        Some(file) => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, file.mimetype.clone())],
            file.bytes.clone(),
        )
            .into_response(),
        None => (StatusCode::NOT_FOUND, "Not Found").into_response(),
    }
}

/// The Socket Mode WebSocket, at the URL apps.connections.open answered
/// (api.slack.com/apis/socket-mode#connect). A ticket is good for one connection; an unknown
/// or used one is refused with 400 before the upgrade.
async fn link(
    Extract(shared): Extract<Arc<Shared>>,
    uri: Uri,
    headers: HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Response {
    let valid = {
        let mut state = shared.lock();
        state.log_request(&uri, &headers, &[]);
        let ticket = url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
            .find(|(key, _)| key == "ticket")
            .map(|(_, value)| value.into_owned())
            .unwrap_or_default();
        state.tickets.remove(&ticket)
    };
    if !valid {
        return (StatusCode::BAD_REQUEST, "invalid or used ticket").into_response();
    }
    upgrade.on_upgrade(move |socket| run_socket(shared, socket))
}

/// One Socket Mode connection: the `hello` (api.slack.com/apis/socket-mode#connect: `{"type":
/// "hello", "num_connections", "debug_info", "connection_info": {"app_id"}}`), then the
/// envelopes the dispatcher hands it and the app's acknowledgements. WebSocket pings are
/// answered by the WebSocket layer.
async fn run_socket(shared: Arc<Shared>, socket: WebSocket) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let id = {
        let mut state = shared.lock();
        state.next_socket += 1;
        let id = state.next_socket;
        let open = state
            .sockets
            .values()
            .filter(|socket| !socket.closing)
            .count();
        if open > 0 {
            state.violations.push(format!(
                "a Socket Mode connection was opened while {open} other one(s) were open"
            ));
        }
        state.opened += 1;
        let hello = json!({
            "type": "hello",
            "num_connections": state.sockets.len() + 1,
            "debug_info": {
                "host": format!("applink-stand-in-{id}"),
                "build_number": 1,
                "approximate_connection_time": 18_060,
            },
            "connection_info": {"app_id": APP_ID},
        });
        let _ = tx.send(Outgoing::Text(hello.to_string()));
        state.sockets.insert(id, Socket { tx, closing: false });
        id
    };
    shared.dispatch.notify_one();
    let (mut sink, mut stream) = socket.split();
    let mut close_at: Option<tokio::time::Instant> = None;
    let closed_by_stand_in = loop {
        let close_timer = async move {
            match close_at {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        // Frames first: an acknowledgement that arrived counts before a drop or a close.
        tokio::select! {
            biased;
            frame = stream.next() => match frame {
                Some(Ok(WsMessage::Text(text))) => shared.lock().socket_message(text.as_str()),
                Some(Ok(WsMessage::Close(_)) | Err(_)) | None => break false,
                Some(Ok(_)) => {}
            },
            command = rx.recv() => match command {
                Some(Outgoing::Text(text)) => {
                    if sink.send(WsMessage::Text(text.into())).await.is_err() {
                        break false;
                    }
                }
                Some(Outgoing::Refresh) => {
                    let disconnect = json!({
                        "type": "disconnect",
                        "reason": "refresh_requested",
                        "debug_info": {"host": format!("applink-stand-in-{id}")},
                    });
                    if sink.send(WsMessage::Text(disconnect.to_string().into())).await.is_err() {
                        break false;
                    }
                    close_at = Some(tokio::time::Instant::now() + REFRESH_GRACE);
                }
                Some(Outgoing::Drop) | None => {
                    // What the app sent before the drop reached the stand-in still counts.
                    while let Some(Some(Ok(frame))) = stream.next().now_or_never() {
                        if let WsMessage::Text(text) = frame {
                            shared.lock().socket_message(text.as_str());
                        }
                    }
                    break true;
                }
            },
            () = close_timer => {
                let _ = sink.send(WsMessage::Close(None)).await;
                break true;
            }
        }
    };
    {
        let mut state = shared.lock();
        state.sockets.remove(&id);
        if closed_by_stand_in {
            // Envelopes the app had no chance to acknowledge go out again, as they would.
            let mut requeued = Vec::new();
            state.in_flight.retain(|flight| {
                if flight.socket == id {
                    requeued.push(flight.envelope.clone());
                    false
                } else {
                    true
                }
            });
            for envelope in requeued.into_iter().rev() {
                state.pending.push_front(envelope);
            }
        }
    }
    shared.dispatch.notify_one();
}

/// The Socket Mode dispatcher: see [`State::dispatch`].
async fn dispatch(shared: Arc<Shared>) {
    loop {
        {
            let mut state = shared.lock();
            if state.closed {
                return;
            }
            state.dispatch();
        }
        tokio::select! {
            () = shared.dispatch.notified() => {}
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

/// A signed Events API request body (api.slack.com/authentication/verifying-requests-from-slack).
#[derive(Clone, Debug)]
struct Delivery {
    body: String,
    timestamp: String,
    signature: String,
}

impl Delivery {
    fn signed(secret: &str, body: String) -> Self {
        let timestamp = unix_now().to_string();
        let signature = slack_signature(secret, &timestamp, &body);
        Delivery {
            body,
            timestamp,
            signature,
        }
    }

    fn request(
        &self,
        client: &reqwest::Client,
        url: &str,
        retry: Option<(u32, &str)>,
    ) -> reqwest::RequestBuilder {
        let mut request = client
            .post(url)
            .header(header::CONTENT_TYPE, "application/json")
            .header(
                header::USER_AGENT,
                "Slackbot 1.0 (+https://api.slack.com/robots)",
            )
            .header("X-Slack-Request-Timestamp", &self.timestamp)
            .header("X-Slack-Signature", &self.signature)
            .body(self.body.clone())
            .timeout(ANSWER_WITHIN);
        if let Some((number, reason)) = retry {
            request = request
                .header("X-Slack-Retry-Num", number.to_string())
                .header("X-Slack-Retry-Reason", reason);
        }
        request
    }
}

/// `v0=hex(HMAC-SHA256(secret, "v0:{timestamp}:{body}"))`:
/// api.slack.com/authentication/verifying-requests-from-slack.
fn slack_signature(secret: &str, timestamp: &str, body: &str) -> String {
    let base = format!("v0:{timestamp}:{body}");
    format!(
        "v0={}",
        hex::encode(crate::suite::channels::hmac_sha256(
            secret.as_bytes(),
            base.as_bytes()
        ))
    )
}

/// POSTs one event request; `Ok(status)` when answered in time, else the retry reason.
async fn post_event(
    shared: &Shared,
    client: &reqwest::Client,
    url: &str,
    delivery: &Delivery,
    retry: Option<(u32, &str)>,
) -> Result<u16, &'static str> {
    match delivery.request(client, url, retry).send().await {
        Ok(response) => Ok(response.status().as_u16()),
        Err(error) if error.is_timeout() => {
            let event_id = serde_json::from_str::<Value>(&delivery.body)
                .ok()
                .and_then(|body| body["event_id"].as_str().map(str::to_owned))
                .unwrap_or_default();
            shared.lock().violations.push(format!(
                "the Events API request for {event_id} was not answered within 3 s"
            ));
            Err("http_timeout")
        }
        Err(_) => Err("connection_failed"),
    }
}

/// The Events API delivery (see [`SlackApi::use_events_api`]): first attempts in order, each
/// failed one retried in its own task.
async fn deliver_events(shared: Arc<Shared>, url: String, client: reqwest::Client) {
    loop {
        let next = {
            let mut state = shared.lock();
            if state.closed {
                return;
            }
            let secret = state.signing_secret.clone();
            state
                .events_queue
                .pop_front()
                .map(|event| Delivery::signed(&secret, event.to_string()))
        };
        let Some(delivery) = next else {
            tokio::select! {
                () = shared.events.notified() => {}
                () = tokio::time::sleep(Duration::from_millis(100)) => {}
            }
            continue;
        };
        shared.lock().last_event = Some(delivery.clone());
        let reason = match post_event(&shared, &client, &url, &delivery, None).await {
            Ok(status) if (200..300).contains(&status) => continue,
            Ok(_) => "http_error",
            Err(reason) => reason,
        };
        tokio::spawn(retry_event(
            Arc::clone(&shared),
            client.clone(),
            url.clone(),
            delivery,
            reason,
        ));
    }
}

/// Retries a refused event: api.slack.com/apis/events-api#retries.
async fn retry_event(
    shared: Arc<Shared>,
    client: reqwest::Client,
    url: String,
    delivery: Delivery,
    mut reason: &'static str,
) {
    for (number, delay) in (1..).zip(RETRY_DELAYS) {
        tokio::time::sleep(delay).await;
        if shared.lock().closed {
            return;
        }
        reason = match post_event(&shared, &client, &url, &delivery, Some((number, reason))).await {
            Ok(status) if (200..300).contains(&status) => return,
            Ok(_) => "http_error",
            Err(reason) => reason,
        };
    }
}

/// A JSON object's map.
fn object(value: Value) -> Map<String, Value> {
    match value {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

/// Whether `text` mentions `user` (api.slack.com/reference/surfaces/formatting#mentioning-users:
/// `<@U…>`, optionally `<@U…|name>`).
fn mentions(text: &str, user: &str) -> bool {
    text.contains(&format!("<@{user}>")) || text.contains(&format!("<@{user}|"))
}

/// The `rich_text` block Slack's clients attach to a message
/// (api.slack.com/reference/block-kit/blocks#rich_text): text runs and `user` elements for
/// mentions.
fn rich_text(text: &str) -> Value {
    let mut elements = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<@") {
        let Some(length) = rest[start..].find('>') else {
            break;
        };
        if start > 0 {
            elements.push(json!({"type": "text", "text": &rest[..start]}));
        }
        let inner = &rest[start + 2..start + length];
        let user = inner.split('|').next().unwrap_or_default();
        elements.push(json!({"type": "user", "user_id": user}));
        rest = &rest[start + length + 1..];
    }
    if !rest.is_empty() {
        elements.push(json!({"type": "text", "text": rest}));
    }
    json!([{
        "type": "rich_text",
        "block_id": random_hex(5),
        "elements": [{"type": "rich_text_section", "elements": elements}],
    }])
}

/// Percent-encodes a URL path segment (RFC 3986 unreserved characters stay).
fn percent_encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

/// `length` hexadecimal digits that differ on every call.
fn random_hex(length: usize) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut out = String::new();
    while out.len() < length {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_nanos());
        let count = COUNTER.fetch_add(1, Ordering::Relaxed);
        let digest = Sha256::new()
            .chain_update(nanos.to_le_bytes())
            .chain_update(count.to_le_bytes())
            .chain_update(std::process::id().to_le_bytes())
            .finalize();
        out.push_str(&hex::encode(digest));
    }
    out.truncate(length);
    out
}

/// A random UUID-shaped id (envelope ids, `client_msg_id`s).
fn uuid() -> String {
    let hex = random_hex(32);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| i64::try_from(elapsed.as_secs()).unwrap_or(0))
}

// ---------------------------------------------------------------------------------------------
// The self-test.

const BOT_TOKEN: &str = "xoxb-1-stand-in-bot-token";
const APP_TOKEN: &str = "xapp-1-A0APP-1-stand-in-app-token";
const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Calls `method` with a JSON body and `token`; returns the HTTP status and the JSON answer.
async fn call(
    client: &reqwest::Client,
    api: &SlackApi,
    token: &str,
    method: &str,
    body: &Value,
) -> (u16, Value) {
    let response = client
        .post(format!("{}/{method}", api.url))
        .bearer_auth(token)
        .header(header::CONTENT_TYPE, "application/json; charset=utf-8")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// Calls `method` with a form body and the bot token.
async fn call_form(
    client: &reqwest::Client,
    api: &SlackApi,
    method: &str,
    fields: &[(&str, &str)],
) -> Value {
    let body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields)
        .finish();
    let response = client
        .post(format!("{}/{method}", api.url))
        .bearer_auth(BOT_TOKEN)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// Calls `method` with the bot token and returns the answer, failing unless `ok`.
async fn accepted(client: &reqwest::Client, api: &SlackApi, method: &str, body: Value) -> Value {
    let (status, answer) = call(client, api, BOT_TOKEN, method, &body).await;
    assert_eq!(status, 200, "{method}: {answer}");
    assert_eq!(answer["ok"], true, "{method}: {answer}");
    answer
}

/// Calls `method` with the bot token and returns its `error`, failing unless HTTP 200 and not
/// `ok`.
async fn refused(client: &reqwest::Client, api: &SlackApi, method: &str, body: Value) -> String {
    let (status, answer) = call(client, api, BOT_TOKEN, method, &body).await;
    assert_eq!(status, 200, "{method}: {answer}");
    assert_eq!(answer["ok"], false, "{method}: {answer}");
    answer["error"].as_str().unwrap().to_owned()
}

/// Opens a Socket Mode connection and returns it with its `hello`.
async fn connect(client: &reqwest::Client, api: &SlackApi) -> (Ws, Value) {
    let (_, answer) = call(client, api, APP_TOKEN, "apps.connections.open", &json!({})).await;
    let url = answer["url"].as_str().unwrap();
    let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
    let hello = next_json(&mut ws).await;
    (ws, hello)
}

/// The next JSON text message on `ws`, failing after 10 s.
async fn next_json(ws: &mut Ws) -> Value {
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let frame = tokio::time::timeout(Duration::from_secs(10), ws.next())
            .await
            .unwrap_or_else(|_| panic!("no Socket Mode message within 10 s"))
            .unwrap()
            .unwrap();
        if let Message::Text(text) = frame {
            return serde_json::from_str(text.as_str()).unwrap();
        }
    }
}

/// Acknowledges an envelope.
async fn ack(ws: &mut Ws, envelope: &Value) {
    use tokio_tungstenite::tungstenite::Message;
    let ack = json!({"envelope_id": envelope["envelope_id"]});
    ws.send(Message::Text(ack.to_string().into()))
        .await
        .unwrap();
}

/// Reads and acknowledges the next envelope; returns its event.
async fn next_event(ws: &mut Ws) -> Value {
    let envelope = next_json(ws).await;
    assert_eq!(envelope["type"], "events_api", "{envelope}");
    ack(ws, &envelope).await;
    envelope["payload"]["event"].clone()
}

/// Waits until `done` holds, failing after [`crate::suite::support::WAIT`].
async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + crate::suite::support::WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn slack_api_stand_in_is_strict() {
    let bot = SlackUser {
        id: "U0BOT".to_owned(),
        name: "gatehouse".to_owned(),
    };
    let api = SlackApi::start(BOT_TOKEN, APP_TOKEN, SIGNING_SECRET, bot.clone()).await;
    let client = reqwest::Client::new();
    let ada = SlackUser {
        id: "U0ADA".to_owned(),
        name: "ada".to_owned(),
    };
    let bob = SlackUser {
        id: "U0BOB".to_owned(),
        name: "bob".to_owned(),
    };
    let dm = api.open_dm(&ada);
    assert!(dm.starts_with('D'), "{dm}");
    assert_eq!(api.open_dm(&ada), dm);
    let general = api.create_channel("general", false, &[&ada, &bob]);
    let secret = api.create_channel("secret", true, &[&ada]);
    assert!(general.starts_with('C') && secret.starts_with('C'));

    // Authentication, unknown methods, auth.test.
    let (status, answer) = call(&client, &api, "xoxb-wrong", "auth.test", &json!({})).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (200, Some("invalid_auth"))
    );
    let answer: Value = client
        .post(format!("{}/auth.test", api.url))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer, json!({"ok": false, "error": "not_authed"}));
    assert_eq!(
        refused(&client, &api, "chat.postMessages", json!({})).await,
        "unknown_method"
    );
    let auth = accepted(&client, &api, "auth.test", json!({})).await;
    assert_eq!(auth["user_id"], "U0BOT");
    assert_eq!(auth["bot_id"], "B0BOT");
    assert_eq!(auth["team_id"], "T0TEAM");
    assert_eq!(auth["is_enterprise_install"], false);
    assert_eq!(api.calls("auth.test"), 3);

    // apps.connections.open takes only the app-level token; the bot token is a violation.
    assert_eq!(
        refused(&client, &api, "apps.connections.open", json!({})).await,
        "not_allowed_token_type"
    );
    assert_eq!(api.violations().len(), 1, "{:?}", api.violations());

    // chat.postMessage: refusals, a post, a reply.
    for (body, error) in [
        (
            json!({"channel": "C0NOPE", "text": "hi"}),
            "channel_not_found",
        ),
        (json!({"text": "hi"}), "channel_not_found"),
        (json!({"channel": dm}), "no_text"),
        (
            json!({"channel": dm, "text": "a".repeat(40_001)}),
            "msg_too_long",
        ),
        (
            json!({"channel": dm, "text": "hi", "thread_ts": "1.000001"}),
            "thread_not_found",
        ),
    ] {
        assert_eq!(
            refused(&client, &api, "chat.postMessage", body).await,
            error
        );
    }
    let posted = accepted(
        &client,
        &api,
        "chat.postMessage",
        json!({"channel": dm, "text": "Hello *there*", "mrkdwn": true}),
    )
    .await;
    let first_ts = posted["ts"].as_str().unwrap().to_owned();
    assert_eq!(posted["channel"], dm.as_str());
    assert_eq!(posted["message"]["user"], "U0BOT");
    assert_eq!(posted["message"]["bot_id"], "B0BOT");
    assert!(posted.get("warning").is_none(), "{posted}");
    let reply = call_form(
        &client,
        &api,
        "chat.postMessage",
        &[
            ("channel", dm.as_str()),
            ("text", "in thread"),
            ("thread_ts", first_ts.as_str()),
        ],
    )
    .await;
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["message"]["thread_ts"], first_ts.as_str());
    let reply_ts = reply["ts"].as_str().unwrap().to_owned();
    assert!(reply_ts > first_ts);
    assert_eq!(
        refused(
            &client,
            &api,
            "chat.postMessage",
            json!({"channel": dm, "text": "x", "thread_ts": reply_ts})
        )
        .await,
        "thread_not_found"
    );
    // A JSON body without its Content-Type is not understood.
    let answer: Value = client
        .post(format!("{}/chat.postMessage", api.url))
        .bearer_auth(BOT_TOKEN)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(json!({"channel": dm, "text": "hi"}).to_string())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["error"], "invalid_arguments", "{answer}");
    // Posting to a user id goes to the DM.
    let to_user = accepted(
        &client,
        &api,
        "chat.postMessage",
        json!({"channel": "U0ADA", "text": "direct"}),
    )
    .await;
    assert_eq!(to_user["channel"], dm.as_str());

    // chat.update.
    let updated = accepted(
        &client,
        &api,
        "chat.update",
        json!({"channel": dm, "ts": first_ts, "text": "Hello again"}),
    )
    .await;
    assert_eq!(updated["text"], "Hello again");
    accepted(
        &client,
        &api,
        "chat.update",
        json!({"channel": dm, "ts": first_ts, "text": "Hello again"}),
    )
    .await;
    assert_eq!(
        refused(
            &client,
            &api,
            "chat.update",
            json!({"channel": dm, "ts": "1.000002", "text": "x"})
        )
        .await,
        "message_not_found"
    );
    let ada_ts = api.user_writes(&dm, &ada, "my message", None);
    assert_eq!(
        refused(
            &client,
            &api,
            "chat.update",
            json!({"channel": dm, "ts": ada_ts, "text": "x"})
        )
        .await,
        "cant_update_message"
    );
    let posted_log = api.posted();
    assert_eq!(posted_log.len(), 5, "{posted_log:?}");
    assert_eq!(
        posted_log[1],
        Posted {
            method: "chat.postMessage".to_owned(),
            channel: dm.clone(),
            ts: reply_ts.clone(),
            thread_ts: Some(first_ts.clone()),
            text: "in thread".to_owned(),
        }
    );
    assert_eq!(posted_log[3].method, "chat.update");
    assert_eq!(posted_log[3].text, "Hello again");
    assert_eq!(posted_log[3].ts, first_ts);

    // users.info takes a form (a JSON body is ignored as Slack does: the user is missing).
    let info = call_form(&client, &api, "users.info", &[("user", "U0ADA")]).await;
    assert_eq!(info["user"]["name"], "ada", "{info}");
    assert_eq!(info["user"]["profile"]["display_name"], "ada");
    let info = call_form(&client, &api, "users.info", &[("user", "U0NOPE")]).await;
    assert_eq!(info["error"], "user_not_found");
    assert_eq!(
        refused(&client, &api, "users.info", json!({"user": "U0ADA"})).await,
        "invalid_arguments"
    );

    // 429 with Retry-After; a call before it elapsed is refused again and is a violation.
    api.rate_limit_next("chat.postMessage", 1, 1);
    let body = json!({"channel": general, "text": "limited"});
    let response = client
        .post(format!("{}/chat.postMessage", api.url))
        .bearer_auth(BOT_TOKEN)
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let limited_at = Instant::now();
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"ok": false, "error": "ratelimited"})
    );
    let (status, _) = call(&client, &api, BOT_TOKEN, "chat.postMessage", &body).await;
    assert_eq!(status, 429);
    assert_eq!(api.violations().len(), 2, "{:?}", api.violations());
    assert!(api.violations()[1].contains("Retry-After"));
    tokio::time::sleep(Duration::from_millis(1_100).saturating_sub(limited_at.elapsed())).await;
    let in_general = accepted(&client, &api, "chat.postMessage", body).await;
    let general_ts = in_general["ts"].as_str().unwrap().to_owned();

    // Uploads: getUploadURLExternal (a form), the upload, completeUploadExternal.
    let reserved = call_form(
        &client,
        &api,
        "files.getUploadURLExternal",
        &[("filename", "report.csv"), ("length", "8")],
    )
    .await;
    assert_eq!(reserved["ok"], true, "{reserved}");
    let file_id = reserved["file_id"].as_str().unwrap().to_owned();
    let upload_url = reserved["upload_url"].as_str().unwrap().to_owned();
    assert_eq!(
        refused(
            &client,
            &api,
            "files.getUploadURLExternal",
            json!({"filename": "x", "length": 1})
        )
        .await,
        "invalid_arguments"
    );
    let bad_length = call_form(
        &client,
        &api,
        "files.getUploadURLExternal",
        &[("filename", "x"), ("length", "0")],
    )
    .await;
    assert_eq!(bad_length["error"], "invalid_arguments");
    let complete = json!({"files": [{"id": file_id, "title": "Report"}], "channel_id": general, "thread_ts": general_ts});
    assert_eq!(
        refused(
            &client,
            &api,
            "files.completeUploadExternal",
            complete.clone()
        )
        .await,
        "file_uploads_incomplete"
    );
    let short = client
        .post(&upload_url)
        .body(b"a,b".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(short.status(), 400);
    assert_eq!(api.violations().len(), 3, "{:?}", api.violations());
    let uploaded = client
        .post(&upload_url)
        .body(b"a,b\n1,2\n".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), 200);
    assert_eq!(uploaded.text().await.unwrap(), "OK - 8");
    let again = client
        .post(&upload_url)
        .body(b"x".to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 404);
    let completed = accepted(
        &client,
        &api,
        "files.completeUploadExternal",
        complete.clone(),
    )
    .await;
    assert_eq!(completed["files"][0]["id"], file_id.as_str());
    assert_eq!(
        refused(&client, &api, "files.completeUploadExternal", complete).await,
        "file_not_found"
    );
    assert_eq!(
        api.uploaded(),
        vec![Uploaded {
            channel: general.clone(),
            thread_ts: Some(general_ts.clone()),
            name: "report.csv".to_owned(),
            bytes: b"a,b\n1,2\n".to_vec(),
        }]
    );
    // A multipart upload, completed as a form without a channel.
    let reserved = call_form(
        &client,
        &api,
        "files.getUploadURLExternal",
        &[("filename", "n.txt"), ("length", "2")],
    )
    .await;
    let boundary = "stand-in-boundary";
    let multipart = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; \
         filename=\"n.txt\"\r\nContent-Type: text/plain\r\n\r\nhi\r\n--{boundary}--\r\n"
    );
    let uploaded = client
        .post(reserved["upload_url"].as_str().unwrap())
        .header(
            header::CONTENT_TYPE,
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(multipart)
        .send()
        .await
        .unwrap();
    assert_eq!(uploaded.status(), 200);
    let files = json!([{"id": reserved["file_id"]}]).to_string();
    let completed = call_form(
        &client,
        &api,
        "files.completeUploadExternal",
        &[("files", files.as_str())],
    )
    .await;
    assert_eq!(completed["ok"], true, "{completed}");
    assert_eq!(api.uploaded()[1].bytes, b"hi");
    assert_eq!(api.uploaded()[1].channel, "");

    // A person's file: url_private only with the bot token.
    let shared_ts = api.user_shares_file(
        &dm,
        &ada,
        "see this",
        "notes one.txt",
        "text/plain",
        b"notes".to_vec(),
    );
    assert!(shared_ts > ada_ts);

    // Socket Mode: the app-level token opens a connection; its ticket is single use.
    let (status, opened) = call(
        &client,
        &api,
        APP_TOKEN,
        "apps.connections.open",
        &json!({}),
    )
    .await;
    assert_eq!(status, 200);
    let link = opened["url"].as_str().unwrap().to_owned();
    assert!(
        link.starts_with("ws://127.0.0.1:") && link.contains("ticket="),
        "{link}"
    );
    let (mut ws, _) = tokio_tungstenite::connect_async(link.as_str())
        .await
        .unwrap();
    assert!(
        tokio_tungstenite::connect_async(link.as_str())
            .await
            .is_err()
    );
    let hello = next_json(&mut ws).await;
    assert_eq!(hello["type"], "hello");
    assert_eq!(hello["num_connections"], 1);
    assert_eq!(hello["connection_info"]["app_id"], "A0APP");
    // The events queued while no connection was open arrive in order: the bot's own messages
    // (with bot_id), its updates (message_changed), Ada's message and her file.
    let mut queued = Vec::new();
    for _ in 0..8 {
        queued.push(next_event(&mut ws).await);
    }
    let kinds: Vec<String> = queued
        .iter()
        .map(|event| {
            format!(
                "{}/{}",
                event["type"].as_str().unwrap(),
                event["subtype"].as_str().unwrap_or("-")
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "message/-",
            "message/-",
            "message/-",
            "message/message_changed",
            "message/message_changed",
            "message/-",
            "message/-",
            "message/file_share",
        ]
    );
    assert_eq!(queued[0]["bot_id"], "B0BOT");
    assert_eq!(queued[5]["user"], "U0ADA");
    assert_eq!(queued[5]["channel_type"], "im");
    assert_eq!(queued[6]["channel"], general.as_str());
    let file = &queued[7]["files"][0];
    assert_eq!(file["name"], "notes one.txt");
    assert_eq!(file["size"], 5);
    let url_private = file["url_private"].as_str().unwrap();
    let anonymous = client.get(url_private).send().await.unwrap();
    assert_eq!(anonymous.status(), 403);
    let wrong = client
        .get(url_private)
        .bearer_auth(APP_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 403);
    let download = client
        .get(url_private)
        .bearer_auth(BOT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(download.status(), 200);
    assert_eq!(download.bytes().await.unwrap().as_ref(), b"notes");
    let download = client
        .get(file["url_private_download"].as_str().unwrap())
        .bearer_auth(BOT_TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(download.bytes().await.unwrap().as_ref(), b"notes");

    // A DM message: one envelope with the whole event_callback.
    let ts = api.user_writes(&dm, &ada, "hello bot", None);
    let envelope = next_json(&mut ws).await;
    assert_eq!(envelope["type"], "events_api");
    assert_eq!(envelope["retry_attempt"], 0);
    assert_eq!(envelope["accept_response_payload"], false);
    let payload = &envelope["payload"];
    assert_eq!(payload["type"], "event_callback");
    assert_eq!(payload["team_id"], "T0TEAM");
    assert_eq!(payload["api_app_id"], "A0APP");
    assert!(payload["event_id"].as_str().unwrap().starts_with("Ev"));
    assert_eq!(payload["authorizations"][0]["user_id"], "U0BOT");
    assert_eq!(payload["is_ext_shared_channel"], false);
    assert_eq!(
        payload["event"],
        json!({
            "type": "message",
            "channel": dm,
            "user": "U0ADA",
            "text": "hello bot",
            "ts": ts,
            "event_ts": ts,
            "channel_type": "im",
            "team": "T0TEAM",
            "client_msg_id": payload["event"]["client_msg_id"],
            "blocks": payload["event"]["blocks"],
        })
    );
    ack(&mut ws, &envelope).await;

    // Not acknowledged: sent again after 3 s with retry_attempt 1, and kept as a violation.
    let ts = api.user_writes(&dm, &ada, "ignored", Some(&ada_ts));
    let first = next_json(&mut ws).await;
    assert_eq!(first["payload"]["event"]["thread_ts"], ada_ts.as_str());
    assert_eq!(first["payload"]["event"]["ts"], ts.as_str());
    let again = next_json(&mut ws).await;
    assert_eq!(again["envelope_id"], first["envelope_id"]);
    assert_eq!(again["retry_attempt"], 1);
    assert_eq!(again["retry_reason"], "timeout");
    ack(&mut ws, &again).await;
    let violations = api.violations();
    assert_eq!(violations.len(), 4, "{violations:?}");
    assert!(
        violations[3].contains("not acknowledged within 3 s"),
        "{violations:?}"
    );
    // Acknowledging an envelope never sent is a violation.
    ack(&mut ws, &json!({"envelope_id": "not-an-envelope"})).await;
    eventually("the unknown acknowledgement", || {
        api.violations().len() == 5
    })
    .await;

    // A mention in a channel: a message event and an app_mention with the same ts.
    let ts = api.user_writes(&secret, &ada, "hi <@U0BOT> there", None);
    let message = next_event(&mut ws).await;
    let mention = next_event(&mut ws).await;
    assert_eq!(message["type"], "message");
    assert_eq!(message["channel_type"], "group");
    assert_eq!(mention["type"], "app_mention");
    assert_eq!(mention["ts"], ts.as_str());
    assert_eq!(mention["channel"], secret.as_str());
    assert_eq!(
        mention["blocks"][0]["elements"][0]["elements"][1],
        json!({"type": "user", "user_id": "U0BOT"})
    );
    // No app_mention in a DM, nor without a mention.
    api.user_writes(&general, &bob, "no mention", None);
    assert_eq!(next_event(&mut ws).await["channel_type"], "channel");
    api.user_writes(&dm, &ada, "<@U0BOT> in a DM", None);
    assert_eq!(next_event(&mut ws).await["type"], "message");

    // A dropped connection: events wait and go to the next one. (The pause lets the last
    // acknowledgement arrive; one still on its way when the connection drops is sent again.)
    tokio::time::sleep(Duration::from_millis(200)).await;
    api.drop_sockets();
    eventually("the dropped socket", || api.socket_connections() == (1, 0)).await;
    assert!(next_json_or_closed(&mut ws).await);
    let ts = api.user_writes(&dm, &ada, "while away", None);
    let (mut ws, hello) = connect(&client, &api).await;
    assert_eq!(hello["num_connections"], 1);
    assert_eq!(next_event(&mut ws).await["ts"], ts.as_str());

    // Refresh: a disconnect message, then the close; a replacement opened meanwhile is fine.
    api.request_refresh();
    let disconnect = next_json(&mut ws).await;
    assert_eq!(disconnect["type"], "disconnect");
    assert_eq!(disconnect["reason"], "refresh_requested");
    let (mut fresh, hello) = connect(&client, &api).await;
    assert_eq!(hello["num_connections"], 2);
    assert!(next_json_or_closed(&mut ws).await);
    eventually("the refreshed socket's close", || {
        api.socket_connections() == (3, 1)
    })
    .await;
    let ts = api.user_writes(&dm, &ada, "after refresh", None);
    assert_eq!(next_event(&mut fresh).await["ts"], ts.as_str());
    // A second connection at once is a violation.
    assert_eq!(api.violations().len(), 5, "{:?}", api.violations());
    let (_second, hello) = connect(&client, &api).await;
    assert_eq!(hello["num_connections"], 2);
    assert_eq!(api.violations().len(), 6, "{:?}", api.violations());

    // Events API mode against a small receiver: url_verification, signatures, a retry.
    type Received = Arc<Mutex<Vec<(HeaderMap, String)>>>;
    let received: Received = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let request_url = format!("http://{}/slack/events", listener.local_addr().unwrap());
    let receiver = axum::Router::new()
        .route(
            "/slack/events",
            axum::routing::post(
                |Extract(received): Extract<Received>, headers: HeaderMap, body: String| async move {
                    let value: Value = serde_json::from_str(&body).unwrap();
                    let mut received = received.lock().unwrap();
                    received.push((headers, body));
                    if value["type"] == "url_verification" {
                        return (StatusCode::OK, value["challenge"].as_str().unwrap().to_owned());
                    }
                    match received.len() {
                        2 => (StatusCode::INTERNAL_SERVER_ERROR, String::new()),
                        _ => (StatusCode::OK, String::new()),
                    }
                },
            ),
        )
        .with_state(Arc::clone(&received));
    let receiver = tokio::spawn(async move { axum::serve(listener, receiver).await });
    api.use_events_api(&request_url).await;
    assert_eq!(api.violations().len(), 6, "{:?}", api.violations());
    let ts = api.user_writes(&dm, &ada, "over http", None);
    eventually("the event and its retry", || {
        received.lock().unwrap().len() >= 3
    })
    .await;
    let requests = received.lock().unwrap().clone();
    assert_eq!(requests.len(), 3);
    for (headers, body) in &requests {
        let timestamp = headers["x-slack-request-timestamp"].to_str().unwrap();
        assert_eq!(
            headers["x-slack-signature"].to_str().unwrap(),
            format!(
                "v0={}",
                hex::encode(crate::suite::channels::hmac_sha256(
                    SIGNING_SECRET.as_bytes(),
                    format!("v0:{timestamp}:{body}").as_bytes()
                ))
            )
        );
        assert_eq!(headers["content-type"], "application/json");
    }
    let verification: Value = serde_json::from_str(&requests[0].1).unwrap();
    assert_eq!(verification["type"], "url_verification");
    assert!(requests[1].0.get("x-slack-retry-num").is_none());
    assert_eq!(requests[2].0["x-slack-retry-num"], "1");
    assert_eq!(requests[2].0["x-slack-retry-reason"], "http_error");
    assert_eq!(requests[1].1, requests[2].1);
    let event: Value = serde_json::from_str(&requests[1].1).unwrap();
    assert_eq!(event["event"]["ts"], ts.as_str());
    assert_eq!(api.redeliver_last_event().await, 200);
    let redelivered = received.lock().unwrap().last().unwrap().clone();
    assert_eq!(redelivered.0["x-slack-retry-reason"], "http_timeout");
    assert_eq!(redelivered.1, requests[1].1);
    receiver.abort();

    // Credentials travelled only in Authorization headers.
    let log = api.request_log_without_authorization();
    assert!(!log.contains(BOT_TOKEN) && !log.contains(APP_TOKEN));
    assert!(log.contains("report.csv"));
    let violations = api.violations();
    assert_eq!(violations.len(), 6, "{violations:?}");
    assert!(violations[0].contains("apps.connections.open was called with the bot token"));
    assert!(violations[2].contains("not the 8 announced"));
    assert!(violations[4].contains("unknown envelope_id"));
    assert!(violations[5].contains("other one(s) were open"));
    assert_eq!(bot.name, "gatehouse");
}

/// Reads `ws` until it ends (a close frame, an error or the end of the stream); true when it
/// ended within 10 s.
async fn next_json_or_closed(ws: &mut Ws) -> bool {
    use tokio_tungstenite::tungstenite::Message;
    tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await
    .is_ok()
}
