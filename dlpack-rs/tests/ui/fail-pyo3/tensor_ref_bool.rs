// Soundness: a typed argument of `bool` would hand out `&[bool]` over memory a foreign side may
// still write (a byte other than 0 or 1 is undefined behaviour to read as `bool`).
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::pyo3_glue::{CContig, Dims, TensorView, ANY};

#[pyfunction]
#[pyo3(crate = "dlpack_rs::pyo3")]
fn any(mask: TensorView<'_, bool, Dims<ANY>, CContig>) -> bool {
    mask.iter().any(|&b| b)
}

fn main() {}
