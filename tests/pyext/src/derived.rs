//! Frozen `#[pyclass]`es made DLPack producers by `#[derive(IntoDLPack)]` alone, for the
//! Python interop suite (needs dlpack-rs feature `derive`). Each counts its drops, so the
//! suite can check that the consumer's deleter releases the Python object exactly once.

use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_rs::ffi::DLDataType;
use dlpack_rs::safe::dtype_f32;
use dlpack_rs::IntoDLPack;
use pyo3::prelude::*;

static DERIVED_DROPPED: AtomicUsize = AtomicUsize::new(0);

/// Counts drops of the derived classes.
struct DropCounter;

impl Drop for DropCounter {
    fn drop(&mut self) {
        DERIVED_DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

/// An 8-bit image of `height x width x channels`, with values `i % 256`.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
pub struct DerivedImage {
    #[dlpack(data)]
    pixels: Vec<u8>,
    #[dlpack(shape)]
    shape: [usize; 3],
    _count: DropCounter,
}

/// `DerivedImage(height, width, channels)`, built by a function: the class has no
/// `#[pymethods]` of its own, the derive's are its only ones.
#[pyfunction]
fn derived_image(height: usize, width: usize, channels: usize) -> DerivedImage {
    let n = height * width * channels;
    DerivedImage {
        pixels: (0..n).map(|i| (i % 256) as u8).collect(),
        shape: [height, width, channels],
        _count: DropCounter,
    }
}

/// A 1-D `f32` vector (no shape field) from a list.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
pub struct DerivedVector(#[dlpack(data)] Box<[f32]>, DropCounter);

/// A `DerivedVector` of `values`.
#[pyfunction]
fn derived_vector(values: Vec<f32>) -> DerivedVector {
    DerivedVector(values.into_boxed_slice(), DropCounter)
}

/// The transpose of a row-major `rows x cols` `f32` matrix holding `0, 1, 2, ...`: shape
/// `(cols, rows)`, strides `(1, cols)`, with the dtype given by a field.
#[pyclass(frozen)]
#[derive(IntoDLPack)]
pub struct DerivedTransposed {
    #[dlpack(data)]
    data: Vec<f32>,
    #[dlpack(shape)]
    shape: Vec<i64>,
    #[dlpack(strides)]
    strides: Vec<i64>,
    #[dlpack(dtype)]
    dtype: DLDataType,
    _count: DropCounter,
}

/// A `DerivedTransposed` of a `rows x cols` matrix.
#[pyfunction]
fn derived_transposed(rows: i64, cols: i64) -> DerivedTransposed {
    DerivedTransposed {
        data: (0..rows * cols).map(|i| i as f32).collect(),
        shape: vec![cols, rows],
        strides: vec![1, cols],
        dtype: dtype_f32(),
        _count: DropCounter,
    }
}

/// A read-only `i32` vector `0..n` (exported with `READ_ONLY`; legacy export is refused).
#[pyclass(frozen)]
#[derive(IntoDLPack)]
#[dlpack(read_only)]
pub struct DerivedReadOnly {
    #[dlpack(data)]
    data: Vec<i32>,
    _count: DropCounter,
}

/// A `DerivedReadOnly` holding `0..n`.
#[pyfunction]
fn derived_read_only(n: i32) -> DerivedReadOnly {
    DerivedReadOnly {
        data: (0..n).collect(),
        _count: DropCounter,
    }
}

/// How many derived objects have been dropped so far.
#[pyfunction]
fn derived_dropped() -> usize {
    DERIVED_DROPPED.load(Ordering::SeqCst)
}

/// Adds the derived classes and `derived_dropped()` to the module.
pub fn register_derived(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<DerivedImage>()?;
    m.add_class::<DerivedVector>()?;
    m.add_class::<DerivedTransposed>()?;
    m.add_class::<DerivedReadOnly>()?;
    m.add_function(wrap_pyfunction!(derived_image, m)?)?;
    m.add_function(wrap_pyfunction!(derived_vector, m)?)?;
    m.add_function(wrap_pyfunction!(derived_transposed, m)?)?;
    m.add_function(wrap_pyfunction!(derived_read_only, m)?)?;
    m.add_function(wrap_pyfunction!(derived_dropped, m)?)?;
    Ok(())
}
