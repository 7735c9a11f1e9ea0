//! A typed client of the routes the CLI calls: each method sends one request and returns the
//! route's answer type, or a [`ClientError`] that carries the API's stable code.
//!
//! Streaming answers (`GET /v1/sessions/{key}/events`, `POST /v1/memory/reindex`) are returned
//! as the response itself once its status is a success: the caller reads the bytes as they
//! arrive and decodes each event or line into this crate's types
//! ([`SessionEvent::parse`](crate::events::SessionEvent::parse),
//! [`ReindexLine`](crate::memory::ReindexLine)).

use serde::de::DeserializeOwned;

use crate::error::ErrorBody;
use crate::error::ErrorResponse;
use crate::events::EventsQuery;
use crate::health::HealthResponse;
use crate::keys::ApiKeyCreated;
use crate::keys::ApiKeyList;
use crate::keys::ApiKeyParams;
use crate::keys::ApiKeyRevoked;
use crate::memory::MemorySearchAnswer;
use crate::memory::MemorySearchQuery;
use crate::memory::MemoryStatus;
use crate::nodes::NodeList;
use crate::nodes::SetupCode;
use crate::nodes::SetupCodeParams;
use crate::sessions::MessageAccepted;
use crate::sessions::MessageParams;
use crate::sessions::Turn;
use crate::sessions::TurnQuery;
use crate::skills::SkillsView;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The request did not get an answer (connection refused, reset, timed out).
    #[error("cannot reach the gateway at {base_url}: {source}")]
    Unreachable {
        /// The Gateway's base URL.
        base_url: String,
        /// The transport's error.
        #[source]
        source: reqwest::Error,
    },
    /// The Gateway answered an error in the API's shape.
    #[error("the gateway refused ({status}): {}: {}", .error.code, .error.message)]
    Api {
        /// The HTTP status.
        status: u16,
        /// The error, with its stable code.
        error: ErrorBody,
    },
    /// The Gateway answered an error status without the API's error body (a proxy in between,
    /// or not a Gateway at all).
    #[error("the gateway answered {status}: {body}")]
    Status {
        /// The HTTP status.
        status: u16,
        /// The body as text.
        body: String,
    },
    /// A successful answer that is not the route's type.
    #[error("the gateway's answer is not the expected JSON: {source}")]
    Decode {
        /// The decoding error.
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// Returns the API's stable code of an error answer; `None` when there was no API answer.
    pub fn code(&self) -> Option<&str> {
        match self {
            ClientError::Api { error, .. } => Some(&error.code),
            ClientError::Unreachable { .. }
            | ClientError::Status { .. }
            | ClientError::Decode { .. } => None,
        }
    }
}

/// A client of one Gateway, with or without the operator token.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    base_url: String,
    token: Option<String>,
}

impl Client {
    /// Returns a client of the Gateway at `base_url` (a trailing `/` is ignored) that sends
    /// `token` as the operator bearer token.
    pub fn new(base_url: &str, token: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            token: Some(token.to_owned()),
        }
    }

    /// Returns a client of the Gateway at `base_url` that sends no token: only `/healthz` and
    /// `/readyz` answer it.
    pub fn without_token(base_url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            base_url: base_url.trim_end_matches('/').to_owned(),
            token: None,
        }
    }

    /// Returns the same client sending its requests through `http` (for its timeouts).
    #[must_use]
    pub fn with_http(mut self, http: reqwest::Client) -> Self {
        self.http = http;
        self
    }

    /// Returns the Gateway's base URL, without a trailing `/`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// `GET /healthz`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn health(&self) -> Result<HealthResponse, ClientError> {
        self.answer(self.get("/healthz")).await
    }

    /// `GET /readyz`: `Ok` when the Gateway is ready; a not-ready Gateway is
    /// [`ClientError::Api`] with the code that says why.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn ready(&self) -> Result<HealthResponse, ClientError> {
        self.answer(self.get("/readyz")).await
    }

    /// `GET /v1/nodes`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn nodes(&self) -> Result<NodeList, ClientError> {
        self.answer(self.get("/v1/nodes")).await
    }

    /// `POST /v1/nodes/setup-codes`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn create_setup_code(
        &self,
        params: &SetupCodeParams,
    ) -> Result<SetupCode, ClientError> {
        self.answer(self.post("/v1/nodes/setup-codes").json(params))
            .await
    }

    /// `POST /v1/sessions/{session_key}/messages`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn post_message(
        &self,
        session_key: &str,
        params: &MessageParams,
    ) -> Result<MessageAccepted, ClientError> {
        let path = format!("/v1/sessions/{session_key}/messages");
        self.answer(self.post(&path).json(params)).await
    }

    /// `GET /v1/turns/{turn_id}`, with `wait` as a long poll.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn turn(&self, turn_id: &str, query: &TurnQuery) -> Result<Turn, ClientError> {
        let path = format!("/v1/turns/{turn_id}");
        self.answer(self.get(&path).query(query)).await
    }

    /// `GET /v1/sessions/{session_key}/events`: the open `text/event-stream` response, whose
    /// events decode with [`SessionEvent::parse`](crate::events::SessionEvent::parse).
    ///
    /// # Errors
    /// [`ClientError`] when the stream is refused.
    pub async fn session_events(
        &self,
        session_key: &str,
        query: &EventsQuery,
    ) -> Result<reqwest::Response, ClientError> {
        let path = format!("/v1/sessions/{session_key}/events");
        self.send(self.get(&path).query(query)).await
    }

    /// `GET /v1/memory/search`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn memory_search(
        &self,
        query: &MemorySearchQuery,
    ) -> Result<MemorySearchAnswer, ClientError> {
        self.answer(self.get("/v1/memory/search").query(query))
            .await
    }

    /// `GET /v1/memory/status`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn memory_status(&self) -> Result<MemoryStatus, ClientError> {
        self.answer(self.get("/v1/memory/status")).await
    }

    /// `POST /v1/memory/reindex`: the open `application/x-ndjson` response, one
    /// [`ReindexLine`](crate::memory::ReindexLine) per line.
    ///
    /// # Errors
    /// [`ClientError`] when the rebuild is refused before it starts.
    pub async fn memory_reindex(&self) -> Result<reqwest::Response, ClientError> {
        self.send(self.post("/v1/memory/reindex")).await
    }

    /// `GET /v1/skills`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn skills(&self) -> Result<SkillsView, ClientError> {
        self.answer(self.get("/v1/skills")).await
    }

    /// `POST /v1/keys`: creates an API key; its secret is in the answer only.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn create_key(&self, params: &ApiKeyParams) -> Result<ApiKeyCreated, ClientError> {
        self.answer(self.post("/v1/keys").json(params)).await
    }

    /// `GET /v1/keys`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn keys(&self) -> Result<ApiKeyList, ClientError> {
        self.answer(self.get("/v1/keys")).await
    }

    /// `DELETE /v1/keys/{name}`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn revoke_key(&self, name: &str) -> Result<ApiKeyRevoked, ClientError> {
        let url = format!("{}/v1/keys/{name}", self.base_url);
        self.answer(self.authorized(self.http.delete(url))).await
    }

    /// `GET /v1/usage`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn usage(
        &self,
        params: &crate::usage::UsageParams,
    ) -> Result<crate::usage::UsageView, ClientError> {
        self.answer(self.get("/v1/usage").query(params)).await
    }

    /// `GET /v1/channels`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn channels(&self) -> Result<crate::channels::ChannelList, ClientError> {
        self.answer(self.get("/v1/channels")).await
    }

    /// `GET /v1/channels/{name}/pairings`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn channel_pairings(
        &self,
        channel: &str,
    ) -> Result<crate::channels::PairingList, ClientError> {
        let channel = segment(channel);
        self.answer(self.get(&format!("/v1/channels/{channel}/pairings")))
            .await
    }

    /// `POST /v1/channels/{name}/pairings/{code}/approve`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn approve_pairing(
        &self,
        channel: &str,
        code: &str,
    ) -> Result<crate::channels::PairingApproved, ClientError> {
        let (channel, code) = (segment(channel), segment(code));
        self.answer(self.post(&format!("/v1/channels/{channel}/pairings/{code}/approve")))
            .await
    }

    /// `DELETE /v1/channels/{name}/pairings/{code}`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn deny_pairing(
        &self,
        channel: &str,
        code: &str,
    ) -> Result<crate::channels::PairingDenied, ClientError> {
        let (channel, code) = (segment(channel), segment(code));
        let url = format!("{}/v1/channels/{channel}/pairings/{code}", self.base_url);
        self.answer(self.authorized(self.http.delete(url))).await
    }

    /// `PUT /v1/sessions/{key}`: sets the session's workspace source.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn put_session(
        &self,
        session_key: &str,
        params: &crate::sessions::SessionParams,
    ) -> Result<crate::sessions::SessionCreated, ClientError> {
        let url = format!("{}/v1/sessions/{session_key}", self.base_url);
        self.answer(self.authorized(self.http.put(url)).json(params))
            .await
    }

    /// `GET /v1/sessions/{key}/worktree.json`.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn worktree_log(
        &self,
        session_key: &str,
    ) -> Result<crate::sessions::WorktreeLog, ClientError> {
        self.answer(self.get(&format!("/v1/sessions/{session_key}/worktree.json")))
            .await
    }

    /// `GET /v1/sessions/{key}/worktree.tar`: the archive's bytes.
    ///
    /// # Errors
    /// [`ClientError`].
    pub async fn worktree_tar(
        &self,
        session_key: &str,
        query: &crate::sessions::WorktreeTarQuery,
    ) -> Result<Vec<u8>, ClientError> {
        let response = self
            .send(
                self.get(&format!("/v1/sessions/{session_key}/worktree.tar"))
                    .query(query),
            )
            .await?;
        response
            .bytes()
            .await
            .map(|bytes| bytes.to_vec())
            .map_err(|source| self.unreachable(source))
    }

    fn get(&self, path: &str) -> reqwest::RequestBuilder {
        self.authorized(self.http.get(format!("{}{path}", self.base_url)))
    }

    fn post(&self, path: &str) -> reqwest::RequestBuilder {
        self.authorized(self.http.post(format!("{}{path}", self.base_url)))
    }

    fn authorized(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// Sends `request` and decodes its successful answer as `T`.
    async fn answer<T: DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, ClientError> {
        let response = self.send(request).await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|source| self.unreachable(source))?;
        serde_json::from_slice(&bytes).map_err(|source| ClientError::Decode { source })
    }

    /// Sends `request` and returns its response when the status is a success; an error
    /// status becomes [`ClientError::Api`] (or [`ClientError::Status`] without the API's body).
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ClientError> {
        let response = request
            .send()
            .await
            .map_err(|source| self.unreachable(source))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let body = response.text().await.unwrap_or_default();
        match serde_json::from_str::<ErrorResponse>(&body) {
            Ok(answer) => Err(ClientError::Api {
                status: status.as_u16(),
                error: answer.error,
            }),
            Err(_) => Err(ClientError::Status {
                status: status.as_u16(),
                body,
            }),
        }
    }

    fn unreachable(&self, source: reqwest::Error) -> ClientError {
        ClientError::Unreachable {
            base_url: self.base_url.clone(),
            source,
        }
    }
}

/// Percent-encodes `text` as one URL path segment: everything but the unreserved characters
/// (`A-Z a-z 0-9 - . _ ~`) is written `%XX`, and `.` and `..` become `%2E` and `%2E%2E`, so a
/// value never changes the route it is put in.
fn segment(text: &str) -> String {
    if text == "." || text == ".." {
        return text.replace('.', "%2E");
    }
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod segment_tests {
    use super::segment;

    #[test]
    fn a_value_stays_one_path_segment() {
        assert_eq!(segment("team-1"), "team-1");
        assert_eq!(segment("../keys"), "..%2Fkeys");
        assert_eq!(segment(".."), "%2E%2E");
        assert_eq!(segment("a b?c#d"), "a%20b%3Fc%23d");
    }
}
