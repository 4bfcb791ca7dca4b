//! Importing through a producer type's C exchange table.

use pyo3::exceptions::{PyBufferError, PyRuntimeError, PySystemError};
use pyo3::prelude::*;

use crate::ffi::{DLDevice, DLManagedTensorVersioned, DLPackExchangeAPI, DLTensor};
use crate::pyo3_glue::runtime::errors::pending_error;
use crate::pyo3_glue::runtime::exchange_lookup::lookup;
use crate::pyo3_glue::runtime::requires_grad::refuse_what_dlpack_refuses;
use crate::safe::ManagedTensorVersioned;

/// Imports `obj` through its type's exchange table (`None` without one, or for a complex
/// tensor), and whether the negative bit was asked already.
pub(crate) fn import(
    obj: &Bound<'_, PyAny>,
) -> PyResult<(
    Option<(ManagedTensorVersioned, &'static DLPackExchangeAPI)>,
    bool,
)> {
    let Some((api, grad)) = lookup(obj) else {
        return Ok((None, false));
    };
    let py = obj.py();
    let checked = refuse_what_dlpack_refuses(obj, grad)?;
    let Some(from_py) = api.managed_tensor_from_py_object_no_sync else {
        return Ok((None, checked));
    };
    let mut out: *mut DLManagedTensorVersioned = core::ptr::null_mut();
    // SAFETY: as dlpack.h asks: attached, a live object of the table's type, a valid out pointer.
    let rc = unsafe { from_py(obj.as_ptr().cast(), &mut out) };
    if rc != 0 {
        return Err(table_error(py, "managed_tensor_from_py_object_no_sync"));
    }
    if out.is_null() {
        return Err(PySystemError::new_err(
            "__dlpack_c_exchange_api__: managed_tensor_from_py_object_no_sync returned NULL",
        ));
    }
    // SAFETY: on success, an owned valid tensor; `from_raw` checks its version, deletes on error.
    let tensor = unsafe { ManagedTensorVersioned::from_raw(out) }?;
    if tensor.dtype().code == crate::ffi::DLDataTypeCode::COMPLEX {
        // torch's table exports a conjugated complex tensor unresolved; its `__dlpack__` refuses.
        return Ok((None, checked));
    }
    Ok((Some((tensor, api)), checked))
}

/// [`pending_error`], a `RuntimeError` becoming `BufferError`.
fn table_error(py: Python<'_>, function: &str) -> PyErr {
    let err = pending_error(py, function);
    if err.is_instance_of::<PyRuntimeError>(py) {
        let message = err.value(py).to_string();
        let first_line = message.lines().next().unwrap_or_default();
        let buffer = PyBufferError::new_err(format!("cannot export this tensor: {first_line}"));
        buffer.set_cause(py, Some(err));
        return buffer;
    }
    err
}

/// A non-owning view of `obj`'s CPU tensor (`dltensor_from_py_object_no_sync`), for shared views.
pub(crate) fn borrowed_view(obj: &Bound<'_, PyAny>) -> PyResult<Lent> {
    let Some((api, grad)) = lookup(obj) else {
        return Ok(Lent::Nothing);
    };
    if crate::pyo3_glue::export::exchange_export::is_tensor_api(api) {
        return Ok(Lent::Ours);
    }
    let Some(dltensor) = api.dltensor_from_py_object_no_sync else {
        return Ok(Lent::Nothing);
    };
    let py = obj.py();
    refuse_what_dlpack_refuses(obj, grad)?;
    let mut out = core::mem::MaybeUninit::<DLTensor>::zeroed();
    // SAFETY: as dlpack.h asks: attached, a live object of the table's type, a valid out pointer.
    let rc = unsafe { dltensor(obj.as_ptr().cast(), out.as_mut_ptr()) };
    if rc != 0 {
        // A table may lend fewer tensors than it exports: the owned route decides and raises.
        drop(PyErr::take(py));
        return Ok(Lent::Nothing);
    }
    // SAFETY: on success the producer filled the struct (all-zero is valid for every field).
    let t = unsafe { out.assume_init() };
    if !t.device.device_type.is_host_viewable()
        || t.dtype.code == crate::ffi::DLDataTypeCode::COMPLEX
    {
        // Device memory and complex tensors (torch's conjugate bit): the owned route decides.
        return Ok(Lent::Nothing);
    }
    // SAFETY: the producer's DLTensor, whose shape and strides point at `ndim` integers owned by
    // `obj`, alive while we hold it (and unchanged: no Python code runs meanwhile).
    Ok(Lent::View(unsafe { crate::safe::Described::new(&t) }?))
}

/// What [`borrowed_view`] lends.
pub(crate) enum Lent {
    /// Nothing: take the owned route.
    Nothing,
    /// The object's type publishes `dlpack_rs.Tensor`'s own table: view its tensor in place.
    Ours,
    /// A validated copy of the producer's non-owning `DLTensor`.
    View(crate::safe::Described),
}

/// The producer's `current_work_stream` on `device` (`None`: the table has none).
pub(crate) fn current_stream(
    py: Python<'_>,
    api: &'static DLPackExchangeAPI,
    device: DLDevice,
) -> PyResult<Option<*mut core::ffi::c_void>> {
    let Some(current) = api.current_work_stream else {
        return Ok(None);
    };
    let mut stream: *mut core::ffi::c_void = core::ptr::null_mut();
    // SAFETY: the producer's static table, called as dlpack.h asks: attached, a valid out pointer.
    let rc = unsafe { current(device.device_type, device.device_id, &mut stream) };
    if rc != 0 {
        return Err(pending_error(py, "current_work_stream"));
    }
    Ok(Some(stream))
}
