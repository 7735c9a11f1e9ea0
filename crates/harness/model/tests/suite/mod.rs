//! The test modules.

mod against_mock;
mod fixtures;
mod mock_client;
mod retry_after;
mod support;
