//! Soundness holes that must stay closed: each case under `compile_fail/`
//! is safe code that could cause undefined behaviour if it compiled, and
//! its `.stderr` is the compiler's refusal (unsafe call, private field,
//! unsafe trait).
//!
//! Regenerate the expected output after a deliberate change of wording with
//! `TRYBUILD=overwrite cargo test -p arrow-device --test compile_fail`.

#[test]
fn safe_code_cannot_write_what_release_trusts() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/compile_fail/*.rs");
}
