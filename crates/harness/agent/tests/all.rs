//! Tests of the agent loop and the native tools against the in-process mock model, built as one
//! test binary.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod suite;
