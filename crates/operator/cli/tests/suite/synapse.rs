//! A real Matrix homeserver for end-to-end tests: Synapse, from the virtual environment
//! scripts/install makes (`GATEHOUSE_SYNAPSE_PYTHON`), on a free loopback port with a SQLite
//! database of its own, users made through its shared-secret registration, and a few client-API
//! helpers (rooms, messages, display names) to act as the people a Matrix channel talks to.
//!
//! The homeserver is `hs.test`, serves the client API only (no federation listener, no key
//! servers, no URL previews), refuses open registration and has its rate limits raised so that
//! a test may send bursts. It can be restarted on the same port and database, and its process
//! group is stopped when it is dropped.

use std::path::Path;
use std::path::PathBuf;
use std::process::Child;
use std::process::Command;
use std::process::Stdio;
use std::time::Duration;
use std::time::Instant;

use crate::suite::support::WAIT;

/// The server name of every test homeserver: user ids are `@localpart:hs.test`.
pub(crate) const SERVER_NAME: &str = "hs.test";

/// How long Synapse may take to answer after it is started (it takes a few seconds on two
/// cores; more while other tests build or run).
const START_WAIT: Duration = Duration::from_secs(90);

/// How long Synapse may take to exit after SIGTERM before its process group is killed.
const STOP_WAIT: Duration = Duration::from_secs(15);

/// A user of the test homeserver with an access token of its own (one device).
#[derive(Clone, Debug)]
pub(crate) struct MatrixUser {
    /// The full user id, `@localpart:hs.test`.
    pub(crate) user_id: String,
    /// The access token of the device its login made.
    pub(crate) access_token: String,
}

/// A running Synapse homeserver: its process group is stopped (SIGTERM, then SIGKILL) when
/// dropped. Its configuration, signing key and database stay in the directory it was started
/// with.
pub(crate) struct Synapse {
    python: String,
    dir: PathBuf,
    logs: PathBuf,
    port: u16,
    url: String,
    child: Option<Child>,
    log: PathBuf,
    http: reqwest::Client,
}

impl Synapse {
    /// Starts Synapse with its files in `dir` (created when missing) and its output in a log
    /// file under `logs`, and returns once `GET /_matrix/client/versions` answers. The first
    /// start in `dir` generates the configuration and signing key (`--generate-config`); each
    /// start writes the test overrides beside them (a new port and shared secret), so a later
    /// start in the same `dir` keeps the database, its users, rooms and tokens.
    /// A missing `GATEHOUSE_SYNAPSE_PYTHON` fails the test.
    pub(crate) async fn start(dir: &Path, logs: &Path) -> Synapse {
        let python = crate::suite::support::installed(
            "GATEHOUSE_SYNAPSE_PYTHON",
            "matrix-synapse (in its own virtual environment)",
        );
        std::fs::create_dir_all(dir).unwrap();
        let dir = dir.canonicalize().unwrap();
        generate_config(&python, &dir).await;
        let mut synapse = Synapse {
            python,
            dir,
            logs: logs.to_path_buf(),
            port: 0,
            url: String::new(),
            child: None,
            log: PathBuf::new(),
            http: reqwest::Client::builder().timeout(WAIT).build().unwrap(),
        };
        // The port is free when chosen but could be taken before Synapse binds it: try again
        // on another port when the process exits before answering (each attempt's log stays
        // under `logs`).
        for attempt in 1..=3 {
            synapse.port = free_port();
            synapse.url = format!("http://127.0.0.1:{}", synapse.port);
            synapse.write_override();
            synapse.spawn();
            match synapse.wait_answering().await {
                Ok(()) => return synapse,
                Err(_) if attempt < 3 => {}
                Err(log) => panic!(
                    "synapse exited before answering on port {}; its log ends with:\n{}",
                    synapse.port,
                    tail(&log)
                ),
            }
        }
        unreachable!("the last attempt returns or panics")
    }

    /// The base URL of the client API, `http://127.0.0.1:PORT`.
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// What the running (or last) Synapse process wrote.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Stops Synapse (SIGTERM to its process group, waiting for it to exit) and starts it again
    /// on the same port with the same configuration and database; returns once it answers.
    pub(crate) async fn restart(&mut self) {
        self.stop_async().await;
        self.spawn();
        if let Err(log) = self.wait_answering().await {
            panic!(
                "synapse did not come back on port {}; its log ends with:\n{}",
                self.port,
                tail(&log)
            );
        }
    }

    /// Registers the ordinary (not admin) user `localpart` with `password` through the
    /// shared-secret registration (Synapse's own `register_new_matrix_user`, which reads the
    /// secret from the override file), then logs in with the password and returns the user
    /// with the access token of that login.
    pub(crate) async fn register(&self, localpart: &str, password: &str) -> MatrixUser {
        let script = Path::new(&self.python).with_file_name("register_new_matrix_user");
        let password_file = self.dir.join(format!("password-{localpart}"));
        std::fs::write(&password_file, password).unwrap();
        let output = tokio::process::Command::new(&script)
            .arg("-c")
            .arg(self.override_path())
            .args(["-u", localpart, "--no-admin", "--password-file"])
            .arg(&password_file)
            .arg(&self.url)
            .stdin(Stdio::null())
            .output()
            .await
            .unwrap_or_else(|error| panic!("cannot run {}: {error}", script.display()));
        std::fs::remove_file(&password_file).unwrap();
        assert!(
            output.status.success(),
            "register_new_matrix_user {localpart} failed ({}): {}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let login = self
            .call(
                reqwest::Method::POST,
                &["login"],
                None,
                Some(serde_json::json!({
                    "type": "m.login.password",
                    "identifier": {"type": "m.id.user", "user": localpart},
                    "password": password,
                    "initial_device_display_name": "gatehouse test",
                })),
            )
            .await;
        let user = MatrixUser {
            user_id: login["user_id"].as_str().unwrap().to_owned(),
            access_token: login["access_token"].as_str().unwrap().to_owned(),
        };
        assert_eq!(user.user_id, format!("@{localpart}:{SERVER_NAME}"));
        user
    }

    /// Sets `user`'s display name (which also sends a member event to each room it is in).
    pub(crate) async fn set_display_name(&self, user: &MatrixUser, name: &str) {
        self.call(
            reqwest::Method::PUT,
            &["profile", &user.user_id, "displayname"],
            Some(user),
            Some(serde_json::json!({"displayname": name})),
        )
        .await;
    }

    /// Creates a private room as `user`, inviting `invite` (user ids), marked as a direct
    /// chat when `is_direct`, and returns its room id. The id's shape is not checked: room
    /// version 12 ids have no server part.
    pub(crate) async fn create_room(
        &self,
        user: &MatrixUser,
        is_direct: bool,
        invite: &[&str],
    ) -> String {
        let preset = if is_direct {
            "trusted_private_chat"
        } else {
            "private_chat"
        };
        let created = self
            .call(
                reqwest::Method::POST,
                &["createRoom"],
                Some(user),
                Some(serde_json::json!({
                    "preset": preset,
                    "is_direct": is_direct,
                    "invite": invite,
                })),
            )
            .await;
        created["room_id"].as_str().unwrap().to_owned()
    }

    /// Joins `user` to `room` (accepting an invitation).
    pub(crate) async fn join(&self, user: &MatrixUser, room: &str) {
        self.call(
            reqwest::Method::POST,
            &["join", room],
            Some(user),
            Some(serde_json::json!({})),
        )
        .await;
    }

    /// `POST /rooms/{room}/leave` as `user`.
    pub(crate) async fn leave(&self, user: &MatrixUser, room: &str) {
        self.call(
            reqwest::Method::POST,
            &["rooms", room, "leave"],
            Some(user),
            Some(serde_json::json!({})),
        )
        .await;
    }

    /// Sends the text message `body` to `room` as `user`, with `m.mentions.user_ids` set to
    /// `mention_user_ids` when any are given, under a transaction id never used before; returns
    /// the event id.
    pub(crate) async fn send_text(
        &self,
        user: &MatrixUser,
        room: &str,
        body: &str,
        mention_user_ids: &[&str],
    ) -> String {
        let mut content = serde_json::json!({"msgtype": "m.text", "body": body});
        if !mention_user_ids.is_empty() {
            content["m.mentions"] = serde_json::json!({"user_ids": mention_user_ids});
        }
        self.send_message(user, room, content).await
    }

    /// Sends an `m.room.message` with `content` (any `msgtype`) and returns its event id.
    pub(crate) async fn send_message(
        &self,
        user: &MatrixUser,
        room: &str,
        content: serde_json::Value,
    ) -> String {
        let txn = transaction_id();
        let sent = self
            .call(
                reqwest::Method::PUT,
                &["rooms", room, "send", "m.room.message", &txn],
                Some(user),
                Some(content),
            )
            .await;
        sent["event_id"].as_str().unwrap().to_owned()
    }

    /// The ids of the rooms `user` is joined to.
    pub(crate) async fn joined_rooms(&self, user: &MatrixUser) -> Vec<String> {
        let joined = self
            .call(reqwest::Method::GET, &["joined_rooms"], Some(user), None)
            .await;
        joined["joined_rooms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|room| room.as_str().unwrap().to_owned())
            .collect()
    }

    /// The latest (up to 100) events of `room` that `user` can see, oldest first.
    pub(crate) async fn messages(&self, user: &MatrixUser, room: &str) -> Vec<serde_json::Value> {
        let page = self
            .call_query(
                reqwest::Method::GET,
                &["rooms", room, "messages"],
                "?dir=b&limit=100",
                Some(user),
                None,
            )
            .await;
        let mut events = page["chunk"].as_array().cloned().unwrap_or_default();
        events.reverse();
        events
    }

    /// Polls `room`'s messages as `user` until one satisfies `predicate`, and returns it; fails
    /// the test with the events seen when none does within `timeout`.
    pub(crate) async fn wait_for(
        &self,
        user: &MatrixUser,
        room: &str,
        predicate: impl Fn(&serde_json::Value) -> bool,
        timeout: Duration,
    ) -> serde_json::Value {
        let deadline = Instant::now() + timeout;
        loop {
            let events = self.messages(user, room).await;
            if let Some(found) = events.iter().find(|event| predicate(event)) {
                return found.clone();
            }
            assert!(
                Instant::now() < deadline,
                "no event of {room} as seen by {} matched within {timeout:?}; the events: {}",
                user.user_id,
                serde_json::to_string_pretty(&events).unwrap()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Uploads `bytes` as `user` (`POST /_matrix/media/v3/upload`) and returns the `mxc://` URI.
    pub(crate) async fn upload(
        &self,
        user: &MatrixUser,
        name: &str,
        mime: &str,
        bytes: &[u8],
    ) -> String {
        let url = format!(
            "{}/_matrix/media/v3/upload?filename={}",
            self.url,
            encode_segment(name)
        );
        let response = self
            .http
            .post(&url)
            .bearer_auth(&user.access_token)
            .header("content-type", mime)
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        let status = response.status();
        let body: serde_json::Value = response.json().await.unwrap();
        assert!(status.is_success(), "upload: {status} {body}");
        body["content_uri"].as_str().unwrap().to_owned()
    }

    /// Downloads `mxc` as `user` through the authenticated media API.
    pub(crate) async fn download(&self, user: &MatrixUser, mxc: &str) -> Vec<u8> {
        let (server, id) = mxc.strip_prefix("mxc://").unwrap().split_once('/').unwrap();
        let url = format!(
            "{}/_matrix/client/v1/media/download/{server}/{id}",
            self.url
        );
        let response = self
            .http
            .get(&url)
            .bearer_auth(&user.access_token)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "download: {}",
            response.status()
        );
        response.bytes().await.unwrap().to_vec()
    }

    /// Sends a client-API request (`/_matrix/client/v3/` + `segments`, each percent-encoded) as
    /// `user`, and returns the JSON answer; fails the test on an error status.
    async fn call(
        &self,
        method: reqwest::Method,
        segments: &[&str],
        user: Option<&MatrixUser>,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        self.call_query(method, segments, "", user, body).await
    }

    /// [`Synapse::call`] with `query` (empty, or `?` and an encoded query string).
    async fn call_query(
        &self,
        method: reqwest::Method,
        segments: &[&str],
        query: &str,
        user: Option<&MatrixUser>,
        body: Option<serde_json::Value>,
    ) -> serde_json::Value {
        let path: String = segments
            .iter()
            .map(|segment| format!("/{}", encode_segment(segment)))
            .collect();
        let url = format!("{}/_matrix/client/v3{path}{query}", self.url);
        let mut request = self.http.request(method.clone(), &url);
        if let Some(user) = user {
            request = request.bearer_auth(&user.access_token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .unwrap_or_else(|error| panic!("{method} {url}: {error}"));
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "{method} {url}: {status}: {text}");
        serde_json::from_str(&text)
            .unwrap_or_else(|error| panic!("{method} {url}: not JSON ({error}): {text}"))
    }

    fn override_path(&self) -> PathBuf {
        self.dir.join("test-overrides.yaml")
    }

    /// Writes the test overrides (JSON, which is YAML) that `-c` lays over the generated
    /// configuration: Synapse replaces each top-level key of an earlier file with a later
    /// file's.
    fn write_override(&self) {
        let log_config = self.dir.join("test-log.yaml");
        // Everything to stderr, which goes to the log file under `logs`.
        std::fs::write(
            &log_config,
            serde_json::to_string_pretty(&serde_json::json!({
                "version": 1,
                "formatters": {"precise": {"format":
                    "%(asctime)s - %(name)s - %(lineno)d - %(levelname)s - %(request)s - %(message)s"}},
                "handlers": {"console": {
                    "class": "logging.StreamHandler",
                    "formatter": "precise",
                    "stream": "ext://sys.stderr",
                }},
                "root": {"level": "INFO", "handlers": ["console"]},
                "disable_existing_loggers": false,
            }))
            .unwrap(),
        )
        .unwrap();
        let mut secret = [0u8; 32];
        std::io::Read::read_exact(
            &mut std::fs::File::open("/dev/urandom").unwrap(),
            &mut secret,
        )
        .unwrap();
        // A rate limit no test reaches, for each of Synapse's `rc_*` settings.
        let limit = serde_json::json!({"per_second": 10_000, "burst_count": 100_000});
        let overrides = serde_json::json!({
            "listeners": [{
                "type": "http",
                "tls": false,
                "port": self.port,
                "bind_addresses": ["127.0.0.1"],
                "x_forwarded": false,
                "resources": [{"names": ["client", "media"], "compress": false}],
            }],
            "database": {
                "name": "sqlite3",
                "args": {"database": self.dir.join("homeserver.db")},
            },
            "log_config": log_config,
            "enable_registration": false,
            "registration_shared_secret": hex::encode(secret),
            "url_preview_enabled": false,
            "federation_domain_whitelist": [],
            "trusted_key_servers": [],
            "suppress_key_server_warning": true,
            "report_stats": false,
            "rc_message": limit,
            "rc_registration": limit,
            "rc_registration_token_validity": limit,
            "rc_login": {"address": limit, "account": limit, "failed_attempts": limit},
            "rc_joins": {"local": limit, "remote": limit},
            "rc_joins_per_room": limit,
            "rc_invites": {"per_room": limit, "per_user": limit, "per_issuer": limit},
            "rc_third_party_invite": limit,
            "rc_room_creation": limit,
            "rc_3pid_validation": limit,
            "rc_key_requests": limit,
            "rc_media_create": limit,
            "rc_presence": {"per_user": limit},
            "rc_delayed_event_mgmt": limit,
            "rc_reports": limit,
            "rc_user_directory": limit,
            "rc_profile": limit,
            "rc_admin_redaction": limit,
        });
        std::fs::write(
            self.override_path(),
            serde_json::to_string_pretty(&overrides).unwrap(),
        )
        .unwrap();
    }

    /// Starts the homeserver process in a process group of its own, its output to a new log
    /// file under `logs`.
    fn spawn(&mut self) {
        use std::os::unix::process::CommandExt;
        self.log = self
            .logs
            .join(format!("synapse-{}-{}.log", self.port, next_number()));
        let log = std::fs::File::create(&self.log).unwrap();
        let child = Command::new(&self.python)
            .args(["-m", "synapse.app.homeserver", "-c"])
            .arg(self.dir.join("homeserver.yaml"))
            .arg("-c")
            .arg(self.override_path())
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .process_group(0)
            .spawn()
            .unwrap_or_else(|error| panic!("cannot start {}: {error}", self.python));
        self.child = Some(child);
    }

    /// Waits until `GET /_matrix/client/versions` answers 200; returns the log when the process
    /// exits first, and fails the test when neither happens within [`START_WAIT`].
    async fn wait_answering(&mut self) -> Result<(), String> {
        let started = Instant::now();
        let versions = format!("{}/_matrix/client/versions", self.url);
        loop {
            let answer = self
                .http
                .get(&versions)
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if answer.is_ok_and(|response| response.status().is_success()) {
                return Ok(());
            }
            let child = self.child.as_mut().unwrap();
            if let Some(status) = child.try_wait().unwrap() {
                self.child = None;
                return Err(format!("(exited: {status})\n{}", self.log()));
            }
            assert!(
                started.elapsed() < START_WAIT,
                "synapse did not answer on {versions} within {START_WAIT:?}; its log ends with:\n{}",
                tail(&self.log())
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// SIGTERM to the process group, waiting up to [`STOP_WAIT`] (without blocking the
    /// runtime), then SIGKILL.
    async fn stop_async(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal_group(&child, rustix::process::Signal::TERM);
        let deadline = Instant::now() + STOP_WAIT;
        while Instant::now() < deadline {
            if child.try_wait().unwrap().is_some() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        signal_group(&child, rustix::process::Signal::KILL);
        child.wait().unwrap();
    }
}

impl Drop for Synapse {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        signal_group(&child, rustix::process::Signal::TERM);
        let deadline = Instant::now() + STOP_WAIT;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        signal_group(&child, rustix::process::Signal::KILL);
        let _ = child.wait();
    }
}

/// Sends `signal` to the process group `child` leads (it was started with `process_group(0)`,
/// so the group id is its pid). The group may be gone already.
fn signal_group(child: &Child, signal: rustix::process::Signal) {
    let group = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    let _ = rustix::process::kill_process_group(group, signal);
}

/// Generates Synapse's configuration, signing key and log configuration in `dir`, unless that
/// was done before.
async fn generate_config(python: &str, dir: &Path) {
    let config = dir.join("homeserver.yaml");
    if config.exists() {
        return;
    }
    let output = tokio::process::Command::new(python)
        .args(["-m", "synapse.app.homeserver", "--generate-config"])
        .args(["--server-name", SERVER_NAME, "--report-stats=no"])
        .arg("--config-path")
        .arg(&config)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .await
        .unwrap_or_else(|error| panic!("cannot run {python}: {error}"));
    assert!(
        output.status.success() && config.exists(),
        "synapse --generate-config failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A TCP port on loopback that nothing listens on now.
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn next_number() -> u64 {
    use std::sync::atomic::AtomicU64;
    use std::sync::atomic::Ordering;
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A transaction id no earlier request of this test binary used.
fn transaction_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!(
        "gatehouse-test-{}-{nanos}-{}",
        std::process::id(),
        next_number()
    )
}

/// Percent-encodes every byte of `segment` but the unreserved ones (RFC 3986), for one path
/// segment: Matrix ids carry `!`, `@`, `:`, `/` and more.
fn encode_segment(segment: &str) -> String {
    let mut encoded = String::with_capacity(segment.len());
    for byte in segment.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
}

/// The last 8,000 bytes (or so, on a character boundary) of `log`.
fn tail(log: &str) -> &str {
    let start = (log.len().saturating_sub(8_000)..log.len())
        .find(|index| log.is_char_boundary(*index))
        .unwrap_or(log.len());
    &log[start..]
}

#[tokio::test(flavor = "multi_thread")]
async fn a_synapse_homeserver_starts_registers_users_and_carries_messages_across_a_restart() {
    let dirs = crate::suite::support::dirs();
    let logs = dirs.base.join("logs");
    let mut synapse = Synapse::start(&dirs.base.join("synapse"), &logs).await;
    assert!(synapse.url().starts_with("http://127.0.0.1:"));

    let alice = synapse.register("alice", "alice-password").await;
    let bot = synapse.register("gatehouse-bot", "bot-password").await;
    assert_eq!(alice.user_id, format!("@alice:{SERVER_NAME}"));
    assert_ne!(alice.access_token, bot.access_token);

    // A direct chat from alice to the bot, which joins it.
    let room = synapse.create_room(&alice, true, &[&bot.user_id]).await;
    synapse.join(&bot, &room).await;
    synapse.set_display_name(&bot, "Gatehouse").await;
    synapse
        .wait_for(
            &alice,
            &room,
            |event| {
                event["type"] == "m.room.member"
                    && event["state_key"] == bot.user_id.as_str()
                    && event["content"]["membership"] == "join"
                    && event["content"]["displayname"] == "Gatehouse"
            },
            WAIT,
        )
        .await;

    let first = synapse
        .send_text(&alice, &room, "hello, bot", &[&bot.user_id])
        .await;
    let seen = synapse
        .wait_for(
            &bot,
            &room,
            |event| event["event_id"] == first.as_str(),
            WAIT,
        )
        .await;
    assert_eq!(seen["type"], "m.room.message");
    assert_eq!(seen["sender"], alice.user_id.as_str());
    assert_eq!(seen["content"]["body"], "hello, bot");
    assert_eq!(
        seen["content"]["m.mentions"]["user_ids"],
        serde_json::json!([bot.user_id])
    );

    // The same port, database, users, tokens and history after a restart.
    let url = synapse.url().to_owned();
    synapse.restart().await;
    assert_eq!(synapse.url(), url);
    let again = synapse
        .wait_for(
            &bot,
            &room,
            |event| event["event_id"] == first.as_str(),
            WAIT,
        )
        .await;
    assert_eq!(again["content"]["body"], "hello, bot");

    let reply = synapse.send_text(&bot, &room, "hello, alice", &[]).await;
    let seen = synapse
        .wait_for(
            &alice,
            &room,
            |event| event["event_id"] == reply.as_str(),
            WAIT,
        )
        .await;
    assert_eq!(seen["sender"], bot.user_id.as_str());
    assert!(seen["content"].get("m.mentions").is_none());
    let bodies: Vec<String> = synapse
        .messages(&alice, &room)
        .await
        .iter()
        .filter(|event| event["type"] == "m.room.message")
        .map(|event| event["content"]["body"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(bodies, ["hello, bot", "hello, alice"]);
}
