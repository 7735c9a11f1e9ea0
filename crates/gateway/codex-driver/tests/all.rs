//! Tests of the Codex message types and the turn driver against sessions recorded from the real
//! `codex app-server`, built as one test binary.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod suite;
