// A class that is not frozen could get a `&mut self` method (say, one that pushes to `pixels`)
// and reallocate the buffer while Python holds a view of it: refused at compile time.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
