// A `#[dlpack_rs::pymethods]` block that `cfg` compiles out leaves the class without
// `__dlpack__`: the missing-methods check still fires (the block's marker is compiled out too).
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

#[dlpack_rs::pymethods]
#[cfg(any())]
impl Image {
    fn len(&self) -> usize {
        self.pixels.len()
    }
}

fn main() {}
