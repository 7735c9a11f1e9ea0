//! Integration tests of `gatehouse-scratch`, built as one test binary.
//!
//! These tests run as root, like CI. A read-only filesystem and an unprivileged uid are
//! exercised end to end through the `gatehouse` binary in the CLI crate's suite.

// `cfg(test)` lets the helpers in the suite use `unwrap` like the tests do (clippy.toml).
#[cfg(test)]
mod suite;
