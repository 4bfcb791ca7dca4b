// `#[dlpack_rs::pymethods]` replaces pyo3's `#[pymethods]`; both on one block is refused.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

#[dlpack_rs::pymethods]
#[pymethods(crate = "dlpack_rs::pyo3")]
impl Image {
    fn len(&self) -> usize {
        self.pixels.len()
    }
}

fn main() {}
