//! The import-validator fuzz harness (`fuzz_harness`, also the cargo-fuzz target in `fuzz/`)
//! replayed on stable Rust: every input the fuzzer ever crashed on (kept here and in
//! `fuzz/regressions/`), then a bounded run of pseudo-random inputs.

mod fuzz_harness;

/// Inputs that once broke the validator, decoded by `fuzz_harness::decode` (see there):
/// `[mode, version, minor, flags, flag bits, ndim, ndim value, shape..., strides...,
/// byte_offset..., dtype, dtype index, lanes, device, device id]`.
const CRASHES: &[(&str, &[u8])] = &[
    // shape [2], strides [i64::MAX], u8: the last addressed element is i64::MAX, one past it
    // overflowed i64 (a panic in debug builds; in release the wrapped bound let a range
    // beyond isize::MAX through).
    (
        "stride i64::MAX",
        &[0, 0, 3, 0, 0, 0, 1, 0, 2, 160, 0, 0, 0, 0, 2, 0, 0, 1],
    ),
    // shape [2, 2^62], NULL strides, int1: numel - 1 == i64::MAX, the same overflow.
    (
        "numel 2^63, NULL strides",
        &[4, 0, 3, 0, 0, 0, 2, 0, 2, 100, 62, 0, 0, 0, 13, 0, 0, 1],
    ),
];

#[test]
fn kept_crash_inputs() {
    for (name, input) in CRASHES {
        eprintln!("replaying {name}");
        fuzz_harness::run(input);
    }
}

#[test]
fn corpus_files_from_the_fuzzer() {
    // Crash inputs cargo-fuzz found, copied into fuzz/regressions/ (one file per input).
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/regressions");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_file() {
            eprintln!("replaying {}", path.display());
            fuzz_harness::run(&std::fs::read(&path).unwrap());
        }
    }
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
