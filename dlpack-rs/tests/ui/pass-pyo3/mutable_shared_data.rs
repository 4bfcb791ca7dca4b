// A mutable class whose data is held by shared ownership: each export holds its own clone, so
// `&mut self` methods may replace the data at any time.
use std::sync::Arc;

use dlpack_rs::pyo3::prelude::*;
use dlpack_rs::safe::AlignedBuffer;
use dlpack_rs::IntoDLPack;

#[pyclass(crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
struct Frame {
    #[dlpack(data)]
    pixels: Arc<[f32]>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

#[dlpack_rs::pymethods]
impl Frame {
    #[new]
    fn new(h: usize, w: usize) -> Self {
        Frame { pixels: vec![0.0; h * w].into(), shape: [h, w] }
    }

    fn fill(&mut self, value: f32) {
        self.pixels = vec![value; self.pixels.len()].into();
    }
}

#[pyclass(crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Aligned {
    #[dlpack(data)]
    data: Arc<AlignedBuffer<f32>>,
}

#[pyclass(crate = "dlpack_rs::pyo3")]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct Array {
    #[dlpack(data)]
    data: ndarray::ArcArray1<f64>,
}

fn main() {}
