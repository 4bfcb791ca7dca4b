//! Import: [`PyTensor`] takes a tensor from any Python object with `__dlpack__` (through its
//! type's C exchange table when it has one), negotiating the DLPack version, and owns it until
//! dropped; [`ImportOptions`] asks the producer for a device, a copy or a stream.

pub(in crate::pyo3_glue) mod any_of;
pub(in crate::pyo3_glue) mod constraints;
pub(in crate::pyo3_glue) mod exchange_import;
pub(in crate::pyo3_glue) mod exchange_lookup;
pub(in crate::pyo3_glue) mod negative;
pub(in crate::pyo3_glue) mod requires_grad;
pub(in crate::pyo3_glue) mod source;
#[cfg(feature = "inspect")]
pub(in crate::pyo3_glue) mod type_hints;
pub(in crate::pyo3_glue) mod typed;

use core::ops::{Deref, DerefMut};

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyTuple};
use pyo3::Borrowed;

use crate::ffi::{DLDevice, DLPackExchangeAPI, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
use crate::safe::AnyManaged;

/// A tensor imported from Python: owns the producer's managed tensor (legacy or versioned)
/// and calls its deleter exactly once when dropped. It derefs to the owner,
/// [`AnyManaged`](crate::safe::Managed): every accessor and view (`as_slice`, `as_mut_slice`,
/// `as_array`, ...) is the owner's, borrow-checked against every other view of the memory in
/// the process.
///
/// A legacy (unversioned) import is read-only unless [`ImportOptions::writable_legacy`] says
/// otherwise.
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
///     let obj = Bound::new(py, dlpack_rs::pyo3_glue::DLPackTensor::new(t))?.into_any();
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
/// cannot do safely once the interpreter is shutting down; so a `PyTensor` (or the owner
/// [`PyTensor::into_inner`] returns) dropped on a thread that is not attached after `atexit`
/// began leaks its tensor instead (the process is exiting).
#[derive(Debug)]
pub struct PyTensor(AnyManaged, Option<usize>);

impl Deref for PyTensor {
    type Target = AnyManaged;
    fn deref(&self) -> &AnyManaged {
        &self.0
    }
}

impl DerefMut for PyTensor {
    fn deref_mut(&mut self) -> &mut AnyManaged {
        &mut self.0
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
///     let obj = Bound::new(py, dlpack_rs::pyo3_glue::DLPackTensor::new(t))?.into_any();
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
    writable_legacy: bool,
    unsynchronized: bool,
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
    /// DLPack 1.3) when it has one, and to read a numpy array's own struct (default `true`).
    /// `false` always calls `__dlpack__`.
    pub fn exchange_api(mut self, enabled: bool) -> Self {
        self.no_exchange_api = !enabled;
        self
    }

    /// Whether a device tensor may come through the producer's exchange table without stream
    /// synchronisation (default `false`: device tensors take `__dlpack__`, which orders the
    /// producer's work before the consumer's stream). With `true`, a tensor on memory the CPU
    /// cannot address (CUDA, ROCm, ...; not pinned or managed memory, which the CPU can read)
    /// is kept when the table reports the producer's current work stream, which
    /// [`PyTensor::producer_stream`] hands on: the caller must order its device work after that
    /// stream (an event recorded on it, waited for on the caller's stream) before touching the
    /// data, and before handing the tensor on (a re-export does not carry the stream). With a
    /// [`ImportOptions::stream`] as well, the table is still used (the stream then only goes to
    /// a producer without one, through `__dlpack__(stream=...)`); without `unsynchronized`, a
    /// stream always takes `__dlpack__`. `dlpack_rs::cuda::import` (feature `cudarc`) does this
    /// ordering itself.
    pub fn unsynchronized(mut self, enabled: bool) -> Self {
        self.unsynchronized = enabled;
        self
    }

    /// Whether a legacy (unversioned) tensor may be written (default `false`). A legacy capsule
    /// cannot say "read-only", and producers export immutable data that way (jax arrays; numpy
    /// 2.x imports legacy capsules read-only for this reason), so by default a legacy import is
    /// read-only: `as_mut_slice` raises `BufferError` and a re-export carries `READ_ONLY`.
    ///
    /// # Safety
    ///
    /// With `true`, the caller promises that every object imported with these options whose
    /// producer answers with a legacy capsule hands out memory it lets consumers write (an
    /// older torch, a numpy array that is `WRITEABLE`). Never so for jax arrays, which are
    /// immutable: a write through the view would change an array jax shares and caches. A
    /// versioned producer says itself whether its memory is writable; prefer it.
    pub unsafe fn writable_legacy(mut self, writable: bool) -> Self {
        self.writable_legacy = writable;
        self
    }

    /// Imports `obj` (an object with `__dlpack__`) with these options.
    ///
    /// The producer is trusted as every DLPack consumer trusts it: what its `__dlpack__` (or
    /// its type's exchange table) hands over is believed to be a managed tensor that keeps the
    /// DLPack contract. A bare capsule is refused with `TypeError` (its name proves nothing):
    /// [`PyTensor::from_capsule`] takes one, `unsafe`ly.
    ///
    /// When the type of `obj` publishes a C exchange API table (a `"dlpack_exchange_api"`
    /// capsule whose header, or one in its `prev_api` chain, has major version 1), no `copy`
    /// was asked for and no `stream` (unless with `unsynchronized`), the table's
    /// `managed_tensor_from_py_object_no_sync` is called instead of `__dlpack__` (tables are
    /// cached per type). Its tensor is kept if it is on the requested device (if any) and on
    /// the CPU; a device tensor only with [`ImportOptions::unsynchronized`] (that call does no
    /// stream synchronisation, so the producer's stream is handed on in
    /// [`PyTensor::producer_stream`]). Any other device tensor is released and fetched again
    /// through `__dlpack__`, which synchronises. Complex tensors also take
    /// `__dlpack__`: torch's table does not refuse a tensor with its conjugate bit set, as its
    /// `__dlpack__` does.
    ///
    /// A numpy array (exactly `numpy.ndarray`, numpy >= 2.1) imported with no option is read
    /// from its own struct: the tensor is the one its `__dlpack__(max_version=(1, 3))` would
    /// hand over (the same data, shape, strides, dtype, `READ_ONLY` flag and device, the array
    /// held until the tensor drops), made without the call and its capsule. An array numpy would
    /// refuse or export otherwise (byte-swapped, an unlisted dtype, strides that are not whole
    /// elements, memory numpy says is on another device) takes `__dlpack__`, which raises what
    /// numpy raises.
    ///
    /// Otherwise calls `obj.__dlpack__(max_version=(1, 3), ...)`; only if that raises `TypeError`
    /// (a producer older than DLPack 1.0), retries `obj.__dlpack__(stream=...)` without the
    /// newer keywords, then checks the device itself and makes the copy itself when
    /// `copy(true)` was asked for.
    pub fn import(&self, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let (mut tensor, table) = self.import_unchecked_by_numpy(obj)?;
        if self.copy != Some(true) {
            match table {
                // One of our own tensors wrapping a numpy import: the same memory, the same
                // rust-numpy borrows.
                Some(api) if crate::pyo3_glue::export::tensor::is_tensor_api(api) => {
                    crate::pyo3_glue::numpy::borrow::inherit(obj, &mut tensor.0)
                }
                Some(_) => {}
                None => {
                    // The memory of a numpy array (which has no exchange table): its views take
                    // rust-numpy's borrows too; or one of our own tensors asked through
                    // `__dlpack__`.
                    if !crate::pyo3_glue::numpy::borrow::coordinate(obj, &mut tensor.0)? {
                        crate::pyo3_glue::numpy::borrow::inherit(obj, &mut tensor.0);
                    }
                }
            }
        }
        Ok(tensor)
    }

    /// [`ImportOptions::import`] before the borrows shared with rust-numpy are arranged, and
    /// whether the producer's C exchange table made the tensor: the table when it can answer,
    /// else the common `__dlpack__(max_version=(1, 3))` call, else the call with every keyword.
    fn import_unchecked_by_numpy(
        &self,
        obj: &Bound<'_, PyAny>,
    ) -> PyResult<(PyTensor, Option<&'static DLPackExchangeAPI>)> {
        if obj.cast::<PyCapsule>().is_ok() {
            return Err(PyTypeError::new_err(
                "expected an object with __dlpack__, got a bare DLPack capsule (a capsule's \
                 name is no proof of its contents: pass the producer, or take the capsule \
                 with the unsafe PyTensor::from_capsule)",
            ));
        }
        if !self.no_exchange_api
            && self.copy.is_none()
            && self.device.is_none()
            && self.stream.is_none()
        {
            // A numpy array: its struct read directly (the tensor its `__dlpack__` would give).
            if let Some(tensor) = crate::pyo3_glue::numpy::direct::import(obj)? {
                return Ok((PyTensor::new(obj.py(), tensor.into_any(), false)?, None));
            }
        }
        if !self.no_exchange_api
            && self.copy.is_none()
            && (self.stream.is_none() || self.unsynchronized)
        {
            if let Some(imported) = self.via_exchange_table(obj)? {
                return Ok(imported);
            }
        }
        // torch's `__dlpack__` exports a negated view un-negated, as its table does.
        crate::pyo3_glue::import::negative::refuse_negative_view(obj)?;
        #[cfg(not(feature = "abi3"))]
        if self.stream.is_none() && self.device.is_none() && self.copy.is_none() {
            return self.via_common_call(obj).map(|t| (t, None));
        }
        self.via_keywords(obj).map(|t| (t, None))
    }

    /// The import through the producer type's C exchange table, or `None` when it has none or
    /// its tensor cannot be kept (a device other than asked for, or device memory that only
    /// `__dlpack__` synchronises).
    #[inline]
    fn via_exchange_table(
        &self,
        obj: &Bound<'_, PyAny>,
    ) -> PyResult<Option<(PyTensor, Option<&'static DLPackExchangeAPI>)>> {
        let py = obj.py();
        let Some((tensor, api)) = crate::pyo3_glue::import::exchange_import::import(obj)? else {
            return Ok(None);
        };
        let device = tensor.device();
        if self.device.is_some_and(|d| d != device) {
            return Ok(None);
        }
        if device.device_type.is_host_viewable() {
            return Ok(Some((
                PyTensor::new(py, tensor.into_any(), false)?,
                Some(api),
            )));
        }
        // A device tensor, unsynchronised: kept only when asked for, for memory the CPU
        // cannot reach (no host view can race the producer's pending work), and when the
        // table says which stream that work is on. Otherwise it is released, and `__dlpack__`
        // synchronises.
        let keep = self.unsynchronized && !device.device_type.is_host_accessible();
        let stream = if keep {
            crate::pyo3_glue::import::exchange_import::current_stream(py, api, device)?
        } else {
            None
        };
        let Some(stream) = stream else {
            return Ok(None);
        };
        let mut imported = PyTensor::new(py, tensor.into_any(), false)?;
        imported.1 = Some(stream as usize);
        Ok(Some((imported, Some(api))))
    }

    /// The common call, `obj.__dlpack__(max_version=(1, 3))`, as one vectorcall (no bound
    /// method, no keyword dict), retried without the keyword for a producer older than DLPack
    /// 1.0.
    #[cfg(not(feature = "abi3"))]
    #[inline]
    fn via_common_call(&self, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let py = obj.py();
        match dlpack_call(obj, max_version(py)?) {
            Ok(result) => self.finish(py, result, false),
            Err(err) if err.is_instance_of::<PyTypeError>(py) => {
                // A producer older than DLPack 1.0: called again without the keyword.
                let method = self.method(obj)?;
                let result = method.call0()?;
                self.finish(py, result, true)
            }
            Err(err) if !has_dlpack(obj) => Err(no_dlpack(obj, err)),
            Err(err) => Err(err),
        }
    }

    /// `obj.__dlpack__(stream=..., max_version=(1, 3), dl_device=..., copy=...)` with the
    /// options given, retried with `stream` only for a producer older than DLPack 1.0.
    fn via_keywords(&self, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let py = obj.py();
        let method = self.method(obj)?;
        let stream_key = pyo3::intern!(py, "stream");
        let kwargs = PyDict::new(py);
        if let Some(stream) = self.stream {
            kwargs.set_item(stream_key, stream)?;
        }
        kwargs.set_item(pyo3::intern!(py, "max_version"), max_version(py)?)?;
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
        self.finish(py, result, legacy)
    }

    /// `obj.__dlpack__`, or the `TypeError` for an object without one.
    fn method<'py>(&self, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        obj.getattr(pyo3::intern!(obj.py(), "__dlpack__"))
            .map_err(|err| no_dlpack(obj, err))
    }

    /// Takes the tensor out of what `__dlpack__` returned (`legacy`: from the call without
    /// `max_version`), with the checks and the copy an older producer could not be asked for.
    fn finish(&self, py: Python<'_>, result: Bound<'_, PyAny>, legacy: bool) -> PyResult<PyTensor> {
        let capsule = result
            .cast::<PyCapsule>()
            .map_err(|_| PyTypeError::new_err("__dlpack__ did not return a capsule"))?;
        // SAFETY: the capsule is the producer's answer to `__dlpack__`: the producer is trusted
        // (this function's documented contract, as for every DLPack consumer).
        let consumed = unsafe { crate::pyo3_glue::runtime::capsule::consume_capsule(capsule) }?;
        let tensor = self.check(PyTensor::new(py, consumed, self.writable_legacy)?)?;
        if legacy && self.copy == Some(true) {
            // An older producer could not be asked for a copy: make it here.
            let copy = tensor.copy()?;
            return PyTensor::new(py, copy.into_any(), false);
        }
        Ok(tensor)
    }

    /// Enforces what an older producer (or a raw capsule) could not be asked for.
    fn check(&self, tensor: PyTensor) -> PyResult<PyTensor> {
        if let Some(device) = self.device {
            if tensor.device() != device {
                return Err(PyBufferError::new_err(format!(
                    "the producer exported to {}, not the requested {}",
                    tensor.device(),
                    device
                )));
            }
        }
        Ok(tensor)
    }
}

impl PyTensor {
    /// Imports a tensor from any object with `__dlpack__`, with default options (see
    /// [`ImportOptions::import`], which says what is trusted). The same as
    /// `ImportOptions::new().import(obj)`, the door for any other option.
    ///
    /// `py` is kept from the seed's signature (`from_pyany(py, &obj)`) and not needed: `obj`
    /// carries its own token.
    pub fn from_pyany(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let _ = py;
        ImportOptions::new().import(obj)
    }

    /// Takes the tensor out of a `"dltensor"` or `"dltensor_versioned"` capsule, renaming it
    /// to its `used_` name first. A consumed capsule raises `ValueError`; an unsupported major
    /// version `BufferError` (after calling the producer's deleter). A legacy tensor is
    /// read-only (see [`ImportOptions::writable_legacy`]).
    ///
    /// # Safety
    ///
    /// The capsule must be what its name says: a `"dltensor"` capsule holds a
    /// `DLManagedTensor`, a `"dltensor_versioned"` one a `DLManagedTensorVersioned`, made by a
    /// DLPack producer that keeps the protocol's contract (valid metadata, memory alive until
    /// the deleter runs). A capsule returned by a producer's `__dlpack__` is; one made by
    /// `PyCapsule::new_with_value` under that name is not.
    pub unsafe fn from_capsule(capsule: &Bound<'_, PyCapsule>) -> PyResult<Self> {
        // SAFETY: forwarded from this function's contract.
        unsafe { crate::pyo3_glue::runtime::capsule::consume_capsule(capsule) }
            .and_then(|inner| PyTensor::new(capsule.py(), inner, false))
    }

    /// Wraps an import: joins the process-wide borrow registry, makes a legacy tensor read-only
    /// unless `writable_legacy`, and makes the owner leak instead of running the producer's
    /// deleter on a thread that may not attach once the interpreter is going away.
    fn new(py: Python<'_>, mut inner: AnyManaged, writable_legacy: bool) -> PyResult<Self> {
        crate::pyo3_glue::runtime::shared_registry::join(py)?;
        crate::pyo3_glue::runtime::keepalive::install_shutdown_hook(py);
        inner.set_leak_guard(crate::pyo3_glue::runtime::keepalive::exiting_unattached);
        if !inner.is_versioned() && !writable_legacy {
            inner = inner.into_read_only();
        }
        Ok(PyTensor(inner, None))
    }

    /// The owned managed tensor, legacy or versioned (it keeps the shutdown guard and the
    /// read-only decision).
    pub fn into_inner(self) -> AnyManaged {
        self.0
    }

    /// For a device tensor imported through the producer's C exchange table (which does no
    /// stream synchronisation: `managed_tensor_from_py_object_no_sync`), the producer's current
    /// work stream on the tensor's device at the time of the import, as the table's
    /// `current_work_stream` gave it (a `cudaStream_t` / `hipStream_t`; NULL is the legacy
    /// default stream). The DLPack 1.3 rule: work that reads or writes the data must be
    /// ordered after that stream's pending work, for example by recording an event on it and
    /// making the consumer's stream wait for the event (or by running on that stream).
    ///
    /// `None` when nothing is left to synchronise: a CPU tensor, or an import through
    /// `__dlpack__`, where the producer already ordered its work before the stream the
    /// consumer passed ([`ImportOptions::stream`]; the default stream without one). Only an
    /// import with [`ImportOptions::unsynchronized`] can have one; [`PyTensor::into_inner`] and
    /// a re-export drop it, so order the work first.
    pub fn producer_stream(&self) -> Option<*mut core::ffi::c_void> {
        self.1.map(|s| s as *mut core::ffi::c_void)
    }
}

/// `PyTensor` as a `#[pyfunction]` argument: imports with default options.
impl<'a, 'py> FromPyObject<'a, 'py> for PyTensor {
    type Error = PyErr;

    #[cfg(feature = "inspect")]
    const INPUT_TYPE: pyo3::inspect::PyStaticExpr =
        crate::pyo3_glue::import::type_hints::SUPPORTS_DLPACK;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        ImportOptions::new().import(&obj)
    }
}

/// The `TypeError` for an object without `__dlpack__` (the attribute error as its cause).
fn no_dlpack(obj: &Bound<'_, PyAny>, cause: PyErr) -> PyErr {
    let err = PyTypeError::new_err(format!(
        "expected an object with __dlpack__ (a numpy array, torch tensor, jax array, ...), got {}",
        obj.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_default()
    ));
    err.set_cause(obj.py(), Some(cause));
    err
}

/// Whether `obj` has a `__dlpack__` attribute (only asked after a failed call, to tell a
/// missing method from an error raised inside it).
#[cfg(not(feature = "abi3"))]
fn has_dlpack(obj: &Bound<'_, PyAny>) -> bool {
    obj.hasattr(pyo3::intern!(obj.py(), "__dlpack__"))
        .unwrap_or(false)
}

/// `obj.__dlpack__(max_version=max_version)` as one vectorcall.
#[cfg(not(feature = "abi3"))]
fn dlpack_call<'py>(
    obj: &Bound<'py, PyAny>,
    max_version: &Bound<'py, PyTuple>,
) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    static KWNAMES: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
    let kwnames = crate::pyo3_glue::runtime::once::get_or_try_init(&KWNAMES, py, || {
        PyTuple::new(py, [pyo3::intern!(py, "max_version")]).map(Bound::unbind)
    })?;
    crate::pyo3_glue::runtime::cpython::call_method_one_keyword(
        obj,
        pyo3::intern!(py, "__dlpack__"),
        kwnames.bind(py),
        max_version.as_any(),
    )
}

/// `(1, 3)`, the `max_version` every import asks for, made once.
fn max_version(py: Python<'_>) -> PyResult<&Bound<'_, PyTuple>> {
    static MAX_VERSION: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
    crate::pyo3_glue::runtime::once::get_or_try_init(&MAX_VERSION, py, || {
        (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)
            .into_pyobject(py)
            .map(Bound::unbind)
    })
    .map(|v| v.bind(py))
}
