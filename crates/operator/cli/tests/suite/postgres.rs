//! `gatehouse up` with its state in PostgreSQL (`--store postgres://...`), on the throwaway
//! server `GATEHOUSE_TEST_POSTGRES_URL` names (scripts/test starts it): a turn completes and its
//! transcript survives a restart, a `kill -9` under 64 clients loses no acknowledged message,
//! and while the server cannot be reached `/readyz` and the API answer STORE_UNAVAILABLE,
//! recovering without a restart once it can.

use std::net::SocketAddr;
use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;
use sqlx::Connection;

use crate::suite::support::Gateway;
use crate::suite::support::WAIT;
use crate::suite::support::gatehouse;
use crate::suite::up::Up;

/// Creates an empty database on the test server and returns its URL.
pub(crate) async fn fresh_database() -> url::Url {
    gatehouse_testkit::fresh_postgres_database("cli").await
}

pub(crate) fn up_on(data: &std::path::Path, store: &url::Url) -> Up {
    let mut command = gatehouse();
    command.env("GATEHOUSE_STORE", store.as_str());
    Up::start_with(command, data)
}

pub(crate) async fn completed_turn(up: &Up, session: &str, text: &str) -> serde_json::Value {
    let (status, body) = up.post(session, serde_json::json!({"text": text})).await;
    assert_eq!(status, 202, "{body}");
    let turn = up.turn_status(body["turnId"].as_str().unwrap(), 20).await;
    assert_eq!(turn["status"], "completed", "{turn}");
    turn
}

pub(crate) fn contents(transcript: &[serde_json::Value]) -> Vec<(String, String)> {
    transcript
        .iter()
        .map(|message| {
            (
                message["role"].as_str().unwrap().to_owned(),
                message["content"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn up_on_postgres_completes_a_turn_and_the_transcript_survives_a_restart() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let store = fresh_database().await;
    let expected = vec![
        ("user".to_owned(), "/say stored in postgres".to_owned()),
        ("assistant".to_owned(), "stored in postgres".to_owned()),
    ];
    {
        let mut up = up_on(&data, &store);
        up.wait_ready().await;
        completed_turn(&up, "pg", "/say stored in postgres").await;
        assert_eq!(contents(&up.transcript("pg").await), expected);
        up.process.terminate();
        let log = up.process.stderr();
        assert!(
            log.contains(store.as_str()),
            "the store URL is not logged: {log}"
        );
    }
    assert!(
        !data.join("gateway").join("gateway.db").exists(),
        "the state went to SQLite, not PostgreSQL"
    );
    let up = up_on(&data, &store);
    up.wait_ready().await;
    assert_eq!(contents(&up.transcript("pg").await), expected);
    completed_turn(&up, "pg", "/say after the restart").await;
    assert_eq!(up.transcript("pg").await.len(), 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_9_on_postgres_under_64_clients_loses_no_acknowledged_message() {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let store = fresh_database().await;
    crate::suite::up::kill_9_loses_nothing(&data, &|data| up_on(data, &store), 64).await;
}

/// A TCP forwarder on loopback to the test server: stopping it is, to the Gateway, the server
/// going away (every connection drops, new ones are refused); starting it again on the same port
/// brings the server back.
pub(crate) struct Outage {
    pub(crate) port: u16,
    upstream: SocketAddr,
    forwarding: Option<tokio::task::JoinHandle<()>>,
}

impl Outage {
    pub(crate) async fn new(server: &url::Url) -> Outage {
        let upstream = server.socket_addrs(|| Some(5432)).unwrap()[0];
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mut outage = Outage {
            port,
            upstream,
            forwarding: None,
        };
        outage.forwarding = Some(tokio::spawn(forward(listener, upstream)));
        outage
    }

    /// Drops every forwarded connection and stops listening.
    pub(crate) fn begin(&mut self) {
        if let Some(forwarding) = self.forwarding.take() {
            forwarding.abort();
        }
    }

    /// Listens on the same port again.
    pub(crate) async fn end(&mut self) {
        let deadline = Instant::now() + WAIT;
        let listener = loop {
            match tokio::net::TcpListener::bind(("127.0.0.1", self.port)).await {
                Ok(listener) => break listener,
                Err(error) => {
                    assert!(Instant::now() < deadline, "cannot listen again: {error}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        self.forwarding = Some(tokio::spawn(forward(listener, self.upstream)));
    }
}

async fn forward(listener: tokio::net::TcpListener, upstream: SocketAddr) {
    // Dropped (with every connection task) when the forwarding task is aborted.
    let mut connections = tokio::task::JoinSet::new();
    while let Ok((mut inbound, _)) = listener.accept().await {
        connections.spawn(async move {
            if let Ok(mut outbound) = tokio::net::TcpStream::connect(upstream).await {
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            }
        });
    }
}

/// Starts `up` on a fresh database reached through an [`Outage`] forwarder, and waits until it
/// is ready. The tempdir holds the data directory.
pub(crate) async fn up_behind_outage() -> (tempfile::TempDir, Outage, Up) {
    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let direct = fresh_database().await;
    let outage = Outage::new(&direct).await;
    let mut through = direct.clone();
    through.set_port(Some(outage.port)).unwrap();
    let up = up_on(&data, &through);
    up.wait_ready().await;
    (temp, outage, up)
}

pub(crate) async fn readyz(up: &Up) -> (u16, serde_json::Value) {
    crate::suite::support::status_and_json(
        reqwest::Client::new()
            .get(format!("{}/readyz", up.url))
            .timeout(WAIT),
    )
    .await
}

/// Waits until `/readyz` answers `503` with `code`.
pub(crate) async fn wait_readyz_refuses_with(up: &Up, code: &str) {
    let deadline = Instant::now() + WAIT;
    loop {
        let (status, body) = readyz(up).await;
        if status == 503 && body["error"]["code"] == code {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "readyz kept answering {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn while_postgres_is_unreachable_readyz_and_admission_say_store_unavailable_and_recover() {
    let (_temp, mut outage, mut up) = up_behind_outage().await;
    completed_turn(&up, "s", "/say before").await;

    outage.begin();
    wait_readyz_refuses_with(&up, "STORE_UNAVAILABLE").await;
    let (status, body) = up.post("s", serde_json::json!({"text": "/say lost"})).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("STORE_UNAVAILABLE")),
        "{body}"
    );

    outage.end().await;
    up.wait_ready().await;
    completed_turn(&up, "s", "/say after").await;
    assert_eq!(
        contents(&up.transcript("s").await),
        vec![
            ("user".to_owned(), "/say before".to_owned()),
            ("assistant".to_owned(), "before".to_owned()),
            ("user".to_owned(), "/say after".to_owned()),
            ("assistant".to_owned(), "after".to_owned()),
        ],
        "a refused message was stored, or an acknowledged one lost"
    );
    up.process.terminate();
}

/// A turn that ends while PostgreSQL is unreachable is not left running: its end is stored once
/// the server is back, and the session takes its next message.
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_ending_while_postgres_is_unreachable_is_recorded_when_it_is_back() {
    let (_temp, mut outage, mut up) = up_behind_outage().await;

    let (status, body) = up
        .post("s", serde_json::json!({"text": "/slow 2000 late"}))
        .await;
    assert_eq!(status, 202, "{body}");
    let turn_id = body["turnId"].as_str().unwrap().to_owned();
    let deadline = Instant::now() + WAIT;
    loop {
        let turn = up.turn_status(&turn_id, 0).await;
        if turn["status"] == "running" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the turn did not start: {turn}\n{}",
            up.process.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The reply comes while the server is away: the runtime cannot commit it and the engine
    // cannot store the turn's end until the server is back.
    outage.begin();
    tokio::time::sleep(Duration::from_millis(4000)).await;
    outage.end().await;
    up.wait_ready().await;

    let deadline = Instant::now() + WAIT;
    loop {
        let turn = up.turn_status(&turn_id, 1).await;
        let status = turn["status"].as_str().unwrap_or_default().to_owned();
        if !matches!(status.as_str(), "queued" | "running") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the turn stayed {status} after the server came back"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    completed_turn(&up, "s", "/say after").await;
    up.process.terminate();
}

/// A hostile node answers a turn with NUL characters, which PostgreSQL refuses in text and in
/// `jsonb`: the turn still ends with the reply (NUL replaced), so the session is not left
/// running and takes its next turn, whose failure carries NUL in its code and text.
#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_nodes_nul_characters_do_not_wedge_a_session() {
    use crate::suite::hostile::HostileNode;
    use crate::suite::hostile::NATIVE_COMMANDS;
    use crate::suite::support::Gateway;

    let dirs = crate::suite::support::dirs();
    let store = fresh_database().await;
    let gateway = Gateway::start_with(
        &dirs.base.join("gateway"),
        &dirs.base.join("logs"),
        &["--store", store.as_str()],
    );
    let mut node = HostileNode::enroll(&gateway, 11, NATIVE_COMMANDS).await;

    let first = crate::suite::support::post_message(&gateway, "s", "hello").await;
    let invoke = node.next_invoke("agent.turn").await;
    node.finish(&invoke.id, serde_json::json!({"reply": "a\u{0}b"}))
        .await;
    let ended = crate::suite::support::wait_turn(&gateway, &first).await;
    assert_eq!(
        (ended["status"].as_str(), ended["reply"].as_str()),
        (Some("completed"), Some("a\u{fffd}b")),
        "{ended}"
    );

    // The session takes its next turn; the node fails it with NUL in its error text.
    let second = crate::suite::support::post_message(&gateway, "s", "again").await;
    let invoke = node.next_invoke("agent.turn").await;
    node.fail_with(&invoke.id, "FORGED\u{0}CODE", "bad\u{0}text")
        .await;
    let failed = crate::suite::support::wait_turn(&gateway, &second).await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert!(
        !failed.to_string().contains("\\u0000"),
        "a NUL reached the answer: {failed}"
    );
}

#[test]
fn a_store_url_with_a_password_is_refused_without_echoing_it() {
    let temp = tempfile::tempdir().unwrap();
    let from_flag = gatehouse()
        .args(["gateway", "--state"])
        .arg(temp.path().join("state"))
        .args(["--store", "postgres://gatehouse:s3cret@127.0.0.1:1/gh"])
        .output()
        .unwrap();
    let config = temp.path().join("gateway.toml");
    std::fs::write(
        &config,
        "store = \"postgres://gatehouse@127.0.0.1:1/gh?password=s3cret\"\n",
    )
    .unwrap();
    let from_file = gatehouse()
        .args(["gateway", "--state"])
        .arg(temp.path().join("state"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    for output in [from_flag, from_file] {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{stderr}");
        assert!(!stderr.contains("s3cret"), "{stderr}");
        assert!(
            stderr.contains("***") && stderr.contains("password-env"),
            "{stderr}"
        );
    }
    assert!(
        !temp.path().join("state").exists(),
        "a refused store created state"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_config_key_store_selects_the_database_and_the_flag_wins_over_it() {
    let temp = tempfile::tempdir().unwrap();
    let database = fresh_database().await;
    let config = temp.path().join("gateway.toml");
    std::fs::write(&config, format!("store = {:?}\n", database.as_str())).unwrap();
    let config = config.to_str().unwrap();
    let from_file = temp.path().join("from-file");
    let gateway = Gateway::start_with(&from_file, temp.path(), &["--config", config]);
    gateway.get("/readyz").await;
    let mut connection = sqlx::PgConnection::connect(database.as_str())
        .await
        .unwrap();
    let migrations: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert!(
        migrations > 0,
        "the Gateway did not migrate the configured database"
    );
    assert!(!from_file.join("gateway.db").exists());
    drop(gateway);

    let flag_store = temp.path().join("flag.db");
    let from_flag = temp.path().join("from-flag");
    let flag = format!("sqlite://{}", flag_store.display());
    let gateway = Gateway::start_with(
        &from_flag,
        temp.path(),
        &["--config", config, "--store", &flag],
    );
    gateway.get("/readyz").await;
    assert!(
        flag_store.is_file(),
        "the --store flag did not win over the config file"
    );
    assert!(!from_flag.join("gateway.db").exists());
}
