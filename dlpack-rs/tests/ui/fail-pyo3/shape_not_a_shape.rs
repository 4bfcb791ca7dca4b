// A shape constraint is a type: a number of dimensions (`Dims<2>`, `Dims<ANY>`) or fixed
// extents (`Dims<3, ANY, ANY, 3>`). An array of extents is not one, and says what to write instead.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::pyo3_glue::TensorView;

#[pyfunction]
#[pyo3(crate = "dlpack_rs::pyo3")]
fn peak(image: TensorView<'_, u8, [usize; 3]>) -> u8 {
    image.get(&[0, 0, 0]).copied().unwrap_or(0)
}

fn main() {}
