//! The end-to-end test modules.

mod cli_basics;
mod deploy;
mod scratch;
