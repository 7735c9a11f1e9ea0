//! Tests of the model clients against the real mock server and canned streams, built as one test
//! binary.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test fails loudly on any unexpected error"
)]

mod suite;
