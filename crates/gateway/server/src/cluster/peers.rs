//! Calls to the other replicas: a request that needs a node this replica does not hold is
//! carried to the replica that holds the node's link, over HTTP to its
//! `/internal/replica/...` routes with the replica key (a shared secret every replica reads
//! from the store) as the bearer token.
//!
//! - [`Peers::abort`]: the abort of a turn that runs on another replica.
//! - [`Peers::memory_get`]: `GET /v1/memory/get` on a replica without a node.
//! - [`Peers::skills_discover`]: the Harness workspace's skills for `GET /v1/skills` there.
//! - [`ClusterWorkspace`]: the Agent workspace as the HTTP handlers reach it: through a node
//!   linked here when there is one, else through the replica holding one (documents,
//!   `GET /v1/agents/{agent}/workspace/...`, attachments staged for a turn).
//!
//! A forwarded write that was sent and not answered is an unknown outcome, as it is for a
//! node; nothing is retried.

use std::sync::Arc;
use std::time::Duration;

use gatehouse_api::memory::MemoryReadResult;
use gatehouse_api::sessions::AbortResponse;
use gatehouse_protocol::command::FILE_COMMANDS;
use gatehouse_protocol::skills::SkillsDiscovery;
use gatehouse_store::Store;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::Replica;
use super::wire::DiscoveryAnswer;
use super::wire::FetchAnswer;
use super::wire::FetchRequest;
use super::wire::Forwarded;
use super::wire::MemoryGetRequest;
use super::wire::WriteAnswer;
use super::wire::WriteRequest;
use crate::link::registry::NodeRegistry;
use crate::workspace::WorkspaceAccess;
use crate::workspace::WorkspaceError;
use crate::workspace::WorkspaceFile;
use crate::workspace::WriteMode;
use crate::workspace::Written;

/// The path prefix of the replica-to-replica routes.
pub(crate) const INTERNAL_PREFIX: &str = "/internal/replica";

/// How long a connection to another replica may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The client of the other replicas.
pub(crate) struct Peers {
    client: reqwest::Client,
    key: String,
    replica: Arc<Replica>,
    store: Arc<dyn Store>,
    /// How long a forwarded call may take: the workspace invoke timeout and a margin.
    timeout: Duration,
}

/// Why a call to another replica failed.
#[derive(Debug)]
enum CallError {
    /// Nothing reached the other replica (no connection).
    NotSent(String),
    /// The request was sent and no usable answer came back.
    NoAnswer(String),
}

impl Peers {
    /// Returns a client that authenticates with `key` and gives each call `invoke_timeout` plus
    /// a margin.
    pub(crate) fn new(
        key: String,
        replica: Arc<Replica>,
        store: Arc<dyn Store>,
        invoke_timeout: Duration,
    ) -> Self {
        // A replica never redirects: a redirect would carry the replica key and a workspace
        // body elsewhere.
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .tcp_nodelay(true)
            .build()
            .unwrap_or_else(|_| reqwest::Client::new());
        Self {
            client,
            key,
            replica,
            store,
            timeout: invoke_timeout + Duration::from_secs(5),
        }
    }

    /// Returns true when `presented` is the replica key, compared in constant time.
    pub(crate) fn accepts(&self, presented: &str) -> bool {
        crate::secrets::secrets_equal(self.key.as_bytes(), presented.as_bytes())
    }

    /// Aborts the running turn of `session_key` on the replica that runs it, when that is
    /// another live replica; returns whether one was aborted there.
    pub(crate) async fn abort(&self, session_key: &str) -> bool {
        let running = match self.store.running_turn(session_key).await {
            Ok(Some((_, Some(fence)))) => fence,
            Ok(_) => return false,
            Err(error) => {
                tracing::warn!(error = %error, session_key, "cannot find where a session's turn runs");
                return false;
            }
        };
        if running.replica_id == self.replica.id() {
            return false;
        }
        let Some(url) = self.replica.peer_url(&running.replica_id) else {
            return false;
        };
        let path = format!("{INTERNAL_PREFIX}/sessions/{session_key}/abort");
        match self.call::<(), AbortResponse>(&url, &path, &()).await {
            Ok(answer) => answer.aborted,
            Err(error) => {
                tracing::warn!(?error, session_key, replica_id = %running.replica_id, "cannot abort a turn on the replica that runs it");
                false
            }
        }
    }

    /// Reads lines of a memory file through the replica at `url`, which holds a node; a call
    /// that gets no answer is [`WorkspaceError::Unavailable`] (a read changes nothing).
    pub(crate) async fn memory_get(
        &self,
        url: &str,
        request: &MemoryGetRequest,
    ) -> Result<MemoryReadResult, WorkspaceError> {
        let path = format!("{INTERNAL_PREFIX}/memory/get");
        match self
            .call::<_, Forwarded<MemoryReadResult>>(url, &path, request)
            .await
        {
            Ok(Forwarded::Ok(answer)) => Ok(answer),
            Ok(Forwarded::Err(error)) => Err(error.into()),
            Err(error) => {
                tracing::warn!(
                    ?error,
                    url,
                    "cannot read a memory file through the replica holding its node"
                );
                Err(WorkspaceError::Unavailable)
            }
        }
    }

    /// Asks the replica at `url`, which holds a node, for the Harness workspace's skills.
    pub(crate) async fn skills_discover(&self, url: &str) -> Result<SkillsDiscovery, String> {
        let path = format!("{INTERNAL_PREFIX}/skills/discover");
        match self.call::<_, DiscoveryAnswer>(url, &path, &()).await {
            Ok(DiscoveryAnswer::Found(discovery)) => Ok(discovery),
            Ok(DiscoveryAnswer::Unavailable { reason }) => Err(reason),
            Err(error) => {
                tracing::warn!(
                    ?error,
                    url,
                    "cannot list the workspace skills through the replica holding its node"
                );
                Err(String::from("the replica holding the node did not answer"))
            }
        }
    }

    /// Returns the URL of the replica to forward a request needing `commands` to: `None` to
    /// serve it here, when a node linked here serves them or none is linked anywhere (which
    /// the local client reports).
    pub(crate) async fn forward_target(
        &self,
        registry: &NodeRegistry,
        commands: &[&str],
    ) -> Option<String> {
        if registry.find_serving(commands).is_some() {
            return None;
        }
        self.workspace_holder().await
    }

    /// Posts `body` to `path` on the replica at `url` and decodes its answer.
    async fn call<B: Serialize, A: DeserializeOwned>(
        &self,
        url: &str,
        path: &str,
        body: &B,
    ) -> Result<A, CallError> {
        let response = self
            .client
            .post(format!("{}{path}", url.trim_end_matches('/')))
            .bearer_auth(&self.key)
            .json(body)
            .timeout(self.timeout)
            .send()
            .await
            .map_err(|error| match error.is_connect() {
                true => CallError::NotSent(error.to_string()),
                false => CallError::NoAnswer(error.to_string()),
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(CallError::NoAnswer(format!(
                "the replica answered {status}"
            )));
        }
        response
            .json::<A>()
            .await
            .map_err(|error| CallError::NoAnswer(error.to_string()))
    }

    /// Returns the URL of another live replica holding a node that serves the workspace
    /// commands (the most recently linked one).
    async fn workspace_holder(&self) -> Option<String> {
        let links = match self.store.node_links().await {
            Ok(links) => links,
            Err(error) => {
                tracing::warn!(error = %error, "cannot find a replica holding a workspace node");
                return None;
            }
        };
        links
            .links
            .into_iter()
            .filter(|link| {
                link.live
                    && link.serves_all(FILE_COMMANDS)
                    && link.replica_id.as_deref() != Some(self.replica.id())
            })
            .max_by_key(|link| link.linked_at_ms)
            .and_then(|link| link.replica_url)
    }
}

/// The Agent workspace across replicas: a node linked here serves it; otherwise the call goes
/// to the replica that holds one.
pub(crate) struct ClusterWorkspace {
    /// This replica's own client of its nodes.
    pub(crate) local: Arc<dyn WorkspaceAccess>,
    pub(crate) registry: Arc<NodeRegistry>,
    pub(crate) peers: Arc<Peers>,
}

impl ClusterWorkspace {
    /// Returns the URL of the replica to forward to, or `None` to serve here (a node is linked
    /// here, or none is linked anywhere, which the local client reports).
    async fn forward_to(&self) -> Option<String> {
        self.peers
            .forward_target(&self.registry, FILE_COMMANDS)
            .await
    }
}

#[async_trait::async_trait]
impl WorkspaceAccess for ClusterWorkspace {
    async fn fetch(&self, relative: &str) -> Result<WorkspaceFile, WorkspaceError> {
        crate::workspace::check_relative(relative)?;
        let Some(url) = self.forward_to().await else {
            return self.local.fetch(relative).await;
        };
        let request = FetchRequest {
            path: relative.to_owned(),
        };
        let path = format!("{INTERNAL_PREFIX}/workspace/fetch");
        match self
            .peers
            .call::<_, Forwarded<FetchAnswer>>(&url, &path, &request)
            .await
        {
            Ok(Forwarded::Ok(answer)) => answer.into_file(),
            Ok(Forwarded::Err(error)) => Err(error.into()),
            Err(error) => {
                tracing::warn!(
                    ?error,
                    url,
                    "cannot read the workspace through the replica holding its node"
                );
                Err(WorkspaceError::Unavailable)
            }
        }
    }

    async fn write(
        &self,
        relative: &str,
        bytes: &[u8],
        mode: WriteMode,
    ) -> Result<Written, WorkspaceError> {
        crate::workspace::check_relative(relative)?;
        let Some(url) = self.forward_to().await else {
            return self.local.write(relative, bytes, mode).await;
        };
        let request = WriteRequest {
            path: relative.to_owned(),
            content_base64: base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                bytes,
            ),
            mode: mode.into(),
        };
        let path = format!("{INTERNAL_PREFIX}/workspace/write");
        match self
            .peers
            .call::<_, Forwarded<WriteAnswer>>(&url, &path, &request)
            .await
        {
            Ok(Forwarded::Ok(answer)) => Ok(answer.into()),
            Ok(Forwarded::Err(error)) => Err(error.into()),
            Err(CallError::NotSent(reason)) => {
                tracing::warn!(
                    reason,
                    url,
                    "cannot reach the replica holding the workspace node"
                );
                Err(WorkspaceError::Unavailable)
            }
            Err(CallError::NoAnswer(reason)) => {
                tracing::warn!(reason, url, "a forwarded workspace write was not confirmed");
                Err(WorkspaceError::UnknownOutcome)
            }
        }
    }
}
