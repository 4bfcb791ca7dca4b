// A mutable class owning a `Vec` could get a `&mut self` method (say, one that pushes to
// `pixels`) and reallocate the buffer while Python holds a view of it: refused at compile
// time, with both fixes named (a frozen class, or data held by shared ownership).
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
}

fn main() {}
