//! End-to-end tests of the `gatehouse` binary, built as one test binary.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod suite;
