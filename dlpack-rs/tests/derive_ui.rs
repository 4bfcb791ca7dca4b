//! trybuild UI tests of `#[derive(IntoDLPack)]`: what compiles, and the error every misuse gets.
#![cfg(feature = "derive")]

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    // The error for a data field that is not a `Buffer` lists the implementations, which
    // feature `ndarray` extends: one expected output per configuration.
    #[cfg(not(feature = "ndarray"))]
    t.compile_fail("tests/ui/fail-buffer/*.rs");
    #[cfg(feature = "ndarray")]
    t.compile_fail("tests/ui/fail-buffer-ndarray/*.rs");
    // Plain structs compile the same whether or not any crate turns on `pyo3`.
    t.pass("tests/ui/pass/*.rs");
    #[cfg(feature = "pyo3")]
    {
        t.pass("tests/ui/pass-pyo3/*.rs");
        t.compile_fail("tests/ui/fail-pyo3/*.rs");
    }
}
