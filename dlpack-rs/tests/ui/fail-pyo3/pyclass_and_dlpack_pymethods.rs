// Both ways of adding the protocol methods at once: one error naming the choice.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

#[dlpack_rs::pymethods]
impl Image {
    fn len(&self) -> usize {
        self.pixels.len()
    }
}

fn main() {}
