//! The class shapes of the derive's reference, as Python classes for the interop suite
//! (`tests/python/test_class_shapes.py`): mutable classes whose data is held by shared
//! ownership (`Arc<[f32]>`, `ndarray::ArcArray2`), a frozen class over the library's
//! `AlignedBuffer` (zero-copy to jax), a frozen class over a `Vec` (which jax copies unless it
//! happens to be aligned), and a plain Rust struct (no pyclass) exported as a capsule. The frozen
//! class with its own methods is `derived::DerivedSignal`.

use std::sync::Arc;

use dlpack_rs::safe::AlignedBuffer;
use dlpack_rs::IntoDLPack;
use ndarray::{ArcArray2, Array2};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

use super::derived::DropCounter;

/// A mutable `rows x cols` float32 frame holding `0, 1, 2, ...`; its `&mut self` methods
/// replace or rewrite the pixels while consumers may hold exports of the old ones.
#[pyclass(module = "dlpack_testext")]
#[derive(IntoDLPack)]
struct MutableFrame {
    #[dlpack(data)]
    pixels: Arc<[f32]>,
    #[dlpack(shape)]
    shape: [usize; 2],
    _count: DropCounter,
}

#[dlpack_rs::pymethods]
impl MutableFrame {
    #[new]
    fn new(rows: usize, cols: usize) -> Self {
        MutableFrame {
            pixels: (0..rows * cols).map(|i| i as f32).collect(),
            shape: [rows, cols],
            _count: DropCounter::new(),
        }
    }

    /// Replaces the pixels by new ones, all `value`.
    fn fill(&mut self, value: f32) {
        self.pixels = vec![value; self.pixels.len()].into();
    }

    /// Multiplies every pixel by `k`: in place when no export holds the pixels (returns
    /// true), else into new pixels (copy on write, returns false).
    fn scale(&mut self, k: f32) -> bool {
        match Arc::get_mut(&mut self.pixels) {
            Some(pixels) => {
                pixels.iter_mut().for_each(|x| *x *= k);
                true
            }
            None => {
                self.pixels = self.pixels.iter().map(|x| x * k).collect();
                false
            }
        }
    }

    /// Reshapes to `rows x cols` (same number of pixels).
    fn reshape(&mut self, rows: usize, cols: usize) -> PyResult<()> {
        if rows * cols != self.pixels.len() {
            return Err(pyo3::exceptions::PyValueError::new_err(
                "wrong number of pixels",
            ));
        }
        self.shape = [rows, cols];
        Ok(())
    }

    #[getter]
    fn values(&self) -> Vec<f32> {
        self.pixels.to_vec()
    }

    #[getter]
    fn data_ptr(&self) -> usize {
        self.pixels.as_ptr() as usize
    }
}

/// A mutable float64 matrix in an `ArcArray2`: ndarray's copy on write keeps exports intact.
#[pyclass(module = "dlpack_testext")]
#[derive(IntoDLPack)]
struct MutableMatrix {
    #[dlpack(data)]
    data: ArcArray2<f64>,
    #[dlpack(shape)]
    shape: [usize; 2],
    _count: DropCounter,
}

#[dlpack_rs::pymethods]
impl MutableMatrix {
    #[new]
    fn new(rows: usize, cols: usize) -> Self {
        let data = Array2::from_shape_fn((rows, cols), |(i, j)| (i * cols + j) as f64);
        MutableMatrix {
            data: data.into_shared(),
            shape: [rows, cols],
            _count: DropCounter::new(),
        }
    }

    /// Adds `k` to every element (ndarray copies first if an export shares the data).
    fn add(&mut self, k: f64) {
        self.data.mapv_inplace(|x| x + k);
    }

    #[getter]
    fn values(&self) -> Vec<f64> {
        self.data.iter().copied().collect()
    }

    #[getter]
    fn data_ptr(&self) -> usize {
        self.data.as_ptr() as usize
    }
}

/// A frozen float32 vector in the library's 64-byte `AlignedBuffer`: jax shares it.
#[pyclass(frozen, module = "dlpack_testext")]
#[derive(IntoDLPack)]
#[dlpack(pyclass)]
struct AlignedVector {
    #[dlpack(data)]
    data: AlignedBuffer<f32>,
    _count: DropCounter,
}

/// An `AlignedVector` of `values`.
#[pyfunction]
fn aligned_vector(values: Vec<f32>) -> PyResult<AlignedVector> {
    Ok(AlignedVector {
        data: AlignedBuffer::from_slice(&values)?,
        _count: DropCounter::new(),
    })
}

/// The address of an `AlignedVector`'s first element.
#[pyfunction]
fn aligned_vector_ptr(v: PyRef<'_, AlignedVector>) -> usize {
    v.data.as_ptr() as usize
}

/// A plain Rust struct (no pyclass) with the derive, in a build where `pyo3` is on.
#[derive(IntoDLPack)]
struct Plain {
    #[dlpack(data)]
    data: Vec<i32>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

/// A `Plain` 2 x 3 tensor holding `0..6`, as a versioned capsule.
#[pyfunction]
fn plain_capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    Plain {
        data: (0..6).collect(),
        shape: [2, 3],
    }
    .into_capsule_versioned(py)
}

/// A `Plain` 2 x 3 float32 tensor (`0.5 * i`, 64-byte aligned) handed to Python as a
/// `dlpack_rs.Tensor`, so that numpy, torch and jax can take it; returns it with its address.
#[pyfunction]
fn plain_tensor() -> PyResult<(dlpack_rs::pyo3_glue::DLPackTensor, usize)> {
    let values: Vec<f32> = (0..6).map(|i| i as f32 * 0.5).collect();
    let plain = PlainF32 {
        data: AlignedBuffer::from_slice(&values)?,
        shape: [2, 3],
    };
    let ptr = plain.data.as_ptr() as usize;
    let tensor = plain.into_managed_tensor_versioned()?;
    Ok((dlpack_rs::pyo3_glue::DLPackTensor::new(tensor), ptr))
}

/// A plain float32 struct over the library's aligned buffer (no pyclass).
#[derive(IntoDLPack)]
struct PlainF32 {
    #[dlpack(data)]
    data: AlignedBuffer<f32>,
    #[dlpack(shape)]
    shape: [usize; 2],
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MutableFrame>()?;
    m.add_class::<MutableMatrix>()?;
    m.add_class::<AlignedVector>()?;
    m.add_function(wrap_pyfunction!(aligned_vector, m)?)?;
    m.add_function(wrap_pyfunction!(aligned_vector_ptr, m)?)?;
    m.add_function(wrap_pyfunction!(plain_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(plain_tensor, m)?)?;
    Ok(())
}
