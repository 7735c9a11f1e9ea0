//! The integration test modules.

mod external_state;
mod golden;
mod installation_errors;
mod manifests;
mod nodes;
mod replicas;
mod structure;
mod support;
