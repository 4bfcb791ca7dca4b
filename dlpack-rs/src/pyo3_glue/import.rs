//! Import: [`PyTensor`] takes a tensor from any Python object with `__dlpack__` (or a raw
//! capsule), negotiating the DLPack version, and owns it until dropped.

use std::mem::ManuallyDrop;

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyTuple};
use pyo3::Borrowed;

use super::capsule::{consume_capsule, Consumed};
use crate::ffi::{DLDataTypeCode, DLDevice, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
use crate::safe::{Element, Error, ManagedTensor, ManagedTensorVersioned, TensorView};

/// A tensor imported from Python: owns the producer's managed tensor (legacy or versioned)
/// and calls its deleter exactly once when dropped.
///
/// The producer's deleter is called on the thread that drops the `PyTensor`, with or without
/// the GIL; DLPack requires producers' deleters to cope with both (numpy, torch, jax and
/// pyarrow do).
///
/// ```
/// use dlpack_rs::pyo3_glue::PyTensor;
/// use pyo3::prelude::*;
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     // Any object with `__dlpack__` works: numpy arrays, torch tensors, jax arrays, ...
///     // Here, one of ours.
///     let t = dlpack_rs::safe::Export::new(vec![1i32, 2, 3, 4, 5, 6]).shape(&[2, 3]).versioned()?;
///     let obj = Bound::new(py, dlpack_rs::pyo3_glue::DLPackTensor::from(t))?.into_any();
///
///     let tensor = PyTensor::from_pyany(py, &obj)?;
///     assert_eq!(tensor.shape(), &[2, 3]);
///     assert_eq!(tensor.nbytes(), 24);
///     assert_eq!(tensor.as_slice::<i32>()?, &[1, 2, 3, 4, 5, 6]);
///     Ok(())
/// })
/// .unwrap();
/// ```
///
/// **Dropping.** The producer's deleter runs exactly once, on whatever thread drops the
/// `PyTensor`. Producers' deleters (numpy's, torch's) take the GIL themselves, which a thread
/// cannot do safely once the interpreter is shutting down; so a `PyTensor` dropped on a thread
/// without the GIL after `atexit` began leaks its tensor instead (the process is exiting).
#[derive(Debug)]
pub struct PyTensor {
    inner: ManuallyDrop<Consumed>,
}

impl Drop for PyTensor {
    fn drop(&mut self) {
        if super::capsule::exiting_without_gil() {
            return; // leak: see the type's documentation
        }
        // SAFETY: `inner` is dropped only here, once; `into_inner` takes it out of a value
        // whose Drop never runs.
        unsafe { ManuallyDrop::drop(&mut self.inner) }
    }
}

/// Options for an import: the device the data should be on, whether to copy, the
/// consumer's stream. They are passed to the producer's `__dlpack__`.
///
/// ```
/// use dlpack_rs::pyo3_glue::{ImportOptions, PyTensor};
/// use dlpack_rs::safe::cpu_device;
/// use pyo3::prelude::*;
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     let t = dlpack_rs::safe::Export::new(vec![1.0f64, 2.0]).versioned()?;
///     let obj = Bound::new(py, dlpack_rs::pyo3_glue::DLPackTensor::from(t))?.into_any();
///     let copy = ImportOptions::new().device(cpu_device()).copy(true).import(&obj)?;
///     assert!(copy.is_copied());
///     Ok(())
/// })
/// .unwrap();
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImportOptions {
    device: Option<DLDevice>,
    copy: Option<bool>,
    stream: Option<i64>,
    no_exchange_api: bool,
}

impl ImportOptions {
    /// No options: the data where it is, copied only if the producer must.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for the data on `device` (`dl_device=`).
    pub fn device(mut self, device: DLDevice) -> Self {
        self.device = Some(device);
        self
    }

    /// `copy=True` (always copy) or `copy=False` (never copy).
    pub fn copy(mut self, copy: bool) -> Self {
        self.copy = Some(copy);
        self
    }

    /// The consumer's stream (`stream=`), for device memory.
    pub fn stream(mut self, stream: i64) -> Self {
        self.stream = Some(stream);
        self
    }

    /// Whether to use the producer's C exchange API (`type(obj).__dlpack_c_exchange_api__`,
    /// DLPack 1.3) when it has one (default `true`). `false` always calls `__dlpack__`.
    pub fn exchange_api(mut self, enabled: bool) -> Self {
        self.no_exchange_api = !enabled;
        self
    }

    /// Imports `obj` (an object with `__dlpack__`, or a DLPack capsule) with these options.
    ///
    /// When the type of `obj` publishes a C exchange API table (a `"dlpack_exchange_api"`
    /// capsule whose header, or one in its `prev_api` chain, has major version 1), no `copy`
    /// or `stream` was asked for, the table's `managed_tensor_from_py_object_no_sync` is
    /// called instead of `__dlpack__` (tables are cached per type). Its tensor is kept only
    /// if it is on the CPU (and on the requested device, if any): the call does no stream
    /// synchronisation, so device tensors are released and fetched again through
    /// `__dlpack__`, which does. Complex tensors also take `__dlpack__`: torch's table does not
    /// refuse a tensor with its conjugate bit set, as its `__dlpack__` does.
    ///
    /// Otherwise calls `obj.__dlpack__(max_version=(1, 3), ...)`; only if that raises `TypeError`
    /// (a producer older than DLPack 1.0), retries `obj.__dlpack__(stream=...)` without the
    /// newer keywords, then checks the device itself and makes the copy itself when
    /// `copy(true)` was asked for. A raw capsule is consumed as is.
    pub fn import(&self, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let py = obj.py();
        if let Ok(capsule) = obj.cast::<PyCapsule>() {
            return self.check(PyTensor::from_capsule(capsule)?);
        }
        if !self.no_exchange_api && self.copy.is_none() && self.stream.is_none() {
            if let Some(tensor) = super::exchange::import(obj)? {
                let device = tensor.view().device();
                // torch's table exports a complex tensor whose conjugate bit is set without
                // resolving it (its `__dlpack__` refuses such tensors with BufferError), which
                // would hand out unconjugated values: complex tensors take `__dlpack__`.
                let complex = tensor.view().dtype().code == DLDataTypeCode::COMPLEX;
                if super::exchange::is_cpu(device)
                    && self.device.is_none_or(|d| d == device)
                    && !complex
                {
                    return Ok(PyTensor::new(py, Consumed::Versioned(tensor)));
                }
            }
        }
        let method = obj.getattr(pyo3::intern!(py, "__dlpack__")).map_err(|_| {
            PyTypeError::new_err(format!(
                "expected an object with __dlpack__ or a DLPack capsule, got {}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        // Interned keys and a cached version tuple: the common call builds one small dict.
        static MAX_VERSION: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
        let stream_key = pyo3::intern!(py, "stream");
        let kwargs = PyDict::new(py);
        if let Some(stream) = self.stream {
            kwargs.set_item(stream_key, stream)?;
        }
        let max_version = MAX_VERSION.get_or_try_init(py, || {
            (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)
                .into_pyobject(py)
                .map(Bound::unbind)
        })?;
        kwargs.set_item(pyo3::intern!(py, "max_version"), max_version.bind(py))?;
        if let Some(device) = self.device {
            kwargs.set_item(
                pyo3::intern!(py, "dl_device"),
                (device.device_type.0, device.device_id),
            )?;
        }
        if let Some(copy) = self.copy {
            kwargs.set_item(pyo3::intern!(py, "copy"), copy)?;
        }
        let (result, legacy) = match method.call((), Some(&kwargs)) {
            Ok(result) => (result, false),
            Err(err) if err.is_instance_of::<PyTypeError>(py) => {
                // A producer older than DLPack 1.0: only `stream` is understood.
                let legacy_kwargs = PyDict::new(py);
                if let Some(stream) = self.stream {
                    legacy_kwargs.set_item(stream_key, stream)?;
                }
                (method.call((), Some(&legacy_kwargs))?, true)
            }
            Err(err) => return Err(err),
        };
        let capsule = result
            .cast::<PyCapsule>()
            .map_err(|_| PyTypeError::new_err("__dlpack__ did not return a capsule"))?;
        let tensor = self.check(PyTensor::from_capsule(capsule)?)?;
        if legacy && self.copy == Some(true) {
            // An older producer could not be asked for a copy: make it here.
            let copy = super::protocol::copy_view(tensor.view())?;
            return Ok(PyTensor::new(py, Consumed::Versioned(copy)));
        }
        Ok(tensor)
    }

    /// Enforces what an older producer (or a raw capsule) could not be asked for.
    fn check(&self, tensor: PyTensor) -> PyResult<PyTensor> {
        if let Some(device) = self.device {
            if tensor.device() != device {
                return Err(PyBufferError::new_err(format!(
                    "the producer exported to {:?}:{}, not the requested {:?}:{}",
                    tensor.device().device_type,
                    tensor.device().device_id,
                    device.device_type,
                    device.device_id
                )));
            }
        }
        Ok(tensor)
    }
}

impl PyTensor {
    /// Imports a tensor from any object with `__dlpack__` or from a DLPack capsule, with
    /// default options (see [`ImportOptions::import`]).
    pub fn from_pyany(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let _ = py;
        ImportOptions::new().import(obj)
    }

    /// Takes the tensor out of a `"dltensor"` or `"dltensor_versioned"` capsule, renaming it
    /// to its `used_` name first. A consumed capsule raises `ValueError`; an unsupported major
    /// version `BufferError` (after calling the producer's deleter).
    pub fn from_capsule(capsule: &Bound<'_, PyCapsule>) -> PyResult<Self> {
        consume_capsule(capsule).map(|inner| PyTensor::new(capsule.py(), inner))
    }

    /// A validated view of the metadata and data.
    pub fn view(&self) -> TensorView<'_> {
        self.inner.view()
    }

    /// Whether the producer sent a versioned (DLPack >= 1.0) tensor.
    pub fn is_versioned(&self) -> bool {
        matches!(*self.inner, Consumed::Versioned(_))
    }

    /// The owned legacy managed tensor, if the producer sent one.
    pub fn as_legacy(&self) -> Option<&ManagedTensor> {
        match &*self.inner {
            Consumed::Legacy(t) => Some(t),
            Consumed::Versioned(_) => None,
        }
    }

    /// The owned versioned managed tensor, if the producer sent one.
    pub fn as_versioned(&self) -> Option<&ManagedTensorVersioned> {
        match &*self.inner {
            Consumed::Versioned(t) => Some(t),
            Consumed::Legacy(_) => None,
        }
    }

    fn new(py: Python<'_>, inner: Consumed) -> Self {
        super::capsule::install_shutdown_hook(py);
        PyTensor {
            inner: ManuallyDrop::new(inner),
        }
    }

    /// The owned managed tensor, legacy or versioned.
    pub fn into_inner(self) -> Consumed {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped, so `inner` is taken out exactly once.
        unsafe { ManuallyDrop::take(&mut this.inner) }
    }

    crate::safe::view_accessors!();

    /// Whether the producer copied the data for this export (versioned tensors only).
    pub fn is_copied(&self) -> bool {
        self.view().is_copied()
    }
    /// The `DLPACK_FLAG_BITMASK_*` flags (0 for a legacy tensor).
    pub fn flags(&self) -> u64 {
        self.view().flags()
    }
    /// The elements as a mutable slice, when the data is host-accessible, C-contiguous, of
    /// `T`'s dtype and not read-only.
    pub fn as_mut_slice<T: Element>(&mut self) -> Result<&mut [T], Error> {
        match &mut *self.inner {
            Consumed::Legacy(t) => t.as_mut_slice(),
            Consumed::Versioned(t) => t.as_mut_slice(),
        }
    }
}

/// `PyTensor` as a `#[pyfunction]` argument: imports with default options.
impl<'a, 'py> FromPyObject<'a, 'py> for PyTensor {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        ImportOptions::new().import(&obj)
    }
}
