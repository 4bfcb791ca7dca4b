// A writable legacy import grants writes a legacy capsule cannot vouch for (jax exports its
// immutable arrays so): the option is `unsafe`, and safe code cannot turn it on.
use dlpack_rs::pyo3_glue::ImportOptions;

fn main() {
    let _ = ImportOptions::new().writable_legacy(true);
}
