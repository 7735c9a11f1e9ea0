//! The test modules.

mod escapes;
mod exec;
mod files;
mod patch;
mod policy;
mod process;
mod prompt;
mod support;
mod turn;
mod usage;
