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

/// Four bytes in the program's read-only data, for `static_bytes_capsule`.
static STATIC_BYTES: [u8; 4] = [1, 2, 3, 4];

/// A versioned capsule of `STATIC_BYTES` made by `IntoDLPack::into_capsule_versioned` (a
/// derived plain struct over the `&'static` slice: read-only), with nothing else of this module
/// having touched Python's borrow registry before.
#[pyfunction]
fn static_bytes_capsule(py: Python<'_>) -> PyResult<Bound<'_, PyCapsule>> {
    StaticBytes {
        data: &STATIC_BYTES[..],
    }
    .into_capsule_versioned(py)
}

/// `STATIC_BYTES` as Rust reads it now.
#[pyfunction]
fn static_bytes_values() -> Vec<u8> {
    STATIC_BYTES.to_vec()
}

/// A derived plain struct over a `&'static` slice (read-only).
#[derive(IntoDLPack)]
struct StaticBytes {
    #[dlpack(data)]
    data: &'static [u8],
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

/// The data of a `BackedImage`: two kinds of backing, as kornia's `Image` keeps an enum.
#[derive(Clone)]
enum Backing {
    Host(Arc<[u8]>),
    Aligned(Arc<dlpack_rs::safe::AlignedBuffer<u8>>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Host(b) => b,
            Backing::Aligned(a) => a,
        }
    }
}

// SAFETY: both variants keep their bytes in an `Arc`'d allocation that no clone moves or frees
// while it lives, and that no owner writes while shared: exported read-only.
unsafe impl IntoDLPack for Backing {
    fn tensor_info(&self) -> dlpack_rs::safe::TensorInfo {
        let bytes = self.bytes();
        dlpack_rs::safe::TensorInfo::contiguous(
            bytes.as_ptr().cast_mut().cast(),
            dlpack_rs::safe::cpu_device(),
            dlpack_rs::safe::dtype_u8(),
            vec![bytes.len() as i64],
        )
    }

    fn is_read_only(&self) -> bool {
        true
    }
}

/// A mutable class with its own `__dlpack__` over a backing enum (the derive does not fit):
/// `export_dlpack_value` answers the protocol with a clone of the backing as the keepalive.
#[pyclass(module = "dlpack_testext")]
struct BackedImage {
    backing: Backing,
}

#[pymethods]
impl BackedImage {
    /// `n` bytes `0, 1, 2, ...`, in host memory or in the library's aligned buffer.
    #[new]
    #[pyo3(signature = (n, aligned=false))]
    fn new(n: usize, aligned: bool) -> Self {
        let values: Vec<u8> = (0..n).map(|i| i as u8).collect();
        let backing = if aligned {
            let mut buffer = dlpack_rs::safe::AlignedBuffer::<u8>::zeroed(n).expect("allocation");
            buffer.copy_from_slice(&values);
            Backing::Aligned(Arc::new(buffer))
        } else {
            Backing::Host(values.into())
        };
        BackedImage { backing }
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
        dlpack_rs::pyo3_glue::export_dlpack_value(
            py,
            self.backing.clone(),
            stream,
            max_version,
            dl_device,
            copy,
        )
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        (1, 0)
    }

    /// Replaces the bytes by zeros (exports keep the old ones).
    fn clear(&mut self) {
        self.backing = Backing::Host(vec![0u8; self.backing.bytes().len()].into());
    }

    /// The bytes, as Rust reads them now.
    fn values(&self) -> Vec<u8> {
        self.backing.bytes().to_vec()
    }

    /// The address of the first byte.
    #[getter]
    fn data_ptr(&self) -> usize {
        self.backing.bytes().as_ptr() as usize
    }
}

/// Adds these functions and classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<SharedData>()?;
    m.add_class::<BackedImage>()?;
    m.add_function(wrap_pyfunction!(static_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(static_values, m)?)?;
    m.add_function(wrap_pyfunction!(static_bytes_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(static_bytes_values, m)?)?;
    Ok(())
}
