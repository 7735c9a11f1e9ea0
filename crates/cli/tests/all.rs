//! End-to-end tests of the `gatehouse` binary, built as one test binary.

mod suite;
