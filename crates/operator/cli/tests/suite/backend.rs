//! Which store and media store the Gateways of the end-to-end tests use.
//!
//! By default a Gateway keeps its state in `<state>/gateway.db` and its blobs in
//! `<state>/media`, as an operator's first `gatehouse up` does. With
//! `GATEHOUSE_TEST_BACKEND=postgres-s3` every Gateway a test starts through [`crate::suite::up::Up`]
//! or [`crate::suite::support::Gateway`] gets a database of its own on the test PostgreSQL
//! server and a bucket of its own on the test S3 API server instead (`GATEHOUSE_STORE` and
//! `GATEHOUSE_MEDIA` in its environment, with the S3 credentials). scripts/test runs the `up`,
//! dedicated and Codex suites a second time that way, so the same assertions hold on both.
//!
//! The database and the bucket belong to the Gateway's state directory: a test that stops a
//! Gateway and starts it again on the same directory finds its state again, as it would in the
//! SQLite file. A test that chooses its own store (`--store`, a `--config` file, or
//! `GATEHOUSE_STORE` in the command's environment) is left alone; a test of the local files
//! themselves says so with [`keep_local`] or [`local_store_args`].

use std::collections::HashMap;
use std::path::Path;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;

use crate::suite::s3::ExternalState;

/// The environment variable that selects the backend.
const SWITCH: &str = "GATEHOUSE_TEST_BACKEND";

/// The backends the switch can select.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Backend {
    /// A SQLite file and a media directory under the state directory (the default).
    Local,
    /// PostgreSQL and S3 on the test servers.
    PostgresS3,
}

/// Returns the backend the switch selects; an unknown value fails the test rather than running
/// it on a backend nobody asked for.
pub(crate) fn selected() -> Backend {
    match std::env::var(SWITCH).as_deref() {
        Err(std::env::VarError::NotPresent) | Ok("" | "local") => Backend::Local,
        Ok("postgres-s3") => Backend::PostgresS3,
        Ok(other) => panic!("{SWITCH}={other:?} is not a backend: use `local` or `postgres-s3`"),
        Err(error) => panic!("{SWITCH} is not valid: {error}"),
    }
}

/// The external state of each state directory this test process has started a Gateway on.
static STATES: Mutex<Option<HashMap<PathBuf, ExternalState>>> = Mutex::new(None);

/// Points the Gateway `command` would start on `state_dir` at the selected backend: nothing to
/// do for [`Backend::Local`]; for [`Backend::PostgresS3`] the directory's own database and bucket
/// (created the first time), unless the command already chooses a store.
pub(crate) fn apply(command: &mut Command, state_dir: &Path) {
    if selected() == Backend::Local || chooses_its_store(command) {
        return;
    }
    let mut states = STATES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let states = states.get_or_insert_with(HashMap::new);
    let state = states
        .entry(state_dir.to_path_buf())
        .or_insert_with(create_external_state);
    command
        .env("GATEHOUSE_STORE", &state.store)
        .env("GATEHOUSE_MEDIA", &state.media)
        .envs(state.envs());
}

/// Returns the database and bucket of the Gateway on `state_dir` when the switch put its state
/// there, `None` when its state is local.
pub(crate) fn external(state_dir: &Path) -> Option<ExternalState> {
    let states = STATES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    states.as_ref()?.get(state_dir).cloned()
}

/// Keeps the Gateway `command` starts on `state_dir` on the local SQLite file and media
/// directory whatever the switch says, for a test of what happens to those files (a full disk
/// under the state directory, for example).
pub(crate) fn keep_local(command: &mut Command, state_dir: &Path) {
    command.env(
        "GATEHOUSE_STORE",
        format!("sqlite://{}", state_dir.join("gateway.db").display()),
    );
}

/// The Gateway arguments that keep a Gateway on `state_dir` on its local SQLite file and media
/// directory whatever the switch says (the default store, named explicitly).
pub(crate) fn local_store_args(state_dir: &Path) -> [String; 2] {
    [
        "--store".to_owned(),
        format!("sqlite://{}", state_dir.join("gateway.db").display()),
    ]
}

/// Returns whether `command` names a store itself, on its command line (`--store`, or a
/// `--config` file that may name one) or in its environment.
fn chooses_its_store(command: &Command) -> bool {
    command
        .get_args()
        .any(|argument| argument == "--store" || argument == "--config")
        || command
            .get_envs()
            .any(|(name, value)| name == "GATEHOUSE_STORE" && value.is_some())
}

/// Creates a database and a bucket, on a thread of its own so that it works whether or not the
/// caller is inside a Tokio runtime.
fn create_external_state() -> ExternalState {
    std::thread::spawn(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(ExternalState::new())
    })
    .join()
    .unwrap_or_else(|_| panic!("creating the test database and bucket failed (see above)"))
}

/// The switch is not a no-op: with the default backend the message and the upload land in the
/// state directory's SQLite file and media directory; with `postgres-s3` they land in the
/// directory's own database and bucket and the state directory holds neither.
#[tokio::test(flavor = "multi_thread")]
async fn the_backend_switch_decides_where_a_gateways_state_lives() {
    use sqlx::Connection;

    let temp = tempfile::tempdir().unwrap();
    let data = temp.path().canonicalize().unwrap().join("data");
    let up = crate::suite::up::Up::start(&data);
    up.wait_ready().await;
    let marker = "the switch decides, 4c1e";
    let (status, body) = up.post("where", serde_json::json!({"text": marker})).await;
    assert_eq!(status, 202, "{body}");
    let uploaded = crate::suite::support::media_upload(&up.url, &up.token, "an uploaded blob")
        .header("X-Filename", "where.txt")
        .send()
        .await
        .unwrap();
    assert!(uploaded.status().is_success(), "{}", uploaded.status());
    let state_dir = data.join("gateway");
    let local_db = state_dir.join("gateway.db");
    let local_blobs = crate::suite::support::files_under(&state_dir)
        .into_iter()
        .filter(|file| file.components().any(|part| part.as_os_str() == "blobs"))
        .count();
    match selected() {
        Backend::Local => {
            assert!(external(&state_dir).is_none());
            assert!(
                local_db.is_file(),
                "no SQLite file at {}",
                local_db.display()
            );
            assert_eq!(local_blobs, 1, "the upload is not in the media directory");
        }
        Backend::PostgresS3 => {
            let external = external(&state_dir).expect("the switch chose no database");
            assert!(!local_db.exists(), "a SQLite file was made under the state");
            assert_eq!(local_blobs, 0, "a blob was written under the state");
            let mut connection = sqlx::PgConnection::connect(&external.store).await.unwrap();
            let stored: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM messages WHERE role = 'user' AND content LIKE $1",
            )
            .bind(format!("%{marker}%"))
            .fetch_one(&mut connection)
            .await
            .unwrap();
            assert_eq!(stored, 1, "the message is not in the database");
            let keys = external.keys().await;
            assert!(
                keys.iter().any(|key| key.starts_with("gateway/blobs/")),
                "the upload is not in the bucket: {keys:?}"
            );
        }
    }
}
