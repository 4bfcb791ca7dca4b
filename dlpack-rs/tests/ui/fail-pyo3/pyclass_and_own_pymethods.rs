// `#[dlpack(pyclass)]` adds a `#[pymethods]` block; a class with its own block writes
// `#[dlpack_rs::pymethods]` on it instead (pyo3 allows one block per class).
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
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
