//! The end-to-end test modules.

mod bench;
mod cli_basics;
mod codex;
mod config_file;
mod deploy;
mod doctor;
mod link;
mod memory;
mod mock_model;
mod native;
mod node_cli;
mod quick_start;
mod sandbox;
mod scratch;
mod skills;
mod support;
mod up;
