//! The integration test modules.

mod golden;
mod installation_errors;
mod manifests;
mod structure;
mod support;
