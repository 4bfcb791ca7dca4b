//! The Rust side that exports: `RustTensor`, a hand-written `IntoDLPack` class over 64-byte
//! aligned storage that counts its creation and its drop, and the functions that hand the suite
//! ready-made `dlpack_rs.Tensor`s and raw capsules made from it.

use std::sync::atomic::{AtomicUsize, Ordering};

use dlpack_rs::ffi::{DLDataType, DLDevice, DLDeviceType, DLPackVersion};
use dlpack_rs::pyo3_glue::{DLPackTensor, IntoDLPack};
use dlpack_rs::safe::{self, TensorInfo};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyCapsule;

static CREATED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicUsize = AtomicUsize::new(0);

/// 64-byte aligned storage unit (XLA/JAX only import CPU memory zero-copy at this alignment).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(crate) struct Chunk(pub(crate) [u8; 64]);

/// Bytes owned by Rust (64-byte aligned); counts its creation and its drop.
struct Storage(Vec<Chunk>);

impl Storage {
    fn new(data: &[u8]) -> Self {
        let mut words = vec![Chunk([0; 64]); data.len().div_ceil(64)];
        // SAFETY: `words` holds at least `data.len()` bytes; the two do not overlap.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), words.as_mut_ptr().cast(), data.len())
        };
        CREATED.fetch_add(1, Ordering::SeqCst);
        Storage(words)
    }

    fn ptr(&self) -> *mut std::ffi::c_void {
        self.0.as_ptr().cast_mut().cast()
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        DROPPED.fetch_add(1, Ordering::SeqCst);
    }
}

pub(crate) fn parse_dtype(name: &str) -> PyResult<DLDataType> {
    use dlpack_rs::ffi::DLDataTypeCode as C;
    let (code, bits) = match name {
        "bool" => (C::BOOL, 8),
        "int8" => (C::INT, 8),
        "int16" => (C::INT, 16),
        "int32" => (C::INT, 32),
        "int64" => (C::INT, 64),
        "uint8" => (C::UINT, 8),
        "uint16" => (C::UINT, 16),
        "uint32" => (C::UINT, 32),
        "uint64" => (C::UINT, 64),
        "float16" => (C::FLOAT, 16),
        "bfloat16" => (C::BFLOAT, 16),
        "float32" => (C::FLOAT, 32),
        "float64" => (C::FLOAT, 64),
        "complex64" => (C::COMPLEX, 64),
        "complex128" => (C::COMPLEX, 128),
        other => return Err(PyValueError::new_err(format!("unknown dtype {other}"))),
    };
    Ok(DLDataType {
        code,
        bits,
        lanes: 1,
    })
}

/// A frozen object as its own export's keepalive, as a derived frozen class's export keeps it:
/// its description, taken once (a frozen object's never changes).
struct Frozen {
    _object: dlpack_rs::pyo3_glue::PyKeepalive,
    info: TensorInfo,
    read_only: bool,
}

// SAFETY: `info`'s pointer is never dereferenced here; the object it points into is released
// through `PyKeepalive`, which may be dropped on any thread.
unsafe impl Send for Frozen {}

// SAFETY: the frozen object, kept alive by `_object`, owns the memory its own `IntoDLPack`
// describes (`info`, `read_only`) and never hands out `&mut`, so the memory stays in place.
unsafe impl IntoDLPack for Frozen {
    fn tensor_info(&self) -> TensorInfo {
        self.info.clone()
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }
}

/// `__dlpack__` of a frozen class by hand: `export_dlpack_value` with the object as keepalive.
pub(crate) fn export_frozen<'py, T>(
    slf: &Bound<'py, T>,
    stream: Option<Bound<'py, PyAny>>,
    max_version: Option<Bound<'py, PyAny>>,
    dl_device: Option<Bound<'py, PyAny>>,
    copy: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyCapsule>>
where
    T: IntoDLPack + pyo3::PyClass<Frozen = pyo3::pyclass::boolean_struct::True> + Sync,
{
    let value = Frozen {
        _object: dlpack_rs::pyo3_glue::PyKeepalive::new(slf.py(), slf.clone().into_any().unbind()),
        info: slf.get().tensor_info(),
        read_only: slf.get().is_read_only(),
    };
    dlpack_rs::pyo3_glue::export_dlpack_value(slf.py(), value, stream, max_version, dl_device, copy)
}

/// A frozen `#[pyclass]` that is a DLPack producer through `IntoDLPack` and a hand-written
/// `__dlpack__` (`export_frozen`).
#[pyclass(frozen)]
pub(crate) struct RustTensor {
    storage: Storage,
    dtype: DLDataType,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    read_only: bool,
    device: DLDevice,
}

// SAFETY: `storage` owns a heap buffer of the bytes given to `new_rust_tensor`, which never
// moves and is reached through its raw pointer; the Python tests describe only layouts that fit
// the bytes they pass (or memory on a device, which nothing reads).
unsafe impl IntoDLPack for RustTensor {
    fn tensor_info(&self) -> TensorInfo {
        TensorInfo {
            data: self.storage.ptr(),
            device: self.device,
            dtype: self.dtype,
            shape: self.shape.clone(),
            strides: self.strides.clone(),
            byte_offset: self.byte_offset,
        }
    }

    fn is_read_only(&self) -> bool {
        self.read_only
    }
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn new_rust_tensor(
    data: &[u8],
    dtype: &str,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    read_only: bool,
    device: (i32, i32),
) -> PyResult<RustTensor> {
    let t = RustTensor {
        storage: Storage::new(data),
        dtype: parse_dtype(dtype)?,
        shape,
        strides,
        byte_offset,
        read_only,
        device: DLDevice {
            device_type: DLDeviceType(device.0),
            device_id: device.1,
        },
    };
    t.tensor_info().numel()?;
    Ok(t)
}

#[pymethods]
impl RustTensor {
    #[new]
    #[pyo3(signature = (data, dtype, shape, *, strides=None, byte_offset=0, read_only=false, device=(1, 0)))]
    fn py_new(
        data: &[u8],
        dtype: &str,
        shape: Vec<i64>,
        strides: Option<Vec<i64>>,
        byte_offset: u64,
        read_only: bool,
        device: (i32, i32),
    ) -> PyResult<Self> {
        new_rust_tensor(data, dtype, shape, strides, byte_offset, read_only, device)
    }

    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__<'py>(
        slf: &Bound<'py, Self>,
        stream: Option<Bound<'py, PyAny>>,
        max_version: Option<Bound<'py, PyAny>>,
        dl_device: Option<Bound<'py, PyAny>>,
        copy: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyCapsule>> {
        export_frozen(slf, stream, max_version, dl_device, copy)
    }

    fn __dlpack_device__(&self) -> PyResult<(i32, i32)> {
        dlpack_rs::__private_derive_v0_4::export_dlpack_device(self)
    }

    /// Address of the first element.
    #[getter]
    fn data_ptr(&self) -> usize {
        self.storage.ptr() as usize + self.byte_offset as usize
    }
}

/// The ready-made `dlpack_rs.Tensor`, built from an `IntoDLPack` value moved into a managed
/// tensor (the value is the keepalive). `device` only labels the bytes (for tests of device
/// arguments, which never read them).
#[pyfunction]
#[pyo3(signature = (data, dtype, shape, *, strides=None, byte_offset=0, read_only=false, device=(1, 0)))]
#[allow(clippy::too_many_arguments)]
fn make_tensor(
    data: &[u8],
    dtype: &str,
    shape: Vec<i64>,
    strides: Option<Vec<i64>>,
    byte_offset: u64,
    read_only: bool,
    device: (i32, i32),
) -> PyResult<DLPackTensor> {
    let t = new_rust_tensor(data, dtype, shape, strides, byte_offset, read_only, device)?;
    Ok(DLPackTensor::new(t.into_managed_tensor_versioned()?))
}

/// `dlpack_rs.Tensor` from a safe `Export` of a `Vec<f64>` (values 0, 1, 2, ...).
#[pyfunction]
fn make_export_f64(shape: Vec<i64>) -> PyResult<DLPackTensor> {
    let n: i64 = shape.iter().product();
    let v: Vec<f64> = (0..n).map(|i| i as f64).collect();
    Ok(DLPackTensor::from_export(
        safe::Export::new(v).shape(&shape),
    )?)
}

/// A raw capsule from `IntoDLPack::into_capsule` / `into_capsule_versioned`.
#[pyfunction]
#[pyo3(signature = (data, dtype, shape, *, versioned, read_only=false))]
fn make_capsule<'py>(
    py: Python<'py>,
    data: &[u8],
    dtype: &str,
    shape: Vec<i64>,
    versioned: bool,
    read_only: bool,
) -> PyResult<Bound<'py, PyCapsule>> {
    let t = new_rust_tensor(data, dtype, shape, None, 0, read_only, (1, 0))?;
    if versioned {
        t.into_capsule_versioned(py)
    } else {
        t.into_capsule(py)
    }
}

/// A versioned capsule that claims DLPack version `major.minor` (no destructor: a consumer
/// must take it).
#[pyfunction]
fn make_capsule_with_version<'py>(
    py: Python<'py>,
    major: u32,
    minor: u32,
) -> PyResult<Bound<'py, PyCapsule>> {
    let t = new_rust_tensor(&[0; 8], "float64", vec![1], None, 0, false, (1, 0))?;
    let raw = t.into_managed_tensor_versioned()?.into_raw();
    // SAFETY: `raw` is our own live export; only its version field is changed.
    unsafe { (*raw).version = DLPackVersion { major, minor } };
    // SAFETY: `raw` is valid and non-NULL; without a destructor, an unconsumed capsule leaks.
    unsafe {
        PyCapsule::new_with_pointer_and_destructor(
            py,
            std::ptr::NonNull::new_unchecked(raw.cast()),
            dlpack_rs::ffi::DLPACK_VERSIONED_CAPSULE_NAME,
            None,
        )
    }
}

/// (created, dropped) counts of Rust storages: a storage is dropped by its export's deleter.
#[pyfunction]
fn counters() -> (usize, usize) {
    (
        CREATED.load(Ordering::SeqCst),
        DROPPED.load(Ordering::SeqCst),
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<RustTensor>()?;
    m.add_function(wrap_pyfunction!(make_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(make_export_f64, m)?)?;
    m.add_function(wrap_pyfunction!(make_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(make_capsule_with_version, m)?)?;
    m.add_function(wrap_pyfunction!(counters, m)?)?;
    Ok(())
}
