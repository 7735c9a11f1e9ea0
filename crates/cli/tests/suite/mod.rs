//! The end-to-end test modules.

mod bench;
mod cli_basics;
mod codex;
mod config_file;
mod deploy;
mod doctor;
mod hostile;
mod hostile_node;
mod link;
mod memory;
mod metrics;
mod mock_model;
mod native;
mod node_cli;
mod node_host_files;
mod observability;
mod postgres;
mod quick_start;
mod quotas;
mod s3;
mod sandbox;
mod scratch;
mod skills;
mod support;
mod up;
mod worker_child;
