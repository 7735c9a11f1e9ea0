//! Integration tests of the media store, built as one binary.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "tests fail loudly on unexpected errors"
)]

mod suite;
