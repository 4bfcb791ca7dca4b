// `Dims<N, A, B, C, D>` gives extents to its first dimensions only: an extent past the last
// dimension (here a third extent of a 2-dimensional shape) is a compile error, not ignored.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::pyo3_glue::{Dims, TensorView, ANY};

#[pyfunction]
#[pyo3(crate = "dlpack_rs::pyo3")]
fn peak(image: TensorView<'_, u8, Dims<2, ANY, ANY, 3>>) -> u8 {
    image.get(&[0, 0]).copied().unwrap_or(0)
}

fn main() {}
