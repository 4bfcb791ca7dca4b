//! trybuild UI tests of `#[derive(IntoDLPack)]`: what compiles, and the error every misuse gets.
#![cfg(feature = "derive")]

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    // The error for a data field that is not a `Buffer` lists the implementations, which
    // features `ndarray` and `cudarc` extend: one expected output for each build the test
    // command runs (the derive alone; every feature).
    #[cfg(not(any(feature = "ndarray", feature = "cudarc")))]
    t.compile_fail("tests/ui/fail-buffer/*.rs");
    #[cfg(all(feature = "ndarray", feature = "cudarc"))]
    t.compile_fail("tests/ui/fail-buffer-all/*.rs");
    // Plain structs compile the same whether or not any crate turns on `pyo3`.
    t.pass("tests/ui/pass/*.rs");
    #[cfg(feature = "pyo3")]
    {
        t.pass("tests/ui/pass-pyo3/*.rs");
        t.compile_fail("tests/ui/fail-pyo3/*.rs");
    }
    // 0.3-style code that cannot compile against 0.4: each error names its fix (the
    // migration guide, docs/migrating-from-0.3.md; what does compile is `tests/migration_0_3.rs`).
    #[cfg(feature = "pyo3")]
    t.compile_fail("tests/ui/fail-migration/*.rs");
}
