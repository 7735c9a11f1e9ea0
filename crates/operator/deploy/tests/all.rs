//! Integration tests of `gatehouse-deploy`, built as one test binary.

// `cfg(test)` lets the helpers in the suite use `unwrap` like the tests do (clippy.toml).
#[cfg(test)]
mod suite;
