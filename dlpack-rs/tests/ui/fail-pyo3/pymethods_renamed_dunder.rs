// A method renamed to `__dlpack__` in Python (`#[pyo3(name = ...)]`) would be replaced by the
// protocol method the attribute adds: refused where it is written.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

#[dlpack_rs::pymethods]
impl Image {
    #[pyo3(name = "__dlpack__")]
    fn export(&self) -> usize {
        self.pixels.len()
    }
}

fn main() {}
