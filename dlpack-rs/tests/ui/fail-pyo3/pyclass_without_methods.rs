// A `#[pyclass]` that derives `IntoDLPack` but asks for no protocol methods would have no
// `__dlpack__` in Python: refused at compile time, with the three ways out.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
