//! The fsops test modules.

mod atomic;
mod commands;
mod dir;
mod escapes;
mod property;
mod race;
mod support;
