//! Import: [`PyTensor`] and [`ImportOptions`].

pub(in crate::pyo3_glue) mod any_of;
pub(in crate::pyo3_glue) mod constraints;
pub(in crate::pyo3_glue) mod exchange_import;
pub(in crate::pyo3_glue) mod source;
pub(in crate::pyo3_glue) mod typed;

use core::ops::{Deref, DerefMut};

use pyo3::exceptions::{PyBufferError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyCapsule, PyDict, PyTuple};
use pyo3::Borrowed;

use crate::ffi::{DLDevice, DLPackExchangeAPI, DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION};
use crate::safe::AnyManaged;

/// An owned tensor imported from Python: its drop calls the producer's deleter (or leaks at exit).
/// It derefs to [`AnyManaged`](crate::safe::Managed); a legacy import is read-only unless
/// [`ImportOptions::writable_legacy`].
///
/// ```
/// use dlpack_rs::pyo3_glue::{DLPackTensor, PyTensor};
/// use pyo3::prelude::*;
///
/// Python::initialize();
/// Python::attach(|py| -> PyResult<()> {
///     let t = dlpack_rs::safe::Export::new(vec![1i32, 2, 3, 4, 5, 6]).shape(&[2, 3]).versioned()?;
///     let obj = Bound::new(py, DLPackTensor::new(t))?.into_any();
///     let tensor = PyTensor::from_pyany(py, &obj)?;
///     assert_eq!(tensor.shape(), &[2, 3]);
///     assert_eq!(tensor.nbytes(), 24);
///     assert_eq!(tensor.as_slice::<i32>()?, &[1, 2, 3, 4, 5, 6]);
///     Ok(())
/// })
/// .unwrap();
/// ```
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

/// Options for an import (device, copy, stream), passed to the producer's `__dlpack__`.
///
/// ```
/// use dlpack_rs::pyo3_glue::{ImportOptions, PyTensor};
/// use dlpack_rs::safe::cpu_device;
/// use pyo3::prelude::*;
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

    /// Asks the producer to always copy (`copy=True`) or never copy (`copy=False`).
    pub fn copy(mut self, copy: bool) -> Self {
        self.copy = Some(copy);
        self
    }

    /// The consumer's stream (`stream=`), for device memory.
    pub fn stream(mut self, stream: i64) -> Self {
        self.stream = Some(stream);
        self
    }

    /// Whether to use a type's C exchange table and a numpy array's struct (default `true`).
    pub fn exchange_api(mut self, enabled: bool) -> Self {
        self.no_exchange_api = !enabled;
        self
    }

    /// Whether a device tensor may come through the exchange table unsynchronised (default
    /// `false`); the caller then orders its work after [`PyTensor::producer_stream`].
    pub fn unsynchronized(mut self, enabled: bool) -> Self {
        self.unsynchronized = enabled;
        self
    }

    /// Whether a legacy (unversioned) tensor may be written (default `false`: a legacy capsule
    /// cannot say "read-only", and jax exports immutable data that way).
    /// # Safety
    /// With `true`, every object these options import as a legacy capsule must hold memory its
    /// producer lets consumers write (an older torch, a `WRITEABLE` numpy array; never a jax one).
    pub unsafe fn writable_legacy(mut self, writable: bool) -> Self {
        self.writable_legacy = writable;
        self
    }

    /// Imports `obj` (an object with `__dlpack__`, trusted) with these options, as the
    /// [import guide](https://github.com/kornia/dlpack-rs/blob/main/docs/import.md#what-an-import-asks-and-what-it-skips)
    /// says; a bare capsule raises `TypeError` ([`PyTensor::from_capsule`]).
    pub fn import(&self, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let (mut tensor, table) = self.import_unchecked_by_numpy(obj)?;
        if self.copy != Some(true) {
            match table {
                // Our own tensor wrapping a numpy import: same memory, same rust-numpy borrows.
                Some(api) if crate::pyo3_glue::export::exchange_export::is_tensor_api(api) => {
                    crate::pyo3_glue::numpy::borrow::inherit(obj, &mut tensor.0)
                }
                Some(_) => {}
                None => {
                    // A numpy array takes rust-numpy's borrows; else it may be one of our tensors.
                    if !crate::pyo3_glue::numpy::borrow::coordinate(obj, &mut tensor.0)? {
                        crate::pyo3_glue::numpy::borrow::inherit(obj, &mut tensor.0);
                    }
                }
            }
        }
        Ok(tensor)
    }

    /// [`ImportOptions::import`] before rust-numpy's borrows, with the table used, if any.
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
            if let Some(tensor) = crate::pyo3_glue::numpy::direct::import(obj)? {
                return Ok((PyTensor::new(obj.py(), tensor.into_any(), false)?, None));
            }
        }
        let mut checked = false;
        if !self.no_exchange_api
            && self.copy.is_none()
            && (self.stream.is_none() || self.unsynchronized)
        {
            match self.via_exchange_table(obj)? {
                Ok(imported) => return Ok(imported),
                Err(refused) => checked = refused,
            }
        }
        // torch's `__dlpack__` exports a negated view un-negated (refused once).
        if !checked {
            crate::pyo3_glue::runtime::requires_grad::refuse_negative_view(obj)?;
        }
        #[cfg(not(feature = "abi3"))]
        if self.stream.is_none() && self.device.is_none() && self.copy.is_none() {
            return self.via_common_call(obj).map(|t| (t, None));
        }
        self.via_keywords(obj).map(|t| (t, None))
    }

    /// The import through the type's table (`Err(true)`: refused, negative bit asked).
    #[inline]
    fn via_exchange_table(
        &self,
        obj: &Bound<'_, PyAny>,
    ) -> PyResult<Result<(PyTensor, Option<&'static DLPackExchangeAPI>), bool>> {
        let py = obj.py();
        let (imported, checked) = crate::pyo3_glue::import::exchange_import::import(obj)?;
        let Some((tensor, api)) = imported else {
            return Ok(Err(checked));
        };
        let device = tensor.device();
        if self.device.is_some_and(|d| d != device) {
            return Ok(Err(checked));
        }
        let mut stream = None;
        // Kept unsynchronised only if asked, for memory the CPU cannot reach, with a known stream.
        if !device.device_type.is_host_viewable() {
            if !self.unsynchronized || device.device_type.is_host_accessible() {
                return Ok(Err(checked));
            }
            match crate::pyo3_glue::import::exchange_import::current_stream(py, api, device)? {
                Some(current) => stream = Some(current as usize),
                None => return Ok(Err(checked)),
            }
        }
        let mut imported = PyTensor::new(py, tensor.into_any(), false)?;
        imported.1 = stream;
        Ok(Ok((imported, Some(api))))
    }

    /// `obj.__dlpack__(max_version=(1, 3))` as one vectorcall, retried bare on `TypeError`.
    #[cfg(not(feature = "abi3"))]
    #[inline]
    fn via_common_call(&self, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let py = obj.py();
        static KWNAMES: PyOnceLock<Py<PyTuple>> = PyOnceLock::new();
        let kwnames = crate::pyo3_glue::runtime::once::get_or_try_init(&KWNAMES, py, || {
            PyTuple::new(py, [pyo3::intern!(py, "max_version")]).map(Bound::unbind)
        })?;
        let dlpack = pyo3::intern!(py, "__dlpack__");
        let call = crate::pyo3_glue::runtime::cpython::call_method_one_keyword;
        match call(obj, dlpack, kwnames.bind(py), max_version(py)?.as_any()) {
            Ok(result) => self.finish(py, result, false),
            Err(err) if err.is_instance_of::<PyTypeError>(py) => {
                self.finish(py, self.method(obj)?.call0()?, true)
            }
            // A missing method told apart, after the failed call.
            Err(err) if !obj.hasattr(dlpack).unwrap_or(false) => Err(no_dlpack(obj, err)),
            Err(err) => Err(err),
        }
    }

    /// `obj.__dlpack__(...)` with every option, retried with `stream` only on `TypeError`.
    fn via_keywords(&self, obj: &Bound<'_, PyAny>) -> PyResult<PyTensor> {
        let py = obj.py();
        let method = self.method(obj)?;
        // `stream` alone, the keywords a pre-1.0 producer takes.
        let stream_only = || -> PyResult<Bound<'_, PyDict>> {
            let kwargs = PyDict::new(py);
            if let Some(stream) = self.stream {
                kwargs.set_item(pyo3::intern!(py, "stream"), stream)?;
            }
            Ok(kwargs)
        };
        let kwargs = stream_only()?;
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
                (method.call((), Some(&stream_only()?))?, true)
            }
            Err(err) => return Err(err),
        };
        self.finish(py, result, legacy)
    }

    fn method<'py>(&self, obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        obj.getattr(pyo3::intern!(obj.py(), "__dlpack__"))
            .map_err(|err| no_dlpack(obj, err))
    }

    /// Takes the tensor out of `__dlpack__`'s result, checking what a legacy call could not ask.
    fn finish(&self, py: Python<'_>, result: Bound<'_, PyAny>, legacy: bool) -> PyResult<PyTensor> {
        let capsule = result
            .cast::<PyCapsule>()
            .map_err(|_| PyTypeError::new_err("__dlpack__ did not return a capsule"))?;
        // SAFETY: the producer's `__dlpack__` answer, trusted as `import`'s contract says.
        let consumed = unsafe { crate::pyo3_glue::runtime::capsule::consume_capsule(capsule) }?;
        let tensor = PyTensor::new(py, consumed, self.writable_legacy)?;
        if let Some(device) = self.device.filter(|&d| d != tensor.device()) {
            return Err(PyBufferError::new_err(format!(
                "the producer exported to {}, not the requested {device}",
                tensor.device()
            )));
        }
        if legacy && self.copy == Some(true) {
            let copy = tensor.copy()?;
            return PyTensor::new(py, copy.into_any(), false);
        }
        Ok(tensor)
    }
}

impl PyTensor {
    /// Imports `obj` with default options, as [`ImportOptions::import`] (`py` is unused).
    pub fn from_pyany(py: Python<'_>, obj: &Bound<'_, PyAny>) -> PyResult<Self> {
        let _ = py;
        ImportOptions::new().import(obj)
    }

    /// Takes the tensor from a `"dltensor"` or `"dltensor_versioned"` capsule (legacy: read-only).
    /// # Safety
    /// The capsule holds what its name says, from a producer keeping DLPack's contract (valid
    /// metadata, memory alive until the deleter runs), as a `__dlpack__` result does.
    pub unsafe fn from_capsule(capsule: &Bound<'_, PyCapsule>) -> PyResult<Self> {
        // SAFETY: forwarded from this function's contract.
        unsafe { crate::pyo3_glue::runtime::capsule::consume_capsule(capsule) }
            .and_then(|inner| PyTensor::new(capsule.py(), inner, false))
    }

    /// Wraps an import: joins the registry, applies `writable_legacy` and the shutdown guard.
    fn new(py: Python<'_>, mut inner: AnyManaged, writable_legacy: bool) -> PyResult<Self> {
        crate::pyo3_glue::runtime::shared_registry::join(py)?;
        crate::pyo3_glue::runtime::keepalive::install_shutdown_hook(py);
        inner.set_leak_guard(crate::pyo3_glue::runtime::keepalive::exiting_unattached);
        if !inner.is_versioned() && !writable_legacy {
            inner = inner.into_read_only();
        }
        Ok(PyTensor(inner, None))
    }

    /// The owned managed tensor (with its shutdown guard and read-only state).
    pub fn into_inner(self) -> AnyManaged {
        self.0
    }

    /// The producer's work stream of an [`ImportOptions::unsynchronized`] import.
    pub fn producer_stream(&self) -> Option<*mut core::ffi::c_void> {
        self.1.map(|s| s as *mut core::ffi::c_void)
    }
}

/// `PyTensor` as a `#[pyfunction]` argument: imports with default options.
impl<'a, 'py> FromPyObject<'a, 'py> for PyTensor {
    type Error = PyErr;

    #[cfg(feature = "inspect")]
    const INPUT_TYPE: pyo3::inspect::PyStaticExpr =
        crate::pyo3_glue::runtime::type_hints::SUPPORTS_DLPACK;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> Result<Self, Self::Error> {
        ImportOptions::new().import(&obj)
    }
}

fn no_dlpack(obj: &Bound<'_, PyAny>, cause: PyErr) -> PyErr {
    let err = PyTypeError::new_err(format!(
        "expected an object with __dlpack__ (a numpy array, torch tensor, jax array, ...), got {}",
        crate::pyo3_glue::export::protocol::type_name(obj)
    ));
    err.set_cause(obj.py(), Some(cause));
    err
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

/// Hands an import on, keeping its read-only flag and shutdown guard.
impl From<PyTensor> for crate::pyo3_glue::DLPackTensor {
    fn from(tensor: PyTensor) -> Self {
        Self::from_any(tensor.into_inner())
    }
}
