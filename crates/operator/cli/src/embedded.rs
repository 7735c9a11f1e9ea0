//! Embedded mode's wiring: the Gateway and a node host in one process, linked by the Gateway's
//! in-process connection (`RunningGateway::in_process_connector`) behind the Harness's
//! `ChannelConnector`, so the two roles exchange the same frames as over `/node`, without a
//! socket.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::path::PathBuf;

use gatehouse_gateway::GatewayConfig;
use gatehouse_gateway::RunningGateway;
use gatehouse_gateway::TokenSource;
use gatehouse_harness::CancellationToken;
use gatehouse_harness::host::NodeHost;
use gatehouse_harness::host::NodeHostConfig;
use gatehouse_harness::host::ReconnectPolicy;
use gatehouse_harness::host::Runtime;
use gatehouse_harness::host::RuntimeConfig;
use gatehouse_harness::link::ChannelConnector;

use crate::exit::UsageError;

/// Starts the Gateway; a configuration problem (an address in use, an unusable state
/// directory) becomes a usage error.
pub(crate) async fn start_gateway(config: GatewayConfig) -> anyhow::Result<RunningGateway> {
    start_gateway_with(config, gatehouse_gateway::Extensions::default()).await
}

/// Starts the Gateway with `extensions` (for example the Codex runtime), like [`start_gateway`].
pub(crate) async fn start_gateway_with(
    config: GatewayConfig,
    extensions: gatehouse_gateway::Extensions,
) -> anyhow::Result<RunningGateway> {
    match gatehouse_gateway::start(config, extensions).await {
        Ok(running) => Ok(running),
        Err(error) if error.is_config_error() => Err(anyhow::Error::new(UsageError::new(format!(
            "{:#}",
            anyhow::Error::new(error)
        )))),
        Err(error) => Err(anyhow::Error::new(error)),
    }
}

/// Prints `<what> listening on URL` and where the operator token is.
pub(crate) fn announce(running: &RunningGateway, what: &str) {
    crate::output::line(&format!(
        "{what} listening on http://{}",
        running.local_addr
    ));
    match running.operator_token_source() {
        TokenSource::File(path) => {
            crate::output::line(&format!("operator token file: {}", path.display()));
        }
        TokenSource::Environment => crate::output::line("operator token: from GATEHOUSE_TOKEN"),
    }
}

/// A node host running in this process.
pub(crate) struct InProcessNode {
    /// The node host's task.
    pub(crate) task: tokio::task::JoinHandle<gatehouse_harness::Result<()>>,
    /// The one-time code written for its first enrollment, deleted once it is enrolled.
    pub(crate) setup_code_file: Option<PathBuf>,
}

/// Starts a node host on `harness_root`, connected to `running` over the in-process link,
/// enrolling it with a fresh setup code the first time.
pub(crate) async fn start_node(
    running: &RunningGateway,
    harness_root: &Path,
    runtime: Runtime,
    runtime_config: RuntimeConfig,
    shutdown: CancellationToken,
) -> anyhow::Result<InProcessNode> {
    let setup_code_file = enrollment_code(running, harness_root).await?;
    let host = NodeHost::prepare_with(
        NodeHostConfig {
            root: harness_root.to_path_buf(),
            gateway_urls: Vec::new(),
            setup_code_file: setup_code_file.clone(),
            runtime,
            display_name: Some(String::from("embedded harness")),
            home: None,
        },
        runtime_config,
    )?;
    let in_process = running.in_process_connector();
    let connector = ChannelConnector::new(move || {
        let link = in_process.connect();
        (link.from_gateway, link.to_gateway)
    });
    let task = tokio::spawn(async move {
        host.run_with_connector(connector, ReconnectPolicy::default(), shutdown)
            .await
    });
    Ok(InProcessNode {
        task,
        setup_code_file,
    })
}

/// Issues a setup code for a node the first time, written to a private file in the node's own
/// directory; `None` once the node holds a device token.
pub(crate) async fn enrollment_code(
    running: &RunningGateway,
    harness_root: &Path,
) -> anyhow::Result<Option<PathBuf>> {
    let node_dir = harness_root.join("node");
    if node_dir.join("device-token.json").exists() {
        return Ok(None);
    }
    std::os::unix::fs::DirBuilderExt::mode(std::fs::DirBuilder::new().recursive(true), 0o700)
        .create(&node_dir)?;
    let url = format!("ws://{}/node", running.local_addr);
    let issued = running
        .issue_setup_code(&url, gatehouse_gateway::DEFAULT_SETUP_CODE_TTL_SECONDS)
        .await?;
    let path = node_dir.join("embedded-setup-code");
    let _ = std::fs::remove_file(&path);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    std::io::Write::write_all(&mut file, issued.code.as_bytes())?;
    Ok(Some(path))
}
