//! The Gateway's channel core: what it needs to receive messages from chat platforms and
//! signed webhooks and to deliver the replies, without the platforms' details leaking into the
//! Gateway.
//!
//! - [`config`]: `[[channels]]` of the config file and its validation (errors name
//!   `channels[i].key`);
//! - [`files`]: the bounds on files in and out, and their MIME types sniffed from the bytes;
//! - [`secret`]: credentials by reference (`*-env`, `*-file`), held in a [`secret::Secret`]
//!   that never prints;
//! - [`session_key`]: OpenClaw's session-key shapes per `dm-scope`, with platform ids encoded
//!   stably and reversibly;
//! - [`access`]: the access decision of one message (`dm-policy`, `allow-from`,
//!   `group-policy`, `groups`, `require-mention`);
//! - [`pairing`]: pairing codes and their texts;
//! - [`adapter`]: the one trait a kind implements to send ([`adapter::Adapter`]);
//! - [`retry`]: the delivery retry schedule and its bound;
//! - [`setup`]: validation and credentials together, giving what the Gateway runs;
//! - [`text`]: splitting long replies and rendering Markdown to sanitised HTML;
//! - [`matrix`]: the Matrix client–server API client, what a `/sync` asks, and its adapter;
//! - [`slack`]: the Slack Web API client, Socket Mode and Events API messages, what an event
//!   asks, and its adapter;
//! - [`telegram`]: the Telegram Bot API client, what an update asks, and its adapter;
//! - [`webhook`]: the `webhook` kind's signatures and its adapter.
//!
//! The Gateway (`gatehouse-gateway`) owns what needs its state: the inbound route, admission
//! through the same path as API messages, the store's records, and the deliverer.

#![deny(missing_docs)]

pub mod access;
pub mod adapter;
pub mod config;
pub mod files;
pub mod matrix;
pub mod pairing;
pub mod retry;
pub mod secret;
pub mod session_key;
pub mod setup;
pub mod slack;
pub mod telegram;
pub mod text;
pub mod webhook;
