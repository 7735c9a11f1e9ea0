//! The end-to-end test modules.

mod cli_basics;
