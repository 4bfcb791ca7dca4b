//! `dlpack_testext`: the extension module the Python interop suite imports. It exports
//! tensors from Rust (the ready-made `dlpack_rs.Tensor` and an `IntoDLPack` class), imports
//! any DLPack object and reports what it sees, writes in place, and counts deleter calls.

mod cross;
#[cfg(feature = "cudarc")]
mod cuda;
mod derived;
mod exchange;
mod hardening;
mod heap;
mod images;
mod low_precision;
mod ndarray_funcs;
mod readers;
mod rust_numpy;
mod shapes;
mod shared_mut;
mod streams;
mod tensor_files;
mod typed_args;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use dlpack_rs::ffi::{DLDataType, DLDevice, DLDeviceType, DLPackVersion};
use dlpack_rs::pyo3_glue::{
    dtype_name, export_dlpack, export_dlpack_device, DLPackTensor, ImportOptions, IntoDLPack,
    PyTensor,
};
use dlpack_rs::safe::{self, TensorInfo};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyCapsule, PyDict};

static CREATED: AtomicUsize = AtomicUsize::new(0);
static DROPPED: AtomicUsize = AtomicUsize::new(0);

/// 64-byte aligned storage unit (XLA/JAX only import CPU memory zero-copy at this alignment).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Chunk([u8; 64]);

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

fn parse_dtype(name: &str) -> PyResult<DLDataType> {
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

/// A frozen `#[pyclass]` that is a DLPack producer through `IntoDLPack` + `export_dlpack`,
/// written by hand the way the derive macro generates it.
#[pyclass(frozen)]
struct RustTensor {
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
        export_dlpack(slf, stream, max_version, dl_device, copy)
    }

    fn __dlpack_device__(&self) -> (i32, i32) {
        export_dlpack_device(self)
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

/// A `PyTensor` argument that also takes a bare DLPack capsule: the suite hands over raw and
/// deliberately malformed capsules (ctypes mirrors of the DLPack structs, with hostile metadata
/// that the import must refuse) to check the consumer side directly.
pub(crate) struct Imported(pub(crate) PyTensor);

impl<'a, 'py> FromPyObject<'a, 'py> for Imported {
    type Error = PyErr;

    fn extract(obj: pyo3::Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        if let Ok(capsule) = obj.cast::<pyo3::types::PyCapsule>() {
            // SAFETY: the test suite vouches for its capsules: each one named "dltensor" /
            // "dltensor_versioned" holds the struct of that name (made by a real producer or
            // by `dlpack_ctypes`), whatever its metadata says.
            return unsafe { PyTensor::from_capsule(&capsule) }.map(Imported);
        }
        PyTensor::extract(obj).map(Imported)
    }
}

impl std::ops::Deref for Imported {
    type Target = PyTensor;
    fn deref(&self) -> &PyTensor {
        &self.0
    }
}

impl std::ops::DerefMut for Imported {
    fn deref_mut(&mut self) -> &mut PyTensor {
        &mut self.0
    }
}

fn describe<'py>(py: Python<'py>, t: &PyTensor) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let v = &**t;
    d.set_item("shape", v.shape().to_vec())?;
    d.set_item("strides", v.strides().into_owned())?;
    d.set_item("raw_strides", v.raw_strides().map(<[i64]>::to_vec))?;
    d.set_item("dtype", dtype_name(v.dtype()))?;
    d.set_item(
        "dtype_code",
        (v.dtype().code.0, v.dtype().bits, v.dtype().lanes),
    )?;
    d.set_item("device", (v.device().device_type.0, v.device().device_id))?;
    d.set_item("flags", v.flags())?;
    d.set_item("read_only", t.is_read_only())?;
    d.set_item("copied", t.is_copied())?;
    d.set_item("versioned", t.is_versioned())?;
    d.set_item(
        "version",
        t.as_versioned()
            .map(|m| (m.version().major, m.version().minor)),
    )?;
    d.set_item("data_ptr", v.data_ptr() as usize)?;
    d.set_item("byte_offset", v.byte_offset())?;
    d.set_item("nbytes", t.nbytes())?;
    d.set_item("numel", t.numel())?;
    d.set_item("ndim", t.ndim())?;
    d.set_item("contiguous", t.is_contiguous())?;
    Ok(d)
}

/// Imports `obj` (any DLPack producer or capsule) and reports what it describes.
#[pyfunction]
fn inspect<'py>(py: Python<'py>, obj: Imported) -> PyResult<Bound<'py, PyDict>> {
    describe(py, &obj)
}

/// As `inspect`, asking the producer for a device and/or a copy.
#[pyfunction]
#[pyo3(signature = (obj, *, dl_device=None, copy=None))]
fn inspect_with<'py>(
    obj: &Bound<'py, PyAny>,
    dl_device: Option<(i32, i32)>,
    copy: Option<bool>,
) -> PyResult<Bound<'py, PyDict>> {
    let mut opts = ImportOptions::new();
    if let Some((t, id)) = dl_device {
        opts = opts.device(DLDevice {
            device_type: DLDeviceType(t),
            device_id: id,
        });
    }
    if let Some(c) = copy {
        opts = opts.copy(c);
    }
    let t = opts.import(obj)?;
    let d = describe(obj.py(), &t)?;
    d.set_item("bytes", gather(&t)?)?;
    Ok(d)
}

/// The elements in logical C order, as bytes, read through the shape and strides.
fn gather(t: &PyTensor) -> PyResult<Vec<u8>> {
    let v = &**t;
    if !v.device().device_type.is_host_accessible() {
        return Err(PyValueError::new_err("not host-accessible"));
    }
    let bits = safe::element_bits(v.dtype()) as usize;
    if bits % 8 != 0 {
        return Err(PyValueError::new_err("sub-byte dtype"));
    }
    let esize = bits / 8;
    let numel = v.numel();
    let mut out = Vec::with_capacity(numel * esize);
    if numel == 0 {
        return Ok(out);
    }
    let shape = v.shape();
    let strides = v.strides();
    let base = v.data_ptr().cast::<u8>();
    let mut index = vec![0i64; shape.len()];
    for _ in 0..numel {
        let offset: i64 = index.iter().zip(strides.iter()).map(|(k, s)| k * s).sum();
        // SAFETY: the tensor was validated at import; `index` is inside `shape`, so this element
        // is one the producer described, host-accessible and alive while `t` is held.
        let elem = unsafe {
            std::slice::from_raw_parts(base.offset(offset as isize * esize as isize), esize)
        };
        out.extend_from_slice(elem);
        for axis in (0..shape.len()).rev() {
            index[axis] += 1;
            if index[axis] < shape[axis] {
                break;
            }
            index[axis] = 0;
        }
    }
    Ok(out)
}

/// Imports `obj` and returns its elements in logical C order as bytes.
#[pyfunction]
fn to_bytes<'py>(py: Python<'py>, obj: Imported) -> PyResult<Bound<'py, PyBytes>> {
    Ok(PyBytes::new(py, &gather(&obj)?))
}

macro_rules! by_dtype {
    ($t:expr, $name:expr, |$ty:ident| $body:expr) => {
        match $name.as_str() {
            "int8" => {
                type $ty = i8;
                $body
            }
            "int16" => {
                type $ty = i16;
                $body
            }
            "int32" => {
                type $ty = i32;
                $body
            }
            "int64" => {
                type $ty = i64;
                $body
            }
            "uint8" => {
                type $ty = u8;
                $body
            }
            "uint16" => {
                type $ty = u16;
                $body
            }
            "uint32" => {
                type $ty = u32;
                $body
            }
            "uint64" => {
                type $ty = u64;
                $body
            }
            "float32" => {
                type $ty = f32;
                $body
            }
            "float64" => {
                type $ty = f64;
                $body
            }
            other => Err(PyValueError::new_err(format!("unsupported dtype {other}"))),
        }
    };
}

/// Imports `obj` and adds 1 to every element in place, through `as_mut_slice`.
#[pyfunction]
fn add_one(mut obj: Imported) -> PyResult<()> {
    let name = dtype_name(obj.dtype());
    by_dtype!(obj, name, |T| {
        for x in obj.as_mut_slice::<T>()?.iter_mut() {
            *x += 1 as T;
        }
        Ok(())
    })
}

/// As `add_one`, importing with `ImportOptions::writable_legacy(true)`: a legacy capsule's
/// memory is then writable.
#[pyfunction]
fn add_one_legacy_writable(obj: &Bound<'_, PyAny>) -> PyResult<()> {
    let t = ImportOptions::new().writable_legacy(true).import(obj)?;
    add_one(Imported(t))
}

/// Imports `obj` through the safe route only (`PyTensor::from_pyany`), returning its shape.
#[pyfunction]
fn import_safely(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
    Ok(PyTensor::from_pyany(py, obj)?.shape().to_vec())
}

#[allow(clippy::unnecessary_cast)]
/// Imports `obj` and returns its elements as floats through `as_slice::<T>()`, where `T` is
/// named by `as_dtype` (a mismatch raises TypeError).
#[pyfunction]
fn as_slice_values(obj: Imported, as_dtype: String) -> PyResult<Vec<f64>> {
    by_dtype!(obj, as_dtype, |T| Ok(obj
        .as_slice::<T>()?
        .iter()
        .map(|&x| x as f64)
        .collect()))
}

/// Imports `obj` and hands it on as a `dlpack_rs.Tensor` (a foreign tensor re-exported).
#[pyfunction]
fn reexport(obj: Imported) -> DLPackTensor {
    DLPackTensor::from(obj.0)
}

/// An imported tensor held by Rust until `release()`.
#[pyclass(frozen)]
struct Held {
    tensor: Mutex<Option<PyTensor>>,
}

impl Held {
    fn with<R>(&self, f: impl FnOnce(&PyTensor) -> PyResult<R>) -> PyResult<R> {
        let guard = self.tensor.lock().unwrap();
        match guard.as_ref() {
            Some(t) => f(t),
            None => Err(PyRuntimeError::new_err("released")),
        }
    }
}

#[pymethods]
impl Held {
    fn to_bytes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        self.with(|t| Ok(PyBytes::new(py, &gather(t)?)))
    }

    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.with(|t| describe(py, t))
    }

    /// Drops the tensor here (the producer's deleter runs now, with the GIL).
    fn release(&self) {
        drop(self.tensor.lock().unwrap().take());
    }

    /// Drops the tensor on a new thread while this thread waits with the GIL released.
    fn release_on_thread(&self, py: Python<'_>) -> PyResult<()> {
        let t = self.tensor.lock().unwrap().take();
        py.detach(|| std::thread::spawn(move || drop(t)).join())
            .map_err(|_| PyRuntimeError::new_err("thread panicked"))
    }

    /// Drops the tensor on a new thread while this thread keeps holding the GIL for `seconds`
    /// (spinning in Rust, never releasing it). Returns `obj`'s reference count and the number of
    /// keepalives released after attaching, both read at the end of the spin, still holding the
    /// GIL: the dropping thread must have waited.
    fn release_on_thread_while_holding_gil(
        &self,
        obj: &Bound<'_, PyAny>,
        seconds: f64,
    ) -> (isize, usize) {
        let t = self.tensor.lock().unwrap().take();
        std::thread::spawn(move || drop(t));
        let end = std::time::Instant::now() + std::time::Duration::from_secs_f64(seconds);
        while std::time::Instant::now() < end {
            std::hint::spin_loop();
        }
        // SAFETY: `obj` is a live object and this thread is attached.
        let refs = unsafe { pyo3::ffi::Py_REFCNT(obj.as_ptr()) };
        (
            refs,
            dlpack_rs::pyo3_glue::keepalive_counts().after_attaching,
        )
    }

    /// Drops the tensor on a new thread without waiting: the deleter runs while this thread
    /// may still hold the GIL.
    fn release_on_detached_thread(&self) {
        let t = self.tensor.lock().unwrap().take();
        std::thread::spawn(move || drop(t));
    }

    /// Drops the tensor with the GIL released by a raw `PyEval_SaveThread` inside this pyo3
    /// call, as a foreign framework's deleter does (torch frees storage with the GIL released):
    /// pyo3's attach count says "attached", CPython's thread state says not.
    fn release_with_gil_released_raw(&self) {
        let t = self.tensor.lock().unwrap().take();
        // SAFETY: this thread is attached (a pyo3 call); it detaches, touches nothing of Python
        // itself while detached (the deleter chain must attach on its own), and re-attaches.
        unsafe {
            let state = pyo3::ffi::PyEval_SaveThread();
            drop(t);
            pyo3::ffi::PyEval_RestoreThread(state);
        }
    }
}

/// Imports `obj` and keeps it in a `Held`.
#[pyfunction]
fn hold(obj: Imported) -> Held {
    Held {
        tensor: Mutex::new(Some(obj.0)),
    }
}

#[pymodule(gil_used = false)]
fn dlpack_testext(m: &Bound<'_, PyModule>) -> PyResult<()> {
    dlpack_rs::pyo3_glue::register(m)?;
    m.add_class::<RustTensor>()?;
    m.add_class::<Held>()?;
    m.add_function(wrap_pyfunction!(make_tensor, m)?)?;
    m.add_function(wrap_pyfunction!(make_export_f64, m)?)?;
    m.add_function(wrap_pyfunction!(make_capsule, m)?)?;
    m.add_function(wrap_pyfunction!(make_capsule_with_version, m)?)?;
    m.add_function(wrap_pyfunction!(counters, m)?)?;
    m.add_function(wrap_pyfunction!(inspect, m)?)?;
    m.add_function(wrap_pyfunction!(inspect_with, m)?)?;
    m.add_function(wrap_pyfunction!(to_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(add_one, m)?)?;
    m.add_function(wrap_pyfunction!(add_one_legacy_writable, m)?)?;
    m.add_function(wrap_pyfunction!(import_safely, m)?)?;
    m.add_function(wrap_pyfunction!(as_slice_values, m)?)?;
    m.add_function(wrap_pyfunction!(reexport, m)?)?;
    m.add_function(wrap_pyfunction!(hold, m)?)?;
    derived::register_derived(m)?;
    shapes::register(m)?;
    heap::register(m)?;
    images::register(m)?;
    hardening::register(m)?;
    hardening::register_probes(m)?;
    hardening::register_views(m)?;
    hardening::register_typed(m)?;
    ndarray_funcs::register(m)?;
    low_precision::register(m)?;
    exchange::register(m)?;
    streams::register(m)?;
    tensor_files::register(m)?;
    readers::register(m)?;
    shared_mut::register(m)?;
    rust_numpy::register(m)?;
    typed_args::register(m)?;
    cross::register(m)?;
    #[cfg(feature = "cudarc")]
    cuda::register(m)?;
    Ok(())
}
