//! The import-validator fuzz harness (`fuzz_harness`, also the cargo-fuzz target in `fuzz/`)
//! replayed on stable Rust: every input that ever broke the validator (kept in
//! `fuzz/regressions/`), then a bounded run of pseudo-random inputs.

use crate::fuzz_harness;

/// Every input that once broke the validator, kept as a file in `fuzz/regressions/` (see its
/// README for what each was). A missing folder or one without inputs fails: the regressions
/// must run, not be skipped.
#[test]
fn kept_regression_inputs() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    let entries = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fuzz/regressions/ is missing ({e}): the kept inputs must run"));
    let mut replayed = 0;
    for entry in entries {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "bin") {
            eprintln!("replaying {}", path.display());
            fuzz_harness::run(&std::fs::read(&path).unwrap());
            replayed += 1;
        }
    }
    // The two overflow cases found so far, at least.
    assert!(replayed >= 2, "only {replayed} inputs in fuzz/regressions/");
}

#[test]
fn pseudo_random_inputs() {
    // A fixed-seed xorshift: deterministic, and cheap enough for valgrind.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let iterations = if cfg!(debug_assertions) { 4000 } else { 20000 };
    for _ in 0..iterations {
        let len = (next() % 96) as usize;
        let input: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        fuzz_harness::run(&input);
    }
}
