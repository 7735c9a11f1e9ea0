//! The test modules.

mod chat;
mod recorder;
mod responses;
mod support;
