//! A mock model on `127.0.0.1:0` and small readers for its streams.

use std::time::Duration;
use std::time::Instant;

use futures_util::StreamExt;
use gatehouse_mockmodel::Recorder;
use serde_json::Value;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// How long any wait in these tests may take before the test fails.
pub(crate) const WAIT: Duration = Duration::from_secs(20);

/// A running mock model; dropping it stops the server.
pub(crate) struct Mock {
    pub(crate) url: String,
    pub(crate) recorder: Recorder,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

impl Mock {
    pub(crate) async fn start() -> Mock {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let recorder = Recorder::default();
        let (shutdown, shutdown_receiver) = oneshot::channel::<()>();
        let task = tokio::spawn(gatehouse_mockmodel::serve_with_recorder(
            listener,
            recorder.clone(),
            async move {
                let _ = shutdown_receiver.await;
            },
        ));
        Mock {
            url,
            recorder,
            shutdown: Some(shutdown),
            task: Some(task),
        }
    }

    /// Asks the server to shut down and waits until it has.
    pub(crate) async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        let task = self.task.take().unwrap();
        tokio::time::timeout(WAIT, task)
            .await
            .expect("server did not stop")
            .unwrap()
            .unwrap();
    }

    pub(crate) async fn post(&self, path: &str, body: &Value) -> reqwest::Response {
        let request = reqwest::Client::new()
            .post(format!("{}{path}", self.url))
            .bearer_auth("sk-test")
            .json(body)
            .send();
        tokio::time::timeout(WAIT, request).await.unwrap().unwrap()
    }
}

impl Drop for Mock {
    fn drop(&mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
    }
}

/// Reads a whole (finite) body as text.
pub(crate) async fn text(response: reqwest::Response) -> String {
    tokio::time::timeout(WAIT, response.text())
        .await
        .unwrap()
        .unwrap()
}

/// One SSE event: the `event:` name (if any) and the `data:` text.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Event {
    pub(crate) name: Option<String>,
    pub(crate) data: String,
}

impl Event {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.data).unwrap()
    }
}

/// Splits a complete SSE body into events; comments are returned as events named `:`.
pub(crate) fn events(body: &str) -> Vec<Event> {
    body.split("\n\n")
        .filter(|block| !block.is_empty())
        .map(|block| {
            let mut name = None;
            let mut data = Vec::new();
            for line in block.lines() {
                if let Some(value) = line.strip_prefix("event: ") {
                    name = Some(value.to_owned());
                } else if let Some(value) = line.strip_prefix("data: ") {
                    data.push(value);
                } else if let Some(comment) = line.strip_prefix(':') {
                    name = Some(String::from(":"));
                    data.push(comment.trim());
                }
            }
            Event {
                name,
                data: data.join("\n"),
            }
        })
        .collect()
}

/// Reads a stream event by event, noting when each complete event arrived. Stops after `limit`
/// events or at the end of the body.
pub(crate) async fn timed_events(
    response: reqwest::Response,
    limit: usize,
) -> Vec<(Instant, Event)> {
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut timed = Vec::new();
    while timed.len() < limit {
        let Some(chunk) = tokio::time::timeout(WAIT, stream.next()).await.unwrap() else {
            break;
        };
        buffer.push_str(std::str::from_utf8(&chunk.unwrap()).unwrap());
        let now = Instant::now();
        while let Some(end) = buffer.find("\n\n") {
            let block: String = buffer.drain(..end + 2).collect();
            timed.extend(events(&block).into_iter().map(|event| (now, event)));
        }
    }
    timed
}
