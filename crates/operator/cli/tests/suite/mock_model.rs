//! `gatehouse mock-model`: the real binary on `127.0.0.1:0`, spoken to over HTTP.

use std::process::Child;
use std::process::Stdio;

use pretty_assertions::assert_eq;
use serde_json::Value;
use serde_json::json;

use crate::suite::support::WAIT;
use crate::suite::support::gatehouse;

/// A `gatehouse mock-model` process, killed when dropped.
struct MockModel {
    child: Child,
    url: String,
}

impl MockModel {
    fn start() -> MockModel {
        let mut child = gatehouse()
            .args(["mock-model", "--listen", "127.0.0.1:0"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let receiver = crate::suite::support::stdout_lines(&mut child);
        let mut mock_model = MockModel {
            child,
            url: String::new(),
        };
        let first = receiver
            .recv_timeout(WAIT)
            .expect("mock-model printed nothing");
        mock_model.url = first
            .strip_prefix("mock model listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        mock_model
    }

    /// Sends SIGTERM and waits for the exit status.
    fn terminate(&mut self) -> std::process::ExitStatus {
        crate::suite::support::terminate(&mut self.child)
    }
}

impl Drop for MockModel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test]
async fn mock_model_answers_say_over_http_and_stops_on_sigterm() {
    let mut mock_model = MockModel::start();
    assert!(
        mock_model.url.starts_with("http://127.0.0.1:"),
        "{}",
        mock_model.url
    );
    assert!(!mock_model.url.ends_with(":0"), "{}", mock_model.url);

    let client = reqwest::Client::new();
    let request = client
        .post(format!("{}/v1/chat/completions", mock_model.url))
        .bearer_auth("sk-cli-test")
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "/say hi"}]}))
        .send();
    let response = tokio::time::timeout(WAIT, request).await.unwrap().unwrap();
    assert_eq!(response.status(), 200);
    let completion: Value = tokio::time::timeout(WAIT, response.json())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(completion["choices"][0]["message"]["content"], "hi");

    let request = client
        .post(format!("{}/v1/responses", mock_model.url))
        .json(&json!({"model": "m", "stream": true, "input": "/say hi"}))
        .send();
    let response = tokio::time::timeout(WAIT, request).await.unwrap().unwrap();
    let body = tokio::time::timeout(WAIT, response.text())
        .await
        .unwrap()
        .unwrap();
    assert!(body.contains("event: response.completed"), "{body}");

    let recorded: Value = tokio::time::timeout(
        WAIT,
        client
            .get(format!("{}/_mock/requests", mock_model.url))
            .send(),
    )
    .await
    .unwrap()
    .unwrap()
    .json()
    .await
    .unwrap();
    assert_eq!(recorded.as_array().unwrap().len(), 2);
    assert_eq!(
        recorded[0]["headers"]["authorization"],
        "Bearer sk-cli-test"
    );

    assert!(mock_model.terminate().success());
}
