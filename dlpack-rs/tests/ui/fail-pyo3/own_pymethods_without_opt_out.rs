// A class with its own `#[pymethods]` block needs `#[dlpack(no_pymethods)]` (or pyo3's
// `multiple-pymethods` feature): pyo3 reports the second block.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

#[pymethods(crate = "dlpack_rs::pyo3")]
impl Image {
    fn len(&self) -> usize {
        self.pixels.len()
    }
}

fn main() {}
