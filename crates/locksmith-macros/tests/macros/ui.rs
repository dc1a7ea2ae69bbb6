//! Misuse of `#[locked]` fails to compile with a message that says why.

#[test]
fn misuse_fails_to_compile() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/*.rs");
}
