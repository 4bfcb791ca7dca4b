//! `dlpack_twin`: a second extension module, with its own copy of dlpack-rs, carrying the same
//! cross-module functions as the test extension (`tests/pyext/src/cross.rs`), so that every
//! scenario between two copies of the crate runs in both orders.

use pyo3::prelude::*;

#[path = "../../pyext/src/cross.rs"]
mod cross;

#[pymodule]
fn dlpack_twin(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<dlpack_rs::pyo3_glue::DLPackTensor>()?;
    cross::register(m)
}
