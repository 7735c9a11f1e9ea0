//! The test modules.

mod anthropic;
mod chat;
mod recorder;
mod responses;
mod support;
