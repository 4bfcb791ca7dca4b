// `#[dlpack_rs::pymethods]` adds `__dlpack__` itself; a second one is refused where it is
// written.
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
    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }
}

fn main() {}
