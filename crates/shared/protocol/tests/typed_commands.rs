//! A node command's caller and its handler agree on the params and result types, or the code
//! does not compile. Each case under `typed_commands/` breaks the agreement in one way and must
//! fail to compile with the error in its `.stderr` file; `ok_*` cases show the same code with the
//! right types compiles.
//!
//! The cases use the functions and the trait both sides use: the Gateway's typed invoke encodes
//! with `encode_params::<C>` and decodes with `decode_result::<C>`, and the node registers a
//! `Serve<C, _>` implementation per command.

#[test]
fn a_handler_or_caller_of_the_wrong_types_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/typed_commands/ok_*.rs");
    cases.compile_fail("tests/typed_commands/fail_*.rs");
}
