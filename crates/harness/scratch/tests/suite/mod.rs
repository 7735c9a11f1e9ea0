//! The integration test modules.

mod prepare;
mod verify;
