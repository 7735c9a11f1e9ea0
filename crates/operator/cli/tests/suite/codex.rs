//! The Codex runtime end to end with the real `codex app-server` (@openai/codex 0.171.0, installed
//! by `scripts/test`, found through `GATEHOUSE_CODEX_BIN`): a dedicated `gatehouse gateway
//! --runtime codex`, a `gatehouse node --runtime codex` that supervises Codex and relays it, and
//! `gatehouse mock-model` as the only stand-in.

use std::path::PathBuf;
use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;

use crate::suite::support::Dirs;
use crate::suite::support::Gateway;
use crate::suite::support::Process;
use crate::suite::support::WAIT;
use crate::suite::support::codex_bin;
use crate::suite::support::dirs;
use crate::suite::support::files_under;
use crate::suite::support::mock_model;
use crate::suite::support::mode;
use crate::suite::support::post_message;
use crate::suite::support::processes;
use crate::suite::support::start_node_runtime;
use crate::suite::support::turn;
use crate::suite::support::wait_turn;

const MODEL_KEY: &str = "codex-key-only-on-the-harness-93c2";

struct Setup {
    dirs: Dirs,
    gateway: Gateway,
    node: Process,
    _mock: Process,
    mock_url: String,
    harness: PathBuf,
}

impl Setup {
    async fn start(gateway_args: &[&str]) -> Setup {
        Setup::start_with_env(gateway_args, &[]).await
    }

    /// Starts the setup with `gateway_env` in the Gateway's environment.
    async fn start_with_env(gateway_args: &[&str], gateway_env: &[(&str, &str)]) -> Setup {
        let dirs = dirs();
        let logs = dirs.base.join("logs");
        let (mock, mock_url) = mock_model(&logs);
        let gateway = Gateway::start_with_env(
            &dirs.base.join("gateway"),
            &logs,
            &[&["--runtime", "codex"], gateway_args].concat(),
            gateway_env,
        );
        let code = gateway.setup_code(600);
        let harness = dirs.base.join("harness");
        let node = start_codex_node(&gateway, &harness, Some(&code), &logs, &mock_url);
        gateway.wait_ready().await;
        Setup {
            dirs,
            gateway,
            node,
            _mock: mock,
            mock_url,
            harness,
        }
    }

    async fn mock_requests(&self) -> Vec<serde_json::Value> {
        crate::suite::support::mock_requests(&self.mock_url).await
    }

    async fn audit(&self) -> Vec<serde_json::Value> {
        self.gateway.get_json("/v1/audit?after=0").await["events"]
            .as_array()
            .unwrap()
            .clone()
    }

    async fn transcript(&self, session: &str) -> Vec<serde_json::Value> {
        self.gateway
            .get_json(&format!("/v1/sessions/{session}/transcript"))
            .await["messages"]
            .as_array()
            .unwrap()
            .clone()
    }

    /// Returns the pid of this setup's `codex app-server`.
    fn codex_pid(&self) -> Option<u32> {
        let home = self.harness.join("codex-home");
        processes()
            .into_iter()
            .find(|(_, argv, env)| {
                argv.iter().any(|arg| arg == "app-server")
                    && env
                        .iter()
                        .any(|(k, v)| k == "CODEX_HOME" && std::path::Path::new(v) == home)
            })
            .map(|(pid, _, _)| pid)
    }
}

fn start_codex_node(
    gateway: &Gateway,
    harness: &std::path::Path,
    code: Option<&str>,
    logs: &std::path::Path,
    mock_url: &str,
) -> Process {
    start_codex_node_with(gateway, harness, code, logs, mock_url, &codex_bin())
}

/// Starts a codex node running the Codex binary `bin`.
fn start_codex_node_with(
    gateway: &Gateway,
    harness: &std::path::Path,
    code: Option<&str>,
    logs: &std::path::Path,
    mock_url: &str,
    bin: &str,
) -> Process {
    let model = format!("openai-responses:{mock_url}/v1:gpt-5.5");
    start_node_runtime(
        gateway,
        harness,
        code,
        logs,
        "codex",
        &[
            "--model",
            &model,
            "--model-key-env",
            "CODEX_TEST_MODEL_KEY",
            "--codex-bin",
            bin,
        ],
        &[("CODEX_TEST_MODEL_KEY", MODEL_KEY)],
    )
}

/// Returns each message as `<its field>:<content>`.
fn labelled(messages: &[serde_json::Value], field: &str) -> Vec<String> {
    messages
        .iter()
        .map(|m| {
            format!(
                "{}:{}",
                m[field].as_str().unwrap(),
                m["content"].as_str().unwrap()
            )
        })
        .collect()
}

/// The names of the function tools Codex offered the model in `request`.
fn offered_functions(request: &serde_json::Value) -> Vec<String> {
    request["body"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|tool| tool["type"] == "function")
        .map(|tool| tool["name"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_codex_turn_runs_on_the_harness_with_the_key_only_there() {
    let setup = Setup::start(&[]).await;
    let skill = setup.harness.join("workspace/skills/notes");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: notes\ndescription: Takes notes.\n---\nBody.\n",
    )
    .unwrap();
    let said = turn(&setup.gateway, "s1", "/say hi").await;
    assert_eq!(
        (said["status"].as_str(), said["reply"].as_str()),
        (Some("completed"), Some("hi")),
        "{said}"
    );
    let roles = labelled(&setup.transcript("s1").await, "role");
    assert_eq!(roles, vec!["user:/say hi", "assistant:hi"]);
    // Codex's token counts of the turn (its `thread/tokenUsage/updated`) are the turn's usage.
    let usage = &said["usage"];
    let count = |name: &str| usage[name].as_u64().unwrap_or_else(|| panic!("{said}"));
    assert!(
        count("inputTokens") > 0 && count("outputTokens") > 0,
        "{said}"
    );
    assert_eq!(
        count("totalTokens"),
        count("inputTokens") + count("outputTokens"),
        "{said}"
    );

    // Codex called the mock with the Harness's key.
    let requests = setup.mock_requests().await;
    let last = requests.last().unwrap();
    assert_eq!(last["path"], "/v1/responses");
    assert_eq!(
        last["headers"]["authorization"].as_str(),
        Some(format!("Bearer {MODEL_KEY}").as_str())
    );
    // The workspace's skills reach Codex as developer instructions, at their own location.
    let instructions = last["body"]["input"].to_string();
    assert!(
        instructions.contains("<available_skills>")
            && instructions.contains(&skill.join("SKILL.md").display().to_string()),
        "{instructions}"
    );
    // The Gateway tools are offered as dynamic tools, and no Gateway-local tool is.
    let functions = offered_functions(last);
    assert!(
        functions.contains(&String::from("session_status")),
        "{functions:?}"
    );
    // (`apply_patch` is in the list too; Codex's own is a custom tool, not a function.)
    for excluded in gatehouse_gateway::CODEX_EXCLUDED_TOOLS {
        assert!(
            !functions.iter().any(|name| name == excluded),
            "{excluded} offered: {functions:?}"
        );
    }

    // The Gateway has no model configuration and never holds the key.
    let gateway_pid = setup.gateway.process.pid();
    let environ = std::fs::read(format!("/proc/{gateway_pid}/environ")).unwrap();
    assert!(!String::from_utf8_lossy(&environ).contains(MODEL_KEY));
    let cmdline =
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{gateway_pid}/cmdline")).unwrap())
            .into_owned();
    assert!(
        !cmdline.contains("model") && !cmdline.contains(&setup.mock_url),
        "{cmdline}"
    );
    for file in files_under(&setup.gateway.state_dir) {
        let bytes = std::fs::read(&file).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(MODEL_KEY), "{}", file.display());
    }

    // Codex runs with its home private, the key only in its environment, and a TMPDIR that is
    // not above CODEX_HOME.
    let home = setup.harness.join("codex-home");
    assert_eq!(mode(&home), 0o700);
    assert_eq!(mode(&home.join("config.toml")), 0o600);
    let config = std::fs::read_to_string(home.join("config.toml")).unwrap();
    assert!(
        config.contains("env_key = \"CODEX_TEST_MODEL_KEY\""),
        "{config}"
    );
    assert!(!config.contains(MODEL_KEY));
    let pid = setup.codex_pid().expect("codex app-server runs");
    let (_, argv, env) = processes().into_iter().find(|(p, _, _)| *p == pid).unwrap();
    assert!(!argv.iter().any(|arg| arg.contains(MODEL_KEY)));
    let get = |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    assert_eq!(get("CODEX_TEST_MODEL_KEY").as_deref(), Some(MODEL_KEY));
    let tmpdir = PathBuf::from(get("TMPDIR").unwrap());
    assert!(
        !home.starts_with(&tmpdir),
        "TMPDIR {} is above CODEX_HOME",
        tmpdir.display()
    );
    assert!(get("GATEHOUSE_TOKEN").is_none());

    // The node is the companion file node: the file commands and the relay, no workers.
    let nodes = setup.gateway.get_json("/v1/nodes").await;
    let node = &nodes["nodes"][0];
    assert_eq!(node["runtime"], "codex");
    let commands: Vec<&str> = node["commands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert_eq!(
        commands,
        vec![
            "codex.appserver",
            "dir.list",
            "file.create",
            "file.fetch",
            "file.stat",
            "file.write",
            "workspace.memory",
            "workspace.skills"
        ]
    );
    // The workspace service still serves the Gateway outside model turns.
    std::fs::write(setup.harness.join("workspace/AGENTS.md"), "be brief").unwrap();
    let fetched = setup
        .gateway
        .get("/v1/agents/main/workspace/AGENTS.md")
        .await;
    assert_eq!(fetched.status(), 200);
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_patches_and_gateway_tools_follow_the_gateway_policy() {
    let setup = Setup::start(&[]).await;
    let ran = turn(
        &setup.gateway,
        "s",
        r#"/tool exec_command {"cmd":"echo hi > f.txt"}"#,
    )
    .await;
    assert_eq!(ran["status"], "completed", "{ran}");
    assert_eq!(
        std::fs::read_to_string(setup.harness.join("workspace/f.txt")).unwrap(),
        "hi\n"
    );
    let transcript = setup.transcript("s").await;
    let command = transcript
        .iter()
        .find(|m| m["toolName"] == "exec_command")
        .unwrap_or_else(|| panic!("no command in {transcript:?}"));
    let content = command["content"].as_str().unwrap();
    assert!(
        content.contains("echo hi > f.txt") && content.contains("exit code: 0"),
        "{content}"
    );

    let patched = turn(
        &setup.gateway,
        "s",
        r#"/tool apply_patch {"input":"*** Begin Patch\n*** Add File: p.txt\n+hello\n*** End Patch\n"}"#,
    )
    .await;
    assert_eq!(patched["status"], "completed", "{patched}");
    assert_eq!(
        std::fs::read_to_string(setup.harness.join("workspace/p.txt")).unwrap(),
        "hello\n"
    );

    // A Gateway tool called by the model runs on the Gateway, and its result reaches the model.
    let status = turn(&setup.gateway, "s", "/tool session_status {}").await;
    assert_eq!(status["status"], "completed", "{status}");
    let reply = status["reply"].as_str().unwrap();
    assert!(
        reply.starts_with("tool session_status -> ") && reply.contains("\"sessionKey\":\"s\""),
        "{reply}"
    );
    let requests = setup.mock_requests().await;
    let outputs: Vec<String> = requests.last().unwrap()["body"]["input"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|item| item["type"] == "function_call_output")
        .map(|item| item["output"].to_string())
        .collect();
    assert!(
        outputs.iter().any(|output| output.contains("sessionKey")),
        "{outputs:?}"
    );

    let audit = setup.audit().await;
    let approvals: Vec<(&str, &str)> = audit
        .iter()
        .filter(|event| event["action"] == "codex.approval")
        .map(|event| {
            (
                event["details"]["kind"].as_str().unwrap(),
                event["outcome"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        approvals,
        vec![("command", "accepted"), ("fileChange", "accepted")]
    );
    let tool_call = audit
        .iter()
        .find(|event| event["action"] == "gateway.tool.call")
        .unwrap();
    assert_eq!(tool_call["outcome"], "succeeded");
    assert!(
        tool_call["actor"].as_str().unwrap().starts_with("codex:"),
        "{tool_call}"
    );
    // Audit records carry no command text or output.
    assert!(
        !audit
            .iter()
            .any(|event| event.to_string().contains("echo hi"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_declined_command_does_not_run_and_the_decline_is_audited() {
    let setup = Setup::start(&["--codex-command-approval", "decline"]).await;
    let declined = turn(
        &setup.gateway,
        "s",
        r#"/tool exec_command {"cmd":"echo hi > f.txt"}"#,
    )
    .await;
    assert_eq!(declined["status"], "completed", "{declined}");
    assert!(!setup.harness.join("workspace/f.txt").exists());
    let transcript = setup.transcript("s").await;
    let command = transcript
        .iter()
        .find(|m| m["toolName"] == "exec_command")
        .unwrap_or_else(|| panic!("no command in {transcript:?}"));
    assert!(
        command["content"]
            .as_str()
            .unwrap()
            .contains("status: declined"),
        "{command}"
    );
    let audit = setup.audit().await;
    let decline = audit
        .iter()
        .find(|event| event["action"] == "codex.approval")
        .unwrap();
    assert_eq!(
        (decline["outcome"].as_str(), decline["reasonCode"].as_str()),
        (Some("declined"), Some("POLICY_DECLINED"))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_restart_continues_the_same_codex_thread() {
    restart_continues_the_same_codex_thread(&[], &[]).await;
}

/// The same restart with the Gateway's state in PostgreSQL and its blobs on S3: the thread
/// binding the second turn resumes is read back from PostgreSQL.
#[tokio::test(flavor = "multi_thread")]
async fn a_gateway_restart_continues_the_same_codex_thread_on_postgres_and_s3() {
    use sqlx::Connection;

    let external = crate::suite::s3::ExternalState::new().await;
    restart_continues_the_same_codex_thread(&external.args(), &external.envs()).await;
    let mut database = sqlx::PgConnection::connect(&external.store).await.unwrap();
    let bound: i64 =
        sqlx::query_scalar("SELECT count(*) FROM codex_threads WHERE session_key = 's'")
            .fetch_one(&mut database)
            .await
            .unwrap();
    assert_eq!(
        bound, 1,
        "the session's thread binding is not in PostgreSQL"
    );
}

/// Runs a turn, restarts the Gateway (SIGKILL, then the same port and state) and checks that
/// the next turn runs on the same Codex thread with the earlier exchange in its context.
async fn restart_continues_the_same_codex_thread(
    gateway_args: &[&str],
    gateway_env: &[(&str, &str)],
) {
    let setup = Setup::start_with_env(gateway_args, gateway_env).await;
    let first = turn(&setup.gateway, "s", "/say remember the word heron").await;
    assert_eq!(first["status"], "completed", "{first}");
    let thread_of = |request: &serde_json::Value| {
        request["headers"]["thread-id"]
            .as_str()
            .unwrap_or_else(|| panic!("no thread-id header in {request}"))
            .to_owned()
    };
    let thread = thread_of(setup.mock_requests().await.last().unwrap());

    let Setup {
        dirs,
        gateway,
        node,
        _mock,
        mock_url,
        harness,
    } = setup;
    let listen = gateway.url.trim_start_matches("http://").to_owned();
    drop(gateway);
    let gateway = Gateway::start_on_with_env(
        &listen,
        &dirs.base.join("gateway"),
        &dirs.base.join("logs"),
        &[&["--runtime", "codex"], gateway_args].concat(),
        gateway_env,
    );
    gateway.wait_ready().await;
    let setup = Setup {
        dirs,
        gateway,
        node,
        _mock,
        mock_url,
        harness,
    };
    let second = turn(&setup.gateway, "s", "/say and again").await;
    assert_eq!(
        (second["status"].as_str(), second["reply"].as_str()),
        (Some("completed"), Some("and again")),
        "{second}"
    );
    let last = setup.mock_requests().await.last().unwrap().clone();
    assert_eq!(
        thread_of(&last),
        thread,
        "the second turn ran on another thread"
    );
    // The earlier exchange is in the context Codex sent the model.
    let input = last["body"]["input"].to_string();
    assert!(input.contains("remember the word heron"), "{input}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_codex_fails_its_turn_clearly_and_an_aborted_turn_leaves_codex_usable() {
    let setup = Setup::start(&[]).await;
    assert_eq!(
        turn(&setup.gateway, "s", "/say warm").await["reply"],
        "warm"
    );
    let before = setup.codex_pid().unwrap();
    let hanging = post_message(&setup.gateway, "s", "/hang").await;
    wait_for_model_call(&setup, "/hang").await;
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(before as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    let failed = wait_turn(&setup.gateway, &hanging).await;
    assert_eq!(
        (failed["status"].as_str(), failed["error"]["code"].as_str()),
        (Some("failed"), Some("DEPENDENCY_UNAVAILABLE")),
        "{failed}"
    );
    assert!(
        failed["error"]["message"]
            .as_str()
            .unwrap()
            .contains("not replayed"),
        "{failed}"
    );
    // The supervisor restarts Codex and the next turn works on the same thread.
    let after = turn(&setup.gateway, "s", "/say back").await;
    assert_eq!(
        (after["status"].as_str(), after["reply"].as_str()),
        (Some("completed"), Some("back")),
        "{after}"
    );
    assert_ne!(setup.codex_pid(), Some(before));
    assert!(
        setup.node.stderr().contains("exited unexpectedly"),
        "{}",
        setup.node.stderr()
    );

    // Abort a hanging turn: it ends `aborted` and Codex carries on. (The first `/hang` reached
    // the model already: wait for this one's own call.)
    let earlier_hangs = model_calls_ending_with(&setup, "/hang").await;
    let hanging = post_message(&setup.gateway, "s", "/hang").await;
    wait_for_new_model_call(&setup, "/hang", earlier_hangs).await;
    let pid = setup.codex_pid();
    let aborted = reqwest::Client::new()
        .post(format!("{}/v1/sessions/s/abort", setup.gateway.url))
        .bearer_auth(&setup.gateway.token)
        .send()
        .await
        .unwrap();
    assert!(aborted.status().is_success(), "{}", aborted.status());
    assert_eq!(
        wait_turn(&setup.gateway, &hanging).await["status"],
        "aborted"
    );
    let still = turn(&setup.gateway, "s", "/say still here").await;
    assert_eq!(still["reply"], "still here", "{still}");
    assert_eq!(setup.codex_pid(), pid, "an abort must not restart Codex");

    // Kill the node host mid-turn: the Gateway's Codex client sees the relay end, the turn
    // fails clearly, and Codex does not outlive its supervisor.
    let mut setup = setup;
    let earlier_hangs = model_calls_ending_with(&setup, "/hang").await;
    let hanging = post_message(&setup.gateway, "s", "/hang").await;
    wait_for_new_model_call(&setup, "/hang", earlier_hangs).await;
    setup.node.kill();
    let lost = wait_turn(&setup.gateway, &hanging).await;
    assert_eq!(
        (lost["status"].as_str(), lost["error"]["code"].as_str()),
        (Some("failed"), Some("DEPENDENCY_UNAVAILABLE")),
        "{lost}"
    );
    let deadline = Instant::now() + WAIT;
    while setup.codex_pid().is_some() {
        assert!(
            Instant::now() < deadline,
            "codex app-server outlived its node host"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    setup.gateway.wait_not_ready().await;
}

/// Waits until the mock has received a model call whose last user text is `text`.
async fn wait_for_model_call(setup: &Setup, text: &str) {
    wait_for_new_model_call(setup, text, 0).await;
}

/// The model calls so far whose last input item contains `text`.
async fn model_calls_ending_with(setup: &Setup, text: &str) -> usize {
    setup
        .mock_requests()
        .await
        .iter()
        .filter(|request| {
            request["body"]["input"]
                .as_array()
                .and_then(|input| input.last())
                .is_some_and(|item| item.to_string().contains(text))
        })
        .count()
}

/// Waits until more than `before` model calls end with `text`: a turn sent after `before` was
/// counted has reached the model (an earlier turn's call with the same text does not count).
async fn wait_for_new_model_call(setup: &Setup, text: &str, before: usize) {
    let deadline = Instant::now() + WAIT;
    while model_calls_ending_with(setup, text).await <= before {
        assert!(Instant::now() < deadline, "the model never saw {text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn reply_artifacts_are_fetched_through_the_workspace_service() {
    let setup = Setup::start(&[]).await;
    let workspace = setup.harness.join("workspace");
    std::fs::write(workspace.join("report.txt"), "quarterly numbers").unwrap();
    std::os::unix::fs::symlink("/etc/hostname", workspace.join("link.txt")).unwrap();
    for (text, expected) in [
        ("/say MEDIA:report.txt", "artifact.stored"),
        ("/say MEDIA:link.txt", "artifact.refused"),
        ("/say MEDIA:../gateway/operator-token", "artifact.refused"),
    ] {
        let done = turn(&setup.gateway, "s", text).await;
        assert_eq!(done["status"], "completed", "{done}");
        let event = last_event(&setup, expected).await;
        if expected == "artifact.stored" {
            let media_id = event["mediaId"].as_str().unwrap();
            let bytes = setup
                .gateway
                .get(&format!("/v1/media/{media_id}"))
                .await
                .bytes()
                .await
                .unwrap();
            assert_eq!(&bytes[..], b"quarterly numbers");
        } else {
            let code = event["error"]["code"].as_str().unwrap();
            assert!(
                ["SYMLINK_REDIRECT", "PATH_TRAVERSAL"].contains(&code),
                "{text}: {event}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_matrix_channel_sends_a_codex_turns_reply_artifacts_as_files() {
    let outside = dirs();
    let logs = outside.base.join("logs");
    let synapse = crate::suite::synapse::Synapse::start(&outside.base.join("synapse"), &logs).await;
    let bot = synapse.register("gatehouse-bot", "bot-password").await;
    let alice = synapse.register("alice", "alice-password").await;
    let config = crate::suite::matrix::matrix_config(
        &outside.base,
        &synapse,
        &bot,
        &format!("allow-from = [{:?}]\n", alice.user_id),
    );
    let setup = Setup::start(&["--config", &config]).await;
    crate::suite::matrix::wait_connected(&setup.gateway).await;
    let dm = synapse.create_room(&alice, true, &[&bot.user_id]).await;
    crate::suite::matrix::wait_membership(&synapse, &alice, &dm, &bot, "join").await;
    std::fs::write(
        setup.harness.join("workspace").join("report.txt"),
        "quarterly numbers",
    )
    .unwrap();
    synapse
        .send_text(&alice, &dm, "/say MEDIA:report.txt", &[])
        .await;
    let sent = synapse
        .wait_for(
            &alice,
            &dm,
            |event| {
                event["sender"] == bot.user_id.as_str() && event["content"]["msgtype"] == "m.file"
            },
            WAIT,
        )
        .await;
    assert_eq!(sent["content"]["body"], "report.txt", "{sent:#}");
    assert_eq!(
        sent["content"]["info"]["mimetype"], "text/plain",
        "{sent:#}"
    );
    let mxc = sent["content"]["url"].as_str().unwrap();
    assert_eq!(synapse.download(&alice, mxc).await, b"quarterly numbers");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_telegram_channel_sends_a_codex_turns_reply_artifacts_as_documents() {
    use crate::suite::telegram_api::TelegramApi;
    let outside = dirs();
    let api =
        TelegramApi::start(crate::suite::telegram::TOKEN, crate::suite::telegram::bot()).await;
    let config = crate::suite::telegram::telegram_config(&outside, &api, "");
    let setup = Setup::start(&["--config", &config]).await;
    std::fs::write(
        setup.harness.join("workspace").join("report.txt"),
        "quarterly numbers",
    )
    .unwrap();
    api.user_writes(
        4242,
        crate::suite::telegram_api::ChatKind::Private,
        &crate::suite::telegram::alice(),
        "/say MEDIA:report.txt",
        None,
        None,
    );
    let deadline = Instant::now() + WAIT;
    let document = loop {
        if let Some(sent) = api
            .sent()
            .into_iter()
            .find(|sent| sent.method == "sendDocument")
        {
            break sent;
        }
        assert!(Instant::now() < deadline, "{:?}", api.sent());
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(document.chat_id, 4242);
    assert_eq!(
        document.file,
        Some((String::from("report.txt"), b"quarterly numbers".to_vec()))
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_slack_channel_uploads_a_codex_turns_reply_artifacts() {
    use crate::suite::slack_api::SlackApi;
    let outside = dirs();
    let api = SlackApi::start(
        crate::suite::slack::BOT_TOKEN,
        crate::suite::slack::APP_TOKEN,
        crate::suite::slack::SIGNING_SECRET,
        crate::suite::slack::bot(),
    )
    .await;
    let config = crate::suite::slack::slack_config(&outside, &api, "app-token-file = APP_FILE\n");
    let setup = Setup::start(&["--config", &config]).await;
    std::fs::write(
        setup.harness.join("workspace").join("report.txt"),
        "quarterly numbers",
    )
    .unwrap();
    let alice = crate::suite::slack::alice();
    let dm = api.open_dm(&alice);
    api.user_writes(&dm, &alice, "/say MEDIA:report.txt", None);
    let deadline = Instant::now() + WAIT;
    while api.uploaded().is_empty() {
        assert!(Instant::now() < deadline, "{:?}", api.posted());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let uploaded = api.uploaded();
    assert_eq!(uploaded.len(), 1);
    assert_eq!(uploaded[0].channel, dm);
    assert_eq!(uploaded[0].name, "report.txt");
    assert_eq!(uploaded[0].bytes, b"quarterly numbers");
}

/// Reads the session's event stream from the start and returns the payload of the last event
/// of `kind`.
async fn last_event(setup: &Setup, kind: &str) -> serde_json::Value {
    let response = reqwest::Client::new()
        .get(format!(
            "{}/v1/sessions/s/events?after=0",
            setup.gateway.url
        ))
        .bearer_auth(&setup.gateway.token)
        .send()
        .await
        .unwrap();
    let mut response = response;
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(3);
    while Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(500), response.chunk()).await {
            Ok(Ok(Some(chunk))) => text.push_str(&String::from_utf8_lossy(&chunk)),
            _ => break,
        }
    }
    let mut found = None;
    let mut current_kind = String::new();
    for line in text.lines() {
        if let Some(event) = line.strip_prefix("event:") {
            current_kind = event.trim().to_owned();
        } else if let Some(data) = line.strip_prefix("data:")
            && current_kind == kind
        {
            found = Some(serde_json::from_str::<serde_json::Value>(data.trim()).unwrap());
        }
    }
    found.unwrap_or_else(|| panic!("no {kind} event in {text}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_steered_message_joins_the_running_codex_turn() {
    let setup = Setup::start(&[]).await;
    let running = post_message(&setup.gateway, "s", "/slow 400 one two three four five").await;
    wait_for_model_call(&setup, "/slow 400").await;
    let steered = reqwest::Client::new()
        .post(format!("{}/v1/sessions/s/messages", setup.gateway.url))
        .bearer_auth(&setup.gateway.token)
        .json(&serde_json::json!({"text": "/say steered", "queueMode": "steer"}))
        .send()
        .await
        .unwrap();
    assert_eq!(steered.status(), 202);
    let steered: serde_json::Value = steered.json().await.unwrap();
    assert_eq!(
        steered["turnId"].as_str(),
        Some(running.as_str()),
        "{steered}"
    );
    let done = wait_turn(&setup.gateway, &running).await;
    assert_eq!(
        (done["status"].as_str(), done["reply"].as_str()),
        (Some("completed"), Some("steered")),
        "{done}"
    );
    // Codex called the model again with both user messages in the same turn.
    let requests = setup.mock_requests().await;
    let last = requests.last().unwrap()["body"]["input"].to_string();
    assert!(
        last.contains("/slow 400") && last.contains("/say steered"),
        "{last}"
    );
    let mut users = setup.transcript("s").await;
    users.retain(|m| m["role"] == "user");
    let users = labelled(&users, "turnId");
    assert_eq!(
        users,
        vec![
            format!("{running}:/slow 400 one two three four five"),
            format!("{running}:/say steered")
        ]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_codex_that_cannot_start_keeps_the_gateway_not_ready_with_a_clear_code() {
    let dirs = dirs();
    let logs = dirs.base.join("logs");
    let (_mock, mock_url) = mock_model(&logs);
    let gateway = Gateway::start_with(&dirs.base.join("gateway"), &logs, &["--runtime", "codex"]);
    let code = gateway.setup_code(600);
    // An executable that exits at once stands for a broken Codex install.
    let model = format!("openai-responses:{mock_url}/v1:gpt-5.5");
    let node = start_codex_node_with(
        &gateway,
        &dirs.base.join("harness"),
        Some(&code),
        &logs,
        &mock_url,
        "/bin/false",
    );
    // The node connects and serves files, but the Gateway is not ready without an initialized
    // app-server, and says why.
    let deadline = Instant::now() + WAIT;
    let body = loop {
        let nodes = gateway.get_json("/v1/nodes").await;
        if nodes["nodes"][0]["connected"] == true {
            let response = reqwest::get(format!("{}/readyz", gateway.url))
                .await
                .unwrap();
            assert_eq!(response.status(), 503);
            break response.json::<serde_json::Value>().await.unwrap();
        }
        assert!(Instant::now() < deadline, "the node never connected");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(body["error"]["code"], "CODEX_NOT_INITIALIZED", "{body}");
    let deadline = Instant::now() + WAIT;
    while !node.stderr().contains("exited unexpectedly") {
        assert!(Instant::now() < deadline, "{}", node.stderr());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(node);

    // A missing binary stops the node at start-up with the install instruction (exit code 2).
    let start = |root: &str, extra: &[&str]| {
        crate::suite::support::gatehouse()
            .args([
                "node",
                "--runtime",
                "codex",
                "--gateway",
                &gateway.url,
                "--root",
            ])
            .arg(dirs.base.join(root))
            .args(extra)
            .env("CODEX_TEST_MODEL_KEY", MODEL_KEY)
            .output()
            .unwrap()
    };
    let output = start(
        "harness2",
        &[
            "--model",
            &model,
            "--model-key-env",
            "CODEX_TEST_MODEL_KEY",
            "--codex-bin",
            "/nonexistent/codex",
        ],
    );
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("npm install -g @openai/codex@0.171.0"),
        "{stderr}"
    );
    // And the mock model is refused for a Codex node: Codex needs an HTTP Responses endpoint.
    let output = start("harness3", &[]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("openai-responses:URL:MODEL"));
}

/// The app-server retries a refused model request by itself, at most `CODEX_MODEL_RETRIES`
/// times (its own default would keep a turn against an unreachable model retrying for
/// minutes): a request refused once still completes its turn, and one refused every time fails
/// the turn after exactly 1 + `CODEX_MODEL_RETRIES` requests. Codex announces no retry of a
/// refused request (only of a dropped stream, which the driver turns into `model.retry`).
#[tokio::test(flavor = "multi_thread")]
async fn the_app_server_retries_a_refused_model_request_within_its_bound() {
    let setup = Setup::start(&[]).await;
    let said = turn(&setup.gateway, "s", "/flaky 1 500 recovered").await;
    assert_eq!(
        (said["status"].as_str(), said["reply"].as_str()),
        (Some("completed"), Some("recovered")),
        "{said}"
    );
    let failed = turn(&setup.gateway, "t", "/fail 500").await;
    assert_eq!(failed["status"], "failed", "{failed}");
    assert_eq!(failed["error"]["code"], "MODEL_UNAVAILABLE", "{failed}");
    let attempts = model_calls_ending_with(&setup, "/fail 500").await;
    assert_eq!(
        attempts,
        1 + usize::try_from(gatehouse_harness::codex_supervisor::CODEX_MODEL_RETRIES).unwrap(),
        "the failing request was sent once and retried within the bound"
    );
}
