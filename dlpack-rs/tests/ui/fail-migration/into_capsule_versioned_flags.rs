// dlpack-rs 0.3 code: `into_capsule_versioned(py, flags)`. In 0.4 the flags come from
// `IntoDLPack::is_read_only`; the error says to drop the argument.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

fn export<T: IntoDLPack + Send + 'static>(py: Python<'_>, t: T) {
    let _ = t.into_capsule_versioned(py, 0u64);
}

fn main() {}
