//! Exports of memory that Rust code elsewhere can still read (a `&'static` slice in read-only
//! memory, the other clones of an `Arc`, a shared `ArcArray`, a derived plain struct over an
//! `Arc`), for `tests/python/test_soundness.py`: every such export holds a shared borrow of its
//! bytes, so a mutable view of an import of it (after torch re-exported it writable, ignoring
//! `READ_ONLY`) is refused.

use std::sync::Arc;

use dlpack_rs::pyo3_glue::DLPackTensor;
use dlpack_rs::safe::Export;
use dlpack_rs::IntoDLPack;
use ndarray::ArcArray1;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

/// Four floats in the program's read-only data: a write to them is a segmentation fault.
static STATIC_DATA: [f32; 4] = [1.0, 2.0, 3.0, 4.0];

/// A `dlpack_rs.Tensor` over `STATIC_DATA` (exported read-only).
#[pyfunction]
fn static_tensor() -> PyResult<DLPackTensor> {
    Ok(DLPackTensor::from_export(Export::new(&STATIC_DATA[..]))?)
}

/// `STATIC_DATA` as Rust reads it now.
#[pyfunction]
fn static_values() -> Vec<f32> {
    STATIC_DATA.to_vec()
}

/// A derived plain struct (no pyclass) over shared data: exported read-only.
#[derive(IntoDLPack)]
struct SharedPlain {
    #[dlpack(data)]
    data: Arc<[f32]>,
}

/// Data that Rust keeps reading while exports of it live: an `Arc<[f32]>` and an `ArcArray`.
#[pyclass(frozen)]
struct SharedData {
    data: Arc<[f32]>,
    array: ArcArray1<f32>,
}

#[pymethods]
impl SharedData {
    /// `n` floats `0, 1, 2, ...` in both.
    #[new]
    fn new(n: usize) -> Self {
        let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
        SharedData {
            data: values.clone().into(),
            array: ArcArray1::from(values),
        }
    }

    /// A `dlpack_rs.Tensor` of an `Export` of a clone of the `Arc`.
    fn tensor(&self) -> PyResult<DLPackTensor> {
        Ok(DLPackTensor::from_export(Export::new(self.data.clone()))?)
    }

    /// A `dlpack_rs.Tensor` of an `Export` of an `Arc<Arc<[f32]>>` (the `Arc<B>` buffer).
    fn nested_tensor(&self) -> PyResult<DLPackTensor> {
        Ok(DLPackTensor::from_export(Export::new(Arc::new(
            self.data.clone(),
        )))?)
    }

    /// A versioned capsule of a clone of the `ArcArray` (shared: read-only).
    fn array_capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        self.array.clone().into_capsule_versioned(py)
    }

    /// A versioned capsule of a derived plain struct holding a clone of the `Arc`.
    fn plain_capsule<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        SharedPlain {
            data: self.data.clone(),
        }
        .into_capsule_versioned(py)
    }

    /// The address of the `Arc`'s first element.
    fn data_ptr(&self) -> usize {
        self.data.as_ptr() as usize
    }

    /// The `Arc`'s values, as Rust reads them now.
    fn values(&self) -> Vec<f32> {
        self.data.to_vec()
    }

    /// The `ArcArray`'s values, as Rust reads them now.
    fn array_values(&self) -> Vec<f32> {
        self.array.to_vec()
    }
}

/// Adds these functions and classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SharedData>()?;
    m.add_function(wrap_pyfunction!(static_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(static_values, m)?)?;
    Ok(())
}
