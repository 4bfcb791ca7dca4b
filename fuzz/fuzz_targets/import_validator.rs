//! Fuzz target: the import validator (`ManagedTensor[Versioned]::from_raw`) over arbitrary
//! DLTensor metadata, checked against an independent model (see the harness). Run with
//! `cargo +nightly fuzz run import_validator`; copy any crash input into `fuzz/regressions/`,
//! where `dlpack-rs/tests/safe/fuzz_regressions.rs` replays it on stable.
#![no_main]

#[path = "../../dlpack-rs/tests/fuzz_harness/mod.rs"]
mod fuzz_harness;

libfuzzer_sys::fuzz_target!(|data: &[u8]| fuzz_harness::run(data));
