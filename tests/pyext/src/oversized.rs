//! Derived classes whose layout a Python caller chooses, so that it can describe more bytes
//! than the data field holds: every export route must refuse them with `BufferError`, never
//! with a panic.

use dlpack_rs::image::{ImageBuffer, Rgb};
use dlpack_rs::IntoDLPack;
use pyo3::prelude::*;

/// `Oversized(values, shape, strides=None, byte_offset=0)`: `f32` values under a layout the
/// constructor does not check.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
struct Oversized {
    #[dlpack(data)]
    values: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Option<Vec<i64>>,
    #[dlpack(byte_offset)]
    byte_offset: u64,
}

#[dlpack_rs::pymethods]
impl Oversized {
    #[new]
    #[pyo3(signature = (values, shape, strides=None, byte_offset=0))]
    fn new(values: Vec<f32>, shape: Vec<i64>, strides: Option<Vec<i64>>, byte_offset: u64) -> Self {
        Oversized {
            values,
            shape,
            strides,
            byte_offset,
        }
    }
}

/// `OversizedImage(width, height, shape)`: an RGB `ImageBuffer` described by `shape`.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
struct OversizedImage {
    #[dlpack(data)]
    pixels: ImageBuffer<Rgb<u8>, Vec<u8>>,
    #[dlpack(shape)]
    shape: Vec<i64>,
}

#[dlpack_rs::pymethods]
impl OversizedImage {
    #[new]
    fn new(width: u32, height: u32, shape: Vec<i64>) -> Self {
        OversizedImage {
            pixels: ImageBuffer::new(width, height),
            shape,
        }
    }
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Oversized>()?;
    m.add_class::<OversizedImage>()?;
    Ok(())
}
