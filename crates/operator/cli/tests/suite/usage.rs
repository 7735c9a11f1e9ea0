//! Usage and budgets end to end (issue 35): a real Gateway, a real node host and its workers,
//! and the HTTP mock model in OpenAI's and Anthropic's shapes. Each native model call is
//! counted, `GET /v1/usage`, `gatehouse usage` and `/metrics` agree with the turns, an
//! Anthropic turn counts its cached prefix, an overloaded answer is retried to success and shown
//! as a `model.retry` event, and a turn past `--turn-max-tokens` fails keeping its transcript.

use pretty_assertions::assert_eq;

use crate::suite::support::Gateway;
use crate::suite::support::MockModelSetup;
use crate::suite::support::Process;
use crate::suite::support::dirs;
use crate::suite::support::gatehouse;
use crate::suite::support::start_node_with;
use crate::suite::support::turn;

/// The sums of `GET /v1/usage` rows or turns' `usage` objects: (calls, input, cached, output,
/// total).
fn sums<'a>(usages: impl Iterator<Item = &'a serde_json::Value>) -> [u64; 5] {
    let mut sums = [0; 5];
    for usage in usages {
        for (sum, field) in sums.iter_mut().zip([
            "modelCalls",
            "inputTokens",
            "cachedInputTokens",
            "outputTokens",
            "totalTokens",
        ]) {
            *sum += usage[field]
                .as_u64()
                .unwrap_or_else(|| panic!("{field} in {usage}"));
        }
    }
    sums
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_35_each_native_model_call_counts_and_every_view_of_the_sums_agrees() {
    let setup = MockModelSetup::start(dirs(), &[]).await;
    let gateway = &setup.gateway;
    let text = turn(gateway, "u1", "/say counted").await;
    assert_eq!(text["status"], "completed", "{text}");
    assert_eq!(
        text["usage"]["modelCalls"], 1,
        "a text turn is one model call: {text}"
    );
    assert_eq!(text["usage"]["model"], "mock-model", "{text}");
    let tool = turn(
        gateway,
        "u1",
        r#"/tool write {"path":"counted.txt","content":"x"}"#,
    )
    .await;
    assert_eq!(tool["status"], "completed", "{tool}");
    assert_eq!(
        tool["usage"]["modelCalls"], 2,
        "a one-tool turn is two model calls: {tool}"
    );
    let other = turn(gateway, "u2", "/say other").await;
    let turns = [&text["usage"], &tool["usage"], &other["usage"]];
    for usage in turns {
        let [_, input, cached, output, total] = sums(std::iter::once(usage));
        assert_eq!(input + cached + output, total, "{usage}");
    }

    let by_session = gateway.get_json("/v1/usage?groupBy=session").await;
    let rows = by_session["rows"].as_array().unwrap();
    assert_eq!(
        rows.iter()
            .map(|row| row["group"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["u1", "u2"]
    );
    assert_eq!(
        sums(rows.iter()),
        sums(turns.into_iter()),
        "the sums are the turns'"
    );
    assert_eq!(
        sums(std::iter::once(&rows[0])),
        sums(turns[..2].iter().copied())
    );

    // The CLI prints the same rows.
    let output = gatehouse()
        .args([
            "usage",
            "--group-by",
            "agent",
            "--json",
            "--url",
            &gateway.url,
        ])
        .arg("--token-file")
        .arg(gateway.state_dir.join("operator-token"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let printed: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(printed["rows"].as_array().unwrap().len(), 1, "{printed}");
    assert_eq!(printed["rows"][0]["group"], "main");
    assert_eq!(
        sums(printed["rows"].as_array().unwrap().iter()),
        sums(rows.iter())
    );
    let text_output = gatehouse()
        .args(["usage", "--url", &gateway.url])
        .arg("--token-file")
        .arg(gateway.state_dir.join("operator-token"))
        .output()
        .unwrap();
    let lines = String::from_utf8(text_output.stdout).unwrap();
    assert!(lines.starts_with("u1  turns=2  modelCalls=3  "), "{lines}");

    let metrics = gateway.get("/metrics").await.text().await.unwrap();
    assert!(
        metrics.contains(r#"gatehouse_model_calls_total{model="mock-model"} 4"#),
        "{metrics}"
    );
    let [_, input, _, output_tokens, _] = sums(turns.into_iter());
    for (kind, count) in [("input", input), ("output", output_tokens)] {
        let line =
            format!(r#"gatehouse_model_tokens_total{{model="mock-model",kind="{kind}"}} {count}"#);
        assert!(metrics.contains(&line), "{line} is not in:\n{metrics}");
    }
}

/// Starts `gatehouse node` with an `anthropic:` model on the HTTP mock at `mock_url`, and the
/// key in `ANTHROPIC_API_KEY` (no `--model-key-env`: that is the default for this kind).
fn start_anthropic_node(
    gateway: &Gateway,
    root: &std::path::Path,
    setup_code: Option<&str>,
    logs: &std::path::Path,
    mock_url: &str,
) -> Process {
    let model = format!("anthropic:{mock_url}/v1:claude-mock");
    start_node_with(
        gateway,
        root,
        setup_code,
        logs,
        &["--model", &model],
        &[("ANTHROPIC_API_KEY", "anthropic-test-key")],
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_35_anthropic_turns_use_tools_count_the_cached_prefix_and_retry_an_overloaded_answer()
{
    let setup =
        MockModelSetup::start_with_node(dirs(), "127.0.0.1:0", &[], start_anthropic_node).await;
    let gateway = &setup.gateway;
    let first = turn(gateway, "a", "/say from claude").await;
    assert_eq!(first["status"], "completed", "{first}");
    assert_eq!(first["reply"], "from claude");
    assert_eq!(first["usage"]["model"], "claude-mock", "{first}");
    // The system prompt and the tools are the same in every call: the first call wrote them
    // to the cache, every later call reads them.
    let tool = turn(
        gateway,
        "a",
        r#"/tool write {"path":"claude.txt","content":"written"}"#,
    )
    .await;
    assert_eq!(tool["status"], "completed", "{tool}");
    assert!(
        tool["reply"]
            .as_str()
            .unwrap()
            .starts_with("tool write -> "),
        "{tool}"
    );
    assert_eq!(tool["usage"]["modelCalls"], 2, "{tool}");
    assert!(
        tool["usage"]["cachedInputTokens"].as_u64().unwrap() > 0,
        "the cached prefix is counted: {tool}"
    );
    // What the provider received: the key, the version, and the tool result answering the
    // tool call's id.
    let requests = crate::suite::support::mock_requests(&setup.mock_url).await;
    let messages: Vec<&serde_json::Value> = requests
        .iter()
        .filter(|request| request["path"] == "/v1/messages")
        .collect();
    assert_eq!(messages.len(), 3, "{requests:?}");
    for request in &messages {
        assert_eq!(request["headers"]["x-api-key"], "anthropic-test-key");
        assert_eq!(request["headers"]["anthropic-version"], "2023-06-01");
    }
    let answer = &messages[2]["body"];
    let blocks = answer["messages"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|message| message["content"].as_array().cloned().unwrap_or_default())
        .collect::<Vec<_>>();
    let call = blocks
        .iter()
        .find(|block| block["type"] == "tool_use")
        .unwrap_or_else(|| panic!("no tool_use in {answer}"));
    let result = blocks
        .iter()
        .find(|block| block["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result in {answer}"));
    assert_eq!(result["tool_use_id"], call["id"]);

    // Overloaded once, then answered: the turn completes, the retry is counted and shown.
    let flaky = turn(gateway, "b", "/flaky 1 529 recovered").await;
    assert_eq!(flaky["status"], "completed", "{flaky}");
    assert_eq!(flaky["reply"], "recovered");
    assert_eq!(flaky["usage"]["retries"], 1, "{flaky}");
    // The session's events up to the turn's end include the retry.
    let mut stream = gateway.get("/v1/sessions/b/events?after=0").await;
    let mut events = String::new();
    while !events.contains("event: turn.completed") {
        let chunk = tokio::time::timeout(crate::suite::support::WAIT, stream.chunk())
            .await
            .unwrap_or_else(|_| panic!("the events stopped at:\n{events}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the stream ended at:\n{events}"));
        events.push_str(&String::from_utf8_lossy(&chunk));
    }
    let retry = events
        .split("\n\n")
        .find(|event| event.contains("event: model.retry"))
        .unwrap_or_else(|| panic!("no model.retry in:\n{events}"));
    assert!(retry.contains(r#""code":"MODEL_UNAVAILABLE""#), "{retry}");
    assert!(retry.contains(r#""attempt":1"#), "{retry}");
}

#[tokio::test(flavor = "multi_thread")]
async fn issue_35_a_native_turn_past_its_ceiling_fails_and_keeps_its_transcript() {
    // One token: the first model call passes it, so the turn ends before its tool runs.
    let setup = MockModelSetup::start(dirs(), &["--turn-max-tokens", "1"]).await;
    let gateway = &setup.gateway;
    let ended = turn(
        gateway,
        "c",
        r#"/tool write {"path":"ceiling.txt","content":"x"}"#,
    )
    .await;
    assert_eq!(ended["status"], "failed", "{ended}");
    assert_eq!(ended["error"]["code"], "TURN_BUDGET_EXCEEDED", "{ended}");
    assert_eq!(ended["usage"]["modelCalls"], 1, "{ended}");
    let used = ended["usage"]["totalTokens"].as_u64().unwrap();
    assert!(
        used > 1,
        "the usage that passed the ceiling is kept: {ended}"
    );
    assert!(
        !crate::suite::support::files_under(&setup.path("harness"))
            .iter()
            .any(|path| path.ends_with("ceiling.txt")),
        "the tool the last call asked for did not run"
    );
    let transcript = gateway.get_json("/v1/sessions/c/transcript").await;
    assert_eq!(
        transcript["messages"][0]["role"], "user",
        "the user's message stays: {transcript}"
    );
}
