// The protocol written by hand in one's own `#[pymethods]` block (`no_pymethods`: the derive
// adds none and does not ask for them): `export_dlpack_value` with a shared handle of the data.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::pyo3::types::PyCapsule;
use dlpack_rs::pyo3_glue::export_dlpack_value;
use dlpack_rs::safe::SharedMut;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(no_pymethods)]
struct Image {
    #[dlpack(data)]
    pixels: SharedMut<u8>,
}

#[pymethods(crate = "dlpack_rs::pyo3")]
impl Image {
    #[new]
    fn new(width: usize, height: usize) -> PyResult<Self> {
        Ok(Image {
            pixels: SharedMut::from_slice(&vec![0; width * height])?,
        })
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        &self,
        py: Python<'py>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        export_dlpack_value(py, self.pixels.clone(), stream, max_version, dl_device, copy)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }
}

fn main() {}
