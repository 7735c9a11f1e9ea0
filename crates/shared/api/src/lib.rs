//! The request and response types of the Gateway's operator HTTP API.
//!
//! Every route of the API (`/healthz`, `/readyz` and each `/v1/...` route) decodes its request
//! into and answers with a type of this crate, and the CLI and the end-to-end tests read the
//! answers through the same types, so the Gateway and its clients cannot disagree on a field
//! name without failing to compile or to decode. The wire is the public contract: fields are
//! camelCase, an absent optional is left out unless a type documents an explicit `null`, and
//! unknown fields are ignored when reading an answer (a request body refuses them where the
//! route always has).
//!
//! [`schema::api_schema`] is the JSON Schema of every type; the committed copy in
//! `schema/api.schema.json` is checked by this crate's tests, so a change to the contract shows
//! in review.
//!
//! ```
//! let turn: gatehouse_api::sessions::Turn = serde_json::from_str(
//!     r#"{"turnId":"t1","sessionKey":"main","status":"completed","reply":"hi"}"#,
//! )
//! .unwrap();
//! assert_eq!(turn.reply.as_deref(), Some("hi"));
//! ```
//!
//! Modules, one per group of routes:
//! - [`health`]: `GET /healthz`, `GET /readyz`;
//! - [`error`]: the body of every error answer;
//! - [`nodes`]: `GET /v1/nodes`, `POST /v1/nodes/setup-codes`, `GET /v1/replicas`;
//! - [`sessions`]: messages, turns, sessions, transcripts, abort, stop and move;
//! - [`events`]: the payloads of `GET /v1/sessions/{key}/events`;
//! - [`documents`]: `GET`/`PUT /v1/agents/{agent}/files/{name}`;
//! - [`media`]: `POST /v1/media`;
//! - [`memory`]: the `/v1/memory/...` routes;
//! - [`skills`]: `GET /v1/skills`;
//! - [`audit`]: `GET /v1/audit`;
//! - [`channels`]: `GET /v1/channels`, the pairing routes, and the `webhook` kind's bodies;
//! - [`keys`]: `POST`/`GET /v1/keys`, `DELETE /v1/keys/{name}`;
//! - [`openai`]: `GET /v1/models`, `POST /v1/chat/completions` (the OpenAI-compatible routes);
//! - [`schema`]: the JSON Schema of all of them;
//! - `client` (feature `client`): a typed client of the routes the CLI calls.

#![deny(missing_docs)]

pub mod audit;
pub mod channels;
#[cfg(feature = "client")]
pub mod client;
pub mod documents;
pub mod error;
pub mod events;
pub mod health;
pub mod keys;
pub mod media;
pub mod memory;
pub mod nodes;
pub mod openai;
pub mod schema;
pub mod sessions;
pub mod skills;
pub mod usage;
