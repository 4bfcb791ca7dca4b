// `#[dlpack_rs::pymethods]` in place of `#[pymethods]`: the class keeps its constructor and
// getters and gets the protocol, with no pyo3 feature.
use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::IntoDLPack;

#[pyclass(frozen, crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Image {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlpack_rs::pymethods]
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

    #[staticmethod]
    fn channels() -> usize {
        1
    }
}

fn main() {}
