// The protocol written by hand in one's own `#[pymethods]` block, delegating in one line each
// (`no_pymethods`: the derive adds none and does not ask for them).
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::pyo3::types::PyCapsule;
use dlpack_rs::pyo3_glue::{export_dlpack, export_dlpack_device};
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(no_pymethods)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[pymethods(crate = "dlpack_rs::pyo3")]
impl Image {
    #[new]
    fn new(width: i64, height: i64) -> Self {
        Image {
            pixels: vec![0; (width * height) as usize],
            shape: vec![height, width],
        }
    }

    #[getter]
    fn shape(&self) -> Vec<i64> {
        self.shape.clone()
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        export_dlpack(slf, stream, max_version, dl_device, copy)
    }

    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        export_dlpack_device(self)
    }
}

fn main() {}
