// A mutable pyclass could reallocate its buffer while Python holds a view of it.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

#[pymethods(crate = "dlpack_rs::pyo3")]
impl Image {
    fn push(&mut self, value: u8) {
        self.pixels.push(value);
    }
}

fn main() {}
