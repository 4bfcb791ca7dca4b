//! The safe layer from outside, one test binary: ownership, the borrow registry, layout bounds,
//! import validation, views and their byte ranges, round trips, the fuzz regressions. One
//! binary, not one per file: each links `dlpack_rs` once, which is what a change to the crate
//! costs (the mutants step rebuilds this binary for every mutant). No Python and no trybuild
//! here: the valgrind step runs this binary whole (it skips targets by their main file).

mod accessors;
mod borrow;
mod buffers;
mod counted;
mod export_readers;
#[path = "../fuzz_harness/mod.rs"]
mod fuzz_harness;
mod fuzz_regressions;
mod import_validation;
mod layout_bounds;
mod ndarray_views;
mod ownership;
mod roundtrip;
mod shared_mut;
mod view_ranges;
