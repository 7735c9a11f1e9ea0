//! A [`Transport`] to a local `codex app-server` child over stdio, for tools that talk to Codex
//! directly (the `gatehouse bench codex` baseline). The Gateway itself never spawns Codex: it
//! reaches the Harness's app-server only through the relay.

use std::path::Path;
use std::process::Stdio;

use futures_util::StreamExt;
use gatehouse_protocol::invoke::MAX_PROGRESS_LINE_BYTES;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use tokio_util::codec::FramedRead;
use tokio_util::codec::LinesCodec;

use crate::rpc::Transport;

/// A running `codex app-server`. Dropping it kills the process.
pub struct StdioServer {
    child: tokio::process::Child,
}

impl StdioServer {
    /// Spawns `program app-server` in `cwd` with exactly the environment `env`, and returns it
    /// with the transport to it.
    ///
    /// # Errors
    /// The spawn failure.
    pub fn spawn(
        program: &Path,
        cwd: &Path,
        env: &[(String, String)],
    ) -> std::io::Result<(Self, Transport)> {
        let mut child = tokio::process::Command::new(program)
            .arg("app-server")
            .env_clear()
            .envs(
                env.iter()
                    .map(|(key, value)| (key.as_str(), value.as_str())),
            )
            .current_dir(cwd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()?;
        let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("the child has no pipes"));
        };
        let (outgoing, mut to_child) = mpsc::channel::<String>(256);
        let (from_child, incoming) = mpsc::channel::<String>(1024);
        tokio::spawn(async move {
            while let Some(line) = to_child.recv().await {
                if stdin.write_all(line.as_bytes()).await.is_err()
                    || stdin.write_all(b"\n").await.is_err()
                    || stdin.flush().await.is_err()
                {
                    return;
                }
            }
        });
        tokio::spawn(async move {
            // An overlong line ends the transport, as it ends the relay.
            let mut lines = FramedRead::new(
                stdout,
                LinesCodec::new_with_max_length(MAX_PROGRESS_LINE_BYTES),
            );
            while let Some(Ok(line)) = lines.next().await {
                if from_child.send(line).await.is_err() {
                    return;
                }
            }
        });
        Ok((Self { child }, Transport { outgoing, incoming }))
    }

    /// Returns the process id.
    pub fn id(&self) -> Option<u32> {
        self.child.id()
    }
}
